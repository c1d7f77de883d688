// The shared per-element math of nn_math.h that the CPU backend and the CUDA kernels both call
// (clip_coef, the softmax cross-entropy pieces, LayerNorm's forward and backward formulas), run on
// the host against the same formulas evaluated in double on the same float inputs.
//
// Tolerances are forward error bounds, u = 2^-24 (float's unit roundoff; the project builds with
// -ffp-contract=off, so every operation rounds once): an operation a op b contributes at most
// u * |its exact result|, and a rounded operand carries its error through the later products.
// Each bound is written beside its function, with 1% slack for the O(u^2) terms. The inputs stay
// in the normal range, so no bound needs a subnormal term.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "ampctl/math/nn_math.h"

namespace ampctl::test {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24
constexpr double kSlack = 1.01;

// Keeps the worst error seen (as a fraction of its bound) so a failure names it.
class BoundCheck {
 public:
  explicit BoundCheck(std::string what) : m_what(std::move(what)) {}
  void add(float got, double ref, double bound, const std::string& inputs) {
    const double err = std::fabs(static_cast<double>(got) - ref);
    const double used = bound > 0.0 ? err / bound : (err == 0.0 ? 0.0 : INFINITY);
    // A NaN error (used is NaN) is the worst there is and stays the one reported.
    if (!std::isnan(m_worst_used) && !(used <= m_worst_used)) {
      m_worst_used = used;
      m_worst = inputs + ": got " + std::to_string(got) + ", reference " + std::to_string(ref) +
                " (error " + std::to_string(err) + ", bound " + std::to_string(bound) + ")";
    }
    ++m_count;
  }
  ~BoundCheck() {
    EXPECT_GT(m_count, 0) << m_what << ": nothing checked";
    EXPECT_LE(m_worst_used, 1.0) << m_what << ": worst element used " << m_worst_used
                                 << " of its bound at " << m_worst;
  }

 private:
  std::string m_what;
  double m_worst_used = 0.0;
  std::string m_worst = "(none)";
  int m_count = 0;
};

// A float uniform in [lo, hi) with a random sign when `signed_` is set.
float draw(std::mt19937& rng, float lo, float hi, bool signed_ = true) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  const float v = mag(rng);
  return signed_ && neg(rng) ? -v : v;
}

std::string args(std::initializer_list<float> v) {
  std::string s = "(";
  for (float f : v) s += (s.size() > 1 ? ", " : "") + std::to_string(f);
  return s + ")";
}

// clip_coef: norm + 1e-6f, a reciprocal and a product, three roundings of relative size u each;
// the clamp at 1 does not widen the gap (|min(p, 1) - min(q, 1)| <= |p - q|).
TEST(NnMath, ClipCoefMatchesDoubleWithinThreeRoundings) {
  std::mt19937 rng(20240611);
  BoundCheck check("clip_coef");
  for (int i = 0; i < 20000; ++i) {
    const float norm = std::ldexp(draw(rng, 1.0f, 2.0f, false), static_cast<int>(rng() % 40) - 20);
    const float max_norm =
        std::ldexp(draw(rng, 1.0f, 2.0f, false), static_cast<int>(rng() % 8) - 4);
    const double q =
        static_cast<double>(max_norm) / (static_cast<double>(norm) + static_cast<double>(1e-6f));
    const double ref = q > 1.0 ? 1.0 : q;
    check.add(nn::clip_coef(norm, max_norm), ref, kSlack * 3.0 * kU * q, args({norm, max_norm}));
  }
}

TEST(NnMath, ClipCoefClampsAtOneAndKeepsNaN) {
  EXPECT_EQ(nn::clip_coef(0.0f, 1.0f), 1.0f) << "a zero norm needs no clipping";
  EXPECT_EQ(nn::clip_coef(0.5f, 1.0f), 1.0f);
  EXPECT_LT(nn::clip_coef(4.0f, 1.0f), 1.0f);
  EXPECT_TRUE(std::isnan(nn::clip_coef(std::numeric_limits<float>::quiet_NaN(), 1.0f)))
      << "torch.clamp keeps a NaN, so an overflowed norm stays visible";
  EXPECT_EQ(nn::clip_coef(std::numeric_limits<float>::infinity(), 1.0f), 0.0f);
}

// Cross-entropy of a random row: lse is rounded to float once from a double sum, then
// log_softmax = (x - max) - lse adds two roundings. Against the exact log_softmax in double the
// error is at most u|lse| (the rounded lse) + u|x - max| + u(|x - max| + |lse|), i.e.
// 2u(|x - max| + |lse|); the row loss is its exact negation.
TEST(NnMath, XentLogSoftmaxAndRowLossMatchDouble) {
  std::mt19937 rng(7);
  BoundCheck ls_check("xent_log_softmax");
  BoundCheck loss_check("xent_row_loss");
  for (int row = 0; row < 500; ++row) {
    const int cols = 1 + static_cast<int>(rng() % 64);
    const float spread = std::ldexp(1.0f, static_cast<int>(rng() % 8) - 2);
    float x[64];
    float max = -INFINITY;
    for (int j = 0; j < cols; ++j) {
      x[j] = draw(rng, 0.0f, spread);
      if (x[j] > max) max = x[j];
    }
    double sum = 0.0;
    for (int j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(x[j]) - max);
    const double lse_exact = std::log(sum);
    const float lse = static_cast<float>(lse_exact);
    for (int j = 0; j < cols; ++j) {
      const double ref = (static_cast<double>(x[j]) - max) - lse_exact;
      const double bound =
          kSlack * 2.0 * kU * (std::fabs(static_cast<double>(x[j]) - max) + std::fabs(lse_exact));
      const float got = nn::xent_log_softmax(x[j], max, lse);
      ls_check.add(got, ref, bound, args({x[j], max, lse}));
      const float loss = nn::xent_row_loss(got);
      loss_check.add(loss, -ref, bound, args({x[j], max, lse}));
      EXPECT_EQ(loss, -got) << "the row loss is the exact negation";
    }
  }
}

// rstd = 1 / sqrt(var + eps): the sum (u), the square root (halves the sum's error, adds u) and
// the division (u): relative error at most 2.5u.
TEST(NnMath, LayerNormRstdMatchesDouble) {
  std::mt19937 rng(11);
  BoundCheck check("layer_norm_rstd");
  for (int i = 0; i < 20000; ++i) {
    const float var = std::ldexp(draw(rng, 1.0f, 2.0f, false), static_cast<int>(rng() % 40) - 30);
    const float eps = i % 2 == 0 ? 1e-5f : 1e-12f;
    const double ref = 1.0 / std::sqrt(static_cast<double>(var) + static_cast<double>(eps));
    check.add(nn::layer_norm_rstd(var, eps), ref, kSlack * 2.5 * kU * ref, args({var, eps}));
  }
}

// xhat = (x - mean) * rstd: two roundings, relative error 2u. The forward output rounds xhat *
// gamma (relative 3u on t = xhat * gamma) and then adds beta (u on the result): 3u|t| + u|t +
// beta|.
TEST(NnMath, LayerNormForwardMatchesDouble) {
  std::mt19937 rng(13);
  BoundCheck xhat_check("layer_norm_xhat");
  BoundCheck y_check("layer_norm_forward");
  for (int i = 0; i < 20000; ++i) {
    const float x = draw(rng, 0.0f, 8.0f);
    const float mean = draw(rng, 0.0f, 4.0f);
    const float rstd = draw(rng, 0.05f, 20.0f, false);
    const float gamma = draw(rng, 0.1f, 3.0f);
    const float beta = draw(rng, 0.0f, 2.0f);
    const std::string in = args({x, mean, rstd, gamma, beta});
    const double xhat = (static_cast<double>(x) - mean) * rstd;
    xhat_check.add(nn::layer_norm_xhat(x, mean, rstd), xhat, kSlack * 2.0 * kU * std::fabs(xhat),
                   in);
    const double t = xhat * gamma;
    const double y = t + beta;
    y_check.add(nn::layer_norm_forward(x, mean, rstd, gamma, beta), y,
                kSlack * (3.0 * kU * std::fabs(t) + kU * std::fabs(y)), in);
  }
}

// Backward per row, with a = rstd and scale = 1 / C:
//   b = (db * mean - ds) * a^3 * scale: the product db * mean and the difference (u each on
//     |db * mean| + |ds|), then four products (4u on the result): 6u (|db mean| + |ds|) a^3 scale;
//   c = -b * mean - db * a * scale: u|b mean| + 2u|db a scale| + u|c|, at most
//     3u (|b mean| + |db a scale|);
//   dx = a * dy * gamma + b * x + c: 2u|a dy gamma| + u|b x| + u per addition on its partial sum,
//     at most 4u (|a dy gamma| + |b x| + |c|).
TEST(NnMath, LayerNormBackwardMatchesDouble) {
  std::mt19937 rng(17);
  BoundCheck b_check("layer_norm_backward_b");
  BoundCheck c_check("layer_norm_backward_c");
  BoundCheck dx_check("layer_norm_backward_dx");
  for (int i = 0; i < 20000; ++i) {
    const int cols = 1 + static_cast<int>(rng() % 4096);
    const float scale = 1.0f / static_cast<float>(cols);
    const float ds = draw(rng, 0.0f, 50.0f);
    const float db = draw(rng, 0.0f, 50.0f);
    const float mean = draw(rng, 0.0f, 4.0f);
    const float a = draw(rng, 0.05f, 20.0f, false);
    const double a3s = static_cast<double>(a) * a * a * scale;
    const double b_ref = (static_cast<double>(db) * mean - ds) * a3s;
    const float b = nn::layer_norm_backward_b(ds, db, mean, a, scale);
    b_check.add(
        b, b_ref,
        kSlack * 6.0 * kU * (std::fabs(static_cast<double>(db) * mean) + std::fabs(ds)) * a3s,
        args({ds, db, mean, a, scale}));

    const double bm = static_cast<double>(b) * mean;
    const double das = static_cast<double>(db) * a * scale;
    const double c_ref = -bm - das;
    const float c = nn::layer_norm_backward_c(b, db, mean, a, scale);
    c_check.add(c, c_ref, kSlack * 3.0 * kU * (std::fabs(bm) + std::fabs(das)),
                args({b, db, mean, a, scale}));

    const float dy = draw(rng, 0.0f, 4.0f);
    const float gamma = draw(rng, 0.1f, 3.0f);
    const float x = draw(rng, 0.0f, 8.0f);
    const double t1 = static_cast<double>(a) * dy * gamma;
    const double t2 = static_cast<double>(b) * x;
    const double dx_ref = t1 + t2 + c;
    dx_check.add(nn::layer_norm_backward_dx(a, dy, gamma, b, x, c), dx_ref,
                 kSlack * 4.0 * kU * (std::fabs(t1) + std::fabs(t2) + std::fabs(c)),
                 args({a, dy, gamma, b, x, c}));
  }
}

}  // namespace
}  // namespace ampctl::test
