// Launchers of kernels/nn_dropout.cu: dropout with a regenerated (never stored) Philox mask.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// y[i] := nn::dropout_keep(seed, offset, i, p) ? round_y(float(x[i]) * nn::dropout_scale(p)) : 0
// for n elements. The backward pass is the same map applied to dy with the same (seed, offset, p).
// y may alias x.
void launch_dropout(const void* x, ElemType x_type, void* y, ElemType y_type, float p,
                    uint64_t seed, uint64_t offset, size_t n, cudaStream_t stream);

}  // namespace ampctl::kernels
