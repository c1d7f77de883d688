// Launchers of kernels/nn_layer_norm.cu: LayerNorm over the last dimension, forward and backward.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// Per row r of x [rows, cols]: mean = sum(x) / C, var = sum((x - mean)^2) / C (biased),
// rstd = 1 / sqrtf(var + eps), all float32; y := round_y((x - mean) * rstd * gamma + beta);
// mean[r] and rstd[r] saved. gamma, beta, mean, rstd are f32.
void launch_layer_norm_forward(const void* x, ElemType x_type, const float* gamma,
                               const float* beta, void* y, ElemType y_type, float* mean,
                               float* rstd, float eps, int64_t rows, int64_t cols,
                               cudaStream_t stream);

// sum := round_f32(x + r) (x f32, r any float dtype; sum may be x), then the forward above on
// sum, in one kernel whose statistics are the plain forward's bit for bit.
void launch_residual_layer_norm_forward(const float* x, const void* r, ElemType r_type, float* sum,
                                        const float* gamma, const float* beta, void* y,
                                        ElemType y_type, float* mean, float* rstd, float eps,
                                        int64_t rows, int64_t cols, cudaStream_t stream);

// Floats of workspace launch_layer_norm_backward needs.
size_t layer_norm_backward_workspace_floats(int64_t rows, int64_t cols);

// dx := round_dx(PyTorch's LayerNorm input gradient); dgamma[c] += sum_r dy * xhat and
// dbeta[c] += sum_r dy (f32, added to what is there). Any of dx, dgamma, dbeta may be nullptr (not
// wanted). dx may alias dy, unless accumulate_dx: then dx := round_dx(float(dx) + the gradient)
// and dx must alias no input.
void launch_layer_norm_backward(const void* x, ElemType x_type, const float* gamma,
                                const float* mean, const float* rstd, const void* dy,
                                ElemType dy_type, void* dx, ElemType dx_type, float* dgamma,
                                float* dbeta, int64_t rows, int64_t cols, float* workspace,
                                cudaStream_t stream, bool accumulate_dx = false);

}  // namespace ampctl::kernels
