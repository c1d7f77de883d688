#include "ampctl/core/input_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

namespace {

// A "Key:   123 kB" line of /proc/self/status, in bytes.
std::optional<uint64_t> status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
    }
  }
  return std::nullopt;
}

// One number from a cgroup file ("max" and unreadable files: nullopt).
std::optional<uint64_t> cgroup_number(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
  if (end == word.c_str() || *end != '\0') return std::nullopt;
  return v;
}

// cgroup v2: the smallest memory.max - memory.current from this process's cgroup up to the root.
std::optional<uint64_t> cgroup_available() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, rel;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) rel = line.substr(3);
  }
  if (rel.empty()) return std::nullopt;
  std::optional<uint64_t> available;
  std::filesystem::path dir = std::filesystem::path("/sys/fs/cgroup") / rel.substr(1);
  for (int depth = 0; depth < 64; ++depth) {
    const std::optional<uint64_t> max = cgroup_number(dir / "memory.max");
    if (max) {
      const uint64_t current = cgroup_number(dir / "memory.current").value_or(0);
      const uint64_t left = *max > current ? *max - current : 0;
      available = available ? std::min(*available, left) : left;
    }
    if (dir == "/sys/fs/cgroup" || !dir.has_parent_path()) break;
    dir = dir.parent_path();
  }
  return available;
}

// {limit - used, name} of the tighter of RLIMIT_AS and RLIMIT_DATA, if either is set.
std::optional<std::pair<uint64_t, std::string>> address_space_headroom() {
  std::optional<std::pair<uint64_t, std::string>> out;
  const struct {
    int resource;
    const char* status_key;
    const char* name;
  } limits[] = {{RLIMIT_AS, "VmSize", "ulimit -v (RLIMIT_AS)"},
                {RLIMIT_DATA, "VmData", "ulimit -d (RLIMIT_DATA)"}};
  for (const auto& l : limits) {
    struct rlimit limit {};
    if (::getrlimit(l.resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    const auto cap = static_cast<uint64_t>(limit.rlim_cur);
    const uint64_t used = status_bytes(l.status_key).value_or(0);
    const uint64_t left = cap > used ? cap - used : 0;
    if (!out || left < out->first) out = std::make_pair(left, std::string(l.name));
  }
  return out;
}

}  // namespace

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
  // A batch system's memory cap (a cgroup) and a process limit (ulimit -v) bound it too; each
  // counts what the process (or the group) holds already.
  for (const std::optional<uint64_t> cap : {cgroup_available(), address_space_available()}) {
    if (cap) available = available ? std::min(*available, *cap) : *cap;
  }
  return available;
}

std::optional<uint64_t> address_space_available() {
  if (const auto headroom = address_space_headroom()) return headroom->first;
  return std::nullopt;
}

std::string address_space_limit_name() {
  if (const auto headroom = address_space_headroom()) return headroom->second;
  return {};
}

uint64_t thread_stack_bytes() {
  size_t stack = 0;
  pthread_attr_t attr;
  if (::pthread_getattr_default_np(&attr) == 0) {
    ::pthread_attr_getstacksize(&attr, &stack);
    ::pthread_attr_destroy(&attr);
  }
  if (stack == 0) stack = size_t{8} << 20;
  return stack + 4096;  // the guard page
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
