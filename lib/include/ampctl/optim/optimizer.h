// Optimizer: what GradScaler drives. Parameters, gradients and optimizer state live in flat
// buffers (one pass per update); a param group is a contiguous range of that buffer with its
// own hyperparameters, as in torch.optim.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"

namespace ampctl::optim {

struct ParamGroup {
  Tensor params;       // f32 flat view, updated in place
  Tensor grads;        // f32 flat view with params' numel
  Tensor lowp_params;  // optional f16/bf16 copy written by the update (undefined: none)
  double lr = 1e-3;    // a Python float, as torch.optim's group['lr']
  // SGD's momentum or Adam's beta1 for this group, when a scheduler sets it each step (OneCycleLR
  // with cycle_momentum writes group['momentum'] or group['betas'][0]); unset: the optimizer's
  // option. A host value passed with the update, like lr: changing it needs no device sync.
  std::optional<double> momentum = std::nullopt;
  // f32 with params' numel, or undefined: where 0 the update takes no weight decay
  // (optimizer.decay_on: matrices; OptimizerStepArgs::decay_mask).
  Tensor decay_mask = Tensor{};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  Backend& backend() const { return *m_backend; }
  std::vector<ParamGroup>& param_groups() { return m_groups; }
  const std::vector<ParamGroup>& param_groups() const { return m_groups; }
  // Every non-empty group's gradient tensor: what GradScaler unscales and checks. Built once,
  // so reading it in a step allocates nothing.
  const std::vector<Tensor>& grads() const { return m_grads; }

  // A plain step with the gradients as they are.
  virtual void step() = 0;

  // True when step_amp exists: the optimizer reads found_inf and inv_scale on the device, skips
  // by itself when found_inf != 0 and multiplies the gradients by inv_scale as it reads them,
  // so GradScaler needs neither a host read nor a separate unscale pass.
  virtual bool supports_amp_scaling() const { return false; }
  virtual void step_amp(const Tensor& found_inf, const Tensor& inv_scale);

  // Hyperparameters and counters as JSON scalars (reads the device: not for inside a step).
  virtual nlohmann::json state_dict() const = 0;
  // Restores what state_dict() wrote; throws Error{input} naming a missing or mistyped key.
  virtual void load_state_dict(const nlohmann::json& state) = 0;
  // The optimizer's state buffers by name (momentum, moments, step counters), for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const = 0;

 protected:
  Optimizer(Backend& backend, std::vector<ParamGroup> groups);

  // The "param_groups" array of a state_dict: each group's lr and its step counter (i32[1] per
  // group in `steps`), read from the device.
  nlohmann::json groups_state(const std::vector<Tensor>& steps) const;
  // Checks that `state` is an object of this `type` with one {lr, step} entry per group, then
  // restores them (lr into the groups, step into `steps`). Throws Error{input} and changes
  // nothing when anything is missing or mistyped.
  void load_groups_state(const nlohmann::json& state, const std::string& type,
                         const std::vector<Tensor>& steps);

 private:
  Backend* m_backend;
  std::vector<ParamGroup> m_groups;
  std::vector<Tensor> m_grads;
};

}  // namespace ampctl::optim
