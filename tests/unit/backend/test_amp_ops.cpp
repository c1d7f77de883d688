// The loss-scaling ops of the CPU backend (docs/reference.md, "Scaler"):
// non_finite_check_and_unscale_ (with its per-segment attribution and every vector kernel),
// inv_scale and update_scale_. References are scalar re-statements of the spec written here, not
// amp_math.h, so a mistake shared by amp_math.h and the backend still shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../../lib/src/backend/cpu/cpu_backend.h"  // the f32 kernels, each tested
#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- non_finite_check_and_unscale_ ----

TEST(Unscale, FourUnscaledByScaleFourIsExactlyOne) {
  auto be = cpu_backend();
  Tensor scale = scalar_f32(*be, 4.0f);
  Tensor inv = be->empty({1}, DType::f32);
  be->inv_scale(scale, inv);
  EXPECT_EQ(be->read_scalar_f32(inv), 0.25f);
  for (DType d : kFloatDTypes) {
    Tensor x = upload_values(*be, {5}, d, std::vector<float>(5, 4.0f));
    Tensor found = scalar_f32(*be, 0.0f);
    be->non_finite_check_and_unscale_(std::span<const Tensor>(&x, 1), found, inv);
    for (float v : download_values(*be, x)) EXPECT_EQ(v, 1.0f) << dtype_name(d);
    EXPECT_EQ(be->read_scalar_f32(found), 0.0f) << dtype_name(d) << ": a clean pass set found_inf";
  }
}

TEST(Unscale, EachNonFiniteKindSetsFoundInf) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1f1f);
  const float bad_values[] = {kInf, -kInf, kNaN, -kNaN};
  for (DType d : kFloatDTypes) {
    for (float bad : bad_values) {
      for (size_t n : {1u, 17u, 1000u}) {
        for (float inv_scale : {1.0f, 1.0f / 1024.0f}) {
          std::vector<float> v = random_values(rng, n, -10, 10);
          const size_t pos = std::uniform_int_distribution<size_t>(0, n - 1)(rng);
          v[pos] = bad;
          Tensor x = upload_values(*be, {static_cast<int64_t>(n)}, d, v);
          Tensor found = scalar_f32(*be, 0.0f);
          be->non_finite_check_and_unscale_(std::span<const Tensor>(&x, 1), found,
                                            scalar_f32(*be, inv_scale));
          EXPECT_EQ(be->read_scalar_f32(found), 1.0f)
              << dtype_name(d) << "[" << n << "] with " << fmt(bad) << " at " << pos
              << ", inv_scale " << fmt(inv_scale);
        }
      }
    }
  }
}

TEST(Unscale, FoundInfIsSetOnlyByNonFiniteAndNeverCleared) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x2f2f);
  for (DType d : kFloatDTypes) {
    for (float inv_scale : {1.0f, 0.125f}) {
      // Large finite values (f16 max, bf16 near float max) are not overflow.
      std::vector<float> v = random_values(rng, 513, -20, 15);
      v[3] = d == DType::f16 ? 65504.0f : 3.0e38f;
      v[4] = -v[3];
      Tensor x = upload_values(*be, {513}, d, v);
      Tensor found = scalar_f32(*be, 0.0f);
      be->non_finite_check_and_unscale_(std::span<const Tensor>(&x, 1), found,
                                        scalar_f32(*be, inv_scale));
      EXPECT_EQ(be->read_scalar_f32(found), 0.0f)
          << dtype_name(d) << ": finite values set found_inf";
      Tensor found1 = scalar_f32(*be, 1.0f);
      be->non_finite_check_and_unscale_(std::span<const Tensor>(&x, 1), found1,
                                        scalar_f32(*be, inv_scale));
      EXPECT_EQ(be->read_scalar_f32(found1), 1.0f)
          << dtype_name(d) << ": a clean pass cleared found_inf";
    }
  }
}

// inv_scale == 1 is a check-only pass: nothing is rewritten, so every bit pattern survives,
// NaN payloads and signalling NaNs included (a widen-and-round would quiet them).
TEST(Unscale, InvScaleOneLeavesBitsUntouched) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x3f3f);
  for (DType d : kFloatDTypes) {
    std::vector<uint32_t> bits(20000);
    std::uniform_int_distribution<uint32_t> all;
    for (uint32_t& b : bits) b = dtype_size(d) == 4 ? all(rng) : all(rng) & 0xffffu;
    // NaNs with payloads: quiet and signalling, both signs.
    const std::vector<uint32_t> nans =
        d == DType::f32 ? std::vector<uint32_t>{0x7f800001u, 0xff800123u, 0x7fc00001u, 0x7fbfffffu}
        : d == DType::f16 ? std::vector<uint32_t>{0x7c01u, 0xfc55u, 0x7e01u, 0x7dffu}
                          : std::vector<uint32_t>{0x7f81u, 0xff9au, 0x7fc1u, 0x7fbfu};
    for (size_t i = 0; i < nans.size(); ++i) bits[i * 1009 + 5] = nans[i];
    Tensor x = upload_bits(*be, {static_cast<int64_t>(bits.size())}, d, bits);
    Tensor found = scalar_f32(*be, 0.0f);
    be->non_finite_check_and_unscale_(std::span<const Tensor>(&x, 1), found, scalar_f32(*be, 1.0f));
    BitwiseCheck check(d);
    check.add_all(download_bits(*be, x), bits);
    EXPECT_TRUE(check.ok()) << dtype_name(d) << ": " << check.report();
    EXPECT_EQ(be->read_scalar_f32(found), 1.0f) << "random patterns include NaN/inf";
  }
}

// The reference for one element: float(x) * inv_scale in float, then one rounding to the dtype.
uint32_t unscaled_bits(uint32_t in, DType d, float inv_scale) {
  return encode(decode(in, d) * inv_scale, d);
}

std::vector<float> unscale_inputs(std::mt19937_64& rng, size_t n, DType d) {
  // Gradients scaled by 2^16-ish: wide range, including values whose unscaled result is an f16
  // subnormal (so rounding in the subnormal range is exercised).
  std::vector<float> v = random_values(rng, n, -24, 15);
  for (float& x : v) x = round_to(x, d);
  return v;
}

TEST(Unscale, RoundsOnceToTensorDType) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x4f4f);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (DType d : kFloatDTypes) {
    for (int rep = 0; rep < 8; ++rep) {
      // Powers of two (the usual case, exact unless subnormal) and arbitrary inverse scales.
      const float scale = rep % 2 ? std::ldexp(1.0f, rep) : std::ldexp(mant(rng), rep * 3 - 6);
      const float inv = static_cast<float>(1.0 / static_cast<double>(scale));
      const size_t n = 3001 + static_cast<size_t>(rep);
      const std::vector<float> v = unscale_inputs(rng, n, d);
      std::vector<uint32_t> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = encode(v[i], d);
      Tensor x = upload_bits(*be, {static_cast<int64_t>(n)}, d, in);
      Tensor found = scalar_f32(*be, 0.0f);
      be->non_finite_check_and_unscale_(std::span<const Tensor>(&x, 1), found,
                                        scalar_f32(*be, inv));
      std::vector<uint32_t> expected(n);
      for (size_t i = 0; i < n; ++i) expected[i] = unscaled_bits(in[i], d, inv);
      BitwiseCheck check(d);
      check.add_all(download_bits(*be, x), expected);
      EXPECT_TRUE(check.ok()) << dtype_name(d) << ", inv_scale " << fmt(inv) << ": "
                              << check.report();
      EXPECT_EQ(be->read_scalar_f32(found), 0.0f);
    }
  }
}

// Several tensors of mixed dtypes and sizes in one call; the one non-finite element sets found_inf
// and every element of every tensor is still unscaled (the step is skipped later, not here).
TEST(Unscale, MixedDTypesInOneCall) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x5f5f);
  const std::vector<std::pair<DType, size_t>> specs = {
      {DType::f32, 1000}, {DType::f16, 37},  {DType::bf16, 4099}, {DType::f16, 1},
      {DType::f32, 0},    {DType::bf16, 64}, {DType::f16, 2053}};
  for (int with_inf = 0; with_inf < 2; ++with_inf) {
    const float inv = 1.0f / 3000.0f;  // not a power of two: every element really rounds
    std::vector<Tensor> tensors;
    std::vector<std::vector<uint32_t>> expected;
    for (size_t t = 0; t < specs.size(); ++t) {
      const auto [d, n] = specs[t];
      std::vector<float> v = unscale_inputs(rng, n, d);
      if (with_inf && t == 5) v[17] = -kInf;
      std::vector<uint32_t> in(n), ex(n);
      for (size_t i = 0; i < n; ++i) {
        in[i] = encode(v[i], d);
        ex[i] = unscaled_bits(in[i], d, inv);
      }
      tensors.push_back(upload_bits(*be, {static_cast<int64_t>(n)}, d, in));
      expected.push_back(ex);
    }
    Tensor found = scalar_f32(*be, 0.0f);
    be->non_finite_check_and_unscale_(tensors, found, scalar_f32(*be, inv));
    EXPECT_EQ(be->read_scalar_f32(found), with_inf ? 1.0f : 0.0f);
    for (size_t t = 0; t < specs.size(); ++t) {
      BitwiseCheck check(specs[t].first);
      check.add_all(download_bits(*be, tensors[t]), expected[t]);
      EXPECT_TRUE(check.ok()) << "tensor " << t << " (" << tensors[t].describe() << "), with_inf "
                              << with_inf << ": " << check.report();
    }
  }
}

// ---- the vector kernels of the f32 pass ----

// Every f32 kernel this CPU can run (AVX-512F, AVX2, portable) against the scalar reference, at
// every length 0..80 and every start offset 0..16 (heads, masked tails and unaligned starts),
// over random bit patterns (every float class: subnormals, infinities, NaNs with payloads).
TEST(Unscale, EveryF32KernelMatchesTheScalarReferenceBitForBit) {
  std::mt19937_64 rng(0x7a7a);
  std::uniform_int_distribution<uint32_t> all;
  const float invs[] = {1.0f, 0x1p-16f, 1.0f / 3.0f, 0x1p100f, 1e-30f};
  std::vector<uint32_t> lengths;
  for (uint32_t n = 0; n <= 80; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  for (const cpu::UnscaleF32Kernel& k : cpu::unscale_f32_kernels()) {
    for (float inv : invs) {
      for (uint32_t n : lengths) {
        for (uint32_t offset = 0; offset <= 16; ++offset) {
          std::vector<uint32_t> in(n + offset + 3);
          for (uint32_t& b : in) b = all(rng);
          // Mostly finite values, so a lone non-finite one must be found wherever it sits.
          for (uint32_t& b : in) b &= rng() % 8 ? 0xbfffffffu : 0xffffffffu;
          std::vector<float> buf(in.size());
          std::memcpy(buf.data(), in.data(), in.size() * 4);
          bool want_found = false;
          std::vector<uint32_t> want = in;
          for (uint32_t i = offset; i < offset + n; ++i) {
            const float v = bits_float(in[i]);
            want_found |= !std::isfinite(v);
            if (inv != 1.0f) want[i] = float_bits(v * inv);
          }
          const bool found = k.run(buf.data() + offset, n, inv);
          std::vector<uint32_t> got(buf.size());
          std::memcpy(got.data(), buf.data(), buf.size() * 4);
          ASSERT_EQ(found, want_found) << k.name << " n " << n << " offset " << offset;
          BitwiseCheck check(DType::f32);
          check.add_all(got, want);  // the elements outside [offset, offset + n) included
          ASSERT_TRUE(check.ok()) << k.name << " n " << n << " offset " << offset << " inv "
                                  << fmt(inv) << ": " << check.report();
        }
      }
    }
  }
}

// ---- attribution: which segments held an inf or NaN ----

// The reference: segment of global element e = the last s with starts[s] <= e.
std::vector<int32_t> reference_segment_flags(const std::vector<std::vector<float>>& tensors,
                                             const std::vector<int32_t>& starts) {
  std::vector<int32_t> flags(starts.size(), 0);
  size_t e = 0;
  for (const auto& t : tensors) {
    for (float v : t) {
      if (!std::isfinite(v)) {
        const auto it = std::upper_bound(starts.begin(), starts.end(), static_cast<int32_t>(e));
        flags[static_cast<size_t>(it - starts.begin() - 1)] = 1;
      }
      ++e;
    }
  }
  return flags;
}

TEST(UnscaleAttribution, FlagsExactlyTheSegmentsHoldingNonFiniteValues) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x8b8b);
  for (int trial = 0; trial < 200; ++trial) {
    // 1..6 tensors (f32, plus an f16 one in check-only trials), segments cutting across them.
    const bool check_only = trial % 3 == 0;
    const size_t count = 1 + rng() % 6;
    std::vector<std::vector<float>> values;
    std::vector<DType> dtypes;
    size_t total = 0;
    for (size_t t = 0; t < count; ++t) {
      const DType d = check_only && t % 2 ? DType::f16 : DType::f32;
      const size_t n = rng() % 4 == 0 ? rng() % 5 : rng() % 3000;
      std::vector<float> v = random_values(rng, n, -10, 10);
      for (float& x : v) x = round_to(x, d);
      values.push_back(v);
      dtypes.push_back(d);
      total += n;
    }
    // Sprinkle 0..4 non-finite values.
    const size_t bad = total == 0 ? 0 : rng() % 5;
    const float kinds[] = {kInf, -kInf, kNaN};
    for (size_t b = 0; b < bad; ++b) {
      size_t e = rng() % total;
      for (auto& v : values) {
        if (e < v.size()) {
          v[e] = kinds[rng() % 3];
          break;
        }
        e -= v.size();
      }
    }
    std::vector<int32_t> starts = {0};
    for (size_t s = 1 + rng() % 8; s > 0 && total > 1; --s) {
      const auto next = static_cast<int32_t>(1 + rng() % (total - 1));
      if (std::find(starts.begin(), starts.end(), next) == starts.end()) starts.push_back(next);
    }
    std::sort(starts.begin(), starts.end());
    std::vector<Tensor> tensors;
    for (size_t t = 0; t < count; ++t) {
      tensors.push_back(
          upload_values(*be, {static_cast<int64_t>(values[t].size())}, dtypes[t], values[t]));
    }
    const auto s = static_cast<int64_t>(starts.size());
    Tensor seg_starts = upload_i32(*be, {s}, starts);
    // A flag already set stays set: found is never cleared.
    std::vector<int32_t> initial(starts.size(), 0);
    if (trial % 5 == 1) initial[0] = 1;
    Tensor seg_found = upload_i32(*be, {s}, initial);
    Tensor found = scalar_f32(*be, 0.0f);
    const float inv = check_only ? 1.0f : 1.0f / 1024.0f;
    be->non_finite_check_and_unscale_(tensors, found, scalar_f32(*be, inv), seg_starts, seg_found);
    std::vector<int32_t> want = reference_segment_flags(values, starts);
    if (initial[0]) want[0] = 1;
    EXPECT_EQ(download_i32(*be, seg_found), want)
        << "trial " << trial << ", " << bad << " non-finite values";
    const bool any = std::any_of(want.begin(), want.end(), [](int32_t f) { return f != 0; });
    EXPECT_EQ(be->read_scalar_f32(found), bad > 0 ? 1.0f : 0.0f) << "trial " << trial;
    if (!initial[0]) {
      EXPECT_EQ(any, bad > 0) << "trial " << trial;
    }
    // The values are unscaled exactly as without attribution.
    for (size_t t = 0; t < count; ++t) {
      std::vector<uint32_t> expected;
      for (float v : values[t]) {
        expected.push_back(
            encode(inv == 1.0f ? v : decode(encode(v, dtypes[t]), dtypes[t]) * inv, dtypes[t]));
      }
      BitwiseCheck check(dtypes[t], /*nan_any=*/true);
      check.add_all(download_bits(*be, tensors[t]), expected);
      EXPECT_TRUE(check.ok()) << "trial " << trial << ", tensor " << t << ": " << check.report();
    }
  }
}

TEST(UnscaleAttribution, RejectsBadSegments) {
  auto be = cpu_backend();
  Tensor x = upload_values(*be, {10}, DType::f32, std::vector<float>(10, 1.0f));
  Tensor found = scalar_f32(*be, 0.0f), one = scalar_f32(*be, 1.0f);
  const std::span<const Tensor> xs(&x, 1);
  auto run = [&](const std::vector<int32_t>& starts, int64_t found_len) {
    be->non_finite_check_and_unscale_(
        xs, found, one, upload_i32(*be, {static_cast<int64_t>(starts.size())}, starts),
        upload_i32(*be, {found_len}, std::vector<int32_t>(static_cast<size_t>(found_len), 0)));
  };
  expect_invalid_argument([&] { run({1, 4}, 2); }, "not starting at 0");
  expect_invalid_argument([&] { run({0, 4, 4}, 3); }, "not strictly increasing");
  expect_invalid_argument([&] { run({0, 11}, 2); }, "past the end");
  expect_invalid_argument([&] { run({0, 4}, 3); }, "found of another length");
  expect_invalid_argument(
      [&] {
        be->non_finite_check_and_unscale_(xs, found, one, upload_i32(*be, {1}, {0}), Tensor{});
      },
      "starts without found");
  // The last segment may be empty: [10, 10).
  run({0, 10}, 2);
}

// ---- inv_scale ----

TEST(InvScale, IsFloatOfDoubleReciprocal) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x6f6f);
  std::vector<float> scales = {1.0f,
                               2.0f,
                               3.0f,
                               65536.0f,
                               0.1f,
                               1e-30f,
                               1e-38f,
                               1e-40f,
                               1e-45f,
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(),
                               3e38f,
                               1e30f,
                               8.5e37f};
  std::uniform_int_distribution<uint32_t> bits(1, 0x7f7fffffu);  // every positive finite float
  for (int i = 0; i < 1000; ++i) scales.push_back(bits_float(bits(rng)));
  Tensor inv = be->empty({1}, DType::f32);
  BitwiseCheck check(DType::f32);
  for (size_t i = 0; i < scales.size(); ++i) {
    be->inv_scale(scalar_f32(*be, scales[i]), inv);
    // 1 / double(s) is one double rounding; the float conversion is the specified second one.
    check.add(i, float_bits(be->read_scalar_f32(inv)),
              float_bits(static_cast<float>(1.0 / static_cast<double>(scales[i]))));
  }
  EXPECT_TRUE(check.ok()) << check.report();
}

// ---- update_scale_ ----

// docs/reference.md's scaler rule ("Scaler"), restated: PyTorch >= 2.1's rule (factors are doubles,
// the product is formed in double and rounded to float once; a non-finite growth is dropped) plus
// Megatron-LM's hysteresis, min_scale floor on backoff and max_scale cap on growth. A growth never
// lowers the scale (scale > max_scale only arises if the user starts there; these tests start
// below). The hysteresis counter stops at 0 instead of going negative as Megatron's does
// (amp_math.h's documented choice, against an int32 wrap): the scales are the same either way,
// since an overflow backs off whenever the counter is <= 0 and only a growth refills it.
struct ScalerState {
  float scale;
  int32_t growth;
  int32_t hysteresis;
};

void reference_update(ScalerState& s, bool found_inf, const amp::ScaleUpdateParams& p) {
  if (found_inf) {
    s.growth = 0;
    s.hysteresis = std::max(s.hysteresis - 1, 0);
    if (s.hysteresis <= 0) {
      const double backed = static_cast<double>(s.scale) * p.backoff_factor;
      s.scale = std::max(static_cast<float>(backed), p.min_scale);
    }
    return;
  }
  s.growth += 1;
  if (s.growth == p.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(s.scale) * p.growth_factor);
    if (std::isfinite(grown)) s.scale = std::max(s.scale, std::min(grown, p.max_scale));
    s.growth = 0;
    s.hysteresis = p.hysteresis;
  }
}

TEST(UpdateScale, MatchesRestatedRuleOverRandomSequences) {
  auto be = cpu_backend();
  struct Case {
    const char* name;
    amp::ScaleUpdateParams p;
    float initial_scale;
    double p_inf;
  };
  auto params = [](double g, double b, int32_t interval, int32_t hyst, float mn, float mx) {
    amp::ScaleUpdateParams p;
    p.growth_factor = g;
    p.backoff_factor = b;
    p.growth_interval = interval;
    p.hysteresis = hyst;
    p.min_scale = mn;
    p.max_scale = mx;
    return p;
  };
  const Case cases[] = {
      {"pytorch defaults, short interval", params(2.0, 0.5, 5, 1, 0.0f, kInf), 65536.0f, 0.2},
      {"hysteresis 3, min 1, max 1024", params(2.0, 0.5, 3, 3, 1.0f, 1024.0f), 256.0f, 0.35},
      {"hysteresis 3, min 1, max 1024, overflow-heavy", params(2.0, 0.5, 2, 3, 1.0f, 1024.0f),
       16.0f, 0.7},
      // Factors whose float and double values differ: a float product would give other bits.
      {"odd factors", params(1.7, 0.3, 2, 2, 1e-3f, 1e30f), 1234.567f, 0.4},
      // Growth past float max is dropped (the grown value is inf).
      {"growth to overflow", params(2.0, 0.5, 1, 1, 0.0f, kInf), 1.0e38f, 0.1},
      // Backoff into float subnormals and towards zero.
      {"backoff to tiny", params(2.0, 0.125, 50, 1, 0.0f, kInf), 1.0e-30f, 0.9},
  };
  for (size_t ci = 0; ci < std::size(cases); ++ci) {
    const Case& c = cases[ci];
    std::mt19937_64 rng(0x7f7f + ci);
    std::bernoulli_distribution overflow(c.p_inf);
    ScalerState ref{c.initial_scale, 0, c.p.hysteresis};
    Tensor scale = scalar_f32(*be, ref.scale);
    Tensor growth = scalar_i32(*be, ref.growth);
    Tensor hyst = scalar_i32(*be, ref.hysteresis);
    Tensor trackers = be->zeros({amp::kTrackerCount}, DType::i32);
    for (int step = 0; step < 300; ++step) {
      const bool inf = overflow(rng);
      reference_update(ref, inf, c.p);
      be->update_scale_(scale, growth, hyst, trackers, scalar_f32(*be, inf ? 1.0f : 0.0f), c.p);
      const float got_scale = be->read_scalar_f32(scale);
      const int32_t got_growth = be->read_scalar_i32(growth);
      const int32_t got_hyst = be->read_scalar_i32(hyst);
      ASSERT_TRUE(float_bits(got_scale) == float_bits(ref.scale) && got_growth == ref.growth &&
                  got_hyst == ref.hysteresis)
          << c.name << ", step " << step << " (found_inf " << inf << "): got scale "
          << fmt(got_scale) << ", growth " << got_growth << ", hysteresis " << got_hyst
          << "; expected " << fmt(ref.scale) << ", " << ref.growth << ", " << ref.hysteresis;
    }
  }
}

// found_inf is tested as "!= 0": any non-zero value is an overflow.
TEST(UpdateScale, AnyNonZeroFoundInfIsAnOverflow) {
  auto be = cpu_backend();
  amp::ScaleUpdateParams p;
  p.max_scale = kInf;
  for (float f : {1.0f, 2.0f, 0.5f, -1.0f}) {
    Tensor scale = scalar_f32(*be, 1024.0f);
    Tensor growth = scalar_i32(*be, 7);
    Tensor hyst = scalar_i32(*be, 1);
    Tensor trackers = be->zeros({amp::kTrackerCount}, DType::i32);
    be->update_scale_(scale, growth, hyst, trackers, scalar_f32(*be, f), p);
    EXPECT_EQ(be->read_scalar_f32(scale), 512.0f) << "found_inf " << f;
    EXPECT_EQ(be->read_scalar_i32(growth), 0) << "found_inf " << f;
  }
}

}  // namespace
}  // namespace ampctl::test
