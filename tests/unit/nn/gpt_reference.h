// An independent fp64 emulation of the GPT (nn/models/gpt.h) forward and backward, rounding where
// docs/reference.md, "Precision" (the GPT table) says autocast rounds, written as plain loops that
// share nothing with lib/src/nn but the parameter values and the Philox dropout mask
// (nn::dropout_keep on nn::dropout_stream).
//
// Rounding: L(.) at every tensor of the compute dtype (round_to_half / round_to_bf16, or float in
// fp32), F(.) at every fp32 result; an fp32 accumulation is emulated as an exact double sum
// rounded once to float, an elementwise fp32 op as the double formula rounded once.
//
// Bounds (as nn_reference.h): beside every value v a first-order bound d on how far the model's
// value may be from it, propagated op by op:
//   * a K-term sum charges op * K * sum |terms| (Higham's gamma_K: the model sums in float in
//     its own order), a transcendental trans * op * |value|, a fixed-length float formula
//     (LayerNorm, softmax, GELU) its operation count times its terms' magnitudes;
//   * inputs' bounds go through |d out / d in| (for the nonlinear maps with the Lipschitz
//     constant of the derivative over the interval: GELU'' <= 0.8, softmax's and LayerNorm's
//     as written in each op);
//   * every store to the compute dtype charges lo * |value|: with lo = 2 u_lowp that covers a
//     rounding boundary falling between the model's and the emulation's value (a one-ulp flip);
//     with lo = 0 the bound is that of fp32 summation order alone (no flip anywhere), D0.
// The tests allow 2 d (second-order terms).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ampctl/core/half.h"
#include "ampctl/math/nn_math.h"
#include "ampctl/nn/module.h"

namespace ampctl::nn::gptref {

enum class Format { f32, f16, bf16 };

struct Coef {
  double lo = 0.0;      // per store to the compute dtype (relative)
  double op = 0x1p-24;  // per fp32 operation (relative to its terms)
  double trans = 4.0;   // fp32 operations per transcendental
};

struct Config {
  int64_t n_layer = 2, n_head = 2, n_embd = 16, block_size = 8, vocab = 11;
  bool bias = true, tie = true;
  double dropout = 0.0;
  uint64_t seed = 0;
};

// A value and its bound.
struct E {
  double v = 0.0, d = 0.0;
};
using T = std::vector<E>;

struct Result {
  T logits;
  E loss;
  std::map<std::string, T> grads;  // by parameter name (the tied head's summed into wte)
};

class Emulator {
 public:
  Emulator(const Config& cfg, Format fmt, const Coef& coef,
           const std::map<std::string, std::vector<double>>& params)
      : m_cfg(cfg), m_fmt(fmt), m_c(coef), m_p(params) {}

  // tokens/targets: B x T ids, row-major. grad_scale seeds the backward (loss * grad_scale).
  Result run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int64_t B,
             int64_t Tn, bool training, double grad_scale, uint64_t first_call = 0);

 private:
  double F(double v) const { return static_cast<double>(static_cast<float>(v)); }
  double L(double v) const {
    const float f = static_cast<float>(v);
    switch (m_fmt) {
      case Format::f32:
        return f;
      case Format::f16:
        return round_to_half(f);
      case Format::bf16:
        return round_to_bf16(f);
    }
    return f;
  }
  // A store to the compute dtype of an fp32 result v with bound d.
  E SL(double v, double d) const {
    const double y = L(F(v));
    return {y, d + m_c.lo * std::abs(y)};
  }
  E SF(double v, double d) const { return {F(v), d}; }
  const std::vector<double>& P(const std::string& n) const { return m_p.at(n); }
  // The lowp copy of a parameter (its master in fp32).
  std::vector<double> PL(const std::string& n) const {
    std::vector<double> out = P(n);
    for (double& x : out) x = L(x);
    return out;
  }

  // y[r, o] = store(sum_i x[r, i] w[o, i] + b[o]), x [R, I] with bounds, w [O, I] exact.
  T linear(const T& x, int64_t R, int64_t I, const std::vector<double>& w, int64_t O,
           const std::vector<double>* b) const;
  // Backward of linear: accumulates the weight (and bias) gradient, rounded to lowp first, into
  // gw/gb, and returns dx = store(dy w).
  T linear_back(const T& dy, const T& x, int64_t R, int64_t I, const std::vector<double>& w,
                int64_t O, T& gw, T* gb) const;
  // LayerNorm forward: y in the compute dtype; saves xhat with bounds and rstd.
  struct LnSave {
    std::vector<double> rstd;
    T xhat;
  };
  T layer_norm(const T& x, int64_t R, int64_t C, const std::vector<double>& g,
               const std::vector<double>* b, LnSave& save) const;
  // LayerNorm backward: dx (f32), accumulates dgamma/dbeta (f32).
  T layer_norm_back(const T& dy, const LnSave& s, int64_t R, int64_t C,
                    const std::vector<double>& g, T& dg, T* db) const;
  T dropout(const T& x, bool lowp, uint64_t stream) const;

  Config m_cfg;
  Format m_fmt;
  Coef m_c;
  std::map<std::string, std::vector<double>> m_p;
};

inline T Emulator::linear(const T& x, int64_t R, int64_t I, const std::vector<double>& w, int64_t O,
                          const std::vector<double>* b) const {
  T y(static_cast<size_t>(R * O));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t o = 0; o < O; ++o) {
      double s = b ? (*b)[o] : 0.0, sa = b ? std::abs((*b)[o]) : 0.0, sd = 0.0;
      for (int64_t i = 0; i < I; ++i) {
        const double wv = w[o * I + i];
        const E& xv = x[r * I + i];
        s += wv * xv.v;
        sa += std::abs(wv * xv.v);
        sd += std::abs(wv) * xv.d;
      }
      y[r * O + o] = SL(s, sd + m_c.op * static_cast<double>(I + 1) * sa);
    }
  }
  return y;
}

inline T Emulator::linear_back(const T& dy, const T& x, int64_t R, int64_t I,
                               const std::vector<double>& w, int64_t O, T& gw, T* gb) const {
  // dW = dY^T X: a lowp product (fp32: straight into the f32 gradient), then added in fp32.
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t i = 0; i < I; ++i) {
      double s = 0.0, sa = 0.0, sd = 0.0;
      for (int64_t r = 0; r < R; ++r) {
        const E& a = dy[r * O + o];
        const E& bx = x[r * I + i];
        s += a.v * bx.v;
        sa += std::abs(a.v * bx.v);
        sd += std::abs(a.v) * bx.d + std::abs(bx.v) * a.d;
      }
      const E t = SL(s, sd + m_c.op * static_cast<double>(R) * sa);
      E& g = gw[o * I + i];
      g = SF(g.v + t.v, g.d + t.d + m_c.op * std::abs(g.v + t.v));
    }
  }
  if (gb) {
    for (int64_t o = 0; o < O; ++o) {
      double s = 0.0, sa = 0.0, sd = 0.0;
      for (int64_t r = 0; r < R; ++r) {
        s += dy[r * O + o].v;
        sa += std::abs(dy[r * O + o].v);
        sd += dy[r * O + o].d;
      }
      const E t = SL(s, sd + m_c.op * static_cast<double>(R) * sa);
      E& g = (*gb)[o];
      g = SF(g.v + t.v, g.d + t.d + m_c.op * std::abs(g.v + t.v));
    }
  }
  T dx(static_cast<size_t>(R * I));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < I; ++i) {
      double s = 0.0, sa = 0.0, sd = 0.0;
      for (int64_t o = 0; o < O; ++o) {
        const double wv = w[o * I + i];
        s += dy[r * O + o].v * wv;
        sa += std::abs(dy[r * O + o].v * wv);
        sd += dy[r * O + o].d * std::abs(wv);
      }
      dx[r * I + i] = SL(s, sd + m_c.op * static_cast<double>(O) * sa);
    }
  }
  return dx;
}

inline T Emulator::layer_norm(const T& x, int64_t R, int64_t C, const std::vector<double>& g,
                              const std::vector<double>* b, LnSave& save) const {
  const double eps = 1e-5;
  const auto n = static_cast<double>(C);
  T y(static_cast<size_t>(R * C));
  save.rstd.assign(static_cast<size_t>(R), 0.0);
  save.xhat.assign(static_cast<size_t>(R * C), E{});
  for (int64_t r = 0; r < R; ++r) {
    const E* xr = &x[r * C];
    double sum = 0.0, sumabs = 0.0, dmax = 0.0;
    for (int64_t k = 0; k < C; ++k) {
      sum += xr[k].v, sumabs += std::abs(xr[k].v), dmax = std::max(dmax, xr[k].d);
    }
    const double mean = F(sum / n);
    double var = 0.0;
    for (int64_t k = 0; k < C; ++k) var += (xr[k].v - mean) * (xr[k].v - mean);
    var = F(var / n);
    const double rstd = F(1.0 / std::sqrt(var + eps));
    save.rstd[r] = rstd;
    // |d xhat_k| <= rstd (d_k + d_mean) + |xhat_k| |d rstd| / rstd, d_mean <= max d, and
    // |d rstd| / rstd <= |d var| / (2 var) <= mean(|xhat| (d + max d)) (first order).
    double rel = 0.0;
    for (int64_t k = 0; k < C; ++k) rel += std::abs((xr[k].v - mean) * rstd) * (xr[k].d + dmax);
    rel = rel / n * rstd;
    for (int64_t k = 0; k < C; ++k) {
      const double xh = (xr[k].v - mean) * rstd;
      const double ops = m_c.op * ((2.0 * n + 8.0) * (std::abs(xh) + 1.0) + rstd * sumabs);
      const double dxh = rstd * (xr[k].d + dmax) + std::abs(xh) * rel + ops;
      save.xhat[r * C + k] = {xh, dxh};
      const double beta = b ? (*b)[k] : 0.0;
      const double v = xh * g[k] + beta;
      y[r * C + k] =
          SL(v, std::abs(g[k]) * dxh + 2.0 * m_c.op * (std::abs(xh * g[k]) + std::abs(beta)));
    }
  }
  return y;
}

inline T Emulator::layer_norm_back(const T& dy, const LnSave& s, int64_t R, int64_t C,
                                   const std::vector<double>& g, T& dg, T* db) const {
  // PyTorch: dx = rstd (dy g - mean(dy g) - xhat mean(dy g xhat)), in fp32.
  const auto n = static_cast<double>(C);
  T dx(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r) {
    const double a = s.rstd[r];
    double m1 = 0.0, m2 = 0.0, m1a = 0.0, m2a = 0.0, dm1 = 0.0, dm2 = 0.0;
    double xmax = 0.0, dxh_max = 0.0;
    for (int64_t k = 0; k < C; ++k) {
      const E& d = dy[r * C + k];
      const E& xh = s.xhat[r * C + k];
      const double dg_ = d.v * g[k];
      m1 += dg_, m1a += std::abs(dg_), dm1 += d.d * std::abs(g[k]);
      m2 += dg_ * xh.v, m2a += std::abs(dg_ * xh.v);
      dm2 += d.d * std::abs(g[k] * xh.v) + std::abs(dg_) * xh.d;
      xmax = std::max(xmax, std::abs(xh.v));
      dxh_max = std::max(dxh_max, xh.d);
    }
    m1 /= n, m2 /= n, m1a /= n, m2a /= n, dm1 /= n, dm2 /= n;
    for (int64_t k = 0; k < C; ++k) {
      const E& d = dy[r * C + k];
      const E& xh = s.xhat[r * C + k];
      const double inner = d.v * g[k] - m1 - xh.v * m2;
      const double v = a * inner;
      // The rstd of the model may differ by rstd * max d(xhat) relatively (first order).
      const double bound =
          a * (d.d * std::abs(g[k]) + dm1 + xh.d * std::abs(m2) + std::abs(xh.v) * dm2) +
          std::abs(v) * dxh_max +
          m_c.op * a * (2.0 * n + 12.0) *
              (std::abs(d.v * g[k]) + m1a + (std::abs(xh.v) + 1.0) * m2a);
      dx[r * C + k] = SF(v, bound);
    }
  }
  for (int64_t k = 0; k < C; ++k) {
    double sg = 0.0, sga = 0.0, sgd = 0.0, sb = 0.0, sba = 0.0, sbd = 0.0;
    for (int64_t r = 0; r < R; ++r) {
      const E& d = dy[r * C + k];
      const E& xh = s.xhat[r * C + k];
      sg += d.v * xh.v, sga += std::abs(d.v * xh.v),
          sgd += d.d * std::abs(xh.v) + std::abs(d.v) * xh.d;
      sb += d.v, sba += std::abs(d.v), sbd += d.d;
    }
    E& G = dg[k];
    G = SF(G.v + sg, G.d + sgd + m_c.op * static_cast<double>(R + 4) * (sga + std::abs(G.v)));
    if (db) {
      E& Bb = (*db)[k];
      Bb = SF(Bb.v + sb, Bb.d + sbd + m_c.op * static_cast<double>(R + 1) * (sba + std::abs(Bb.v)));
    }
  }
  return dx;
}

inline T Emulator::dropout(const T& x, bool lowp, uint64_t stream) const {
  const auto p = static_cast<float>(m_cfg.dropout);
  const double scale = nn::dropout_scale(p);
  T y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (!nn::dropout_keep(m_cfg.seed, stream, i, p)) continue;
    const double v = x[i].v * scale;
    y[i] = lowp ? SL(v, x[i].d * scale + m_c.op * std::abs(v)) : SF(v, x[i].d * scale);
  }
  return y;
}

namespace detail {
constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluA * x * x * x)));
}
inline double gelu_tanh_grad(double x) {
  const double inner = kGeluK * (x + kGeluA * x * x * x);
  const double t = std::tanh(inner);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluA * x * x);
}
// max |gelu_tanh''| (at 0: 2 * 0.5 * sqrt(2 / pi)) and a bound of |gelu_tanh'|.
constexpr double kGeluDD = 0.7979;
constexpr double kGeluD = 1.13;
}  // namespace detail

inline Result Emulator::run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                            int64_t B, int64_t Tn, bool training, double grad_scale,
                            uint64_t first_call) {
  using namespace detail;
  const int64_t C = m_cfg.n_embd, H = m_cfg.n_head, hs = C / H, V = m_cfg.vocab;
  const int64_t N = B * Tn, Lyr = m_cfg.n_layer;
  const bool lowp = true;  // stores to the compute dtype (float itself in fp32)
  const bool drop = training && m_cfg.dropout > 0.0;
  const double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  uint64_t call = first_call;
  auto next_stream = [&] { return nn::dropout_stream(call++); };
  auto name = [](int64_t l, const char* s) {
    return "transformer.h." + std::to_string(l) + "." + s;
  };
  const bool bias = m_cfg.bias;
  auto bvec = [&](const std::string& n) -> std::vector<double> {
    return bias ? PL(n) : std::vector<double>{};
  };

  // ---- forward ----
  const std::vector<double>& wte = P("transformer.wte.weight");
  const std::vector<double>& wpe = P("transformer.wpe.weight");
  T x(static_cast<size_t>(N * C));
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r % Tn;
    for (int64_t k = 0; k < C; ++k) x[r * C + k] = SF(wte[tokens[r] * C + k] + wpe[t * C + k], 0.0);
  }
  uint64_t s_emb = 0;
  if (drop) x = dropout(x, false, s_emb = next_stream());

  struct Saved {
    T x_in, ln1, q, k, v, probs, att, yrows, x_mid, ln2, fc, gelu;
    LnSave s1, s2;
    uint64_t s_attn = 0, s_r1 = 0, s_r2 = 0;
  };
  std::vector<Saved> sv(static_cast<size_t>(Lyr));
  auto head_index = [&](int64_t b, int64_t h, int64_t t, int64_t d) {
    return ((b * H + h) * Tn + t) * hs + d;
  };
  for (int64_t l = 0; l < Lyr; ++l) {
    Saved& s = sv[l];
    s.x_in = x;
    s.ln1 = layer_norm(x, N, C, P(name(l, "ln_1.weight")),
                       bias ? &P(name(l, "ln_1.bias")) : nullptr, s.s1);
    const std::vector<double> wa = PL(name(l, "attn.c_attn.weight")),
                              ba = bvec(name(l, "attn.c_attn.bias"));
    const T qkv = linear(s.ln1, N, C, wa, 3 * C, bias ? &ba : nullptr);
    s.q.assign(static_cast<size_t>(N * C), E{});
    s.k = s.q;
    s.v = s.q;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tn; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < hs; ++d) {
            const int64_t r = b * Tn + t;
            s.q[head_index(b, h, t, d)] = qkv[r * 3 * C + h * hs + d];
            s.k[head_index(b, h, t, d)] = qkv[r * 3 * C + C + h * hs + d];
            s.v[head_index(b, h, t, d)] = qkv[r * 3 * C + 2 * C + h * hs + d];
          }
    // scores, scaled (both in the compute dtype), the fp32 causal softmax.
    s.probs.assign(static_cast<size_t>(B * H * Tn * Tn), E{});
    for (int64_t bh = 0; bh < B * H; ++bh) {
      for (int64_t i = 0; i < Tn; ++i) {
        std::vector<E> sc(static_cast<size_t>(i + 1));
        double dmax = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double a = 0.0, aa = 0.0, ad = 0.0;
          for (int64_t d = 0; d < hs; ++d) {
            const E& qv = s.q[(bh * Tn + i) * hs + d];
            const E& kv = s.k[(bh * Tn + j) * hs + d];
            a += qv.v * kv.v, aa += std::abs(qv.v * kv.v),
                ad += std::abs(qv.v) * kv.d + std::abs(kv.v) * qv.d;
          }
          const E raw = SL(a, ad + m_c.op * static_cast<double>(hs) * aa);
          sc[j] = SL(raw.v * scale, raw.d * scale + m_c.op * std::abs(raw.v * scale));
          dmax = std::max(dmax, sc[j].d);
        }
        double mx = -INFINITY;
        for (const E& e : sc) mx = std::max(mx, e.v);
        double sum = 0.0, spread = 0.0;
        for (const E& e : sc) sum += std::exp(e.v - mx), spread = std::max(spread, mx - e.v);
        for (int64_t j = 0; j <= i; ++j) {
          const double pj = std::exp(sc[j].v - mx) / sum;
          // |d p_j| <= p_j (d s_j + sum_k p_k d s_k) <= 2 p_j max d; the float evaluation:
          // s - max (its rounding moves exp by |s - max| u), exp (trans), a sum of i + 1
          // terms, a division.
          const double bound =
              2.0 * pj * dmax +
              m_c.op * pj * (2.0 * m_c.trans + static_cast<double>(i + 4) + 2.0 * spread);
          s.probs[(bh * Tn + i) * Tn + j] = SF(pj, bound);
        }
      }
    }
    if (drop) {
      s.att = dropout(s.probs, lowp, s.s_attn = next_stream());
    } else {
      s.att = s.probs;
      for (E& e : s.att) e = SL(e.v, e.d);
    }
    // y = att @ v, back to rows.
    s.yrows.assign(static_cast<size_t>(N * C), E{});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tn; ++i)
          for (int64_t d = 0; d < hs; ++d) {
            double a = 0.0, aa = 0.0, ad = 0.0;
            for (int64_t j = 0; j < Tn; ++j) {
              const E& p = s.att[((b * H + h) * Tn + i) * Tn + j];
              const E& vv = s.v[head_index(b, h, j, d)];
              a += p.v * vv.v, aa += std::abs(p.v * vv.v),
                  ad += std::abs(p.v) * vv.d + std::abs(vv.v) * p.d;
            }
            s.yrows[(b * Tn + i) * C + h * hs + d] =
                SL(a, ad + m_c.op * static_cast<double>(Tn) * aa);
          }
    const std::vector<double> wp = PL(name(l, "attn.c_proj.weight")),
                              bp = bvec(name(l, "attn.c_proj.bias"));
    T br = linear(s.yrows, N, C, wp, C, bias ? &bp : nullptr);
    if (drop) br = dropout(br, lowp, s.s_r1 = next_stream());
    s.x_mid.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i].v + br[i].v;
      s.x_mid[i] = SF(v, x[i].d + br[i].d + m_c.op * std::abs(v));
    }
    s.ln2 = layer_norm(s.x_mid, N, C, P(name(l, "ln_2.weight")),
                       bias ? &P(name(l, "ln_2.bias")) : nullptr, s.s2);
    const std::vector<double> wf = PL(name(l, "mlp.c_fc.weight")),
                              bf = bvec(name(l, "mlp.c_fc.bias"));
    s.fc = linear(s.ln2, N, C, wf, 4 * C, bias ? &bf : nullptr);
    s.gelu.resize(s.fc.size());
    for (size_t i = 0; i < s.fc.size(); ++i) {
      const double xv = s.fc[i].v, y = gelu_tanh(xv);
      const double arg = std::abs(kGeluK * (xv + kGeluA * xv * xv * xv));
      // float evaluation: ~8 operations on |x|-sized terms, tanh (trans) amplified by 0.5 |x|,
      // its argument's rounding by |tanh'| <= 1.
      const double ops =
          m_c.op * (0.5 * std::abs(xv) * (2.0 * m_c.trans + 6.0 * arg + 4.0) + 4.0 * std::abs(y));
      s.gelu[i] = SL(y, kGeluD * s.fc[i].d + ops);
    }
    const std::vector<double> wm = PL(name(l, "mlp.c_proj.weight")),
                              bm = bvec(name(l, "mlp.c_proj.bias"));
    br = linear(s.gelu, N, 4 * C, wm, C, bias ? &bm : nullptr);
    if (drop) br = dropout(br, lowp, s.s_r2 = next_stream());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = s.x_mid[i].v + br[i].v;
      x[i] = SF(v, s.x_mid[i].d + br[i].d + m_c.op * std::abs(v));
    }
  }
  LnSave sf;
  const T lnf = layer_norm(x, N, C, P("transformer.ln_f.weight"),
                           bias ? &P("transformer.ln_f.bias") : nullptr, sf);
  const std::string head_name = m_cfg.tie ? "transformer.wte.weight" : "lm_head.weight";
  const std::vector<double> wh = PL(head_name);
  Result res;
  res.logits = linear(lnf, N, C, wh, V, nullptr);

  // ---- loss: fp32 cross-entropy, mean over the N rows ----
  double total = 0.0, total_d = 0.0;
  std::vector<double> lse(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) {
    const E* z = &res.logits[r * V];
    double mx = -INFINITY, dmax = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, z[j].v), dmax = std::max(dmax, z[j].d);
    double se = 0.0;
    for (int64_t j = 0; j < V; ++j) se += std::exp(z[j].v - mx);
    lse[r] = mx + std::log(se);
    total += lse[r] - z[targets[r]].v;
    // |d(lse - z_t)| <= max d + d_t; float: exp per term, V-term sum, log, subtractions.
    total_d += dmax + z[targets[r]].d +
               m_c.op * (static_cast<double>(V) + 3.0 * m_c.trans + 4.0) *
                   (std::abs(mx) + std::abs(lse[r]) + std::abs(z[targets[r]].v) + 1.0);
  }
  res.loss = {total / static_cast<double>(N),
              total_d / static_cast<double>(N) + m_c.op * static_cast<double>(N) * std::abs(total)};
  if (grad_scale <= 0.0) return res;

  // ---- backward ----
  auto zeros = [](const std::vector<double>& like) { return T(like.size()); };
  for (const auto& [n, v] : m_p) res.grads[n] = zeros(v);
  const double c = F(-grad_scale / static_cast<double>(N));
  T dlogits(static_cast<size_t>(N * V));
  for (int64_t r = 0; r < N; ++r) {
    const E* z = &res.logits[r * V];
    double dmax = 0.0;
    for (int64_t j = 0; j < V; ++j) dmax = std::max(dmax, z[j].d);
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(z[j].v - lse[r]);
      const double v = (j == targets[r] ? c : 0.0) - p * c;
      // |d p| <= 2 p max d (softmax); float: log_softmax (V + trans ops), exp, product.
      const double bound =
          std::abs(c) * (2.0 * p * dmax) +
          m_c.op * std::abs(c) * p * (static_cast<double>(V) + 3.0 * m_c.trans + 6.0) +
          m_c.op * std::abs(v);
      dlogits[r * V + j] = SL(v, bound);
    }
  }
  T& ghead = res.grads.at(head_name);
  T g = layer_norm_back(linear_back(dlogits, lnf, N, C, wh, V, ghead, nullptr), sf, N, C,
                        P("transformer.ln_f.weight"), res.grads.at("transformer.ln_f.weight"),
                        bias ? &res.grads.at("transformer.ln_f.bias") : nullptr);
  auto to_lowp = [&](const T& t) {
    T out(t.size());
    for (size_t i = 0; i < t.size(); ++i) out[i] = SL(t[i].v, t[i].d);
    return out;
  };
  auto add_into = [&](T& acc, const T& t) {
    for (size_t i = 0; i < acc.size(); ++i) {
      const double v = acc[i].v + t[i].v;
      acc[i] = SF(v, acc[i].d + t[i].d + m_c.op * std::abs(v));
    }
  };
  for (int64_t l = Lyr; l-- > 0;) {
    Saved& s = sv[l];
    // MLP branch.
    T d = to_lowp(g);
    if (drop) d = dropout(d, lowp, s.s_r2);
    const std::vector<double> wm = PL(name(l, "mlp.c_proj.weight"));
    T dgelu = linear_back(d, s.gelu, N, 4 * C, wm, C, res.grads.at(name(l, "mlp.c_proj.weight")),
                          bias ? &res.grads.at(name(l, "mlp.c_proj.bias")) : nullptr);
    T dfc(dgelu.size());
    for (size_t i = 0; i < dfc.size(); ++i) {
      const double xv = s.fc[i].v, gp = gelu_tanh_grad(xv);
      const double v = dgelu[i].v * gp;
      const double arg = std::abs(kGeluK * (xv + kGeluA * xv * xv * xv));
      const double ops = m_c.op * std::abs(dgelu[i].v) *
                         ((2.0 * m_c.trans + 12.0) * (1.0 + std::abs(xv) * (1.0 + arg)) + 2.0);
      dfc[i] = SL(v, std::abs(gp) * dgelu[i].d + kGeluDD * std::abs(dgelu[i].v) * s.fc[i].d + ops);
    }
    const std::vector<double> wf = PL(name(l, "mlp.c_fc.weight"));
    T dln2 = linear_back(dfc, s.ln2, N, C, wf, 4 * C, res.grads.at(name(l, "mlp.c_fc.weight")),
                         bias ? &res.grads.at(name(l, "mlp.c_fc.bias")) : nullptr);
    add_into(g, layer_norm_back(dln2, s.s2, N, C, P(name(l, "ln_2.weight")),
                                res.grads.at(name(l, "ln_2.weight")),
                                bias ? &res.grads.at(name(l, "ln_2.bias")) : nullptr));
    // Attention branch.
    d = to_lowp(g);
    if (drop) d = dropout(d, lowp, s.s_r1);
    const std::vector<double> wp = PL(name(l, "attn.c_proj.weight"));
    const T dy = linear_back(d, s.yrows, N, C, wp, C, res.grads.at(name(l, "attn.c_proj.weight")),
                             bias ? &res.grads.at(name(l, "attn.c_proj.bias")) : nullptr);
    T dqkv(static_cast<size_t>(N * 3 * C));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t bh = b * H + h;
        auto dyh = [&](int64_t t, int64_t dd) -> const E& {
          return dy[(b * Tn + t) * C + h * hs + dd];
        };
        // datt = dY v^T (lowp), dv = att^T dY (lowp).
        std::vector<E> datt(static_cast<size_t>(Tn * Tn));
        for (int64_t i = 0; i < Tn; ++i)
          for (int64_t j = 0; j < Tn; ++j) {
            double a = 0.0, aa = 0.0, ad = 0.0;
            for (int64_t dd = 0; dd < hs; ++dd) {
              const E& u = dyh(i, dd);
              const E& vv = s.v[head_index(b, h, j, dd)];
              a += u.v * vv.v, aa += std::abs(u.v * vv.v),
                  ad += std::abs(u.v) * vv.d + std::abs(vv.v) * u.d;
            }
            datt[i * Tn + j] = SL(a, ad + m_c.op * static_cast<double>(hs) * aa);
          }
        for (int64_t j = 0; j < Tn; ++j)
          for (int64_t dd = 0; dd < hs; ++dd) {
            double a = 0.0, aa = 0.0, ad = 0.0;
            for (int64_t i = 0; i < Tn; ++i) {
              const E& p = s.att[(bh * Tn + i) * Tn + j];
              const E& u = dyh(i, dd);
              a += p.v * u.v, aa += std::abs(p.v * u.v),
                  ad += std::abs(p.v) * u.d + std::abs(u.v) * p.d;
            }
            dqkv[(b * Tn + j) * 3 * C + 2 * C + h * hs + dd] =
                SL(a, ad + m_c.op * static_cast<double>(Tn) * aa);
          }
        std::vector<E> dprobs = datt;  // widened: exact
        if (drop) {
          // attn_dropout's backward in fp32 on the widened gradient, element (i, j) of head bh.
          const auto p = static_cast<float>(m_cfg.dropout);
          const double sc = nn::dropout_scale(p);
          for (int64_t i = 0; i < Tn * Tn; ++i) {
            const uint64_t idx = static_cast<uint64_t>(bh * Tn * Tn + i);
            dprobs[i] = nn::dropout_keep(m_cfg.seed, s.s_attn, idx, p)
                            ? SF(datt[i].v * sc, datt[i].d * sc + m_c.op * std::abs(datt[i].v * sc))
                            : E{};
          }
        }
        // softmax backward (fp32), rounded to lowp, times scale (lowp).
        std::vector<E> dsc(static_cast<size_t>(Tn * Tn));
        for (int64_t i = 0; i < Tn; ++i) {
          double dot = 0.0, dota = 0.0, dotd = 0.0;
          for (int64_t k = 0; k <= i; ++k) {
            const E& p = s.probs[(bh * Tn + i) * Tn + k];
            const E& q = dprobs[i * Tn + k];
            dot += p.v * q.v, dota += std::abs(p.v * q.v),
                dotd += std::abs(p.v) * q.d + std::abs(q.v) * p.d;
          }
          for (int64_t j = 0; j <= i; ++j) {
            const E& p = s.probs[(bh * Tn + i) * Tn + j];
            const E& q = dprobs[i * Tn + j];
            const double inner = q.v - dot;
            const double v = p.v * inner;
            const double bound =
                p.v * (q.d + dotd) + std::abs(inner) * p.d +
                m_c.op * p.v * (std::abs(q.v) + static_cast<double>(i + 3) * dota) +
                m_c.op * std::abs(v);
            const E gl = SL(v, bound);
            dsc[i * Tn + j] = SL(gl.v * scale, gl.d * scale + m_c.op * std::abs(gl.v * scale));
          }
        }
        // dq = dS k, dk = dS^T q.
        for (int64_t i = 0; i < Tn; ++i)
          for (int64_t dd = 0; dd < hs; ++dd) {
            double a = 0.0, aa = 0.0, ad = 0.0, b2 = 0.0, ba = 0.0, bd = 0.0;
            for (int64_t j = 0; j < Tn; ++j) {
              const E& sij = dsc[i * Tn + j];
              const E& kv = s.k[head_index(b, h, j, dd)];
              a += sij.v * kv.v, aa += std::abs(sij.v * kv.v),
                  ad += std::abs(sij.v) * kv.d + std::abs(kv.v) * sij.d;
              const E& sji = dsc[j * Tn + i];
              const E& qv = s.q[head_index(b, h, j, dd)];
              b2 += sji.v * qv.v, ba += std::abs(sji.v * qv.v),
                  bd += std::abs(sji.v) * qv.d + std::abs(qv.v) * sji.d;
            }
            dqkv[(b * Tn + i) * 3 * C + h * hs + dd] =
                SL(a, ad + m_c.op * static_cast<double>(Tn) * aa);
            dqkv[(b * Tn + i) * 3 * C + C + h * hs + dd] =
                SL(b2, bd + m_c.op * static_cast<double>(Tn) * ba);
          }
      }
    const std::vector<double> wa = PL(name(l, "attn.c_attn.weight"));
    T dln1 = linear_back(dqkv, s.ln1, N, C, wa, 3 * C, res.grads.at(name(l, "attn.c_attn.weight")),
                         bias ? &res.grads.at(name(l, "attn.c_attn.bias")) : nullptr);
    add_into(g, layer_norm_back(dln1, s.s1, N, C, P(name(l, "ln_1.weight")),
                                res.grads.at(name(l, "ln_1.weight")),
                                bias ? &res.grads.at(name(l, "ln_1.bias")) : nullptr));
  }
  if (drop) g = dropout(g, false, s_emb);
  // Embedding backward: per token (and per position) the fp32 sum over its rows, added once.
  T& gte = res.grads.at("transformer.wte.weight");
  T& gpe = res.grads.at("transformer.wpe.weight");
  auto scatter = [&](T& dst, auto row_of) {
    std::map<int64_t, std::vector<int64_t>> rows;
    for (int64_t r = 0; r < N; ++r) rows[row_of(r)].push_back(r);
    for (const auto& [id, rs] : rows) {
      for (int64_t k = 0; k < C; ++k) {
        double s = 0.0, sa = 0.0, sd = 0.0;
        for (int64_t r : rs)
          s += g[r * C + k].v, sa += std::abs(g[r * C + k].v), sd += g[r * C + k].d;
        const E t = SF(s, sd + m_c.op * static_cast<double>(rs.size()) * sa);
        E& o = dst[id * C + k];
        o = SF(o.v + t.v, o.d + t.d + m_c.op * std::abs(o.v + t.v));
      }
    }
  };
  scatter(gte, [&](int64_t r) { return static_cast<int64_t>(tokens[r]); });
  scatter(gpe, [&](int64_t r) { return r % Tn; });
  return res;
}

}  // namespace ampctl::nn::gptref
