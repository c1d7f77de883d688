// The CPU backend's loss-scaling ops (docs/reference.md, "Scaler"): amp_math.h's per-element and
// per-step math, the reference the CUDA kernels are checked against.
//
// non_finite_check_and_unscale_ is one pass over the gradients and memory-bound, so f32 pieces
// (the gradient arena is f32) run through a vector kernel chosen once by the CPU's instruction
// path (core/cpu_isa.h): avx512, AVX-512F (2 x 16 lanes per iteration, a masked tail); avx2,
// 2 x 8 lanes; portable, a plain loop. f16 and bf16 tensors take the element-by-element reference
// loop. The vector functions carry target attributes, so the file builds without -march flags;
// they are called only on the path that the CPU has.
//
// Why every path gives the bits of amp::unscale_value: the vector code does the same single IEEE
// float multiply x * inv (VMULPS and the scalar MULSS both round to nearest even and both follow
// the one MXCSR, so they agree whatever its FTZ/DAZ bits say), stores it only when inv != 1 (a
// check-only pass leaves every bit, NaN payloads included, untouched), and calls an element
// non-finite exactly when amp::is_finite_bits does: exponent bits 0x7f800000 all set.
//
// Attribution: the elements of the tensors are numbered consecutively and cut into segments at
// segment_starts; the pass runs segment by segment (a segment boundary inside a tensor just
// splits that tensor's pass in two), so knowing which segments held an inf or NaN costs nothing
// per element.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/math/amp_math.h"
#include "cpu_backend.h"
#include "engine/cpu_vector.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define AMPCTL_AMP_X86 1
#include <immintrin.h>
#else
#define AMPCTL_AMP_X86 0
#endif

namespace ampctl::cpu {
namespace {

// Unscales (inv != 1) or checks (inv == 1) p[0, n); returns whether an inf or NaN was seen.
using F32Pass = bool (*)(float* p, size_t n, float inv);

// The reference loop over any float dtype: amp::unscale_value per element.
template <typename T>
bool unscale_reference(T* p, size_t n, float inv) {
  float found = 0.0f;
  if (inv == 1.0f) {  // check only: leave every bit (NaN payloads included) as it is
    for (size_t i = 0; i < n; ++i) amp::unscale_value(to_f32(p[i]), inv, &found);
  } else {
    for (size_t i = 0; i < n; ++i)
      p[i] = from_f32<T>(amp::unscale_value(to_f32(p[i]), inv, &found));
  }
  return found != 0.0f;
}

bool unscale_f32_portable(float* p, size_t n, float inv) {
  return unscale_reference(p, n, inv);
}

#if AMPCTL_AMP_X86

constexpr int kExponentBits = 0x7f800000;

__attribute__((target("avx2"))) bool unscale_f32_avx2(float* p, size_t n, float inv) {
  const __m256i exp = _mm256_set1_epi32(kExponentBits);
  const __m256 vinv = _mm256_set1_ps(inv);
  const bool store = inv != 1.0f;
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(p + i);
    const __m256 b = _mm256_loadu_ps(p + i + 8);
    const __m256i ea = _mm256_and_si256(_mm256_castps_si256(a), exp);
    const __m256i eb = _mm256_and_si256(_mm256_castps_si256(b), exp);
    bad = _mm256_or_si256(
        bad, _mm256_or_si256(_mm256_cmpeq_epi32(ea, exp), _mm256_cmpeq_epi32(eb, exp)));
    if (store) {
      _mm256_storeu_ps(p + i, _mm256_mul_ps(a, vinv));
      _mm256_storeu_ps(p + i + 8, _mm256_mul_ps(b, vinv));
    }
  }
  const bool tail = unscale_reference(p + i, n - i, inv);
  return tail || !_mm256_testz_si256(bad, bad);
}

// GCC 12's _mm512_max_epu32 expands through _mm512_undefined_epi32, which -Wmaybe-uninitialized
// flags inside the header itself (a false positive: that operand is fully masked).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) bool unscale_f32_avx512(float* p, size_t n, float inv) {
  const __m512i exp = _mm512_set1_epi32(kExponentBits);
  const __m512 vinv = _mm512_set1_ps(inv);
  const bool store = inv != 1.0f;
  // x & exp <= exp as unsigned, with equality exactly for inf and NaN: a running maximum finds
  // them with one vector op per word and no mask traffic in the loop.
  __m512i worst = _mm512_setzero_si512();
  // Elements up to the first 64-byte boundary go one by one: a 64-byte access that straddles two
  // cache lines costs two (the arena's tensors are 64-byte aligned, so usually this is none).
  const size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64 / sizeof(float));
  const bool head_found = unscale_reference(p, head, inv);
  size_t i = head;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(p + i);
    const __m512 b = _mm512_loadu_ps(p + i + 16);
    worst = _mm512_max_epu32(worst, _mm512_and_si512(_mm512_castps_si512(a), exp));
    worst = _mm512_max_epu32(worst, _mm512_and_si512(_mm512_castps_si512(b), exp));
    if (store) {
      _mm512_storeu_ps(p + i, _mm512_mul_ps(a, vinv));
      _mm512_storeu_ps(p + i + 16, _mm512_mul_ps(b, vinv));
    }
  }
  for (; i < n; i += 16) {  // the last 1..31 elements, 16 lanes at a time, masked
    const size_t left = n - i;
    const auto m = static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
    const __m512 a = _mm512_maskz_loadu_ps(m, p + i);  // masked-off lanes read as 0: finite
    worst = _mm512_max_epu32(worst, _mm512_and_si512(_mm512_castps_si512(a), exp));
    if (store) _mm512_mask_storeu_ps(p + i, m, _mm512_mul_ps(a, vinv));
  }
  return head_found || _mm512_cmpeq_epi32_mask(worst, exp) != 0;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // AMPCTL_AMP_X86

}  // namespace

std::vector<UnscaleF32Kernel> unscale_f32_kernels() {
  std::vector<UnscaleF32Kernel> out;
#if AMPCTL_AMP_X86
  const CpuIsa isa = cpu_isa();
  if (isa >= CpuIsa::avx512) out.push_back({"avx512f", unscale_f32_avx512});
  if (isa >= CpuIsa::avx2) out.push_back({"avx2", unscale_f32_avx2});
#endif
  out.push_back({"portable", unscale_f32_portable});
  return out;
}

namespace {

bool unscale_piece(const Tensor& t, size_t first, size_t n, float inv) {
  static const F32Pass f32_pass = unscale_f32_kernels().front().run;
  if (t.dtype() == DType::f32) return f32_pass(t.data_as<float>() + first, n, inv);
  return dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return unscale_reference(static_cast<T*>(t.data()) + first, n, inv);
  });
}

// The attribution's values, the CPU's own check (the GPU trusts them: reading the starts would
// be a sync): segment_starts[0] is 0 and the starts increase strictly up to at most the element
// count. Their shapes were checked with the other operands (checks/amp.cpp).
void check_segment_values(const Tensor& starts, size_t total, const char* op) {
  if (!starts.defined()) return;
  const int32_t* s = starts.data_as<int32_t>();
  if (s[0] != 0) {
    throw Error{ErrorKind::invalid_argument,
                std::string(op) + ": segment_starts[0] must be 0, got " + std::to_string(s[0])};
  }
  for (size_t i = 1; i < starts.numel(); ++i) {
    if (s[i] <= s[i - 1] || static_cast<size_t>(s[i]) > total) {
      throw Error{ErrorKind::invalid_argument,
                  std::string(op) + ": segment_starts must increase strictly up to at most " +
                      std::to_string(total) + "; element " + std::to_string(i) + " is " +
                      std::to_string(s[i]) + " after " + std::to_string(s[i - 1])};
    }
  }
}

}  // namespace

void CpuBackend::global_norm(std::span<const Tensor> tensors, const Tensor& out) {
  check_global_norm(tensors, out, device());
  // The order of vec::norm_block (cpu_vector.h): independent blocks, so they are split between
  // the threads; their sums are then added in order, whichever thread computed them.
  size_t blocks = 0;
  for (const Tensor& t : tensors) {
    blocks += (t.numel() + vec::kNormBlock - 1) / vec::kNormBlock;
  }
  if (m_ws_norm.size() < blocks) m_ws_norm.resize(blocks);
  double* sums = m_ws_norm.data();
  size_t first = 0;  // the tensor's first block
  for (const Tensor& t : tensors) {
    const size_t n = t.numel(), nb = (n + vec::kNormBlock - 1) / vec::kNormBlock;
    const void* x = t.data();
    const DType d = t.dtype();
    // A few runs of blocks per thread (parallel_for's grain counts elements, not blocks).
    const int64_t parts =
        n < kParallelGrain ? 1 : std::min<int64_t>(4 * m_pool->threads(), static_cast<int64_t>(nb));
    m_pool->run(parts, [&](int64_t part, int) {
      const size_t b0 = nb * static_cast<size_t>(part) / static_cast<size_t>(parts);
      const size_t b1 = nb * static_cast<size_t>(part + 1) / static_cast<size_t>(parts);
      for (size_t q = b0; q < b1; ++q) {
        const size_t lo = q * vec::kNormBlock, hi = std::min(n, lo + vec::kNormBlock);
        sums[first + q] =
            m_packed ? vec::norm_block(x, d, lo, hi) : vec::norm_block_portable(x, d, lo, hi);
      }
    });
    first += nb;
  }
  double sum = 0.0;
  for (size_t q = 0; q < blocks; ++q) sum += sums[q];
  *out.data_as<float>() = static_cast<float>(std::sqrt(sum));
}

void CpuBackend::non_finite_check_and_unscale_(std::span<const Tensor> tensors,
                                               const Tensor& found_inf, const Tensor& inv_scale,
                                               const Tensor& segment_starts,
                                               const Tensor& segment_found) {
  const size_t total = check_non_finite_check_and_unscale(tensors, found_inf, inv_scale,
                                                          segment_starts, segment_found, device());
  check_segment_values(segment_starts, total, "non_finite_check_and_unscale_");
  float* fi = found_inf.data_as<float>();
  const float inv = *inv_scale.data_as<float>();
  const bool segmented = segment_starts.defined();
  const int32_t* starts = segmented ? segment_starts.data_as<int32_t>() : nullptr;
  int32_t* seg_found = segmented ? segment_found.data_as<int32_t>() : nullptr;
  const size_t segments = segmented ? segment_starts.numel() : 1;

  size_t base = 0;  // elements of the tensors before this one
  size_t seg = 0;   // the segment holding element `base + i`
  for (const Tensor& t : tensors) {
    const size_t n = t.numel();
    for (size_t i = 0; i < n;) {
      while (seg + 1 < segments && static_cast<size_t>(starts[seg + 1]) <= base + i) ++seg;
      const size_t end =
          seg + 1 < segments ? std::min(n, static_cast<size_t>(starts[seg + 1]) - base) : n;
      if (unscale_piece(t, i, end - i, inv)) {
        *fi = 1.0f;
        if (segmented) seg_found[seg] = 1;
      }
      i = end;
    }
    base += n;
  }
}

// global_norm's blocks (cpu_vector.h), each checked (and unscaled) then summed while it is in
// the L1 cache: one read of the gradients from memory. The blocks run in order on this thread, so
// found_inf and the segment flags need no synchronisation, and their sums are added in order as
// global_norm adds them: the same bits.
void CpuBackend::non_finite_check_unscale_norm_(std::span<const Tensor> tensors,
                                                const Tensor& found_inf, const Tensor& inv_scale,
                                                bool unscale, const Tensor& norm,
                                                const Tensor& segment_starts,
                                                const Tensor& segment_found) {
  const size_t total = check_non_finite_check_unscale_norm(tensors, found_inf, inv_scale, norm,
                                                           segment_starts, segment_found, device());
  check_segment_values(segment_starts, total, "non_finite_check_unscale_norm_");
  float* fi = found_inf.data_as<float>();
  const float inv = *inv_scale.data_as<float>();
  // Stored values are already unscaled; a check-only pass squares x * inv as it goes.
  const float write_inv = unscale ? inv : 1.0f;
  const float norm_inv = unscale ? 1.0f : inv;
  const bool segmented = segment_starts.defined();
  const int32_t* starts = segmented ? segment_starts.data_as<int32_t>() : nullptr;
  int32_t* seg_found = segmented ? segment_found.data_as<int32_t>() : nullptr;
  const size_t segments = segmented ? segment_starts.numel() : 1;

  double sum = 0.0;
  size_t base = 0;  // elements of the tensors before this one
  size_t seg = 0;   // the segment holding element `base + i`
  for (const Tensor& t : tensors) {
    const size_t n = t.numel();
    for (size_t lo = 0; lo < n; lo += vec::kNormBlock) {
      const size_t hi = std::min(n, lo + vec::kNormBlock);
      for (size_t i = lo; i < hi;) {
        while (seg + 1 < segments && static_cast<size_t>(starts[seg + 1]) <= base + i) ++seg;
        const size_t end =
            seg + 1 < segments ? std::min(hi, static_cast<size_t>(starts[seg + 1]) - base) : hi;
        if (unscale_piece(t, i, end - i, write_inv)) {
          *fi = 1.0f;
          if (segmented) seg_found[seg] = 1;
        }
        i = end;
      }
      sum += m_packed ? vec::norm_block_scaled(t.data(), t.dtype(), lo, hi, norm_inv)
                      : vec::norm_block_scaled_portable(t.data(), t.dtype(), lo, hi, norm_inv);
    }
    base += n;
  }
  *norm.data_as<float>() = static_cast<float>(std::sqrt(sum));
}

void CpuBackend::inv_scale(const Tensor& scale, const Tensor& inv) {
  check_inv_scale(scale, inv, device());
  *inv.data_as<float>() = amp::inv_scale_of(*scale.data_as<float>());
}

void CpuBackend::update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                               const Tensor& hysteresis_tracker, const Tensor& trackers,
                               const Tensor& found_inf, const amp::ScaleUpdateParams& params) {
  check_update_scale(scale, growth_tracker, hysteresis_tracker, trackers, found_inf, device());
  amp::update_scale_policy(scale.data_as<float>(), growth_tracker.data_as<int32_t>(),
                           hysteresis_tracker.data_as<int32_t>(), trackers.data_as<int32_t>(),
                           *found_inf.data_as<float>(), params);
}

void CpuBackend::update_scale_auto_(const Tensor& scale, const Tensor& growth_tracker,
                                    const Tensor& trackers, const Tensor& found_inf,
                                    const Tensor& amax, const Tensor& history,
                                    const amp::ScaleUpdateParams& params) {
  check_update_scale_auto(scale, growth_tracker, trackers, found_inf, amax, history, params,
                          device());
  amp::update_scale_auto_ring(scale.data_as<float>(), growth_tracker.data_as<int32_t>(),
                              trackers.data_as<int32_t>(), history.data_as<float>(),
                              amax.data_as<float>()[0], *found_inf.data_as<float>() != 0.0f,
                              params);
}

}  // namespace ampctl::cpu
