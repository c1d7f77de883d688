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

void Optimizer::step_amp(const Tensor&, const Tensor&) {
  throw Error{ErrorKind::state,
              "this optimizer has no fused amp step (supports_amp_scaling is false)"};
}

}  // namespace ampctl::optim
