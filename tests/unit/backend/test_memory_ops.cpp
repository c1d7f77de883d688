// Casts, fill, the elementwise ops and global_norm of the CPU backend.
//
// Every elementwise op is specified as "widen to float, do the float32 arithmetic, round once to
// the output dtype", so the reference is a scalar loop over half.h's conversions and the test is
// bitwise (a budget of 0 bits). Where a result can be NaN the payload is left to the hardware
// (IEEE 754 does not fix it) and any NaN matches any NaN; pure conversions are bitwise, NaNs
// included, because half.h fixes their payload rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- references computed another way ----

// A double -> f16/bf16 rounding to nearest, ties to even, by search in the exhaustive table of
// the format's non-negative finite values (increasing with the bit pattern): independent of
// half.h's bit tricks. Differences v - lo and hi - v are exact in double: lo, hi and v are all
// multiples of ulp(v)'s double granule, and fewer than 2^53 of them. Overflow: at or above
// max + ulp(max)/2 rounds to inf (the tie goes to inf because max has an odd significand).
uint16_t round_double_16(double v, DType d) {
  static const auto table = [] {
    std::vector<std::vector<double>> t(2);
    for (int fmt = 0; fmt < 2; ++fmt) {
      const uint32_t inf_bits = fmt == 0 ? 0x7c00u : 0x7f80u;
      for (uint32_t b = 0; b < inf_bits; ++b) {
        t[static_cast<size_t>(fmt)].push_back(
            fmt == 0 ? half_bits_to_float_portable(static_cast<uint16_t>(b))
                     : bf16_bits_to_float(static_cast<uint16_t>(b)));
      }
    }
    return t;
  }();
  const std::vector<double>& vals = table[d == DType::f16 ? 0 : 1];
  const uint16_t inf_bits = d == DType::f16 ? 0x7c00 : 0x7f80;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  const double max = vals.back();
  if (a > max) {
    const double threshold = max + (max - vals[vals.size() - 2]) / 2;
    return static_cast<uint16_t>(sign | (a >= threshold ? inf_bits : vals.size() - 1));
  }
  const size_t lo =
      static_cast<size_t>(std::upper_bound(vals.begin(), vals.end(), a) - vals.begin()) - 1;
  if (vals[lo] == a) return static_cast<uint16_t>(sign | lo);
  const double dlo = a - vals[lo], dhi = vals[lo + 1] - a;
  const size_t pick = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>(sign | pick);
}

uint32_t round_double(double v, DType d) {
  if (d == DType::f32) return float_bits(static_cast<float>(v));  // one IEEE rounding
  return round_double_16(v, d);
}

// Random f32 bit patterns: half fully random (every exponent, NaN and inf included), half with the
// exponent in [2^-27, 2^18) so f16 normals, subnormals, ties and overflow are all well covered.
std::vector<uint32_t> random_f32_bits(std::mt19937_64& rng, size_t n) {
  std::vector<uint32_t> v(n);
  std::uniform_int_distribution<uint32_t> all;
  std::uniform_int_distribution<uint32_t> exp(127 - 27, 127 + 17);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = all(rng);
    v[i] = i % 2 ? r : (r & 0x807fffffu) | (exp(rng) << 23);
  }
  // Special values: zeros, infs, NaNs with payloads, f16 overflow threshold and its neighbour,
  // exact f16 and bf16 ties, smallest f16 subnormal and half of it, float subnormals.
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0xffc00001u, 0x7f800001u, 0x7fa5a5a5u, 0x477ff000u, 0x477fefffu,
                               0xc77ff000u, 0x3f801000u, 0x3f803000u, 0x3f808000u, 0x3f818000u,
                               0x33800000u, 0x33000000u, 0x33000001u, 0x00000001u, 0x807fffffu,
                               0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) v[i * 7 % n] = specials[i];
  return v;
}

std::vector<uint32_t> all_16bit_patterns() {
  std::vector<uint32_t> v(65536);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

// ---- cast ----

TEST(Cast, FloatDTypesMatchHalfHBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xca57);
  for (DType src : kFloatDTypes) {
    // Every 16-bit pattern for f16/bf16 sources; random and special patterns for f32.
    const std::vector<uint32_t> in =
        src == DType::f32 ? random_f32_bits(rng, 200003) : all_16bit_patterns();
    const Shape shape{static_cast<int64_t>(in.size())};
    Tensor x = upload_bits(*be, shape, src, in);
    for (DType dst : kFloatDTypes) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst));
      Tensor y = be->empty(shape, dst);
      be->cast(x, y);
      std::vector<uint32_t> expected(in.size());
      for (size_t i = 0; i < in.size(); ++i) expected[i] = encode(decode(in[i], src), dst);
      // A same-dtype cast may copy a NaN verbatim or widen-and-round it (quieting it): both are
      // "the value converted", so only there any NaN matches any NaN.
      BitwiseCheck check(dst, /*nan_any=*/src == dst);
      check.add_all(download_bits(*be, y), expected);
      EXPECT_TRUE(check.ok()) << check.report();
    }
  }
}

TEST(Cast, I32AndF32) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x132f);
  // i32 -> f32: every int32 range, large values round to nearest even (2^24 + 1 is a tie).
  std::vector<int32_t> ints(100003);
  std::uniform_int_distribution<int32_t> all(std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max());
  std::uniform_int_distribution<int32_t> small(-(1 << 25), 1 << 25);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = i % 2 ? all(rng) : small(rng);
  const int32_t specials[] = {0,
                              1,
                              -1,
                              (1 << 24) + 1,
                              (1 << 24) + 3,
                              -(1 << 24) - 1,
                              std::numeric_limits<int32_t>::max(),
                              std::numeric_limits<int32_t>::min()};
  for (size_t i = 0; i < std::size(specials); ++i) ints[i * 11] = specials[i];
  const Shape shape{static_cast<int64_t>(ints.size())};
  Tensor ti = upload_i32(*be, shape, ints);
  Tensor tf = be->empty(shape, DType::f32);
  be->cast(ti, tf);
  std::vector<uint32_t> expected(ints.size());
  for (size_t i = 0; i < ints.size(); ++i) {
    // The nearest float, ties to even, computed in double (int32 is exact in double; the one
    // double -> float rounding is then the only one).
    expected[i] = float_bits(static_cast<float>(static_cast<double>(ints[i])));
  }
  BitwiseCheck check(DType::f32);
  check.add_all(download_bits(*be, tf), expected);
  EXPECT_TRUE(check.ok()) << "i32 -> f32: " << check.report();

  // f32 -> i32 on integral floats (the only inputs whose result the contract fixes): exact.
  std::vector<float> fl(50001);
  std::uniform_int_distribution<int32_t> range(-(1 << 30), 1 << 30);
  for (float& f : fl) f = static_cast<float>(range(rng));  // integral, |f| <= 2^30: fits i32
  const Shape fshape{static_cast<int64_t>(fl.size())};
  Tensor src = be->from_host(fshape, DType::f32, fl.data());
  Tensor dst = be->empty(fshape, DType::i32);
  be->cast(src, dst);
  const std::vector<int32_t> got = download_i32(*be, dst);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < fl.size(); ++i) {
    if (got[i] != static_cast<int32_t>(fl[i]) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << "f32 -> i32: first mismatch at " << first << ": " << fmt(fl[first])
                     << " -> " << got[first];
}

TEST(Cast, NumelMismatchThrows) {
  auto be = cpu_backend();
  Tensor a = be->zeros({5}, DType::f32);
  Tensor b = be->zeros({6}, DType::f16);
  expect_invalid_argument([&] { be->cast(a, b); }, "cast f32[5] -> f16[6]");
}

// ---- fill ----

// fill(value) follows PyTorch's fill_: the double scalar becomes a float first and the float is
// then rounded to the dtype (c10::Half and c10::BFloat16 are built from a float). The reference
// does the second step with the exhaustive table above, not half.h. The traps are values where
// that double rounding differs from rounding the double once, so the test sees which one the
// backend does (and checks that they really differ).
TEST(Fill, RoundsThroughFloatAsPyTorch) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xf111);
  struct Trap {
    double value;
    DType dtype;
  };
  const Trap traps[] = {
      {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), DType::f16},  // float(v) is a tie -> 1
      {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), DType::bf16},  // the same for bf16
      {std::ldexp(1.0, -25) + std::ldexp(1.0, -60), DType::f16},  // subnormal tie via float -> 0
      {65519.999999, DType::f16},  // float(v) = 65520, the overflow threshold -> inf
  };
  std::vector<double> values = {
      1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -60),  // f32: just above a tie -> up
      std::ldexp(1.0, -25),                               // exact tie at half the smallest: -> 0
      -std::ldexp(3.0, -25),                              // tie between 2^-24 and 2^-23: -> even
      65520.0,                                            // f16: the threshold -> inf
      -65520.0,
      65519.0,  // f16: -> 65504
      1e300,    // inf in every float dtype
      -1e-300,  // -0 in every float dtype
      0.0,
      -0.0,
      1.0 / 3.0,
      -2.5e-3,
  };
  for (const Trap& t : traps) {
    values.push_back(t.value);
    ASSERT_NE(round_double(t.value, t.dtype), round_double(static_cast<float>(t.value), t.dtype))
        << "trap " << fmt(t.value) << " does not tell one rounding from two";
  }
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> exp(-30, 20);
  for (int i = 0; i < 200; ++i) values.push_back(std::ldexp(mant(rng), exp(rng)));
  for (DType d : kFloatDTypes) {
    Tensor t = be->empty({37}, d);
    for (double v : values) {
      be->fill(t, v);
      const uint32_t expected = round_double(static_cast<double>(static_cast<float>(v)), d);
      BitwiseCheck check(d);
      for (size_t i = 0; const uint32_t b : download_bits(*be, t)) check.add(i++, b, expected);
      EXPECT_TRUE(check.ok()) << "fill(" << fmt(v) << ") into " << dtype_name(d) << ": "
                              << check.report();
    }
  }
}

// Every int32 value is integral, the extremes included.
TEST(Fill, I32IsExactOverTheWholeRange) {
  auto be = cpu_backend();
  Tensor ti = be->empty({13}, DType::i32);
  for (int32_t v :
       {-123456, 0, 7, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    be->fill(ti, static_cast<double>(v));
    for (int32_t got : download_i32(*be, ti)) ASSERT_EQ(got, v) << "fill(" << v << ") into i32";
  }
  expect_invalid_argument([&] { be->fill(ti, 2.5); }, "fill(2.5) into i32");
  expect_invalid_argument([&] { be->fill(ti, 2147483648.0); }, "fill(2^31) into i32");
}

// ---- mul_scalar_tensor ----

// x values over the f16 range with inf, -inf and NaN sprinkled in.
std::vector<float> scaled_inputs(std::mt19937_64& rng, size_t n) {
  std::vector<float> v = random_values(rng, n, -20, 14);
  for (size_t i = 0; i < n; i += 97)
    v[i] = (i / 97) % 3 == 0 ? kInf : (i / 97) % 3 == 1 ? -kInf : kNaN;
  return v;
}

// Scales from loss scaling (powers of two, their inverses) and arbitrary ones, some making f16
// overflow (x * 7.3e4) or underflow into subnormals (x * 3e-5).
const float kScales[] = {1.0f, 65536.0f, 1.0f / 65536.0f, 0.3f, 3e-5f, 7.3e4f, -1.7f, 0.0f};

TEST(MulScalarTensor, BitwiseMatchesScalarLoop) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x3a1e);
  for (DType dx : kFloatDTypes) {
    for (DType dout : kFloatDTypes) {
      for (size_t n : {1u, 31u, 4099u}) {
        for (float s : kScales) {
          SCOPED_TRACE(std::string(dtype_name(dx)) + " -> " + dtype_name(dout) + ", n " +
                       std::to_string(n) + ", scale " + fmt(s));
          std::vector<float> xv = scaled_inputs(rng, n);
          for (float& v : xv) v = round_to(v, dx);
          const Shape shape{static_cast<int64_t>(n)};
          Tensor x = upload_values(*be, shape, dx, xv);
          Tensor out = be->empty(shape, dout);
          be->mul_scalar_tensor(x, scalar_f32(*be, s), out);
          std::vector<uint32_t> expected(n);
          for (size_t i = 0; i < n; ++i) expected[i] = encode(xv[i] * s, dout);
          BitwiseCheck check(dout, /*nan_any=*/true);
          check.add_all(download_bits(*be, out), expected);
          EXPECT_TRUE(check.ok()) << check.report();
        }
      }
    }
  }
}

TEST(MulScalarTensor, InPlace) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x19a1);
  for (DType d : kFloatDTypes) {
    for (float s : kScales) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " in place, scale " + fmt(s));
      std::vector<float> xv = scaled_inputs(rng, 1027);
      for (float& v : xv) v = round_to(v, d);
      Tensor x = upload_values(*be, {1027}, d, xv);
      be->mul_scalar_tensor(x, scalar_f32(*be, s), x);
      std::vector<uint32_t> expected(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) expected[i] = encode(xv[i] * s, d);
      BitwiseCheck check(d, /*nan_any=*/true);
      check.add_all(download_bits(*be, x), expected);
      EXPECT_TRUE(check.ok()) << check.report();
    }
  }
}

// ---- add_ ----

// dst := round_dst(float(dst) + alpha * float(src)). The project compiles with -ffp-contract=off
// (and the GPU with --fmad=false), so alpha * src is rounded to float before the addition; the
// reference spells out the two float roundings and then the one to dst's dtype.
TEST(AddInPlace, BitwiseMatchesFloatArithmeticThenOneRounding) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xadd0);
  const float alphas[] = {1.0f, -1.0f, 0.5f, -0.3f, 1e-3f, 3.7f};
  for (DType dd : kFloatDTypes) {
    for (DType ds : kFloatDTypes) {
      for (size_t n : {1u, 33u, 5003u}) {
        for (float alpha : alphas) {
          SCOPED_TRACE(std::string("dst ") + dtype_name(dd) + ", src " + dtype_name(ds) + ", n " +
                       std::to_string(n) + ", alpha " + fmt(alpha));
          std::vector<float> dv = random_values(rng, n, -12, 8);
          std::vector<float> sv = random_values(rng, n, -12, 8);
          for (float& v : dv) v = round_to(v, dd);
          for (float& v : sv) v = round_to(v, ds);
          const Shape shape{static_cast<int64_t>(n)};
          Tensor dst = upload_values(*be, shape, dd, dv);
          Tensor src = upload_values(*be, shape, ds, sv);
          be->add_(dst, src, alpha);
          std::vector<uint32_t> expected(n);
          for (size_t i = 0; i < n; ++i) {
            const float scaled = alpha * sv[i];  // rounded to float here
            const float sum = dv[i] + scaled;    // and here
            expected[i] = encode(sum, dd);       // and once to dst's dtype
          }
          BitwiseCheck check(dd);
          check.add_all(download_bits(*be, dst), expected);
          EXPECT_TRUE(check.ok()) << check.report();
        }
      }
    }
  }
}

TEST(AddInPlace, DefaultAlphaIsOneAndNumelMismatchThrows) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xadd1);
  std::vector<float> dv = random_values(rng, 100, -4, 4), sv = random_values(rng, 100, -4, 4);
  Tensor dst = upload_values(*be, {100}, DType::f32, dv);
  be->add_(dst, upload_values(*be, {100}, DType::f32, sv));
  std::vector<uint32_t> expected(100);
  for (size_t i = 0; i < 100; ++i) expected[i] = float_bits(dv[i] + sv[i]);
  BitwiseCheck check(DType::f32);
  check.add_all(download_bits(*be, dst), expected);
  EXPECT_TRUE(check.ok()) << check.report();
  expect_invalid_argument([&] { be->add_(dst, be->zeros({99}, DType::f32)); }, "add_ 100 vs 99");
}

// ---- global_norm ----

// Bound on |got / ref - 1|. The backend sums squares in double: each square of a float is exact
// in double (48 significant bits), the n - 1 additions give a relative error <= gamma_{n}(2^-53)
// on the sum of squares (all terms are non-negative, so relative to the sum itself), which sqrt
// halves; sqrt in double adds 2^-53 and the one rounding to float adds u_f32 = 2^-24. The
// reference (long double, at least double) carries the same double-side terms again. So
// bound = 2^-24 + 2 * gamma_{n+2}(2^-53): ~6e-8, far below the 1e-6 a float accumulation or a
// second float rounding would need to hide.
double norm_rel_bound(size_t n) {
  const double u = std::ldexp(1.0, -53);
  const double g = (static_cast<double>(n) + 2) * u / (1 - (static_cast<double>(n) + 2) * u);
  return std::ldexp(1.0, -24) + 2 * g;
}

struct NormInput {
  std::vector<Tensor> tensors;
  long double sum_sq = 0;
  size_t count = 0;
};

NormInput norm_input(Backend& be, std::mt19937_64& rng,
                     const std::vector<std::pair<DType, Shape>>& specs, int emin, int emax) {
  NormInput in;
  for (const auto& [d, shape] : specs) {
    std::vector<float> v = random_values(rng, static_cast<size_t>(shape_numel(shape)), emin, emax);
    for (float& x : v) {
      x = round_to(x, d);
      in.sum_sq += static_cast<long double>(x) * x;
    }
    in.count += v.size();
    in.tensors.push_back(upload_values(be, shape, d, v));
  }
  return in;
}

TEST(GlobalNorm, MatchesFp64ReferenceWithinOneFloatRounding) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x9042);
  const std::vector<std::pair<DType, Shape>> specs = {
      {DType::f32, {1000}},    {DType::f16, {37, 5}},    {DType::bf16, {4099}},   {DType::f32, {1}},
      {DType::f16, {64, 129}}, {DType::bf16, {3, 3, 3}}, {DType::f32, {250, 257}}};
  // Magnitudes from tiny to large, and each dtype alone.
  for (const auto& [emin, emax] : {std::pair{-10, 10}, std::pair{-30, -20}, std::pair{5, 14}}) {
    for (int only = -1; only < static_cast<int>(specs.size()); ++only) {
      std::vector<std::pair<DType, Shape>> chosen;
      for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
        if (only < 0 || i == only) chosen.push_back(specs[static_cast<size_t>(i)]);
      }
      NormInput in = norm_input(*be, rng, chosen, emin, emax);
      Tensor out = be->empty({1}, DType::f32);
      be->global_norm(in.tensors, out);
      const double ref = static_cast<double>(std::sqrt(in.sum_sq));
      const double got = be->read_scalar_f32(out);
      ErrorBudget budget;
      budget.add(0, got / ref, 1.0, norm_rel_bound(in.count));
      EXPECT_TRUE(budget.ok()) << "exponents [" << emin << ", " << emax << "], tensors "
                               << (only < 0 ? std::string("all") : std::to_string(only)) << ", n "
                               << in.count << ": norm got " << fmt(got) << ", expected " << fmt(ref)
                               << "; as ratio: " << budget.report();
    }
  }
}

TEST(GlobalNorm, ExactCases) {
  auto be = cpu_backend();
  Tensor out = be->empty({1}, DType::f32);
  be->fill(out, 123.0);
  be->global_norm({}, out);
  EXPECT_EQ(float_bits(be->read_scalar_f32(out)), float_bits(0.0f)) << "empty list";

  // 3-4-5 and 5-12-13 across dtypes: the sum of squares and its root are exact.
  std::vector<Tensor> ts = {upload_values(*be, {2}, DType::f16, {3.0f, -4.0f}),
                            upload_values(*be, {1}, DType::bf16, {12.0f}),
                            upload_values(*be, {1}, DType::f32, {0.0f})};
  be->global_norm(ts, out);
  EXPECT_EQ(be->read_scalar_f32(out), 13.0f) << "sqrt(9 + 16 + 144)";

  // Empty tensors in the list contribute nothing.
  std::vector<Tensor> with_empty = {be->empty({0}, DType::f16), ts[0], be->empty({0}, DType::f32)};
  be->global_norm(with_empty, out);
  EXPECT_EQ(be->read_scalar_f32(out), 5.0f) << "sqrt(9 + 16) with empty tensors around";
}

// When the sum of squares is exact in double, the result must be sqrt(S) correctly rounded to
// float: one rounding of the exact root. Three values in [1, 2) have squares of <= 48 significant
// bits on a 2^-46 grid and a sum below 12, so S needs <= 50 bits: exact in double. sqrt in double
// then float is correctly rounded too (double rounding is innocuous for sqrt when the wider format
// has >= 2p + 2 bits, 53 >= 50: Figueroa, "When is double rounding innocuous?", 1995). So the
// comparison is bitwise, and it catches a float rounding of S before the root (sqrtf(float(S))),
// which the relative bound above can miss.
TEST(GlobalNorm, ExactSumOfSquaresGivesCorrectlyRoundedRoot) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x5047);
  std::uniform_real_distribution<float> one_two(1.0f, 2.0f);
  Tensor out = be->empty({1}, DType::f32);
  BitwiseCheck check(DType::f32);
  for (size_t trial = 0; trial < 3000; ++trial) {
    std::vector<Tensor> ts;
    double sum = 0;
    for (DType d : kFloatDTypes) {
      const float v = round_to(one_two(rng), d);
      sum += static_cast<double>(v) * v;
      ts.push_back(upload_values(*be, {1}, d, {v}));
    }
    be->global_norm(ts, out);
    check.add(trial, float_bits(be->read_scalar_f32(out)),
              float_bits(static_cast<float>(std::sqrt(sum))));
  }
  EXPECT_TRUE(check.ok()) << check.report();
}

// The documented order (backend.h, CPU: blocks of 4096, 16 lanes each in index order, the lanes
// folded in halves, the block sums added in order), written out here as a plain recursion over
// the elements, bitwise against the backend at 1 and 3 threads: block edges (4095, 4096, 4097,
// three blocks and a tail), several tensors whose blocks never straddle them, and an empty one.
// It fails when a block edge or a tensor drops or repeats an element (each square is far above
// the float rounding of the total). Orders that differ only in the double sum's last bits rarely
// reach the float result: CpuKernels.NormBlocksFollowTheDocumentedOrderBitwise checks the
// blocks' double sums themselves.
double documented_norm_sum(const std::vector<std::vector<float>>& tensors) {
  constexpr size_t kBlock = 4096, kLanes = 16;
  double total = 0.0;
  for (const std::vector<float>& v : tensors) {
    for (size_t b = 0; b < v.size(); b += kBlock) {
      double lane[kLanes] = {};
      for (size_t i = b; i < std::min(v.size(), b + kBlock); ++i) {
        lane[(i - b) % kLanes] += static_cast<double>(v[i]) * static_cast<double>(v[i]);
      }
      for (size_t half = kLanes / 2; half >= 1; half /= 2) {
        for (size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
      }
      total += lane[0];
    }
  }
  return total;
}

TEST(GlobalNorm, FollowsTheDocumentedOrderBitwise) {
  std::mt19937_64 rng(0x0b10c);
  const std::vector<std::vector<std::pair<DType, size_t>>> cases = {
      {{DType::f32, 4095}},
      {{DType::f32, 4096}},
      {{DType::f16, 4097}},
      {{DType::bf16, 3 * 4096 + 77}},
      {{DType::f32, 5000}, {DType::f16, 0}, {DType::bf16, 9000}, {DType::f32, 1}},
      {{DType::f32, 70001}}};
  for (int threads : {1, 3}) {
    auto be = cpu_backend(threads);
    for (const auto& spec : cases) {
      std::vector<std::vector<float>> values;
      std::vector<Tensor> tensors;
      std::string what;
      for (const auto& [d, n] : spec) {
        std::vector<float> v = random_values(rng, n, -12, 12);
        for (float& x : v) x = round_to(x, d);
        tensors.push_back(upload_values(*be, {static_cast<int64_t>(n)}, d, v));
        values.push_back(std::move(v));
        what += std::string(dtype_name(d)) + "[" + std::to_string(n) + "] ";
      }
      Tensor out = be->empty({1}, DType::f32);
      be->global_norm(tensors, out);
      const float want = static_cast<float>(std::sqrt(documented_norm_sum(values)));
      EXPECT_EQ(float_bits(be->read_scalar_f32(out)), float_bits(want))
          << what << "threads " << threads << ": got " << fmt(be->read_scalar_f32(out))
          << ", documented order " << fmt(want);
    }
  }
}

// "accumulated in double in a fixed order (deterministic)": the same bits on every call and for
// any number of threads.
TEST(GlobalNorm, DeterministicAcrossCallsAndThreadCounts) {
  std::mt19937_64 rng(0xde7e);
  auto be1 = cpu_backend(1);
  auto be2 = cpu_backend(2);
  auto be4 = cpu_backend(4);
  std::vector<std::pair<DType, Shape>> specs = {
      {DType::f32, {300001}}, {DType::f16, {70001}}, {DType::bf16, {12345}}};
  uint32_t first = 0;
  bool have_first = false;
  for (Backend* be : {be1.get(), be2.get(), be4.get()}) {
    std::mt19937_64 same = rng;  // identical inputs for every backend
    NormInput in = norm_input(*be, same, specs, -8, 8);
    for (int rep = 0; rep < 3; ++rep) {
      Tensor out = be->empty({1}, DType::f32);
      be->global_norm(in.tensors, out);
      const uint32_t bits = float_bits(be->read_scalar_f32(out));
      if (!have_first) {
        first = bits;
        have_first = true;
      }
      EXPECT_EQ(bits, first) << be->description() << ", call " << rep << ": got "
                             << fmt(bits_float(bits)) << ", first result "
                             << fmt(bits_float(first));
    }
  }
}

}  // namespace
}  // namespace ampctl::test
