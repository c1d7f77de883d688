// The nn family's argument checks (checks.h; backend.h, "nn"), shared by both backends so that
// both refuse the same calls.
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "checks.h"

namespace ampctl {
namespace {

void check_activation_kind(nn::ActivationKind kind, const char* op) {
  switch (kind) {
    case nn::ActivationKind::relu:
    case nn::ActivationKind::gelu:
    case nn::ActivationKind::tanh:
    case nn::ActivationKind::gelu_tanh:
      return;
  }
  checks::fail(op, "unknown activation kind " + std::to_string(static_cast<int32_t>(kind)));
}

// On `device`, f32, of exactly this shape.
void check_f32_shape(const Tensor& t, std::initializer_list<int64_t> shape, const Device& device,
                     const char* op, const char* name) {
  checks::on(t, device, op, name);
  checks::dtype(t, DType::f32, op, name);
  checks::shape(t, shape, op, name);
}

// On `device`, a float dtype, of exactly this shape.
void check_float_shape(const Tensor& t, std::initializer_list<int64_t> shape, const Device& device,
                       const char* op, const char* name) {
  checks::float_on(t, device, op, name);
  checks::shape(t, shape, op, name);
}

// On `device`, a float dtype, of ref's element count.
void check_float_like(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name,
                      const Device& device, const char* op) {
  checks::float_on(t, device, op, name);
  checks::same_numel(t, name, ref, ref_name, op);
}

}  // namespace

LinearDims check_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                const Device& device) {
  const char* op = "linear_forward";
  checks::on(x, device, op, "x");
  checks::on(w, device, op, "w");
  checks::floating(x, op, "x");
  checks::floating(w, op, "w");
  checks::matrix(x, op, "x");
  checks::matrix(w, op, "w");
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  if (w.dim(1) != in) {
    checks::fail(op, "x " + x.describe() + " has " + std::to_string(in) + " features but w is " +
                         w.describe() + " (expected [out, " + std::to_string(in) + "])");
  }
  check_float_shape(y, {rows, out}, device, op, "y");
  if (b.defined()) check_float_shape(b, {out}, device, op, "b");
  return {rows, in, out};
}

void check_sum_rows(const Tensor& x, const Tensor& out, const Device& device) {
  const char* op = "sum_rows";
  checks::float_on(x, device, op, "x");
  checks::matrix(x, op, "x");
  check_float_shape(out, {x.dim(1)}, device, op, "out");
}

void check_activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                              const Device& device) {
  const char* op = "activation_forward";
  check_activation_kind(kind, op);
  checks::float_on(x, device, op, "x");
  check_float_like(y, "y", x, "x", device, op);
}

void check_activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                               const Tensor& dy, const Tensor& dx, const Device& device) {
  const char* op = "activation_backward";
  check_activation_kind(kind, op);
  checks::float_on(dy, device, op, "dy");
  check_float_like(dx, "dx", dy, "dy", device, op);
  // relu and tanh read only the forward output, the gelus only the input (nn_math.h): the other
  // one may be undefined, and is not read even when given (a defined one is still checked).
  const bool reads_input = nn::activation_reads_input(kind);
  check_float_like(reads_input ? x : y, reads_input ? "x" : "y", dy, "dy", device, op);
  const Tensor& unused = reads_input ? y : x;
  if (unused.defined()) check_float_like(unused, reads_input ? "y" : "x", dy, "dy", device, op);
}

void check_dropout(const Tensor& in, const Tensor& out, float p, const char* op,
                   const Device& device) {
  const bool forward = std::strcmp(op, "dropout_forward") == 0;
  if (!(p >= 0.0f && p <= 1.0f)) checks::fail(op, "p must be in [0, 1], got " + std::to_string(p));
  checks::float_on(in, device, op, forward ? "x" : "dy");
  check_float_like(out, forward ? "y" : "dx", in, forward ? "x" : "dy", device, op);
}

void check_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                                 const Tensor& correct, const Tensor& dlogits,
                                 const Tensor& grad_scale, const Device& device) {
  const char* op = "softmax_cross_entropy";
  checks::float_on(logits, device, op, "logits");
  checks::matrix(logits, op, "logits");
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  checks::on(labels, device, op, "labels");
  checks::dtype(labels, DType::i32, op, "labels");
  checks::shape(labels, {rows}, op, "labels");
  checks::scalar(loss, DType::f32, device, op, "loss");
  if (cols == 0) checks::fail(op, "logits " + logits.describe() + " have no classes");
  if (correct.defined()) checks::scalar(correct, DType::i32, device, op, "correct");
  if (dlogits.defined()) {
    check_float_shape(dlogits, {rows, cols}, device, op, "dlogits");
    checks::scalar(grad_scale, DType::f32, device, op, "grad_scale");
    // In place (dlogits is logits: every implementation reads a row before writing its
    // gradient) or disjoint.
    if (checks::overlaps(dlogits, logits) &&
        (dlogits.data() != logits.data() || dlogits.dtype() != logits.dtype())) {
      checks::fail(op, "dlogits " + dlogits.describe() + " overlaps logits " + logits.describe() +
                           " without being it (in place needs the same data and dtype)");
    }
  }
}

void check_mse(const Tensor& pred, const Tensor& target, const Tensor& loss, const Tensor& dpred,
               const Tensor& grad_scale, const Device& device) {
  const char* op = "mse";
  checks::float_on(pred, device, op, "pred");
  checks::on(target, device, op, "target");
  checks::dtype(target, DType::f32, op, "target");
  checks::same_numel(pred, "pred", target, "target", op);
  checks::scalar(loss, DType::f32, device, op, "loss");
  if (dpred.defined()) {
    check_float_like(dpred, "dpred", pred, "pred", device, op);
    checks::scalar(grad_scale, DType::f32, device, op, "grad_scale");
  }
}

std::array<int64_t, 2> check_layer_norm_forward(const Tensor& x, const Tensor& gamma,
                                                const Tensor& beta, const Tensor& y,
                                                const Tensor& mean, const Tensor& rstd,
                                                const Device& device) {
  const char* op = "layer_norm_forward";
  checks::float_on(x, device, op, "x");
  checks::matrix(x, op, "x");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_f32_shape(gamma, {cols}, device, op, "gamma");
  check_f32_shape(beta, {cols}, device, op, "beta");
  check_float_shape(y, {rows, cols}, device, op, "y");
  check_f32_shape(mean, {rows}, device, op, "mean");
  check_f32_shape(rstd, {rows}, device, op, "rstd");
  return {rows, cols};
}

std::array<int64_t, 2> check_layer_norm_backward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Tensor& dy, const Tensor& dx,
                                                 const Tensor& dgamma, const Tensor& dbeta,
                                                 const Device& device) {
  const char* op = "layer_norm_backward";
  checks::float_on(x, device, op, "x");
  checks::matrix(x, op, "x");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_f32_shape(gamma, {cols}, device, op, "gamma");
  check_f32_shape(mean, {rows}, device, op, "mean");
  check_f32_shape(rstd, {rows}, device, op, "rstd");
  check_float_shape(dy, {rows, cols}, device, op, "dy");
  // Any of the three gradients may be undefined (not wanted).
  if (dx.defined()) check_float_shape(dx, {rows, cols}, device, op, "dx");
  if (dgamma.defined()) check_f32_shape(dgamma, {cols}, device, op, "dgamma");
  if (dbeta.defined()) check_f32_shape(dbeta, {cols}, device, op, "dbeta");
  return {rows, cols};
}

void check_clip_coef(const Tensor& norm, const Tensor& coef, const Device& device) {
  checks::scalar(norm, DType::f32, device, "clip_coef", "norm");
  checks::scalar(coef, DType::f32, device, "clip_coef", "coef");
}
// ---- the MLP's Linear + GELU pair ----

namespace {

void check_float_matrix(const Tensor& t, const Device& device, const char* op, const char* name) {
  checks::float_on(t, device, op, name);
  checks::rank(t, 2, op, name);
}

void check_dims(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* name) {
  if (t.dim(0) != rows || t.dim(1) != cols) {
    checks::fail(op, std::string(name) + " " + t.describe() + " must be [" + std::to_string(rows) +
                         ", " + std::to_string(cols) + "]");
  }
}

void check_same_dtype(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                      const char* ref_name) {
  if (t.dtype() != ref.dtype()) {
    checks::fail(op, std::string(name) + " " + t.describe() + " must have " + ref_name +
                         "'s dtype (" + ref.describe() + ")");
  }
}

}  // namespace

void check_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& pre,
                               const Tensor& y, const Device& device) {
  const char* op = "linear_gelu_forward";
  check_float_matrix(x, device, op, "x [R, I]");
  check_float_matrix(w, device, op, "w [O, I]");
  check_float_matrix(pre, device, op, "pre [R, O]");
  check_float_matrix(y, device, op, "y [R, O]");
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  check_dims(w, out, in, op, "w");
  check_dims(pre, rows, out, op, "pre");
  checks::same_shape(y, pre, op, "y", "pre");
  check_same_dtype(y, pre, op, "y", "pre");
  if (b.defined()) {
    checks::float_on(b, device, op, "b");
    checks::rank(b, 1, op, "b [O]");
    if (b.dim(0) != out)
      checks::fail(op, "b " + b.describe() + " must have O = " + std::to_string(out) + " elements");
  }
  for (const auto& [in_t, name] : {std::pair{&x, "x"}, {&w, "w"}, {&b, "b"}}) {
    checks::disjoint(pre, *in_t, op, "pre", name);
    checks::disjoint(y, *in_t, op, "y", name);
  }
  checks::disjoint(y, pre, op, "y", "pre");
}

void check_linear_gelu_backward(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                const Tensor& dpre, const Tensor& scratch, const Device& device) {
  const char* op = "linear_gelu_backward_input";
  check_float_matrix(dy, device, op, "dy [R, O]");
  check_float_matrix(w, device, op, "w [O, I]");
  check_float_matrix(pre, device, op, "pre [R, I]");
  check_float_matrix(dpre, device, op, "dpre [R, I]");
  const int64_t rows = dy.dim(0), out = dy.dim(1), in = w.dim(1);
  check_dims(w, out, in, op, "w");
  check_dims(pre, rows, in, op, "pre");
  checks::same_shape(dpre, pre, op, "dpre", "pre");
  check_same_dtype(dpre, pre, op, "dpre", "pre");
  for (const auto& [in_t, name] : {std::pair{&dy, "dy"}, {&w, "w"}, {&pre, "pre"}}) {
    checks::disjoint(dpre, *in_t, op, "dpre", name);
  }
  check_float_matrix(scratch, device, op, "scratch [R, I]");
  checks::same_shape(scratch, dpre, op, "scratch", "dpre");
  check_same_dtype(scratch, dpre, op, "scratch", "dpre");
  for (const auto& [t, name] : {std::pair{&dy, "dy"}, {&w, "w"}, {&pre, "pre"}, {&dpre, "dpre"}}) {
    checks::disjoint(scratch, *t, op, "scratch", name);
  }
}

// ---- residual add + LayerNorm, and LayerNorm backward into an accumulated gradient ----

namespace {

void check_shape_is(const Tensor& t, const Shape& shape, const char* op, const char* name) {
  if (t.shape() != shape) {
    checks::fail(op,
                 std::string(name) + " " + t.describe() + " must have shape " + shape_str(shape));
  }
}

// Every pair of `tensors` (the undefined ones skipped) shares no byte.
void check_pairwise_disjoint(std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                             const char* op) {
  for (auto a = tensors.begin(); a != tensors.end(); ++a) {
    for (auto b = a + 1; b != tensors.end(); ++b) {
      checks::disjoint(*a->first, *b->first, op, a->second, b->second);
    }
  }
}

}  // namespace

std::array<int64_t, 2> check_residual_layer_norm(const Tensor& x, const Tensor& r,
                                                 const Tensor& sum, const Tensor& gamma,
                                                 const Tensor& beta, const Tensor& y,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Device& device) {
  const char* op = "residual_layer_norm_forward";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&r, "r"},
                                {&sum, "sum"},
                                {&gamma, "gamma"},
                                {&beta, "beta"},
                                {&y, "y"},
                                {&mean, "mean"},
                                {&rstd, "rstd"}}) {
    checks::on(*t, device, op, name);
  }
  checks::rank(x, 2, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  checks::dtype(x, DType::f32, op, "x (the f32 residual stream)");
  checks::floating(r, op, "r");
  check_shape_is(r, x.shape(), op, "r");
  checks::dtype(sum, DType::f32, op, "sum");
  check_shape_is(sum, x.shape(), op, "sum");
  checks::floating(y, op, "y");
  check_shape_is(y, x.shape(), op, "y");
  for (const auto& [t, name, n] : {std::tuple{&gamma, "gamma", cols},
                                   {&beta, "beta", cols},
                                   {&mean, "mean", rows},
                                   {&rstd, "rstd", rows}}) {
    checks::dtype(*t, DType::f32, op, name);
    check_shape_is(*t, {n}, op, name);
  }
  // sum may be x itself (each element is read before it is written); nothing else may overlap
  // an output.
  const bool in_place = sum.data() == x.data() && sum.nbytes() == x.nbytes();
  if (!in_place) checks::disjoint(sum, x, op, "sum", "x");
  for (const auto& [t, name] :
       {std::pair{&r, "r"}, {&gamma, "gamma"}, {&beta, "beta"}, {&x, "x"}}) {
    checks::disjoint(y, *t, op, "y", name);
    checks::disjoint(mean, *t, op, "mean", name);
    checks::disjoint(rstd, *t, op, "rstd", name);
  }
  check_pairwise_disjoint({{&sum, "sum"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}}, op);
  checks::disjoint(sum, r, op, "sum", "r");
  checks::disjoint(sum, gamma, op, "sum", "gamma");
  checks::disjoint(sum, beta, op, "sum", "beta");
  return {rows, cols};
}

std::array<int64_t, 2> check_layer_norm_backward_accumulate(
    const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
    const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& scratch,
    const Device& device) {
  const char* op = "layer_norm_backward_accumulate";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&gamma, "gamma"},
                                {&mean, "mean"},
                                {&rstd, "rstd"},
                                {&dy, "dy"},
                                {&dx, "dx"}}) {
    checks::on(*t, device, op, name);
  }
  checks::rank(x, 2, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  checks::floating(x, op, "x");
  checks::floating(dy, op, "dy");
  check_shape_is(dy, x.shape(), op, "dy");
  checks::floating(dx, op, "dx");
  check_shape_is(dx, x.shape(), op, "dx");
  for (const auto& [t, name, n] :
       {std::tuple{&gamma, "gamma", cols}, {&mean, "mean", rows}, {&rstd, "rstd", rows}}) {
    checks::dtype(*t, DType::f32, op, name);
    check_shape_is(*t, {n}, op, name);
  }
  for (const auto& [t, name] : {std::pair{&dgamma, "dgamma"}, {&dbeta, "dbeta"}}) {
    if (!t->defined()) continue;
    checks::on(*t, device, op, name);
    checks::dtype(*t, DType::f32, op, name);
    check_shape_is(*t, {cols}, op, name);
  }
  if (scratch.defined()) {
    checks::on(scratch, device, op, "scratch");
    checks::dtype(scratch, DType::f32, op, "scratch");
    if (scratch.numel() < static_cast<size_t>(rows * cols)) {
      checks::fail(op, "scratch " + scratch.describe() +
                           " must hold >= " + std::to_string(rows * cols) + " f32 elements");
    }
  }
  // dx and the scratch are written while every other operand is read (or accumulated into).
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&gamma, "gamma"},
                                {&mean, "mean"},
                                {&rstd, "rstd"},
                                {&dy, "dy"},
                                {&dgamma, "dgamma"},
                                {&dbeta, "dbeta"}}) {
    checks::disjoint(dx, *t, op, "dx", name);
    checks::disjoint(scratch, *t, op, "scratch", name);
  }
  checks::disjoint(scratch, dx, op, "scratch", "dx");
  return {rows, cols};
}
}  // namespace ampctl

// ---- the Llama / Qwen block's RMSNorm and SwiGLU ----

namespace ampctl {

std::array<int64_t, 2> check_rms_norm_forward(const Tensor& x, const Tensor& weight,
                                              const Tensor& y, const Tensor& rstd,
                                              const Device& device) {
  const char* op = "rms_norm_forward";
  checks::float_on(x, device, op, "x");
  checks::matrix(x, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_f32_shape(weight, {cols}, device, op, "weight");
  check_float_shape(y, {rows, cols}, device, op, "y");
  check_f32_shape(rstd, {rows}, device, op, "rstd");
  // y may be x itself (each row is read whole before it is written); nothing else overlaps.
  const bool in_place = y.data() == x.data() && y.nbytes() == x.nbytes();
  if (!in_place) checks::disjoint(y, x, op, "y", "x");
  checks::disjoint(y, weight, op, "y", "weight");
  checks::disjoint(y, rstd, op, "y", "rstd");
  checks::disjoint(rstd, x, op, "rstd", "x");
  checks::disjoint(rstd, weight, op, "rstd", "weight");
  return {rows, cols};
}

std::array<int64_t, 2> check_residual_rms_norm(const Tensor& x, const Tensor& r, const Tensor& sum,
                                               const Tensor& weight, const Tensor& y,
                                               const Tensor& rstd, const Device& device) {
  const char* op = "residual_rms_norm_forward";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&r, "r"},
                                {&sum, "sum"},
                                {&weight, "weight"},
                                {&y, "y"},
                                {&rstd, "rstd"}}) {
    checks::on(*t, device, op, name);
  }
  checks::rank(x, 2, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  checks::dtype(x, DType::f32, op, "x (the f32 residual stream)");
  checks::floating(r, op, "r");
  check_shape_is(r, x.shape(), op, "r");
  checks::dtype(sum, DType::f32, op, "sum");
  check_shape_is(sum, x.shape(), op, "sum");
  checks::floating(y, op, "y");
  check_shape_is(y, x.shape(), op, "y");
  checks::dtype(weight, DType::f32, op, "weight");
  check_shape_is(weight, {cols}, op, "weight");
  checks::dtype(rstd, DType::f32, op, "rstd");
  check_shape_is(rstd, {rows}, op, "rstd");
  const bool in_place = sum.data() == x.data() && sum.nbytes() == x.nbytes();
  if (!in_place) checks::disjoint(sum, x, op, "sum", "x");
  for (const auto& [t, name] : {std::pair{&r, "r"}, {&weight, "weight"}, {&x, "x"}}) {
    checks::disjoint(y, *t, op, "y", name);
    checks::disjoint(rstd, *t, op, "rstd", name);
  }
  check_pairwise_disjoint({{&sum, "sum"}, {&y, "y"}, {&rstd, "rstd"}}, op);
  checks::disjoint(sum, r, op, "sum", "r");
  checks::disjoint(sum, weight, op, "sum", "weight");
  return {rows, cols};
}

std::array<int64_t, 2> check_rms_norm_backward(const Tensor& x, const Tensor& weight,
                                               const Tensor& rstd, const Tensor& dy,
                                               const Tensor& dx, const Tensor& dweight,
                                               bool accumulate, const Tensor& dy_weight,
                                               const Device& device) {
  const char* op = "rms_norm_backward";
  checks::float_on(x, device, op, "x");
  checks::matrix(x, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_f32_shape(weight, {cols}, device, op, "weight");
  check_f32_shape(rstd, {rows}, device, op, "rstd");
  check_float_shape(dy, {rows, cols}, device, op, "dy");
  if (accumulate && !dx.defined()) checks::fail(op, "accumulate needs dx");
  if (dx.defined()) check_float_shape(dx, {rows, cols}, device, op, "dx");
  if (dweight.defined()) check_f32_shape(dweight, {cols}, device, op, "dweight");
  // dx may be dy itself (each row is read whole before it is written) unless it accumulates;
  // dweight is read and written, so it overlaps nothing.
  const bool dx_is_dy = dx.defined() && dx.data() == dy.data() && dx.nbytes() == dy.nbytes();
  if (accumulate || !dx_is_dy) checks::disjoint(dx, dy, op, "dx", "dy");
  for (const auto& [t, name] : {std::pair{&x, "x"}, {&weight, "weight"}, {&rstd, "rstd"}}) {
    checks::disjoint(dx, *t, op, "dx", name);
    checks::disjoint(dweight, *t, op, "dweight", name);
  }
  checks::disjoint(dweight, dy, op, "dweight", "dy");
  checks::disjoint(dweight, dx, op, "dweight", "dx");
  if (dy_weight.defined()) {
    check_f32_shape(dy_weight, {rows, cols}, device, op, "dy_weight");
    for (const auto& [t, name] : {std::pair{&x, "x"},
                                  {&weight, "weight"},
                                  {&rstd, "rstd"},
                                  {&dy, "dy"},
                                  {&dx, "dx"},
                                  {&dweight, "dweight"}}) {
      checks::disjoint(dy_weight, *t, op, "dy_weight", name);
    }
  }
  return {rows, cols};
}

std::array<int64_t, 2> check_swiglu_forward(const Tensor& gate_up, const Tensor& y,
                                            const Device& device) {
  const char* op = "swiglu_forward";
  checks::float_on(gate_up, device, op, "gate_up");
  checks::matrix(gate_up, op, "gate_up [R, 2I]");
  const int64_t rows = gate_up.dim(0), width = gate_up.dim(1);
  if (width % 2 != 0) {
    checks::fail(op, "gate_up " + gate_up.describe() + " must have an even width (gate, then up)");
  }
  check_float_shape(y, {rows, width / 2}, device, op, "y");
  checks::disjoint(y, gate_up, op, "y", "gate_up");
  return {rows, width / 2};
}

std::array<int64_t, 2> check_swiglu_backward(const Tensor& gate_up, const Tensor& dy,
                                             const Tensor& dgate_up, const Tensor& dy_up,
                                             const Device& device) {
  const char* op = "swiglu_backward";
  checks::float_on(gate_up, device, op, "gate_up");
  checks::matrix(gate_up, op, "gate_up [R, 2I]");
  const int64_t rows = gate_up.dim(0), width = gate_up.dim(1);
  if (width % 2 != 0) {
    checks::fail(op, "gate_up " + gate_up.describe() + " must have an even width (gate, then up)");
  }
  check_float_shape(dy, {rows, width / 2}, device, op, "dy");
  check_float_shape(dgate_up, {rows, width}, device, op, "dgate_up");
  checks::disjoint(dgate_up, gate_up, op, "dgate_up", "gate_up");
  checks::disjoint(dgate_up, dy, op, "dgate_up", "dy");
  if (dy_up.defined()) {
    check_f32_shape(dy_up, {rows, width / 2}, device, op, "dy_up");
    for (const auto& [t, name] :
         {std::pair{&gate_up, "gate_up"}, {&dy, "dy"}, {&dgate_up, "dgate_up"}}) {
      checks::disjoint(dy_up, *t, op, "dy_up", name);
    }
  }
  return {rows, width / 2};
}

}  // namespace ampctl
