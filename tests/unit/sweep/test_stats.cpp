// sweep/stats.h against values computed another way: published t-table quantiles (two-sided
// 0.05 at t = 2.776 with 4 degrees of freedom, 2.228 with 10; P(|T| >= 1) = 1/2 exactly for one
// degree of freedom, the Cauchy distribution) and scripts/dev/welch_reference.py, which integrates
// the t density by Simpson's rule (no incomplete beta function) for non-integer degrees of
// freedom and Welch's test.
#include "ampctl/sweep/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ampctl::sweep {
namespace {

TEST(SweepStats, StudentTTailMatchesTablesAndQuadrature) {
  // {t, df, two-sided p}: welch_reference.py's Simpson integration (200000 intervals).
  const struct {
    double t, df, p;
  } cases[] = {{2.776, 4, 0.05002277832},    {1.0, 1, 0.5},
               {2.228, 10, 0.0500117718171}, {0.5, 3.7, 0.64533563332},
               {4.0, 2.5, 0.0390129758413},  {-2.776, 4, 0.05002277832}};
  for (const auto& c : cases) {
    EXPECT_NEAR(student_t_two_sided_p(c.t, c.df), c.p, 1e-9) << "t " << c.t << " df " << c.df;
  }
  EXPECT_DOUBLE_EQ(student_t_two_sided_p(0.0, 5), 1.0);
  EXPECT_EQ(student_t_two_sided_p(INFINITY, 5), 0.0);
  EXPECT_TRUE(std::isnan(student_t_two_sided_p(1.0, 0.0)));
}

TEST(SweepStats, SampleStatsUseTheNMinusOneDenominator) {
  const std::vector<double> v = {2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0};
  const SampleStats s = sample_stats(v);
  EXPECT_EQ(s.n, 8);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.sd, std::sqrt(32.0 / 7.0), 1e-15);  // the population sd would be 2
  const std::vector<double> one = {3.5};
  EXPECT_EQ(sample_stats(one).sd, 0.0);
}

TEST(SweepStats, WelchMatchesTheReferenceScript) {
  const struct {
    std::vector<double> a, b;
    double t, df, p;
  } cases[] = {
      {{2.0635, 2.2106, 2.1599},
       {2.0698, 2.1985, 2.1643},
       0.00807178313085,
       3.94898648927,
       0.993950991982},
      {{1.0, 1.2, 0.9}, {2.0, 2.1, 1.95}, -9.9728202058, 2.94117647059, 0.00233261152834},
  };
  for (const auto& c : cases) {
    const std::optional<WelchTest> w = welch_t_test(sample_stats(c.a), sample_stats(c.b));
    ASSERT_TRUE(w.has_value());
    EXPECT_NEAR(w->t, c.t, 1e-9);
    EXPECT_NEAR(w->df, c.df, 1e-9);
    EXPECT_NEAR(w->p, c.p, 1e-9);
  }
  // One seed, or no variance on either side: no test.
  const std::vector<double> one = {1.0}, flat = {2.0, 2.0, 2.0};
  EXPECT_FALSE(welch_t_test(sample_stats(one), sample_stats(flat)).has_value());
  EXPECT_FALSE(welch_t_test(sample_stats(flat), sample_stats(flat)).has_value());
  // Both without spread, different means: certain (16 skipped steps on every seed against 0).
  const std::vector<double> sixteen = {16.0, 16.0, 16.0}, zero = {0.0, 0.0, 0.0};
  const std::optional<WelchTest> certain = welch_t_test(sample_stats(sixteen), sample_stats(zero));
  ASSERT_TRUE(certain.has_value());
  EXPECT_EQ(certain->p, 0.0);
  EXPECT_EQ(certain->t, INFINITY);
}

TEST(SweepStats, ShortestNumbersReadBackAsTheSameValue) {
  EXPECT_EQ(shortest_number(static_cast<double>(1e-6f)), "1e-06");  // a float key's value
  EXPECT_EQ(shortest_number(1e-6), "1e-06");
  EXPECT_EQ(shortest_number(0.1), "0.1");
  EXPECT_EQ(shortest_number(static_cast<double>(2.0635507f)), "2.0635507");  // a float loss
  EXPECT_EQ(shortest_number(2.044908447265625), "2.044908447265625");        // a double mean
  EXPECT_EQ(shortest_number(65536.0), "65536");
  EXPECT_EQ(shortest_number(4294967296.0), "4294967296");
  EXPECT_EQ(shortest_number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(shortest_number(-INFINITY), "-inf");
  EXPECT_EQ(shortest_number(NAN), "nan");
}

// The report's and the console's one short format: at most 5 significant digits, integers below
// 10^6 whole.
TEST(SweepStats, ShortNumbersHaveAtMostFiveSignificantDigits) {
  EXPECT_EQ(short_number(2.044908447265625), "2.0449");
  EXPECT_EQ(short_number(static_cast<double>(1e-6f)), "1e-06");
  EXPECT_EQ(short_number(0.1 + 0.2), "0.3");
  EXPECT_EQ(short_number(65536.0), "65536");
  EXPECT_EQ(short_number(123456.0), "123456");  // a step count stays exact
  EXPECT_EQ(short_number(1048576.0), "1.0486e+06");
  EXPECT_EQ(short_number(12345.678901234), "12346");
  EXPECT_EQ(short_number(-0.0), "0");
  EXPECT_EQ(short_number(-2.5), "-2.5");
  EXPECT_EQ(short_number(INFINITY), "inf");
  EXPECT_EQ(short_number(NAN), "nan");
}

}  // namespace
}  // namespace ampctl::sweep
