// clip_coef: torch.nn.utils.clip_grad_norm_'s coefficient, clamp(max_norm / (norm + 1e-6), max=1),
// formed in float32 by one thread from the device norm, so clipping needs no host read-back: the
// caller scales the gradients by the device coefficient (mul_scalar_tensor).
//
// The formula is nn::clip_coef (nn_math.h), the CPU backend's: PyTorch's reciprocal-then-product
// (two roundings, nvcc's default -prec-div=true), clamped at 1 with NaN propagated.
#include "ampctl/math/nn_math.h"
#include "nn_clip.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void clip_coef_kernel(const float* norm, float max_norm, float* coef) {
  *coef = nn::clip_coef(*norm, max_norm);
}

// launchers

void launch_clip_coef(const float* norm, float max_norm, float* coef, cudaStream_t stream) {
  clip_coef_kernel<<<1, 1, 0, stream>>>(norm, max_norm, coef);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
