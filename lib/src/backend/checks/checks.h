// The argument checks of every Backend op, written once and called by both implementations
// (the CPU backend and the CUDA backend), so that both refuse the same calls with the same words.
// One source file per op family of backend.h: memory.cpp, gemm.cpp, amp.cpp, nn.cpp,
// transformer.cpp, conv.cpp, optim.cpp, numerics.cpp; the primitives they share in common.cpp.
//
// Each check takes the backend's device and depends on nothing above core/ and math/: every tensor
// given must be defined (unless the op's contract lets it be undefined) and live on that device;
// shapes and dtypes are the contract of backend.h; an output shares no byte with an input unless
// the contract allows it. Each throws Error{invalid_argument} naming the op and the operand,
// before the op writes anything. What only one side can or must check stays there, said so: the
// values inside tensors (token ids, labels, pooling indices, segment starts), which the CPU reads
// and the GPU cannot without a host sync, and a library's own limits (cuBLAS's int dimensions).
// Internal to lib/src/backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "ampctl/backend/backend.h"

namespace ampctl {

// ---- primitives (common.cpp) ----
namespace checks {
// Error{invalid_argument} "<op>: <what>".
[[noreturn]] void fail(const char* op, const std::string& what);
// t is defined and on `device` (any CPU tensor is on the CPU backend's device).
void on(const Tensor& t, const Device& device, const char* op, const char* name);
// t is f32, f16 or bf16.
void floating(const Tensor& t, const char* op, const char* name);
// t is on `device` and f32, f16 or bf16.
void float_on(const Tensor& t, const Device& device, const char* op, const char* name);
// t has this dtype.
void dtype(const Tensor& t, DType dtype, const char* op, const char* name);
// t has this rank.
void rank(const Tensor& t, size_t rank, const char* op, const char* name);
// t is a matrix (rank 2).
void matrix(const Tensor& t, const char* op, const char* name);
// t has exactly this shape (an initializer list: the check itself does not allocate).
void shape(const Tensor& t, std::initializer_list<int64_t> shape, const char* op, const char* name);
// a and b have the same element count.
void same_numel(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                const char* op);
// t has ref's shape.
void same_shape(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                const char* ref_name);
// t is on `device` and a one-element tensor of this dtype.
void scalar(const Tensor& t, DType dtype, const Device& device, const char* op, const char* name);
// Whether the storage of a and b shares any byte.
bool overlaps(const Tensor& a, const Tensor& b);
// out shares no byte with in.
void disjoint(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
              const char* in_name);
}  // namespace checks

// ---- memory (memory.cpp) ----
void check_upload(const Tensor& dst, size_t bytes, const Device& device);
void check_download(const Tensor& src, const Device& device);
void check_copy(const Tensor& dst, const Tensor& src, const Device& device);
// i32: value must be an int32 value.
void check_fill(const Tensor& dst, double value, const Device& device);
void check_cast(const Tensor& src, const Tensor& dst, const Device& device);
void check_mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out,
                             const Device& device);
void check_add(const Tensor& dst, const Tensor& src, const Device& device);
// Returns the row width W. The indices' values are the implementations' (the GPU clamps them).
int64_t check_gather_rows(const Tensor& src, const Tensor& index, int64_t offset, const Tensor& dst,
                          const Device& device);

// ---- gemm (gemm.cpp) ----
struct GemmDims {
  int64_t m, n, k;
};
GemmDims check_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    const Device& device);

// ---- amp (amp.cpp) ----
void check_global_norm(std::span<const Tensor> tensors, const Tensor& out, const Device& device);
// non_finite_check_and_unscale_: the tensors (float, on `device`), found_inf and inv_scale, and
// the attribution's tensors (both or neither, i32 [S] with S >= 1, the element count within
// i32). Returns the tensors' total element count. The starts' values (0 first, strictly
// increasing) are the CPU's to check; the GPU trusts them (reading them would be a sync).
size_t check_non_finite_check_and_unscale(std::span<const Tensor> tensors, const Tensor& found_inf,
                                          const Tensor& inv_scale, const Tensor& segment_starts,
                                          const Tensor& segment_found, const Device& device);
// non_finite_check_unscale_norm_: the same, and norm f32[1].
size_t check_non_finite_check_unscale_norm(std::span<const Tensor> tensors, const Tensor& found_inf,
                                           const Tensor& inv_scale, const Tensor& norm,
                                           const Tensor& segment_starts,
                                           const Tensor& segment_found, const Device& device);
void check_inv_scale(const Tensor& scale, const Tensor& inv, const Device& device);
void check_update_scale(const Tensor& scale, const Tensor& growth_tracker,
                        const Tensor& hysteresis_tracker, const Tensor& trackers,
                        const Tensor& found_inf, const Device& device);
// update_scale_auto_: scale and found_inf f32[1], growth_tracker i32[1], trackers
// i32[amp::kTrackerCount], amax f32[numerics::kAmaxWords], history f32[params.amax_history];
// params.policy automatic, amax_history >= 1, margin >= 0, max_finite > 0.
void check_update_scale_auto(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& trackers, const Tensor& found_inf, const Tensor& amax,
                             const Tensor& history, const amp::ScaleUpdateParams& params,
                             const Device& device);

// ---- nn (nn.cpp) ----
struct LinearDims {
  int64_t rows, in, out;  // R, I, O
};
LinearDims check_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                const Device& device);
void check_sum_rows(const Tensor& x, const Tensor& out, const Device& device);
void check_activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                              const Device& device);
void check_activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                               const Tensor& dy, const Tensor& dx, const Device& device);
// dropout_forward (in x, out y) and dropout_backward (in dy, out dx); op names which.
void check_dropout(const Tensor& in, const Tensor& out, float p, const char* op,
                   const Device& device);
void check_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                                 const Tensor& correct, const Tensor& dlogits,
                                 const Tensor& grad_scale, const Device& device);
void check_mse(const Tensor& pred, const Tensor& target, const Tensor& loss, const Tensor& dpred,
               const Tensor& grad_scale, const Device& device);
// Each returns {R, C}.
std::array<int64_t, 2> check_layer_norm_forward(const Tensor& x, const Tensor& gamma,
                                                const Tensor& beta, const Tensor& y,
                                                const Tensor& mean, const Tensor& rstd,
                                                const Device& device);
std::array<int64_t, 2> check_layer_norm_backward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Tensor& dy, const Tensor& dx,
                                                 const Tensor& dgamma, const Tensor& dbeta,
                                                 const Device& device);
// residual_layer_norm_forward and layer_norm_backward_accumulate (the contracts in backend.h:
// shapes, dtypes, which outputs may alias what). Each returns {R, C}.
std::array<int64_t, 2> check_residual_layer_norm(const Tensor& x, const Tensor& r,
                                                 const Tensor& sum, const Tensor& gamma,
                                                 const Tensor& beta, const Tensor& y,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Device& device);
std::array<int64_t, 2> check_layer_norm_backward_accumulate(
    const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
    const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& scratch,
    const Device& device);
void check_clip_coef(const Tensor& norm, const Tensor& coef, const Device& device);
// The Llama / Qwen block's ops (backend.h, "RMSNorm and SwiGLU"): RMSNorm returns {R, C},
// SwiGLU {R, I}.
std::array<int64_t, 2> check_rms_norm_forward(const Tensor& x, const Tensor& weight,
                                              const Tensor& y, const Tensor& rstd,
                                              const Device& device);
std::array<int64_t, 2> check_residual_rms_norm(const Tensor& x, const Tensor& r, const Tensor& sum,
                                               const Tensor& weight, const Tensor& y,
                                               const Tensor& rstd, const Device& device);
std::array<int64_t, 2> check_rms_norm_backward(const Tensor& x, const Tensor& weight,
                                               const Tensor& rstd, const Tensor& dy,
                                               const Tensor& dx, const Tensor& dweight,
                                               bool accumulate, const Tensor& dy_weight,
                                               const Device& device);
std::array<int64_t, 2> check_swiglu_forward(const Tensor& gate_up, const Tensor& y,
                                            const Device& device);
std::array<int64_t, 2> check_swiglu_backward(const Tensor& gate_up, const Tensor& dy,
                                             const Tensor& dgate_up, const Tensor& dy_up,
                                             const Device& device);
void check_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                               const Tensor& y, const Device& device);
void check_linear_gelu_backward(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                const Tensor& dpre, const Tensor& scratch, const Device& device);

// ---- transformer (transformer.cpp) ----
// Token ids are the implementations' to check (the GPU cannot without a sync).
struct EmbeddingDims {
  int64_t batch, time, vocab, channels;  // B, T, V (0 when dwte is undefined), C
};
EmbeddingDims check_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                      const Tensor& out, const Device& device);
EmbeddingDims check_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                       const Tensor& dwpe, const Device& device);
struct GemmBatchedDims {
  int64_t batch, m, n, k;
};
GemmBatchedDims check_gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                   const Tensor& c, const Device& device);
struct HeadsDims {
  int64_t batch, heads, time, head_size, width;  // B, H, T, hs, W (the rows' width)
};
// rows [B*T, W], heads [B, H, T, hs], one dtype, column + H*hs <= W; op names the caller.
HeadsDims check_heads(const Tensor& rows, int64_t column, const Tensor& heads, const char* op,
                      const Device& device);
struct SoftmaxDims {
  int64_t count, time;  // N, T
};
SoftmaxDims check_causal_softmax_forward(const Tensor& scores, const Tensor& probs,
                                         const Device& device);
SoftmaxDims check_causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                          const Tensor& dscores, const Device& device);
struct AttentionDims {
  int64_t count, time, head_size;  // N = B*H (query heads), T, hs
  int64_t group;                   // G query heads per key/value head (N / G kv heads)
};
// attention_*: q (and y, dy, dq when given) [N, T, hs], k, v (and dk, dv) [N / G, T, hs] for a G
// dividing N, of one float dtype on `device`; outputs disjoint from the inputs and from each
// other; every buffer at least `sizes` (f32 / q's dtype). op names the caller.
// rope_forward (x in, y out) and rope_backward (dy in, dx out): [N, T, hs] float tensors of one
// shape with hs even, cos and sin f32 [P, hs / 2] with P >= pos0 + T, pos0 >= 0; out may be in
// itself, else disjoint from it; neither overlaps the tables. op names the caller. Returns
// {N, T, hs}.
std::array<int64_t, 3> check_rope(const Tensor& in, const Tensor& cos, const Tensor& sin,
                                  const Tensor& out, int64_t pos0, const char* op,
                                  const Device& device);
AttentionDims check_attention(std::initializer_list<const Tensor*> inputs,
                              std::initializer_list<const Tensor*> outputs,
                              const AttentionBuffers& buffers, const AttentionSizes& sizes,
                              const char* op, const Device& device);

// ---- conv (conv.cpp) ----
// The pooling indices' values are the CPU's to check (max_pool2d_backward).
void check_im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
                  const Conv2dGeometry& g, const Device& device);
void check_col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                  const Conv2dGeometry& g, const Device& device);
void check_broadcast_channels(const Tensor& b, const Tensor& y, const Device& device);
void check_channel_sum(const Tensor& x, const Tensor& out, const Device& device);
void check_max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                              const Pool2dGeometry& g, const Device& device);
void check_max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                               const Pool2dGeometry& g, const Device& device);
// avg_pool2d_forward (x into y) and avg_pool2d_backward (dy into dx: x is dx, y is dy).
void check_avg_pool2d(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, const char* op,
                      const Device& device);
// Each returns C.
int64_t check_batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& y, const Tensor& save_mean,
                                 const Tensor& save_invstd, const Tensor& running_mean,
                                 const Tensor& running_var, const Tensor& num_batches_tracked,
                                 const BatchNormParams& params, const Device& device);
int64_t check_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                  const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dgamma, const Tensor& dbeta, const Device& device);
// The conv2d compositions (compose.cpp): their operands and workspaces.
struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t k() const { return c * kh * kw; }
  int64_t p() const { return oh * ow; }
};
ConvDims check_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                              const Conv2dGeometry& g, const Tensor& col);
ConvDims check_conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                     const Conv2dGeometry& g, const Tensor& dcol);
ConvDims check_conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                      const Tensor& db, const Conv2dGeometry& g, const Tensor& col,
                                      const Tensor& acc);

// ---- optim (optim.cpp) ----
// Every tensor given lives on `device`; params and grads are f32 of one numel; step is i32[1];
// the kind's state buffers are f32 of params' numel (SGD's only when momentum != 0) and the other
// kinds' are undefined; found_inf and inv_scale, when given, are f32[1]; lowp_params, when given,
// is f32, f16 or bf16 of params' numel; decay_mask, when given, f32 of params' numel.
void check_optimizer_step(const OptimizerStepArgs& args, const Device& device);

// ---- numerics (numerics.cpp) ----
// round_counted: every tensor on `device`, src f32, dst f16 or bf16 of src's numel, counters i32
// of numerics::kWords words with 8-byte aligned data.
void check_round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters,
                         const Device& device);
// round_amax: src and dst as above, amax f32 of numerics::kAmaxWords values.
void check_round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax,
                      const Device& device);
// The ops with the amax taken in them (gemm_round_amax, gemm_batched_round_amax,
// activation_backward_amax): the plain op's checks, then its output f16 or bf16, amax as above,
// scratch f32 of at least the output's numel on `device`, sharing no memory with any operand.
GemmDims check_gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const Tensor& c, const Tensor& amax, const Tensor& scratch,
                               const Device& device);
GemmBatchedDims check_gemm_batched_round_amax(const Tensor& a, bool trans_a, const Tensor& b,
                                              bool trans_b, const Tensor& c, const Tensor& amax,
                                              const Tensor& scratch, const Device& device);
void check_activation_backward_amax(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                    const Tensor& dy, const Tensor& dx, const Tensor& amax,
                                    const Tensor& scratch, const Device& device);
// And scale f32[1] on `device`.
SoftmaxDims check_causal_softmax_backward_amax(const Tensor& probs, const Tensor& dprobs,
                                               const Tensor& scale, const Tensor& dscores,
                                               const Tensor& amax, const Tensor& scratch,
                                               const Device& device);

}  // namespace ampctl
