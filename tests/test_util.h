// Small helpers shared by the unit tests: building tensors from values and reading them back.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "ampctl/backend/backend.h"

namespace ampctl::testing {

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
