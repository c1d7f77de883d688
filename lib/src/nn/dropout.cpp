#include <sstream>

#include "ampctl/nn/layers.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {

Dropout::Dropout(float p, int64_t features, DropoutRng* rng)
    : m_p(p), m_features(features), m_rng(rng) {
  if (!(p >= 0.0f && p < 1.0f)) {
    throw Error{ErrorKind::invalid_argument,
                "Dropout: p must be in [0, 1), got " + std::to_string(p)};
  }
  if (m_features < 1 || m_rng == nullptr) {
    throw Error{ErrorKind::invalid_argument, "Dropout: needs features >= 1 and an rng"};
  }
}

std::string Dropout::describe() const {
  std::ostringstream os;
  os << "Dropout(p=" << m_p << ", inplace=False)";
  return os.str();
}

void Dropout::setup(Backend& backend, const FlatLayout&, const ParamArenas& arenas,
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

const Tensor& Dropout::forward(const Tensor& x, int64_t batch, bool training) {
  m_applied = training && m_p > 0.0f;
  if (!m_applied) return x;  // eval: identity, nothing drawn, the RNG does not advance
  m_stream = dropout_stream(m_rng->calls++);
  const Tensor& y = m_y.rows(batch);
  m_backend->dropout_forward(x, y, m_p, m_rng->seed, m_stream);
  return y;
}

const Tensor& Dropout::backward(const Tensor& dy, int64_t batch) {
  if (!m_applied) return dy;
  if (!m_dx.defined()) {
    throw Error{ErrorKind::state, "Dropout backward: set up without an input gradient"};
  }
  const Tensor& dx = m_dx.rows(batch);
  if (m_numerics && m_numerics->active()) {  // a sampled step: f32, then a counted rounding
    const Tensor& dx_f32 = m_dx_f32.rows(batch);
    m_backend->dropout_backward(dy, dx_f32, m_p, m_rng->seed, m_stream);
    m_numerics->round_site(dx_f32, dx, m_site);
    return dx;
  }
  m_backend->dropout_backward(dy, dx, m_p, m_rng->seed, m_stream);
  return dx;
}

}  // namespace ampctl::nn
