// Backend::attention_forward / attention_backward on the CPU (the materialised composition
// backend.h spells out; with AVX-512 the CPU backend runs it one head at a time on a thread,
// cpu/transformer.cpp): bitwise against the unfused ops called one by one, as the GPT called
// them before the op existed, and against the default composition itself; against a
// double-precision attention as a check of the composition's structure (transposes, mask, which
// operand is saved); the same bits for one and two threads; the workspace sizes; and the argument
// checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

struct Dims {
  int64_t n, t, hs;
};

struct AttentionRun {
  std::vector<uint32_t> y, dq, dk, dv;
};

AttentionBuffers make_buffers(Backend& be, const Dims& d, DType dtype) {
  return make_attention_buffers(be, d.n, d.t, d.hs, dtype);
}

struct Inputs {
  std::vector<float> q, k, v, dy;
};

Inputs make_inputs(std::mt19937_64& rng, const Dims& d, DType dtype) {
  const size_t n = static_cast<size_t>(d.n * d.t * d.hs);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  auto draw = [&] {
    std::vector<float> x(n);
    for (float& e : x) e = round_to(u(rng), dtype);
    return x;
  };
  Inputs in;
  in.q = draw();
  in.k = draw();
  in.v = draw();
  in.dy = draw();
  return in;
}

// The op pair.
AttentionRun run_op(Backend& be, const Dims& d, DType dtype, const Inputs& in, float scale) {
  const Shape sh{d.n, d.t, d.hs};
  Tensor q = upload_values(be, sh, dtype, in.q), k = upload_values(be, sh, dtype, in.k);
  Tensor v = upload_values(be, sh, dtype, in.v), dy = upload_values(be, sh, dtype, in.dy);
  Tensor y = be.empty(sh, dtype), dq = be.empty(sh, dtype), dk = be.empty(sh, dtype),
         dv = be.empty(sh, dtype);
  const AttentionBuffers buf = make_buffers(be, d, dtype);
  be.attention_forward(q, k, v, scale, y, buf);
  be.attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
  return {download_bits(be, y), download_bits(be, dq), download_bits(be, dk),
          download_bits(be, dv)};
}

// The same through the unfused ops, written out as gpt.cpp wrote them without dropout.
AttentionRun run_unfused(Backend& be, const Dims& d, DType dtype, const Inputs& in, float scale) {
  const Shape sh{d.n, d.t, d.hs}, att{d.n, d.t, d.t};
  Tensor q = upload_values(be, sh, dtype, in.q), k = upload_values(be, sh, dtype, in.k);
  Tensor v = upload_values(be, sh, dtype, in.v), dy = upload_values(be, sh, dtype, in.dy);
  Tensor y = be.empty(sh, dtype), dq = be.empty(sh, dtype), dk = be.empty(sh, dtype),
         dv = be.empty(sh, dtype);
  Tensor scores = be.empty(att, dtype), probs = be.empty(att, DType::f32);
  be.gemm_batched(q, false, k, true, scores);
  be.causal_softmax_forward(scores, scale, true, probs);
  Tensor a = probs;
  if (dtype != DType::f32) {
    a = be.empty(att, dtype);
    be.cast(probs, a);
  }
  be.gemm_batched(a, false, v, false, y);
  Tensor datt = be.empty(att, dtype), dscores = be.empty(att, dtype);
  be.gemm_batched(dy, false, v, true, datt);
  be.gemm_batched(a, true, dy, false, dv);
  be.causal_softmax_backward(probs, datt, scale, true, dscores);
  be.gemm_batched(dscores, false, k, false, dq);
  be.gemm_batched(dscores, true, q, false, dk);
  return {download_bits(be, y), download_bits(be, dq), download_bits(be, dk),
          download_bits(be, dv)};
}

void expect_same_bits(const AttentionRun& got, const AttentionRun& want, DType dtype,
                      const std::string& what) {
  const std::pair<const char*,
                  std::pair<const std::vector<uint32_t>*, const std::vector<uint32_t>*>>
      outs[] = {{"y", {&got.y, &want.y}},
                {"dq", {&got.dq, &want.dq}},
                {"dk", {&got.dk, &want.dk}},
                {"dv", {&got.dv, &want.dv}}};
  for (const auto& [name, pair] : outs) {
    BitwiseCheck check(dtype);
    check.add_all(*pair.first, *pair.second);
    EXPECT_TRUE(check.ok()) << what << ", " << name << ": " << check.report();
  }
}

// Fewer heads than threads and more; T past the packed kernels' tile edges (12 x 32) and, at
// 260, past the f32 kernel's k block (256: att @ v and the backward's products by dscores sum in
// two blocks).
const Dims kDims[] = {{3, 9, 5}, {2, 33, 8}, {1, 1, 3}, {7, 70, 24}, {3, 260, 16}};

std::string label(const Dims& d, DType dtype) {
  return std::string(dtype_name(dtype)) + " " + std::to_string(d.n) + "x" + std::to_string(d.t) +
         "x" + std::to_string(d.hs);
}

TEST(AttentionOps, DefaultIsTheUnfusedCompositionBitwise) {
  auto be = cpu_backend();
  for (DType dtype : kFloatDTypes) {
    for (const Dims& d : kDims) {
      std::mt19937_64 rng(static_cast<uint64_t>(d.n * 1000 + d.t * 10 + d.hs));
      const Inputs in = make_inputs(rng, d, dtype);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
      expect_same_bits(run_op(*be, d, dtype, in, scale), run_unfused(*be, d, dtype, in, scale),
                       dtype, label(d, dtype));
    }
  }
}

// The backend's own attention_forward / _backward against Backend's default (the composition
// through the backend's ops, called by name): on the CPU with AVX-512 that is the per-head
// fused path against the op-by-op one.
TEST(AttentionOps, BackendOverrideIsTheDefaultCompositionBitwise) {
  auto be = cpu_backend(2);
  for (DType dtype : kFloatDTypes) {
    for (const Dims& d : kDims) {
      std::mt19937_64 rng(static_cast<uint64_t>(d.n * 77 + d.t * 3 + d.hs));
      const Inputs in = make_inputs(rng, d, dtype);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
      const Shape sh{d.n, d.t, d.hs};
      AttentionRun runs[2];
      for (int fused = 0; fused < 2; ++fused) {
        Tensor q = upload_values(*be, sh, dtype, in.q), k = upload_values(*be, sh, dtype, in.k);
        Tensor v = upload_values(*be, sh, dtype, in.v), dy = upload_values(*be, sh, dtype, in.dy);
        Tensor y = be->empty(sh, dtype), dq = be->empty(sh, dtype), dk = be->empty(sh, dtype),
               dv = be->empty(sh, dtype);
        const AttentionBuffers buf = make_buffers(*be, d, dtype);
        if (fused) {
          be->attention_forward(q, k, v, scale, y, buf);
          be->attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
        } else {
          be->Backend::attention_forward(q, k, v, scale, y, buf);
          be->Backend::attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
        }
        runs[fused] = {download_bits(*be, y), download_bits(*be, dq), download_bits(*be, dk),
                       download_bits(*be, dv)};
      }
      expect_same_bits(runs[1], runs[0], dtype, label(d, dtype));
    }
  }
}

TEST(AttentionOps, SameBitsForOneAndTwoThreads) {
  auto one = cpu_backend(1), two = cpu_backend(2);
  const Dims d{4, 40, 16};
  for (DType dtype : kFloatDTypes) {
    std::mt19937_64 rng(7);
    const Inputs in = make_inputs(rng, d, dtype);
    expect_same_bits(run_op(*two, d, dtype, in, 0.25f), run_op(*one, d, dtype, in, 0.25f), dtype,
                     label(d, dtype));
  }
}

// Causal attention and its gradients in double from the rounded inputs, the scores rounded as
// autocast rounds them (q.k and its scaling in the compute dtype). A structural check: an error
// in a transpose, the mask or the saved operand moves results by O(1), while the op's roundings
// (P and datt in the compute dtype, fp32 sums, a score's rounding flipped by one ulp) stay within
// `rel` of the sums of magnitudes below (f16: P's 2^-11 and a flipped score's 2^-10 relative
// change through exp; bf16 2^-8 and 2^-7; a factor 4 and more above them).
TEST(AttentionOps, MatchesDoubleAttentionWithinLooseBound) {
  auto be = cpu_backend();
  const Dims d{2, 21, 6};
  for (DType dtype : kFloatDTypes) {
    const double rel = dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 0.02 : 0.15;
    std::mt19937_64 rng(99);
    const Inputs in = make_inputs(rng, d, dtype);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
    const AttentionRun got = run_op(*be, d, dtype, in, scale);
    const int64_t T = d.t, H = d.hs;
    const size_t n_el = static_cast<size_t>(d.n * T * H);
    std::vector<double> y(n_el), dq(n_el), dk(n_el), dv(n_el), ty(n_el), tq(n_el), tk(n_el),
        tv(n_el);
    auto at = [&](int64_t n, int64_t t, int64_t h) {
      return static_cast<size_t>((n * T + t) * H + h);
    };
    for (int64_t n = 0; n < d.n; ++n) {
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1)), p(s.size()), dp(s.size());
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double a = 0;
          for (int64_t h = 0; h < H; ++h) a += double(in.q[at(n, i, h)]) * in.k[at(n, j, h)];
          const float sr = round_to(round_to(static_cast<float>(a), dtype) * scale, dtype);
          s[j] = sr;
          mx = std::max(mx, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - mx);
        double D = 0, Dabs = 0;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(s[j] - mx) / l;
          double a = 0;
          for (int64_t h = 0; h < H; ++h) a += double(in.dy[at(n, i, h)]) * in.v[at(n, j, h)];
          dp[j] = a;
          D += p[j] * a;
          Dabs += p[j] * std::fabs(a);
        }
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t j = 0; j <= i; ++j) {
            y[at(n, i, h)] += p[j] * in.v[at(n, j, h)];
            ty[at(n, i, h)] += p[j] * std::fabs(in.v[at(n, j, h)]);
            const double ds = p[j] * (dp[j] - D) * scale;
            const double dsabs = p[j] * (std::fabs(dp[j]) + Dabs) * scale;
            dq[at(n, i, h)] += ds * in.k[at(n, j, h)];
            tq[at(n, i, h)] += dsabs * std::fabs(in.k[at(n, j, h)]);
            dk[at(n, j, h)] += ds * in.q[at(n, i, h)];
            tk[at(n, j, h)] += dsabs * std::fabs(in.q[at(n, i, h)]);
            dv[at(n, j, h)] += p[j] * in.dy[at(n, i, h)];
            tv[at(n, j, h)] += p[j] * std::fabs(in.dy[at(n, i, h)]);
          }
        }
      }
    }
    const std::pair<const char*, std::vector<double>*> refs[][2] = {{{"y", &y}, {"", &ty}},
                                                                    {{"dq", &dq}, {"", &tq}},
                                                                    {{"dk", &dk}, {"", &tk}},
                                                                    {{"dv", &dv}, {"", &tv}}};
    const std::vector<uint32_t>* outs[] = {&got.y, &got.dq, &got.dk, &got.dv};
    for (int o = 0; o < 4; ++o) {
      const std::vector<double>& ref = *refs[o][0].second;
      const std::vector<double>& mag = *refs[o][1].second;
      double worst = 0;
      size_t worst_i = 0;
      for (size_t e = 0; e < n_el; ++e) {
        const double g = decode((*outs[o])[e], dtype);
        const double bound = rel * mag[e] + 0x1p-20;
        const double share = std::fabs(g - ref[e]) / bound;
        if (share > worst) {
          worst = share;
          worst_i = e;
        }
      }
      EXPECT_LE(worst, 1.0) << label(d, dtype) << ", " << refs[o][0].first << "[" << worst_i
                            << "]: got " << decode((*outs[o])[worst_i], dtype) << ", double "
                            << ref[worst_i] << ", " << worst * 100 << "% of the bound";
    }
  }
}

// ---- grouped-query attention: k and v [N / G, T, hs], query head n reading kv head n / G ----

// The op pair with G query heads per kv head: k, v are the first N / G heads of the inputs';
// through the backend's own ops or Backend's default composition.
AttentionRun run_grouped(Backend& be, const Dims& d, int64_t group, DType dtype, const Inputs& in,
                         float scale, bool composition = false) {
  const Shape sh{d.n, d.t, d.hs}, kv{d.n / group, d.t, d.hs};
  const size_t kv_n = static_cast<size_t>(d.n / group * d.t * d.hs);
  const std::vector<float> kh(in.k.begin(), in.k.begin() + static_cast<std::ptrdiff_t>(kv_n));
  const std::vector<float> vh(in.v.begin(), in.v.begin() + static_cast<std::ptrdiff_t>(kv_n));
  Tensor q = upload_values(be, sh, dtype, in.q), dy = upload_values(be, sh, dtype, in.dy);
  Tensor k = upload_values(be, kv, dtype, kh), v = upload_values(be, kv, dtype, vh);
  Tensor y = be.empty(sh, dtype), dq = be.empty(sh, dtype), dk = be.empty(kv, dtype),
         dv = be.empty(kv, dtype);
  const AttentionBuffers buf = make_buffers(be, d, dtype);
  if (composition) {
    be.Backend::attention_forward(q, k, v, scale, y, buf);
    be.Backend::attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
  } else {
    be.attention_forward(q, k, v, scale, y, buf);
    be.attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buf);
  }
  return {download_bits(be, y), download_bits(be, dq), download_bits(be, dk),
          download_bits(be, dv)};
}

// N query heads in groups of G (N = B H, the heads of a sequence consecutive).
struct GroupCase {
  Dims d;
  int64_t group;
};
const GroupCase kGroupCases[] = {
    {{4, 9, 5}, 2}, {{6, 33, 8}, 3}, {{8, 70, 16}, 4}, {{3, 20, 8}, 3}};

// Query head n against the multi-head op with kv head n / G copied into its place (HF's
// repeat_kv): y and dq bitwise (each query head's products read the same k and v values); dk and
// dv are checked against double below (the group's sum has its own order).
TEST(AttentionOps, GroupedQueryIsRepeatedKvForYAndDqBitwise) {
  auto be = cpu_backend(2);
  for (DType dtype : kFloatDTypes) {
    for (const GroupCase& c : kGroupCases) {
      const Dims& d = c.d;
      std::mt19937_64 rng(static_cast<uint64_t>(d.n * 31 + d.t + c.group));
      const Inputs in = make_inputs(rng, d, dtype);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
      Inputs rep = in;
      const size_t head = static_cast<size_t>(d.t * d.hs);
      for (int64_t n = 0; n < d.n; ++n) {
        for (size_t e = 0; e < head; ++e) {
          rep.k[static_cast<size_t>(n) * head + e] =
              in.k[static_cast<size_t>(n / c.group) * head + e];
          rep.v[static_cast<size_t>(n) * head + e] =
              in.v[static_cast<size_t>(n / c.group) * head + e];
        }
      }
      const AttentionRun got = run_grouped(*be, d, c.group, dtype, in, scale);
      const AttentionRun want = run_op(*be, d, dtype, rep, scale);
      const std::string what = label(d, dtype) + " G " + std::to_string(c.group);
      for (const auto& [name, g, w] :
           {std::tuple{"y", &got.y, &want.y}, {"dq", &got.dq, &want.dq}}) {
        BitwiseCheck check(dtype);
        check.add_all(*g, *w);
        EXPECT_TRUE(check.ok()) << what << ", " << name << ": " << check.report();
      }
    }
  }
}

// The backend's override (with AVX-512: one kv head's group per thread) against Backend's
// default composition on the grouped views, and one thread against three: the same bits.
TEST(AttentionOps, GroupedQueryOverrideAndThreadsGiveTheCompositionsBits) {
  auto two = cpu_backend(2), one = cpu_backend(1), three = cpu_backend(3);
  for (DType dtype : kFloatDTypes) {
    for (const GroupCase& c : kGroupCases) {
      std::mt19937_64 rng(static_cast<uint64_t>(c.d.n * 5 + c.d.t * 11 + c.group));
      const Inputs in = make_inputs(rng, c.d, dtype);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d.hs));
      const std::string what = label(c.d, dtype) + " G " + std::to_string(c.group);
      const AttentionRun want = run_grouped(*two, c.d, c.group, dtype, in, scale, true);
      expect_same_bits(run_grouped(*two, c.d, c.group, dtype, in, scale), want, dtype,
                       what + " override");
      expect_same_bits(run_grouped(*one, c.d, c.group, dtype, in, scale), want, dtype,
                       what + " 1 thread");
      expect_same_bits(run_grouped(*three, c.d, c.group, dtype, in, scale), want, dtype,
                       what + " 3 threads");
    }
  }
}

// Grouped-query attention and its gradients in double (the bound of
// MatchesDoubleAttentionWithinLooseBound), dk and dv summed over each kv head's G query heads.
TEST(AttentionOps, GroupedQueryMatchesDoubleWithinLooseBound) {
  auto be = cpu_backend();
  const Dims d{6, 21, 6};
  const int64_t G = 3;
  for (DType dtype : kFloatDTypes) {
    const double rel = dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 0.02 : 0.15;
    std::mt19937_64 rng(199);
    const Inputs in = make_inputs(rng, d, dtype);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
    const AttentionRun got = run_grouped(*be, d, G, dtype, in, scale);
    const int64_t T = d.t, H = d.hs;
    const size_t nq = static_cast<size_t>(d.n * T * H), nkv = nq / static_cast<size_t>(G);
    std::vector<double> y(nq), dq(nq), ty(nq), tq(nq), dk(nkv), dv(nkv), tk(nkv), tv(nkv);
    auto at = [&](int64_t n, int64_t t, int64_t h) {
      return static_cast<size_t>((n * T + t) * H + h);
    };
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t j_kv = n / G;
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1)), p(s.size()), dp(s.size());
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double a = 0;
          for (int64_t h = 0; h < H; ++h) a += double(in.q[at(n, i, h)]) * in.k[at(j_kv, j, h)];
          s[j] = round_to(round_to(static_cast<float>(a), dtype) * scale, dtype);
          mx = std::max(mx, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j <= i; ++j) l += std::exp(s[j] - mx);
        double D = 0, Dabs = 0;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(s[j] - mx) / l;
          double a = 0;
          for (int64_t h = 0; h < H; ++h) a += double(in.dy[at(n, i, h)]) * in.v[at(j_kv, j, h)];
          dp[j] = a;
          D += p[j] * a;
          Dabs += p[j] * std::fabs(a);
        }
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t j = 0; j <= i; ++j) {
            y[at(n, i, h)] += p[j] * in.v[at(j_kv, j, h)];
            ty[at(n, i, h)] += p[j] * std::fabs(in.v[at(j_kv, j, h)]);
            const double ds = p[j] * (dp[j] - D) * scale;
            const double dsabs = p[j] * (std::fabs(dp[j]) + Dabs) * scale;
            dq[at(n, i, h)] += ds * in.k[at(j_kv, j, h)];
            tq[at(n, i, h)] += dsabs * std::fabs(in.k[at(j_kv, j, h)]);
            dk[at(j_kv, j, h)] += ds * in.q[at(n, i, h)];
            tk[at(j_kv, j, h)] += dsabs * std::fabs(in.q[at(n, i, h)]);
            dv[at(j_kv, j, h)] += p[j] * in.dy[at(n, i, h)];
            tv[at(j_kv, j, h)] += p[j] * std::fabs(in.dy[at(n, i, h)]);
          }
        }
      }
    }
    const std::vector<uint32_t>* outs[] = {&got.y, &got.dq, &got.dk, &got.dv};
    const std::vector<double>* refs[] = {&y, &dq, &dk, &dv};
    const std::vector<double>* mags[] = {&ty, &tq, &tk, &tv};
    const char* names[] = {"y", "dq", "dk", "dv"};
    for (int o = 0; o < 4; ++o) {
      ErrorBudget b;
      for (size_t e = 0; e < refs[o]->size(); ++e) {
        b.add(e, decode((*outs[o])[e], dtype), (*refs[o])[e], rel * (*mags[o])[e] + 0x1p-20);
      }
      EXPECT_TRUE(b.ok()) << label(d, dtype) << " G " << G << ", " << names[o] << ": "
                          << b.report();
    }
  }
}

TEST(AttentionOps, GroupedQueryRefusesKvHeadsThatDoNotDivide) {
  auto be = cpu_backend();
  const DType f16 = DType::f16;
  const Tensor q = be->zeros({6, 5, 4}, f16), y = be->zeros({6, 5, 4}, f16);
  const AttentionBuffers buf = make_attention_buffers(*be, 6, 5, 4, f16);
  expect_invalid_argument(
      [&] {
        be->attention_forward(q, be->zeros({4, 5, 4}, f16), be->zeros({4, 5, 4}, f16), 1.0f, y,
                              buf);
      },
      "4 kv heads for 6 query heads");
  expect_invalid_argument(
      [&] {
        be->attention_forward(q, be->zeros({3, 5, 4}, f16), be->zeros({2, 5, 4}, f16), 1.0f, y,
                              buf);
      },
      "v with fewer heads than k");
  const Tensor k = be->zeros({3, 5, 4}, f16), v = be->zeros({3, 5, 4}, f16);
  expect_invalid_argument(
      [&] {
        be->attention_backward(q, k, v, y, y, 1.0f, be->zeros({6, 5, 4}, f16),
                               be->zeros({6, 5, 4}, f16), be->zeros({3, 5, 4}, f16), buf);
      },
      "dk of q's shape");
}

TEST(AttentionOps, CpuWorkspaceIsTheMaterialisedOne) {
  auto be = cpu_backend();
  const AttentionSizes f16 = be->attention_workspace(6, 10, 4, DType::f16);
  EXPECT_EQ(f16.saved_f32, 600);   // probs
  EXPECT_EQ(f16.saved_lowp, 600);  // their f16 copy, what att @ v reads
  EXPECT_EQ(f16.scratch_f32, 0);
  EXPECT_EQ(f16.scratch_lowp, 1200);  // scores / dscores and datt
  const AttentionSizes f32 = be->attention_workspace(6, 10, 4, DType::f32);
  EXPECT_EQ(f32.saved_f32, 600);
  EXPECT_EQ(f32.saved_lowp, 0);  // att @ v reads probs itself
  EXPECT_EQ(f32.scratch_lowp, 1200);
}

template <typename F>
void expect_invalid(F&& f, const std::string& what, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << what;
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
  }
}

TEST(AttentionOps, RejectsMismatchedOperandsBeforeWriting) {
  auto be = cpu_backend();
  const Dims d{2, 5, 4};
  const Shape sh{d.n, d.t, d.hs};
  const DType f16 = DType::f16;
  Tensor q = be->zeros(sh, f16), k = be->zeros(sh, f16), v = be->zeros(sh, f16);
  Tensor y = be->zeros(sh, f16), dy = be->zeros(sh, f16);
  Tensor dq = be->zeros(sh, f16), dk = be->zeros(sh, f16), dv = be->zeros(sh, f16);
  const AttentionBuffers buf = make_buffers(*be, d, f16);
  expect_invalid([&] { be->attention_forward(q, k, be->zeros(sh, DType::bf16), 1.0f, y, buf); },
                 "v of another dtype", "attention_forward");
  expect_invalid(
      [&] {
        be->attention_forward(q, be->zeros({2, 6, 4}, f16), v, 1.0f, y, buf);
      },
      "k of another shape", "k");
  expect_invalid([&] { be->attention_forward(q, k, v, 1.0f, q, buf); }, "y aliasing q", "overlaps");
  AttentionBuffers small = buf;
  small.saved_f32 = be->zeros({10}, DType::f32);
  expect_invalid([&] { be->attention_forward(q, k, v, 1.0f, y, small); }, "short saved_f32",
                 "saved_f32");
  AttentionBuffers missing = buf;
  missing.scratch_lowp = Tensor{};
  expect_invalid([&] { be->attention_forward(q, k, v, 1.0f, y, missing); }, "no scratch",
                 "scratch_lowp");
  expect_invalid([&] { be->attention_backward(q, k, v, y, dy, 1.0f, dq, dq, dv, buf); },
                 "dk aliasing dq", "overlaps");
  expect_invalid([&] { be->attention_backward(q, k, v, y, dy, 1.0f, dq, dk, dy, buf); },
                 "dv aliasing dy", "overlaps");
  expect_invalid(
      [&] {
        be->attention_forward(be->zeros({2, 5}, f16), k, v, 1.0f, y, buf);
      },
      "q of rank 2", "rank 3");
  // Nothing was written by the refused calls.
  for (const Tensor* t : {&y, &dq, &dk, &dv}) {
    for (float x : download_values(*be, *t)) ASSERT_EQ(x, 0.0f);
  }
}

}  // namespace
}  // namespace ampctl::test
