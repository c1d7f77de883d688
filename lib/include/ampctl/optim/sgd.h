// SGD with torch.optim.SGD's hyperparameters, defaults and formula (math/sgd_math.h), as one
// fused update per param group over the flat buffers. It supports the fused amp path: the update
// reads found_inf and inv_scale on the device and skips by itself.
#pragma once

#include "ampctl/math/sgd_math.h"
#include "ampctl/optim/optimizer.h"

namespace ampctl::optim {

struct SgdOptions {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool maximize = false;
};

class Sgd final : public Optimizer {
 public:
  // Each group's lr is taken from the group, and its momentum too when the group has one (a
  // scheduler's, see ParamGroup); the other hyperparameters from `options`.
  // Validates as PyTorch does (messages included); throws Error{invalid_argument}.
  Sgd(Backend& backend, std::vector<ParamGroup> groups, SgdOptions options = {});

  void step() override;
  bool supports_amp_scaling() const override { return true; }
  void step_amp(const Tensor& found_inf, const Tensor& inv_scale) override;

  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;

  const SgdOptions& options() const { return m_options; }

 private:
  void run(const Tensor& found_inf, const Tensor& inv_scale);

  SgdOptions m_options;
  std::vector<Tensor> m_momentum;  // per group, f32 (undefined when it can never be used)
  std::vector<Tensor> m_steps;     // per group, i32[1]: unskipped steps
};

}  // namespace ampctl::optim
