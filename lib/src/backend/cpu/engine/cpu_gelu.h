// The CPU backend's tanh GELU (activation kind gelu_tanh), forward and gradient, at every
// kernel level: the scalar functions here are what the portable level runs, and
// cpu_vector.cpp's gelu_tanh passes perform the same IEEE operations in the same order on
// 16 lanes, so the levels agree bitwise (tests/unit/backend/test_engine_kernels.cpp).
//
// Why not nn_math.h's gelu_tanh (libm's tanhf): tanhf is a scalar call of ~40 cycles that
// took two thirds of a GPT step on the CPU, and libm has no vector tanhf whose bits a vector
// loop could reproduce. Here tanh is evaluated in double and rounded once to float, so it is
// within 0.5 ulp (plus ~1e-13 relative) of the true tanh, inside the 2 ulps the op's error
// bounds allow tanhf (tests/unit/backend/test_transformer_ops.cpp); everything around tanh is
// nn_math.h's float formula, operation for operation.
//
// tanh in double, for a = |v| (the sign is put back at the end; tanh is odd):
//   * a is clamped to 10 (tanh(10) = 1 - 4e-9 rounds to 1.0f, as does tanh of anything larger;
//     the clamp keeps exp finite; a NaN passes the clamp);
//   * a < 2^-7: the series a (1 + a^2 (-1/3 + a^2 (2/15 + a^2 (-17/315)))), truncation
//     62/2835 a^8 < 3e-19 relative;
//   * else e = exp(2a) = 2^q 2^(j/8) p(r): k = nearbyint(2a 8 / ln 2), q = floor(k / 8),
//     j = k - 8 q, r = (2a - k ln2_hi / 8) - k ln2_lo / 8 (Cody and Waite: k ln2_hi / 8 is exact
//     and the subtraction is exact by Sterbenz), |r| <= ln(2) / 16; 2^(j/8) from a table of
//     correctly rounded doubles, p the degree-7 Taylor polynomial by Horner (truncation
//     |r|^8 / 8! < 3e-16); e is within ~7e-16 relative (table, polynomial, product). Then
//     tanh = (e - 1) / (e + 1): the subtraction amplifies e's error by e / (e - 1) <= 1 / (2a) <=
//     64, leaving < 5e-14 relative, far below float's 6e-8 (under 1e-6 of an ulp, which the
//     test GeluTanhsOwnTanhIsWithinHalfAnUlp checks over a sweep of all binades).
// (Until this version: a degree-12 polynomial on |r| <= ln(2) / 2 and the series below 2^-10,
// ~1e-13 relative; the rounded float differs from it only where tanh lies within ~1e-13 of a
// float rounding boundary.)
// No fused multiply-adds on either side (the build has contraction off; the vector code uses
// separate multiplies and adds), nearbyint and VRNDSCALEPD both round to nearest even (floor:
// toward -inf), the table lookup is VPERMPD on the same constants, and ldexp and VSCALEFPD are
// both exact here, so the scalar and the vector code agree bitwise.
#pragma once

#include <cmath>

#include "ampctl/math/nn_math.h"

namespace ampctl::cpu {

namespace gelu_detail {
inline constexpr double kTanhClamp = 10.0;
inline constexpr double kTanhSmall = 0x1p-7;
inline constexpr double kSeries3 = -1.0 / 3.0;
inline constexpr double kSeries5 = 2.0 / 15.0;
inline constexpr double kSeries7 = -17.0 / 315.0;
inline constexpr double kLog2e8 = 0x1.71547652b82fep+3;   // 8 / ln 2
inline constexpr double kLn2Hi8 = 0x1.62e42fee00000p-4;   // ln2_hi / 8: 32 significant bits
inline constexpr double kLn2Lo8 = 0x1.a39ef35793c76p-36;  // ln2_lo / 8
// 2^(j/8), j = 0..7, correctly rounded.
inline constexpr double kExp2Eighths[8] = {
    0x1.0000000000000p+0, 0x1.172b83c7d517bp+0, 0x1.306fe0a31b715p+0, 0x1.4bfdad5362a27p+0,
    0x1.6a09e667f3bcdp+0, 0x1.8ace5422aa0dbp+0, 0x1.ae89f995ad3adp+0, 0x1.d5818dcfba487p+0};
// 1 / n! for n = 7 down to 1 (the constant term 1 is added last).
inline constexpr double kExpCoef[7] = {1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
                                       1.0 / 6.0,    1.0 / 2.0,   1.0};
// 3 * kKappa as nn_math.h's gelu_tanh_grad forms it: one float product.
inline constexpr float kThreeKappa = 3.0f * nn::kGeluTanhKappa;
}  // namespace gelu_detail

// tanh(v) evaluated in double and rounded once to float (header comment).
inline float tanh_f64(float v) {
  using namespace gelu_detail;
  if (v != v) return v + v;  // NaN: quieted, as the vector code's double round trip leaves it
  double a = std::fabs(static_cast<double>(v));
  a = kTanhClamp < a ? kTanhClamp : a;
  double t;
  if (a < kTanhSmall) {
    const double a2 = a * a;
    t = a * (1.0 + a2 * (kSeries3 + a2 * (kSeries5 + a2 * kSeries7)));
  } else {
    const double y = 2.0 * a;
    const double k = std::nearbyint(y * kLog2e8);
    const double q = std::floor(k * 0.125);
    const int j = static_cast<int>(k - q * 8.0);
    const double r = (y - k * kLn2Hi8) - k * kLn2Lo8;
    double p = kExpCoef[0];
    for (int i = 1; i < 7; ++i) p = p * r + kExpCoef[i];
    p = p * r + 1.0;
    const double e = std::ldexp(p * kExp2Eighths[j], static_cast<int>(q));
    t = (e - 1.0) / (e + 1.0);
  }
  return std::copysign(static_cast<float>(t), v);
}

// nn::gelu_tanh with tanh_f64: 0.5 x (1 + tanh(kBeta (x + kKappa x^3))), left to right.
inline float gelu_tanh(float x) {
  const float x_cube = x * x * x;
  const float inner = nn::kGeluTanhBeta * (x + nn::kGeluTanhKappa * x_cube);
  return 0.5f * x * (1.0f + tanh_f64(inner));
}

// nn::gelu_tanh_grad with tanh_f64, factor by factor in its order.
inline float gelu_tanh_grad(float x) {
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = nn::kGeluTanhBeta * (x + nn::kGeluTanhKappa * x_cube);
  const float t = tanh_f64(inner);
  const float left = 0.5f * x;
  const float right = 1.0f + t;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.0f - t * t;
  const float inner_derivative = nn::kGeluTanhBeta * (1.0f + gelu_detail::kThreeKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return left_derivative + right_derivative;
}

}  // namespace ampctl::cpu
