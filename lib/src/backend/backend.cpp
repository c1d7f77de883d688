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
  if (args.decay_mask.defined())
    check_buffer(args.decay_mask, args.params, device, op, "decay_mask");
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

// ---- the transformer ops' shared argument checks ----

namespace {

[[noreturn]] void invalid_op(const char* op, const std::string& what) {
  throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + what};
}

void check_operand(const Tensor& t, const Device& device, const char* op, const char* name) {
  check_on(t, device, op, name);
}

void check_dtype_is(const Tensor& t, DType d, const char* op, const char* name) {
  if (t.dtype() != d) {
    invalid_op(op, std::string(name) + " must be " + dtype_name(d) + ", got " + t.describe());
  }
}

void check_floating(const Tensor& t, const char* op, const char* name) {
  if (!is_floating(t.dtype())) {
    invalid_op(op, std::string(name) + " must be f32, f16 or bf16, got " + t.describe());
  }
}

void check_rank(const Tensor& t, size_t rank, const char* op, const char* name) {
  if (t.rank() != rank) {
    invalid_op(op, std::string(name) + " must have rank " + std::to_string(rank) + ", got " +
                       t.describe());
  }
}

// Byte ranges on one device (the same address space for host and CUDA pointers).
bool storage_overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

void check_disjoint(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
                    const char* in_name) {
  if (storage_overlaps(out, in)) {
    invalid_op(op, std::string(out_name) + " " + out.describe() + " overlaps " + in_name + " " +
                       in.describe());
  }
}

}  // namespace

Backend::EmbeddingDims Backend::check_embedding_forward(const Tensor& tokens, const Tensor& wte,
                                                        const Tensor& wpe, const Tensor& out,
                                                        const Device& device) {
  const char* op = "embedding_forward";
  check_operand(tokens, device, op, "tokens");
  check_operand(wte, device, op, "wte");
  check_operand(wpe, device, op, "wpe");
  check_operand(out, device, op, "out");
  check_dtype_is(tokens, DType::i32, op, "tokens");
  check_rank(tokens, 2, op, "tokens");
  check_dtype_is(wte, DType::f32, op, "wte");
  check_rank(wte, 2, op, "wte");
  check_dtype_is(wpe, DType::f32, op, "wpe");
  check_rank(wpe, 2, op, "wpe");
  check_dtype_is(out, DType::f32, op, "out");
  const EmbeddingDims d{tokens.dim(0), tokens.dim(1), wte.dim(0), wte.dim(1)};
  if (wpe.dim(1) != d.channels || wpe.dim(0) < d.time) {
    invalid_op(op, "wpe " + wpe.describe() + " must be [P, " + std::to_string(d.channels) +
                       "] with P >= T = " + std::to_string(d.time));
  }
  if (out.rank() != 2 || out.dim(0) != d.batch * d.time || out.dim(1) != d.channels) {
    invalid_op(op, "out " + out.describe() + " must be [B*T, C] = [" +
                       std::to_string(d.batch * d.time) + ", " + std::to_string(d.channels) + "]");
  }
  check_disjoint(out, tokens, op, "out", "tokens");
  check_disjoint(out, wte, op, "out", "wte");
  check_disjoint(out, wpe, op, "out", "wpe");
  return d;
}

Backend::EmbeddingDims Backend::check_embedding_backward(const Tensor& tokens, const Tensor& dout,
                                                         const Tensor& dwte, const Tensor& dwpe,
                                                         const Device& device) {
  const char* op = "embedding_backward";
  check_operand(tokens, device, op, "tokens");
  check_operand(dout, device, op, "dout");
  check_operand(dwpe, device, op, "dwpe");
  check_dtype_is(tokens, DType::i32, op, "tokens");
  check_rank(tokens, 2, op, "tokens");
  check_dtype_is(dout, DType::f32, op, "dout");
  check_rank(dout, 2, op, "dout");
  check_dtype_is(dwpe, DType::f32, op, "dwpe");
  check_rank(dwpe, 2, op, "dwpe");
  EmbeddingDims d{tokens.dim(0), tokens.dim(1), 0, dout.dim(1)};
  if (dout.dim(0) != d.batch * d.time) {
    invalid_op(op, "dout " + dout.describe() +
                       " must have B*T = " + std::to_string(d.batch * d.time) + " rows (tokens " +
                       tokens.describe() + ")");
  }
  if (dwpe.dim(1) != d.channels || dwpe.dim(0) < d.time) {
    invalid_op(op, "dwpe " + dwpe.describe() + " must be [P, " + std::to_string(d.channels) +
                       "] with P >= T = " + std::to_string(d.time));
  }
  if (dwte.defined()) {
    check_operand(dwte, device, op, "dwte");
    check_dtype_is(dwte, DType::f32, op, "dwte");
    check_rank(dwte, 2, op, "dwte");
    if (dwte.dim(1) != d.channels) {
      invalid_op(op, "dwte " + dwte.describe() + " must have C = " + std::to_string(d.channels) +
                         " columns");
    }
    d.vocab = dwte.dim(0);
    check_disjoint(dwte, dwpe, op, "dwte", "dwpe");
    check_disjoint(dwte, dout, op, "dwte", "dout");
    check_disjoint(dwte, tokens, op, "dwte", "tokens");
  }
  check_disjoint(dwpe, dout, op, "dwpe", "dout");
  check_disjoint(dwpe, tokens, op, "dwpe", "tokens");
  return d;
}

Backend::GemmBatchedDims Backend::check_gemm_batched(const Tensor& a, bool trans_a, const Tensor& b,
                                                     bool trans_b, const Tensor& c,
                                                     const Device& device) {
  const char* op = "gemm_batched";
  check_operand(a, device, op, "A");
  check_operand(b, device, op, "B");
  check_operand(c, device, op, "C");
  check_floating(a, op, "A");
  check_floating(b, op, "B");
  check_floating(c, op, "C");
  // The leading dims' product is the batch count; the last two dims are the matrix.
  const auto split = [&](const Tensor& t, const char* name, int64_t& rows, int64_t& cols) {
    if (t.rank() < 3) {
      invalid_op(op, std::string(name) + " must have rank 3 or more, got " + t.describe());
    }
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < t.rank(); ++i) batch *= t.dim(i);
    rows = t.dim(t.rank() - 2);
    cols = t.dim(t.rank() - 1);
    return batch;
  };
  int64_t ar, ac, br, bc, cr, cc;
  const int64_t batch = split(a, "A", ar, ac);
  const int64_t batch_b = split(b, "B", br, bc);
  const int64_t batch_c = split(c, "C", cr, cc);
  const int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac;
  const int64_t kb = trans_b ? bc : br, n = trans_b ? br : bc;
  if (batch_b != batch || batch_c != batch || kb != k || cr != m || cc != n) {
    invalid_op(op, "shapes do not match: A " + a.describe() + (trans_a ? " (transposed)" : "") +
                       ", B " + b.describe() + (trans_b ? " (transposed)" : "") + ", C " +
                       c.describe());
  }
  check_disjoint(c, a, op, "C", "A");
  check_disjoint(c, b, op, "C", "B");
  return GemmBatchedDims{batch, m, n, k};
}

Backend::HeadsDims Backend::check_heads(const Tensor& rows, int64_t column, const Tensor& heads,
                                        const char* op, const Device& device) {
  check_operand(rows, device, op, "rows");
  check_operand(heads, device, op, "heads");
  check_rank(rows, 2, op, "rows [B*T, W]");
  check_rank(heads, 4, op, "heads [B, H, T, hs]");
  if (rows.dtype() != heads.dtype()) {
    invalid_op(
        op, "rows " + rows.describe() + " and heads " + heads.describe() + " must share one dtype");
  }
  const HeadsDims d{heads.dim(0), heads.dim(1), heads.dim(2), heads.dim(3), rows.dim(1)};
  if (rows.dim(0) != d.batch * d.time) {
    invalid_op(op, "rows " + rows.describe() + " must have B*T = " +
                       std::to_string(d.batch * d.time) + " rows (heads " + heads.describe() + ")");
  }
  if (column < 0 || column + d.heads * d.head_size > d.width) {
    invalid_op(op, "columns [" + std::to_string(column) + ", " +
                       std::to_string(column + d.heads * d.head_size) + ") outside rows " +
                       rows.describe());
  }
  check_disjoint(heads, rows, op, "heads", "rows");
  return d;
}

namespace {

// [N, T, T]: returns T.
int64_t check_square_rows(const Tensor& t, const char* op, const char* name) {
  check_rank(t, 3, op, name);
  if (t.dim(1) != t.dim(2)) {
    invalid_op(op, std::string(name) + " must be [N, T, T], got " + t.describe());
  }
  return t.dim(1);
}

void check_same_shape(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                      const char* ref_name) {
  if (t.shape() != ref.shape()) {
    invalid_op(op, std::string(name) + " " + t.describe() + " and " + ref_name + " " +
                       ref.describe() + " must have one shape");
  }
}

}  // namespace

Backend::SoftmaxDims Backend::check_causal_softmax_forward(const Tensor& scores,
                                                           const Tensor& probs,
                                                           const Device& device) {
  const char* op = "causal_softmax_forward";
  check_operand(scores, device, op, "scores");
  check_operand(probs, device, op, "probs");
  check_floating(scores, op, "scores");
  const int64_t t = check_square_rows(scores, op, "scores");
  check_same_shape(probs, scores, op, "probs", "scores");
  if (probs.dtype() != DType::f32 && probs.dtype() != scores.dtype()) {
    invalid_op(op, "probs " + probs.describe() + " must be f32 or scores' dtype (" +
                       dtype_name(scores.dtype()) + ")");
  }
  if (storage_overlaps(probs, scores) &&
      (probs.data() != scores.data() || probs.dtype() != scores.dtype())) {
    invalid_op(op, "probs " + probs.describe() + " partly overlaps scores " + scores.describe() +
                       " (in place needs the same elements and dtype)");
  }
  return SoftmaxDims{scores.dim(0), t};
}

Backend::SoftmaxDims Backend::check_causal_softmax_backward(const Tensor& probs,
                                                            const Tensor& dprobs,
                                                            const Tensor& dscores,
                                                            const Device& device) {
  const char* op = "causal_softmax_backward";
  check_operand(probs, device, op, "probs");
  check_operand(dprobs, device, op, "dprobs");
  check_operand(dscores, device, op, "dscores");
  check_floating(probs, op, "probs");
  check_floating(dprobs, op, "dprobs");
  check_floating(dscores, op, "dscores");
  const int64_t t = check_square_rows(probs, op, "probs");
  check_same_shape(dprobs, probs, op, "dprobs", "probs");
  check_same_shape(dscores, probs, op, "dscores", "probs");
  check_disjoint(dscores, probs, op, "dscores", "probs");
  check_disjoint(dscores, dprobs, op, "dscores", "dprobs");
  return SoftmaxDims{probs.dim(0), t};
}

}  // namespace ampctl
