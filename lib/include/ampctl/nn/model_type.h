// The closed list of model types (model.type): one value and one YAML name each. Plain data with
// no other include, so the config reads the names from here (scripts/dev/check_deps.py,
// SHARED_HEADERS) instead of spelling them again. nn/models.h builds each type by one switch.
#pragma once

#include <utility>

namespace ampctl::nn {

enum class ModelType { mlp, gpt, cnn };

// The YAML name of each type (model.type's values, Model::type(), the checkpoint's config).
inline constexpr std::pair<ModelType, const char*> kModelTypeNames[] = {
    {ModelType::mlp, "mlp"}, {ModelType::gpt, "gpt"}, {ModelType::cnn, "cnn"}};

// Its name ("?" for a value outside the list).
constexpr const char* model_type_name(ModelType type) {
  for (const auto& [t, name] : kModelTypeNames) {
    if (t == type) return name;
  }
  return "?";
}

}  // namespace ampctl::nn
