// RoundingProbe: a test Backend that forwards every op to a CPU backend and, while armed,
// records the f32 value before every rounding to f16/bf16 that an op performs: for each op
// writing a lowp tensor it first runs the same op into an f32 tensor of that shape (backend.h:
// one rounding per output, so that is the float the lowp output rounds) and keeps its values.
// Ops with two roundings are taken apart here: causal_softmax_backward with round_scaled (its
// float g, then float(lowp(g)) * scale, computed on the host), and the lowp intermediates of
// rms_norm_backward (dy * weight), swiglu_backward (dy * up) and rope_backward (the branches'
// products), each recorded from the host before the op's own output rounding and the default
// compositions (linear_gelu_backward_input, attention_backward, the conv ops) run on this backend's
// own primitives, so each of their roundings is seen. An op that writes a lowp tensor and is not
// expected in a backward (a forward op, the numerics hook's own rounding) is recorded in
// unexpected().
//
// It sees the plain backward, not the model's numerics hook: the gradient numerics tests compare
// the hook's amax and counts against these values (test_numerics_models.cpp).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"

namespace ampctl::nn::probe {

struct Rounding {
  std::string op;
  DType lowp;
  std::vector<float> pre;  // the f32 values before the rounding
};

class RoundingProbe final : public Backend {
 public:
  explicit RoundingProbe(int threads = 1) : m_in(make_cpu_backend(threads)) {}

  void arm(bool on) { m_armed = on; }
  const std::vector<Rounding>& roundings() const { return m_roundings; }
  const std::vector<std::string>& unexpected() const { return m_unexpected; }
  void clear() {
    m_roundings.clear();
    m_unexpected.clear();
  }

  Device device() const override { return m_in->device(); }
  std::string description() const override { return "probe over " + m_in->description(); }
  Tensor empty(const Shape& shape, DType dtype) override { return m_in->empty(shape, dtype); }
  void upload(const Tensor& dst, const void* host, size_t bytes) override {
    m_in->upload(dst, host, bytes);
  }
  void download(void* host, const Tensor& src) override { m_in->download(host, src); }
  void copy(const Tensor& dst, const Tensor& src) override { m_in->copy(dst, src); }
  void fill(const Tensor& dst, double value) override { m_in->fill(dst, value); }
  void synchronize() override { m_in->synchronize(); }

  void cast(const Tensor& src, const Tensor& dst) override {
    if (watched(dst)) {
      if (src.dtype() == DType::f32) {
        record("cast", src, dst.dtype());
      } else {
        m_unexpected.push_back("cast from " + src.describe());
      }
    }
    m_in->cast(src, dst);
  }
  void mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) override {
    if (watched(out)) {
      const Tensor t = f32_like(out);
      m_in->mul_scalar_tensor(x, scale, t);
      record("mul_scalar_tensor", t, out.dtype());
    }
    m_in->mul_scalar_tensor(x, scale, out);
  }
  void add_(const Tensor& dst, const Tensor& src, float alpha) override {
    if (watched(dst)) m_unexpected.push_back("add_ into " + dst.describe());
    m_in->add_(dst, src, alpha);
  }
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
            float alpha, float beta) override {
    if (watched(c)) {
      if (beta != 0.0f) m_unexpected.push_back("gemm accumulating into " + c.describe());
      const Tensor t = f32_like(c);
      m_in->gemm(a, trans_a, b, trans_b, t, alpha, 0.0f);
      record("gemm", t, c.dtype());
    }
    m_in->gemm(a, trans_a, b, trans_b, c, alpha, beta);
  }
  void global_norm(std::span<const Tensor> tensors, const Tensor& out) override {
    m_in->global_norm(tensors, out);
  }
  void non_finite_check_and_unscale_(std::span<const Tensor> tensors, const Tensor& found_inf,
                                     const Tensor& inv_scale, const Tensor& segment_starts,
                                     const Tensor& segment_found) override {
    m_in->non_finite_check_and_unscale_(tensors, found_inf, inv_scale, segment_starts,
                                        segment_found);
  }
  void non_finite_check_unscale_norm_(std::span<const Tensor> tensors, const Tensor& found_inf,
                                      const Tensor& inv_scale, bool unscale, const Tensor& norm,
                                      const Tensor& segment_starts,
                                      const Tensor& segment_found) override {
    m_in->non_finite_check_unscale_norm_(tensors, found_inf, inv_scale, unscale, norm,
                                         segment_starts, segment_found);
  }
  void inv_scale(const Tensor& scale, const Tensor& inv) override { m_in->inv_scale(scale, inv); }
  void update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                     const Tensor& hysteresis_tracker, const Tensor& trackers,
                     const Tensor& found_inf, const amp::ScaleUpdateParams& params) override {
    m_in->update_scale_(scale, growth_tracker, hysteresis_tracker, trackers, found_inf, params);
  }
  void update_scale_auto_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& trackers,
                          const Tensor& found_inf, const Tensor& amax, const Tensor& history,
                          const amp::ScaleUpdateParams& params) override {
    m_in->update_scale_auto_(scale, growth_tracker, trackers, found_inf, amax, history, params);
  }
  void gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                   const Tensor& dst) override {
    m_in->gather_rows(src, index, offset, dst);
  }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    forward_op("linear_forward", y);
    m_in->linear_forward(x, w, b, y);
  }
  void sum_rows(const Tensor& x, const Tensor& out) override {
    if (watched(out)) {
      const Tensor t = f32_like(out);
      m_in->sum_rows(x, t);
      record("sum_rows", t, out.dtype());
    }
    m_in->sum_rows(x, out);
  }
  void activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y) override {
    forward_op("activation_forward", y);
    m_in->activation_forward(kind, x, y);
  }
  void activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                           const Tensor& dy, const Tensor& dx) override {
    if (watched(dx)) {
      const Tensor t = f32_like(dx);
      m_in->activation_backward(kind, x, y, dy, t);
      record("activation_backward", t, dx.dtype());
    }
    m_in->activation_backward(kind, x, y, dy, dx);
  }
  void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed,
                       uint64_t offset) override {
    forward_op("dropout_forward", y);
    m_in->dropout_forward(x, y, p, seed, offset);
  }
  void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed,
                        uint64_t offset) override {
    if (watched(dx)) {
      const Tensor t = f32_like(dx);
      m_in->dropout_backward(dy, t, p, seed, offset);
      record("dropout_backward", t, dx.dtype());
    }
    m_in->dropout_backward(dy, dx, p, seed, offset);
  }
  void softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                             const Tensor& correct, const Tensor& dlogits,
                             const Tensor& grad_scale) override {
    if (watched(dlogits)) {  // before the real op: it may write dlogits over the logits
      const Tensor t = f32_like(dlogits);
      m_in->softmax_cross_entropy(logits, labels, m_in->zeros({1}, DType::f32), Tensor{}, t,
                                  grad_scale);
      record("softmax_cross_entropy", t, dlogits.dtype());
    }
    m_in->softmax_cross_entropy(logits, labels, loss, correct, dlogits, grad_scale);
  }
  void mse(const Tensor& pred, const Tensor& target, const Tensor& loss, const Tensor& dpred,
           const Tensor& grad_scale) override {
    if (watched(dpred)) {
      const Tensor t = f32_like(dpred);
      m_in->mse(pred, target, m_in->zeros({1}, DType::f32), t, grad_scale);
      record("mse", t, dpred.dtype());
    }
    m_in->mse(pred, target, loss, dpred, grad_scale);
  }
  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                          const Tensor& mean, const Tensor& rstd, float eps) override {
    forward_op("layer_norm_forward", y);
    m_in->layer_norm_forward(x, gamma, beta, y, mean, rstd, eps);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                           const Tensor& dgamma, const Tensor& dbeta) override {
    if (watched(dx)) {  // into scratch gradients: the real op accumulates dgamma and dbeta
      const Tensor t = f32_like(dx);
      m_in->layer_norm_backward(x, gamma, mean, rstd, dy, t, f32_like(dgamma), f32_like(dbeta));
      record("layer_norm_backward", t, dx.dtype());
    }
    m_in->layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }
  void rms_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                        float eps) override {
    forward_op("rms_norm_forward", y);
    m_in->rms_norm_forward(x, weight, y, rstd, eps);
  }
  void residual_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                 const Tensor& weight, const Tensor& y, const Tensor& rstd,
                                 float eps) override {
    forward_op("residual_rms_norm_forward", y);
    m_in->residual_rms_norm_forward(x, r, sum, weight, y, rstd, eps);
  }
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& dy, const Tensor& dx, const Tensor& dweight, bool accumulate,
                         const Tensor& dy_weight = Tensor{}) override {
    if (m_armed && lowp(x)) {  // g = round_x(dy * weight), the gradient of `weight * h`'s lowp h
      const std::vector<float> d = host_f32(dy), w = host_f32(weight);
      std::vector<float> g(d.size());
      for (size_t i = 0; i < d.size(); ++i) g[i] = d[i] * w[i % w.size()];
      m_roundings.push_back(Rounding{"rms_norm_backward (dy * weight)", x.dtype(), std::move(g)});
    }
    if (watched(dx)) {  // the float the op rounds: (dx +) the gradient, into a scratch dweight
      const Tensor t = f32_like(dx);
      if (accumulate) m_in->cast(dx, t);
      m_in->rms_norm_backward(x, weight, rstd, dy, t,
                              dweight.defined() ? f32_like(dweight) : Tensor{}, accumulate);
      record("rms_norm_backward", t, dx.dtype());
    }
    m_in->rms_norm_backward(x, weight, rstd, dy, dx, dweight, accumulate, dy_weight);
  }
  void swiglu_forward(const Tensor& gate_up, const Tensor& y) override {
    forward_op("swiglu_forward", y);
    m_in->swiglu_forward(gate_up, y);
  }
  void swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up,
                       const Tensor& dy_up = Tensor{}) override {
    if (m_armed && lowp(gate_up)) {  // round_in(dy * u), autocast's lowp product's gradient
      const std::vector<float> gu = host_f32(gate_up), d = host_f32(dy);
      const size_t width = d.size() / static_cast<size_t>(gate_up.dim(0));
      std::vector<float> pre(d.size());
      for (size_t i = 0; i < d.size(); ++i) {
        pre[i] = d[i] * gu[(i / width) * 2 * width + width + i % width];
      }
      m_roundings.push_back(Rounding{"swiglu_backward (dy * up)", gate_up.dtype(), std::move(pre)});
    }
    if (watched(dgate_up)) {
      const Tensor t = f32_like(dgate_up);
      m_in->swiglu_backward(gate_up, dy, t);
      record("swiglu_backward", t, dgate_up.dtype());
    }
    m_in->swiglu_backward(gate_up, dy, dgate_up, dy_up);
  }
  void clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) override {
    m_in->clip_coef(norm, max_norm, coef);
  }
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         const Tensor& out) override {
    m_in->embedding_forward(tokens, wte, wpe, out);
  }
  void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                          const Tensor& dwpe) override {
    m_in->embedding_backward(tokens, dout, dwte, dwpe);
  }
  void gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                    float alpha, float beta) override {
    if (watched(c)) {
      if (beta != 0.0f) m_unexpected.push_back("gemm_batched accumulating into " + c.describe());
      const Tensor t = f32_like(c);
      m_in->gemm_batched(a, trans_a, b, trans_b, t, alpha, 0.0f);
      record("gemm_batched", t, c.dtype());
    }
    m_in->gemm_batched(a, trans_a, b, trans_b, c, alpha, beta);
  }
  void heads_from_rows(const Tensor& src, int64_t column, const Tensor& dst) override {
    m_in->heads_from_rows(src, column, dst);  // a copy: no rounding
  }
  void heads_to_rows(const Tensor& src, const Tensor& dst, int64_t column) override {
    m_in->heads_to_rows(src, dst, column);
  }
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y,
                    int64_t pos0) override {
    forward_op("rope_forward", y);
    m_in->rope_forward(x, cos, sin, y, pos0);
  }
  void rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin, const Tensor& dx,
                     int64_t pos0, DType input_dtype) override {
    if (m_armed && (input_dtype == DType::f16 || input_dtype == DType::bf16)) {
      // The four products of each pair, each rounded to the input's dtype before the branches
      // are added (backend.h).
      const std::vector<float> g = host_f32(dy), c = host_f32(cos), sn = host_f32(sin);
      const auto t = static_cast<size_t>(dy.dim(1)), h = static_cast<size_t>(dy.dim(2) / 2);
      std::vector<float> pre;
      pre.reserve(2 * g.size());
      for (size_t row = 0; row < g.size() / (2 * h); ++row) {
        const size_t p = static_cast<size_t>(pos0) + row % t;
        for (size_t d = 0; d < h; ++d) {
          const float g0 = g[row * 2 * h + d], g1 = g[row * 2 * h + h + d];
          const float cv = c[p * h + d], sv = sn[p * h + d];
          pre.insert(pre.end(), {g0 * cv, g1 * sv, g1 * cv, g0 * sv});
        }
      }
      m_roundings.push_back(Rounding{"rope_backward (branches)", input_dtype, std::move(pre)});
    }
    if (watched(dx)) {
      const Tensor t = f32_like(dx);
      m_in->rope_backward(dy, cos, sin, t, pos0, input_dtype);
      record("rope_backward", t, dx.dtype());
    }
    m_in->rope_backward(dy, cos, sin, dx, pos0, input_dtype);
  }
  void causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                              const Tensor& probs) override {
    forward_op("causal_softmax_forward", probs);
    m_in->causal_softmax_forward(scores, scale, round_scaled, probs);
  }
  void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                               bool round_scaled, const Tensor& dscores) override {
    if (watched(dscores)) {
      const Tensor t = f32_like(dscores);
      if (round_scaled) {
        // The float g (scale 1: g * 1 is g), rounded; then float(lowp(g)) * scale, rounded.
        m_in->causal_softmax_backward(probs, dprobs, 1.0f, false, t);
        record("causal_softmax_backward (g)", t, dscores.dtype());
        std::vector<float> g = m_roundings.back().pre;
        for (float& v : g) v = lowp_round(v, dscores.dtype()) * scale;
        m_roundings.push_back({"causal_softmax_backward (g * scale)", dscores.dtype(), g});
      } else {
        m_in->causal_softmax_backward(probs, dprobs, scale, false, t);
        record("causal_softmax_backward", t, dscores.dtype());
      }
    }
    m_in->causal_softmax_backward(probs, dprobs, scale, round_scaled, dscores);
  }
  void im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
              const Conv2dGeometry& g) override {
    m_in->im2col(x, col, kernel_h, kernel_w, g);  // a copy
  }
  void col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
              const Conv2dGeometry& g) override {
    if (watched(x)) {
      const Tensor t = f32_like(x);
      m_in->col2im(col, t, kernel_h, kernel_w, g);
      record("col2im", t, x.dtype());
    }
    m_in->col2im(col, x, kernel_h, kernel_w, g);
  }
  void broadcast_channels(const Tensor& b, const Tensor& y) override {
    forward_op("broadcast_channels", y);
    m_in->broadcast_channels(b, y);
  }
  void channel_sum(const Tensor& x, const Tensor& out) override {
    if (watched(out)) {
      const Tensor t = f32_like(out);
      m_in->channel_sum(x, t);
      record("channel_sum", t, out.dtype());
    }
    m_in->channel_sum(x, out);
  }
  void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                          const Pool2dGeometry& g) override {
    forward_op("max_pool2d_forward", y);
    m_in->max_pool2d_forward(x, y, indices, g);
  }
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                           const Pool2dGeometry& g) override {
    if (watched(dx)) {
      const Tensor t = f32_like(dx);
      m_in->max_pool2d_backward(dy, indices, t, g);
      record("max_pool2d_backward", t, dx.dtype());
    }
    m_in->max_pool2d_backward(dy, indices, dx, g);
  }
  void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) override {
    forward_op("avg_pool2d_forward", y);
    m_in->avg_pool2d_forward(x, y, g);
  }
  void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dGeometry& g) override {
    if (watched(dx)) {
      const Tensor t = f32_like(dx);
      m_in->avg_pool2d_backward(dy, t, g);
      record("avg_pool2d_backward", t, dx.dtype());
    }
    m_in->avg_pool2d_backward(dy, dx, g);
  }
  void batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                          const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& running_mean, const Tensor& running_var,
                          const Tensor& num_batches_tracked,
                          const BatchNormParams& params) override {
    forward_op("batch_norm_forward", y);
    m_in->batch_norm_forward(x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var,
                             num_batches_tracked, params);
  }
  void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                           const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                           const Tensor& dgamma, const Tensor& dbeta) override {
    if (watched(dx)) {
      const Tensor t = f32_like(dx);
      m_in->batch_norm_backward(x, gamma, save_mean, save_invstd, dy, t,
                                dgamma.defined() ? f32_like(dgamma) : Tensor{},
                                dbeta.defined() ? f32_like(dbeta) : Tensor{});
      record("batch_norm_backward", t, dx.dtype());
    }
    m_in->batch_norm_backward(x, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta);
  }
  void optimizer_step(const OptimizerStepArgs& args) override { m_in->optimizer_step(args); }
  void round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) override {
    if (m_armed) m_unexpected.push_back("round_counted (the hook runs: probe a plain model)");
    m_in->round_counted(src, dst, counters);
  }
  void round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax) override {
    if (m_armed) m_unexpected.push_back("round_amax (the hook runs: probe a plain model)");
    m_in->round_amax(src, dst, amax);
  }

  static float lowp_round(float v, DType lowp) {
    return lowp == DType::f16 ? round_to_half(v) : round_to_bf16(v);
  }

 private:
  bool watched(const Tensor& t) const {
    return m_armed && t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
  }
  Tensor f32_like(const Tensor& t) { return m_in->zeros(t.shape(), DType::f32); }
  static bool lowp(const Tensor& t) { return t.dtype() == DType::f16 || t.dtype() == DType::bf16; }
  // t's values widened to float on the host.
  std::vector<float> host_f32(const Tensor& t) {
    const Tensor w = f32_like(t);
    m_in->cast(t, w);
    std::vector<float> out(t.numel());
    m_in->download(out.data(), w);
    return out;
  }
  void record(const char* op, const Tensor& f32, DType lowp) {
    Rounding r{op, lowp, std::vector<float>(f32.numel())};
    m_in->download(r.pre.data(), f32);
    m_roundings.push_back(std::move(r));
  }
  void forward_op(const char* op, const Tensor& out) {
    if (watched(out)) m_unexpected.push_back(op);
  }

  std::unique_ptr<Backend> m_in;
  bool m_armed = false;
  std::vector<Rounding> m_roundings;
  std::vector<std::string> m_unexpected;
};

}  // namespace ampctl::nn::probe
