#include "ampctl/core/input_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>

#include "ampctl/core/error.h"
#include "ampctl/core/interrupt.h"

namespace ampctl {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string prefix(const std::filesystem::path& path, std::string_view what) {
  return what.empty() ? path.string() : std::string(what) + " " + path.string();
}

[[noreturn]] void not_regular(const std::filesystem::path& path, std::string_view what,
                              const std::string& kind) {
  throw Error{ErrorKind::input, prefix(path, what) + ": is " + kind + ", not a regular file",
              "give the path of a regular file"};
}

class Fd {
 public:
  explicit Fd(int fd) : m_fd(fd) {}
  ~Fd() {
    if (m_fd >= 0) ::close(m_fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return m_fd; }
  int release() {
    const int fd = m_fd;
    m_fd = -1;
    return fd;
  }

 private:
  int m_fd;
};

}  // namespace

std::string non_regular_kind(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return kind_of(st.st_mode);
}

void require_regular_file(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw Error{ErrorKind::input, prefix(path, what) + ": " +
                                      (err == ENOENT ? std::string("no such file")
                                                     : std::string(std::strerror(err)))};
  }
  if (const std::string kind = kind_of(st.st_mode); !kind.empty()) not_regular(path, what, kind);
}

namespace {

// Opens `path` for reading without blocking on a FIFO and refuses anything but a regular file
// (checked on the open descriptor, so a file swapped after a stat cannot slip through). Returns
// the descriptor (blocking again: a regular file's reads do not block anyway) and its size.
int open_regular(const std::filesystem::path& path, std::string_view what, uint64_t& size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) {
    const int err = errno;
    throw Error{ErrorKind::input, prefix(path, what) + ": " +
                                      (err == ENOENT ? std::string("no such file")
                                                     : std::string(std::strerror(err)))};
  }
  Fd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw Error{ErrorKind::input, prefix(path, what) + ": " + std::strerror(errno)};
  }
  if (const std::string kind = kind_of(st.st_mode); !kind.empty()) not_regular(path, what, kind);
  size = static_cast<uint64_t>(st.st_size);
  return fd.release();
}

// read(2) into `buf`, retried on EINTR; a failure is an error naming the file, never an end.
size_t read_some(int fd, char* buf, size_t n, const std::filesystem::path& path) {
  for (;;) {
    check_stop("reading the input files");
    const ssize_t got = ::read(fd, buf, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    throw Error{ErrorKind::runtime, "cannot read " + path.string() + ": " + std::strerror(errno)};
  }
}

[[noreturn]] void out_of_memory(const std::filesystem::path& path, std::string_view what,
                                uint64_t bytes) {
  throw Error{
      ErrorKind::runtime,
      "out of memory: cannot allocate " + format_bytes(bytes) + " to read " + prefix(path, what),
      "free memory or raise the process's memory limit (ulimit -v)"};
}

}  // namespace

std::string read_regular_file(const std::filesystem::path& path, size_t max_bytes,
                              std::string_view what) {
  uint64_t size = 0;
  Fd fd(open_regular(path, what, size));
  const auto too_large = [&] {
    return Error{ErrorKind::input, prefix(path, what) + ": larger than " + format_bytes(max_bytes) +
                                       ", the limit for this file"};
  };
  if (size > max_bytes) throw too_large();
  std::string out;
  try {
    out.reserve(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    out_of_memory(path, what, size);
  }
  char buf[1 << 16];
  for (;;) {
    const size_t n = read_some(fd.get(), buf, sizeof buf, path);
    if (n == 0) break;
    // A file that grows while it is read is held to the cap as well.
    if (n > max_bytes - out.size()) throw too_large();
    try {
      out.append(buf, n);
    } catch (const std::bad_alloc&) {
      out_of_memory(path, what, out.size() + n);
    }
  }
  return out;
}

LineReader::LineReader(const std::filesystem::path& path, size_t max_line_bytes,
                       std::string_view what)
    : m_path(path), m_what(what), m_max_line(max_line_bytes) {
  uint64_t size = 0;
  m_fd = open_regular(path, what, size);
  try {
    m_buf.resize(size_t{1} << 16);
  } catch (const std::bad_alloc&) {
    ::close(m_fd);
    out_of_memory(path, what, size_t{1} << 16);
  }
}

LineReader::~LineReader() {
  if (m_fd >= 0) ::close(m_fd);
}

bool LineReader::fill() {
  if (m_eof) return false;
  m_pos = 0;
  m_end = read_some(m_fd, m_buf.data(), m_buf.size(), m_path);
  if (m_end == 0) m_eof = true;
  return m_end > 0;
}

bool LineReader::next(std::string& line) {
  line.clear();
  bool any = false;
  for (;;) {
    if (m_pos == m_end && !fill()) {
      if (!any) return false;
      ++m_line_no;
      m_terminated = false;
      return true;
    }
    any = true;
    const char* begin = m_buf.data() + m_pos;
    const auto* nl = static_cast<const char*>(std::memchr(begin, '\n', m_end - m_pos));
    const size_t take = nl != nullptr ? static_cast<size_t>(nl - begin) : m_end - m_pos;
    if (take > m_max_line - line.size()) {
      throw Error{ErrorKind::input, prefix(m_path, m_what) + ": line " +
                                        std::to_string(m_line_no + 1) + " is longer than " +
                                        format_bytes(m_max_line) +
                                        " (the limit for a line of this file): it is damaged"};
    }
    try {
      line.append(begin, take);
    } catch (const std::bad_alloc&) {
      out_of_memory(m_path, m_what, line.size() + take);
    }
    m_pos += take;
    if (nl != nullptr) {
      ++m_pos;
      ++m_line_no;
      m_terminated = true;
      return true;
    }
  }
}

std::optional<uint64_t> host_memory_available() {
  std::optional<uint64_t> available;
  std::ifstream in("/proc/meminfo");
  std::string key, rest;
  uint64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, rest);
    if (key == "MemAvailable:") {
      available = value * 1024;  // the kernel reports kB
      break;
    }
  }
  if (!available) {
    struct sysinfo info {};
    if (::sysinfo(&info) == 0) {
      available = (static_cast<uint64_t>(info.freeram) + info.bufferram) * info.mem_unit;
    }
  }
  // A process limit (ulimit -v, a batch system's memory cap) bounds it too.
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit limit {};
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      const auto cap = static_cast<uint64_t>(limit.rlim_cur);
      available = available ? std::min(*available, cap) : cap;
    }
  }
  return available;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace ampctl
