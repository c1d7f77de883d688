// AVX-512 elementwise passes of the CPU backend (contract and why they match the scalar math
// bitwise: cpu_vector.h). Each loop handles 16 lanes at a time and the tail with masks.
// Compiled twice: here into vec_avx512, and by cpu_vector_avx2.cpp into vec_avx2 against
// cpu_avx512_on_avx2.h (each 16-lane operation as two 8-lane AVX2 ones, the same bits).
#include "cpu_vector.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ampctl/core/half.h"
#include "cpu_exp.h"
#include "cpu_gelu.h"
#include "cpu_simd.h"

#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same seed, inlined into GeluTable's constructor, is reported as -Wuninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#ifndef AMPCTL_VEC_NS
#define AMPCTL_VEC_NS vec_avx512
#endif

namespace ampctl::cpu::AMPCTL_VEC_NS {
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

// mask (decay_on: matrices): lanes whose mask is 0 take the weight-decay-free constants of
// adam_update: AdamW multiplies them by plain_decay (1 - lr * 0) instead of c.decay; Adam + L2
// skips the add (weight_decay = 0 fails adam_update's != 0 test). Other constants are shared.
template <bool kScaled, bool kMaximize, int kDecay, bool kLerpLow, bool kMasked, typename L>
AMPCTL_AVX512 void adam_loop(size_t begin, size_t end, float* p, const float* g, float* m, float* v,
                             float inv_scale, const optim::AdamStepConsts& c, L* lowp,
                             const float* mask, float plain_decay) {
  const __m512 inv = _mm512_set1_ps(inv_scale);
  const __m512 decay = _mm512_set1_ps(c.decay);
  const __m512 decay_off = _mm512_set1_ps(plain_decay);
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
    // The mask's != 0 test (NaN counts as set), on the loaded lanes.
    __mmask16 on = k;
    if constexpr (kMasked) {
      on = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, mask + i), _mm512_setzero_ps(),
                                   _CMP_NEQ_UQ);
    }
    if constexpr (kDecay == 1) {  // AdamW
      param = _mm512_mul_ps(param, kMasked ? _mm512_mask_blend_ps(on, decay_off, decay) : decay);
    }
    if constexpr (kDecay == 2) {  // Adam + L2
      gv = kMasked ? _mm512_mask_add_ps(gv, on, gv, _mm512_mul_ps(wd, param))
                   : _mm512_add_ps(gv, _mm512_mul_ps(wd, param));
    }
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
                              const optim::AdamStepConsts& c, L* lowp, const float* mask,
                              float plain_decay) {
  // The per-call branches of adam_update, taken once: each combination is its own loop.
  const bool scaled = inv != 1.0f;
  const int decay = decoupled ? 1 : (c.weight_decay != 0.0f ? 2 : 0);
  const bool low = c.one_minus_beta1 < 0.5f;
  auto go = [&](auto s, auto mx, auto d, auto lo) {
    constexpr int kD = decltype(d)::value;
    if constexpr (kD != 0) {
      if (mask) {
        adam_loop<decltype(s)::value, decltype(mx)::value, kD, decltype(lo)::value, true>(
            begin, end, p, g, m, v, inv, c, lowp, mask, plain_decay);
        return;
      }
    }
    adam_loop<decltype(s)::value, decltype(mx)::value, kD, decltype(lo)::value, false>(
        begin, end, p, g, m, v, inv, c, lowp, nullptr, plain_decay);
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

// cast_amax's rule on the lanes k of v: the largest finite |v| as bits into m, and into bad the
// lanes that were not finite.
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void take_amax(__m512 v, __mmask16 k, __m512i& m, __mmask16& bad) {
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 finite = _mm512_mask_cmplt_epu32_mask(k, a, _mm512_set1_epi32(0x7f800000));
  bad = static_cast<__mmask16>(bad | (k & ~finite));
  m = _mm512_mask_max_epu32(m, finite, m, a);
}

// With Amax, cast_amax's rule on every float stored: max_bits and nonfinite raised.
template <bool Amax, typename Y, typename DY, typename DX>
AMPCTL_AVX512 void relu_bwd_typed(const Y* y, const DY* dy, DX* dx, size_t begin, size_t end,
                                  uint32_t* max_bits = nullptr, bool* nonfinite = nullptr) {
  __m512i m = _mm512_setzero_si512();
  __mmask16 bad = 0;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    // y > 0 ? dy : 0 (ordered: a NaN y gives 0).
    const __mmask16 pos = _mm512_cmp_ps_mask(load16(y + i, k), _mm512_setzero_ps(), _CMP_GT_OQ);
    const __m512 v = _mm512_maskz_mov_ps(pos, load16(dy + i, k));
    store16(dx + i, v, k);
    if constexpr (Amax) take_amax(v, k, m, bad);
  }
  if constexpr (Amax) {
    *max_bits = std::max(*max_bits, _mm512_reduce_max_epu32(m));
    *nonfinite = *nonfinite || bad != 0;
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

// A norm block's lanes folded in halves (cpu_vector.h): lane j += lane j + 8, + 4, + 2, + 1.
double fold_norm_lanes(double* lane) {
  for (int half = kNormLanes / 2; half >= 1; half /= 2) {
    for (int j = 0; j < half; ++j) lane[j] += lane[j + half];
  }
  return lane[0];
}

// The 16 lanes of a norm block (cpu_vector.h): lanes 0-7 in lo, 8-15 in hi; each FMA adds an
// exact square, so it rounds once, as the scalar lane's s += v * v. Masked-off tail lanes add
// +0, which leaves a sum >= +0 unchanged.
template <typename X>
AMPCTL_AVX512 double norm_block_typed(const X* x, size_t begin, size_t end) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (size_t i = begin; i < end; i += 16) {
    const __m512 v = load16(x + i, head_mask(end - i));
    const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d b =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  alignas(64) double s[kNormLanes];
  _mm512_store_pd(s, lo);
  _mm512_store_pd(s + 8, hi);
  return fold_norm_lanes(s);
}

// ---- tanh GELU (cpu_gelu.h: the scalar code these lanes reproduce) ----

// tanh_f64 on 8 lanes of double: the same operations as the scalar code, the small-argument
// series computed and blended in only when a lane needs it.
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512d tanh_abs_pd(__m512d a) {
  using namespace gelu_detail;
  a = _mm512_min_pd(_mm512_set1_pd(kTanhClamp), a);  // a NaN (second operand) is kept
  const __m512d y = _mm512_mul_pd(_mm512_set1_pd(2.0), a);
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(y, _mm512_set1_pd(kLog2e8)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(k, _mm512_set1_pd(0.125)),
                                         _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  // j = k - 8 q in 0..7 (a NaN lane's index is whatever the conversion gives; its result is NaN).
  const __m512i j = _mm512_cvttpd_epi64(_mm512_sub_pd(k, _mm512_mul_pd(q, _mm512_set1_pd(8.0))));
  const __m512d r = _mm512_sub_pd(_mm512_sub_pd(y, _mm512_mul_pd(k, _mm512_set1_pd(kLn2Hi8))),
                                  _mm512_mul_pd(k, _mm512_set1_pd(kLn2Lo8)));
  __m512d p = _mm512_set1_pd(kExpCoef[0]);
#pragma GCC unroll 6
  for (int i = 1; i < 7; ++i) p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(kExpCoef[i]));
  p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0));
  const __m512d table = _mm512_loadu_pd(kExp2Eighths);
  const __m512d e = _mm512_scalef_pd(_mm512_mul_pd(p, _mm512_permutexvar_pd(j, table)), q);
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d big = _mm512_div_pd(_mm512_sub_pd(e, one), _mm512_add_pd(e, one));
  const __mmask8 small = _mm512_cmp_pd_mask(a, _mm512_set1_pd(kTanhSmall), _CMP_LT_OQ);
  if (small == 0) return big;
  const __m512d a2 = _mm512_mul_pd(a, a);
  const __m512d series = _mm512_mul_pd(
      a,
      _mm512_add_pd(
          one, _mm512_mul_pd(
                   a2, _mm512_add_pd(
                           _mm512_set1_pd(kSeries3),
                           _mm512_mul_pd(
                               a2, _mm512_add_pd(_mm512_set1_pd(kSeries5),
                                                 _mm512_mul_pd(a2, _mm512_set1_pd(kSeries7))))))));
  return _mm512_mask_blend_pd(small, big, series);
}

// tanh_f64 on 16 float lanes.
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 tanh16(__m512 v) {
  const __m512 av = _mm512_abs_ps(v);
  const __m512d lo = tanh_abs_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(av)));
  const __m512d hi = tanh_abs_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(av, 1)));
  const __m512 t =
      _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
  // copysign(t, v): t is >= 0 or a NaN of av's (positive) sign.
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 gelu_inner(__m512 x, __m512 x_cube) {
  return _mm512_mul_ps(_mm512_set1_ps(nn::kGeluTanhBeta),
                       _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(nn::kGeluTanhKappa), x_cube)));
}

template <typename X, typename Y>
AMPCTL_AVX512 void gelu_fwd_typed(const X* x, Y* y, size_t begin, size_t end) {
  const __m512 half_v = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    const __m512 xv = load16(x + i, k);
    const __m512 x_cube = _mm512_mul_ps(_mm512_mul_ps(xv, xv), xv);
    const __m512 t = tanh16(gelu_inner(xv, x_cube));
    store16(y + i, _mm512_mul_ps(_mm512_mul_ps(half_v, xv), _mm512_add_ps(one, t)), k);
  }
}

template <typename X, typename DY, typename DX>
AMPCTL_AVX512 void gelu_bwd_typed(const X* x, const DY* dy, DX* dx, size_t begin, size_t end) {
  const __m512 half_v = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 beta = _mm512_set1_ps(nn::kGeluTanhBeta);
  const __m512 three_kappa = _mm512_set1_ps(gelu_detail::kThreeKappa);
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    const __m512 xv = load16(x + i, k);
    const __m512 x_sq = _mm512_mul_ps(xv, xv);
    const __m512 t = tanh16(gelu_inner(xv, _mm512_mul_ps(x_sq, xv)));
    const __m512 left = _mm512_mul_ps(half_v, xv);
    const __m512 left_derivative = _mm512_mul_ps(half_v, _mm512_add_ps(one, t));
    const __m512 tanh_derivative = _mm512_sub_ps(one, _mm512_mul_ps(t, t));
    const __m512 inner_derivative =
        _mm512_mul_ps(beta, _mm512_add_ps(one, _mm512_mul_ps(three_kappa, x_sq)));
    const __m512 right_derivative =
        _mm512_mul_ps(_mm512_mul_ps(left, tanh_derivative), inner_derivative);
    const __m512 grad = _mm512_add_ps(left_derivative, right_derivative);
    store16(dx + i, _mm512_mul_ps(load16(dy + i, k), grad), k);
  }
}

// GELU of a 16-bit input (f16, bf16) by table: the 65536 bit patterns are evaluated once, by
// the loops above on their widened floats, into gelu(x) and gelu'(x) as float; a pass then
// gathers the row's values instead of evaluating tanh in double for every element (a GPT MLP
// step's GELUs took 10 % of its time on the CPU). Every lane of the loops above is computed
// independently of the others, so the tables hold exactly the floats they would give and the
// pass keeps their bits: y rounds table_y[x] to its dtype, dx rounds dy * table_g[x], the
// same product as gelu_bwd_typed's. The tables (512 KiB per dtype, static storage) are filled
// on first use, thread-safely (a function-local static).
template <typename X>
struct GeluTable {
  static_assert(sizeof(X) == 2, "16-bit inputs only");
  alignas(64) float y[65536];
  alignas(64) float g[65536];
  AMPCTL_AVX512 GeluTable() {
    alignas(64) float x[16];
    alignas(64) float one[16];
    for (int q = 0; q < 16; ++q) one[q] = 1.0f;
    for (uint32_t b = 0; b < 65536; b += 16) {
      for (uint32_t q = 0; q < 16; ++q)
        x[q] = simd::widen(X::from_bits(static_cast<uint16_t>(b + q)));
      gelu_fwd_typed(x, y + b, 0, 16);
      // dy = 1: dx = 1 * gelu'(x), which is gelu'(x) bit for bit (NaN: quiet, as any product).
      gelu_bwd_typed(x, one, g + b, 0, 16);
    }
  }
};

template <typename X>
const GeluTable<X>& gelu_table() {
  static const GeluTable<X> table;
  return table;
}

// The 16 table indices of x[i..i + 16) (masked-off lanes: index 0, loaded but not stored).
template <typename X>
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512i gelu_index(const X* x, __mmask16 k) {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x));
}

template <typename X, typename Y>
AMPCTL_AVX512 void gelu_fwd_table(const X* x, Y* y, size_t begin, size_t end) {
  const float* ty = gelu_table<X>().y;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    store16(y + i, _mm512_i32gather_ps(gelu_index(x + i, k), ty, 4), k);
  }
}

template <typename X, typename DY, typename DX>
AMPCTL_AVX512 void gelu_bwd_table(const X* x, const DY* dy, DX* dx, size_t begin, size_t end) {
  const float* tg = gelu_table<X>().g;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    const __m512 grad = _mm512_i32gather_ps(gelu_index(x + i, k), tg, 4);
    store16(dx + i, _mm512_mul_ps(load16(dy + i, k), grad), k);
  }
}

// expf_glibc (cpu_exp.h) on 16 lanes, two halves of 8 doubles; the main path operation for
// operation, the special cases (|x| >= 88, NaN) blended in where a lane has one.
struct ExpTable {
  __m512i t[4];  // tab[8q .. 8q + 8)
};

AMPCTL_AVX512 AMPCTL_SIMD_INLINE ExpTable exp_table() {
  ExpTable e;
  for (int q = 0; q < 4; ++q) e.t[q] = _mm512_loadu_si512(exp_detail::kTab + 8 * q);
  return e;
}

AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m256 exp8_main(__m256 x, const ExpTable& tab) {
  using namespace exp_detail;
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv = _mm512_set1_pd(as_double(kInvLn2N));
  const __m512d shift = _mm512_set1_pd(as_double(kShift));
  const __m512d kd_shifted = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d kd = _mm512_sub_pd(kd_shifted, shift);
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  const __m512d z =
      _mm512_fmadd_pd(_mm512_set1_pd(as_double(kC0)), r, _mm512_set1_pd(as_double(kC1)));
  // tab[k % 32]: VPERMT2Q picks from 16 entries by bits 0-3; bit 4 picks the pair of registers.
  const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
  const __m512i t_lo = _mm512_permutex2var_epi64(tab.t[0], idx, tab.t[1]);
  const __m512i t_hi = _mm512_permutex2var_epi64(tab.t[2], idx, tab.t[3]);
  const __m512i t =
      _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), t_lo, t_hi);
  const __m512d sv = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(as_double(kC2)), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, sv));
}

AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 exp16(__m512 x, const ExpTable& tab) {
  using namespace exp_detail;
  const __m512 lo = _mm512_castps256_ps512(exp8_main(_mm512_castps512_ps256(x), tab));
  __m512 y = _mm512_insertf32x8(lo, exp8_main(_mm512_extractf32x8_ps(x, 1), tab), 1);
  const __m512i ux = _mm512_castps_si512(x);
  const __m512i abstop = _mm512_and_si512(_mm512_srli_epi32(ux, 20), _mm512_set1_epi32(0x7ff));
  const __mmask16 special =
      _mm512_cmpge_epu32_mask(abstop, _mm512_set1_epi32(static_cast<int>(kSpecialTop)));
  if (special == 0) return y;
  // In glibc's order of tests, each blend taking the lanes the earlier ones left.
  __mmask16 left = special;
  const __mmask16 neg_inf =
      _mm512_mask_cmpeq_epi32_mask(left, ux, _mm512_set1_epi32(static_cast<int>(0xff800000u)));
  y = _mm512_mask_blend_ps(neg_inf, y, _mm512_setzero_ps());
  left &= static_cast<__mmask16>(~neg_inf);
  const __mmask16 inf_nan =
      _mm512_mask_cmpge_epu32_mask(left, abstop, _mm512_set1_epi32(static_cast<int>(kInfTop)));
  y = _mm512_mask_blend_ps(inf_nan, y, _mm512_add_ps(x, x));
  left &= static_cast<__mmask16>(~inf_nan);
  const __mmask16 over =
      _mm512_mask_cmp_ps_mask(left, x, _mm512_set1_ps(as_float(kOverflow)), _CMP_GT_OQ);
  y = _mm512_mask_blend_ps(over, y, _mm512_set1_ps(as_float(0x7f800000u)));
  left &= static_cast<__mmask16>(~over);
  const __mmask16 under =
      _mm512_mask_cmp_ps_mask(left, x, _mm512_set1_ps(as_float(kUnderflow)), _CMP_LT_OQ);
  y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
  left &= static_cast<__mmask16>(~under);
  const __mmask16 may_under =
      _mm512_mask_cmp_ps_mask(left, x, _mm512_set1_ps(as_float(kMayUnderflow)), _CMP_LT_OQ);
  const __m512 tiny = _mm512_set1_ps(0x1.4p-75f);
  return _mm512_mask_blend_ps(may_under, y, _mm512_mul_ps(tiny, tiny));
}

// ---- causal softmax rows (cpu/transformer.cpp has the documented float order) ----

// v rounded to S's precision and widened back (the identity for float).
template <typename S>
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 round_as(__m512 v) {
  if constexpr (std::is_same_v<S, half>) {
    return _mm512_cvtph_ps(simd::round_f16(v));
  } else if constexpr (std::is_same_v<S, bfloat16>) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(simd::round_bf16(v)), 16));
  } else {
    return v;
  }
}

// The sums run sequentially over j within each row (the documented order), so one row's sum
// cannot be split across lanes; instead up to 16 consecutive rows share a vector, lane q adding
// row r + q's terms in ascending j (column j of the 16 rows from 16 x 16 tiles transposed in
// registers), a lane taking part only while j is inside its row's unmasked prefix.

// Columns [j0, j0 + 16) of a 16-row block (rows >= count and columns >= cols: zero) into r,
// r[c] holding column j0 + c with lane l from row l: a 16 x 16 tile transposed in registers
// (a gather per column cost ~4x more).
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void block_columns(const float* base, int64_t ld, int64_t count,
                                                    int64_t cols, int64_t j0, __m512 r[16]) {
  const __mmask16 m = head_mask(static_cast<size_t>(cols - j0));
  for (int q = 0; q < 16; ++q)
    r[q] = q < count ? _mm512_maskz_loadu_ps(m, base + q * ld + j0) : _mm512_setzero_ps();
  simd::transpose16(r);
}

// acc + the columns j0 + c (c < n) of a transposed 16-row tile, in ascending c, lane q adding
// col[c] only while j0 + c is inside row q's prefix (lens, lane q).
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 add_prefix_columns(__m512 acc, const __m512 col[16],
                                                           __m512i lens, int64_t j0, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const __mmask16 in = _mm512_cmpgt_epi32_mask(lens, _mm512_set1_epi32(static_cast<int>(j0 + c)));
    acc = _mm512_mask_add_ps(acc, in, acc, col[c]);
  }
  return acc;
}

// Lane q: the length of row r + q's unmasked prefix (r + q) % t + 1, or 0 past `count` rows.
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512i row_lengths(int64_t r, int64_t count, int64_t t) {
  alignas(64) int32_t len[16];
  for (int64_t q = 0; q < 16; ++q) len[q] = q < count ? static_cast<int32_t>((r + q) % t + 1) : 0;
  return _mm512_load_si512(len);
}

template <typename S, typename P>
AMPCTL_AVX512 void softmax_fwd_typed(const S* x, P* y, int64_t t, int64_t r0, int64_t r1,
                                     float scale, bool round_scaled, float* e) {
  const __m512 vs = _mm512_set1_ps(scale);
  const ExpTable tab = exp_table();
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t count = std::min<int64_t>(16, r1 - r);
    int64_t longest = 0;
    for (int64_t q = 0; q < count; ++q) {
      const int64_t len = (r + q) % t + 1;
      longest = std::max(longest, len);
      const S* xr = x + (r + q) * t;
      float* er = e + q * t;
      // s_j (rounded when asked) into e, and the max: max_ps(s, m) returns m when s is a NaN,
      // as the scalar `s > mx ? s : mx` skips it; the lanes' maxima combine exactly in any order.
      __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(len - j));
        __m512 sv = _mm512_mul_ps(load16(xr + j, k), vs);
        if (round_scaled) sv = round_as<S>(sv);
        _mm512_mask_storeu_ps(er + j, k, sv);
        mv = _mm512_mask_max_ps(mv, k, sv, mv);
      }
      // The exponentials (expf_glibc on 16 lanes).
      const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
      for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(len - j));
        _mm512_mask_storeu_ps(er + j, k,
                              exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, er + j), vmx), tab));
      }
    }
    // Their sums in ascending j, row q in lane q.
    const __m512i lens = row_lengths(r, count, t);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < longest; j0 += 16) {
      __m512 col[16];
      block_columns(e, t, count, t, j0, col);
      sum = add_prefix_columns(sum, col, lens, j0, std::min<int64_t>(16, longest - j0));
    }
    alignas(64) float sums[16];
    _mm512_store_ps(sums, sum);
    for (int64_t q = 0; q < count; ++q) {
      const int64_t len = (r + q) % t + 1;
      const float* er = e + q * t;
      P* yr = y + (r + q) * t;
      const __m512 vsum = _mm512_set1_ps(sums[q]);
      for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(len - j));
        store16(yr + j, _mm512_div_ps(_mm512_maskz_loadu_ps(k, er + j), vsum), k);
      }
      for (int64_t j = len; j < t; j += 16) {
        store16(yr + j, _mm512_setzero_ps(), head_mask(static_cast<size_t>(t - j)));
      }
    }
  }
}

// With Amax (round_scaled only): cast_amax's rule on both roundings' floats, g before its
// rounding and round(g) * scale before the store's.
template <bool Amax, typename P, typename G, typename O>
AMPCTL_AVX512 void softmax_bwd_typed(const P* p, const G* g, O* o, int64_t t, int64_t r0,
                                     int64_t r1, float scale, bool round_scaled,
                                     uint32_t* max_bits = nullptr, bool* nonfinite = nullptr) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512i amax = _mm512_setzero_si512();
  __mmask16 bad = 0;
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t count = std::min<int64_t>(16, r1 - r);
    int64_t longest = 0;
    for (int64_t q = 0; q < count; ++q) longest = std::max(longest, (r + q) % t + 1);
    // The dots in ascending k, one rounded product and one add at a time (the documented
    // order): the products of 16 rows x 16 columns, transposed, then added column by column.
    const __m512i lens = row_lengths(r, count, t);
    __m512 dot = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < longest; k0 += 16) {
      const __mmask16 k = head_mask(static_cast<size_t>(t - k0));
      __m512 col[16];
      for (int64_t q = 0; q < 16; ++q) {
        col[q] = q < count ? _mm512_mul_ps(load16(g + (r + q) * t + k0, k),
                                           load16(p + (r + q) * t + k0, k))
                           : _mm512_setzero_ps();
      }
      simd::transpose16(col);
      dot = add_prefix_columns(dot, col, lens, k0, std::min<int64_t>(16, longest - k0));
    }
    alignas(64) float dots[16];
    _mm512_store_ps(dots, dot);
    for (int64_t q = 0; q < count; ++q) {
      const int64_t len = (r + q) % t + 1;
      const P* pr = p + (r + q) * t;
      const G* gr = g + (r + q) * t;
      O* orow = o + (r + q) * t;
      const __m512 vdot = _mm512_set1_ps(dots[q]);
      for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(len - j));
        __m512 v = _mm512_mul_ps(load16(pr + j, k), _mm512_sub_ps(load16(gr + j, k), vdot));
        if constexpr (Amax) take_amax(v, k, amax, bad);
        if (round_scaled) v = round_as<O>(v);
        v = _mm512_mul_ps(v, vs);
        if constexpr (Amax) take_amax(v, k, amax, bad);
        store16(orow + j, v, k);
      }
      for (int64_t j = len; j < t; j += 16) {
        store16(orow + j, _mm512_setzero_ps(), head_mask(static_cast<size_t>(t - j)));
      }
    }
  }
  if constexpr (Amax) {
    *max_bits = std::max(*max_bits, _mm512_reduce_max_epu32(amax));
    *nonfinite = *nonfinite || bad != 0;
  }
}

// ---- LayerNorm (cpu/nn.cpp has the documented float order) ----
// The row sums run sequentially over j within each row, so a row's sum cannot be split across
// lanes; instead 16 rows share a vector, lane l summing row r0 + l in index order (column j of
// the 16 rows from 16 x 16 tiles of float copies of them, transposed in registers).

// The rows [r0, r0 + count) as floats with row stride ld: the source itself (f32), or widened
// into scratch [16][cols].
template <typename X>
AMPCTL_AVX512 const float* widen_block(const X* x, int64_t cols, int64_t r0, int64_t count,
                                       float* scratch, int64_t& ld) {
  ld = cols;
  if constexpr (std::is_same_v<X, float>) {
    (void)count;
    (void)scratch;
    return x + r0 * cols;
  } else {
    for (int64_t r = 0; r < count; ++r) {
      const X* src = x + (r0 + r) * cols;
      float* dst = scratch + r * cols;
      for (int64_t j = 0; j < cols; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(cols - j));
        _mm512_mask_storeu_ps(dst + j, k, load16(src + j, k));
      }
    }
    return scratch;
  }
}

template <typename X, typename Y>
AMPCTL_AVX512 void ln_fwd_typed(const X* x, const float* g, const float* b, Y* y, float* mean,
                                float* rstd, int64_t cols, int64_t r0, int64_t r1, float eps,
                                float* scratch) {
  const __m512 n = _mm512_set1_ps(static_cast<float>(cols));
  for (int64_t rb = r0; rb < r1; rb += 16) {
    const int64_t count = std::min<int64_t>(16, r1 - rb);
    int64_t ld;
    const float* base = widen_block(x, cols, rb, count, scratch, ld);
    // Two passes per row (the mean, then the centred squares), each in index order.
    __m512 t[16];
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      block_columns(base, ld, count, cols, j0, t);
      for (int64_t c = 0; c < std::min<int64_t>(16, cols - j0); ++c) sum = _mm512_add_ps(sum, t[c]);
    }
    const __m512 mu = _mm512_div_ps(sum, n);
    __m512 sq = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      block_columns(base, ld, count, cols, j0, t);
      for (int64_t c = 0; c < std::min<int64_t>(16, cols - j0); ++c) {
        const __m512 d = _mm512_sub_ps(t[c], mu);
        sq = _mm512_add_ps(sq, _mm512_mul_ps(d, d));
      }
    }
    // nn::layer_norm_rstd: 1 / sqrt(var + eps), an IEEE square root and division.
    const __m512 rs =
        _mm512_div_ps(_mm512_set1_ps(1.0f),
                      _mm512_sqrt_ps(_mm512_add_ps(_mm512_div_ps(sq, n), _mm512_set1_ps(eps))));
    alignas(64) float mu_l[16], rs_l[16];
    _mm512_store_ps(mu_l, mu);
    _mm512_store_ps(rs_l, rs);
    for (int64_t r = 0; r < count; ++r) {
      const float* xr = base + r * ld;
      Y* yr = y + (rb + r) * cols;
      const __m512 m = _mm512_set1_ps(mu_l[r]), a = _mm512_set1_ps(rs_l[r]);
      for (int64_t j = 0; j < cols; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(cols - j));
        // nn::layer_norm_forward: ((x - mean) * rstd) * gamma + beta.
        const __m512 v = _mm512_add_ps(
            _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), m), a),
                          _mm512_maskz_loadu_ps(k, g + j)),
            _mm512_maskz_loadu_ps(k, b + j));
        store16(yr + j, v, k);
      }
      mean[rb + r] = mu_l[r];
      rstd[rb + r] = rs_l[r];
    }
  }
}

// dx rows [r0, r1).
template <typename X, typename DY, typename DX>
AMPCTL_AVX512 void ln_bwd_dx_typed(const X* x, const DY* dy, const float* g, const float* mean,
                                   const float* rstd, DX* dx, int64_t cols, int64_t r0, int64_t r1,
                                   float* scratch) {
  const float scale_s = 1.0f / static_cast<float>(cols);
  const __m512 scale = _mm512_set1_ps(scale_s);
  for (int64_t rb = r0; rb < r1; rb += 16) {
    const int64_t count = std::min<int64_t>(16, r1 - rb);
    const __mmask16 lanes = head_mask(static_cast<size_t>(count));
    int64_t xld, gld;
    const float* xb = widen_block(x, cols, rb, count, scratch, xld);
    const float* gb = widen_block(dy, cols, rb, count, scratch + 16 * cols, gld);
    __m512 ds = _mm512_setzero_ps(), db = _mm512_setzero_ps();
    // Column tiles of dy and x side by side, each element's products in index order j.
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      const int64_t len = std::min<int64_t>(16, cols - j0);
      __m512 tg[16], tx[16];
      block_columns(gb, gld, count, cols, j0, tg);
      block_columns(xb, xld, count, cols, j0, tx);
      for (int64_t c = 0; c < len; ++c) {
        const __m512 dyg = _mm512_mul_ps(tg[c], _mm512_set1_ps(g[j0 + c]));
        ds = _mm512_add_ps(ds, _mm512_mul_ps(dyg, tx[c]));
        db = _mm512_add_ps(db, dyg);
      }
    }
    const __m512 mu = _mm512_maskz_loadu_ps(lanes, mean + rb);
    const __m512 a = _mm512_maskz_loadu_ps(lanes, rstd + rb);
    // nn::layer_norm_backward_b and _c, left to right.
    const __m512 bv = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(db, mu), ds), a), a),
                      a),
        scale);
    const __m512 neg_b = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(bv), _mm512_set1_epi32(INT32_MIN)));
    const __m512 cv =
        _mm512_sub_ps(_mm512_mul_ps(neg_b, mu), _mm512_mul_ps(_mm512_mul_ps(db, a), scale));
    alignas(64) float a_l[16], b_l[16], c_l[16];
    _mm512_store_ps(a_l, a);
    _mm512_store_ps(b_l, bv);
    _mm512_store_ps(c_l, cv);
    for (int64_t r = 0; r < count; ++r) {
      const float* xr = xb + r * xld;
      const float* gr = gb + r * gld;
      DX* out = dx + (rb + r) * cols;
      const __m512 av = _mm512_set1_ps(a_l[r]), bb = _mm512_set1_ps(b_l[r]),
                   cc = _mm512_set1_ps(c_l[r]);
      for (int64_t j = 0; j < cols; j += 16) {
        const __mmask16 k = head_mask(static_cast<size_t>(cols - j));
        // nn::layer_norm_backward_dx: a * dy * gamma + b * x + c.
        const __m512 v = _mm512_add_ps(
            _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(av, _mm512_maskz_loadu_ps(k, gr + j)),
                                        _mm512_maskz_loadu_ps(k, g + j)),
                          _mm512_mul_ps(bb, _mm512_maskz_loadu_ps(k, xr + j))),
            cc);
        store16(out + j, v, k);
      }
    }
  }
}

// dgamma / dbeta partial sums for columns [c0, c1): every row in order, one lane per column.
template <typename X, typename DY>
AMPCTL_AVX512 void ln_bwd_params_typed(const X* x, const DY* dy, const float* mean,
                                       const float* rstd, int64_t rows, int64_t cols, int64_t c0,
                                       int64_t c1, float* pg, float* pb) {
  for (int64_t c = c0; c < c1; c += 16) {
    const __mmask16 k = head_mask(static_cast<size_t>(c1 - c));
    __m512 sg = _mm512_setzero_ps(), sb = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      const __m512 d = load16(dy + r * cols + c, k);
      // nn::layer_norm_xhat: (x - mean) * rstd.
      const __m512 xhat =
          _mm512_mul_ps(_mm512_sub_ps(load16(x + r * cols + c, k), _mm512_set1_ps(mean[r])),
                        _mm512_set1_ps(rstd[r]));
      sg = _mm512_add_ps(sg, _mm512_mul_ps(d, xhat));
      sb = _mm512_add_ps(sb, d);
    }
    _mm512_mask_storeu_ps(pg + c, k, sg);
    _mm512_mask_storeu_ps(pb + c, k, sb);
  }
}

}  // namespace

void adam(size_t begin, size_t end, float* p, const float* g, float* m, float* v, float inv_scale,
          bool decoupled, bool maximize, const optim::AdamStepConsts& c, void* lowp,
          DType lowp_dtype, const float* decay_mask, float plain_decay) {
  if (!lowp) {
    adam_typed<float>(begin, end, p, g, m, v, inv_scale, decoupled, maximize, c, nullptr,
                      decay_mask, plain_decay);
    return;
  }
  with_type(lowp_dtype, [&](auto* tag) {
    using L = std::remove_pointer_t<decltype(tag)>;
    adam_typed(begin, end, p, g, m, v, inv_scale, decoupled, maximize, c, static_cast<L*>(lowp),
               decay_mask, plain_decay);
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

// |x| as bits (the sign cleared), compared as unsigned integers: among non-negative floats the
// integer order is the value order, and inf / NaN sit at 0x7f800000 and above.
template <typename O>
AMPCTL_AVX512 void cast_amax_typed(const float* x, O* out, size_t begin, size_t end,
                                   uint32_t& max_bits, bool& nonfinite) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  __m512i m = _mm512_setzero_si512();
  __mmask16 bad = 0;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    const __m512 v = load16(x + i, k);
    store16(out + i, v, k);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    const __mmask16 finite = _mm512_mask_cmplt_epu32_mask(k, a, inf_bits);
    bad = static_cast<__mmask16>(bad | (k & ~finite));
    m = _mm512_mask_max_epu32(m, finite, m, a);
  }
  max_bits = std::max(max_bits, _mm512_reduce_max_epu32(m));
  nonfinite = nonfinite || bad != 0;
}

void cast_amax(const float* x, void* out, DType out_dtype, size_t begin, size_t end,
               uint32_t& max_bits, bool& nonfinite) {
  if (out_dtype == DType::f16) {
    cast_amax_typed(x, static_cast<half*>(out), begin, end, max_bits, nonfinite);
  } else {
    cast_amax_typed(x, static_cast<bfloat16*>(out), begin, end, max_bits, nonfinite);
  }
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

namespace {

// relu_backward's dtype dispatch, with (Amax: max_bits and nonfinite given) or without the max.
template <bool Amax>
void relu_backward_dispatch(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                            DType dx_dtype, size_t begin, size_t end, uint32_t* max_bits,
                            bool* nonfinite) {
  with_type(y_dtype, [&](auto* yt) {
    using Y = std::remove_pointer_t<decltype(yt)>;
    with_type(dy_dtype, [&](auto* dyt) {
      using DY = std::remove_pointer_t<decltype(dyt)>;
      with_type(dx_dtype, [&](auto* dxt) {
        using DX = std::remove_pointer_t<decltype(dxt)>;
        relu_bwd_typed<Amax>(static_cast<const Y*>(y), static_cast<const DY*>(dy),
                             static_cast<DX*>(dx), begin, end, max_bits, nonfinite);
      });
    });
  });
}

}  // namespace

void relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                   DType dx_dtype, size_t begin, size_t end) {
  relu_backward_dispatch<false>(y, y_dtype, dy, dy_dtype, dx, dx_dtype, begin, end, nullptr,
                                nullptr);
}

void relu_backward_amax(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                        DType dx_dtype, size_t begin, size_t end, uint32_t& max_bits,
                        bool& nonfinite) {
  relu_backward_dispatch<true>(y, y_dtype, dy, dy_dtype, dx, dx_dtype, begin, end, &max_bits,
                               &nonfinite);
}

void gelu_tanh_forward(const void* x, DType x_dtype, void* y, DType y_dtype, size_t begin,
                       size_t end) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(y_dtype, [&](auto* yt) {
      using Y = std::remove_pointer_t<decltype(yt)>;
      if constexpr (sizeof(X) == 2) {
        gelu_fwd_table(static_cast<const X*>(x), static_cast<Y*>(y), begin, end);
      } else {
        gelu_fwd_typed(static_cast<const X*>(x), static_cast<Y*>(y), begin, end);
      }
    });
  });
}

void gelu_tanh_backward(const void* x, DType x_dtype, const void* dy, DType dy_dtype, void* dx,
                        DType dx_dtype, size_t begin, size_t end) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(dy_dtype, [&](auto* dyt) {
      using DY = std::remove_pointer_t<decltype(dyt)>;
      with_type(dx_dtype, [&](auto* dxt) {
        using DX = std::remove_pointer_t<decltype(dxt)>;
        if constexpr (sizeof(X) == 2) {
          gelu_bwd_table(static_cast<const X*>(x), static_cast<const DY*>(dy), static_cast<DX*>(dx),
                         begin, end);
        } else {
          gelu_bwd_typed(static_cast<const X*>(x), static_cast<const DY*>(dy), static_cast<DX*>(dx),
                         begin, end);
        }
      });
    });
  });
}

AMPCTL_AVX512 void expf_glibc_n(const float* x, float* y, size_t n) {
  const ExpTable tab = exp_table();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = head_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, x + i), tab));
  }
}

void causal_softmax_forward_rows(const void* scores, DType scores_dtype, void* probs,
                                 DType probs_dtype, int64_t t, int64_t r0, int64_t r1, float scale,
                                 bool round_scaled, float* e) {
  with_type(scores_dtype, [&](auto* st) {
    using S = std::remove_pointer_t<decltype(st)>;
    with_type(probs_dtype, [&](auto* pt) {
      using P = std::remove_pointer_t<decltype(pt)>;
      softmax_fwd_typed(static_cast<const S*>(scores), static_cast<P*>(probs), t, r0, r1, scale,
                        round_scaled, e);
    });
  });
}

namespace {

// causal_softmax_backward_rows' dtype dispatch, with (Amax) or without the max.
template <bool Amax>
void softmax_backward_dispatch(const void* probs, DType probs_dtype, const void* dprobs,
                               DType dprobs_dtype, void* dscores, DType dscores_dtype, int64_t t,
                               int64_t r0, int64_t r1, float scale, bool round_scaled,
                               uint32_t* max_bits, bool* nonfinite) {
  with_type(probs_dtype, [&](auto* pt) {
    using P = std::remove_pointer_t<decltype(pt)>;
    with_type(dprobs_dtype, [&](auto* gt) {
      using G = std::remove_pointer_t<decltype(gt)>;
      with_type(dscores_dtype, [&](auto* ot) {
        using O = std::remove_pointer_t<decltype(ot)>;
        softmax_bwd_typed<Amax>(static_cast<const P*>(probs), static_cast<const G*>(dprobs),
                                static_cast<O*>(dscores), t, r0, r1, scale, round_scaled, max_bits,
                                nonfinite);
      });
    });
  });
}

}  // namespace

void causal_softmax_backward_rows(const void* probs, DType probs_dtype, const void* dprobs,
                                  DType dprobs_dtype, void* dscores, DType dscores_dtype, int64_t t,
                                  int64_t r0, int64_t r1, float scale, bool round_scaled) {
  softmax_backward_dispatch<false>(probs, probs_dtype, dprobs, dprobs_dtype, dscores, dscores_dtype,
                                   t, r0, r1, scale, round_scaled, nullptr, nullptr);
}

void causal_softmax_backward_rows_amax(const void* probs, DType probs_dtype, const void* dprobs,
                                       DType dprobs_dtype, void* dscores, DType dscores_dtype,
                                       int64_t t, int64_t r0, int64_t r1, float scale,
                                       uint32_t& max_bits, bool& nonfinite) {
  softmax_backward_dispatch<true>(probs, probs_dtype, dprobs, dprobs_dtype, dscores, dscores_dtype,
                                  t, r0, r1, scale, /*round_scaled=*/true, &max_bits, &nonfinite);
}

void layer_norm_forward_rows(const void* x, DType x_dtype, const float* gamma, const float* beta,
                             void* y, DType y_dtype, float* mean, float* rstd, int64_t cols,
                             int64_t r0, int64_t r1, float eps, float* scratch) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(y_dtype, [&](auto* yt) {
      using Y = std::remove_pointer_t<decltype(yt)>;
      ln_fwd_typed(static_cast<const X*>(x), gamma, beta, static_cast<Y*>(y), mean, rstd, cols, r0,
                   r1, eps, scratch);
    });
  });
}

void layer_norm_backward_dx_rows(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                 const float* gamma, const float* mean, const float* rstd, void* dx,
                                 DType dx_dtype, int64_t cols, int64_t r0, int64_t r1,
                                 float* scratch) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(dy_dtype, [&](auto* dyt) {
      using DY = std::remove_pointer_t<decltype(dyt)>;
      with_type(dx_dtype, [&](auto* dxt) {
        using DX = std::remove_pointer_t<decltype(dxt)>;
        ln_bwd_dx_typed(static_cast<const X*>(x), static_cast<const DY*>(dy), gamma, mean, rstd,
                        static_cast<DX*>(dx), cols, r0, r1, scratch);
      });
    });
  });
}

void layer_norm_backward_params(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                const float* mean, const float* rstd, int64_t rows, int64_t cols,
                                int64_t c0, int64_t c1, float* pg, float* pb) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    with_type(dy_dtype, [&](auto* dyt) {
      using DY = std::remove_pointer_t<decltype(dyt)>;
      ln_bwd_params_typed(static_cast<const X*>(x), static_cast<const DY*>(dy), mean, rstd, rows,
                          cols, c0, c1, pg, pb);
    });
  });
}

double norm_block_portable(const void* x, DType x_dtype, size_t begin, size_t end) {
  double lane[kNormLanes] = {};
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    const X* p = static_cast<const X*>(x);
    for (size_t i = begin; i < end; ++i) {
      const double v = static_cast<float>(p[i]);
      lane[(i - begin) % kNormLanes] += v * v;
    }
  });
  return fold_norm_lanes(lane);
}

double norm_block(const void* x, DType x_dtype, size_t begin, size_t end) {
  double sum = 0.0;
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    sum = norm_block_typed(static_cast<const X*>(x), begin, end);
  });
  return sum;
}

// norm_block's lanes over x * inv (one float multiply per element, as amp::unscale_value): an
// f32 block runs vectorised, the others through the portable code (their rounding to X).
AMPCTL_AVX512 double norm_block_scaled_f32(const float* x, size_t begin, size_t end, float inv) {
  const __m512 vinv = _mm512_set1_ps(inv);
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = head_mask(end - i);
    // Masked-off lanes stay +0 (not 0 * inv), which adds nothing.
    const __m512 v = _mm512_maskz_mul_ps(k, load16(x + i, k), vinv);
    const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d b =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  alignas(64) double s[kNormLanes];
  _mm512_store_pd(s, lo);
  _mm512_store_pd(s + 8, hi);
  return fold_norm_lanes(s);
}

double norm_block_scaled_portable(const void* x, DType x_dtype, size_t begin, size_t end,
                                  float inv) {
  double lane[kNormLanes] = {};
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    const X* p = static_cast<const X*>(x);
    for (size_t i = begin; i < end; ++i) {
      const float u = inv == 1.0f ? static_cast<float>(p[i]) : static_cast<float>(p[i]) * inv;
      const double v = static_cast<float>(X(u));  // the value an unscale would store
      lane[(i - begin) % kNormLanes] += v * v;
    }
  });
  return fold_norm_lanes(lane);
}

double norm_block_scaled(const void* x, DType x_dtype, size_t begin, size_t end, float inv) {
  if (x_dtype == DType::f32) {
    return norm_block_scaled_f32(static_cast<const float*>(x), begin, end, inv);
  }
  return norm_block_scaled_portable(x, x_dtype, begin, end, inv);
}

void sum_rows(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
              float* acc) {
  with_type(x_dtype, [&](auto* xt) {
    using X = std::remove_pointer_t<decltype(xt)>;
    sum_rows_typed(static_cast<const X*>(x), rows, cols, c0, c1, acc);
  });
}

}  // namespace ampctl::cpu::AMPCTL_VEC_NS

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
