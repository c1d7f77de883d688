// IEEE binary16 (`half`) and bfloat16 storage types with round-to-nearest-even conversions.
//
// Invariants shared by every path (portable scalar code, the F16C / AVX-512 batch paths in
// core/convert.h, and CUDA device code):
//   * float -> half/bf16 rounds to nearest, ties to even; values at or above the format's
//     overflow threshold (half: 65520, i.e. max + half an ulp) become inf with the input's sign;
//     results below the smallest normal become subnormals (never flushed to zero).
//   * half/bf16 -> float is exact.
//   * NaN stays NaN: the sign and the top payload bits are kept and the quiet bit is set, which
//     is what VCVTPS2PH / VCVTPH2PS do, so the portable and hardware paths give identical bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "ampctl/core/hd.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace ampctl {

AMPCTL_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

AMPCTL_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Portable float -> binary16 bits, round to nearest even. Pure integer arithmetic, so it does not
// depend on the FPU's rounding mode or on flush-to-zero settings.
AMPCTL_HD uint16_t float_to_half_bits_portable(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: ties to even (zero)
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value / 2^-24 = m * 2^(e - 126); 14 <= shift <= 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = (ax >> 13) - (112u << 10);  // rebias the exponent from 127 to 15
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may bump the exponent: fine
  return static_cast<uint16_t>(sign | h);
}

// Portable binary16 bits -> float (exact).
AMPCTL_HD float half_bits_to_float_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) {
    if (m == 0) return bits_float(sign | 0x7f800000u);
    return bits_float(sign | 0x7fc00000u | (m << 13));  // quiet NaN, payload kept
  }
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    uint32_t exp = 113u;  // 2^-14 biased for float, before normalisation
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --exp;
    }
    return bits_float(sign | (exp << 23) | ((m & 0x3ffu) << 13));
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Portable float -> bfloat16 bits, round to nearest even (large finite values round to inf).
AMPCTL_HD uint16_t float_to_bf16_bits_portable(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + bias) >> 16);
}

AMPCTL_HD float bf16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

// The conversions device code uses: the hardware instructions, which round identically (NaN
// payloads aside: the GPU returns a canonical NaN).
AMPCTL_HD uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return float_to_half_bits_portable(f);
#endif
}

AMPCTL_HD float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return half_bits_to_float_portable(h);
#endif
}

AMPCTL_HD uint16_t float_to_bf16_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  return float_to_bf16_bits_portable(f);
#endif
}

// Storage types: 16 bits, trivially copyable, converting through float.
struct half {
  uint16_t bits = 0;
  half() = default;
  AMPCTL_HD explicit half(float f) : bits(float_to_half_bits(f)) {}
  AMPCTL_HD static half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  AMPCTL_HD operator float() const { return half_bits_to_float(bits); }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  AMPCTL_HD explicit bfloat16(float f) : bits(float_to_bf16_bits(f)) {}
  AMPCTL_HD static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  AMPCTL_HD operator float() const { return bf16_bits_to_float(bits); }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

// Round a float to the nearest value representable in the format, returned as float: the
// "rounded once to the output dtype" step of mixed-precision arithmetic.
AMPCTL_HD float round_to_half(float f) {
  return half_bits_to_float(float_to_half_bits(f));
}
AMPCTL_HD float round_to_bf16(float f) {
  return bf16_bits_to_float(float_to_bf16_bits(f));
}

}  // namespace ampctl
