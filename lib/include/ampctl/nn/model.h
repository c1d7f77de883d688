// Model: the MLP of a run (config::ModelConfig) with its flat parameter arenas, its activation
// buffers and its loss, sized once for a maximum batch so that forward, loss and backward
// allocate nothing (DESIGN: no allocation inside the step).
//
// Architecture, as nn.Sequential stored under `layers`: for each hidden width h,
//   Linear(in, h) -> [LayerNorm(h) if layer_norm] -> activation -> [Dropout(p) if dropout > 0]
// and then Linear(last, out). Parameter names are PyTorch's state_dict keys ("layers.0.weight",
// "layers.1.bias", ...), so a checkpoint's tensors load into the equivalent torch module.
//
// Memory: params (f32 masters), grads (f32) and, for fp16/bf16, lowp (the weight copy the
// matrix products read) share one FlatLayout; the optimizer updates params and rewrites lowp in
// one fused pass, so lowp only needs an explicit sync_lowp() after the masters change outside
// the optimizer (construction does it; a checkpoint load must call it).
//
// Precision (SPEC section 5): see layers.h for each layer. The f32 input batch is rounded to
// lowp before the first Linear; the logits are lowp; the loss runs in fp32 on them and seeds
// the backward pass with d(loss)/d(logits) * grad_scale rounded to lowp. fp32: no casts.
//
// One training iteration: forward(x, B, true); loss(targets, B, loss, correct, scale);
// backward(B). Gradients accumulate across such iterations until zero_grad() (gradient
// accumulation over micro-batches).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/nn/layers.h"
#include "ampctl/nn/loss.h"
#include "ampctl/optim/optimizer.h"

namespace ampctl::nn {

// The activation dtype of a precision: f16, bf16 or f32.
DType compute_dtype(config::Precision precision);
ActivationKind activation_kind(config::Activation activation);

// The MLP of `config` as an nn.Sequential would hold it (see above). dropout_rng is shared by
// its Dropout modules and must outlive them. Throws Error{invalid_argument} for a width < 1 or
// a dropout outside [0, 1).
std::unique_ptr<Sequential> make_mlp(const config::ModelConfig& config, int64_t in_features,
                                     int64_t out_features, DropoutRng* dropout_rng);

class Model {
 public:
  // Builds, initialises (Linear: PyTorch's default init from Philox with `seed`; LayerNorm:
  // ones and zeros) and allocates everything for batches of up to max_batch rows. Throws
  // Error{invalid_argument} for sizes < 1 or an invalid model configuration.
  Model(Backend& backend, const config::ModelConfig& config, config::Precision precision,
        config::LossType loss, int64_t in_features, int64_t out_features, int64_t max_batch,
        uint64_t seed);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  Backend& backend() const { return *m_backend; }
  config::Precision precision() const { return m_precision; }
  DType compute_dtype() const { return m_act; }
  config::LossType loss_type() const { return m_loss.type(); }
  int64_t in_features() const { return m_in; }
  int64_t out_features() const { return m_out; }
  int64_t max_batch() const { return m_max_batch; }

  // ---- parameters ----
  const FlatLayout& layout() const { return m_layout; }
  const Tensor& params() const { return m_arenas.params; }     // f32 [layout.total()]
  const Tensor& grads() const { return m_arenas.grads; }       // f32 [layout.total()]
  const Tensor& lowp_params() const { return m_arenas.lowp; }  // f16/bf16, undefined in fp32
  // One group over the whole arena (params, grads, lowp) with learning rate lr.
  std::vector<optim::ParamGroup> param_groups(float lr) const;
  // name -> f32 view of the master (on the backend's device), in layout order: what a
  // checkpoint saves and loads (call sync_lowp() after loading).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Parameters in the model (the arena's alignment padding is not counted).
  int64_t num_params() const;
  // One line per layer: its name, PyTorch repr, parameter shapes and count; then the total.
  std::string summary() const;

  // lowp := params rounded to the lowp dtype (no-op in fp32).
  void sync_lowp();
  // grads := 0.
  void zero_grad();

  // ---- the step ----
  // x: f32 [>= batch, in_features] on the backend (its first `batch` rows are used),
  // 1 <= batch <= max_batch. training: dropout draws a mask (and advances the RNG); eval:
  // dropout is the identity. Returns the logits [batch, out_features] in the compute dtype,
  // valid until the next forward.
  const Tensor& forward(const Tensor& x, int64_t batch, bool training);
  // The loss of the last forward (same batch) against targets (i32 [>= batch] labels for
  // cross_entropy, f32 [>= batch, out_features] for mse): loss_out f32[1] := mean loss;
  // correct_out i32[1] := rows whose argmax is the label (cross_entropy only; may be
  // undefined); grad_scale f32[1]: seeds backward with dloss * grad_scale (undefined: no
  // backward possible).
  void loss(const Tensor& targets, int64_t batch, const Tensor& loss_out, const Tensor& correct_out,
            const Tensor& grad_scale);
  // Backpropagates the seeded loss of the last forward (same batch) and ADDS the parameter
  // gradients into grads(). Throws Error{state} without a seeded loss since the last forward.
  void backward(int64_t batch);

  // ---- RNG (checkpoints) ----
  uint64_t seed() const { return m_rng.seed; }
  uint64_t dropout_calls() const { return m_rng.calls; }
  // {"seed": s, "dropout_offset": n}: n training-mode dropout applications so far.
  nlohmann::json rng_state() const;
  // Restores what rng_state() wrote; throws Error{input} naming a missing or mistyped key.
  void set_rng_state(const nlohmann::json& state);

 private:
  Backend* m_backend;
  config::Precision m_precision;
  DType m_act;
  int64_t m_in, m_out, m_max_batch;
  DropoutRng m_rng;
  std::unique_ptr<Sequential> m_layers;
  Loss m_loss;
  FlatLayout m_layout;
  ParamArenas m_arenas;
  RowViews m_input;  // the batch in the compute dtype
  LeadingRows m_x_rows;
  const Tensor* m_logits = nullptr;
  int64_t m_forward_batch = 0;  // 0: no forward since construction
  bool m_seeded = false;        // loss() wrote dlogits for the last forward
};

}  // namespace ampctl::nn
