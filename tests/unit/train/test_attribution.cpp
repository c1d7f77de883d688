// Overflow attribution end to end on the CPU backend: an overflow injected into a named parameter's
// gradient is reported for exactly that tensor (metrics.jsonl's overflow_tensors, summary.json's
// overflow_counts and most_overflowing), on the fused path and through unscale_ (clipping), with
// Adam and SGD; a real overflow (a huge initial scale) names the tensors whose scaled gradients
// really are non-finite, checked against the gradients themselves after each step; an unknown
// debug.inject_tensor is a configuration error that leaves nothing behind.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/nn/model.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("attr", name);
}

// Scale 256 keeps this model's fp16 gradients finite: only injected values overflow.
const char* kConfig = R"(
name: attr
seed: 5
device: cpu
precision: fp16
model: {type: mlp, hidden: [32, 24], activation: gelu}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 16, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-3}
scaler: {init_scale: 256.0}
training: {max_steps: 24}
logging: {every_steps: 5, metrics_every: 1}
)";

const std::vector<std::string> kNames = {"layers.0.weight", "layers.0.bias",   "layers.2.weight",
                                         "layers.2.bias",   "layers.4.weight", "layers.4.bias"};

std::vector<nlohmann::json> train_lines(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("kind") == "train") out.push_back(j);
  }
  return out;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST(Attribution, TheTrainerNamesItsParametersInArenaOrder) {
  const config::RunConfig cfg = config::parse_config(kConfig, "attr.yaml");
  const fs::path dir = fresh_dir("names");
  Trainer t(cfg, dir);
  t.begin();
  EXPECT_EQ(t.param_names(), kNames);
  fs::remove_all(dir);
}

TEST(Attribution, AnInjectedOverflowNamesExactlyTheInjectedTensor) {
  const std::vector<int64_t> injected = {5, 9, 10, 17};
  for (size_t k = 0; k < kNames.size() + 1; ++k) {
    // "" (k == kNames.size()) poisons the arena's first element: layers.0.weight.
    const std::string name = k < kNames.size() ? kNames[k] : "";
    const std::string expect = name.empty() ? "layers.0.weight" : name;
    const std::string opt = k % 2 ? "sgd" : "adamw";
    const bool clip = k % 3 == 1;  // the explicit unscale_ path instead of the fused check
    const std::string what = "inject_tensor '" + name + "', " + opt + (clip ? ", clipped" : "");
    std::vector<std::string> sets = {
        "debug.inject_nonfinite_at=[5, 9, 10, 17]", "debug.inject_tensor=\"" + name + "\"",
        "debug.inject_value=" + std::string(k % 2 ? "nan" : "inf"), "optimizer.type=" + opt};
    if (clip) sets.push_back("training.grad_clip_norm=1.0");
    const config::RunConfig cfg = config::parse_config(kConfig, "attr.yaml", sets);
    const fs::path dir = fresh_dir("inject" + std::to_string(k));
    const TrainOutcome out = train::train(cfg, dir);
    const auto lines = train_lines(dir);
    ASSERT_EQ(lines.size(), 24u) << what;
    for (const auto& l : lines) {
      const int64_t step = l.at("step").get<int64_t>();
      const bool hit = std::find(injected.begin(), injected.end(), step) != injected.end();
      EXPECT_EQ(l.at("found_inf").get<bool>(), hit) << what << ", step " << step;
      if (hit) {
        EXPECT_EQ(l.at("overflow_tensors"), nlohmann::json::array({expect}))
            << what << ", step " << step;
      } else {
        EXPECT_FALSE(l.contains("overflow_tensors")) << what << ", step " << step;
      }
    }
    const nlohmann::json summary = read_json(dir / "summary.json");
    EXPECT_EQ(summary, out.summary) << what;
    EXPECT_EQ(summary.at("status"), "ok") << what;
    EXPECT_EQ(summary.at("overflow_counts"), (nlohmann::json{{expect, 4}})) << what;
    EXPECT_EQ(summary.at("most_overflowing"), nlohmann::json::array({expect})) << what;
    fs::remove_all(dir);
  }
}

// The reference for a real overflow: after a skipped step on the fused path the gradient arena
// still holds the scaled gradients the backward produced (the check pass only reads them and the
// skipped optimizer does not touch them), so the tensors to name are exactly those holding a
// non-finite element there. After a clean step no element may be non-finite.
TEST(Attribution, ARealOverflowNamesTheTensorsWhoseScaledGradientsAreNonFinite) {
  const config::RunConfig cfg =
      config::parse_config(kConfig, "attr.yaml",
                           {"scaler.init_scale=1099511627776", "scaler.growth_interval=4",
                            "logging.every_steps=1", "training.max_steps=40"});
  const fs::path dir = fresh_dir("real");
  Trainer t(cfg, dir);
  t.begin();
  const auto& entries = t.model().layout().entries();
  ASSERT_EQ(entries.size(), kNames.size());
  std::map<std::string, int64_t> tally;
  int64_t overflowing = 0;
  while (!t.done()) {
    t.step();  // logging every step: its metrics line is written now
    std::vector<float> g(t.model().grads().numel());
    t.backend().download(g.data(), t.model().grads());
    nlohmann::json expect = nlohmann::json::array();
    for (const auto& e : entries) {
      bool bad = false;
      for (size_t i = 0; i < e.numel; ++i) bad |= !std::isfinite(g[e.offset + i]);
      if (bad) {
        expect.push_back(e.name);
        ++tally[e.name];
      }
    }
    const auto lines = train_lines(dir);
    ASSERT_FALSE(lines.empty());
    const nlohmann::json& l = lines.back();
    const int64_t step = l.at("step").get<int64_t>();
    ASSERT_EQ(step, t.next_step() - 1);
    EXPECT_EQ(l.at("found_inf").get<bool>(), !expect.empty()) << "step " << step;
    if (l.at("found_inf").get<bool>()) {
      ++overflowing;
      EXPECT_EQ(l.at("overflow_tensors"), expect) << "step " << step;
    } else {
      EXPECT_FALSE(l.contains("overflow_tensors")) << "step " << step;
    }
  }
  const TrainOutcome out = t.finish();
  EXPECT_GE(overflowing, 10) << "2^40 must overflow fp16 for the first steps";
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [name, n] : tally) counts[name] = n;
  EXPECT_EQ(out.summary.at("overflow_counts"), counts);
  EXPECT_EQ(out.summary.at("skipped_steps").get<int64_t>(), overflowing);
  // most_overflowing: every named tensor, by count (non-increasing).
  const nlohmann::json& most = out.summary.at("most_overflowing");
  ASSERT_EQ(most.size(), counts.size());
  for (size_t i = 1; i < most.size(); ++i) {
    EXPECT_GE(counts[most[i - 1].get<std::string>()].get<int64_t>(),
              counts[most[i].get<std::string>()].get<int64_t>());
  }
  fs::remove_all(dir);
}

TEST(Attribution, AnUnknownInjectTensorIsAConfigErrorThatLeavesNothing) {
  const config::RunConfig cfg = config::parse_config(
      kConfig, "attr.yaml",
      {"debug.inject_tensor=layers.2.wieght", "debug.inject_nonfinite_at=[3]"});
  const fs::path base = fresh_dir("unknown");
  const fs::path dir = base / "nested" / "run";
  try {
    train::train(cfg, dir);
    ADD_FAILURE() << "an unknown parameter name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("debug.inject_tensor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layers.2.wieght"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("did you mean 'layers.2.weight'?"), std::string::npos) << e.hint();
  }
  EXPECT_FALSE(fs::exists(base)) << "the run directory was left behind";
}

}  // namespace
}  // namespace ampctl::train
