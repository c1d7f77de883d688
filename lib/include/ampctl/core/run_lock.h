// RunLock: one writer per run directory (docs/reference.md, run directories).
//
// `train`, `resume` and each run of a `sweep` hold an exclusive flock(2) on RUN_DIR/.lock for
// the whole life of the process. The kernel releases it when the process exits or dies (even by
// SIGKILL), so a lock can never be left stale; the file itself stays (removing a lock file races
// with a process that has just opened it). A second writer is refused at once, never queued: it
// throws Error{usage} (exit 2) naming the holder, whose pid and command line the holder wrote
// into the lock file after taking it.
//
// Within one process the lock is shared: a second RunLock for a directory this process has
// locked already uses the same descriptor (a command may lock early, and the run directory object
// again), and the lock is released when the last of them goes.
//
// Hand-over to a child process (the sweep): the parent takes the lock, clears FD_CLOEXEC on its
// descriptor in the child after fork() and names it in the environment variable
// kRunLockFdVariable. A RunLock constructed in the child for the same directory adopts that
// descriptor (same open file description, so the lock is already held, without a window in which
// a third process could take it) instead of locking again, which would conflict with it.
#pragma once

#include <filesystem>
#include <string>

namespace ampctl {

inline constexpr const char* kRunLockFile = ".lock";
inline constexpr const char* kRunLockFdVariable = "AMPCTL_RUN_LOCK_FD";

class RunLock {
 public:
  // Takes the lock of `run_dir` (which must exist), or adopts the one handed over in the
  // environment. Throws Error{usage} naming the holder when another process holds it, and
  // Error{usage} naming the file when it cannot be created (no permission, not a regular file).
  explicit RunLock(const std::filesystem::path& run_dir);
  // Releases the lock (clearing the holder record first when this process still owns it).
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // The descriptor, for a hand-over to a child (see above).
  int fd() const { return m_fd; }
  const std::filesystem::path& file() const { return m_file; }
  // Closes this process's descriptor without clearing the holder record: after a hand-over the
  // child holds the lock on the same open file description and has written its own record.
  void release_to_child();

 private:
  std::filesystem::path m_file;
  int m_fd = -1;
};

// The holder record of `run_dir`'s lock ("pid N: COMMAND"), or "" when there is none; for
// messages.
std::string run_lock_holder(const std::filesystem::path& run_dir);

// True when another process holds `run_dir`'s lock right now (probes without waiting).
bool run_lock_held(const std::filesystem::path& run_dir);

}  // namespace ampctl
