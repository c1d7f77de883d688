// RunLock: flock(2) on RUN_DIR/.lock (see run_lock.h).
#include "ampctl/core/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>
#include <vector>

#include "ampctl/core/error.h"

namespace ampctl {

namespace fs = std::filesystem;

namespace {

// A holder record longer than this is cut: it is for a person reading an error message.
constexpr size_t kMaxRecord = 4096;
constexpr size_t kMaxCommand = 1024;

// This process's command line from /proc/self/cmdline, arguments joined by spaces, control
// bytes as '?' (the record is printed to a terminal).
std::string command_line() {
  std::string text;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[kMaxCommand];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (n > 0) text.assign(buf, static_cast<size_t>(n));
  }
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& c : text) {
    if (c == '\0') {
      c = ' ';
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = '?';
    }
  }
  return text.empty() ? std::string("ampctl") : text;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_record(int fd) {
  const std::string record = "pid " + std::to_string(::getpid()) + "\ncommand " + command_line() +
                             "\nstarted " + utc_now() + "\n";
  // Best effort: the record only makes the refusal of a second writer more helpful.
  if (::ftruncate(fd, 0) != 0) return;
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n =
        ::pwrite(fd, record.data() + done, record.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string read_record(int fd) {
  std::string text(kMaxRecord, '\0');
  ssize_t n = -1;
  do {
    n = ::pread(fd, text.data(), text.size(), 0);
  } while (n < 0 && errno == EINTR);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

// The record of a lock another process holds. The holder writes it just after its flock
// succeeds, so a refusal in between reads an empty or half-written file: wait for the record's
// last line a little (two seconds at most; a holder that could not write one is then shown
// without it).
std::string read_holder_record(int fd) {
  std::string record = read_record(fd);
  for (int tries = 0; tries < 200 && record.find("\nstarted ") == std::string::npos; ++tries) {
    ::usleep(10000);
    record = read_record(fd);
  }
  return record;
}

// "pid N: COMMAND" from a record ("" when it holds neither).
std::string describe_record(const std::string& record) {
  std::string pid, command;
  size_t start = 0;
  while (start < record.size()) {
    size_t end = record.find('\n', start);
    if (end == std::string::npos) end = record.size();
    const std::string_view line(record.data() + start, end - start);
    if (line.rfind("pid ", 0) == 0) pid = line.substr(4);
    if (line.rfind("command ", 0) == 0) command = line.substr(8);
    start = end + 1;
  }
  for (std::string* s : {&pid, &command}) {
    for (char& c : *s) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
  }
  if (pid.empty()) return command;
  return "pid " + pid + (command.empty() ? std::string() : ": " + command);
}

// The descriptor handed over in the environment, when it is `file`'s; else -1.
int adopt_handed_over(const fs::path& file) {
  const char* value = std::getenv(kRunLockFdVariable);
  if (value == nullptr) return -1;
  char* end = nullptr;
  const long fd = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || fd < 0 || fd > 1 << 20) return -1;
  struct stat have {
  }, want{};
  if (::fstat(static_cast<int>(fd), &have) != 0 || ::stat(file.c_str(), &want) != 0) return -1;
  if (have.st_dev != want.st_dev || have.st_ino != want.st_ino) return -1;
  // The same open file description already holds the lock; this succeeds at once and proves it.
  if (::flock(static_cast<int>(fd), LOCK_EX | LOCK_NB) != 0) return -1;
  ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  ::unsetenv(kRunLockFdVariable);  // for this directory only, and only once
  return static_cast<int>(fd);
}

Error lock_file_error(const fs::path& dir, const fs::path& file, const std::string& why) {
  return Error{
      ErrorKind::usage,
      "run directory " + dir.string() + ": cannot use its lock file " + file.string() + ": " + why,
      "give a writable run directory; ampctl creates " + std::string(kRunLockFile) +
          " there to keep a second process from writing the same run"};
}

// The locks this process holds, by the lock file's identity, with how many RunLocks share each:
// a command that locks its run directory early (resume, before choosing the checkpoint) and the
// run directory object that locks it again share one descriptor, where a second flock on a new
// descriptor would conflict with the first.
// A forked child inherits the list but not the ownership (it has not locked anything): entries
// count only in the process that made them.
struct Held {
  dev_t dev;
  ino_t ino;
  int fd;
  int users;
  pid_t owner;
};
std::vector<Held>& held_locks() {
  static std::vector<Held> held;
  return held;
}

Held* find_held(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return nullptr;
  for (Held& h : held_locks()) {
    if (h.dev == st.st_dev && h.ino == st.st_ino && h.owner == ::getpid()) return &h;
  }
  return nullptr;
}

void remember(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0) held_locks().push_back({st.st_dev, st.st_ino, fd, 1, ::getpid()});
}

// Drops one user of `fd`; true when it was the last (the descriptor is then the caller's to close).
bool forget(int fd) {
  std::vector<Held>& held = held_locks();
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i].fd != fd || held[i].owner != ::getpid()) continue;
    if (--held[i].users > 0) return false;
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return true;
}

}  // namespace

RunLock::RunLock(const fs::path& run_dir) : m_file(run_dir / kRunLockFile) {
  m_fd = adopt_handed_over(m_file);
  if (m_fd >= 0) {
    write_record(m_fd);
    remember(m_fd);
    return;
  }
  // O_NOFOLLOW: a symlink planted as .lock must not make us create or truncate its target.
  const int fd =
      ::open(m_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) throw lock_file_error(run_dir, m_file, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw lock_file_error(run_dir, m_file, "not a regular file");
  }
  if (Held* h = find_held(fd)) {  // this process holds it already
    ::close(fd);
    ++h->users;
    m_fd = h->fd;
    return;
  }
  int rc = -1;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      throw lock_file_error(run_dir, m_file, std::strerror(err));
    }
    const std::string holder = describe_record(read_holder_record(fd));
    ::close(fd);
    throw Error{ErrorKind::usage,
                "run directory " + run_dir.string() + " is in use by another ampctl process" +
                    (holder.empty() ? std::string() : " (" + holder + ")"),
                "one process at a time writes a run directory: wait for that one to finish, or "
                "stop it with SIGTERM (it writes a checkpoint) and then resume"};
  }
  m_fd = fd;
  write_record(m_fd);
  remember(m_fd);
}

RunLock::~RunLock() {
  if (m_fd < 0 || !forget(m_fd)) return;
  // A failure needs no handling: a stale record is only shown while another process holds the
  // lock, which has written its own by then.
  [[maybe_unused]] const int rc = ::ftruncate(m_fd, 0);
  ::close(m_fd);
}

void RunLock::release_to_child() {
  if (m_fd >= 0 && forget(m_fd)) ::close(m_fd);
  m_fd = -1;
}

std::string run_lock_holder(const fs::path& run_dir) {
  const fs::path file = run_dir / kRunLockFile;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return {};
  const std::string text = describe_record(read_holder_record(fd));
  ::close(fd);
  return text;
}

bool run_lock_held(const fs::path& run_dir) {
  const fs::path file = run_dir / kRunLockFile;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  // A shared probe conflicts only with an exclusive holder; released again at once.
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

}  // namespace ampctl
