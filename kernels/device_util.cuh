// Device-side building blocks shared by the kernel files (included by .cu files only; it holds no
// launchers): element access by a run-time element type, 16-byte lane packs for vectorised
// passes, and the fixed-order reductions that keep every sum reproducible.
//
//   * load_float / store_float: element i of a tensor whose ElemType is known only at run time,
//     widened exactly to float / rounded once from float (half.h's conversions). The switch is on
//     a kernel argument, the same for every thread, so it costs no divergence; it keeps the
//     nn kernels, whose tensors may each be f32, f16 or bf16, from instantiating every combination.
//   * Vec<T, N> / Lanes<T>: N elements (Lanes: the 16 / sizeof(T) elements of one aligned 16-byte
//     word) moved with one 64- or 128-bit load or store, so a memory-bound pass keeps enough
//     bytes in flight.
//   * warp_sum: an xor butterfly. IEEE addition is commutative, so every lane ends with the same
//     bits, and the pairing is fixed, so the result is reproducible.
//   * block_tree_sum: a shared-memory tree with a fixed pairing (stride halving).
//   * column_chunk_sums: the column reduction of sum_rows and the LayerNorm parameter gradients.
//     A block covers kColTile columns (threadIdx.x) of one chunk of kRowsPerChunk rows
//     (blockIdx.y); thread row ty sums rows ty, ty + kRowThreads, ... of the chunk in order, and
//     a shared-memory tree over ty combines them. The geometry depends on the shape alone, never
//     on the device, so the sums are the same bits on any GPU.
#pragma once

#include <cstring>

#include "ampctl/core/half.h"
#include "kernel_common.cuh"

namespace ampctl::kernels {

__device__ __forceinline__ float load_float(const void* p, ElemType t, size_t i) {
  switch (t) {
    case ElemType::f32:
      return static_cast<const float*>(p)[i];
    case ElemType::f16:
      return static_cast<float>(static_cast<const half*>(p)[i]);
    case ElemType::bf16:
      return static_cast<float>(static_cast<const bfloat16*>(p)[i]);
    case ElemType::i32:
      break;  // rejected by the launchers
  }
  return 0.0f;
}

__device__ __forceinline__ void store_float(void* p, ElemType t, size_t i, float v) {
  switch (t) {
    case ElemType::f32:
      static_cast<float*>(p)[i] = v;
      return;
    case ElemType::f16:
      static_cast<half*>(p)[i] = half(v);
      return;
    case ElemType::bf16:
      static_cast<bfloat16*>(p)[i] = bfloat16(v);
      return;
    case ElemType::i32:
      break;  // rejected by the launchers
  }
}

// ---- vector packs ----

// N consecutive elements moved as one 4-, 8- or 16-byte word.
template <typename T, int N>
struct Vec {
  static constexpr int kCount = N;
  T v[N];
};

template <int kBytes>
struct WordOf;
template <>
struct WordOf<4> {
  using type = unsigned int;
};
template <>
struct WordOf<8> {
  using type = uint2;
};
template <>
struct WordOf<16> {
  using type = uint4;
};

// p must be aligned to the pack's size.
template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  using Word = typename WordOf<sizeof(T) * N>::type;
  const Word raw = *reinterpret_cast<const Word*>(p);
  Vec<T, N> l;
  static_assert(sizeof(l) == sizeof(raw), "a pack is one word");
  memcpy(&l, &raw, sizeof raw);
  return l;
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& l) {
  using Word = typename WordOf<sizeof(T) * N>::type;
  Word raw;
  memcpy(&raw, &l, sizeof raw);
  *reinterpret_cast<Word*>(p) = raw;
}

// One 16-byte word of T: 4 floats or 8 halves.
template <typename T>
using Lanes = Vec<T, 16 / static_cast<int>(sizeof(T))>;

template <typename T>
__device__ __forceinline__ Lanes<T> load_lanes(const T* p) {
  return load_vec<Lanes<T>::kCount>(p);
}

template <typename T>
__device__ __forceinline__ void store_lanes(T* p, const Lanes<T>& l) {
  store_vec(p, l);
}

// Elements of T before the first 16-byte boundary at or after p (p is T-aligned), at most n.
template <typename T>
__host__ __device__ __forceinline__ size_t elements_to_alignment(const T* p, size_t n) {
  const size_t misalign = reinterpret_cast<uintptr_t>(p) % 16;
  const size_t head = misalign == 0 ? 0 : (16 - misalign) / sizeof(T);
  return head < n ? head : n;
}

// ---- reductions ----

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = v + __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sums shared[0 .. kWidth) into shared[0] by a fixed tree; every thread of the block must call it,
// and the block must have at least kWidth / 2 threads.
template <unsigned kWidth, typename T>
__device__ __forceinline__ void block_tree_sum(T* shared) {
  for (unsigned half_width = kWidth / 2; half_width > 0; half_width /= 2) {
    __syncthreads();
    if (threadIdx.x < half_width)
      shared[threadIdx.x] = shared[threadIdx.x] + shared[threadIdx.x + half_width];
  }
  __syncthreads();
}

// The geometry of column reductions over a row-major [rows, cols] matrix.
constexpr unsigned kColTile = 32;       // columns per block (threadIdx.x)
constexpr unsigned kRowThreads = 8;     // thread rows per block (threadIdx.y)
constexpr int64_t kRowsPerChunk = 512;  // rows per block (blockIdx.y indexes the chunks)

__host__ __device__ __forceinline__ int64_t column_chunks(int64_t rows) {
  return rows == 0 ? 1 : (rows + kRowsPerChunk - 1) / kRowsPerChunk;
}

// For kSums values per element (value(r, c, v) fills v[0 .. kSums)), block (blockIdx.x, blockIdx.y)
// sums each over
// the rows of chunk blockIdx.y for column c = blockIdx.x * kColTile + threadIdx.x. On return the
// sums are in sums[] of the threads with threadIdx.y == 0 (others hold partial values); every
// thread of the block must call it. Columns past `cols` sum to 0 and must not be stored.
template <int kSums, typename F>
__device__ __forceinline__ void column_chunk_sums(const F& value, int64_t rows, int64_t cols,
                                                  float (&sums)[kSums]) {
  __shared__ float shared[kSums][kRowThreads][kColTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk;
  const int64_t r1 = r0 + kRowsPerChunk < rows ? r0 + kRowsPerChunk : rows;
  float acc[kSums];
  for (int k = 0; k < kSums; ++k) acc[k] = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowThreads) {
      float v[kSums];
      value(r, c, v);
      for (int k = 0; k < kSums; ++k) acc[k] = acc[k] + v[k];
    }
  }
  for (int k = 0; k < kSums; ++k) shared[k][threadIdx.y][threadIdx.x] = acc[k];
  for (unsigned half_rows = kRowThreads / 2; half_rows > 0; half_rows /= 2) {
    __syncthreads();
    if (threadIdx.y < half_rows) {
      for (int k = 0; k < kSums; ++k) {
        shared[k][threadIdx.y][threadIdx.x] =
            shared[k][threadIdx.y][threadIdx.x] + shared[k][threadIdx.y + half_rows][threadIdx.x];
      }
    }
  }
  __syncthreads();
  for (int k = 0; k < kSums; ++k) sums[k] = shared[k][0][threadIdx.x];
}

}  // namespace ampctl::kernels
