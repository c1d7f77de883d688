// Per-element math of torch.optim.SGD, shared by the CPU backend and the fused CUDA kernel.
//
// PyTorch's order of operations (torch/optim/sgd.py, _single_tensor_sgd), in float32:
//   g = grad * inv_scale          (only on the fused amp path; inv_scale == 1 skips it)
//   g = -g                        if maximize
//   g = g + weight_decay * p      if weight_decay != 0
//   buf = g                       on the first step with momentum
//   buf = momentum * buf + (1 - dampening) * g   afterwards
//   g = g + momentum * buf        if nesterov, else g = buf
//   p = p - lr * g
// Each multiply and add rounds separately: the project compiles with contraction off
// (-ffp-contract=off, nvcc --fmad=false) so the CPU and the GPU give the same bits.
#pragma once

#include "ampctl/core/hd.h"

namespace ampctl::optim {

struct SgdHyper {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool maximize = false;
};

// Updates p (and buf when momentum != 0). `first` is true on the first real step, when the
// momentum buffer is initialised with the gradient.
AMPCTL_HD void sgd_update(float* p, float grad, float* buf, float inv_scale, bool first,
                          const SgdHyper& h) {
  float g = inv_scale == 1.0f ? grad : grad * inv_scale;
  if (h.maximize) g = -g;
  if (h.weight_decay != 0.0f) g = g + h.weight_decay * *p;
  if (h.momentum != 0.0f) {
    float b = first ? g : h.momentum * *buf + (1.0f - h.dampening) * g;
    *buf = b;
    g = h.nesterov ? g + h.momentum * b : b;
  }
  *p = *p - h.lr * g;
}

}  // namespace ampctl::optim
