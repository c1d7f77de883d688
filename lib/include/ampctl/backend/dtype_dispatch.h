// Element access by dtype for host loops: dispatch_float(dtype, f) calls f with a value of the
// storage type (float, half or bfloat16), so one templated loop body serves every float dtype.
#pragma once

#include <string>

#include "ampctl/core/tensor.h"

namespace ampctl {

template <typename F>
decltype(auto) dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(half{});
    case DType::bf16:
      return f(bfloat16{});
    case DType::i32:
      break;
  }
  throw Error{ErrorKind::invalid_argument,
              std::string("expected a floating-point tensor, got dtype ") + dtype_name(dtype)};
}

// Widen / round one element of storage type T (float is the identity).
inline float to_f32(float v) {
  return v;
}
inline float to_f32(half v) {
  return static_cast<float>(v);
}
inline float to_f32(bfloat16 v) {
  return static_cast<float>(v);
}

template <typename T>
inline T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return T(v);
  }
}

}  // namespace ampctl
