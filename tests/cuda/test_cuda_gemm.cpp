// The CUDA backend's gemm against a double-precision reference, with the bound derived at
// GemmBound below, and the determinism of repeated products (label cuda; skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

// ---- gemm ----

// GemmBound: for output element (i, j), with S = |alpha| sum_l |a_il||b_lj| + |beta||c0_ij| and
// exact = alpha sum_l a_il b_lj + beta c0_ij over the inputs as stored (f16/bf16 widened
// exactly):
//   * fp32 evaluation. Every term of the sum passes through at most k + 2 roundings (its product,
//     at most k additions, one multiplication by alpha or beta), in any order and blocking
//     (cuBLAS's tiles, split-K, the CPU's OpenBLAS kernels). Tensor cores may truncate rather
//     than round to nearest inside the accumulation, so each rounding is bounded by
//     u = 2^-23 (not 2^-24): |y - exact| <= gamma_{k+2}(2^-23) * S, with
//     gamma_n(u) = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms,
//     section 3.1). Same bound for both backends.
//   * rounding y to the output dtype: |round(y) - y| <= u_out |y| + eta_out with u_out = 2^-24,
//     2^-11, 2^-8 (f32, f16, bf16) and eta_out = half the smallest subnormal (2^-150, 2^-25,
//     2^-134) for results in the subnormal range; |y| <= |ref| + gamma S + ref_err.
//   * the fp64 reference: products of floats are exact in double, then k + 1 roundings:
//     ref_err <= gamma_{k+2}(2^-53) * S.
//   bound = gamma S + u_out (|ref| + gamma S + ref_err) + eta_out + ref_err.
double gamma_n(double n, double u) {
  return n * u / (1.0 - n * u);
}

double unit_roundoff_of(DType d) {
  return d == DType::f16 ? 0x1p-11 : d == DType::bf16 ? 0x1p-8 : 0x1p-24;
}

double half_min_subnormal_of(DType d) {
  return d == DType::f16 ? 0x1p-25 : d == DType::bf16 ? 0x1p-134 : 0x1p-150;
}

struct GemmCase {
  DType a, b, c;
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
};

std::string gemm_name(const GemmCase& g) {
  auto num = [](float x) {
    std::string s = std::to_string(static_cast<int>(std::lround(x * 100)));
    for (char& ch : s) {
      if (ch == '-') ch = 'm';
    }
    return s;
  };
  return std::string(dtype_name(g.a)) + (g.trans_a ? "T" : "N") + "_" + dtype_name(g.b) +
         (g.trans_b ? "T" : "N") + "_to_" + dtype_name(g.c) + "_" + std::to_string(g.m) + "x" +
         std::to_string(g.n) + "x" + std::to_string(g.k) + "_a" + num(g.alpha) + "_b" + num(g.beta);
}

void PrintTo(const GemmCase& g, std::ostream* os) {
  *os << gemm_name(g);
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  // cuBLAS's direct types, then the ones that go through the widening workspace.
  const DType types[][3] = {
      {f32, f32, f32}, {f16, f16, f16},  {f16, f16, f32},   {bf16, bf16, bf16}, {bf16, bf16, f32},
      {f16, f32, f32}, {f32, bf16, f16}, {f16, bf16, bf16}, {f16, f16, bf16},   {f32, f32, f16}};
  for (const auto& t : types) {
    for (int trans = 0; trans < 4; ++trans) {
      cases.push_back(
          {t[0], t[1], t[2], (trans & 1) != 0, (trans & 2) != 0, 37, 45, 300, 1.0f, 0.0f});
    }
    cases.push_back({t[0], t[1], t[2], false, true, 64, 128, 1024, 0.5f, -1.25f});
    cases.push_back({t[0], t[1], t[2], true, false, 1, 1, 1, 2.0f, 1.0f});
    cases.push_back({t[0], t[1], t[2], false, false, 5, 7, 0, 1.0f, 0.5f});  // C := beta C
  }
  return cases;
}

// Elements of op(X) for a row-major X stored as [rows, cols] (transposed: [cols, rows]).
double op_element(const std::vector<float>& x, bool trans, int64_t rows, int64_t cols, int64_t r,
                  int64_t c) {
  return trans ? x[static_cast<size_t>(c * rows + r)] : x[static_cast<size_t>(r * cols + c)];
}

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CudaGemm, WithinDerivedBoundOfFp64) {
  AMPCTL_REQUIRE_GPU();
  const GemmCase& g = GetParam();
  std::mt19937_64 rng(seed_of(gemm_name(g)));
  const Shape a_shape = g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k};
  const Shape b_shape = g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n};
  // Mixed signs over a few binades: cancellation makes the relative error of the result large,
  // which is what the bound in S (not |exact|) is for.
  const HostInput a =
      from_values(a_shape, g.a, random_values(rng, static_cast<size_t>(g.m * g.k), -3, 2));
  const HostInput b =
      from_values(b_shape, g.b, random_values(rng, static_cast<size_t>(g.k * g.n), -3, 2));
  const HostInput c0 =
      from_values({g.m, g.n}, g.c, random_values(rng, static_cast<size_t>(g.m * g.n), -2, 2));

  std::vector<float> av(a.bits.size()), bv(b.bits.size()), cv(c0.bits.size());
  for (size_t i = 0; i < av.size(); ++i) av[i] = decode(a.bits[i], g.a);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = decode(b.bits[i], g.b);
  for (size_t i = 0; i < cv.size(); ++i) cv[i] = decode(c0.bits[i], g.c);

  auto run = [&](Backend& be) {
    Tensor ta = upload_bits(be, a.shape, a.dtype, a.bits);
    Tensor tb = upload_bits(be, b.shape, b.dtype, b.bits);
    Tensor tc = upload_bits(be, c0.shape, c0.dtype, c0.bits);
    be.gemm(ta, g.trans_a, tb, g.trans_b, tc, g.alpha, g.beta);
    return download_values(be, tc);
  };
  const std::vector<float> got_gpu = run(gpu());
  const std::vector<float> got_cpu = run(cpu());

  const double gamma = gamma_n(static_cast<double>(g.k + 2), 0x1p-23);
  const double gamma_ref = gamma_n(static_cast<double>(g.k + 2), 0x1p-53);
  const double u_out = unit_roundoff_of(g.c), eta_out = half_min_subnormal_of(g.c);
  ErrorBudget gpu_budget, cpu_budget;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double ref = 0.0, s = 0.0;
      for (int64_t l = 0; l < g.k; ++l) {
        const double p =
            op_element(av, g.trans_a, g.m, g.k, i, l) * op_element(bv, g.trans_b, g.k, g.n, l, j);
        ref += p;
        s += std::fabs(p);
      }
      const size_t idx = static_cast<size_t>(i * g.n + j);
      ref = g.alpha * ref + (g.beta != 0.0f ? g.beta * cv[idx] : 0.0);
      s = std::fabs(g.alpha) * s + std::fabs(g.beta) * (g.beta != 0.0f ? std::fabs(cv[idx]) : 0.0);
      const double ref_err = gamma_ref * s;
      const double bound =
          gamma * s + u_out * (std::fabs(ref) + gamma * s + ref_err) + eta_out + ref_err;
      gpu_budget.add(idx, got_gpu[idx], ref, bound);
      cpu_budget.add(idx, got_cpu[idx], ref, bound);
    }
  }
  EXPECT_TRUE(gpu_budget.ok()) << "cuda vs fp64: " << gpu_budget.report();
  EXPECT_TRUE(cpu_budget.ok()) << "cpu vs fp64: " << cpu_budget.report();
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemm, ::testing::ValuesIn(gemm_cases()),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           return gemm_name(info.param);
                         });

// ---- properties of the GPU alone ----

// Repeated products on the same inputs give the same bits (no split-K atomics, fixed workspace).
TEST(CudaDeterminism, RepeatedGemmIsBitwiseIdentical) {
  AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const int64_t m = 512, n = 384, k = 4096;
    Tensor a = upload_values(gpu(), {m, k}, d, random_values(rng, m * k, -3, 2));
    Tensor b = upload_values(gpu(), {n, k}, d, random_values(rng, n * k, -3, 2));
    std::vector<uint32_t> first;
    for (int rep = 0; rep < 3; ++rep) {
      Tensor c = gpu().empty({m, n}, d);
      gpu().gemm(a, false, b, true, c, 1.0f, 0.0f);
      std::vector<uint32_t> bits = download_bits(gpu(), c);
      if (rep == 0) {
        first = bits;
        continue;
      }
      BitwiseCheck check(d);
      check.add_all(bits, first);
      EXPECT_TRUE(check.ok()) << dtype_name(d) << " repetition " << rep << ": " << check.report();
    }
  }
}

}  // namespace
}  // namespace ampctl::test
