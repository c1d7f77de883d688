// The CPU backend's packed, register-tiled matrix product (cpu_gemm.h has the contract and the
// numerics).
//
// Structure (GotoBLAS / BLIS): each thread owns a contiguous range of output columns (or rows,
// for narrow outputs) in whole micro-tiles and, for each block of kKc values of k, packs its
// slice of op(B) into column slivers of kNR and then, block by block of kMc rows, op(A) into row
// slivers of kMr; the micro-kernel keeps a kMr x kNR tile of C in 24 ZMM registers (12 rows x 2
// vectors) and streams one sliver of each. Partial sums of earlier k blocks live in C itself
// (f32 output, trivial epilogue) or in a float workspace; the last k block of a whole tile goes
// through the epilogue from the registers into C, that of an edge tile through a tile buffer on
// the stack (the same operations either way). Each element's sum runs over k in order in every
// case (k is never split between threads), so the thread count never changes a bit.
//
// Packed layouts (zero-padded to whole slivers, so edge tiles run the same kernel):
//   f32 kernel:  A sliver [k][kMr] floats, B sliver [k][kNR] floats.
//   bf16 kernel: A sliver [k/2][kMr][2] bf16, B sliver [k/2][kNR][2] bf16 (k padded to even
//                with a zero): the pairs VDPBF16PS multiplies lane by lane.
//
// Compiled twice: here for AVX-512 (GemmEngine::run), and by cpu_gemm_avx2.cpp with
// AMPCTL_GEMM_AVX2 for the avx2 path (GemmEngine::run_avx2): the same packing, blocking, split
// and epilogue on cpu_avx512_on_avx2.h's 16-lane vectors, a kMr x kNr = 6 x 16 tile in 12 YMM
// accumulators, and the f32 kernel only (no bf16 dot products or AMX). Each element is the same
// chain of fused multiply-adds in either build, so the two give the same bits.
#ifndef AMPCTL_GEMM_AVX2
#define AMPCTL_GEMM_AVX2 0
#endif

#include "cpu_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ampctl/core/convert.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/half.h"
#include "cpu_parallel.h"
#include "cpu_simd.h"

#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// GCC 12 flags the undefined pass-through operand inside _mm512_cvtps_ph (simd::round_f16).
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace ampctl::cpu {
namespace {

#if AMPCTL_GEMM_AVX2
// The avx2 build (cpu_gemm_avx2.cpp): a 6 x 16 tile in 12 YMM registers (6 rows x 2 vectors).
constexpr int64_t kMr = 6;
constexpr int64_t kNr = 16;
constexpr int64_t kMc = 120;      // rows of A per packed block (20 slivers; ~120 KiB in L2)
constexpr int64_t kKcF32 = 256;   // k per block: a B sliver is 16 KiB (half of L1)
constexpr int64_t kKcBf16 = 512;  // (no bf16 kernel on this path)
#else
constexpr int64_t kMr = 12;
constexpr int64_t kNr = 32;
constexpr int64_t kMc = 120;      // rows of A per packed block (10 slivers; ~120 KiB in L2)
constexpr int64_t kKcF32 = 256;   // k per block, f32 kernel: a B sliver is 32 KiB (L1)
constexpr int64_t kKcBf16 = 512;  // k per block, bf16 kernel: the same bytes
#endif
// The lanes of a sliver's row of A (pack_a_f32).
constexpr __mmask16 kMrMask = static_cast<__mmask16>((1u << kMr) - 1u);
constexpr int64_t kTile = kMr * kNr;
// The largest op(B) (all its k blocks: 512 KiB of floats) packed once and shared by the row parts.
constexpr int64_t kSharedBFloats = int64_t{1} << 17;
// The largest k block of op(B) for which a wide product is still split by rows (each part
// packing the whole panel): 2 MiB, a Sapphire Rapids core's L2.
constexpr int64_t kRowSplitBPanelBytes = int64_t{2} << 20;

#if !AMPCTL_GEMM_AVX2
// The path core/cpu_isa.h chose (AMPCTL_CPU_ISA may have forced a lower one).
CpuFeatures probe_features() {
  const CpuIsaChoice& c = cpu_isa_choice();
  CpuFeatures f;
  f.avx512 = c.isa == CpuIsa::avx512;
  f.avx512_bf16 = c.bf16_dot;
  f.amx_bf16 = c.amx;
  f.avx2 = c.isa == CpuIsa::avx2;
  f.vector = f.avx512 || f.avx2;
  return f;
}
#endif

// ---- packing for the f32 kernel (widening any float dtype exactly) ----

// Packs `count` (<= 16) source rows, each contiguous along l, as columns: dst[l * ld_dst + q] :=
// row q [l] for l < kc, q < 16 (rows past count are zero), storing the lanes of `store_mask`.
template <typename S>
AMPCTL_AVX512 void pack_rows_transposed(const S* const* rows, int count, int64_t kc, float* dst,
                                        int64_t ld_dst, __mmask16 store_mask) {
  for (int64_t l0 = 0; l0 < kc; l0 += 16) {
    const int64_t len = std::min<int64_t>(16, kc - l0);
    const __mmask16 m = simd::head_mask(static_cast<size_t>(len));
    __m512 r[16];
    for (int q = 0; q < 16; ++q)
      r[q] = q < count ? simd::load16(rows[q] + l0, m) : _mm512_setzero_ps();
    simd::transpose16(r);
    for (int64_t c = 0; c < len; ++c)
      _mm512_mask_storeu_ps(dst + (l0 + c) * ld_dst, store_mask, r[c]);
  }
}

#if AMPCTL_GEMM_AVX2
// 8 elements widened exactly to float (F16C for f16, a shift for bf16).
AMPCTL_EMU_INLINE __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
AMPCTL_EMU_INLINE __m256 load8(const half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
AMPCTL_EMU_INLINE __m256 load8(const bfloat16* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
#endif

template <typename S>
AMPCTL_AVX512 void pack_a_f32(const S* a, int64_t ld, bool trans, int64_t i0, int64_t mc,
                              int64_t p0, int64_t kc, float* dst) {
  for (int64_t s = 0; s < mc; s += kMr) {
    const int64_t mr = std::min(kMr, mc - s);
    float* d = dst + s * kc;
    if (trans) {  // element (i, l) at l * ld + i: a row of the sliver per l is contiguous
#if AMPCTL_GEMM_AVX2
      // 8 elements widened at once where they lie inside the row (ld >= the row's length), each
      // store overlapping the next row of the sliver by 2 floats, which that row then writes;
      // the last row of the sliver stores its 6 lanes only.
      if (mr == kMr && i0 + s + 8 <= ld) {
        const S* src = a + p0 * ld + i0 + s;
        for (int64_t l = 0; l + 1 < kc; ++l) _mm256_storeu_ps(d + l * kMr, load8(src + l * ld));
        _mm256_maskstore_ps(d + (kc - 1) * kMr, _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0),
                            load8(src + (kc - 1) * ld));
        continue;
      }
#endif
      const __mmask16 m = simd::head_mask(static_cast<size_t>(mr));
      for (int64_t l = 0; l < kc; ++l) {
        _mm512_mask_storeu_ps(d + l * kMr, kMrMask, simd::load16(a + (p0 + l) * ld + i0 + s, m));
      }
    } else {  // element (i, l) at i * ld + l: each row is contiguous along l; transpose
      const S* rows[16];
      for (int64_t r = 0; r < mr; ++r) rows[r] = a + (i0 + s + r) * ld + p0;
      pack_rows_transposed(rows, static_cast<int>(mr), kc, d, kMr, kMrMask);
    }
  }
}

// Rows [i0, i0 + mc) of a row-major A (not transposed), k [p0, p0 + kc), widened into rows of
// kKcF32 floats (kernel_f32<true>): no transpose. Rows up to the next whole sliver are zero.
template <typename S>
AMPCTL_AVX512 void pack_a_rows(const S* a, int64_t ld, int64_t i0, int64_t mc, int64_t p0,
                               int64_t kc, float* dst) {
  const int64_t rows = (mc + kMr - 1) / kMr * kMr;
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * kKcF32;
    const S* src = r < mc ? a + (i0 + r) * ld + p0 : nullptr;
    for (int64_t l = 0; l < kc; l += 16) {
      const __mmask16 m = simd::head_mask(static_cast<size_t>(kc - l));
      _mm512_mask_storeu_ps(d + l, m, src ? simd::load16(src + l, m) : _mm512_setzero_ps());
    }
  }
}

template <typename S>
AMPCTL_AVX512 void pack_b_f32(const S* b, int64_t ld, bool trans, int64_t j0, int64_t nc,
                              int64_t p0, int64_t kc, float* dst) {
  for (int64_t s = 0; s < nc; s += kNr) {
    const int64_t nr = std::min(kNr, nc - s);
    float* d = dst + s * kc;
    if (!trans) {  // element (l, j) at l * ld + j: contiguous along j
      const __mmask16 m0 = simd::head_mask(static_cast<size_t>(nr));
#if !AMPCTL_GEMM_AVX2
      const __mmask16 m1 = simd::head_mask(static_cast<size_t>(std::max<int64_t>(nr - 16, 0)));
#endif
      for (int64_t l = 0; l < kc; ++l) {
        const S* row = b + (p0 + l) * ld + j0 + s;
        _mm512_storeu_ps(d + l * kNr, simd::load16(row, m0));
#if !AMPCTL_GEMM_AVX2
        _mm512_storeu_ps(d + l * kNr + 16, simd::load16(row + 16, m1));
#endif
      }
    } else {  // element (l, j) at j * ld + l: each column is contiguous along l; transpose
      for (int64_t jg = 0; jg < kNr; jg += 16) {
        const S* cols[16];
        const int count = static_cast<int>(std::clamp<int64_t>(nr - jg, 0, 16));
        for (int q = 0; q < count; ++q) cols[q] = b + (j0 + s + jg + q) * ld + p0;
        pack_rows_transposed(cols, count, kc, d + jg, kNr, 0xffff);
      }
    }
  }
}

#if !AMPCTL_GEMM_AVX2
// ---- packing for the bf16 kernel (pairs along k) ----

// A: sliver [k/2][kMr][2]. kcp = kc rounded up to even.
AMPCTL_AVX512 void pack_a_bf16(const uint16_t* a, int64_t ld, bool trans, int64_t i0, int64_t mc,
                               int64_t p0, int64_t kc, uint16_t* dst) {
  const int64_t kcp = (kc + 1) & ~int64_t{1};
  for (int64_t s = 0; s < mc; s += kMr) {
    const int64_t mr = std::min(kMr, mc - s);
    uint16_t* d = dst + s * kcp;
    if (!trans) {  // rows contiguous along l: each pair is one 32-bit word of the source
      for (int64_t r = 0; r < mr; ++r) {
        const uint16_t* src = a + (i0 + s + r) * ld + p0;
        int64_t l = 0;
        for (; l + 1 < kc; l += 2) std::memcpy(d + (l / 2) * 2 * kMr + 2 * r, src + l, 4);
        if (l < kc) {
          d[(l / 2) * 2 * kMr + 2 * r] = src[l];
          d[(l / 2) * 2 * kMr + 2 * r + 1] = 0;
        }
      }
    } else {  // element (i, l) at l * ld + i
      for (int64_t l = 0; l < kcp; ++l) {
        uint16_t* out = d + (l / 2) * 2 * kMr + (l & 1);
        if (l < kc) {
          const uint16_t* src = a + (p0 + l) * ld + i0 + s;
          for (int64_t r = 0; r < mr; ++r) out[2 * r] = src[r];
        } else {
          for (int64_t r = 0; r < mr; ++r) out[2 * r] = 0;
        }
      }
    }
    for (int64_t r = mr; r < kMr; ++r) {
      for (int64_t l = 0; l < kcp; ++l) d[(l / 2) * 2 * kMr + 2 * r + (l & 1)] = 0;
    }
  }
}

// B: sliver [k/2][kNr][2].
AMPCTL_AVX512 void pack_b_bf16(const uint16_t* b, int64_t ld, bool trans, int64_t j0, int64_t nc,
                               int64_t p0, int64_t kc, uint16_t* dst) {
  const int64_t kcp = (kc + 1) & ~int64_t{1};
  // Interleave two rows of 32 bf16 into [32][2]: lanes 2j <- row0[j], 2j + 1 <- row1[j].
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int j = 0; j < 16; ++j) {
    lo_idx[2 * j] = static_cast<uint16_t>(j);
    lo_idx[2 * j + 1] = static_cast<uint16_t>(32 + j);
    hi_idx[2 * j] = static_cast<uint16_t>(16 + j);
    hi_idx[2 * j + 1] = static_cast<uint16_t>(48 + j);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  for (int64_t s = 0; s < nc; s += kNr) {
    const int64_t nr = std::min(kNr, nc - s);
    uint16_t* d = dst + s * kcp;
    if (!trans) {  // element (l, j) at l * ld + j: rows contiguous along j
      const __mmask32 m = nr >= 32 ? ~__mmask32{0} : ((__mmask32{1} << nr) - 1u);
      for (int64_t l = 0; l < kcp; l += 2) {
        const __m512i r0 = _mm512_maskz_loadu_epi16(m, b + (p0 + l) * ld + j0 + s);
        const __m512i r1 = l + 1 < kc ? _mm512_maskz_loadu_epi16(m, b + (p0 + l + 1) * ld + j0 + s)
                                      : _mm512_setzero_si512();
        _mm512_storeu_si512(d + l * kNr, _mm512_permutex2var_epi16(r0, lo, r1));
        _mm512_storeu_si512(d + l * kNr + 32, _mm512_permutex2var_epi16(r0, hi, r1));
      }
    } else {  // element (l, j) at j * ld + l: each pair is one 32-bit word of the source
      for (int64_t j = 0; j < nr; ++j) {
        const uint16_t* src = b + (j0 + s + j) * ld + p0;
        int64_t l = 0;
        for (; l + 1 < kc; l += 2) std::memcpy(d + (l / 2) * 2 * kNr + 2 * j, src + l, 4);
        if (l < kc) {
          d[(l / 2) * 2 * kNr + 2 * j] = src[l];
          d[(l / 2) * 2 * kNr + 2 * j + 1] = 0;
        }
      }
      for (int64_t j = nr; j < kNr; ++j) {
        for (int64_t l = 0; l < kcp; ++l) d[(l / 2) * 2 * kNr + 2 * j + (l & 1)] = 0;
      }
    }
  }
}

#endif  // !AMPCTL_GEMM_AVX2

// ---- micro-kernels: C tile (kMr x kNr) := [cin +] A sliver * B sliver ----
// The finished tile leaves the registers through `store`, row by row: as raw floats (StoreRaw:
// partial sums, an f32 C without epilogue, or the stack tile of an edge tile), or through the
// epilogue straight into C (StoreEpilogue: a whole tile of the last k block).

struct StoreRaw {
  float* out;
  int64_t ld;
  void begin() {}
  void end() {}
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void operator()(int r, __m512 v0, __m512 v1) const {
    _mm512_storeu_ps(out + r * ld, v0);
    _mm512_storeu_ps(out + r * ld + 16, v1);
  }
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void operator()(int r, __m512 v) const {  // kNr 16
    _mm512_storeu_ps(out + r * ld, v);
  }
};

// One thread share's grad_amax (GemmOutput::amax): per lane, the largest |v| bits of the finite
// v the epilogue rounded (integer order is value order among them; inf and NaN sit at
// 0x7f800000 and above), and whether any v was not finite. A tile's epilogue keeps its own max
// in a register (AmaxRegister) and folds it in here once; the share merges into the sink once,
// at its end.
struct alignas(64) AmaxLanes {
  uint32_t max[16] = {};
  uint32_t bad = 0;
  void merge_into(AmaxSink& sink) const {
    uint32_t m = 0;
    for (uint32_t x : max) m = std::max(m, x);
    sink.merge(m, bad != 0);
  }
};

struct AmaxRegister {
  __m512i max;
  __mmask16 bad;
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void clear() {
    max = _mm512_setzero_si512();
    bad = 0;
  }
  // The lanes k of v.
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void take(__m512 v, __mmask16 k) {
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
    const __mmask16 finite = _mm512_mask_cmplt_epu32_mask(k, a, _mm512_set1_epi32(0x7f800000));
    bad = static_cast<__mmask16>(bad | (k & ~finite));
    max = _mm512_mask_max_epu32(max, finite, max, a);
  }
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void fold_into(AmaxLanes& lanes) const {
    _mm512_store_si512(lanes.max, _mm512_max_epu32(_mm512_load_si512(lanes.max), max));
    lanes.bad |= bad;
  }
};

// epilogue_tile's arithmetic, operation for operation, on a row still in registers. The kernel
// runs a copy of it (begin, the rows, end), so that the running max stays in a register.
template <typename O>
struct StoreEpilogue {
  O* out;
  int64_t ld;
  float alpha, beta;
  const float* bias;  // at the tile's first column, or null
  AmaxLanes* lanes;   // grad_amax, or null
  AmaxRegister amax{};
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void begin() {
    if (lanes) amax.clear();
  }
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void end() {
    if (lanes) amax.fold_into(*lanes);
  }
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE __m512 value(__m512 v, const O* o, const float* b) const {
    if (alpha != 1.0f) v = _mm512_mul_ps(_mm512_set1_ps(alpha), v);
    if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_set1_ps(beta), simd::load16(o)));
    if (b) v = _mm512_add_ps(v, _mm512_loadu_ps(b));
    return v;
  }
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void operator()(int r, __m512 v0, __m512 v1) {
    O* o = out + r * ld;
    v0 = value(v0, o, bias);
    v1 = value(v1, o + 16, bias ? bias + 16 : nullptr);
    if (lanes) {
      amax.take(v0, 0xffff);
      amax.take(v1, 0xffff);
    }
    simd::store16(o, v0);
    simd::store16(o + 16, v1);
  }
  AMPCTL_AVX512 AMPCTL_SIMD_INLINE void operator()(int r, __m512 v) {  // kNr 16
    O* o = out + r * ld;
    v = value(v, o, bias);
    if (lanes) amax.take(v, 0xffff);
    simd::store16(o, v);
  }
};

// A's layout: Rows, rows of kKcF32 floats (row r's l at a[r * kKcF32 + l], a displacement
// fixed at compile time); else a sliver [k][kMr]. The same operations in the same order either
// way, so the same bits.
#if AMPCTL_GEMM_AVX2
// The avx2 kernel: 6 rows x 2 YMM accumulators, the same chain of fused multiply-adds per
// element in the same order as the AVX-512 kernel (so the same bits).
template <bool Rows, typename Store>
AMPCTL_AVX2 void kernel_f32(int64_t kc, const float* a, const float* b, const float* cin,
                            int64_t ldi, const Store& store) {
  __m256 c0[kMr], c1[kMr];
  if (cin) {
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) {
      c0[r] = _mm256_loadu_ps(cin + r * ldi);
      c1[r] = _mm256_loadu_ps(cin + r * ldi + 8);
    }
  } else {
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) c0[r] = c1[r] = _mm256_setzero_ps();
  }
  for (int64_t l = 0; l < kc; ++l) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) {
      const __m256 ar = _mm256_broadcast_ss(Rows ? a + r * kKcF32 : a + r);
      c0[r] = _mm256_fmadd_ps(ar, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(ar, b1, c1[r]);
    }
    a += Rows ? 1 : kMr;
    b += kNr;
  }
  Store out = store;
  out.begin();
#pragma GCC unroll 6
  for (int r = 0; r < kMr; ++r) out(r, __m512{c0[r], c1[r]});
  out.end();
}
#else
template <bool Rows, typename Store>
AMPCTL_AVX512 void kernel_f32(int64_t kc, const float* a, const float* b, const float* cin,
                              int64_t ldi, const Store& store) {
  __m512 c0[kMr], c1[kMr];
  if (cin) {
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      c0[r] = _mm512_loadu_ps(cin + r * ldi);
      c1[r] = _mm512_loadu_ps(cin + r * ldi + 16);
    }
  } else {
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  }
  for (int64_t l = 0; l < kc; ++l) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const __m512 ar = _mm512_set1_ps(Rows ? a[r * kKcF32] : a[r]);
      c0[r] = _mm512_fmadd_ps(ar, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(ar, b1, c1[r]);
    }
    a += Rows ? 1 : kMr;
    b += kNr;
  }
  Store out = store;
  out.begin();
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) out(r, c0[r], c1[r]);
  out.end();
}

template <typename Store>
AMPCTL_AVX512_BF16 void kernel_bf16(int64_t kpairs, const uint16_t* a, const uint16_t* b,
                                    const float* cin, int64_t ldi, const Store& store) {
  __m512 c0[kMr], c1[kMr];
  if (cin) {
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      c0[r] = _mm512_loadu_ps(cin + r * ldi);
      c1[r] = _mm512_loadu_ps(cin + r * ldi + 16);
    }
  } else {
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) c0[r] = c1[r] = _mm512_setzero_ps();
  }
  for (int64_t l = 0; l < kpairs; ++l) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 32));
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      uint32_t pair;
      std::memcpy(&pair, a + 2 * r, 4);
      const __m512bh ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
      c0[r] = _mm512_dpbf16_ps(c0[r], ar, b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], ar, b1);
    }
    a += 2 * kMr;
    b += 2 * kNr;
  }
  Store out = store;
  out.begin();
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) out(r, c0[r], c1[r]);
  out.end();
}

#endif  // AMPCTL_GEMM_AVX2

// ---- epilogue: one finished tile (ld kNr) into C ----

template <typename O>
AMPCTL_AVX512 void epilogue_tile(const float* t, int64_t mr, int64_t nr, O* out, int64_t ldo,
                                 float alpha, float beta, const float* bias, AmaxLanes* lanes) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  AmaxRegister amax;
  amax.clear();
  for (int64_t r = 0; r < mr; ++r) {
    for (int64_t j = 0; j < nr; j += 16) {
      const __mmask16 m = simd::head_mask(static_cast<size_t>(nr - j));
      __m512 v = _mm512_loadu_ps(t + r * kNr + j);
      if (alpha != 1.0f) v = _mm512_mul_ps(va, v);
      if (beta != 0.0f) v = _mm512_add_ps(v, _mm512_mul_ps(vb, simd::load16(out + r * ldo + j, m)));
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
      if (lanes) amax.take(v, m);
      simd::store16(out + r * ldo + j, v, m);
    }
  }
  if (lanes) amax.fold_into(*lanes);
}

AMPCTL_AVX512 void epilogue_dispatch(const float* t, int64_t mr, int64_t nr, const GemmOutput& o,
                                     int64_t i, int64_t j, const float* bias, AmaxLanes* lanes) {
  const float* bj = bias ? bias + j : nullptr;
  switch (o.dtype) {
    case DType::f32:
      epilogue_tile(t, mr, nr, static_cast<float*>(o.data) + i * o.ld + j, o.ld, o.alpha, o.beta,
                    bj, lanes);
      return;
    case DType::f16:
      epilogue_tile(t, mr, nr, static_cast<half*>(o.data) + i * o.ld + j, o.ld, o.alpha, o.beta, bj,
                    lanes);
      return;
    case DType::bf16:
      epilogue_tile(t, mr, nr, static_cast<bfloat16*>(o.data) + i * o.ld + j, o.ld, o.alpha, o.beta,
                    bj, lanes);
      return;
    case DType::i32:
      return;
  }
}

void pack_a_any(const GemmOperand& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  switch (a.dtype) {
    case DType::f32:
      pack_a_f32(static_cast<const float*>(a.data), a.ld, a.trans, i0, mc, p0, kc, dst);
      return;
    case DType::f16:
      pack_a_f32(static_cast<const half*>(a.data), a.ld, a.trans, i0, mc, p0, kc, dst);
      return;
    case DType::bf16:
      pack_a_f32(static_cast<const bfloat16*>(a.data), a.ld, a.trans, i0, mc, p0, kc, dst);
      return;
    case DType::i32:
      return;
  }
}

void pack_a_rows_any(const GemmOperand& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                     float* dst) {
  switch (a.dtype) {
    case DType::f32:
      pack_a_rows(static_cast<const float*>(a.data), a.ld, i0, mc, p0, kc, dst);
      return;
    case DType::f16:
      pack_a_rows(static_cast<const half*>(a.data), a.ld, i0, mc, p0, kc, dst);
      return;
    case DType::bf16:
      pack_a_rows(static_cast<const bfloat16*>(a.data), a.ld, i0, mc, p0, kc, dst);
      return;
    case DType::i32:
      return;
  }
}

void pack_b_any(const GemmOperand& b, int64_t j0, int64_t nc, int64_t p0, int64_t kc, float* dst) {
  switch (b.dtype) {
    case DType::f32:
      pack_b_f32(static_cast<const float*>(b.data), b.ld, b.trans, j0, nc, p0, kc, dst);
      return;
    case DType::f16:
      pack_b_f32(static_cast<const half*>(b.data), b.ld, b.trans, j0, nc, p0, kc, dst);
      return;
    case DType::bf16:
      pack_b_f32(static_cast<const bfloat16*>(b.data), b.ld, b.trans, j0, nc, p0, kc, dst);
      return;
    case DType::i32:
      return;
  }
}

struct Problem {
  int64_t m, n, k;
  GemmOperand a, b;
  GemmOutput out;
  bool bf16;         // the VDPBF16PS kernel
  bool amx;          // bf16 on AMX tiles instead (run_block_amx)
  int64_t kc_block;  // k per block
  float* acc;        // partial sums of earlier k blocks
  int64_t ld_acc;
  bool acc_is_out;  // acc is C itself (f32, no epilogue)
  const float* bias;
  GemmTriangle triangle;
  bool a_rows;  // the f32 kernel reads A from rows (a row-major A: kernel_f32<true>)
};

// out_lower: the tile at rows [i, i + mr), columns from j lies wholly above the diagonal.
bool tile_skipped(const Problem& p, int64_t i, int64_t mr, int64_t j) {
  return p.triangle == GemmTriangle::out_lower && j > i + mr - 1;
}

// The part [l0, l1) of the k block [pc, pc + kc) (block-relative) that rows [i, i + mr) of a
// triangular op(A) can hold nonzeros in, widened to multiples of `step` (k pairs, AMX's 32) and
// kept inside [0, kc_rounded).
struct KRange {
  int64_t l0, l1;
};
KRange k_range(const Problem& p, int64_t i, int64_t mr, int64_t pc, int64_t kc, int64_t step,
               int64_t kc_rounded) {
  int64_t lo = 0, hi = kc;
  if (p.triangle == GemmTriangle::a_lower) hi = std::clamp<int64_t>(i + mr - pc, 0, kc);
  if (p.triangle == GemmTriangle::a_upper) lo = std::clamp<int64_t>(i - pc, 0, kc);
  lo = lo / step * step;
  hi = std::min(kc_rounded, (hi + step - 1) / step * step);
  return {lo, std::max(lo, hi)};
}

// The packed element at `offset` of a panel buffer: floats, or bf16 pairs for the bf16 kernel.
float* element_at(const Problem& p, float* base, int64_t offset) {
  return p.bf16 ? reinterpret_cast<float*>(reinterpret_cast<uint16_t*>(base) + offset)
                : base + offset;
}

// Packs op(B)'s columns [j0, j0 + nc) (whole slivers from j0) for k block [pc, pc + kc).
void pack_b_block(const Problem& p, int64_t j0, int64_t nc, int64_t pc, int64_t kc, float* dst) {
#if !AMPCTL_GEMM_AVX2
  if (p.bf16) {
    pack_b_bf16(static_cast<const uint16_t*>(p.b.data), p.b.ld, p.b.trans, j0, nc, pc, kc,
                reinterpret_cast<uint16_t*>(dst));
    return;
  }
#endif
  pack_b_any(p.b, j0, nc, pc, kc, dst);
}

// Where one micro-tile's kernel (rows x kNr floats in `tile`, mr x nr of them real) reads the
// earlier k blocks' partial sums from (none for the first block; acc itself for a whole tile,
// else a copy in `tile`) and writes its sums to (acc for a whole tile that is not the last block,
// or whose acc is C; else `tile`, which finish_tile takes on). run_block and run_block_amx.
struct TileRoute {
  const float* cin = nullptr;
  int64_t ldi = kNr;
  float* cout = nullptr;
  int64_t ldo = kNr;
  bool direct = false;  // cout is acc: nothing left to do
};

TileRoute route_tile(const Problem& p, float* acc, float* tile, bool full, bool first, bool last,
                     int64_t mr, int64_t nr) {
  TileRoute t;
  t.cout = tile;
  if (!first) {
    if (full) {
      t.cin = acc;
      t.ldi = p.ld_acc;
    } else {
      for (int64_t r = 0; r < mr; ++r)
        std::memcpy(tile + r * kNr, acc + r * p.ld_acc, static_cast<size_t>(nr) * 4);
      t.cin = tile;
    }
  }
  t.direct = full && (!last || p.acc_is_out);
  if (t.direct) {
    t.cout = acc;
    t.ldo = p.ld_acc;
  }
  return t;
}

// After the kernel: sums left in `tile` go to acc (partial sums, or C itself), or, for the last
// k block, through the epilogue into C at (i, j).
void finish_tile(const Problem& p, const TileRoute& t, float* acc, const float* tile, bool last,
                 int64_t mr, int64_t nr, int64_t i, int64_t j, AmaxLanes* lanes) {
  if (t.direct) return;
  if (!last || p.acc_is_out) {
    for (int64_t r = 0; r < mr; ++r)
      std::memcpy(acc + r * p.ld_acc, tile + r * kNr, static_cast<size_t>(nr) * 4);
  } else {
    epilogue_dispatch(tile, mr, nr, p.out, i, j, p.bias, lanes);
  }
}

// One micro-tile's operands: the packed slivers at their offsets (elements: floats, or bf16 for
// the bf16 kernel) and the earlier partial sums, if any.
struct Sliver {
  int64_t kcp;
  const float* pack_a;
  const float* pack_b;
  size_t a_off, b_off;
  const float* cin;
  int64_t ldi;
};

template <typename Store>
void run_kernel(const Problem& p, const Sliver& s, const Store& store) {
#if !AMPCTL_GEMM_AVX2
  if (p.bf16) {
    kernel_bf16(s.kcp / 2, reinterpret_cast<const uint16_t*>(s.pack_a) + s.a_off,
                reinterpret_cast<const uint16_t*>(s.pack_b) + s.b_off, s.cin, s.ldi, store);
    return;
  }
#endif
  if (p.a_rows) {
    kernel_f32<true>(s.kcp, s.pack_a + s.a_off, s.pack_b + s.b_off, s.cin, s.ldi, store);
  } else {
    kernel_f32<false>(s.kcp, s.pack_a + s.a_off, s.pack_b + s.b_off, s.cin, s.ldi, store);
  }
}

// A whole tile of the last k block at (i, j) through the epilogue into C (epilogue_dispatch's
// arithmetic without the trip through the stack tile).
void finish_into_output(const Problem& p, const Sliver& s, int64_t i, int64_t j, AmaxLanes* lanes) {
  const GemmOutput& o = p.out;
  const float* bj = p.bias ? p.bias + j : nullptr;
  switch (o.dtype) {
    case DType::f32:
      run_kernel(p, s,
                 StoreEpilogue<float>{static_cast<float*>(o.data) + i * o.ld + j, o.ld, o.alpha,
                                      o.beta, bj, lanes});
      return;
    case DType::f16:
      run_kernel(p, s,
                 StoreEpilogue<half>{static_cast<half*>(o.data) + i * o.ld + j, o.ld, o.alpha,
                                     o.beta, bj, lanes});
      return;
    case DType::bf16:
      run_kernel(p, s,
                 StoreEpilogue<bfloat16>{static_cast<bfloat16*>(o.data) + i * o.ld + j, o.ld,
                                         o.alpha, o.beta, bj, lanes});
      return;
    case DType::i32:
      return;
  }
}

// One thread's share: output rows [i0, i1) x columns [j0, j1), all of k. packed_b: op(B) already
// packed whole (j0 == 0, j1 == n), k block number q at element q * b_stride, or null
// (this share packs its own columns into pack_b, block by block).
void run_block(const Problem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* pack_a,
               float* pack_b, const float* packed_b = nullptr, int64_t b_stride = 0) {
  alignas(64) float tile[kTile] = {};
  AmaxLanes amax;
  AmaxLanes* lanes = p.out.amax ? &amax : nullptr;
  const int64_t width = j1 - j0;
  for (int64_t pc = 0; pc < p.k; pc += p.kc_block) {
    const int64_t kc = std::min(p.kc_block, p.k - pc);
    const int64_t kcp = p.bf16 ? (kc + 1) & ~int64_t{1} : kc;
    const bool first = pc == 0, last = pc + kc == p.k;
    if (packed_b) {
      pack_b = element_at(p, const_cast<float*>(packed_b), (pc / p.kc_block) * b_stride);
    } else {
      pack_b_block(p, j0, width, pc, kc, pack_b);
    }
    for (int64_t ic = i0; ic < i1; ic += kMc) {
      const int64_t mc = std::min(kMc, i1 - ic);
#if !AMPCTL_GEMM_AVX2
      if (p.bf16) {
        pack_a_bf16(static_cast<const uint16_t*>(p.a.data), p.a.ld, p.a.trans, ic, mc, pc, kc,
                    reinterpret_cast<uint16_t*>(pack_a));
      } else
#endif
          if (p.a_rows) {
        pack_a_rows_any(p.a, ic, mc, pc, kc, pack_a);
      } else {
        pack_a_any(p.a, ic, mc, pc, kc, pack_a);
      }
      for (int64_t jr = 0; jr < width; jr += kNr) {
        const int64_t nr = std::min(kNr, width - jr);
        for (int64_t ir = 0; ir < mc; ir += kMr) {
          const int64_t mr = std::min(kMr, mc - ir);
          const int64_t i = ic + ir, j = j0 + jr;
          if (tile_skipped(p, i, mr, j)) continue;
          float* acc = p.acc ? p.acc + i * p.ld_acc + j : nullptr;
          const bool full = mr == kMr && nr == kNr;
          const TileRoute route = route_tile(p, acc, tile, full, first, last, mr, nr);
          const KRange kr = k_range(p, i, mr, pc, kc, p.bf16 ? 2 : 1, kcp);
          const size_t a_off =
              static_cast<size_t>(p.a_rows ? ir * kKcF32 + kr.l0 : ir * kcp + kr.l0 * kMr);
          const size_t b_off = static_cast<size_t>(jr * kcp + kr.l0 * kNr);
          const Sliver sl{kr.l1 - kr.l0, pack_a, pack_b, a_off, b_off, route.cin, route.ldi};
          if (full && last && !p.acc_is_out) {
            // The epilogue on the registers, straight into C.
            finish_into_output(p, sl, i, j, lanes);
            continue;
          }
          run_kernel(p, sl, StoreRaw{route.cout, route.ldo});
          finish_tile(p, route, acc, tile, last, mr, nr, i, j, lanes);
        }
      }
    }
  }
  if (lanes) lanes->merge_into(*p.out.amax);
}

#if !AMPCTL_GEMM_AVX2
// ---- the AMX bf16 path ----
// Tiles: 0-3 a 32 x 32 float block of C (rows 0-15 / 16-31 x columns 0-15 / 16-31), 4-5 two
// 16-row A tiles of 32 k values (row-major bf16, k contiguous), 6-7 two B tiles of 16 k pairs x
// 16 columns: the two halves of a VDPBF16PS B sliver ([k/2][32][2], 128 bytes per pair of k).
// A is packed row-major [rows rounded up to 32][k rounded up to 32] with zeros; B slivers
// likewise to 32 k values.
#define AMPCTL_AMX __attribute__((target("amx-tile,amx-bf16")))

constexpr int64_t kAmxM = 32;    // rows of C per block (two A tiles)
constexpr int64_t kAmxK = 32;    // k values per TDPBF16PS
constexpr int64_t kAmxMc = 128;  // rows of A packed at a time
constexpr int64_t kAmxTile = kAmxM * kNr;

// LDTILECFG's 64-byte operand: palette 1; tiles 0-7 of 16 rows x 64 bytes (bytes 16-31: the
// rows' byte widths, 48-55: the row counts). A constant in memory: GCC 12 does not treat
// _tile_loadconfig as reading its operand and dropped the stores into a stack copy.
struct alignas(64) AmxTileConfig {
  uint8_t bytes[64];
};

constexpr AmxTileConfig make_amx_config() {
  AmxTileConfig c{};
  c.bytes[0] = 1;
  for (int t = 0; t < 8; ++t) {
    c.bytes[16 + 2 * t] = 64;
    c.bytes[48 + t] = 16;
  }
  return c;
}

constexpr AmxTileConfig kAmxConfig = make_amx_config();

AMPCTL_AMX void amx_configure() {
  _tile_loadconfig(&kAmxConfig);
}

AMPCTL_AMX void amx_release() {
  _tile_release();
}

// C block (32 x 32 floats at cout, row stride ldo) := [cin +] A (32 rows at a, stride lda
// elements) * B sliver (b), over kc32 values of k.
AMPCTL_AMX void amx_block(int64_t kc32, const uint16_t* a, int64_t lda, const uint16_t* b,
                          const float* cin, int64_t ldi, float* cout, int64_t ldo) {
  if (cin) {
    _tile_loadd(0, cin, ldi * 4);
    _tile_loadd(1, cin + 16, ldi * 4);
    _tile_loadd(2, cin + 16 * ldi, ldi * 4);
    _tile_loadd(3, cin + 16 * ldi + 16, ldi * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t k0 = 0; k0 < kc32; k0 += kAmxK) {
    _tile_loadd(4, a + k0, lda * 2);
    _tile_loadd(5, a + 16 * lda + k0, lda * 2);
    _tile_loadd(6, b + k0 * kNr, 2 * kNr * 2);
    _tile_loadd(7, b + k0 * kNr + 32, 2 * kNr * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, cout, ldo * 4);
  _tile_stored(1, cout + 16, ldo * 4);
  _tile_stored(2, cout + 16 * ldo, ldo * 4);
  _tile_stored(3, cout + 16 * ldo + 16, ldo * 4);
}

// The transposed case of pack_a_amx: 16 x 16 blocks widened to 32-bit lanes (the bf16 bits,
// not their values), transposed in registers and narrowed back.
AMPCTL_AVX512 void pack_a_amx_transposed(const uint16_t* a, int64_t ld, int64_t i0, int64_t mc,
                                         int64_t p0, int64_t kc, int64_t kc32, uint16_t* dst) {
  for (int64_t l0 = 0; l0 < kc; l0 += 16) {
    const int64_t nl = std::min<int64_t>(16, kc - l0);
    const __mmask16 ml = simd::head_mask(static_cast<size_t>(nl));
    for (int64_t r0 = 0; r0 < mc; r0 += 16) {
      const int64_t nr = std::min<int64_t>(16, mc - r0);
      const __mmask16 mr = simd::head_mask(static_cast<size_t>(nr));
      __m512 v[16];
      for (int64_t q = 0; q < 16; ++q) {
        v[q] = q < nl ? _mm512_castsi512_ps(_mm512_cvtepu16_epi32(
                            _mm256_maskz_loadu_epi16(mr, a + (p0 + l0 + q) * ld + i0 + r0)))
                      : _mm512_setzero_ps();
      }
      simd::transpose16(v);
      for (int64_t c = 0; c < nr; ++c) {
        _mm256_mask_storeu_epi16(dst + (r0 + c) * kc32 + l0, ml,
                                 _mm512_cvtepi32_epi16(_mm512_castps_si512(v[c])));
      }
    }
  }
}

// op(A) rows [i0, i0 + mc), k [p0, p0 + kc) as row-major bf16 [mc rounded to 32][kc32], zeros
// beyond.
void pack_a_amx(const uint16_t* a, int64_t ld, bool trans, int64_t i0, int64_t mc, int64_t p0,
                int64_t kc, int64_t kc32, uint16_t* dst) {
  const int64_t rows = (mc + kAmxM - 1) / kAmxM * kAmxM;
  std::memset(dst, 0, static_cast<size_t>(rows * kc32) * 2);
  if (!trans) {
    for (int64_t r = 0; r < mc; ++r) {
      std::memcpy(dst + r * kc32, a + (i0 + r) * ld + p0, static_cast<size_t>(kc) * 2);
    }
  } else {  // element (i, l) at l * ld + i
    pack_a_amx_transposed(a, ld, i0, mc, p0, kc, kc32, dst);
  }
}

// One thread's share on AMX tiles (run_block's structure, 32 x 32 blocks of C).
void run_block_amx(const Problem& p, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                   uint16_t* pack_a, uint16_t* pack_b) {
  // Zeroed once, so that it is never read undefined: an edge tile's rows and columns past
  // mr x nr start from whatever an earlier tile left there, and are computed and dropped.
  alignas(64) float tile[kAmxTile] = {};
  AmaxLanes amax;
  AmaxLanes* lanes = p.out.amax ? &amax : nullptr;
  const int64_t width = j1 - j0;
  amx_configure();
  for (int64_t pc = 0; pc < p.k; pc += p.kc_block) {
    const int64_t kc = std::min(p.kc_block, p.k - pc);
    const int64_t kcp = (kc + 1) & ~int64_t{1};
    const int64_t kc32 = (kc + kAmxK - 1) / kAmxK * kAmxK;
    const bool first = pc == 0, last = pc + kc == p.k;
    // op(B)'s columns in slivers of 32, each [kc32 / 2][32][2] with zero pairs past kc.
    for (int64_t s = 0; s < width; s += kNr) {
      uint16_t* d = pack_b + (s / kNr) * kNr * kc32;
      pack_b_bf16(static_cast<const uint16_t*>(p.b.data), p.b.ld, p.b.trans, j0 + s,
                  std::min(kNr, width - s), pc, kc, d);
      std::memset(d + kcp * kNr, 0, static_cast<size_t>((kc32 - kcp) * kNr) * 2);
    }
    for (int64_t ic = i0; ic < i1; ic += kAmxMc) {
      const int64_t mc = std::min(kAmxMc, i1 - ic);
      pack_a_amx(static_cast<const uint16_t*>(p.a.data), p.a.ld, p.a.trans, ic, mc, pc, kc, kc32,
                 pack_a);
      for (int64_t jr = 0; jr < width; jr += kNr) {
        const int64_t nr = std::min(kNr, width - jr);
        for (int64_t ir = 0; ir < mc; ir += kAmxM) {
          const int64_t mr = std::min(kAmxM, mc - ir);
          const int64_t i = ic + ir, j = j0 + jr;
          if (tile_skipped(p, i, mr, j)) continue;
          float* acc = p.acc ? p.acc + i * p.ld_acc + j : nullptr;
          const bool full = mr == kAmxM && nr == kNr;
          const TileRoute route = route_tile(p, acc, tile, full, first, last, mr, nr);
          const KRange kr = k_range(p, i, mr, pc, kc, kAmxK, kc32);
          amx_block(kr.l1 - kr.l0, pack_a + ir * kc32 + kr.l0, kc32,
                    pack_b + (jr / kNr) * kNr * kc32 + kr.l0 * kNr, route.cin, route.ldi,
                    route.cout, route.ldo);
          finish_tile(p, route, acc, tile, last, mr, nr, i, j, lanes);
        }
      }
    }
  }
  amx_release();
  if (lanes) lanes->merge_into(*p.out.amax);
}

#endif  // !AMPCTL_GEMM_AVX2

}  // namespace

#if AMPCTL_GEMM_AVX2
// The avx2 build of run (cpu_gemm_avx2.cpp): the f32 kernel only, for every float dtype.
bool GemmEngine::run_avx2(int64_t m, int64_t n, int64_t k, const GemmOperand& a,
                          const GemmOperand& b, const GemmOutput& out, ThreadPool& pool,
                          GemmTriangle triangle) {
  if (m < 1 || n < 1 || k < 1 || out.dtype == DType::i32) return false;
  Problem p{m, n, k, a, b, out, false, false, kKcF32, nullptr, 0, false, nullptr, triangle, false};
#else
const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe_features();
  return features;
}

bool GemmEngine::run(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
                     const GemmOutput& out, ThreadPool& pool, bool bf16_dot,
                     GemmTriangle triangle) {
  const CpuFeatures& f = cpu_features();
  if (f.avx2) return run_avx2(m, n, k, a, b, out, pool, triangle);
  if (!f.avx512 || m < 1 || n < 1 || k < 1 || out.dtype == DType::i32) return false;
  Problem p{m, n, k, a, b, out, false, false, kKcF32, nullptr, 0, false, nullptr, triangle, false};
  p.bf16 = bf16_dot && f.avx512_bf16 && a.dtype == DType::bf16 && b.dtype == DType::bf16;
  p.amx = p.bf16 && f.amx_bf16;
#endif
  p.a_rows = !p.bf16 && !a.trans;
  p.kc_block = p.bf16 ? kKcBf16 : kKcF32;
  p.acc_is_out =
      out.dtype == DType::f32 && out.alpha == 1.0f && out.beta == 0.0f && !out.bias && !out.amax;
  if (p.acc_is_out) {
    p.acc = static_cast<float*>(out.data);
    p.ld_acc = out.ld;
  } else if (k > p.kc_block) {
    if (m_acc.size() < static_cast<size_t>(m * n)) m_acc.resize(static_cast<size_t>(m * n));
    p.acc = m_acc.data();
    p.ld_acc = n;
  }
  if (out.bias) {
    if (m_bias.size() < static_cast<size_t>(n)) m_bias.resize(static_cast<size_t>(n));
    switch (out.bias_dtype) {
      case DType::f32:
        std::memcpy(m_bias.data(), out.bias, static_cast<size_t>(n) * 4);
        break;
      case DType::f16:
        convert_f16_to_f32(static_cast<const uint16_t*>(out.bias), m_bias.data(),
                           static_cast<size_t>(n));
        break;
      case DType::bf16:
        convert_bf16_to_f32(static_cast<const uint16_t*>(out.bias), m_bias.data(),
                            static_cast<size_t>(n));
        break;
      case DType::i32:
        return false;
    }
    p.bias = m_bias.data();
  }

  // Split the output into parts of whole slivers: by columns when there are enough of them,
  // else by rows; two parts per thread, so a descheduled thread leaves its share to the others
  // (each part packs its own panels: more parts cost more packing). Small products stay whole.
  //
  // Shared B: when op(B) packed whole, every k block of it, stays in L2 (n * k floats, rounded
  // up to slivers and blocks, <= kSharedBFloats) and there are rows for every part, op(B) is
  // packed once (a first, parallel pass over its slivers), and the parts split the rows: each
  // packs only its own rows of A. Splitting by columns instead packs all of A once per part (a
  // GPT layer's 768 x 128 activations four times per product). Counting one k block only let
  // a long-k weight gradient (mlp c_proj's, 128 x 512 x 768: 1.5 MiB of packed B) write and
  // reread its panel through L3, at 0.75x the rate of the column split. The arithmetic is the
  // same either way.
  const int threads = pool.threads();
  const int64_t n_sl = (n + kNr - 1) / kNr, m_sl = (m + kMr - 1) / kMr;
  int64_t t = threads > 1 ? 2 * threads : 1;
  if (static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < 262144.0) t = 1;
  const int64_t kc = std::min(p.kc_block, k);
  const int64_t kcp = (kc + 1) & ~int64_t{1};
  const int64_t k_blocks = (k + p.kc_block - 1) / p.kc_block;
  const bool shared_b =
      !p.amx && t > 1 && m_sl >= t && k_blocks * n_sl * kNr * kcp <= kSharedBFloats;
  // Otherwise by rows too while the output has more rows than columns and one k block of the
  // whole op(B) panel, which each row part packs for itself, stays in L2: the column split
  // would pack all of A once per part, the larger operand then (shakespeare's 16384-row
  // activations four times per product: its fp16 step -6 % by rows).
  const int64_t panel_bytes = n_sl * kNr * kcp * (p.bf16 ? 2 : 4);
  const bool split_n =
      !shared_b && (n_sl >= m_sl || (n_sl >= 4 * threads && panel_bytes > kRowSplitBPanelBytes));
  t = std::min<int64_t>(t, split_n ? n_sl : m_sl);

  const int64_t width = split_n ? ((n_sl + t - 1) / t) * kNr : n_sl * kNr;
  size_t need_a = static_cast<size_t>(kMc * (p.a_rows ? kKcF32 : kcp));
  size_t need_b = shared_b ? 0 : static_cast<size_t>(width * kcp);
#if !AMPCTL_GEMM_AVX2
  if (p.amx) {  // bf16 elements, two to a float: A [kAmxMc][kc32], B slivers [kc32 / 2][32][2]
    const int64_t kc32 = (kc + kAmxK - 1) / kAmxK * kAmxK;
    need_a = static_cast<size_t>(kAmxMc * kc32 / 2);
    need_b = static_cast<size_t>(width * kc32 / 2);
  }
#endif
  if (m_pack_a.size() < static_cast<size_t>(threads)) {
    m_pack_a.resize(static_cast<size_t>(threads));
    m_pack_b.resize(static_cast<size_t>(threads));
  }
  for (int i = 0; i < threads; ++i) {
    if (m_pack_a[static_cast<size_t>(i)].size() < need_a)
      m_pack_a[static_cast<size_t>(i)].resize(need_a);
    if (m_pack_b[static_cast<size_t>(i)].size() < need_b)
      m_pack_b[static_cast<size_t>(i)].resize(need_b);
  }

  if (shared_b) {
    // k block q of the packed op(B) at q * stride elements (floats, or bf16 for the bf16
    // kernel); slivers of kNr columns within it.
    const int64_t blocks = k_blocks;
    const int64_t stride = n_sl * kNr * kcp;
    if (m_shared_b.size() < static_cast<size_t>(blocks * stride))
      m_shared_b.resize(static_cast<size_t>(blocks * stride));
    float* base = m_shared_b.data();
    const int64_t pack_parts = std::min<int64_t>(t, n_sl);
    pool.run(pack_parts, [&](int64_t part, int) {
      const int64_t s0 = n_sl * part / pack_parts, s1 = n_sl * (part + 1) / pack_parts;
      if (s0 >= s1) return;
      const int64_t j0 = s0 * kNr, nc = std::min(n, s1 * kNr) - j0;
      for (int64_t q = 0; q < blocks; ++q) {
        const int64_t pc = q * p.kc_block;
        const int64_t kcq = std::min(p.kc_block, k - pc);
        const int64_t kcpq = p.bf16 ? (kcq + 1) & ~int64_t{1} : kcq;
        pack_b_block(p, j0, nc, pc, kcq, element_at(p, base, q * stride + s0 * kNr * kcpq));
      }
    });
    pool.run(t, [&](int64_t part, int thread) {
      const int64_t i0 = std::min(m, m_sl * part / t * kMr);
      const int64_t i1 = std::min(m, m_sl * (part + 1) / t * kMr);
      if (i0 < i1) {
        run_block(p, i0, i1, 0, n, m_pack_a[static_cast<size_t>(thread)].data(), nullptr, base,
                  stride);
      }
    });
    return true;
  }
  pool.run(t, [&](int64_t part, int thread) {
    int64_t i0 = 0, i1 = m, j0 = 0, j1 = n;
    if (split_n) {
      j0 = std::min(n, n_sl * part / t * kNr);
      j1 = std::min(n, n_sl * (part + 1) / t * kNr);
    } else {
      i0 = std::min(m, m_sl * part / t * kMr);
      i1 = std::min(m, m_sl * (part + 1) / t * kMr);
    }
    if (i0 < i1 && j0 < j1) {
      float* pa = m_pack_a[static_cast<size_t>(thread)].data();
      float* pb = m_pack_b[static_cast<size_t>(thread)].data();
#if !AMPCTL_GEMM_AVX2
      if (p.amx) {
        run_block_amx(p, i0, i1, j0, j1, reinterpret_cast<uint16_t*>(pa),
                      reinterpret_cast<uint16_t*>(pb));
        return;
      }
#endif
      run_block(p, i0, i1, j0, j1, pa, pb);
    }
  });
  return true;
}

}  // namespace ampctl::cpu

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
