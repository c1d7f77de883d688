// The sampling rule of train/sample.h, against probabilities computed here in long double: the
// token drawn for u is the first whose cumulative probability exceeds u; temperature divides
// the logits; top-k keeps the k largest (ties: the lower id).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ampctl/train/sample.h"

namespace ampctl::train {
namespace {

std::vector<long double> probabilities(const std::vector<float>& logits, double t,
                                       const std::vector<bool>& keep) {
  long double max = -INFINITY, sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep[i]) max = std::max(max, static_cast<long double>(logits[i]) / t);
  }
  std::vector<long double> p(logits.size(), 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep[i]) sum += p[i] = std::exp(static_cast<long double>(logits[i]) / t - max);
  }
  for (auto& x : p) x /= sum;
  return p;
}

// Checks pick_token at u just below and above every cumulative boundary.
void expect_inverse_cdf(const std::vector<float>& logits, double t, std::optional<int64_t> k,
                        const std::vector<bool>& keep) {
  const std::vector<long double> p = probabilities(logits, t, keep);
  long double acc = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      continue;
    }
    const long double lo = acc, hi = acc + p[i];
    acc = hi;
    const double inside = static_cast<double>((lo + hi) / 2);
    EXPECT_EQ(pick_token(logits, t, k, inside), static_cast<int64_t>(i)) << "u " << inside;
    if (hi < 1 - 1e-9) {
      EXPECT_EQ(pick_token(logits, t, k, static_cast<double>(hi - 1e-9)), static_cast<int64_t>(i));
    }
  }
  EXPECT_TRUE(keep[static_cast<size_t>(pick_token(logits, t, k, 0.0))]);
  EXPECT_TRUE(keep[static_cast<size_t>(pick_token(logits, t, k, 0.999999999))]);
}

TEST(Sample, PickTokenIsTheInverseCdfOfTheTemperedSoftmax) {
  const std::vector<float> logits = {1.0f, -2.0f, 0.5f, 3.0f, 3.0f, -1.0f};
  const std::vector<bool> all(logits.size(), true);
  for (double t : {1.0, 0.5, 2.0}) expect_inverse_cdf(logits, t, std::nullopt, all);
  // top-k 3: ids 3 and 4 (tied at 3.0, both kept) and 0 (1.0).
  expect_inverse_cdf(logits, 1.0, 3, {true, false, false, true, true, false});
  // top-k 1 with a tie keeps the lower id: always 3.
  for (double u : {0.0, 0.3, 0.99}) EXPECT_EQ(pick_token(logits, 1.0, 1, u), 3);
  // k >= the vocabulary is no restriction.
  expect_inverse_cdf(logits, 1.0, 100, all);
  // A very low temperature is the argmax (lower id on a tie).
  EXPECT_EQ(pick_token(logits, 1e-6, std::nullopt, 0.4), 3);
}

}  // namespace
}  // namespace ampctl::train
