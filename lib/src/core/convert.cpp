// Batch float <-> half / bfloat16 conversions.
//
// The portable path is half.h's scalar code, one element at a time. The fast path is chosen once,
// on first use, by the CPU's instruction path (core/cpu_isa.h, which also checks that the OS
// saves the YMM / ZMM registers):
//   avx512:   f16 by VCVTPS2PH / VCVTPH2PS on 16 lanes; bf16 by integer arithmetic on 16 lanes,
//             then a pack to 16 bits.
//   avx2:     f16 by F16C (8 lanes); bf16 by AVX2 integer arithmetic on 8 lanes.
//   portable: the portable code.
// The vector functions carry target attributes, so this file builds without -march flags; they
// are only ever called on a path the CPU has. Tails shorter than one vector use the scalar code.
//
// Why every path gives identical bits (tests/unit/core and an exhaustive check over all 2^32
// floats confirm it):
//   * VCVTPS2PH with the immediate _MM_FROUND_TO_NEAREST_INT rounds to nearest even whatever
//     MXCSR.RC says, produces half subnormals (MXCSR.FTZ does not apply to it), and quiets a NaN
//     keeping its sign and top 9 payload bits: float_to_half_bits_portable's rules. Float
//     subnormal inputs round to a signed zero either way, so MXCSR.DAZ cannot change a result.
//   * VCVTPH2PS is exact, half subnormals included, and sets the quiet bit of a NaN.
//   * float -> bf16 deliberately avoids VCVTNEPS2BF16: it treats float subnormal inputs as zero,
//     whereas half.h keeps them (they are bf16 subnormals). The vector code instead runs
//     float_to_bf16_bits_portable's integer arithmetic lane by lane: add 0x7fff plus the lowest
//     kept bit (round to nearest, ties to even; a carry into the exponent is the correct result,
//     up to inf), and for a NaN keep the top 16 bits and set the quiet bit 0x0040.
//   * bf16 -> float is exact: a 16-bit shift.
#include "ampctl/core/convert.h"

#include <string>

#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/half.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define AMPCTL_CONVERT_X86 1
#include <immintrin.h>
#else
#define AMPCTL_CONVERT_X86 0
#endif

namespace ampctl {
namespace {

using FromF32 = void (*)(const float* src, uint16_t* dst, size_t n);
using ToF32 = void (*)(const uint16_t* src, float* dst, size_t n);

void f32_to_f16_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_half_bits_portable(src[i]);
}

void f16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_bits_to_float_portable(src[i]);
}

void f32_to_bf16_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits_portable(src[i]);
}

void bf16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}

#if AMPCTL_CONVERT_X86

// ---- f16: F16C, 8 lanes ----

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  f32_to_f16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  f16_to_f32_scalar(src + i, dst + i, n - i);
}

// ---- bf16: AVX2, 8 lanes ----

__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* src, uint16_t* dst, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x0040);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i top = _mm256_srli_epi32(x, 16);
    const __m256i lane_bias = _mm256_add_epi32(bias, _mm256_and_si256(top, one));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, lane_bias), 16);
    // AVX2 only compares signed; |x| and the inf pattern are both non-negative as int32.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
    // Every lane is in [0, 0xffff], so the saturating pack is a plain narrowing.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
  f32_to_bf16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f);
  }
  bf16_to_f32_scalar(src + i, dst + i, n - i);
}

// GCC 12's AVX-512 intrinsics seed their unused merge operand with a self-initialised
// _mm512_undefined_*(), which -Wmaybe-uninitialized flags (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// ---- f16: AVX-512F, 16 lanes ----

__attribute__((target("avx512f"))) void f32_to_f16_avx512(const float* src, uint16_t* dst,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  f32_to_f16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void f16_to_f32_avx512(const uint16_t* src, float* dst,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  f16_to_f32_scalar(src + i, dst + i, n - i);
}

// ---- bf16: AVX-512F, 16 lanes ----

__attribute__((target("avx512f"))) void f32_to_bf16_avx512(const float* src, uint16_t* dst,
                                                           size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __m512i top = _mm512_srli_epi32(x, 16);
    const __m512i lane_bias = _mm512_add_epi32(bias, _mm512_and_si512(top, one));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, lane_bias), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
    const __m512i r = _mm512_mask_or_epi32(rounded, nan, top, quiet);
    // VPMOVDW truncates; every lane is already in [0, 0xffff].
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
  f32_to_bf16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void bf16_to_f32_avx512(const uint16_t* src, float* dst,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  bf16_to_f32_scalar(src + i, dst + i, n - i);
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // AMPCTL_CONVERT_X86

struct Kernels {
  FromF32 f32_to_f16 = f32_to_f16_scalar;
  ToF32 f16_to_f32 = f16_to_f32_scalar;
  FromF32 f32_to_bf16 = f32_to_bf16_scalar;
  ToF32 bf16_to_f32 = bf16_to_f32_scalar;
  std::string name = "portable";
};

Kernels select_fast_kernels() {
  Kernels k;
#if AMPCTL_CONVERT_X86
  switch (cpu_isa()) {
    case CpuIsa::avx512:
      k.f32_to_f16 = f32_to_f16_avx512;
      k.f16_to_f32 = f16_to_f32_avx512;
      k.f32_to_bf16 = f32_to_bf16_avx512;
      k.bf16_to_f32 = bf16_to_f32_avx512;
      k.name = "f16: avx512f, bf16: avx512f";
      break;
    case CpuIsa::avx2:
      k.f32_to_f16 = f32_to_f16_f16c;
      k.f16_to_f32 = f16_to_f32_f16c;
      k.f32_to_bf16 = f32_to_bf16_avx2;
      k.bf16_to_f32 = bf16_to_f32_avx2;
      k.name = "f16: f16c, bf16: avx2";
      break;
    case CpuIsa::portable:
      break;
  }
#endif
  return k;
}

const Kernels& fast_kernels() {
  static const Kernels kernels = select_fast_kernels();
  return kernels;
}

}  // namespace

void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n, ConvertPath path) {
  if (path == ConvertPath::portable) {
    f32_to_f16_scalar(src, dst, n);
  } else {
    fast_kernels().f32_to_f16(src, dst, n);
  }
}

void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n, ConvertPath path) {
  if (path == ConvertPath::portable) {
    f16_to_f32_scalar(src, dst, n);
  } else {
    fast_kernels().f16_to_f32(src, dst, n);
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n, ConvertPath path) {
  if (path == ConvertPath::portable) {
    f32_to_bf16_scalar(src, dst, n);
  } else {
    fast_kernels().f32_to_bf16(src, dst, n);
  }
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n, ConvertPath path) {
  if (path == ConvertPath::portable) {
    bf16_to_f32_scalar(src, dst, n);
  } else {
    fast_kernels().bf16_to_f32(src, dst, n);
  }
}

const char* convert_fast_path_name() {
  return fast_kernels().name.c_str();
}

}  // namespace ampctl
