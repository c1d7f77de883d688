// Philox4x32-10 against the known-answer vectors published with Random123 (kat_vectors), and the
// properties the rest of ampctl relies on.
#include "ampctl/core/philox.h"

#include <gtest/gtest.h>

#include <set>

namespace ampctl {
namespace {

void expect_block(PhiloxBlock got, std::array<uint32_t, 4> want) {
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want[i]) << "lane " << i;
}

TEST(Philox, Random123KnownAnswers) {
  expect_block(philox4x32_10(PhiloxBlock{{0, 0, 0, 0}}, 0, 0),
               {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  expect_block(philox4x32_10(PhiloxBlock{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                             0xffffffffu, 0xffffffffu),
               {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  expect_block(philox4x32_10(PhiloxBlock{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                             0xa4093822u, 0x299f31d0u),
               {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST(Philox, StreamsAndSeedsAreIndependentAndDrawsAreStable) {
  std::set<uint32_t> seen;
  for (uint64_t n = 0; n < 4096; ++n) seen.insert(philox_u32(42, 7, n));
  EXPECT_GT(seen.size(), 4090u);  // 32-bit draws: collisions among 4096 are ~0.002 expected
  EXPECT_NE(philox_u32(42, 7, 0), philox_u32(43, 7, 0));
  EXPECT_NE(philox_u32(42, 7, 0), philox_u32(42, 8, 0));
  EXPECT_EQ(philox_u32(42, 7, 5), philox_block(42, 7, 1).v[1]);
}

TEST(Philox, UniformIsInHalfOpenUnitIntervalAndRoughlyUniform) {
  EXPECT_EQ(philox_uniform(0), 0.0f);
  EXPECT_LT(philox_uniform(0xffffffffu), 1.0f);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) sum += philox_uniform(philox_u32(1, 0, i));
  // Mean of n uniforms: sd = sqrt(1/12/n) ~ 0.0009; 5 sd bound.
  EXPECT_NEAR(sum / n, 0.5, 0.0046);
}

}  // namespace
}  // namespace ampctl
