// The transformer family's argument checks (checks.h; backend.h, "transformer"), shared by both
// backends so that both refuse the same calls.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "checks.h"

namespace ampctl {

EmbeddingDims check_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                      const Tensor& out, const Device& device) {
  const char* op = "embedding_forward";
  checks::on(tokens, device, op, "tokens");
  checks::on(wte, device, op, "wte");
  checks::on(wpe, device, op, "wpe");
  checks::on(out, device, op, "out");
  checks::dtype(tokens, DType::i32, op, "tokens");
  checks::rank(tokens, 2, op, "tokens");
  checks::dtype(wte, DType::f32, op, "wte");
  checks::rank(wte, 2, op, "wte");
  checks::dtype(wpe, DType::f32, op, "wpe");
  checks::rank(wpe, 2, op, "wpe");
  checks::dtype(out, DType::f32, op, "out");
  const EmbeddingDims d{tokens.dim(0), tokens.dim(1), wte.dim(0), wte.dim(1)};
  if (wpe.dim(1) != d.channels || wpe.dim(0) < d.time) {
    checks::fail(op, "wpe " + wpe.describe() + " must be [P, " + std::to_string(d.channels) +
                         "] with P >= T = " + std::to_string(d.time));
  }
  if (out.rank() != 2 || out.dim(0) != d.batch * d.time || out.dim(1) != d.channels) {
    checks::fail(op, "out " + out.describe() + " must be [B*T, C] = [" +
                         std::to_string(d.batch * d.time) + ", " + std::to_string(d.channels) +
                         "]");
  }
  checks::disjoint(out, tokens, op, "out", "tokens");
  checks::disjoint(out, wte, op, "out", "wte");
  checks::disjoint(out, wpe, op, "out", "wpe");
  return d;
}

EmbeddingDims check_embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                       const Tensor& dwpe, const Device& device) {
  const char* op = "embedding_backward";
  checks::on(tokens, device, op, "tokens");
  checks::on(dout, device, op, "dout");
  checks::on(dwpe, device, op, "dwpe");
  checks::dtype(tokens, DType::i32, op, "tokens");
  checks::rank(tokens, 2, op, "tokens");
  checks::dtype(dout, DType::f32, op, "dout");
  checks::rank(dout, 2, op, "dout");
  checks::dtype(dwpe, DType::f32, op, "dwpe");
  checks::rank(dwpe, 2, op, "dwpe");
  EmbeddingDims d{tokens.dim(0), tokens.dim(1), 0, dout.dim(1)};
  if (dout.dim(0) != d.batch * d.time) {
    checks::fail(op, "dout " + dout.describe() +
                         " must have B*T = " + std::to_string(d.batch * d.time) + " rows (tokens " +
                         tokens.describe() + ")");
  }
  if (dwpe.dim(1) != d.channels || dwpe.dim(0) < d.time) {
    checks::fail(op, "dwpe " + dwpe.describe() + " must be [P, " + std::to_string(d.channels) +
                         "] with P >= T = " + std::to_string(d.time));
  }
  if (dwte.defined()) {
    checks::on(dwte, device, op, "dwte");
    checks::dtype(dwte, DType::f32, op, "dwte");
    checks::rank(dwte, 2, op, "dwte");
    if (dwte.dim(1) != d.channels) {
      checks::fail(op, "dwte " + dwte.describe() + " must have C = " + std::to_string(d.channels) +
                           " columns");
    }
    d.vocab = dwte.dim(0);
    checks::disjoint(dwte, dwpe, op, "dwte", "dwpe");
    checks::disjoint(dwte, dout, op, "dwte", "dout");
    checks::disjoint(dwte, tokens, op, "dwte", "tokens");
  }
  checks::disjoint(dwpe, dout, op, "dwpe", "dout");
  checks::disjoint(dwpe, tokens, op, "dwpe", "tokens");
  return d;
}

GemmBatchedDims check_gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                   const Tensor& c, const Device& device) {
  const char* op = "gemm_batched";
  checks::float_on(a, device, op, "A");
  checks::float_on(b, device, op, "B");
  checks::float_on(c, device, op, "C");
  // The leading dims' product is the batch count; the last two dims are the matrix.
  const auto split = [&](const Tensor& t, const char* name, int64_t& rows, int64_t& cols) {
    if (t.rank() < 3) {
      checks::fail(op, std::string(name) + " must have rank 3 or more, got " + t.describe());
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
    checks::fail(op, "shapes do not match: A " + a.describe() + (trans_a ? " (transposed)" : "") +
                         ", B " + b.describe() + (trans_b ? " (transposed)" : "") + ", C " +
                         c.describe());
  }
  checks::disjoint(c, a, op, "C", "A");
  checks::disjoint(c, b, op, "C", "B");
  return GemmBatchedDims{batch, m, n, k};
}

HeadsDims check_heads(const Tensor& rows, int64_t column, const Tensor& heads, const char* op,
                      const Device& device) {
  checks::on(rows, device, op, "rows");
  checks::on(heads, device, op, "heads");
  checks::rank(rows, 2, op, "rows [B*T, W]");
  checks::rank(heads, 4, op, "heads [B, H, T, hs]");
  if (rows.dtype() != heads.dtype()) {
    checks::fail(
        op, "rows " + rows.describe() + " and heads " + heads.describe() + " must share one dtype");
  }
  const HeadsDims d{heads.dim(0), heads.dim(1), heads.dim(2), heads.dim(3), rows.dim(1)};
  if (rows.dim(0) != d.batch * d.time) {
    checks::fail(op, "rows " + rows.describe() +
                         " must have B*T = " + std::to_string(d.batch * d.time) + " rows (heads " +
                         heads.describe() + ")");
  }
  if (column < 0 || column + d.heads * d.head_size > d.width) {
    checks::fail(op, "columns [" + std::to_string(column) + ", " +
                         std::to_string(column + d.heads * d.head_size) + ") outside rows " +
                         rows.describe());
  }
  checks::disjoint(heads, rows, op, "heads", "rows");
  return d;
}

namespace {

// [N, T, T]: returns T.
int64_t check_square_rows(const Tensor& t, const char* op, const char* name) {
  checks::rank(t, 3, op, name);
  if (t.dim(1) != t.dim(2)) {
    checks::fail(op, std::string(name) + " must be [N, T, T], got " + t.describe());
  }
  return t.dim(1);
}

}  // namespace

SoftmaxDims check_causal_softmax_forward(const Tensor& scores, const Tensor& probs,
                                         const Device& device) {
  const char* op = "causal_softmax_forward";
  checks::on(scores, device, op, "scores");
  checks::on(probs, device, op, "probs");
  checks::floating(scores, op, "scores");
  const int64_t t = check_square_rows(scores, op, "scores");
  checks::same_shape(probs, scores, op, "probs", "scores");
  if (probs.dtype() != DType::f32 && probs.dtype() != scores.dtype()) {
    checks::fail(op, "probs " + probs.describe() + " must be f32 or scores' dtype (" +
                         dtype_name(scores.dtype()) + ")");
  }
  if (checks::overlaps(probs, scores) &&
      (probs.data() != scores.data() || probs.dtype() != scores.dtype())) {
    checks::fail(op, "probs " + probs.describe() + " partly overlaps scores " + scores.describe() +
                         " (in place needs the same elements and dtype)");
  }
  return SoftmaxDims{scores.dim(0), t};
}

SoftmaxDims check_causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                          const Tensor& dscores, const Device& device) {
  const char* op = "causal_softmax_backward";
  checks::on(probs, device, op, "probs");
  checks::on(dprobs, device, op, "dprobs");
  checks::on(dscores, device, op, "dscores");
  checks::floating(probs, op, "probs");
  checks::floating(dprobs, op, "dprobs");
  checks::floating(dscores, op, "dscores");
  const int64_t t = check_square_rows(probs, op, "probs");
  checks::same_shape(dprobs, probs, op, "dprobs", "probs");
  checks::same_shape(dscores, probs, op, "dscores", "probs");
  checks::disjoint(dscores, probs, op, "dscores", "probs");
  checks::disjoint(dscores, dprobs, op, "dscores", "dprobs");
  return SoftmaxDims{probs.dim(0), t};
}

AttentionDims check_attention(std::initializer_list<const Tensor*> inputs,
                              std::initializer_list<const Tensor*> outputs,
                              const AttentionBuffers& buffers, const AttentionSizes& sizes,
                              const char* op, const Device& device) {
  const Tensor& q = **inputs.begin();
  checks::float_on(q, device, op, "q");
  checks::rank(q, 3, op, "q [N, T, hs]");
  const Tensor& k = **(inputs.begin() + 1);
  checks::on(k, device, op, "k");
  checks::rank(k, 3, op, "k [N / G, T, hs]");
  // Grouped-query attention: k and v hold N / G heads, G query heads sharing each.
  const int64_t kv_heads = k.dim(0);
  const bool empty = kv_heads == 0 && q.dim(0) == 0;  // no heads at all: G = 1
  if ((!empty && (kv_heads < 1 || q.dim(0) % kv_heads != 0)) || k.dim(1) != q.dim(1) ||
      k.dim(2) != q.dim(2)) {
    checks::fail(op, "k " + k.describe() + " must be [N / G, T, hs] for q " + q.describe() +
                         " (a whole number G of query heads per key/value head)");
  }
  const Shape kv_shape{kv_heads, q.dim(1), q.dim(2)};
  auto check_like = [&](const Tensor& t, const char* name, bool kv) {
    checks::on(t, device, op, name);
    if (t.dtype() != q.dtype()) {
      checks::fail(op, std::string(name) + " " + t.describe() + " must have q's dtype (" +
                           q.describe() + ")");
    }
    if (kv) {
      if (t.shape() != kv_shape) {
        checks::fail(op, std::string(name) + " " + t.describe() + " must have k's shape (" +
                             k.describe() + ")");
      }
    } else {
      checks::same_shape(t, q, op, name, "q");
    }
  };
  static const char* const kInputNames[] = {"q", "k", "v", "y", "dy"};
  static const char* const kOutputNames[] = {"dq", "dk", "dv"};
  // k, v (and dk, dv below) have the kv heads' shape; q, y, dy q's.
  static const bool kInputIsKv[] = {false, true, true, false, false};
  size_t i = 0;
  for (const Tensor* t : inputs) {
    check_like(*t, kInputNames[i], kInputIsKv[i]);
    ++i;
  }
  const Tensor* const* outs = outputs.begin();  // no copy: called inside a step (no allocation)
  const bool forward = outputs.size() == 1;
  for (size_t a = 0; a < outputs.size(); ++a) {
    const char* name = forward ? "y" : kOutputNames[a];
    check_like(*outs[a], name, !forward && a > 0);
    size_t j = 0;
    for (const Tensor* in : inputs) checks::disjoint(*outs[a], *in, op, name, kInputNames[j++]);
    for (size_t b = 0; b < a; ++b) checks::disjoint(*outs[a], *outs[b], op, name, kOutputNames[b]);
  }
  auto check_buffer = [&](const Tensor& b, int64_t need, DType dtype, const char* name) {
    if (need == 0) return;
    checks::on(b, device, op, name);
    if (b.dtype() != dtype || b.numel() < static_cast<size_t>(need)) {
      checks::fail(op, std::string(name) + " " + b.describe() + " must hold >= " +
                           std::to_string(need) + " " + dtype_name(dtype) + " elements");
    }
    for (const Tensor* t : outputs) checks::disjoint(b, *t, op, name, "an output");
    for (const Tensor* t : inputs) checks::disjoint(b, *t, op, name, "an input");
  };
  check_buffer(buffers.saved_f32, sizes.saved_f32, DType::f32, "saved_f32");
  check_buffer(buffers.saved_lowp, sizes.saved_lowp, q.dtype(), "saved_lowp");
  check_buffer(buffers.scratch_f32, sizes.scratch_f32, DType::f32, "scratch_f32");
  check_buffer(buffers.scratch_lowp, sizes.scratch_lowp, q.dtype(), "scratch_lowp");
  return AttentionDims{q.dim(0), q.dim(1), q.dim(2), empty ? 1 : q.dim(0) / kv_heads};
}

std::array<int64_t, 3> check_rope(const Tensor& in, const Tensor& cos, const Tensor& sin,
                                  const Tensor& out, int64_t pos0, const char* op,
                                  const Device& device) {
  const char* in_name = std::string_view(op) == "rope_forward" ? "x" : "dy";
  const char* out_name = std::string_view(op) == "rope_forward" ? "y" : "dx";
  checks::float_on(in, device, op, in_name);
  checks::rank(in, 3, op, in_name);
  const int64_t n = in.dim(0), t = in.dim(1), hs = in.dim(2);
  if (hs % 2 != 0) {
    checks::fail(op, std::string(in_name) + " " + in.describe() +
                         " must have an even head size (rotate-half pairs d and d + hs / 2)");
  }
  checks::float_on(out, device, op, out_name);
  checks::same_shape(out, in, op, out_name, in_name);
  for (const auto& [tab, name] : {std::pair{&cos, "cos"}, {&sin, "sin"}}) {
    checks::on(*tab, device, op, name);
    checks::dtype(*tab, DType::f32, op, name);
    checks::rank(*tab, 2, op, name);
    if (tab->dim(1) != hs / 2) {
      checks::fail(op, std::string(name) + " " + tab->describe() +
                           " must have hs / 2 = " + std::to_string(hs / 2) + " columns");
    }
  }
  checks::same_shape(sin, cos, op, "sin", "cos");
  if (pos0 < 0 || pos0 > cos.dim(0) - t) {
    checks::fail(op, "positions " + std::to_string(pos0) + " .. " + std::to_string(pos0 + t - 1) +
                         " are outside the tables' " + std::to_string(cos.dim(0)) + " rows");
  }
  const bool in_place = out.data() == in.data() && out.nbytes() == in.nbytes();
  if (!in_place) checks::disjoint(out, in, op, out_name, in_name);
  checks::disjoint(out, cos, op, out_name, "cos");
  checks::disjoint(out, sin, op, out_name, "sin");
  return {n, t, hs};
}

}  // namespace ampctl
