// The training step's gradient-sync hook (dist/communicator.h): it is called once per step on
// the model's whole gradient arena, after the last micro-batch's backward and before the
// optimizer reads the gradients, so what a communicator makes of the gradients is what the
// optimizer applies. A stand-in two-rank communicator whose other rank holds three times our
// gradients doubles them (the mean of g and 3g): its step must equal, bit for bit, a
// one-process step with twice the learning rate.
#include "ampctl/train/step.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/config/run_config.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/build.h"
#include "ampctl/train/monitor.h"
#include "ampctl/train/trainer.h"

namespace ampctl::train {
namespace {

const char* kConfig = R"(
name: step
seed: 11
device: cpu
precision: fp32
model: {type: mlp, hidden: [16], activation: tanh}
data:
  train: {source: synthetic, task: classification, samples: 64, features: 8, classes: 3}
  batch_size: 16
optimizer: {type: sgd, lr: 0.1, weight_decay: 0.0, momentum: 0.0}
scheduler: {type: constant}
training: {max_steps: 3, grad_accum_steps: 2}
)";

// Averages over two ranks, the other one holding 3x our gradients: doubles them, and records
// each call on the gradients (the step also averages its one-element loss: left alone).
class TwoIdenticalRanks final : public dist::Communicator {
 public:
  explicit TwoIdenticalRanks(Backend& b) : m_b(&b), m_two(b.empty({1}, DType::f32)) {
    b.fill(m_two, 2.0);
  }
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  void all_reduce(const Tensor& t, dist::ReduceOp op) override {
    ASSERT_EQ(op, dist::ReduceOp::mean);
    if (t.numel() == 1) return;  // the loss
    m_b->mul_scalar_tensor(t, m_two, t);
    seen.push_back(t);
  }
  void broadcast(const Tensor&, int) override {}
  void all_gather(const Tensor&, const Tensor&) override {}
  void barrier() override {}
  void reduce_scatter(const Tensor&, dist::ReduceOp) override {}
  void all_gather_shards(const Tensor&) override {}
  int64_t all_reduce_host(int64_t v, dist::ReduceOp) override { return v; }
  std::vector<Tensor> seen;

 private:
  Backend* m_b;
  Tensor m_two;
};

struct Outcome {
  std::vector<float> params, grads;
};

Outcome run_steps(const std::vector<std::string>& sets, bool doubling, size_t* calls = nullptr,
                  bool* whole_arena = nullptr) {
  const config::RunConfig cfg = config::parse_config(kConfig, "step.yaml", sets);
  const std::unique_ptr<RunObjects> run = build_run(cfg);
  RunObjects& r = *run;
  TwoIdenticalRanks* two = nullptr;
  if (doubling) {
    auto c = std::make_unique<TwoIdenticalRanks>(*r.backend);
    two = c.get();
    r.comm = std::move(c);
  }
  Monitor mon(*r.backend, *r.scaler, *r.optimizer, r.model->layout(),
              monitor_options(cfg, Clock::now()));
  TrainStep step(StepParts{*r.backend, *r.model, *r.optimizer, *r.scaler, *r.schedule, *r.batcher,
                           mon, *r.comm},
                 step_options(cfg, *r.model));
  for (int64_t s = 1; s <= cfg.training.max_steps; ++s) step.run(s);
  Outcome o;
  o.params.resize(r.model->params().numel());
  o.grads.resize(r.model->grads().numel());
  r.backend->download(o.params.data(), r.model->params());
  r.backend->download(o.grads.data(), r.model->grads());
  if (two && calls) *calls = two->seen.size();
  if (two && whole_arena) {
    *whole_arena = true;
    for (const Tensor& t : two->seen) {
      *whole_arena = *whole_arena && t.shares_storage_with(r.model->grads()) &&
                     t.data() == r.model->grads().data() && t.numel() == r.model->grads().numel();
    }
  }
  return o;
}

TEST(TrainStep, TheGradientSyncFeedsTheOptimizer) {
  size_t calls = 0;
  bool whole_arena = false;
  const Outcome doubled = run_steps({}, /*doubling=*/true, &calls, &whole_arena);
  EXPECT_EQ(calls, 3u);  // once per step, not per micro-batch
  EXPECT_TRUE(whole_arena);
  const Outcome twice_lr = run_steps({"optimizer.lr=0.2"}, /*doubling=*/false);
  ASSERT_EQ(doubled.params.size(), twice_lr.params.size());
  // p - 0.1 * (2 g) and p - 0.2 * g are the same float for every element; and the gradients the
  // last step left are exactly twice the one-process ones.
  EXPECT_EQ(doubled.params, twice_lr.params);
  for (size_t i = 0; i < twice_lr.grads.size(); ++i) {
    ASSERT_EQ(doubled.grads[i], 2.0f * twice_lr.grads[i]) << i;
  }
  const Outcome single = run_steps({}, /*doubling=*/false);
  EXPECT_NE(single.params, doubled.params);
}

// The second process of a two-process group whose collectives are identities: it trains (on
// its shard of the data) but writes nothing.
class SecondRank final : public dist::Communicator {
 public:
  int rank() const override { return 1; }
  int world_size() const override { return 2; }
  void all_reduce(const Tensor&, dist::ReduceOp) override {}
  void broadcast(const Tensor&, int) override {}
  void all_gather(const Tensor&, const Tensor&) override {}
  void barrier() override {}
  void reduce_scatter(const Tensor&, dist::ReduceOp) override {}
  void all_gather_shards(const Tensor&) override {}
  int64_t all_reduce_host(int64_t v, dist::ReduceOp) override { return v; }
};

TEST(Trainer, OnlyRankZeroWritesTheRunDirectory) {
  namespace fs = std::filesystem;
  const config::RunConfig cfg = config::parse_config(R"(
name: ranks
seed: 4
device: cpu
precision: fp16
model: {type: mlp, hidden: [16], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 96, features: 8, classes: 3}
  eval: {split_fraction: 0.25}
  batch_size: 16
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 12, eval_every: 4}
checkpoint: {every_steps: 5}
)",
                                                     "ranks.yaml", {});
  const fs::path base =
      fs::temp_directory_path() / ("ampctl_test_ranks_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const TrainOutcome root = Trainer(cfg, base / "rank0").run();
  Trainer second(cfg, base / "rank1", [](Backend&) { return std::make_unique<SecondRank>(); });
  const TrainOutcome other = second.run();
  EXPECT_TRUE(fs::exists(base / "rank0" / "summary.json"));
  EXPECT_TRUE(fs::exists(base / "rank0" / "config.yaml"));
  EXPECT_TRUE(fs::exists(base / "rank0" / "checkpoints"));
  EXPECT_FALSE(fs::is_empty(base / "rank0" / "metrics.jsonl"));
  // This process is rank 0 of its (one-process) job, so it made and probed the directory; the
  // rank-1 trainer wrote nothing into it. (In a real job other ranks never create it.)
  EXPECT_TRUE(fs::is_empty(base / "rank1"));
  // Rank 1 trains its own shard of each global batch (data.batch_size is per rank), so only the
  // cadence matches rank 0's; its summary is computed and not written.
  EXPECT_EQ(other.summary.at("skipped_steps"), root.summary.at("skipped_steps"));
  EXPECT_NE(other.summary.at("final_loss"), root.summary.at("final_loss"));
  EXPECT_EQ(other.summary.at("steps"), 12);
  fs::remove_all(base);
}

}  // namespace
}  // namespace ampctl::train
