// The CPU-vs-CUDA harness of the test_cuda_<family>.cpp files (label cuda; every test skips,
// reported as skipped, where no GPU is usable).
//
// A family's table of cases runs each op on seeded random inputs (with inf and NaN where the op
// must see them), across dtypes and odd shapes, on both backends and compares every output,
// element by element:
//   * bitwise where both sides run the same float operations on the same inputs (the same
//     per-element code: half.h and the math/ headers, with contraction off: nvcc --fmad=false,
//     g++ -ffp-contract=off, IEEE round-to-nearest-even), so any differing bit is a bug. The one
//     freedom: a NaN produced by arithmetic or a conversion may carry any payload (IEEE 754
//     leaves it to the implementation; the GPU returns the canonical NaN), so NaN matches NaN.
//   * within a bound derived per element otherwise (within()). Each bound is the first-order
//     propagation, through the op's own float formula, of the two sources of difference: (a)
//     reassociation of float sums (each backend's sum of n terms is within gamma_n(u) *
//     sum|terms| of the exact one, Higham section 3.1, u = 2^-24, or 2^-23 for tensor-core
//     products that may truncate), so two of them differ by at most twice that; and (b)
//     transcendentals: CUDA's erff, expf, logf and tanhf are within 2 ulps (CUDA Math API,
//     appendix "Mathematical Functions") and glibc's within 2 ulps on x86-64 (its libm-test-ulps
//     tables), so the two differ by at most kTranscendentalUlps = 4 ulps. Each later float
//     operation on operands that already differ adds one float ulp of its result (two roundings
//     to nearest of nearby values differ by at most the operands' difference plus one ulp).
//     Rounding the float results to an f16/bf16 output adds one ulp of that dtype
//     (round_bound). ulps are evaluated a little above the double reference (ulp_near) so a
//     float value just across a binade boundary is covered.
//   * within a relative bound (relative_specs) for sums both sides accumulate in double in
//     different orders (global_norm and the norm of the unscale pass: about 1e-16 relative in
//     double, at most one float ulp, 2^-23 relative, after the final rounding to float).
// On failure each check prints the worst element, both values, the bound and the share of the
// budget it used.
//
// A family file: add_<op>_cases(std::vector<CudaCase>&) functions, then
// AMPCTL_CPU_VS_CUDA_TABLE(<Family>, cases) with a function returning them all.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {

#define AMPCTL_REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU"

// One backend of each kind for the whole binary: a cuBLAS handle costs more than most tests.
inline Backend& gpu() {
  static std::unique_ptr<Backend> backend = make_cuda_backend(0);
  return *backend;
}

inline Backend& cpu() {
  static std::unique_ptr<Backend> backend = cpu_backend();
  return *backend;
}

// AMPCTL_CUDA_TABLE_ON_CPU=1: the tables run with a second CPU backend (3 threads) in the GPU's
// place. That checks the cases themselves (their inputs, shapes and ops run, one bound per
// element) where no GPU is usable, so a GPU's few minutes are not spent on a broken case; it
// says nothing of CUDA (the ctest cuda.table_cases_on_cpu).
inline bool table_on_cpu() {
  static const bool on = [] {
    const char* v = std::getenv("AMPCTL_CUDA_TABLE_ON_CPU");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

// The backend a table compares with the CPU: the GPU, or the CPU peer above.
inline Backend& table_peer() {
  if (table_on_cpu()) {
    static std::unique_ptr<Backend> backend = make_cpu_backend(3);
    return *backend;
  }
  return gpu();
}

inline uint64_t seed_of(const std::string& name) {  // FNV-1a: a stable seed per case name
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// ---- error analysis ----

constexpr double kU = 0x1p-24;  // float unit roundoff
constexpr double kTranscendentalUlps = 4;
const double kInf = std::numeric_limits<double>::infinity();

inline double gamma_n(double n, double u) {
  return n * u / (1.0 - n * u);
}

// The spacing of dtype d's values at magnitude |v| (subnormal spacing below the normal range).
inline double ulp(double v, DType d = DType::f32) {
  const int precision = d == DType::f16 ? 11 : d == DType::bf16 ? 8 : 24;
  const int min_exponent = d == DType::f16 ? -14 : -126;
  const double a = std::fabs(v);
  const int e = a > 0 ? std::max(std::ilogb(a), min_exponent) : min_exponent;
  return std::ldexp(1.0, e - (precision - 1));
}

// The ulp of a float value of which v is a double-precision estimate (within a few float ulps):
// evaluated slightly above |v|, so a float just across the next power of two is covered.
inline double ulp_near(double v) {
  return ulp(std::fabs(v) * (1.0 + 0x1p-16));
}

// Two float values at most `delta` apart, each rounded to nearest in d, differ by at most delta
// plus one ulp of d at their magnitude (want is the CPU's rounded output, within half an ulp of
// its float value).
inline double round_bound(double want, double delta, DType d) {
  return delta + ulp(std::fabs(want) + ulp(want, d) + delta, d);
}

// sum_l |op(a)[i][r][l] op(b)[i][l][q]| for each output of a batched product (a batch x m x k,
// or k x m when ta; b k x n, or n x k when tb): W in the products' bound 2 gamma_{k+2}(u) W.
inline std::vector<double> abs_products(const std::vector<double>& a, const std::vector<double>& b,
                                        bool ta, bool tb, int64_t batch, int64_t m, int64_t n,
                                        int64_t k) {
  std::vector<double> w(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t q = 0; q < n; ++q) {
        double sum = 0.0;
        for (int64_t l = 0; l < k; ++l) {
          const double x = ta ? a[static_cast<size_t>((i * k + l) * m + r)]
                              : a[static_cast<size_t>((i * m + r) * k + l)];
          const double y = tb ? b[static_cast<size_t>((i * n + q) * k + l)]
                              : b[static_cast<size_t>((i * k + l) * n + q)];
          sum += std::fabs(x * y);
        }
        w[static_cast<size_t>((i * m + r) * n + q)] = sum;
      }
    }
  }
  return w;
}

// ---- inputs ----

// A host-side input as storage bits (i32 values as their two's-complement bits).
struct HostInput {
  Shape shape;
  DType dtype;
  std::vector<uint32_t> bits;
  // The exact values (f16/bf16 widened; i32 as integers).
  std::vector<double> values() const {
    std::vector<double> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      v[i] = dtype == DType::i32 ? static_cast<double>(static_cast<int32_t>(bits[i]))
                                 : static_cast<double>(decode(bits[i], dtype));
    }
    return v;
  }
};

inline HostInput from_values(const Shape& shape, DType d, const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = encode(v[i], d);
  return {shape, d, bits};
}

inline HostInput from_i32(const Shape& shape, const std::vector<int32_t>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = static_cast<uint32_t>(v[i]);
  return {shape, DType::i32, bits};
}

inline HostInput scalar_input(float v) {
  return from_values({1}, DType::f32, {v});
}

inline size_t numel_of(const Shape& s) {
  return static_cast<size_t>(shape_numel(s));
}

// Random values over binades [emin, emax]; a `special` share of them replaced by +inf, -inf or
// NaN.
inline std::vector<float> random_with_specials(std::mt19937_64& rng, size_t n, int emin, int emax,
                                               double special) {
  std::vector<float> v = random_values(rng, n, emin, emax);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (float& x : v) {
    if (u(rng) < special) x = specials[rng() % 3];
  }
  return v;
}

// Uniform in [lo, hi).
inline std::vector<float> uniform_values(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

inline std::vector<float> small_integers(std::mt19937_64& rng, size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(u(rng));
  return v;
}

// ---- the table ----

// How one output is compared: bitwise, or |cuda - cpu| <= delta[i] in float before the output's
// own rounding (round_bound adds that for f16/bf16 outputs).
struct Spec {
  bool bitwise = true;
  std::vector<double> delta;
};

inline Spec bitwise() {
  return {};
}
inline Spec within(std::vector<double> delta) {
  return {false, std::move(delta)};
}

struct Output {
  DType dtype;
  std::vector<uint32_t> bits;
};

using SpecsOf = std::function<std::vector<Spec>(const std::vector<HostInput>& in,
                                                const std::vector<std::vector<double>>& want)>;

struct CudaCase {
  std::string name;
  std::function<std::vector<HostInput>(std::mt19937_64&)> make_inputs;
  // Runs the op on `be` over freshly uploaded inputs; returns the tensors to compare.
  std::function<std::vector<Tensor>(Backend& be, std::vector<Tensor>& in)> run;
  // One Spec per output, from the inputs (and the CPU's outputs, decoded, where the bound needs
  // them). Unset: every output bitwise.
  SpecsOf specs;
};

inline void PrintTo(const CudaCase& c, std::ostream* os) {
  *os << c.name;
}

inline std::string tag(DType d) {
  return dtype_name(d);
}

// Every output within `tolerance` relative to the CPU's value (f32 outputs: sums accumulated in
// double by both sides).
inline SpecsOf relative_specs(double tolerance) {
  return [tolerance](const std::vector<HostInput>&, const std::vector<std::vector<double>>& want) {
    std::vector<Spec> specs;
    for (const std::vector<double>& w : want) {
      std::vector<double> delta(w.size());
      for (size_t i = 0; i < w.size(); ++i) delta[i] = tolerance * std::fabs(w[i]);
      specs.push_back(within(std::move(delta)));
    }
    return specs;
  };
}

// ---- running and comparing ----

inline std::vector<Output> run_case(Backend& be, const CudaCase& c,
                                    const std::vector<HostInput>& inputs) {
  std::vector<Tensor> in;
  for (const HostInput& h : inputs) in.push_back(upload_bits(be, h.shape, h.dtype, h.bits));
  std::vector<Output> out;
  for (const Tensor& t : c.run(be, in)) out.push_back({t.dtype(), download_bits(be, t)});
  return out;
}

inline std::vector<double> decoded(const Output& o) {
  std::vector<double> v(o.bits.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = o.dtype == DType::i32 ? static_cast<double>(static_cast<int32_t>(o.bits[i]))
                                 : static_cast<double>(decode(o.bits[i], o.dtype));
  }
  return v;
}

inline void expect_bitwise(const Output& got, const Output& want, const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.bits.size()) << what;
  if (got.dtype == DType::i32) {
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < got.bits.size(); ++i) {
      if (got.bits[i] != want.bits[i] && mismatches++ == 0) first = i;
    }
    EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.bits.size()
                              << " i32 elements differ (budget: 0); first at " << first << ": cuda "
                              << static_cast<int32_t>(got.bits[first]) << ", cpu "
                              << static_cast<int32_t>(want.bits[first]);
    return;
  }
  BitwiseCheck check(got.dtype, /*nan_any=*/true);
  check.add_all(got.bits, want.bits);
  EXPECT_TRUE(check.ok()) << what << " (got = cuda, expected = cpu): " << check.report();
}

inline void expect_within(const Output& got, const Output& want, const std::vector<double>& delta,
                          const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.bits.size()) << what;
  ASSERT_EQ(delta.size(), want.bits.size()) << what << ": one bound per element";
  const std::vector<double> g = decoded(got), w = decoded(want);
  ErrorBudget budget;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound =
        want.dtype == DType::f32 ? delta[i] : round_bound(w[i], delta[i], want.dtype);
    budget.add(i, g[i], w[i], bound);
  }
  EXPECT_TRUE(budget.ok()) << what << " (got = cuda, expected = cpu): " << budget.report();
}

// The case runner: the case on both backends over the same inputs, each output compared as its
// Spec says.
inline void expect_cuda_matches_cpu(const CudaCase& c) {
  if (!table_on_cpu()) AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(seed_of(c.name));
  const std::vector<HostInput> inputs = c.make_inputs(rng);
  const std::vector<Output> want = run_case(cpu(), c, inputs);
  const std::vector<Output> got = run_case(table_peer(), c, inputs);
  ASSERT_EQ(got.size(), want.size());
  std::vector<std::vector<double>> want_values;
  for (const Output& o : want) want_values.push_back(decoded(o));
  std::vector<Spec> specs = c.specs ? c.specs(inputs, want_values) : std::vector<Spec>{};
  specs.resize(got.size());  // unlisted outputs: bitwise
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string what = c.name + ", output " + std::to_string(i);
    ASSERT_EQ(got[i].dtype, want[i].dtype) << what;
    if (specs[i].bitwise) {
      expect_bitwise(got[i], want[i], what);
    } else {
      expect_within(got[i], want[i], specs[i].delta, what);
    }
  }
}

}  // namespace ampctl::test

// A family's table as one parameterised test, Ops/Cuda<Family>VsCpu.MatchesCpuReference/<case>.
#define AMPCTL_CPU_VS_CUDA_TABLE(Family, all_cases)                         \
  class Cuda##Family##VsCpu : public ::testing::TestWithParam<CudaCase> {}; \
  TEST_P(Cuda##Family##VsCpu, MatchesCpuReference) {                        \
    expect_cuda_matches_cpu(GetParam());                                    \
  }                                                                         \
  INSTANTIATE_TEST_SUITE_P(                                                 \
      Ops, Cuda##Family##VsCpu, ::testing::ValuesIn(all_cases()),           \
      [](const ::testing::TestParamInfo<CudaCase>& info) { return info.param.name; })
