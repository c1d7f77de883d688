// Counts heap allocations in a test binary: replaces the global operator new/delete family.
// Include it in exactly ONE source file of a test binary (each tests/unit/<dir> is one binary),
// then set g_counting around the code that must not allocate and read g_allocations.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace ampctl::testing {
inline std::atomic<bool> g_counting{false};
inline std::atomic<std::size_t> g_allocations{0};

inline void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace ampctl::testing

// GCC sees free() on memory from operator new once these are inlined (at -O1, the sanitizer
// build's level); pairing them is the point here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  return ampctl::testing::counted_alloc(n, 0);
}
void* operator new[](std::size_t n) {
  return ampctl::testing::counted_alloc(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return ampctl::testing::counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return ampctl::testing::counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ampctl::testing::counted_alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ampctl::testing::counted_alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop
