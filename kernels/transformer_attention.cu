// Fused causal self-attention (Backend::attention_forward / attention_backward on the CUDA
// backend): FlashAttention-2's algorithm in plain fp32 FMA arithmetic on shared-memory tiles, so
// that no T x T matrix is ever written to memory. For every head n (of N = B*H) and query row i:
//
//   s_ij = round(round(q_i . k_j) * scale)  for j <= i   (autocast: q @ k^T rounded to the
//                                                        compute dtype, then scaled in it,
//                                                        exactly as the materialised ops do)
//
// Forward, one block per (head, tile of kTile query rows), 8 threads per row. The block walks the
// key tiles j0 = 0, kTile, ... up to its diagonal, keeping per row a running maximum m, a running
// sum l of exp(s - m) (fp32) and an fp32 accumulator o of the rows of v (online softmax):
//   m' = max(m, max_j s_ij);  alpha = exp(m - m');  p_ij = exp(s_ij - m');
//   l = alpha l + sum_j p_ij;  o = alpha o + sum_j round(p_ij) v_j  (P rounded to the compute
//   dtype before P @ V, as FA-2 feeds its tensor cores);  m = m'.
// At the end y_i = round(o / l) and lse_i = m + log(l) is kept for backward (fp32, one per row).
// A row's max and sum over a tile are 4 values per thread combined by a fixed xor butterfly over
// its 8 threads; every sum runs in a fixed order, so the bits do not depend on the run.
//
// Backward, deterministic without atomics (FA-2's split): D_i = dy_i . y_i (one pass), then
//   p_ij = exp(s_ij - lse_i) (recomputed), dp_ij = round(dy_i . v_j)   (datt, compute dtype),
//   ds_ij = round(round(p_ij (dp_ij - D_i)) * scale)   (the materialised softmax backward's
//   roundings), and
//   * dK/dV: one block per (key/value head, key tile) owns its rows of dk and dv and loops over
//     its G query heads in order and, for each, the query tiles from its diagonal down:
//     dv_j += round(p_ij) dy_i, dk_j += ds_ij q_i (fp32);
//   * dQ: one block per (head, query tile) loops over the key tiles up to its diagonal:
//     dq_i += ds_ij k_j;
// each output element has one writer, summed in ascending order. Both passes compute ds_ij by
// the same function from the same operands, so they agree on every bit.
//
// Where this differs from the materialised composition (docs/reference.md, "Precision"): the
// dot products run in ascending d instead of cuBLAS's order; P is rounded before its
// normalisation (round(exp(s - m')) instead of round(exp(s - m) / l)) and the running rescale
// by alpha adds fp32 roundings; backward's p comes from lse (a few fp32 ulps from exp(s - m) /
// l) and D from dy . y instead of sum_k datt_k p_k. The CUDA table test bounds each.
//
// Grouped-query attention (G query heads per key/value head, k and v [N / G, T, hs]): query head
// n reads kv head n / G in the forward and dQ kernels; the dK/dV block of kv head j walks query
// heads j G .. j G + G - 1, so K and V are never copied and the group's sum has one order.
//
// Two variants of the same kernels (launch_attention_*'s tensor_cores): the tile products on the
// tensor cores (WMMA; the default) or as fp32 FMA loops (the reference variant, slower, every
// sum in ascending order); see "the tensor-core variant" below for what changes.
//
// FMA tiles: q, k, v, dy rows are widened to fp32 in shared memory, rows padded to 65 floats (no
// bank conflicts for the column walks), head sizes up to kAttentionMaxHeadSize; rows past T are
// zeros and never written. Invariants: no allocation, no host sync, no atomics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <type_traits>

#include "device_util.cuh"
#include "transformer_attention.cuh"

namespace ampctl::kernels {

namespace {

constexpr int kTile = 32;                                            // query rows / keys per tile
constexpr int kThreads = 256;                                        // 8 per tile row
constexpr int kPerRow = kThreads / kTile;                            // 8
constexpr int kPitch = static_cast<int>(kAttentionMaxHeadSize) + 1;  // floats per smem row
constexpr int kOut = static_cast<int>(kAttentionMaxHeadSize) / kPerRow;  // outputs per thread
constexpr int kScores = kTile / kPerRow;  // scores per thread per tile

static_assert(kTile * kPerRow == kThreads, "a row's threads are consecutive lanes of one warp");

using TileRows = float[kPitch];

template <typename E>
__device__ __forceinline__ float round_to(float v) {
  return static_cast<float>(E(v));
}

// rows [0, valid) of a [*, hs] tile starting at src, widened; the rest zeros.
template <typename E>
__device__ __forceinline__ void load_tile(TileRows* dst, const E* __restrict__ src, int valid,
                                          int hs) {
  for (int e = threadIdx.x; e < kTile * hs; e += kThreads) {
    const int r = e / hs, d = e - r * hs;
    dst[r][d] = r < valid ? static_cast<float>(src[e]) : 0.0f;
  }
}

__device__ __forceinline__ float dot(const TileRows* a, int ra, const TileRows* b, int rb, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; ++d) s = __fmaf_rn(a[ra][d], b[rb][d], s);
  return s;
}

// The score s_ij with autocast's roundings (the materialised gemm + round_scaled softmax input).
template <typename E>
__device__ __forceinline__ float score(const TileRows* qs, int r, const TileRows* ks, int c, int hs,
                                       float scale) {
  return round_to<E>(round_to<E>(dot(qs, r, ks, c, hs)) * scale);
}

// max / sum over the 8 consecutive lanes of one row (a fixed butterfly: every lane the same bits).
__device__ __forceinline__ float row_max(float v) {
  for (int o = 1; o < kPerRow; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int o = 1; o < kPerRow; o <<= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(const E* __restrict__ q, const E* __restrict__ k,
                             const E* __restrict__ v, E* __restrict__ y, float* __restrict__ lse,
                             float scale, int time, int hs, int tiles, int group) {
  __shared__ float qs[kTile][kPitch], ks[kTile][kPitch], vs[kTile][kPitch];
  __shared__ float ps[kTile][kTile + 1];
  const int64_t n = blockIdx.x / tiles;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x % tiles);  // the longest rows first
  const int i0 = qt * kTile;
  const int64_t base = n * time * hs;
  const int64_t kv_base = (n / group) * time * hs;  // grouped-query: kv head n / G
  const int r = threadIdx.x / kPerRow, lane = threadIdx.x % kPerRow;
  const int i = i0 + r;
  load_tile<E>(qs, q + base + static_cast<int64_t>(i0) * hs, min(kTile, time - i0), hs);
  float acc[kOut];
#pragma unroll
  for (int u = 0; u < kOut; ++u) acc[u] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // the previous tile's ks, vs and ps are read
    load_tile<E>(ks, k + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    load_tile<E>(vs, v + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    __syncthreads();
    float s[kScores];
    float tmax = -INFINITY;
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const int c = lane + kPerRow * e;
      // j <= i holds for c = 0 of every tile up to the diagonal, so each row sees a finite score.
      s[e] = j0 + c <= i ? score<E>(qs, r, ks, c, hs, scale) : -INFINITY;
      tmax = fmaxf(tmax, s[e]);
    }
    const float m_new = fmaxf(m, row_max(tmax));
    const float alpha = expf(m - m_new);  // 0 on the first tile (m = -inf)
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const float p = expf(s[e] - m_new);  // 0 where masked
      part = part + p;
      ps[r][lane + kPerRow * e] = round_to<E>(p);
    }
    l = l * alpha + row_sum(part);
    m = m_new;
    __syncthreads();  // ps complete
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) {
        float a = acc[u] * alpha;
        for (int c = 0; c < kTile; ++c) a = __fmaf_rn(ps[r][c], vs[c][d], a);
        acc[u] = a;
      }
    }
  }
  if (i < time) {
    const int64_t row = base + static_cast<int64_t>(i) * hs;
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) y[row + d] = E(acc[u] / l);
    }
    if (lane == 0) lse[n * time + i] = m + logf(l);
  }
}

// D_i = dy_i . y_i in fp32, ascending d: one thread per row.
template <typename E>
__global__ void attention_row_dot_kernel(const E* __restrict__ dy, const E* __restrict__ y,
                                         float* __restrict__ dsum, int64_t rows, int hs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride) {
    float s = 0.0f;
    for (int d = 0; d < hs; ++d) {
      s = __fmaf_rn(static_cast<float>(dy[r * hs + d]), static_cast<float>(y[r * hs + d]), s);
    }
    dsum[r] = s;
  }
}

// Query row r of the q/dy tiles against key c of the k/v tiles: round(p) and ds (0 where masked
// or past T). Both backward passes call it on the same operands: the same bits.
template <typename E>
__device__ __forceinline__ void grad_score(const TileRows* qs, const TileRows* dys, int r, int i,
                                           const TileRows* ks, const TileRows* vs, int c, int j,
                                           float lse_i, float dsum_i, int time, int hs, float scale,
                                           float& p_low, float& ds) {
  p_low = 0.0f;
  ds = 0.0f;
  if (j > i || i >= time) return;
  const float p = expf(score<E>(qs, r, ks, c, hs, scale) - lse_i);
  const float dp = round_to<E>(dot(dys, r, vs, c, hs));
  ds = round_to<E>(round_to<E>(p * (dp - dsum_i)) * scale);
  p_low = round_to<E>(p);
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(const E* __restrict__ q, const E* __restrict__ k, const E* __restrict__ v,
                          const E* __restrict__ dy, const float* __restrict__ lse,
                          const float* __restrict__ dsum, E* __restrict__ dk, E* __restrict__ dv,
                          float scale, int time, int hs, int tiles, int group) {
  __shared__ float ks[kTile][kPitch], vs[kTile][kPitch], qs[kTile][kPitch], dys[kTile][kPitch];
  __shared__ float ps[kTile][kTile + 1], dss[kTile][kTile + 1];
  __shared__ float lse_s[kTile], dsum_s[kTile];
  const int64_t nk = blockIdx.x / tiles;                // the key/value head
  const int kt = static_cast<int>(blockIdx.x % tiles);  // the longest column walks first
  const int j0 = kt * kTile;
  const int64_t kv_base = nk * time * hs;
  const int r = threadIdx.x / kPerRow, lane = threadIdx.x % kPerRow;
  load_tile<E>(ks, k + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
  load_tile<E>(vs, v + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
  float dk_acc[kOut], dv_acc[kOut];
#pragma unroll
  for (int u = 0; u < kOut; ++u) dk_acc[u] = dv_acc[u] = 0.0f;
  // Its G query heads in order, each over the query tiles from the diagonal down: one fixed
  // order of the group's sums into dk and dv.
  const int steps = tiles - kt;
  for (int step = 0; step < group * steps; ++step) {
    const int64_t n = nk * group + step / steps;
    const int qt = kt + step % steps;
    const int64_t base = n * time * hs;
    const int i0 = qt * kTile;
    const int valid = min(kTile, time - i0);
    __syncthreads();  // the previous query tile is read
    load_tile<E>(qs, q + base + static_cast<int64_t>(i0) * hs, valid, hs);
    load_tile<E>(dys, dy + base + static_cast<int64_t>(i0) * hs, valid, hs);
    if (threadIdx.x < kTile) {
      const bool in = static_cast<int>(threadIdx.x) < valid;
      lse_s[threadIdx.x] = in ? lse[n * time + i0 + threadIdx.x] : 0.0f;
      dsum_s[threadIdx.x] = in ? dsum[n * time + i0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const int c = lane + kPerRow * e;
      float p_low, ds;
      grad_score<E>(qs, dys, r, i0 + r, ks, vs, c, j0 + c, lse_s[r], dsum_s[r], time, hs, scale,
                    p_low, ds);
      ps[r][c] = p_low;
      dss[r][c] = ds;
    }
    __syncthreads();
    // This thread's key row is r; its columns d = lane + 8 u.
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) {
        float a = dv_acc[u], b = dk_acc[u];
        for (int rr = 0; rr < kTile; ++rr) {
          a = __fmaf_rn(ps[rr][r], dys[rr][d], a);
          b = __fmaf_rn(dss[rr][r], qs[rr][d], b);
        }
        dv_acc[u] = a;
        dk_acc[u] = b;
      }
    }
  }
  const int j = j0 + r;
  if (j < time) {
    const int64_t row = kv_base + static_cast<int64_t>(j) * hs;
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) {
        dk[row + d] = E(dk_acc[u]);
        dv[row + d] = E(dv_acc[u]);
      }
    }
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(const E* __restrict__ q, const E* __restrict__ k, const E* __restrict__ v,
                        const E* __restrict__ dy, const float* __restrict__ lse,
                        const float* __restrict__ dsum, E* __restrict__ dq, float scale, int time,
                        int hs, int tiles, int group) {
  __shared__ float qs[kTile][kPitch], dys[kTile][kPitch], ks[kTile][kPitch], vs[kTile][kPitch];
  __shared__ float dss[kTile][kTile + 1];
  const int64_t n = blockIdx.x / tiles;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x % tiles);
  const int i0 = qt * kTile;
  const int64_t base = n * time * hs;
  const int64_t kv_base = (n / group) * time * hs;  // grouped-query: kv head n / G
  const int r = threadIdx.x / kPerRow, lane = threadIdx.x % kPerRow;
  const int i = i0 + r;
  const int valid = min(kTile, time - i0);
  load_tile<E>(qs, q + base + static_cast<int64_t>(i0) * hs, valid, hs);
  load_tile<E>(dys, dy + base + static_cast<int64_t>(i0) * hs, valid, hs);
  const float lse_i = i < time ? lse[n * time + i] : 0.0f;
  const float dsum_i = i < time ? dsum[n * time + i] : 0.0f;
  float acc[kOut];
#pragma unroll
  for (int u = 0; u < kOut; ++u) acc[u] = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();
    load_tile<E>(ks, k + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    load_tile<E>(vs, v + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const int c = lane + kPerRow * e;
      float p_low, ds;
      grad_score<E>(qs, dys, r, i, ks, vs, c, j0 + c, lse_i, dsum_i, time, hs, scale, p_low, ds);
      dss[r][c] = ds;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) {
        float a = acc[u];
        for (int c = 0; c < kTile; ++c) a = __fmaf_rn(dss[r][c], ks[c][d], a);
        acc[u] = a;
      }
    }
  }
  if (i < time) {
    const int64_t row = base + static_cast<int64_t>(i) * hs;
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) dq[row + d] = E(acc[u]);
    }
  }
}

// ---- the tensor-core variant (mma.sync through WMMA, 16 x 16 x 16 fragments) ----
// The same algorithm, roundings and block geometry as the FMA kernels above; only the tile
// products run on the tensor cores (fp32 accumulation; the order of a product's fp32 sums is the
// hardware's, fixed for a given GPU and binary): S = Q K^T and dP = dY V^T (4 warps each), P V,
// P^T dY, dS^T Q and dS K (8 warps, one 16 x 16 output fragment each). Tiles are kept as the
// compute dtype's bits, head columns zero-padded to 64 (zeros add nothing to any product); the
// scalar phases (masking, the roundings, the online softmax) are the FMA kernels', reading the
// products from shared memory. Forward's P V of a tile lands in a staging tile that the scalar
// phase adds to its fp32 accumulators after the rescale by alpha (WMMA's fragment layout is
// opaque, so a row's rescale cannot be applied to a fragment); backward's accumulators need no
// rescale and stay in fragments across tiles.

namespace wm = nvcuda::wmma;

constexpr int kTcDim = 64;        // head columns of a tile (hs <= 64, zero-padded)
constexpr int kLdH = kTcDim + 8;  // 16-bit elements per row of a Q/K/V/dY tile
constexpr int kLdS = kTile + 4;   // floats per row of an S/dP tile
constexpr int kLdP = kTile + 8;   // 16-bit elements per row of a P/dS tile
constexpr int kLdO = kTcDim + 4;  // floats per row of an output staging tile
constexpr int kWarps = kThreads / 32;

static_assert(kTcDim == kAttentionMaxHeadSize, "the tiles hold every head column");
static_assert(kWarps == 8, "8 output fragments of 16 x 16 per 32 x 64 tile, one a warp");

template <typename E>
struct WmmaOf;
template <>
struct WmmaOf<half> {
  using T = __half;
};
template <>
struct WmmaOf<bfloat16> {
  using T = __nv_bfloat16;
};

// Whether this compilation pass has WMMA fragments of E: fp16 from sm_70, bf16 from sm_80 (the
// sm_75 pass has no bf16 fragment types at all). The host pass answers true so that the kernels'
// launch code is compiled; the launchers never pick a bf16 tensor-core kernel on a 7.x device
// (attention_tensor_cores in device_support.h, and bf16 runs are refused there), so the sm_75
// SASS of those kernels is a trap that cannot be reached.
template <typename E>
__host__ __device__ constexpr bool has_wmma() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return !std::is_same<E, bfloat16>::value;
#else
  return true;
#endif
}

using BitsTile = uint16_t[kLdH];
using ScoreTile = float[kLdS];
using ProbTile = uint16_t[kLdP];
using OutTile = float[kLdO];

template <typename E>
__device__ __forceinline__ void load_bits(BitsTile* dst, const E* __restrict__ src, int valid,
                                          int hs) {
  for (int e = threadIdx.x; e < kTile * kTcDim; e += kThreads) {
    const int r = e / kTcDim, d = e - r * kTcDim;
    dst[r][d] = r < valid && d < hs ? src[r * hs + d].bits : uint16_t{0};
  }
}

template <typename E>
__device__ __forceinline__ uint16_t bits_of(float v) {
  return E(v).bits;
}

// out (32 x 32, fp32) := a b^T for 32-row tiles a, b, by warp w in [0, 4): fragment (w / 2, w % 2).
template <typename E>
__device__ __forceinline__ void product_abt(const BitsTile* a, const BitsTile* b, ScoreTile* out,
                                            int w) {
  if constexpr (!has_wmma<E>()) {
    __trap();  // unreachable: see has_wmma
  } else {
    using T = typename WmmaOf<E>::T;
    const int fm = w / 2, fn = w % 2;
    wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> fa;
    wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> fb;
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
    wm::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < kTcDim; kk += 16) {
      wm::load_matrix_sync(fa, reinterpret_cast<const T*>(&a[fm * 16][kk]), kLdH);
      wm::load_matrix_sync(fb, reinterpret_cast<const T*>(&b[fn * 16][kk]), kLdH);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(&out[fm * 16][fn * 16], acc, kLdS, wm::mem_row_major);
  }
}

// acc (the warp's 16 x 16 fragment (w / 4, w % 4) of a 32 x 64 result) += p v (p 32 x 32 as
// stored, or transposed: p^T), v a 32 x 64 tile.
template <typename E, typename Layout>
__device__ __forceinline__ void product_pv(const ProbTile* p, const BitsTile* v,
                                           wm::fragment<wm::accumulator, 16, 16, 16, float>& acc,
                                           int w) {
  if constexpr (!has_wmma<E>()) {
    __trap();  // unreachable: see has_wmma
  } else {
    using T = typename WmmaOf<E>::T;
    constexpr bool kTransposed = std::is_same<Layout, wm::col_major>::value;
    const int fm = w / 4, fn = w % 4;
    wm::fragment<wm::matrix_a, 16, 16, 16, T, Layout> fa;
    wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> fb;
#pragma unroll
    for (int kk = 0; kk < kTile; kk += 16) {
      // A(m, k) is p[m][k] (row-major), or p[k][m] for the transpose (column-major).
      const uint16_t* a = kTransposed ? &p[kk][fm * 16] : &p[fm * 16][kk];
      wm::load_matrix_sync(fa, reinterpret_cast<const T*>(a), kLdP);
      wm::load_matrix_sync(fb, reinterpret_cast<const T*>(&v[kk][fn * 16]), kLdH);
      wm::mma_sync(acc, fa, fb, acc);
    }
  }
}

__device__ __forceinline__ void stage(OutTile* out,
                                      const wm::fragment<wm::accumulator, 16, 16, 16, float>& acc,
                                      int w) {
  wm::store_matrix_sync(&out[(w / 4) * 16][(w % 4) * 16], acc, kLdO, wm::mem_row_major);
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(const E* __restrict__ q, const E* __restrict__ k,
                                const E* __restrict__ v, E* __restrict__ y, float* __restrict__ lse,
                                float scale, int time, int hs, int tiles, int group) {
  __shared__ __align__(32) uint16_t qs[kTile][kLdH], ks[kTile][kLdH], vs[kTile][kLdH];
  __shared__ __align__(32) float ss[kTile][kLdS];
  __shared__ __align__(32) uint16_t ps[kTile][kLdP];
  __shared__ __align__(32) float os[kTile][kLdO];
  const int64_t n = blockIdx.x / tiles;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x % tiles);
  const int i0 = qt * kTile;
  const int64_t base = n * time * hs;
  const int64_t kv_base = (n / group) * time * hs;  // grouped-query: kv head n / G
  const int r = threadIdx.x / kPerRow, lane = threadIdx.x % kPerRow, w = threadIdx.x / 32;
  const int i = i0 + r;
  load_bits<E>(qs, q + base + static_cast<int64_t>(i0) * hs, min(kTile, time - i0), hs);
  float acc[kOut];
#pragma unroll
  for (int u = 0; u < kOut; ++u) acc[u] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // the previous tile's ks, vs, ps and os are read
    load_bits<E>(ks, k + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    load_bits<E>(vs, v + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    __syncthreads();
    if (w < 4) product_abt<E>(qs, ks, ss, w);
    __syncthreads();
    float s[kScores];
    float tmax = -INFINITY;
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const int c = lane + kPerRow * e;
      s[e] = j0 + c <= i ? round_to<E>(round_to<E>(ss[r][c]) * scale) : -INFINITY;
      tmax = fmaxf(tmax, s[e]);
    }
    const float m_new = fmaxf(m, row_max(tmax));
    const float alpha = expf(m - m_new);
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const float p = expf(s[e] - m_new);
      part = part + p;
      ps[r][lane + kPerRow * e] = bits_of<E>(p);
    }
    l = l * alpha + row_sum(part);
    m = m_new;
    __syncthreads();  // ps complete
    {
      wm::fragment<wm::accumulator, 16, 16, 16, float> pv;
      wm::fill_fragment(pv, 0.0f);
      product_pv<E, wm::row_major>(ps, vs, pv, w);
      stage(os, pv, w);
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      acc[u] = acc[u] * alpha + os[r][d];
    }
  }
  if (i < time) {
    const int64_t row = base + static_cast<int64_t>(i) * hs;
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) y[row + d] = E(acc[u] / l);
    }
    if (lane == 0) lse[n * time + i] = m + logf(l);
  }
}

// The backward's scalar phase on tensor-core products: q.k and dy.v of (i, j) as fp32 sums.
template <typename E>
__device__ __forceinline__ void grad_from_products(float qk, float dyv, int i, int j, float lse_i,
                                                   float dsum_i, int time, float scale,
                                                   uint16_t& p_low, uint16_t& ds) {
  p_low = 0;
  ds = 0;
  if (j > i || i >= time) return;
  const float p = expf(round_to<E>(round_to<E>(qk) * scale) - lse_i);
  const float dp = round_to<E>(dyv);
  ds = bits_of<E>(round_to<E>(p * (dp - dsum_i)) * scale);
  p_low = bits_of<E>(p);
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_tc_kernel(const E* __restrict__ q, const E* __restrict__ k,
                             const E* __restrict__ v, const E* __restrict__ dy,
                             const float* __restrict__ lse, const float* __restrict__ dsum,
                             E* __restrict__ dk, E* __restrict__ dv, float scale, int time, int hs,
                             int tiles, int group) {
  __shared__ __align__(32) uint16_t ks[kTile][kLdH], vs[kTile][kLdH], qs[kTile][kLdH],
      dys[kTile][kLdH];
  __shared__ __align__(32) float ss[kTile][kLdS], dps[kTile][kLdS];
  __shared__ __align__(32) uint16_t ps[kTile][kLdP], dss[kTile][kLdP];
  __shared__ __align__(32) float os[kTile][kLdO];
  __shared__ float lse_s[kTile], dsum_s[kTile];
  const int64_t nk = blockIdx.x / tiles;  // the key/value head
  const int kt = static_cast<int>(blockIdx.x % tiles);
  const int j0 = kt * kTile;
  const int64_t kv_base = nk * time * hs;
  const int r = threadIdx.x / kPerRow, lane = threadIdx.x % kPerRow, w = threadIdx.x / 32;
  load_bits<E>(ks, k + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
  load_bits<E>(vs, v + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
  wm::fragment<wm::accumulator, 16, 16, 16, float> acc_dv, acc_dk;
  wm::fill_fragment(acc_dv, 0.0f);
  wm::fill_fragment(acc_dk, 0.0f);
  // Its G query heads in order, each over the query tiles from the diagonal down: one fixed
  // order of the group's sums into dk and dv.
  const int steps = tiles - kt;
  for (int step = 0; step < group * steps; ++step) {
    const int64_t n = nk * group + step / steps;
    const int qt = kt + step % steps;
    const int64_t base = n * time * hs;
    const int i0 = qt * kTile;
    const int valid = min(kTile, time - i0);
    __syncthreads();
    load_bits<E>(qs, q + base + static_cast<int64_t>(i0) * hs, valid, hs);
    load_bits<E>(dys, dy + base + static_cast<int64_t>(i0) * hs, valid, hs);
    if (threadIdx.x < kTile) {
      const bool in = static_cast<int>(threadIdx.x) < valid;
      lse_s[threadIdx.x] = in ? lse[n * time + i0 + threadIdx.x] : 0.0f;
      dsum_s[threadIdx.x] = in ? dsum[n * time + i0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    if (w < 4) {
      product_abt<E>(qs, ks, ss, w);
    } else {
      product_abt<E>(dys, vs, dps, w - 4);
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const int c = lane + kPerRow * e;
      grad_from_products<E>(ss[r][c], dps[r][c], i0 + r, j0 + c, lse_s[r], dsum_s[r], time, scale,
                            ps[r][c], dss[r][c]);
    }
    __syncthreads();
    // dv += P^T dY, dk += dS^T Q (the tiles' rows are queries: the transposes read columns).
    product_pv<E, wm::col_major>(ps, dys, acc_dv, w);
    product_pv<E, wm::col_major>(dss, qs, acc_dk, w);
  }
  const int j = j0 + r;
  const int64_t row = kv_base + static_cast<int64_t>(j) * hs;
  __syncthreads();
  stage(os, acc_dv, w);
  __syncthreads();
  if (j < time) {
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) dv[row + d] = E(os[r][d]);
    }
  }
  __syncthreads();
  stage(os, acc_dk, w);
  __syncthreads();
  if (j < time) {
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) dk[row + d] = E(os[r][d]);
    }
  }
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_dq_tc_kernel(const E* __restrict__ q, const E* __restrict__ k,
                           const E* __restrict__ v, const E* __restrict__ dy,
                           const float* __restrict__ lse, const float* __restrict__ dsum,
                           E* __restrict__ dq, float scale, int time, int hs, int tiles,
                           int group) {
  __shared__ __align__(32) uint16_t qs[kTile][kLdH], dys[kTile][kLdH], ks[kTile][kLdH],
      vs[kTile][kLdH];
  __shared__ __align__(32) float ss[kTile][kLdS], dps[kTile][kLdS];
  __shared__ __align__(32) uint16_t dss[kTile][kLdP];
  __shared__ __align__(32) float os[kTile][kLdO];
  const int64_t n = blockIdx.x / tiles;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x % tiles);
  const int i0 = qt * kTile;
  const int64_t base = n * time * hs;
  const int64_t kv_base = (n / group) * time * hs;  // grouped-query: kv head n / G
  const int r = threadIdx.x / kPerRow, lane = threadIdx.x % kPerRow, w = threadIdx.x / 32;
  const int i = i0 + r;
  const int valid = min(kTile, time - i0);
  load_bits<E>(qs, q + base + static_cast<int64_t>(i0) * hs, valid, hs);
  load_bits<E>(dys, dy + base + static_cast<int64_t>(i0) * hs, valid, hs);
  const float lse_i = i < time ? lse[n * time + i] : 0.0f;
  const float dsum_i = i < time ? dsum[n * time + i] : 0.0f;
  wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
  wm::fill_fragment(acc, 0.0f);
  for (int kt = 0; kt <= qt; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();
    load_bits<E>(ks, k + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    load_bits<E>(vs, v + kv_base + static_cast<int64_t>(j0) * hs, min(kTile, time - j0), hs);
    __syncthreads();
    if (w < 4) {
      product_abt<E>(qs, ks, ss, w);
    } else {
      product_abt<E>(dys, vs, dps, w - 4);
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kScores; ++e) {
      const int c = lane + kPerRow * e;
      uint16_t p_low;
      grad_from_products<E>(ss[r][c], dps[r][c], i, j0 + c, lse_i, dsum_i, time, scale, p_low,
                            dss[r][c]);
    }
    __syncthreads();
    // dq += dS K: the key tile's rows are the product's inner dimension.
    product_pv<E, wm::row_major>(dss, ks, acc, w);
  }
  __syncthreads();
  stage(os, acc, w);
  __syncthreads();
  if (i < time) {
    const int64_t row = base + static_cast<int64_t>(i) * hs;
#pragma unroll
    for (int u = 0; u < kOut; ++u) {
      const int d = lane + kPerRow * u;
      if (d < hs) dq[row + d] = E(os[r][d]);
    }
  }
}

int tiles_of(int64_t time) {
  return static_cast<int>((time + kTile - 1) / kTile);
}

template <typename E>
void forward_as(bool tensor_cores, const void* q, const void* k, const void* v, void* y, float* lse,
                float scale, int64_t count, int64_t group, int64_t time, int64_t hs,
                cudaStream_t stream) {
  const int tiles = tiles_of(time);
  const auto blocks = static_cast<unsigned>(count * tiles);
  auto* kernel = tensor_cores ? attention_forward_tc_kernel<E> : attention_forward_kernel<E>;
  kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const E*>(q), static_cast<const E*>(k),
                                          static_cast<const E*>(v), static_cast<E*>(y), lse, scale,
                                          static_cast<int>(time), static_cast<int>(hs), tiles,
                                          static_cast<int>(group));
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

template <typename E>
void backward_as(bool tensor_cores, const void* q, const void* k, const void* v, const void* y,
                 const void* dy, const float* lse, float* dsum, void* dq, void* dk, void* dv,
                 float scale, int64_t count, int64_t group, int64_t time, int64_t hs,
                 cudaStream_t stream) {
  const int tiles = tiles_of(time);
  const int t = static_cast<int>(time), h = static_cast<int>(hs);
  attention_row_dot_kernel<E>
      <<<grid_size(static_cast<size_t>(count * time)), kBlockSize, 0, stream>>>(
          static_cast<const E*>(dy), static_cast<const E*>(y), dsum, count * time, h);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  const auto blocks = static_cast<unsigned>(count * tiles);
  const int g = static_cast<int>(group);
  // dk, dv: one block per (key/value head, key tile), count / G heads.
  const auto kv_blocks = static_cast<unsigned>(count / group * tiles);
  auto* dkdv = tensor_cores ? attention_dkdv_tc_kernel<E> : attention_dkdv_kernel<E>;
  dkdv<<<kv_blocks, kThreads, 0, stream>>>(static_cast<const E*>(q), static_cast<const E*>(k),
                                           static_cast<const E*>(v), static_cast<const E*>(dy), lse,
                                           dsum, static_cast<E*>(dk), static_cast<E*>(dv), scale, t,
                                           h, tiles, g);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  auto* dq_kernel = tensor_cores ? attention_dq_tc_kernel<E> : attention_dq_kernel<E>;
  dq_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const E*>(q), static_cast<const E*>(k),
                                             static_cast<const E*>(v), static_cast<const E*>(dy),
                                             lse, dsum, static_cast<E*>(dq), scale, t, h, tiles, g);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool attention_fused_supported(ElemType type, int64_t count, int64_t time, int64_t head_size) {
  if (type != ElemType::f16 && type != ElemType::bf16) return false;
  if (head_size < 1 || head_size > kAttentionMaxHeadSize || time < 1 || count < 1) return false;
  // One block per (head, tile) in a 1-d grid; offsets n * T * hs in int64, T and hs in int.
  const int64_t tiles = (time + kTile - 1) / kTile;
  return time <= (int64_t{1} << 30) && count <= (int64_t{1} << 31) / tiles - 1;
}

void launch_attention_forward(bool tensor_cores, const void* q, const void* k, const void* v,
                              void* y, float* lse, ElemType type, float scale, int64_t count,
                              int64_t group, int64_t time, int64_t head_size, cudaStream_t stream) {
  if (group < 1 || count % group != 0) {
    throw Error{ErrorKind::invalid_argument, "attention_forward: group must divide count"};
  }
  if (!attention_fused_supported(type, count, time, head_size)) {
    throw Error{ErrorKind::invalid_argument,
                "attention_forward: the fused kernel takes f16/bf16 "
                "heads of size 1.." +
                    std::to_string(kAttentionMaxHeadSize)};
  }
  if (type == ElemType::f16) {
    forward_as<half>(tensor_cores, q, k, v, y, lse, scale, count, group, time, head_size, stream);
  } else {
    forward_as<bfloat16>(tensor_cores, q, k, v, y, lse, scale, count, group, time, head_size,
                         stream);
  }
}

void launch_attention_backward(bool tensor_cores, const void* q, const void* k, const void* v,
                               const void* y, const void* dy, const float* lse, float* dsum,
                               void* dq, void* dk, void* dv, ElemType type, float scale,
                               int64_t count, int64_t group, int64_t time, int64_t head_size,
                               cudaStream_t stream) {
  if (group < 1 || count % group != 0) {
    throw Error{ErrorKind::invalid_argument, "attention_backward: group must divide count"};
  }
  if (!attention_fused_supported(type, count, time, head_size)) {
    throw Error{ErrorKind::invalid_argument,
                "attention_backward: the fused kernel takes "
                "f16/bf16 heads of size 1.." +
                    std::to_string(kAttentionMaxHeadSize)};
  }
  if (type == ElemType::f16) {
    backward_as<half>(tensor_cores, q, k, v, y, dy, lse, dsum, dq, dk, dv, scale, count, group,
                      time, head_size, stream);
  } else {
    backward_as<bfloat16>(tensor_cores, q, k, v, y, dy, lse, dsum, dq, dk, dv, scale, count, group,
                          time, head_size, stream);
  }
}

}  // namespace ampctl::kernels
