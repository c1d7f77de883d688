// The resolved dump reads back to the same RunConfig, as YAML (config.yaml) and as JSON
// (checkpoints): for every fixture, and for seeded random configurations whose floats span the
// whole double range (subnormals included), whose strings need quoting, and whose choices
// reach every branch of the table.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "ampctl/config/run_config.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::configs_dir;
using testing::kMinimal;

// Which sections differ (a RunConfig prints as bytes).
std::string differing_sections(const RunConfig& a, const RunConfig& b) {
  std::string s;
  if (a.name != b.name) s += "name ";
  if (a.seed != b.seed || a.device != b.device || a.precision != b.precision) s += "top ";
  if (a.model != b.model) s += "model ";
  if (a.loss != b.loss) s += "loss ";
  if (!(a.data.train == b.data.train)) s += "data.train ";
  if (a.data.eval != b.data.eval) s += "data.eval ";
  if (a.data != b.data) s += "data ";
  if (a.optimizer != b.optimizer) s += "optimizer ";
  if (a.scheduler != b.scheduler) s += "scheduler ";
  if (a.scaler != b.scaler) s += "scaler ";
  if (a.training != b.training) s += "training ";
  if (a.checkpoint != b.checkpoint || a.logging != b.logging || a.debug != b.debug) s += "rest";
  return s;
}

void expect_round_trips(const RunConfig& c) {
  const std::string yaml = to_yaml(c);
  RunConfig from_yaml;
  ASSERT_NO_THROW(from_yaml = parse_config(yaml, "other-name.yaml")) << yaml;
  EXPECT_EQ(from_yaml, c) << yaml << "differs in: " << differing_sections(from_yaml, c);
  EXPECT_EQ(to_yaml(from_yaml), yaml);  // the dump is a fixed point

  // The annotated form (ampctl validate's) reads back the same.
  EXPECT_EQ(parse_config(to_yaml(c, YamlStyle::annotated), "x.yaml"), c);

  // JSON, also through its text form as a checkpoint stores it.
  const nlohmann::json json = to_json(c);
  const nlohmann::json reparsed = nlohmann::json::parse(json.dump());
  RunConfig from_j;
  ASSERT_NO_THROW(from_j = from_json(reparsed, "checkpoint")) << json.dump(2);
  EXPECT_EQ(from_j, c) << json.dump(2);
}

TEST(ConfigRoundTrip, EveryGoodFixture) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs_dir() / "good")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    expect_round_trips(load_config(entry.path()));
    ++count;
  }
  EXPECT_GE(count, 5);
}

TEST(ConfigRoundTrip, OverridesShowInTheDump) {
  const RunConfig c = parse_config(kMinimal, "x.yaml",
                                   {"model.hidden=[64,64]", "scaler.enabled=true",
                                    "training.grad_clip_norm=0.5", "scaler.max_scale=1e10"});
  const std::string yaml = to_yaml(c);
  EXPECT_NE(yaml.find("  hidden: [64, 64]\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  enabled: true\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  grad_clip_norm: 0.5\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  max_scale: 1.0e+10\n"), std::string::npos) << yaml;
  expect_round_trips(c);
}

TEST(ConfigRoundTrip, DumpFollowsSpecOrder) {
  const std::string yaml = to_yaml(parse_config(kMinimal, "x.yaml"));
  const char* order[] = {
      "name:",         "seed:",      "device:",     "precision:", "model:",
      "  hidden:",     "loss:",      "data:",       "  train:",   "  eval:",
      "  batch_size:", "optimizer:", "scheduler:",  "scaler:",    "  init_scale:",
      "  max_scale:",  "training:",  "checkpoint:", "logging:",   "debug:"};
  size_t at = 0;
  for (const char* key : order) {
    const size_t next = yaml.find(key, at);
    ASSERT_NE(next, std::string::npos) << key << " missing or out of order in\n" << yaml;
    at = next;
  }
}

TEST(ConfigRoundTrip, InfinityInJson) {
  const nlohmann::json j = to_json(parse_config(kMinimal, "x.yaml"));
  EXPECT_EQ(j["scaler"]["max_scale"], ".inf");  // JSON has no infinity literal
  EXPECT_EQ(j["scaler"]["init_scale"], 65536.0);
  EXPECT_EQ(j["scaler"]["growth_interval"], 2000);
  EXPECT_EQ(j["scaler"]["enabled"], "auto");
  EXPECT_TRUE(j["data"]["eval"].is_null());
  EXPECT_FALSE(j["optimizer"].contains("momentum"));  // adamw: SGD's keys are left out
}

// ---- random configurations ----

class Random {
 public:
  explicit Random(uint64_t seed) : m_rng(seed) {}
  int64_t integer(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(m_rng);
  }
  bool coin() { return integer(0, 1) == 1; }
  template <class T>
  const T& pick(const std::vector<T>& options) {
    return options[static_cast<size_t>(integer(0, static_cast<int64_t>(options.size()) - 1))];
  }
  // Uniform in [0, 1) with all 53 bits, scaled by 2^-k for k up to `max_exponent`: every
  // decimal length from "0.5" to subnormals like 4.9e-324.
  double fraction(int max_exponent = 0) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(m_rng);
    return std::ldexp(u, -static_cast<int>(integer(0, max_exponent)));
  }
  double positive(int max_exponent) {  // in (0, 1) scaled, never 0
    double x = 0.0;
    while (x == 0.0) x = fraction(max_exponent);
    return x;
  }

 private:
  std::mt19937_64 m_rng;
};

DataSource random_source(Random& r, bool eval, Task task) {
  DataSource s = eval ? *parse_config("model: {}\ndata: {eval: {}}", "x").data.eval
                      : parse_config(kMinimal, "x").data.train;
  const std::vector<SourceKind> kinds =
      task == Task::regression
          ? std::vector<SourceKind>{SourceKind::synthetic, SourceKind::csv}
          : std::vector<SourceKind>{SourceKind::synthetic, SourceKind::idx,
                                    SourceKind::fashion_mnist, SourceKind::csv};
  s.source = r.pick(kinds);
  // A resolved configuration's data paths are absolute (parse_config reads a relative one from
  // the file's folder or the current directory), so only absolute ones round-trip as written.
  const std::vector<std::string> paths = {"/a.csv", "/data/x y.csv", "/rel/p.gz", "/true",
                                          "/123",   "/#hash",        "/ünï.csv",  "/a: b"};
  switch (s.source) {
    case SourceKind::synthetic:
      s.task = task;
      s.samples = r.integer(1, 1 << 20);
      s.features = r.integer(1, 4096);
      if (task == Task::classification) s.classes = r.integer(2, 1000);
      break;
    case SourceKind::idx:
      s.images = r.pick(paths);
      s.labels = r.pick(paths);
      break;
    case SourceKind::fashion_mnist:
      s.split = r.coin() ? DatasetSplit::train : DatasetSplit::test;
      s.dir = r.pick(paths);
      break;
    case SourceKind::csv:
      s.task = task;
      s.path = r.pick(paths);
      s.header = r.coin();
      s.label_column = (s.header && r.coin()) ? LabelColumn{r.pick(paths), 0}
                                              : LabelColumn{"", r.integer(-5, 50)};
      break;
    case SourceKind::split:
    case SourceKind::text:  // language-model data needs model.type: gpt, not picked here
    case SourceKind::tokens:
      break;
  }
  return s;
}

RunConfig random_config(Random& r) {
  RunConfig c = parse_config(kMinimal, "x.yaml");
  c.name = r.pick(std::vector<std::string>{"run", "true", "123", "a b", "x:y", "null", "-lead",
                                           "quo\"te", "ünï", "#hash", "'s'", "[b]", "yes", "~",
                                           ".5", "0x10", "a: b", " lead", "trail:"});
  c.seed = r.integer(0, std::numeric_limits<int64_t>::max());
  c.device = r.pick(std::vector<std::string>{"auto", "cpu", "cuda", "cuda:0", "cuda:7"});
  c.precision = r.pick(std::vector<Precision>{Precision::fp16, Precision::bf16, Precision::fp32});

  c.model.hidden.resize(static_cast<size_t>(r.integer(0, 4)));
  for (int64_t& w : c.model.hidden) w = r.integer(1, 1 << 16);
  c.model.activation =
      r.pick(std::vector<Activation>{Activation::relu, Activation::gelu, Activation::tanh});
  c.model.dropout = r.fraction(60);
  c.model.layer_norm = r.coin();

  const Task task = r.coin() ? Task::classification : Task::regression;
  c.data.train = random_source(r, false, task);
  switch (r.integer(0, 2)) {
    case 0:
      c.data.eval.reset();
      break;
    case 1:
      c.data.eval = random_source(r, true, task);
      if (c.data.eval->source == SourceKind::synthetic &&
          c.data.train.source == SourceKind::synthetic) {
        c.data.eval->features = c.data.train.features;
        c.data.eval->classes = c.data.train.classes;
      }
      break;
    default: {
      DataSource split =
          *parse_config("model: {}\ndata: {eval: {split_fraction: 0.5}}", "x").data.eval;
      split.split_fraction = r.positive(40);
      c.data.eval = split;
    }
  }
  // data.eval as a map of named sets (the first may be the split form, the others not).
  if (c.data.eval && r.coin()) {
    c.data.eval_name = "valid";
    for (int64_t i = r.integer(0, 2); i > 0; --i) {
      DataSource more = random_source(r, true, task);
      if (more.source == SourceKind::synthetic && c.data.train.source == SourceKind::synthetic) {
        more.features = c.data.train.features;
        more.classes = c.data.train.classes;
      }
      c.data.eval_sets.push_back({"set-" + std::to_string(i), more});
    }
  }
  c.loss = task == Task::regression ? LossType::mse : LossType::cross_entropy;
  c.data.drop_last = r.coin();
  c.data.batch_size = r.integer(1, 4096);
  if (c.data.train.source == SourceKind::synthetic && c.data.drop_last) {
    c.data.batch_size = std::min(c.data.batch_size, c.data.train.samples);
  }
  c.data.shuffle = r.coin();
  c.data.normalize = r.coin();

  c.optimizer.type = r.pick(
      std::vector<OptimizerType>{OptimizerType::sgd, OptimizerType::adam, OptimizerType::adamw});
  c.optimizer.lr = r.fraction(1100);  // down to subnormals
  c.optimizer.weight_decay = r.fraction(30);
  if (c.optimizer.type == OptimizerType::sgd) {
    c.optimizer.momentum = r.fraction(4);
    c.optimizer.dampening = r.coin() ? 0.0 : r.fraction(4);
    c.optimizer.nesterov = c.optimizer.momentum > 0 && c.optimizer.dampening == 0 && r.coin();
  } else {
    c.optimizer.betas = {r.fraction(3), r.fraction(3)};
    c.optimizer.eps = r.positive(80);
  }

  c.training.max_steps = r.integer(1, 1'000'000);
  c.scheduler.type = r.pick(std::vector<SchedulerType>{
      SchedulerType::constant, SchedulerType::linear, SchedulerType::cosine, SchedulerType::step,
      SchedulerType::onecycle});
  switch (c.scheduler.type) {
    case SchedulerType::linear:
    case SchedulerType::cosine:
      c.scheduler.warmup_steps = r.integer(0, c.training.max_steps - 1);
      c.scheduler.min_lr = c.optimizer.lr * r.fraction();
      break;
    case SchedulerType::step:
      c.scheduler.warmup_steps = r.integer(0, 5000);
      c.scheduler.step_size = r.integer(1, 10000);
      c.scheduler.gamma = r.positive(10) * 2;
      break;
    case SchedulerType::constant:
      c.scheduler.warmup_steps = r.integer(0, 5000);
      break;
    case SchedulerType::onecycle:
      c.scheduler.max_lr = r.fraction(20);
      c.scheduler.pct_start = r.positive(5);
      c.scheduler.div_factor = r.positive(0) * 100;
      c.scheduler.final_div_factor = r.positive(0) * 1e6;
      c.scheduler.anneal_strategy = r.coin() ? AnnealStrategy::cos : AnnealStrategy::linear;
      c.scheduler.three_phase = r.coin();
      break;
  }

  // Not off: with scaler.enabled: false the scaler keys below must keep their defaults
  // (ConfigRanges covers that rule).
  c.scaler.enabled = r.pick(std::vector<Toggle>{Toggle::automatic, Toggle::on});
  c.scaler.min_scale =
      r.coin() ? 0.0 : std::ldexp(r.positive(0), static_cast<int>(r.integer(-100, 20)));
  c.scaler.max_scale = r.coin() ? std::numeric_limits<double>::infinity()
                                : c.scaler.min_scale + std::ldexp(r.positive(0), 30);
  const double span = std::min(c.scaler.max_scale, 1e30) - c.scaler.min_scale;
  c.scaler.init_scale = std::max(c.scaler.min_scale + span * r.fraction(), 1e-30);
  if (c.scaler.init_scale > c.scaler.max_scale) c.scaler.init_scale = c.scaler.max_scale;
  // > 1 once rounded to float32, where every float key is checked (1 + 1e-6 is 1.00000095).
  c.scaler.growth_factor = 1.0 + std::max(r.positive(40) * 10, 1e-6);
  c.scaler.backoff_factor = r.positive(10);
  c.scaler.growth_interval = r.integer(1, 2147483647);
  c.scaler.hysteresis = r.integer(1, 100);

  c.training.grad_accum_steps = r.integer(1, 64);
  c.training.grad_clip_norm = r.coin() ? std::nullopt : std::optional<double>(r.positive(20) * 100);
  c.training.eval_every = r.integer(0, 10000);
  c.checkpoint.every_steps = r.integer(0, 10000);
  c.checkpoint.keep_last = r.integer(1, 100);
  c.logging.every_steps = r.integer(1, 1000);
  c.logging.metrics_every = r.integer(1, 1000);
  c.debug.inject_nonfinite_at.resize(static_cast<size_t>(r.integer(0, 5)));
  for (int64_t& s : c.debug.inject_nonfinite_at) s = r.integer(1, 1'000'000);
  c.debug.inject_value = r.coin() ? InjectValue::inf : InjectValue::nan;
  return c;
}

TEST(ConfigRoundTrip, RandomConfigurations) {
  constexpr uint64_t kSeed = 20240611;
  Random r(kSeed);
  for (int i = 0; i < 500; ++i) {
    const RunConfig c = random_config(r);
    SCOPED_TRACE("seed " + std::to_string(kSeed) + ", case " + std::to_string(i));
    expect_round_trips(c);
    if (::testing::Test::HasFailure()) break;  // one dump to read is enough
  }
}

}  // namespace
}  // namespace ampctl::config
