// Elementwise float ops with one rounding to the output type (backend.h conventions).
//
//   mul_scalar_tensor: out = round_out(float(x) * scale[0]). The scale is a one-element device
//     tensor read by every thread, so scaling the loss by the GradScaler's scale needs no host
//     read-back.
//   add_: dst = round_dst(float(dst) + alpha * float(src)). alpha * src and the sum round
//     separately: the build compiles with --fmad=false on the device and -ffp-contract=off on the
//     host, so no fused multiply-add merges them and the CPU backend gets the same bits.
//
//   scale_in_place: x = round_x(factor * float(x)), x = +0 when factor == 0: BLAS's C := beta * C,
//     which a gemm with an empty inner dimension reduces to.
//
// Invariants: one grid-stride pass; element i of the output depends only on element i of the
// inputs, so an output aliasing an input (same element, same index) is safe; no __restrict__.
#include "memory_elementwise.cuh"

namespace ampctl::kernels {

// kernels

template <typename X, typename Out>
static __global__ void mul_scalar_tensor_kernel(const X* x, const float* scale, Out* out,
                                                size_t n) {
  const float s = *scale;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = Out(static_cast<float>(x[i]) * s);
  }
}

template <typename Dst, typename Src>
static __global__ void add_kernel(Dst* dst, const Src* src, float alpha, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = Dst(static_cast<float>(dst[i]) + alpha * static_cast<float>(src[i]));
  }
}

template <typename X>
static __global__ void scale_in_place_kernel(X* x, float factor, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] = X(factor == 0.0f ? 0.0f : factor * static_cast<float>(x[i]));
  }
}

// launchers

void launch_mul_scalar_tensor(const void* x, ElemType x_type, const float* scale, void* out,
                              ElemType out_type, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_floating(x_type, "mul_scalar_tensor input", [&](auto x_tag) {
    dispatch_floating(out_type, "mul_scalar_tensor output", [&](auto out_tag) {
      using X = typename decltype(x_tag)::type;
      using Out = typename decltype(out_tag)::type;
      mul_scalar_tensor_kernel<X, Out><<<grid_size(n), kBlockSize, 0, stream>>>(
          static_cast<const X*>(x), scale, static_cast<Out*>(out), n);
    });
  });
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_add(void* dst, ElemType dst_type, const void* src, ElemType src_type, float alpha,
                size_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_floating(dst_type, "add_ destination", [&](auto dst_tag) {
    dispatch_floating(src_type, "add_ source", [&](auto src_tag) {
      using Dst = typename decltype(dst_tag)::type;
      using Src = typename decltype(src_tag)::type;
      add_kernel<Dst, Src><<<grid_size(n), kBlockSize, 0, stream>>>(
          static_cast<Dst*>(dst), static_cast<const Src*>(src), alpha, n);
    });
  });
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_scale_in_place(void* x, ElemType x_type, float factor, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_floating(x_type, "scale_in_place", [&](auto x_tag) {
    using X = typename decltype(x_tag)::type;
    scale_in_place_kernel<X>
        <<<grid_size(n), kBlockSize, 0, stream>>>(static_cast<X*>(x), factor, n);
  });
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
