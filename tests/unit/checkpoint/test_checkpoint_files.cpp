// Checkpoints on disk: atomic writes, checkpoints/latest, keep_last pruning, find_checkpoint's
// fallback past damaged files, a full disk, and SIGKILL at random moments of a write loop.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "ampctl/checkpoint/atomic_file.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/core/error.h"
#include "checkpoint_test_util.h"

namespace ampctl::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::CaptureLog;
using testing::make_sample;
using testing::ScratchDir;

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

std::string latest_of(const fs::path& run_dir) {
  return read_file(run_dir / "checkpoints" / "latest");
}

void expect_error(const std::function<void()>& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// --- write_file_atomic ---

TEST(AtomicFile, WritesAndReplacesLeavingNoTemporaryFiles) {
  ScratchDir dir;
  const fs::path file = dir.path() / "a.txt";
  write_file_atomic(file, "first");
  EXPECT_EQ(read_file(file), "first");
  write_file_atomic(file, std::string(100000, 'x'));
  EXPECT_EQ(read_file(file), std::string(100000, 'x'));
  write_file_atomic(file, "");
  EXPECT_EQ(read_file(file), "");
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"a.txt"});
}

TEST(AtomicFile, FailureNamesThePathAndLeavesTheTargetAlone) {
  ScratchDir dir;
  expect_error([&] { write_file_atomic(dir.path() / "missing" / "a.txt", "x"); },
               ErrorKind::runtime,
               (dir.path() / "missing" / "a.txt").string() + ": " + std::strerror(ENOENT));
  // Renaming over a directory fails after the temp file is written: it must be removed.
  fs::create_directory(dir.path() / "sub");
  expect_error([&] { write_file_atomic(dir.path() / "sub", "x"); }, ErrorKind::runtime,
               "cannot write " + (dir.path() / "sub").string());
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"sub"});
  EXPECT_TRUE(fs::is_empty(dir.path() / "sub"));
}

TEST(AtomicFile, ReadErrorsAreInputErrors) {
  ScratchDir dir;
  expect_error([&] { read_file(dir.path() / "nope.json"); }, ErrorKind::input,
               "nope.json: no such file");
  expect_error([&] { read_file(dir.path()); }, ErrorKind::input, "is a directory");
}

TEST(AtomicFile, TemporaryNamesAreRecognised) {
  EXPECT_TRUE(is_temporary_file(".step-00000001.json.tmp-0123456789abcdef"));
  EXPECT_TRUE(is_temporary_file("/x/.latest.tmp-00"));
  EXPECT_FALSE(is_temporary_file("step-00000001.json"));
  EXPECT_FALSE(is_temporary_file("latest"));
}

// --- write_checkpoint, latest, pruning ---

TEST(CheckpointFiles, WriteUpdatesLatestAndPrunesBeyondKeepLast) {
  ScratchDir run;
  for (int64_t step = 1; step <= 6; ++step) {
    const fs::path written = write_checkpoint(run.path(), make_sample(1, step * 100), 3);
    EXPECT_EQ(written, run.path() / "checkpoints" / checkpoint_file_name(step * 100));
    EXPECT_EQ(latest_of(run.path()), checkpoint_file_name(step * 100) + "\n");
  }
  EXPECT_EQ(names_in(run.path() / "checkpoints"),
            (std::set<std::string>{"latest", "step-00000400.json", "step-00000500.json",
                                   "step-00000600.json"}));
  EXPECT_TRUE(read_checkpoint(run.path()) == make_sample(1, 600));
  EXPECT_EQ(find_checkpoint(run.path()), run.path() / "checkpoints" / "step-00000600.json");
}

TEST(CheckpointFiles, PruningNeverRemovesTheCheckpointLatestNames) {
  ScratchDir run;
  for (int64_t step : {10, 20, 30}) write_checkpoint(run.path(), make_sample(1, step), 3);
  // A run resumed from an earlier step writes a checkpoint older than those on disk.
  write_checkpoint(run.path(), make_sample(2, 15), 1);
  EXPECT_EQ(latest_of(run.path()), "step-00000015.json\n");
  EXPECT_EQ(names_in(run.path() / "checkpoints"),
            (std::set<std::string>{"latest", "step-00000015.json"}));
  EXPECT_TRUE(read_checkpoint(run.path()) == make_sample(2, 15));
}

TEST(CheckpointFiles, LeftoverTemporaryFilesAreRemovedAndOthersKept) {
  ScratchDir run;
  fs::create_directories(run.path() / "checkpoints");
  for (const char* name :
       {".step-00000005.json.tmp-0011223344556677", ".latest.tmp-ab", "notes.txt"}) {
    write_file_atomic(run.path() / "checkpoints" / name, "x");
  }
  write_checkpoint(run.path(), make_sample(1, 9), 2);
  EXPECT_EQ(names_in(run.path() / "checkpoints"),
            (std::set<std::string>{"latest", "notes.txt", "step-00000009.json"}));
}

TEST(CheckpointFiles, FileNames) {
  EXPECT_EQ(checkpoint_file_name(0), "step-00000000.json");
  EXPECT_EQ(checkpoint_file_name(100), "step-00000100.json");
  EXPECT_EQ(checkpoint_file_name(123456789), "step-123456789.json");
  ScratchDir run;
  expect_error([&] { write_checkpoint(run.path(), make_sample(1, 1), 0); },
               ErrorKind::invalid_argument, "keep_last must be >= 1");
}

// --- find_checkpoint ---

struct ThreeCheckpoints {
  ScratchDir run;
  fs::path dir;
  ThreeCheckpoints() : dir(run.path() / "checkpoints") {
    for (int64_t step : {1, 2, 3}) write_checkpoint(run.path(), make_sample(3, step), 5);
  }
  fs::path file(int64_t step) const { return dir / checkpoint_file_name(step); }
  void truncate(int64_t step) const {
    const std::string text = read_file(file(step));
    write_file_atomic(file(step), text.substr(0, text.size() / 2));
  }
};

TEST(FindCheckpoint, FileIsItselfAndDirectoryFollowsLatest) {
  ThreeCheckpoints c;
  EXPECT_EQ(find_checkpoint(c.file(2)), c.file(2));
  EXPECT_EQ(find_checkpoint(c.run.path()), c.file(3));
  EXPECT_EQ(find_checkpoint(c.dir), c.file(3)) << "the checkpoints/ folder itself";
  // latest, not the highest step, decides.
  write_file_atomic(c.dir / "latest", "step-00000002.json\n");
  CaptureLog log;
  EXPECT_EQ(find_checkpoint(c.run.path()), c.file(2));
  EXPECT_EQ(log.text(), "") << "no warning when latest is good";
}

TEST(FindCheckpoint, FallsBackWhenLatestNamesADamagedFile) {
  ThreeCheckpoints c;
  c.truncate(3);
  CaptureLog log;
  const LoadedCheckpoint loaded = load_checkpoint(c.run.path());
  EXPECT_EQ(loaded.path, c.file(2));
  EXPECT_TRUE(loaded.data == make_sample(3, 2));
  EXPECT_NE(log.text().find("names step-00000003.json, which is unusable"), std::string::npos)
      << log.text();
  EXPECT_NE(log.text().find("truncated"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("step-00000002.json (step 2)"), std::string::npos) << log.text();
  // A damaged file named directly is refused, not replaced.
  expect_error([&] { read_checkpoint(c.file(3)); }, ErrorKind::input, "truncated");
}

TEST(FindCheckpoint, FallsBackPastSeveralDamagedFiles) {
  ThreeCheckpoints c;
  c.truncate(3);
  write_file_atomic(c.file(2), "");
  CaptureLog log;
  EXPECT_EQ(find_checkpoint(c.run.path()), c.file(1));
  EXPECT_NE(log.text().find("empty file"), std::string::npos) << log.text();
}

TEST(FindCheckpoint, FallsBackWhenLatestIsMissingOrGarbage) {
  ThreeCheckpoints c;
  fs::remove(c.dir / "latest");
  {
    CaptureLog log;
    EXPECT_EQ(find_checkpoint(c.run.path()), c.file(3));
    EXPECT_NE(log.text().find("there is no"), std::string::npos) << log.text();
  }
  write_file_atomic(c.dir / "latest", "../../etc/passwd\n");
  {
    CaptureLog log;
    EXPECT_EQ(find_checkpoint(c.run.path()), c.file(3));
    EXPECT_NE(log.text().find("does not hold a checkpoint file name"), std::string::npos)
        << log.text();
    EXPECT_EQ(log.text().find("passwd"), std::string::npos) << log.text();  // never echoed
  }
  write_file_atomic(c.dir / "latest", "step-00000099.json\n");
  {
    CaptureLog log;
    EXPECT_EQ(find_checkpoint(c.run.path()), c.file(3));
    EXPECT_NE(log.text().find("step-00000099.json"), std::string::npos) << log.text();
  }
}

TEST(FindCheckpoint, NoCompleteCheckpointIsAnInputError) {
  ThreeCheckpoints c;
  for (int64_t step : {1, 2, 3}) c.truncate(step);
  try {
    find_checkpoint(c.run.path());
    FAIL() << "found a checkpoint among damaged ones";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_EQ(std::string(e.what()), "no complete checkpoint in " + c.run.path().string());
    EXPECT_NE(e.hint().find("step-00000001.json: truncated"), std::string::npos) << e.hint();
  }
  ScratchDir empty;
  expect_error([&] { find_checkpoint(empty.path()); }, ErrorKind::input,
               "no complete checkpoint in " + empty.path().string());
  expect_error([&] { find_checkpoint(empty.path() / "nope"); }, ErrorKind::input,
               "nope: no such file or directory");
}

// --- a full disk ---

// Runs `body` in a forked child; returns its exit status (or 128 + signal).
int run_in_child(const std::function<int()>& body) {
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

TEST(CheckpointFiles, FullDiskLeavesThePreviousCheckpointAndLatestIntact) {
  ScratchDir run;
  const CheckpointData before = make_sample(4, 1, 256);
  write_checkpoint(run.path(), before, 3);
  const std::string next_text = serialize(make_sample(4, 2, 256));
  ASSERT_GT(next_text.size(), 64u * 1024);

  // RLIMIT_FSIZE makes write() fail with EFBIG past 64 KiB, as ENOSPC would on a full disk.
  const int code = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
    try {
      write_checkpoint(run.path(), make_sample(4, 2, 256), 3);
      return 3;  // the write was supposed to fail
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::fprintf(stderr, "child got: %s\n", msg.c_str());
      if (e.kind() != ErrorKind::runtime) return 4;
      if (msg.find("step-00000002.json") == std::string::npos) return 5;
      if (msg.find(std::strerror(EFBIG)) == std::string::npos) return 6;
      return 0;
    }
  });
  ASSERT_EQ(code, 0) << "2: setrlimit failed, 3: no error, 4: wrong kind, 5: path not named, "
                        "6: strerror(EFBIG) not in the message";
  EXPECT_EQ(latest_of(run.path()), "step-00000001.json\n");
  EXPECT_EQ(names_in(run.path() / "checkpoints"),
            (std::set<std::string>{"latest", "step-00000001.json"}))
      << "the failed write must leave no partial or temporary file";
  EXPECT_TRUE(read_checkpoint(run.path()) == before);
}

// --- SIGKILL at random moments ---

// A child writes checkpoints in a loop; the parent kills it after a random delay spread over
// about three checkpoint writes (measured first, since fsync speed varies from disk to disk).
// After every kill, latest must name a checkpoint that parses, verifies and holds exactly what
// was written for its step, and the step may never go backwards. The test also counts where
// the kills landed: where writing is mostly CPU (tmpfs, where fsync is free) few kills land
// while a temporary file is open, so past kMinTrials it goes on (within kBudget) until
// kMinInside have; it fails if none did, since it would then have proved nothing.
TEST(CheckpointCrash, SigkillDuringWritesLeavesLatestValid) {
  ScratchDir run;
  const fs::path dir = run.path() / "checkpoints";
  constexpr int kMinTrials = 60;
  constexpr int kMinInside = 3;
  constexpr std::chrono::seconds kBudget{8};
  constexpr int64_t kWidth = 512;  // ~110 KiB of tensor data per checkpoint
  const auto t0 = std::chrono::steady_clock::now();
  write_checkpoint(run.path(), make_sample(8, 0, kWidth), 2);
  const auto one_write =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  std::mt19937_64 rng(424242);
  std::uniform_int_distribution<int64_t> delay_us(0, 3 * one_write.count() + 1000);
  int64_t last_step = 0;
  int inside_a_file = 0, before_latest = 0;
  const auto start = std::chrono::steady_clock::now();

  int trial = 0;
  for (; trial < kMinTrials ||
         (inside_a_file < kMinInside && std::chrono::steady_clock::now() - start < kBudget);
       ++trial) {
    const std::set<std::string> before = names_in(dir);
    const int64_t first = last_step + 1;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      try {
        for (int64_t step = first;; ++step) {
          write_checkpoint(run.path(), make_sample(8, step, kWidth), 2);
        }
      } catch (...) {
      }
      ::_exit(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "trial " << trial << ": the writer stopped by itself (status " << status << ")";

    std::string latest = latest_of(run.path());
    ASSERT_FALSE(latest.empty()) << "trial " << trial;
    ASSERT_EQ(latest.back(), '\n') << "trial " << trial;
    latest.pop_back();
    CheckpointData data;
    ASSERT_NO_THROW(data = parse_checkpoint(read_file(dir / latest), latest)) << "trial " << trial;
    ASSERT_GE(data.step, last_step) << "trial " << trial << ": latest went backwards";
    ASSERT_TRUE(data == make_sample(8, data.step, kWidth)) << "trial " << trial;
    ASSERT_EQ(find_checkpoint(run.path()), dir / latest) << "trial " << trial;
    for (const std::string& name : names_in(dir)) {
      if (before.count(name)) continue;
      if (is_temporary_file(name)) ++inside_a_file;
      // Killed after a checkpoint's rename but before latest's.
      if (name.rfind("step-", 0) == 0 && name > latest) ++before_latest;
    }
    last_step = data.step;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "[  INFO    ] %d kills in %.2f s (one write: %.1f ms); reached step %lld; %d "
      "kills left a partial temporary file, %d a checkpoint newer than latest\n",
      trial, seconds, one_write.count() / 1000.0, static_cast<long long>(last_step), inside_a_file,
      before_latest);
  EXPECT_GT(last_step, 0) << "no checkpoint completed: the delays are too short to test anything";
  EXPECT_GT(inside_a_file, 0) << "no kill landed inside a write: the test proved nothing";
}

}  // namespace
}  // namespace ampctl::checkpoint
