#include "ampctl/optim/sgd.h"

#include <cmath>
#include <sstream>

namespace ampctl::optim {
namespace {

std::string fmt(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

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
    m_momentum.push_back(options.momentum != 0.0f ? backend.zeros(g.params.shape(), DType::f32)
                                                  : Tensor{});
    m_steps.push_back(backend.zeros({1}, DType::i32));
  }
}

void Sgd::run(const Tensor& found_inf, const Tensor& inv_scale) {
  auto& groups = param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    SgdStepArgs a;
    a.params = groups[i].params;
    a.grads = groups[i].grads;
    a.momentum_buf = m_momentum[i];
    a.step = m_steps[i];
    a.found_inf = found_inf;
    a.inv_scale = inv_scale;
    a.lowp_params = groups[i].lowp_params;
    a.hyper =
        optim::SgdHyper{static_cast<float>(groups[i].lr), m_options.momentum, m_options.dampening,
                        m_options.weight_decay,           m_options.nesterov, m_options.maximize};
    backend().sgd_step(a);
  }
}

void Sgd::step() {
  run(Tensor{}, Tensor{});
}

void Sgd::step_amp(const Tensor& found_inf, const Tensor& inv_scale) {
  run(found_inf, inv_scale);
}

nlohmann::json Sgd::state_dict() const {
  nlohmann::json groups = nlohmann::json::array();
  for (size_t i = 0; i < param_groups().size(); ++i) {
    groups.push_back(
        {{"lr", param_groups()[i].lr}, {"step", backend().read_scalar_i32(m_steps[i])}});
  }
  return {{"type", "sgd"},
          {"momentum", m_options.momentum},
          {"dampening", m_options.dampening},
          {"weight_decay", m_options.weight_decay},
          {"nesterov", m_options.nesterov},
          {"maximize", m_options.maximize},
          {"param_groups", groups}};
}

void Sgd::load_state_dict(const nlohmann::json& state) {
  if (!state.is_object() || state.value("type", std::string{}) != "sgd") {
    throw Error{ErrorKind::input, "optimizer state: expected an object with \"type\": \"sgd\""};
  }
  const nlohmann::json& groups =
      state.contains("param_groups") ? state.at("param_groups") : nlohmann::json();
  if (!groups.is_array() || groups.size() != param_groups().size()) {
    throw Error{ErrorKind::input, "optimizer state: 'param_groups' must be an array of " +
                                      std::to_string(param_groups().size()) + " groups"};
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const nlohmann::json& g = groups[i];
    if (!g.is_object() || !g.contains("lr") || !g.at("lr").is_number() || !g.contains("step") ||
        !g.at("step").is_number_integer() || g.at("step").get<int64_t>() < 0) {
      throw Error{ErrorKind::input, "optimizer state: param group " + std::to_string(i) +
                                        " needs a number 'lr' and an integer 'step' >= 0"};
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    param_groups()[i].lr = groups[i].at("lr").get<double>();
    backend().fill(m_steps[i], static_cast<double>(groups[i].at("step").get<int64_t>()));
  }
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
