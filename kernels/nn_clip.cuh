// Launchers of kernels/nn_clip.cu: the gradient-clipping coefficient from a device norm.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// coef[0] := min(max_norm / (norm[0] + 1e-6), 1) in float32; a NaN norm gives NaN. norm and coef
// are device f32 scalars.
void launch_clip_coef(const float* norm, float max_norm, float* coef, cudaStream_t stream);

}  // namespace ampctl::kernels
