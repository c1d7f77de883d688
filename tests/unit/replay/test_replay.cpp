// `ampctl replay`'s rule loop (replay/replay.h) against traces worked by hand from the rules'
// definitions (docs/reference.md, "Scale rules" and "Replay"), and load_recording's refusals of
// what is ambiguous in a run directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/replay/replay.h"

namespace {

namespace fs = std::filesystem;
using ampctl::replay::Outcome;
using ampctl::replay::RecordedStep;
using ampctl::replay::Recording;

const char* kConfig = R"(name: trace
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 64, features: 4, classes: 2}
  batch_size: 16
optimizer: {type: sgd, lr: 0.1}
scaler: {init_scale: 4.0, growth_interval: 2}
training: {max_steps: 6}
logging: {metrics_every: 1, grad_amax: true}
)";

// A recording of fp16 steps with these grad_amax values (per unit of scale, one micro-batch),
// none of which overflowed in the recorded run (at scale 1).
Recording recording(const std::vector<double>& amax) {
  Recording rec;
  rec.config_text = kConfig;
  rec.config = ampctl::config::parse_config(kConfig, "trace.yaml");
  rec.precision = "fp16";
  rec.max_finite = 65504.0;
  for (size_t i = 0; i < amax.size(); ++i) {
    RecordedStep s;
    s.step = static_cast<int64_t>(i) + 1;
    s.amax = amax[i];
    rec.steps.push_back(s);
  }
  return rec;
}

Outcome run(const Recording& rec, const std::vector<std::string>& overrides) {
  ampctl::config::RunConfig cfg = ampctl::config::parse_config(kConfig, "trace.yaml", overrides);
  return ampctl::replay::replay(rec, cfg, {});
}

std::vector<double> kept_scales(const Outcome& o) {
  std::vector<double> out;
  for (const auto& s : o.steps) out.push_back(s.scale);
  return out;
}

// PyTorch's rule from 4, growth_interval 2: steps 1-2 at 4 (4000 fits 65504), growth to 8 after
// two clean steps, 8 for steps 3-4, growth to 16; step 5 at 16 sees 20000 x 16 = 320000 > 65504:
// skipped, backed off to 8; step 6 at 8 is clean (tracker 1, no growth).
TEST(ReplayRules, PytorchGrowsEveryIntervalAndBacksOffOnOverflow) {
  const Recording rec = recording({1000, 1000, 1000, 1000, 20000, 1000});
  const Outcome o = run(rec, {});
  EXPECT_EQ(kept_scales(o), (std::vector<double>{4, 4, 8, 8, 16, 8}));
  EXPECT_EQ(o.skipped, 1);
  ASSERT_TRUE(o.first_skip.has_value());
  EXPECT_EQ(*o.first_skip, 5);
  EXPECT_EQ(o.retries, 0);
  EXPECT_EQ(o.min_scale, 4.0);
  EXPECT_EQ(o.max_scale, 16.0);
  EXPECT_EQ(o.final_scale, 8.0);
  ASSERT_TRUE(o.min_headroom_log2.has_value());
  EXPECT_DOUBLE_EQ(*o.min_headroom_log2, std::log2(65504.0 / 320000.0));
  // Mean over the six kept attempts: amax x scale = 4000, 4000, 8000, 8000, 320000, 8000.
  double sum = 0;
  for (double p : {4000.0, 4000.0, 8000.0, 8000.0, 320000.0, 8000.0}) sum += std::log2(65504.0 / p);
  ASSERT_TRUE(o.mean_headroom_log2.has_value());
  EXPECT_NEAR(*o.mean_headroom_log2, sum / 6, 1e-12);
  EXPECT_EQ(o.uncertain_steps, 0);
}

// on_overflow: retry at 65536 with grad_amax 2: the first attempt sees 131072 (overflow), the
// retry at 32768 sees 65536 (still > 65504), the second retry at 16384 sees 32768 and is kept:
// two retries, no skip. Step 2 at 16384 is clean.
TEST(ReplayRules, RetryRunsTheStepAgainAtTheBackedOffScale) {
  const Recording rec = recording({2, 2});
  const Outcome o = run(rec, {"scaler.init_scale=65536.0", "scaler.on_overflow=retry",
                              "scaler.max_retries=3", "scaler.growth_interval=1000"});
  EXPECT_EQ(kept_scales(o), (std::vector<double>{16384, 16384}));
  EXPECT_EQ(o.skipped, 0);
  EXPECT_EQ(o.retries, 2);
  ASSERT_EQ(o.steps.size(), 2u);
  EXPECT_EQ(o.steps[0].retries, 2);
  EXPECT_EQ(o.steps[1].retries, 0);
  EXPECT_EQ(o.max_scale, 65536.0);  // the failed attempts' scales count
  EXPECT_EQ(o.min_scale, 16384.0);
  // With max_retries 1 the second attempt overflows too: the step is skipped at 32768.
  const Outcome one = run(rec, {"scaler.init_scale=65536.0", "scaler.on_overflow=retry",
                                "scaler.max_retries=1", "scaler.growth_interval=1000"});
  EXPECT_EQ(kept_scales(one), (std::vector<double>{32768, 16384}));
  EXPECT_EQ(one.skipped, 1);
  EXPECT_EQ(one.retries, 1);
}

// A step the recorded run overflowed at scale 1024 (its grad_amax 10 a lower bound): a replay at
// 2048 or above overflows there for certain; at 512 it is predicted clean but uncertain.
TEST(ReplayRules, ARecordedOverflowIsALowerBound) {
  Recording rec = recording({10, 10});
  rec.steps[0].found_inf = true;
  rec.steps[0].scale = 1024;
  const Outcome high = run(rec, {"scaler.init_scale=2048.0", "scaler.growth_interval=1000"});
  EXPECT_EQ(high.skipped, 1);
  EXPECT_EQ(high.uncertain_steps, 0);
  const Outcome low = run(rec, {"scaler.init_scale=512.0", "scaler.growth_interval=1000"});
  EXPECT_EQ(low.skipped, 0);
  EXPECT_EQ(low.uncertain_steps, 1);
  // Megatron's hysteresis 2: the first overflow (at 2048) does not back off, so step 2 runs at
  // 2048 too (10 x 2048 fits).
  const Outcome meg = run(rec, {"scaler.init_scale=2048.0", "scaler.policy=megatron",
                                "scaler.hysteresis=2", "scaler.growth_interval=1000"});
  EXPECT_EQ(kept_scales(meg), (std::vector<double>{2048, 2048}));
  EXPECT_EQ(meg.skipped, 1);
}

// The replay of a run's own settings follows its recording; one whose config.yaml no longer
// says what it was recorded under (a resume changed scaler.*) departs from it and is not
// labelled "(as recorded)".
TEST(ReplayRules, TheAsRecordedRowIsCheckedAgainstTheRecording) {
  Recording rec = recording({1000, 1000, 1000});
  const double scales[] = {4, 4, 8};
  for (size_t i = 0; i < 3; ++i) rec.steps[i].scale = scales[i];
  Outcome same = run(rec, {});
  EXPECT_FALSE(same.departs_at.has_value());
  EXPECT_EQ(ampctl::replay::setting_text(same), "(as recorded)");
  Outcome other = run(rec, {"scaler.growth_interval=1"});
  ASSERT_TRUE(other.departs_at.has_value());
  EXPECT_EQ(*other.departs_at, 2);
  other.overrides.clear();  // as if config.yaml itself said growth_interval 1
  EXPECT_EQ(ampctl::replay::setting_text(other), "(config.yaml, departs at step 2)");
}

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("ampctl_replay_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.yaml") << kConfig;
  }
  void TearDown() override { fs::remove_all(dir); }
  void metrics(const std::string& text) { std::ofstream(dir / "metrics.jsonl") << text; }
  std::string refusal() {
    try {
      ampctl::replay::load_recording(dir);
    } catch (const ampctl::Error& e) {
      EXPECT_EQ(e.kind(), ampctl::ErrorKind::input);
      return e.what();
    }
    return "";
  }
  static std::string line(int step, double scale, double amax, bool found_inf = false) {
    return "{\"kind\":\"train\",\"step\":" + std::to_string(step) +
           ",\"loss\":1.0,\"scale\":" + std::to_string(scale) +
           ",\"found_inf\":" + (found_inf ? "true" : "false") +
           ",\"skipped\":" + (found_inf ? "true" : "false") +
           ",\"grad_amax\":" + std::to_string(amax) + ",\"grad_amax_exact\":true}\n";
  }
  fs::path dir;
};

TEST_F(RunDir, AStepWrittenTwiceIsOneStepWhenTheLinesAgree) {
  metrics(line(1, 4, 10) + line(2, 4, 10) + line(2, 4, 10) + line(3, 8, 10));
  const Recording rec = ampctl::replay::load_recording(dir);
  ASSERT_EQ(rec.steps.size(), 3u);
  EXPECT_EQ(rec.steps[2].scale, 8.0);
}

TEST_F(RunDir, ConflictingLinesForOneStepAreRefused) {
  metrics(line(1, 4, 10) + line(2, 4, 10) + line(2, 8, 10) + line(3, 8, 10));
  const std::string why = refusal();
  EXPECT_NE(why.find("line 3 and line 2 are both step 2"), std::string::npos) << why;
  metrics(line(1, 4, 10) + line(2, 4, 10) + line(2, 4, 30) + line(3, 8, 10));
  EXPECT_NE(refusal().find("both step 2"), std::string::npos);
  metrics(line(1, 4, 10) + line(1, 4, 10, true));
  EXPECT_NE(refusal().find("both step 1"), std::string::npos);
}

TEST_F(RunDir, AKeyWrittenTwiceIsRefused) {
  std::string twice = line(2, 4, 10);
  twice.insert(twice.find("\"grad_amax\""), "\"grad_amax\":99.0,");
  metrics(line(1, 4, 10) + twice + line(3, 4, 10));
  const std::string why = refusal();
  EXPECT_NE(why.find("line 2: the key \"grad_amax\" is written twice"), std::string::npos) << why;
}

TEST_F(RunDir, TheConfigurationIsReadOnceAndEveryRowResolvesFromThatText) {
  metrics(line(1, 4, 1000) + line(2, 4, 1000) + line(3, 8, 1000));
  const Recording rec = ampctl::replay::load_recording(dir);
  // config.yaml rewritten (a concurrent resume): the rows still come from the text read first.
  std::string changed = kConfig;
  changed.replace(changed.find("growth_interval: 2"), 18, "growth_interval: 1");
  std::ofstream(dir / "config.yaml") << changed;
  const Outcome o = ampctl::replay::replay(rec, std::vector<std::string>{});
  EXPECT_EQ(kept_scales(o), (std::vector<double>{4, 4, 8}));
  EXPECT_EQ(ampctl::replay::setting_text(o), "(as recorded)");
}

TEST_F(RunDir, AGridValueIsNamedAsItsFlagSaidIt) {
  metrics(line(1, 4, 10));
  const Recording rec = ampctl::replay::load_recording(dir);
  try {
    ampctl::replay::replay(rec,
                           std::vector<ampctl::config::SaidOverride>{
                               {"scaler.growth_interval=-3", ampctl::config::Where{"--grid"}}});
    FAIL() << "a negative growth_interval was accepted";
  } catch (const ampctl::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--grid scaler.growth_interval=-3"), std::string::npos) << what;
    EXPECT_EQ(what.find("--set"), std::string::npos) << what;
  }
}

}  // namespace
