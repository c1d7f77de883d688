// Conv2d, Pool2d, BatchNorm2d and Flatten (conv_layers.h): each forward and backward is one or
// two backend ops on [batch, C, H, W] views of the row buffers sized at setup, so nothing is
// allocated inside a step.
#include "ampctl/nn/conv_layers.h"

#include <algorithm>
#include <cmath>

#include "ampctl/core/philox.h"
#include "ampctl/nn/layers.h"
#include "ampctl/nn/numerics.h"

namespace ampctl::nn {
namespace {

void check_image_shape(const ImageShape& s, const char* what) {
  if (s.c < 1 || s.h < 1 || s.w < 1) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": image shape [" + std::to_string(s.c) + ", " +
                    std::to_string(s.h) + ", " + std::to_string(s.w) + "] has an empty dimension"};
  }
}

Shape image_rows(int64_t rows, const ImageShape& s) {
  return {rows, s.c, s.h, s.w};
}

}  // namespace

void view_images(const Tensor& x, int64_t batch, const ImageShape& in, Tensor& out,
                 const char* what) {
  const int64_t need = batch * in.numel();
  if (!x.defined() || x.rank() < 1 || x.dim(0) < batch || static_cast<int64_t>(x.numel()) < need ||
      static_cast<int64_t>(x.numel()) % x.dim(0) != 0 ||
      static_cast<int64_t>(x.numel()) / x.dim(0) != in.numel()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": expected " + std::to_string(batch) + " rows of [" +
                    std::to_string(in.c) + ", " + std::to_string(in.h) + ", " +
                    std::to_string(in.w) + "], got " +
                    (x.defined() ? x.describe() : std::string("none"))};
  }
  if (x.rank() == 4 && x.dim(0) == batch) {
    out = x;
    return;
  }
  out = x.view(0, {batch, in.c, in.h, in.w});
}

// ---- Conv2d ----

Conv2d::Conv2d(ImageShape in, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
               bool bias)
    : m_in(in), m_kernel(kernel), m_has_bias(bias) {
  check_image_shape(in, "Conv2d");
  if (out_channels < 1 || kernel < 1 || stride < 1 || padding < 0) {
    throw Error{ErrorKind::invalid_argument,
                "Conv2d: out_channels, kernel and stride must be >= 1 and padding >= 0"};
  }
  m_geometry = {stride, stride, padding, padding};
  m_out = {out_channels, conv_out_size(in.h, kernel, stride, padding),
           conv_out_size(in.w, kernel, stride, padding)};
  if (m_out.h < 1 || m_out.w < 1) {
    throw Error{ErrorKind::invalid_argument,
                "Conv2d: a " + std::to_string(kernel) + "x" + std::to_string(kernel) +
                    " kernel with padding " + std::to_string(padding) + " does not fit a " +
                    std::to_string(in.h) + "x" + std::to_string(in.w) + " image"};
  }
}

std::string Conv2d::describe() const {
  const std::string k = std::to_string(m_kernel);
  const std::string s = std::to_string(m_geometry.stride_h);
  const std::string p = std::to_string(m_geometry.pad_h);
  return "Conv2d(" + std::to_string(m_in.c) + ", " + std::to_string(m_out.c) + ", kernel_size=(" +
         k + ", " + k + "), stride=(" + s + ", " + s + "), padding=(" + p + ", " + p + ")" +
         (m_has_bias ? "" : ", bias=False") + ")";
}

void Conv2d::declare(FlatLayout& layout, const std::string& prefix) {
  m_weight_entry = declare_param(layout, prefix + ".weight", {m_out.c, m_in.c, m_kernel, m_kernel});
  if (m_has_bias) m_bias_entry = declare_param(layout, prefix + ".bias", {m_out.c});
}

void Conv2d::init(std::span<float> host, const FlatLayout& layout, uint64_t seed) const {
  const double bound = 1.0 / std::sqrt(static_cast<double>(m_in.c * m_kernel * m_kernel));
  std::vector<size_t> entries{m_weight_entry};
  if (m_has_bias) entries.push_back(m_bias_entry);
  for (size_t entry : entries) {
    const FlatLayout::Entry& e = layout.entries().at(entry);
    fill_uniform(host.subspan(e.offset, e.numel), bound, seed, init_stream(entry));
  }
}

void Conv2d::setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
                   int64_t max_batch, DType act, bool input_grad) {
  m_backend = &backend;
  m_weight = bind(layout, arenas, m_weight_entry);
  if (m_has_bias) m_bias = bind(layout, arenas, m_bias_entry);
  m_y = RowViews(backend.zeros(image_rows(max_batch, m_out), act));
  const int64_t k = m_in.c * m_kernel * m_kernel;
  const int64_t p = m_out.h * m_out.w;
  m_col = backend.zeros({k * p}, act);
  m_acc = backend.zeros({m_out.c * k}, DType::f32);
  m_dw_ws = backend.zeros({m_out.c, m_in.c, m_kernel, m_kernel}, act);
  if (m_has_bias) m_db_ws = backend.zeros({m_out.c}, act);
  if (input_grad) {
    m_dx = RowViews(backend.zeros(image_rows(max_batch, m_in), act));
    m_dcol = backend.zeros({k * p}, DType::f32);
  }
  m_numerics = act != DType::f32 ? arenas.numerics : nullptr;
  if (m_numerics) {  // the f32 outputs of counted steps (nn/numerics.h)
    m_dw_f32 = m_numerics->workspace({m_out.c, m_in.c, m_kernel, m_kernel});
    if (m_has_bias) m_db_f32 = m_numerics->workspace({m_out.c});
    if (input_grad) {
      m_dx_f32 = RowViews(m_numerics->workspace(image_rows(max_batch, m_in)));
      m_dx_site = m_numerics->add_site();
    }
  }
}

const Tensor& Conv2d::forward(const Tensor& x, int64_t batch, bool) {
  view_images(x, batch, m_in, m_x, "Conv2d forward input");
  const Tensor& y = m_y.rows(batch);
  m_backend->conv2d_forward(m_x, m_weight.compute(), m_has_bias ? m_bias.compute() : m_undefined, y,
                            m_geometry, m_col);
  return y;
}

const Tensor& Conv2d::backward(const Tensor& dy, int64_t batch) {
  Backend& b = *m_backend;
  view_images(dy, batch, m_out, m_dy, "Conv2d backward dy");
  // A counted step (nn/numerics.h): dy's roundings count for this weight; dW, db and dx are
  // written in f32 (the float each would round: the accumulator, the channel sums, col2im's
  // sums) and rounded by the hook.
  GradNumerics* n = m_numerics && m_numerics->active() ? m_numerics : nullptr;
  if (n) n->claim(m_weight_entry);
  const Tensor& dw = n ? m_dw_f32 : m_dw_ws;
  const Tensor& db = !m_has_bias ? m_undefined : n ? m_db_f32 : m_db_ws;
  b.conv2d_backward_weight(m_x, m_dy, dw, db, m_geometry, m_col, m_acc);
  if (n) {
    n->round(m_dw_f32, m_dw_ws, m_weight_entry);
    if (m_has_bias) n->round(m_db_f32, m_db_ws, m_bias_entry);
  }
  b.add_(m_weight.grad, m_dw_ws);
  if (m_has_bias) b.add_(m_bias.grad, m_db_ws);
  if (!m_dx.defined()) return m_undefined;
  const Tensor& dx = m_dx.rows(batch);
  if (n) {
    const Tensor& dx_f32 = m_dx_f32.rows(batch);
    b.conv2d_backward_input(m_dy, m_weight.compute(), dx_f32, m_geometry, m_dcol);
    n->round_site(dx_f32, dx, m_dx_site);
    return dx;
  }
  b.conv2d_backward_input(m_dy, m_weight.compute(), dx, m_geometry, m_dcol);
  return dx;
}

// ---- Pool2d ----

Pool2d::Pool2d(Kind kind, ImageShape in, int64_t kernel, int64_t stride, int64_t padding)
    : m_kind(kind), m_in(in), m_kernel(kernel), m_stride(stride), m_padding(padding) {
  check_image_shape(in, "Pool2d");
  if (kernel < 1) throw Error{ErrorKind::invalid_argument, "Pool2d: kernel must be >= 1"};
  if (kind == Kind::adaptive_avg) {
    m_geometry.adaptive = true;
    m_out = {in.c, kernel, kernel};
    return;
  }
  if (stride < 1 || padding < 0 || 2 * padding > kernel) {
    throw Error{ErrorKind::invalid_argument,
                "Pool2d: stride must be >= 1 and padding in [0, kernel / 2]"};
  }
  m_geometry = {kernel, kernel, stride, stride, padding, padding, false};
  m_out = {in.c, conv_out_size(in.h, kernel, stride, padding),
           conv_out_size(in.w, kernel, stride, padding)};
  if (m_out.h < 1 || m_out.w < 1) {
    throw Error{ErrorKind::invalid_argument, "Pool2d: a " + std::to_string(kernel) + "x" +
                                                 std::to_string(kernel) +
                                                 " window does not fit a " + std::to_string(in.h) +
                                                 "x" + std::to_string(in.w) + " image"};
  }
}

std::string Pool2d::describe() const {
  const std::string k = std::to_string(m_kernel), s = std::to_string(m_stride),
                    p = std::to_string(m_padding);
  switch (m_kind) {
    case Kind::max:
      return "MaxPool2d(kernel_size=" + k + ", stride=" + s + ", padding=" + p +
             ", dilation=1, ceil_mode=False)";
    case Kind::avg:
      return "AvgPool2d(kernel_size=" + k + ", stride=" + s + ", padding=" + p + ")";
    case Kind::adaptive_avg:
      return "AdaptiveAvgPool2d(output_size=(" + k + ", " + k + "))";
  }
  return "Pool2d";
}

void Pool2d::setup(Backend& backend, const FlatLayout&, const ParamArenas& arenas,
                   int64_t max_batch, DType act, bool input_grad) {
  m_backend = &backend;
  m_y = RowViews(backend.zeros(image_rows(max_batch, m_out), act));
  if (m_kind == Kind::max)
    m_indices = RowViews(backend.zeros(image_rows(max_batch, m_out), DType::i32));
  if (input_grad) m_dx = RowViews(backend.zeros(image_rows(max_batch, m_in), act));
  m_numerics = act != DType::f32 && input_grad ? arenas.numerics : nullptr;
  if (m_numerics) {
    m_dx_f32 = RowViews(m_numerics->workspace(image_rows(max_batch, m_in)));
    m_site = m_numerics->add_site();
  }
}

const Tensor& Pool2d::forward(const Tensor& x, int64_t batch, bool) {
  Tensor& xi = m_dy;  // scratch view; backward reassigns it
  view_images(x, batch, m_in, xi, "Pool2d forward input");
  const Tensor& y = m_y.rows(batch);
  if (m_kind == Kind::max) {
    m_backend->max_pool2d_forward(xi, y, m_indices.rows(batch), m_geometry);
  } else {
    m_backend->avg_pool2d_forward(xi, y, m_geometry);
  }
  return y;
}

const Tensor& Pool2d::backward(const Tensor& dy, int64_t batch) {
  if (!m_dx.defined()) return m_undefined;
  view_images(dy, batch, m_out, m_dy, "Pool2d backward dy");
  const Tensor& dx = m_dx.rows(batch);
  // A counted step (nn/numerics.h): dx in f32, then a counted rounding (a pooling has no
  // parameter: its consumer claims the site).
  const bool counted = m_numerics && m_numerics->active();
  const Tensor& out = counted ? m_dx_f32.rows(batch) : dx;
  if (m_kind == Kind::max) {
    m_backend->max_pool2d_backward(m_dy, m_indices.rows(batch), out, m_geometry);
  } else {
    m_backend->avg_pool2d_backward(m_dy, out, m_geometry);
  }
  if (counted) m_numerics->round_site(out, dx, m_site);
  return dx;
}

// ---- BatchNorm2d ----

BatchNorm2d::BatchNorm2d(ImageShape in) : m_in(in) {
  check_image_shape(in, "BatchNorm2d");
}

std::string BatchNorm2d::describe() const {
  return "BatchNorm2d(" + std::to_string(m_in.c) +
         ", eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)";
}

void BatchNorm2d::declare(FlatLayout& layout, const std::string& prefix) {
  m_prefix = prefix;
  m_gamma_entry = declare_param(layout, prefix + ".weight", {m_in.c});
  m_beta_entry = declare_param(layout, prefix + ".bias", {m_in.c});
}

void BatchNorm2d::init(std::span<float> host, const FlatLayout& layout, uint64_t) const {
  const FlatLayout::Entry& g = layout.entries().at(m_gamma_entry);
  const FlatLayout::Entry& b = layout.entries().at(m_beta_entry);
  std::fill_n(host.begin() + static_cast<std::ptrdiff_t>(g.offset), g.numel, 1.0f);
  std::fill_n(host.begin() + static_cast<std::ptrdiff_t>(b.offset), b.numel, 0.0f);
}

void BatchNorm2d::setup(Backend& backend, const FlatLayout& layout, const ParamArenas& arenas,
                        int64_t max_batch, DType act, bool input_grad) {
  m_backend = &backend;
  m_gamma = bind(layout, arenas, m_gamma_entry);
  m_beta = bind(layout, arenas, m_beta_entry);
  m_y = RowViews(backend.zeros(image_rows(max_batch, m_in), act));
  if (input_grad) m_dx = RowViews(backend.zeros(image_rows(max_batch, m_in), act));
  m_save_mean = backend.zeros({m_in.c}, DType::f32);
  m_save_invstd = backend.zeros({m_in.c}, DType::f32);
  m_running_mean = backend.zeros({m_in.c}, DType::f32);
  m_running_var = backend.empty({m_in.c}, DType::f32);
  backend.fill(m_running_var, 1.0);
  m_num_batches_tracked = backend.zeros(Shape{}, DType::i32);
  m_numerics = act != DType::f32 && input_grad ? arenas.numerics : nullptr;
  if (m_numerics) {
    m_dx_f32 = RowViews(m_numerics->workspace(image_rows(max_batch, m_in)));
    m_site = m_numerics->add_site();
  }
}

const Tensor& BatchNorm2d::forward(const Tensor& x, int64_t batch, bool training) {
  view_images(x, batch, m_in, m_x, "BatchNorm2d forward input");
  const Tensor& y = m_y.rows(batch);
  m_trained = false;
  // Neither autocast list: the data stays in its dtype, the parameters are the f32 masters.
  m_backend->batch_norm_forward(m_x, m_gamma.param, m_beta.param, y, m_save_mean, m_save_invstd,
                                m_running_mean, m_running_var, m_num_batches_tracked,
                                {training, kMomentum, kEps});
  m_trained = training;
  return y;
}

const Tensor& BatchNorm2d::backward(const Tensor& dy, int64_t batch) {
  if (!m_trained) {
    throw Error{ErrorKind::state,
                "BatchNorm2d backward: the last forward was not in training mode"};
  }
  view_images(dy, batch, m_in, m_dy, "BatchNorm2d backward dy");
  const Tensor& dx = m_dx.defined() ? m_dx.rows(batch) : m_undefined;
  // dgamma and dbeta are f32 sums into the f32 gradients (nothing rounds); dy's roundings count
  // for gamma. A counted step writes dx in f32, then rounds it with the hook (nn/numerics.h).
  const bool counted = m_numerics && m_numerics->active();
  if (counted) m_numerics->claim(m_gamma_entry);
  const Tensor& out = counted && dx.defined() ? m_dx_f32.rows(batch) : dx;
  m_backend->batch_norm_backward(m_x, m_gamma.param, m_save_mean, m_save_invstd, m_dy, out,
                                 m_gamma.grad, m_beta.grad);
  if (counted && dx.defined()) m_numerics->round_site(out, dx, m_site);
  return dx;
}

void BatchNorm2d::collect_buffers(std::vector<std::pair<std::string, Tensor>>& out) const {
  out.emplace_back(m_prefix + ".running_mean", m_running_mean);
  out.emplace_back(m_prefix + ".running_var", m_running_var);
  out.emplace_back(m_prefix + ".num_batches_tracked", m_num_batches_tracked);
}

// ---- Flatten ----

Flatten::Flatten(ImageShape in) : m_in(in) {
  check_image_shape(in, "Flatten");
}

void Flatten::setup(Backend&, const FlatLayout&, const ParamArenas&, int64_t, DType, bool) {}

const Tensor& Flatten::forward(const Tensor& x, int64_t batch, bool) {
  view_images(x, batch, m_in, m_y, "Flatten forward input");
  m_y = m_y.reshape({batch, m_in.numel()});
  return m_y;
}

const Tensor& Flatten::backward(const Tensor& dy, int64_t batch) {
  view_images(dy, batch, m_in, m_dx, "Flatten backward dy");
  return m_dx;
}

}  // namespace ampctl::nn
