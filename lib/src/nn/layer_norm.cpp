#include <algorithm>

#include "ampctl/nn/layers.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {

LayerNorm::LayerNorm(int64_t features) : m_features(features) {
  if (m_features < 1) {
    throw Error{ErrorKind::invalid_argument,
                "LayerNorm: features must be >= 1, got " + std::to_string(m_features)};
  }
}

std::string LayerNorm::describe() const {
  return "LayerNorm((" + std::to_string(m_features) + ",), eps=1e-05, elementwise_affine=True)";
}

void LayerNorm::declare(FlatLayout& layout, const std::string& prefix) {
  m_gamma_entry = declare_param(layout, prefix + ".weight", {m_features});
  m_beta_entry = declare_param(layout, prefix + ".bias", {m_features});
}

void LayerNorm::init(std::span<float> host, const FlatLayout& layout, uint64_t) const {
  const FlatLayout::Entry& g = layout.entries().at(m_gamma_entry);
  const FlatLayout::Entry& b = layout.entries().at(m_beta_entry);
  std::fill_n(host.begin() + static_cast<std::ptrdiff_t>(g.offset), g.numel, 1.0f);
  std::fill_n(host.begin() + static_cast<std::ptrdiff_t>(b.offset), b.numel, 0.0f);
}

void LayerNorm::setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
                      int64_t max_batch, DType act, bool input_grad) {
  m_backend = &backend;
  m_gamma = bind(layout, arenas, m_gamma_entry);
  m_beta = bind(layout, arenas, m_beta_entry);
  m_y = RowViews(backend.zeros({max_batch, m_features}, act));
  if (input_grad) m_dx = RowViews(backend.zeros({max_batch, m_features}, act));
  m_mean = RowViews(backend.zeros({max_batch}, DType::f32));
  m_rstd = RowViews(backend.zeros({max_batch}, DType::f32));
  m_numerics = act != DType::f32 ? arenas.numerics : nullptr;
  if (m_numerics && input_grad) {
    m_dx_f32 = RowViews(m_numerics->workspace({max_batch, m_features}));
    m_site = m_numerics->add_site();
  }
}

const Tensor& LayerNorm::forward(const Tensor& x, int64_t batch, bool) {
  // autocast's fp32 list: gamma and beta are the f32 masters, never the lowp copy.
  const Tensor& y = m_y.rows(batch);
  m_backend->layer_norm_forward(x, m_gamma.param, m_beta.param, y, m_mean.rows(batch),
                                m_rstd.rows(batch), kEps);
  m_x = x;
  return y;
}

const Tensor& LayerNorm::backward(const Tensor& dy, int64_t batch) {
  if (!m_dx.defined()) {
    throw Error{ErrorKind::state, "LayerNorm backward: set up without an input gradient"};
  }
  // dgamma and dbeta are f32 sums accumulated straight into the f32 gradients: the fp32 op
  // has no lowp gradient to round.
  const Tensor& dx = m_dx.rows(batch);
  if (m_numerics && m_numerics->active()) {
    // A sampled step (nn/numerics.h): dy's roundings count for gamma; dx in f32, then rounded.
    m_numerics->claim(m_gamma_entry);
    const Tensor& dx_f32 = m_dx_f32.rows(batch);
    m_backend->layer_norm_backward(m_x, m_gamma.param, m_mean.rows(batch), m_rstd.rows(batch), dy,
                                   dx_f32, m_gamma.grad, m_beta.grad);
    m_numerics->round_site(dx_f32, dx, m_site);
    return dx;
  }
  m_backend->layer_norm_backward(m_x, m_gamma.param, m_mean.rows(batch), m_rstd.rows(batch), dy, dx,
                                 m_gamma.grad, m_beta.grad);
  return dx;
}

}  // namespace ampctl::nn
