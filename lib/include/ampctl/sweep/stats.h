// The statistics `ampctl report` shows for a sweep with seeds (docs/reference.md, "Sweeps and
// reports"): each setting's mean and sample standard deviation over its seeds, and Welch's
// two-sided t-test of a setting against the reference setting. Written here from the textbook
// formulas (no statistics library is available), and tested against published t-table values
// and an independent quadrature (scripts/dev/welch_reference.py).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace ampctl::sweep {

struct SampleStats {
  int64_t n = 0;
  double mean = 0.0;
  double sd = 0.0;  // the sample standard deviation (n - 1 in the denominator); 0 for n < 2
};
SampleStats sample_stats(std::span<const double> values);

// Student's t distribution: P(|T| >= |t|) for `df` > 0 degrees of freedom (any real df), from
// the regularized incomplete beta function I_x(df/2, 1/2) at x = df / (df + t^2).
double student_t_two_sided_p(double t, double df);

struct WelchTest {
  double t = 0.0;   // (mean_a - mean_b) / sqrt(sd_a^2/n_a + sd_b^2/n_b)
  double df = 0.0;  // Welch-Satterthwaite
  double p = 1.0;   // two-sided
};
// Welch's unequal-variance t-test; nullopt when either side has fewer than 2 values, or both
// have zero variance and equal means. Zero variance on both sides with unequal means (every seed
// of each setting gave its own same value, as skipped-step counts often do) differs for certain:
// t infinite, p 0, df n_a + n_b - 2.
std::optional<WelchTest> welch_t_test(const SampleStats& a, const SampleStats& b);

// The shortest text that reads back as the same number: as a float when the double is exactly a
// float's value (what a float32 key or a float metric stores: 1e-06, not 9.999999975e-07), else
// as a double. Integers print without an exponent up to 1e15; non-finite values as "inf", "-inf",
// "nan".
std::string shortest_number(double v);

// The report's and the sweep console's one short format: at most 5 significant digits ("%.5g":
// 2.0449, 1.0486e+06, 1e-06), integers below 10^6 whole (a step count, 65536); non-finite values
// as "inf", "-inf", "nan". What a person reads; the files keep shortest_number's exact text.
std::string short_number(double v);

}  // namespace ampctl::sweep
