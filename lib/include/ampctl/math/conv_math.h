// Per-element math of the convolution ops (backend.h, "convolution ops"), shared by the CPU
// backend and the CUDA kernels: pooling windows and the BatchNorm formulas, all float32, in
// the order of operations of PyTorch's CPU kernels (aten/src/ATen/native/cpu/batch_norm_kernel.cpp,
// AdaptiveAvgPoolKernel.cpp, AvgPoolKernel.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "ampctl/core/hd.h"

namespace ampctl::nn {

// One pooling window along one dimension: inputs [start, end) (clipped to the input), and the
// divisor an average uses (fixed windows: count_include_pad, the padded window's size clipped to
// in + pad as PyTorch does; adaptive: the window's own size).
struct PoolWindow {
  int64_t start, end, count;
};

AMPCTL_HD PoolWindow pool_window(int64_t o, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                 int64_t pad, bool adaptive) {
  if (adaptive) {
    const int64_t s = (o * in) / out;                  // floor(o * in / out)
    const int64_t e = ((o + 1) * in + out - 1) / out;  // ceil((o + 1) * in / out)
    return {s, e, e - s};
  }
  int64_t s = o * stride - pad;
  int64_t e = s + kernel < in + pad ? s + kernel : in + pad;
  const int64_t count = e - s;
  if (s < 0) s = 0;
  if (e > in) e = in;
  return {s, e, count};
}

// BatchNorm's inverse standard deviation from a variance (biased in training, the running one in
// eval).
AMPCTL_HD float batch_norm_invstd(float var, float eps) {
  return 1.0f / sqrtf(var + eps);
}

// running := momentum * batch + (1 - momentum) * running (PyTorch's order of operations).
AMPCTL_HD float batch_norm_running(float running, float batch, float momentum) {
  return momentum * batch + (1.0f - momentum) * running;
}

// y = x * alpha + shift with alpha = invstd * gamma and shift = beta - mean * alpha: PyTorch's
// CPU form of (x - mean) * invstd * gamma + beta.
AMPCTL_HD float batch_norm_alpha(float invstd, float gamma) {
  return invstd * gamma;
}
AMPCTL_HD float batch_norm_shift(float beta, float mean, float alpha) {
  return beta - mean * alpha;
}
AMPCTL_HD float batch_norm_apply(float x, float alpha, float shift) {
  return x * alpha + shift;
}

// The training-mode input gradient, as PyTorch's batch_norm_cpu_backward_template: with
// k = dotp * invstd^2 / M (dotp = sum dy * (x - mean)) and mean_dy = sum dy / M,
// dx = (dy - mean_dy - (x - mean) * k) * invstd * gamma.
AMPCTL_HD float batch_norm_grad_k(float dotp, float invstd, float m) {
  return dotp * invstd * invstd / m;
}
AMPCTL_HD float batch_norm_grad_dx(float x, float dy, float mean, float k, float mean_dy,
                                   float invstd, float gamma) {
  return (dy - mean_dy - (x - mean) * k) * invstd * gamma;
}

}  // namespace ampctl::nn
