// Backend's default compositions: the convenience memory functions (zeros, from_host, to_host,
// read_scalar_*), and the ops a backend may fuse but need not, written once on top of the
// primitives: causal self-attention (the materialised softmax), Linear + GELU, residual add +
// LayerNorm, LayerNorm backward into an accumulated gradient, the three conv2d ops
// (im2col / col2im and gemm per image) and the ops that take grad_amax (the op into f32, then
// round_amax). Each checks
// its arguments with the same checks (checks/) a fused override calls, so both refuse the same
// calls.
#include <string>

#include "ampctl/backend/backend.h"
#include "checks/checks.h"

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
  checks::on(q, device(), op, "q");
  checks::rank(q, 3, op, "q [N, T, hs]");
  const AttentionSizes sizes =
      Backend::attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d = check_attention({&q, &k, &v}, {&y}, buffers, sizes, op, device());
  const Shape att{d.count, d.time, d.time};
  // Grouped-query attention: a kv head's G query heads are consecutive, so q, y and the T x T
  // buffers viewed as [N / G, G T, ...] meet k and v [N / G, T, hs] in one batched product each.
  const int64_t kv = d.count / d.group, gt = d.group * d.time;
  const Shape grouped_att{kv, gt, d.time};
  const Shape grouped_rows{kv, gt, d.head_size};
  const Tensor scores = buffers.scratch_lowp.view(0, att);
  gemm_batched(q.view(0, grouped_rows), false, k, true, scores.view(0, grouped_att));
  const Tensor probs = buffers.saved_f32.view(0, att);
  causal_softmax_forward(scores, scale, /*round_scaled=*/true, probs);
  // att @ v casts its fp32 operand to the compute dtype (autocast); f32 reads probs itself.
  const Tensor a = q.dtype() == DType::f32 ? probs : buffers.saved_lowp.view(0, att);
  if (q.dtype() != DType::f32) cast(probs, a);
  gemm_batched(a.view(0, grouped_att), false, v, false, y.view(0, grouped_rows));
}

void Backend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                 const Tensor& dy, float scale, const Tensor& dq, const Tensor& dk,
                                 const Tensor& dv, const AttentionBuffers& buffers) {
  const char* op = "attention_backward";
  checks::on(q, device(), op, "q");
  checks::rank(q, 3, op, "q [N, T, hs]");
  const AttentionSizes sizes =
      Backend::attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d =
      check_attention({&q, &k, &v, &y, &dy}, {&dq, &dk, &dv}, buffers, sizes, op, device());
  const Shape att{d.count, d.time, d.time};
  const int64_t m = d.count * d.time * d.time;
  const int64_t kv = d.count / d.group, gt = d.group * d.time;
  const Shape grouped_att{kv, gt, d.time};
  const Shape grouped_rows{kv, gt, d.head_size};
  const Tensor probs = buffers.saved_f32.view(0, att);
  const Tensor a = q.dtype() == DType::f32 ? probs : buffers.saved_lowp.view(0, att);
  const Tensor datt = buffers.scratch_lowp.view(0, att);
  const Tensor dscores = buffers.scratch_lowp.view(static_cast<size_t>(m), att);
  const Tensor dy_g = dy.view(0, grouped_rows);
  gemm_batched(dy_g, false, v, true, datt.view(0, grouped_att));  // d(att) of y = att @ v
  // dv (and dk below) sum over the group's G T rows inside one product: one fixed order.
  gemm_batched(a.view(0, grouped_att), true, dy_g, false, dv);
  causal_softmax_backward(probs, datt, scale, /*round_scaled=*/true, dscores);
  gemm_batched(dscores.view(0, grouped_att), false, k, false, dq.view(0, grouped_rows));
  gemm_batched(dscores.view(0, grouped_att), true, q.view(0, grouped_rows), false, dk);
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

void Backend::residual_layer_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                          const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                          const Tensor& mean, const Tensor& rstd, float eps) {
  check_residual_layer_norm(x, r, sum, gamma, beta, y, mean, rstd, device());
  if (sum.data() != x.data()) copy(sum, x);
  add_(sum, r);
  layer_norm_forward(sum, gamma, beta, y, mean, rstd, eps);
}

void Backend::layer_norm_backward_accumulate(const Tensor& x, const Tensor& gamma,
                                             const Tensor& mean, const Tensor& rstd,
                                             const Tensor& dy, const Tensor& dx,
                                             const Tensor& dgamma, const Tensor& dbeta,
                                             const Tensor& scratch) {
  const auto [rows, cols] = check_layer_norm_backward_accumulate(x, gamma, mean, rstd, dy, dx,
                                                                 dgamma, dbeta, scratch, device());
  if (!scratch.defined()) {
    checks::fail("layer_norm_backward_accumulate",
                 "this backend composes it and needs an f32 scratch of R*C elements");
  }
  const Tensor t = scratch.view(0, {rows, cols});
  layer_norm_backward(x, gamma, mean, rstd, dy, t, dgamma, dbeta);
  add_(dx, t);
}

void Backend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                             const Conv2dGeometry& g, const Tensor& col) {
  const ConvDims d = check_conv2d_forward(x, w, b, y, g, col);
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
  const ConvDims d = check_conv2d_backward_input(dy, w, dx, g, dcol);
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
  const ConvDims d = check_conv2d_backward_weight(x, dy, dw, db, g, col, acc);
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

void Backend::gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                              const Tensor& c, const Tensor& amax, const Tensor& scratch) {
  check_gemm_round_amax(a, trans_a, b, trans_b, c, amax, scratch, device());
  const Tensor product = scratch.view(0, c.shape());
  gemm(a, trans_a, b, trans_b, product);
  round_amax(product, c, amax);
}

void Backend::gemm_batched_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                      const Tensor& c, const Tensor& amax, const Tensor& scratch) {
  check_gemm_batched_round_amax(a, trans_a, b, trans_b, c, amax, scratch, device());
  const Tensor product = scratch.view(0, c.shape());
  gemm_batched(a, trans_a, b, trans_b, product);
  round_amax(product, c, amax);
}

void Backend::causal_softmax_backward_amax(const Tensor& probs, const Tensor& dprobs,
                                           const Tensor& scale, const Tensor& dscores,
                                           const Tensor& amax, const Tensor& scratch) {
  check_causal_softmax_backward_amax(probs, dprobs, scale, dscores, amax, scratch, device());
  const Tensor f32 = scratch.view(0, dscores.shape());
  causal_softmax_backward(probs, dprobs, 1.0f, /*round_scaled=*/false, f32);
  round_amax(f32, dscores, amax);  // dscores holds round(g) until the second rounding
  mul_scalar_tensor(dscores, scale, f32);
  round_amax(f32, dscores, amax);
}

void Backend::activation_backward_amax(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                       const Tensor& dy, const Tensor& dx, const Tensor& amax,
                                       const Tensor& scratch) {
  check_activation_backward_amax(kind, x, y, dy, dx, amax, scratch, device());
  const Tensor f32 = scratch.view(0, dx.shape());
  activation_backward(kind, x, y, dy, f32);
  round_amax(f32, dx, amax);
}

}  // namespace ampctl
