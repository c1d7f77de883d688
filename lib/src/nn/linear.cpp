// Linear: y = x W^T + b with autocast's casts (layers.h). Forward is one backend op
// (linear_forward: fp32 accumulation, the bias added in float, one rounding). Backward is two
// gemms and a row sum; under fp16/bf16 the weight and bias gradients are rounded to the lowp
// dtype in a workspace first and only then added to the f32 gradients, as PyTorch's
// AccumulateGrad adds the fp16 .grad of the cast weight into the fp32 master's .grad.
#include <cmath>

#include "ampctl/core/philox.h"
#include "ampctl/nn/layers.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {

void fill_uniform(std::span<float> out, double bound, uint64_t seed, uint64_t stream) {
  for (size_t j = 0; j < out.size(); ++j) {
    const double u = philox_uniform(philox_u32(seed, stream, j));
    out[j] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

Linear::Linear(int64_t in_features, int64_t out_features) : m_in(in_features), m_out(out_features) {
  if (m_in < 1 || m_out < 1) {
    throw Error{ErrorKind::invalid_argument,
                "Linear: features must be >= 1, got in=" + std::to_string(m_in) +
                    ", out=" + std::to_string(m_out)};
  }
}

std::string Linear::describe() const {
  return "Linear(in_features=" + std::to_string(m_in) + ", out_features=" + std::to_string(m_out) +
         ", bias=True)";
}

void Linear::declare(FlatLayout& layout, const std::string& prefix) {
  m_weight_entry = declare_param(layout, prefix + ".weight", {m_out, m_in});
  m_bias_entry = declare_param(layout, prefix + ".bias", {m_out});
}

void Linear::init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const {
  const double bound = 1.0 / std::sqrt(static_cast<double>(m_in));
  for (size_t entry : {m_weight_entry, m_bias_entry}) {
    const FlatLayout::Entry& e = layout.entries().at(entry);
    fill_uniform(host.subspan(e.offset, e.numel), bound, seed, init_stream(entry));
  }
}

void Linear::setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
                   int64_t max_batch, DType act, bool input_grad) {
  m_backend = &backend;
  m_weight = bind(layout, arenas, m_weight_entry);
  m_bias = bind(layout, arenas, m_bias_entry);
  m_y = RowViews(backend.zeros({max_batch, m_out}, act));
  if (input_grad) m_dx = RowViews(backend.zeros({max_batch, m_in}, act));
  if (act != DType::f32) m_dw_ws = backend.zeros({m_out, m_in}, act);
  m_db_ws = backend.zeros({m_out}, act);
  m_numerics = act != DType::f32 ? arenas.numerics : nullptr;
  if (m_numerics) {  // the f32 outputs of sampled steps (nn/numerics.h)
    m_dw_f32 = m_numerics->workspace({m_out, m_in});
    m_db_f32 = m_numerics->workspace({m_out});
    if (input_grad) {
      m_dx_f32 = RowViews(m_numerics->workspace({max_batch, m_in}));
      m_dx_site = m_numerics->add_site();
    }
  }
}

const Tensor& Linear::forward(const Tensor& x, int64_t batch, bool) {
  const Tensor& y = m_y.rows(batch);
  m_backend->linear_forward(x, m_weight.compute(), m_bias.compute(), y);
  m_x = x;  // copy-assigning a view reuses m_x's Shape storage: no allocation after the first
  return y;
}

const Tensor& Linear::backward(const Tensor& dy, int64_t batch) {
  Backend& b = *m_backend;
  if (m_numerics && m_numerics->active()) return backward_counted(dy, batch);
  if (m_dw_ws.defined()) {
    b.gemm(dy, /*trans_a=*/true, m_x, /*trans_b=*/false, m_dw_ws);
    b.add_(m_weight.grad, m_dw_ws);
  } else {
    // fp32: the product accumulates into the gradient inside the gemm (beta = 1).
    b.gemm(dy, /*trans_a=*/true, m_x, /*trans_b=*/false, m_weight.grad, 1.0f, 1.0f);
  }
  b.sum_rows(dy, m_db_ws);
  b.add_(m_bias.grad, m_db_ws);
  if (!m_dx.defined()) return m_undefined;
  const Tensor& dx = m_dx.rows(batch);
  b.gemm(dy, /*trans_a=*/false, m_weight.compute(), /*trans_b=*/false, dx);
  return dx;
}

// An active step (nn/numerics.h): the same products through the hook, which gives the lowp bits
// above (one rounding of the same float) and takes their amax, counting them on sampled steps.
const Tensor& Linear::backward_counted(const Tensor& dy, int64_t batch) {
  Backend& b = *m_backend;
  GradNumerics& n = *m_numerics;
  n.claim(m_weight_entry);  // dy's roundings count for this layer's weight
  n.gemm(dy, /*trans_a=*/true, m_x, /*trans_b=*/false, m_dw_f32, m_dw_ws, m_weight_entry);
  b.add_(m_weight.grad, m_dw_ws);
  b.sum_rows(dy, m_db_f32);
  n.round(m_db_f32, m_db_ws, m_bias_entry);
  b.add_(m_bias.grad, m_db_ws);
  if (!m_dx.defined()) return m_undefined;
  const Tensor& dx = m_dx.rows(batch);
  n.gemm_site(dy, /*trans_a=*/false, m_weight.compute(), /*trans_b=*/false, m_dx_f32.rows(batch),
              dx, m_dx_site);
  return dx;
}

}  // namespace ampctl::nn
