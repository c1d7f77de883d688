// The CUDA backend's optim family (backend.h, "optimizers"): the fused SGD and Adam updates
// (kernels/optim_sgd.cu, kernels/optim_adam.cu), which read found_inf and inv_scale on the device and skip the
// whole update when found_inf[0] != 0.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "optim_adam.cuh"
#include "ampctl/backend/backend.h"
#include "cuda_backend.h"
#include "optim_sgd.cuh"

namespace ampctl::cuda_detail {

void CudaBackend::optimizer_step(const OptimizerStepArgs& args) {
  check_optimizer_step(args, m_device);
  // The optional operands every kind shares; the kernels read found_inf and inv_scale themselves
  // (no host sync) and skip the whole update when found_inf[0] != 0.
  const float* found_inf =
      args.found_inf.defined() ? static_cast<const float*>(args.found_inf.data()) : nullptr;
  const float* inv_scale =
      args.inv_scale.defined() ? static_cast<const float*>(args.inv_scale.data()) : nullptr;
  void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
  const float* decay_mask =
      args.decay_mask.defined() ? static_cast<const float*>(args.decay_mask.data()) : nullptr;
  const ElemType lowp_type =
      args.lowp_params.defined() ? elem_type(args.lowp_params.dtype()) : ElemType::f16;
  DeviceScope scope(m_device.index);
  if (const auto* sgd = std::get_if<optim::SgdHyper>(&args.hyper)) {
    kernels::SgdStepPointers p{};
    p.params = static_cast<float*>(args.params.data());
    p.grads = static_cast<const float*>(args.grads.data());
    // Without momentum the buffer is neither read nor written, even when one is passed.
    p.momentum_buf =
        sgd->momentum != 0.0f ? static_cast<float*>(args.momentum_buf.data()) : nullptr;
    p.step = static_cast<int32_t*>(args.step.data());
    p.found_inf = found_inf;
    p.inv_scale = inv_scale;
    p.lowp_params = lowp;
    p.lowp_type = lowp_type;
    p.decay_mask = decay_mask;
    kernels::launch_sgd_step(p, args.params.numel(), *sgd, stream());
    return;
  }
  kernels::AdamStepPointers p{};
  p.params = static_cast<float*>(args.params.data());
  p.grads = static_cast<const float*>(args.grads.data());
  p.exp_avg = static_cast<float*>(args.exp_avg.data());
  p.exp_avg_sq = static_cast<float*>(args.exp_avg_sq.data());
  p.step = static_cast<int32_t*>(args.step.data());
  p.found_inf = found_inf;
  p.inv_scale = inv_scale;
  p.lowp_params = lowp;
  p.lowp_type = lowp_type;
  p.decay_mask = decay_mask;
  kernels::launch_adam_step(p, args.params.numel(), std::get<optim::AdamHyper>(args.hyper),
                            stream());
}

}  // namespace ampctl::cuda_detail
