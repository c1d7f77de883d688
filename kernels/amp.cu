// The loss-scaling ops (SPEC section 3). The per-element and per-step math is amp_math.h's, the
// same functions the CPU backend calls; these kernels only decide who runs it on which element.
//
//   non_finite_check_and_unscale: PyTorch's _amp_foreach_non_finite_check_and_unscale_ as one
//     launch over up to kMaxTensorsPerLaunch tensors (the descriptors travel as the kernel's
//     parameter: no host-to-device copy, no sync). Each thread keeps a private found flag over its
//     grid-stride share of every tensor and, if it saw an inf or NaN, stores 1.0f to found_inf.
//     Racing stores all write the same value, so no atomic is needed, and nothing ever writes 0:
//     the flag accumulates across launches and calls until the caller resets it.
//     With inv_scale == 1 the pass only checks: elements are not rewritten, so their bits
//     (NaN payloads included) stay as they were.
//   inv_scale and update_scale: one thread runs amp::inv_scale_of / amp::update_scale_state on the
//     device scalars, so the scaler's state never visits the host during a step.
//
// Invariants: element i of a tensor is read and written by one thread only; the found flag is
// monotone (0 -> 1).
#include "amp.cuh"

namespace ampctl::kernels {

// kernels

template <typename T>
static __device__ float unscale_range(T* x, size_t n, size_t first, size_t stride, float inv) {
  float found = 0.0f;
  for (size_t i = first; i < n; i += stride) {
    const float r = amp::unscale_value(static_cast<float>(x[i]), inv, &found);
    if (inv != 1.0f) x[i] = T(r);
  }
  return found;
}

static __global__ void non_finite_check_and_unscale_kernel(const TensorPack pack, float* found_inf,
                                                           const float* inv_scale) {
  const float inv = *inv_scale;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  float found = 0.0f;
  for (int t = 0; t < pack.count; ++t) {
    const TensorDesc& d = pack.tensors[t];
    float f = 0.0f;
    switch (d.type) {
      case ElemType::f32:
        f = unscale_range(static_cast<float*>(d.data), d.numel, first, stride, inv);
        break;
      case ElemType::f16:
        f = unscale_range(static_cast<half*>(d.data), d.numel, first, stride, inv);
        break;
      case ElemType::bf16:
        f = unscale_range(static_cast<bfloat16*>(d.data), d.numel, first, stride, inv);
        break;
      case ElemType::i32:
        break;  // rejected by the launcher
    }
    if (f != 0.0f) found = 1.0f;
  }
  if (found != 0.0f) *found_inf = 1.0f;
}

static __global__ void inv_scale_kernel(const float* scale, float* inv) {
  *inv = amp::inv_scale_of(*scale);
}

static __global__ void update_scale_kernel(float* scale, int32_t* growth_tracker,
                                           int32_t* hysteresis_tracker, const float* found_inf,
                                           const amp::ScaleUpdateParams params) {
  amp::update_scale_state(scale, growth_tracker, hysteresis_tracker, *found_inf, params);
}

// launchers

void launch_non_finite_check_and_unscale(const TensorPack& pack, float* found_inf,
                                         const float* inv_scale, cudaStream_t stream) {
  if (pack.count == 0 || pack.max_numel == 0) return;
  for (int t = 0; t < pack.count; ++t) {
    if (pack.tensors[t].type == ElemType::i32) {
      throw Error{ErrorKind::invalid_argument,
                  "non_finite_check_and_unscale_: tensor " + std::to_string(t) +
                      " of the pack is i32, expected a floating dtype"};
    }
  }
  non_finite_check_and_unscale_kernel<<<grid_size(pack.max_numel), kBlockSize, 0, stream>>>(
      pack, found_inf, inv_scale);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_inv_scale(const float* scale, float* inv, cudaStream_t stream) {
  inv_scale_kernel<<<1, 1, 0, stream>>>(scale, inv);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                         const float* found_inf, const amp::ScaleUpdateParams& params,
                         cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, hysteresis_tracker, found_inf,
                                           params);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
