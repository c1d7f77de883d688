#include "ampctl/backend/backend.h"

namespace ampctl {

Tensor Backend::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  fill(t, 0.0);
  return t;
}

Tensor Backend::from_host(const Shape& shape, DType dtype, const void* data) {
  Tensor t = empty(shape, dtype);
  upload(t, data, t.nbytes());
  return t;
}

Tensor Backend::to_host(const Tensor& t) {
  Tensor h = Tensor::host(t.shape(), t.dtype());
  download(h.data(), t);
  return h;
}

float Backend::read_scalar_f32(const Tensor& t) {
  t.check_dtype(DType::f32);
  if (t.numel() != 1) {
    throw Error{ErrorKind::invalid_argument, "expected a one-element tensor, got " + t.describe()};
  }
  float v = 0;
  download(&v, t);
  return v;
}

int32_t Backend::read_scalar_i32(const Tensor& t) {
  t.check_dtype(DType::i32);
  if (t.numel() != 1) {
    throw Error{ErrorKind::invalid_argument, "expected a one-element tensor, got " + t.describe()};
  }
  int32_t v = 0;
  download(&v, t);
  return v;
}

int64_t Backend::check_gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                                   const Tensor& dst) {
  index.check_dtype(DType::i32);
  if (src.dtype() != dst.dtype() || dtype_size(src.dtype()) != 4 || src.rank() < 1 ||
      src.rank() > 2 || dst.rank() != src.rank() || (src.rank() == 2 && src.dim(1) != dst.dim(1))) {
    throw Error{ErrorKind::invalid_argument,
                "gather_rows: src " + src.describe() + " and dst " + dst.describe() +
                    " must be [N, W] and [R, W] (or [N] and [R]) of one 4-byte dtype"};
  }
  const int64_t rows = dst.dim(0);
  if (offset < 0 || offset + rows > static_cast<int64_t>(index.numel())) {
    throw Error{ErrorKind::invalid_argument, "gather_rows: rows [" + std::to_string(offset) + ", " +
                                                 std::to_string(offset + rows) +
                                                 ") outside the index " + index.describe()};
  }
  const int64_t n = src.dim(0);
  return n > 0 ? static_cast<int64_t>(src.numel()) / n : 0;
}

namespace {

[[noreturn]] void invalid_step(const char* op, const char* name, const std::string& what) {
  throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + name + " " + what};
}

// Defined and on `device` (any CPU tensor is on the CPU backend's device).
void check_on(const Tensor& t, const Device& device, const char* op, const char* name) {
  if (!t.defined()) invalid_step(op, name, "is undefined");
  const Device d = t.device();
  if (d.type != device.type || (d.type == DeviceType::cuda && d.index != device.index)) {
    invalid_step(op, name,
                 "is " + t.describe() + ", expected a tensor on " + device.str() +
                     " (move data with upload/download)");
  }
}

void check_buffer(const Tensor& t, const Tensor& params, const Device& device, const char* op,
                  const char* name) {
  check_on(t, device, op, name);
  if (t.dtype() != DType::f32) invalid_step(op, name, "must be f32, got " + t.describe());
  if (t.numel() != params.numel()) {
    invalid_step(op, name,
                 t.describe() + " and params " + params.describe() + " differ in element count");
  }
}

void check_scalar_operand(const Tensor& t, DType dtype, const Device& device, const char* op,
                          const char* name) {
  check_on(t, device, op, name);
  if (t.dtype() != dtype || t.numel() != 1) {
    invalid_step(
        op, name,
        std::string("must be a one-element ") + dtype_name(dtype) + " tensor, got " + t.describe());
  }
}

void check_absent(const Tensor& t, const char* op, const char* name) {
  if (t.defined()) invalid_step(op, name, "belongs to another kind of update: leave it undefined");
}

}  // namespace

const char* update_name(const OptimizerStepArgs& args) {
  return std::holds_alternative<optim::SgdHyper>(args.hyper) ? "sgd_step" : "adam_step";
}

void Backend::check_optimizer_step(const OptimizerStepArgs& args, const Device& device) {
  const char* op = update_name(args);
  check_buffer(args.params, args.params, device, op, "params");
  check_buffer(args.grads, args.params, device, op, "grads");
  check_scalar_operand(args.step, DType::i32, device, op, "step");
  if (const auto* sgd = std::get_if<optim::SgdHyper>(&args.hyper)) {
    // Without momentum the buffer is neither read nor written, even when one is passed.
    if (sgd->momentum != 0.0f)
      check_buffer(args.momentum_buf, args.params, device, op, "momentum_buf");
    check_absent(args.exp_avg, op, "exp_avg");
    check_absent(args.exp_avg_sq, op, "exp_avg_sq");
  } else {
    check_buffer(args.exp_avg, args.params, device, op, "exp_avg");
    check_buffer(args.exp_avg_sq, args.params, device, op, "exp_avg_sq");
    check_absent(args.momentum_buf, op, "momentum_buf");
  }
  if (args.found_inf.defined()) {
    check_scalar_operand(args.found_inf, DType::f32, device, op, "found_inf");
  }
  if (args.inv_scale.defined()) {
    check_scalar_operand(args.inv_scale, DType::f32, device, op, "inv_scale");
  }
  if (args.lowp_params.defined()) {
    check_on(args.lowp_params, device, op, "lowp_params");
    if (!is_floating(args.lowp_params.dtype())) {
      invalid_step(op, "lowp_params",
                   "must be f32, f16 or bf16, got " + args.lowp_params.describe());
    }
    if (args.lowp_params.numel() != args.params.numel()) {
      invalid_step(op, "lowp_params",
                   args.lowp_params.describe() + " and params " + args.params.describe() +
                       " differ in element count");
    }
  }
}

}  // namespace ampctl

// ---- convolution ops: shared checks and the conv2d ops composed of the primitives ----
namespace ampctl {
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

}  // namespace

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  if (kernel < 1 || stride < 1 || pad < 0) return 0;
  const int64_t span = in + 2 * pad - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

std::array<int64_t, 4> Backend::check_image(const Tensor& t, const char* what) {
  check_defined_float(t, what, "image");
  if (t.rank() != 4)
    invalid_conv(what, "expected an image tensor [N, C, H, W], got " + t.describe());
  return {t.dim(0), t.dim(1), t.dim(2), t.dim(3)};
}

void Backend::check_pool2d(const Tensor& x, const Tensor& y, const Pool2dGeometry& g,
                           const char* what) {
  const auto xd = check_image(x, what);
  const auto yd = check_image(y, what);
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

void Backend::check_im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
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

int64_t Backend::check_batch_norm(const Tensor& x, std::initializer_list<const Tensor*> per_channel,
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

namespace {

struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t k() const { return c * kh * kw; }
  int64_t p() const { return oh * ow; }
};

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

void Backend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                             const Conv2dGeometry& g, const Tensor& col) {
  const char* what = "conv2d_forward";
  const ConvDims d = conv_dims(x, w, y, g, what);
  check_workspace(col, d.k() * d.p(), x.dtype(), what, "col");
  if (b.defined()) {
    check_defined_float(b, what, "b");
    if (b.rank() != 1 || b.dim(0) != d.o) invalid_conv(what, "b " + b.describe() + " is not [O]");
  }
  const Tensor w2 = w.reshape({d.o, d.k()});
  const Tensor col2 = col.view(0, {d.k(), d.p()});
  // With a bias, y is first filled with it (the lowp bias, exact in y's dtype) and the product
  // is added in float before the one rounding (beta = 1), as a fused bias epilogue does.
  if (b.defined()) broadcast_channels(b, y);
  const float beta = b.defined() ? 1.0f : 0.0f;
  for (int64_t n = 0; n < d.n; ++n) {
    im2col(x.view(static_cast<size_t>(n * d.c * d.h * d.w), {d.c, d.h, d.w}), col2, d.kh, d.kw, g);
    gemm(w2, false, col2, false, y.view(static_cast<size_t>(n * d.o * d.p()), {d.o, d.p()}), 1.0f,
         beta);
  }
}

void Backend::conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                    const Conv2dGeometry& g, const Tensor& dcol) {
  const char* what = "conv2d_backward_input";
  const ConvDims d = conv_dims(dx, w, dy, g, what);
  check_workspace(dcol, d.k() * d.p(), DType::f32, what, "dcol");
  const Tensor w2 = w.reshape({d.o, d.k()});
  const Tensor dcol2 = dcol.view(0, {d.k(), d.p()});
  for (int64_t n = 0; n < d.n; ++n) {
    gemm(w2, true, dy.view(static_cast<size_t>(n * d.o * d.p()), {d.o, d.p()}), false, dcol2);
    col2im(dcol2, dx.view(static_cast<size_t>(n * d.c * d.h * d.w), {d.c, d.h, d.w}), d.kh, d.kw,
           g);
  }
}

void Backend::conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dw,
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
  const Tensor col2 = col.view(0, {d.k(), d.p()});
  const Tensor acc2 = acc.view(0, {d.o, d.k()});
  // Images are added in order into one float accumulator (beta = 1 after the first), so the
  // weight gradient is rounded once, however many images the batch holds.
  for (int64_t n = 0; n < d.n; ++n) {
    im2col(x.view(static_cast<size_t>(n * d.c * d.h * d.w), {d.c, d.h, d.w}), col2, d.kh, d.kw, g);
    gemm(dy.view(static_cast<size_t>(n * d.o * d.p()), {d.o, d.p()}), false, col2, true, acc2, 1.0f,
         n == 0 ? 0.0f : 1.0f);
  }
  cast(acc2, dw.reshape({d.o, d.k()}));
  if (db.defined()) channel_sum(dy, db);
}

}  // namespace ampctl
