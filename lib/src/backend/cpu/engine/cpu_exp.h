// The CPU backend's expf for the causal softmax: glibc's expf (2.36, its FMA variant
// __expf_fma, the one x86-64 CPUs with FMA run) operation for operation, as a scalar function
// and on 16 AVX-512 lanes, so that the portable and the vector levels agree bitwise and keep
// the bits the softmax had when it called libm (tests/unit/backend/test_engine_kernels.cpp:
// CpuExp.*). libm has no vector expf whose bits a vector loop could reproduce, and its scalar
// call (~20 cycles) took a third of the softmax's time.
//
// The algorithm (ARM's optimized-routines, as glibc ships it): in double, with N = 32,
//   z = x N / ln 2 = k + r, |r| <= 1/2: kd = fma(InvLn2N, x, Shift) - Shift rounds z to the
//   nearest integer (Shift = 1.5 * 2^52), k is kd's low bits, r = fma(InvLn2N, x, -kd);
//   2^(k/N) = double(tab[k % N] + (k << 47)) from a table of 2^(i/N) with i << 47 subtracted;
//   2^(r/N) ~= (C0 r + C1) r^2 + (C2 r + 1), each step a fused multiply-add;
//   exp(x) = (float)(2^(r/N) * 2^(k/N)), one rounding to nearest.
// |x| >= 88 (the top 12 bits of x, sign cleared, >= 0x42b) and NaN take glibc's special cases:
// -inf -> 0; NaN, +inf -> x + x; x > 88.72 -> +inf; x < -103.97 -> 0; x < -103.28 -> the
// product 0x1.4p-75f * 0x1.4p-75f (the smallest subnormal); else the main path.
// Constants are glibc's __exp2f_data (read from libm.so.6 here: tab, invln2_scaled,
// poly_scaled, shift).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ampctl::cpu {

namespace exp_detail {
inline constexpr uint64_t kTab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
inline constexpr uint64_t kInvLn2N = 0x40471547652b82fe;  // 32 / ln 2
inline constexpr uint64_t kC0 = 0x3ebc6af84b912394;
inline constexpr uint64_t kC1 = 0x3f2ebfce50fac4f3;
inline constexpr uint64_t kC2 = 0x3f962e42ff0c52d6;
inline constexpr uint64_t kShift = 0x4338000000000000;  // 1.5 * 2^52
inline constexpr uint32_t kSpecialTop = 0x42b;          // top12(88.0f)
inline constexpr uint32_t kInfTop = 0x7f8;              // top12(inf)
inline constexpr uint32_t kOverflow = 0x42b17217;       // 0x1.62e42ep6f
inline constexpr uint32_t kUnderflow = 0xc2cff1b4;      // -0x1.9fe368p6f
inline constexpr uint32_t kMayUnderflow = 0xc2ce8ecf;   // -0x1.9d1d9ep6f

inline double as_double(uint64_t b) {
  return std::bit_cast<double>(b);
}
inline uint64_t as_u64(double d) {
  return std::bit_cast<uint64_t>(d);
}
inline float as_float(uint32_t b) {
  return std::bit_cast<float>(b);
}
}  // namespace exp_detail

// glibc 2.36's __expf_fma, scalar (std::fma is the correctly rounded fused multiply-add).
inline float expf_glibc(float x) {
  using namespace exp_detail;
  uint32_t ux;
  std::memcpy(&ux, &x, 4);
  const uint32_t abstop = (ux >> 20) & 0x7ff;
  if (abstop >= kSpecialTop) {
    if (ux == 0xff800000u) return 0.0f;
    if (abstop >= kInfTop) return x + x;
    if (x > as_float(kOverflow)) return as_float(0x7f800000u);
    if (x < as_float(kUnderflow)) return 0.0f;
    if (x < as_float(kMayUnderflow)) {
      volatile float y = 0x1.4p-75f;  // the product is rounded at run time, as glibc's
      return y * y;
    }
  }
  const double xd = static_cast<double>(x);
  const double inv = as_double(kInvLn2N), shift = as_double(kShift);
  const double kd_shifted = std::fma(inv, xd, shift);
  const uint64_t ki = as_u64(kd_shifted);
  const double kd = kd_shifted - shift;
  const double r = std::fma(inv, xd, -kd);
  const double z = std::fma(as_double(kC0), r, as_double(kC1));
  const double s = as_double(kTab[ki & 31] + (ki << 47));
  const double r2 = r * r;
  double y = std::fma(r, as_double(kC2), 1.0);
  y = std::fma(z, r2, y);
  y = y * s;
  return static_cast<float>(y);
}

}  // namespace ampctl::cpu
