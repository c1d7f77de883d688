// Rotary position embedding (Backend::rope_forward / rope_backward), HF's rotate-half layout:
// one grid-stride pass over the (row, d) pairs of [N, T, hs] with d < hs / 2; each thread reads
// its pair (d, d + hs / 2) and the position's cos and sin, computes both outputs with nn_math.h's
// rope_* functions (the ones the CPU backend calls: two float products and a float sum, no fused
// multiply-add, so the GPU gives the CPU's bits) and writes them once.
//
// Invariants: a pair's two elements are read and written by one thread, so out may be in; the
// tables are read only; no host sync.
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "transformer_rope.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void rope_kernel(bool inverse, const void* in, ElemType in_type, const float* cos,
                                   const float* sin, void* out, ElemType out_type, int64_t time,
                                   int64_t half_size, int64_t pos0, int input_dtype, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const auto h = static_cast<size_t>(half_size);
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t row = i / h, d = i - row * h;
    const int64_t p = pos0 + static_cast<int64_t>(row % static_cast<size_t>(time));
    const size_t i0 = row * 2 * h + d, i1 = i0 + h;
    const float a = load_float(in, in_type, i0), b = load_float(in, in_type, i1);
    const float c = cos[static_cast<size_t>(p) * h + d], s = sin[static_cast<size_t>(p) * h + d];
    if (inverse) {
      store_float(out, out_type, i0, nn::rope_grad_first(a, b, c, s, input_dtype));
      store_float(out, out_type, i1, nn::rope_grad_second(a, b, c, s, input_dtype));
    } else {
      store_float(out, out_type, i0, nn::rope_first(a, b, c, s));
      store_float(out, out_type, i1, nn::rope_second(a, b, c, s));
    }
  }
}

// launchers

void launch_rope(bool inverse, const void* in, ElemType in_type, const float* cos, const float* sin,
                 void* out, ElemType out_type, int64_t count, int64_t time, int64_t head_size,
                 int64_t pos0, ElemType input_type, cudaStream_t stream) {
  for (const ElemType t : {in_type, out_type, input_type}) {
    if (t == ElemType::i32) {
      throw Error{ErrorKind::invalid_argument, "rope: expected floating dtypes, got i32"};
    }
  }
  const auto n = static_cast<size_t>(count * time * (head_size / 2));
  if (n == 0) return;
  rope_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(inverse, in, in_type, cos, sin, out,
                                                       out_type, time, head_size / 2, pos0,
                                                       static_cast<int>(input_type), n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
