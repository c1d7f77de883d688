// The CUDA backend's host side, shared by its translation units: cuda_backend.cpp (the handles,
// the stream, device memory and the backend's lifetime, and the plugin's table) and one file per
// op family of backend.h: memory.cpp, gemm.cpp, amp.cpp, nn.cpp (through cuBLASLt and kernels/),
// transformer.cpp (kernels/transformer.cu, kernels/transformer_attention.cu and cuBLAS's
// strided-batched gemm), conv.cpp, optim.cpp and numerics.cpp. C++20 host code: kernels are reached
// only through the launchers of kernels/*.cuh, which take raw pointers and ElemType.
//
// Ownership: every resource has one owner, with RAII. Tensor storage is cudaMalloc'd and freed by
// the Storage's deleter; the stream, the cuBLAS and cuBLASLt handles, cuBLAS's workspace, the
// grow-only workspaces and the cached cuBLASLt plans belong to the CudaBackend object.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "../checks/checks.h"
#include "ampctl/backend/backend.h"
#include "ampctl/backend/device_support.h"
#include "kernel_common.cuh"

namespace ampctl::cuda_detail {

using kernels::ElemType;

static_assert(static_cast<int>(ElemType::f32) == static_cast<int>(DType::f32) &&
                  static_cast<int>(ElemType::f16) == static_cast<int>(DType::f16) &&
                  static_cast<int>(ElemType::bf16) == static_cast<int>(DType::bf16) &&
                  static_cast<int>(ElemType::i32) == static_cast<int>(DType::i32),
              "kernels::ElemType must mirror ampctl::DType");

inline ElemType elem_type(DType dtype) {
  return static_cast<ElemType>(dtype);
}

// ---- cuBLAS errors (cuBLASLt returns the same status type) ----

// Throws Error{cuda, "file:line: expr: CUBLAS_STATUS_... (description)"}.
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line);

#define AMPCTL_CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                             \
    const cublasStatus_t ampctl_cublas_status_ = (expr);                                           \
    if (ampctl_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                          \
      ::ampctl::cuda_detail::throw_cublas_error(ampctl_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)

// ---- RAII ----

// Makes `device` current for a scope and restores the previous device after, so a backend on
// cuda:1 does not leave the thread pointed at it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : m_device(device) {
    AMPCTL_CUDA_CHECK(cudaGetDevice(&m_previous));
    if (m_previous != m_device) AMPCTL_CUDA_CHECK(cudaSetDevice(m_device));
  }
  ~DeviceScope() {
    if (m_previous != m_device) (void)cudaSetDevice(m_previous);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int m_device;
  int m_previous = 0;
};

// Frees device memory (never throws: errors are dropped; it waits for the device first, so the
// free is safe whatever is still queued).
void free_device_memory(int device, void* p) noexcept;

// cudaMalloc, or Error{cuda} naming the bytes and `what`, with a hint.
void* allocate_device_memory(int device, size_t bytes, const std::string& what);

// A backend-internal device buffer with one owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes, const std::string& what)
      : m_device(device),
        m_data(bytes ? allocate_device_memory(device, bytes, what) : nullptr),
        m_bytes(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      m_device = other.m_device;
      m_data = std::exchange(other.m_data, nullptr);
      m_bytes = std::exchange(other.m_bytes, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return m_data; }
  size_t bytes() const { return m_bytes; }
  void reset() noexcept {
    free_device_memory(m_device, m_data);
    m_data = nullptr;
    m_bytes = 0;
  }

 private:
  int m_device = 0;
  void* m_data = nullptr;
  size_t m_bytes = 0;
};

// A non-blocking stream on the current device: it does not serialise with the legacy default
// stream, so other libraries' default-stream work does not stall ours.
class Stream {
 public:
  Stream() { AMPCTL_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking)); }
  ~Stream() {
    (void)cudaStreamSynchronize(m_stream);
    (void)cudaStreamDestroy(m_stream);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return m_stream; }

 private:
  cudaStream_t m_stream = nullptr;
};

class CublasHandle {
 public:
  CublasHandle() { AMPCTL_CUBLAS_CHECK(cublasCreate(&m_handle)); }
  ~CublasHandle() { (void)cublasDestroy(m_handle); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return m_handle; }

 private:
  cublasHandle_t m_handle = nullptr;
};

class CublasLtHandle {
 public:
  CublasLtHandle() { AMPCTL_CUBLAS_CHECK(cublasLtCreate(&m_handle)); }
  ~CublasLtHandle() { (void)cublasLtDestroy(m_handle); }
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const { return m_handle; }

 private:
  cublasLtHandle_t m_handle = nullptr;
};

// cuBLASLt descriptors, destroyed with their owner.
struct LtMatmulDescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const { (void)cublasLtMatmulDescDestroy(d); }
};
struct LtLayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const { (void)cublasLtMatrixLayoutDestroy(l); }
};
using LtMatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtMatmulDescDeleter>;
using LtLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtLayoutDeleter>;

// ---- errors ----
// The argument checks are written once for both backends (../checks/checks.h); what stays here
// are this backend's own limits (cuBLAS's int dimensions), thrown with invalid().
[[noreturn]] void invalid(const std::string& message);
// The cuBLAS data type of a floating dtype.
cudaDataType cuda_data_type(DType dtype);

// ---- linear_forward's cuBLASLt plans ----

// What a plan depends on: the types, the shape and the operands' alignments (cuBLASLt picks
// kernels by alignment). Alignments are powers of two up to 256 bytes.
struct LinearPlanKey {
  DType in_type;  // x and w as cuBLASLt reads them
  DType d_type;   // the matmul's output
  bool bias;      // BIAS epilogue (bias of d_type)
  int64_t rows, in, out;
  unsigned align_x, align_w, align_d, align_bias;
  auto operator<=>(const LinearPlanKey&) const = default;
};

// The descriptors of y^T = w^T-op x^T in cuBLASLt's column-major terms, and the algorithm its
// heuristic chose once (has_algo false: none fits, use the fallback path).
struct LinearPlan {
  LtMatmulDesc desc;
  LtLayout w_layout, x_layout, d_layout;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;
};

// ---- linear_gelu's cuBLASLt plans (nn.cpp) ----

// A GELU epilogue matmul D [m, n] (column-major) = op(A) B with the GELU input matrix (AUX) of
// D's type and shape: forward GELU_AUX(_BIAS) (A = w transposed, B = x, AUX = pre, D = y) or
// backward DGELU (A = w, B = dy, AUX = pre, D = dpre). A, B and D are 16-byte aligned on the
// fused path (checked per call) and the preference promises no more; the heuristic reads the
// AUX and bias pointers' alignments from the descriptor, so those are part of the key.
struct GeluPlanKey {
  bool backward;
  DType dtype;  // A, B, D, AUX and the bias
  bool bias;
  int64_t m, n, k;
  unsigned align_aux, align_bias;
  auto operator<=>(const GeluPlanKey&) const = default;
};

// ---- the backend ----

class CudaBackend final : public Backend {
 public:
  // The device must be current (make_cuda_backend makes it so).
  CudaBackend(int index, const cudaDeviceProp& props);

  Device device() const override { return m_device; }
  std::string description() const override { return m_description; }
  // The capability this backend's decisions use (AMPCTL_FORCE_SM75 caps it at 7.5).
  ComputeCapability capability() const { return m_capability; }
  // The stream every op of this backend runs on, for the NCCL communicator (dist/), whose
  // collectives must be ordered with the step's kernels without a host sync.
  cudaStream_t native_stream() const { return m_stream.get(); }

  Tensor empty(const Shape& shape, DType dtype) override;
  // memory.cpp
  void upload(const Tensor& dst, const void* host, size_t bytes) override;
  void download(void* host, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& dst, double value) override;
  void synchronize() override;

  void cast(const Tensor& src, const Tensor& dst) override;
  void mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) override;
  void add_(const Tensor& dst, const Tensor& src, float alpha) override;
  void gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                   const Tensor& dst) override;
  // gemm.cpp
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
            float alpha, float beta) override;
  // amp.cpp
  void global_norm(std::span<const Tensor> tensors, const Tensor& out) override;
  void non_finite_check_and_unscale_(std::span<const Tensor> tensors, const Tensor& found_inf,
                                     const Tensor& inv_scale,
                                     const Tensor& segment_starts = Tensor{},
                                     const Tensor& segment_found = Tensor{}) override;
  void non_finite_check_unscale_norm_(std::span<const Tensor> tensors, const Tensor& found_inf,
                                      const Tensor& inv_scale, bool unscale, const Tensor& norm,
                                      const Tensor& segment_starts = Tensor{},
                                      const Tensor& segment_found = Tensor{}) override;
  void inv_scale(const Tensor& scale, const Tensor& inv) override;
  void update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                     const Tensor& hysteresis_tracker, const Tensor& trackers,
                     const Tensor& found_inf, const amp::ScaleUpdateParams& params) override;
  void update_scale_auto_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& trackers,
                          const Tensor& found_inf, const Tensor& amax, const Tensor& history,
                          const amp::ScaleUpdateParams& params) override;

  // optim.cpp
  void optimizer_step(const OptimizerStepArgs& args) override;
  // numerics.cpp
  void round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) override;
  void round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax) override;

  // nn.cpp
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void sum_rows(const Tensor& x, const Tensor& out) override;
  void activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y) override;
  void activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                           const Tensor& dy, const Tensor& dx) override;
  void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed,
                       uint64_t offset) override;
  void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed,
                        uint64_t offset) override;
  void softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                             const Tensor& correct, const Tensor& dlogits,
                             const Tensor& grad_scale) override;
  void mse(const Tensor& pred, const Tensor& target, const Tensor& loss, const Tensor& dpred,
           const Tensor& grad_scale) override;
  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd, float eps) override;
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                           const Tensor& dgamma, const Tensor& dbeta) override;
  // Fused: one kernel (kernels/nn_layer_norm.cu), bitwise the composition on this backend.
  void residual_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                   const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd, float eps) override;
  // Fused: dx is added to in the backward's row kernel; scratch is not used.
  void layer_norm_backward_accumulate(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta,
                                      const Tensor& scratch) override;
  void clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) override;
  // kernels/nn_rms_norm.cu (the residual form one kernel, bitwise the composition here) and
  // kernels/nn_swiglu.cu.
  void rms_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                        float eps) override;
  void residual_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                 const Tensor& weight, const Tensor& y, const Tensor& rstd,
                                 float eps) override;
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& dy, const Tensor& dx, const Tensor& dweight, bool accumulate,
                         const Tensor& dy_weight = Tensor{}) override;
  void swiglu_forward(const Tensor& gate_up, const Tensor& y) override;
  void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up,
                       const Tensor& dy_up = Tensor{}) override;

  // transformer.cpp
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         const Tensor& out) override;
  void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                          const Tensor& dwpe) override;
  void gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    float alpha, float beta) override;
  void heads_from_rows(const Tensor& src, int64_t column, const Tensor& dst) override;
  void heads_to_rows(const Tensor& src, const Tensor& dst, int64_t column) override;
  // kernels/transformer_rope.cu.
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                    int64_t pos0) override;
  void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, const Tensor& dx,
                     int64_t pos0, DType input_dtype) override;
  void causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                              const Tensor& probs) override;
  void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                               bool round_scaled, const Tensor& dscores) override;
  // Fused (kernels/transformer_attention.cu) for f16/bf16 heads of size <= 64, else Backend's
  // composition. The fused attention's tile products for `dtype` on the tensor cores:
  // AMPCTL_ATTENTION's default, on a capability with WMMA fragments of that dtype (bf16 needs 8.0).
  bool tensor_core_attention(DType dtype) const;
  AttentionSizes attention_workspace(int64_t batch_heads, int64_t time, int64_t head_size,
                                     DType dtype) const override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                         const Tensor& y, const AttentionBuffers& buffers) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                          const Tensor& dy, float scale, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, const AttentionBuffers& buffers) override;
  // Fused into one cuBLASLt matmul with a GELU epilogue (nn.cpp) for f16/bf16 operands of
  // one dtype, a GELU width divisible by 8 and 16-byte aligned pointers, unless AMPCTL_GELU is
  // "composed"; otherwise Backend's composition.
  void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                           const Tensor& y) override;
  void linear_gelu_backward_input(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                  const Tensor& dpre, const Tensor& scratch) override;
  bool linear_gelu_fused(DType dtype, int64_t width) const override;
  // conv.cpp (the convolution ops; kernels/conv.cu)
  void im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
              const Conv2dGeometry& g) override;
  void col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
              const Conv2dGeometry& g) override;
  void broadcast_channels(const Tensor& b, const Tensor& y) override;
  void channel_sum(const Tensor& x, const Tensor& out) override;
  void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                          const Pool2dGeometry& g) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                           const Pool2dGeometry& g) override;
  void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) override;
  void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dGeometry& g) override;
  void batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                          const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& running_mean, const Tensor& running_var,
                          const Tensor& num_batches_tracked,
                          const BatchNormParams& params) override;
  void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                           const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                           const Tensor& dgamma, const Tensor& dbeta) override;

 private:
  // A float workspace of at least `floats` elements; grows (never shrinks) between steps.
  float* gemm_workspace(size_t floats);
  // The operands of one cuBLAS product with 32-bit compute (gemm, gemm_batched), which takes
  // equal input types and an f32 output or the inputs' type: mixed inputs widened exactly to f32
  // in the gemm workspace, and another output type computed in f32 there (C widened first when
  // beta reads it) and rounded once by finish_gemm.
  struct GemmOperands {
    const void* a = nullptr;
    const void* b = nullptr;
    void* c = nullptr;
    cudaDataType ab_type{};
    cudaDataType c_type{};
    bool c_via_workspace = false;
  };
  GemmOperands stage_gemm(const Tensor& a, const Tensor& b, const Tensor& c, float beta);
  // C := the workspace's f32 result rounded to C's dtype, when the product went through it.
  void finish_gemm(const GemmOperands& ops, const Tensor& c);
  // The same for the other grow-only workspaces: `buffer` is grown to at least `floats` floats
  // (freeing the old one first; the free waits for queued readers), sized by the first call that
  // needs that much, so a steady-state step allocates nothing.
  float* grow_workspace(DeviceBuffer& buffer, size_t floats, const char* what);
  // The cached plan for `key` (built and its algorithm chosen on first use); `bias` is the bias
  // pointer the heuristic sees (its alignment matters), nullptr without a bias.
  LinearPlan& linear_plan(const LinearPlanKey& key, const void* bias);
  // The cached plan of a GELU epilogue matmul (its algorithm chosen on first use; has_algo
  // false: none fits and the caller composes instead). `bias` and `aux` are the pointers the
  // heuristic sees.
  LinearPlan& gelu_plan(const GeluPlanKey& key, const void* bias, const void* aux);
  cudaStream_t stream() const { return m_stream.get(); }

  // 32 MiB: what cuBLAS's documentation recommends for Hopper; a fixed, owned workspace also
  // keeps cuBLAS from allocating during a step.
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

  Device m_device;
  std::string m_description;
  ComputeCapability m_capability;
  // Destroyed in reverse order: the handle, then the buffers (its workspace among them), then
  // the stream they were used on.
  Stream m_stream;
  DeviceBuffer m_cublas_workspace;
  DeviceBuffer m_gemm_workspace;
  DeviceBuffer m_norm_partials;
  DeviceBuffer m_linear_workspace;     // widened operands and the f32 product of linear_forward
  DeviceBuffer m_reduce_workspace;     // partial sums of sum_rows, the losses, LayerNorm backward
  DeviceBuffer m_embedding_workspace;  // embedding_backward's sort of the rows by token
  CublasHandle m_cublas;
  CublasLtHandle m_cublas_lt;
  std::map<LinearPlanKey, LinearPlan> m_linear_plans;  // after the handle: destroyed before it
  std::map<GeluPlanKey, LinearPlan> m_gelu_plans;      // likewise
};

}  // namespace ampctl::cuda_detail
