// AVX-512 building blocks of the CPU backend's fast paths (GEMM packing and epilogues, the
// elementwise passes): 16-lane loads that widen f32 / f16 / bf16 storage to float exactly, and
// stores that round float to the storage dtype exactly as half.h's scalar code does (so the
// fast and the portable paths give identical bits; convert.cpp explains why each instruction
// matches). Internal to lib/src/backend/cpu.
//
// Every function here carries the AVX-512 target attribute, so the library builds without
// -march flags; callers are themselves AMPCTL_AVX512 functions, reached only after
// cpu_features().avx512 said yes (or, in the avx2 builds, .avx2: cpu_avx512_on_avx2.h). Tails
// use masked loads and stores (fault-suppressing).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "ampctl/core/half.h"

// cpu_avx512_on_avx2.h defines it first (the same code compiled for the avx2 path), and renames
// `simd` by a macro (simd_avx2), so that the two builds' inline functions stay apart.
#ifndef AMPCTL_AVX512
#define AMPCTL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))
#endif
#define AMPCTL_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma,avx512bf16")))
#define AMPCTL_SIMD_INLINE inline __attribute__((always_inline))

// GCC 12's AVX-512 intrinsics seed their unused merge operand with a self-initialised
// _mm512_undefined_*(), which -Wmaybe-uninitialized flags (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ampctl::cpu::simd {

// The first n (<= 16) lanes.
AMPCTL_SIMD_INLINE __mmask16 head_mask(size_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// ---- widening loads (exact) ----
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 load16(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 load16(const half* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 load16(const bfloat16* p, __mmask16 m) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 load16(const half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 load16(const bfloat16* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// One element, widened exactly (VCVTPH2PS on one lane for f16).
AMPCTL_AVX512 AMPCTL_SIMD_INLINE float widen(float v) {
  return v;
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE float widen(half v) {
  return _cvtsh_ss(v.bits);
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE float widen(bfloat16 v) {
  return bits_float(static_cast<uint32_t>(v.bits) << 16);
}

// ---- rounding to 16-bit storage ----
// f16: VCVTPS2PH with an explicit round-to-nearest-even immediate (ignores MXCSR.RC; keeps
// half subnormals; quiets NaN keeping sign and top payload bits: half.h's rules).
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m256i round_f16(__m512 v) {
  return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
}
// bf16: float_to_bf16_bits_portable lane by lane (add 0x7fff plus the lowest kept bit; NaN keeps
// its top 16 bits with the quiet bit set). Not VCVTNEPS2BF16, which flushes float subnormals.
AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m256i round_bf16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i top = _mm512_srli_epi32(x, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(top, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i r = _mm512_mask_or_epi32(rounded, nan, top, _mm512_set1_epi32(0x0040));
  return _mm512_cvtepi32_epi16(r);
}

AMPCTL_AVX512 AMPCTL_SIMD_INLINE void store16(float* p, __m512 v, __mmask16 m) {
  _mm512_mask_storeu_ps(p, m, v);
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void store16(half* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, round_f16(v));
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void store16(bfloat16* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, round_bf16(v));
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void store16(float* p, __m512 v) {
  _mm512_storeu_ps(p, v);
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void store16(half* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), round_f16(v));
}
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void store16(bfloat16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), round_bf16(v));
}

// In-register transpose of a 16 x 16 float block: afterwards r[c] holds column c (lane q = old
// row q). Unpack pairs, then 4 x 4 blocks within 128-bit lanes, then the lanes themselves.
AMPCTL_AVX512 AMPCTL_SIMD_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  // u[4g + j], 128-bit lane L: rows 4g..4g+3 of column 4L + j.
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

}  // namespace ampctl::cpu::simd

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
