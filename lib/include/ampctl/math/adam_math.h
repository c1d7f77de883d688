// Per-element math of torch.optim.Adam / AdamW, shared by the CPU backend and the fused CUDA
// kernel. The order of operations is PyTorch's single-tensor implementation, in float32:
//   g = grad * inv_scale                 (fused amp path; inv_scale == 1 skips it)
//   g = -g                               if maximize
//   AdamW: p = p * (1 - lr * weight_decay)
//   Adam:  g = g + weight_decay * p      (if weight_decay != 0)
//   m = lerp(m, g, 1 - beta1)            (lerp_: m + w * (g - m), or g - (g - m) * (1 - w) for w >=
//   0.5) v = v * beta2 + ((1 - beta2) * g) * g  (mul_ then addcmul_) denom = sqrt(v) / sqrt(1 -
//   beta2^step) + eps p = p + ((-lr / (1 - beta1^step)) * m) / denom   (addcdiv_)
// Scalars that PyTorch forms in Python (double) and hands to a kernel as float — 1 - beta1,
// 1 - beta2, 1 - lr * weight_decay, the bias corrections — are formed here in double by
// adam_consts() from the device step counter and rounded to float once per update, so every
// element of a step uses the same constants on the CPU and the GPU (up to libm's and CUDA's
// double pow agreeing to float precision, which they do except within ~2^-50 of a float midpoint).
#pragma once

#include <cmath>
#include <cstdint>

#include "ampctl/core/hd.h"

namespace ampctl::optim {

// As the user gave them (doubles, as Python floats are).
struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // AdamW
  bool maximize = false;
};

// The float constants of one update.
struct AdamStepConsts {
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float weight_decay;
  float decay;                  // 1 - lr * weight_decay (AdamW)
  float neg_step_size;          // -lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
};

// `step` is the step being taken (1 on the first update).
AMPCTL_HD AdamStepConsts adam_consts(const AdamHyper& h, int32_t step) {
  const double bc1 = 1.0 - pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - pow(h.beta2, static_cast<double>(step));
  AdamStepConsts c;
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.eps = static_cast<float>(h.eps);
  c.weight_decay = static_cast<float>(h.weight_decay);
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.neg_step_size = static_cast<float>(-(h.lr / bc1));
  c.bias_correction2_sqrt = static_cast<float>(sqrt(bc2));
  return c;
}

AMPCTL_HD void adam_update(float* p, float grad, float* m, float* v, float inv_scale,
                           bool decoupled, bool maximize, const AdamStepConsts& c) {
  float g = inv_scale == 1.0f ? grad : grad * inv_scale;
  if (maximize) g = -g;
  float param = *p;
  if (decoupled) {
    param = param * c.decay;
  } else if (c.weight_decay != 0.0f) {
    g = g + c.weight_decay * param;
  }
  // lerp_(g, w) with w = 1 - beta1, both of PyTorch's branches (the second keeps the result
  // exact at w = 1).
  const float w = c.one_minus_beta1;
  const float diff = g - *m;
  const float mm = w < 0.5f ? *m + w * diff : g - diff * (1.0f - w);
  const float vv = *v * c.beta2 + (c.one_minus_beta2 * g) * g;
  const float denom = sqrtf(vv) / c.bias_correction2_sqrt + c.eps;
  *m = mm;
  *v = vv;
  *p = param + (c.neg_step_size * mm) / denom;
}

}  // namespace ampctl::optim
