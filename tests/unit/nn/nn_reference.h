// An independent reference for the nn tests: the MLP of a config::ModelConfig written again as
// plain loops in double, forward and backward, sharing nothing with lib/src/nn except the
// Philox dropout mask (nn::dropout_keep on nn::dropout_stream) and the parameter values.
//
// One function serves three purposes:
//   * exact:     every value in fp64 (the finite-difference reference and the "true" values);
//   * emulation: the same math, rounded where docs/reference.md, "Precision", rounds: L(.) at every
//   lowp tensor
//                (round_to_half / round_to_bf16) and F(.) at every fp32 result, each fp32
//                accumulation emulated as an exact double sum rounded once to float;
//   * bounds:    alongside every value, a first-order bound on how far another computation of
//                it may be, given per-operation relative errors (BoundCoef). A value computed
//                as f(inputs) with one rounding gets
//                    D(v) = sum |df/d input| * D(input)  +  (relative error) * |terms|,
//                where a sum of K products is charged K fp32 operations (Higham's gamma_K
//                bound: |error| <= K u sum |terms|), a lowp store coef.lo * |v|, a
//                transcendental coef.trans operations. Derivatives that the perturbation
//                itself moves (relu's kink, gelu'/tanh', softmax, LayerNorm's rstd and xhat)
//                are bounded with their Lipschitz constants over the interval. The tests
//                allow twice D: the factor 2 covers the second-order terms that first-order
//                propagation drops (products of two relative errors, each <= 2^-8 here).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/half.h"
#include "ampctl/math/nn_math.h"
#include "ampctl/nn/models.h"
#include "ampctl/nn/models/mlp.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/build.h"

namespace ampctl::nn {

// The MLP under test, built from the run config's types the way a run builds it
// (train::model_options), with the constructor these tests were written against.
class TestMlp : public Mlp {
 public:
  TestMlp(Backend& backend, const config::ModelConfig& model, config::Precision precision,
          config::LossType loss, int64_t in, int64_t out, int64_t max_batch, uint64_t seed)
      : Mlp(backend, train::model_options(model, precision, loss, in, out, max_batch, seed)) {}
  // The optimizer's view of the arenas, as a run makes it (train::param_groups).
  std::vector<optim::ParamGroup> param_groups(float lr) const {
    return train::param_groups(*this, lr);
  }
};

}  // namespace ampctl::nn

namespace ampctl::nn::ref {

using Vec = std::vector<double>;

// Unit roundoffs (half an ulp at 1).
inline constexpr double kU32 = 0x1p-24;
inline constexpr double kU16 = 0x1p-11;
inline constexpr double kUBf16 = 0x1p-8;

enum class Format { exact, f32, f16, bf16 };

inline double unit_roundoff(Format f) {
  switch (f) {
    case Format::exact:
      return 0.0;
    case Format::f32:
      return kU32;
    case Format::f16:
      return kU16;
    case Format::bf16:
      return kUBf16;
  }
  return 0.0;
}

// Where the emulated policy rounds.
struct Rounding {
  Format lowp = Format::exact;  // the format of activations, their gradients, the weight copy
  bool fp32 = false;            // round every fp32 result to float
  double F(double v) const { return fp32 ? static_cast<double>(static_cast<float>(v)) : v; }
  double L(double v) const {
    switch (lowp) {
      case Format::exact:
        return v;
      case Format::f32:
        return static_cast<float>(v);
      case Format::f16:
        return round_to_half(static_cast<float>(v));
      case Format::bf16:
        return round_to_bf16(static_cast<float>(v));
    }
    return v;
  }
  // A lowp tensor element computed by an fp32 op: the float result, rounded once more.
  double LF(double v) const { return L(F(v)); }
};

// Relative errors charged by the bound propagation.
struct BoundCoef {
  double lo = 0.0;     // at each lowp store
  double op = 0.0;     // per fp32 operation (a K-term dot product is K operations)
  double w = 0.0;      // of the weights the products read relative to the f32 masters
  double trans = 4.0;  // operations per transcendental: libm's float erff/expf/tanhf/logf are
                       // within 2 ulp (glibc's documented maxima), plus the ops around them
};

enum class Kind { linear, layer_norm, activation, dropout };

struct Layer {
  Kind kind;
  int64_t in, out;
  std::string name;  // "layers.<index>"
};

// The architecture rule of docs/reference.md, "The MLP", rebuilt independently of nn::make_mlp.
inline std::vector<Layer> mlp_layers(const config::ModelConfig& m, int64_t in, int64_t out) {
  std::vector<Layer> layers;
  auto add = [&](Kind k, int64_t a, int64_t b) {
    layers.push_back({k, a, b, "layers." + std::to_string(layers.size())});
  };
  int64_t w = in;
  for (int64_t h : m.hidden) {
    add(Kind::linear, w, h);
    if (m.layer_norm) add(Kind::layer_norm, h, h);
    add(Kind::activation, h, h);
    if (m.dropout > 0.0) add(Kind::dropout, h, h);
    w = h;
  }
  add(Kind::linear, w, out);
  return layers;
}

// The network to evaluate: architecture, f32 master parameters by state_dict name, the
// dropout stream of its first training-mode dropout call.
struct Net {
  config::ModelConfig model;
  config::LossType loss = config::LossType::cross_entropy;
  int64_t in = 0, out = 0;
  std::map<std::string, Vec> params;
  uint64_t seed = 0;
  uint64_t first_dropout_call = 0;
};

// One batch: inputs [B, in] (f32 values), labels [B] or targets [B, out].
struct Batch {
  int64_t rows = 0;
  std::vector<float> x;
  std::vector<int32_t> labels;
  std::vector<float> targets;
};

struct Result {
  double loss = 0.0, loss_bound = 0.0;
  // First-order sensitivities of the loss to rounding (backward runs only; divided by the
  // grad_scale): with |dL/dv| from this run's own backward,
  //   sens_lowp:    sum over the forward's lowp stores (the input cast included) of |dL/dv| |v|
  //   sens_weights: sum over the Linear weights and biases of |dL/dW| |W|
  //   sens_fp32:    sum over the forward's values of |dL/dv| times the fp32 operations charged
  //                 to v (as in the bounds: K |terms| for a K-term sum), plus the loss's own.
  // A computation that perturbs each lowp store by <= a relative, each weight by <= w and each
  // fp32 operation by <= e moves the loss by <= a sens_lowp + w sens_weights + e sens_fp32 to
  // first order: the adjoint form of the bound, which keeps the signs inside the network that
  // the element-wise bounds give up.
  double sens_lowp = 0.0, sens_weights = 0.0, sens_fp32 = 0.0;
  Vec logits, logits_bound;
  std::map<std::string, Vec> grads, grad_bounds;
  std::vector<uint8_t> relu_signs;  // sign of every relu input, in order (kink detection)
};

namespace detail {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
// Lipschitz constants of the activation derivatives: max |gelu''| = 2 phi(0), max |tanh''| =
// 4 / (3 sqrt 3).
constexpr double kGeluDD = 0.79788456080286535588;
constexpr double kTanhDD = 0.76980035891950104;

inline double act(config::Activation a, double x) {
  switch (a) {
    case config::Activation::relu:
      return x > 0.0 ? x : 0.0;
    case config::Activation::gelu:
      return 0.5 * x * (1.0 + std::erf(x * kSqrt1_2));
    case config::Activation::tanh:
      return std::tanh(x);
  }
  return x;
}

inline double gelu_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kSqrt1_2)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
}

struct Stored {
  Vec v, d;            // values and bounds, row-major [B, width]
  Vec ops;             // fp32 operations charged to each value, times its magnitude (bound units)
  bool store = false;  // a new lowp store (not an identity)
  Vec mean, rstd, xhat, dxhat;  // LayerNorm: per row, and xhat with its bound
  std::vector<uint8_t> keep;    // Dropout mask (training)
  bool dropped = false;
  double scale = 1.0;
};

}  // namespace detail

// Forward (and, with grad_scale > 0, backward) of `net` on `batch`.
inline Result run(const Net& net, const Batch& batch, bool training, double grad_scale,
                  const Rounding& r, const BoundCoef& c) {
  using namespace detail;
  const std::vector<Layer> layers = mlp_layers(net.model, net.in, net.out);
  const int64_t B = batch.rows;
  const double eps = static_cast<double>(LayerNorm::kEps);
  Result res;
  std::vector<Stored> h(layers.size() + 1);

  // The f32 batch cast to lowp before the first Linear.
  h[0].v.resize(static_cast<size_t>(B * net.in));
  h[0].d.resize(h[0].v.size());
  for (size_t i = 0; i < h[0].v.size(); ++i) {
    h[0].v[i] = r.L(batch.x[i]);
    h[0].d[i] = c.lo * std::abs(h[0].v[i]);
  }

  auto lowp_copy = [&](const Vec& master) {
    Vec out(master.size());
    for (size_t i = 0; i < master.size(); ++i) out[i] = r.L(master[i]);
    return out;
  };

  uint64_t dropout_call = net.first_dropout_call;
  for (size_t l = 0; l < layers.size(); ++l) {
    const Layer& ly = layers[l];
    const Vec& x = h[l].v;
    const Vec& dx = h[l].d;
    Stored& o = h[l + 1];
    const int64_t I = ly.in, O = ly.out;
    o.v.assign(static_cast<size_t>(B * O), 0.0);
    o.d.assign(o.v.size(), 0.0);
    o.ops.assign(o.v.size(), 0.0);
    o.store = ly.kind != Kind::dropout || training;
    switch (ly.kind) {
      case Kind::linear: {
        const Vec& W = net.params.at(ly.name + ".weight");
        const Vec& b = net.params.at(ly.name + ".bias");
        const Vec WL = lowp_copy(W), bL = lowp_copy(b);
        for (int64_t row = 0; row < B; ++row) {
          for (int64_t j = 0; j < O; ++j) {
            double s = bL[j], sa = std::abs(bL[j]), sd = 0.0;
            for (int64_t i = 0; i < I; ++i) {
              const double w = WL[j * I + i], xv = x[row * I + i];
              s += w * xv;
              sa += std::abs(w * xv);
              sd += std::abs(w) * dx[row * I + i];
            }
            const double y = r.LF(s);
            o.v[row * O + j] = y;
            o.ops[row * O + j] = static_cast<double>(I + 1) * sa;
            o.d[row * O + j] = sd + c.w * sa + c.op * o.ops[row * O + j] + c.lo * std::abs(y);
          }
        }
        break;
      }
      case Kind::layer_norm: {
        const Vec& g = net.params.at(ly.name + ".weight");
        const Vec& be = net.params.at(ly.name + ".bias");
        const auto C = static_cast<double>(O);
        o.mean.resize(B), o.rstd.resize(B), o.xhat.resize(B * O), o.dxhat.resize(B * O);
        for (int64_t row = 0; row < B; ++row) {
          const double* xr = &x[row * O];
          const double* dr = &dx[row * O];
          double sum = 0.0, sumabs = 0.0, dmean = 0.0;
          for (int64_t k = 0; k < O; ++k) sum += xr[k], sumabs += std::abs(xr[k]), dmean += dr[k];
          const double mean = r.F(sum / C);
          dmean /= C;
          double var = 0.0;
          for (int64_t k = 0; k < O; ++k) var += (xr[k] - mean) * (xr[k] - mean);
          var = r.F(var / C);
          const double rstd = r.F(1.0 / std::sqrt(var + eps));
          o.mean[row] = mean, o.rstd[row] = rstd;
          double xd = 0.0;  // mean |xhat| D(x)
          for (int64_t k = 0; k < O; ++k) xd += std::abs((xr[k] - mean) * rstd) * dr[k];
          xd /= C;
          for (int64_t k = 0; k < O; ++k) {
            const double xh = (xr[k] - mean) * rstd;
            const double dxh = rstd * (dr[k] + dmean + std::abs(xh) * xd) +
                               c.op * (rstd * sumabs + (C + 6.0) * std::abs(xh));
            const double y = r.LF(xh * g[k] + be[k]);
            o.xhat[row * O + k] = xh, o.dxhat[row * O + k] = dxh;
            o.v[row * O + k] = y;
            o.ops[row * O + k] = std::abs(g[k]) * (rstd * sumabs + (C + 6.0) * std::abs(xh)) +
                                 2.0 * (std::abs(g[k] * xh) + std::abs(be[k]));
            o.d[row * O + k] = std::abs(g[k]) * dxh +
                               c.op * 2.0 * (std::abs(g[k] * xh) + std::abs(be[k])) +
                               c.lo * std::abs(y);
          }
        }
        break;
      }
      case Kind::activation: {
        const config::Activation a = net.model.activation;
        for (size_t i = 0; i < o.v.size(); ++i) {
          const double y = r.LF(act(a, x[i]));
          double dsup = 0.0;
          switch (a) {
            case config::Activation::relu:
              dsup = x[i] + dx[i] > 0.0 ? 1.0 : 0.0;
              res.relu_signs.push_back(x[i] > 0.0);
              break;
            case config::Activation::gelu:
              dsup = std::abs(gelu_grad(x[i])) + kGeluDD * dx[i];
              break;
            case config::Activation::tanh:
              dsup = std::abs(1.0 - std::tanh(x[i]) * std::tanh(x[i])) + kTanhDD * dx[i];
              break;
          }
          o.v[i] = y;
          o.ops[i] = c.trans * std::abs(y);
          o.d[i] = dsup * dx[i] + (c.op * c.trans + c.lo) * std::abs(y);
        }
        break;
      }
      case Kind::dropout: {
        const auto p = static_cast<float>(net.model.dropout);
        o.dropped = training;
        if (!training) {
          o.v = x, o.d = dx, o.ops.assign(x.size(), 0.0);
          break;
        }
        const uint64_t stream = dropout_stream(dropout_call++);
        o.scale = dropout_scale(p);
        o.keep.resize(o.v.size());
        for (size_t i = 0; i < o.v.size(); ++i) {
          o.keep[i] = dropout_keep(net.seed, stream, i, p);
          if (!o.keep[i]) continue;
          o.v[i] = r.LF(x[i] * o.scale);
          o.ops[i] = std::abs(o.v[i]);
          o.d[i] = o.scale * dx[i] + (c.op + c.lo) * std::abs(o.v[i]);
        }
        break;
      }
    }
  }

  const Vec& z = h.back().v;
  const Vec& dz = h.back().d;
  res.logits = z;
  res.logits_bound = dz;
  const int64_t O = net.out;
  const auto Bd = static_cast<double>(B);
  const bool want_grad = grad_scale > 0.0;
  Vec g(z.size(), 0.0), gd(z.size(), 0.0);  // dlogits and its bound
  double loss_ops = 0.0;                    // fp32 operations of the loss itself

  if (net.loss == config::LossType::cross_entropy) {
    double total = 0.0, bound = 0.0;
    const double cf = r.F(-grad_scale / Bd);
    for (int64_t row = 0; row < B; ++row) {
      const double* zr = &z[row * O];
      const double* dr = &dz[row * O];
      const int32_t t = batch.labels[row];
      double m = zr[0];
      for (int64_t j = 1; j < O; ++j) m = std::max(m, zr[j]);
      double se = 0.0;
      for (int64_t j = 0; j < O; ++j) se += std::exp(zr[j] - m);
      const double lse = m + std::log(se);
      total += lse - zr[t];
      // fp32 log-softmax: z - m, exp, a C-term sum, log: an absolute error of
      // u (C + 2 trans + 2 (|m| + |lse| + |z_j|)) in each log_softmax_j.
      const double ls_err = static_cast<double>(O) + 2.0 * c.trans +
                            2.0 * (std::abs(m) + std::abs(lse) + std::abs(zr[t]));
      double pd = 0.0;  // sum_k p_k D(z_k)
      for (int64_t j = 0; j < O; ++j) pd += std::exp(zr[j] - lse) * dr[j];
      for (int64_t j = 0; j < O; ++j) {
        const double p = std::exp(zr[j] - lse);
        const double onehot = j == t ? 1.0 : 0.0;
        bound += std::abs(p - onehot) * dr[j] / Bd;
        if (want_grad) {
          const double gj = r.LF((j == t ? cf : 0.0) - p * cf);
          g[row * O + j] = gj;
          gd[row * O + j] =
              std::abs(cf) * p * (dr[j] + pd) +
              c.op * std::abs(cf) *
                  (p * (ls_err + 2.0 * std::abs(zr[j]) - 2.0 * std::abs(zr[t])) + onehot) +
              c.lo * std::abs(gj);
        }
      }
      loss_ops += ls_err / Bd;
    }
    res.loss = r.F(total / Bd);
    loss_ops += (Bd + 1.0) * std::abs(res.loss);
    res.loss_bound = bound + c.op * loss_ops;
  } else {
    const auto N = static_cast<double>(B * O);
    double total = 0.0, bound = 0.0;
    for (size_t i = 0; i < z.size(); ++i) {
      const double d = z[i] - batch.targets[i];
      total += d * d;
      bound += 2.0 * std::abs(d) * dz[i] / N;
      if (want_grad) {
        g[i] = r.LF(2.0 / N * d * grad_scale);
        gd[i] = 2.0 * grad_scale / N * dz[i] + (4.0 * c.op + c.lo) * std::abs(g[i]);
      }
    }
    res.loss = r.F(total / N);
    loss_ops = (N + 3.0) * std::abs(res.loss);
    res.loss_bound = bound + c.op * loss_ops;
  }
  if (!want_grad) return res;

  // Backward, last layer first. On entry to layer l, g = dL/d(its output) * grad_scale.
  auto sensitivity = [&](const Stored& st) {
    for (size_t e = 0; e < st.v.size(); ++e) {
      if (st.store) res.sens_lowp += std::abs(g[e] * st.v[e]) / grad_scale;
      if (!st.ops.empty()) res.sens_fp32 += std::abs(g[e]) * st.ops[e] / grad_scale;
    }
  };
  res.sens_fp32 = loss_ops;
  h[0].store = true;
  for (size_t l = layers.size(); l-- > 0;) {
    const Layer& ly = layers[l];
    const Stored& in = h[l];
    const Stored& o = h[l + 1];
    sensitivity(o);
    const int64_t I = ly.in, Oc = ly.out;
    Vec gx(static_cast<size_t>(B * I), 0.0), gxd(gx.size(), 0.0);
    switch (ly.kind) {
      case Kind::linear: {
        const Vec& W = net.params.at(ly.name + ".weight");
        const Vec WL = lowp_copy(W);
        Vec dW(static_cast<size_t>(Oc * I)), dWd(dW.size()), db(Oc), dbd(Oc);
        for (int64_t j = 0; j < Oc; ++j) {
          for (int64_t i = 0; i < I; ++i) {
            double s = 0.0, sa = 0.0, sd = 0.0;
            for (int64_t row = 0; row < B; ++row) {
              const double dy = g[row * Oc + j], xv = in.v[row * I + i];
              s += dy * xv;
              sa += std::abs(dy * xv);
              sd += gd[row * Oc + j] * std::abs(xv) + std::abs(dy) * in.d[row * I + i];
            }
            // Rounded to lowp first, then added to the (zero) f32 gradient.
            dW[j * I + i] = r.F(0.0 + r.LF(s));
            dWd[j * I + i] =
                sd + c.op * static_cast<double>(B + 1) * sa + c.lo * std::abs(dW[j * I + i]);
          }
          double s = 0.0, sa = 0.0, sd = 0.0;
          for (int64_t row = 0; row < B; ++row) {
            s += g[row * Oc + j], sa += std::abs(g[row * Oc + j]), sd += gd[row * Oc + j];
          }
          db[j] = r.F(0.0 + r.LF(s));
          dbd[j] = sd + c.op * static_cast<double>(B + 1) * sa + c.lo * std::abs(db[j]);
        }
        res.grads[ly.name + ".weight"] = dW, res.grad_bounds[ly.name + ".weight"] = dWd;
        res.grads[ly.name + ".bias"] = db, res.grad_bounds[ly.name + ".bias"] = dbd;
        for (size_t k = 0; k < W.size(); ++k) res.sens_weights += std::abs(dW[k] * W[k]);
        const Vec& bias = net.params.at(ly.name + ".bias");
        for (size_t k = 0; k < bias.size(); ++k) res.sens_weights += std::abs(db[k] * bias[k]);
        // The first layer's dx only feeds the sensitivity of the input cast.

        for (int64_t row = 0; row < B; ++row) {
          for (int64_t i = 0; i < I; ++i) {
            double s = 0.0, sa = 0.0, sd = 0.0;
            for (int64_t j = 0; j < Oc; ++j) {
              const double dy = g[row * Oc + j], w = WL[j * I + i];
              s += dy * w;
              sa += std::abs(dy * w);
              sd += gd[row * Oc + j] * std::abs(w) + std::abs(dy) * c.w * std::abs(W[j * I + i]);
            }
            gx[row * I + i] = r.LF(s);
            gxd[row * I + i] =
                sd + c.op * static_cast<double>(Oc + 1) * sa + c.lo * std::abs(gx[row * I + i]);
          }
        }
        break;
      }
      case Kind::layer_norm: {
        const Vec& gam = net.params.at(ly.name + ".weight");
        const auto C = static_cast<double>(Oc);
        Vec dgam(Oc, 0.0), dgamd(Oc, 0.0), dbeta(Oc, 0.0), dbetad(Oc, 0.0);
        Vec dgam_abs(Oc, 0.0), dbeta_abs(Oc, 0.0);
        for (int64_t row = 0; row < B; ++row) {
          const double rstd = o.rstd[row];
          const double mu = std::abs(o.mean[row]);
          double m1 = 0.0, m2 = 0.0, dm1 = 0.0, dm2 = 0.0, ma = 0.0, mxa = 0.0, dxmean = 0.0;
          double xd = 0.0;
          for (int64_t k = 0; k < Oc; ++k) {
            const size_t e = static_cast<size_t>(row * Oc + k);
            const double gv = gam[k] * g[e], gvd = std::abs(gam[k]) * gd[e];
            const double xh = o.xhat[e];
            m1 += gv, m2 += gv * xh, dm1 += gvd;
            dm2 += gvd * std::abs(xh) + std::abs(gv) * o.dxhat[e];
            ma += std::abs(gv), mxa += std::abs(gv) * (std::abs(in.v[e]) + mu);
            dxmean += in.d[e];
          }
          m1 /= C, m2 /= C, dm1 /= C, dm2 /= C, ma /= C, mxa /= C, dxmean /= C;
          for (int64_t k = 0; k < Oc; ++k) {
            const size_t e = static_cast<size_t>(row * Oc + k);
            xd += std::abs(o.xhat[e]) * (in.d[e] + dxmean);
          }
          xd /= C;
          const double drstd = rstd * rstd * xd + c.op * (C + 4.0) * rstd;
          for (int64_t k = 0; k < Oc; ++k) {
            const size_t e = static_cast<size_t>(row * Oc + k);
            const double gv = gam[k] * g[e], gvd = std::abs(gam[k]) * gd[e];
            const double xh = o.xhat[e];
            const double inner = gv - m1 - xh * m2;
            gx[e] = r.LF(rstd * inner);
            // The fp32 evaluation (PyTorch's uncentred form a dyg + b x + c, with sums of
            // dyg * x) cancels terms of size |x| + |mean|, not |x - mean|.
            const double ops = rstd * (std::abs(gv) + ma) + rstd * rstd * std::abs(xh) * mxa +
                               3.0 * rstd * rstd * std::abs(m2) * (std::abs(in.v[e]) + mu);
            gxd[e] = drstd * std::abs(inner) +
                     rstd * (gvd + dm1 + o.dxhat[e] * std::abs(m2) + std::abs(xh) * dm2) +
                     c.op * (C + 6.0) * ops + c.lo * std::abs(gx[e]);
            dgam[k] += g[e] * xh;
            dgam_abs[k] += std::abs(g[e] * xh);
            dgamd[k] += gd[e] * std::abs(xh) + std::abs(g[e]) * o.dxhat[e];
            dbeta[k] += g[e];
            dbeta_abs[k] += std::abs(g[e]);
            dbetad[k] += gd[e];
          }
        }
        for (int64_t k = 0; k < Oc; ++k) {
          dgam[k] = r.F(dgam[k]);
          dbeta[k] = r.F(dbeta[k]);
          dgamd[k] += c.op * (Bd + 4.0) * dgam_abs[k];
          dbetad[k] += c.op * (Bd + 1.0) * dbeta_abs[k];
        }
        res.grads[ly.name + ".weight"] = dgam, res.grad_bounds[ly.name + ".weight"] = dgamd;
        res.grads[ly.name + ".bias"] = dbeta, res.grad_bounds[ly.name + ".bias"] = dbetad;
        break;
      }
      case Kind::activation: {
        const config::Activation a = net.model.activation;
        for (size_t i = 0; i < gx.size(); ++i) {
          const double xv = in.v[i], yv = o.v[i], dy = g[i], dyd = gd[i];
          switch (a) {
            case config::Activation::relu: {
              // The model differentiates through its (lowp) output: y > 0.
              gx[i] = yv > 0.0 ? dy : 0.0;
              gxd[i] =
                  (yv > 0.0 ? dyd : 0.0) + (std::abs(xv) <= in.d[i] ? std::abs(dy) + dyd : 0.0);
              break;
            }
            case config::Activation::gelu: {
              const double gp = gelu_grad(xv);
              gx[i] = r.LF(dy * gp);
              gxd[i] = std::abs(gp) * dyd + kGeluDD * std::abs(dy) * in.d[i] +
                       (c.op * c.trans + c.lo) * std::abs(gx[i]);
              break;
            }
            case config::Activation::tanh: {
              const double t = 1.0 - yv * yv;
              gx[i] = r.LF(dy * t);
              gxd[i] = std::abs(t) * dyd + 2.0 * std::abs(yv * dy) * o.d[i] +
                       (3.0 * c.op + c.lo) * std::abs(gx[i]);
              break;
            }
          }
        }
        break;
      }
      case Kind::dropout: {
        if (!o.dropped) {
          gx = g, gxd = gd;
          break;
        }
        for (size_t i = 0; i < gx.size(); ++i) {
          if (!o.keep[i]) continue;
          gx[i] = r.LF(g[i] * o.scale);
          gxd[i] = o.scale * gd[i] + (c.op + c.lo) * std::abs(gx[i]);
        }
        break;
      }
    }
    g = std::move(gx);
    gd = std::move(gxd);
  }
  sensitivity(h[0]);
  res.sens_weights /= grad_scale;
  return res;
}

// ---- helpers shared by the tests ----

inline config::ModelConfig mlp(std::vector<int64_t> hidden, config::Activation a,
                               bool layer_norm = false, double dropout = 0.0) {
  config::ModelConfig m;
  m.type = config::ModelType::mlp;
  m.hidden = std::move(hidden);
  m.activation = a;
  m.layer_norm = layer_norm;
  m.dropout = dropout;
  return m;
}

// Seeded inputs: x ~ N(0, 1), labels uniform, regression targets ~ N(0, 1).
inline Batch make_batch(int64_t rows, int64_t in, int64_t out, config::LossType loss,
                        uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch b;
  b.rows = rows;
  b.x.resize(static_cast<size_t>(rows * in));
  for (float& v : b.x) v = normal(rng);
  if (loss == config::LossType::cross_entropy) {
    std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(out - 1));
    b.labels.resize(static_cast<size_t>(rows));
    for (int32_t& v : b.labels) v = cls(rng);
  } else {
    b.targets.resize(static_cast<size_t>(rows * out));
    for (float& v : b.targets) v = normal(rng);
  }
  return b;
}

// Any float tensor's values as doubles (exact).
inline Vec read_values(Backend& b, const Tensor& t) {
  Vec out(t.numel());
  if (t.dtype() == DType::f32) {
    std::vector<float> v(t.numel());
    b.download(v.data(), t);
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  } else {
    std::vector<uint16_t> v(t.numel());
    b.download(v.data(), t);
    for (size_t i = 0; i < v.size(); ++i) {
      out[i] =
          t.dtype() == DType::f16 ? half_bits_to_float_portable(v[i]) : bf16_bits_to_float(v[i]);
    }
  }
  return out;
}

// The model's masters (or gradients) by state_dict name.
inline std::map<std::string, Vec> read_named(const Model& m, const Tensor& flat) {
  std::map<std::string, Vec> out;
  const Vec all = read_values(m.backend(), flat);
  for (const auto& e : m.layout().entries()) {
    out[e.name] = Vec(all.begin() + static_cast<std::ptrdiff_t>(e.offset),
                      all.begin() + static_cast<std::ptrdiff_t>(e.offset + e.numel));
  }
  return out;
}

inline Net net_of(const Mlp& m, const config::ModelConfig& cfg, config::LossType loss) {
  Net n;
  n.model = cfg;
  n.loss = loss;
  n.in = m.in_features();
  n.out = m.out_features();
  n.params = read_named(m, m.params());
  n.seed = m.seed();
  n.first_dropout_call = m.dropout_calls();
  return n;
}

// The batch's tensors on the backend, with `extra_rows` unused rows after it (so the model has
// to take views of the leading rows).
struct DeviceBatch {
  Tensor x, targets;
};
inline DeviceBatch upload(Backend& b, const Batch& batch, int64_t in, int64_t out,
                          int64_t extra_rows = 0) {
  DeviceBatch d;
  const int64_t rows = batch.rows + extra_rows;
  std::vector<float> x(batch.x);
  x.resize(static_cast<size_t>(rows * in), 7.0f);
  d.x = b.from_host({rows, in}, DType::f32, x.data());
  if (!batch.labels.empty()) {
    std::vector<int32_t> l(batch.labels);
    l.resize(static_cast<size_t>(rows), 0);
    d.targets = b.from_host({rows}, DType::i32, l.data());
  } else {
    std::vector<float> t(batch.targets);
    t.resize(static_cast<size_t>(rows * out), 0.0f);
    d.targets = b.from_host({rows, out}, DType::f32, t.data());
  }
  return d;
}

// |got - want| <= tol element by element. On failure: the worst element (largest share of its
// budget), both values, the tolerance and the share used.
inline ::testing::AssertionResult within(const std::string& what, const Vec& got, const Vec& want,
                                         const Vec& tol) {
  if (got.size() != want.size() || tol.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": sizes differ (" << got.size() << ", "
                                         << want.size() << ", " << tol.size() << ")";
  }
  double worst = 0.0;
  size_t wi = 0, bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double share = err == 0.0 ? 0.0 : (tol[i] > 0.0 ? err / tol[i] : INFINITY);
    if (!(share <= 1.0)) ++bad;
    if (!(share <= worst)) worst = share, wi = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << std::setprecision(10) << what << ": " << bad << " of " << got.size()
     << " elements outside the tolerance; worst [" << wi << "]: got " << got[wi] << ", want "
     << want[wi] << ", |diff| " << std::abs(got[wi] - want[wi]) << ", tolerance " << tol[wi] << " ("
     << worst * 100.0 << "% of the budget)";
  return ::testing::AssertionFailure() << os.str();
}

// The largest share of the budget any element used (for the logs).
inline double budget_used(const Vec& got, const Vec& want, const Vec& tol) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (err > 0.0) worst = std::max(worst, tol[i] > 0.0 ? err / tol[i] : INFINITY);
  }
  return worst;
}

inline Vec scaled(const Vec& v, double k) {
  Vec out(v);
  for (double& x : out) x *= k;
  return out;
}

}  // namespace ampctl::nn::ref
