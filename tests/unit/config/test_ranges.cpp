// Every range and choice rule of the table, at and beyond its bounds, through `--set` (so each
// message must name the override and the key): the value just inside a bound is accepted, the
// value just outside it is rejected with the rule and the value in the message.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ampctl/config/run_config.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::kMinimal;
using testing::only_problem;

struct Bad {
  const char* set;      // KEY=VALUE
  const char* message;  // what follows "--set KEY=VALUE: KEY: "
};

// Extra keys some rows need so the key applies (SGD's keys need optimizer.type=sgd, ...).
std::vector<std::string> context_for(const std::string& key) {
  if (key == "optimizer.momentum" || key == "optimizer.dampening" || key == "optimizer.nesterov") {
    return {"optimizer.type=sgd"};
  }
  if (key == "scheduler.step_size" || key == "scheduler.gamma") return {"scheduler.type=step"};
  if (key.rfind("scheduler.", 0) == 0 && key != "scheduler.type" &&
      key != "scheduler.warmup_steps" && key != "scheduler.min_lr") {
    return {"scheduler.type=onecycle"};
  }
  if (key == "scheduler.min_lr") return {"scheduler.type=cosine"};
  return {};
}

const Bad kBad[] = {
    {"seed=-1", "must be >= 0, got -1"},
    {"seed=1.5", "expected an integer, got 1.5"},
    {"device=gpu", "must be auto, cpu, cuda or cuda:N, got gpu"},
    {"device=cuda:x", "must be auto, cpu, cuda or cuda:N, got cuda:x"},
    {"device=cuda:-1", "must be auto, cpu, cuda or cuda:N, got cuda:-1"},
    {"name=a/b", "must not contain '/' or '\\' (it names a directory)"},
    {"name=..", "must not be '.' or '..'"},
    {"precision=fp8", "must be fp16, bf16 or fp32, got fp8"},
    {"model.type=resnet", "must be mlp, gpt or cnn, got resnet"},
    {"model.activation=selu", "must be relu, gelu or tanh, got selu"},
    {"model.hidden=[0]", ""},  // element: checked separately below
    {"model.dropout=1.0", "must be in [0.0, 1.0), got 1.0"},
    {"model.dropout=-0.1", "must be in [0.0, 1.0), got -0.1"},
    {"model.layer_norm=1", "expected true or false, got 1"},
    {"loss=hinge", "must be cross_entropy or mse, got hinge"},
    {"data.batch_size=0", "must be in [1, 2147483647], got 0"},
    {"data.batch_size=2147483648", "must be in [1, 2147483647], got 2147483648"},
    {"data.shuffle=maybe", "expected true or false, got maybe"},
    {"optimizer.type=lamb", "must be sgd, adam or adamw, got lamb"},
    {"optimizer.lr=-1e-9", "must be >= 0.0, got -1.0e-09"},
    {"optimizer.lr=.nan", "must be a number, got .nan"},
    {"optimizer.lr=.inf", "must be finite, got .inf"},
    {"optimizer.weight_decay=-0.1", "must be >= 0.0, got -0.1"},
    {"optimizer.betas=[0.9]", "expected a list of two numbers, got a list of 1"},
    {"optimizer.betas=0.9", "expected a list of two numbers, got 0.9"},
    {"optimizer.eps=0", "must be > 0.0, got 0.0"},
    {"optimizer.momentum=-0.5", "must be >= 0.0, got -0.5"},
    {"optimizer.dampening=-1", "must be >= 0.0, got -1.0"},
    {"optimizer.nesterov=yes", "expected true or false, got yes"},
    {"scheduler.type=exponential",
     "must be constant, linear, cosine, step or onecycle, got "
     "exponential"},
    {"scheduler.warmup_steps=-1", "must be >= 0, got -1"},
    {"scheduler.min_lr=-1", "must be >= 0.0, got -1.0"},
    {"scheduler.step_size=0", "must be >= 1, got 0"},
    {"scheduler.gamma=0", "must be > 0.0, got 0.0"},
    {"scheduler.max_lr=-0.1", "must be >= 0.0, got -0.1"},
    {"scheduler.pct_start=0", "must be in (0.0, 1.0), got 0.0"},
    {"scheduler.pct_start=1", "must be in (0.0, 1.0), got 1.0"},
    {"scheduler.div_factor=0", "must be > 0.0, got 0.0"},
    {"scheduler.final_div_factor=-5", "must be > 0.0, got -5.0"},
    {"scheduler.anneal_strategy=cosine", "must be cos or linear, got cosine"},
    {"scaler.enabled=yes", "must be auto, true or false, got yes"},
    {"scaler.init_scale=0", "must be > 0.0, got 0.0"},
    {"scaler.init_scale=-1", "must be > 0.0, got -1.0"},
    {"scaler.init_scale=.inf", "must be finite, got .inf"},
    {"scaler.init_scale=3.5e38",
     "must be finite in float32 (at most 3.4028234663852886e+38), got 3.5e+38"},
    {"scaler.growth_factor=1", "must be > 1.0, got 1.0"},
    {"scaler.growth_factor=0.5", "must be > 1.0, got 0.5"},
    {"scaler.growth_factor=.inf", "must be finite, got .inf"},
    {"scaler.backoff_factor=0", "must be in (0.0, 1.0), got 0.0"},
    {"scaler.backoff_factor=1", "must be in (0.0, 1.0), got 1.0"},
    {"scaler.growth_interval=0", "must be in [1, 2147483647], got 0"},
    {"scaler.growth_interval=2147483648", "must be in [1, 2147483647], got 2147483648"},
    {"scaler.growth_interval=100.0", "expected an integer, got 100.0"},
    {"scaler.hysteresis=0", "must be in [1, 2147483647], got 0"},
    {"scaler.min_scale=-1", "must be >= 0.0, got -1.0"},
    {"scaler.min_scale=.inf", "must be finite, got .inf"},
    {"scaler.max_scale=0", "must be > 0.0, got 0.0"},
    {"scaler.max_scale=-.inf", "must be > 0.0, got -.inf"},
    {"training.max_steps=0", "must be in [1, 1000000000000], got 0"},
    {"training.grad_accum_steps=0", "must be in [1, 2147483647], got 0"},
    {"training.grad_clip_norm=0", "must be > 0.0, got 0.0"},
    {"training.grad_clip_norm=.inf", "must be finite, got .inf"},
    {"training.eval_every=-1", "must be >= 0, got -1"},
    {"checkpoint.every_steps=-1", "must be >= 0, got -1"},
    {"checkpoint.keep_last=0", "must be >= 1, got 0"},
    {"logging.every_steps=0", "must be >= 1, got 0"},
    {"logging.metrics_every=0", "must be >= 1, got 0"},
    {"debug.inject_nonfinite_at=5", "expected a list of integers, got 5"},
    {"debug.inject_value=.inf", "must be inf or nan, got .inf"},
};

TEST(ConfigRanges, EveryRuleRejectsWithKeyAndValue) {
  for (const Bad& bad : kBad) {
    if (*bad.message == '\0') continue;
    const std::string set = bad.set;
    const std::string key = set.substr(0, set.find('='));
    SCOPED_TRACE(set);
    std::vector<std::string> sets = context_for(key);
    sets.push_back(set);
    const Problem p = only_problem(kMinimal, sets);
    EXPECT_EQ(p.str(), "--set " + set + ": " + key + ": " + bad.message);
    EXPECT_FALSE(p.where.has_position());
  }
}

TEST(ConfigRanges, ListElementsNameTheirIndex) {
  EXPECT_EQ(only_problem(kMinimal, {"model.hidden=[64,0]"}).str(),
            "--set model.hidden=[64,0]: model.hidden[1]: must be in [1, 2147483647], got 0");
  EXPECT_EQ(only_problem(kMinimal, {"debug.inject_nonfinite_at=[0]"}).str(),
            "--set debug.inject_nonfinite_at=[0]: debug.inject_nonfinite_at[0]: must be >= 1, "
            "got 0");
  EXPECT_EQ(only_problem(kMinimal, {"optimizer.betas=[0.9, 1.0]"}).str(),
            "--set optimizer.betas=[0.9, 1.0]: optimizer.betas[1]: must be in [0.0, 1.0), got 1.0");
}

// Values exactly at an inclusive bound, or just inside an open one, are accepted.
TEST(ConfigRanges, BoundsThatAreInside) {
  // The neighbours of 1 in float32, where every float key is used (doubles closer to 1 round to
  // it: FloatCollapse below).
  const double above_one = static_cast<double>(std::nextafter(1.0f, 2.0f));
  const double below_one = static_cast<double>(std::nextafter(1.0f, 0.0f));
  auto fmt = [](double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return std::string(buf);
  };
  const RunConfig c = parse_config(
      kMinimal, "x.yaml",
      {"seed=0", "seed=9223372036854775807", "model.dropout=0", "model.hidden=[]", "optimizer.lr=0",
       "optimizer.weight_decay=0", "optimizer.betas=[0, " + fmt(below_one) + "]",
       // eps is used in float32: its smallest normal value
       "optimizer.eps=1.1754943508222875e-38", "scaler.init_scale=3.4028234663852886e38",
       "scaler.growth_factor=" + fmt(above_one), "scaler.backoff_factor=" + fmt(below_one),
       "scaler.growth_interval=1", "scaler.hysteresis=1", "scaler.min_scale=0",
       "scaler.max_scale=.inf", "training.max_steps=1", "data.batch_size=2147483647",
       "data.drop_last=false", "training.eval_every=0", "checkpoint.keep_last=1",
       "logging.every_steps=1", "device=cuda:12", "training.grad_clip_norm=1.401298464324817e-45"});
  EXPECT_EQ(c.scaler.growth_factor, above_one);
  EXPECT_EQ(c.scaler.backoff_factor, below_one);
  EXPECT_EQ(c.optimizer.betas[1], below_one);
  EXPECT_EQ(c.optimizer.eps, static_cast<double>(std::numeric_limits<float>::min()));
  EXPECT_EQ(c.seed, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(c.scaler.init_scale, static_cast<double>(std::numeric_limits<float>::max()));
  EXPECT_TRUE(c.model.hidden.empty());
  // Integers are floats too; YAML's spellings of infinity are all accepted.
  EXPECT_EQ(parse_config(kMinimal, "x", {"scaler.init_scale=1024"}).scaler.init_scale, 1024.0);
  for (const char* inf : {".inf", ".Inf", ".INF", "+.inf"}) {
    EXPECT_TRUE(std::isinf(
        parse_config(kMinimal, "x", {std::string("scaler.max_scale=") + inf}).scaler.max_scale));
  }
}

TEST(ConfigRanges, ScalerBoundsAgainstEachOther) {
  EXPECT_EQ(
      only_problem(kMinimal, {"scaler.min_scale=8", "scaler.max_scale=4", "scaler.init_scale=6"})
          .str(),
      "--set scaler.max_scale=4: scaler.max_scale: must be >= scaler.min_scale (8.0), got 4.0");
  EXPECT_EQ(only_problem(kMinimal, {"scaler.min_scale=1024", "scaler.init_scale=512"}).str(),
            "--set scaler.init_scale=512: scaler.init_scale: must be >= scaler.min_scale (1024.0), "
            "got 512.0");
  EXPECT_EQ(only_problem(kMinimal, {"scaler.max_scale=1024"}).str(),
            "--set scaler.max_scale=1024: scaler.init_scale: must be <= scaler.max_scale "
            "(1024.0), got 65536.0");
  // min == max == init is a fixed scale: allowed.
  EXPECT_NO_THROW(parse_config(
      kMinimal, "x", {"scaler.min_scale=128", "scaler.max_scale=128", "scaler.init_scale=128"}));
}

TEST(ConfigRanges, RulesAcrossSections) {
  EXPECT_EQ(only_problem(kMinimal, {"optimizer.type=sgd", "optimizer.nesterov=true"}).str(),
            "--set optimizer.nesterov=true: optimizer.nesterov: Nesterov momentum requires a "
            "momentum and zero dampening");
  EXPECT_NO_THROW(parse_config(
      kMinimal, "x", {"optimizer.type=sgd", "optimizer.nesterov=true", "optimizer.momentum=0.9"}));
  EXPECT_EQ(only_problem(kMinimal, {"scheduler.type=cosine", "scheduler.min_lr=0.01"}).str(),
            "--set scheduler.min_lr=0.01: scheduler.min_lr: must be <= optimizer.lr (0.001), got "
            "0.01");
  EXPECT_EQ(
      only_problem(kMinimal, {"scheduler.type=linear", "scheduler.warmup_steps=1000"}).str(),
      "--set scheduler.warmup_steps=1000: scheduler.warmup_steps: must be < training.max_steps "
      "(1000) for a linear schedule, got 1000");
  EXPECT_EQ(only_problem(kMinimal, {"data.train.samples=100"}).str(),
            "--set data.train.samples=100: data.batch_size: must be <= data.train.samples (100) "
            "while data.drop_last is true (no batch would be left), got 128");
  EXPECT_NO_THROW(parse_config(kMinimal, "x", {"data.train.samples=100", "data.drop_last=false"}));
}

}  // namespace
}  // namespace ampctl::config

namespace ampctl::config {
namespace {

// Issue 47, class 5: each float key's rule holds for the float32 value it becomes, not only for
// the decimal written (backoff_factor 0.99999999 is 1.0 in float32: every step skipped, and the
// scale never backed off). The message names both values.
TEST(ConfigRanges, FloatKeysAreCheckedAsTheFloat32TheyBecome) {
  const Bad collapsing[] = {
      {"scaler.backoff_factor=0.99999999",
       "must be in (0.0, 1.0), got 0.99999999, which is 1.0 in float32"},
      {"scaler.growth_factor=1.00000001", "must be > 1.0, got 1.00000001, which is 1.0 in float32"},
      {"model.dropout=0.99999999",
       "must be in [0.0, 1.0), got 0.99999999, which is 1.0 in float32"},
      {"optimizer.lr=1e39", "must be finite, got 1.0e+39, which is .inf in float32"},
      {"optimizer.weight_decay=-1e-50", "must be >= 0.0, got -1.0e-50"},  // the double's own
      {"scheduler.gamma=1e-50", "must be > 0.0, got 1.0e-50, which is 0.0 in float32"},
      {"scheduler.pct_start=0.99999999",
       "must be in (0.0, 1.0), got 0.99999999, which is 1.0 in float32"},
      {"scheduler.base_momentum=0.99999999",
       "must be in [0.0, 1.0), got 0.99999999, which is 1.0 in float32"},
      {"training.grad_clip_norm=1e-50", "must be > 0.0, got 1.0e-50, which is 0.0 in float32"},
      {"distributed.bucket_mb=1e-50",
       "must be in (0.0, 1048576.0], got 1.0e-50, which is 0.0 in "
       "float32"},
  };
  for (const Bad& bad : collapsing) {
    const std::string set = bad.set;
    const std::string key = set.substr(0, set.find('='));
    SCOPED_TRACE(set);
    std::vector<std::string> sets = context_for(key);
    sets.push_back(set);
    const Problem p = only_problem(kMinimal, sets);
    EXPECT_EQ(p.str(), "--set " + set + ": " + key + ": " + bad.message);
  }
  EXPECT_EQ(only_problem(kMinimal, {"optimizer.betas=[0.9, 0.99999999]"}).str(),
            "--set optimizer.betas=[0.9, 0.99999999]: optimizer.betas[1]: must be in [0.0, 1.0), "
            "got 0.99999999, which is 1.0 in float32");
  // In a file: its line, the key and both values.
  const Problem p = only_problem("model: {}\ndata: {}\nscaler:\n  backoff_factor: 0.99999999\n");
  EXPECT_EQ(p.where.origin, "run.yaml");
  EXPECT_EQ(p.where.line, 4);
  EXPECT_EQ(p.key, "scaler.backoff_factor");
  EXPECT_NE(p.message.find("0.99999999, which is 1.0 in float32"), std::string::npos) << p.str();
  // A value float32 rounds but keeps inside the rule is taken as written.
  EXPECT_EQ(parse_config(kMinimal, "x", {"scaler.backoff_factor=0.9999999"}).scaler.backoff_factor,
            0.9999999);
}

}  // namespace
}  // namespace ampctl::config
