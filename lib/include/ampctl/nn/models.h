// The models that come with ampctl, as a closed list: ModelOptions (the part every model reads,
// and each type's own options from its header in nn/models/), and the one switch over
// ModelType (with_model_class) that build_model and estimate_model_memory go through. Adding a
// model: docs/design.md, "A model".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/nn/model.h"
#include "ampctl/nn/model_type.h"
#include "ampctl/nn/models/cnn.h"
#include "ampctl/nn/models/gpt.h"
#include "ampctl/nn/models/mlp.h"

namespace ampctl::nn {

struct ModelOptions {
  ModelType type = ModelType::mlp;
  DType compute = DType::f32;      // the activation dtype: f16 / bf16 under autocast, or f32
  std::string precision = "fp32";  // its name, for summary()
  LossKind loss = LossKind::cross_entropy;
  int64_t in_features = 0;   // the input width of a row
  int64_t out_features = 0;  // classes, or the regression target width
  int64_t max_batch = 0;     // rows of the largest batch
  uint64_t seed = 0;         // initialisation and dropout
  bool numerics = false;     // gradient numerics hook (nn/numerics.h; fp16/bf16 only)
  // Each type's own options: only the member of options.type is read.
  MlpOptions mlp;
  GptOptions gpt;
  CnnOptions cnn;
};

// The one switch over the model types: f.template operator()<the type's class>(). Throws
// Error{invalid_argument} for a value outside ModelType.
template <class F>
decltype(auto) with_model_class(ModelType type, F&& f) {
  switch (type) {
    case ModelType::mlp:
      return f.template operator()<Mlp>();
    case ModelType::gpt:
      return f.template operator()<Gpt>();
    case ModelType::cnn:
      return f.template operator()<Cnn>();
  }
  throw Error{ErrorKind::invalid_argument,
              "model: unknown model type " + std::to_string(static_cast<int>(type))};
}

// Builds options.type. Throws Error{invalid_argument} for a value outside ModelType, and
// whatever the model's constructor throws.
std::unique_ptr<Model> build_model(Backend& backend, const ModelOptions& options);
// The memory estimate of options.type (nn/memory_estimate.h), read by train/memory_plan.h before
// anything is allocated; `backend` is the run's (its attention_workspace), or null for
// Backend's defaults. The same error for a value outside ModelType.
ModelMemory estimate_model_memory(const ModelOptions& options, const Backend* backend = nullptr);

}  // namespace ampctl::nn
