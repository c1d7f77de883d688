// The AVX-512 intrinsics the CPU backend's engine uses (cpu_simd.h, cpu_vector.cpp, cpu_gemm.cpp's
// packing and epilogue), implemented on AVX2 + FMA + F16C, so that the same source compiles a
// second time into the avx2 path (cpu_vector_avx2.cpp, cpu_gemm_avx2.cpp). Internal to
// lib/src/backend/cpu; include it only from those files, before anything else.
//
// A 16-lane vector is two YMM registers (lanes 0-7, 8-15; 8 doubles: 0-3, 4-7) and a mask is
// the same integer it is on AVX-512 (__mmask16 / __mmask8), expanded to a lane mask where an
// instruction needs one. Each emulated instruction performs, lane by lane, the IEEE operation of
// the instruction it stands for (VADDPS is VADDPS on 8 lanes twice; VMAXPS and VMINPD keep
// their second operand on NaN, as AVX's do; the conversions round by MXCSR or by their
// immediate alike), so a loop compiled on either gives the same bits. The horizontal reductions
// repeat GCC 12's own sequence (avx512fintrin.h's __MM512_REDUCE_OP). Masked loads and stores
// suppress faults on the masked-off lanes as AVX-512's do (VMASKMOVPS for 32-bit lanes; 16-bit
// lanes through a stack copy of the lanes asked for).
//
// Two instructions are emulated only on the domain the engine uses them on (stated there):
//   _mm512_scalef_pd(x, q): x * 2^q for integral q in [-1022, 1023] (or x a NaN);
//   _mm512_cvttpd_epi64(x): x truncated, for |x| < 2^31 (other lanes: any value).
//
// Every function carries the AVX2 target attribute (AMPCTL_AVX2), so the library builds without
// -march flags and the binary runs on any x86-64: the functions that use them are reached only
// on the avx2 path (core/cpu_isa.h). The names are swapped in by macros after <immintrin.h> has
// been read, so GCC's own AVX-512 declarations stay as they are.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define AMPCTL_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AMPCTL_EMU_INLINE AMPCTL_AVX2 inline __attribute__((always_inline))

namespace ampctl::cpu::emu {

struct m512 {
  __m256 lo, hi;
};
struct m512d {
  __m256d lo, hi;
};
struct m512i {
  __m256i lo, hi;
};

// ---- masks ----
AMPCTL_EMU_INLINE __m256i lanes32(unsigned bits8) {
  const __m256i b = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits8)), b), b);
}
AMPCTL_EMU_INLINE __m256i lanes64(unsigned bits4) {
  const __m256i b = _mm256_setr_epi64x(1, 2, 4, 8);
  return _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(bits4), b), b);
}
AMPCTL_EMU_INLINE __m256 lo_mask_ps(__mmask16 k) {
  return _mm256_castsi256_ps(lanes32(k & 0xffu));
}
AMPCTL_EMU_INLINE __m256 hi_mask_ps(__mmask16 k) {
  return _mm256_castsi256_ps(lanes32((k >> 8) & 0xffu));
}
AMPCTL_EMU_INLINE __mmask16 to_mask(__m256 lo, __m256 hi) {
  return static_cast<__mmask16>(static_cast<unsigned>(_mm256_movemask_ps(lo)) |
                                (static_cast<unsigned>(_mm256_movemask_ps(hi)) << 8));
}
AMPCTL_EMU_INLINE __mmask16 to_mask(__m256i lo, __m256i hi) {
  return to_mask(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi));
}
AMPCTL_EMU_INLINE __mmask8 to_mask8(__m256d lo, __m256d hi) {
  return static_cast<__mmask8>(static_cast<unsigned>(_mm256_movemask_pd(lo)) |
                               (static_cast<unsigned>(_mm256_movemask_pd(hi)) << 4));
}

// ---- set, load, store ----
AMPCTL_EMU_INLINE m512 set1_ps(float v) {
  const __m256 x = _mm256_set1_ps(v);
  return {x, x};
}
AMPCTL_EMU_INLINE m512d set1_pd(double v) {
  const __m256d x = _mm256_set1_pd(v);
  return {x, x};
}
AMPCTL_EMU_INLINE m512i set1_epi32(int v) {
  const __m256i x = _mm256_set1_epi32(v);
  return {x, x};
}
AMPCTL_EMU_INLINE m512i set1_epi64(long long v) {
  const __m256i x = _mm256_set1_epi64x(v);
  return {x, x};
}
AMPCTL_EMU_INLINE m512 setzero_ps() {
  return {_mm256_setzero_ps(), _mm256_setzero_ps()};
}
AMPCTL_EMU_INLINE m512d setzero_pd() {
  return {_mm256_setzero_pd(), _mm256_setzero_pd()};
}
AMPCTL_EMU_INLINE m512i setzero_si512() {
  return {_mm256_setzero_si256(), _mm256_setzero_si256()};
}
AMPCTL_EMU_INLINE m512 loadu_ps(const void* p) {
  const float* f = static_cast<const float*>(p);
  return {_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)};
}
AMPCTL_EMU_INLINE m512d loadu_pd(const void* p) {
  const double* f = static_cast<const double*>(p);
  return {_mm256_loadu_pd(f), _mm256_loadu_pd(f + 4)};
}
AMPCTL_EMU_INLINE m512i loadu_si512(const void* p) {
  const __m256i* f = static_cast<const __m256i*>(p);
  return {_mm256_loadu_si256(f), _mm256_loadu_si256(f + 1)};
}
AMPCTL_EMU_INLINE void storeu_ps(void* p, m512 v) {
  float* f = static_cast<float*>(p);
  _mm256_storeu_ps(f, v.lo);
  _mm256_storeu_ps(f + 8, v.hi);
}
AMPCTL_EMU_INLINE void storeu_pd(void* p, m512d v) {
  double* f = static_cast<double*>(p);
  _mm256_storeu_pd(f, v.lo);
  _mm256_storeu_pd(f + 4, v.hi);
}
AMPCTL_EMU_INLINE void storeu_si512(void* p, m512i v) {
  __m256i* f = static_cast<__m256i*>(p);
  _mm256_storeu_si256(f, v.lo);
  _mm256_storeu_si256(f + 1, v.hi);
}
AMPCTL_EMU_INLINE m512 maskz_loadu_ps(__mmask16 k, const void* p) {
  const float* f = static_cast<const float*>(p);
  if (k == 0xffff) return loadu_ps(p);
  return {_mm256_maskload_ps(f, lanes32(k & 0xffu)), _mm256_maskload_ps(f + 8, lanes32(k >> 8))};
}
AMPCTL_EMU_INLINE void mask_storeu_ps(void* p, __mmask16 k, m512 v) {
  float* f = static_cast<float*>(p);
  if (k == 0xffff) {
    storeu_ps(p, v);
    return;
  }
  _mm256_maskstore_ps(f, lanes32(k & 0xffu), v.lo);
  _mm256_maskstore_ps(f + 8, lanes32(k >> 8), v.hi);
}
// 16 lanes of 16 bits.
AMPCTL_EMU_INLINE __m256i maskz_loadu_epi16(__mmask16 k, const void* p) {
  if (k == 0xffff) return _mm256_loadu_si256(static_cast<const __m256i*>(p));
  alignas(32) uint16_t b[16] = {};
  const uint16_t* s = static_cast<const uint16_t*>(p);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1u) b[i] = s[i];
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
}
AMPCTL_EMU_INLINE void mask_storeu_epi16(void* p, __mmask16 k, __m256i v) {
  if (k == 0xffff) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), v);
    return;
  }
  alignas(32) uint16_t b[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), v);
  uint16_t* d = static_cast<uint16_t*>(p);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1u) d[i] = b[i];
}

// ---- casts, halves ----
AMPCTL_EMU_INLINE m512i castps_si512(m512 v) {
  return {_mm256_castps_si256(v.lo), _mm256_castps_si256(v.hi)};
}
AMPCTL_EMU_INLINE m512 castsi512_ps(m512i v) {
  return {_mm256_castsi256_ps(v.lo), _mm256_castsi256_ps(v.hi)};
}
AMPCTL_EMU_INLINE m512d castps_pd(m512 v) {
  return {_mm256_castps_pd(v.lo), _mm256_castps_pd(v.hi)};
}
AMPCTL_EMU_INLINE m512d castsi512_pd(m512i v) {
  return {_mm256_castsi256_pd(v.lo), _mm256_castsi256_pd(v.hi)};
}
AMPCTL_EMU_INLINE m512i castpd_si512(m512d v) {
  return {_mm256_castpd_si256(v.lo), _mm256_castpd_si256(v.hi)};
}
AMPCTL_EMU_INLINE __m256 castps512_ps256(m512 v) {
  return v.lo;
}
AMPCTL_EMU_INLINE m512 castps256_ps512(__m256 v) {
  return {v, _mm256_setzero_ps()};  // the upper half is undefined on AVX-512
}
template <int I>
AMPCTL_EMU_INLINE __m256 extractf32x8_ps(m512 v) {
  return I ? v.hi : v.lo;
}
template <int I>
AMPCTL_EMU_INLINE __m256d extractf64x4_pd(m512d v) {
  return I ? v.hi : v.lo;
}
template <int I>
AMPCTL_EMU_INLINE m512 insertf32x8(m512 v, __m256 h) {
  if (I) {
    v.hi = h;
  } else {
    v.lo = h;
  }
  return v;
}

// ---- float arithmetic ----
#define AMPCTL_EMU_BINARY(name, op, T)       \
  AMPCTL_EMU_INLINE T name(T a, T b) {       \
    return {op(a.lo, b.lo), op(a.hi, b.hi)}; \
  }
AMPCTL_EMU_BINARY(add_ps, _mm256_add_ps, m512)
AMPCTL_EMU_BINARY(sub_ps, _mm256_sub_ps, m512)
AMPCTL_EMU_BINARY(mul_ps, _mm256_mul_ps, m512)
AMPCTL_EMU_BINARY(div_ps, _mm256_div_ps, m512)
AMPCTL_EMU_BINARY(max_ps, _mm256_max_ps, m512)
AMPCTL_EMU_BINARY(add_pd, _mm256_add_pd, m512d)
AMPCTL_EMU_BINARY(sub_pd, _mm256_sub_pd, m512d)
AMPCTL_EMU_BINARY(mul_pd, _mm256_mul_pd, m512d)
AMPCTL_EMU_BINARY(div_pd, _mm256_div_pd, m512d)
AMPCTL_EMU_BINARY(min_pd, _mm256_min_pd, m512d)
AMPCTL_EMU_BINARY(and_si512, _mm256_and_si256, m512i)
AMPCTL_EMU_BINARY(or_si512, _mm256_or_si256, m512i)
AMPCTL_EMU_BINARY(xor_si512, _mm256_xor_si256, m512i)
AMPCTL_EMU_BINARY(add_epi32, _mm256_add_epi32, m512i)
AMPCTL_EMU_BINARY(add_epi64, _mm256_add_epi64, m512i)
AMPCTL_EMU_BINARY(max_epu32, _mm256_max_epu32, m512i)
#undef AMPCTL_EMU_BINARY

AMPCTL_EMU_INLINE m512 sqrt_ps(m512 a) {
  return {_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)};
}
AMPCTL_EMU_INLINE m512 abs_ps(m512 a) {
  const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  return {_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m)};
}
AMPCTL_EMU_INLINE m512d fmadd_pd(m512d a, m512d b, m512d c) {
  return {_mm256_fmadd_pd(a.lo, b.lo, c.lo), _mm256_fmadd_pd(a.hi, b.hi, c.hi)};
}
AMPCTL_EMU_INLINE m512d fmsub_pd(m512d a, m512d b, m512d c) {
  return {_mm256_fmsub_pd(a.lo, b.lo, c.lo), _mm256_fmsub_pd(a.hi, b.hi, c.hi)};
}
template <int Imm>
AMPCTL_EMU_INLINE m512d roundscale_pd(m512d a) {
  static_assert((Imm & 0xf0) == 0, "roundscale with a scale is not emulated");
  return {_mm256_round_pd(a.lo, Imm), _mm256_round_pd(a.hi, Imm)};
}
// x * 2^q for integral q in [-1022, 1023] (header comment).
AMPCTL_EMU_INLINE __m256d pow2_pd(__m256d q) {
  const __m256i e = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(q));
  return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(e, _mm256_set1_epi64x(1023)), 52));
}
AMPCTL_EMU_INLINE m512d scalef_pd(m512d x, m512d q) {
  return {_mm256_mul_pd(x.lo, pow2_pd(q.lo)), _mm256_mul_pd(x.hi, pow2_pd(q.hi))};
}

// ---- masked float ops: a lane of k takes the operation, others src (or zero) ----
AMPCTL_EMU_INLINE m512 mask_blend_ps(__mmask16 k, m512 a, m512 b) {
  return {_mm256_blendv_ps(a.lo, b.lo, lo_mask_ps(k)), _mm256_blendv_ps(a.hi, b.hi, hi_mask_ps(k))};
}
AMPCTL_EMU_INLINE m512d mask_blend_pd(__mmask8 k, m512d a, m512d b) {
  return {_mm256_blendv_pd(a.lo, b.lo, _mm256_castsi256_pd(lanes64(k & 0xfu))),
          _mm256_blendv_pd(a.hi, b.hi, _mm256_castsi256_pd(lanes64((k >> 4) & 0xfu)))};
}
AMPCTL_EMU_INLINE m512i mask_blend_epi64(__mmask8 k, m512i a, m512i b) {
  return castpd_si512(mask_blend_pd(k, castsi512_pd(a), castsi512_pd(b)));
}
AMPCTL_EMU_INLINE m512i mask_blend_epi32(__mmask16 k, m512i a, m512i b) {
  return castps_si512(mask_blend_ps(k, castsi512_ps(a), castsi512_ps(b)));
}
AMPCTL_EMU_INLINE m512 maskz_mov_ps(__mmask16 k, m512 a) {
  return {_mm256_and_ps(a.lo, lo_mask_ps(k)), _mm256_and_ps(a.hi, hi_mask_ps(k))};
}
AMPCTL_EMU_INLINE m512 mask_add_ps(m512 src, __mmask16 k, m512 a, m512 b) {
  return mask_blend_ps(k, src, add_ps(a, b));
}
AMPCTL_EMU_INLINE m512 maskz_mul_ps(__mmask16 k, m512 a, m512 b) {
  return maskz_mov_ps(k, mul_ps(a, b));
}
AMPCTL_EMU_INLINE m512 mask_max_ps(m512 src, __mmask16 k, m512 a, m512 b) {
  return mask_blend_ps(k, src, max_ps(a, b));
}
AMPCTL_EMU_INLINE m512i mask_max_epu32(m512i src, __mmask16 k, m512i a, m512i b) {
  return mask_blend_epi32(k, src, max_epu32(a, b));
}
AMPCTL_EMU_INLINE m512i mask_or_epi32(m512i src, __mmask16 k, m512i a, m512i b) {
  return mask_blend_epi32(k, src, or_si512(a, b));
}

// ---- compares into masks ----
template <int P>
AMPCTL_EMU_INLINE __mmask16 cmp_ps_mask(m512 a, m512 b) {
  return to_mask(_mm256_cmp_ps(a.lo, b.lo, P), _mm256_cmp_ps(a.hi, b.hi, P));
}
template <int P>
AMPCTL_EMU_INLINE __mmask16 mask_cmp_ps_mask(__mmask16 k, m512 a, m512 b) {
  return static_cast<__mmask16>(k & cmp_ps_mask<P>(a, b));
}
template <int P>
AMPCTL_EMU_INLINE __mmask8 cmp_pd_mask(m512d a, m512d b) {
  return to_mask8(_mm256_cmp_pd(a.lo, b.lo, P), _mm256_cmp_pd(a.hi, b.hi, P));
}
// Unsigned a >= b: max(a, b) == a.
AMPCTL_EMU_INLINE __mmask16 cmpge_epu32_mask(m512i a, m512i b) {
  return to_mask(_mm256_cmpeq_epi32(_mm256_max_epu32(a.lo, b.lo), a.lo),
                 _mm256_cmpeq_epi32(_mm256_max_epu32(a.hi, b.hi), a.hi));
}
AMPCTL_EMU_INLINE __mmask16 mask_cmpge_epu32_mask(__mmask16 k, m512i a, m512i b) {
  return static_cast<__mmask16>(k & cmpge_epu32_mask(a, b));
}
AMPCTL_EMU_INLINE __mmask16 cmpgt_epu32_mask(m512i a, m512i b) {
  return static_cast<__mmask16>(~cmpge_epu32_mask(b, a));
}
AMPCTL_EMU_INLINE __mmask16 mask_cmplt_epu32_mask(__mmask16 k, m512i a, m512i b) {
  return static_cast<__mmask16>(k & ~cmpge_epu32_mask(a, b));
}
AMPCTL_EMU_INLINE __mmask16 cmpgt_epi32_mask(m512i a, m512i b) {
  return to_mask(_mm256_cmpgt_epi32(a.lo, b.lo), _mm256_cmpgt_epi32(a.hi, b.hi));
}
AMPCTL_EMU_INLINE __mmask16 mask_cmpeq_epi32_mask(__mmask16 k, m512i a, m512i b) {
  return static_cast<__mmask16>(
      k & to_mask(_mm256_cmpeq_epi32(a.lo, b.lo), _mm256_cmpeq_epi32(a.hi, b.hi)));
}
AMPCTL_EMU_INLINE __mmask8 test_epi64_mask(m512i a, m512i b) {
  const __m256i z = _mm256_setzero_si256();
  const __m256i lo = _mm256_cmpeq_epi64(_mm256_and_si256(a.lo, b.lo), z);
  const __m256i hi = _mm256_cmpeq_epi64(_mm256_and_si256(a.hi, b.hi), z);
  return static_cast<__mmask8>(~to_mask8(_mm256_castsi256_pd(lo), _mm256_castsi256_pd(hi)));
}

// ---- integer shifts ----
template <int N>
AMPCTL_EMU_INLINE m512i srli_epi32(m512i a) {
  return {_mm256_srli_epi32(a.lo, N), _mm256_srli_epi32(a.hi, N)};
}
template <int N>
AMPCTL_EMU_INLINE m512i slli_epi32(m512i a) {
  return {_mm256_slli_epi32(a.lo, N), _mm256_slli_epi32(a.hi, N)};
}
template <int N>
AMPCTL_EMU_INLINE m512i slli_epi64(m512i a) {
  return {_mm256_slli_epi64(a.lo, N), _mm256_slli_epi64(a.hi, N)};
}

// ---- conversions ----
AMPCTL_EMU_INLINE m512d cvtps_pd(__m256 a) {
  return {_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))};
}
AMPCTL_EMU_INLINE __m256 cvtpd_ps(m512d a) {
  return _mm256_set_m128(_mm256_cvtpd_ps(a.hi), _mm256_cvtpd_ps(a.lo));
}
AMPCTL_EMU_INLINE m512 cvtph_ps(__m256i h) {
  return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
          _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
template <int R>
AMPCTL_EMU_INLINE __m256i cvtps_ph(m512 v) {
  return _mm256_set_m128i(_mm256_cvtps_ph(v.hi, R), _mm256_cvtps_ph(v.lo, R));
}
AMPCTL_EMU_INLINE m512i cvtepu16_epi32(__m256i h) {
  return {_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)),
          _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1))};
}
// VPMOVDW: the low 16 bits of each lane.
AMPCTL_EMU_INLINE __m256i cvtepi32_epi16(m512i a) {
  const __m256i m = _mm256_set1_epi32(0xffff);
  const __m256i p = _mm256_packus_epi32(_mm256_and_si256(a.lo, m), _mm256_and_si256(a.hi, m));
  return _mm256_permute4x64_epi64(p, 0xd8);
}
// Truncation for |x| < 2^31 (header comment).
AMPCTL_EMU_INLINE m512i cvttpd_epi64(m512d a) {
  return {_mm256_cvtepi32_epi64(_mm256_cvttpd_epi32(a.lo)),
          _mm256_cvtepi32_epi64(_mm256_cvttpd_epi32(a.hi))};
}

// ---- permutes ----
// Lane i := table[idx[i] & 7].
AMPCTL_EMU_INLINE __m256d permute8_pd(__m256i idx, m512d table) {
  // 64-bit index j as the 32-bit pair (2j, 2j + 1) within one half, the half by bit 2 of j.
  const __m256i j = _mm256_and_si256(idx, _mm256_set1_epi64x(7));
  const __m256i two_j = _mm256_slli_epi64(_mm256_and_si256(j, _mm256_set1_epi64x(3)), 1);
  const __m256i pair =
      _mm256_or_si256(two_j, _mm256_slli_epi64(_mm256_add_epi64(two_j, _mm256_set1_epi64x(1)), 32));
  const __m256 from_lo = _mm256_permutevar8x32_ps(_mm256_castpd_ps(table.lo), pair);
  const __m256 from_hi = _mm256_permutevar8x32_ps(_mm256_castpd_ps(table.hi), pair);
  const __m256i upper = _mm256_cmpgt_epi64(j, _mm256_set1_epi64x(3));
  return _mm256_castps_pd(_mm256_blendv_ps(from_lo, from_hi, _mm256_castsi256_ps(upper)));
}
AMPCTL_EMU_INLINE m512d permutexvar_pd(m512i idx, m512d table) {
  return {permute8_pd(idx.lo, table), permute8_pd(idx.hi, table)};
}
// Lane i := (idx[i] & 8 ? b : a)[idx[i] & 7] (VPERMT2Q, bits 0-3 of the index).
AMPCTL_EMU_INLINE m512i permutex2var_epi64(m512i a, m512i idx, m512i b) {
  const m512d ad = castsi512_pd(a), bd = castsi512_pd(b);
  const __m256i z = _mm256_setzero_si256();
  const __m256i eight = _mm256_set1_epi64x(8);
  m512i r;
  r.lo = _mm256_castpd_si256(_mm256_blendv_pd(
      permute8_pd(idx.lo, ad), permute8_pd(idx.lo, bd),
      _mm256_castsi256_pd(_mm256_cmpgt_epi64(_mm256_and_si256(idx.lo, eight), z))));
  r.hi = _mm256_castpd_si256(_mm256_blendv_pd(
      permute8_pd(idx.hi, ad), permute8_pd(idx.hi, bd),
      _mm256_castsi256_pd(_mm256_cmpgt_epi64(_mm256_and_si256(idx.hi, eight), z))));
  return r;
}
// Within each 128-bit lane, as SHUFPS / UNPCK*PS.
template <int Imm>
AMPCTL_EMU_INLINE m512 shuffle_ps(m512 a, m512 b) {
  return {_mm256_shuffle_ps(a.lo, b.lo, Imm), _mm256_shuffle_ps(a.hi, b.hi, Imm)};
}
AMPCTL_EMU_INLINE m512 unpacklo_ps(m512 a, m512 b) {
  return {_mm256_unpacklo_ps(a.lo, b.lo), _mm256_unpacklo_ps(a.hi, b.hi)};
}
AMPCTL_EMU_INLINE m512 unpackhi_ps(m512 a, m512 b) {
  return {_mm256_unpackhi_ps(a.lo, b.lo), _mm256_unpackhi_ps(a.hi, b.hi)};
}
// VSHUFF32X4: 128-bit lanes 0, 1 from a, 2, 3 from b, each by two bits of Imm.
template <int L>
AMPCTL_EMU_INLINE __m128 lane128(m512 v) {
  if constexpr (L == 0) return _mm256_castps256_ps128(v.lo);
  if constexpr (L == 1) return _mm256_extractf128_ps(v.lo, 1);
  if constexpr (L == 2) return _mm256_castps256_ps128(v.hi);
  return _mm256_extractf128_ps(v.hi, 1);
}
template <int Imm>
AMPCTL_EMU_INLINE m512 shuffle_f32x4(m512 a, m512 b) {
  return {_mm256_set_m128(lane128<(Imm >> 2) & 3>(a), lane128<Imm & 3>(a)),
          _mm256_set_m128(lane128<(Imm >> 6) & 3>(b), lane128<(Imm >> 4) & 3>(b))};
}
template <int Scale>
AMPCTL_EMU_INLINE m512 i32gather_ps(m512i idx, const void* base) {
  const float* f = static_cast<const float*>(base);
  return {_mm256_i32gather_ps(f, idx.lo, Scale), _mm256_i32gather_ps(f, idx.hi, Scale)};
}

// ---- reductions (GCC 12's sequence: halves, then 128-bit lanes, then within) ----
AMPCTL_EMU_INLINE float reduce_max_ps(m512 a) {
  const __m256 t3 = _mm256_max_ps(a.hi, a.lo);
  const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t7 = _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2));
  const __m128 t8 = _mm_max_ps(t6, t7);
  const __m128 t9 = _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1));
  return _mm_cvtss_f32(_mm_max_ps(t8, t9));
}
AMPCTL_EMU_INLINE unsigned reduce_max_epu32(m512i a) {
  const __m256i t3 = _mm256_max_epu32(a.hi, a.lo);
  const __m128i t6 = _mm_max_epu32(_mm256_extracti128_si256(t3, 1), _mm256_castsi256_si128(t3));
  const __m128i t8 = _mm_max_epu32(t6, _mm_shuffle_epi32(t6, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m128i t10 = _mm_max_epu32(t8, _mm_shuffle_epi32(t8, _MM_SHUFFLE(0, 1, 0, 1)));
  return static_cast<unsigned>(_mm_cvtsi128_si32(t10));
}

}  // namespace ampctl::cpu::emu

// ---- the names, swapped in ----
#define __m512 ::ampctl::cpu::emu::m512
#define __m512d ::ampctl::cpu::emu::m512d
#define __m512i ::ampctl::cpu::emu::m512i
#define AMPCTL_EMU_NAME(name) ::ampctl::cpu::emu::name

#undef _mm512_set1_ps
#define _mm512_set1_ps AMPCTL_EMU_NAME(set1_ps)
#undef _mm512_set1_pd
#define _mm512_set1_pd AMPCTL_EMU_NAME(set1_pd)
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 AMPCTL_EMU_NAME(set1_epi32)
#undef _mm512_set1_epi64
#define _mm512_set1_epi64 AMPCTL_EMU_NAME(set1_epi64)
#undef _mm512_setzero_ps
#define _mm512_setzero_ps AMPCTL_EMU_NAME(setzero_ps)
#undef _mm512_setzero_pd
#define _mm512_setzero_pd AMPCTL_EMU_NAME(setzero_pd)
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 AMPCTL_EMU_NAME(setzero_si512)
#undef _mm512_loadu_ps
#define _mm512_loadu_ps AMPCTL_EMU_NAME(loadu_ps)
#undef _mm512_load_ps
#define _mm512_load_ps AMPCTL_EMU_NAME(loadu_ps)
#undef _mm512_loadu_pd
#define _mm512_loadu_pd AMPCTL_EMU_NAME(loadu_pd)
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 AMPCTL_EMU_NAME(loadu_si512)
#undef _mm512_load_si512
#define _mm512_load_si512 AMPCTL_EMU_NAME(loadu_si512)
#undef _mm512_storeu_ps
#define _mm512_storeu_ps AMPCTL_EMU_NAME(storeu_ps)
#undef _mm512_store_ps
#define _mm512_store_ps AMPCTL_EMU_NAME(storeu_ps)
#undef _mm512_store_pd
#define _mm512_store_pd AMPCTL_EMU_NAME(storeu_pd)
#undef _mm512_storeu_si512
#define _mm512_storeu_si512 AMPCTL_EMU_NAME(storeu_si512)
#undef _mm512_store_si512
#define _mm512_store_si512 AMPCTL_EMU_NAME(storeu_si512)
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps AMPCTL_EMU_NAME(maskz_loadu_ps)
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps AMPCTL_EMU_NAME(mask_storeu_ps)
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 AMPCTL_EMU_NAME(maskz_loadu_epi16)
#undef _mm256_mask_storeu_epi16
#define _mm256_mask_storeu_epi16 AMPCTL_EMU_NAME(mask_storeu_epi16)
#undef _mm512_castps_si512
#define _mm512_castps_si512 AMPCTL_EMU_NAME(castps_si512)
#undef _mm512_castsi512_ps
#define _mm512_castsi512_ps AMPCTL_EMU_NAME(castsi512_ps)
#undef _mm512_castps_pd
#define _mm512_castps_pd AMPCTL_EMU_NAME(castps_pd)
#undef _mm512_castsi512_pd
#define _mm512_castsi512_pd AMPCTL_EMU_NAME(castsi512_pd)
#undef _mm512_castpd_si512
#define _mm512_castpd_si512 AMPCTL_EMU_NAME(castpd_si512)
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 AMPCTL_EMU_NAME(castps512_ps256)
#undef _mm512_castps256_ps512
#define _mm512_castps256_ps512 AMPCTL_EMU_NAME(castps256_ps512)
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps(v, i) AMPCTL_EMU_NAME(extractf32x8_ps)<(i)>(v)
#undef _mm512_extractf64x4_pd
#define _mm512_extractf64x4_pd(v, i) AMPCTL_EMU_NAME(extractf64x4_pd)<(i)>(v)
#undef _mm512_insertf32x8
#define _mm512_insertf32x8(v, h, i) AMPCTL_EMU_NAME(insertf32x8)<(i)>(v, h)
#undef _mm512_add_ps
#define _mm512_add_ps AMPCTL_EMU_NAME(add_ps)
#undef _mm512_sub_ps
#define _mm512_sub_ps AMPCTL_EMU_NAME(sub_ps)
#undef _mm512_mul_ps
#define _mm512_mul_ps AMPCTL_EMU_NAME(mul_ps)
#undef _mm512_div_ps
#define _mm512_div_ps AMPCTL_EMU_NAME(div_ps)
#undef _mm512_max_ps
#define _mm512_max_ps AMPCTL_EMU_NAME(max_ps)
#undef _mm512_sqrt_ps
#define _mm512_sqrt_ps AMPCTL_EMU_NAME(sqrt_ps)
#undef _mm512_abs_ps
#define _mm512_abs_ps AMPCTL_EMU_NAME(abs_ps)
#undef _mm512_add_pd
#define _mm512_add_pd AMPCTL_EMU_NAME(add_pd)
#undef _mm512_sub_pd
#define _mm512_sub_pd AMPCTL_EMU_NAME(sub_pd)
#undef _mm512_mul_pd
#define _mm512_mul_pd AMPCTL_EMU_NAME(mul_pd)
#undef _mm512_div_pd
#define _mm512_div_pd AMPCTL_EMU_NAME(div_pd)
#undef _mm512_min_pd
#define _mm512_min_pd AMPCTL_EMU_NAME(min_pd)
#undef _mm512_fmadd_pd
#define _mm512_fmadd_pd AMPCTL_EMU_NAME(fmadd_pd)
#undef _mm512_fmsub_pd
#define _mm512_fmsub_pd AMPCTL_EMU_NAME(fmsub_pd)
#undef _mm512_roundscale_pd
#define _mm512_roundscale_pd(a, imm) AMPCTL_EMU_NAME(roundscale_pd)<(imm)>(a)
#undef _mm512_scalef_pd
#define _mm512_scalef_pd AMPCTL_EMU_NAME(scalef_pd)
#undef _mm512_and_si512
#define _mm512_and_si512 AMPCTL_EMU_NAME(and_si512)
#undef _mm512_or_si512
#define _mm512_or_si512 AMPCTL_EMU_NAME(or_si512)
#undef _mm512_xor_si512
#define _mm512_xor_si512 AMPCTL_EMU_NAME(xor_si512)
#undef _mm512_add_epi32
#define _mm512_add_epi32 AMPCTL_EMU_NAME(add_epi32)
#undef _mm512_add_epi64
#define _mm512_add_epi64 AMPCTL_EMU_NAME(add_epi64)
#undef _mm512_max_epu32
#define _mm512_max_epu32 AMPCTL_EMU_NAME(max_epu32)
#undef _mm512_mask_blend_ps
#define _mm512_mask_blend_ps AMPCTL_EMU_NAME(mask_blend_ps)
#undef _mm512_mask_blend_pd
#define _mm512_mask_blend_pd AMPCTL_EMU_NAME(mask_blend_pd)
#undef _mm512_mask_blend_epi64
#define _mm512_mask_blend_epi64 AMPCTL_EMU_NAME(mask_blend_epi64)
#undef _mm512_maskz_mov_ps
#define _mm512_maskz_mov_ps AMPCTL_EMU_NAME(maskz_mov_ps)
#undef _mm512_mask_add_ps
#define _mm512_mask_add_ps AMPCTL_EMU_NAME(mask_add_ps)
#undef _mm512_maskz_mul_ps
#define _mm512_maskz_mul_ps AMPCTL_EMU_NAME(maskz_mul_ps)
#undef _mm512_mask_max_ps
#define _mm512_mask_max_ps AMPCTL_EMU_NAME(mask_max_ps)
#undef _mm512_mask_max_epu32
#define _mm512_mask_max_epu32 AMPCTL_EMU_NAME(mask_max_epu32)
#undef _mm512_mask_or_epi32
#define _mm512_mask_or_epi32 AMPCTL_EMU_NAME(mask_or_epi32)
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask(a, b, p) AMPCTL_EMU_NAME(cmp_ps_mask)<(p)>(a, b)
#undef _mm512_mask_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask(k, a, b, p) AMPCTL_EMU_NAME(mask_cmp_ps_mask)<(p)>(k, a, b)
#undef _mm512_cmp_pd_mask
#define _mm512_cmp_pd_mask(a, b, p) AMPCTL_EMU_NAME(cmp_pd_mask)<(p)>(a, b)
#undef _mm512_cmpge_epu32_mask
#define _mm512_cmpge_epu32_mask AMPCTL_EMU_NAME(cmpge_epu32_mask)
#undef _mm512_mask_cmpge_epu32_mask
#define _mm512_mask_cmpge_epu32_mask AMPCTL_EMU_NAME(mask_cmpge_epu32_mask)
#undef _mm512_cmpgt_epu32_mask
#define _mm512_cmpgt_epu32_mask AMPCTL_EMU_NAME(cmpgt_epu32_mask)
#undef _mm512_mask_cmplt_epu32_mask
#define _mm512_mask_cmplt_epu32_mask AMPCTL_EMU_NAME(mask_cmplt_epu32_mask)
#undef _mm512_cmpgt_epi32_mask
#define _mm512_cmpgt_epi32_mask AMPCTL_EMU_NAME(cmpgt_epi32_mask)
#undef _mm512_mask_cmpeq_epi32_mask
#define _mm512_mask_cmpeq_epi32_mask AMPCTL_EMU_NAME(mask_cmpeq_epi32_mask)
#undef _mm512_test_epi64_mask
#define _mm512_test_epi64_mask AMPCTL_EMU_NAME(test_epi64_mask)
#undef _mm512_srli_epi32
#define _mm512_srli_epi32(a, n) AMPCTL_EMU_NAME(srli_epi32)<(n)>(a)
#undef _mm512_slli_epi32
#define _mm512_slli_epi32(a, n) AMPCTL_EMU_NAME(slli_epi32)<(n)>(a)
#undef _mm512_slli_epi64
#define _mm512_slli_epi64(a, n) AMPCTL_EMU_NAME(slli_epi64)<(n)>(a)
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd AMPCTL_EMU_NAME(cvtps_pd)
#undef _mm512_cvtpd_ps
#define _mm512_cvtpd_ps AMPCTL_EMU_NAME(cvtpd_ps)
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps AMPCTL_EMU_NAME(cvtph_ps)
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph(v, r) AMPCTL_EMU_NAME(cvtps_ph)<(r)>(v)
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 AMPCTL_EMU_NAME(cvtepu16_epi32)
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16 AMPCTL_EMU_NAME(cvtepi32_epi16)
#undef _mm512_cvttpd_epi64
#define _mm512_cvttpd_epi64 AMPCTL_EMU_NAME(cvttpd_epi64)
#undef _mm512_permutexvar_pd
#define _mm512_permutexvar_pd AMPCTL_EMU_NAME(permutexvar_pd)
#undef _mm512_permutex2var_epi64
#define _mm512_permutex2var_epi64 AMPCTL_EMU_NAME(permutex2var_epi64)
#undef _mm512_shuffle_ps
#define _mm512_shuffle_ps(a, b, imm) AMPCTL_EMU_NAME(shuffle_ps)<(imm)>(a, b)
#undef _mm512_unpacklo_ps
#define _mm512_unpacklo_ps AMPCTL_EMU_NAME(unpacklo_ps)
#undef _mm512_unpackhi_ps
#define _mm512_unpackhi_ps AMPCTL_EMU_NAME(unpackhi_ps)
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) AMPCTL_EMU_NAME(shuffle_f32x4)<(imm)>(a, b)
#undef _mm512_i32gather_ps
#define _mm512_i32gather_ps(idx, base, s) AMPCTL_EMU_NAME(i32gather_ps)<(s)>(idx, base)
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps AMPCTL_EMU_NAME(reduce_max_ps)
#undef _mm512_reduce_max_epu32
#define _mm512_reduce_max_epu32 AMPCTL_EMU_NAME(reduce_max_epu32)

// The engine's target attribute, for the functions compiled against the names above.
#define AMPCTL_AVX512 AMPCTL_AVX2
