// The fashion_mnist source on the real files (Debian package dataset-fashion-mnist), through
// load_data as the trainer calls it. Skipped, and reported as skipped, where they are absent.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "ampctl/data/dataset.h"

namespace ampctl::data {
namespace {

constexpr const char* kDir = "/usr/share/datasets/fashion-mnist";

data::SourceOptions fashion(data::DatasetSplit split) {
  data::SourceOptions s;
  s.source = data::SourceKind::fashion_mnist;
  s.split = split;
  s.dir = kDir;
  return s;
}

TEST(FashionMnist, LoadsTheRealFiles) {
  if (!std::filesystem::is_directory(kDir)) {
    GTEST_SKIP() << kDir << " is absent (install the Debian package dataset-fashion-mnist)";
  }
  data::DataOptions c;
  c.train = fashion(data::DatasetSplit::train);
  c.eval = fashion(data::DatasetSplit::test);
  c.normalize = true;
  const auto start = std::chrono::steady_clock::now();
  const DataSplit d = load_data(c, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ info     ] fashion_mnist train + test loaded and normalised in %.3f s\n", seconds);
  RecordProperty("load_seconds", std::to_string(seconds));

  ASSERT_TRUE(d.eval);
  EXPECT_EQ(d.train.size(), 60000);
  EXPECT_EQ(d.eval->size(), 10000);
  EXPECT_EQ(d.train.features, 784);
  EXPECT_EQ(d.train.classes, 10);
  EXPECT_EQ(d.eval->classes, 10);
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  std::vector<int> train_counts(10), test_counts(10);
  for (int32_t l : d.train.labels) ++train_counts[static_cast<size_t>(l)];
  for (int32_t l : d.eval->labels) ++test_counts[static_cast<size_t>(l)];
  EXPECT_EQ(train_counts, std::vector<int>(10, 6000));
  EXPECT_EQ(test_counts, std::vector<int>(10, 1000));

  // Normalised with the training statistics: every pixel is standard over the training set.
  ASSERT_TRUE(d.normalization);
  const Normalization& n = *d.normalization;
  double worst_mean = 0, worst_std = 0, max_abs_eval = 0;
  for (int64_t j = 0; j < 784; ++j) {
    EXPECT_GT(n.std[static_cast<size_t>(j)], Normalization::kMinStd) << "pixel " << j;
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < 60000; ++i) {
      const double v = d.train.x[static_cast<size_t>(i * 784 + j)];
      s1 += v, s2 += v * v;
    }
    const double mean = s1 / 60000, var = s2 / 60000 - mean * mean;
    worst_mean = std::max(worst_mean, std::fabs(mean));
    worst_std = std::max(worst_std, std::fabs(std::sqrt(var) - 1.0));
  }
  for (float v : d.eval->x) max_abs_eval = std::max(max_abs_eval, std::fabs(double{v}));
  // Float rounding of each value (2^-24 relative of values up to ~250) averages far below 1e-4.
  EXPECT_LT(worst_mean, 1e-4);
  EXPECT_LT(worst_std, 1e-4);
  // Rare pixels have small training stds, so test values reach a few hundred: inside fp16's
  // range (65504) by a wide margin.
  std::printf("[ info     ] largest |value| in the normalised test set: %.1f\n", max_abs_eval);
  EXPECT_LT(max_abs_eval, 65504.0);
}

}  // namespace
}  // namespace ampctl::data
