// Per-element math of the neural-network ops, shared by the CPU backend and the CUDA kernels so
// host tests run the code the GPU runs. Everything here is float32 ("opmath"); the callers widen
// f16/bf16 inputs exactly and round each output once to its tensor's dtype, which is where
// PyTorch autocast rounds (SPEC section 5).
//
// Transcendentals (erff, expf, tanhf, logf) are the platform's: the CPU's libm and CUDA's
// device functions may differ by an ulp or two in float, so CPU-vs-GPU tests of activations and
// losses allow that (and one ulp of the output dtype after rounding); everything else is bitwise.
#pragma once

#include <cmath>
#include <cstdint>

#include "ampctl/core/hd.h"
#include "ampctl/core/philox.h"

namespace ampctl::nn {

enum class ActivationKind : int32_t { relu = 0, gelu = 1, tanh = 2 };

// GELU, erf form (PyTorch's default approximate='none'): 0.5 * x * (1 + erf(x / sqrt(2))).
AMPCTL_HD float gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
}

// d/dx GELU as PyTorch's GeluBackward: cdf + x * pdf with pdf = exp(-x^2/2) / sqrt(2 pi).
AMPCTL_HD float gelu_grad(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
  const float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;
  return cdf + x * pdf;
}

AMPCTL_HD float activation_forward(ActivationKind k, float x) {
  switch (k) {
    // NaN propagates (as PyTorch's relu), so an overflow upstream is still detected.
    case ActivationKind::relu:
      return x != x ? x : (x > 0.0f ? x : 0.0f);
    case ActivationKind::gelu:
      return gelu(x);
    case ActivationKind::tanh:
      return tanhf(x);
  }
  return x;
}

// The gradient of the activation given its input x and output y (relu and tanh use the output,
// as PyTorch's threshold_backward and tanh_backward do; gelu uses the input).
AMPCTL_HD float activation_backward(ActivationKind k, float x, float y, float dy) {
  switch (k) {
    case ActivationKind::relu:
      return y > 0.0f ? dy : 0.0f;
    case ActivationKind::gelu:
      return dy * gelu_grad(x);
    case ActivationKind::tanh:
      return dy * (1.0f - y * y);
  }
  return dy;
}

// Dropout: element i of call `offset` is kept when its Philox uniform is below 1 - p; kept
// elements are multiplied by 1 / (1 - p) (computed once in float). The mask is regenerated in
// the backward pass from (seed, offset, i), so no mask is stored.
AMPCTL_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  return philox_uniform(philox_u32(seed, offset, i)) >= p;
}
AMPCTL_HD float dropout_scale(float p) {
  return 1.0f / (1.0f - p);
}

// Softmax cross-entropy gradient for one logit, as PyTorch's log_softmax_backward of
// nll_loss_backward with reduction 'mean': c = -grad_scale / batch, then
// d = (j == target ? c : 0) - exp(log_softmax_j) * c.
AMPCTL_HD float xent_grad(float log_softmax_j, bool is_target, float c) {
  return (is_target ? c : 0.0f) - expf(log_softmax_j) * c;
}

// MSE gradient for one element, as PyTorch's mse_loss_backward with reduction 'mean':
// (2 / numel) * (pred - target) * grad_scale.
AMPCTL_HD float mse_grad(float pred, float target, float two_over_n, float grad_scale) {
  return two_over_n * (pred - target) * grad_scale;
}

}  // namespace ampctl::nn
