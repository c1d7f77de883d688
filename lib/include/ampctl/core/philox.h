// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Output block i of stream (seed, subsequence) is a pure function of
// (key = seed, counter = {i, subsequence}), so the CPU and the GPU draw the same numbers for the
// same element without sharing state, and a checkpoint saves the RNG as two integers.
#pragma once

#include <array>
#include <cstdint>

#include "ampctl/core/hd.h"

namespace ampctl {

struct PhiloxBlock {
  uint32_t v[4];
};

AMPCTL_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// One Philox4x32 block with 10 rounds.
AMPCTL_HD PhiloxBlock philox4x32_10(PhiloxBlock ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(kM1, ctr.v[2], &hi1, &lo1);
    ctr = PhiloxBlock{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

// The block for `index` in the stream identified by (seed, stream): counter = {index lo, index hi,
// stream lo, stream hi}, key = seed.
AMPCTL_HD PhiloxBlock philox_block(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock ctr{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A uniform float in [0, 1) from the top 24 bits (every value is exactly representable).
AMPCTL_HD float philox_uniform(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// The n-th 32-bit draw of a stream: block n / 4, lane n % 4.
AMPCTL_HD uint32_t philox_u32(uint64_t seed, uint64_t stream, uint64_t n) {
  return philox_block(seed, stream, n >> 2).v[n & 3];
}

}  // namespace ampctl
