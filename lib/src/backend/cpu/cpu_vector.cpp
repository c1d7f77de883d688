// AVX-512 elementwise passes of the CPU backend (contract and why they match the scalar math
// bitwise: cpu_vector.h). Each loop handles 16 lanes at a time and the tail with masks.
#include "cpu_vector.h"

#include <type_traits>

#include "ampctl/core/half.h"
#include "cpu_simd.h"

#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ampctl::cpu::vec {
namespace {

using simd::head_mask;
using simd::load16;
using simd::store16;

// Calls f(T*) with the storage type of a float dtype.
template <typename F>
AMPCTL_SIMD_INLINE void with_type(DType d, F&& f) {
  switch (d) {
    case DType::f32:
      f(static_cast<float*>(nullptr));
      return;
    case DType::f16:
      f(static_cast<half*>(nullptr));
      return;
    case DType::bf16:
      f(static_cast<bfloat16*>(nullptr));
      return;
    case DType::i32:
      return;
  }
}

AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 neg(__m512 x) {
  // -x in C flips the sign bit (NaN payloads kept), as this does.
  return _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// ---- Adam ----

template <bool kScaled, bool kMaximize, int kDecay, bool kLerpLow, typename L>
AMPCTL_AVX512 void adam_loop(size_t begin, size_t end, float* p, const float* g, float* m, float* v,
                             float inv_scale, const optim::AdamStepConsts& c, L* lowp) {
  const __m512 inv = _mm512_set1_ps(inv_scale);
  const __m512 decay = _mm512_set1_ps(c.decay);
  const __m512 wd = _mm512_set1_ps(c.weight_decay);
  const __m512 w = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 one_minus_w = _mm512_set1_ps(1.0f - c.one_minus_beta1);
  const __m512 beta2 = _mm512_set1_ps(c.beta2);
  const __m512 omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 bc2 = _mm512_set1_ps(c.bias_correction2_sqrt);
  const __m512 eps = _mm512_set1_ps(c.eps);
  const __m512 nss = _mm512_set1_ps(c.neg_step_size);
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
    if constexpr (kScaled) gv = _mm512_mul_ps(gv, inv);
    if constexpr (kMaximize) gv = neg(gv);
    __m512 param = _mm512_maskz_loadu_ps(k, p + i);
    if constexpr (kDecay == 1) param = _mm512_mul_ps(param, decay);               // AdamW
    if constexpr (kDecay == 2) gv = _mm512_add_ps(gv, _mm512_mul_ps(wd, param));  // Adam + L2
    const __m512 mv = _mm512_maskz_loadu_ps(k, m + i);
    const __m512 vv = _mm512_maskz_loadu_ps(k, v + i);
    const __m512 diff = _mm512_sub_ps(gv, mv);
    const __m512 mm = kLerpLow ? _mm512_add_ps(mv, _mm512_mul_ps(w, diff))
                               : _mm512_sub_ps(gv, _mm512_mul_ps(diff, one_minus_w));
    const __m512 vn =
        _mm512_add_ps(_mm512_mul_ps(vv, beta2), _mm512_mul_ps(_mm512_mul_ps(omb2, gv), gv));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vn), bc2), eps);
    const __m512 pn = _mm512_add_ps(param, _mm512_div_ps(_mm512_mul_ps(nss, mm), denom));
    _mm512_mask_storeu_ps(m + i, k, mm);
    _mm512_mask_storeu_ps(v + i, k, vn);
    _mm512_mask_storeu_ps(p + i, k, pn);
    if (lowp) store16(lowp + i, pn, k);
  }
}

template <typename L>
AMPCTL_AVX512 void adam_typed(size_t begin, size_t end, float* p, const float* g, float* m,
                              float* v, float inv, bool decoupled, bool maximize,
                              const optim::AdamStepConsts& c, L* lowp) {
  // The per-call branches of adam_update, taken once: each combination is its own loop.
  const bool scaled = inv != 1.0f;
  const int decay = decoupled ? 1 : (c.weight_decay != 0.0f ? 2 : 0);
  const bool low = c.one_minus_beta1 < 0.5f;
  auto go = [&](auto s, auto mx, auto d, auto lo) {
    adam_loop<decltype(s)::value, decltype(mx)::value, decltype(d)::value, decltype(lo)::value>(
        begin, end, p, g, m, v, inv, c, lowp);
  };
  using T = std::true_type;
  using F = std::false_type;
  auto by_low = [&](auto s, auto mx, auto d) { low ? go(s, mx, d, T{}) : go(s, mx, d, F{}); };
  auto by_decay = [&](auto s, auto mx) {
    if (decay == 1) {
      by_low(s, mx, std::integral_constant<int, 1>{});
    } else if (decay == 2) {
      by_low(s, mx, std::integral_constant<int, 2>{});
    } else {
      by_low(s, mx, std::integral_constant<int, 0>{});
    }
  };
  auto by_max = [&](auto s) { maximize ? by_decay(s, T{}) : by_decay(s, F{}); };
  scaled ? by_max(T{}) : by_max(F{});
}

// ---- SGD ----

template <typename L>
AMPCTL_AVX512 void sgd_typed(size_t begin, size_t end, float* p, const float* g, float* buf,
                             float inv_scale, bool first, const optim::SgdHyper& h, L* lowp) {
  const __m512 inv = _mm512_set1_ps(inv_scale);
  const __m512 wd = _mm512_set1_ps(h.weight_decay);
  const __m512 mom = _mm512_set1_ps(h.momentum);
  const __m512 damp = _mm512_set1_ps(1.0f - h.dampening);
  const __m512 lr = _mm512_set1_ps(h.lr);
  const bool scaled = inv_scale != 1.0f;
  const bool momentum = h.momentum != 0.0f;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
    if (scaled) gv = _mm512_mul_ps(gv, inv);
    if (h.maximize) gv = neg(gv);
    const __m512 pv = _mm512_maskz_loadu_ps(k, p + i);
    if (h.weight_decay != 0.0f) gv = _mm512_add_ps(gv, _mm512_mul_ps(wd, pv));
    if (momentum) {
      const __m512 b = first ? gv
                             : _mm512_add_ps(_mm512_mul_ps(mom, _mm512_maskz_loadu_ps(k, buf + i)),
                                             _mm512_mul_ps(damp, gv));
      _mm512_mask_storeu_ps(buf + i, k, b);
      gv = h.nesterov ? _mm512_add_ps(gv, _mm512_mul_ps(mom, b)) : b;
    }
    const __m512 pn = _mm512_sub_ps(pv, _mm512_mul_ps(lr, gv));
    _mm512_mask_storeu_ps(p + i, k, pn);
    if (lowp) store16(lowp + i, pn, k);
  }
}

// ---- elementwise ----

template <typename D, typename S>
AMPCTL_AVX512 void add_typed(D* dst, const S* src, float alpha, size_t begin, size_t end) {
  const __m512 a = _mm512_set1_ps(alpha);
  const bool plain = alpha == 1.0f;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    const __m512 s = load16(src + i, k);
    const __m512 d = load16(dst + i, k);
    store16(dst + i, _mm512_add_ps(d, plain ? s : _mm512_mul_ps(a, s)), k);
  }
}

template <typename X, typename O>
AMPCTL_AVX512 void cast_typed(const X* x, O* out, size_t begin, size_t end) {
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    store16(out + i, load16(x + i, k), k);
  }
}

template <typename X, typename O>
AMPCTL_AVX512 void mul_typed(const X* x, O* out, float scale, size_t begin, size_t end) {
  const __m512 s = _mm512_set1_ps(scale);
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    store16(out + i, _mm512_mul_ps(load16(x + i, k), s), k);
  }
}

template <typename X, typename Y>
AMPCTL_AVX512 void relu_fwd_typed(const X* x, Y* y, size_t begin, size_t end) {
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    const __m512 v = load16(x + i, k);
    // x != x ? x : (x > 0 ? x : 0): keep x where it is NaN or > 0 ("not <=", unordered true).
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ);
    store16(y + i, _mm512_maskz_mov_ps(keep, v), k);
  }
}

template <typename Y, typename DY, typename DX>
AMPCTL_AVX512 void relu_bwd_typed(const Y* y, const DY* dy, DX* dx, size_t begin, size_t end) {
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    // y > 0 ? dy : 0 (ordered: a NaN y gives 0).
    const __mmask16 pos = _mm512_cmp_ps_mask(load16(y + i, k), _mm512_setzero_ps(), _CMP_GT_OQ);
    store16(dx + i, _mm512_maskz_mov_ps(pos, load16(dy + i, k)), k);
  }
}

template <typename X>
AMPCTL_AVX512 void sum_rows_typed(const X* x, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
                                  float* acc) {
  // Each lane is one column summed over the rows in order: the scalar loop's order exactly.
  // Four column vectors per row pass keep more additions in flight.
  int64_t c = c0;
  for (; c + 64 <= c1; c += 64) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t r = 0; r < rows; ++r) {
      const X* row = x + r * cols + c;
      s0 = _mm512_add_ps(s0, load16(row));
      s1 = _mm512_add_ps(s1, load16(row + 16));
      s2 = _mm512_add_ps(s2, load16(row + 32));
      s3 = _mm512_add_ps(s3, load16(row + 48));
    }
    _mm512_storeu_ps(acc + c, s0);
    _mm512_storeu_ps(acc + c + 16, s1);
    _mm512_storeu_ps(acc + c + 32, s2);
    _mm512_storeu_ps(acc + c + 48, s3);
  }
  for (; c < c1; c += 16) {
    const __mmask16 k = head_mask(static_cast<size_t>(c1 - c));
    __m512 s = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) s = _mm512_add_ps(s, load16(x + r * cols + c, k));
    _mm512_mask_storeu_ps(acc + c, k, s);
  }
}

}  // namespace

void adam(size_t begin, size_t end, float* p, const float* g, float* m, float* v, float inv_scale,
          bool decoupled, bool maximize, const optim::AdamStepConsts& c, void* lowp,
          DType lowp_dtype) {
  if (!lowp) {
    adam_typed<float>(begin, end, p, g, m, v, inv_scale, decoupled, maximize, c, nullptr);
    return;
  }
  with_type(lowp_dtype, [&](auto* tag) {
    using L = std::remove_pointer_t<decltype(tag)>;
    adam_typed(begin, end, p, g, m, v, inv_scale, decoupled, maximize, c, static_cast<L*>(lowp));
  });
}

void sgd(size_t begin, size_t end, float* p, const float* g, float* buf, float inv_scale,
         bool first, const optim::SgdHyper& h, void* lowp, DType lowp_dtype) {
  if (!lowp) {
    sgd_typed<float>(begin, end, p, g, buf, inv_scale, first, h, nullptr);
    return;
  }
  with_type(lowp_dtype, [&](auto* tag) {
    using L = std::remove_pointer_t<decltype(tag)>;
    sgd_typed(begin, end, p, g, buf, inv_scale, first, h, static_cast<L*>(lowp));
  });
}

void add(void* dst, DType dst_dtype, const void* src, DType src_dtype, float alpha, size_t begin,
         size_t end) {
  with_type(dst_dtype, [&](auto* dt) {
    using D = std::remove_pointer_t<decltype(dt)>;
    with_type(src_dtype, [&](auto* st) {
      using S = std::remove_pointer_t<decltype(st)>;
      add_typed(static_cast<D*>(dst), static_cast<const S*>(src), alpha, begin, end);
    });
  });
}

void cast(const void* x, DType x_dtype, void* out, DType out_dtype, size_t begin, size_t end) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(out_dtype, [&](auto* ot) {
      using O = std::remove_pointer_t<decltype(ot)>;
      cast_typed(static_cast<const X*>(x), static_cast<O*>(out), begin, end);
    });
  });
}

void mul_scalar(const void* x, DType x_dtype, void* out, DType out_dtype, float s, size_t begin,
                size_t end) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(out_dtype, [&](auto* ot) {
      using O = std::remove_pointer_t<decltype(ot)>;
      mul_typed(static_cast<const X*>(x), static_cast<O*>(out), s, begin, end);
    });
  });
}

void relu_forward(const void* x, DType x_dtype, void* y, DType y_dtype, size_t begin, size_t end) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(y_dtype, [&](auto* yt) {
      using Y = std::remove_pointer_t<decltype(yt)>;
      relu_fwd_typed(static_cast<const X*>(x), static_cast<Y*>(y), begin, end);
    });
  });
}

void relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                   DType dx_dtype, size_t begin, size_t end) {
  with_type(y_dtype, [&](auto* yt) {
    using Y = std::remove_pointer_t<decltype(yt)>;
    with_type(dy_dtype, [&](auto* dyt) {
      using DY = std::remove_pointer_t<decltype(dyt)>;
      with_type(dx_dtype, [&](auto* dxt) {
        using DX = std::remove_pointer_t<decltype(dxt)>;
        relu_bwd_typed(static_cast<const Y*>(y), static_cast<const DY*>(dy), static_cast<DX*>(dx),
                       begin, end);
      });
    });
  });
}

void sum_rows(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
              float* acc) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    sum_rows_typed(static_cast<const X*>(x), rows, cols, c0, c1, acc);
  });
}

}  // namespace ampctl::cpu::vec

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
