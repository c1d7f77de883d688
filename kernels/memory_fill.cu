// fill: dst[i] := pattern, for a 16- or 32-bit pattern.
//
// The fill value is rounded to the element type on the host (lib/src/backend/cuda), so the device
// only stores bits: what a fill writes does not depend on device arithmetic at all.
//
// Invariants: one grid-stride pass; every element of dst is written, nothing else is.
#include "memory_fill.cuh"

namespace ampctl::kernels {

// kernels

template <typename U>
static __global__ void fill_kernel(U* __restrict__ dst, U bits, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = bits;
  }
}

// launchers

void launch_fill(void* dst, size_t elem_bytes, uint32_t bits, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (elem_bytes == 2) {
    fill_kernel<uint16_t><<<grid_size(n), kBlockSize, 0, stream>>>(static_cast<uint16_t*>(dst),
                                                                   static_cast<uint16_t>(bits), n);
  } else if (elem_bytes == 4) {
    fill_kernel<uint32_t>
        <<<grid_size(n), kBlockSize, 0, stream>>>(static_cast<uint32_t*>(dst), bits, n);
  } else {
    throw Error{ErrorKind::invalid_argument,
                "fill: element size must be 2 or 4 bytes, got " + std::to_string(elem_bytes)};
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
