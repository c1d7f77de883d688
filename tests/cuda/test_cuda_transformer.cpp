// The CUDA backend against the CPU reference: the transformer ops (backend.h, "transformer
// ops": embedding, strided-batched gemm, the head layout copies, the causal softmax, the fused
// causal attention), then the attention's own properties on the GPU (no T x T buffer on the
// fused path, bitwise repeats). The harness and the comparison rules: cpu_vs_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/nn_math.h"
#include "ampctl/nn/rope.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

// ---- the transformer ops ----

// Token ids in [0, vocab) with a share of repeats of a few ids (the embedding backward's groups).
std::vector<int32_t> token_ids(std::mt19937_64& rng, size_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) {
    id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    if (rng() % 4 == 0) id = static_cast<int32_t>(rng() % 3 % vocab);
  }
  return ids;
}

void add_embedding_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    int64_t batch, time, vocab, positions, channels;
    bool token_grad;
  };
  // 4 x 300 = 1200 rows span two of the GPU sort's 1024-row chunks; 3000 ids exceed its block.
  const Variant variants[] = {{3, 17, 50, 20, 40, true},
                              {4, 300, 7, 300, 33, true},
                              {2, 1100, 3000, 1100, 8, true},
                              {1, 1, 1, 1, 1, true},
                              {5, 9, 11, 12, 16, false}};
  for (const Variant& v : variants) {
    const std::string dims = std::to_string(v.batch) + "x" + std::to_string(v.time) + "_V" +
                             std::to_string(v.vocab) + "_C" + std::to_string(v.channels);
    const int64_t rows = v.batch * v.time;
    // Forward: one float add on both sides: bitwise.
    CudaCase f;
    f.name = "embedding_forward_" + dims;
    f.make_inputs = [v, rows](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_i32({v.batch, v.time}, token_ids(rng, static_cast<size_t>(rows), v.vocab)),
          from_values({v.vocab, v.channels}, DType::f32,
                      random_values(rng, numel_of({v.vocab, v.channels}), -8, 2)),
          from_values({v.positions, v.channels}, DType::f32,
                      random_values(rng, numel_of({v.positions, v.channels}), -8, 2))};
    };
    f.run = [rows, v](Backend& be, std::vector<Tensor>& in) {
      Tensor out = be.empty({rows, v.channels}, DType::f32);
      be.embedding_forward(in[0], in[1], in[2], out);
      return std::vector<Tensor>{out};
    };
    cases.push_back(f);
    // Backward: the same float sums in the same (ascending row) order: bitwise, repeats included.
    CudaCase b;
    b.name = std::string("embedding_backward_") + (v.token_grad ? "" : "positions_only_") + dims;
    b.make_inputs = [v, rows](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_i32({v.batch, v.time}, token_ids(rng, static_cast<size_t>(rows), v.vocab)),
          from_values({rows, v.channels}, DType::f32,
                      random_values(rng, numel_of({rows, v.channels}), -10, 4)),
          from_values({v.vocab, v.channels}, DType::f32,
                      random_values(rng, numel_of({v.vocab, v.channels}), -4, 0)),
          from_values({v.positions, v.channels}, DType::f32,
                      random_values(rng, numel_of({v.positions, v.channels}), -4, 0))};
    };
    b.run = [v](Backend& be, std::vector<Tensor>& in) {
      be.embedding_backward(in[0], in[1], v.token_grad ? in[2] : Tensor{}, in[3]);
      return std::vector<Tensor>{in[2], in[3]};
    };
    cases.push_back(b);
  }
}

void add_gemm_batched_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType a, b, c;
    int64_t batch, m, n, k;
    bool ta, tb;
    float alpha, beta;
    bool integers;  // small integers, exact partial sums: bitwise
  };
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<Variant> variants = {
      // q @ k^T and att @ v as the GPT issues them, then the other layouts and type paths.
      {f16, f16, f16, 12, 37, 37, 16, false, true, 1.0f, 0.0f, false},
      {f16, f16, f16, 12, 37, 16, 37, false, false, 1.0f, 0.0f, false},
      {bf16, bf16, bf16, 6, 20, 24, 32, true, false, 1.0f, 0.0f, false},
      {f32, f32, f32, 5, 9, 13, 7, true, true, 0.5f, 1.0f, false},
      {f16, f16, f32, 4, 33, 17, 64, false, true, 1.0f, 1.0f, false},
      {f16, f32, f16, 3, 8, 9, 10, false, false, 1.0f, 0.0f, false},    // mixed inputs: widened
      {bf16, bf16, f16, 3, 8, 9, 10, false, false, 1.0f, 0.5f, false},  // C through f32
      {f16, f16, f16, 3, 4, 5, 0, false, false, 1.0f, 0.5f, false},     // k = 0: C = beta C
      {f16, f16, f16, 8, 32, 32, 64, false, true, 1.0f, 0.0f, true},
      {bf16, bf16, f32, 8, 16, 48, 64, true, false, 1.0f, 0.0f, true},
  };
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = "gemm_batched_" + tag(v.a) + "x" + tag(v.b) + "_to_" + tag(v.c) + "_" +
             std::to_string(v.batch) + "x" + std::to_string(v.m) + "x" + std::to_string(v.n) + "x" +
             std::to_string(v.k) + (v.ta ? "_At" : "") + (v.tb ? "_Bt" : "") +
             (v.beta != 0.0f ? "_beta" : "") + (v.integers ? "_exact" : "");
    const Shape as = v.ta ? Shape{v.batch, v.k, v.m} : Shape{v.batch, v.m, v.k};
    const Shape bs = v.tb ? Shape{v.batch, v.n, v.k} : Shape{v.batch, v.k, v.n};
    const Shape cs{v.batch, v.m, v.n};
    c.make_inputs = [v, as, bs, cs](std::mt19937_64& rng) {
      if (v.integers) {
        return std::vector<HostInput>{
            from_values(as, v.a, small_integers(rng, numel_of(as), -8, 8)),
            from_values(bs, v.b, small_integers(rng, numel_of(bs), -8, 8)),
            from_values(cs, v.c, small_integers(rng, numel_of(cs), -8, 8))};
      }
      return std::vector<HostInput>{from_values(as, v.a, random_values(rng, numel_of(as), -3, 2)),
                                    from_values(bs, v.b, random_values(rng, numel_of(bs), -3, 2)),
                                    from_values(cs, v.c, random_values(rng, numel_of(cs), -3, 2))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      be.gemm_batched(in[0], v.ta, in[1], v.tb, in[2], v.alpha, v.beta);
      return std::vector<Tensor>{in[2]};
    };
    if (!v.integers) {
      c.specs = [v](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
        // As linear_forward: each side within gamma_{k+2}(2^-23) W of the exact value, W =
        // |alpha| sum |a b| + |beta c| (any order, tensor cores possibly truncating): twice that.
        const std::vector<double> a = in[0].values(), b = in[1].values(), c0 = in[2].values();
        const double g = gamma_n(static_cast<double>(v.k + 2), 0x1p-23);
        std::vector<double> delta = abs_products(a, b, v.ta, v.tb, v.batch, v.m, v.n, v.k);
        for (size_t o = 0; o < delta.size(); ++o) {
          delta[o] = 2.0 * g * (std::fabs(v.alpha) * delta[o] + std::fabs(v.beta * c0[o]));
        }
        return std::vector<Spec>{within(delta)};
      };
    }
    cases.push_back(c);
  }
}

void add_heads_cases(std::vector<CudaCase>& cases) {
  for (DType d : {DType::f16, DType::f32}) {
    const int64_t B = 3, T = 11, H = 4, hs = 6, C = H * hs;
    for (int64_t column : {int64_t{0}, C, 2 * C}) {
      CudaCase c;
      c.name = "heads_copies_" + tag(d) + "_column" + std::to_string(column);
      c.make_inputs = [d](std::mt19937_64& rng) {
        return std::vector<HostInput>{
            from_values({B * T, 3 * C}, d, random_values(rng, numel_of({B * T, 3 * C}), -6, 6)),
            from_values({B * T, 3 * C}, d, random_values(rng, numel_of({B * T, 3 * C}), -6, 6))};
      };
      c.run = [d, column](Backend& be, std::vector<Tensor>& in) {
        Tensor heads = be.empty({B, H, T, hs}, d);
        be.heads_from_rows(in[0], column, heads);
        be.heads_to_rows(heads, in[1], column);  // into the other rows: the rest kept
        return std::vector<Tensor>{heads, in[1]};
      };
      cases.push_back(c);
    }
  }
}

// The causal softmax's scaled score as both backends form it.
double softmax_score(double x, float scale, bool round_scaled, DType d) {
  const float s = static_cast<float>(x * static_cast<double>(scale));
  return round_scaled ? static_cast<double>(decode(encode(s, d), d)) : static_cast<double>(s);
}

void add_causal_softmax_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType scores, probs;
    bool round_scaled, in_place;
    int64_t count, time;
  };
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  // 2 x 130 rows: a full 128-row block and a partial one; 1 x 1: a single unmasked element.
  const Variant variants[] = {{f32, f32, false, false, 6, 37},  {f16, f32, true, false, 6, 37},
                              {bf16, f32, true, false, 2, 130}, {f16, f16, false, false, 3, 64},
                              {bf16, bf16, true, false, 4, 17}, {f32, f32, false, true, 3, 29},
                              {f16, f32, false, false, 1, 1}};
  for (const Variant& v : variants) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(v.time));
    const std::string dims = std::to_string(v.count) + "x" + std::to_string(v.time);
    const Shape shape{v.count, v.time, v.time};
    CudaCase f;
    f.name = "causal_softmax_forward_" + tag(v.scores) + "_to_" + tag(v.probs) +
             (v.round_scaled ? "_round_scaled" : "") + (v.in_place ? "_in_place" : "") + "_" + dims;
    f.make_inputs = [v, shape](std::mt19937_64& rng) {
      std::vector<float> x = random_values(rng, numel_of(shape), -2, 4);
      for (float& e : x) e += 20.0f;  // a common offset: the max shift matters
      return std::vector<HostInput>{from_values(shape, v.scores, x)};
    };
    f.run = [v, scale, shape](Backend& be, std::vector<Tensor>& in) {
      Tensor p = v.in_place ? in[0] : be.empty(shape, v.probs);
      be.causal_softmax_forward(in[0], scale, v.round_scaled, p);
      return std::vector<Tensor>{p};
    };
    f.specs = [v, scale](const std::vector<HostInput>& in,
                         const std::vector<std::vector<double>>&) {
      // The same float operations in the same order, but expf's: each e_k differs by up to
      // kTranscendentalUlps ulps; the sum of i + 1 of them by those plus one ulp of the sum per
      // addition; p_j = e_j / sum by its operands' relative differences plus one ulp. Masked
      // elements: 0 on both sides (delta 0).
      const std::vector<double> x = in[0].values();
      const int64_t T = v.time;
      std::vector<double> delta(x.size(), 0.0);
      std::vector<double> e(static_cast<size_t>(T));
      for (int64_t r = 0; r < v.count * T; ++r) {
        const int64_t i = r % T;
        const size_t row = static_cast<size_t>(r * T);
        double mx = -kInf;
        for (int64_t j = 0; j <= i; ++j) {
          mx = std::max(mx, softmax_score(x[row + j], scale, v.round_scaled, v.scores));
        }
        double sum = 0.0, dsum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          e[j] = std::exp(softmax_score(x[row + j], scale, v.round_scaled, v.scores) - mx);
          sum += e[j];
          dsum += kTranscendentalUlps * ulp_near(e[j]);
        }
        dsum += static_cast<double>(i + 1) * ulp_near(sum);
        for (int64_t j = 0; j <= i; ++j) {
          const double p = e[j] / sum;
          delta[row + j] =
              p * (kTranscendentalUlps * ulp_near(e[j]) / e[j] + dsum / sum) + ulp_near(p);
        }
      }
      return std::vector<Spec>{within(delta)};
    };
    cases.push_back(f);
  }
  // The backward: no transcendental, the same float operations in the same order: bitwise.
  struct BackwardVariant {
    DType probs, dprobs, dscores;
    bool round_scaled;
    int64_t count, time;
  };
  const BackwardVariant backward[] = {{f32, f32, f32, false, 6, 37},
                                      {f32, f16, f16, true, 6, 37},
                                      {f32, bf16, bf16, true, 2, 130},
                                      {f16, f16, f16, false, 3, 64},
                                      {f32, f32, f16, true, 1, 1}};
  for (const BackwardVariant& v : backward) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(v.time));
    const Shape shape{v.count, v.time, v.time};
    CudaCase b;
    b.name = "causal_softmax_backward_" + tag(v.probs) + "_" + tag(v.dprobs) + "_to_" +
             tag(v.dscores) + (v.round_scaled ? "_round_scaled" : "") + "_" +
             std::to_string(v.count) + "x" + std::to_string(v.time);
    b.make_inputs = [v, shape](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values(shape, v.probs, uniform_values(rng, numel_of(shape), 0.0f, 0.2f)),
          from_values(shape, v.dprobs, random_values(rng, numel_of(shape), -8, 4))};
    };
    b.run = [v, scale, shape](Backend& be, std::vector<Tensor>& in) {
      Tensor ds = be.empty(shape, v.dscores);
      be.causal_softmax_backward(in[0], in[1], scale, v.round_scaled, ds);
      return std::vector<Tensor>{ds};
    };
    cases.push_back(b);
  }
}

// ---- fused causal attention (Backend::attention_forward / attention_backward) ----

double rounded(double x, DType d) {
  return static_cast<double>(decode(encode(static_cast<float>(x), d), d));
}

struct AttentionDeltas {
  std::vector<double> y, dq, dk, dv;
};

// The CPU runs the materialised composition (scores by gemm_batched, the fp32 causal softmax, P
// rounded to the compute dtype, two more products; backward likewise) and the GPU, for f16/bf16
// heads up to 64, the fused kernels of kernels/transformer_attention.cu (else the same composition
// on cuBLAS). Both take the same roundings at the same points but for the ones that differ by
// construction (transformer_attention.cu's opening comment); the bound propagates each difference
// to first order through the math, from the inputs in double (u_lo, eta_lo: the compute dtype's
// unit roundoff and half its smallest subnormal; g = gamma_{hs+2}(2^-23), gT = gamma_{T+2}(2^-23)):
//   * a score s_ij = round(round(q.k) * scale): the fp32 dots differ by 2 g A (A = sum |q_d k_d|),
//     so the two rounded products by that plus one ulp_lo, and after the scaling and its rounding
//     by delta_s = scale (2 g A + ulp_lo) + ulp_lo(s);
//   * p_ij = exp(s_ij - m_i) / l_i moves by at most a factor exp(delta_s_ij + max_k delta_s_ik)
//     (its own score and the normalisation), plus eps32 = (8 + 4 tiles + 2 T) 2^-24 of fp32
//     effects: expf's 4 ulps, the fused kernel's running rescales by alpha (2 ulps a tile) and
//     the reassociated sum l;
//   * P as P @ V reads it: both sides round it to the compute dtype (the fused kernel before the
//     normalisation), 2 u_lo relative and 2 eta_lo absolute between them;
//   * y = sum_j P_ij v_j: the per-term differences, 2 gT sum |P v| of reassociation, and 2 fp32
//     ulps of y (the division by l, the final rescale);
//   * backward: dp_ij = round(dy_i . v_j) differs by 2 g B + ulp_lo (B = sum |dy v|); the row
//     dot D_i is sum_k datt_k p_k on the CPU and dy_i . y_i on the GPU, each within
//     sum_k p_k (ddp_k + |dp_k| (rel_k + 2 gT)) + sum_d |dy_d| (delta_y_d + ulp_lo(y_d)) of
//     the exact sum_k p_k dp_k; ds_ij = round(round(p (dp - D)) * scale) propagates p's relative
//     difference and dp's and D's absolute ones, plus one ulp_lo per rounding; dq, dk, dv sum
//     them against k, q and dy (dv reads P rounded: ulp_lo(P) more), plus 2 gT of reassociation.
// Second-order products of these (each relative difference below 3 % here) are covered by a
// margin of 10 %. The output's own rounding is added by round_bound. Grouped-query attention
// (group G > 1): query head n reads kv head n / G, and dk, dv sum over the G T query rows of their
// group (reassociation gamma_{G T + 2}).
AttentionDeltas attention_deltas(const std::vector<double>& q, const std::vector<double>& k,
                                 const std::vector<double>& v, const std::vector<double>& dy,
                                 DType d, int64_t count, int64_t T, int64_t hs, float scale,
                                 int64_t group = 1) {
  const double u_lo = d == DType::f16 ? 0x1p-11 : d == DType::bf16 ? 0x1p-8 : 0x1p-24;
  const double eta_lo = d == DType::f16 ? 0x1p-25 : d == DType::bf16 ? 0x1p-134 : 0x1p-150;
  const double g = gamma_n(static_cast<double>(hs + 2), 0x1p-23);
  const double gT = gamma_n(static_cast<double>(T + 2), 0x1p-23);
  const double gG = gamma_n(static_cast<double>(group * T + 2), 0x1p-23);
  const double tiles = static_cast<double>((T + 31) / 32);
  const double eps32 = (8.0 + 4.0 * tiles + 2.0 * static_cast<double>(T)) * kU;
  const double sc = scale;
  const size_t n_el = static_cast<size_t>(count * T * hs);
  const size_t kv_el = n_el / static_cast<size_t>(group);
  AttentionDeltas out{std::vector<double>(n_el, 0.0), std::vector<double>(n_el, 0.0),
                      std::vector<double>(kv_el, 0.0), std::vector<double>(kv_el, 0.0)};
  auto at = [&](int64_t n, int64_t t, int64_t h) {
    return static_cast<size_t>((n * T + t) * hs + h);
  };
  std::vector<double> s(static_cast<size_t>(T)), ds(s.size()), p(s.size()), rel(s.size()),
      dp(s.size()), ddp(s.size());
  std::vector<double> o(static_cast<size_t>(hs)), ey(o.size());
  for (int64_t n = 0; n < count; ++n) {
    const int64_t nk = n / group;  // the kv head
    for (int64_t i = 0; i < T; ++i) {
      double mx = -kInf, max_ds = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        double a = 0.0, A = 0.0;
        for (int64_t h = 0; h < hs; ++h) {
          a += q[at(n, i, h)] * k[at(nk, j, h)];
          A += std::fabs(q[at(n, i, h)] * k[at(nk, j, h)]);
        }
        const double e1 = 2.0 * g * A + ulp(std::fabs(a) + 2.0 * g * A, d);
        s[j] = rounded(rounded(a, d) * sc, d);
        ds[j] = sc * e1 * (1.0 + 0x1p-23) + ulp(std::fabs(s[j]) + sc * e1, d);
        mx = std::max(mx, s[j]);
        max_ds = std::max(max_ds, ds[j]);
      }
      double l = 0.0;
      for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - mx);
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(s[j] - mx) / l;
        rel[j] = std::expm1(ds[j] + max_ds) + eps32;
      }
      // forward
      for (int64_t h = 0; h < hs; ++h) {
        double y = 0.0, dy_h = 0.0, mag = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          const double pv = std::fabs(p[j] * v[at(nk, j, h)]);
          y += p[j] * v[at(nk, j, h)];
          mag += pv;
          dy_h += pv * (rel[j] + 2.0 * u_lo) + 2.0 * eta_lo * std::fabs(v[at(nk, j, h)]);
        }
        dy_h += 2.0 * gT * mag + 2.0 * ulp_near(std::fabs(y) + dy_h);
        out.y[at(n, i, h)] = dy_h;
        o[h] = y;
        ey[h] = dy_h + ulp(std::fabs(y) + dy_h, d);
      }
      // backward
      double D = 0.0, dD = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        double a = 0.0, B = 0.0;
        for (int64_t h = 0; h < hs; ++h) {
          a += dy[at(n, i, h)] * v[at(nk, j, h)];
          B += std::fabs(dy[at(n, i, h)] * v[at(nk, j, h)]);
        }
        dp[j] = a;
        ddp[j] = 2.0 * g * B + ulp(std::fabs(a) + 2.0 * g * B, d);
        D += p[j] * a;
        dD += p[j] * (ddp[j] + std::fabs(a) * (rel[j] + 2.0 * gT));
      }
      for (int64_t h = 0; h < hs; ++h) {
        dD += std::fabs(dy[at(n, i, h)]) * ey[h] + g * std::fabs(dy[at(n, i, h)] * o[h]);
      }
      for (int64_t j = 0; j <= i; ++j) {
        const double gv = p[j] * (dp[j] - D);
        double dg =
            p[j] * (ddp[j] + dD) + std::fabs(dp[j] - D) * p[j] * rel[j] + ulp_near(std::fabs(gv));
        dg += ulp(std::fabs(gv) + dg, d);
        const double dsv = gv * sc;
        const double dds = sc * dg * (1.0 + 0x1p-23) + ulp(std::fabs(dsv) + sc * dg, d);
        const double dp_low = p[j] * rel[j] + ulp(p[j] * (1.0 + rel[j]), d);
        for (int64_t h = 0; h < hs; ++h) {
          out.dq[at(n, i, h)] +=
              dds * std::fabs(k[at(nk, j, h)]) + 2.0 * gT * std::fabs(dsv * k[at(nk, j, h)]);
          out.dk[at(nk, j, h)] +=
              dds * std::fabs(q[at(n, i, h)]) + 2.0 * gG * std::fabs(dsv * q[at(n, i, h)]);
          out.dv[at(nk, j, h)] +=
              dp_low * std::fabs(dy[at(n, i, h)]) + 2.0 * gG * std::fabs(p[j] * dy[at(n, i, h)]);
        }
      }
    }
  }
  for (std::vector<double>* vec : {&out.y, &out.dq, &out.dk, &out.dv}) {
    for (double& x : *vec) x *= 1.1;
  }
  return out;
}

void add_attention_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType dtype;
    int64_t count, time, head_size;
  };
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  // Tiles of 32: partial (37, 70, 33), exact (64), a single row (1); head sizes below, at and not
  // a multiple of the 8 threads a row; f32 and hs 80 take the composed path on the GPU too.
  const Variant variants[] = {{f16, 3, 37, 16}, {bf16, 2, 70, 64}, {f16, 2, 64, 64},
                              {f16, 1, 1, 5},   {bf16, 2, 33, 13}, {f32, 2, 37, 16},
                              {f16, 1, 40, 80}};
  for (const Variant& v : variants) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(v.head_size));
    const Shape shape{v.count, v.time, v.head_size};
    CudaCase c;
    c.name = "attention_" + tag(v.dtype) + "_" + std::to_string(v.count) + "x" +
             std::to_string(v.time) + "x" + std::to_string(v.head_size);
    c.make_inputs = [v, shape](std::mt19937_64& rng) {
      const size_t n = numel_of(shape);
      std::vector<HostInput> in;
      for (int t = 0; t < 4; ++t) {  // q, k, v, dy
        in.push_back(from_values(shape, v.dtype, uniform_values(rng, n, -1.5f, 1.5f)));
      }
      return in;
    };
    c.run = [v, scale, shape](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty(shape, v.dtype), dq = be.empty(shape, v.dtype),
             dk = be.empty(shape, v.dtype), dv = be.empty(shape, v.dtype);
      const AttentionBuffers buf =
          make_attention_buffers(be, v.count, v.time, v.head_size, v.dtype);
      be.attention_forward(in[0], in[1], in[2], scale, y, buf);
      be.attention_backward(in[0], in[1], in[2], y, in[3], scale, dq, dk, dv, buf);
      return std::vector<Tensor>{y, dq, dk, dv};
    };
    c.specs = [v, scale](const std::vector<HostInput>& in,
                         const std::vector<std::vector<double>>&) {
      const AttentionDeltas d =
          attention_deltas(in[0].values(), in[1].values(), in[2].values(), in[3].values(), v.dtype,
                           v.count, v.time, v.head_size, scale);
      return std::vector<Spec>{within(d.y), within(d.dq), within(d.dk), within(d.dv)};
    };
    cases.push_back(c);
  }
}

// Grouped-query attention: k, v [count / G, T, hs]; the same bounds with query head n reading kv
// head n / G. f32 takes the composition on the GPU too (cuBLAS on the grouped views).
void add_grouped_attention_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType dtype;
    int64_t count, group, time, head_size;
  };
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const Variant variants[] = {{f16, 6, 3, 37, 16},
                              {bf16, 4, 2, 70, 64},
                              {f16, 4, 4, 33, 13},
                              {f32, 6, 2, 37, 16},
                              {f16, 4, 2, 40, 80}};
  for (const Variant& v : variants) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(v.head_size));
    const Shape qs{v.count, v.time, v.head_size}, kvs{v.count / v.group, v.time, v.head_size};
    CudaCase c;
    c.name = "attention_gqa_" + tag(v.dtype) + "_" + std::to_string(v.count) + "q" +
             std::to_string(v.count / v.group) + "kv_" + std::to_string(v.time) + "x" +
             std::to_string(v.head_size);
    c.make_inputs = [v, qs, kvs](std::mt19937_64& rng) {
      std::vector<HostInput> in;
      for (int t = 0; t < 4; ++t) {  // q, k, v, dy
        const Shape& sh = t == 1 || t == 2 ? kvs : qs;
        in.push_back(from_values(sh, v.dtype, uniform_values(rng, numel_of(sh), -1.5f, 1.5f)));
      }
      return in;
    };
    c.run = [v, scale, qs, kvs](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty(qs, v.dtype), dq = be.empty(qs, v.dtype), dk = be.empty(kvs, v.dtype),
             dv = be.empty(kvs, v.dtype);
      const AttentionBuffers buf =
          make_attention_buffers(be, v.count, v.time, v.head_size, v.dtype);
      be.attention_forward(in[0], in[1], in[2], scale, y, buf);
      be.attention_backward(in[0], in[1], in[2], y, in[3], scale, dq, dk, dv, buf);
      return std::vector<Tensor>{y, dq, dk, dv};
    };
    c.specs = [v, scale](const std::vector<HostInput>& in,
                         const std::vector<std::vector<double>>&) {
      const AttentionDeltas d =
          attention_deltas(in[0].values(), in[1].values(), in[2].values(), in[3].values(), v.dtype,
                           v.count, v.time, v.head_size, scale, v.group);
      return std::vector<Spec>{within(d.y), within(d.dq), within(d.dk), within(d.dv)};
    };
    cases.push_back(c);
  }
}

// ---- rotary embedding: the same float operations on the same tables on both sides ----

void add_rope_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    DType in, out;
    int64_t n, t, hs, pos0;
    bool backward, in_place;
  };
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const Variant variants[] = {
      {f16, f16, 6, 37, 64, 0, false, false}, {f32, f16, 4, 33, 128, 5, false, false},
      {bf16, f32, 3, 9, 2, 1, false, false},  {f16, f16, 8, 20, 16, 3, false, true},
      {f16, f16, 6, 37, 64, 0, true, false},  {f32, f32, 4, 33, 128, 5, true, false},
      {bf16, bf16, 3, 70, 64, 2, true, true}};
  for (const Variant& v : variants) {
    CudaCase c;
    c.name = std::string(v.backward ? "rope_backward_" : "rope_forward_") + tag(v.in) + "_to_" +
             tag(v.out) + "_" + std::to_string(v.n) + "x" + std::to_string(v.t) + "x" +
             std::to_string(v.hs) + "_pos" + std::to_string(v.pos0) +
             (v.in_place ? "_in_place" : "");
    c.make_inputs = [v](std::mt19937_64& rng) {
      const nn::RopeTables tab = nn::rope_tables(
          nn::rope_inv_freq(v.hs, 500000.0, nn::RopeScaling{true, 8.0, 1.0, 4.0, 16}),
          v.pos0 + v.t);
      return std::vector<HostInput>{
          from_values({v.n, v.t, v.hs}, v.in,
                      random_with_specials(rng, numel_of({v.n, v.t, v.hs}), -8, 6, 0.002)),
          from_values({v.pos0 + v.t, v.hs / 2}, DType::f32, tab.cos),
          from_values({v.pos0 + v.t, v.hs / 2}, DType::f32, tab.sin)};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      const Tensor out = v.in_place ? in[0] : be.empty({v.n, v.t, v.hs}, v.out);
      if (v.backward) {
        be.rope_backward(in[0], in[1], in[2], out, v.pos0, v.in);
      } else {
        be.rope_forward(in[0], in[1], in[2], out, v.pos0);
      }
      return std::vector<Tensor>{out};
    };
    cases.push_back(c);  // bitwise
  }
}

std::vector<CudaCase> transformer_cases() {
  std::vector<CudaCase> cases;
  add_embedding_cases(cases);
  add_gemm_batched_cases(cases);
  add_heads_cases(cases);
  add_causal_softmax_cases(cases);
  add_attention_cases(cases);
  add_grouped_attention_cases(cases);
  add_rope_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Transformer, transformer_cases);

// ---- properties of the GPU alone ----

// The fused attention keeps one fp32 statistic per query row, never a T x T matrix, for f16 and
// bf16 heads up to 64; f32 and larger heads take the materialised composition.
TEST(CudaAttention, FusedPathKeepsNoTimesTimesMatrix) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  for (DType d : {DType::f16, DType::bf16}) {
    const AttentionSizes s = gpu().attention_workspace(96, 1024, 64, d);
    EXPECT_EQ(s.saved_f32, 96 * 1024) << tag(d);
    EXPECT_EQ(s.saved_lowp, 0) << tag(d);
    EXPECT_EQ(s.scratch_f32, 96 * 1024) << tag(d);
    EXPECT_EQ(s.scratch_lowp, 0) << tag(d);
  }
  const AttentionSizes f32 = gpu().attention_workspace(2, 16, 64, DType::f32);
  EXPECT_EQ(f32.saved_f32, 2 * 16 * 16);
  const AttentionSizes wide = gpu().attention_workspace(2, 16, 80, DType::f16);
  EXPECT_EQ(wide.scratch_lowp, 2 * 2 * 16 * 16);
}

// No atomics, fixed orders: forward and backward give the same bits on every repetition, at a
// GPT-2-like shape (many blocks in flight at once).
TEST(CudaAttention, RepeatedRunsAreBitwiseIdentical) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  Backend& be = gpu();
  const int64_t n = 24, t = 300, hs = 64;
  const Shape sh{n, t, hs};
  std::mt19937_64 rng(13);
  for (DType d : {DType::f16, DType::bf16}) {
    const size_t el = numel_of(sh);
    Tensor q = upload_values(be, sh, d, uniform_values(rng, el, -2.0f, 2.0f));
    Tensor k = upload_values(be, sh, d, uniform_values(rng, el, -2.0f, 2.0f));
    Tensor v = upload_values(be, sh, d, uniform_values(rng, el, -1.0f, 1.0f));
    Tensor dy = upload_values(be, sh, d, random_values(rng, el, -8, 0));
    const AttentionBuffers buf = make_attention_buffers(be, n, t, hs, d);
    auto run = [&] {
      Tensor y = be.empty(sh, d), dq = be.empty(sh, d), dk = be.empty(sh, d), dv = be.empty(sh, d);
      be.attention_forward(q, k, v, 0.125f, y, buf);
      be.attention_backward(q, k, v, y, dy, 0.125f, dq, dk, dv, buf);
      return std::vector<std::vector<uint32_t>>{download_bits(be, y), download_bits(be, dq),
                                                download_bits(be, dk), download_bits(be, dv)};
    };
    const auto first = run();
    for (int rep = 1; rep < 3; ++rep) {
      const auto again = run();
      const char* names[] = {"y", "dq", "dk", "dv"};
      for (size_t o = 0; o < first.size(); ++o) {
        BitwiseCheck check(d);
        check.add_all(again[o], first[o]);
        EXPECT_TRUE(check.ok()) << tag(d) << " " << names[o] << ", repetition " << rep << ": "
                                << check.report();
      }
    }
  }
}

}  // namespace
}  // namespace ampctl::test
