// Shared by the libFuzzer targets (tests/fuzz, built with -DAMPCTL_FUZZ=ON, run by
// scripts/fuzz.sh). The contract a target checks: for ANY input the library either succeeds or
// throws ampctl::Error. A crash, a sanitizer report, an exception of another type (it escapes
// the target and terminates the process), a hang or an allocation past libFuzzer's limit is a
// finding; so is a broken invariant, which a target reports through invariant_failed().
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ampctl/core/error.h"

namespace ampctl::fuzz {

// Prints what broke and aborts: libFuzzer saves the input as a crash.
[[noreturn]] inline void invariant_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A refusal must say what it refuses: `e` must be of `kind` and its message must name the input
// (contain `name`), as docs/reference.md, "Errors and hints", asks of every error ("naming the
// file").
inline void check_refusal(const Error& e, ErrorKind kind, std::string_view name) {
  const std::string message = e.what();
  if (e.kind() != kind) {
    invariant_failed(std::string("refused as ") + to_string(e.kind()) + ", expected " +
                     to_string(kind) + ": " + message);
  }
  if (message.find(name) == std::string::npos) {
    invariant_failed("the message does not name " + std::string(name) + ": " + message);
  }
}

// An in-memory file (memfd) holding `bytes`, named by a path the readers can open by name
// (/proc/self/fd/N): the file readers take paths, and this keeps the fuzzers off the disk.
class MemFile {
 public:
  explicit MemFile(std::string_view bytes) {
    m_fd = ::memfd_create("ampctl-fuzz", MFD_CLOEXEC);
    if (m_fd < 0) invariant_failed("memfd_create failed");
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(m_fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) invariant_failed("write to memfd failed");
      done += static_cast<size_t>(n);
    }
    m_path = "/proc/self/fd/" + std::to_string(m_fd);
  }
  ~MemFile() { ::close(m_fd); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& path() const { return m_path; }

 private:
  int m_fd = -1;
  std::string m_path;
};

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace ampctl::fuzz
