// Gpt: the GPT-2 language model (model.type: gpt) in nanoGPT's model.py layout and names, with
// GPT-2's and llm.c's tanh GELU (nanoGPT now uses the exact erf one).
//
// Architecture (C = n_embd, H = n_head, hs = C / H, V = the vocabulary, L = n_layer):
//   x = drop(wte[idx] + wpe[pos])                                        f32 residual stream
//   L blocks:  x = x + resid_drop(c_proj(attn_drop(causal_softmax(q k^T / sqrt(hs))) v))
//                  with q, k, v = split(c_attn(ln_1(x)))
//              x = x + drop(mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x)))))
//   logits = lm_head(ln_f(x)), lm_head.weight = transformer.wte.weight when tie_embeddings.
// `bias` switches the biases of every Linear and LayerNorm (the LM head never has one).
//
// Parameter names are nanoGPT's state_dict keys, in its order: transformer.wte.weight,
// transformer.wpe.weight, transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj}.{weight, bias}, transformer.ln_f.{weight, bias}, and lm_head.weight only when the
// head is untied. A tied head is one tensor in the layout (the checkpoint holds it once, as
// transformer.wte.weight); its gradient is the sum of the embedding's and the head's.
//
// Initialisation (GPT-2 / nanoGPT's _init_weights): Linear and Embedding weights N(0, 0.02),
// every `c_proj.weight` N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weight 1 and bias 0. Each
// tensor draws from its own Philox stream init_stream(entry) of the run's seed; element j is
// Box-Muller on draws 2j and 2j + 1, in double, rounded once to float (gpt_normal below).
//
// Its batch: input i32 [>= B', T'] token ids (the first B' rows are used), 1 <= B' <= max_batch,
// 1 <= T' <= block_size (read from the input's shape: sampling runs shorter contexts); forward
// returns logits [B' * T', V] in the compute dtype, row b * T' + t. loss takes i32
// [>= B' * T'] next-token targets and averages the cross-entropy over the B' * T' rows; with a
// grad_scale it writes the logits' gradient over the logits (in place, as llm.c), so the tensor
// forward returned holds dlogits from then on (read the logits before loss(), as sampling and
// evaluation do).
// Everything is allocated at construction for max_batch x block_size; forward, loss and
// backward allocate nothing.
//
// Precision: autocast's op-by-op rule, docs/reference.md "Precision" (the GPT table), in short:
// embeddings, the residual stream, LayerNorm statistics, softmax and the loss in fp32; matrix
// products in the compute dtype with fp32 accumulation; GELU and dropout in their input's dtype;
// x + branch in fp32 (type promotion), the branch's gradient rounded to the compute dtype.
//
// Dropout: each training-mode application (embedding, then per block attention weights,
// attention residual, MLP residual) takes the next dropout_stream of the model's counter, so
// rng_position / rewind_rng / rng_state make a resumed run draw the same masks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/nn/model.h"

namespace ampctl::nn {

// The options of the GPT (model.type: gpt). The vocabulary size is ModelOptions::out_features
// (= in_features); max_batch counts sequences of up to block_size.
struct GptOptions {
  int64_t n_layer = 0;
  int64_t n_head = 0;  // divides n_embd
  int64_t n_embd = 0;
  int64_t block_size = 0;      // the longest sequence (positions of wpe)
  double dropout = 0.0;        // in [0, 1): embeddings, attention weights, both residual branches
  bool bias = true;            // Linear and LayerNorm biases
  bool tie_embeddings = true;  // lm_head reads transformer.wte.weight
};

// The standard normal of draw pair j of a Philox stream: Box-Muller's cosine branch in double,
// z = sqrt(-2 ln(1 - u1)) cos(2 pi u2), u1 and u2 the 24-bit uniforms of draws 2j and 2j + 1
// (1 - u1 is in (0, 1], so the log is finite; |z| < 5.8).
double gpt_normal(uint64_t seed, uint64_t stream, uint64_t j);

class Gpt : public Model {
 public:
  // Builds, initialises and allocates for max_batch sequences of block_size. Throws
  // Error{invalid_argument} for sizes < 1, n_head not dividing n_embd, a dropout outside
  // [0, 1) or a loss other than cross_entropy.
  Gpt(Backend& backend, const ModelOptions& options);
  // Its memory estimate (nn/memory_estimate.h) from the options alone, nothing allocated; `backend`
  // is the run's (its attention_workspace), or null for Backend's defaults.
  static ModelMemory estimate(const ModelOptions& options, const Backend* backend);

  // The bytes of the activation and workspace buffers the constructor allocated beside the
  // parameter arenas (the loss writes dlogits over the logits and allocates none): what the
  // memory estimate (Gpt::estimate) counts as a GPT's activations, on
  // this backend.
  uint64_t buffer_bytes() const { return m_buffer_bytes; }
  std::string summary() const override;
  const GptOptions& options() const { return m_opt; }

  const Tensor& forward(const Tensor& input, int64_t batch, bool training) override;
  void loss(const Tensor& targets, int64_t batch, const Tensor& loss_out, const Tensor& correct_out,
            const Tensor& grad_scale) override;
  void backward(int64_t batch) override;
  // Every rounding of the backward goes through numerics() (nn/numerics.h) unless the backend
  // fuses an op whose intermediate roundings cannot be taken apart bit for bit: the Linear +
  // GELU backward (Backend::linear_gelu_fused) or the attention (attention_workspace not the
  // default's), as the CUDA backend does in fp16/bf16. Then the GPT says it is not instrumented.
  bool roundings_instrumented() const override { return m_countable; }

  // {"seed": s, "dropout_offset": n}, as the MLP's.
  nlohmann::json rng_state() const override;
  void set_rng_state(const nlohmann::json& state) override;
  uint64_t rng_position() const override { return m_rng.calls; }
  void rewind_rng(uint64_t position) override { m_rng.calls = position; }

 private:
  // A Linear's parameters (bias undefined when the model has none) and the lowp workspaces its
  // backward rounds the weight and bias gradients in (shared by every Linear of that shape).
  struct Proj {
    size_t w_entry = 0, b_entry = 0;
    bool has_bias = false;
    ParamSlot w, b;
  };
  struct Norm {
    size_t w_entry = 0, b_entry = 0;
    bool has_bias = false;
    ParamSlot w, b;
  };
  struct Layer {
    Norm ln_1, ln_2;
    Proj c_attn, attn_proj, c_fc, mlp_proj;
    // Saved for backward, each [max rows] flat: the block's input (f32), ln_1's output and
    // statistics, q/k/v by head, the softmax output (f32) and what att @ v reads, the heads'
    // output as rows, the stream after attention (f32), ln_2's, c_fc's and GELU's outputs.
    // Without dropout the attention is one op pair (Backend::attention_forward/backward):
    // probs and att stay undefined, y_heads keeps att @ v by head and attn_saved what the
    // backend keeps from forward to backward (T x T per head when composed, a row statistic
    // when fused).
    Tensor x_in, ln1, mean1, rstd1, q, k, v, probs, att, yrows, x_mid, ln2, mean2, rstd2, fc, gelu;
    Tensor y_heads;
    AttentionBuffers attn_saved;                      // saved_f32 / saved_lowp only
    uint64_t s_attn = 0, s_resid1 = 0, s_resid2 = 0;  // dropout streams of the last forward
  };

  Proj declare_proj(const std::string& name, int64_t out, int64_t in, bool bias);
  Norm declare_norm(const std::string& name);
  void bind(Proj& p);
  void bind(Norm& n);
  void init_params(std::span<float> host, uint64_t seed) const;
  void allocate_buffers();
  // y := x W^T + b (linear_forward). Backward: the weight and bias gradients (rounded to lowp
  // first under autocast) added to the f32 gradients; dx := dy W when defined.
  void proj_forward(const Proj& p, const Tensor& x, const Tensor& y);
  // dx_site: where dx rounds on a counted step (unused when dx is undefined).
  void proj_backward(const Proj& p, const Tensor& dy, const Tensor& x, const Tensor& dx,
                     size_t dx_site = 0);
  void norm_forward(const Norm& n, const Tensor& x, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd);
  void norm_backward(const Norm& n, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dy, const Tensor& dx);
  // sum := x + r (the f32 residual add) and y := the norm of sum, one backend op
  // (residual_layer_norm_forward: fused on CUDA, bitwise the add then norm_forward).
  void residual_norm_forward(const Norm& n, const Tensor& x, const Tensor& r, const Tensor& sum,
                             const Tensor& y, const Tensor& mean, const Tensor& rstd);
  // dx += the norm's input gradient (layer_norm_backward_accumulate; m_t is the scratch of a
  // backend that composes it): bitwise norm_backward into m_t, then add_(dx, m_t).
  void norm_backward_add(const Norm& n, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, const Tensor& dx);
  // Dropout of the next stream when applied (training and p > 0): y := drop(x), else y := x
  // (a copy, or nothing when y is x).
  AttentionBuffers attention_buffers(const Layer& l) const;  // its saved ones + the scratch
  bool dropout_fwd(const Tensor& x, const Tensor& y, bool training, uint64_t& stream);

  // ---- gradient numerics (nn/numerics.h) ----
  // The rounding sites of one block's backward (activation gradients), in backward order.
  struct Sites {
    size_t cast2, drop2, d4a, d4b, fc_dx;                        // MLP branch
    size_t cast1, drop1, proj_dx, datt, dv, g, dscores, dq, dk;  // attention branch
    size_t attn_dx;                                              // c_attn's dx
  };
  void setup_numerics();
  // On a counted step: the f32 workspace viewed as `shape`, which an op writes instead of the
  // lowp tensor; settle()/settle_own() then round it into the lowp tensor (the same bits).
  Tensor f32_ws(const Shape& shape) const { return m_nws.view(0, shape); }
  Tensor f32_or(const Tensor& dst) const { return m_counted ? f32_ws(dst.shape()) : dst; }
  void settle(const Tensor& f32, const Tensor& dst, size_t site);
  void settle_own(const Tensor& f32, const Tensor& dst, size_t entry);
  // dst := op(a) op(b) rounded, through the hook when counted (GradNumerics::gemm / gemm_site:
  // fused with the amax where the backend can), else a plain gemm.
  void gemm_own(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dst,
                size_t entry);
  void gemm_site(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& dst,
                 size_t site);
  void attention_backward_counted(const Layer& l, const Sites& s, const Tensor& dyh,
                                  const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                  const Shape& att);

  std::string m_precision;
  GptOptions m_opt;
  int64_t m_head_size = 0;
  float m_scale = 0.0f;  // float(1 / sqrt(hs)), as PyTorch turns the Python scalar into opmath
  DropoutRng m_rng;
  Loss m_loss;

  size_t m_wte_entry = 0, m_wpe_entry = 0, m_head_entry = 0;
  ParamSlot m_wte, m_wpe, m_head;  // m_head is m_wte when tied
  std::vector<Layer> m_layers;
  Norm m_ln_f;

  // Shared buffers (flat, sized for max_batch * block_size rows).
  Tensor m_token_buf;  // i32 [rows]: the last forward's ids
  Tensor m_tokens;     // its [B', T'] view
  Tensor m_emb;        // f32 [rows, C]: wte + wpe before dropout
  Tensor m_lnf;        // act [rows, C]
  Tensor m_meanf, m_rstdf;
  Tensor m_logits_buf;   // act [rows, V]; loss() with a grad_scale writes dlogits over it
  Tensor m_logits;       // its view for the last forward
  Tensor m_branch;       // act [rows, C]: a branch's output before dropout
  Tensor m_branch_drop;  // act [rows, C]: after it
  Tensor m_yheads;       // act [B, H, T, hs]: att @ v
  // backward
  Tensor m_g, m_t;                 // f32 [rows, C]: the stream's gradient; a LayerNorm's dx
  Tensor m_dc, m_dc2;              // act [rows, C]
  Tensor m_d4a, m_d4b;             // act [rows, 4C]
  Tensor m_dqkv;                   // act [rows, 3C]
  Tensor m_dyh, m_dq, m_dk, m_dv;  // act [B, H, T, hs]
  Tensor m_datt, m_dscores;        // act [B, H, T, T]
  Tensor m_dprobs;                 // f32 [B, H, T, T] (dropout only)
  // The attention ops' scratch, shared by the layers (no dropout only; materialised: dropout).
  Tensor m_attn_scratch_f32, m_attn_scratch_lowp;
  bool m_attention_op = false;    // dropout == 0: attention by Backend::attention_forward/backward
  uint64_t m_buffer_bytes = 0;    // buffer_bytes()
  Tensor m_zero_c, m_dbeta_sink;  // f32 [C]: LayerNorm's absent bias and its unused gradient
  // lowp gradient workspaces by shape (undefined in fp32 for the weights)
  Tensor m_ws_attn, m_ws_proj, m_ws_fc, m_ws_mproj, m_ws_head;
  Tensor m_wsb_3c, m_wsb_c, m_wsb_4c;

  // Gradient numerics: the hook (null in fp32 or without numerics), one f32 workspace every
  // counted op writes in turn (the largest of its outputs), scale as an f32[1] device scalar for
  // the softmax backward's second rounding, the sites; m_countable: roundings_instrumented().
  GradNumerics* m_num = nullptr;
  Tensor m_nws, m_nscale;
  std::vector<Sites> m_sites;
  size_t m_head_dx_site = 0;
  bool m_countable = false;
  bool m_counted = false;  // this backward counts (numerics active and countable)

  uint64_t m_s_emb = 0;
  int64_t m_B = 0, m_T = 0;  // the last forward's sequences and positions (0: none)
  bool m_seeded = false;
  bool m_dropped = false;  // the last forward drew dropout masks (training and p > 0)
};

}  // namespace ampctl::nn
