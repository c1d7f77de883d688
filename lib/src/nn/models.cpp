#include "ampctl/nn/models.h"

namespace ampctl::nn {

std::unique_ptr<Model> build_model(Backend& backend, const ModelOptions& options) {
  return with_model_class(options.type, [&]<class M>() -> std::unique_ptr<Model> {
    return std::make_unique<M>(backend, options);
  });
}

ModelMemory estimate_model_memory(const ModelOptions& options, const Backend* backend) {
  return with_model_class(options.type, [&]<class M>() { return M::estimate(options, backend); });
}

}  // namespace ampctl::nn
