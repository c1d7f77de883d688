// clip_coef: torch.nn.utils.clip_grad_norm_'s coefficient, clamp(max_norm / (norm + 1e-6), max=1),
// formed in float32 by one thread from the device norm, so clipping needs no host read-back: the
// caller scales the gradients by the device coefficient (mul_scalar_tensor).
//
// Float32 as PyTorch evaluates it: total_norm + 1e-6 adds the float nearest 1e-6 to a float
// tensor, and `max_norm / tensor` is Tensor.__rtruediv__, i.e. tensor.reciprocal() * max_norm: two
// roundings (an IEEE reciprocal, nvcc's default -prec-div=true, then the product), not one
// division. clamp(max=1) propagates NaN (a NaN compares false, so `q > 1 ? 1 : q` keeps it).
#include "clip.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void clip_coef_kernel(const float* norm, float max_norm, float* coef) {
  const float q = (1.0f / (*norm + 1e-6f)) * max_norm;
  *coef = q > 1.0f ? 1.0f : q;
}

// launchers

void launch_clip_coef(const float* norm, float max_norm, float* coef, cudaStream_t stream) {
  clip_coef_kernel<<<1, 1, 0, stream>>>(norm, max_norm, coef);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
