// The Linear layer's kernels besides its matrix product.
//
//   bias_add_round: y = round_y(acc + float(b)) over an f32 product: the bias joins the float
//     accumulator before the one rounding, as cuBLASLt's bias epilogue does. The CUDA backend uses
//     it only when cuBLASLt offers no algorithm for a layout (see linear_forward there).
//   sum_rows: the bias gradient out[c] = sum_r x[r, c]. Deterministic: column_chunk_sums
//     (device_util.cuh) sums each chunk of kRowsPerChunk rows per column in a fixed order; with one
//     chunk that block rounds and stores the result, with several each chunk's sum goes to the
//     workspace and a second kernel adds the chunks in order (one thread per column) and rounds.
//     No atomics, and the order depends on the shape alone, so the bits repeat run to run and
//     device to device. Against the CPU's order the difference is bounded by float accumulation
//     over at most kRowsPerChunk / kRowThreads + log2(kRowThreads) + chunks additions per sum.
//
// Invariants: each output element is written by one thread.
#include "device_util.cuh"
#include "nn_linear.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void bias_add_round_kernel(const float* acc, const void* b, ElemType b_type,
                                             void* y, ElemType y_type, int64_t cols, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // An empty product (acc == nullptr) is +0, as the CPU's zero-filled accumulator.
    const float a = acc != nullptr ? acc[i] : 0.0f;
    store_float(y, y_type, i,
                b != nullptr ? a + load_float(b, b_type, i % static_cast<size_t>(cols)) : a);
  }
}

// One block per (column tile, row chunk); `partials` is nullptr when there is one chunk.
static __global__ void __launch_bounds__(kColTile* kRowThreads)
    sum_rows_chunks_kernel(const void* x, ElemType x_type, void* out, ElemType out_type,
                           int64_t rows, int64_t cols, float* partials) {
  float sums[1];
  column_chunk_sums<1>(
      [&](int64_t r, int64_t c, float(&v)[1]) {
        v[0] = load_float(x, x_type, static_cast<size_t>(r * cols + c));
      },
      rows, cols, sums);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  if (threadIdx.y != 0 || c >= cols) return;
  if (partials == nullptr) {
    store_float(out, out_type, static_cast<size_t>(c), sums[0]);
  } else {
    partials[blockIdx.y * cols + c] = sums[0];
  }
}

static __global__ void sum_rows_finalize_kernel(const float* partials, int64_t chunks, void* out,
                                                ElemType out_type, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) acc = acc + partials[k * cols + c];
  store_float(out, out_type, static_cast<size_t>(c), acc);
}

// launchers

void launch_bias_add_round(const float* acc, const void* b, ElemType b_type, void* y,
                           ElemType y_type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (y_type == ElemType::i32 || (b != nullptr && b_type == ElemType::i32)) {
    throw Error{ErrorKind::invalid_argument, "bias_add_round: expected floating dtypes, got i32"};
  }
  const size_t n = static_cast<size_t>(rows * cols);
  if (n == 0) return;
  bias_add_round_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(acc, b, b_type, y, y_type, cols,
                                                                 n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

size_t sum_rows_workspace_floats(int64_t rows, int64_t cols) {
  const int64_t chunks = column_chunks(rows);
  return chunks > 1 ? static_cast<size_t>(chunks * cols) : 0;
}

void launch_sum_rows(const void* x, ElemType x_type, void* out, ElemType out_type, int64_t rows,
                     int64_t cols, float* workspace, cudaStream_t stream) {
  if (x_type == ElemType::i32 || out_type == ElemType::i32) {
    throw Error{ErrorKind::invalid_argument, "sum_rows: expected floating dtypes, got i32"};
  }
  if (cols == 0) return;
  const int64_t chunks = column_chunks(rows);
  if (chunks > 65535) {
    throw Error{ErrorKind::invalid_argument,
                "sum_rows: " + std::to_string(rows) + " rows exceed the " +
                    std::to_string(65535 * kRowsPerChunk) + " one launch reduces"};
  }
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
                  static_cast<unsigned>(chunks));
  const dim3 block(kColTile, kRowThreads);
  sum_rows_chunks_kernel<<<grid, block, 0, stream>>>(x, x_type, out, out_type, rows, cols,
                                                     chunks > 1 ? workspace : nullptr);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  if (chunks > 1) {
    sum_rows_finalize_kernel<<<static_cast<unsigned>((cols + kBlockSize - 1) / kBlockSize),
                               kBlockSize, 0, stream>>>(workspace, chunks, out, out_type, cols);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace ampctl::kernels
