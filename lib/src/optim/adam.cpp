#include "ampctl/optim/adam.h"

#include "ampctl/core/format.h"

namespace ampctl::optim {
namespace {

const char* type_name(const AdamOptions& o) {
  return o.decoupled ? "adamw" : "adam";
}

}  // namespace

Adam::Adam(Backend& backend, std::vector<ParamGroup> groups, AdamOptions options)
    : Optimizer(backend, std::move(groups)), m_options(options) {
  for (const ParamGroup& g : param_groups()) {
    if (!(g.lr >= 0.0f))
      throw Error{ErrorKind::invalid_argument, "Invalid learning rate: " + fmt(g.lr)};
  }
  if (!(options.eps >= 0.0)) {
    throw Error{ErrorKind::invalid_argument, "Invalid epsilon value: " + fmt(options.eps)};
  }
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0)) {
    throw Error{ErrorKind::invalid_argument,
                "Invalid beta parameter at index 0: " + fmt(options.beta1)};
  }
  if (!(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    throw Error{ErrorKind::invalid_argument,
                "Invalid beta parameter at index 1: " + fmt(options.beta2)};
  }
  if (!(options.weight_decay >= 0.0)) {
    throw Error{ErrorKind::invalid_argument,
                "Invalid weight_decay value: " + fmt(options.weight_decay)};
  }
  for (const ParamGroup& g : param_groups()) {
    m_exp_avg.push_back(backend.zeros(g.params.shape(), DType::f32));
    m_exp_avg_sq.push_back(backend.zeros(g.params.shape(), DType::f32));
    m_steps.push_back(backend.zeros({1}, DType::i32));
  }
}

void Adam::run(const Tensor& found_inf, const Tensor& inv_scale) {
  auto& groups = param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    OptimizerStepArgs a;
    a.params = groups[i].params;
    a.grads = groups[i].grads;
    a.exp_avg = m_exp_avg[i];
    a.exp_avg_sq = m_exp_avg_sq[i];
    a.step = m_steps[i];
    a.found_inf = found_inf;
    a.inv_scale = inv_scale;
    a.lowp_params = groups[i].lowp_params;
    a.decay_mask = groups[i].decay_mask;
    // A scheduler's per-step beta1 (OneCycleLR's cycle_momentum) replaces the option.
    const double beta1 = groups[i].momentum ? *groups[i].momentum : m_options.beta1;
    a.hyper = AdamHyper{groups[i].lr,           beta1,
                        m_options.beta2,        m_options.eps,
                        m_options.weight_decay, m_options.decoupled,
                        m_options.maximize};
    backend().optimizer_step(a);
  }
}

void Adam::step() {
  run(Tensor{}, Tensor{});
}

void Adam::step_amp(const Tensor& found_inf, const Tensor& inv_scale) {
  run(found_inf, inv_scale);
}

nlohmann::json Adam::state_dict() const {
  const nlohmann::json groups = groups_state(m_steps);
  return {{"type", type_name(m_options)},   {"betas", {m_options.beta1, m_options.beta2}},
          {"eps", m_options.eps},           {"weight_decay", m_options.weight_decay},
          {"maximize", m_options.maximize}, {"param_groups", groups}};
}

void Adam::load_state_dict(const nlohmann::json& state) {
  load_groups_state(state, type_name(m_options), m_steps);
}

std::vector<std::pair<std::string, Tensor>> Adam::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < m_steps.size(); ++i) {
    const std::string prefix = "param_groups." + std::to_string(i) + ".";
    out.emplace_back(prefix + "step", m_steps[i]);
    out.emplace_back(prefix + "exp_avg", m_exp_avg[i]);
    out.emplace_back(prefix + "exp_avg_sq", m_exp_avg_sq[i]);
  }
  return out;
}

}  // namespace ampctl::optim
