// The activations' CPU-vs-CUDA bounds (cpu_vs_cuda.h's rules): the float difference of the two
// backends' forward and backward outputs where a transcendental (erff, expf, tanhf) enters,
// propagated first-order through each formula. Shared by the nn table (test_cuda_nn.cpp) and
// the grad_amax ops' table (test_cuda_numerics_round_amax.cpp).
#pragma once

#include <cmath>

#include "ampctl/math/nn_math.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {

inline const char* kind_name(nn::ActivationKind k) {
  switch (k) {
    case nn::ActivationKind::relu:
      return "relu";
    case nn::ActivationKind::gelu:
      return "gelu";
    case nn::ActivationKind::tanh:
      return "tanh";
    case nn::ActivationKind::gelu_tanh:
      return "gelu_tanh";
  }
  return "unknown";
}

// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) with erff's result differing: first order through the
// product, one ulp per later operation.
inline double gelu_delta(double x) {
  const double e = std::erf(x * 0.70710678118654752440);
  const double s = 1.0 + e;
  return std::fabs(0.5 * x) * (kTranscendentalUlps * ulp_near(e) + ulp_near(s)) +
         ulp_near(0.5 * x * s);
}

// gelu'(x) dy = dy (cdf + x pdf): cdf = 0.5 (1 + erf), pdf = exp(-x^2 / 2) / sqrt(2 pi).
inline double gelu_grad_delta(double x, double dy) {
  const double e = std::erf(x * 0.70710678118654752440);
  const double cdf = 0.5 * (1.0 + e);
  const double ex = std::exp(-0.5 * x * x);
  const double pdf = ex * 0.39894228040143267794;
  const double d_cdf =
      0.5 * (kTranscendentalUlps * ulp_near(e) + ulp_near(1.0 + e)) + ulp_near(cdf);
  const double d_pdf = 0.39894228040143267794 * kTranscendentalUlps * ulp_near(ex) + ulp_near(pdf);
  const double d_xpdf = std::fabs(x) * d_pdf + ulp_near(x * pdf);
  const double d_g = d_cdf + d_xpdf + ulp_near(cdf + x * pdf);
  return std::fabs(dy) * d_g + ulp_near(dy * (cdf + x * pdf));
}

// gelu_tanh(x) = (0.5 x)(1 + t), t = tanhf(inner) with inner the same float operations on both
// sides (bitwise): t differs by tanhf's ulps, then one ulp per later operation.
inline constexpr double kGeluTanhBeta = 0.79788456080286535588, kGeluTanhKappa = 0.044715;
inline double gelu_tanh_t(double x) {
  return std::tanh(kGeluTanhBeta * (x + kGeluTanhKappa * x * x * x));
}
inline double gelu_tanh_delta(double x) {
  const double t = gelu_tanh_t(x);
  return std::fabs(0.5 * x) * (kTranscendentalUlps * ulp_near(t) + ulp_near(1.0 + t)) +
         ulp_near(0.5 * x * (1.0 + t));
}

// gelu_tanh'(x) dy = dy (0.5 (1 + t) + (0.5 x)(1 - t t) inner'), inner' bitwise on both sides.
inline double gelu_tanh_grad_delta(double x, double dy) {
  const double t = gelu_tanh_t(x);
  const double dt = kTranscendentalUlps * ulp_near(t);
  const double inner_d = kGeluTanhBeta * (1.0 + 3.0 * kGeluTanhKappa * x * x);
  const double left = 0.5 * (1.0 + t), td = 1.0 - t * t, right = 0.5 * x * td * inner_d;
  const double d_left = 0.5 * (dt + ulp_near(1.0 + t)) + ulp_near(left);
  const double d_td = 2.0 * std::fabs(t) * dt + ulp_near(t * t) + ulp_near(td);
  const double d_right =
      std::fabs(0.5 * x * inner_d) * d_td + ulp_near(0.5 * x * td) + ulp_near(right);
  const double g = left + right;
  return std::fabs(dy) * (d_left + d_right + ulp_near(g)) + ulp_near(dy * g);
}

}  // namespace ampctl::test
