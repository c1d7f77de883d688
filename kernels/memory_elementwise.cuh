// Launchers of kernels/memory_elementwise.cu: scaling by a device scalar and the in-place axpy.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// out[i] := round_out(float(x[i]) * scale[0]) for n elements; scale is a device f32. out may
// alias x. Both types floating.
void launch_mul_scalar_tensor(const void* x, ElemType x_type, const float* scale, void* out,
                              ElemType out_type, size_t n, cudaStream_t stream);

// dst[i] := round_dst(float(dst[i]) + alpha * float(src[i])) for n elements. Both types floating.
void launch_add(void* dst, ElemType dst_type, const void* src, ElemType src_type, float alpha,
                size_t n, cudaStream_t stream);

// x[i] := round_x(factor * float(x[i])), or +0 when factor == 0 (so NaNs in x are dropped, as
// BLAS drops C when beta == 0). The C := beta * C of a gemm with k == 0.
void launch_scale_in_place(void* x, ElemType x_type, float factor, size_t n, cudaStream_t stream);

}  // namespace ampctl::kernels
