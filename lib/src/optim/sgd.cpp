#include "ampctl/optim/sgd.h"

#include <cmath>

#include "ampctl/core/format.h"

namespace ampctl::optim {

Sgd::Sgd(Backend& backend, std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer(backend, std::move(groups)), m_options(options) {
  for (const ParamGroup& g : param_groups()) {
    if (!(g.lr >= 0.0f))
      throw Error{ErrorKind::invalid_argument,
                  "Invalid learning rate: " + fmt(static_cast<float>(g.lr))};
  }
  if (!(options.momentum >= 0.0f)) {
    throw Error{ErrorKind::invalid_argument, "Invalid momentum value: " + fmt(options.momentum)};
  }
  if (!(options.weight_decay >= 0.0f)) {
    throw Error{ErrorKind::invalid_argument,
                "Invalid weight_decay value: " + fmt(options.weight_decay)};
  }
  if (options.nesterov && (options.momentum <= 0.0f || options.dampening != 0.0f)) {
    throw Error{ErrorKind::invalid_argument,
                "Nesterov momentum requires a momentum and zero dampening"};
  }
  for (const ParamGroup& g : param_groups()) {
    // A group whose momentum a scheduler sets (g.momentum given) keeps a buffer even when the
    // option is 0, as PyTorch's SGD does once OneCycleLR has written group['momentum'].
    const bool momentum = options.momentum != 0.0f || g.momentum.has_value();
    m_momentum.push_back(momentum ? backend.zeros(g.params.shape(), DType::f32) : Tensor{});
    m_steps.push_back(backend.zeros({1}, DType::i32));
  }
}

void Sgd::run(const Tensor& found_inf, const Tensor& inv_scale) {
  auto& groups = param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    OptimizerStepArgs a;
    a.params = groups[i].params;
    a.grads = groups[i].grads;
    a.momentum_buf = m_momentum[i];
    a.step = m_steps[i];
    a.found_inf = found_inf;
    a.inv_scale = inv_scale;
    a.lowp_params = groups[i].lowp_params;
    a.decay_mask = groups[i].decay_mask;
    // A scheduler's per-step momentum (OneCycleLR's cycle_momentum) replaces the option, rounded
    // to float as PyTorch's buf.mul_(momentum) rounds its Python float.
    const float momentum =
        groups[i].momentum ? static_cast<float>(*groups[i].momentum) : m_options.momentum;
    a.hyper = SgdHyper{static_cast<float>(groups[i].lr), momentum,           m_options.dampening,
                       m_options.weight_decay,           m_options.nesterov, m_options.maximize};
    backend().optimizer_step(a);
  }
}

void Sgd::step() {
  run(Tensor{}, Tensor{});
}

void Sgd::step_amp(const Tensor& found_inf, const Tensor& inv_scale) {
  run(found_inf, inv_scale);
}

nlohmann::json Sgd::state_dict() const {
  const nlohmann::json groups = groups_state(m_steps);
  return {{"type", "sgd"},
          {"momentum", m_options.momentum},
          {"dampening", m_options.dampening},
          {"weight_decay", m_options.weight_decay},
          {"nesterov", m_options.nesterov},
          {"maximize", m_options.maximize},
          {"param_groups", groups}};
}

void Sgd::load_state_dict(const nlohmann::json& state) {
  load_groups_state(state, "sgd", m_steps);
}

std::vector<std::pair<std::string, Tensor>> Sgd::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < m_steps.size(); ++i) {
    const std::string prefix = "param_groups." + std::to_string(i) + ".";
    out.emplace_back(prefix + "step", m_steps[i]);
    if (m_momentum[i].defined()) out.emplace_back(prefix + "momentum_buffer", m_momentum[i]);
  }
  return out;
}

}  // namespace ampctl::optim
