// Overflow-checked size arithmetic. Every size formed from something a user controls (a config's
// widths and batch size, a checkpoint's shapes, a data file's header) goes through these, so a
// product that wraps is an error naming what was being computed, never a small allocation that
// is then filled past its end.
//
// Invariant: each function returns the exact mathematical result or throws Error{kind} with
// "WHAT: A x B overflows" (kind: invalid_argument unless the caller says input or config).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ampctl/core/error.h"

namespace ampctl {

[[noreturn]] inline void throw_overflow(std::string_view what, const char* op, uint64_t a,
                                        uint64_t b, ErrorKind kind) {
  throw Error{kind, std::string(what) + ": " + std::to_string(a) + " " + op + " " +
                        std::to_string(b) + " overflows a 64-bit size"};
}

// a * b for non-negative int64 sizes.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what,
                           ErrorKind kind = ErrorKind::invalid_argument) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) {
    throw_overflow(what, "x", static_cast<uint64_t>(a), static_cast<uint64_t>(b), kind);
  }
  return out;
}

inline int64_t checked_add(int64_t a, int64_t b, std::string_view what,
                           ErrorKind kind = ErrorKind::invalid_argument) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &out)) {
    throw_overflow(what, "+", static_cast<uint64_t>(a), static_cast<uint64_t>(b), kind);
  }
  return out;
}

inline size_t checked_mul(size_t a, size_t b, std::string_view what,
                          ErrorKind kind = ErrorKind::invalid_argument) {
  size_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) throw_overflow(what, "x", a, b, kind);
  return out;
}

inline size_t checked_add(size_t a, size_t b, std::string_view what,
                          ErrorKind kind = ErrorKind::invalid_argument) {
  size_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) throw_overflow(what, "+", a, b, kind);
  return out;
}

}  // namespace ampctl
