#include "ampctl/nn/layers.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {

Activation::Activation(ActivationKind kind, int64_t features) : m_kind(kind), m_features(features) {
  if (m_features < 1) {
    throw Error{ErrorKind::invalid_argument,
                "activation: features must be >= 1, got " + std::to_string(m_features)};
  }
}

std::string Activation::describe() const {
  switch (m_kind) {
    case ActivationKind::relu:
      return "ReLU()";
    case ActivationKind::gelu:
      return "GELU(approximate='none')";
    case ActivationKind::tanh:
      return "Tanh()";
    case ActivationKind::gelu_tanh:
      return "GELU(approximate='tanh')";
  }
  return "Activation()";
}

void Activation::setup(Backend& backend, const FlatLayout&, const ParamArenas& arenas,
                       int64_t max_batch, DType act, bool input_grad) {
  m_backend = &backend;
  m_y = RowViews(backend.zeros({max_batch, m_features}, act));
  if (input_grad) m_dx = RowViews(backend.zeros({max_batch, m_features}, act));
  m_numerics = act != DType::f32 && input_grad ? arenas.numerics : nullptr;
  if (m_numerics) {
    m_dx_f32 = RowViews(m_numerics->workspace({max_batch, m_features}));
    m_site = m_numerics->add_site();
  }
}

const Tensor& Activation::forward(const Tensor& x, int64_t batch, bool) {
  // Not in place: relu and tanh differentiate through the output, gelu through the input, and
  // both stay available for backward.
  const Tensor& y = m_y.rows(batch);
  m_backend->activation_forward(m_kind, x, y);
  m_x = x;
  return y;
}

const Tensor& Activation::backward(const Tensor& dy, int64_t batch) {
  if (!m_dx.defined()) {
    throw Error{ErrorKind::state, "activation backward: set up without an input gradient"};
  }
  const Tensor& dx = m_dx.rows(batch);
  if (m_numerics && m_numerics->active()) {  // through the hook (nn/numerics.h)
    m_numerics->activation_backward_site(m_kind, m_x, m_y.rows(batch), dy, m_dx_f32.rows(batch), dx,
                                         m_site);
    return dx;
  }
  m_backend->activation_backward(m_kind, m_x, m_y.rows(batch), dy, dx);
  return dx;
}

}  // namespace ampctl::nn
