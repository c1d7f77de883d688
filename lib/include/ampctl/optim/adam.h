// Adam and AdamW with torch.optim's hyperparameters, defaults and formula (math/adam_math.h),
// as one fused update per param group over the flat buffers; supports the fused amp path (reads
// found_inf and inv_scale on the device and skips by itself), like PyTorch's fused=True Adam.
#pragma once

#include "ampctl/math/adam_math.h"
#include "ampctl/optim/optimizer.h"

namespace ampctl::optim {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // AdamW's default is 1e-2 in PyTorch; the caller decides
  bool decoupled = false;     // true: AdamW
  bool maximize = false;
};

class Adam final : public Optimizer {
 public:
  // Validates as PyTorch does (its messages); throws Error{invalid_argument}.
  Adam(Backend& backend, std::vector<ParamGroup> groups, AdamOptions options = {});

  void step() override;
  bool supports_amp_scaling() const override { return true; }
  void step_amp(const Tensor& found_inf, const Tensor& inv_scale) override;

  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;

  const AdamOptions& options() const { return m_options; }

 private:
  void run(const Tensor& found_inf, const Tensor& inv_scale);

  AdamOptions m_options;
  std::vector<Tensor> m_exp_avg, m_exp_avg_sq, m_steps;  // per group
};

}  // namespace ampctl::optim
