#include "ampctl/nn/models/builtin.h"

#include "ampctl/nn/models/cnn.h"
#include "ampctl/nn/models/gpt.h"
#include "ampctl/nn/models/mlp.h"

namespace ampctl::nn {

void register_builtin_models() {
  register_mlp();
  register_gpt();
  register_cnn();
}

}  // namespace ampctl::nn
