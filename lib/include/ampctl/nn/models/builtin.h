// The models that come with ampctl. register_builtin_models() adds each one's builder to the
// model registry (nn/model.h); the registry calls it once, before its first lookup. A new model
// type adds its register_* call here, next to its own files under nn/models/.
#pragma once

namespace ampctl::nn {

void register_builtin_models();

}  // namespace ampctl::nn
