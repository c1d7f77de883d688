// Per-element math of the counted rounding (Backend::round_counted, docs/reference.md "Gradient
// numerics"), shared by the CPU backend and kernels/numerics.cu so that the host tests run the
// classification the GPU runs.
//
// One rounding of an f32 value x to f16/bf16 is classified as:
//   underflow  x != 0 (and not NaN) and the rounded value is +-0;
//   subnormal  the rounded value is a non-zero subnormal of the low-precision format;
//   nonfinite  x is inf or NaN before the rounding (an overflow upstream already happened);
//   max_bits   the largest |x| over the finite values, as float bits (for non-negative floats
//              the bit pattern orders like the value, so max is an integer max: deterministic,
//              an integer atomicMax on the GPU);
//   histogram  each finite non-zero x in bin ceil(log2 |x|) + kBinOffset. With that bin, x
//              scaled by 2^k rounds to zero exactly when bin - kBinOffset <= zero_limit - k,
//              where 2^zero_limit is half the smallest subnormal (ties go to the even zero), so
//              the underflow at any other power-of-two scale follows from the histogram alone
//              (run/numerics.h: the scale advice).
// Every counter is an int64 (counts can pass 2^31 over a step's roundings): a counters row is
// kWidth int64s, stored in an i32 tensor of 2 * kWidth words (little-endian pairs).
#pragma once

#include <cstdint>

#include "ampctl/core/half.h"
#include "ampctl/core/hd.h"

namespace ampctl::numerics {

inline constexpr int kBinOffset = 149;  // ceil(log2 |x|) of f32 values: -149 ... 128
inline constexpr int kBins = 128 + kBinOffset + 1;
enum Counter : int { kValues = 0, kUnderflow, kSubnormal, kNonfinite, kMaxBits, kHist0 };
inline constexpr int kWidth = kHist0 + kBins;  // int64 counters per row
inline constexpr int kWords = 2 * kWidth;      // i32 words per row

// log2 of half the smallest subnormal: a value of magnitude <= 2^zero_limit rounds to zero.
inline constexpr int kHalfZeroLimit = -25;   // f16: smallest subnormal 2^-24
inline constexpr int kBf16ZeroLimit = -134;  // bf16: smallest subnormal 2^-133

AMPCTL_HD int leading_zeros32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __clz(static_cast<int>(v));
#else
  return v == 0 ? 32 : __builtin_clz(v);
#endif
}

// ceil(log2 |x|) + kBinOffset for the bits of a finite, non-zero |x| (sign cleared).
AMPCTL_HD int magnitude_bin(uint32_t abs_bits) {
  const uint32_t e = abs_bits >> 23;
  const uint32_t m = abs_bits & 0x7fffffu;
  int c;
  if (e == 0) {  // subnormal: m * 2^-149
    const int floor_log2 = 31 - leading_zeros32(m);
    c = -149 + floor_log2 + ((m & (m - 1)) != 0 ? 1 : 0);
  } else {
    c = static_cast<int>(e) - 127 + (m != 0 ? 1 : 0);
  }
  return c + kBinOffset;
}

// Per-thread partial counts (the histogram is kept by the caller).
struct Partial {
  int64_t values = 0, underflow = 0, subnormal = 0, nonfinite = 0;
  uint32_t max_bits = 0;
};

// Classifies x's rounding whose result has low-precision bits `out` (f16 when is_half, else
// bf16); returns the histogram bin of x or -1 when x is zero or not finite.
AMPCTL_HD int classify(float x, uint16_t out, bool is_half, Partial& p) {
  const uint32_t ab = float_bits(x) & 0x7fffffffu;
  ++p.values;
  const uint16_t mag = static_cast<uint16_t>(out & 0x7fffu);
  const bool zero = mag == 0;
  const bool sub = is_half ? (mag & 0x7c00u) == 0 && !zero : (mag & 0x7f80u) == 0 && !zero;
  if (sub) ++p.subnormal;
  if (ab >= 0x7f800000u) {
    ++p.nonfinite;
    return -1;
  }
  if (ab == 0) return -1;
  if (zero) ++p.underflow;
  if (ab > p.max_bits) p.max_bits = ab;
  return magnitude_bin(ab);
}

// grad_amax (Backend::round_amax, docs/reference.md "grad_amax"): a rounding's contribution to
// the step's largest finite |x|, kept as float bits (non-negative floats order like their bits,
// so the max is an integer max: order-free, an integer atomicMax on the GPU), and whether a
// non-finite x reached the rounding (the max is then a lower bound).
// The accumulator is an f32 tensor of kAmaxWords values: [max finite |x|, 1 if any x was inf or
// NaN else 0]; both words only ever grow, so accumulating into it is a max per word (which is
// also what the ranks' all-reduce takes).
inline constexpr int kAmaxWords = 2;

AMPCTL_HD void amax_update(float x, uint32_t& max_bits, bool& nonfinite) {
  const uint32_t ab = float_bits(x) & 0x7fffffffu;
  if (ab >= 0x7f800000u) {
    nonfinite = true;
  } else if (ab > max_bits) {
    max_bits = ab;
  }
}

}  // namespace ampctl::numerics
