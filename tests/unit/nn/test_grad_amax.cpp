// Backend::round_amax (backend.h, math/numerics_math.h): the rounding grad_amax rides on, against
// a plain loop over the same values: the same lowp bits as the ordinary cast, the largest finite
// |x| and the non-finite flag; independent of the thread split; accumulating (a max with what
// the accumulator held); bad operands refused. (The exact grad_amax of a whole backward against
// an fp64 reference is in test_numerics.cpp, beside the counts' reference.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "ampctl/math/numerics_math.h"

namespace ampctl {
namespace {

// Values over every binade (sign, exponent and mantissa from an LCG), seeded.
std::vector<float> all_binades(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t state = seed;
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    const uint32_t bits = (state & ~(0xffu << 23)) | (((state >> 24) % 255u) << 23);
    std::memcpy(&x, &bits, sizeof x);
  }
  return v;
}

struct Expected {
  std::vector<uint16_t> bits;
  float amax = 0;
  bool nonfinite = false;
};

Expected expected(const std::vector<float>& v, DType lowp) {
  Expected e;
  for (float x : v) {
    e.bits.push_back(lowp == DType::f16 ? float_to_half_bits(x) : float_to_bf16_bits(x));
    if (!std::isfinite(x)) {
      e.nonfinite = true;
    } else {
      e.amax = std::max(e.amax, std::fabs(x));
    }
  }
  return e;
}

TEST(RoundAmax, MatchesAPlainLoopForEveryThreadCount) {
  // 3 << 16 values: up to 3 parts of the pool's split; the second pass adds an inf (first part)
  // and a NaN (last part).
  std::vector<float> v = all_binades(3 << 16, 777);  // exponent fields 0 ... 254: all finite
  for (bool poison : {false, true}) {
    if (poison) {
      v[1000] = std::numeric_limits<float>::infinity();
      v[v.size() - 7] = std::numeric_limits<float>::quiet_NaN();
    }
    for (DType lowp : {DType::f16, DType::bf16}) {
      const Expected want = expected(v, lowp);
      ASSERT_GT(want.amax, 1e30f);
      for (int threads : {1, 2, 3}) {
        auto be = make_cpu_backend(threads);
        const auto n = static_cast<int64_t>(v.size());
        Tensor src = be->from_host({n}, DType::f32, v.data());
        Tensor dst = be->zeros({n}, lowp);
        Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
        be->round_amax(src, dst, amax);
        std::vector<uint16_t> bits(v.size());
        be->download(bits.data(), dst);
        float got[numerics::kAmaxWords];
        be->download(got, amax);
        const std::string what = std::to_string(threads) + " threads, " + dtype_name(lowp) +
                                 (poison ? ", inf and NaN" : "");
        EXPECT_EQ(bits, want.bits) << what;
        EXPECT_EQ(got[0], want.amax) << what;
        EXPECT_EQ(got[1], want.nonfinite ? 1.0f : 0.0f) << what;
      }
    }
  }
}

TEST(RoundAmax, AccumulatesAMaxOverCalls) {
  auto be = make_cpu_backend(2);
  const std::vector<float> small = {0.5f, -3.0f, 0.0f}, large = {-96.0f, 2.0f};
  Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
  Tensor a = be->from_host({3}, DType::f32, small.data());
  Tensor b = be->from_host({2}, DType::f32, large.data());
  Tensor da = be->zeros({3}, DType::f16), db = be->zeros({2}, DType::f16);
  be->round_amax(b, db, amax);
  be->round_amax(a, da, amax);  // smaller: the max stays
  float got[numerics::kAmaxWords];
  be->download(got, amax);
  EXPECT_EQ(got[0], 96.0f);
  EXPECT_EQ(got[1], 0.0f);
  // The flag, once set, stays set; the max keeps counting finite values only.
  const std::vector<float> bad = {std::numeric_limits<float>::infinity(), 100.0f};
  Tensor c = be->from_host({2}, DType::f32, bad.data());
  Tensor dc = be->zeros({2}, DType::bf16);
  be->round_amax(c, dc, amax);
  be->round_amax(a, da, amax);
  be->download(got, amax);
  EXPECT_EQ(got[0], 100.0f);
  EXPECT_EQ(got[1], 1.0f);
}

TEST(RoundAmax, BadOperandsAreRefused) {
  auto be = make_cpu_backend(1);
  Tensor src = be->zeros({4}, DType::f32);
  Tensor dst = be->zeros({4}, DType::f16);
  Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
  EXPECT_THROW(be->round_amax(src, dst, be->zeros({3}, DType::f32)), Error);
  EXPECT_THROW(be->round_amax(src, dst, be->zeros({2}, DType::i32)), Error);
  EXPECT_THROW(be->round_amax(src, be->zeros({4}, DType::f32), amax), Error);
  EXPECT_THROW(be->round_amax(src, be->zeros({5}, DType::f16), amax), Error);
  EXPECT_THROW(be->round_amax(be->zeros({4}, DType::f16), dst, amax), Error);
}

}  // namespace
}  // namespace ampctl
