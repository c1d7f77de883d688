// Backend::gemm against a double-precision reference computed from the already-rounded inputs.
//
// Tolerance (the random-input test), for one output element with W = |alpha| * sum_l |a_l||b_l|
// + |beta| * |c0| and exact = alpha * sum_l a_l b_l + beta * c0 (a, b, c0 the low-precision
// values widened exactly):
//   * float32 arithmetic: any evaluation order in which every term passes through at most k + 2
//     roundings (the product, up to k additions of the k + 1 summands a_l b_l and beta*c0, and one
//     multiplication by alpha or beta) has |y - exact| <= gamma_{k+2} * W, gamma_n = n u / (1 - n
//     u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1).
//     This covers blocked BLAS kernels, FMA and alpha applied before or after the sum.
//   * rounding y to the output dtype: |round(y) - y| <= u_out |y| + eta_out, u_out = 2^-11 (f16),
//     2^-8 (bf16), 2^-24 (f32); eta_out = half the smallest subnormal (2^-25, 2^-134, 2^-150)
//     covers results in the subnormal range; |y| <= |exact| + gamma_{k+2} W.
//   * the reference itself (double, products of floats exact, k additions, alpha, beta):
//     |ref - exact| <= gamma_{k+3}(2^-53) * W.
//   bound = gamma_{k+2} W + u_out (|ref| + gamma_{k+2} W + ref_err) + eta_out + 2 ref_err.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

double gamma(double n, double u) {
  return n * u / (1.0 - n * u);
}

double unit_roundoff(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, -24);
  }
}

double half_min_subnormal(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -25);
    case DType::bf16:
      return std::ldexp(1.0, -134);
    default:
      return std::ldexp(1.0, -150);
  }
}

struct GemmShape {
  int64_t m, n, k;
};

std::string shape_name(const GemmShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// Storage shapes of A and B for op(A) = m x k, op(B) = k x n.
Shape a_shape(const GemmShape& s, bool trans_a) {
  return trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
}
Shape b_shape(const GemmShape& s, bool trans_b) {
  return trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
}

// op(A)[i][l] and op(B)[l][j] from row-major storage.
double a_at(const std::vector<float>& a, const GemmShape& s, bool trans_a, int64_t i, int64_t l) {
  return trans_a ? a[static_cast<size_t>(l * s.m + i)] : a[static_cast<size_t>(i * s.k + l)];
}
double b_at(const std::vector<float>& b, const GemmShape& s, bool trans_b, int64_t l, int64_t j) {
  return trans_b ? b[static_cast<size_t>(j * s.k + l)] : b[static_cast<size_t>(l * s.n + j)];
}

struct Reference {
  std::vector<double> value;   // alpha * sum a b + beta * c0, in double
  std::vector<double> weight;  // |alpha| * sum |a||b| + |beta| * |c0|
};

Reference reference_gemm(const std::vector<float>& a, bool trans_a, const std::vector<float>& b,
                         bool trans_b, const std::vector<float>& c0, const GemmShape& s,
                         double alpha, double beta) {
  Reference r;
  r.value.resize(static_cast<size_t>(s.m * s.n));
  r.weight.resize(r.value.size());
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t l = 0; l < s.k; ++l) {
        const double p = a_at(a, s, trans_a, i, l) * b_at(b, s, trans_b, l, j);
        sum += p;
        abs_sum += std::fabs(p);
      }
      const size_t idx = static_cast<size_t>(i * s.n + j);
      const double c = beta != 0.0 ? static_cast<double>(c0[idx]) : 0.0;
      r.value[idx] = alpha * sum + beta * c;
      r.weight[idx] = std::fabs(alpha) * abs_sum + std::fabs(beta) * std::fabs(c);
    }
  }
  return r;
}

// The values of a random tensor of dtype d, already rounded to d (what the backend will see).
std::vector<float> random_rounded(std::mt19937_64& rng, size_t n, DType d) {
  std::vector<float> v = random_values(rng, n, -3, 1);  // |x| < 2: f16 outputs stay finite
  for (float& x : v) x = round_to(x, d);
  return v;
}

using DTypeTriple = std::tuple<DType, DType, DType>;

class GemmDTypes : public ::testing::TestWithParam<DTypeTriple> {};

TEST_P(GemmDTypes, MatchesFp64ReferenceWithinDerivedBound) {
  const auto [da, db, dc] = GetParam();
  auto be = cpu_backend();
  std::mt19937_64 rng(0x6e5d + 97 * static_cast<int>(da) + 13 * static_cast<int>(db) +
                      static_cast<int>(dc));
  // 33 x 70 x 600: k spans two blocks of every packed kernel (f32 256, bf16 and AMX 512) and
  // m, n end inside the micro-tiles (12 x 32, AMX 32 x 32).
  const GemmShape shapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 128, 96}, {33, 70, 600}};
  // (alpha, beta): plain, alpha != 1, alpha and beta both non-trivial, accumulate (beta = 1).
  const std::pair<float, float> scalars[] = {
      {1.0f, 0.0f}, {-1.5f, 0.0f}, {0.7f, -1.25f}, {1.0f, 1.0f}};
  const double u_out = unit_roundoff(dc);
  const double eta_out = half_min_subnormal(dc);

  for (const GemmShape& s : shapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (const auto& [alpha, beta] : scalars) {
          const std::string ctx = "A " + std::string(dtype_name(da)) + (ta ? "^T" : "") + " B " +
                                  dtype_name(db) + (tb ? "^T" : "") + " -> C " + dtype_name(dc) +
                                  ", m x n x k = " + shape_name(s) + ", alpha " + fmt(alpha) +
                                  ", beta " + fmt(beta);
          SCOPED_TRACE(ctx);
          const std::vector<float> av = random_rounded(rng, static_cast<size_t>(s.m * s.k), da);
          const std::vector<float> bv = random_rounded(rng, static_cast<size_t>(s.k * s.n), db);
          const std::vector<float> cv = random_rounded(rng, static_cast<size_t>(s.m * s.n), dc);
          Tensor a = upload_values(*be, a_shape(s, ta), da, av);
          Tensor b = upload_values(*be, b_shape(s, tb), db, bv);
          Tensor c = upload_values(*be, {s.m, s.n}, dc, cv);
          be->gemm(a, ta, b, tb, c, alpha, beta);
          const std::vector<float> got = download_values(*be, c);
          const Reference ref = reference_gemm(av, ta, bv, tb, cv, s, alpha, beta);

          const double g = gamma(static_cast<double>(s.k + 2), std::ldexp(1.0, -24));
          const double g_ref = gamma(static_cast<double>(s.k + 3), std::ldexp(1.0, -53));
          ErrorBudget budget;
          for (size_t i = 0; i < got.size(); ++i) {
            const double w = ref.weight[i];
            const double ref_err = g_ref * w;
            const double bound =
                g * w + u_out * (std::fabs(ref.value[i]) + g * w + ref_err) + eta_out + 2 * ref_err;
            budget.add(i, got[i], ref.value[i], bound);
          }
          EXPECT_TRUE(budget.ok()) << budget.report();
        }
      }
    }
  }
}

std::string triple_name(const ::testing::TestParamInfo<DTypeTriple>& info) {
  return std::string("a_") + dtype_name(std::get<0>(info.param)) + "_b_" +
         dtype_name(std::get<1>(info.param)) + "_c_" + dtype_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, GemmDTypes,
                         ::testing::Combine(::testing::ValuesIn(kFloatDTypes),
                                            ::testing::ValuesIn(kFloatDTypes),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         triple_name);

// Integers in [-R, R] with k <= 64: every product (<= R^2) and every partial sum (<= 64 R^2 =
// 2^18 for R = 64) is an integer below 2^24, so float32 accumulation is exact in any order;
// alpha = 0.5 and beta = 2 are powers of two, so alpha * sum + beta * c is exact in float too.
// The only rounding left is the one to C's dtype, which must be round-to-nearest-even of the exact
// value: bitwise equal to half.h's conversion. With R = 64 sums exceed 2048, so f16 outputs hit
// ties (odd integers in [2048, 4096)) and bf16 outputs round above 256.
TEST(Gemm, SmallIntegersAreExactThenRoundedOnceToOutput) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1a7e);
  const GemmShape shapes[] = {{1, 1, 1}, {5, 7, 64}, {33, 17, 63}};
  const std::pair<float, float> scalars[] = {{1.0f, 0.0f}, {0.5f, 2.0f}};
  for (int range : {8, 64}) {
    std::uniform_int_distribution<int> dist(-range, range);
    auto ints = [&](size_t n) {
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(dist(rng));
      return v;
    };
    for (DType da : kFloatDTypes) {
      for (DType db : kFloatDTypes) {
        for (DType dc : kFloatDTypes) {
          for (const GemmShape& s : shapes) {
            for (bool ta : {false, true}) {
              for (bool tb : {false, true}) {
                for (const auto& [alpha, beta] : scalars) {
                  SCOPED_TRACE("ints in [-" + std::to_string(range) + ", " + std::to_string(range) +
                               "], A " + dtype_name(da) + (ta ? "^T" : "") + " B " +
                               dtype_name(db) + (tb ? "^T" : "") + " -> C " + dtype_name(dc) +
                               ", " + shape_name(s) + ", alpha " + fmt(alpha) + ", beta " +
                               fmt(beta));
                  const std::vector<float> av = ints(static_cast<size_t>(s.m * s.k));
                  const std::vector<float> bv = ints(static_cast<size_t>(s.k * s.n));
                  const std::vector<float> cv = ints(static_cast<size_t>(s.m * s.n));
                  Tensor a = upload_values(*be, a_shape(s, ta), da, av);
                  Tensor b = upload_values(*be, b_shape(s, tb), db, bv);
                  Tensor c = upload_values(*be, {s.m, s.n}, dc, cv);
                  be->gemm(a, ta, b, tb, c, alpha, beta);
                  const Reference ref = reference_gemm(av, ta, bv, tb, cv, s, alpha, beta);
                  std::vector<uint32_t> expected(ref.value.size());
                  for (size_t i = 0; i < expected.size(); ++i) {
                    const float exact = static_cast<float>(ref.value[i]);
                    ASSERT_EQ(static_cast<double>(exact), ref.value[i]) << "not exact in float";
                    expected[i] = encode(exact, dc);
                  }
                  BitwiseCheck check(dc);
                  check.add_all(download_bits(*be, c), expected);
                  EXPECT_TRUE(check.ok()) << check.report();
                }
              }
            }
          }
        }
      }
    }
  }
}

// 256 * 256 = 65536 is above f16's largest finite value (65504; anything >= 65520 rounds to inf).
// Accumulating in float32 and rounding once means: a sum of two such products is inf in an f16
// output but exact (131072) in f32 and bf16 outputs, and products that would overflow f16 on
// their own but cancel (256*256 - 256*255 = 256) give a finite f16 result.
TEST(Gemm, Fp16OutputOverflowsToInfButFp32AccumulationDoesNot) {
  auto be = cpu_backend();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<float> a, b;
    float expected_f16, expected_wide;
  };
  const Case cases[] = {
      {{256, 256}, {256, 256}, inf, 131072.0f},
      {{-256, -256}, {256, 256}, -inf, -131072.0f},
      {{256, 256}, {256, -255}, 256.0f, 256.0f},
  };
  for (DType din : kFloatDTypes) {
    for (const Case& cs : cases) {
      Tensor a = upload_values(*be, {1, 2}, din, cs.a);
      Tensor b = upload_values(*be, {2, 1}, din, cs.b);
      for (DType dc : kFloatDTypes) {
        SCOPED_TRACE(std::string("inputs ") + dtype_name(din) + ", output " + dtype_name(dc) +
                     ", a = [" + fmt(cs.a[0]) + ", " + fmt(cs.a[1]) + "], b = [" + fmt(cs.b[0]) +
                     ", " + fmt(cs.b[1]) + "]");
        Tensor c = be->zeros({1, 1}, dc);
        be->gemm(a, false, b, false, c);
        const float got = download_values(*be, c)[0];
        const float expected = dc == DType::f16 ? cs.expected_f16 : cs.expected_wide;
        EXPECT_EQ(float_bits(got), float_bits(expected))
            << "got " << fmt(got) << ", expected " << fmt(expected);
      }
    }
  }
}

// With beta == 0 the contract reads C only when beta != 0 (BLAS convention), so NaN or inf in C
// must not leak into the result.
TEST(Gemm, BetaZeroNeverReadsC) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xbe7a);
  const GemmShape s{7, 9, 11};
  for (DType dc : kFloatDTypes) {
    SCOPED_TRACE(std::string("C ") + dtype_name(dc));
    const std::vector<float> av = random_rounded(rng, static_cast<size_t>(s.m * s.k), DType::f16);
    const std::vector<float> bv = random_rounded(rng, static_cast<size_t>(s.k * s.n), DType::f16);
    std::vector<float> cv(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < cv.size(); ++i) {
      cv[i] =
          i % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    }
    Tensor a = upload_values(*be, {s.m, s.k}, DType::f16, av);
    Tensor b = upload_values(*be, {s.k, s.n}, DType::f16, bv);
    Tensor c = upload_values(*be, {s.m, s.n}, dc, cv);
    be->gemm(a, false, b, false, c, 1.0f, 0.0f);
    const std::vector<float> got = download_values(*be, c);
    const Reference ref = reference_gemm(av, false, bv, false, cv, s, 1.0, 0.0);
    const double g = gamma(static_cast<double>(s.k + 2), std::ldexp(1.0, -24));
    ErrorBudget budget;
    for (size_t i = 0; i < got.size(); ++i) {
      const double w = ref.weight[i];
      budget.add(i, got[i], ref.value[i],
                 g * w + unit_roundoff(dc) * (std::fabs(ref.value[i]) + g * w) +
                     half_min_subnormal(dc) + 1e-15 * w);
    }
    EXPECT_TRUE(budget.ok()) << budget.report();
  }
}

// k == 0: op(A) @ op(B) is the zero matrix, so C := beta * C (beta * c in float, 0 + that is
// exact, then one rounding), and with beta == 0 C becomes zero whatever it held. Empty C (m or
// n == 0) is a no-op, not an error.
TEST(Gemm, EmptyInnerDimensionGivesBetaTimesC) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x0e0e);
  for (DType dc : kFloatDTypes) {
    for (float beta : {0.0f, 1.0f, -0.3f}) {
      SCOPED_TRACE(std::string("C ") + dtype_name(dc) + ", beta " + fmt(beta));
      const std::vector<float> cv = random_rounded(rng, 6 * 5, dc);
      Tensor a = be->empty({6, 0}, DType::f16);
      Tensor b = be->empty({0, 5}, DType::bf16);
      Tensor c = upload_values(*be, {6, 5}, dc, cv);
      be->gemm(a, false, b, false, c, 1.5f, beta);
      std::vector<uint32_t> expected(cv.size());
      for (size_t i = 0; i < cv.size(); ++i) {
        expected[i] = encode(beta == 0.0f ? 0.0f : beta * cv[i], dc);
      }
      BitwiseCheck check(dc);
      check.add_all(download_bits(*be, c), expected);
      EXPECT_TRUE(check.ok()) << check.report();
    }
    Tensor c0 = be->empty({0, 5}, dc);
    EXPECT_NO_THROW(be->gemm(be->empty({0, 3}, DType::f32), false, be->empty({3, 5}, DType::f32),
                             false, c0, 1.0f, 1.0f));
  }
}

TEST(Gemm, ShapeAndDTypeMismatchesThrowInvalidArgument) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x5a9e);
  auto make = [&](const Shape& shape, DType d) {
    return upload_values(*be, shape, d,
                         random_values(rng, static_cast<size_t>(shape_numel(shape)), -2, 0));
  };
  Tensor a34 = make({3, 4}, DType::f16);
  Tensor b46 = make({4, 6}, DType::f16);
  Tensor b56 = make({5, 6}, DType::f16);
  Tensor b64 = make({6, 4}, DType::f16);
  Tensor c36 = make({3, 6}, DType::f32);
  Tensor c37 = make({3, 7}, DType::f32);
  Tensor c26 = make({2, 6}, DType::f32);
  Tensor c18 = make({18}, DType::f32);
  Tensor a12 = make({12}, DType::f16);
  Tensor ai = be->zeros({3, 4}, DType::i32);
  Tensor ci = be->zeros({3, 6}, DType::i32);

  // The valid call first, so the throwing cases below cannot pass for an unrelated reason.
  EXPECT_NO_THROW(be->gemm(a34, false, b46, false, c36));
  EXPECT_NO_THROW(be->gemm(a34, false, b64, true, c36));
  expect_invalid_argument([&] { be->gemm(a34, false, b56, false, c36); }, "inner 4 vs 5");
  expect_invalid_argument([&] { be->gemm(a34, true, b46, false, c36); }, "A^T is 4x3, B 4x6");
  expect_invalid_argument([&] { be->gemm(a34, false, b46, true, c36); }, "B^T is 6x4");
  expect_invalid_argument([&] { be->gemm(a34, false, b46, false, c37); }, "C has 7 columns");
  expect_invalid_argument([&] { be->gemm(a34, false, b46, false, c26); }, "C has 2 rows");
  expect_invalid_argument([&] { be->gemm(a34, false, b46, false, c18); }, "C is rank 1");
  expect_invalid_argument([&] { be->gemm(a12, false, b46, false, c36); }, "A is rank 1");
  expect_invalid_argument([&] { be->gemm(ai, false, b46, false, c36); }, "A is i32");
  expect_invalid_argument([&] { be->gemm(a34, false, b46, false, ci); }, "C is i32");
}

}  // namespace
}  // namespace ampctl::test
