// float <-> IEEE binary16 conversions (core/half.h, core/convert.h).
//
// Reference: rounding done another way, in double. The non-negative halves are decoded with
// ldexp into a sorted table; a float is rounded by finding its two neighbours in that table and
// picking the nearer one, ties to the even bit pattern. The table ends with 0x7c00 standing for
// 2^16, so the overflow rule is not coded separately: 65520, the midpoint between 65504 (0x7bff,
// odd) and 2^16, ties to the even 0x7c00, which is inf. All comparisons are bit-exact (budget:
// 0 ulps): the conversions are correctly rounded, so there is no error to allow for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/core/convert.h"
#include "ampctl/core/half.h"

namespace ampctl {
namespace {

constexpr uint16_t kHalfInf = 0x7c00;
constexpr uint16_t kHalfQuiet = 0x0200;

bool half_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

float float_from(uint32_t u) {
  return bits_float(u);
}

// A half pattern as a signed integer that orders like its value, so that the distance between
// two patterns counts ulps.
int64_t half_order_key(uint16_t h) {
  const int64_t magnitude = h & 0x7fff;
  return (h & 0x8000) ? -magnitude : magnitude;
}

// Collects mismatches of 16-bit results and describes the worst one (largest distance in ulps).
class HalfMismatches {
 public:
  void check(float input, uint16_t expected, uint16_t got) {
    if (expected == got) return;
    ++m_count;
    const int64_t distance = std::llabs(half_order_key(expected) - half_order_key(got));
    if (distance > m_worst_distance) {
      m_worst_distance = distance;
      m_input = input;
      m_expected = expected;
      m_got = got;
    }
  }
  size_t count() const { return m_count; }
  std::string report(const std::string& what, size_t total) const {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s: %zu of %zu differ; worst: input %a (0x%08x) expected 0x%04x got 0x%04x, "
                  "%lld ulps apart (budget 0)",
                  what.c_str(), m_count, total, static_cast<double>(m_input), float_bits(m_input),
                  m_expected, m_got, static_cast<long long>(m_worst_distance));
    return buf;
  }

 private:
  size_t m_count = 0;
  int64_t m_worst_distance = -1;
  float m_input = 0;
  uint16_t m_expected = 0;
  uint16_t m_got = 0;
};

// Value of each pattern 0x0000..0x7c00 (0x7c00 read as 2^16), decoded with ldexp.
const std::vector<double>& half_values() {
  static const std::vector<double> table = [] {
    std::vector<double> t(0x7c01);
    for (uint32_t h = 0; h <= 0x7c00; ++h) {
      const int e = static_cast<int>(h >> 10);
      const int m = static_cast<int>(h & 0x3ff);
      t[h] = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    }
    return t;
  }();
  return table;
}

// NaN rule of half.h, stated on the bits: sign kept, quiet bit set, top 10 mantissa bits kept.
uint16_t reference_nan_to_half(uint32_t x) {
  return static_cast<uint16_t>(((x >> 16) & 0x8000u) | kHalfInf | kHalfQuiet |
                               ((x >> 13) & 0x3ffu));
}

uint16_t reference_float_to_half(float f) {
  if (std::isnan(f)) return reference_nan_to_half(float_bits(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const std::vector<double>& t = half_values();
  const double a = std::fabs(static_cast<double>(f));
  if (a >= t.back()) return sign | kHalfInf;
  // Differences below are exact in double: both operands are within one half ulp of each other
  // and carry at most 24 significant bits.
  const size_t lo = static_cast<size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  const size_t hi = lo + 1;
  const double below = a - t[lo];
  const double above = t[hi] - a;
  size_t pick = below < above ? lo : hi;
  if (below == above) pick = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint16_t>(sign | pick);
}

// Runs both batch paths over `inputs` and compares each with the reference; also the scalar
// conversions the host code uses (half's constructor).
void expect_matches_reference(const std::vector<float>& inputs, const std::string& what) {
  std::vector<uint16_t> fast(inputs.size()), portable(inputs.size());
  convert_f32_to_f16(inputs.data(), fast.data(), inputs.size(), ConvertPath::fast);
  convert_f32_to_f16(inputs.data(), portable.data(), inputs.size(), ConvertPath::portable);
  HalfMismatches vs_ref_portable, vs_ref_fast, vs_ref_scalar;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const uint16_t ref = reference_float_to_half(inputs[i]);
    vs_ref_portable.check(inputs[i], ref, portable[i]);
    vs_ref_fast.check(inputs[i], ref, fast[i]);
    vs_ref_scalar.check(inputs[i], ref, half(inputs[i]).bits);
  }
  EXPECT_EQ(vs_ref_portable.count(), 0u)
      << vs_ref_portable.report(what + ", portable vs reference", inputs.size());
  EXPECT_EQ(vs_ref_fast.count(), 0u) << vs_ref_fast.report(
      what + ", fast (" + convert_fast_path_name() + ") vs reference", inputs.size());
  EXPECT_EQ(vs_ref_scalar.count(), 0u)
      << vs_ref_scalar.report(what + ", half(float) vs reference", inputs.size());
}

std::vector<float> rounding_boundaries() {
  const std::vector<double>& t = half_values();
  std::vector<float> out;
  const auto add_around = [&out](float f) {
    for (float v : {std::nextafter(f, 0.0f), f, std::nextafter(f, INFINITY)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  };
  for (size_t h = 0; h < 0x7c00; ++h) {
    add_around(static_cast<float>(t[h]));
    // The midpoint has 12 significant bits and lies in float's normal range: exact as a float.
    add_around(static_cast<float>((t[h] + t[h + 1]) / 2));
  }
  // Subnormal and underflow boundaries: half's smallest subnormal 2^-24, its midpoint with zero
  // 2^-25 (ties to zero), the smallest normal 2^-14, and float's own subnormals.
  for (float f : {0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1p-14f, 0x1.ff8p-15f, 0x1.ffcp-15f,
                  std::numeric_limits<float>::denorm_min(), FLT_MIN, std::nextafter(FLT_MIN, 0.0f),
                  0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, FLT_MAX, INFINITY}) {
    add_around(f);
  }
  return out;
}

std::vector<float> nan_patterns() {
  std::vector<float> out;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t mantissa : {0x400000u, 0x000001u, 0x001fffu, 0x002000u, 0x200000u, 0x7fffffu,
                              0x3fffffu, 0x555555u, 0x2aaaaau, 0x401234u}) {
      out.push_back(float_from(sign | 0x7f800000u | mantissa));
    }
  }
  return out;
}

TEST(HalfToFloat, AllPatternsMatchLdexpDecode) {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t h = 0; h < 65536; ++h) patterns[h] = static_cast<uint16_t>(h);
  std::vector<float> fast(65536), portable(65536);
  convert_f16_to_f32(patterns.data(), fast.data(), 65536, ConvertPath::fast);
  convert_f16_to_f32(patterns.data(), portable.data(), 65536, ConvertPath::portable);
  const std::vector<double>& t = half_values();
  size_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t magnitude = h & 0x7fffu;
    uint32_t expected;
    if (magnitude > 0x7c00u) {
      expected = sign | 0x7fc00000u | ((magnitude & 0x3ffu) << 13);  // quiet bit set, payload kept
    } else if (magnitude == 0x7c00u) {
      expected = sign | 0x7f800000u;
    } else {
      const float v = static_cast<float>(t[magnitude]);  // exact: 11 significant bits
      expected = sign | float_bits(v);
    }
    const uint32_t scalar =
        float_bits(static_cast<float>(half::from_bits(static_cast<uint16_t>(h))));
    for (uint32_t got : {float_bits(portable[h]), float_bits(fast[h]), scalar}) {
      if (got != expected && bad++ < 5) {
        ADD_FAILURE() << "half 0x" << std::hex << h << ": expected float bits 0x" << expected
                      << ", got 0x" << got << " (fast path: " << convert_fast_path_name() << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(HalfRoundTrip, AllPatternsSurviveHalfToFloatToHalf) {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t h = 0; h < 65536; ++h) patterns[h] = static_cast<uint16_t>(h);
  for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
    std::vector<float> f(65536);
    std::vector<uint16_t> back(65536);
    convert_f16_to_f32(patterns.data(), f.data(), 65536, path);
    convert_f32_to_f16(f.data(), back.data(), 65536, path);
    HalfMismatches mismatches;
    for (uint32_t h = 0; h < 65536; ++h) {
      // A quiet NaN comes back unchanged; a signalling one comes back quieted, payload kept.
      const uint16_t expected =
          static_cast<uint16_t>(half_is_nan(static_cast<uint16_t>(h)) ? (h | kHalfQuiet) : h);
      mismatches.check(f[h], expected, back[h]);
    }
    EXPECT_EQ(mismatches.count(), 0u) << mismatches.report(
        path == ConvertPath::fast ? "fast round trip" : "portable round trip", 65536);
  }
}

TEST(FloatToHalf, SpecialValues) {
  const struct {
    float in;
    uint16_t out;
  } cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},
      {65519.99f, 0x7bff},
      {65520.0f, 0x7c00},
      {-65520.0f, 0xfc00},
      {65536.0f, 0x7c00},
      {FLT_MAX, 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},
      {-0x1p-25f, 0x8000},
      {std::nextafter(0x1p-25f, 1.0f), 0x0001},
      {0x1.8p-24f, 0x0002},  // tie to even
      {0x1.4p-23f, 0x0002},
      {0x1p-14f, 0x0400},
      {0x1.ff8p-15f, 0x03ff},  // max subnormal
      {0x1.ffcp-15f, 0x0400},  // tie between 0x03ff and 0x0400: to even
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {-std::numeric_limits<float>::denorm_min(), 0x8000},
      {1.0f + 0x1p-11f, 0x3c00},
      {1.0f + 0x1.8p-10f, 0x3c02},
      {float_from(0x7fc00000u), 0x7e00},
      {float_from(0xffc00000u), 0xfe00},
      {float_from(0x7f800001u), 0x7e00},
      {float_from(0x7fa00000u), 0x7f00},
      {float_from(0xff802000u), 0xfe01},
  };
  for (const auto& c : cases) {
    for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
      uint16_t got = 0;
      convert_f32_to_f16(&c.in, &got, 1, path);
      EXPECT_EQ(got, c.out) << "input " << c.in << " (0x" << std::hex << float_bits(c.in)
                            << "), path " << (path == ConvertPath::fast ? "fast" : "portable");
    }
    EXPECT_EQ(reference_float_to_half(c.in), c.out) << "the test's reference, input " << c.in;
  }
}

TEST(FloatToHalf, RoundingBoundariesMatchDoubleReference) {
  std::vector<float> inputs = rounding_boundaries();
  const std::vector<float> nans = nan_patterns();
  inputs.insert(inputs.end(), nans.begin(), nans.end());
  expect_matches_reference(inputs, "rounding boundaries");
}

TEST(FloatToHalf, RandomBitPatternsMatchDoubleReference) {
  std::mt19937 rng(20240611);
  std::vector<float> inputs(1 << 20);
  for (float& f : inputs) f = float_from(static_cast<uint32_t>(rng()));
  expect_matches_reference(inputs, "random float bit patterns (seed 20240611)");
}

TEST(FloatToHalf, RandomValuesInHalfRangeMatchDoubleReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> linear(-66000.0, 66000.0);
  std::uniform_real_distribution<double> log2_magnitude(-27.0, 16.1);
  std::vector<float> inputs(1 << 20);
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Half linear (mostly large values, around the overflow threshold too), half spread evenly
    // over the exponents, subnormals included.
    const double v = i % 2 ? linear(rng) : std::exp2(log2_magnitude(rng)) * (rng() % 2 ? 1 : -1);
    inputs[i] = static_cast<float>(v);
  }
  expect_matches_reference(inputs, "random values in the half range (seed 7)");
}

TEST(FloatToHalf, NanKeepsSignAndTopPayloadAndIsQuiet) {
  std::mt19937 rng(99);
  std::vector<float> inputs(1 << 16);
  for (float& f : inputs) {
    uint32_t mantissa = rng() & 0x7fffffu;
    if (mantissa == 0) mantissa = 1;
    f = float_from((rng() & 0x80000000u) | 0x7f800000u | mantissa);
  }
  expect_matches_reference(inputs, "random NaNs (seed 99)");
  std::vector<uint16_t> out(inputs.size());
  convert_f32_to_f16(inputs.data(), out.data(), out.size(), ConvertPath::fast);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(half_is_nan(out[i]) && (out[i] & kHalfQuiet))
        << "input 0x" << std::hex << float_bits(inputs[i]) << " gave 0x" << out[i];
  }
}

}  // namespace
}  // namespace ampctl
