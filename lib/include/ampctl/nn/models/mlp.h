// Mlp: the multilayer perceptron (model.type: mlp), the first model.
//
// Architecture, as nn.Sequential stored under `layers`: for each hidden width h,
//   Linear(in, h) -> [LayerNorm(h) if layer_norm] -> activation -> [Dropout(p) if dropout > 0]
// and then Linear(last, out). Parameter names are PyTorch's state_dict keys ("layers.0.weight",
// "layers.1.bias", ...), so a checkpoint's tensors load into the equivalent torch module.
//
// Its batch: input f32 [>= batch, in_features], or any [..., in_features] whose leading
// dimensions fold into >= batch rows; targets as Model::loss says.
//
// Precision (docs/reference.md, precision policy): see layers.h for each layer. The f32 input
// batch is rounded to lowp before the first Linear; the logits are lowp; the loss runs in fp32
// on them and seeds the backward pass with d(loss)/d(logits) * grad_scale rounded to lowp.
// fp32: no casts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/nn/model.h"

namespace ampctl::nn {

// The options of the MLP (model.type: mlp).
struct MlpOptions {
  std::vector<int64_t> hidden;  // the hidden widths, each >= 1
  ActivationKind activation = ActivationKind::relu;
  double dropout = 0.0;  // in [0, 1)
  bool layer_norm = false;
};

// The MLP of `options` as an nn.Sequential would hold it (see above). dropout_rng is shared by
// its Dropout modules and must outlive them. Throws Error{invalid_argument} for a width < 1 or
// a dropout outside [0, 1).
std::unique_ptr<Sequential> make_mlp(const MlpOptions& options, int64_t in_features,
                                     int64_t out_features, DropoutRng* dropout_rng);

class Mlp : public Model {
 public:
  // Builds, initialises (Linear: PyTorch's default init from Philox with options.seed;
  // LayerNorm: ones and zeros) and allocates everything for batches of up to max_batch rows.
  // Throws Error{invalid_argument} for sizes < 1 or an invalid architecture.
  Mlp(Backend& backend, const ModelOptions& options);
  // Its memory estimate (nn/memory_estimate.h) from the options alone, nothing allocated; `backend`
  // is the run's (its attention_workspace), or null for Backend's defaults.
  static ModelMemory estimate(const ModelOptions& options, const Backend* backend);

  // Linear, LayerNorm, activations, dropout and the loss all round through the hook.
  bool roundings_instrumented() const override { return true; }
  std::string summary() const override;

  const Tensor& forward(const Tensor& input, int64_t batch, bool training) override;
  void loss(const Tensor& targets, int64_t batch, const Tensor& loss_out, const Tensor& correct_out,
            const Tensor& grad_scale) override;
  void backward(int64_t batch) override;

  // {"seed": s, "dropout_offset": n}: n training-mode dropout applications so far.
  nlohmann::json rng_state() const override;
  void set_rng_state(const nlohmann::json& state) override;
  uint64_t rng_position() const override { return m_rng.calls; }
  void rewind_rng(uint64_t position) override { m_rng.calls = position; }
  uint64_t seed() const { return m_rng.seed; }
  uint64_t dropout_calls() const { return m_rng.calls; }

 private:
  std::string m_precision;
  DropoutRng m_rng;
  std::unique_ptr<Sequential> m_layers;
  Loss m_loss;
  RowViews m_input;  // the batch in the compute dtype
  LeadingRows m_x_rows;
  const Tensor* m_logits = nullptr;
  int64_t m_forward_batch = 0;  // 0: no forward since construction
  bool m_seeded = false;        // loss() wrote dlogits for the last forward
};

}  // namespace ampctl::nn
