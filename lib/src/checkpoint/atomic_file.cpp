// Crash-safe file writes (temp file + fsync + rename + directory fsync) and whole-file reads.
#include "ampctl/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"

namespace ampctl::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTempMarker = ".tmp-";

// Owns a file descriptor; close() reports the error a deferred write may only show then.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : m_fd(fd) {}
  ~FileDescriptor() {
    if (m_fd >= 0) ::close(m_fd);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return m_fd; }
  // 0, or the errno of a failed close.
  int close() {
    const int fd = m_fd;
    m_fd = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int m_fd;
};

// Removes the temporary file unless the rename consumed it.
class TempFileGuard {
 public:
  explicit TempFileGuard(fs::path path) : m_path(std::move(path)) {}
  ~TempFileGuard() {
    if (!m_path.empty()) ::unlink(m_path.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void release() { m_path.clear(); }

 private:
  fs::path m_path;
};

Error write_error(const fs::path& path, int err, const char* during) {
  return Error{ErrorKind::runtime,
               "cannot write " + path.string() + ": " + std::strerror(err) + " (" + during + ")"};
}

// Creates a new file next to `target` with a name no one else holds (O_EXCL); 0666 & ~umask.
int create_temp_file(const fs::path& target, fs::path& temp) {
  std::random_device entropy;
  std::mt19937_64 rng((uint64_t{entropy()} << 32) ^ entropy() ^ static_cast<uint64_t>(::getpid()));
  constexpr int kAttempts = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    // The writer's pid in the name lets a cleanup tell its own leftovers (and a dead writer's)
    // from a live writer's file (temporary_file_orphaned).
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, "%lld-%016llx", static_cast<long long>(::getpid()),
                  static_cast<unsigned long long>(rng()));
    std::string name = ".";
    name += target.filename().string();
    name += kTempMarker;
    name += suffix;
    temp = target.parent_path() / name;
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

void write_all(int fd, std::string_view bytes, const fs::path& path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw write_error(path, errno, "writing the temporary file");
    }
    // A short write past a size limit: the next write() reports why (EFBIG / ENOSPC).
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void fsync_directory(const fs::path& dir, const fs::path& path) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw write_error(path, errno, "opening its directory to sync the rename");
  FileDescriptor guard(fd);
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as durable as
  // they make it, which is not an error of ours.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    throw write_error(path, errno, "syncing its directory after the rename");
  }
}

}  // namespace

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  if (path.filename().empty()) {
    throw Error{ErrorKind::invalid_argument, "cannot write " + path.string() + ": not a file name"};
  }
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  fs::path temp;
  const int raw = create_temp_file(dir / path.filename(), temp);
  if (raw < 0) throw write_error(path, errno, "creating a temporary file beside it");
  FileDescriptor fd(raw);
  TempFileGuard guard(temp);

  write_all(fd.get(), bytes, path);
  if (::fsync(fd.get()) != 0) throw write_error(path, errno, "syncing the temporary file");
  if (const int err = fd.close(); err != 0) {
    throw write_error(path, err, "closing the temporary file");
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    throw write_error(path, errno, "renaming the temporary file over it");
  }
  guard.release();
  fsync_directory(dir, path);
}

bool is_temporary_file(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.size() > 1 && name[0] == '.' && name.find(kTempMarker) != std::string::npos;
}

bool temporary_file_orphaned(const fs::path& path) {
  if (!is_temporary_file(path)) return false;
  const std::string name = path.filename().string();
  const std::string tail = name.substr(name.rfind(kTempMarker) + std::strlen(kTempMarker));
  const size_t dash = tail.find('-');
  // Written before names carried the pid: no live writer makes such names any more.
  if (dash == std::string::npos) return true;
  long long pid = 0;
  for (size_t i = 0; i < dash; ++i) {
    if (tail[i] < '0' || tail[i] > '9' || pid > (1LL << 40)) return false;
    pid = pid * 10 + (tail[i] - '0');
  }
  if (dash == 0 || pid <= 0) return false;
  if (pid == ::getpid()) return true;
  // EPERM: the process exists (another user's); only ESRCH proves the writer gone.
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

std::string read_file(const fs::path& path, size_t max_bytes) {
  return read_regular_file(path, max_bytes);
}

}  // namespace ampctl::checkpoint
