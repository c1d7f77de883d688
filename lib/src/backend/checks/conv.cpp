// The conv family's argument checks (checks.h; backend.h, "convolution ops"), shared by both
// backends and by the conv2d compositions (compose.cpp).
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "checks.h"

namespace ampctl {

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  if (kernel < 1 || stride < 1 || pad < 0) return 0;
  const int64_t span = in + 2 * pad - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

namespace {

[[noreturn]] void invalid_conv(const char* what, const std::string& problem) {
  throw Error{ErrorKind::invalid_argument, std::string(what) + ": " + problem};
}

bool is_float(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

void check_defined_float(const Tensor& t, const char* what, const char* name) {
  if (!t.defined()) invalid_conv(what, std::string(name) + " is undefined");
  if (!is_float(t.dtype())) {
    invalid_conv(what, std::string(name) + " " + t.describe() + " is not a float tensor");
  }
}

// The output size one adaptive or fixed window sweep gives along one dimension.
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p) {
  return conv_out_size(in, k, s, p);
}

std::array<int64_t, 4> image_dims(const Tensor& t, const char* what) {
  check_defined_float(t, what, "image");
  if (t.rank() != 4)
    invalid_conv(what, "expected an image tensor [N, C, H, W], got " + t.describe());
  return {t.dim(0), t.dim(1), t.dim(2), t.dim(3)};
}

void pool2d_shapes(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, const char* what) {
  const auto xd = image_dims(x, what);
  const auto yd = image_dims(y, what);
  if (xd[0] != yd[0] || xd[1] != yd[1]) {
    invalid_conv(what, "x " + x.describe() + " and y " + y.describe() + " differ in N or C");
  }
  if (g.adaptive) {
    if (yd[2] < 1 || yd[3] < 1) invalid_conv(what, "adaptive output " + y.describe() + " is empty");
    return;
  }
  if (g.kernel_h < 1 || g.kernel_w < 1 || g.stride_h < 1 || g.stride_w < 1 || g.pad_h < 0 ||
      g.pad_w < 0 || 2 * g.pad_h > g.kernel_h || 2 * g.pad_w > g.kernel_w) {
    invalid_conv(what, "invalid window: kernel >= 1, stride >= 1 and 0 <= pad <= kernel / 2");
  }
  const int64_t oh = pool_out(xd[2], g.kernel_h, g.stride_h, g.pad_h);
  const int64_t ow = pool_out(xd[3], g.kernel_w, g.stride_w, g.pad_w);
  if (oh < 1 || ow < 1 || yd[2] != oh || yd[3] != ow) {
    invalid_conv(what, "y " + y.describe() + " is not the pooled size [" + std::to_string(oh) +
                           ", " + std::to_string(ow) + "] of x " + x.describe());
  }
}

void im2col_shapes(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
                   const Conv2dGeometry& g, const char* what) {
  check_defined_float(x, what, "x");
  check_defined_float(col, what, "col");
  if (x.rank() != 3) invalid_conv(what, "x must be one image [C, H, W], got " + x.describe());
  if (g.stride_h < 1 || g.stride_w < 1 || g.pad_h < 0 || g.pad_w < 0 || kernel_h < 1 ||
      kernel_w < 1) {
    invalid_conv(what, "invalid geometry: kernel >= 1, stride >= 1, pad >= 0");
  }
  const int64_t oh = conv_out_size(x.dim(1), kernel_h, g.stride_h, g.pad_h);
  const int64_t ow = conv_out_size(x.dim(2), kernel_w, g.stride_w, g.pad_w);
  if (oh < 1 || ow < 1 || col.rank() != 2 || col.dim(0) != x.dim(0) * kernel_h * kernel_w ||
      col.dim(1) != oh * ow) {
    invalid_conv(what, "col " + col.describe() + " is not [" +
                           std::to_string(x.dim(0) * kernel_h * kernel_w) + ", " +
                           std::to_string(oh * ow) + "] for x " + x.describe());
  }
}

int64_t batch_norm_channels(const Tensor& x, std::initializer_list<const Tensor*> per_channel,
                            const char* what) {
  check_defined_float(x, what, "x");
  if (x.rank() < 2) invalid_conv(what, "x must be [N, C, ...], got " + x.describe());
  const int64_t c = x.dim(1);
  for (const Tensor* t : per_channel) {
    if (!t->defined()) continue;
    if (t->dtype() != DType::f32 || t->rank() != 1 || t->dim(0) != c) {
      invalid_conv(
          what, "per-channel tensor " + t->describe() + " is not f32 [" + std::to_string(c) + "]");
    }
  }
  return c;
}

// x [N, C, H, W], w [O, C, kh, kw], y [N, O, OH, OW] with OH/OW the geometry's sizes.
ConvDims conv_dims(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dGeometry& g,
                   const char* what) {
  for (const Tensor* t : {&x, &w, &y}) {
    check_defined_float(*t, what, "operand");
    if (t->rank() != 4) invalid_conv(what, "expected 4-d tensors, got " + t->describe());
  }
  ConvDims d{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3), 0, 0};
  if (w.dim(1) != d.c) {
    invalid_conv(what, "w " + w.describe() + " does not take x's " + std::to_string(d.c) +
                           " channels (x " + x.describe() + ")");
  }
  d.oh = conv_out_size(d.h, d.kh, g.stride_h, g.pad_h);
  d.ow = conv_out_size(d.w, d.kw, g.stride_w, g.pad_w);
  if (d.oh < 1 || d.ow < 1 || y.dim(0) != d.n || y.dim(1) != d.o || y.dim(2) != d.oh ||
      y.dim(3) != d.ow) {
    invalid_conv(what, "y " + y.describe() + " is not [" + std::to_string(d.n) + ", " +
                           std::to_string(d.o) + ", " + std::to_string(d.oh) + ", " +
                           std::to_string(d.ow) + "] for x " + x.describe() + ", w " +
                           w.describe());
  }
  return d;
}

void check_workspace(const Tensor& ws, int64_t numel, DType dtype, const char* what,
                     const char* name) {
  if (!ws.defined() || ws.dtype() != dtype || static_cast<int64_t>(ws.numel()) < numel) {
    invalid_conv(what, std::string(name) + " workspace " +
                           (ws.defined() ? ws.describe() : std::string("undefined")) +
                           ": expected " + dtype_name(dtype) + " with >= " + std::to_string(numel) +
                           " elements");
  }
}

}  // namespace

void check_im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
                  const Conv2dGeometry& g, const Device& device) {
  const char* op = "im2col";
  checks::on(x, device, op, "x");
  checks::on(col, device, op, "col");
  im2col_shapes(x, col, kernel_h, kernel_w, g, op);
  if (x.dtype() != col.dtype()) {
    checks::fail(op, "x " + x.describe() + " and col " + col.describe() + " must share a dtype");
  }
}

void check_col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                  const Conv2dGeometry& g, const Device& device) {
  const char* op = "col2im";
  checks::on(x, device, op, "x");
  checks::on(col, device, op, "col");
  im2col_shapes(x, col, kernel_h, kernel_w, g, op);
  checks::dtype(col, DType::f32, op, "col");
}

void check_broadcast_channels(const Tensor& b, const Tensor& y, const Device& device) {
  const char* op = "broadcast_channels";
  checks::on(b, device, op, "b");
  checks::on(y, device, op, "y");
  checks::floating(b, op, "b");
  checks::floating(y, op, "y");
  if (b.rank() != 1 || y.rank() < 2 || y.dim(1) != b.dim(0)) {
    checks::fail(op, "b " + b.describe() + " is not [C] for y " + y.describe());
  }
}

void check_channel_sum(const Tensor& x, const Tensor& out, const Device& device) {
  const char* op = "channel_sum";
  checks::on(x, device, op, "x");
  checks::on(out, device, op, "out");
  checks::floating(x, op, "x");
  checks::floating(out, op, "out");
  if (x.rank() < 2 || out.rank() != 1 || out.dim(0) != x.dim(1)) {
    checks::fail(op, "out " + out.describe() + " is not [C] for x " + x.describe());
  }
}

void check_max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                              const Pool2dGeometry& g, const Device& device) {
  const char* op = "max_pool2d_forward";
  checks::on(x, device, op, "x");
  checks::on(y, device, op, "y");
  checks::on(indices, device, op, "indices");
  pool2d_shapes(x, y, g, op);
  if (x.dtype() != y.dtype()) {
    checks::fail(op, "x " + x.describe() + " and y " + y.describe() + " must share a dtype");
  }
  checks::dtype(indices, DType::i32, op, "indices");
  checks::shape(indices, {y.dim(0), y.dim(1), y.dim(2), y.dim(3)}, op, "indices");
}

void check_max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                               const Pool2dGeometry& g, const Device& device) {
  const char* op = "max_pool2d_backward";
  checks::on(dy, device, op, "dy");
  checks::on(dx, device, op, "dx");
  checks::on(indices, device, op, "indices");
  pool2d_shapes(dx, dy, g, op);
  checks::dtype(indices, DType::i32, op, "indices");
  checks::shape(indices, {dy.dim(0), dy.dim(1), dy.dim(2), dy.dim(3)}, op, "indices");
}

void check_avg_pool2d(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, const char* op,
                      const Device& device) {
  const bool forward = std::strcmp(op, "avg_pool2d_forward") == 0;
  checks::on(x, device, op, forward ? "x" : "dx");
  checks::on(y, device, op, forward ? "y" : "dy");
  pool2d_shapes(x, y, g, op);
}

int64_t check_batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& y, const Tensor& save_mean,
                                 const Tensor& save_invstd, const Tensor& running_mean,
                                 const Tensor& running_var, const Tensor& num_batches_tracked,
                                 const BatchNormParams& params, const Device& device) {
  const char* op = "batch_norm_forward";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&gamma, "gamma"},
                                {&beta, "beta"},
                                {&y, "y"},
                                {&save_mean, "save_mean"},
                                {&save_invstd, "save_invstd"},
                                {&running_mean, "running_mean"},
                                {&running_var, "running_var"}}) {
    checks::on(*t, device, op, name);
  }
  const int64_t c = batch_norm_channels(
      x, {&gamma, &beta, &save_mean, &save_invstd, &running_mean, &running_var}, op);
  checks::floating(y, op, "y");
  checks::same_numel(x, "x", y, "y", op);
  if (num_batches_tracked.defined()) {
    checks::scalar(num_batches_tracked, DType::i32, device, op, "num_batches_tracked");
  }
  int64_t plane = 1;  // elements per (n, c) plane
  for (size_t d = 2; d < x.rank(); ++d) plane *= x.dim(d);
  if (params.training && x.dim(0) * plane < 2) {
    checks::fail(op, "expected more than 1 value per channel when training, got " + x.describe());
  }
  return c;
}

int64_t check_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                  const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dgamma, const Tensor& dbeta, const Device& device) {
  const char* op = "batch_norm_backward";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&gamma, "gamma"},
                                {&save_mean, "save_mean"},
                                {&save_invstd, "save_invstd"},
                                {&dy, "dy"}}) {
    checks::on(*t, device, op, name);
  }
  const int64_t c = batch_norm_channels(x, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta}, op);
  checks::floating(dy, op, "dy");
  checks::same_numel(x, "x", dy, "dy", op);
  if (dx.defined()) {
    checks::float_on(dx, device, op, "dx");
    checks::same_numel(x, "x", dx, "dx", op);
  }
  if (dgamma.defined()) checks::on(dgamma, device, op, "dgamma");
  if (dbeta.defined()) checks::on(dbeta, device, op, "dbeta");
  return c;
}

ConvDims check_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                              const Conv2dGeometry& g, const Tensor& col) {
  const char* what = "conv2d_forward";
  const ConvDims d = conv_dims(x, w, y, g, what);
  check_workspace(col, d.k() * d.p(), x.dtype(), what, "col");
  if (b.defined()) {
    check_defined_float(b, what, "b");
    if (b.rank() != 1 || b.dim(0) != d.o) invalid_conv(what, "b " + b.describe() + " is not [O]");
  }
  return d;
}

ConvDims check_conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                     const Conv2dGeometry& g, const Tensor& dcol) {
  const char* what = "conv2d_backward_input";
  const ConvDims d = conv_dims(dx, w, dy, g, what);
  check_workspace(dcol, d.k() * d.p(), DType::f32, what, "dcol");
  return d;
}

ConvDims check_conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                      const Tensor& db, const Conv2dGeometry& g, const Tensor& col,
                                      const Tensor& acc) {
  const char* what = "conv2d_backward_weight";
  const ConvDims d = conv_dims(x, dw, dy, g, what);
  check_workspace(col, d.k() * d.p(), x.dtype(), what, "col");
  check_workspace(acc, d.o * d.k(), DType::f32, what, "acc");
  if (db.defined()) {
    check_defined_float(db, what, "db");
    if (db.rank() != 1 || db.dim(0) != d.o)
      invalid_conv(what, "db " + db.describe() + " is not [O]");
  }
  return d;
}

}  // namespace ampctl
