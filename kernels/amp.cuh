// Launchers of kernels/amp.cu: the loss-scaling ops of SPEC section 3.
#pragma once

#include "ampctl/amp/amp_math.h"
#include "kernel_common.cuh"

namespace ampctl::kernels {

// For every element of every tensor in the pack (floating types): found_inf[0] := 1 on inf or
// NaN (never cleared); the element := round(float(x) * inv_scale[0]), not written when
// inv_scale[0] == 1. found_inf and inv_scale are device f32 scalars.
void launch_non_finite_check_and_unscale(const TensorPack& pack, float* found_inf,
                                         const float* inv_scale, cudaStream_t stream);

// inv[0] := float32(1 / double(scale[0])).
void launch_inv_scale(const float* scale, float* inv, cudaStream_t stream);

// One amp::update_scale_state on device scalars.
void launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                         const float* found_inf, const amp::ScaleUpdateParams& params,
                         cudaStream_t stream);

}  // namespace ampctl::kernels
