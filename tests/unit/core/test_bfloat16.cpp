// float <-> bfloat16 conversions (core/half.h, core/convert.h).
//
// Reference: rounding done another way, in double. The non-negative bf16 values are decoded with
// ldexp into a sorted table; a float is rounded by finding its two neighbours there and picking
// the nearer, ties to the even bit pattern. The table ends with 0x7f80 standing for 2^128, so a
// float at or above the midpoint between the largest finite bf16 (0x7f7f, 0x1.fep127 ~ 3.3895e38,
// odd) and 2^128 rounds to inf; FLT_MAX is above it. All comparisons are bit-exact (budget:
// 0 ulps): the conversion is correctly rounded, so there is no error to allow for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define AMPCTL_TEST_X86 1
#else
#define AMPCTL_TEST_X86 0
#endif

#include "ampctl/core/convert.h"
#include "ampctl/core/half.h"

namespace ampctl {
namespace {

constexpr uint16_t kBf16Inf = 0x7f80;
constexpr uint16_t kBf16Quiet = 0x0040;

bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

float float_from(uint32_t u) {
  return bits_float(u);
}

// A bf16 pattern as a signed integer that orders like its value: distances count ulps.
int64_t bf16_order_key(uint16_t b) {
  const int64_t magnitude = b & 0x7fff;
  return (b & 0x8000) ? -magnitude : magnitude;
}

// Collects mismatches of 16-bit results and describes the worst one (largest distance in ulps).
class Bf16Mismatches {
 public:
  void check(float input, uint16_t expected, uint16_t got) {
    if (expected == got) return;
    ++m_count;
    const int64_t distance = std::llabs(bf16_order_key(expected) - bf16_order_key(got));
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

// Value of each pattern 0x0000..0x7f80 (0x7f80 read as 2^128), decoded with ldexp.
const std::vector<double>& bf16_values() {
  static const std::vector<double> table = [] {
    std::vector<double> t(0x7f81);
    for (uint32_t b = 0; b <= 0x7f80; ++b) {
      const int e = static_cast<int>(b >> 7);
      const int m = static_cast<int>(b & 0x7f);
      t[b] = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
    }
    return t;
  }();
  return table;
}

// NaN rule of half.h, stated on the bits: sign and top 7 mantissa bits kept, quiet bit set.
uint16_t reference_nan_to_bf16(uint32_t x) {
  return static_cast<uint16_t>((x >> 16) | kBf16Quiet);
}

uint16_t reference_float_to_bf16(float f) {
  if (std::isnan(f)) return reference_nan_to_bf16(float_bits(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const std::vector<double>& t = bf16_values();
  const double a = std::fabs(static_cast<double>(f));
  if (a >= t.back()) return sign | kBf16Inf;
  // Exact in double: the operands are within one bf16 ulp and have at most 24 significant bits.
  const size_t lo = static_cast<size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  const size_t hi = lo + 1;
  const double below = a - t[lo];
  const double above = t[hi] - a;
  size_t pick = below < above ? lo : hi;
  if (below == above) pick = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint16_t>(sign | pick);
}

void expect_matches_reference(const std::vector<float>& inputs, const std::string& what) {
  std::vector<uint16_t> fast(inputs.size()), portable(inputs.size());
  convert_f32_to_bf16(inputs.data(), fast.data(), inputs.size(), ConvertPath::fast);
  convert_f32_to_bf16(inputs.data(), portable.data(), inputs.size(), ConvertPath::portable);
  Bf16Mismatches vs_ref_portable, vs_ref_fast, vs_ref_scalar;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const uint16_t ref = reference_float_to_bf16(inputs[i]);
    vs_ref_portable.check(inputs[i], ref, portable[i]);
    vs_ref_fast.check(inputs[i], ref, fast[i]);
    vs_ref_scalar.check(inputs[i], ref, bfloat16(inputs[i]).bits);
  }
  EXPECT_EQ(vs_ref_portable.count(), 0u)
      << vs_ref_portable.report(what + ", portable vs reference", inputs.size());
  EXPECT_EQ(vs_ref_fast.count(), 0u) << vs_ref_fast.report(
      what + ", fast (" + convert_fast_path_name() + ") vs reference", inputs.size());
  EXPECT_EQ(vs_ref_scalar.count(), 0u)
      << vs_ref_scalar.report(what + ", bfloat16(float) vs reference", inputs.size());
}

std::vector<float> rounding_boundaries() {
  std::vector<float> out;
  const auto add_around = [&out](float f) {
    for (float v : {std::nextafter(f, 0.0f), f, std::nextafter(f, INFINITY)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  };
  // Every bf16 value and every midpoint are floats: b << 16 and (b << 16) | 0x8000.
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    add_around(float_from(b << 16));
    add_around(float_from((b << 16) | 0x8000u));
  }
  for (float f : {std::numeric_limits<float>::denorm_min(), FLT_MIN, 0x1p-133f, 0x1p-134f,
                  0x1.8p-133f, 0.0f, FLT_MAX, 0x1.fep127f, 0x1.ffp127f, INFINITY}) {
    add_around(f);
  }
  return out;
}

TEST(Bf16ToFloat, AllPatternsMatchLdexpDecode) {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t b = 0; b < 65536; ++b) patterns[b] = static_cast<uint16_t>(b);
  std::vector<float> fast(65536), portable(65536);
  convert_bf16_to_f32(patterns.data(), fast.data(), 65536, ConvertPath::fast);
  convert_bf16_to_f32(patterns.data(), portable.data(), 65536, ConvertPath::portable);
  const std::vector<double>& t = bf16_values();
  size_t bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t magnitude = b & 0x7fffu;
    const uint32_t sign = (b & 0x8000u) << 16;
    // Widening keeps every bit, NaN payloads (signalling ones too) included.
    const uint32_t expected =
        magnitude >= 0x7f80u ? (b << 16) : sign | float_bits(static_cast<float>(t[magnitude]));
    const uint32_t scalar =
        float_bits(static_cast<float>(bfloat16::from_bits(static_cast<uint16_t>(b))));
    for (uint32_t got : {float_bits(portable[b]), float_bits(fast[b]), scalar}) {
      if (got != expected && bad++ < 5) {
        ADD_FAILURE() << "bf16 0x" << std::hex << b << ": expected float bits 0x" << expected
                      << ", got 0x" << got << " (fast path: " << convert_fast_path_name() << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(Bf16RoundTrip, AllPatternsSurviveBf16ToFloatToBf16) {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t b = 0; b < 65536; ++b) patterns[b] = static_cast<uint16_t>(b);
  for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
    std::vector<float> f(65536);
    std::vector<uint16_t> back(65536);
    convert_bf16_to_f32(patterns.data(), f.data(), 65536, path);
    convert_f32_to_bf16(f.data(), back.data(), 65536, path);
    Bf16Mismatches mismatches;
    for (uint32_t b = 0; b < 65536; ++b) {
      // A quiet NaN comes back unchanged; a signalling one comes back quieted, payload kept.
      const uint16_t expected =
          static_cast<uint16_t>(bf16_is_nan(static_cast<uint16_t>(b)) ? (b | kBf16Quiet) : b);
      mismatches.check(f[b], expected, back[b]);
    }
    EXPECT_EQ(mismatches.count(), 0u) << mismatches.report(
        path == ConvertPath::fast ? "fast round trip" : "portable round trip", 65536);
  }
}

TEST(FloatToBf16, SpecialValues) {
  const struct {
    float in;
    uint16_t out;
  } cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3f80},
      {-2.0f, 0xc000},
      {1.0f + 0x1p-8f, 0x3f80},    // tie between 0x3f80 and 0x3f81: to even
      {1.0f + 0x1.8p-7f, 0x3f82},  // tie between 0x3f81 and 0x3f82: to even
      {std::nextafter(1.0f + 0x1p-8f, 2.0f), 0x3f81},
      {0x1.fep127f, 0x7f7f},              // largest finite bf16
      {float_from(0x7f7f7fffu), 0x7f7f},  // just below the overflow threshold
      {float_from(0x7f7f8000u), 0x7f80},  // the threshold: a tie, to the even inf
      {FLT_MAX, 0x7f80},
      {-FLT_MAX, 0xff80},
      {INFINITY, 0x7f80},
      {-INFINITY, 0xff80},
      {FLT_MIN, 0x0080},
      {float_from(0x00010000u), 0x0001},  // a float subnormal that is a bf16 subnormal
      {float_from(0x00008000u), 0x0000},  // half of the smallest bf16 subnormal: tie to zero
      {float_from(0x00008001u), 0x0001},
      {float_from(0x00018000u), 0x0002},  // tie between 1 and 2: to even
      {float_from(0x80000001u), 0x8000},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {float_from(0x7fc00000u), 0x7fc0},
      {float_from(0xffc00000u), 0xffc0},
      {float_from(0x7f800001u), 0x7fc0},  // signalling, payload below bit 16: quieted
      {float_from(0x7f810000u), 0x7fc1},  // signalling, payload kept
      {float_from(0xff80ffffu), 0xffc0},  // never rounds a NaN up into the sign bit / inf
  };
  for (const auto& c : cases) {
    for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
      uint16_t got = 0;
      convert_f32_to_bf16(&c.in, &got, 1, path);
      EXPECT_EQ(got, c.out) << "input " << c.in << " (0x" << std::hex << float_bits(c.in)
                            << "), path " << (path == ConvertPath::fast ? "fast" : "portable");
    }
    EXPECT_EQ(reference_float_to_bf16(c.in), c.out) << "the test's reference, input " << c.in;
  }
}

TEST(FloatToBf16, RoundingBoundariesMatchDoubleReference) {
  expect_matches_reference(rounding_boundaries(), "rounding boundaries");
}

TEST(FloatToBf16, FloatSubnormalsAreNotFlushed) {
  // Every float subnormal that is exactly a bf16 subnormal converts exactly, both signs.
  std::vector<float> exact;
  for (uint32_t b = 1; b < 0x80; ++b) {
    exact.push_back(float_from(b << 16));
    exact.push_back(float_from(0x80000000u | (b << 16)));
  }
  for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
    std::vector<uint16_t> out(exact.size());
    convert_f32_to_bf16(exact.data(), out.data(), exact.size(), path);
    Bf16Mismatches mismatches;
    for (size_t i = 0; i < exact.size(); ++i) {
      mismatches.check(exact[i], static_cast<uint16_t>(float_bits(exact[i]) >> 16), out[i]);
    }
    EXPECT_EQ(mismatches.count(), 0u) << mismatches.report(
        path == ConvertPath::fast ? "fast, exact subnormals" : "portable, exact subnormals",
        exact.size());
  }
  // And random float subnormals round like any other value.
  std::mt19937 rng(31337);
  std::vector<float> random(1 << 16);
  for (float& f : random) {
    f = float_from((rng() & 0x80000000u) | (rng() & 0x7fffffu));
  }
  expect_matches_reference(random, "random float subnormals (seed 31337)");
}

TEST(FloatToBf16, RandomBitPatternsMatchDoubleReference) {
  std::mt19937 rng(20240611);
  std::vector<float> inputs(1 << 20);
  for (float& f : inputs) f = float_from(static_cast<uint32_t>(rng()));
  expect_matches_reference(inputs, "random float bit patterns (seed 20240611)");
}

TEST(FloatToBf16, RandomValuesMatchDoubleReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> log2_magnitude(-150.0, 128.0);
  std::uniform_real_distribution<double> unit(-4.0, 4.0);
  std::vector<float> inputs(1 << 20);
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Half spread evenly over all exponents (float subnormals and overflow included), half in
    // the range of typical activations and gradients.
    const double sign = rng() % 2 ? 1.0 : -1.0;
    const double v = i % 2 ? unit(rng) : sign * std::exp2(log2_magnitude(rng));
    inputs[i] = static_cast<float>(v);
  }
  expect_matches_reference(inputs, "random values (seed 11)");
}

#if AMPCTL_TEST_X86
bool cpu_has_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID.(EAX=7, ECX=1):EAX bit 5 is AVX512_BF16; "avx512f" also checks the OS saves ZMM state.
  return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
         (eax & (1u << 5)) != 0;
}

__attribute__((target("avx512f,avx512bf16"))) void vcvtneps2bf16(const float* src, uint16_t* dst,
                                                                 size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const size_t m = std::min<size_t>(16, n - i);
    float in[16] = {};
    std::memcpy(in, src + i, m * sizeof(float));
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(in));
    uint16_t out[16];
    std::memcpy(out, &r, sizeof out);
    std::memcpy(dst + i, out, m * sizeof(uint16_t));
  }
}
#endif

// The hardware instruction the fast path deliberately avoids agrees everywhere except on float
// subnormal inputs, which it flushes to a signed zero (DAZ); there it must differ from us
// whenever the correct result is nonzero.
TEST(FloatToBf16, MatchesVcvtneps2bf16ExceptOnSubnormalInputs) {
#if AMPCTL_TEST_X86
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(5);
  std::vector<float> inputs = rounding_boundaries();
  for (int i = 0; i < (1 << 18); ++i) inputs.push_back(float_from(static_cast<uint32_t>(rng())));
  std::vector<uint16_t> hw(inputs.size()), ours(inputs.size());
  vcvtneps2bf16(inputs.data(), hw.data(), inputs.size());
  convert_f32_to_bf16(inputs.data(), ours.data(), inputs.size(), ConvertPath::fast);
  Bf16Mismatches mismatches;
  size_t subnormal_differences = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const uint32_t x = float_bits(inputs[i]);
    if ((x & 0x7f800000u) == 0 && (x & 0x7fffffu) != 0) {
      ASSERT_EQ(hw[i], (x >> 16) & 0x8000u)
          << "expected VCVTNEPS2BF16 to flush 0x" << std::hex << x;
      subnormal_differences += hw[i] != ours[i];
      continue;
    }
    mismatches.check(inputs[i], hw[i], ours[i]);
  }
  EXPECT_EQ(mismatches.count(), 0u) << mismatches.report("fast vs VCVTNEPS2BF16", inputs.size());
  EXPECT_GT(subnormal_differences, 0u) << "subnormal inputs were expected to differ (kept by us)";
#else
  GTEST_SKIP() << "not an x86 build";
#endif
}

}  // namespace
}  // namespace ampctl
