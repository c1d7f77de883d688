// Exact resume (docs/reference.md, "Exact resume"): a run stopped at step k, checkpointed and
// resumed to n ends bitwise where one uninterrupted run to n ends (parameters, optimizer state,
// scaler state, and metrics.jsonl lines except their time fields), on the CPU backend in fp16 with
// dropout, shuffling, a onecycle schedule, clipping, periodic evaluation and injected overflows.
// Also: the checkpoints training writes (every_steps, the end, keep_last) and the scaler block's
// keys.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/signals.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("resume", name);
}

// 200 samples (180 after the eval split) in batches of 32 with drop_last: 5 steps per epoch.
// Overflows are injected at steps 4 and 11; hysteresis 2 keeps a tracker across steps.
const char* kConfig = R"(
name: resume
seed: 11
device: cpu
precision: fp16
model: {type: mlp, hidden: [24, 16], activation: gelu, dropout: 0.2}
data:
  train: {source: synthetic, task: classification, samples: 200, features: 12, classes: 3}
  eval: {split_fraction: 0.1}
  batch_size: 32
  shuffle: true
  drop_last: true
optimizer: {type: adamw, lr: 3.0e-3, weight_decay: 0.01}
scheduler: {type: onecycle}
scaler: {init_scale: 1024.0, growth_interval: 3, hysteresis: 2}
training: {max_steps: 20, grad_clip_norm: 1.0, eval_every: 4}
logging: {every_steps: 3, metrics_every: 1}
debug: {inject_nonfinite_at: [4, 5, 11, 12]}
)";

config::RunConfig make_config(const std::vector<std::string>& sets = {}) {
  return config::parse_config(kConfig, "resume.yaml", sets);
}

std::vector<uint8_t> bytes_of(Backend& b, const Tensor& t) {
  const Tensor h = b.to_host(t);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

std::vector<std::string> metrics_without_time(const fs::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("time_s");
    out.push_back(j.dump());
  }
  return out;
}

struct EndState {
  std::vector<uint8_t> params;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> optimizer;
  nlohmann::json optimizer_json;
  nlohmann::json scaler;
  std::vector<std::string> metrics;
};

EndState end_state(Trainer& t, const fs::path& dir) {
  EndState s;
  s.params = bytes_of(t.backend(), t.model().params());
  for (const auto& [name, tensor] : t.optimizer().state_tensors()) {
    s.optimizer.emplace_back(name, bytes_of(t.backend(), tensor));
  }
  s.optimizer_json = t.optimizer().state_dict();
  s.scaler = t.scaler().state_dict();
  s.metrics = metrics_without_time(dir);
  return s;
}

void expect_same(const EndState& a, const EndState& b, const std::string& what) {
  EXPECT_TRUE(a.params == b.params) << what << ": parameters differ";
  ASSERT_EQ(a.optimizer.size(), b.optimizer.size()) << what;
  for (size_t i = 0; i < a.optimizer.size(); ++i) {
    EXPECT_EQ(a.optimizer[i].first, b.optimizer[i].first) << what;
    EXPECT_TRUE(a.optimizer[i].second == b.optimizer[i].second)
        << what << ": optimizer tensor " << a.optimizer[i].first << " differs";
  }
  EXPECT_EQ(a.optimizer_json, b.optimizer_json) << what;
  EXPECT_EQ(a.scaler.dump(), b.scaler.dump()) << what;
  EXPECT_EQ(a.metrics, b.metrics) << what;
}

TEST(Resume, ResumingFromAnySplitPointEqualsAnUninterruptedRunBitwise) {
  const config::RunConfig cfg = make_config();
  const int64_t n = cfg.training.max_steps;
  const fs::path full_dir = fresh_dir("full");
  EndState full;
  nlohmann::json full_summary;
  {
    Trainer t(cfg, full_dir);
    const TrainOutcome out = t.run();
    ASSERT_GE(out.summary.at("skipped_steps").get<int64_t>(), 2);  // the injections did skip
    full = end_state(t, full_dir);
    full_summary = out.summary;
  }
  // 1; 6, right after the skipped steps 4-5 (and the first step of the second epoch); 8, inside
  // an epoch and at an evaluation step; 13, right after a skip; n - 1.
  for (int64_t k : {int64_t{1}, int64_t{6}, int64_t{8}, int64_t{13}, n - 1}) {
    const std::string what = "split at " + std::to_string(k);
    const fs::path dir = fresh_dir("split" + std::to_string(k));
    fs::path ckpt;
    {
      // A run that writes a checkpoint at k, runs on a little and dies without finishing.
      Trainer t(cfg, dir);
      t.begin();
      for (int64_t i = 0; i < k; ++i) t.step();
      ckpt = t.write_checkpoint();
      for (int64_t i = 0; i < 4 && !t.done(); ++i) t.step();
      (void)t.checkpoint_data();  // flushes the later steps' lines, which resume must drop
    }
    {
      // ... and whose last write was torn.
      std::ofstream torn(dir / "metrics.jsonl", std::ios::app);
      torn << "{\"kind\": \"train\", \"step\": 1";
    }
    const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(ckpt);
    ASSERT_EQ(loaded.data.step, k);
    const config::RunConfig resumed_cfg = config::from_json(loaded.data.config, "checkpoint");
    ASSERT_EQ(resumed_cfg, cfg) << what;
    Trainer t(resumed_cfg, dir);
    t.resume(loaded.data);
    EXPECT_EQ(t.next_step(), k + 1);
    while (!t.done()) t.step();
    const TrainOutcome out = t.finish();
    expect_same(full, end_state(t, dir), what);
    // The summary's accumulators came through the checkpoint too.
    for (const char* key : {"steps", "skipped_steps", "final_scale", "min_scale", "max_scale",
                            "final_loss", "best_loss", "best_eval_loss", "best_eval_accuracy",
                            "status", "overflow_counts", "most_overflowing"}) {
      EXPECT_EQ(out.summary.at(key), full_summary.at(key)) << what << ": summary " << key;
    }
    fs::remove_all(dir);
  }
  fs::remove_all(full_dir);
}

TEST(Resume, ExtendingAFinishedRunContinuesFromItsLastCheckpoint) {
  const fs::path dir = fresh_dir("extend");
  {
    Trainer t(make_config({"training.max_steps=10"}), dir);
    t.run();
  }
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(dir);
  EXPECT_EQ(loaded.data.step, 10);
  const config::RunConfig cfg =
      config::from_json(loaded.data.config, "checkpoint", {"training.max_steps=14"});
  Trainer t(cfg, dir);
  t.resume(loaded.data);
  while (!t.done()) t.step();
  const TrainOutcome out = t.finish();
  EXPECT_EQ(out.summary.at("steps").get<int64_t>(), 14);
  // Each train step appears once.
  std::vector<int64_t> steps;
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "train") steps.push_back(j.at("step").get<int64_t>());
  }
  ASSERT_EQ(steps.size(), 14u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i) + 1);
  EXPECT_EQ(checkpoint::load_checkpoint(dir).data.step, 14);
  // Resuming a finished run without extending it does nothing and leaves the metrics alone.
  {
    const auto before = metrics_without_time(dir);
    const checkpoint::LoadedCheckpoint again = checkpoint::load_checkpoint(dir);
    Trainer t2(config::from_json(again.data.config, "checkpoint"), dir);
    t2.resume(again.data);
    EXPECT_TRUE(t2.done());
    t2.finish();
    EXPECT_EQ(metrics_without_time(dir), before);
  }
  // A max_steps below the checkpoint's step is refused.
  {
    Trainer t3(make_config({"training.max_steps=5"}), dir);
    EXPECT_THROW(t3.resume(checkpoint::load_checkpoint(dir).data), Error);
  }
  fs::remove_all(dir);
}

TEST(Resume, TrainingWritesCheckpointsEveryStepsAndAtTheEnd) {
  const fs::path dir = fresh_dir("every");
  {
    Trainer t(make_config(
                  {"checkpoint.every_steps=3", "checkpoint.keep_last=2", "training.max_steps=10"}),
              dir);
    t.run();
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints")) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"latest", "step-00000009.json", "step-00000010.json"}));
  const checkpoint::CheckpointData nine =
      checkpoint::read_checkpoint(dir / "checkpoints" / "step-00000009.json");
  EXPECT_EQ(nine.step, 9);
  EXPECT_EQ(nine.scheduler.at("last_step"), 9);
  EXPECT_EQ(nine.metrics.at("steps_done"), 9);
  EXPECT_EQ(checkpoint::load_checkpoint(dir).data.step, 10);
  fs::remove_all(dir);
}

TEST(Resume, CheckpointScalerBlockHasExactlyPyTorchsKeysAndTypes) {
  const fs::path dir = fresh_dir("keys");
  {
    Trainer t(make_config({"training.max_steps=4"}), dir);
    t.run();
  }
  std::ifstream in(dir / "checkpoints" / "step-00000004.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  const nlohmann::json& s = doc.at("scaler");
  ASSERT_TRUE(s.is_object());
  std::vector<std::string> keys;
  for (auto it = s.begin(); it != s.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"_growth_tracker", "_hysteresis_tracker", "backoff_factor",
                                      "growth_factor", "growth_interval", "scale"}));
  EXPECT_TRUE(s.at("scale").is_number_float());
  EXPECT_TRUE(s.at("growth_factor").is_number_float());
  EXPECT_TRUE(s.at("backoff_factor").is_number_float());
  EXPECT_TRUE(s.at("growth_interval").is_number_integer());
  EXPECT_TRUE(s.at("_growth_tracker").is_number_integer());
  EXPECT_TRUE(s.at("_hysteresis_tracker").is_number_integer());
  EXPECT_EQ(s.at("growth_interval").get<int64_t>(), 3);
  // With the scaler off (fp32) the block is {}.
  const fs::path dir32 = fresh_dir("keys32");
  {
    Trainer t(make_config({"training.max_steps=2", "precision=fp32"}), dir32);
    t.run();
  }
  EXPECT_EQ(checkpoint::load_checkpoint(dir32).data.scaler, nlohmann::json::object());
  fs::remove_all(dir);
  fs::remove_all(dir32);
}

// A stop request during an evaluation: the step's checkpoint records the unfinished evaluation,
// and the resumed run evaluates that step first, so the metrics equal an uninterrupted run's.
TEST(ResumeSignal, StopDuringEvaluationResumesWithThatEvaluation) {
  const config::RunConfig cfg = make_config();
  const fs::path full_dir = fresh_dir("evalfull");
  EndState full;
  {
    Trainer t(cfg, full_dir);
    t.run();
    full = end_state(t, full_dir);
  }
  // 8: an evaluation step; 9: a plain one; 20: the last (the stop comes in the final evaluation).
  for (const int64_t k : {int64_t{8}, int64_t{9}, int64_t{20}}) {
    const fs::path dir = fresh_dir("evalstop" + std::to_string(k));
    {
      Trainer t(cfg, dir);
      t.begin();
      for (int64_t i = 1; i < k; ++i) t.step();
      request_stop(SIGINT);  // as if it came during step k
      try {
        t.step();
        if (t.done()) t.finish();
        ADD_FAILURE() << "the stop request was not honoured";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::interrupted);
        EXPECT_NE(std::string(e.what()).find("SIGINT"), std::string::npos) << e.what();
      }
      clear_stop_request();
    }
    const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(dir);
    EXPECT_EQ(loaded.data.step, k);
    EXPECT_EQ(loaded.data.metrics.contains("pending_eval"), k != 9);
    Trainer t(cfg, dir);
    t.resume(loaded.data);
    while (!t.done()) t.step();
    t.finish();
    expect_same(full, end_state(t, dir), "stop at " + std::to_string(k));
    fs::remove_all(dir);
  }
  fs::remove_all(full_dir);
}

constexpr const char* kChildEnv = "AMPCTL_TEST_SIGNAL_CHILD";

config::RunConfig long_config() {
  return make_config({"training.max_steps=6000", "training.eval_every=500",
                      "logging.every_steps=10", "debug.inject_nonfinite_at=[4, 5, 11, 12, 700]"});
}

// Not a test by itself: the child process of the next test (run as this executable with
// kChildEnv set) trains long_config() with the stop handlers installed and exits as ampctl's
// commands do (143 for SIGTERM). Without kChildEnv it does nothing.
TEST(ResumeSignal, ChildProcessEntryPoint) {
  const char* dir = std::getenv(kChildEnv);
  if (dir == nullptr) return;
  install_stop_handlers();
  int code = 0;
  try {
    Trainer t(long_config(), dir);
    t.run();
  } catch (const Error& e) {
    code = e.kind() == ErrorKind::interrupted ? stop_exit_code(stop_signal()) : 1;
  } catch (...) {
    code = 1;
  }
  std::fflush(nullptr);
  std::_Exit(code);
}

TEST(ResumeSignal, SigtermWritesACheckpointExits143AndResumesToTheUninterruptedEnd) {
  const fs::path dir = fresh_dir("sigterm");
  fs::create_directories(dir);
  // The child: this executable, running only the entry point above (exec'd rather than forked
  // into, so no library state or BLAS threads are shared).
  const std::string env = std::string(kChildEnv) + "=" + dir.string();
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string filter = "--gtest_filter=ResumeSignal.ChildProcessEntryPoint";
  // The same environment plus kChildEnv: OpenBLAS reads OPENBLAS_CORETYPE and friends, and
  // another kernel would round differently.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char* argv[] = {const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()), nullptr};
    ::execve(self.c_str(), argv, envp.data());
    ::_exit(127);
  }
  // Wait until it has written metrics (a few logging intervals), then stop it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream in(dir / "metrics.jsonl");
    int64_t lines = 0;
    std::string line;
    while (std::getline(in, line)) ++lines;
    if (lines >= 30) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the child wrote no metrics";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 143);

  const config::RunConfig cfg = long_config();
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(dir);
  ASSERT_GT(loaded.data.step, 0);
  ASSERT_LT(loaded.data.step, cfg.training.max_steps) << "the child finished before the signal";
  {
    Trainer t(cfg, dir);
    t.resume(loaded.data);
    while (!t.done()) t.step();
    t.finish();
  }
  const fs::path full_dir = fresh_dir("sigtermfull");
  {
    Trainer full(cfg, full_dir);
    full.run();
    Trainer resumed(cfg, dir);
    const checkpoint::LoadedCheckpoint end = checkpoint::load_checkpoint(dir);
    ASSERT_EQ(end.data.step, cfg.training.max_steps);
    resumed.resume(end.data);  // nothing left to run: its state is the resumed run's end
    expect_same(end_state(full, full_dir), end_state(resumed, dir), "after SIGTERM");
  }
  fs::remove_all(dir);
  fs::remove_all(full_dir);
}

TEST(ResumeSignal, FirstSignalOnlyRecordsTheSecondKillsAtOnce) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only async-signal-safe calls between fork and _exit.
    install_stop_handlers();
    ::raise(SIGTERM);
    if (stop_signal() != SIGTERM) ::_exit(3);
    ::raise(SIGTERM);
    ::_exit(4);  // not reached: the second signal kills
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exited " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace ampctl::train
