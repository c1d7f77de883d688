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

Backend::AttentionDims Backend::check_attention(std::initializer_list<const Tensor*> inputs,
                                                std::initializer_list<const Tensor*> outputs,
                                                const AttentionBuffers& buffers,
                                                const AttentionSizes& sizes, const char* op,
                                                const Device& device) {
  const Tensor& q = **inputs.begin();
  check_operand(q, device, op, "q");
  check_floating(q, op, "q");
  check_rank(q, 3, op, "q [N, T, hs]");
  auto check_like_q = [&](const Tensor& t, const char* name) {
    check_operand(t, device, op, name);
    if (t.dtype() != q.dtype()) {
      invalid_op(op, std::string(name) + " " + t.describe() + " must have q's dtype (" +
                         q.describe() + ")");
    }
    check_same_shape(t, q, op, name, "q");
  };
  static const char* const kInputNames[] = {"q", "k", "v", "y", "dy"};
  static const char* const kOutputNames[] = {"dq", "dk", "dv"};
  size_t i = 0;
  for (const Tensor* t : inputs) check_like_q(*t, kInputNames[i++]);
  const Tensor* const* outs = outputs.begin();  // no copy: called inside a step (no allocation)
  const bool forward = outputs.size() == 1;
  for (size_t a = 0; a < outputs.size(); ++a) {
    const char* name = forward ? "y" : kOutputNames[a];
    check_like_q(*outs[a], name);
    size_t j = 0;
    for (const Tensor* in : inputs) check_disjoint(*outs[a], *in, op, name, kInputNames[j++]);
    for (size_t b = 0; b < a; ++b) check_disjoint(*outs[a], *outs[b], op, name, kOutputNames[b]);
  }
  auto check_buffer = [&](const Tensor& b, int64_t need, DType dtype, const char* name) {
    if (need == 0) return;
    check_operand(b, device, op, name);
    if (b.dtype() != dtype || b.numel() < static_cast<size_t>(need)) {
      invalid_op(op, std::string(name) + " " + b.describe() + " must hold >= " +
                         std::to_string(need) + " " + dtype_name(dtype) + " elements");
    }
    for (const Tensor* t : outputs) check_disjoint(b, *t, op, name, "an output");
    for (const Tensor* t : inputs) check_disjoint(b, *t, op, name, "an input");
  };
  check_buffer(buffers.saved_f32, sizes.saved_f32, DType::f32, "saved_f32");
  check_buffer(buffers.saved_lowp, sizes.saved_lowp, q.dtype(), "saved_lowp");
  check_buffer(buffers.scratch_f32, sizes.scratch_f32, DType::f32, "scratch_f32");
  check_buffer(buffers.scratch_lowp, sizes.scratch_lowp, q.dtype(), "scratch_lowp");
  return AttentionDims{q.dim(0), q.dim(1), q.dim(2)};
}

AttentionSizes Backend::attention_workspace(int64_t batch_heads, int64_t time, int64_t head_size,
                                            DType dtype) const {
  (void)head_size;
  const int64_t m = batch_heads * time * time;
  AttentionSizes s;
  s.saved_f32 = m;                             // probs
  s.saved_lowp = dtype == DType::f32 ? 0 : m;  // att, probs in the compute dtype
  s.scratch_lowp = 2 * m;                      // scores / dscores, datt
  return s;
}

AttentionBuffers make_attention_buffers(Backend& b, int64_t batch_heads, int64_t time,
                                        int64_t head_size, DType dtype) {
  const AttentionSizes s = b.attention_workspace(batch_heads, time, head_size, dtype);
  AttentionBuffers out;
  if (s.saved_f32 > 0) out.saved_f32 = b.zeros({s.saved_f32}, DType::f32);
  if (s.saved_lowp > 0) out.saved_lowp = b.zeros({s.saved_lowp}, dtype);
  if (s.scratch_f32 > 0) out.scratch_f32 = b.zeros({s.scratch_f32}, DType::f32);
  if (s.scratch_lowp > 0) out.scratch_lowp = b.zeros({s.scratch_lowp}, dtype);
  return out;
}

void Backend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                                const Tensor& y, const AttentionBuffers& buffers) {
  const char* op = "attention_forward";
  check_operand(q, device(), op, "q");
  check_rank(q, 3, op, "q [N, T, hs]");
  const AttentionSizes sizes =
      Backend::attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d = check_attention({&q, &k, &v}, {&y}, buffers, sizes, op, device());
  const Shape att{d.count, d.time, d.time};
  const Tensor scores = buffers.scratch_lowp.view(0, att);
  gemm_batched(q, false, k, true, scores);
  const Tensor probs = buffers.saved_f32.view(0, att);
  causal_softmax_forward(scores, scale, /*round_scaled=*/true, probs);
  // att @ v casts its fp32 operand to the compute dtype (autocast); f32 reads probs itself.
  const Tensor a = q.dtype() == DType::f32 ? probs : buffers.saved_lowp.view(0, att);
  if (q.dtype() != DType::f32) cast(probs, a);
  gemm_batched(a, false, v, false, y);
}

void Backend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                 const Tensor& dy, float scale, const Tensor& dq, const Tensor& dk,
                                 const Tensor& dv, const AttentionBuffers& buffers) {
  const char* op = "attention_backward";
  check_operand(q, device(), op, "q");
  check_rank(q, 3, op, "q [N, T, hs]");
  const AttentionSizes sizes =
      Backend::attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d =
      check_attention({&q, &k, &v, &y, &dy}, {&dq, &dk, &dv}, buffers, sizes, op, device());
  const Shape att{d.count, d.time, d.time};
  const int64_t m = d.count * d.time * d.time;
  const Tensor probs = buffers.saved_f32.view(0, att);
  const Tensor a = q.dtype() == DType::f32 ? probs : buffers.saved_lowp.view(0, att);
  const Tensor datt = buffers.scratch_lowp.view(0, att);
  const Tensor dscores = buffers.scratch_lowp.view(static_cast<size_t>(m), att);
  gemm_batched(dy, false, v, true, datt);  // d(att) of y = att @ v
  gemm_batched(a, true, dy, false, dv);
  causal_softmax_backward(probs, datt, scale, /*round_scaled=*/true, dscores);
  gemm_batched(dscores, false, k, false, dq);
  gemm_batched(dscores, true, q, false, dk);
}

// ---- the MLP's Linear + GELU pair ----

namespace {

void check_float_matrix(const Tensor& t, const Device& device, const char* op, const char* name) {
  check_operand(t, device, op, name);
  check_floating(t, op, name);
  check_rank(t, 2, op, name);
}

void check_dims(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* name) {
  if (t.dim(0) != rows || t.dim(1) != cols) {
    invalid_op(op, std::string(name) + " " + t.describe() + " must be [" + std::to_string(rows) +
                       ", " + std::to_string(cols) + "]");
  }
}

void check_same_dtype(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                      const char* ref_name) {
  if (t.dtype() != ref.dtype()) {
    invalid_op(op, std::string(name) + " " + t.describe() + " must have " + ref_name +
                       "'s dtype (" + ref.describe() + ")");
  }
}

}  // namespace

void Backend::check_linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                        const Tensor& pre, const Tensor& y, const Device& device) {
  const char* op = "linear_gelu_forward";
  check_float_matrix(x, device, op, "x [R, I]");
  check_float_matrix(w, device, op, "w [O, I]");
  check_float_matrix(pre, device, op, "pre [R, O]");
  check_float_matrix(y, device, op, "y [R, O]");
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  check_dims(w, out, in, op, "w");
  check_dims(pre, rows, out, op, "pre");
  check_same_shape(y, pre, op, "y", "pre");
  check_same_dtype(y, pre, op, "y", "pre");
  if (b.defined()) {
    check_operand(b, device, op, "b");
    check_floating(b, op, "b");
    check_rank(b, 1, op, "b [O]");
    if (b.dim(0) != out)
      invalid_op(op, "b " + b.describe() + " must have O = " + std::to_string(out) + " elements");
  }
  for (const auto& [in_t, name] : {std::pair{&x, "x"}, {&w, "w"}, {&b, "b"}}) {
    check_disjoint(pre, *in_t, op, "pre", name);
    check_disjoint(y, *in_t, op, "y", name);
  }
  check_disjoint(y, pre, op, "y", "pre");
}

void Backend::check_linear_gelu_backward(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                         const Tensor& dpre, const Tensor& scratch,
                                         const Device& device) {
  const char* op = "linear_gelu_backward_input";
  check_float_matrix(dy, device, op, "dy [R, O]");
  check_float_matrix(w, device, op, "w [O, I]");
  check_float_matrix(pre, device, op, "pre [R, I]");
  check_float_matrix(dpre, device, op, "dpre [R, I]");
  const int64_t rows = dy.dim(0), out = dy.dim(1), in = w.dim(1);
  check_dims(w, out, in, op, "w");
  check_dims(pre, rows, in, op, "pre");
  check_same_shape(dpre, pre, op, "dpre", "pre");
  check_same_dtype(dpre, pre, op, "dpre", "pre");
  for (const auto& [in_t, name] : {std::pair{&dy, "dy"}, {&w, "w"}, {&pre, "pre"}}) {
    check_disjoint(dpre, *in_t, op, "dpre", name);
  }
  check_float_matrix(scratch, device, op, "scratch [R, I]");
  check_same_shape(scratch, dpre, op, "scratch", "dpre");
  check_same_dtype(scratch, dpre, op, "scratch", "dpre");
  for (const auto& [t, name] : {std::pair{&dy, "dy"}, {&w, "w"}, {&pre, "pre"}, {&dpre, "dpre"}}) {
    check_disjoint(scratch, *t, op, "scratch", name);
  }
}

void Backend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                  const Tensor& pre, const Tensor& y) {
  check_linear_gelu_forward(x, w, b, pre, y, device());
  linear_forward(x, w, b, pre);
  activation_forward(nn::ActivationKind::gelu_tanh, pre, y);
}

void Backend::linear_gelu_backward_input(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                         const Tensor& dpre, const Tensor& scratch) {
  check_linear_gelu_backward(dy, w, pre, dpre, scratch, device());
  // autocast: dy @ w is a lowp product; GeluBackward then widens it, multiplies and rounds.
  gemm(dy, /*trans_a=*/false, w, /*trans_b=*/false, scratch);
  activation_backward(nn::ActivationKind::gelu_tanh, pre, Tensor{}, scratch, dpre);
}

bool Backend::linear_gelu_fused(DType dtype, int64_t width) const {
  (void)dtype;
  (void)width;
  return false;
}

// ---- residual add + LayerNorm, and LayerNorm backward into an accumulated gradient ----

namespace {

void check_shape_is(const Tensor& t, const Shape& shape, const char* op, const char* name) {
  if (t.shape() != shape) {
    invalid_op(op, std::string(name) + " " + t.describe() + " must have shape " + shape_str(shape));
  }
}

// Every pair of `tensors` (the undefined ones skipped) shares no byte.
void check_pairwise_disjoint(std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                             const char* op) {
  for (auto a = tensors.begin(); a != tensors.end(); ++a) {
    for (auto b = a + 1; b != tensors.end(); ++b) {
      check_disjoint(*a->first, *b->first, op, a->second, b->second);
    }
  }
}

}  // namespace

std::array<int64_t, 2> Backend::check_residual_layer_norm(const Tensor& x, const Tensor& r,
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
    check_operand(*t, device, op, name);
  }
  check_rank(x, 2, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_dtype_is(x, DType::f32, op, "x (the f32 residual stream)");
  check_floating(r, op, "r");
  check_shape_is(r, x.shape(), op, "r");
  check_dtype_is(sum, DType::f32, op, "sum");
  check_shape_is(sum, x.shape(), op, "sum");
  check_floating(y, op, "y");
  check_shape_is(y, x.shape(), op, "y");
  for (const auto& [t, name, n] : {std::tuple{&gamma, "gamma", cols},
                                   {&beta, "beta", cols},
                                   {&mean, "mean", rows},
                                   {&rstd, "rstd", rows}}) {
    check_dtype_is(*t, DType::f32, op, name);
    check_shape_is(*t, {n}, op, name);
  }
  // sum may be x itself (each element is read before it is written); nothing else may overlap
  // an output.
  const bool in_place = sum.data() == x.data() && sum.nbytes() == x.nbytes();
  if (!in_place) check_disjoint(sum, x, op, "sum", "x");
  for (const auto& [t, name] :
       {std::pair{&r, "r"}, {&gamma, "gamma"}, {&beta, "beta"}, {&x, "x"}}) {
    check_disjoint(y, *t, op, "y", name);
    check_disjoint(mean, *t, op, "mean", name);
    check_disjoint(rstd, *t, op, "rstd", name);
  }
  check_pairwise_disjoint({{&sum, "sum"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}}, op);
  check_disjoint(sum, r, op, "sum", "r");
  check_disjoint(sum, gamma, op, "sum", "gamma");
  check_disjoint(sum, beta, op, "sum", "beta");
  return {rows, cols};
}

void Backend::residual_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                          const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                          const Tensor& mean, const Tensor& rstd, float eps) {
  check_residual_layer_norm(x, r, sum, gamma, beta, y, mean, rstd, device());
  if (sum.data() != x.data()) copy(sum, x);
  add_(sum, r);
  layer_norm_forward(sum, gamma, beta, y, mean, rstd, eps);
}

std::array<int64_t, 2> Backend::check_layer_norm_backward_accumulate(
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
    check_operand(*t, device, op, name);
  }
  check_rank(x, 2, op, "x [R, C]");
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_floating(x, op, "x");
  check_floating(dy, op, "dy");
  check_shape_is(dy, x.shape(), op, "dy");
  check_floating(dx, op, "dx");
  check_shape_is(dx, x.shape(), op, "dx");
  for (const auto& [t, name, n] :
       {std::tuple{&gamma, "gamma", cols}, {&mean, "mean", rows}, {&rstd, "rstd", rows}}) {
    check_dtype_is(*t, DType::f32, op, name);
    check_shape_is(*t, {n}, op, name);
  }
  for (const auto& [t, name] : {std::pair{&dgamma, "dgamma"}, {&dbeta, "dbeta"}}) {
    if (!t->defined()) continue;
    check_operand(*t, device, op, name);
    check_dtype_is(*t, DType::f32, op, name);
    check_shape_is(*t, {cols}, op, name);
  }
  if (scratch.defined()) {
    check_operand(scratch, device, op, "scratch");
    check_dtype_is(scratch, DType::f32, op, "scratch");
    if (scratch.numel() < static_cast<size_t>(rows * cols)) {
      invalid_op(op, "scratch " + scratch.describe() +
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
    check_disjoint(dx, *t, op, "dx", name);
    check_disjoint(scratch, *t, op, "scratch", name);
  }
  check_disjoint(scratch, dx, op, "scratch", "dx");
  return {rows, cols};
}

void Backend::layer_norm_backward_accumulate(const Tensor& x, const Tensor& gamma,
                                             const Tensor& mean, const Tensor& rstd,
                                             const Tensor& dy, const Tensor& dx,
                                             const Tensor& dgamma, const Tensor& dbeta,
                                             const Tensor& scratch) {
  const auto [rows, cols] = check_layer_norm_backward_accumulate(x, gamma, mean, rstd, dy, dx,
                                                                 dgamma, dbeta, scratch, device());
  if (!scratch.defined()) {
    invalid_op("layer_norm_backward_accumulate",
               "this backend composes it and needs an f32 scratch of R*C elements");
  }
  const Tensor t = scratch.view(0, {rows, cols});
  layer_norm_backward(x, gamma, mean, rstd, dy, t, dgamma, dbeta);
  add_(dx, t);
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
