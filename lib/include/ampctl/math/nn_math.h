// Per-element math of the neural-network ops, shared by the CPU backend and the CUDA kernels so
// host tests run the code the GPU runs. Everything here is float32 ("opmath"); the callers widen
// f16/bf16 inputs exactly and round each output once to its tensor's dtype, which is where
// PyTorch autocast rounds (docs/reference.md, "Precision").
//
// Transcendentals (erff, expf, tanhf, logf) are the platform's: the CPU's libm and CUDA's
// device functions may differ by an ulp or two in float, so CPU-vs-GPU tests of activations and
// losses allow that (and one ulp of the output dtype after rounding); everything else is bitwise.
#pragma once

#include <cmath>
#include <cstdint>

#include "ampctl/core/half.h"
#include "ampctl/core/hd.h"
#include "ampctl/core/philox.h"

namespace ampctl::nn {

// gelu_tanh is PyTorch's GELU(approximate='tanh'), GPT-2's activation.
enum class ActivationKind : int32_t { relu = 0, gelu = 1, tanh = 2, gelu_tanh = 3 };

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

// GELU, tanh form (PyTorch's approximate='tanh', GeluKernel.cpp's scalar and vector paths in
// float, left to right): inner = kBeta * (x + kKappa * x^3) with x^3 = (x * x) * x and
// kBeta = sqrt(2 / pi) (M_SQRT2 * M_2_SQRTPI * 0.5 in double, rounded to float);
// 0.5 * x * (1 + tanh(inner)).
inline constexpr float kGeluTanhBeta =
    static_cast<float>(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
inline constexpr float kGeluTanhKappa = 0.044715f;
AMPCTL_HD float gelu_tanh(float x) {
  const float x_cube = x * x * x;
  const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d/dx of gelu_tanh as PyTorch's GeluBackward (tanh): with t = tanh(inner),
// 0.5 * (1 + t) + (0.5 * x) * (1 - t * t) * (kBeta * (1 + 3 * kKappa * x^2)), each factor
// rounded in that order (3 * kKappa is one float product, as there).
AMPCTL_HD float gelu_tanh_grad(float x) {
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_cube);
  const float t = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.0f + t;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.0f - t * t;
  const float inner_derivative = kGeluTanhBeta * (1.0f + 3.0f * kGeluTanhKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return left_derivative + right_derivative;
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
    case ActivationKind::gelu_tanh:
      return gelu_tanh(x);
  }
  return x;
}

// Whether activation_backward reads the forward input x (else it reads the output y).
AMPCTL_HD bool activation_reads_input(ActivationKind k) {
  return k == ActivationKind::gelu || k == ActivationKind::gelu_tanh;
}

// The gradient of the activation given its input x and output y (relu and tanh use the output,
// as PyTorch's threshold_backward and tanh_backward do; gelu and gelu_tanh use the input).
AMPCTL_HD float activation_backward(ActivationKind k, float x, float y, float dy) {
  switch (k) {
    case ActivationKind::relu:
      return y > 0.0f ? dy : 0.0f;
    case ActivationKind::gelu:
      return dy * gelu_grad(x);
    case ActivationKind::tanh:
      return dy * (1.0f - y * y);
    case ActivationKind::gelu_tanh:
      return dy * gelu_tanh_grad(x);
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

// Softmax cross-entropy, PyTorch's log_softmax + nll_loss. log_softmax of logit x given the row's
// max (the value at torch.argmax, which shifts the exponentials) and lse = log(sum(exp(x - max))):
// (x - max) - lse, subtracting the max first as PyTorch does, so a large logit loses no digits
// before the lse is taken off. The sums behind lse stay with the callers (their orders differ).
AMPCTL_HD float xent_log_softmax(float x, float max, float lse) {
  return (x - max) - lse;
}

// One row's nll_loss term, -log_softmax of the target logit. The callers add the terms (adding
// the negation is bitwise a subtraction) and divide by the row count.
AMPCTL_HD float xent_row_loss(float log_softmax_target) {
  return -log_softmax_target;
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

// LayerNorm over a row with its mean and the biased variance var of the centred values:
// rstd = 1 / sqrt(var + eps), an IEEE square root and then an IEEE division (two roundings, as
// PyTorch's CPU kernel; nvcc's -prec-div/-prec-sqrt defaults, no rsqrtf, so the CPU and the GPU
// agree whenever var does).
AMPCTL_HD float layer_norm_rstd(float var, float eps) {
  return 1.0f / sqrtf(var + eps);
}

// The normalised value (x - mean) * rstd, shared by the forward output and the gamma gradient.
AMPCTL_HD float layer_norm_xhat(float x, float mean, float rstd) {
  return (x - mean) * rstd;
}

// The forward output ((x - mean) * rstd) * gamma + beta, left to right, no fused multiply-add
// (the build turns contraction off on both sides).
AMPCTL_HD float layer_norm_forward(float x, float mean, float rstd, float gamma, float beta) {
  return layer_norm_xhat(x, mean, rstd) * gamma + beta;
}

// LayerNorm backward as PyTorch's CPU layer_norm_backward_frame, per row with a = rstd,
// scale = 1 / C (one float division by the caller), ds = sum dy * gamma * x, db = sum dy * gamma:
//   b = (db * mean - ds) * a * a * a * scale,   c = -b * mean - db * a * scale,
//   dx = a * dy * gamma + b * x + c,
// each left to right as PyTorch's loop writes it (a^3 as three products, not powf).
AMPCTL_HD float layer_norm_backward_b(float ds, float db, float mean, float a, float scale) {
  return (db * mean - ds) * a * a * a * scale;
}
AMPCTL_HD float layer_norm_backward_c(float b, float db, float mean, float a, float scale) {
  return -b * mean - db * a * scale;
}
AMPCTL_HD float layer_norm_backward_dx(float a, float dy, float gamma, float b, float x, float c) {
  return a * dy * gamma + b * x + c;
}

// v rounded to the float dtype whose DType / ElemType code is `dtype` (0 f32, 1 f16, 2 bf16) and
// widened back: autocast's rounding of an intermediate to a lowp tensor (the identity for f32).
AMPCTL_HD float round_through(int dtype, float v) {
  return dtype == 1 ? round_to_half(v) : (dtype == 2 ? round_to_bf16(v) : v);
}

// RMSNorm (Hugging Face's LlamaRMSNorm in float32): rstd = 1 / sqrt(sumsq / C + eps) from the
// row's sum of squares, an IEEE division, square root and division as layer_norm_rstd (no
// rsqrtf), so both backends agree whenever sumsq does.
AMPCTL_HD float rms_norm_rstd(float sumsq, float cols, float eps) {
  return 1.0f / sqrtf(sumsq / cols + eps);
}

// The forward output weight * round_x(x * rstd): HF's `weight * hidden.to(input_dtype)`, with
// x_dtype the input's dtype code (round_through).
AMPCTL_HD float rms_norm_forward(float x, float rstd, float weight, int x_dtype) {
  return weight * round_through(x_dtype, x * rstd);
}

// Backward, per row with a = rstd and g_j = round_x(dy_j * weight_j) (rms_norm_grad_in):
//   b = -dot * a * a * a * scale (dot = sum_j g_j x_j, scale = 1 / C),  dx_j = a * g_j + b * x_j
// i.e. a (g - xhat mean(g xhat)) with xhat = a x, left to right (a^3 as three products).
AMPCTL_HD float rms_norm_grad_in(float dy, float weight, int x_dtype) {
  return round_through(x_dtype, dy * weight);
}
AMPCTL_HD float rms_norm_backward_b(float dot, float a, float scale) {
  return -dot * a * a * a * scale;
}
AMPCTL_HD float rms_norm_backward_dx(float a, float g, float b, float x) {
  return a * g + b * x;
}

// SiLU as PyTorch's kernels write it (x / (1 + exp(-x))) and its backward (silu_backward:
// dy * sigmoid * (1 + x * (1 - sigmoid)), sigmoid = 1 / (1 + exp(-x)), left to right).
AMPCTL_HD float silu(float x) {
  return x / (1.0f + expf(-x));
}
AMPCTL_HD float silu_backward(float dy, float x) {
  const float sigmoid = 1.0f / (1.0f + expf(-x));
  return dy * sigmoid * (1.0f + x * (1.0f - sigmoid));
}

// SwiGLU with autocast's roundings to the inputs' dtype (lowp, a dtype code): s = round(silu(g)),
// y = s * u (the caller rounds y once to its dtype).
AMPCTL_HD float swiglu_forward(float g, float u, int lowp) {
  return round_through(lowp, silu(g)) * u;
}
// Its two gradients for one (g, u) pair: dgate = silu_backward(round(dy * u), g), dup = dy *
// round(silu(g)); the caller rounds each once to its output dtype.
AMPCTL_HD float swiglu_dgate(float dy, float g, float u, int lowp) {
  return silu_backward(round_through(lowp, dy * u), g);
}
AMPCTL_HD float swiglu_dup(float dy, float g, int lowp) {
  return dy * round_through(lowp, silu(g));
}

// Rotary embedding, HF's rotate-half layout: the pair (x0, x1) = (x[d], x[d + hs/2]) at a
// position with angle cos c, sin s goes to (x0 c + (-x1) s, x1 c + x0 s), two float products
// then a float sum each (q * cos + rotate_half(q) * sin in float32).
AMPCTL_HD float rope_first(float x0, float x1, float c, float s) {
  return x0 * c + (-x1) * s;
}
AMPCTL_HD float rope_second(float x0, float x1, float c, float s) {
  return x1 * c + x0 * s;
}
// The backward (the inverse rotation), each product's gradient rounded to the forward input's
// dtype first (autograd's cast back to it in each branch) and the two branches then added:
// dx0 = round(g0 c) + round(g1 s), dx1 = round(g1 c) + (-round(g0 s)).
AMPCTL_HD float rope_grad_first(float g0, float g1, float c, float s, int in_dtype) {
  return round_through(in_dtype, g0 * c) + round_through(in_dtype, g1 * s);
}
AMPCTL_HD float rope_grad_second(float g0, float g1, float c, float s, int in_dtype) {
  return round_through(in_dtype, g1 * c) + (-round_through(in_dtype, g0 * s));
}

// clip_grad_norm_'s coefficient clamp(max_norm / (norm + 1e-6), max=1) as PyTorch evaluates it in
// float: norm + 1e-6 adds the float nearest 1e-6, and `max_norm / tensor` is Tensor.__rtruediv__,
// i.e. tensor.reciprocal() * max_norm: two roundings (an IEEE reciprocal, nvcc's default
// -prec-div=true, then the product), not one division. clamp(max=1) keeps a NaN: a NaN compares
// false, so `q > 1 ? 1 : q` returns it.
AMPCTL_HD float clip_coef(float norm, float max_norm) {
  const float q = (1.0f / (norm + 1e-6f)) * max_norm;
  return q > 1.0f ? 1.0f : q;
}

}  // namespace ampctl::nn
