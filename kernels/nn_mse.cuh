// Launchers of kernels/nn_mse.cu: mean squared error with its gradient, one pass.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// Floats of workspace launch_mse needs.
size_t mse_workspace_floats();

// loss[0] := mean over n elements of (float(pred[i]) - target[i])^2 (float32, fixed order);
// when dpred is set: dpred[i] := round(nn::mse_grad(pred[i], target[i], 2 / n, grad_scale[0])).
void launch_mse(const void* pred, ElemType pred_type, const float* target, float* loss, void* dpred,
                ElemType dpred_type, const float* grad_scale, size_t n, float* workspace,
                cudaStream_t stream);

}  // namespace ampctl::kernels
