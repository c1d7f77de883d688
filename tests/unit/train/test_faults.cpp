// Faults through the trainer: an unusable run directory is refused before any data is loaded,
// naming the path (exit 2) and writing nothing; a run whose data fails to load leaves no run
// directory behind; a full disk while training writes a checkpoint stops the run with exit 1 and
// leaves the previous checkpoint and `latest` intact, and resuming from them later ends where an
// uninterrupted run ends, bitwise.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/nn/model.h"
#include "ampctl/train/trainer.h"
#include "test_util.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return ampctl::testing::fresh_dir("faults", name);
}

// Its data file does not exist: a run that reaches the data load fails with Error{input}, so an
// error about the run directory proves it was refused before the data was touched.
const char* kMissingData = R"(
name: faults
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: csv, path: /nonexistent/ampctl-test.csv, label_column: 0}
training: {max_steps: 3}
)";

void expect_refused(const fs::path& run_dir, const std::string& says) {
  const config::RunConfig cfg = config::parse_config(kMissingData, "faults.yaml");
  try {
    train::train(cfg, run_dir);
    ADD_FAILURE() << run_dir << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << run_dir << ": " << e.what();
    EXPECT_EQ(e.exit_code(), 2);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("run directory " + run_dir.string() + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(Faults, AnUnusableRunDirectoryIsRefusedUpFrontNamingIt) {
  const fs::path base = fresh_dir("rundir");
  fs::create_directories(base);
  const fs::path file = base / "a-file";
  std::ofstream(file) << "not a directory\n";
  // Each of these fails as root too (root bypasses permission bits, not these).
  expect_refused(file / "run", file.string() + " is not a directory");
  expect_refused(file / "deeper" / "run", file.string() + " is not a directory");
  expect_refused(file, "exists and is not a directory");
  expect_refused(fs::path("/proc") / ("ampctl-test-" + std::to_string(::getpid())) / "run",
                 "cannot create");
  // Inside another run's checkpoints/ (whose pruning and fallback scan it), the folder included.
  const fs::path other = base / "other";
  fs::create_directories(other / "checkpoints");
  std::ofstream(other / "metrics.jsonl") << "";
  std::ofstream(other / "config.yaml") << "";
  expect_refused(other / "checkpoints" / "x", "the checkpoint folder of the run in");
  expect_refused(other / "checkpoints" / "step-00000099.json" / "y", "inside");
  expect_refused(other / "checkpoints", "inside");
  // A sweep's folder (its runs are the folders below it).
  fs::create_directories(base / "sweep");
  std::ofstream(base / "sweep" / "sweep.json") << "{}";
  expect_refused(base / "sweep", "holds a sweep (sweep.json)");
  EXPECT_EQ(std::distance(fs::directory_iterator(base / "sweep"), fs::directory_iterator{}), 1);
  fs::remove_all(base / "sweep");
  EXPECT_TRUE(fs::is_empty(other / "checkpoints"));
  // A project folder with a config.yaml and a checkpoints/ of runs, but no metrics: not a run.
  fs::remove(other / "metrics.jsonl");
  const config::RunConfig cfg = config::parse_config(kMissingData, "faults.yaml");
  try {
    train::train(cfg, other / "checkpoints" / "run1");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("checkpoint folder"), std::string::npos) << e.what();
  }
  fs::remove_all(other);
  // Nothing was written: the file is as it was and base holds only it.
  std::ifstream in(file);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "not a directory");
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(base)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, std::set<std::string>{"a-file"});
  fs::remove_all(base);
}

TEST(Faults, AReadOnlyParentDirectoryIsRefused) {
  if (::geteuid() == 0) {
    GTEST_SKIP() << "running as root: permission bits do not deny root writes, so a read-only "
                    "directory cannot be made here (the cases above cover root)";
  }
  const fs::path base = fresh_dir("readonly");
  fs::create_directories(base);
  fs::permissions(base, fs::perms::owner_read | fs::perms::owner_exec);
  expect_refused(base / "run", "Permission denied");
  fs::permissions(base, fs::perms::owner_all);
  EXPECT_TRUE(fs::is_empty(base));
  fs::remove_all(base);
}

TEST(Faults, ARunWhoseDataFailsToLoadLeavesNoRunDirectory) {
  const fs::path base = fresh_dir("data");
  const fs::path dir = base / "nested" / "run";
  const config::RunConfig cfg = config::parse_config(kMissingData, "faults.yaml");
  try {
    train::train(cfg, dir);
    ADD_FAILURE() << "a missing data file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << e.what();
    EXPECT_NE(std::string(e.what()).find("ampctl-test.csv"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(base)) << "directories created for the run were left behind";
}

// hidden [128, 128]: a checkpoint (parameters and two Adam moments, base64) is about 330 KiB,
// while config.yaml and 30 metrics lines stay under 16 KiB.
const char* kDisk = R"(
name: disk
seed: 2
device: cpu
precision: fp16
model: {type: mlp, hidden: [128, 128], activation: gelu}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 32, classes: 4}
  batch_size: 32
training: {max_steps: 30}
checkpoint: {every_steps: 10, keep_last: 3}
logging: {every_steps: 5}
)";

// Runs `body` in a forked child; returns its exit status (or 128 + signal).
int run_in_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<uint8_t> params_bytes(Trainer& t) {
  std::vector<uint8_t> v(t.model().params().nbytes());
  t.backend().download(v.data(), t.model().params());
  return v;
}

TEST(Faults, AFullDiskWhileCheckpointingStopsTheRunAndKeepsThePreviousCheckpoint) {
  const config::RunConfig cfg = config::parse_config(kDisk, "disk.yaml");
  const fs::path dir = fresh_dir("disk");
  const fs::path message = fresh_dir("disk_message");
  // The child trains; after the checkpoint of step 10 a file-size limit (as a full disk: write()
  // fails with EFBIG) makes the checkpoint of step 20 fail. The child exits as ampctl would.
  const int code = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);  // as ampctl's main does
    Trainer t(cfg, dir);
    t.begin();
    while (t.next_step() <= 10) t.step();
    if (!fs::exists(dir / "checkpoints" / "step-00000010.json")) return 90;
    const rlimit limit{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 91;
    try {
      while (!t.done()) t.step();
      t.finish();
      return 92;  // the checkpoint was supposed to fail
    } catch (const Error& e) {
      std::ofstream(message) << e.what();
      return e.exit_code();
    }
  });
  std::ifstream in(message);
  const std::string msg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(code, 1) << "90: no checkpoint at 10, 91: setrlimit failed, 92: no error; message: "
                     << msg;
  EXPECT_NE(msg.find("step-00000020.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::strerror(EFBIG)), std::string::npos) << msg;

  // latest and the checkpoint of step 10 are intact, and nothing partial is left.
  std::ifstream latest(dir / "checkpoints" / "latest");
  std::string named;
  std::getline(latest, named);
  EXPECT_EQ(named, "step-00000010.json");
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints")) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"latest", "step-00000010.json"}));
  const checkpoint::LoadedCheckpoint ck = checkpoint::load_checkpoint(dir);
  EXPECT_EQ(ck.data.step, 10);

  // Resumed with room on the disk, the run ends where an uninterrupted one does.
  Trainer resumed(cfg, dir);
  resumed.resume(ck.data);
  while (!resumed.done()) resumed.step();
  EXPECT_EQ(resumed.finish().summary.at("status"), "ok");
  const fs::path full_dir = fresh_dir("disk_full");
  Trainer full(cfg, full_dir);
  full.run();
  EXPECT_TRUE(params_bytes(resumed) == params_bytes(full));
  fs::remove_all(dir);
  fs::remove_all(full_dir);
  fs::remove(message);
}

}  // namespace
}  // namespace ampctl::train
