// Gradient numerics (nn/numerics.h, backend.h "gradient numerics", train/numerics.h): exact
// counts at every gradient rounding of a tiny fp16/bf16 MLP against an fp64 reference computed
// here, the scale advice's histogram against a brute-force recount, and that a counted backward
// leaves every gradient bit as an uncounted one.
//
// The reference is exact: every input, weight, bias and target is a small dyadic number (k / 8),
// the loss is MSE over 8 elements (2 / n = 1/4) and the scale a power of two, so every value
// before a rounding is exactly representable in float and fp64 computes exactly the float the
// backend rounds (the test checks that premise value by value). The bf16 case keeps its values
// in float's normal range: the CPU's bf16 dot-product kernel flushes float subnormals
// (backend/cpu/cpu_gemm.h), so bf16's own underflow range (below 2^-133) is not exact there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ampctl/core/half.h"
#include "ampctl/nn/models.h"
#include "ampctl/nn/models/mlp.h"
#include "ampctl/nn/numerics.h"
#include "ampctl/train/numerics.h"

namespace ampctl::nn {
namespace {

constexpr int64_t kIn = 4, kHidden = 4, kOut = 2, kRows = 4;

using Mat = std::vector<double>;  // row-major

struct Counts {
  int64_t values = 0, underflow = 0, subnormal = 0;
  double max_abs = 0;
  std::vector<double> pre;  // every value before a rounding (for the brute-force recount)
};

double round_lowp(double v, DType lowp) {
  const auto f = static_cast<float>(v);
  return lowp == DType::f16 ? round_to_half(f) : round_to_bf16(f);
}

double min_normal(DType lowp) {
  return lowp == DType::f16 ? 0x1p-14 : 0x1p-126;
}

// Rounds every value of m to lowp, counting into c; the premise: m is exact in float.
Mat round_count(const Mat& m, DType lowp, Counts& c) {
  Mat out(m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(static_cast<double>(static_cast<float>(m[i])), m[i]) << "reference not exact";
    out[i] = round_lowp(m[i], lowp);
    ++c.values;
    if (m[i] != 0 && out[i] == 0) ++c.underflow;
    if (out[i] != 0 && std::fabs(out[i]) < min_normal(lowp)) ++c.subnormal;
    c.max_abs = std::max(c.max_abs, std::fabs(m[i]));
    c.pre.push_back(m[i]);
  }
  return out;
}

// A [r, k] x B [k, c] -> [r, c], with optional transposes given as index functions.
template <typename FA, typename FB>
Mat matmul(int64_t r, int64_t k, int64_t c, FA a, FB b) {
  Mat out(static_cast<size_t>(r * c), 0.0);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += a(i, l) * b(l, j);
      out[static_cast<size_t>(i * c + j)] = s;
    }
  }
  return out;
}

Mat dyadic(size_t n, int seed, int span) {
  Mat m(n);
  for (size_t i = 0; i < n; ++i) {
    const int k =
        static_cast<int>((i * 7 + static_cast<size_t>(seed) * 5 + 3) % (2 * span + 1)) - span;
    m[i] = k / 8.0;
  }
  return m;
}

struct Reference {
  Counts w0, b0, w2, b2;  // layers.0.weight, layers.0.bias, layers.2.weight, layers.2.bias
};

// fp64 forward and backward of Linear(4,4) ReLU Linear(4,2), MSE, every lowp rounding counted
// for the tensor nn/numerics.h attributes it to.
Reference reference(const Mat& x, const Mat& w0, const Mat& b0, const Mat& w2, const Mat& b2,
                    const Mat& target, double scale, DType lowp) {
  Reference ref;
  Counts scratch;
  auto rnd = [&](const Mat& m) { return round_count(m, lowp, scratch); };
  const Mat xl = rnd(x);  // the input cast (not a gradient: not counted)
  Mat h = matmul(
      kRows, kIn, kHidden, [&](int64_t i, int64_t l) { return xl[i * kIn + l]; },
      [&](int64_t l, int64_t j) { return round_lowp(w0[j * kIn + l], lowp); });
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kHidden; ++j) h[i * kHidden + j] += round_lowp(b0[j], lowp);
  }
  h = rnd(h);
  Mat a(h.size());
  for (size_t i = 0; i < h.size(); ++i) a[i] = h[i] > 0 ? h[i] : 0.0;
  Mat p = matmul(
      kRows, kHidden, kOut, [&](int64_t i, int64_t l) { return a[i * kHidden + l]; },
      [&](int64_t l, int64_t j) { return round_lowp(w2[j * kHidden + l], lowp); });
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kOut; ++j) p[i * kOut + j] += round_lowp(b2[j], lowp);
  }
  p = rnd(p);
  // dlogits: (2 / n) * (p - t) * scale, rounded: counted for layers.2.weight (its consumer).
  Mat dp(p.size());
  for (size_t i = 0; i < p.size(); ++i) dp[i] = 0.25 * (p[i] - target[i]) * scale;
  dp = round_count(dp, lowp, ref.w2);
  // dW2 = dp^T a, db2 = sum_rows dp, dA = dp W2 (counted for layers.0.weight).
  round_count(matmul(
                  kOut, kRows, kHidden, [&](int64_t i, int64_t l) { return dp[l * kOut + i]; },
                  [&](int64_t l, int64_t j) { return a[l * kHidden + j]; }),
              lowp, ref.w2);
  Mat db2(kOut, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kOut; ++j) db2[j] += dp[i * kOut + j];
  }
  round_count(db2, lowp, ref.b2);
  Mat da = matmul(
      kRows, kOut, kHidden, [&](int64_t i, int64_t l) { return dp[i * kOut + l]; },
      [&](int64_t l, int64_t j) { return round_lowp(w2[l * kHidden + j], lowp); });
  da = round_count(da, lowp, ref.w0);
  // ReLU backward (through its output), rounded again, counted for layers.0.weight.
  Mat dh(da.size());
  for (size_t i = 0; i < da.size(); ++i) dh[i] = a[i] > 0 ? da[i] : 0.0;
  dh = round_count(dh, lowp, ref.w0);
  round_count(matmul(
                  kHidden, kRows, kIn, [&](int64_t i, int64_t l) { return dh[l * kHidden + i]; },
                  [&](int64_t l, int64_t j) { return xl[l * kIn + j]; }),
              lowp, ref.w0);
  Mat db0(kHidden, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kHidden; ++j) db0[j] += dh[i * kHidden + j];
  }
  round_count(db0, lowp, ref.b0);
  return ref;
}

struct TinyMlp {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  std::unique_ptr<Model> model;
  Mat x, w0, b0, w2, b2, target;
  Tensor dx, dt, loss, scale;

  TinyMlp(DType lowp, bool numerics) {
    ModelOptions o;
    o.compute = lowp;
    o.precision = lowp == DType::f16 ? "fp16" : "bf16";
    o.loss = LossKind::mse;
    o.in_features = kIn;
    o.out_features = kOut;
    o.max_batch = kRows;
    o.numerics = numerics;
    o.mlp.hidden = {kHidden};
    model = std::make_unique<Mlp>(*be, o);
    x = dyadic(kRows * kIn, 1, 8);
    w0 = dyadic(kHidden * kIn, 2, 6);
    b0 = dyadic(kHidden, 3, 4);
    w2 = dyadic(kOut * kHidden, 4, 6);
    b2 = dyadic(kOut, 5, 4);
    target = dyadic(kRows * kOut, 6, 16);
    std::vector<float> host(model->layout().total(), 0.0f);
    const Mat* tensors[] = {&w0, &b0, &w2, &b2};
    for (size_t e = 0; e < 4; ++e) {
      const FlatLayout::Entry& entry = model->layout().entries()[e];
      for (size_t i = 0; i < entry.numel; ++i) {
        host[entry.offset + i] = static_cast<float>((*tensors[e])[i]);
      }
    }
    be->upload(model->params(), host.data(), host.size() * sizeof(float));
    model->sync_lowp();
    std::vector<float> xf(x.begin(), x.end()), tf(target.begin(), target.end());
    dx = be->from_host({kRows, kIn}, DType::f32, xf.data());
    dt = be->from_host({kRows, kOut}, DType::f32, tf.data());
    loss = be->zeros({1}, DType::f32);
    scale = be->zeros({1}, DType::f32);
  }

  std::vector<float> step(double s) {
    be->fill(scale, s);
    model->zero_grad();
    model->forward(dx, kRows, true);
    model->loss(dt, kRows, loss, Tensor{}, scale);
    model->backward(kRows);
    std::vector<float> g(model->layout().total());
    be->download(g.data(), model->grads());
    return g;
  }
};

void expect_counts(const int64_t* row, const Counts& c, const char* name) {
  EXPECT_EQ(row[numerics::kValues], c.values) << name;
  EXPECT_EQ(row[numerics::kUnderflow], c.underflow) << name;
  EXPECT_EQ(row[numerics::kSubnormal], c.subnormal) << name;
  EXPECT_EQ(row[numerics::kNonfinite], 0) << name;
  const auto bits = static_cast<uint32_t>(row[numerics::kMaxBits]);
  float m;
  std::memcpy(&m, &bits, sizeof m);
  EXPECT_EQ(static_cast<double>(m), c.max_abs) << name;
}

class GradNumericsExact : public ::testing::TestWithParam<std::pair<DType, double>> {};

TEST_P(GradNumericsExact, CountsEqualAnFp64ReferenceAndTheAdviceHistogramABruteForceRecount) {
  const auto [lowp, scale] = GetParam();
  TinyMlp s(lowp, /*numerics=*/true);
  GradNumerics& n = *s.model->numerics();
  n.begin(true);
  s.step(scale);
  n.end();
  std::vector<int64_t> rows;
  n.read(rows);
  const Reference ref = reference(s.x, s.w0, s.b0, s.w2, s.b2, s.target, scale, lowp);
  ASSERT_EQ(rows.size(), 4u * numerics::kWidth);
  expect_counts(rows.data() + 0 * numerics::kWidth, ref.w0, "layers.0.weight");
  expect_counts(rows.data() + 1 * numerics::kWidth, ref.b0, "layers.0.bias");
  expect_counts(rows.data() + 2 * numerics::kWidth, ref.w2, "layers.2.weight");
  expect_counts(rows.data() + 3 * numerics::kWidth, ref.b2, "layers.2.bias");
  // The case exercises what it claims: some values flushed, some subnormal, some kept normal.
  const int64_t under = ref.w0.underflow + ref.b0.underflow + ref.w2.underflow + ref.b2.underflow;
  const int64_t sub = ref.w0.subnormal + ref.b0.subnormal + ref.w2.subnormal + ref.b2.subnormal;
  if (lowp == DType::f16 && scale == 0x1p-18) {
    EXPECT_GT(under, 0);
    EXPECT_GT(sub, 0);
  }
  EXPECT_EQ(ref.w0.values, 48);  // Linear 2's dx, ReLU's dx, dW0
  EXPECT_EQ(ref.w2.values, 16);  // dlogits, dW2

  // The advice's histogram against a brute-force recount at other power-of-two scales.
  train::NumericsSample sample;
  sample.lowp = lowp;
  sample.scale = scale;
  sample.names = {"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"};
  sample.counters = rows;
  std::vector<double> pre;
  for (const Counts* c : {&ref.w0, &ref.b0, &ref.w2, &ref.b2}) {
    pre.insert(pre.end(), c->pre.begin(), c->pre.end());
  }
  for (int k = -40; k <= 40; ++k) {
    int64_t brute = 0;
    for (double v : pre) {
      if (v != 0 && round_lowp(std::ldexp(v, k), lowp) == 0) ++brute;
    }
    EXPECT_EQ(sample.underflow_at_shift(k), brute) << "shift " << k;
  }
  EXPECT_EQ(sample.underflow_at_shift(0), under);
  // Headroom: log2(max finite / max |x|) of the tensor.
  const double maxf = lowp == DType::f16 ? 65504.0 : 3.3895313892515355e38;
  EXPECT_DOUBLE_EQ(*sample.headroom_log2(0), std::log2(maxf / ref.w0.max_abs));
}

INSTANTIATE_TEST_SUITE_P(Scales, GradNumericsExact,
                         ::testing::Values(std::make_pair(DType::f16, 0x1p-18),
                                           std::make_pair(DType::f16, 0x1p-10),
                                           std::make_pair(DType::f16, 1.0),
                                           std::make_pair(DType::bf16, 0x1p-100)));

TEST(GradNumerics, ACountedBackwardGivesTheSameGradientBitsAsAnUncountedOne) {
  for (DType lowp : {DType::f16, DType::bf16}) {
    TinyMlp plain(lowp, /*numerics=*/false);
    TinyMlp counted(lowp, /*numerics=*/true);
    EXPECT_EQ(plain.model->numerics(), nullptr);
    counted.model->numerics()->begin(true);
    const std::vector<float> a = plain.step(0x1p-12), b = counted.step(0x1p-12);
    counted.model->numerics()->end();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    // And an unsampled step of the counting model counts nothing.
    std::vector<int64_t> before, after;
    counted.model->numerics()->read(before);
    counted.step(0x1p-12);
    counted.model->numerics()->read(after);
    EXPECT_EQ(before, after);
  }
}

TEST(GradNumerics, CountersDoNotDependOnTheThreadCount) {
  // A pass split over threads (cpu/numerics.cpp) counts what one thread counts, checked here
  // against a plain loop over the same values.
  std::vector<float> v(3 << 16);  // 3 x kParallelGrain: up to 3 parts
  uint32_t state = 12345;
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    const uint32_t bits = (state & ~(0xffu << 23)) | (((state >> 24) % 160u) << 23);  // all binades
    std::memcpy(&x, &bits, sizeof x);
  }
  for (DType lowp : {DType::f16, DType::bf16}) {
    std::vector<int64_t> want(numerics::kWidth, 0);
    numerics::Partial p;
    for (float x : v) {
      const uint16_t b = lowp == DType::f16 ? float_to_half_bits(x) : float_to_bf16_bits(x);
      const int bin = numerics::classify(x, b, lowp == DType::f16, p);
      if (bin >= 0) ++want[numerics::kHist0 + bin];
    }
    want[numerics::kValues] = p.values;
    want[numerics::kUnderflow] = p.underflow;
    want[numerics::kSubnormal] = p.subnormal;
    want[numerics::kNonfinite] = p.nonfinite;
    want[numerics::kMaxBits] = p.max_bits;
    EXPECT_GT(p.underflow, 0);
    EXPECT_GT(p.subnormal, 0);
    for (int threads : {1, 2, 3}) {
      auto be = make_cpu_backend(threads);
      Tensor src = be->from_host({static_cast<int64_t>(v.size())}, DType::f32, v.data());
      Tensor dst = be->zeros({static_cast<int64_t>(v.size())}, lowp);
      Tensor counters = be->zeros({numerics::kWords}, DType::i32);
      be->round_counted(src, dst, counters);
      std::vector<int64_t> got(numerics::kWidth);
      be->download(got.data(), counters);
      EXPECT_EQ(got, want) << threads << " threads, " << dtype_name(lowp);
    }
  }
}

TEST(GradNumerics, Fp32HasNoHookAndBadCountersAreRefused) {
  auto be = make_cpu_backend(1);
  ModelOptions o;
  o.in_features = kIn;
  o.out_features = kOut;
  o.max_batch = kRows;
  o.numerics = true;
  o.mlp.hidden = {kHidden};
  Mlp m(*be, o);
  EXPECT_EQ(m.numerics(), nullptr);  // fp32: nothing rounds
  Tensor src = be->zeros({4}, DType::f32), dst = be->zeros({4}, DType::f16);
  EXPECT_THROW(be->round_counted(src, dst, be->zeros({4}, DType::i32)), Error);
  EXPECT_THROW(
      be->round_counted(src, be->zeros({4}, DType::f32), be->zeros({numerics::kWords}, DType::i32)),
      Error);
}

// grad_amax (nn/numerics.h, docs/reference.md "grad_amax"): on an unsampled step (begin(false))
// and on a sampled one, the amax accumulator holds exactly the fp64 reference's largest |x|
// before any rounding of the backward (the loss gradient, the activation gradients, dW, db), no
// non-finite flag, and the gradients keep an uncounted backward's bits.
TEST_P(GradNumericsExact, GradAmaxIsTheReferencesLargestMagnitudeBeforeARounding) {
  const auto [lowp, scale] = GetParam();
  TinyMlp plain(lowp, /*numerics=*/false);
  const Reference ref =
      reference(plain.x, plain.w0, plain.b0, plain.w2, plain.b2, plain.target, scale, lowp);
  double want = 0;
  for (const Counts* c : {&ref.w0, &ref.b0, &ref.w2, &ref.b2}) want = std::max(want, c->max_abs);
  ASSERT_GT(want, 0.0);
  const std::vector<float> plain_grads = plain.step(scale);
  for (bool count : {false, true}) {
    TinyMlp s(lowp, /*numerics=*/true);
    GradNumerics& n = *s.model->numerics();
    n.begin(count);
    const std::vector<float> grads = s.step(scale);
    n.end();
    float amax[numerics::kAmaxWords];
    s.be->download(amax, n.amax());
    EXPECT_EQ(static_cast<double>(amax[0]), want) << (count ? "sampled" : "unsampled");
    EXPECT_EQ(amax[1], 0.0f);
    ASSERT_EQ(grads.size(), plain_grads.size());
    EXPECT_EQ(std::memcmp(grads.data(), plain_grads.data(), grads.size() * sizeof(float)), 0);
    // The next step starts from zero: a step at a 4x smaller scale reports a 4x smaller max
    // (a power of two: every value before a rounding scales exactly while none is subnormal).
    if (lowp == DType::f16 && scale == 1.0) {
      n.begin(count);
      s.step(scale / 4);
      n.end();
      s.be->download(amax, n.amax());
      EXPECT_EQ(static_cast<double>(amax[0]), want / 4);
    }
  }
}

}  // namespace
}  // namespace ampctl::nn
