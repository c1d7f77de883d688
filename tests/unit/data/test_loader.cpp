// DataLoader and the seeded permutation: permutation properties, batch counts, exact resume
// from the cursor, cursor validation, and no heap allocation in next().
//
// This file replaces the global operator new/delete to count allocations; the data tests are a
// binary of their own, so nothing else is affected.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <set>

#include "ampctl/data/loader.h"
#include "ampctl/data/random.h"
#include "data_test_util.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// GCC sees free() on memory from operator new once these are inlined; here that is the point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace ampctl::data {
namespace {

std::vector<int64_t> permutation(uint64_t seed, int64_t epoch, size_t n) {
  std::vector<int64_t> order(n);
  epoch_permutation(seed, epoch, order);
  return order;
}

TEST(Permutation, IsAPermutationForEverySize) {
  for (size_t n : {1u, 2u, 3u, 7u, 64u, 1000u}) {
    for (int64_t epoch : {0, 1, 5}) {
      auto order = permutation(17, epoch, n);
      std::sort(order.begin(), order.end());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(order[i], static_cast<int64_t>(i)) << n;
    }
  }
}

TEST(Permutation, PureFunctionOfSeedAndEpoch) {
  const auto a = permutation(1, 0, 500);
  EXPECT_EQ(a, permutation(1, 0, 500));
  EXPECT_NE(a, permutation(1, 1, 500)) << "epochs differ";
  EXPECT_NE(a, permutation(2, 0, 500)) << "seeds differ";
  EXPECT_NE(permutation(1, 1, 500), permutation(2, 1, 500));
  // Other data streams (the split) do not reproduce the shuffle.
  std::vector<int64_t> split(500);
  seeded_permutation(1, DataStream::split, 0, split);
  EXPECT_NE(a, split);
}

// Fisher-Yates with an off-by-one (j < i instead of j <= i) still permutes but never leaves an
// element in place; a uniform shuffle makes all 3! orders equally likely.
TEST(Permutation, AllOrdersOfThreeEquallyLikely) {
  constexpr int kEpochs = 60000;
  std::map<std::vector<int64_t>, int> counts;
  for (int e = 0; e < kEpochs; ++e) ++counts[permutation(99, e, 3)];
  ASSERT_EQ(counts.size(), 6u);
  double chi2 = 0;
  const double expected = kEpochs / 6.0;
  for (const auto& [order, count] : counts)
    chi2 += (count - expected) * (count - expected) / expected;
  // Chi-square with 5 degrees of freedom: P(chi2 > 30.9) = 1e-5.
  EXPECT_LT(chi2, 30.9);
}

// A value the compiler cannot know.
int64_t loader_seed() {
  return ::testing::UnitTest::GetInstance()->random_seed() % 2;
}

Dataset numbered(int64_t n, int64_t features = 3) {
  Dataset d;
  d.features = features;
  d.classes = static_cast<int64_t>(n);
  d.origin = "numbered";
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < features; ++j) d.x.push_back(static_cast<float>(i * 100 + j));
    d.labels.push_back(static_cast<int32_t>(i));
  }
  return d;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> labels;
  bool operator==(const Batch&) const = default;
};

std::vector<Batch> take(DataLoader& loader, int count, int64_t features) {
  std::vector<Batch> out;
  for (int b = 0; b < count; ++b) {
    Batch batch{std::vector<float>(static_cast<size_t>(loader.batch_size() * features)),
                std::vector<int32_t>(static_cast<size_t>(loader.batch_size()))};
    const int64_t rows = loader.next(batch.x.data(), batch.labels.data(), nullptr);
    batch.x.resize(static_cast<size_t>(rows * features));
    batch.labels.resize(static_cast<size_t>(rows));
    out.push_back(std::move(batch));
  }
  return out;
}

TEST(DataLoader, ShuffledEpochVisitsEachSampleOnceInPermutationOrder) {
  const Dataset d = numbered(10);
  DataLoader loader(d, 4, true, false, 7);
  const auto batches = take(loader, 3, 3);
  std::vector<int64_t> seen;
  for (const auto& b : batches) {
    for (size_t r = 0; r < b.labels.size(); ++r) {
      seen.push_back(b.labels[r]);
      for (size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(b.x[r * 3 + j], static_cast<float>(b.labels[r] * 100 + static_cast<int>(j)));
      }
    }
  }
  EXPECT_EQ(seen, permutation(7, 0, 10));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.position(), 0);
  const auto next = take(loader, 3, 3);
  std::vector<int64_t> seen1;
  for (const auto& b : next) seen1.insert(seen1.end(), b.labels.begin(), b.labels.end());
  EXPECT_EQ(seen1, permutation(7, 1, 10));
}

TEST(DataLoader, UnshuffledWalksStoredOrder) {
  const Dataset d = numbered(5);
  DataLoader loader(d, 2, false, false, 7);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto b = take(loader, 3, 3);
    EXPECT_EQ(b[0].labels, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(b[1].labels, (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(b[2].labels, (std::vector<int32_t>{4}));
  }
}

TEST(DataLoader, BatchCountsWithAndWithoutDropLast) {
  const Dataset d = numbered(10);
  struct Case {
    int64_t batch;
    bool drop_last;
    int64_t batches;
    std::vector<int64_t> rows;
  };
  for (const Case& c :
       {Case{3, true, 3, {3, 3, 3}}, Case{3, false, 4, {3, 3, 3, 1}}, Case{5, true, 2, {5, 5}},
        Case{5, false, 2, {5, 5}}, Case{10, true, 1, {10}}, Case{11, false, 1, {10}}}) {
    DataLoader loader(d, c.batch, true, c.drop_last, 3);
    EXPECT_EQ(loader.batches_per_epoch(), c.batches) << c.batch << " " << c.drop_last;
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> rows;
      std::vector<float> x(static_cast<size_t>(c.batch * 3));
      for (int64_t b = 0; b < c.batches; ++b) {
        EXPECT_EQ(loader.epoch(), epoch);
        const int64_t expect = loader.next_batch_rows();
        rows.push_back(loader.next(x.data(), nullptr, nullptr));
        EXPECT_EQ(rows.back(), expect);
      }
      EXPECT_EQ(rows, c.rows) << c.batch << " " << c.drop_last;
      EXPECT_EQ(loader.epoch(), epoch + 1);
      EXPECT_EQ(loader.position(), 0);
    }
  }
  testing::expect_error(
      [&] { DataLoader(d, 11, true, true, 0); }, ErrorKind::config,
      {"data.batch_size (11) is larger than the 10 samples", "data.drop_last is true"});
  testing::expect_error([&] { DataLoader(d, 0, true, true, 0); }, ErrorKind::invalid_argument,
                        {"batch_size must be >= 1"});
}

// Resume: a loader restored from the state of another continues with exactly its batches,
// mid-epoch and across epoch boundaries, with and without drop_last.
TEST(DataLoader, RestoredCursorReproducesTheRemainingBatches) {
  const Dataset d = numbered(23);
  for (bool drop_last : {true, false}) {
    for (int stop_after : {0, 1, 3, 5, 6, 7, 13}) {
      DataLoader original(d, 4, true, drop_last, 11);
      take(original, stop_after, 3);
      // Through text, as a checkpoint stores it.
      const auto saved = nlohmann::json::parse(original.state().dump());
      const auto expect = take(original, 20, 3);  // several epochs
      DataLoader resumed(d, 4, true, drop_last, 11);
      take(resumed, 2, 3);  // a restored loader's own history does not matter
      resumed.restore(saved);
      EXPECT_EQ(resumed.state(), saved);
      EXPECT_TRUE(take(resumed, 20, 3) == expect)
          << "drop_last " << drop_last << ", resumed after " << stop_after << " batches";
    }
  }
}

TEST(DataLoader, StateIsEpochAndPosition) {
  const Dataset d = numbered(10);
  DataLoader loader(d, 4, true, true, 1);
  EXPECT_EQ(loader.state(), (nlohmann::json{{"epoch", 0}, {"position", 0}}));
  take(loader, 1, 3);
  EXPECT_EQ(loader.state(), (nlohmann::json{{"epoch", 0}, {"position", 4}}));
  take(loader, 1, 3);  // 8 + 4 > 10: the epoch ends here under drop_last
  EXPECT_EQ(loader.state(), (nlohmann::json{{"epoch", 1}, {"position", 0}}));
  // A position that leaves no full batch (saved with another batch size) starts the next epoch.
  loader.restore({{"epoch", 4}, {"position", 7}});
  EXPECT_EQ(loader.state(), (nlohmann::json{{"epoch", 5}, {"position", 0}}));
}

TEST(DataLoader, RestoreValidatesTheState) {
  const Dataset d = numbered(10);
  DataLoader loader(d, 4, true, false, 1);
  const auto bad = [&](const nlohmann::json& state, const std::string& part) {
    testing::expect_input_error([&] { loader.restore(state); }, {part});
  };
  bad(nlohmann::json::array({0, 0}), "must be an object");
  bad({{"epoch", 0}}, "'position' is missing");
  bad({{"position", 0}}, "'epoch' is missing");
  bad({{"epoch", 0}, {"position", 0}, {"step", 3}}, "unknown key 'step'");
  bad({{"epoch", 1.5}, {"position", 0}}, "'epoch' must be an integer, got 1.5");
  bad({{"epoch", "1"}, {"position", 0}}, "'epoch' must be an integer");
  bad({{"epoch", true}, {"position", 0}}, "'epoch' must be an integer");
  bad({{"epoch", -1}, {"position", 0}}, "'epoch' must be in [0, 4294967295], got -1");
  bad({{"epoch", 0}, {"position", 10}}, "'position' must be in [0, 9], got 10");
  bad({{"epoch", 0}, {"position", UINT64_MAX}}, "'position' must be in [0, 9]");
  bad({{"epoch", 4294967296LL}, {"position", 0}}, "'epoch' must be in");
  // A failed restore leaves the cursor as it was.
  EXPECT_EQ(loader.state(), (nlohmann::json{{"epoch", 0}, {"position", 0}}));
  // The last epoch serves its batches, then refuses to start another.
  const nlohmann::json last{{"epoch", DataLoader::kMaxEpoch}, {"position", 8}};
  loader.restore(last);
  std::vector<float> x(12);
  testing::expect_error([&] { loader.next(x.data(), nullptr, nullptr); }, ErrorKind::runtime,
                        {"is the last one"});
  EXPECT_EQ(loader.state(), last);
}

TEST(DataLoader, FillsRegressionTargets) {
  Dataset d;
  d.task = Task::regression;
  d.features = 2;
  d.targets = 1;
  d.origin = "reg";
  for (int i = 0; i < 6; ++i) {
    d.x.insert(d.x.end(), {static_cast<float>(i), static_cast<float>(-i)});
    d.y.push_back(static_cast<float>(i) * 0.5f);
  }
  DataLoader loader(d, 3, true, true, 5);
  std::vector<float> x(6), y(3);
  std::vector<int32_t> labels(3, -7);
  for (int b = 0; b < 4; ++b) {
    ASSERT_EQ(loader.next(x.data(), labels.data(), y.data()), 3);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(y[static_cast<size_t>(r)], x[static_cast<size_t>(2 * r)] * 0.5f);
      EXPECT_EQ(labels[static_cast<size_t>(r)], -7) << "no labels in a regression set";
    }
  }
}

TEST(DataLoader, NextDoesNotAllocate) {
  const Dataset d = numbered(1000, 16);
  for (bool shuffle : {true, false}) {
    DataLoader loader(d, 64, shuffle, false, 3);
    std::vector<float> x(64 * 16);
    std::vector<int32_t> labels(64);
    loader.next(x.data(), labels.data(), nullptr);
    const int64_t before = g_allocations.load();
    int64_t rows = 0;
    for (int step = 0; step < 200; ++step) {  // 12.5 epochs: boundaries regenerate the order
      rows += loader.next(x.data(), labels.data(), nullptr);
    }
    const int64_t allocations = g_allocations.load() - before;
    EXPECT_EQ(allocations, 0) << "shuffle " << shuffle;
    EXPECT_GT(loader.epoch(), 10);
    EXPECT_GT(rows, 0);
  }
  // The counter counts: a string too long for the small-string buffer allocates (the
  // compiler may not elide it, since its contents are used).
  const int64_t before = g_allocations.load();
  const std::string text(static_cast<size_t>(100 + loader_seed()), 'x');
  EXPECT_GE(g_allocations.load() - before, 1);
  EXPECT_EQ(text.size(), 100u + static_cast<size_t>(loader_seed()));
}

}  // namespace
}  // namespace ampctl::data
