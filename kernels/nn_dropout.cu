// Dropout forward and backward, one kernel: element i is kept when nn::dropout_keep(seed, offset,
// i, p) says so (Philox4x32-10 on the counter (i / 4, offset), lane i % 4: the draw the CPU backend
// makes for the same element), and a kept element is multiplied in float by nn::dropout_scale(p)
// and rounded once to the output dtype; a dropped one is +0. The mask is a pure function of
// (seed, offset, i), so the backward pass regenerates it instead of reading a stored one, and the
// CPU and the GPU drop the same elements bit for bit.
//
// Invariants: element i of y depends only on element i of x, so y may alias x; no __restrict__.
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "nn_dropout.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void dropout_kernel(const void* x, ElemType x_type, void* y, ElemType y_type,
                                      float p, uint64_t seed, uint64_t offset, size_t n) {
  const float scale = nn::dropout_scale(p);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const bool keep = nn::dropout_keep(seed, offset, i, p);
    store_float(y, y_type, i, keep ? load_float(x, x_type, i) * scale : 0.0f);
  }
}

// launchers

void launch_dropout(const void* x, ElemType x_type, void* y, ElemType y_type, float p,
                    uint64_t seed, uint64_t offset, size_t n, cudaStream_t stream) {
  if (x_type == ElemType::i32 || y_type == ElemType::i32) {
    throw Error{ErrorKind::invalid_argument, "dropout: expected floating dtypes, got i32"};
  }
  if (n == 0) return;
  dropout_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(x, x_type, y, y_type, p, seed, offset, n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
