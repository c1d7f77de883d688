// Divergence (training.divergence_patience, trainer.h): each rule stops the run with
// Error{runtime} (exit 1) naming the step and the tensors, writes summary.json with "status":
// "diverged", and leaves a checkpoint of the last good state that loads and resumes:
//   * overflow at the scale floor, injected (the checkpoint then equals the parameters of the
//     last step that was not skipped, bitwise) and real (a huge initial scale with a min_scale:
//     every step skips, so the checkpoint holds the initial parameters);
//   * a non-finite loss streak without a scaler (fp32 with a NaN injected): the poisoned state
//     is not written and the periodic checkpoint before it stays latest (keep_last 1: nothing is
//     pruned);
//   * non-finite parameters found when a checkpoint is due.
// And: a resumed run diverges at the step an uninterrupted one does (the streaks are in the
// checkpoint); patience 0 turns the streak rules off but never writes a non-finite state (nor
// one whose optimizer moments are not finite); a normal run under patience 1 finishes ok.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("div", name);
}

const char* kConfig = R"(
name: div
seed: 7
device: cpu
precision: fp16
model: {type: mlp, hidden: [32, 24], activation: gelu}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 16, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 60, divergence_patience: 5}
logging: {every_steps: 7, metrics_every: 1}
)";

// Steps 10..59 get an inf in layers.2.weight's gradient; the scale starts at 4096 with a floor
// of 1024: steps 10 and 11 back off to the floor, steps 12..16 overflow at it (patience 5), so
// the run diverges at step 16. Logging every 7 steps, the host sees it at step 21.
std::vector<std::string> floor_sets() {
  std::string steps = "[";
  for (int i = 10; i < 60; ++i) {
    if (i > 10) steps += ',';
    steps += std::to_string(i);
  }
  return {"debug.inject_nonfinite_at=" + steps + "]", "debug.inject_tensor=layers.2.weight",
          "scaler.init_scale=4096", "scaler.min_scale=1024"};
}

config::RunConfig make(std::vector<std::string> sets, const std::vector<std::string>& more = {}) {
  sets.insert(sets.end(), more.begin(), more.end());
  return config::parse_config(kConfig, "div.yaml", sets);
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// The model tensors of a checkpoint, concatenated in layout order without padding.
std::vector<float> checkpoint_params(const checkpoint::CheckpointData& d) {
  std::vector<float> out;
  for (const auto& t : d.model) {
    const auto* p = reinterpret_cast<const float*>(t.data.data());
    out.insert(out.end(), p, p + t.data.size() / 4);
  }
  return out;
}

std::vector<float> trainer_params(Trainer& t) {
  std::vector<float> all(t.model().params().numel());
  t.backend().download(all.data(), t.model().params());
  std::vector<float> out;
  for (const auto& e : t.model().layout().entries()) {
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(e.offset),
               all.begin() + static_cast<std::ptrdiff_t>(e.offset + e.numel));
  }
  return out;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// Runs `cfg` to its end and returns the Error it throws (a failure when it throws none).
Error run_expecting_error(const config::RunConfig& cfg, const fs::path& dir) {
  try {
    train::train(cfg, dir);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "the run finished without diverging";
  return Error{ErrorKind::usage, "none"};
}

size_t train_lines(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  size_t n = 0;
  std::string line;
  while (std::getline(in, line)) n += nlohmann::json::parse(line).at("kind") == "train";
  return n;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Divergence, OverflowAtTheScaleFloorStopsWithACheckpointOfTheLastGoodState) {
  const config::RunConfig cfg = make(floor_sets());
  const fs::path dir = fresh_dir("floor");
  const Error e = run_expecting_error(cfg, dir);
  EXPECT_EQ(e.kind(), ErrorKind::runtime);
  EXPECT_EQ(e.exit_code(), 1);
  const std::string msg = e.what();
  EXPECT_TRUE(contains(msg, "training diverged at step 16")) << msg;
  EXPECT_TRUE(contains(msg, "5 consecutive steps (12-16)")) << msg;
  EXPECT_TRUE(contains(msg, "floor 1024 (scaler.min_scale)")) << msg;
  EXPECT_TRUE(contains(msg, "non-finite gradients in layers.2.weight (detected")) << msg;
  EXPECT_TRUE(contains(msg, "detected at step 21")) << msg;

  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("status"), "diverged");
  const nlohmann::json& d = s.at("divergence");
  EXPECT_EQ(d.at("step"), 16);
  EXPECT_EQ(d.at("detected_at_step"), 21);
  EXPECT_EQ(d.at("reason"), "overflow_at_scale_floor");
  EXPECT_EQ(d.at("tensors"), nlohmann::json::array({"layers.2.weight"}));
  EXPECT_EQ(d.at("checkpoint_step"), 21);
  EXPECT_EQ(d.at("message"), msg);
  EXPECT_EQ(s.at("steps"), 21);
  EXPECT_EQ(s.at("skipped_steps"), 12);  // 10..21
  EXPECT_EQ(s.at("overflow_counts"), (nlohmann::json{{"layers.2.weight", 12}}));
  EXPECT_EQ(train_lines(dir), 21u) << "the metrics of every step run are flushed";

  // The checkpoint: latest, at step 21, with the parameters of step 9 (10..21 were skipped).
  const checkpoint::LoadedCheckpoint ck = checkpoint::load_checkpoint(dir);
  EXPECT_EQ(ck.path, dir / "checkpoints" / "step-00000021.json");
  EXPECT_EQ(ck.data.step, 21);
  {
    const fs::path ref_dir = fresh_dir("floor_ref");
    Trainer ref(cfg, ref_dir);
    ref.begin();
    while (ref.next_step() <= 9) ref.step();
    EXPECT_EQ(bits(checkpoint_params(ck.data)), bits(trainer_params(ref)))
        << "the checkpoint is not the state after the last unskipped step";
    fs::remove_all(ref_dir);
  }

  // It resumes: without the injections the run trains on to the end.
  const config::RunConfig fixed = make(floor_sets(), {"debug.inject_nonfinite_at=[]"});
  Trainer t(fixed, dir);
  t.resume(ck.data);
  while (!t.done()) t.step();
  const TrainOutcome out = t.finish();
  EXPECT_EQ(out.summary.at("status"), "ok");
  EXPECT_EQ(out.summary.at("steps"), 60);
  EXPECT_EQ(read_json(dir / "summary.json").at("status"), "ok");
  fs::remove_all(dir);
}

TEST(Divergence, ResumedRunDivergesAtTheSameStepAsAnUninterruptedOne) {
  const config::RunConfig cfg = make(floor_sets());
  const fs::path dir = fresh_dir("floor_resume");
  fs::path ckpt;
  {
    Trainer t(cfg, dir);
    t.begin();
    while (t.next_step() <= 14) t.step();  // the floor streak is 3 long (12..14)
    ckpt = t.write_checkpoint();
  }
  const checkpoint::LoadedCheckpoint ck = checkpoint::load_checkpoint(ckpt);
  Trainer t(cfg, dir);
  t.resume(ck.data);
  try {
    while (!t.done()) t.step();
    t.finish();
    ADD_FAILURE() << "the resumed run did not diverge";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "training diverged at step 16")) << e.what();
  }
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("divergence").at("step"), 16);
  EXPECT_EQ(s.at("overflow_counts"), (nlohmann::json{{"layers.2.weight", 12}}));
  fs::remove_all(dir);
}

TEST(Divergence, ARealOverflowPastAMinScaleStopsWithTheInitialParameters) {
  // 1e30 times any loss gradient overflows fp16, and so does the floor 1e20: every step skips,
  // backing off from 1e30 to the floor in 17 steps, then 10 more at it.
  const config::RunConfig cfg = make({"scaler.init_scale=1.0e30", "scaler.min_scale=1.0e20",
                                      "training.divergence_patience=10", "logging.every_steps=1"});
  const fs::path dir = fresh_dir("real");
  std::vector<float> initial;
  {
    const fs::path ref_dir = fresh_dir("real_ref");
    Trainer ref(cfg, ref_dir);
    ref.begin();
    initial = trainer_params(ref);
    fs::remove_all(ref_dir);
  }
  const Error e = run_expecting_error(cfg, dir);
  EXPECT_EQ(e.exit_code(), 1);
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("status"), "diverged");
  const nlohmann::json& d = s.at("divergence");
  EXPECT_EQ(d.at("reason"), "overflow_at_scale_floor");
  const int64_t step = d.at("step").get<int64_t>();
  EXPECT_EQ(d.at("detected_at_step").get<int64_t>(), step);  // logging every step
  EXPECT_EQ(s.at("skipped_steps").get<int64_t>(), step) << "every step overflowed";
  ASSERT_FALSE(d.at("tensors").empty());
  const std::vector<std::string> names = {"layers.0.weight", "layers.0.bias",   "layers.2.weight",
                                          "layers.2.bias",   "layers.4.weight", "layers.4.bias"};
  for (const auto& n : d.at("tensors")) {
    EXPECT_NE(std::find(names.begin(), names.end(), n.get<std::string>()), names.end()) << n;
    EXPECT_TRUE(contains(e.what(), n.get<std::string>())) << e.what();
  }
  EXPECT_TRUE(contains(e.what(), "training diverged at step " + std::to_string(step))) << e.what();
  const checkpoint::LoadedCheckpoint ck = checkpoint::load_checkpoint(dir);
  EXPECT_EQ(ck.data.step, step);
  EXPECT_EQ(bits(checkpoint_params(ck.data)), bits(initial));
  fs::remove_all(dir);
}

// fp32 (no scaler), a NaN injected at step 7: the update poisons layers.0.weight, the loss is NaN
// from step 8 on, and with patience 3 the run stops at step 10. The checkpoint of step 5 (the
// last periodic one) stays latest; with keep_last 1 it is the only one, so nothing was pruned.
TEST(Divergence, ANonFiniteLossStreakWithoutAScalerKeepsTheLastGoodCheckpoint) {
  const config::RunConfig cfg =
      make({"precision=fp32", "debug.inject_nonfinite_at=[7]", "debug.inject_value=nan",
            "training.divergence_patience=3", "checkpoint.every_steps=5", "checkpoint.keep_last=1",
            "logging.every_steps=1"});
  const fs::path dir = fresh_dir("loss");
  const Error e = run_expecting_error(cfg, dir);
  EXPECT_EQ(e.exit_code(), 1);
  const std::string msg = e.what();
  EXPECT_TRUE(contains(msg, "training diverged at step 10")) << msg;
  EXPECT_TRUE(contains(msg, "non-finite in 3 consecutive steps (8-10)")) << msg;
  EXPECT_TRUE(contains(msg, "non-finite parameters in layers.0.weight")) << msg;
  EXPECT_TRUE(contains(msg, "step-00000005.json (step 5)")) << msg;
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("status"), "diverged");
  EXPECT_EQ(s.at("divergence").at("reason"), "nonfinite_loss");
  EXPECT_EQ(s.at("divergence").at("step"), 10);
  EXPECT_EQ(s.at("divergence").at("checkpoint_step"), 5);
  EXPECT_EQ(s.at("divergence").at("tensors").at(0), "layers.0.weight");
  EXPECT_EQ(s.at("scaler_enabled"), false);

  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(dir / "checkpoints")) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<fs::path>{dir / "checkpoints" / "latest",
                                          dir / "checkpoints" / "step-00000005.json"}));
  const checkpoint::LoadedCheckpoint ck = checkpoint::load_checkpoint(dir);
  EXPECT_EQ(ck.data.step, 5);
  const std::vector<float> p = checkpoint_params(ck.data);
  EXPECT_TRUE(std::all_of(p.begin(), p.end(), [](float v) { return std::isfinite(v); }));
  {
    const fs::path ref_dir = fresh_dir("loss_ref");
    Trainer ref(cfg, ref_dir);
    ref.begin();
    while (ref.next_step() <= 5) ref.step();
    EXPECT_EQ(bits(p), bits(trainer_params(ref)));
    fs::remove_all(ref_dir);
  }
  // It resumes (here without the injection) to the end.
  Trainer t(make({"precision=fp32", "training.divergence_patience=3", "checkpoint.every_steps=5",
                  "checkpoint.keep_last=1", "logging.every_steps=1"}),
            dir);
  t.resume(ck.data);
  while (!t.done()) t.step();
  EXPECT_EQ(t.finish().summary.at("status"), "ok");
  fs::remove_all(dir);
}

TEST(Divergence, NonFiniteParametersWhenACheckpointIsDueStopTheRun) {
  // As above with patience 10: the loss streak is 3 long at step 10, where the checkpoint due
  // finds the poisoned parameters.
  const config::RunConfig cfg = make({"precision=fp32", "debug.inject_nonfinite_at=[7]",
                                      "debug.inject_value=nan", "training.divergence_patience=10",
                                      "checkpoint.every_steps=5", "checkpoint.keep_last=1"});
  const fs::path dir = fresh_dir("params");
  const Error e = run_expecting_error(cfg, dir);
  EXPECT_EQ(e.exit_code(), 1);
  EXPECT_TRUE(contains(e.what(), "training diverged at step 10")) << e.what();
  EXPECT_TRUE(contains(e.what(), "non-finite parameters in layers.0.weight")) << e.what();
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("divergence").at("reason"), "nonfinite_parameters");
  EXPECT_EQ(s.at("divergence").at("checkpoint_step"), 5);
  EXPECT_EQ(checkpoint::load_checkpoint(dir).data.step, 5);
  fs::remove_all(dir);
}

// Issue 47 (class 4): patience 0 turns the rules off, not the check of what a checkpoint holds.
// Before, the NaN state was written at steps 10 and 15, pruning step 5's (keep_last 1), the run
// ended ok, and no checkpoint left loaded.
TEST(Divergence, PatienceZeroStillNeverWritesANonFiniteCheckpoint) {
  const config::RunConfig cfg =
      make({"precision=fp32", "debug.inject_nonfinite_at=[7]", "debug.inject_value=nan",
            "training.divergence_patience=0", "checkpoint.every_steps=5", "checkpoint.keep_last=1",
            "training.max_steps=15"});
  const fs::path dir = fresh_dir("zero_nan");
  const Error e = run_expecting_error(cfg, dir);
  EXPECT_EQ(e.exit_code(), 1);
  EXPECT_TRUE(contains(e.what(), "training diverged at step 10")) << e.what();
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("status"), "diverged");
  EXPECT_EQ(s.at("divergence").at("reason"), "nonfinite_parameters");
  EXPECT_EQ(s.at("divergence").at("checkpoint_step"), 5);
  EXPECT_TRUE(s.at("final_loss").is_null()) << s.at("final_loss");
  EXPECT_EQ(checkpoint::load_checkpoint(dir).data.step, 5);
  fs::remove_all(dir);
}

// Finite parameters with a non-finite optimizer moment (an exp_avg_sq that overflowed while the
// update stayed finite): not written either; the reason and the tensor say so.
TEST(Divergence, ANonFiniteOptimizerStateIsNeverWritten) {
  const config::RunConfig cfg = make({"precision=fp32", "training.divergence_patience=0",
                                      "checkpoint.every_steps=5", "checkpoint.keep_last=1"});
  const fs::path dir = fresh_dir("moment");
  Trainer t(cfg, dir);
  t.begin();
  while (t.next_step() <= 7) t.step();
  const auto state = t.optimizer().state_tensors();
  const auto it = std::find_if(state.begin(), state.end(), [](const auto& named) {
    return named.first.find("exp_avg_sq") != std::string::npos;
  });
  ASSERT_NE(it, state.end());
  t.backend().fill(it->second, std::numeric_limits<double>::infinity());
  try {
    while (!t.done()) t.step();
    ADD_FAILURE() << "the run went on with an infinite exp_avg_sq";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_TRUE(contains(e.what(), "non-finite optimizer state in optimizer " + it->first))
        << e.what();
  }
  const nlohmann::json s = read_json(dir / "summary.json");
  EXPECT_EQ(s.at("divergence").at("reason"), "nonfinite_optimizer_state");
  EXPECT_EQ(s.at("divergence").at("checkpoint_step"), 5);
  EXPECT_EQ(checkpoint::load_checkpoint(dir).data.step, 5);
  fs::remove_all(dir);
}

TEST(Divergence, PatienceZeroNeverStops) {
  const config::RunConfig cfg = make(floor_sets(), {"training.divergence_patience=0"});
  const fs::path dir = fresh_dir("off");
  const TrainOutcome out = train::train(cfg, dir);
  EXPECT_EQ(out.summary.at("status"), "ok");
  EXPECT_EQ(out.summary.at("steps"), 60);
  EXPECT_EQ(out.summary.at("skipped_steps"), 50);
  fs::remove_all(dir);
}

TEST(Divergence, ANormalRunUnderPatienceOneFinishesOk) {
  // Patience 1: a single non-finite loss, or a single overflow at the floor, would stop it.
  for (const char* precision : {"fp16", "bf16", "fp32"}) {
    const config::RunConfig cfg =
        make({std::string("precision=") + precision, "training.divergence_patience=1",
              "checkpoint.every_steps=20"});
    const fs::path dir = fresh_dir(std::string("normal_") + precision);
    const TrainOutcome out = train::train(cfg, dir);
    EXPECT_EQ(out.summary.at("status"), "ok") << precision;
    EXPECT_EQ(read_json(dir / "summary.json").at("status"), "ok") << precision;
    EXPECT_FALSE(out.summary.contains("divergence")) << precision;
    EXPECT_EQ(out.summary.at("steps"), 60) << precision;
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace ampctl::train
