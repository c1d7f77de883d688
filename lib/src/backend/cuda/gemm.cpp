// The CUDA backend's gemm family (backend.h, "gemm"): cublasGemmEx with 32-bit compute, no TF32,
// fp32 reductions for every output type, operands of two dtypes widened first.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "ampctl/backend/backend.h"
#include "cuda_backend.h"
#include "memory_cast.cuh"
#include "memory_elementwise.cuh"

namespace ampctl::cuda_detail {

float* CudaBackend::gemm_workspace(size_t floats) {
  return grow_workspace(m_gemm_workspace, floats, "the gemm widening workspace");
}

CudaBackend::GemmOperands CudaBackend::stage_gemm(const Tensor& a, const Tensor& b, const Tensor& c,
                                                  float beta) {
  // cuBLAS with 32-bit compute takes equal input types, and for f32 inputs an f32 output, for
  // f16 inputs an f16 or f32 output, for bf16 inputs a bf16 or f32 output. Other combinations go
  // through an f32 workspace: mixed inputs are widened to f32 (exact, so the product is the one
  // asked for), and an output cuBLAS cannot write is computed in f32 and rounded once by a cast.
  const bool mixed_inputs = a.dtype() != b.dtype();
  const DType input_type = mixed_inputs ? DType::f32 : a.dtype();
  const bool widen_a = mixed_inputs && a.dtype() != DType::f32;
  const bool widen_b = mixed_inputs && b.dtype() != DType::f32;
  const bool c_via_workspace = c.dtype() != DType::f32 && c.dtype() != input_type;
  auto aligned = [](size_t floats) { return (floats + 63) / 64 * 64; };  // 256-byte regions
  const size_t a_floats = widen_a ? aligned(a.numel()) : 0;
  const size_t b_floats = widen_b ? aligned(b.numel()) : 0;
  const size_t c_floats = c_via_workspace ? aligned(c.numel()) : 0;
  float* workspace =
      a_floats + b_floats + c_floats > 0 ? gemm_workspace(a_floats + b_floats + c_floats) : nullptr;

  GemmOperands ops;
  ops.a = a.data();
  ops.b = b.data();
  ops.c = c.data();
  ops.c_via_workspace = c_via_workspace;
  if (widen_a) {
    kernels::launch_cast(a.data(), elem_type(a.dtype()), workspace, ElemType::f32, a.numel(),
                         stream());
    ops.a = workspace;
  }
  if (widen_b) {
    float* b_ws = workspace + a_floats;
    kernels::launch_cast(b.data(), elem_type(b.dtype()), b_ws, ElemType::f32, b.numel(), stream());
    ops.b = b_ws;
  }
  if (c_via_workspace) {
    float* c_ws = workspace + a_floats + b_floats;
    // With beta == 0 cuBLAS does not read C (NaNs in it are ignored), so it is not widened.
    if (beta != 0.0f) {
      kernels::launch_cast(c.data(), elem_type(c.dtype()), c_ws, ElemType::f32, c.numel(),
                           stream());
    }
    ops.c = c_ws;
  }
  ops.ab_type = cuda_data_type(input_type);
  ops.c_type = c_via_workspace ? CUDA_R_32F : cuda_data_type(c.dtype());
  return ops;
}

void CudaBackend::finish_gemm(const GemmOperands& ops, const Tensor& c) {
  if (ops.c_via_workspace) {
    kernels::launch_cast(ops.c, ElemType::f32, c.data(), elem_type(c.dtype()), c.numel(), stream());
  }
}

void CudaBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                       const Tensor& c, float alpha, float beta) {
  const GemmDims d = check_gemm(a, trans_a, b, trans_b, c, m_device);
  const int64_t m = d.m, n = d.n, k = d.k;
  // cuBLAS takes int dimensions: a limit of this backend, not of the op.
  for (int64_t d : {m, n, k}) {
    if (d > INT_MAX)
      invalid("gemm: dimension " + std::to_string(d) + " exceeds cuBLAS's int range");
  }
  if (m == 0 || n == 0) return;
  DeviceScope scope(m_device.index);
  if (k == 0) {
    // An empty product: C := beta * C, done here rather than trusting every cuBLAS path with k = 0.
    kernels::launch_scale_in_place(c.data(), elem_type(c.dtype()), beta, c.numel(), stream());
    return;
  }

  const GemmOperands ops = stage_gemm(a, b, c, beta);

  // Row-major X [r, c] is column-major X^T with leading dimension c, so the row-major product
  // C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: cuBLAS's first operand is our B.
  const int lda = static_cast<int>(std::max<int64_t>(1, a.dim(1)));
  const int ldb = static_cast<int>(std::max<int64_t>(1, b.dim(1)));
  const int ldc = static_cast<int>(n);
  AMPCTL_CUBLAS_CHECK(cublasGemmEx(m_cublas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                   static_cast<int>(m), static_cast<int>(k), &alpha, ops.b,
                                   ops.ab_type, ldb, ops.a, ops.ab_type, lda, &beta, ops.c,
                                   ops.c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  finish_gemm(ops, c);
}

}  // namespace ampctl::cuda_detail
