// The training loop end to end on the CPU backend: the scaler's decisions recorded in
// metrics.jsonl follow docs/reference.md, "Scaler" step by step (re-derived here independently), a
// skipped step leaves parameters and optimizer state bitwise unchanged, a steady-state step
// allocates nothing, and the quickstart's loss falls.
#include "ampctl/train/trainer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>

#include "alloc_counter.h"
#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;
using ampctl::testing::g_allocations;
using ampctl::testing::g_counting;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("train", name);
}

const char* kSmall = R"(
name: small
seed: 3
device: cpu
precision: fp16
model: {type: mlp, hidden: [32, 32], activation: gelu}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 16, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 60}
logging: {every_steps: 7, metrics_every: 1}
)";

std::vector<nlohmann::json> read_lines(const fs::path& p, const std::string& kind) {
  std::ifstream in(p);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("kind") == kind) out.push_back(j);
  }
  return out;
}

// docs/reference.md's scaler rule ("Scaler"), restated independently in double: the scale after one
// update.
struct SpecScaler {
  double scale, growth, backoff, min_scale, max_scale;
  int64_t interval, hysteresis;
  int64_t tracker = 0;
  int64_t hyst_left;
  void update(bool found_inf) {
    if (found_inf) {
      tracker = 0;
      hyst_left -= 1;
      if (hyst_left <= 0) scale = std::max(double(float(scale * backoff)), min_scale);
    } else if (++tracker == interval) {
      const double grown = double(float(scale * growth));
      if (std::isfinite(grown)) scale = std::max(scale, std::min(grown, max_scale));
      tracker = 0;
      hyst_left = hysteresis;
    }
  }
};

void check_metrics_follow_spec(const std::vector<std::string>& sets,
                               int64_t expect_skips_at_least) {
  const config::RunConfig cfg = config::parse_config(kSmall, "small.yaml", sets);
  const fs::path dir = fresh_dir("spec");
  train::train(cfg, dir);
  const auto lines = read_lines(dir / "metrics.jsonl", "train");
  ASSERT_EQ(static_cast<int64_t>(lines.size()), cfg.training.max_steps);
  SpecScaler s{cfg.scaler.init_scale,     cfg.scaler.growth_factor,
               cfg.scaler.backoff_factor, cfg.scaler.min_scale,
               cfg.scaler.max_scale,      cfg.scaler.growth_interval,
               cfg.scaler.hysteresis,     0,
               cfg.scaler.hysteresis};
  s.scale = double(float(s.scale));
  int64_t skips = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    ASSERT_EQ(l.at("step").get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(l.at("scale").get<double>(), s.scale) << "step " << i + 1;
    const bool found = l.at("found_inf").get<bool>();
    EXPECT_EQ(l.at("skipped").get<bool>(), found);
    s.update(found);
    skips += found;
    EXPECT_EQ(l.at("growth_tracker").get<int64_t>(), s.tracker) << "step " << i + 1;
  }
  EXPECT_GE(skips, expect_skips_at_least);
  // Injected steps always overflow.
  for (int64_t step : cfg.debug.inject_nonfinite_at) {
    EXPECT_TRUE(lines[static_cast<size_t>(step - 1)].at("found_inf").get<bool>()) << step;
  }
  fs::remove_all(dir);
}

TEST(Trainer, MetricsFollowTheScalerRuleOnARealOverflowingRun) {
  // init_scale 2^40 overflows fp16 gradients for the first steps; growth every 5 clean steps
  // then provokes more overflows.
  check_metrics_follow_spec({"scaler.init_scale=1099511627776", "scaler.growth_interval=5"}, 10);
}

TEST(Trainer, MetricsFollowTheScalerRuleWithInjectionsHysteresisAndBounds) {
  check_metrics_follow_spec(
      {"debug.inject_nonfinite_at=[5,6,7,30,41]", "debug.inject_value=nan",
       "scaler.init_scale=1024", "scaler.growth_interval=3", "scaler.hysteresis=2",
       "scaler.min_scale=256", "scaler.max_scale=8192"},
      5);
}

std::vector<uint8_t> bytes_of(Backend& b, const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  b.download(v.data(), t);
  return v;
}

TEST(Trainer, SkippedStepLeavesParametersAndOptimizerStateBitwiseUnchanged) {
  for (const char* opt : {"adamw", "sgd"}) {
    const config::RunConfig cfg =
        config::parse_config(kSmall, "small.yaml",
                             {std::string("optimizer.type=") + opt, "debug.inject_nonfinite_at=[9]",
                              "training.grad_clip_norm=1.0", "model.dropout=0.1"});
    const fs::path dir = fresh_dir(std::string("skip_") + opt);
    Trainer t(cfg, dir);
    t.begin();
    while (t.next_step() < 9) t.step();
    Backend& b = t.backend();
    const auto params = bytes_of(b, t.model().params());
    std::vector<std::vector<uint8_t>> state;
    for (auto& [name, tensor] : t.optimizer().state_tensors()) state.push_back(bytes_of(b, tensor));
    const double scale = t.scaler().get_scale();
    t.step();  // step 9: injected
    EXPECT_EQ(bytes_of(b, t.model().params()), params) << opt;
    size_t i = 0;
    for (auto& [name, tensor] : t.optimizer().state_tensors()) {
      EXPECT_EQ(bytes_of(b, tensor), state[i++]) << opt << " " << name;
    }
    EXPECT_EQ(t.scaler().get_scale(), scale / 2);
    t.step();  // step 10 is clean and moves the parameters
    EXPECT_NE(bytes_of(b, t.model().params()), params) << opt;
    fs::remove_all(dir);
  }
}

// scaler.on_overflow: retry against the same spec: each failed attempt of a step is one
// update(found_inf = true) before the attempt that is kept, whose scale the line reports. A scale
// of 2^40 overflows every gradient (so steps exhaust their retries and are skipped), hysteresis 2
// lets an attempt retry at an unchanged scale, and the injections poison first attempts only.
TEST(Trainer, RetriedStepsFollowTheScalerRuleOnceForEveryAttempt) {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"scaler.init_scale=1099511627776"},
           {"scaler.hysteresis=2", "scaler.growth_interval=3",
            "debug.inject_nonfinite_at=[5,9,10,30]"},
           {"scaler.max_retries=1", "scaler.min_scale=1024", "scaler.init_scale=2048",
            "debug.inject_nonfinite_at=[4,8]"}}) {
    std::vector<std::string> sets = {"scaler.on_overflow=retry", "training.max_steps=40"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    const config::RunConfig cfg = config::parse_config(kSmall, "small.yaml", sets);
    const fs::path dir = fresh_dir("retry_spec");
    train::train(cfg, dir);
    const auto lines = read_lines(dir / "metrics.jsonl", "train");
    ASSERT_EQ(static_cast<int64_t>(lines.size()), cfg.training.max_steps);
    SpecScaler s{cfg.scaler.init_scale,     cfg.scaler.growth_factor,
                 cfg.scaler.backoff_factor, cfg.scaler.min_scale,
                 cfg.scaler.max_scale,      cfg.scaler.growth_interval,
                 cfg.scaler.hysteresis,     0,
                 cfg.scaler.hysteresis};
    s.scale = double(float(s.scale));
    int64_t retries = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& l = lines[i];
      const int64_t r = l.value("retries", int64_t{0});
      const bool found = l.at("found_inf").get<bool>();
      ASSERT_GE(r, 0);
      ASSERT_LE(r, cfg.scaler.max_retries) << "step " << i + 1;
      // Retries are taken until an attempt succeeds or none are left.
      if (found) {
        EXPECT_EQ(r, cfg.scaler.max_retries) << "step " << i + 1;
      }
      EXPECT_NE(l.contains("retries"), r == 0) << "step " << i + 1;
      for (int64_t a = 0; a < r; ++a) s.update(true);
      EXPECT_EQ(l.at("scale").get<double>(), s.scale) << "step " << i + 1;
      s.update(found);
      EXPECT_EQ(l.at("growth_tracker").get<int64_t>(), s.tracker) << "step " << i + 1;
      retries += r;
    }
    EXPECT_GT(retries, 0) << extra[0];
    // Injected steps are retried (their first attempt overflows) and not skipped unless the
    // recomputed gradients overflow too.
    for (int64_t step : cfg.debug.inject_nonfinite_at) {
      if (step > cfg.training.max_steps) continue;
      EXPECT_GE(lines[static_cast<size_t>(step - 1)].value("retries", 0), 1) << step;
    }
    std::ifstream in(dir / "summary.json");
    const auto summary = nlohmann::json::parse(in);
    EXPECT_EQ(summary.at("retries").get<int64_t>(), retries);
    fs::remove_all(dir);
  }
}

TEST(Trainer, SteadyStateStepAllocatesNothing) {
  for (const char* prec : {"fp16", "bf16", "fp32"}) {
    const config::RunConfig cfg = config::parse_config(
        kSmall, "small.yaml",
        {std::string("precision=") + prec, "logging.every_steps=1000", "logging.metrics_every=1000",
         "training.grad_clip_norm=1.0", "model.layer_norm=true", "model.dropout=0.1",
         "training.grad_accum_steps=2", "debug.inject_nonfinite_at=[12]"});
    const fs::path dir = fresh_dir(std::string("alloc_") + prec);
    Trainer t(cfg, dir);
    t.begin();
    for (int i = 0; i < 5; ++i) t.step();  // warm-up: workspaces reach their size
    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 20; ++i) t.step();
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0u) << prec << ": heap allocations in steady-state steps";
    fs::remove_all(dir);
  }
}

// A retried step reruns its micro-batches in the buffers the step already has: no allocation,
// retries included (steps 12 and 18 retry once each inside the counted window).
TEST(Trainer, RetriedStepAllocatesNothing) {
  const config::RunConfig cfg = config::parse_config(
      kSmall, "small.yaml",
      {"scaler.on_overflow=retry", "logging.every_steps=1000", "logging.metrics_every=1000",
       "training.grad_clip_norm=1.0", "model.dropout=0.1", "training.grad_accum_steps=2",
       "debug.inject_nonfinite_at=[3,12,18]"});
  const fs::path dir = fresh_dir("alloc_retry");
  Trainer t(cfg, dir);
  t.begin();
  for (int i = 0; i < 5; ++i) t.step();  // warm-up, one retry (step 3) among them
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 20; ++i) t.step();
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u) << "heap allocations in steps with retries";
  t.finish();
  std::ifstream in(dir / "summary.json");
  EXPECT_EQ(nlohmann::json::parse(in).at("retries").get<int64_t>(), 3);
  fs::remove_all(dir);
}

// logging.profile: the step's time split into its seven phases over the steady-state steps
// (those after the first logging interval). Profiling only reads clocks (and waits for the device
// on a GPU): the run's numbers are bitwise those of the same run without it, and its steps still
// allocate nothing.
TEST(Trainer, ProfilingSplitsTheStepByPhaseAndChangesNothing) {
  for (const char* prec : {"fp16", "bf16"}) {
    // An injected overflow is a skipped step with a scaler (fp16); without one (bf16) it would
    // poison the weights and stop the run as diverged.
    std::vector<std::string> sets = {std::string("precision=") + prec,
                                     "training.grad_clip_norm=1.0", "training.grad_accum_steps=2"};
    if (std::string(prec) == "fp16") sets.push_back("debug.inject_nonfinite_at=[20]");
    std::vector<std::string> prof_sets = sets;
    prof_sets.push_back("logging.profile=true");
    const fs::path plain_dir = fresh_dir(std::string("plain_") + prec);
    const fs::path prof_dir = fresh_dir(std::string("prof_") + prec);
    const TrainOutcome plain =
        train::train(config::parse_config(kSmall, "small.yaml", sets), plain_dir);
    const TrainOutcome prof =
        train::train(config::parse_config(kSmall, "small.yaml", prof_sets), prof_dir);
    EXPECT_TRUE(plain.summary.at("phase_ms").is_null()) << prec;
    auto a = read_lines(plain_dir / "metrics.jsonl", "train");
    auto b = read_lines(prof_dir / "metrics.jsonl", "train");
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].erase("time_s");
      b[i].erase("time_s");
      EXPECT_EQ(a[i], b[i]) << prec << " step " << i + 1;
    }
    EXPECT_EQ(plain.summary.at("final_loss"), prof.summary.at("final_loss")) << prec;

    const nlohmann::json& ph = prof.summary.at("phase_ms");
    ASSERT_TRUE(ph.is_object()) << prec;
    // logging.every_steps = 7: the first interval's steps are warm-up, the other 53 count.
    EXPECT_EQ(ph.at("steps").get<int64_t>(), 60 - 7) << ph.dump();
    double sum = 0;
    for (const char* k :
         {"data", "forward", "backward", "unscale", "optimizer", "update", "metrics"}) {
      ASSERT_TRUE(ph.contains(k)) << k;
      EXPECT_GE(ph.at(k).get<double>(), 0.0) << k;
      sum += ph.at(k).get<double>();
    }
    EXPECT_NEAR(ph.at("total").get<double>(), sum, 1e-9 * sum) << ph.dump();
    // Forward and backward do real work on every step; their clocks cannot read zero.
    EXPECT_GT(ph.at("forward").get<double>(), 0.0);
    EXPECT_GT(ph.at("backward").get<double>(), 0.0);
    fs::remove_all(plain_dir);
    fs::remove_all(prof_dir);
  }

  const config::RunConfig cfg = config::parse_config(
      kSmall, "small.yaml", {"logging.profile=true", "logging.every_steps=1000"});
  const fs::path dir = fresh_dir("prof_alloc");
  Trainer t(cfg, dir);
  t.begin();
  for (int i = 0; i < 5; ++i) t.step();
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 20; ++i) t.step();
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u) << "heap allocations in profiled steady-state steps";
  fs::remove_all(dir);
}

TEST(Trainer, QuickstartLossFalls) {
  const std::string path = std::string(AMPCTL_TEST_DATA_DIR) + "/../../configs/quickstart.yaml";
  const config::RunConfig cfg =
      config::load_config(path, {"device=cpu", "training.max_steps=200", "logging.every_steps=10",
                                 "logging.metrics_every=1"});
  const fs::path dir = fresh_dir("quickstart");
  const TrainOutcome out = train::train(cfg, dir);
  const auto lines = read_lines(dir / "metrics.jsonl", "train");
  double first = 0, last = 0;
  for (size_t i = 0; i < 10; ++i) first += lines[i].at("loss").get<double>() / 10;
  for (size_t i = lines.size() - 10; i < lines.size(); ++i)
    last += lines[i].at("loss").get<double>() / 10;
  EXPECT_LT(last, 0.5 * first) << "mean loss of the first 10 steps " << first << ", last 10 "
                               << last;
  EXPECT_GT(out.summary.at("eval").at("accuracy").get<double>(), 0.7);
  EXPECT_EQ(out.summary.at("steps").get<int64_t>(), 200);
  EXPECT_TRUE(fs::exists(dir / "config.yaml"));
  EXPECT_TRUE(fs::exists(dir / "summary.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ampctl::train
