// Launchers of kernels/nn_activation.cu: relu / gelu / tanh forward and backward.
#pragma once

#include "ampctl/math/nn_math.h"
#include "kernel_common.cuh"

namespace ampctl::kernels {

// y[i] := round_y(nn::activation_forward(kind, float(x[i]))) for n elements; y may alias x.
void launch_activation_forward(nn::ActivationKind kind, const void* x, ElemType x_type, void* y,
                               ElemType y_type, size_t n, cudaStream_t stream);

// dx[i] := round_dx(nn::activation_backward(kind, float(x[i]), float(y[i]), float(dy[i]))) for n
// elements; x is the forward input, y its output (either may be nullptr when `kind` does not read
// it: relu and tanh read y, gelu reads x). dx may alias dy.
void launch_activation_backward(nn::ActivationKind kind, const void* x, ElemType x_type,
                                const void* y, ElemType y_type, const void* dy, ElemType dy_type,
                                void* dx, ElemType dx_type, size_t n, cudaStream_t stream);

}  // namespace ampctl::kernels
