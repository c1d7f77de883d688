// The neural-network ops of the backend against references computed another way: the math in
// double from the already-rounded inputs (then, where the op rounds to a low-precision dtype, the
// same rounding), finite differences of the double forward for every gradient, and bitwise
// re-statements for the ops that do no inexact arithmetic (relu, dropout masks, accumulation).
//
// Notation for the tolerances: u = 2^-24 (float32 unit roundoff), gamma_n = n u / (1 - n u)
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1: a sum or product
// whose every term passes through at most n roundings is within gamma_n of the exact one, relative
// to the sum of absolute values); u_out and eta_out are the unit roundoff and half the smallest
// subnormal of the output dtype (rounding y to it moves it by at most u_out |y| + eta_out);
// ulp32(v) is the spacing of floats at |v|. libm's float transcendentals are within 2 ulps
// (glibc's documented maxima: erff, expf, logf 1 ulp, tanhf 2 ulps).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "ampctl/core/philox.h"
#include "unit/backend/backend_test_util.h"

// Counts every operator new in this test binary, for the steady-state allocation test below.
// malloc-backed, as libstdc++'s own operator new is, so its operator delete (free) still matches.
namespace ampctl::test {
std::atomic<size_t> g_allocations{0};
}  // namespace ampctl::test

// GCC sees free() on memory from operator new once these are inlined; here that is the point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  ampctl::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc{};
}
// The matching deletes: under AddressSanitizer operator delete is the sanitizer's own, which
// refuses (alloc-dealloc-mismatch) memory that did not come from its operator new.
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace ampctl::test {
namespace {

constexpr double kU = 0x1p-24;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

double gamma(double n, double u = kU) {
  return n * u / (1.0 - n * u);
}

double unit_roundoff(DType d) {
  switch (d) {
    case DType::f16:
      return 0x1p-11;
    case DType::bf16:
      return 0x1p-8;
    default:
      return 0x1p-24;
  }
}

double half_min_subnormal(DType d) {
  switch (d) {
    case DType::f16:
      return 0x1p-25;
    case DType::bf16:
      return 0x1p-134;
    default:
      return 0x1p-150;
  }
}

double ulp32(double v) {
  v = std::fabs(v);
  if (v < 0x1p-126) return 0x1p-149;
  int e;
  std::frexp(v, &e);  // v = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 24);
}

// |round_out(y) - ref| for a float result y with |y - ref| <= float_err.
double with_output_rounding(double ref, double float_err, DType out) {
  return float_err + unit_roundoff(out) * (std::fabs(ref) + float_err) + half_min_subnormal(out);
}

std::vector<float> random_rounded(std::mt19937_64& rng, size_t n, int emin, int emax, DType d) {
  std::vector<float> v = random_values(rng, n, emin, emax);
  for (float& x : v) x = round_to(x, d);
  return v;
}

std::string dtypes_str(std::initializer_list<DType> ds) {
  std::string s;
  for (DType d : ds) {
    if (!s.empty()) s += '/';
    s += dtype_name(d);
  }
  return s;
}

// ============================================================================================
// linear_forward
// ============================================================================================

// Tolerance as test_gemm_ops.cpp's, with the bias as one more summand: each term of
// sum_i x_i w_i + b passes through at most k + 2 roundings in float (product, k - 1 additions in
// any order, the bias addition), so |y - exact| <= gamma_{k+2} W, W = sum |x_i w_i| + |b|; then
// the output rounding; the double reference is within gamma_{k+3}(2^-53) W.
TEST(LinearForward, MatchesFp64WithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x11e4);
  struct Combo {
    DType x, w, b, y;
  };
  const Combo combos[] = {{DType::f32, DType::f32, DType::f32, DType::f32},
                          {DType::f16, DType::f16, DType::f16, DType::f16},
                          {DType::bf16, DType::bf16, DType::bf16, DType::bf16},
                          {DType::f16, DType::f32, DType::f32, DType::f32},
                          {DType::bf16, DType::bf16, DType::f32, DType::bf16},
                          {DType::f32, DType::f16, DType::f16, DType::f16}};
  struct Dims {
    int64_t rows, in, out;
  };
  const Dims dims[] = {{1, 1, 1}, {7, 5, 3}, {33, 129, 65}, {64, 96, 128}, {3, 0, 4}};
  for (const Combo& c : combos) {
    for (const Dims& d : dims) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE(dtypes_str({c.x, c.w, c.b, c.y}) + " R " + std::to_string(d.rows) + " I " +
                     std::to_string(d.in) + " O " + std::to_string(d.out) +
                     (bias ? " bias" : " no bias"));
        // |x|, |w| < 2 and k <= 129: f16 outputs stay finite.
        const auto xv = random_rounded(rng, static_cast<size_t>(d.rows * d.in), -3, 1, c.x);
        const auto wv = random_rounded(rng, static_cast<size_t>(d.out * d.in), -3, 1, c.w);
        const auto bv = random_rounded(rng, static_cast<size_t>(d.out), -3, 1, c.b);
        Tensor x = upload_values(*be, {d.rows, d.in}, c.x, xv);
        Tensor w = upload_values(*be, {d.out, d.in}, c.w, wv);
        Tensor b = bias ? upload_values(*be, {d.out}, c.b, bv) : Tensor{};
        Tensor y = be->empty({d.rows, d.out}, c.y);
        be->linear_forward(x, w, b, y);
        const auto got = download_values(*be, y);
        const double g = gamma(static_cast<double>(d.in + 2));
        const double g_ref = gamma(static_cast<double>(d.in + 3), 0x1p-53);
        ErrorBudget budget;
        for (int64_t r = 0; r < d.rows; ++r) {
          for (int64_t o = 0; o < d.out; ++o) {
            double sum = bias ? bv[o] : 0.0, weight = bias ? std::fabs(bv[o]) : 0.0;
            for (int64_t i = 0; i < d.in; ++i) {
              const double p = static_cast<double>(xv[r * d.in + i]) * wv[o * d.in + i];
              sum += p;
              weight += std::fabs(p);
            }
            const double bound = with_output_rounding(sum, g * weight + 2 * g_ref * weight, c.y);
            budget.add(static_cast<size_t>(r * d.out + o), got[r * d.out + o], sum, bound);
          }
        }
        EXPECT_TRUE(budget.ok()) << budget.report();
      }
    }
  }
}

TEST(LinearForward, RejectsMismatchedShapes) {
  auto be = cpu_backend();
  Tensor x = be->zeros({4, 3}, DType::f32);
  Tensor w = be->zeros({5, 3}, DType::f32);
  Tensor y = be->zeros({4, 5}, DType::f32);
  expect_invalid_argument(
      [&] {
        be->linear_forward(x, be->zeros({5, 2}, DType::f32), {}, y);
      },
      "w with the wrong in-features");
  expect_invalid_argument([&] { be->linear_forward(x, w, be->zeros({4}, DType::f32), y); },
                          "bias of the wrong length");
  expect_invalid_argument(
      [&] {
        be->linear_forward(x, w, {}, be->zeros({5, 4}, DType::f32));
      },
      "y transposed");
  expect_invalid_argument(
      [&] {
        be->linear_forward(x, w, {}, be->zeros({4, 5}, DType::i32));
      },
      "integer y");
}

// ============================================================================================
// sum_rows
// ============================================================================================

// Each column is a sum of R floats: R - 1 roundings of the additions (the first adds to zero
// exactly), so |s - exact| <= gamma_R sum |x|; then the output rounding.
TEST(SumRows, MatchesFp64WithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x5e5e);
  struct Dims {
    int64_t rows, cols;
  };
  const Dims dims[] = {{1, 1}, {7, 3}, {129, 17}, {1000, 5}, {0, 4}};
  for (DType dx : kFloatDTypes) {
    for (DType dout : kFloatDTypes) {
      for (const Dims& d : dims) {
        SCOPED_TRACE(dtypes_str({dx, dout}) + " R " + std::to_string(d.rows) + " C " +
                     std::to_string(d.cols));
        const auto xv = random_rounded(rng, static_cast<size_t>(d.rows * d.cols), -4, 2, dx);
        Tensor x = upload_values(*be, {d.rows, d.cols}, dx, xv);
        Tensor out = upload_values(*be, {d.cols}, dout, std::vector<float>(d.cols, 7.0f));
        be->sum_rows(x, out);
        const auto got = download_values(*be, out);
        ErrorBudget budget;
        for (int64_t c = 0; c < d.cols; ++c) {
          double sum = 0, weight = 0;
          for (int64_t r = 0; r < d.rows; ++r) {
            sum += xv[r * d.cols + c];
            weight += std::fabs(xv[r * d.cols + c]);
          }
          const double err = (gamma(static_cast<double>(d.rows)) +
                              2 * gamma(static_cast<double>(d.rows), 0x1p-53)) *
                             weight;
          budget.add(static_cast<size_t>(c), got[c], sum, with_output_rounding(sum, err, dout));
        }
        EXPECT_TRUE(budget.ok()) << budget.report();
      }
    }
  }
}

// ============================================================================================
// activations
// ============================================================================================

// Random values plus the special ones: signed zeros, infinities, NaN, subnormals of the dtype.
std::vector<float> activation_inputs(std::mt19937_64& rng, size_t n, DType d) {
  std::vector<float> v = random_rounded(rng, n, -8, 3, d);
  const float tiny = d == DType::f16 ? 0x1p-24f : d == DType::bf16 ? 0x1p-133f : 0x1p-149f;
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, tiny, -tiny, 1.0f, -1.0f};
  for (size_t i = 0; i < std::size(specials) && i * 37 < n; ++i)
    v[i * 37] = round_to(specials[i], d);
  return v;
}

// relu does no inexact arithmetic: y = x (NaN included, as PyTorch's relu propagates it) or +0,
// rounded once to y's dtype: bitwise (any NaN matches any NaN: the payload is the converter's).
TEST(Activation, ReluForwardIsBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x7e10);
  for (DType dx : kFloatDTypes) {
    for (DType dy : kFloatDTypes) {
      for (bool in_place : {false, true}) {
        if (in_place && dx != dy) continue;
        SCOPED_TRACE(dtypes_str({dx, dy}) + (in_place ? " in place" : ""));
        const auto xv = activation_inputs(rng, 1001, dx);
        Tensor x = upload_values(*be, {1001}, dx, xv);
        Tensor y = in_place ? x : be->empty({1001}, dy);
        be->activation_forward(nn::ActivationKind::relu, x, y);
        std::vector<uint32_t> expected(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) {
          const float r = std::isnan(xv[i]) ? xv[i] : (xv[i] > 0.0f ? xv[i] : 0.0f);
          expected[i] = encode(r, dy);
        }
        BitwiseCheck check(dy, /*nan_any=*/true);
        check.add_all(download_bits(*be, y), expected);
        EXPECT_TRUE(check.ok()) << check.report();
        const auto got = download_values(*be, y);
        EXPECT_TRUE(std::isnan(got[4 * 37]) && std::isnan(got[5 * 37])) << "NaN must propagate";
        EXPECT_EQ(got[2 * 37], kInf) << "relu(inf)";
        EXPECT_EQ(got[3 * 37], 0.0f) << "relu(-inf)";
      }
    }
  }
}

// relu's backward reads only the output (threshold_backward): dx = y > 0 ? dy : 0, bitwise.
// x may be undefined; dx may alias dy.
TEST(Activation, ReluBackwardIsBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x7e11);
  for (DType dt : kFloatDTypes) {
    for (DType dg : kFloatDTypes) {
      for (bool alias : {false, true}) {
        SCOPED_TRACE(dtypes_str({dt, dg}) + (alias ? " dx aliases dy" : ""));
        auto yv = activation_inputs(rng, 1001, dt);
        for (size_t i = 0; i < yv.size(); i += 3) yv[i] = 0.0f;  // relu outputs: many zeros
        const auto dyv = activation_inputs(rng, 1001, dg);
        Tensor y = upload_values(*be, {1001}, dt, yv);
        Tensor dy = upload_values(*be, {1001}, dg, dyv);
        Tensor dx = alias ? dy : be->empty({1001}, dg);
        be->activation_backward(nn::ActivationKind::relu, Tensor{}, y, dy, dx);
        std::vector<uint32_t> expected(yv.size());
        for (size_t i = 0; i < yv.size(); ++i) expected[i] = encode(yv[i] > 0 ? dyv[i] : 0.0f, dg);
        BitwiseCheck check(dg, /*nan_any=*/true);
        check.add_all(download_bits(*be, dx), expected);
        EXPECT_TRUE(check.ok()) << check.report();
      }
    }
  }
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double gelu_grad_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846);
}

// Float error of the activations (first order, each with a factor 2 of margin):
//   * gelu(x) = 0.5 x (1 + erf(x / sqrt2)): erff is within 1 ulp (<= 2u absolute, |erf| < 1),
//     rounding x / sqrt2 moves erf by <= (2 / sqrt(pi)) t e^-t^2 u <= 0.5u, and 1 + erf rounds by
//     u: the bracket is off by <= 3.5u absolute, times |x| / 2, plus u |y| for the product; in
//     the negative tail 1 + erf cancels, so the error is relative to |x|, not to |y|:
//     err <= 4u |x| + 4 ulp32(y).
//   * tanh: tanhf within 2 ulps: err <= 4 ulp32(y).
//   * gelu'(x) = cdf + x pdf: cdf off by <= 1.8u (as above, halved), x pdf by <= 0.7u (exp's
//     argument -x^2/2 rounds relatively, and |x|^3 pdf / 2 <= 0.24), the sum rounds by u |g'|
//     <= 1.2u: |g' err| <= 3.7u, times |dy|: err <= 8u |dy| + 4 ulp32(dx).
//   * tanh backward dy (1 - y y): fl(y y) off by u y^2, 1 - y^2 and the product round by u each:
//     err <= u (2 |dx| + |dy| y^2), doubled: 4u (|dx| + |dy| y^2) + ulp32(dx).
// then the output rounding.
TEST(Activation, GeluAndTanhForwardMatchDoubleWithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x6e1f);
  const std::pair<DType, DType> combos[] = {{DType::f32, DType::f32},
                                            {DType::f16, DType::f16},
                                            {DType::bf16, DType::bf16},
                                            {DType::f32, DType::f16},
                                            {DType::f32, DType::bf16}};
  for (nn::ActivationKind kind : {nn::ActivationKind::gelu, nn::ActivationKind::tanh}) {
    const bool gelu = kind == nn::ActivationKind::gelu;
    for (const auto& [dx, dy] : combos) {
      SCOPED_TRACE(std::string(gelu ? "gelu " : "tanh ") + dtypes_str({dx, dy}));
      const auto xv = random_rounded(rng, 4099, -10, 3, dx);  // |x| < 8, down to 2^-10
      Tensor x = upload_values(*be, {4099}, dx, xv);
      Tensor y = be->empty({4099}, dy);
      be->activation_forward(kind, x, y);
      const auto got = download_values(*be, y);
      ErrorBudget budget;
      for (size_t i = 0; i < xv.size(); ++i) {
        const double ref = gelu ? gelu_ref(xv[i]) : std::tanh(static_cast<double>(xv[i]));
        const double err = gelu ? 4 * kU * std::fabs(xv[i]) + 4 * ulp32(ref) : 4 * ulp32(ref);
        budget.add(i, got[i], ref, with_output_rounding(ref, err, dy));
      }
      EXPECT_TRUE(budget.ok()) << budget.report();
    }
  }
}

TEST(Activation, GeluAndTanhBackwardMatchDoubleWithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x6e20);
  for (nn::ActivationKind kind : {nn::ActivationKind::gelu, nn::ActivationKind::tanh}) {
    const bool gelu = kind == nn::ActivationKind::gelu;
    for (DType dt : kFloatDTypes) {
      for (DType dg : kFloatDTypes) {
        SCOPED_TRACE(std::string(gelu ? "gelu " : "tanh ") + dtypes_str({dt, dg}));
        const auto xv = random_rounded(rng, 2053, -10, 3, dt);
        std::vector<float> yv(xv.size());  // the forward output as the op would have stored it
        for (size_t i = 0; i < xv.size(); ++i) {
          yv[i] = round_to(static_cast<float>(gelu ? gelu_ref(xv[i]) : std::tanh(xv[i])), dt);
        }
        const auto dyv = random_rounded(rng, xv.size(), -6, 6, dg);
        Tensor x = upload_values(*be, {2053}, dt, xv);
        Tensor y = upload_values(*be, {2053}, dt, yv);
        Tensor dy = upload_values(*be, {2053}, dg, dyv);
        Tensor dx = be->empty({2053}, dg);
        be->activation_backward(kind, x, y, dy, dx);
        const auto got = download_values(*be, dx);
        ErrorBudget budget;
        for (size_t i = 0; i < xv.size(); ++i) {
          const double yd = yv[i], dyd = dyv[i];
          const double ref = gelu ? dyd * gelu_grad_ref(xv[i]) : dyd * (1.0 - yd * yd);
          const double err =
              gelu ? 8 * kU * std::fabs(dyd) + 4 * ulp32(ref)
                   : 4 * kU * (std::fabs(ref) + std::fabs(dyd) * yd * yd) + ulp32(ref);
          budget.add(i, got[i], ref, with_output_rounding(ref, err, dg));
        }
        EXPECT_TRUE(budget.ok()) << budget.report();
      }
    }
  }
}

TEST(Activation, RejectsUnknownKindAndMissingOperands) {
  auto be = cpu_backend();
  Tensor x = be->zeros({8}, DType::f32);
  expect_invalid_argument([&] { be->activation_forward(static_cast<nn::ActivationKind>(7), x, x); },
                          "kind 7");
  expect_invalid_argument(
      [&] { be->activation_backward(nn::ActivationKind::gelu, Tensor{}, x, x, x); },
      "gelu backward without its input");
  expect_invalid_argument(
      [&] { be->activation_backward(nn::ActivationKind::tanh, x, Tensor{}, x, x); },
      "tanh backward without its output");
  expect_invalid_argument(
      [&] { be->activation_forward(nn::ActivationKind::relu, x, be->zeros({9}, DType::f32)); },
      "numel mismatch");
}

// ============================================================================================
// dropout
// ============================================================================================

// The documented mask (nn_math.h): element i of call `offset` is kept when the top 24 bits of
// Philox draw i of stream (seed, offset), as a uniform in [0, 1), are >= p. core/philox.h is
// checked against Random123's known answers in tests/unit/core.
bool documented_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  const uint32_t bits = philox_u32(seed, offset, i);
  return static_cast<double>(bits >> 8) / 16777216.0 >= static_cast<double>(p);
}

// Values far from zero (|x| >= 2^-8, so x * scale is a normal number in every dtype): a zero
// output means "dropped".
std::vector<float> nonzero_values(std::mt19937_64& rng, size_t n, DType d) {
  std::vector<float> v = random_rounded(rng, n, -6, 4, d);
  for (float& x : v) {
    if (std::fabs(x) < 0x1p-8f) x = 1.0f;
  }
  return v;
}

// Kept count ~ Binomial(n, 1 - p); 5 sigma = 5 sqrt(n p (1 - p)): a correct mask fails with
// probability ~6e-7 per draw, and the seeds are fixed, so the test is deterministic.
TEST(Dropout, KeptFractionWithinFiveSigma) {
  auto be = cpu_backend();
  const size_t n = 1000000;
  Tensor x = be->empty({static_cast<int64_t>(n)}, DType::f32);
  be->fill(x, 1.5);
  Tensor y = be->empty({static_cast<int64_t>(n)}, DType::f32);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    be->dropout_forward(x, y, p, 0x5eedull + static_cast<uint64_t>(p * 10), 3);
    const auto got = download_values(*be, y);
    const double kept = static_cast<double>(
        std::count_if(got.begin(), got.end(), [](float v) { return v != 0.0f; }));
    const double pd = p;
    const double sigma = std::sqrt(n * pd * (1 - pd));
    EXPECT_LE(std::fabs(kept - n * (1 - pd)), 5 * sigma)
        << "p " << p << ": kept " << kept << " of " << n << ", expected " << n * (1 - pd)
        << " +- 5 * " << sigma;
  }
}

// Kept elements are round(x * scale) with scale = 1 / (1 - p) in float, dropped ones +0, and the
// mask is the documented one; the backward applies the same mask and scale to dy.
TEST(Dropout, ForwardAndBackwardApplyTheDocumentedMaskBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xd70f);
  const uint64_t seed = 0x123456789abcdefull;
  for (DType dx : kFloatDTypes) {
    for (DType dy : kFloatDTypes) {
      for (float p : {0.0f, 0.2f, 0.5f}) {
        SCOPED_TRACE(dtypes_str({dx, dy}) + " p " + fmt(p));
        const size_t n = 3001;
        const uint64_t offset = 17;
        const auto xv = nonzero_values(rng, n, dx);
        Tensor x = upload_values(*be, {static_cast<int64_t>(n)}, dx, xv);
        Tensor y = be->empty({static_cast<int64_t>(n)}, dy);
        be->dropout_forward(x, y, p, seed, offset);
        const float scale = 1.0f / (1.0f - p);
        std::vector<uint32_t> expected(n);
        for (size_t i = 0; i < n; ++i) {
          expected[i] = documented_keep(seed, offset, i, p) ? encode(xv[i] * scale, dy) : 0u;
        }
        BitwiseCheck fwd(dy);
        fwd.add_all(download_bits(*be, y), expected);
        EXPECT_TRUE(fwd.ok()) << "forward: " << fwd.report();

        // Backward, in place (dx aliases dy): zero exactly where the forward output is zero.
        const auto gv = nonzero_values(rng, n, dx);
        Tensor g = upload_values(*be, {static_cast<int64_t>(n)}, dx, gv);
        be->dropout_backward(g, g, p, seed, offset);
        const auto yv = download_values(*be, y);
        const auto dgv = download_values(*be, g);
        size_t mismatches = 0, first = n;
        for (size_t i = 0; i < n; ++i) {
          const bool ok =
              yv[i] == 0.0f ? float_bits(dgv[i]) == 0u : dgv[i] == round_to(gv[i] * scale, dx);
          if (!ok && mismatches++ == 0) first = i;
        }
        EXPECT_EQ(mismatches, 0u) << "backward: first mismatch at " << first << ": y "
                                  << (first < n ? yv[first] : 0) << ", dy "
                                  << (first < n ? gv[first] : 0) << ", dx "
                                  << (first < n ? dgv[first] : 0);
      }
    }
  }
}

std::vector<bool> mask_of(Backend& be, uint64_t seed, uint64_t offset, float p, size_t n) {
  Tensor x = be.empty({static_cast<int64_t>(n)}, DType::f32);
  be.fill(x, 1.0);
  Tensor y = be.empty({static_cast<int64_t>(n)}, DType::f32);
  be.dropout_forward(x, y, p, seed, offset);
  const auto v = download_values(be, y);
  std::vector<bool> m(n);
  for (size_t i = 0; i < n; ++i) m[i] = v[i] != 0.0f;
  return m;
}

size_t differing(const std::vector<bool>& a, const std::vector<bool>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

// Independent masks differ in a fraction 2 p (1 - p) = 0.5 of places (p = 0.5): over 10000
// elements, expect ~5000; anything below 4000 is > 20 sigma off.
TEST(Dropout, MaskIsAFunctionOfSeedAndOffset) {
  auto be = cpu_backend();
  const size_t n = 10000;
  const auto a = mask_of(*be, 42, 0, 0.5f, n);
  EXPECT_EQ(differing(a, mask_of(*be, 42, 0, 0.5f, n)), 0u) << "same (seed, offset)";
  EXPECT_GT(differing(a, mask_of(*be, 42, 1, 0.5f, n)), 4000u) << "offset 0 vs 1";
  EXPECT_GT(differing(a, mask_of(*be, 43, 0, 0.5f, n)), 4000u) << "seed 42 vs 43";
  EXPECT_GT(differing(a, mask_of(*be, 42, 1ull << 32, 0.5f, n)), 4000u) << "offset 0 vs 2^32";
}

TEST(Dropout, EdgeProbabilities) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xd7d7);
  const auto xv = nonzero_values(rng, 513, DType::f16);
  Tensor x = upload_values(*be, {513}, DType::f16, xv);
  Tensor y = be->empty({513}, DType::f16);
  be->dropout_forward(x, y, 0.0f, 1, 2);
  BitwiseCheck keep_all(DType::f16);
  keep_all.add_all(download_bits(*be, y), download_bits(*be, x));
  EXPECT_TRUE(keep_all.ok()) << "p = 0 is the identity: " << keep_all.report();
  be->dropout_forward(x, y, 1.0f, 1, 2);
  BitwiseCheck drop_all(DType::f16);
  drop_all.add_all(download_bits(*be, y), std::vector<uint32_t>(513, 0u));
  EXPECT_TRUE(drop_all.ok()) << "p = 1 drops everything: " << drop_all.report();
  for (float p : {-0.1f, 1.5f, kNaN}) {
    expect_invalid_argument([&] { be->dropout_forward(x, y, p, 1, 2); }, "p " + fmt(p));
  }
}

// ============================================================================================
// softmax cross-entropy
// ============================================================================================

struct XentRef {
  std::vector<double> ls;    // log_softmax, [R, C]
  std::vector<double> e_ls;  // float error bound of each log_softmax value
  double loss = 0;           // mean of -ls[target]
  double e_loss = 0;         // float error bound of the loss
  int32_t correct = 0;       // rows whose first maximum is the label
};

// Float error of one row's log_softmax (first order; exp and log within 1 ulp = 2u relative):
// a_j = fl(x_j - m) is off by u |a_j|, so exp(a_j) by (|a_j| + 2) u relatively; the sum of C
// positive terms adds gamma_C: the sum is off by (D + C + 2) u relatively, D = max |a_j|; its log
// by that absolutely, plus 2u |lse|; ls_j = fl(a_j - lse) adds u |a_j| + u |ls_j|. Doubled for
// the second-order terms. The loss sums R of them (gamma_R on the sum of |ls_t|) and divides by R
// (u).
XentRef reference_xent(const std::vector<float>& x, const std::vector<int32_t>& labels,
                       int64_t rows, int64_t cols) {
  XentRef r;
  r.ls.resize(x.size());
  r.e_ls.resize(x.size());
  double loss_sum = 0, abs_sum = 0, e_sum = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = &x[i * cols];
    int64_t arg = 0;
    for (int64_t j = 1; j < cols; ++j) {
      if (row[j] > row[arg]) arg = j;
    }
    const double m = row[arg];
    double sum = 0, d = 0;
    for (int64_t j = 0; j < cols; ++j) {
      sum += std::exp(row[j] - m);
      d = std::max(d, std::fabs(row[j] - m));
    }
    const double lse = std::log(sum);
    for (int64_t j = 0; j < cols; ++j) {
      const double a = row[j] - m;
      const double ls = a - lse;
      r.ls[i * cols + j] = ls;
      r.e_ls[i * cols + j] =
          2 * kU *
          (std::fabs(a) + d + static_cast<double>(cols) + 2 + 2 * std::fabs(lse) + std::fabs(ls));
    }
    const int64_t t = labels[i];
    loss_sum += -r.ls[i * cols + t];
    abs_sum += std::fabs(r.ls[i * cols + t]);
    e_sum += r.e_ls[i * cols + t];
    if (arg == t) ++r.correct;
  }
  r.loss = loss_sum / static_cast<double>(rows);
  r.e_loss = (e_sum + gamma(static_cast<double>(rows)) * abs_sum) / static_cast<double>(rows) +
             kU * std::fabs(r.loss) + 1e-15 * abs_sum;
  return r;
}

// Random labels, half of them set to the row's first maximum so the accuracy count is
// non-trivial, and rows with a tie for the maximum labelled at the second copy (not counted).
struct XentInputs {
  std::vector<float> logits;
  std::vector<int32_t> labels;
};

XentInputs xent_inputs(std::mt19937_64& rng, int64_t rows, int64_t cols, DType d, float offset) {
  XentInputs in;
  in.logits = random_rounded(rng, static_cast<size_t>(rows * cols), -4, 3, d);
  for (float& v : in.logits) v = round_to(v + offset, d);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(cols - 1));
  in.labels.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    float* row = &in.logits[i * cols];
    int64_t arg = 0;
    for (int64_t j = 1; j < cols; ++j) {
      if (row[j] > row[arg]) arg = j;
    }
    in.labels[i] = label(rng);
    if (i % 2 == 0) in.labels[i] = static_cast<int32_t>(arg);
    if (i % 5 == 1 && cols > 1) {  // a tie: the same maximum again, later in the row
      const int64_t later = arg + 1 + (cols - 1 - arg) / 2;
      if (later < cols && later != arg) {
        row[later] = row[arg];
        in.labels[i] = static_cast<int32_t>(later);
      }
    }
  }
  return in;
}

TEST(SoftmaxCrossEntropy, MatchesDoubleReference) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x8e01);
  struct Dims {
    int64_t rows, cols;
  };
  const Dims dims[] = {{1, 2}, {17, 10}, {64, 129}, {5, 1}};
  const std::pair<DType, DType> combos[] = {{DType::f32, DType::f32},
                                            {DType::f16, DType::f16},
                                            {DType::bf16, DType::bf16},
                                            {DType::f32, DType::f16},
                                            {DType::f16, DType::f32}};
  for (const auto& [dl, dg] : combos) {
    for (const Dims& d : dims) {
      for (float offset : {0.0f, 200.0f}) {  // a large common offset: the max shift matters
        for (float gs : {1.0f, 1024.0f}) {   // |dlogits| <= gs / R: finite in f16
          SCOPED_TRACE(dtypes_str({dl, dg}) + " R " + std::to_string(d.rows) + " C " +
                       std::to_string(d.cols) + " offset " + fmt(offset) + " grad_scale " +
                       fmt(gs));
          const XentInputs in = xent_inputs(rng, d.rows, d.cols, dl, offset);
          Tensor logits = upload_values(*be, {d.rows, d.cols}, dl, in.logits);
          Tensor labels = upload_i32(*be, {d.rows}, in.labels);
          Tensor loss = scalar_f32(*be, -1.0f);
          Tensor correct = scalar_i32(*be, -1);
          Tensor dlogits = be->empty({d.rows, d.cols}, dg);
          be->softmax_cross_entropy(logits, labels, loss, correct, dlogits, scalar_f32(*be, gs));
          const XentRef ref = reference_xent(in.logits, in.labels, d.rows, d.cols);
          ErrorBudget loss_budget;
          loss_budget.add(0, be->read_scalar_f32(loss), ref.loss, ref.e_loss);
          EXPECT_TRUE(loss_budget.ok()) << "loss: " << loss_budget.report();
          EXPECT_EQ(be->read_scalar_i32(correct), ref.correct) << "accuracy count";

          // dlogits_j = c ([j == t] - p_j), c = -gs / R. Float: p_j = exp(ls_j) is off by
          // (e_ls_j + 2u) relatively, c by u, the product and the difference round by u each:
          // err <= |c| p_j (e_ls_j + 4u) + 2u |ref|, doubled; then the output rounding.
          const double c = -static_cast<double>(gs) / static_cast<double>(d.rows);
          const auto got = download_values(*be, dlogits);
          ErrorBudget budget;
          for (int64_t i = 0; i < d.rows; ++i) {
            for (int64_t j = 0; j < d.cols; ++j) {
              const size_t k = static_cast<size_t>(i * d.cols + j);
              const double p = std::exp(ref.ls[k]);
              const double r = (j == in.labels[i] ? c : 0.0) - p * c;
              const double err =
                  2 * (std::fabs(c) * p * (ref.e_ls[k] + 4 * kU) + 2 * kU * std::fabs(r));
              budget.add(k, got[k], r, with_output_rounding(r, err, dg));
            }
          }
          EXPECT_TRUE(budget.ok()) << "dlogits: " << budget.report();
        }
      }
    }
  }
}

// The argmax counts the first maximum only, and a NaN logit counts as the maximum (torch.argmax).
TEST(SoftmaxCrossEntropy, AccuracyCountsFirstMaximum) {
  auto be = cpu_backend();
  const std::vector<float> logits = {1, 3,    3, 0,   // max at 1 and 2
                                     1, 3,    3, 0,   //
                                     5, 1,    5, 5,   // max at 0, 2, 3
                                     0, kNaN, 9, 1};  // NaN at 1 counts as the maximum
  const std::vector<int32_t> labels = {1, 2, 0, 1};   // first max, second max, first, NaN
  Tensor correct = scalar_i32(*be, -1);
  Tensor loss = scalar_f32(*be, 0);
  be->softmax_cross_entropy(upload_values(*be, {4, 4}, DType::f32, logits),
                            upload_i32(*be, {4}, labels), loss, correct, Tensor{}, Tensor{});
  EXPECT_EQ(be->read_scalar_i32(correct), 3) << "rows 0, 2 and 3 are correct, row 1 is a tie";
  EXPECT_TRUE(std::isnan(be->read_scalar_f32(loss))) << "a NaN logit makes the loss NaN";
}

// dlogits (grad_scale 1, f32) is the derivative of the double loss: central differences with
// h = 1e-5 have truncation error h^2 / 6 |L'''| < 1e-10 (|L'''| <= 1 for softmax) and rounding
// error ~1e-16 |L| / h < 1e-10, far below the 1e-4 relative tolerance (plus a 1e-9 absolute
// floor for the FD noise on near-zero entries).
double xent_loss_double(const std::vector<double>& x, const std::vector<int32_t>& labels,
                        int64_t rows, int64_t cols) {
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const double* row = &x[i * cols];
    const double m = *std::max_element(row, row + cols);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(row[j] - m);
    total += -(row[labels[i]] - m - std::log(sum));
  }
  return total / static_cast<double>(rows);
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x8e02);
  const int64_t rows = 4, cols = 6;
  const XentInputs in = xent_inputs(rng, rows, cols, DType::f32, 0.0f);
  Tensor dlogits = be->empty({rows, cols}, DType::f32);
  Tensor loss = scalar_f32(*be, 0);
  be->softmax_cross_entropy(upload_values(*be, {rows, cols}, DType::f32, in.logits),
                            upload_i32(*be, {rows}, in.labels), loss, Tensor{}, dlogits,
                            scalar_f32(*be, 1.0f));
  const auto got = download_values(*be, dlogits);
  std::vector<double> x(in.logits.begin(), in.logits.end());
  ErrorBudget budget;
  const double h = 1e-5;
  for (size_t k = 0; k < x.size(); ++k) {
    const double x0 = x[k];
    x[k] = x0 + h;
    const double lp = xent_loss_double(x, in.labels, rows, cols);
    x[k] = x0 - h;
    const double lm = xent_loss_double(x, in.labels, rows, cols);
    x[k] = x0;
    const double fd = (lp - lm) / (2 * h);
    budget.add(k, got[k], fd, 1e-4 * std::fabs(fd) + 1e-9);
  }
  EXPECT_TRUE(budget.ok()) << budget.report();
}

TEST(SoftmaxCrossEntropy, LabelsOutOfRangeThrow) {
  auto be = cpu_backend();
  Tensor logits = be->zeros({3, 4}, DType::f32);
  Tensor loss = scalar_f32(*be, 0);
  for (int32_t bad : {4, -1, 1000}) {
    Tensor labels = upload_i32(*be, {3}, {0, bad, 2});
    expect_invalid_argument(
        [&] { be->softmax_cross_entropy(logits, labels, loss, Tensor{}, Tensor{}, Tensor{}); },
        "label " + std::to_string(bad));
  }
  expect_invalid_argument(
      [&] {
        be->softmax_cross_entropy(logits, upload_i32(*be, {2}, {0, 1}), loss, Tensor{}, Tensor{},
                                  Tensor{});
      },
      "labels of the wrong length");
}

// ============================================================================================
// mse
// ============================================================================================

// loss = sum (p - t)^2 / n: each term passes through the difference (1 rounding, doubled by the
// square: 2), the square and n - 1 additions (n + 2 roundings, all terms >= 0) and the division
// rounds once: err <= gamma_{n+3} |loss|. dpred = (2/n) (p - t) gs: four roundings (2/n from
// double, the difference, two products): err <= gamma_4 |ref|; then the output rounding. The
// double references add ~1e-15 relative.
TEST(Mse, LossAndGradientMatchDouble) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x3e5e);
  for (DType dp : kFloatDTypes) {
    for (DType dg : kFloatDTypes) {
      for (size_t n : {1u, 37u, 4099u}) {
        for (float gs : {1.0f, 1024.0f}) {
          SCOPED_TRACE(dtypes_str({dp, dg}) + " n " + std::to_string(n) + " grad_scale " + fmt(gs));
          const auto pv = random_rounded(rng, n, -4, 2, dp);
          const auto tv = random_values(rng, n, -4, 2);
          Tensor pred = upload_values(*be, {static_cast<int64_t>(n)}, dp, pv);
          Tensor target = upload_values(*be, {static_cast<int64_t>(n)}, DType::f32, tv);
          Tensor loss = scalar_f32(*be, -1);
          Tensor dpred = be->empty({static_cast<int64_t>(n)}, dg);
          be->mse(pred, target, loss, dpred, scalar_f32(*be, gs));
          double sum = 0;
          for (size_t i = 0; i < n; ++i) sum += (double(pv[i]) - tv[i]) * (double(pv[i]) - tv[i]);
          const double ref = sum / static_cast<double>(n);
          ErrorBudget loss_budget;
          loss_budget.add(0, be->read_scalar_f32(loss), ref,
                          (gamma(static_cast<double>(n + 3)) + 1e-15) * ref);
          EXPECT_TRUE(loss_budget.ok()) << "loss: " << loss_budget.report();
          const auto got = download_values(*be, dpred);
          ErrorBudget budget;
          for (size_t i = 0; i < n; ++i) {
            const double r = 2.0 / static_cast<double>(n) * (double(pv[i]) - tv[i]) * gs;
            budget.add(i, got[i], r,
                       with_output_rounding(r, (gamma(4) + 1e-15) * std::fabs(r), dg));
          }
          EXPECT_TRUE(budget.ok()) << "dpred: " << budget.report();
        }
      }
    }
  }
}

// The loss is quadratic, so central differences are exact up to rounding (~1e-16 |L| / h).
TEST(Mse, GradientMatchesFiniteDifferences) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x3e5f);
  const size_t n = 7;
  const auto pv = random_values(rng, n, -2, 1);
  const auto tv = random_values(rng, n, -2, 1);
  Tensor dpred = be->empty({7}, DType::f32);
  Tensor loss = scalar_f32(*be, 0);
  be->mse(upload_values(*be, {7}, DType::f32, pv), upload_values(*be, {7}, DType::f32, tv), loss,
          dpred, scalar_f32(*be, 1.0f));
  const auto got = download_values(*be, dpred);
  auto l = [&](const std::vector<double>& p) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (p[i] - tv[i]) * (p[i] - tv[i]);
    return s / static_cast<double>(n);
  };
  std::vector<double> p(pv.begin(), pv.end());
  ErrorBudget budget;
  const double h = 1e-5;
  for (size_t k = 0; k < n; ++k) {
    const double p0 = p[k];
    p[k] = p0 + h;
    const double lp = l(p);
    p[k] = p0 - h;
    const double lm = l(p);
    p[k] = p0;
    const double fd = (lp - lm) / (2 * h);
    budget.add(k, got[k], fd, 1e-4 * std::fabs(fd) + 1e-9);
  }
  EXPECT_TRUE(budget.ok()) << budget.report();
}

// ============================================================================================
// layer norm
// ============================================================================================

struct LnInputs {
  int64_t rows, cols;
  std::vector<float> x, gamma, beta, dy;
};

LnInputs ln_inputs(std::mt19937_64& rng, int64_t rows, int64_t cols, DType dx, DType dg,
                   float offset) {
  LnInputs in{rows, cols, {}, {}, {}, {}};
  in.x = random_rounded(rng, static_cast<size_t>(rows * cols), -3, 1, dx);
  for (float& v : in.x) v = round_to(v + offset, dx);
  in.gamma = random_values(rng, static_cast<size_t>(cols), -3, 0);
  for (float& g : in.gamma) g += 1.0f;
  in.beta = random_values(rng, static_cast<size_t>(cols), -3, 0);
  in.dy = random_rounded(rng, static_cast<size_t>(rows * cols), -4, 1, dg);
  return in;
}

// Forward, per row (first order, times 1.01 for the second-order terms):
//   mean: C - 1 additions and a division: e_mu = gamma_C sum |x| / C + u |mean|.
//   S = sum d_j^2 over the float-centred d_j = x_j - mean_f: the error of the mean enters only
//   as C e_mu^2 (sum_j (x_j - mean) = 0), each term passes through C + 1 roundings:
//   e_S = C e_mu^2 + gamma_{C+3} (S + C e_mu^2); var + eps = S / C + eps rounds twice more;
//   rstd = 1 / sqrt(.) halves that relative error and adds 2u.
//   y_j = ((x_j - mean) rstd) gamma_j + beta_j: the centred value is off by e_mu + u |d|, then
//   three roundings of the products and the sum. Then the output rounding.
struct LnRowRef {
  double mean, rstd, e_mean, e_rstd;
};

LnRowRef ln_row_ref(const float* x, int64_t cols, float eps) {
  const double c = static_cast<double>(cols);
  double sum = 0, abs_sum = 0;
  for (int64_t j = 0; j < cols; ++j) {
    sum += x[j];
    abs_sum += std::fabs(x[j]);
  }
  LnRowRef r;
  r.mean = sum / c;
  double s = 0;
  for (int64_t j = 0; j < cols; ++j) s += (x[j] - r.mean) * (x[j] - r.mean);
  const double v = s / c + static_cast<double>(eps);
  r.rstd = 1.0 / std::sqrt(v);
  r.e_mean = gamma(c) * abs_sum / c + kU * std::fabs(r.mean) + 1e-15 * abs_sum;
  const double e_s = c * r.e_mean * r.e_mean + gamma(c + 3) * (s + c * r.e_mean * r.e_mean);
  const double e_v = e_s / c + kU * s / c + kU * v;
  r.e_rstd = 1.01 * (0.5 * e_v / v + 2 * kU) * r.rstd;
  return r;
}

TEST(LayerNorm, ForwardMatchesDoubleWithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1a7e);
  struct Dims {
    int64_t rows, cols;
  };
  const Dims dims[] = {{1, 1}, {5, 7}, {33, 64}, {3, 257}};
  const float eps = 1e-5f;
  for (DType dx : kFloatDTypes) {
    for (DType dy : kFloatDTypes) {
      for (const Dims& d : dims) {
        for (float offset : {0.0f, 8.0f}) {  // an offset mean: the two-pass variance matters
          SCOPED_TRACE(dtypes_str({dx, dy}) + " R " + std::to_string(d.rows) + " C " +
                       std::to_string(d.cols) + " offset " + fmt(offset));
          const LnInputs in = ln_inputs(rng, d.rows, d.cols, dx, dx, offset);
          Tensor x = upload_values(*be, {d.rows, d.cols}, dx, in.x);
          Tensor y = be->empty({d.rows, d.cols}, dy);
          Tensor mean = be->empty({d.rows}, DType::f32);
          Tensor rstd = be->empty({d.rows}, DType::f32);
          be->layer_norm_forward(x, upload_values(*be, {d.cols}, DType::f32, in.gamma),
                                 upload_values(*be, {d.cols}, DType::f32, in.beta), y, mean, rstd,
                                 eps);
          const auto yg = download_values(*be, y);
          const auto mg = download_values(*be, mean);
          const auto rg = download_values(*be, rstd);
          ErrorBudget bm, br, by;
          for (int64_t i = 0; i < d.rows; ++i) {
            const float* row = &in.x[i * d.cols];
            const LnRowRef r = ln_row_ref(row, d.cols, eps);
            bm.add(static_cast<size_t>(i), mg[i], r.mean, r.e_mean);
            br.add(static_cast<size_t>(i), rg[i], r.rstd, r.e_rstd);
            for (int64_t j = 0; j < d.cols; ++j) {
              const double dd = row[j] - r.mean;
              const double xhat = dd * r.rstd;
              const double ref = xhat * in.gamma[j] + in.beta[j];
              const double e_d = r.e_mean + kU * (std::fabs(dd) + r.e_mean);
              const double e_xhat = e_d * r.rstd + std::fabs(dd) * r.e_rstd + kU * std::fabs(xhat);
              const double e_y = 1.01 * (std::fabs(in.gamma[j]) * e_xhat +
                                         kU * std::fabs(xhat * in.gamma[j]) + kU * std::fabs(ref));
              by.add(static_cast<size_t>(i * d.cols + j), yg[i * d.cols + j], ref,
                     with_output_rounding(ref, e_y, dy));
            }
          }
          EXPECT_TRUE(bm.ok()) << "mean: " << bm.report();
          EXPECT_TRUE(br.ok()) << "rstd: " << br.report();
          EXPECT_TRUE(by.ok()) << "y: " << by.report();
        }
      }
    }
  }
}

// The double forward for finite differences: L = sum dy * layer_norm(x; gamma, beta).
double ln_objective(const std::vector<double>& x, const std::vector<double>& g,
                    const std::vector<double>& b, const std::vector<float>& dy, int64_t rows,
                    int64_t cols, double eps) {
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x[i * cols + j];
    mean /= static_cast<double>(cols);
    double var = 0;
    for (int64_t j = 0; j < cols; ++j) var += (x[i * cols + j] - mean) * (x[i * cols + j] - mean);
    var /= static_cast<double>(cols);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      total += dy[i * cols + j] * ((x[i * cols + j] - mean) * rstd * g[j] + b[j]);
    }
  }
  return total;
}

double central_difference(std::vector<double>& v, size_t k, double h,
                          const std::function<double()>& f) {
  const double v0 = v[k];
  v[k] = v0 + h;
  const double fp = f();
  v[k] = v0 - h;
  const double fm = f();
  v[k] = v0;
  return (fp - fm) / (2 * h);
}

// dx, dgamma and dbeta are the derivatives of the double forward (f32 inputs, small C). Central
// differences with h = 1e-5 are accurate to ~1e-9 here (|x| < 2, rstd < 10); the tolerance is
// 1e-4 relative to the magnitude of the terms each gradient sums (dx_j: rstd (|dy_j g_j| +
// mean |dy g| + |xhat_j| mean |dy g xhat|), which the float formula cancels; dgamma:
// sum |dy xhat|; dbeta: sum |dy|).
TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1a7f);
  const int64_t rows = 3, cols = 5;
  const float eps = 1e-5f;
  const LnInputs in = ln_inputs(rng, rows, cols, DType::f32, DType::f32, 0.0f);
  Tensor x = upload_values(*be, {rows, cols}, DType::f32, in.x);
  Tensor gamma_t = upload_values(*be, {cols}, DType::f32, in.gamma);
  Tensor mean = be->empty({rows}, DType::f32);
  Tensor rstd = be->empty({rows}, DType::f32);
  Tensor y = be->empty({rows, cols}, DType::f32);
  be->layer_norm_forward(x, gamma_t, upload_values(*be, {cols}, DType::f32, in.beta), y, mean, rstd,
                         eps);
  Tensor dx = be->empty({rows, cols}, DType::f32);
  Tensor dgamma = be->zeros({cols}, DType::f32);
  Tensor dbeta = be->zeros({cols}, DType::f32);
  be->layer_norm_backward(x, gamma_t, mean, rstd,
                          upload_values(*be, {rows, cols}, DType::f32, in.dy), dx, dgamma, dbeta);
  const auto dxg = download_values(*be, dx);
  const auto dgg = download_values(*be, dgamma);
  const auto dbg = download_values(*be, dbeta);

  std::vector<double> xv(in.x.begin(), in.x.end()), gv(in.gamma.begin(), in.gamma.end()),
      bv(in.beta.begin(), in.beta.end());
  auto f = [&] { return ln_objective(xv, gv, bv, in.dy, rows, cols, eps); };
  const double h = 1e-5;
  std::vector<double> xhat(xv.size()), rstd_ref(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const LnRowRef r = ln_row_ref(&in.x[i * cols], cols, eps);
    rstd_ref[i] = r.rstd;
    for (int64_t j = 0; j < cols; ++j) xhat[i * cols + j] = (xv[i * cols + j] - r.mean) * r.rstd;
  }
  ErrorBudget bx, bg, bb;
  for (int64_t i = 0; i < rows; ++i) {
    double m_dyg = 0, m_dygx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      m_dyg += std::fabs(in.dy[i * cols + j] * gv[j]) / cols;
      m_dygx += std::fabs(in.dy[i * cols + j] * gv[j] * xhat[i * cols + j]) / cols;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      const double fd = central_difference(xv, k, h, f);
      const double scale =
          rstd_ref[i] * (std::fabs(in.dy[k] * gv[j]) + m_dyg + std::fabs(xhat[k]) * m_dygx);
      bx.add(k, dxg[k], fd, 1e-4 * scale);
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    double s_dyx = 0, s_dy = 0;
    for (int64_t i = 0; i < rows; ++i) {
      s_dyx += std::fabs(in.dy[i * cols + j] * xhat[i * cols + j]);
      s_dy += std::fabs(in.dy[i * cols + j]);
    }
    bg.add(static_cast<size_t>(j), dgg[j], central_difference(gv, j, h, f), 1e-4 * s_dyx);
    bb.add(static_cast<size_t>(j), dbg[j], central_difference(bv, j, h, f), 1e-4 * s_dy);
  }
  EXPECT_TRUE(bx.ok()) << "dx: " << bx.report();
  EXPECT_TRUE(bg.ok()) << "dgamma: " << bg.report();
  EXPECT_TRUE(bb.ok()) << "dbeta: " << bb.report();
}

// dx over mixed dtypes against PyTorch's formula evaluated in double on the same inputs (x, dy,
// gamma and the op's own mean and rstd), with the float error of that formula, first order:
//   ds, db: gamma_{C+1} sum |dy g x|, gamma_C sum |dy g|;
//   b = (db mean - ds) a^3 / C: e_b = (|mean| e_db + e_ds + u (|db mean| + |db mean - ds|)) a^3/C
//       + 6u |b|;
//   c = -b mean - db a / C: e_c = |mean| e_b + u |b mean| + e_db a / C + 3u |db a / C| + u |c|;
//   dx = a dy g + b x + c: 3u |a dy g| + |x| e_b + u |b x| + e_c + u (|a dy g| + |b x| + |dx|);
// times 1.01 for the second-order terms, then the output rounding.
TEST(LayerNorm, BackwardDxMatchesFormulaInDoubleAcrossDTypes) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1a80);
  struct Combo {
    DType x, dy, dx;
  };
  const Combo combos[] = {{DType::f32, DType::f32, DType::f32},
                          {DType::f16, DType::f16, DType::f16},
                          {DType::bf16, DType::bf16, DType::bf16},
                          {DType::f16, DType::f32, DType::f16},
                          {DType::bf16, DType::f16, DType::f32}};
  struct Dims {
    int64_t rows, cols;
  };
  const Dims dims[] = {{1, 1}, {4, 7}, {33, 64}, {5, 257}};
  for (const Combo& c : combos) {
    for (const Dims& d : dims) {
      SCOPED_TRACE(dtypes_str({c.x, c.dy, c.dx}) + " R " + std::to_string(d.rows) + " C " +
                   std::to_string(d.cols));
      const LnInputs in = ln_inputs(rng, d.rows, d.cols, c.x, c.dy, 0.0f);
      Tensor x = upload_values(*be, {d.rows, d.cols}, c.x, in.x);
      Tensor gamma_t = upload_values(*be, {d.cols}, DType::f32, in.gamma);
      Tensor mean = be->empty({d.rows}, DType::f32);
      Tensor rstd = be->empty({d.rows}, DType::f32);
      Tensor y = be->empty({d.rows, d.cols}, c.x);
      be->layer_norm_forward(x, gamma_t, upload_values(*be, {d.cols}, DType::f32, in.beta), y, mean,
                             rstd, 1e-5f);
      Tensor dx = be->empty({d.rows, d.cols}, c.dx);
      be->layer_norm_backward(x, gamma_t, mean, rstd,
                              upload_values(*be, {d.rows, d.cols}, c.dy, in.dy), dx, Tensor{},
                              Tensor{});
      const auto got = download_values(*be, dx);
      const auto mv = download_values(*be, mean);
      const auto rv = download_values(*be, rstd);
      const double n = static_cast<double>(d.cols);
      ErrorBudget budget;
      for (int64_t i = 0; i < d.rows; ++i) {
        const double a = rv[i], mu = mv[i];
        double ds = 0, db = 0, a_ds = 0, a_db = 0;
        for (int64_t j = 0; j < d.cols; ++j) {
          const double dyg = static_cast<double>(in.dy[i * d.cols + j]) * in.gamma[j];
          ds += dyg * in.x[i * d.cols + j];
          db += dyg;
          a_ds += std::fabs(dyg * in.x[i * d.cols + j]);
          a_db += std::fabs(dyg);
        }
        const double b = (db * mu - ds) * a * a * a / n;
        const double cc = -b * mu - db * a / n;
        const double e_ds = gamma(n + 1) * a_ds, e_db = gamma(n) * a_db;
        const double e_b =
            (std::fabs(mu) * e_db + e_ds + kU * (std::fabs(db * mu) + std::fabs(db * mu - ds))) *
                a * a * a / n +
            6 * kU * std::fabs(b);
        const double e_c = std::fabs(mu) * e_b + kU * std::fabs(b * mu) + e_db * a / n +
                           3 * kU * std::fabs(db * a / n) + kU * std::fabs(cc);
        for (int64_t j = 0; j < d.cols; ++j) {
          const size_t k = static_cast<size_t>(i * d.cols + j);
          const double adyg = a * in.dy[k] * in.gamma[j];
          const double bx = b * in.x[k];
          const double ref = adyg + bx + cc;
          const double err =
              1.01 * (3 * kU * std::fabs(adyg) + std::fabs(in.x[k]) * e_b + kU * std::fabs(bx) +
                      e_c + kU * (std::fabs(adyg) + std::fabs(bx) + std::fabs(ref)));
          budget.add(k, got[k], ref, with_output_rounding(ref, err, c.dx));
        }
      }
      EXPECT_TRUE(budget.ok()) << budget.report();
    }
  }
}

// dgamma and dbeta are accumulated: a second call into existing gradients G0, B0 gives
// fl(G0 + P) where P is what the call gives into zeros (autograd adds a fresh gradient once).
TEST(LayerNorm, BackwardAccumulatesIntoExistingGradients) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1a81);
  const int64_t rows = 9, cols = 13;
  const LnInputs in = ln_inputs(rng, rows, cols, DType::f16, DType::f16, 0.0f);
  Tensor x = upload_values(*be, {rows, cols}, DType::f16, in.x);
  Tensor dy = upload_values(*be, {rows, cols}, DType::f16, in.dy);
  Tensor gamma_t = upload_values(*be, {cols}, DType::f32, in.gamma);
  Tensor mean = be->empty({rows}, DType::f32);
  Tensor rstd = be->empty({rows}, DType::f32);
  Tensor y = be->empty({rows, cols}, DType::f16);
  be->layer_norm_forward(x, gamma_t, upload_values(*be, {cols}, DType::f32, in.beta), y, mean, rstd,
                         1e-5f);
  Tensor dx0 = be->empty({rows, cols}, DType::f16);
  Tensor g0 = be->zeros({cols}, DType::f32);
  Tensor b0 = be->zeros({cols}, DType::f32);
  be->layer_norm_backward(x, gamma_t, mean, rstd, dy, dx0, g0, b0);
  const auto pg = download_values(*be, g0);
  const auto pb = download_values(*be, b0);

  const auto gstart = random_values(rng, static_cast<size_t>(cols), -3, 3);
  const auto bstart = random_values(rng, static_cast<size_t>(cols), -3, 3);
  Tensor g1 = upload_values(*be, {cols}, DType::f32, gstart);
  Tensor b1 = upload_values(*be, {cols}, DType::f32, bstart);
  Tensor dx1 = be->empty({rows, cols}, DType::f16);
  be->layer_norm_backward(x, gamma_t, mean, rstd, dy, dx1, g1, b1);
  std::vector<uint32_t> eg(cols), eb(cols);
  for (int64_t j = 0; j < cols; ++j) {
    eg[j] = float_bits(gstart[j] + pg[j]);
    eb[j] = float_bits(bstart[j] + pb[j]);
  }
  BitwiseCheck cg(DType::f32), cb(DType::f32), cx(DType::f16);
  cg.add_all(download_bits(*be, g1), eg);
  cb.add_all(download_bits(*be, b1), eb);
  cx.add_all(download_bits(*be, dx1), download_bits(*be, dx0));
  EXPECT_TRUE(cg.ok()) << "dgamma: " << cg.report();
  EXPECT_TRUE(cb.ok()) << "dbeta: " << cb.report();
  EXPECT_TRUE(cx.ok()) << "dx must not depend on the existing gradients: " << cx.report();
}

// ============================================================================================
// clip_coef
// ============================================================================================

// coef = min(max_norm / (norm + 1e-6), 1) with float roundings: 1e-6 to float (relative u of a
// term <= the divisor), the sum, the reciprocal and the product (PyTorch evaluates
// `max_norm / tensor` as tensor.reciprocal() * max_norm): err <= 4u |ref|, doubled.
TEST(ClipCoef, MatchesDoubleAndClampsAtOne) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xc11f);
  Tensor coef = scalar_f32(*be, -1);
  ErrorBudget budget;
  for (int i = 0; i < 2000; ++i) {
    const float norm = std::fabs(random_value(rng, -30, 30));
    const float max_norm = std::fabs(random_value(rng, -4, 4));
    be->clip_coef(scalar_f32(*be, norm), max_norm, coef);
    const double q = static_cast<double>(max_norm) / (static_cast<double>(norm) + 1e-6);
    const float got = be->read_scalar_f32(coef);
    if (q > 1.0 + 1e-6) {
      EXPECT_EQ(got, 1.0f) << "norm " << norm << ", max_norm " << max_norm;
    } else {
      budget.add(static_cast<size_t>(i), got, std::min(q, 1.0), 8 * kU * q);
      EXPECT_LE(got, 1.0f);
    }
  }
  EXPECT_TRUE(budget.ok()) << budget.report();
}

TEST(ClipCoef, SpecialNorms) {
  auto be = cpu_backend();
  Tensor coef = scalar_f32(*be, -1);
  auto run = [&](float norm, float max_norm) {
    be->clip_coef(scalar_f32(*be, norm), max_norm, coef);
    return be->read_scalar_f32(coef);
  };
  EXPECT_EQ(run(0.0f, 1.0f), 1.0f) << "norm 0: 1 / 1e-6 clamps to 1";
  EXPECT_EQ(run(0.5f, 1.0f), 1.0f) << "norm below max_norm";
  EXPECT_LT(run(1.0f, 1.0f), 1.0f) << "norm == max_norm: the 1e-6 makes it just below 1";
  EXPECT_NEAR(run(1e30f, 1.0f), 1e-30, 1e-36) << "huge norm";
  EXPECT_EQ(run(kInf, 1.0f), 0.0f) << "inf norm";
  EXPECT_TRUE(std::isnan(run(kNaN, 1.0f))) << "NaN norm gives NaN, as torch.clamp keeps NaN";
}

// Pins the evaluation order PyTorch uses: (norm + float(1e-6)).reciprocal() * max_norm, two
// float roundings (Tensor.__rtruediv__), not one division.
TEST(ClipCoef, IsPyTorchsReciprocalThenMultiplyBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xc120);
  Tensor coef = scalar_f32(*be, -1);
  size_t mismatches = 0;
  std::string first;
  for (int i = 0; i < 2000; ++i) {
    const float norm = std::fabs(random_value(rng, 0, 20));
    const float max_norm = std::fabs(random_value(rng, -2, 2));
    be->clip_coef(scalar_f32(*be, norm), max_norm, coef);
    const float recip = 1.0f / (norm + static_cast<float>(1e-6));
    const float q = recip * max_norm;
    const float expected = q > 1.0f ? 1.0f : q;
    const float got = be->read_scalar_f32(coef);
    if (float_bits(got) != float_bits(expected) && mismatches++ == 0) {
      first = "norm " + fmt(norm) + ", max_norm " + fmt(max_norm) + ": got " + fmt(got) +
              ", expected " + fmt(expected);
    }
  }
  EXPECT_EQ(mismatches, 0u) << first;
}

// ============================================================================================
// steady state
// ============================================================================================

// A training step calls the same ops with the same shapes every time: after one warm-up call
// (the workspaces grow), no op allocates.
TEST(NnOps, SteadyStateDoesNotAllocate) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xa110c);
  const int64_t rows = 16, in = 24, out = 10;
  Tensor x = upload_values(*be, {rows, in}, DType::f16, random_values(rng, rows * in, -3, 1));
  Tensor w = upload_values(*be, {out, in}, DType::f16, random_values(rng, out * in, -3, 1));
  Tensor b = upload_values(*be, {out}, DType::f16, random_values(rng, out, -3, 1));
  Tensor y = be->empty({rows, out}, DType::f16);
  Tensor db = be->empty({out}, DType::f32);
  Tensor h = be->empty({rows, in}, DType::f16);
  Tensor dh = be->empty({rows, in}, DType::f16);
  Tensor gamma_t = be->empty({in}, DType::f32);
  be->fill(gamma_t, 1.0);
  Tensor beta_t = be->zeros({in}, DType::f32);
  Tensor dgamma = be->zeros({in}, DType::f32);
  Tensor dbeta = be->zeros({in}, DType::f32);
  Tensor mean = be->empty({rows}, DType::f32);
  Tensor rstd = be->empty({rows}, DType::f32);
  std::vector<int32_t> lab(rows);
  for (int64_t i = 0; i < rows; ++i) lab[i] = static_cast<int32_t>(i % out);
  Tensor labels = upload_i32(*be, {rows}, lab);
  Tensor loss = scalar_f32(*be, 0), correct = scalar_i32(*be, 0), gs = scalar_f32(*be, 1024);
  Tensor dy = be->empty({rows, out}, DType::f16);
  Tensor target = be->zeros({rows, out}, DType::f32);
  Tensor norm = scalar_f32(*be, 3), coef = scalar_f32(*be, 0);
  OptimizerStepArgs adam;
  adam.params = upload_values(*be, {out * in}, DType::f32, random_values(rng, out * in, -3, 1));
  adam.grads = upload_values(*be, {out * in}, DType::f32, random_values(rng, out * in, -3, 1));
  adam.exp_avg = be->zeros({out * in}, DType::f32);
  adam.exp_avg_sq = be->zeros({out * in}, DType::f32);
  adam.step = scalar_i32(*be, 0);
  adam.found_inf = scalar_f32(*be, 0);
  adam.inv_scale = scalar_f32(*be, 1.0f / 1024);
  adam.lowp_params = be->empty({out * in}, DType::f16);
  adam.hyper = optim::AdamHyper{};
  auto step = [&] {
    be->layer_norm_forward(x, gamma_t, beta_t, h, mean, rstd, 1e-5f);
    be->activation_forward(nn::ActivationKind::gelu, h, h);
    be->dropout_forward(h, h, 0.1f, 1, 2);
    be->linear_forward(h, w, b, y);
    be->softmax_cross_entropy(y, labels, loss, correct, dy, gs);
    be->mse(y, target, loss, dy, gs);
    be->sum_rows(dy, db);
    be->dropout_backward(dh, dh, 0.1f, 1, 2);
    be->activation_backward(nn::ActivationKind::gelu, x, h, dh, dh);
    be->activation_backward(nn::ActivationKind::relu, Tensor{}, h, dh, dh);
    be->layer_norm_backward(x, gamma_t, mean, rstd, dh, dh, dgamma, dbeta);
    be->clip_coef(norm, 1.0f, coef);
    be->optimizer_step(adam);
  };
  step();  // warm-up: the workspaces grow here
  const size_t before = g_allocations.load();
  step();
  step();
  const size_t allocations = g_allocations.load() - before;
  EXPECT_EQ(allocations, 0u) << "operator new calls in two steady-state steps";
}

}  // namespace
}  // namespace ampctl::test
