// Small helpers shared by the unit tests: building tensors from values and reading them back.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
