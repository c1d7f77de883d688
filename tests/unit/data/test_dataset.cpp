// load_data: normalisation statistics against an independent reference, the eval split, and
// the checks between a training and an eval source.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "ampctl/data/dataset.h"
#include "data_test_util.h"

namespace ampctl::data {
namespace {

using testing::expect_input_error;

// Seeded features with very different offsets and scales per feature (and one constant
// feature), labels in [0, classes).
Dataset random_set(int64_t n, int64_t f, uint64_t seed, int64_t classes = 4) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Dataset d;
  d.features = f;
  d.classes = classes;
  d.origin = "random";
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const float offset = static_cast<float>(j * j) * 100.0f - 50.0f;
      const float scale = std::pow(10.0f, static_cast<float>(j % 5) - 2.0f);
      d.x.push_back(j == 1 ? 7.25f : offset + scale * normal(rng));
    }
    d.labels.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(classes)));
  }
  return d;
}

// The reference: the same two-pass definition in long double (64-bit mantissa, 2048 times
// finer than double), so its own rounding is negligible against the tolerances below.
void reference_stats(const Dataset& d, double pixel, std::vector<double>& mean,
                     std::vector<double>& stdev) {
  const auto f = static_cast<size_t>(d.features);
  const auto n = static_cast<long double>(d.size());
  const auto value = [&](int64_t i, size_t j) {
    return static_cast<long double>(d.x[static_cast<size_t>(i) * f + j]) / pixel;
  };
  mean.assign(f, 0.0);
  stdev.assign(f, 0.0);
  for (size_t j = 0; j < f; ++j) {
    long double s = 0;
    for (int64_t i = 0; i < d.size(); ++i) s += value(i, j);
    const long double m = s / n;
    long double ss = 0;
    for (int64_t i = 0; i < d.size(); ++i) ss += (value(i, j) - m) * (value(i, j) - m);
    mean[j] = static_cast<double>(m);
    stdev[j] = static_cast<double>(std::sqrt(ss / n));
  }
}

TEST(Normalization, StatisticsMatchReference) {
  for (bool pixels : {false, true}) {
    Dataset d = random_set(2000, 9, 5);
    if (pixels) {
      for (float& v : d.x) v = static_cast<float>(static_cast<int64_t>(std::fabs(v)) % 256);
      d.pixels = true;
    }
    const Normalization stats = compute_normalization(d);
    std::vector<double> mean, stdev;
    reference_stats(d, pixels ? 255.0 : 1.0, mean, stdev);
    for (size_t j = 0; j < mean.size(); ++j) {
      // A double sum of n = 2000 terms is off by at most n * 2^-53 = 2.2e-13 of sum |x|
      // (recursive summation bound); sum |x| / n is at most |mean| + std for these
      // single-signed-offset features, so 1e-12 of that holds with a margin of 4. The squared
      // deviations are all positive: the same relative bound on the variance, half of it on
      // the std, plus the rounding of each deviation (2^-53 of |mean|).
      const double scale = std::fabs(mean[j]) + stdev[j];
      EXPECT_NEAR(stats.mean[j], mean[j], 1e-12 * scale) << "feature " << j;
      EXPECT_NEAR(stats.std[j], stdev[j], 1e-12 * scale) << "feature " << j;
    }
    // The constant feature: exactly 0 when its value is exact in double (7.25), a rounding
    // residue when it is 7/255; either way below the floor, so it is only centred.
    if (pixels) {
      EXPECT_LT(stats.std[1], Normalization::kMinStd);
    } else {
      EXPECT_EQ(stats.std[1], 0.0);
    }
    EXPECT_EQ(stats.divisor(1), 1.0);
  }
}

TEST(Normalization, AppliedValuesAreStandardAndCentredWhenConstant) {
  Dataset train = random_set(3000, 6, 6);
  const Normalization stats = compute_normalization(train);
  const Dataset raw = train;
  apply_normalization(stats, train);
  std::vector<double> mean, stdev;
  reference_stats(train, 1.0, mean, stdev);
  for (size_t j = 0; j < mean.size(); ++j) {
    if (j == 1) {
      EXPECT_EQ(mean[j], 0.0);
      EXPECT_EQ(stdev[j], 0.0);
      continue;
    }
    // Each value is rounded once to float (2^-24 relative of values up to ~4 in size).
    EXPECT_NEAR(mean[j], 0.0, 1e-6) << j;
    EXPECT_NEAR(stdev[j], 1.0, 1e-6) << j;
  }
  // Exactly the double formula rounded once.
  for (size_t i = 0; i < train.x.size(); ++i) {
    const size_t j = i % 6;
    const auto expect =
        static_cast<float>((static_cast<double>(raw.x[i]) - stats.mean[j]) / stats.divisor(j));
    ASSERT_EQ(train.x[i], expect) << i;
  }
}

TEST(Normalization, EvalUsesTrainingStatistics) {
  Dataset train = random_set(500, 4, 7), eval = random_set(300, 4, 8);
  eval.x[4 * 3 + 1] = 9.0f;  // differs from the training set's constant 7.25
  const Normalization stats = compute_normalization(train);
  const Dataset raw = eval;
  apply_normalization(stats, eval);
  for (size_t i = 0; i < eval.x.size(); ++i) {
    const size_t j = i % 4;
    ASSERT_EQ(eval.x[i], static_cast<float>((raw.x[i] - stats.mean[j]) / stats.divisor(j))) << i;
  }
  EXPECT_EQ(eval.x[4 * 3 + 1], 9.0f - 7.25f) << "constant in training: only centred";
}

TEST(Normalization, OverflowIsReportedWithTheSample) {
  Dataset train = random_set(100, 3, 9);
  for (int64_t i = 0; i < train.size(); ++i) train.x[static_cast<size_t>(i * 3)] = 1e-3f * i;
  Dataset eval = random_set(10, 3, 10);
  eval.x[3 * 6] = 3e38f;
  const Normalization stats = compute_normalization(train);
  expect_input_error([&] { apply_normalization(stats, eval); },
                     {"random: sample 6: feature 0", "overflows float after normalisation"});
}

TEST(CheckDataset, NamesTheSample) {
  Dataset d = random_set(10, 3, 11);
  d.x[3 * 4 + 2] = NAN;
  expect_input_error([&] { check_dataset(d); }, {"random: sample 4: feature 2 is not finite"});
  d = random_set(10, 3, 11);
  d.labels[8] = 4;
  expect_input_error([&] { check_dataset(d); }, {"sample 8: label 4 is out of range [0, 4)"});
}

TEST(Split, CountRule) {
  EXPECT_EQ(split_eval_count(1000, 0.1), 100);
  EXPECT_EQ(split_eval_count(10, 0.7), 7) << "0.7 * 10 is 7.000000000000001 in double";
  EXPECT_EQ(split_eval_count(10, 0.25), 3) << "2.5 rounds up";
  EXPECT_EQ(split_eval_count(10, 0.01), 1) << "at least one";
  EXPECT_EQ(split_eval_count(2, 0.5), 1);
  testing::expect_error([] { split_eval_count(1, 0.5); }, ErrorKind::config,
                        {"holds out 1 of the 1 samples", "leaving none"});
  testing::expect_error([] { split_eval_count(10, 0.96); }, ErrorKind::config, {"leaving none"});
  testing::expect_error([] { split_eval_count(10, 1.0); }, ErrorKind::config, {"(0, 1)"});
}

TEST(Split, HoldsOutASeededDisjointPartInOriginalOrder) {
  Dataset all = random_set(1000, 2, 12);
  for (int64_t i = 0; i < 1000; ++i) all.x[static_cast<size_t>(2 * i)] = static_cast<float>(i);
  const DataSplit a = split_off(all, 0.2, 3), b = split_off(all, 0.2, 3),
                  c = split_off(all, 0.2, 4);
  ASSERT_TRUE(a.eval);
  EXPECT_EQ(a.train.size(), 800);
  EXPECT_EQ(a.eval->size(), 200);
  EXPECT_EQ(a.eval->classes, all.classes);
  std::set<float> ids;
  const auto collect = [&](const Dataset& d) {
    float prev = -1;
    for (int64_t i = 0; i < d.size(); ++i) {
      const float id = d.x[static_cast<size_t>(2 * i)];
      EXPECT_GT(id, prev) << "parts keep the original order";
      prev = id;
      ids.insert(id);
      const auto row = static_cast<size_t>(id);
      EXPECT_EQ(d.labels[static_cast<size_t>(i)], all.labels[row]);
      EXPECT_EQ(d.x[static_cast<size_t>(2 * i + 1)], all.x[2 * row + 1]);
    }
  };
  collect(a.train);
  collect(*a.eval);
  EXPECT_EQ(ids.size(), 1000u) << "disjoint, and together all samples";
  EXPECT_EQ(a.eval->x, b.eval->x) << "same seed, same split";
  EXPECT_NE(a.eval->x, c.eval->x) << "another seed, another split";
}

data::SourceOptions csv_source(const std::string& path) {
  data::SourceOptions s;
  s.source = data::SourceKind::csv;
  s.task = Task::classification;
  s.path = path;
  s.label_column = {"", -1};
  s.header = false;
  return s;
}

data::DataOptions csv_config(const std::string& train, std::optional<data::SourceOptions> eval,
                             bool normalize) {
  data::DataOptions c;
  c.train = csv_source(train);
  c.eval = std::move(eval);
  c.normalize = normalize;
  return c;
}

TEST(LoadData, SplitStatisticsComeFromTheTrainingPart) {
  testing::TempDir dir;
  std::string text;
  std::mt19937_64 rng(13);
  for (int i = 0; i < 50; ++i) {
    text += std::to_string(static_cast<int>(rng() % 1000)) + "," +
            std::to_string(static_cast<double>(rng() % 1000) / 7.0) + "," + std::to_string(i % 3) +
            "\n";
  }
  testing::write_text(dir / "t.csv", text);
  data::SourceOptions split;
  split.source = data::SourceKind::split;
  split.split_fraction = 0.3;
  const DataSplit raw = load_data(csv_config((dir / "t.csv").string(), split, false), 5);
  const DataSplit norm = load_data(csv_config((dir / "t.csv").string(), split, true), 5);
  ASSERT_TRUE(raw.eval && norm.eval && norm.normalization);
  EXPECT_FALSE(raw.normalization);
  EXPECT_EQ(raw.train.size(), 35);
  EXPECT_EQ(raw.eval->size(), 15);
  const Normalization expect = compute_normalization(raw.train);
  EXPECT_EQ(norm.normalization->mean, expect.mean);
  EXPECT_EQ(norm.normalization->std, expect.std);
  Dataset eval = *raw.eval;
  apply_normalization(expect, eval);
  EXPECT_EQ(norm.eval->x, eval.x);
}

TEST(LoadData, EvalSourceMustFitTheTrainingSet) {
  testing::TempDir dir;
  testing::write_text(dir / "train.csv", "1,2,0\n3,4,1\n5,6,2\n");
  testing::write_text(dir / "narrow.csv", "1,0\n");
  testing::write_text(dir / "eval.csv", "1,2,1\n3,4,3\n");
  testing::write_text(dir / "ok.csv", "1,2,1\n3,4,0\n");
  testing::write_text(dir / "one_class.csv", "1,2,0\n3,4,0\n");
  const std::string train = (dir / "train.csv").string();
  expect_input_error(
      [&] { load_data(csv_config(train, csv_source((dir / "narrow.csv").string()), true), 0); },
      {"data.eval has 1 features and data.train 2"});
  expect_input_error(
      [&] { load_data(csv_config(train, csv_source((dir / "eval.csv").string()), true), 0); },
      {"eval.csv: sample 1: label 3 is out of range for the 3 classes of data.train"});
  const DataSplit ok =
      load_data(csv_config(train, csv_source((dir / "ok.csv").string()), false), 0);
  EXPECT_EQ(ok.eval->classes, 3) << "the eval set takes the training class count";
  expect_input_error(
      [&] { load_data(csv_config((dir / "one_class.csv").string(), std::nullopt, false), 0); },
      {"every label is 0; classification needs at least 2 classes"});
}

TEST(LoadData, SyntheticEvalIsFreshSamples) {
  data::DataOptions c;
  c.train.source = data::SourceKind::synthetic;
  c.train.task = Task::classification;
  c.train.samples = 300;
  c.train.features = 8;
  c.train.classes = 3;
  c.eval = c.train;
  c.eval->samples = 100;
  c.normalize = true;
  const DataSplit d = load_data(c, 9);
  ASSERT_TRUE(d.eval);
  EXPECT_EQ(d.train.size(), 300);
  EXPECT_EQ(d.eval->size(), 100);
  EXPECT_NE(std::vector<float>(d.train.x.begin(), d.train.x.begin() + 800), d.eval->x);
}

}  // namespace
}  // namespace ampctl::data
