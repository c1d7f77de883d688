// RunLock: one writer per run directory, checked across real processes (fork): a second
// process is refused naming the holder, the kernel frees the lock of a process that dies without
// cleaning up, a process shares its own lock, and a hand-over to a child leaves no window.
#include "ampctl/core/run_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "ampctl/core/error.h"
#include "test_util.h"

namespace ampctl {
namespace {

namespace fs = std::filesystem;

// Runs `body` in a forked child and returns its exit status (the child never returns).
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
      rc = 98;
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// In a child: 0 when taking the lock is refused with Error{usage} naming `holder_pid`, 1 when it
// is taken, 2 for any other outcome.
int refused_naming(const fs::path& dir, pid_t holder_pid) {
  try {
    RunLock lock(dir);
    return 1;
  } catch (const Error& e) {
    const std::string what = e.what();
    const bool names = what.find("is in use by another ampctl process (pid " +
                                 std::to_string(holder_pid) + ": ") != std::string::npos;
    return e.kind() == ErrorKind::usage && e.exit_code() == 2 && names ? 0 : 2;
  }
}

TEST(RunLock, ASecondProcessIsRefusedNamingTheHolder) {
  const testing::ScratchDir dir("run-lock");
  const pid_t me = ::getpid();
  {
    RunLock lock(dir.path());
    EXPECT_NE(run_lock_holder(dir.path()).find("pid " + std::to_string(me)), std::string::npos)
        << run_lock_holder(dir.path());
    EXPECT_EQ(in_child([&] { return refused_naming(dir.path(), me); }), 0);
    EXPECT_EQ(in_child([&] { return run_lock_held(dir.path()) ? 0 : 1; }), 0);
  }
  // Released: a child takes it, and the record is cleared again after.
  EXPECT_EQ(in_child([&] { return refused_naming(dir.path(), me); }), 1);
  EXPECT_FALSE(run_lock_held(dir.path()));
  EXPECT_EQ(run_lock_holder(dir.path()), "");
}

// The window between a holder's flock and its record: a second process that is refused then
// finds the file empty, and names the holder once the record appears (here 300 ms later; the
// refusal waits up to two seconds for it). Before, it was refused without a name: the flaky
// "the refusal does not name the holder" of cli.output_paths on a loaded machine.
TEST(RunLock, ARefusalInTheHoldersFirstMomentStillNamesIt) {
  const testing::ScratchDir dir("run-lock");
  const fs::path file = dir.path() / kRunLockFile;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // held, with no record yet
  const pid_t me = ::getpid();
  const pid_t writer = ::fork();
  if (writer == 0) {
    ::usleep(300000);
    const std::string record =
        "pid " + std::to_string(me) + "\ncommand ampctl train\nstarted 2026-01-01T00:00:00Z\n";
    ::_exit(::pwrite(fd, record.data(), record.size(), 0) == static_cast<ssize_t>(record.size())
                ? 0
                : 1);
  }
  EXPECT_EQ(in_child([&] { return refused_naming(dir.path(), me); }), 0);
  int status = 0;
  ::waitpid(writer, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(fd);
}

TEST(RunLock, TheKernelReleasesTheLockOfAProcessThatDies) {
  const testing::ScratchDir dir("run-lock");
  // The child takes the lock and dies without any destructor running (_exit, as on SIGKILL).
  EXPECT_EQ(in_child([&] {
              new RunLock(dir.path());  // never freed: only the process's death releases it
              ::_exit(7);
              return 0;
            }),
            7);
  EXPECT_NO_THROW(RunLock lock(dir.path()));
}

TEST(RunLock, OneProcessSharesItsOwnLock) {
  const testing::ScratchDir dir("run-lock");
  const pid_t me = ::getpid();
  auto outer = std::make_unique<RunLock>(dir.path());
  {
    RunLock inner(dir.path());  // the same process again: shared, not refused
    EXPECT_EQ(inner.fd(), outer->fd());
  }
  // The inner one going does not release it.
  EXPECT_EQ(in_child([&] { return refused_naming(dir.path(), me); }), 0);
  outer.reset();
  EXPECT_FALSE(run_lock_held(dir.path()));
}

TEST(RunLock, AHandOverToAChildLeavesNoWindow) {
  const testing::ScratchDir dir("run-lock");
  auto parent = std::make_unique<RunLock>(dir.path());
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const int fd = parent->fd();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // What the sweep does between fork and exec, then what the child's RunLock does.
    ::fcntl(fd, F_SETFD, 0);
    ::setenv(kRunLockFdVariable, std::to_string(fd).c_str(), 1);
    int rc = 0;
    try {
      RunLock adopted(dir.path());
      rc = adopted.fd() == fd && std::getenv(kRunLockFdVariable) == nullptr ? 0 : 3;
      char go = 0;
      [[maybe_unused]] ssize_t n = ::write(from_child[1], "r", 1);  // holding it
      n = ::read(to_child[0], &go, 1);                              // until told to go
    } catch (...) {
      rc = 4;
    }
    ::_exit(rc);
  }
  char ready = 0;
  ASSERT_EQ(::read(from_child[0], &ready, 1), 1);
  parent->release_to_child();
  parent.reset();
  // The child holds it now, with its own record.
  EXPECT_EQ(in_child([&] { return refused_naming(dir.path(), child); }), 0);
  ASSERT_EQ(::write(to_child[1], "g", 1), 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NO_THROW(RunLock lock(dir.path()));
  for (int f : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(f);
}

TEST(RunLock, ALockFileThatIsNotARegularFileIsRefused) {
  const testing::ScratchDir dir("run-lock");
  fs::create_directory(dir.path() / kRunLockFile);
  try {
    RunLock lock(dir.path());
    FAIL() << "a directory named .lock was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find(".lock"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ampctl
