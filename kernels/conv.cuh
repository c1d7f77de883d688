// Launchers of kernels/conv.cu: the convolution primitives (im2col, col2im, per-channel
// broadcast and sum), pooling and BatchNorm2d (backend.h, "convolution ops"). Images are
// row-major [N, C, H, W]; every kernel is deterministic (no atomics, one writer per output).
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// The geometry of one image sweep, as the backend's Conv2dGeometry / Pool2dGeometry.
struct ConvShape {
  int64_t c, h, w;  // input channels and size
  int64_t oh, ow;   // output size
  int64_t kh, kw;   // window
  int64_t sh, sw;   // stride
  int64_t ph, pw;   // padding
  bool adaptive;    // pooling only: PyTorch's adaptive windows
};

// col [C*kh*kw, OH*OW] of one image x [C, H, W] (elements of elem_bytes: a copy).
void launch_im2col(const void* x, void* col, size_t elem_bytes, const ConvShape& s,
                   cudaStream_t stream);
// x [C, H, W] := round(sum over (i, j) in order of col), col f32.
void launch_col2im(const float* col, void* x, ElemType x_type, const ConvShape& s,
                   cudaStream_t stream);
// y[n, c, p] := b[c], y [N, C, P].
void launch_broadcast_channels(const void* b, ElemType b_type, void* y, ElemType y_type, int64_t n,
                               int64_t c, int64_t p, cudaStream_t stream);
// out[c] := round(sum over n then p of x[n, c, p]) (one thread per channel, the CPU's order).
void launch_channel_sum(const void* x, ElemType x_type, void* out, ElemType out_type, int64_t n,
                        int64_t c, int64_t p, cudaStream_t stream);

// planes = N * C; s.c is unused.
void launch_max_pool2d_forward(const void* x, void* y, ElemType type, int32_t* indices,
                               int64_t planes, const ConvShape& s, cudaStream_t stream);
void launch_max_pool2d_backward(const void* dy, ElemType dy_type, const int32_t* indices, void* dx,
                                ElemType dx_type, int64_t planes, const ConvShape& s,
                                cudaStream_t stream);
void launch_avg_pool2d_forward(const void* x, ElemType x_type, void* y, ElemType y_type,
                               int64_t planes, const ConvShape& s, cudaStream_t stream);
void launch_avg_pool2d_backward(const void* dy, ElemType dy_type, void* dx, ElemType dx_type,
                                int64_t planes, const ConvShape& s, cudaStream_t stream);

// BatchNorm2d over x [N, C, P]: one block per channel (training: the batch statistics; eval: the
// running ones), backend.h's formulas with conv_math.h's per-element math.
void launch_batch_norm_forward(const void* x, ElemType x_type, const float* gamma,
                               const float* beta, void* y, ElemType y_type, float* save_mean,
                               float* save_invstd, float* running_mean, float* running_var,
                               int32_t* num_batches_tracked, bool training, float momentum,
                               float eps, int64_t n, int64_t c, int64_t p, cudaStream_t stream);
void launch_batch_norm_backward(const void* x, ElemType x_type, const float* gamma,
                                const float* save_mean, const float* save_invstd, const void* dy,
                                ElemType dy_type, void* dx, ElemType dx_type, float* dgamma,
                                float* dbeta, int64_t n, int64_t c, int64_t p, cudaStream_t stream);

}  // namespace ampctl::kernels
