// Model: what the training loop knows of a network. A model is built from ModelOptions (the
// train layer converts the run config into them: train/build.h) by nn::build_model, whose one
// switch over its `type` (nn/models.h) calls the model's constructor, and it owns
//   * its parameters, in flat arenas (one FlatLayout: f32 masters, f32 gradients and, for
//     fp16/bf16, the lowp copy the matrix products read), named as PyTorch's state_dict keys so
//     checkpoints load into the equivalent torch module; the optimizer updates the arenas in one
//     fused pass (and rewrites lowp), so lowp needs sync_lowp() only after the masters change
//     outside the optimizer (a checkpoint load);
//   * its activation buffers and its loss, sized once for max_batch rows, so forward, loss and
//     backward allocate nothing (no allocation inside the step);
//   * its RNG state (what a checkpoint saves).
//
// What a batch is is agreed between the data source and the model, not assumed by the loop:
// forward takes the input tensor the data source makes for this model (f32 features
// [rows, in_features] for the MLP; image tensors or i32 token ids [batch, sequence] for other
// models) and loss takes the matching target. `batch` is always the number of rows (samples)
// of the leading dimension, at most max_batch.
//
// One training iteration: forward(x, B, true); loss(targets, B, loss, correct, scale);
// backward(B). Gradients accumulate across such iterations until zero_grad() (gradient
// accumulation over micro-batches).
//
// Adding a model type: a class deriving from Model with its options beside it in
// nn/models/<type>.h, and its value in the closed list (docs/design.md, "A model"). Nothing in
// the training loop changes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/nn/layers.h"
#include "ampctl/nn/loss.h"
#include "ampctl/nn/memory_estimate.h"
#include "ampctl/nn/model_type.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {

// What a model is built from (nn/models.h: the common part and each type's own options).
struct ModelOptions;

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Its model.type ("mlp").
  ModelType model_type() const { return m_type; }
  std::string type() const { return model_type_name(m_type); }
  // One line per layer: its name, PyTorch repr, parameter shapes and count; then the total.
  virtual std::string summary() const = 0;

  Backend& backend() const { return *m_backend; }
  DType compute_dtype() const { return m_act; }
  LossKind loss_kind() const { return m_loss_kind; }
  int64_t in_features() const { return m_in; }
  int64_t out_features() const { return m_out; }
  int64_t max_batch() const { return m_max_batch; }

  // ---- parameters, in the flat arenas ----
  const FlatLayout& layout() const { return m_layout; }
  const Tensor& params() const { return m_arenas.params; }     // f32 [layout.total()]
  const Tensor& grads() const { return m_arenas.grads; }       // f32 [layout.total()]
  const Tensor& lowp_params() const { return m_arenas.lowp; }  // f16/bf16, undefined in fp32
  // name -> f32 view of the master (on the backend's device), in layout order: what a
  // checkpoint saves and loads (call sync_lowp() after loading).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // name -> buffer (on the backend's device): tensors a checkpoint saves and an export writes
  // beside the parameters but the optimizer never sees (BatchNorm's running_mean, running_var,
  // num_batches_tracked), in the model's order. Empty for a model without buffers (the MLP), so
  // its checkpoints hold exactly state_tensors().
  virtual std::vector<std::pair<std::string, Tensor>> state_buffers() const { return {}; }
  // Parameters in the model (the arena's alignment padding is not counted).
  int64_t num_params() const;
  // lowp := params rounded to the lowp dtype (no-op in fp32).
  void sync_lowp();
  // grads := 0.
  void zero_grad();
  // The gradient-numerics hook: null unless ModelOptions::numerics in fp16/bf16.
  GradNumerics* numerics() const { return m_numerics.get(); }
  // Whether every rounding of this model's backward to the lowp dtype goes through numerics()
  // (nn/numerics.h), so that the numerics counts and grad_amax cover the whole backward. A model
  // that is not says so: the trainer then reports neither (no zeros).
  virtual bool roundings_instrumented() const { return false; }

  // ---- the step ----
  // input: what the data source makes for this model, with >= batch rows (the first `batch`
  // are used), 1 <= batch <= max_batch. training: dropout draws a mask (and advances the RNG);
  // eval: dropout is the identity. Returns the logits [batch, out_features] in the compute
  // dtype, valid until the next forward.
  virtual const Tensor& forward(const Tensor& input, int64_t batch, bool training) = 0;
  // The loss of the last forward (same batch) against targets (i32 [>= batch] labels for
  // cross_entropy, f32 [>= batch, out_features] for mse): loss_out f32[1] := mean loss;
  // correct_out i32[1] := rows whose argmax is the label (cross_entropy only; may be
  // undefined); grad_scale f32[1]: seeds backward with dloss * grad_scale (undefined: no
  // backward possible).
  virtual void loss(const Tensor& targets, int64_t batch, const Tensor& loss_out,
                    const Tensor& correct_out, const Tensor& grad_scale) = 0;
  // Backpropagates the seeded loss of the last forward (same batch) and ADDS the parameter
  // gradients into grads(). Throws Error{state} without a seeded loss since the last forward.
  virtual void backward(int64_t batch) = 0;

  // ---- RNG (checkpoints) ----
  virtual nlohmann::json rng_state() const = 0;
  // Restores what rng_state() wrote; throws Error{input} naming a missing or mistyped key.
  virtual void set_rng_state(const nlohmann::json& state) = 0;
  // How far the RNG has advanced, read at every step without allocating; rewind_rng puts it
  // back there: a stop between micro-batches returns the model to where the step started
  // (train/signals.h). A model that draws nothing keeps these defaults.
  virtual uint64_t rng_position() const { return 0; }
  virtual void rewind_rng(uint64_t /*position*/) {}

 protected:
  // Checks the sizes (Error{invalid_argument} for one < 1); `type` is the derived class's own.
  Model(Backend& backend, const ModelOptions& options, ModelType type);
  // After the parameters are declared in m_layout: allocates the arenas (zeros: the alignment
  // padding must read as zero), writes the initial values with `init` into a host copy of the
  // f32 arena and uploads it, so every backend starts from the same bits; then sync_lowp().
  void allocate_params(const std::function<void(std::span<float>)>& init);
  // The order of a step's calls: Error{state} (naming `who`, "model" or "gpt", and the batch's
  // `unit`, "rows" or "sequences") unless `batch` is the last forward's (forward_batch, 0 before
  // any), and for backward unless loss() seeded it since that forward.
  static void check_loss_batch(const char* who, const char* unit, int64_t batch,
                               int64_t forward_batch);
  static void check_backward_batch(const char* who, const char* unit, bool seeded, int64_t batch,
                                   int64_t forward_batch);

  Backend* m_backend;
  ModelType m_type;
  DType m_act;
  LossKind m_loss_kind;
  int64_t m_in, m_out, m_max_batch;
  FlatLayout m_layout;
  ParamArenas m_arenas;
  bool m_numerics_wanted = false;
  std::unique_ptr<GradNumerics> m_numerics;  // made by allocate_params; m_arenas.numerics
};

// rng_state() / set_rng_state() of a model whose only randomness is one DropoutRng (every
// built-in model): {"seed": S, "dropout_offset": N}. The reader throws Error{input} naming a
// missing or mistyped key.
nlohmann::json dropout_rng_state(const DropoutRng& rng);
DropoutRng dropout_rng_from_state(const nlohmann::json& state);

}  // namespace ampctl::nn
