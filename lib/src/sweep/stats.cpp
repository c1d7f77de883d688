// Sample statistics, Student's t tail and Welch's test for `ampctl report` (sweep/stats.h).
#include "ampctl/sweep/stats.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ampctl::sweep {

namespace {

// log B(a, b) through lgamma.
double log_beta(double a, double b) {
  return std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b);
}

// The continued fraction of the incomplete beta function (modified Lentz), valid for
// x < (a + 1) / (a + b + 2); the caller uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) otherwise.
double beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 1000; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + num * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + num / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + num * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + num / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < kEps) break;
  }
  return h;
}

// The regularized incomplete beta function I_x(a, b), a, b > 0, x in [0, 1].
double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front = std::exp(a * std::log(x) + b * std::log1p(-x) - log_beta(a, b));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
  return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

}  // namespace

SampleStats sample_stats(std::span<const double> values) {
  SampleStats s;
  s.n = static_cast<int64_t>(values.size());
  if (s.n == 0) return s;
  double sum = 0.0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(s.n);
  if (s.n < 2) return s;
  double sq = 0.0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.sd = std::sqrt(sq / static_cast<double>(s.n - 1));
  return s;
}

double student_t_two_sided_p(double t, double df) {
  if (!(df > 0.0) || std::isnan(t)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(t)) return 0.0;
  return incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

std::optional<WelchTest> welch_t_test(const SampleStats& a, const SampleStats& b) {
  if (a.n < 2 || b.n < 2) return std::nullopt;
  const double va = a.sd * a.sd / static_cast<double>(a.n);
  const double vb = b.sd * b.sd / static_cast<double>(b.n);
  if (!(va + vb > 0.0)) {
    // No spread on either side (every seed gave the same value): equal means do not differ;
    // unequal ones differ for certain (t is infinite, p 0).
    if (a.mean == b.mean) return std::nullopt;
    return WelchTest{a.mean > b.mean ? INFINITY : -INFINITY, static_cast<double>(a.n + b.n - 2),
                     0.0};
  }
  WelchTest w;
  w.t = (a.mean - b.mean) / std::sqrt(va + vb);
  w.df = (va + vb) * (va + vb) /
         (va * va / static_cast<double>(a.n - 1) + vb * vb / static_cast<double>(b.n - 1));
  w.p = student_t_two_sided_p(w.t, w.df);
  return w;
}

std::string shortest_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v));
    return std::string(buf, r.ptr);
  }
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) {
    const auto r = std::to_chars(buf, buf + sizeof buf, f);
    return std::string(buf, r.ptr);
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string short_number(double v) {
  if (!std::isfinite(v)) return shortest_number(v);
  if (v == 0.0) return "0";  // -0 too
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e6) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.5g", v);
  }
  return buf;
}

}  // namespace ampctl::sweep
