// Launchers of kernels/nn_swiglu.cu: the Llama MLP's fused SwiGLU, forward and backward.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// gate_up [rows, 2 width] (row r: gate in columns [0, width), up in [width, 2 width)), y [rows,
// width]: y := round_y(round_in(silu(g)) * u), round_in to gate_up's type (backend.h).
void launch_swiglu_forward(const void* gate_up, ElemType in_type, void* y, ElemType y_type,
                           int64_t rows, int64_t width, cudaStream_t stream);

// dgate_up [rows, 2 width] := the gate and up gradients of the forward above for dy [rows, width]
// (nn_math.h's swiglu_dgate / swiglu_dup, one rounding each to dgate_up's type); dy_up (f32
// [rows, width], or nullptr): the floats dy * u before their rounding to the inputs' type.
void launch_swiglu_backward(const void* gate_up, ElemType in_type, const void* dy, ElemType dy_type,
                            void* dgate_up, ElemType out_type, float* dy_up, int64_t rows,
                            int64_t width, cudaStream_t stream);

}  // namespace ampctl::kernels
