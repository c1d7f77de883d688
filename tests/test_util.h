// Small helpers shared by the unit tests: building tensors from values and reading them back, a
// fresh temporary folder.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "ampctl/backend/backend.h"

namespace ampctl::testing {

// tests/data: $AMPCTL_TEST_DATA when set (a carried build on another machine), else the source
// tree's.
inline std::string test_data_dir() {
  if (const char* env = std::getenv("AMPCTL_TEST_DATA")) return env;
#ifdef AMPCTL_TEST_DATA_DIR
  return AMPCTL_TEST_DATA_DIR;
#else
  return "tests/data";
#endif
}

// An empty path under the system's temporary folder, unique to this process and to `tag` and
// `name` (whatever an earlier run left there is removed; the folder itself is not created).
inline std::filesystem::path fresh_dir(const std::string& tag, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() /
               ("ampctl_test_" + tag + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// A fresh folder made by mkdtemp under the system's temporary folder, removed with everything in
// it when the scope ends. `tag` names the folder (ampctl-TAG-XXXXXX) to tell tests' leftovers
// apart.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag = "test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("ampctl-" + tag + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "mkdtemp(%s): %s\n", pattern.c_str(), std::strerror(errno));
      std::abort();
    }
    m_path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return m_path; }
  std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

 private:
  std::filesystem::path m_path;
};

inline Tensor make_f32(Backend& b, const std::vector<float>& v) {
  return b.from_host({static_cast<int64_t>(v.size())}, DType::f32, v.data());
}

inline std::vector<float> read_f32(Backend& b, const Tensor& t) {
  std::vector<float> v(t.numel());
  b.download(v.data(), t);
  return v;
}

inline std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

}  // namespace ampctl::testing
