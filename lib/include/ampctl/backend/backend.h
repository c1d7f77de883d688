// Backend: the small table of tensor ops everything above runs on. Two implementations: the CPU
// backend (the reference: plain code, OpenBLAS for matrix products) and the CUDA backend
// (cuBLAS + kernels/), checked against the CPU one op by op.
//
// Conventions for every op:
//   * Tensors are contiguous and row-major; shapes and dtypes are checked by the op, which throws
//     Error{invalid_argument} naming both sides on a mismatch.
//   * Floating-point arithmetic happens in float32 (the "opmath" of PyTorch for f16/bf16) and the
//     result is rounded once, to nearest even, to the output's dtype.
//   * Scalars that the GPU must not read back (scale, inv_scale, found_inf, step counters) are
//     one-element device tensors, never host values, so a GPU step needs no host sync.
//   * Ops are asynchronous on the GPU (one stream, in issue order); download() and synchronize()
//     are the only points that wait.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ampctl/core/tensor.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/amp_math.h"
#include "ampctl/math/nn_math.h"
#include "ampctl/math/sgd_math.h"

namespace ampctl {

// Arguments of one fused optimizer update over one flat parameter buffer: Backend's single entry
// point for every kind of update (optimizer_step). The kind is the alternative `hyper` holds;
// each kind's per-element math is its header in math/ (sgd_math.h, adam_math.h), and adding a
// kind means a math header, an alternative here, and its pass in each backend.
//
// The tensors every kind shares come first; then each kind's state buffers, which must be
// undefined under the other kinds (a caller that mixes them up is told so).
struct OptimizerStepArgs {
  Tensor params;       // f32, updated in place
  Tensor grads;        // f32, same numel; read only
  Tensor step;         // i32[1]: real (unskipped) steps so far; incremented unless skipped
  Tensor found_inf;    // f32[1] or undefined: when non-zero the whole update is skipped
  Tensor inv_scale;    // f32[1] or undefined: gradients are multiplied by it first
  Tensor lowp_params;  // f32/f16/bf16 copy of params written in the same pass, or undefined
  // f32, params' numel, or undefined (weight decay on every element): the elements where it is
  // 0 are updated with weight_decay = 0 (optimizer.decay_on: matrices, nanoGPT's no-decay
  // group), bitwise as an update without decay would; elsewhere with the kind's weight_decay.
  Tensor decay_mask;

  // SGD: f32, params' numel; read and written only when momentum != 0 (step 0 initialises it).
  Tensor momentum_buf;
  // Adam / AdamW: f32, params' numel; this update is number step + 1.
  Tensor exp_avg;
  Tensor exp_avg_sq;

  // Host values, passed to the device by value with each update (as lr is): a scheduler may
  // change lr, SGD's momentum or Adam's beta1 between steps without a host sync.
  std::variant<optim::SgdHyper, optim::AdamHyper> hyper;
};

// The name of an update kind in messages: "sgd_step", "adam_step".
const char* update_name(const OptimizerStepArgs& args);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // A human-readable description: "cpu (OpenBLAS, 2 threads)", "cuda:0 (NVIDIA H200, sm_90)".
  virtual std::string description() const = 0;

  // ---- memory ----
  // Uninitialised storage on this backend's device (the CPU backend zero-fills).
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  Tensor zeros(const Shape& shape, DType dtype);
  // Host bytes -> tensor and tensor -> host bytes; byte counts must equal nbytes().
  virtual void upload(const Tensor& dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const Tensor& src) = 0;     // waits for pending work
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;  // same dtype and numel
  // Every element := value, rounded to float and then to dst's dtype as PyTorch's fill_ does
  // (i32: value must be integral).
  virtual void fill(const Tensor& dst, double value) = 0;
  virtual void synchronize() = 0;

  // Convenience: a host vector into a new tensor of this backend, and back.
  Tensor from_host(const Shape& shape, DType dtype, const void* data);
  Tensor to_host(const Tensor& t);  // a host tensor with the same contents
  float read_scalar_f32(const Tensor& t);
  int32_t read_scalar_i32(const Tensor& t);

  // ---- casts and elementwise ----
  // dst := src converted (float dtypes, or i32 <-> f32), one rounding. Equal numel.
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;
  // out := round_out(float(x) * scale[0]); scale is f32[1]. out may alias x.
  virtual void mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) = 0;
  // dst := round_dst(float(dst) + alpha * float(src)). Equal numel, any float dtypes.
  virtual void add_(const Tensor& dst, const Tensor& src, float alpha = 1.0f) = 0;

  // C := alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X or X^T.
  // A and B: f32, f16 or bf16 (may differ); products accumulate in float32; C is f32, f16 or
  // bf16 and is rounded once (when beta != 0, C is read, widened, added in float32 and rounded).
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f) = 0;

  // out[0] := sqrt(sum of squares of every element of every tensor), accumulated in double in a
  // fixed order (deterministic), rounded once to float. out is f32[1].
  virtual void global_norm(std::span<const Tensor> tensors, const Tensor& out) = 0;

  // ---- the amp ops (docs/reference.md, "Scaler") ----
  // For every element of every tensor: found_inf[0] := 1 if it is inf or NaN (never cleared);
  // the element := round(float(x) * inv_scale[0]), untouched when inv_scale[0] == 1.
  // Attribution, optional and in the same pass (segment_starts and segment_found both undefined,
  // or both defined): number the elements of `tensors` consecutively (tensor 0's, then tensor
  // 1's, ...) and cut them into S segments, segment s covering [segment_starts[s],
  // segment_starts[s + 1]) and the last one running to the end; segment_found[s] := 1 when
  // segment s holds an inf or NaN (never cleared). segment_starts: i32 [S] on this device,
  // starting at 0 and strictly increasing (the CPU checks it; the GPU trusts it: no sync);
  // segment_found: i32 [S]. A flat gradient arena with one segment per parameter tensor tells
  // which parameters overflowed, in the same pass: a clean pass costs nothing more, and only a
  // thread that met an inf or NaN looks segments up (on the GPU, an unscale by inv_scale > 1,
  // i.e. a scale below 1, adds one check-only read pass: see kernels/amp.cu).
  virtual void non_finite_check_and_unscale_(std::span<const Tensor> tensors,
                                             const Tensor& found_inf, const Tensor& inv_scale,
                                             const Tensor& segment_starts = Tensor{},
                                             const Tensor& segment_found = Tensor{}) = 0;
  // inv[0] := float32(1 / double(scale[0])).
  virtual void inv_scale(const Tensor& scale, const Tensor& inv) = 0;
  // One update of scale (f32[1]), growth_tracker (i32[1]) and hysteresis_tracker (i32[1]) from
  // found_inf (f32[1]), by amp::update_scale_state.
  virtual void update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& hysteresis_tracker, const Tensor& found_inf,
                             const amp::ScaleUpdateParams& params) = 0;

  // dst[r, :] := src[index[offset + r], :] for every row r of dst: a batch picked from a data set
  // resident on this backend. src [N, W] (or [N]) and dst [R, W] (or [R]) share one 4-byte dtype
  // (f32 or i32); index is i32. The CPU checks every index; the GPU clamps into [0, N) without a
  // sync (the data loader made the indices).
  virtual void gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                           const Tensor& dst) = 0;

  // ---- neural-network ops (math/nn_math.h holds their per-element math) ----
  // y[r, o] := round_y(sum_i float(x[r, i]) * float(w[o, i]) + float(b[o])): a Linear layer,
  // x [R, I], w [O, I], b [O] or undefined, y [R, O]; fp32 accumulation, one rounding (the bias is
  // added in float before it, as a cuBLASLt bias epilogue does).
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& y) = 0;
  // out[c] := round_out(sum_r float(x[r, c])) for x [R, C]: bias gradients. fp32 accumulation.
  virtual void sum_rows(const Tensor& x, const Tensor& out) = 0;
  // y := round_y(act(float(x))), equal numel; y may alias x.
  virtual void activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y) = 0;
  // dx := round_dx(activation_backward(kind, x, y, dy)); x is the forward input, y its output;
  // dx may alias dy.
  virtual void activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                   const Tensor& dy, const Tensor& dx) = 0;
  // Dropout of call `offset` (nn::dropout_keep): y := keep ? round_y(x * scale) : 0. The mask is
  // regenerated, never stored; dropout_backward with the same (seed, offset, p) applies it to dy.
  virtual void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed,
                               uint64_t offset) = 0;
  virtual void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed,
                                uint64_t offset) = 0;
  // Softmax cross-entropy over logits [R, C] (any float dtype, widened) with labels i32 [R]:
  // loss[0] := mean over rows of -log_softmax[target] (float32, rows summed in a fixed order);
  // correct[0] := rows whose argmax (first maximum) is the label (i32[1], may be undefined);
  // when dlogits is defined: dlogits := round(nn::xent_grad(...)) with c = -grad_scale[0] / R.
  // Labels outside [0, C) are an error on the CPU; the GPU clamps them into range without a sync
  // (the data loader has already validated them).
  virtual void softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                                     const Tensor& correct, const Tensor& dlogits,
                                     const Tensor& grad_scale) = 0;
  // Mean squared error of pred (any float dtype) against target (f32, same numel):
  // loss[0] := mean((pred - target)^2) in float32; dpred := round(nn::mse_grad(...)) when defined.
  virtual void mse(const Tensor& pred, const Tensor& target, const Tensor& loss,
                   const Tensor& dpred, const Tensor& grad_scale) = 0;
  // LayerNorm over the last dimension of x [R, C] with f32 gamma/beta [C]: statistics in float32
  // (mean, then the biased variance of the centred values), rstd = 1 / sqrt(var + eps);
  // y := round_y((x - mean) * rstd * gamma + beta); mean and rstd f32 [R] are saved for backward.
  virtual void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                  float eps) = 0;
  // dx := round_dx(PyTorch's LayerNorm input gradient), dgamma += sum_r dy * xhat and
  // dbeta += sum_r dy (f32 [C], accumulated into the existing gradients).
  virtual void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                   const Tensor& dgamma, const Tensor& dbeta) = 0;
  // coef[0] := min(max_norm / (norm[0] + 1e-6), 1) in float32 (torch.nn.utils.clip_grad_norm_;
  // a NaN norm gives a NaN coefficient, as there).
  virtual void clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) = 0;

  // ---- transformer ops (the GPT: docs/reference.md, "Precision", holds the op table) ----
  // Shapes: B sequences of T positions, C = n_embd, H heads of hs = C / H. Row r = b * T + t.
  //
  // Token + position embedding (nanoGPT's wte(idx) + wpe(pos)), all f32:
  // out[b*T + t, :] := wte[tokens[b, t], :] + wpe[t, :] (one float add). tokens i32 [B, T],
  // wte f32 [V, C], wpe f32 [P, C] with P >= T, out f32 [B*T, C]. Ids outside [0, V) are an
  // error on the CPU; the GPU clamps them (the data loader validated them).
  virtual void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                 const Tensor& out);
  // The backward, ADDED into f32 gradients: dwte[v, :] += the sum of dout[r, :] over the rows r
  // whose token is v; dwpe[t, :] += sum_b dout[b*T + t, :]. Each sum is taken in float in
  // ascending r and added once: the same bits on every run and on every backend (no float
  // atomics in a varying order). dout f32 [B*T, C]; dwte may be undefined (not accumulated).
  virtual void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                  const Tensor& dwpe);
  // `batch` independent gemm's (same rules as gemm: f32/f16/bf16 operands, fp32 accumulation,
  // one rounding of C): C_i := alpha * op(A_i) @ op(B_i) + beta * C_i, where X_i is the i-th of
  // `batch` equal, contiguous row-major matrices of X (a [batch, m, k] or [batch, k, m] as
  // trans_a says, and so on; the rank of X may be 3 or higher, the last two dims being the
  // matrix). q @ k^T and att @ v of every (b, h) at once (cublasGemmStridedBatchedEx on the GPU).
  virtual void gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                            const Tensor& c, float alpha = 1.0f, float beta = 0.0f);
  // Head layout copies (no rounding; src and dst share one dtype):
  // heads_from_rows: dst[b, h, t, d] := src[b*T + t, column + h*hs + d], src [B*T, W] with
  // column + H*hs <= W, dst [B, H, T, hs] (q, k, v out of c_attn's [B*T, 3C]: column 0, C, 2C).
  virtual void heads_from_rows(const Tensor& src, int64_t column, const Tensor& dst);
  // heads_to_rows: dst[b*T + t, column + h*hs + d] := src[b, h, t, d]; other columns untouched
  // (the inverse: att @ v back to [B*T, C], and dq, dk, dv into dqkv).
  virtual void heads_to_rows(const Tensor& src, const Tensor& dst, int64_t column);
  // Causal softmax over the last dim of scores [N, T, T] (any float dtype): for row i,
  // s_j = float(scores[n, i, j]) * scale, rounded to scores' dtype first when round_scaled
  // (autocast's lowp `att * (1/sqrt(hs))` before the fp32 softmax), columns j > i masked;
  // probs[n, i, j] := round_probs(exp(s_j - max) / sum) for j <= i and 0 for j > i. probs is f32
  // or scores' dtype; max and sum in float32, summed in ascending j.
  virtual void causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                                      const Tensor& probs);
  // Its backward: g_j = float(probs_j) * (float(dprobs_j) - sum_k float(dprobs_k) *
  // float(probs_k)) (sum in float, ascending k, over k <= i), rounded to dscores' dtype first
  // when round_scaled (the backward of autocast's cast to fp32); dscores[n, i, j] :=
  // round(g_j * scale) for j <= i and 0 for j > i. dscores may alias neither input.
  virtual void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                       bool round_scaled, const Tensor& dscores);

  // ---- optimizers ----
  // One fused optimizer update (see OptimizerStepArgs); when found_inf is given and non-zero,
  // nothing is written (params, state buffers, step and lowp copy stay bitwise unchanged).
  // Arguments are checked by check_optimizer_step, the same on every backend.
  virtual void optimizer_step(const OptimizerStepArgs& args) = 0;

 protected:
  // What an op a backend does not implement throws: Error{state} naming the op and the backend.
  [[noreturn]] void unsupported(const char* op) const;
  // The transformer ops' argument checks, shared by the implementations so that both backends
  // refuse the same calls: every tensor given is defined and on `device`, shapes and dtypes are
  // the contract's above, and an output shares no byte with an input (causal_softmax_forward's
  // probs may also be exactly scores, same dtype: in place). Each throws Error{invalid_argument}
  // naming the op and the operand. Token ids are the implementations' to check (the GPU cannot
  // without a sync).
  struct EmbeddingDims {
    int64_t batch, time, vocab, channels;  // B, T, V (0 when dwte is undefined), C
  };
  static EmbeddingDims check_embedding_forward(const Tensor& tokens, const Tensor& wte,
                                               const Tensor& wpe, const Tensor& out,
                                               const Device& device);
  static EmbeddingDims check_embedding_backward(const Tensor& tokens, const Tensor& dout,
                                                const Tensor& dwte, const Tensor& dwpe,
                                                const Device& device);
  struct GemmBatchedDims {
    int64_t batch, m, n, k;
  };
  static GemmBatchedDims check_gemm_batched(const Tensor& a, bool trans_a, const Tensor& b,
                                            bool trans_b, const Tensor& c, const Device& device);
  struct HeadsDims {
    int64_t batch, heads, time, head_size, width;  // B, H, T, hs, W (the rows' width)
  };
  // rows [B*T, W], heads [B, H, T, hs], one dtype, column + H*hs <= W; op names the caller.
  static HeadsDims check_heads(const Tensor& rows, int64_t column, const Tensor& heads,
                               const char* op, const Device& device);
  struct SoftmaxDims {
    int64_t count, time;  // N, T
  };
  static SoftmaxDims check_causal_softmax_forward(const Tensor& scores, const Tensor& probs,
                                                  const Device& device);
  static SoftmaxDims check_causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                                   const Tensor& dscores, const Device& device);
  // gather_rows' argument checks, shared by the implementations; returns the row width W.
  static int64_t check_gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                                   const Tensor& dst);
  // optimizer_step's argument checks, shared by the implementations: every tensor given lives
  // on `device`; params and grads are f32 of one numel; step is i32[1]; the kind's state buffers
  // are f32 of params' numel (SGD's only when momentum != 0) and the other kinds' are undefined;
  // found_inf and inv_scale, when given, are f32[1]; lowp_params, when given, is f32, f16 or
  // bf16 of params' numel. Throws Error{invalid_argument} naming the update and the operand.
  static void check_optimizer_step(const OptimizerStepArgs& args, const Device& device);
};

// The CPU backend. threads <= 0 means OPENBLAS_NUM_THREADS when set to a positive count (how a
// sweep shares the cores among its jobs), else one per core.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

// The CUDA backend on device `index`. Throws Error{cuda} with a hint when CUDA was not compiled
// in or no such usable GPU exists.
std::unique_ptr<Backend> make_cuda_backend(int index = 0);

// Whether this build includes the CUDA backend, the architectures it was built for ("90"), and
// how many usable GPUs there are (0 when none or not compiled in; never throws).
bool cuda_compiled();
std::string cuda_architectures();
int cuda_device_count();
// Free memory on GPU `index` in bytes (cudaMemGetInfo), or nullopt when CUDA is not compiled in
// or the device cannot be asked (never throws). What a run may still allocate there.
std::optional<uint64_t> cuda_free_memory(int index);

}  // namespace ampctl
