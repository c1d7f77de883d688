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

#include <array>
#include <initializer_list>
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
#include "ampctl/math/numerics_math.h"
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

// ---- convolution ops: geometry ----
// The spatial arguments of a 2-d convolution (nn.Conv2d: dilation 1, groups 1).
struct Conv2dGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;  // zeros on each side
};
// The spatial arguments of a 2-d pooling: nn.MaxPool2d / nn.AvgPool2d with ceil_mode=False
// (avg: count_include_pad=True), or, when adaptive, nn.AdaptiveAvgPool2d / AdaptiveMaxPool2d,
// whose windows come from the input and output sizes alone (start = floor(i * H / OH), end =
// ceil((i + 1) * H / OH)); kernel, stride and padding are then unused.
struct Pool2dGeometry {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool adaptive = false;
};
// An output size of a convolution or pooling window sweep: floor((in + 2 pad - k) / stride) + 1,
// or 0 when the window does not fit.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad);
// BatchNorm2d's mode and constants (PyTorch's defaults).
struct BatchNormParams {
  bool training = true;
  float momentum = 0.1f;
  float eps = 1e-5f;
};

// ---- fused causal self-attention: its buffers ----
// What attention_forward keeps for attention_backward, and what either uses only while it runs,
// as counts of f32 elements and of elements of the compute dtype (q's); a backend says how many
// (Backend::attention_workspace) and the caller allocates them once, outside the step. `saved_*`
// is one call site's (a layer's): forward writes it, backward of the same call reads it.
// `scratch_*` may be shared by every call site and is dead between calls.
struct AttentionSizes {
  int64_t saved_f32 = 0;
  int64_t saved_lowp = 0;
  int64_t scratch_f32 = 0;
  int64_t scratch_lowp = 0;
};
// The tensors of those sizes (1-d, contiguous; a buffer of size 0 may be undefined; larger
// ones are accepted: only the leading elements are used).
struct AttentionBuffers {
  Tensor saved_f32, saved_lowp, scratch_f32, scratch_lowp;
};

// The ops in sections by family, in this order: memory, gemm, amp, nn, transformer, conv, optim,
// numerics. Each family has the same places: its section here, its argument checks written
// once in lib/src/backend/checks/<family>.cpp (called by both backends),
// lib/src/backend/cpu/<family>.cpp, lib/src/backend/cuda/<family>.cpp and its kernels in
// kernels/. The default implementations (compositions a backend may fuse) are in
// lib/src/backend/compose.cpp.
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

  // Casts, elementwise scalings and additions, and row gathers (the memory family too).
  // dst := src converted (float dtypes, or i32 <-> f32), one rounding. Equal numel.
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;
  // out := round_out(float(x) * scale[0]); scale is f32[1]. out may alias x.
  virtual void mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) = 0;
  // dst := round_dst(float(dst) + alpha * float(src)). Equal numel, any float dtypes.
  virtual void add_(const Tensor& dst, const Tensor& src, float alpha = 1.0f) = 0;
  // dst[r, :] := src[index[offset + r], :] for every row r of dst: a batch picked from a data set
  // resident on this backend. src [N, W] (or [N]) and dst [R, W] (or [R]) share one 4-byte dtype
  // (f32 or i32); index is i32. The CPU checks every index; the GPU clamps into [0, N) without a
  // sync (the data loader made the indices).
  virtual void gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                           const Tensor& dst) = 0;

  // ---- gemm ----
  // C := alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X or X^T.
  // A and B: f32, f16 or bf16 (may differ); products accumulate in float32; C is f32, f16 or
  // bf16 and is rounded once (when beta != 0, C is read, widened, added in float32 and rounded).
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f) = 0;

  // ---- amp: the amp ops (docs/reference.md, "Scaler") and the global norm ----
  // out[0] := sqrt(sum of squares of every element of every tensor), accumulated in double in a
  // fixed order (deterministic), rounded once to float. out is f32[1]. The CPU's order: each
  // tensor in blocks of 4096 elements, a block on 16 lanes (element i on lane i mod 16, each in
  // index order), the lanes folded in halves (j += j + 8, + 4, + 2, + 1), the blocks' sums added
  // in order; the blocks run on the threads, so the thread count changes no bit. The GPU's:
  // kernels/amp_global_norm.cuh.
  virtual void global_norm(std::span<const Tensor> tensors, const Tensor& out) = 0;

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
  // non_finite_check_and_unscale_ and global_norm in one pass over the tensors (the trainer's
  // grad_norm and clip_grad_norm's norm without a second read of the gradients): found_inf and
  // the attribution as non_finite_check_and_unscale_; when `unscale`, each element := round(
  // float(x) * inv_scale[0]) (untouched when inv_scale[0] == 1), else every element is only
  // checked; and norm[0] (f32[1]) := the global norm of the unscaled values, i.e. of each
  // element's round(float(x) * inv_scale[0]) in its dtype whether stored or not, in
  // global_norm's order on this backend: bitwise global_norm of the tensors an unscale leaves.
  // An inf or NaN element gives an inf or NaN norm.
  virtual void non_finite_check_unscale_norm_(std::span<const Tensor> tensors,
                                              const Tensor& found_inf, const Tensor& inv_scale,
                                              bool unscale, const Tensor& norm,
                                              const Tensor& segment_starts = Tensor{},
                                              const Tensor& segment_found = Tensor{}) = 0;
  // inv[0] := float32(1 / double(scale[0])).
  virtual void inv_scale(const Tensor& scale, const Tensor& inv) = 0;
  // One update of scale (f32[1]), growth_tracker (i32[1]), hysteresis_tracker (i32[1]) and the
  // rule's counters `trackers` (i32[amp::kTrackerCount]) from found_inf (f32[1]), by
  // amp::update_scale_policy under params.policy.
  virtual void update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& hysteresis_tracker, const Tensor& trackers,
                             const Tensor& found_inf, const amp::ScaleUpdateParams& params) = 0;
  // One update under scaler.policy: auto (params.policy automatic): the ring `history`
  // (f32[params.amax_history]) gets amp::auto_history_entry of amax[0] (the step's grad_amax
  // accumulator, f32[numerics::kAmaxWords]) at slot amp::auto_history_slot, then
  // amp::update_scale_auto with the ring's max updates scale (f32[1]), growth_tracker (i32[1])
  // and trackers (i32[amp::kTrackerCount]) from found_inf (f32[1]).
  virtual void update_scale_auto_(const Tensor& scale, const Tensor& growth_tracker,
                                  const Tensor& trackers, const Tensor& found_inf,
                                  const Tensor& amax, const Tensor& history,
                                  const amp::ScaleUpdateParams& params) = 0;

  // ---- nn: neural-network ops (math/nn_math.h holds their per-element math) ----
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
  // dlogits may be logits itself (same data and dtype: in place, as llm.c's fused classifier
  // writes the gradient over the logits; every logit of a row is read before that row's
  // gradient is written, so the results are bitwise the out-of-place op's); any other overlap
  // of the two is refused.
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
  // Residual add + LayerNorm (a pre-LN transformer's `x = x + branch` and the next norm's
  // input): sum := round_f32(float(x) + float(r)) for x f32 and r of any float dtype [R, C]
  // (exactly what copy(sum, x); add_(sum, r) gives), then y, mean and rstd as
  // layer_norm_forward(sum, gamma, beta, y, mean, rstd, eps) gives. sum is f32 [R, C] and may be
  // x itself (in place); y may alias none of the others. The default composes those three ops
  // bit for bit; the CUDA backend fuses them into one pass (kernels/nn_layer_norm.cu) with the same
  // reduction order as its layer_norm_forward, so its results are bitwise its composition's.
  virtual void residual_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                           const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                           const Tensor& mean, const Tensor& rstd, float eps);
  // layer_norm_backward whose input gradient is ADDED: dx := round_dx(float(dx) + the input
  // gradient), dgamma and dbeta as there (the gradient of a residual stream that also feeds a
  // LayerNorm: for f32 dx, bitwise layer_norm_backward into an f32 tensor t, then add_(dx, t)).
  // dx must be defined and share no byte with the inputs. `scratch` (f32, >= R*C elements, or
  // undefined for a backend that fuses it) is where the default composition puts t; the CUDA
  // backend adds in its dx pass and never touches it.
  virtual void layer_norm_backward_accumulate(const Tensor& x, const Tensor& gamma,
                                              const Tensor& mean, const Tensor& rstd,
                                              const Tensor& dy, const Tensor& dx,
                                              const Tensor& dgamma, const Tensor& dbeta,
                                              const Tensor& scratch);
  // coef[0] := min(max_norm / (norm[0] + 1e-6), 1) in float32 (torch.nn.utils.clip_grad_norm_;
  // a NaN norm gives a NaN coefficient, as there).
  virtual void clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) = 0;

  // ---- nn: the Llama / Qwen block's RMSNorm and SwiGLU (docs/reference.md, "Precision") ----
  // RMSNorm over the last dimension of x [R, C] (Hugging Face's LlamaRMSNorm, also Qwen3's
  // per-head q/k norm with C = head_dim) with f32 weight [C], all in float32: rstd := 1 /
  // sqrt(sum_j x_j^2 / C + eps) (the squares summed in index order from 0), saved f32 [R];
  // y := round_y(weight * round_x(x * rstd)), where round_x rounds to x's dtype (HF's
  // `.to(input_dtype)` before the weight multiplies: nothing for f32 x). y may be f32 (the
  // model's f32 path to a RoPE) or lowp, and may be x itself (same dtype and elements).
  virtual void rms_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                                const Tensor& rstd, float eps) = 0;
  // Residual add + RMSNorm: sum := round_f32(float(x) + float(r)) (x f32, r any float dtype,
  // [R, C]; exactly what copy(sum, x); add_(sum, r) gives), then y and rstd as rms_norm_forward
  // (sum, weight, y, rstd, eps) gives them, bitwise, on every backend: one pass on both. sum is
  // f32 and may be x itself (in place); y may alias none of the others.
  virtual void residual_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                         const Tensor& weight, const Tensor& y, const Tensor& rstd,
                                         float eps) = 0;
  // Its gradients, with a = rstd[r] and the float32 g_j := round_x(float(dy_j) * weight_j)
  // (autocast's gradient of the lowp operand of `weight * h`, rounded to x's dtype):
  //   dot = sum_j g_j * x_j (index order), b = -dot * a * a * a / C,
  //   dx_j := round_dx(a * g_j + b * x_j)      (= a (g - xhat mean(g xhat)), xhat = x a)
  // and dweight[j] += sum_r dy_rj * round_x(x_rj * a_r) (f32, rows summed from 0 in order, then
  // added once). dx or dweight may be undefined (not wanted). accumulate: dx := round_dx(
  // float(dx) + the gradient) (the residual stream's gradient, one rounding), and dx then shares
  // no byte with an input; else dx may be dy itself. dy_weight (f32 [R, C], or undefined) receives
  // the floats dy_j * weight_j before round_x: for a lowp x, the numerics hook counts that rounding
  // from it (it shares no byte with the other operands).
  virtual void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& dy, const Tensor& dx, const Tensor& dweight,
                                 bool accumulate, const Tensor& dy_weight = Tensor{}) = 0;
  // SwiGLU (HF's LlamaMLP: act_fn(gate_proj(x)) * up_proj(x) with act_fn = SiLU), on one product
  // of x with cat(gate_proj.weight, up_proj.weight): gate_up [R, 2I] holds row r's gate in
  // columns [0, I) and its up in [I, 2I). With g, u widened and autocast's two lowp ops:
  //   s := round_in(silu(g)) (silu(g) = g / (1 + exp(-g)), PyTorch's formula), y := round_y(s * u)
  // where round_in rounds to gate_up's dtype (nothing for f32). y [R, I], any float dtype,
  // disjoint from gate_up.
  virtual void swiglu_forward(const Tensor& gate_up, const Tensor& y) = 0;
  // Its gradients into dgate_up [R, 2I] (same layout, any float dtype, written, not
  // accumulated; disjoint from the inputs), autocast's roundings: with s as above,
  //   dgate := round(round_in(dy * u) * sigmoid(g) * (1 + g * (1 - sigmoid(g))))
  //   (PyTorch's silu_backward, left to right, sigmoid = 1 / (1 + exp(-g))), dup := round(dy * s)
  // round_in as in the forward, so an f32 dgate_up holds the very floats a lowp one rounds (the
  // numerics hook's path). dy_up (f32 [R, I], or undefined) receives the floats dy * u before
  // round_in, so the hook can count that rounding too (it shares no byte with the other operands).
  virtual void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up,
                               const Tensor& dy_up = Tensor{}) = 0;

  // ---- nn: the MLP's Linear + GELU (tanh) pair (docs/reference.md, "Precision": GELU) ----
  // Forward of gelu_tanh(x w^T + b): pre := linear_forward(x, w, b, pre) (the pre-activation,
  // which the backward reads), y := round_y(gelu_tanh(...)). x [R, I], w [O, I], b [O] or
  // undefined, pre and y [R, O] of one float dtype, y disjoint from x, w, b and pre. The default
  // is the composition, op for op and bit for bit: linear_forward, then activation_forward
  // (gelu_tanh, pre, y). A backend may instead fuse it (the CUDA backend: one cuBLASLt matmul with
  // the GELU_AUX(_BIAS) epilogue, which applies GELU to the float pre-activation instead of its
  // rounding, and its own tanh); linear_gelu_fused says where.
  virtual void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                   const Tensor& pre, const Tensor& y);
  // The input gradient through the pair that follows it in the MLP (c_fc's GELU, then c_proj):
  // dpre := round(gelu_tanh'(pre) * (dy w)) for dy [R, O], w [O, I] (the next Linear's weight),
  // pre and dpre [R, I]. The default composes it as autocast rounds: scratch := gemm(dy, w) in
  // dpre's dtype (scratch: dpre's shape and dtype, disjoint from everything; required on every
  // backend, so that both refuse the same calls), then activation_backward(gelu_tanh, pre, -,
  // scratch, dpre). Fused (CUDA: the DGELU epilogue), the product is not rounded before the
  // GELU gradient multiplies it, and scratch is not touched.
  // The bias gradient of the Linear before the GELU stays the caller's (sum_rows of dpre).
  virtual void linear_gelu_backward_input(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                          const Tensor& dpre, const Tensor& scratch);
  // Whether this backend runs the pair above fused for `dtype` and a GELU width of `width` (O of
  // the forward, I of the backward); with suitably aligned operands (the CUDA backend takes 16
  // bytes, as cudaMalloc'd buffers and their row offsets of 8 elements have). Default: false.
  virtual bool linear_gelu_fused(DType dtype, int64_t width) const;

  // ---- transformer: ops of the GPT: docs/reference.md, "Precision", holds the op table) ----
  // Shapes: B sequences of T positions, C = n_embd, H heads of hs = C / H. Row r = b * T + t.
  //
  // Token + position embedding (nanoGPT's wte(idx) + wpe(pos)), all f32:
  // out[b*T + t, :] := wte[tokens[b, t], :] + wpe[t, :] (one float add). tokens i32 [B, T],
  // wte f32 [V, C], wpe f32 [P, C] with P >= T, out f32 [B*T, C]. Ids outside [0, V) are an
  // error on the CPU; the GPU clamps them (the data loader validated them).
  virtual void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                 const Tensor& out) = 0;
  // The backward, ADDED into f32 gradients: dwte[v, :] += the sum of dout[r, :] over the rows r
  // whose token is v; dwpe[t, :] += sum_b dout[b*T + t, :]. Each sum is taken in float in
  // ascending r, starting from 0, and added once: the same bits on every run and on every
  // backend (no float atomics in a varying order). Rows of dwte whose token is absent from the
  // batch, and rows t >= T of dwpe, are not written. dout f32 [B*T, C]; dwte may be undefined
  // (not accumulated; the ids are then not read).
  virtual void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                  const Tensor& dwpe) = 0;
  // `batch` independent gemm's (same rules as gemm: f32/f16/bf16 operands, fp32 accumulation,
  // one rounding of C): C_i := alpha * op(A_i) @ op(B_i) + beta * C_i, where X_i is the i-th of
  // `batch` equal, contiguous row-major matrices of X (a [batch, m, k] or [batch, k, m] as
  // trans_a says, and so on; the rank of X may be 3 or higher, the last two dims being the
  // matrix). q @ k^T and att @ v of every (b, h) at once (cublasGemmStridedBatchedEx on the GPU).
  virtual void gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                            const Tensor& c, float alpha = 1.0f, float beta = 0.0f) = 0;
  // Head layout copies (no rounding; src and dst share one dtype):
  // heads_from_rows: dst[b, h, t, d] := src[b*T + t, column + h*hs + d], src [B*T, W] with
  // column + H*hs <= W, dst [B, H, T, hs] (q, k, v out of c_attn's [B*T, 3C]: column 0, C, 2C).
  virtual void heads_from_rows(const Tensor& src, int64_t column, const Tensor& dst) = 0;
  // heads_to_rows: dst[b*T + t, column + h*hs + d] := src[b, h, t, d]; other columns untouched
  // (the inverse: att @ v back to [B*T, C], and dq, dk, dv into dqkv).
  virtual void heads_to_rows(const Tensor& src, const Tensor& dst, int64_t column) = 0;
  // Causal softmax over the last dim of scores [N, T, T] (any float dtype): for row i,
  // s_j = float(scores[n, i, j]) * scale, rounded to scores' dtype first when round_scaled
  // (autocast's lowp `att * (1/sqrt(hs))` before the fp32 softmax), columns j > i masked;
  // probs[n, i, j] := round_probs(exp(s_j - max) / sum) for j <= i and 0 for j > i. probs is f32
  // or scores' dtype (or scores itself: in place); max and sum in float32, summed from 0 in
  // ascending j (the GPU's differs from the CPU's only by its expf).
  virtual void causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                                      const Tensor& probs) = 0;
  // Its backward: g_j = float(probs_j) * (float(dprobs_j) - sum_k float(dprobs_k) *
  // float(probs_k)) (sum in float, ascending k, over k <= i), rounded to dscores' dtype first
  // when round_scaled (the backward of autocast's cast to fp32); dscores[n, i, j] :=
  // round(g_j * scale) for j <= i and 0 for j > i. dscores may alias neither input.
  virtual void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                       bool round_scaled, const Tensor& dscores) = 0;

  // Rotary position embedding in Hugging Face's rotate-half layout (apply_rotary_pos_emb) over
  // x [N, T, hs] (hs even, h = hs / 2; the head layout heads_from_rows gives), position p = pos0
  // + t for row t, with the tables cos, sin f32 [P, h] (P >= pos0 + T; nn/rope.h builds them:
  // HF's cat(freqs, freqs) stores each column twice, these once):
  //   y[d]     := round_y(x[d] * cos[p, d] + (-x[d + h]) * sin[p, d])       d < h
  //   y[d + h] := round_y(x[d + h] * cos[p, d] + x[d] * sin[p, d])
  // two float products, then their sum (no fused multiply-add). x and y any float dtypes; y may
  // be x itself (each pair is read before it is written).
  virtual void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                            int64_t pos0) = 0;
  // Its gradient, the inverse rotation: with a := round_in(dy[d] * cos), b := round_in(dy[d + h]
  // * sin), c := round_in(dy[d + h] * cos), e := round_in(dy[d] * sin),
  //   dx[d] := round_dx(a + b),   dx[d + h] := round_dx(c + (-e))
  // where round_in rounds to `input_dtype`, the forward input's dtype (autograd casts each
  // product's gradient to it before adding the two branches: nothing for f32). dx may be dy.
  virtual void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin,
                             const Tensor& dx, int64_t pos0, DType input_dtype) = 0;

  // Causal multi-head self-attention y = softmax(masked(q k^T * scale)) v of every (b, h) at
  // once, with autocast's roundings (docs/reference.md, "Precision": attention): q, y are
  // [N, T, hs] (N = B*H, the layout heads_from_rows gives), one dtype. k and v are [N / G, T, hs]:
  // grouped-query attention with G query heads per key/value head (G = 1: multi-head), query
  // head n reading key/value head n / G; in the [B, H, T, hs] layout with Hkv = H / G kv heads,
  // kv head j of a sequence serves its query heads j G .. j G + G - 1 (HF's repeat_kv), and K and
  // V are never copied per query head. The default implementation is the materialised
  // composition the GPT ran before the fused kernels, op for op and bit for bit, on the views of
  // q, y as [N / G, G T, hs] (a kv head's G query heads are consecutive):
  //   scores := gemm_batched(q, k^T) (q's dtype); probs := causal_softmax_forward(scores,
  //   scale, round_scaled = true) in f32; att := cast(probs) to q's dtype (att is probs itself
  //   for f32); y := gemm_batched(att, v);
  // keeping probs (and att) in `saved` (T x T per query head). A backend may instead fuse it (the
  // CUDA backend for f16/bf16 and hs <= 64: no T x T in memory, kernels/transformer_attention.cu);
  // its sizes say which, and its rounding differences are bounded in the CUDA table test. Dropout
  // on the attention weights is not part of this op (the GPT composes the ops itself then).
  virtual AttentionSizes attention_workspace(int64_t batch_heads, int64_t time, int64_t head_size,
                                             DType dtype) const;
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                                 const Tensor& y, const AttentionBuffers& buffers);
  // The gradients of the same call (q, k, v, y and `saved` as the forward left them, dy of y's
  // shape): dq, dk, dv := round(the input gradients), written, not accumulated; dk and dv (k's
  // shape) sum over their G query heads in one fixed order (the heads in order, each head's
  // rows in order, as one product over G T rows). Default, on the same grouped views:
  //   datt := gemm_batched(dy, v^T); dv := gemm_batched(att^T, dy); dscores :=
  //   causal_softmax_backward(probs, datt, scale, round_scaled = true); dq := gemm_batched(
  //   dscores, k); dk := gemm_batched(dscores^T, q).
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& y, const Tensor& dy, float scale, const Tensor& dq,
                                  const Tensor& dk, const Tensor& dv,
                                  const AttentionBuffers& buffers);

  // ---- conv: convolution ops (docs/reference.md, "Precision": conv, pooling, batch_norm) ----
  // Images are [N, C, H, W] row-major. A convolution is per image an im2col packing of the
  // input and one matrix product with the weight viewed as [O, C*kh*kw] (this backend's gemm:
  // lowp operands, fp32 accumulation, one rounding), so both backends share its structure; the
  // primitives below are what each backend implements, the three conv2d_* ops are written once
  // on top of them (compose.cpp).
  //
  // col[(c*kh + i)*kw + j, oh*OW + ow] := x[c, oh*sh - ph + i, ow*sw - pw + j] (0 outside): x is
  // one image [C, H, W], col [C*kh*kw, OH*OW] of x's dtype (a copy: no rounding).
  virtual void im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
                      const Conv2dGeometry& g) = 0;
  // The adjoint: x[c, h, w] := round_x(sum of the col entries im2col would read from (c, h, w)),
  // summed in float32 in the order (i, j) = (0, 0), (0, 1), ...; col f32 [C*kh*kw, OH*OW].
  virtual void col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                      const Conv2dGeometry& g) = 0;
  // y[n, c, p] := b[c] converted to y's dtype (b [C] of any float dtype, y [N, C, ...]).
  virtual void broadcast_channels(const Tensor& b, const Tensor& y) = 0;
  // out[c] := round_out(sum over n, then p, of x[n, c, p]) in float32, x [N, C, ...], out [C].
  virtual void channel_sum(const Tensor& x, const Tensor& out) = 0;

  // y := conv2d(x, w) + b: x [N, C, H, W], w [O, C, kh, kw], b [O] or undefined, y [N, O, OH,
  // OW], all float (autocast: lowp x, w, b, y). col: x's dtype, >= C*kh*kw*OH*OW elements.
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                      const Conv2dGeometry& g, const Tensor& col);
  // dx := round_dx(the input gradient of conv2d for dy): per image dcol = w^T dy in float32,
  // then col2im. dcol: f32, >= C*kh*kw*OH*OW elements.
  void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                             const Conv2dGeometry& g, const Tensor& dcol);
  // dw := round_dw(sum over images of dy[n] col(x[n])^T), accumulated in float32 in acc (f32,
  // >= O*C*kh*kw elements) and rounded once; db (when defined) := channel_sum(dy). Both are
  // written, not accumulated (the caller adds them to the f32 gradients, as autograd adds a
  // fresh .grad). col: x's dtype, as for forward.
  void conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                              const Conv2dGeometry& g, const Tensor& col, const Tensor& acc);

  // Max pooling: y[n, c, oh, ow] := the maximum of its window (padding never wins), indices
  // (i32, y's shape) := h * W + w of the FIRST maximum in row-major window order (PyTorch's
  // tie rule); a NaN is the maximum (it propagates, as in PyTorch). y has x's dtype (exact).
  virtual void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                                  const Pool2dGeometry& g) = 0;
  // dx := round_dx(sum of dy over the windows whose maximum each input was), float32 sums in
  // output order.
  virtual void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                   const Pool2dGeometry& g) = 0;
  // Average pooling: y := round_y(window sum / window count) (fixed windows: kh*kw, padding
  // included; adaptive: the window's own size), sums in float32 in row-major window order.
  virtual void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) = 0;
  // dx := round_dx(sum over the windows containing each input of dy / count), in output order.
  virtual void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dGeometry& g) = 0;

  // BatchNorm2d over x [N, C, ...] (any float dtype; autocast leaves it in its input's dtype)
  // with f32 gamma, beta [C]. training: per channel the batch mean and the biased variance of
  // the centred values (two passes, float32: each image's plane summed in order, then the
  // planes), save_mean := mean, save_invstd := 1 / sqrt(var + eps); running_mean := (1 - m) *
  // running_mean + m * mean and running_var := (1 - m) * running_var + m * var * M / (M - 1)
  // (the unbiased variance, M = N * H * W; training needs M >= 2, as PyTorch's "Expected more
  // than 1 value per channel"); num_batches_tracked (i32, one element, may be
  // undefined) += 1. eval: the running statistics normalise and nothing is updated
  // (save_mean/save_invstd are still written from them). y := round_y((x - mean) * invstd *
  // gamma + beta), computed in float32.
  virtual void batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& y, const Tensor& save_mean,
                                  const Tensor& save_invstd, const Tensor& running_mean,
                                  const Tensor& running_var, const Tensor& num_batches_tracked,
                                  const BatchNormParams& params) = 0;
  // The training-mode gradients (the batch statistics depend on x): with xhat = (x - mean) *
  // invstd and M = N * H * W, dx := round_dx(gamma * invstd * (dy - mean(dy) - xhat *
  // mean(dy * xhat))); dgamma += sum dy * xhat and dbeta += sum dy (f32 [C], added to the
  // existing gradients; either may be undefined, as may dx).
  virtual void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                   const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                                   const Tensor& dgamma, const Tensor& dbeta) = 0;

  // ---- optim: optimizers ----
  // One fused optimizer update (see OptimizerStepArgs); when found_inf is given and non-zero,
  // nothing is written (params, state buffers, step and lowp copy stay bitwise unchanged).
  // Arguments are checked by check_optimizer_step (checks/optim.cpp), the same on every backend.
  virtual void optimizer_step(const OptimizerStepArgs& args) = 0;

  // ---- numerics: gradient numerics (docs/reference.md; math/numerics_math.h) ----
  // dst := round_dst(src) for f32 src and f16/bf16 dst of equal numel (the same bits a direct
  // lowp output of the op that wrote src would have: one rounding of the same float), and in
  // the same pass counters accumulate this rounding's classification: an i32 tensor of
  // numerics::kWords words (numerics::kWidth little-endian int64s; a row of a larger counters
  // tensor) whose values, underflow, subnormal and nonfinite counts and histogram bins are
  // added to and whose max_bits is raised to the largest finite |src| bits. Integer sums and
  // an integer max: the result does not depend on thread order. No host sync on the GPU.
  virtual void round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) = 0;
  // grad_amax: dst := round_dst(src) as round_counted (the same bits), and in the same pass
  // amax, an f32 tensor of numerics::kAmaxWords values, is raised to [the largest finite |src|,
  // 1 if any src is inf or NaN] (math/numerics_math.h). A max of non-negative floats: the
  // result does not depend on thread order. No host sync on the GPU. The every-step op: the
  // layers' roundings of a training step in fp16/bf16 all go through it (nn/numerics.h).
  virtual void round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax) = 0;
  // grad_amax taken in a product: c := round_c(op(a) op(b)) (gemm with alpha 1, beta 0; c f16
  // or bf16), and amax raised as round_amax raises it from that product written in f32 (the
  // same floats: one rounding per output). scratch: f32 of at least c's numel, sharing no memory
  // with the others. Default: gemm into scratch, then round_amax. The CPU takes the max in its
  // packed kernels' epilogue instead (scratch unused): no f32 product written and read again.
  virtual void gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const Tensor& c, const Tensor& amax, const Tensor& scratch);
  // gemm_round_amax's contract for gemm_batched (alpha 1, beta 0). Default: gemm_batched into
  // scratch, then round_amax; the CPU's packed kernels take the max in their epilogue.
  virtual void gemm_batched_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                       const Tensor& c, const Tensor& amax, const Tensor& scratch);
  // grad_amax taken in an activation's backward: dx (f16 or bf16) := activation_backward's dx,
  // and amax raised as round_amax raises it from that dx written in f32. scratch as above.
  // Default: activation_backward into scratch, then round_amax; the CPU runs the two over
  // L1-sized chunks of each thread's share (the f32 values never reach memory).
  virtual void activation_backward_amax(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                        const Tensor& dy, const Tensor& dx, const Tensor& amax,
                                        const Tensor& scratch);
  // grad_amax taken in causal_softmax_backward with round_scaled (dscores f16 or bf16): both
  // roundings' floats raise amax, g before it is rounded and round(g) * scale before it is.
  // scale: f32[1] holding the scale. Default: causal_softmax_backward with scale 1 and no
  // rounding into scratch (g: g * 1 is g), round_amax into dscores, mul_scalar_tensor by scale
  // into scratch, round_amax into dscores; the CPU takes both in the op's one pass.
  virtual void causal_softmax_backward_amax(const Tensor& probs, const Tensor& dprobs,
                                            const Tensor& scale, const Tensor& dscores,
                                            const Tensor& amax, const Tensor& scratch);
};

// One call site's attention buffers, zero-filled, of the sizes b.attention_workspace gives (a
// size of 0 leaves its buffer undefined): for callers that run one attention at a time (tests,
// benchmarks; the GPT shares the scratch between its layers instead).
AttentionBuffers make_attention_buffers(Backend& b, int64_t batch_heads, int64_t time,
                                        int64_t head_size, DType dtype);

// The CPU backend. threads <= 0 means OPENBLAS_NUM_THREADS when set to a positive count (how a
// sweep shares the cores among its jobs), else one per core.
// Under an address-space limit (ulimit -v / -d) it first checks that the limit holds what its
// threads map (check_cpu_backend_room) and takes OpenBLAS's buffers at once, since OpenBLAS
// retries a buffer it cannot map forever.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

// Throws what make_cpu_backend(threads) would when the process's address-space limit cannot
// hold its threads: Error{config} "host memory: the CPU backend's N thread(s) reserve ... of
// address space (OpenBLAS's 128 MiB buffer for each ...)", starting nothing (`ampctl validate`).
void check_cpu_backend_room(int threads = 0);

// The kernels OpenBLAS chose when it was loaded (its own dispatch, from the CPU or
// OPENBLAS_CORETYPE; AMPCTL_CPU_ISA does not reach it), e.g. "Haswell".
std::string cpu_blas_kernels();

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
