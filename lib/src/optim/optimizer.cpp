#include "ampctl/optim/optimizer.h"

namespace ampctl::optim {

Optimizer::Optimizer(Backend& backend, std::vector<ParamGroup> groups)
    : m_backend(&backend), m_groups(std::move(groups)) {
  for (size_t i = 0; i < m_groups.size(); ++i) {
    const ParamGroup& g = m_groups[i];
    const std::string where = "param group " + std::to_string(i);
    if (!g.params.defined() || !g.grads.defined()) {
      throw Error{ErrorKind::invalid_argument, where + ": params and grads must be given"};
    }
    g.params.check_dtype(DType::f32);
    if (g.grads.numel() != g.params.numel()) {
      throw Error{ErrorKind::invalid_argument, where + ": grads " + g.grads.describe() +
                                                   " do not match params " + g.params.describe()};
    }
    if (g.lowp_params.defined() && g.lowp_params.numel() != g.params.numel()) {
      throw Error{ErrorKind::invalid_argument, where + ": lowp_params " + g.lowp_params.describe() +
                                                   " do not match params " + g.params.describe()};
    }
    if (g.grads.numel() > 0) m_grads.push_back(g.grads);
  }
}

nlohmann::json Optimizer::groups_state(const std::vector<Tensor>& steps) const {
  nlohmann::json groups = nlohmann::json::array();
  for (size_t i = 0; i < m_groups.size(); ++i) {
    groups.push_back({{"lr", m_groups[i].lr}, {"step", m_backend->read_scalar_i32(steps[i])}});
  }
  return groups;
}

void Optimizer::load_groups_state(const nlohmann::json& state, const std::string& type,
                                  const std::vector<Tensor>& steps) {
  if (!state.is_object() || !state.contains("type") || !state.at("type").is_string() ||
      state.at("type").get<std::string>() != type) {
    throw Error{ErrorKind::input,
                "optimizer state: expected an object with \"type\": \"" + type + "\""};
  }
  const nlohmann::json& groups =
      state.contains("param_groups") ? state.at("param_groups") : nlohmann::json();
  if (!groups.is_array() || groups.size() != m_groups.size()) {
    throw Error{ErrorKind::input, "optimizer state: 'param_groups' must be an array of " +
                                      std::to_string(m_groups.size()) + " groups"};
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const nlohmann::json& g = groups[i];
    if (!g.is_object() || !g.contains("lr") || !g.at("lr").is_number() || !g.contains("step") ||
        !g.at("step").is_number_integer() || g.at("step").get<int64_t>() < 0 ||
        g.at("step").get<int64_t>() > 2147483647) {
      throw Error{ErrorKind::input, "optimizer state: param group " + std::to_string(i) +
                                        " needs a number 'lr' and an integer 'step' >= 0"};
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    m_groups[i].lr = groups[i].at("lr").get<double>();
    m_backend->fill(steps[i], static_cast<double>(groups[i].at("step").get<int64_t>()));
  }
}

void Optimizer::step_amp(const Tensor&, const Tensor&) {
  throw Error{ErrorKind::state,
              "this optimizer has no fused amp step (supports_amp_scaling is false)"};
}

}  // namespace ampctl::optim
