// The CPU backend's class, shared by its source files: cpu_backend.cpp (the operand helpers and
// the backend's lifetime) and one file per op family of backend.h: memory.cpp, gemm.cpp, amp.cpp,
// nn.cpp, transformer.cpp (embedding, batched gemm, head layouts, causal softmax, attention),
// conv.cpp, optim.cpp and numerics.cpp; with the engines under engine/: the packed kernels in
// cpu_gemm.cpp (matrix products) and cpu_vector.cpp (elementwise passes), AVX-512 and their AVX2
// builds (cpu_gemm_avx2.cpp, cpu_vector_avx2.cpp), the thread pool
// (cpu_parallel.h) and the SIMD helpers.
// Internal to lib/src; users get it through make_cpu_backend().
//
// Invariants: every op checks its operands (device, dtype, shape) before it writes anything;
// arithmetic is float32 with one rounding per output to its dtype; reductions run in a fixed
// order; the widening workspaces only grow, so a steady-state training step does not allocate.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "../checks/checks.h"
#include "ampctl/backend/backend.h"
#include "engine/cpu_gemm.h"

namespace ampctl::cpu {

// The argument checks are written once for both backends (../checks/checks.h); what stays here
// checks the values inside tensors (token ids, labels, indices), which only the CPU can read
// without a sync.

// Widens any float tensor into `out` (exact) and returns a pointer to float data: the tensor's
// own data when it already is f32.
const float* as_f32(const Tensor& t, std::vector<float>& out);
// Rounds numel() floats once into dst of any float dtype.
void store_f32(const float* src, const Tensor& dst);
// Whether the storage of a and b shares any byte (then an op writing one while reading the other
// must go through a workspace).
using checks::overlaps;
// Disjoint, or exactly the same elements (an in-place elementwise op is then safe).
bool same_or_disjoint(const Tensor& a, const Tensor& b);

// The f32 kernels of the unscale pass (amp.cpp) the CPU's instruction path (core/cpu_isa.h)
// allows, best first: unscale
// (inv != 1) or check (inv == 1) p[0, n) and return whether an inf or NaN was seen. The pass uses
// the first; tests hold each against the scalar reference.
struct UnscaleF32Kernel {
  const char* name;
  bool (*run)(float* p, size_t n, float inv);
};
std::vector<UnscaleF32Kernel> unscale_f32_kernels();

// Which kernels a CpuBackend may use (each also needs the CPU to have the instructions):
// `portable` is the plain reference code (OpenBLAS for products, scalar loops); `avx512` adds the
// packed f32 GEMM and the vector elementwise passes (AVX-512, or their AVX2 builds on the avx2
// path: the name is the level's, not the instruction set's); `best` also the bf16 dot-product GEMM.
// Every level gives the same bits for every op except the matrix products, whose fp32 accumulation
// order differs (within the bound the gemm tests check). Tests compare the levels.
enum class CpuKernels { portable, avx512, best };

class CpuBackend final : public Backend {
 public:
  // Throws Error{config} (exit 2), before starting any thread, when the process's address-space
  // limit cannot hold the threads' stacks and OpenBLAS's buffers (check_cpu_backend_room).
  explicit CpuBackend(int threads, CpuKernels kernels = CpuKernels::best);

  Device device() const override { return Device{}; }
  std::string description() const override;

  Tensor empty(const Shape& shape, DType dtype) override { return Tensor::host(shape, dtype); }
  // memory.cpp
  void upload(const Tensor& dst, const void* host, size_t bytes) override;
  void download(void* host, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& dst, double value) override;
  void synchronize() override {}

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
  void clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) override;
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
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                    int64_t pos0) override;
  void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, const Tensor& dx,
                     int64_t pos0, DType input_dtype) override;
  void causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                              const Tensor& probs) override;
  void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                               bool round_scaled, const Tensor& dscores) override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                         const Tensor& y, const AttentionBuffers& buffers) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                          const Tensor& dy, float scale, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, const AttentionBuffers& buffers) override;
  // conv.cpp (the convolution ops)
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

  // optim.cpp
  void optimizer_step(const OptimizerStepArgs& args) override;
  // numerics.cpp
  void round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) override;
  void round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax) override;
  void gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                       const Tensor& c, const Tensor& amax, const Tensor& scratch) override;
  void gemm_batched_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const Tensor& c, const Tensor& amax, const Tensor& scratch) override;
  void activation_backward_amax(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                const Tensor& dy, const Tensor& dx, const Tensor& amax,
                                const Tensor& scratch) override;
  void causal_softmax_backward_amax(const Tensor& probs, const Tensor& dprobs, const Tensor& scale,
                                    const Tensor& dscores, const Tensor& amax,
                                    const Tensor& scratch) override;

 private:
  // optimizer_step's passes, after the shared checks and the skip; `inv` is inv_scale[0] or 1.
  void sgd_pass(const OptimizerStepArgs& args, const optim::SgdHyper& hyper, float inv);
  void adam_pass(const OptimizerStepArgs& args, const optim::AdamHyper& hyper, float inv);
  void cast_integer(const Tensor& src, const Tensor& dst);
  // gemm_batched on the packed kernels (batch, m, n, k >= 1, m_packed), with the epilogue's amax
  // when given (transformer.cpp).
  void gemm_batched_packed(const GemmBatchedDims& d, const Tensor& a, bool trans_a, const Tensor& b,
                           bool trans_b, const Tensor& c, float alpha, float beta, AmaxSink* amax);
  // softmax_cross_entropy's fused, threaded path (m_packed), after the checks.
  void softmax_cross_entropy_rows(const Tensor& logits, const int32_t* labels, const Tensor& loss,
                                  const Tensor& correct, const Tensor& dlogits,
                                  const Tensor& grad_scale);
  // The embedding ops' token checks: every id in [0, vocab), else Error{invalid_argument}.
  static void check_token_ids(const Tensor& tokens, int64_t vocab, const char* what);
  // dropout_forward and dropout_backward: out := keep ? round(in * scale) : 0.
  void dropout_apply(const Tensor& in, const Tensor& out, float p, uint64_t seed, uint64_t offset,
                     const char* what);

  // Starts OpenBLAS's threads (m_threads) and takes their buffers, after checking they fit.
  void start_openblas_threads();

  int m_threads = 1;
  bool m_packed = false;    // packed GEMM and vector passes (avx512 or avx2 path)
  bool m_bf16_dot = false;  // the VDPBF16PS GEMM for bf16 x bf16
  // The threads of the packed kernels and the elementwise passes (cpu_parallel.h).
  std::unique_ptr<ThreadPool> m_pool;
  // The packed matrix product (cpu_gemm.h); OpenBLAS where it has no kernel.
  GemmEngine m_gemm;
  // Grow-only float workspaces: widened operands (a, b, c) and float results before their one
  // rounding (d, e).
  std::vector<float> m_ws_a, m_ws_b, m_ws_c, m_ws_d, m_ws_e;
  // Grow-only per-thread row blocks of the LayerNorm passes (16 or 32 rows of floats each).
  std::vector<float> m_ws_ln;
  // Grow-only index workspace (embedding_backward's rows grouped by token).
  std::vector<int32_t> m_ws_idx;
  // Grow-only global_norm workspace: each block's sum of squares, in order.
  std::vector<double> m_ws_norm;
  // gemm_batched: one packed engine per pool thread, each running its matrices whole on the
  // calling thread (m_serial_pool has no workers), so the batch is what is split.
  std::vector<GemmEngine> m_batch_gemm;
  std::unique_ptr<ThreadPool> m_serial_pool;
};

}  // namespace ampctl::cpu
