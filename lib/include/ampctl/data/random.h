// The data module's random numbers: Philox4x32-10 (core/philox.h) keyed by the run's seed, in
// streams of their own so that shuffling, the eval split and the synthetic generators never draw
// the numbers that initialisation or dropout draw from the same seed.
//
// Stream = kDataStreamTag << 32 | purpose. Every draw is a pure function of (seed, stream,
// index): there is no generator state, so a resumed run reproduces any draw from its position.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "ampctl/core/philox.h"

namespace ampctl::data {

// "data" in ASCII: the upper half of every data stream (dropout and init use small streams).
inline constexpr uint64_t kDataStreamTag = 0x64617461u;

enum class DataStream : uint32_t {
  shuffle = 1,          // per-epoch permutations; index = epoch << 32 | draw
  split = 2,            // the {split_fraction} hold-out permutation
  synthetic_world = 3,  // class centres, projection, teacher weights (shared by train and eval)
  synthetic_train = 4,  // the training samples of a synthetic source
  synthetic_eval = 5,   // the evaluation samples of a synthetic source
  lm_train = 6,         // language-model training windows; index = batch * B + row
  lm_eval = 7,          // language-model evaluation windows (the same at every evaluation)
};

inline uint64_t stream_id(DataStream purpose) {
  return kDataStreamTag << 32 | static_cast<uint32_t>(purpose);
}

// 64 uniform bits for `index` (lanes 0 and 1 of one block; lanes 2 and 3 are unused so that
// index -> draw stays a one-to-one, easily documented map).
inline uint64_t draw_u64(uint64_t seed, DataStream purpose, uint64_t index) {
  const PhiloxBlock b = philox_block(seed, stream_id(purpose), index);
  return static_cast<uint64_t>(b.v[1]) << 32 | b.v[0];
}

// An integer uniform in [0, bound) from 64 random bits: the high half of bits * bound (Lemire).
// Without rejection the bias is at most bound / 2^64, far below anything a dataset can show.
inline uint64_t uniform_below(uint64_t bits, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
}

// A standard normal value for `index` by Box-Muller on the block's two 32-bit halves, in double
// and rounded once to float. u1 = (k + 0.5) / 2^32 is never 0, so the log is always finite
// (|value| <= sqrt(2 ln 2^33) < 6.8).
inline float draw_normal(uint64_t seed, DataStream purpose, uint64_t index) {
  const PhiloxBlock b = philox_block(seed, stream_id(purpose), index);
  constexpr double kTwoPow32 = 4294967296.0;
  const double u1 = (static_cast<double>(b.v[0]) + 0.5) / kTwoPow32;
  const double u2 = (static_cast<double>(b.v[1]) + 0.5) / kTwoPow32;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
}

// A permutation of 0..n-1 (n = order.size() < 2^32): a Fisher-Yates shuffle of the identity
// whose swap for position i (from n-1 down to 1) uses draw index (round << 32 | i) of stream
// `purpose`. A pure function of (seed, purpose, round, n); allocates nothing.
void seeded_permutation(uint64_t seed, DataStream purpose, uint64_t round,
                        std::span<int64_t> order);

// The order in which epoch `epoch` of a shuffled DataLoader visits the samples.
inline void epoch_permutation(uint64_t seed, int64_t epoch, std::span<int64_t> order) {
  seeded_permutation(seed, DataStream::shuffle, static_cast<uint64_t>(epoch), order);
}

}  // namespace ampctl::data
