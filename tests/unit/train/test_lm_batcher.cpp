// LmBatcher (train/batcher.h): language-model batches on the CPU backend, checked against the
// token array directly: every input row is a window of consecutive tokens starting where
// data::window_start says, the target is the same window shifted by one; the cursor restores
// the same sequence of batches; evaluation batches are the same at every evaluation.
#include <gtest/gtest.h>

#include <numeric>

#include "ampctl/backend/backend.h"
#include "ampctl/core/error.h"
#include "ampctl/data/lm.h"
#include "ampctl/train/batcher.h"

namespace ampctl::train {
namespace {

data::LmData make_data(int64_t n_train, int64_t n_eval) {
  data::LmData d;
  d.vocab_size = 97;
  // Distinct-looking ids: position i holds (i * 31 + 7) % 97, so a wrong offset is visible.
  for (int64_t i = 0; i < n_train; ++i)
    d.train.tokens.push_back(static_cast<int32_t>((i * 31 + 7) % 97));
  d.train.origin = "train";
  if (n_eval > 0) {
    data::TokenSet e;
    for (int64_t i = 0; i < n_eval; ++i)
      e.tokens.push_back(static_cast<int32_t>((i * 13 + 5) % 97));
    e.origin = "eval";
    d.eval = e;
  }
  return d;
}

std::vector<int32_t> ints(Backend& b, const Tensor& t) {
  std::vector<int32_t> out(t.numel());
  b.download(out.data(), t);
  return out;
}

void expect_windows(Backend& b, const Batch& batch, const std::vector<int32_t>& tokens,
                    uint64_t seed, bool eval, int64_t k, int64_t B, int64_t T) {
  ASSERT_EQ(batch.rows, B);
  ASSERT_EQ(batch.input.shape(), (Shape{B, T}));
  ASSERT_EQ(batch.target.shape(), (Shape{B * T}));
  ASSERT_EQ(batch.input.dtype(), DType::i32);
  const std::vector<int32_t> in = ints(b, batch.input), tg = ints(b, batch.target);
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t r = 0; r < B; ++r) {
    const int64_t start = data::window_start(seed, eval, k, B, r, n, T);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(in[static_cast<size_t>(r * T + t)], tokens[static_cast<size_t>(start + t)])
          << "batch " << k << " row " << r << " position " << t;
      ASSERT_EQ(tg[static_cast<size_t>(r * T + t)], tokens[static_cast<size_t>(start + t + 1)])
          << "batch " << k << " row " << r << " position " << t;
    }
  }
}

TEST(LmBatcher, BatchesAreSeededWindowsAndTargetsTheNextTokens) {
  auto b = make_cpu_backend(1);
  const data::LmData d = make_data(500, 120);
  const int64_t B = 3, T = 16;
  LmBatcher batcher(*b, d, B, T, /*eval_batches=*/4, /*seed=*/9);
  EXPECT_FALSE(batcher.classification());
  ASSERT_TRUE(batcher.has_eval());
  EXPECT_EQ(batcher.eval_size(), 4 * B);
  for (int64_t k = 0; k < 5; ++k)
    expect_windows(*b, batcher.next(), d.train.tokens, 9, false, k, B, T);
  EXPECT_EQ(batcher.state(), (nlohmann::json{{"batches", 5}}));
  // Evaluation: batch j of the eval stream, the same at every evaluation.
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t j = 0; j < 4; ++j) {
      expect_windows(*b, batcher.eval_batch(j * B), d.eval->tokens, 9, true, j, B, T);
    }
  }
  // ... and an evaluation does not move the training cursor.
  expect_windows(*b, batcher.next(), d.train.tokens, 9, false, 5, B, T);
}

TEST(LmBatcher, RestoredCursorDrawsTheSameBatches) {
  auto b = make_cpu_backend(1);
  const data::LmData d = make_data(300, 0);
  LmBatcher a(*b, d, 2, 8, 1, 3), c(*b, d, 2, 8, 1, 3);
  EXPECT_FALSE(a.has_eval());
  for (int i = 0; i < 7; ++i) a.next();
  c.restore(a.state());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ints(*b, a.next().input), ints(*b, c.next().input)) << i;
  }
  // rewind (a stop between micro-batches) goes back to a cursor read before.
  const Batcher::Cursor at = a.cursor();
  const std::vector<int32_t> next = ints(*b, a.next().target);
  a.rewind(at);
  EXPECT_EQ(ints(*b, a.next().target), next);
  // A feature loader's cursor, or garbage, is refused.
  for (const nlohmann::json& bad :
       {nlohmann::json{{"epoch", 1}, {"position", 0}}, nlohmann::json{{"batches", -1}},
        nlohmann::json{{"batches", "x"}}, nlohmann::json::array()}) {
    EXPECT_THROW(c.restore(bad), Error) << bad.dump();
  }
}

}  // namespace
}  // namespace ampctl::train
