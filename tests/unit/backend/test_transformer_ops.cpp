// The transformer ops of the CPU backend (backend.h, "transformer ops") against references computed
// another way: the math in double from the already-rounded inputs with bounds derived next to each
// test, bitwise re-statements of the documented summation orders in plain float loops (the orders
// the CUDA kernels must reproduce), exact index formulas for the layout copies, and the same
// results across runs, thread counts and kernel levels.
//
// Notation as test_nn_ops.cpp: u = 2^-24, gamma_n = n u / (1 - n u) (Higham 3.1: a float sum of n
// terms, each through at most n roundings, is within gamma_n sum |terms| of the exact one); u_out
// and eta_out the unit roundoff and half the smallest subnormal of the output dtype; ulp32(v) the
// spacing of floats at |v|; glibc's expf is within 1 ulp and tanhf within 2.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../../lib/src/backend/cpu/cpu_backend.h"  // CpuKernels: the portable level
#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "ampctl/math/nn_math.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
// Counted by test_nn_ops.cpp's operator new (one test binary per directory).
extern std::atomic<size_t> g_allocations;
}  // namespace ampctl::test

namespace ampctl::test {
namespace {

constexpr double kU = 0x1p-24;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double gamma(double n) {
  return n * kU / (1.0 - n * kU);
}

double unit_roundoff(DType d) {
  return d == DType::f16 ? 0x1p-11 : d == DType::bf16 ? 0x1p-8 : 0x1p-24;
}

double half_min_subnormal(DType d) {
  return d == DType::f16 ? 0x1p-25 : d == DType::bf16 ? 0x1p-134 : 0x1p-150;
}

double ulp32(double v) {
  v = std::fabs(v);
  if (v < 0x1p-126) return 0x1p-149;
  int e;
  std::frexp(v, &e);
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

std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = id(rng);
  return v;
}

// An Error{invalid_argument} whose message names the op.
template <typename F>
void expect_invalid_naming(F&& f, const std::string& op, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception, expected Error{invalid_argument}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos)
        << what << ": the message does not name " << op << ": " << e.what();
  }
}

std::string name(DType d) {
  return dtype_name(d);
}

// ============================================================================================
// gelu_tanh (nn::ActivationKind::gelu_tanh through activation_forward / activation_backward)
// ============================================================================================

constexpr double kBeta = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kKappa = 0.044715;

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(kBeta * (x + kKappa * x * x * x)));
}
double gelu_tanh_grad_ref(double x) {
  const double t = std::tanh(kBeta * (x + kKappa * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kBeta * (1.0 + 3.0 * kKappa * x * x);
}

// Float error of inner = kBeta (x + kKappa x^3): x^3 two roundings, kKappa's and kBeta's own
// representation errors (u each), the product with kKappa, the sum and the product with kBeta one
// each: at most 7 relative errors of u on the terms, charged 8u (kBeta |x| + kBeta kKappa |x|^3).
// tanh has slope <= 1, so t is off by that plus tanhf's 2 ulps.
double inner_err(double x) {
  const double ax = std::fabs(x);
  return 8 * kU * kBeta * (ax + kKappa * ax * ax * ax);
}
double tanh_err(double x) {
  return inner_err(x) + 2 * ulp32(std::tanh(kBeta * (x + kKappa * x * x * x)));
}

// Forward y = (0.5 x) (1 + t): 1 + t rounds once (u (1 + |t|)), the products once each (0.5 x is
// exact): |err| <= 0.5 |x| (E_t + u (1 + |t|)) + 2u |y|; doubled for the second-order terms.
TEST(GeluTanh, ForwardMatchesDoubleWithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x9e11);
  for (DType dx : kFloatDTypes) {
    for (DType dy : kFloatDTypes) {
      SCOPED_TRACE(name(dx) + " -> " + name(dy));
      const auto xv = random_rounded(rng, 4099, -10, 3, dx);  // |x| < 8, down to 2^-10
      Tensor x = upload_values(*be, {4099}, dx, xv);
      Tensor y = be->empty({4099}, dy);
      be->activation_forward(nn::ActivationKind::gelu_tanh, x, y);
      const auto got = download_values(*be, y);
      ErrorBudget budget;
      for (size_t i = 0; i < xv.size(); ++i) {
        const double xd = xv[i], ref = gelu_tanh_ref(xd);
        const double t = std::tanh(kBeta * (xd + kKappa * xd * xd * xd));
        const double err = 2 * (0.5 * std::fabs(xd) * (tanh_err(xd) + kU * (1 + std::fabs(t))) +
                                2 * kU * std::fabs(ref));
        budget.add(i, got[i], ref, with_output_rounding(ref, err, dy));
      }
      EXPECT_TRUE(budget.ok()) << budget.report();
    }
  }
}

// Backward dx = dy (0.5 (1 + t) + (0.5 x)(1 - t t) kBeta (1 + 3 kKappa x^2)):
//   left  = 0.5 (1 + t): off by 0.5 (E_t + u (1 + |t|));
//   1 - t t: off by 2 |t| E_t + 2u; inner' = kBeta (1 + 3 kKappa x^2): 5 roundings, 5u relative;
//   right = 0.5 |x| (1 - t^2) inner': off by 0.5 |x| inner' (2 |t| E_t + 2u) + 7u |right|;
//   the sum and the product with dy: u each on |dx|.
// err <= |dy| (err_left + err_right) + 2u |dx|, doubled.
TEST(GeluTanh, BackwardMatchesDoubleWithinDerivedBound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x9e12);
  for (DType dt : kFloatDTypes) {
    for (DType dg : kFloatDTypes) {
      SCOPED_TRACE(name(dt) + " grads " + name(dg));
      const auto xv = random_rounded(rng, 2053, -10, 3, dt);
      const auto dyv = random_rounded(rng, xv.size(), -6, 6, dg);
      Tensor x = upload_values(*be, {2053}, dt, xv);
      Tensor dy = upload_values(*be, {2053}, dg, dyv);
      Tensor dx = be->empty({2053}, dg);
      // The tanh GELU differentiates through its input: the output may be undefined.
      be->activation_backward(nn::ActivationKind::gelu_tanh, x, Tensor{}, dy, dx);
      const auto got = download_values(*be, dx);
      ErrorBudget budget;
      for (size_t i = 0; i < xv.size(); ++i) {
        const double xd = xv[i], dyd = dyv[i];
        const double ref = dyd * gelu_tanh_grad_ref(xd);
        const double t = std::tanh(kBeta * (xd + kKappa * xd * xd * xd));
        const double et = tanh_err(xd);
        const double inner_d = kBeta * (1 + 3 * kKappa * xd * xd);
        const double right = 0.5 * std::fabs(xd) * (1 - t * t) * inner_d;
        const double err_left = 0.5 * (et + kU * (1 + std::fabs(t)));
        const double err_right =
            0.5 * std::fabs(xd) * inner_d * (2 * std::fabs(t) * et + 2 * kU) + 7 * kU * right;
        const double err = 2 * (std::fabs(dyd) * (err_left + err_right) + 2 * kU * std::fabs(ref));
        budget.add(i, got[i], ref, with_output_rounding(ref, err, dg));
      }
      EXPECT_TRUE(budget.ok()) << budget.report();
    }
  }
}

// A finite difference of the double forward agrees with the double gradient formula: the formula
// the op implements is the derivative of the forward it implements (central difference, h = 1e-5:
// truncation h^2 |f'''| / 6 < 1e-9 here).
TEST(GeluTanh, GradientFormulaIsTheForwardsDerivative) {
  for (double x = -6.0; x <= 6.0; x += 0.37) {
    const double h = 1e-5;
    const double fd = (gelu_tanh_ref(x + h) - gelu_tanh_ref(x - h)) / (2 * h);
    EXPECT_NEAR(gelu_tanh_grad_ref(x), fd, 1e-8) << "x " << x;
    // And the float functions the kernels share are within a few ulps of it.
    EXPECT_NEAR(nn::gelu_tanh_grad(static_cast<float>(x)), gelu_tanh_grad_ref(x), 1e-6) << x;
    EXPECT_NEAR(nn::gelu_tanh(static_cast<float>(x)), gelu_tanh_ref(x), 8e-7 * (1 + std::fabs(x)))
        << x;
  }
}

// ============================================================================================
// embedding_forward / embedding_backward
// ============================================================================================

struct EmbeddingCase {
  int64_t batch, time, vocab, positions, channels;
};

// out = wte[id] + wpe[t]: one float add of two floats is the double sum rounded once, so the
// double reference rounded to float must match bit for bit.
TEST(Embedding, ForwardIsTheRoundedDoubleSumBitwise) {
  std::mt19937_64 rng(0x3b01);
  for (const EmbeddingCase& c : {EmbeddingCase{2, 5, 7, 8, 3}, EmbeddingCase{4, 64, 65, 64, 128},
                                 EmbeddingCase{1, 1, 1, 1, 1}}) {
    for (int threads : {1, 2}) {
      auto be = cpu_backend(threads);
      SCOPED_TRACE("B " + std::to_string(c.batch) + " T " + std::to_string(c.time) + " threads " +
                   std::to_string(threads));
      const auto ids =
          random_tokens(rng, static_cast<size_t>(c.batch * c.time), static_cast<int32_t>(c.vocab));
      const auto te = random_values(rng, static_cast<size_t>(c.vocab * c.channels), -8, 2);
      const auto pe = random_values(rng, static_cast<size_t>(c.positions * c.channels), -8, 2);
      Tensor out = be->empty({c.batch * c.time, c.channels}, DType::f32);
      be->fill(out, kNaN);
      be->embedding_forward(upload_i32(*be, {c.batch, c.time}, ids),
                            upload_values(*be, {c.vocab, c.channels}, DType::f32, te),
                            upload_values(*be, {c.positions, c.channels}, DType::f32, pe), out);
      const auto got = download_bits(*be, out);
      BitwiseCheck check(DType::f32);
      for (int64_t r = 0; r < c.batch * c.time; ++r) {
        for (int64_t j = 0; j < c.channels; ++j) {
          const double ref = static_cast<double>(te[ids[r] * c.channels + j]) +
                             static_cast<double>(pe[(r % c.time) * c.channels + j]);
          const size_t k = static_cast<size_t>(r * c.channels + j);
          check.add(k, got[k], float_bits(static_cast<float>(ref)));
        }
      }
      EXPECT_TRUE(check.ok()) << check.report();
    }
  }
}

struct BackwardRun {
  std::vector<uint32_t> dwte, dwpe;
};

BackwardRun run_embedding_backward(Backend& be, const EmbeddingCase& c,
                                   const std::vector<int32_t>& ids, const std::vector<float>& g,
                                   const std::vector<float>& wte0, const std::vector<float>& wpe0) {
  Tensor dwte = upload_values(be, {c.vocab, c.channels}, DType::f32, wte0);
  Tensor dwpe = upload_values(be, {c.positions, c.channels}, DType::f32, wpe0);
  be.embedding_backward(upload_i32(be, {c.batch, c.time}, ids),
                        upload_values(be, {c.batch * c.time, c.channels}, DType::f32, g), dwte,
                        dwpe);
  return BackwardRun{download_bits(be, dwte), download_bits(be, dwpe)};
}

// The backward against double: each gradient is the initial value plus a float sum of its rows
// (n terms from 0, then one add): |err| <= gamma_{n+1} (|initial| + sum |dout|). Vocabulary rows
// of absent tokens and positions >= T are untouched, bit for bit.
TEST(Embedding, BackwardMatchesDoubleWithinDerivedBoundAndLeavesAbsentRows) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x3b02);
  const EmbeddingCase c{3, 16, 11, 20, 24};
  auto ids = random_tokens(rng, static_cast<size_t>(c.batch * c.time), 9);  // ids 9, 10 absent
  ids[5] = ids[6] = ids[40] = 3;                                            // repeats for sure
  const auto g = random_values(rng, static_cast<size_t>(c.batch * c.time * c.channels), -6, 4);
  const auto wte0 = random_values(rng, static_cast<size_t>(c.vocab * c.channels), -6, 0);
  const auto wpe0 = random_values(rng, static_cast<size_t>(c.positions * c.channels), -6, 0);
  const BackwardRun run = run_embedding_backward(*be, c, ids, g, wte0, wpe0);
  ErrorBudget budget;
  BitwiseCheck untouched(DType::f32);
  for (int64_t v = 0; v < c.vocab; ++v) {
    for (int64_t j = 0; j < c.channels; ++j) {
      const size_t k = static_cast<size_t>(v * c.channels + j);
      double sum = 0, abs_sum = 0;
      int64_t n = 0;
      for (int64_t r = 0; r < c.batch * c.time; ++r) {
        if (ids[r] != v) continue;
        sum += g[r * c.channels + j];
        abs_sum += std::fabs(g[r * c.channels + j]);
        ++n;
      }
      if (n == 0) {
        untouched.add(k, run.dwte[k], float_bits(wte0[k]));
        continue;
      }
      const double ref = wte0[k] + sum;
      budget.add(k, bits_float(run.dwte[k]), ref,
                 gamma(static_cast<double>(n + 1)) * (std::fabs(wte0[k]) + abs_sum));
    }
  }
  for (int64_t t = 0; t < c.positions; ++t) {
    for (int64_t j = 0; j < c.channels; ++j) {
      const size_t k = static_cast<size_t>(t * c.channels + j);
      if (t >= c.time) {
        untouched.add(k, run.dwpe[k], float_bits(wpe0[k]));
        continue;
      }
      double sum = 0, abs_sum = 0;
      for (int64_t b = 0; b < c.batch; ++b) {
        sum += g[(b * c.time + t) * c.channels + j];
        abs_sum += std::fabs(g[(b * c.time + t) * c.channels + j]);
      }
      budget.add(k + 1000000, bits_float(run.dwpe[k]), wpe0[k] + sum,
                 gamma(static_cast<double>(c.batch + 1)) * (std::fabs(wpe0[k]) + abs_sum));
    }
  }
  EXPECT_TRUE(budget.ok()) << budget.report();
  EXPECT_TRUE(untouched.ok()) << "absent rows: " << untouched.report();
}

// The documented order, restated in float: for each vocabulary row present, s = 0, s += dout[r]
// for r ascending, then dwte += s (and dwpe the same over b). The CUDA kernel must give these
// bits; so must every thread count (1 and 2 here: the problem is large enough that 2 threads
// split the vocabulary) and every repeat.
TEST(Embedding, BackwardIsTheDocumentedFloatOrderBitwiseAcrossRunsAndThreads) {
  std::mt19937_64 rng(0x3b03);
  const EmbeddingCase c{4, 256, 64, 256, 256};  // 1024 rows of 256: 2^18 sums
  auto ids = random_tokens(rng, static_cast<size_t>(c.batch * c.time), 40);
  for (size_t i = 0; i < ids.size(); i += 3) ids[i] = 7;  // a third of the rows on one token
  const auto g = random_values(rng, static_cast<size_t>(c.batch * c.time * c.channels), -10, 4);
  const auto wte0 = random_values(rng, static_cast<size_t>(c.vocab * c.channels), -4, 0);
  const auto wpe0 = random_values(rng, static_cast<size_t>(c.positions * c.channels), -4, 0);
  std::vector<float> s(static_cast<size_t>(c.channels));
  std::vector<uint32_t> want_te(wte0.size()), want_pe(wpe0.size());
  for (int64_t v = 0; v < c.vocab; ++v) {
    std::fill(s.begin(), s.end(), 0.0f);
    bool present = false;
    for (int64_t r = 0; r < c.batch * c.time; ++r) {
      if (ids[r] != v) continue;
      present = true;
      for (int64_t j = 0; j < c.channels; ++j) s[j] = s[j] + g[r * c.channels + j];
    }
    for (int64_t j = 0; j < c.channels; ++j) {
      const size_t k = static_cast<size_t>(v * c.channels + j);
      want_te[k] = float_bits(present ? wte0[k] + s[j] : wte0[k]);
    }
  }
  for (int64_t t = 0; t < c.positions; ++t) {
    std::fill(s.begin(), s.end(), 0.0f);
    for (int64_t b = 0; b < c.batch && t < c.time; ++b) {
      for (int64_t j = 0; j < c.channels; ++j) s[j] = s[j] + g[(b * c.time + t) * c.channels + j];
    }
    for (int64_t j = 0; j < c.channels; ++j) {
      const size_t k = static_cast<size_t>(t * c.channels + j);
      want_pe[k] = float_bits(t < c.time ? wpe0[k] + s[j] : wpe0[k]);
    }
  }
  for (int threads : {1, 2}) {
    auto be = cpu_backend(threads);
    for (int repeat = 0; repeat < 2; ++repeat) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " run " + std::to_string(repeat));
      const BackwardRun run = run_embedding_backward(*be, c, ids, g, wte0, wpe0);
      BitwiseCheck te(DType::f32), pe(DType::f32);
      te.add_all(run.dwte, want_te);
      pe.add_all(run.dwpe, want_pe);
      EXPECT_TRUE(te.ok()) << "dwte: " << te.report();
      EXPECT_TRUE(pe.ok()) << "dwpe: " << pe.report();
    }
  }
}

TEST(Embedding, BackwardWithoutTokenGradientAccumulatesPositionsOnly) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x3b04);
  const auto g = random_values(rng, 24, -3, 3);
  Tensor dwpe = be->zeros({3, 4}, DType::f32);
  // Ids are not read without dwte (even out-of-range ones).
  be->embedding_backward(upload_i32(*be, {2, 3}, {0, 99, -1, 2, 3, 4}),
                         upload_values(*be, {6, 4}, DType::f32, g), Tensor{}, dwpe);
  const auto got = download_values(*be, dwpe);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t j = 0; j < 4; ++j) {
      // Two terms from 0: 0 + a is exact, a + b rounds once, as the double sum rounded.
      const float want = static_cast<float>(static_cast<double>(g[t * 4 + j]) + g[(3 + t) * 4 + j]);
      EXPECT_EQ(float_bits(got[t * 4 + j]), float_bits(want)) << t << ", " << j;
    }
  }
}

TEST(Embedding, OutOfRangeIdsThrowBeforeAnyWrite) {
  auto be = cpu_backend();
  Tensor wte = be->zeros({5, 2}, DType::f32);
  Tensor wpe = be->zeros({4, 2}, DType::f32);
  for (int32_t bad : {-1, 5, 1 << 30}) {
    SCOPED_TRACE("id " + std::to_string(bad));
    Tensor tokens = upload_i32(*be, {2, 2}, {0, 1, bad, 2});
    Tensor out = be->empty({4, 2}, DType::f32);
    be->fill(out, 7.0);
    expect_invalid_naming([&] { be->embedding_forward(tokens, wte, wpe, out); },
                          "embedding_forward", "forward");
    for (float v : download_values(*be, out)) EXPECT_EQ(v, 7.0f) << "out was written";
    Tensor dwte = be->zeros({5, 2}, DType::f32);
    Tensor dwpe = be->zeros({4, 2}, DType::f32);
    expect_invalid_naming(
        [&] {
          be->embedding_backward(tokens, be->zeros({4, 2}, DType::f32), dwte, dwpe);
        },
        "embedding_backward", "backward");
    try {
      be->embedding_forward(tokens, wte, wpe, out);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(Embedding, RejectsMismatchedOperands) {
  auto be = cpu_backend();
  Tensor tokens = upload_i32(*be, {2, 3}, {0, 1, 2, 3, 0, 1});
  Tensor wte = be->zeros({4, 8}, DType::f32);
  Tensor wpe = be->zeros({3, 8}, DType::f32);
  Tensor out = be->zeros({6, 8}, DType::f32);
  const std::string fwd = "embedding_forward", bwd = "embedding_backward";
  expect_invalid_naming(
      [&] {
        be->embedding_forward(be->zeros({2, 3}, DType::f32), wte, wpe, out);
      },
      fwd, "f32 tokens");
  expect_invalid_naming(
      [&] {
        be->embedding_forward(tokens, be->zeros({4, 8}, DType::f16), wpe, out);
      },
      fwd, "f16 wte");
  expect_invalid_naming(
      [&] {
        be->embedding_forward(tokens, wte, be->zeros({2, 8}, DType::f32), out);
      },
      fwd, "wpe shorter than T");
  expect_invalid_naming(
      [&] {
        be->embedding_forward(tokens, wte, be->zeros({3, 7}, DType::f32), out);
      },
      fwd, "wpe width");
  expect_invalid_naming(
      [&] {
        be->embedding_forward(tokens, wte, wpe, be->zeros({5, 8}, DType::f32));
      },
      fwd, "out rows");
  expect_invalid_naming(
      [&] {
        be->embedding_forward(tokens, wte, wpe, be->zeros({6, 8}, DType::f16));
      },
      fwd, "f16 out");
  Tensor wte6 = be->zeros({6, 8}, DType::f32);
  expect_invalid_naming([&] { be->embedding_forward(tokens, wte6, wpe, wte6); }, fwd,
                        "out aliasing wte");
  expect_invalid_naming(
      [&] {
        be->embedding_backward(tokens, be->zeros({6, 7}, DType::f32), wte, wpe);
      },
      bwd, "dout width");
  expect_invalid_naming(
      [&] {
        be->embedding_backward(tokens, be->zeros({5, 8}, DType::f32), wte, wpe);
      },
      bwd, "dout rows");
  expect_invalid_naming(
      [&] {
        be->embedding_backward(tokens, out, be->zeros({4, 8}, DType::bf16), wpe);
      },
      bwd, "bf16 dwte");
  expect_invalid_naming([&] { be->embedding_backward(tokens, out, wte, wte); }, bwd,
                        "dwte aliasing dwpe");
  expect_invalid_naming([&] { be->embedding_backward(tokens, out, Tensor{}, Tensor{}); }, bwd,
                        "undefined dwpe");
}

// ============================================================================================
// gemm_batched
// ============================================================================================

struct BatchedCase {
  std::vector<int64_t> lead;  // the batch dims
  int64_t m, n, k;
  bool ta, tb;
};

Shape batched_shape(const std::vector<int64_t>& lead, int64_t r, int64_t c) {
  Shape s;
  for (int64_t d : lead) s.push_back(d);
  s.push_back(r);
  s.push_back(c);
  return s;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// Per matrix, as test_gemm_ops.cpp: each output is a float chain of k products (exact in the FMA or
// in float for f16/bf16 operands) and the alpha/beta terms, so |y - exact| <= gamma_{k+2} W with
// W = |alpha| sum_l |a_il b_lj| + |beta c_ij|; then the output rounding.
TEST(GemmBatched, MatchesFp64WithinDerivedBoundAndGemmBitwise) {
  std::mt19937_64 rng(0x6b01);
  const BatchedCase cases[] = {{{2, 3}, 7, 5, 9, false, true},
                               {{6}, 16, 16, 32, false, false},
                               {{4}, 33, 17, 64, true, false},
                               {{1, 2, 2}, 3, 70, 5, true, true},
                               {{3}, 1, 1, 1, false, true}};
  const DType combos[][3] = {{DType::f32, DType::f32, DType::f32},
                             {DType::f16, DType::f16, DType::f16},
                             {DType::bf16, DType::bf16, DType::bf16},
                             {DType::f16, DType::f16, DType::f32},
                             {DType::f32, DType::bf16, DType::f32}};
  auto be = cpu_backend();
  for (const BatchedCase& c : cases) {
    for (const auto& dt : combos) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.125f, 1.0f}}) {
        SCOPED_TRACE(name(dt[0]) + "x" + name(dt[1]) + "->" + name(dt[2]) + " m " +
                     std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
                     std::to_string(c.k) + (c.ta ? " A^T" : "") + (c.tb ? " B^T" : "") + " beta " +
                     fmt(beta));
        const int64_t batch = product(c.lead);
        const auto av = random_rounded(rng, static_cast<size_t>(batch * c.m * c.k), -3, 2, dt[0]);
        const auto bv = random_rounded(rng, static_cast<size_t>(batch * c.k * c.n), -3, 2, dt[1]);
        const auto cv = random_rounded(rng, static_cast<size_t>(batch * c.m * c.n), -3, 2, dt[2]);
        const Shape as = c.ta ? batched_shape(c.lead, c.k, c.m) : batched_shape(c.lead, c.m, c.k);
        const Shape bs = c.tb ? batched_shape(c.lead, c.n, c.k) : batched_shape(c.lead, c.k, c.n);
        Tensor a = upload_values(*be, as, dt[0], av);
        Tensor b = upload_values(*be, bs, dt[1], bv);
        Tensor cc = upload_values(*be, batched_shape(c.lead, c.m, c.n), dt[2], cv);
        be->gemm_batched(a, c.ta, b, c.tb, cc, alpha, beta);
        const auto got = download_values(*be, cc);
        const auto got_bits = download_bits(*be, cc);
        ErrorBudget budget;
        BitwiseCheck same_as_gemm(dt[2]);
        const double g = gamma(static_cast<double>(c.k + 2));
        for (int64_t i = 0; i < batch; ++i) {
          const float* ap = av.data() + i * c.m * c.k;
          const float* bp = bv.data() + i * c.k * c.n;
          for (int64_t r = 0; r < c.m; ++r) {
            for (int64_t q = 0; q < c.n; ++q) {
              double sum = 0, w = 0;
              for (int64_t l = 0; l < c.k; ++l) {
                const double x = c.ta ? ap[l * c.m + r] : ap[r * c.k + l];
                const double y = c.tb ? bp[q * c.k + l] : bp[l * c.n + q];
                sum += x * y;
                w += std::fabs(x * y);
              }
              const size_t o = static_cast<size_t>((i * c.m + r) * c.n + q);
              const double ref = alpha * sum + beta * static_cast<double>(cv[o]);
              w = std::fabs(alpha) * w + std::fabs(beta * static_cast<double>(cv[o]));
              budget.add(o, got[o], ref, with_output_rounding(ref, g * w, dt[2]));
            }
          }
          // The same matrix through gemm: the same rounding rules, bit for bit.
          Tensor a2 = upload_values(*be, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, dt[0],
                                    std::vector<float>(ap, ap + c.m * c.k));
          Tensor b2 = upload_values(*be, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, dt[1],
                                    std::vector<float>(bp, bp + c.k * c.n));
          Tensor c2 = upload_values(
              *be, {c.m, c.n}, dt[2],
              std::vector<float>(cv.begin() + i * c.m * c.n, cv.begin() + (i + 1) * c.m * c.n));
          be->gemm(a2, c.ta, b2, c.tb, c2, alpha, beta);
          const auto want = download_bits(*be, c2);
          for (size_t o = 0; o < want.size(); ++o) {
            same_as_gemm.add(o, got_bits[static_cast<size_t>(i * c.m * c.n) + o], want[o]);
          }
        }
        EXPECT_TRUE(budget.ok()) << budget.report();
        EXPECT_TRUE(same_as_gemm.ok()) << "vs gemm: " << same_as_gemm.report();
      }
    }
  }
}

// The batch split over threads (more matrices than threads) and the single-matrix path give the
// same bits for 1 and 2 threads; the portable level (OpenBLAS per matrix) stays within the bound
// above (checked by the fp64 comparison on its result).
TEST(GemmBatched, SameBitsForOneAndTwoThreadsAndPortableWithinBound) {
  std::mt19937_64 rng(0x6b02);
  const int64_t batch = 12, m = 64, n = 64, k = 32;
  const auto av = random_rounded(rng, static_cast<size_t>(batch * m * k), -3, 2, DType::f16);
  const auto bv = random_rounded(rng, static_cast<size_t>(batch * k * n), -3, 2, DType::f16);
  std::vector<std::vector<uint32_t>> results;
  for (int threads : {1, 2}) {
    auto be = cpu_backend(threads);
    Tensor c = be->empty({3, 4, m, n}, DType::f32);
    be->gemm_batched(upload_values(*be, {3, 4, m, k}, DType::f16, av), false,
                     upload_values(*be, {3, 4, n, k}, DType::f16, bv), true, c);
    results.push_back(download_bits(*be, c));
  }
  BitwiseCheck check(DType::f32);
  check.add_all(results[1], results[0]);
  EXPECT_TRUE(check.ok()) << check.report();

  std::unique_ptr<Backend> portable =
      std::make_unique<cpu::CpuBackend>(2, cpu::CpuKernels::portable);
  Tensor c = portable->empty({3, 4, m, n}, DType::f16);
  portable->gemm_batched(upload_values(*portable, {3, 4, m, k}, DType::f16, av), false,
                         upload_values(*portable, {3, 4, n, k}, DType::f16, bv), true, c);
  const auto got = download_values(*portable, c);
  ErrorBudget budget;
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t q = 0; q < n; ++q) {
        double sum = 0, w = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double p = static_cast<double>(av[(i * m + r) * k + l]) * bv[(i * n + q) * k + l];
          sum += p;
          w += std::fabs(p);
        }
        const size_t o = static_cast<size_t>((i * m + r) * n + q);
        budget.add(o, got[o], sum,
                   with_output_rounding(sum, gamma(static_cast<double>(k + 2)) * w, DType::f16));
      }
    }
  }
  EXPECT_TRUE(budget.ok()) << "portable: " << budget.report();
}

TEST(GemmBatched, EmptyInnerDimensionScalesByBeta) {
  auto be = cpu_backend();
  Tensor c = upload_values(*be, {2, 2, 2}, DType::f16, {1, 2, 3, 4, 5, 6, 7, 8});
  be->gemm_batched(be->zeros({2, 2, 0}, DType::f16), false, be->zeros({2, 0, 2}, DType::f16), false,
                   c, 1.0f, 0.5f);
  const auto got = download_values(*be, c);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 0.5f * static_cast<float>(i + 1));
}

TEST(GemmBatched, RejectsMismatchedOperands) {
  auto be = cpu_backend();
  Tensor a = be->zeros({4, 3, 5}, DType::f16);
  Tensor b = be->zeros({4, 5, 2}, DType::f16);
  Tensor c = be->zeros({4, 3, 2}, DType::f32);
  const std::string op = "gemm_batched";
  be->gemm_batched(a, false, b, false, c);  // the valid call
  expect_invalid_naming([&] { be->gemm_batched(a, true, b, false, c); }, op, "trans_a");
  expect_invalid_naming(
      [&] {
        be->gemm_batched(a, false, be->zeros({3, 5, 2}, DType::f16), false, c);
      },
      op, "batch counts");
  expect_invalid_naming(
      [&] {
        be->gemm_batched(a, false, b, false, be->zeros({4, 3, 3}, DType::f32));
      },
      op, "C columns");
  expect_invalid_naming(
      [&] {
        be->gemm_batched(be->zeros({3, 5}, DType::f16), false, b, false, c);
      },
      op, "rank 2");
  expect_invalid_naming(
      [&] {
        be->gemm_batched(a, false, b, false, be->zeros({4, 3, 2}, DType::i32));
      },
      op, "i32 C");
  Tensor sq = be->zeros({4, 3, 3}, DType::f32);
  expect_invalid_naming([&] { be->gemm_batched(sq, false, sq, false, sq); }, op, "C aliasing A");
}

// ============================================================================================
// heads_from_rows / heads_to_rows
// ============================================================================================

TEST(Heads, CopiesFollowTheIndexFormulaBitwise) {
  std::mt19937_64 rng(0x4e01);
  const int64_t B = 2, T = 5, H = 3, hs = 4, C = H * hs, W = 3 * C;
  for (DType d : {DType::f32, DType::bf16, DType::i32}) {
    SCOPED_TRACE(name(d));
    auto be = cpu_backend();
    std::vector<uint32_t> rows(static_cast<size_t>(B * T * W));
    for (uint32_t& v : rows)
      v = static_cast<uint32_t>(rng()) & (dtype_size(d) == 4 ? ~0u : 0xffffu);
    Tensor src = upload_bits(*be, {B * T, W}, d, rows);
    for (int64_t column : {int64_t{0}, C, 2 * C}) {
      Tensor heads = be->empty({B, H, T, hs}, d);
      be->heads_from_rows(src, column, heads);
      const auto got = download_bits(*be, heads);
      BitwiseCheck from(d == DType::i32 ? DType::f32 : d);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t e = 0; e < hs; ++e) {
              const size_t o = static_cast<size_t>(((b * H + h) * T + t) * hs + e);
              from.add(o, got[o], rows[static_cast<size_t>((b * T + t) * W + column + h * hs + e)]);
            }
      EXPECT_TRUE(from.ok()) << "column " << column << ": " << from.report();

      // Back: the heads' values land at their columns, every other column keeps its bits.
      std::vector<uint32_t> other(rows.size());
      for (uint32_t& v : other)
        v = static_cast<uint32_t>(rng()) & (dtype_size(d) == 4 ? ~0u : 0xffffu);
      Tensor dst = upload_bits(*be, {B * T, W}, d, other);
      be->heads_to_rows(heads, dst, column);
      const auto back = download_bits(*be, dst);
      BitwiseCheck to(d == DType::i32 ? DType::f32 : d);
      for (int64_t r = 0; r < B * T; ++r)
        for (int64_t j = 0; j < W; ++j) {
          const size_t o = static_cast<size_t>(r * W + j);
          const bool inside = j >= column && j < column + C;
          to.add(o, back[o], inside ? rows[o] : other[o]);
        }
      EXPECT_TRUE(to.ok()) << "column " << column << ": " << to.report();
    }
  }
}

TEST(Heads, RejectsMismatchedOperands) {
  auto be = cpu_backend();
  Tensor rows = be->zeros({6, 12}, DType::f16);
  Tensor heads = be->zeros({2, 2, 3, 3}, DType::f16);
  be->heads_from_rows(rows, 6, heads);  // columns [6, 12): valid
  expect_invalid_naming([&] { be->heads_from_rows(rows, 7, heads); }, "heads_from_rows",
                        "columns past the width");
  expect_invalid_naming([&] { be->heads_from_rows(rows, -1, heads); }, "heads_from_rows",
                        "negative column");
  expect_invalid_naming(
      [&] {
        be->heads_from_rows(rows, 0, be->zeros({2, 2, 3, 3}, DType::f32));
      },
      "heads_from_rows", "dtype");
  expect_invalid_naming(
      [&] {
        be->heads_to_rows(be->zeros({2, 2, 4, 3}, DType::f16), rows, 0);
      },
      "heads_to_rows", "B*T rows");
  expect_invalid_naming(
      [&] {
        be->heads_to_rows(be->zeros({2, 2, 9}, DType::f16), rows, 0);
      },
      "heads_to_rows", "rank 3 heads");
  expect_invalid_naming(
      [&] {
        be->heads_to_rows(rows.reshape({2, 2, 3, 6}), rows, 0);
      },
      "heads_to_rows", "aliasing");
}

// ============================================================================================
// causal_softmax_forward / causal_softmax_backward
// ============================================================================================

// The scaled score the op forms: the float product (the double product of two floats rounded
// once), rounded to the scores' dtype when round_scaled.
float scaled_score(float x, float scale, bool round_scaled, DType d) {
  const float s = static_cast<float>(static_cast<double>(x) * scale);
  return round_scaled ? round_to(s, d) : s;
}

// Softmax of one row's prefix in double from the op's scaled scores. Float error of p_j: s_j - max
// rounds once (u |s_j - max|, <= u D with D = max_k |s_k - max|), which expf turns into a relative
// u D, plus expf's ulp (2u relative); the sum of i + 1 such terms adds gamma_{i+1} and its terms'
// own 2u + u D; the division u. So |p - ref| <= ref (2 u D + 5u + gamma_{i+1}), doubled for the
// second-order terms; then the output rounding.
TEST(CausalSoftmax, ForwardMatchesDoubleWithinDerivedBoundWithExactMask) {
  std::mt19937_64 rng(0x5f01);
  auto be = cpu_backend();
  const float scale = 1.0f / std::sqrt(32.0f);
  for (DType ds : kFloatDTypes) {
    for (bool lowp_probs : {false, true}) {
      const DType dp = lowp_probs ? ds : DType::f32;
      if (lowp_probs && ds == DType::f32) continue;
      for (bool round_scaled : {false, true}) {
        for (float offset : {0.0f, 60.0f}) {
          SCOPED_TRACE(name(ds) + " -> " + name(dp) + (round_scaled ? " round_scaled" : "") +
                       " offset " + fmt(offset));
          const int64_t N = 3, T = 37;
          auto xv = random_rounded(rng, static_cast<size_t>(N * T * T), -2, 4, ds);
          for (float& v : xv) v = round_to(v + offset, ds);
          Tensor x = upload_values(*be, {N, T, T}, ds, xv);
          Tensor p = be->empty({N, T, T}, dp);
          be->fill(p, kNaN);
          be->causal_softmax_forward(x, scale, round_scaled, p);
          const auto got = download_values(*be, p);
          const auto bits = download_bits(*be, p);
          ErrorBudget budget;
          BitwiseCheck mask(dp);
          std::vector<double> s(static_cast<size_t>(T));
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t i = 0; i < T; ++i) {
              const size_t row = static_cast<size_t>((n * T + i) * T);
              double mx = -INFINITY;
              for (int64_t j = 0; j <= i; ++j) {
                s[j] = scaled_score(xv[row + j], scale, round_scaled, ds);
                mx = std::max(mx, s[j]);
              }
              double sum = 0, spread = 0;
              for (int64_t j = 0; j <= i; ++j) {
                sum += std::exp(s[j] - mx);
                spread = std::max(spread, mx - s[j]);
              }
              for (int64_t j = 0; j <= i; ++j) {
                const double ref = std::exp(s[j] - mx) / sum;
                const double err =
                    2 * ref * (2 * kU * spread + 5 * kU + gamma(static_cast<double>(i + 1)));
                budget.add(row + j, got[row + j], ref, with_output_rounding(ref, err, dp));
              }
              for (int64_t j = i + 1; j < T; ++j) mask.add(row + j, bits[row + j], 0);
            }
          }
          EXPECT_TRUE(budget.ok()) << budget.report();
          EXPECT_TRUE(mask.ok()) << "above the diagonal: " << mask.report();
        }
      }
    }
  }
}

// round_scaled is visible: with f16 scores the two settings differ by more than the bound, and
// each matches only its own reference (checked above); here, that they differ at all, and that
// for f32 scores the flag changes nothing (rounding to f32 is the identity).
TEST(CausalSoftmax, RoundScaledRoundsToTheScoresDtypeOnly) {
  std::mt19937_64 rng(0x5f02);
  auto be = cpu_backend();
  const float scale = 1.0f / std::sqrt(24.0f);
  for (DType ds : kFloatDTypes) {
    const auto xv = random_rounded(rng, 2 * 16 * 16, 0, 4, ds);
    Tensor x = upload_values(*be, {2, 16, 16}, ds, xv);
    Tensor on = be->empty({2, 16, 16}, DType::f32), off = be->empty({2, 16, 16}, DType::f32);
    be->causal_softmax_forward(x, scale, true, on);
    be->causal_softmax_forward(x, scale, false, off);
    const auto a = download_bits(*be, on), b = download_bits(*be, off);
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    if (ds == DType::f32) {
      EXPECT_EQ(differ, 0u) << "f32 scores";
    } else {
      EXPECT_GT(differ, a.size() / 4) << name(ds) << " scores: round_scaled changed nothing";
    }
  }
}

// The documented float order, restated: s_j and the max, e_j = expf(s_j - max) summed from 0 in
// ascending j, p_j = round(e_j / sum). Bitwise for 1 and 2 threads, and in place (probs = scores).
// T = 29: rows end inside a 16-lane tile, and the 16-row blocks the vector path sums at once
// (one row per lane) straddle the heads.
TEST(CausalSoftmax, ForwardIsTheDocumentedFloatOrderBitwiseAndInPlace) {
  for (const auto& [N, T] : {std::pair<int64_t, int64_t>{8, 64}, {7, 29}}) {
    SCOPED_TRACE("T " + std::to_string(T));
    std::mt19937_64 rng(0x5f03);
    const float scale = 0.125f;
    const auto xv = random_rounded(rng, static_cast<size_t>(N * T * T), -3, 5, DType::f32);
    std::vector<uint32_t> want(xv.size());
    std::vector<float> e(static_cast<size_t>(T));
    for (int64_t r = 0; r < N * T; ++r) {
      const int64_t i = r % T;
      const float* x = xv.data() + r * T;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        e[j] = x[j] * scale;
        mx = std::max(mx, e[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j <= i; ++j) {
        e[j] = expf(e[j] - mx);
        sum = sum + e[j];
      }
      for (int64_t j = 0; j < T; ++j) want[r * T + j] = float_bits(j <= i ? e[j] / sum : 0.0f);
    }
    for (int threads : {1, 2}) {
      auto be = cpu_backend(threads);
      Tensor x = upload_values(*be, {N, T, T}, DType::f32, xv);
      Tensor p = be->empty({N, T, T}, DType::f32);
      be->causal_softmax_forward(x, scale, false, p);
      BitwiseCheck check(DType::f32);
      check.add_all(download_bits(*be, p), want);
      EXPECT_TRUE(check.ok()) << "threads " << threads << ": " << check.report();
      be->causal_softmax_forward(x, scale, false, x);
      BitwiseCheck in_place(DType::f32);
      in_place.add_all(download_bits(*be, x), want);
      EXPECT_TRUE(in_place.ok()) << "in place, threads " << threads << ": " << in_place.report();
    }
  }
}

// Backward against double from the given (rounded) probs and dprobs: g_j = p_j (dp_j - dot),
// dot = sum_{k <= i} dp_k p_k. Float: the dot within gamma_{i+1} S, S = sum |dp_k p_k|; the
// difference and the product round once each: |g - ref| <= p_j (gamma_{i+1} S + u |dp_j - dot|)
// (1 + u) + u |g| =: E. With round_scaled, g is rounded to the output dtype first (u_out (|g| + E)
// + eta_out more); the product with scale rounds once in float, then to the output.
TEST(CausalSoftmax, BackwardMatchesDoubleWithinDerivedBoundWithExactMask) {
  std::mt19937_64 rng(0x5f04);
  auto be = cpu_backend();
  const float scale = 1.0f / std::sqrt(48.0f);
  const int64_t N = 3, T = 29;
  for (DType dpr : {DType::f32, DType::f16}) {
    for (DType dg : kFloatDTypes) {
      for (DType dout : kFloatDTypes) {
        for (bool round_scaled : {false, true}) {
          SCOPED_TRACE("probs " + name(dpr) + " dprobs " + name(dg) + " dscores " + name(dout) +
                       (round_scaled ? " round_scaled" : ""));
          // Probabilities of a real softmax row (the op's input in training).
          std::vector<float> pv(static_cast<size_t>(N * T * T), 0.0f);
          for (int64_t r = 0; r < N * T; ++r) {
            const int64_t i = r % T;
            double sum = 0;
            std::vector<double> ex(static_cast<size_t>(i + 1));
            for (int64_t j = 0; j <= i; ++j) sum += ex[j] = std::exp(random_value(rng, -2, 2));
            for (int64_t j = 0; j <= i; ++j)
              pv[r * T + j] = round_to(static_cast<float>(ex[j] / sum), dpr);
          }
          const auto gv = random_rounded(rng, pv.size(), -8, 4, dg);
          Tensor p = upload_values(*be, {N, T, T}, dpr, pv);
          Tensor g = upload_values(*be, {N, T, T}, dg, gv);
          Tensor out = be->empty({N, T, T}, dout);
          be->fill(out, kNaN);
          be->causal_softmax_backward(p, g, scale, round_scaled, out);
          const auto got = download_values(*be, out);
          const auto bits = download_bits(*be, out);
          ErrorBudget budget;
          BitwiseCheck mask(dout);
          const double uo = unit_roundoff(dout), eo = half_min_subnormal(dout);
          for (int64_t r = 0; r < N * T; ++r) {
            const int64_t i = r % T;
            const size_t row = static_cast<size_t>(r * T);
            double dot = 0, S = 0;
            for (int64_t k = 0; k <= i; ++k) {
              dot += static_cast<double>(gv[row + k]) * pv[row + k];
              S += std::fabs(static_cast<double>(gv[row + k]) * pv[row + k]);
            }
            for (int64_t j = 0; j <= i; ++j) {
              const double gr = pv[row + j] * (gv[row + j] - dot);
              double e =
                  pv[row + j] *
                      (gamma(static_cast<double>(i + 1)) * S + kU * std::fabs(gv[row + j] - dot)) *
                      (1 + kU) +
                  kU * std::fabs(gr);
              if (round_scaled) e += uo * (std::fabs(gr) + e) + eo;
              const double ref = gr * scale;
              const double err = 2 * (e * scale + kU * std::fabs(ref));
              budget.add(row + j, got[row + j], ref, with_output_rounding(ref, err, dout));
            }
            for (int64_t j = i + 1; j < T; ++j) mask.add(row + j, bits[row + j], 0);
          }
          EXPECT_TRUE(budget.ok()) << budget.report();
          EXPECT_TRUE(mask.ok()) << "above the diagonal: " << mask.report();
        }
      }
    }
  }
}

// The documented float order, restated: dot from 0 in ascending k, g_j = p_j * (dp_j - dot),
// rounded to the output dtype when round_scaled, times scale, rounded. Bitwise, 1 and 2 threads;
// T = 37 as the forward's 29.
TEST(CausalSoftmax, BackwardIsTheDocumentedFloatOrderBitwise) {
  for (const auto& [N, T] : {std::pair<int64_t, int64_t>{6, 64}, {5, 37}}) {
    SCOPED_TRACE("T " + std::to_string(T));
    std::mt19937_64 rng(0x5f05);
    const float scale = 0.17677669f;
    const auto pv = random_rounded(rng, static_cast<size_t>(N * T * T), -8, -1, DType::f32);
    const auto gv = random_rounded(rng, pv.size(), -6, 3, DType::f16);
    for (bool round_scaled : {false, true}) {
      std::vector<uint32_t> want(pv.size());
      for (int64_t r = 0; r < N * T; ++r) {
        const int64_t i = r % T;
        float dot = 0.0f;
        for (int64_t k = 0; k <= i; ++k) dot = dot + gv[r * T + k] * pv[r * T + k];
        for (int64_t j = 0; j < T; ++j) {
          float v = 0.0f;
          if (j <= i) {
            v = pv[r * T + j] * (gv[r * T + j] - dot);
            if (round_scaled) v = round_to(v, DType::f16);
            v = v * scale;
          }
          want[r * T + j] = encode(v, DType::f16);
        }
      }
      for (int threads : {1, 2}) {
        auto be = cpu_backend(threads);
        Tensor out = be->empty({N, T, T}, DType::f16);
        be->causal_softmax_backward(upload_values(*be, {N, T, T}, DType::f32, pv),
                                    upload_values(*be, {N, T, T}, DType::f16, gv), scale,
                                    round_scaled, out);
        BitwiseCheck check(DType::f16);
        check.add_all(download_bits(*be, out), want);
        EXPECT_TRUE(check.ok()) << "threads " << threads << (round_scaled ? " round_scaled" : "")
                                << ": " << check.report();
      }
    }
  }
}

TEST(CausalSoftmax, RejectsMismatchedOperands) {
  auto be = cpu_backend();
  Tensor s = be->zeros({2, 4, 4}, DType::f16);
  Tensor p = be->zeros({2, 4, 4}, DType::f32);
  const std::string fwd = "causal_softmax_forward", bwd = "causal_softmax_backward";
  expect_invalid_naming(
      [&] {
        be->causal_softmax_forward(be->zeros({2, 4, 5}, DType::f16), 1, false, p);
      },
      fwd, "not square");
  expect_invalid_naming(
      [&] {
        be->causal_softmax_forward(s, 1, false, be->zeros({2, 4, 4}, DType::bf16));
      },
      fwd, "probs neither f32 nor the scores' dtype");
  expect_invalid_naming(
      [&] {
        be->causal_softmax_forward(s, 1, false, be->zeros({1, 4, 4}, DType::f32));
      },
      fwd, "shape");
  expect_invalid_naming(
      [&] {
        be->causal_softmax_forward(be->zeros({2, 4, 4}, DType::i32), 1, false, p);
      },
      fwd, "i32 scores");
  Tensor big = be->zeros({3, 4, 4}, DType::f32);
  expect_invalid_naming(
      [&] {
        be->causal_softmax_forward(big.view(0, {2, 4, 4}), 1, false, big.view(16, {2, 4, 4}));
      },
      fwd, "partial overlap");
  // The same elements in the same dtype: in place, accepted.
  be->causal_softmax_forward(big.view(0, {2, 4, 4}), 1, false, big.view(0, {2, 4, 4}));
  expect_invalid_naming([&] { be->causal_softmax_backward(p, p, 1, false, p); }, bwd,
                        "dscores aliasing");
  expect_invalid_naming(
      [&] {
        be->causal_softmax_backward(p, s, 1, false, be->zeros({2, 3, 3}, DType::f32));
      },
      bwd, "dscores shape");
  expect_invalid_naming(
      [&] {
        be->causal_softmax_backward(p, be->zeros({2, 4}, DType::f32), 1, false, s);
      },
      bwd, "dprobs rank");
}

// ============================================================================================
// steady state
// ============================================================================================

TEST(TransformerOps, SteadyStateDoesNotAllocate) {
  auto be = cpu_backend();
  const int64_t B = 2, T = 16, C = 32, H = 4, hs = 8, V = 50;
  std::mt19937_64 rng(0x7a01);
  Tensor tokens = upload_i32(*be, {B, T}, random_tokens(rng, B * T, V));
  Tensor wte = be->zeros({V, C}, DType::f32), wpe = be->zeros({T, C}, DType::f32);
  Tensor x = be->zeros({B * T, C}, DType::f32), qkv = be->zeros({B * T, 3 * C}, DType::f16);
  Tensor q = be->zeros({B, H, T, hs}, DType::f16), k = be->zeros({B, H, T, hs}, DType::f16);
  Tensor att = be->zeros({B, H, T, T}, DType::f16), probs = be->zeros({B * H, T, T}, DType::f32);
  Tensor dprobs = be->zeros({B * H, T, T}, DType::f32), datt = be->zeros({B * H, T, T}, DType::f16);
  Tensor h = be->zeros({B * T, 4 * C}, DType::f16);
  const auto step = [&] {
    be->embedding_forward(tokens, wte, wpe, x);
    be->heads_from_rows(qkv, 0, q);
    be->heads_from_rows(qkv, C, k);
    be->gemm_batched(q, false, k, true, att);
    be->causal_softmax_forward(att.reshape({B * H, T, T}), 0.35f, true, probs);
    be->causal_softmax_backward(probs, dprobs, 0.35f, true, datt);
    be->heads_to_rows(q, qkv, 2 * C);
    be->activation_forward(nn::ActivationKind::gelu_tanh, h, h);
    be->activation_backward(nn::ActivationKind::gelu_tanh, h, Tensor{}, h, h);
    be->embedding_backward(tokens, x, wte, wpe);
  };
  // Workspaces grow in the first call. gemm_batched's engines belong to chunks of the batch, not
  // to the thread that happens to run one (run_chunked), so one step sizes them all however the
  // threads are scheduled (a loaded machine once left a thread idle through four warm-up steps,
  // and its first task then allocated); several steps are counted.
  step();
  const size_t before = g_allocations.load();
  for (int i = 0; i < 8; ++i) step();
  EXPECT_EQ(g_allocations.load() - before, 0u) << "operator new calls in steady-state steps";
}

}  // namespace
}  // namespace ampctl::test
