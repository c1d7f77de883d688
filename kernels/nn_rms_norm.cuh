// Launchers of kernels/nn_rms_norm.cu: RMSNorm over the last dimension (Hugging Face's
// LlamaRMSNorm), forward, residual add + forward, and backward.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// Per row r of x [rows, cols]: rstd = 1 / sqrtf(sum(x^2) / C + eps) (float32), y := round_y(
// weight * round_x(x * rstd)); rstd[r] saved. weight and rstd are f32. y may be x itself.
void launch_rms_norm_forward(const void* x, ElemType x_type, const float* weight, void* y,
                             ElemType y_type, float* rstd, float eps, int64_t rows, int64_t cols,
                             cudaStream_t stream);

// sum := round_f32(x + r) (x f32, r any float dtype; sum may be x), then the forward above on
// sum in one kernel whose statistics are the plain forward's bit for bit.
void launch_residual_rms_norm_forward(const float* x, const void* r, ElemType r_type, float* sum,
                                      const float* weight, void* y, ElemType y_type, float* rstd,
                                      float eps, int64_t rows, int64_t cols, cudaStream_t stream);

// Floats of workspace launch_rms_norm_backward needs.
size_t rms_norm_backward_workspace_floats(int64_t rows, int64_t cols);

// dx := round_dx(the RMSNorm input gradient) (backend.h), dweight[c] += sum_r dy * round_x(x *
// rstd) (f32, added to what is there). dx or dweight may be nullptr (not wanted). dx may alias
// dy, unless accumulate: then dx := round_dx(float(dx) + the gradient) and dx aliases no input.
// dy_weight (f32 [rows, cols], or nullptr): the floats dy * weight before their rounding to x's
// type.
void launch_rms_norm_backward(const void* x, ElemType x_type, const float* weight,
                              const float* rstd, const void* dy, ElemType dy_type, void* dx,
                              ElemType dx_type, float* dweight, float* dy_weight, bool accumulate,
                              int64_t rows, int64_t cols, float* workspace, cudaStream_t stream);

}  // namespace ampctl::kernels
