// The defaults are docs/reference.md's defaults ("Configuration keys"): written out here by hand
// from the reference (a second source), not read from the field table.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ampctl/config/run_config.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::configs_dir;
using testing::kMinimal;

void expect_spec_defaults(const RunConfig& c) {
  EXPECT_EQ(c.seed, 0);
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.precision, Precision::fp16);

  EXPECT_EQ(c.model.type, ModelType::mlp);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(c.model.activation, Activation::relu);
  EXPECT_EQ(c.model.dropout, 0.0);
  EXPECT_FALSE(c.model.layer_norm);

  EXPECT_EQ(c.loss, LossType::cross_entropy);

  EXPECT_EQ(c.data.train.source, SourceKind::synthetic);
  EXPECT_EQ(c.data.train.task, Task::classification);
  EXPECT_EQ(c.data.train.samples, 8192);
  EXPECT_EQ(c.data.train.features, 32);
  EXPECT_EQ(c.data.train.classes, 10);
  EXPECT_FALSE(c.data.eval.has_value());
  EXPECT_EQ(c.data.batch_size, 128);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_TRUE(c.data.drop_last);
  EXPECT_TRUE(c.data.normalize);

  EXPECT_EQ(c.optimizer.type, OptimizerType::adamw);
  EXPECT_EQ(c.optimizer.lr, 1.0e-3);
  EXPECT_EQ(c.optimizer.weight_decay, 0.01);  // PyTorch AdamW's default
  EXPECT_EQ(c.optimizer.betas, (std::array<double, 2>{0.9, 0.999}));
  EXPECT_EQ(c.optimizer.eps, 1.0e-8);
  EXPECT_EQ(c.optimizer.momentum, 0.0);
  EXPECT_EQ(c.optimizer.dampening, 0.0);  // PyTorch SGD's defaults
  EXPECT_FALSE(c.optimizer.nesterov);

  EXPECT_EQ(c.scheduler.type, SchedulerType::constant);
  EXPECT_EQ(c.scheduler.warmup_steps, 0);

  EXPECT_EQ(c.scaler.enabled, Toggle::automatic);
  EXPECT_EQ(c.scaler.init_scale, 65536.0);
  EXPECT_EQ(c.scaler.growth_factor, 2.0);
  EXPECT_EQ(c.scaler.backoff_factor, 0.5);
  EXPECT_EQ(c.scaler.growth_interval, 2000);
  EXPECT_EQ(c.scaler.hysteresis, 1);
  EXPECT_EQ(c.scaler.min_scale, 0.0);
  EXPECT_EQ(c.scaler.max_scale, std::numeric_limits<double>::infinity());

  EXPECT_EQ(c.training.max_steps, 1000);
  EXPECT_EQ(c.training.grad_accum_steps, 1);
  EXPECT_FALSE(c.training.grad_clip_norm.has_value());
  EXPECT_EQ(c.training.eval_every, 0);

  EXPECT_EQ(c.checkpoint.every_steps, 0);
  EXPECT_EQ(c.checkpoint.keep_last, 3);

  EXPECT_EQ(c.logging.every_steps, 10);
  EXPECT_EQ(c.logging.metrics_every, 1);

  EXPECT_TRUE(c.debug.inject_nonfinite_at.empty());
  EXPECT_EQ(c.debug.inject_value, InjectValue::inf);
}

TEST(ConfigDefaults, MinimalDocumentTakesSpecDefaults) {
  const RunConfig c = parse_config(kMinimal, "configs/quickstart.yaml");
  EXPECT_EQ(c.name, "quickstart");  // the file's stem
  expect_spec_defaults(c);
}

TEST(ConfigDefaults, SpecListingParsesToTheDefaults) {
  // the listing in docs/reference.md writes every key, adamw's inapplicable momentum included (at
  // default).
  const RunConfig c = load_config(configs_dir() / "good" / "spec_listing.yaml");
  EXPECT_EQ(c.name, "quickstart");
  expect_spec_defaults(c);
  EXPECT_EQ(c, parse_config(kMinimal, "quickstart.yaml"));
}

TEST(ConfigDefaults, EmptySectionsTakeDefaults) {
  const RunConfig c = parse_config("model:\ndata:\nscaler:\n", "x.yaml");
  expect_spec_defaults(c);
}

TEST(ConfigDefaults, NameDefaultsToTheFileStem) {
  EXPECT_EQ(parse_config(kMinimal, "/some/dir/overflow-demo.yaml").name, "overflow-demo");
  EXPECT_EQ(parse_config(kMinimal, "plain").name, "plain");
  // A stem that cannot name a directory falls back to "run".
  EXPECT_EQ(parse_config(kMinimal, "/dir/..").name, "run");
  EXPECT_EQ(parse_config("name: mine\n" + std::string(kMinimal), "x.yaml").name, "mine");
}

TEST(ConfigDefaults, WeightDecayFollowsTheOptimizer) {
  // PyTorch: AdamW 0.01, Adam and SGD 0; a written value wins, 0 included.
  const auto wd = [](const std::string& optimizer) {
    return parse_config(std::string(kMinimal) + "optimizer: " + optimizer + "\n", "x.yaml")
        .optimizer.weight_decay;
  };
  EXPECT_EQ(wd("{type: adamw}"), 0.01);
  EXPECT_EQ(wd("{type: adam}"), 0.0);
  EXPECT_EQ(wd("{type: sgd}"), 0.0);
  EXPECT_EQ(wd("{type: adamw, weight_decay: 0.0}"), 0.0);
  EXPECT_EQ(wd("{type: sgd, weight_decay: 0.01}"), 0.01);
  EXPECT_EQ(wd("{type: adam, weight_decay: 0.5}"), 0.5);
  // --set of the type alone moves the default with it.
  EXPECT_EQ(parse_config(kMinimal, "x.yaml", {"optimizer.type=sgd"}).optimizer.weight_decay, 0.0);
  // The resolved dump writes the value, so a checkpoint's config keeps what the run used.
  const RunConfig adamw = parse_config(kMinimal, "x.yaml");
  EXPECT_EQ(from_json(to_json(adamw)).optimizer.weight_decay, 0.01);
  const RunConfig old_run =
      parse_config("model: {}\ndata: {}\noptimizer: {weight_decay: 0.0}\n", "x");
  EXPECT_EQ(from_json(to_json(old_run)).optimizer.weight_decay, 0.0);
}

TEST(ConfigDefaults, LossFollowsTheTask) {
  EXPECT_EQ(parse_config("model: {}\ndata: {train: {task: regression}}\n", "x.yaml").loss,
            LossType::mse);
  EXPECT_EQ(parse_config("model: {}\ndata: {train: {source: csv, path: a.csv, task: regression}}",
                         "x.yaml")
                .loss,
            LossType::mse);
  EXPECT_EQ(parse_config("model: {}\ndata: {train: {source: fashion_mnist}}\n", "x.yaml").loss,
            LossType::cross_entropy);
}

TEST(ConfigDefaults, SourceDefaults) {
  const RunConfig f = parse_config(
      "model: {}\ndata: {train: {source: fashion_mnist}, eval: {source: fashion_mnist}}", "x.yaml");
  EXPECT_EQ(f.data.train.split, DatasetSplit::train);
  EXPECT_EQ(f.data.eval->split, DatasetSplit::test);  // evaluation defaults to the test split
  EXPECT_EQ(f.data.train.dir, "/usr/share/datasets/fashion-mnist");

  const RunConfig csv = parse_config("model: {}\ndata: {train: {source: csv, path: a.csv}}", "x");
  EXPECT_EQ(csv.data.train.task, Task::classification);
  EXPECT_TRUE(csv.data.train.header);
  EXPECT_EQ(csv.data.train.label_column, (LabelColumn{"", -1}));  // the last column

  const RunConfig split = parse_config("model: {}\ndata: {eval: {split_fraction: 0.25}}", "x");
  ASSERT_TRUE(split.data.eval.has_value());
  EXPECT_EQ(split.data.eval->source, SourceKind::split);
  EXPECT_EQ(split.data.eval->split_fraction, 0.25);
}

TEST(ConfigDefaults, SchedulerDefaults) {
  const RunConfig step = parse_config(std::string(kMinimal) + "scheduler: {type: step}", "x.yaml");
  EXPECT_EQ(step.scheduler.step_size, 100);
  EXPECT_EQ(step.scheduler.gamma, 0.1);  // PyTorch StepLR's gamma
  const RunConfig one = parse_config(
      std::string(kMinimal) + "optimizer: {lr: 0.02}\nscheduler: {type: onecycle}", "x.yaml");
  EXPECT_EQ(one.scheduler.max_lr, 0.02);  // optimizer.lr
  // PyTorch OneCycleLR's defaults.
  EXPECT_EQ(one.scheduler.pct_start, 0.3);
  EXPECT_EQ(one.scheduler.div_factor, 25.0);
  EXPECT_EQ(one.scheduler.final_div_factor, 1e4);
  EXPECT_EQ(one.scheduler.anneal_strategy, AnnealStrategy::cos);
  EXPECT_FALSE(one.scheduler.three_phase);
  const RunConfig cos = parse_config(std::string(kMinimal) + "scheduler: {type: cosine}", "x.yaml");
  EXPECT_EQ(cos.scheduler.min_lr, 0.0);
}

TEST(ConfigDefaults, ScalerAutoFollowsPrecision) {
  auto with = [](const std::string& extra) {
    return scaler_enabled(parse_config(std::string(kMinimal) + extra, "x.yaml"));
  };
  EXPECT_TRUE(with(""));
  EXPECT_FALSE(with("precision: bf16"));
  EXPECT_FALSE(with("precision: fp32"));
  EXPECT_TRUE(with("precision: bf16\nscaler: {enabled: true}"));
  EXPECT_FALSE(with("scaler: {enabled: false}"));
  EXPECT_TRUE(with("precision: fp16\nscaler: {enabled: auto}"));
}

TEST(ConfigDefaults, ToStringSpellings) {
  EXPECT_STREQ(to_string(Precision::bf16), "bf16");
  EXPECT_STREQ(to_string(SourceKind::fashion_mnist), "fashion_mnist");
  EXPECT_STREQ(to_string(Toggle::automatic), "auto");
  EXPECT_STREQ(to_string(LossType::cross_entropy), "cross_entropy");
  EXPECT_STREQ(to_string(SchedulerType::onecycle), "onecycle");
}

}  // namespace
}  // namespace ampctl::config
