#include "ampctl/backend/backend.h"

namespace ampctl {

void Backend::embedding_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("embedding_forward");
}
void Backend::embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("embedding_backward");
}
void Backend::gemm_batched(const Tensor&, bool, const Tensor&, bool, const Tensor&, float, float) {
  unsupported("gemm_batched");
}
void Backend::heads_from_rows(const Tensor&, int64_t, const Tensor&) {
  unsupported("heads_from_rows");
}
void Backend::heads_to_rows(const Tensor&, const Tensor&, int64_t) {
  unsupported("heads_to_rows");
}
void Backend::causal_softmax_forward(const Tensor&, float, bool, const Tensor&) {
  unsupported("causal_softmax_forward");
}
void Backend::causal_softmax_backward(const Tensor&, const Tensor&, float, bool, const Tensor&) {
  unsupported("causal_softmax_backward");
}

void Backend::unsupported(const char* op) const {
  throw Error{ErrorKind::state, std::string{op} + ": not implemented on " + description()};
}

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
