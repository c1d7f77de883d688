// `ampctl sweep` end to end through the real binary: a 2x2 grid over scaler.init_scale x
// scaler.growth_interval on a tiny synthetic problem.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The ampctl binary: the build directory's, next to tests/ (this test lives in build/tests).
fs::path ampctl_binary() {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "ampctl";
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == sep && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const char* kTiny = R"(name: tiny
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [16]}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  eval: {split_fraction: 0.25}
  batch_size: 32
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 12, eval_every: 6}
logging: {every_steps: 6}
)";

class SweepExecutor : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(ampctl_binary())) GTEST_SKIP() << "no ampctl binary at " << ampctl_binary();
    dir = fs::current_path() / ("sweep_exec_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "tiny.yaml") << kTiny;
  }
  void TearDown() override {
    if (!HasFailure() && !dir.empty()) fs::remove_all(dir);
  }
  std::string sweep_command(const std::string& extra = {}) const {
    return ampctl_binary().string() + " sweep --config " + (dir / "tiny.yaml").string() +
           " --grid scaler.init_scale=1024,65536 --grid scaler.growth_interval=2,100 --jobs 2" +
           " --out " + (dir / "out").string() + extra + " > " + (dir / "console.txt").string() +
           " 2>&1";
  }
  fs::path dir;
};

TEST_F(SweepExecutor, GridMakesFourRunsWithMatchingSummaryAndRerunTrainsNothing) {
  ASSERT_EQ(run(sweep_command()), 0) << read(dir / "console.txt");
  const fs::path out = dir / "out";
  const std::vector<std::string> names = {
      "init_scale=1024,growth_interval=2", "init_scale=1024,growth_interval=100",
      "init_scale=65536,growth_interval=2", "init_scale=65536,growth_interval=100"};
  std::map<std::string, fs::file_time_type> mtimes;
  for (const std::string& n : names) {
    ASSERT_TRUE(fs::exists(out / n / "summary.json")) << n << "\n" << read(dir / "console.txt");
    ASSERT_TRUE(fs::exists(out / n / "config.yaml"));
    mtimes[n] = fs::last_write_time(out / n / "summary.json");
  }

  std::istringstream csv(read(out / "sweep.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  const std::vector<std::string> header = split(line, ',');
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    ADD_FAILURE() << "no column " << name;
    return size_t{0};
  };
  int rows = 0;
  while (std::getline(csv, line)) {
    if (line.empty()) continue;
    ++rows;
    const std::vector<std::string> f = split(line, ',');
    ASSERT_EQ(f.size(), header.size()) << line;
    const std::string name = f[col("name")];
    EXPECT_EQ(f[col("status")], "ok");
    const nlohmann::json s = nlohmann::json::parse(read(out / name / "summary.json"));
    for (const char* k :
         {"final_loss", "best_eval_loss", "steps", "skipped_steps", "retries", "final_scale",
          "min_scale", "max_scale", "wall_time_s", "samples_per_s"}) {
      ASSERT_FALSE(f[col(k)].empty()) << name << " " << k;
      EXPECT_EQ(nlohmann::json::parse(f[col(k)]), s[k]) << name << " " << k;
    }
    EXPECT_EQ(s["steps"].get<int64_t>(), 12);
    EXPECT_DOUBLE_EQ(std::stod(f[col("overflow_rate")]),
                     s["skipped_steps"].get<double>() / s["steps"].get<double>());
  }
  EXPECT_EQ(rows, 4);
  const nlohmann::json report = nlohmann::json::parse(read(out / "sweep.json"));
  EXPECT_EQ(report["runs"].size(), 4u);
  EXPECT_EQ(report["metric"], "best_eval_loss");
  // One run per setting: the verdict cannot test, and marks none.
  EXPECT_TRUE(report["best"].is_null());
  EXPECT_EQ(report["best_runs"].size(), 0u);
  EXPECT_NE(report["verdict"].get<std::string>().find("not tested"), std::string::npos)
      << report["verdict"];
  EXPECT_NE(read(dir / "console.txt").find("verdict: "), std::string::npos);
  // growth_interval=2 on 12 steps grows the scale; with 1024 it ends above where it began.
  const nlohmann::json s =
      nlohmann::json::parse(read(out / "init_scale=1024,growth_interval=2" / "summary.json"));
  EXPECT_GT(s["max_scale"].get<double>(), 1024.0);

  // The same command again: every run is finished, nothing trains.
  ASSERT_EQ(run(sweep_command()), 0) << read(dir / "console.txt");
  EXPECT_NE(read(dir / "console.txt").find("skipped"), std::string::npos);
  for (const std::string& n : names) {
    EXPECT_EQ(fs::last_write_time(out / n / "summary.json"), mtimes[n]) << n;
  }
}

TEST_F(SweepExecutor, BadSpecExitsTwoBeforeAnythingRuns) {
  const std::string cmd = ampctl_binary().string() + " sweep --config " +
                          (dir / "tiny.yaml").string() +
                          " --grid scaler.init_scale=1024,oops --out " + (dir / "bad").string() +
                          " > " + (dir / "console.txt").string() + " 2>&1";
  EXPECT_EQ(run(cmd), 2);
  const std::string console = read(dir / "console.txt");
  EXPECT_NE(console.find("scaler.init_scale"), std::string::npos) << console;
  EXPECT_NE(console.find("run init_scale=oops"), std::string::npos) << console;
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

TEST_F(SweepExecutor, InterruptedRunIsResumedFromItsCheckpoint) {
  // A run dir holding a checkpoint but no summary (as a killed sweep leaves it): make one by
  // training with a checkpoint midway, then deleting the summary.
  const std::string one = ampctl_binary().string() + " sweep --config " +
                          (dir / "tiny.yaml").string() + " --grid scaler.init_scale=1024 --out " +
                          (dir / "out").string() + " > " + (dir / "console.txt").string() + " 2>&1";
  ASSERT_EQ(run(one), 0) << read(dir / "console.txt");
  const fs::path run_dir = dir / "out" / "init_scale=1024";
  ASSERT_TRUE(fs::exists(run_dir / "checkpoints" / "latest"));
  fs::remove(run_dir / "summary.json");
  ASSERT_EQ(run(one), 0) << read(dir / "console.txt");
  EXPECT_NE(read(dir / "console.txt").find("resuming"), std::string::npos)
      << read(dir / "console.txt");
  EXPECT_TRUE(fs::exists(run_dir / "summary.json"));
}

// Kills the sweep process itself with SIGKILL while its second run trains (no chance to forward
// anything): the run still stops the clean way (it gets SIGTERM when its parent dies, and
// checkpoints), and the same command again skips the finished run, waits for nothing left
// running, resumes the killed run from its checkpoint and completes the rest.
TEST_F(SweepExecutor, KilledMidwayThenRerunCompletesTheRest) {
  std::string long_cfg = kTiny;
  long_cfg.replace(long_cfg.find("max_steps: 12, eval_every: 6"), 28,
                   "max_steps: 20000, eval_every: 0");
  long_cfg.replace(long_cfg.find("every_steps: 6"), 14, "every_steps: 5000");
  std::ofstream(dir / "long.yaml") << long_cfg << "checkpoint: {every_steps: 5000}\n";
  const std::string out = (dir / "out").string();
  const std::vector<std::string> args = {ampctl_binary().string(),
                                         "sweep",
                                         "--config",
                                         (dir / "long.yaml").string(),
                                         "--grid",
                                         "scaler.init_scale=1024,65536",
                                         "--grid",
                                         "scaler.growth_interval=2,100",
                                         "--jobs",
                                         "1",
                                         "--out",
                                         out};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string console = (dir / "console1.txt").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = std::freopen(console.c_str(), "w", stdout);
    if (f == nullptr || dup2(fileno(stdout), 2) < 0) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const std::string first = "init_scale=1024,growth_interval=2";
  const std::string second = "init_scale=1024,growth_interval=100";
  // Wait until the first run finished and the second one is training (metrics lines written).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool training = false;
  while (!training && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    training = fs::exists(dir / "out" / first / "summary.json") &&
               read(dir / "out" / second / "metrics.jsonl").size() > 200;
  }
  ASSERT_TRUE(training) << read(console);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(dir / "out" / second / "summary.json"));
  const auto first_mtime = fs::last_write_time(dir / "out" / first / "summary.json");

  // The same command again, at once (the killed run may still be writing its checkpoint).
  std::string again;
  for (size_t i = 0; i + 1 < argv.size(); ++i) again += std::string(argv[i]) + " ";
  again += "> " + (dir / "console2.txt").string() + " 2>&1";
  ASSERT_EQ(run(again), 0) << read(dir / "console2.txt");
  const std::string log = read(dir / "console2.txt");
  EXPECT_NE(log.find(first + ": finished before (ok), skipped"), std::string::npos) << log;
  EXPECT_NE(log.find(second + ": resuming"), std::string::npos) << log;
  EXPECT_EQ(fs::last_write_time(dir / "out" / first / "summary.json"), first_mtime);
  const nlohmann::json report = nlohmann::json::parse(read(dir / "out" / "sweep.json"));
  ASSERT_EQ(report["runs"].size(), 4u);
  for (const auto& row : report["runs"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_EQ(row["steps"], 20000) << row.dump();
  }
  // The resumed run's metrics have one line per step, none lost or repeated across the kill.
  std::istringstream lines(read(dir / "out" / second / "metrics.jsonl"));
  std::string line;
  int64_t expect = 1;
  while (std::getline(lines, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] != "train") continue;
    ASSERT_EQ(j["step"].get<int64_t>(), expect) << line;
    ++expect;
  }
  EXPECT_EQ(expect, 20001);
}

}  // namespace
