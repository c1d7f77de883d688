// The CUDA backend's transformer ops (backend.h, "transformer ops"): argument checks shared with
// the CPU backend (Backend::check_*), then the kernels of kernels/transformer.cu, or cuBLAS's
// strided-batched gemm for gemm_batched. No op allocates after its first call (the grow-only
// workspaces) and none waits for the device.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda_backend.h"
#include "memory_cast.cuh"
#include "memory_elementwise.cuh"
#include "transformer.cuh"
#include "transformer_attention.cuh"
#include "transformer_rope.cuh"

namespace ampctl::cuda_detail {
namespace {

void check_int_range(int64_t v, const char* op, const char* what) {
  if (v > INT_MAX) {
    invalid(std::string(op) + ": " + what + " " + std::to_string(v) + " exceeds the int range");
  }
}

}  // namespace

void CudaBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                    const Tensor& out) {
  const EmbeddingDims d = check_embedding_forward(tokens, wte, wpe, out, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_embedding_forward(tokens.data_as<int32_t>(), wte.data_as<float>(), d.vocab,
                                    wpe.data_as<float>(), out.data_as<float>(), d.batch * d.time,
                                    d.time, d.channels, stream());
}

void CudaBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                     const Tensor& dwpe) {
  const EmbeddingDims d = check_embedding_backward(tokens, dout, dwte, dwpe, m_device);
  // The sort's positions are 32-bit.
  check_int_range(d.batch * d.time, "embedding_backward", "the row count B*T");
  DeviceScope scope(m_device.index);
  const size_t words =
      dwte.defined() ? kernels::embedding_backward_workspace_words(d.batch * d.time, d.vocab) : 0;
  auto* ws = words > 0 ? reinterpret_cast<uint32_t*>(grow_workspace(
                             m_embedding_workspace, words, "the embedding_backward workspace"))
                       : nullptr;
  kernels::launch_embedding_backward(tokens.data_as<int32_t>(), dout.data_as<float>(),
                                     dwte.defined() ? dwte.data_as<float>() : nullptr, d.vocab,
                                     dwpe.data_as<float>(), d.batch, d.time, d.channels, ws,
                                     stream());
}

void CudaBackend::gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const Tensor& c, float alpha, float beta) {
  const GemmBatchedDims d = check_gemm_batched(a, trans_a, b, trans_b, c, m_device);
  const int64_t m = d.m, n = d.n, k = d.k;
  check_int_range(m, "gemm_batched", "dimension");
  check_int_range(n, "gemm_batched", "dimension");
  check_int_range(k, "gemm_batched", "dimension");
  check_int_range(d.batch, "gemm_batched", "batch count");
  if (d.batch == 0 || m == 0 || n == 0) return;
  DeviceScope scope(m_device.index);
  if (k == 0) {
    // No products: C := beta * C, as gemm.
    kernels::launch_scale_in_place(c.data(), elem_type(c.dtype()), beta, c.numel(), stream());
    return;
  }
  // As gemm: the operands cuBLAS takes, widened or in the workspace where needed.
  const GemmOperands ops = stage_gemm(a, b, c, beta);
  // Row-major C_i = op(A_i) op(B_i) is column-major C_i^T = op(B_i)^T op(A_i)^T (see gemm).
  const int lda = static_cast<int>(std::max<int64_t>(1, trans_a ? m : k));
  const int ldb = static_cast<int>(std::max<int64_t>(1, trans_b ? k : n));
  const int ldc = static_cast<int>(n);
  AMPCTL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      m_cublas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, ops.b, ops.ab_type,
      ldb, static_cast<long long>(k * n), ops.a, ops.ab_type, lda, static_cast<long long>(m * k),
      &beta, ops.c, ops.c_type, ldc, static_cast<long long>(m * n), static_cast<int>(d.batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  finish_gemm(ops, c);
}

void CudaBackend::heads_from_rows(const Tensor& src, int64_t column, const Tensor& dst) {
  const HeadsDims d = check_heads(src, column, dst, "heads_from_rows", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_heads_copy(false, src.data(), dst.data(), dtype_size(src.dtype()), d.batch,
                             d.heads, d.time, d.head_size, d.width, column, stream());
}

void CudaBackend::heads_to_rows(const Tensor& src, const Tensor& dst, int64_t column) {
  const HeadsDims d = check_heads(dst, column, src, "heads_to_rows", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_heads_copy(true, src.data(), dst.data(), dtype_size(src.dtype()), d.batch,
                             d.heads, d.time, d.head_size, d.width, column, stream());
}

void CudaBackend::causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                                         const Tensor& probs) {
  const SoftmaxDims d = check_causal_softmax_forward(scores, probs, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_causal_softmax_forward(scores.data(), elem_type(scores.dtype()), scale,
                                         round_scaled, probs.data(), elem_type(probs.dtype()),
                                         d.count, d.time, stream());
}

void CudaBackend::causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                          bool round_scaled, const Tensor& dscores) {
  const SoftmaxDims d = check_causal_softmax_backward(probs, dprobs, dscores, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_causal_softmax_backward(
      probs.data(), elem_type(probs.dtype()), dprobs.data(), elem_type(dprobs.dtype()), scale,
      round_scaled, dscores.data(), elem_type(dscores.dtype()), d.count, d.time, stream());
}

namespace {

// AMPCTL_ATTENTION (read once): unset or "fused", the fused kernels with their tile products on
// the tensor cores; "fused_fma", the same kernels with fp32 FMA products; "materialised", the
// composition on the GPU too. For benchmarks side by side (scripts/bench/bench_gpt_gpu.py) and for
// checking one variant against the other (scripts/gpu-check.sh runs the table test under each).
enum class AttentionPath { tensor_cores, fma, materialised };

AttentionPath attention_path() {
  static const AttentionPath path = [] {
    const char* env = std::getenv("AMPCTL_ATTENTION");
    const std::string v = env == nullptr ? "" : env;
    if (v == "materialised") return AttentionPath::materialised;
    if (v == "fused_fma") return AttentionPath::fma;
    return AttentionPath::tensor_cores;
  }();
  return path;
}

bool fused_attention(int64_t batch_heads, int64_t time, int64_t head_size, DType dtype) {
  return attention_path() != AttentionPath::materialised &&
         kernels::attention_fused_supported(elem_type(dtype), batch_heads, time, head_size);
}

}  // namespace

bool CudaBackend::tensor_core_attention(DType dtype) const {
  return attention_path() == AttentionPath::tensor_cores &&
         attention_tensor_cores(dtype, m_capability);
}

AttentionSizes CudaBackend::attention_workspace(int64_t batch_heads, int64_t time,
                                                int64_t head_size, DType dtype) const {
  if (!fused_attention(batch_heads, time, head_size, dtype)) {
    return Backend::attention_workspace(batch_heads, time, head_size, dtype);
  }
  AttentionSizes s;
  s.saved_f32 = batch_heads * time;    // lse, one per query row
  s.scratch_f32 = batch_heads * time;  // backward's row dots dy . y
  return s;
}

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                                    const Tensor& y, const AttentionBuffers& buffers) {
  if (q.rank() != 3 || !fused_attention(q.dim(0), q.dim(1), q.dim(2), q.dtype())) {
    Backend::attention_forward(q, k, v, scale, y, buffers);
    return;
  }
  const AttentionSizes sizes = attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d =
      check_attention({&q, &k, &v}, {&y}, buffers, sizes, "attention_forward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_attention_forward(tensor_core_attention(q.dtype()), q.data(), k.data(), v.data(),
                                    y.data(), buffers.saved_f32.data_as<float>(),
                                    elem_type(q.dtype()), scale, d.count, d.group, d.time,
                                    d.head_size, stream());
}

void CudaBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& y, const Tensor& dy, float scale,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const AttentionBuffers& buffers) {
  if (q.rank() != 3 || !fused_attention(q.dim(0), q.dim(1), q.dim(2), q.dtype())) {
    Backend::attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buffers);
    return;
  }
  const AttentionSizes sizes = attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d = check_attention({&q, &k, &v, &y, &dy}, {&dq, &dk, &dv}, buffers, sizes,
                                          "attention_backward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_attention_backward(tensor_core_attention(q.dtype()), q.data(), k.data(), v.data(),
                                     y.data(), dy.data(), buffers.saved_f32.data_as<float>(),
                                     buffers.scratch_f32.data_as<float>(), dq.data(), dk.data(),
                                     dv.data(), elem_type(q.dtype()), scale, d.count, d.group,
                                     d.time, d.head_size, stream());
}

void CudaBackend::rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               const Tensor& y, int64_t pos0) {
  const auto [n, t, hs] = check_rope(x, cos, sin, y, pos0, "rope_forward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_rope(/*inverse=*/false, x.data(), elem_type(x.dtype()), cos.data_as<float>(),
                       sin.data_as<float>(), y.data(), elem_type(y.dtype()), n, t, hs, pos0,
                       elem_type(x.dtype()), stream());
}

void CudaBackend::rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin,
                                const Tensor& dx, int64_t pos0, DType input_dtype) {
  const auto [n, t, hs] = check_rope(dy, cos, sin, dx, pos0, "rope_backward", m_device);
  if (input_dtype == DType::i32) checks::fail("rope_backward", "input_dtype must be a float dtype");
  DeviceScope scope(m_device.index);
  kernels::launch_rope(/*inverse=*/true, dy.data(), elem_type(dy.dtype()), cos.data_as<float>(),
                       sin.data_as<float>(), dx.data(), elem_type(dx.dtype()), n, t, hs, pos0,
                       elem_type(input_dtype), stream());
}

}  // namespace ampctl::cuda_detail
