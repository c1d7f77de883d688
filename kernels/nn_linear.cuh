// Launchers of kernels/nn_linear.cu: what a Linear layer needs besides the matrix product (which is
// cuBLASLt's, called from the CUDA backend): the bias add of the fallback path and the bias
// gradient.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// y[r, o] := round_y(acc[r, o] + float(b[o])) for acc f32 [rows, cols] (the product, already
// accumulated in float), or +0 everywhere when acc is nullptr (an empty product); b may be
// nullptr (then y := round_y(acc)). y must not alias acc unless y_type is f32.
void launch_bias_add_round(const float* acc, const void* b, ElemType b_type, void* y,
                           ElemType y_type, int64_t rows, int64_t cols, cudaStream_t stream);

// Floats of workspace launch_sum_rows needs for x [rows, cols] (0: none).
size_t sum_rows_workspace_floats(int64_t rows, int64_t cols);

// out[c] := round_out(sum over r of float(x[r, c])), summed in float in a fixed order that depends
// on the shape alone (device_util.cuh's column_chunk_sums, then the chunks in order).
void launch_sum_rows(const void* x, ElemType x_type, void* out, ElemType out_type, int64_t rows,
                     int64_t cols, float* workspace, cudaStream_t stream);

}  // namespace ampctl::kernels
