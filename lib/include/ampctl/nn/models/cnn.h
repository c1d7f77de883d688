// Cnn: a convolutional network for images (model.type: cnn; docs/reference.md, "The CNN").
//
// Architecture, as two nn.Sequential modules `features` and `classifier`. For each conv block
// [c, k] of options.conv:
//   features:   Conv2d(in, c, k, padding=k // 2, bias=not batch_norm) -> [BatchNorm2d(c) if
//               batch_norm] -> activation -> [MaxPool2d(pool) if pool > 1]
// then
//   classifier: Flatten -> for each hidden width h: Linear(in, h) -> activation ->
//               [Dropout(p) if dropout > 0] -> Linear(last, classes)
// Parameter and buffer names are those of that PyTorch module ("features.0.weight",
// "features.1.running_mean", "classifier.1.weight", ...), so an export loads into it with
// load_state_dict (docs/reference.md gives the PyTorch definition).
//
// Its batch: f32 images [>= batch, C, H, W] (or the same rows flat, [>= batch, C*H*W]);
// targets i32 labels [>= batch] (cross_entropy) or f32 [>= batch, out_features] (mse).
//
// Precision: conv_layers.h and layers.h for each layer; the f32 batch is rounded to lowp once
// before the first conv, the loss runs in fp32 on the lowp logits, as for the MLP.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/nn/conv_layers.h"
#include "ampctl/nn/model.h"

namespace ampctl::nn {

// The options of the CNN (model.type: cnn).
struct CnnOptions {
  std::vector<std::array<int64_t, 2>> conv;  // [channels, kernel] per conv block, each >= 1
  int64_t pool = 2;                          // MaxPool2d(pool) after each block; 1 = none
  bool batch_norm = false;
  std::vector<int64_t> hidden;  // the head's hidden widths
  ActivationKind activation = ActivationKind::relu;
  double dropout = 0.0;  // in [0, 1), in the head
  // The input image [channels, height, width] (from the data source); in_features is their
  // product.
  int64_t channels = 0, height = 0, width = 0;
};

class Cnn : public Model {
 public:
  // Builds, initialises (Conv2d and Linear: PyTorch's default init from Philox with
  // options.seed; BatchNorm2d: ones, zeros and its buffers 0 / 1 / 0) and allocates everything
  // for batches of up to max_batch images. Throws Error{config} naming the model key for an
  // architecture that does not fit the image (a pool that shrinks it to nothing).
  Cnn(Backend& backend, const ModelOptions& options);
  // Its memory estimate (nn/memory_estimate.h) from the options alone, nothing allocated; `backend`
  // is the run's (its attention_workspace), or null for Backend's defaults.
  static ModelMemory estimate(const ModelOptions& options, const Backend* backend);

  std::string summary() const override;
  std::vector<std::pair<std::string, Tensor>> state_buffers() const override;

  const Tensor& forward(const Tensor& input, int64_t batch, bool training) override;
  void loss(const Tensor& targets, int64_t batch, const Tensor& loss_out, const Tensor& correct_out,
            const Tensor& grad_scale) override;
  void backward(int64_t batch) override;
  // Every backward rounding (conv dW, db and dx, BatchNorm's and the pooling's dx, the
  // classifier's layers, dlogits) goes through numerics() (nn/numerics.h).
  bool roundings_instrumented() const override { return true; }

  // {"seed": s, "dropout_offset": n}, as the MLP's.
  nlohmann::json rng_state() const override;
  void set_rng_state(const nlohmann::json& state) override;
  uint64_t rng_position() const override { return m_rng.calls; }
  void rewind_rng(uint64_t position) override { m_rng.calls = position; }

 private:
  std::string m_precision;
  ImageShape m_image;
  DropoutRng m_rng;
  std::unique_ptr<Sequential> m_features, m_classifier;
  Loss m_loss;
  RowViews m_input;  // the batch in the compute dtype, [max_batch, C, H, W]
  LeadingRows m_x_rows;
  const Tensor* m_logits = nullptr;
  int64_t m_forward_batch = 0;
  bool m_seeded = false;
};

}  // namespace ampctl::nn
