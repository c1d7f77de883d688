// The optim family's argument checks (checks.h; backend.h, "optimizers"), shared by both backends.
#include <string>
#include <variant>

#include "checks.h"

namespace ampctl {

namespace {

[[noreturn]] void invalid_step(const char* op, const char* name, const std::string& what) {
  throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + name + " " + what};
}

void check_buffer(const Tensor& t, const Tensor& params, const Device& device, const char* op,
                  const char* name) {
  checks::on(t, device, op, name);
  if (t.dtype() != DType::f32) invalid_step(op, name, "must be f32, got " + t.describe());
  if (t.numel() != params.numel()) {
    invalid_step(op, name,
                 t.describe() + " and params " + params.describe() + " differ in element count");
  }
}

void check_absent(const Tensor& t, const char* op, const char* name) {
  if (t.defined()) invalid_step(op, name, "belongs to another kind of update: leave it undefined");
}

}  // namespace

const char* update_name(const OptimizerStepArgs& args) {
  return std::holds_alternative<optim::SgdHyper>(args.hyper) ? "sgd_step" : "adam_step";
}

void check_optimizer_step(const OptimizerStepArgs& args, const Device& device) {
  const char* op = update_name(args);
  check_buffer(args.params, args.params, device, op, "params");
  check_buffer(args.grads, args.params, device, op, "grads");
  checks::scalar(args.step, DType::i32, device, op, "step");
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
    checks::scalar(args.found_inf, DType::f32, device, op, "found_inf");
  }
  if (args.inv_scale.defined()) {
    checks::scalar(args.inv_scale, DType::f32, device, op, "inv_scale");
  }
  if (args.decay_mask.defined())
    check_buffer(args.decay_mask, args.params, device, op, "decay_mask");
  if (args.lowp_params.defined()) {
    checks::on(args.lowp_params, device, op, "lowp_params");
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
