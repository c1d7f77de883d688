// gather_rows: a batch of rows of a data set that lives on the GPU, picked by the loader's
// permutation (also on the GPU), so a training step copies nothing from the host.
//
// Invariants: one grid-stride pass over rows * width 32-bit words; consecutive threads read
// consecutive words of one row (coalesced within a row). Indices are clamped into [0, n) instead
// of checked: a check would need a host sync, and the loader produced them in range.
#include "memory_gather.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void gather_rows_kernel(const uint32_t* __restrict__ src, int64_t n,
                                          int64_t width, const int32_t* __restrict__ index,
                                          uint32_t* __restrict__ dst, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / width;
    const int64_t c = i - r * width;
    int64_t row = index[r];
    row = row < 0 ? 0 : (row >= n ? n - 1 : row);
    dst[i] = src[row * width + c];
  }
}

// launchers

void launch_gather_rows(const uint32_t* src, int64_t n, int64_t width, const int32_t* index,
                        uint32_t* dst, int64_t rows, cudaStream_t stream) {
  const int64_t total = rows * width;
  if (total == 0 || n == 0) return;
  gather_rows_kernel<<<grid_size(static_cast<size_t>(total)), kBlockSize, 0, stream>>>(
      src, n, width, index, dst, total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
