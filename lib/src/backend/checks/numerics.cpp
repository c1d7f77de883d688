// The numerics family's argument checks (checks.h; backend.h, "numerics"), shared by both backends.
#include <cstdint>
#include <string>

#include "checks.h"

namespace ampctl {

void check_round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters,
                         const Device& device) {
  auto fail = [](const std::string& what) {
    throw Error{ErrorKind::invalid_argument, "round_counted: " + what};
  };
  if (!src.defined() || !dst.defined() || !counters.defined()) {
    fail("src, dst and counters are required");
  }
  for (const Tensor* t : {&src, &dst, &counters}) {
    if (t->device() != device) fail(t->describe() + " is not on " + device.str());
  }
  if (src.dtype() != DType::f32) fail("src must be f32, got " + src.describe());
  if (dst.dtype() != DType::f16 && dst.dtype() != DType::bf16) {
    fail("dst must be f16 or bf16, got " + dst.describe());
  }
  if (src.numel() != dst.numel()) {
    fail("src " + src.describe() + " and dst " + dst.describe() + " differ in numel");
  }
  if (counters.dtype() != DType::i32 || counters.numel() != static_cast<size_t>(numerics::kWords)) {
    fail("counters must be i32 with " + std::to_string(numerics::kWords) + " words, got " +
         counters.describe());
  }
  if (reinterpret_cast<uintptr_t>(counters.data()) % 8 != 0) {
    fail("counters' data must be 8-byte aligned (int64 counters)");
  }
}

void check_round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax,
                      const Device& device) {
  auto fail = [](const std::string& what) {
    throw Error{ErrorKind::invalid_argument, "round_amax: " + what};
  };
  if (!src.defined() || !dst.defined() || !amax.defined()) fail("src, dst and amax are required");
  for (const Tensor* t : {&src, &dst, &amax}) {
    if (t->device() != device) fail(t->describe() + " is not on " + device.str());
  }
  if (src.dtype() != DType::f32) fail("src must be f32, got " + src.describe());
  if (dst.dtype() != DType::f16 && dst.dtype() != DType::bf16) {
    fail("dst must be f16 or bf16, got " + dst.describe());
  }
  if (src.numel() != dst.numel()) {
    fail("src " + src.describe() + " and dst " + dst.describe() + " differ in numel");
  }
  if (amax.dtype() != DType::f32 || amax.numel() != static_cast<size_t>(numerics::kAmaxWords)) {
    fail("amax must be f32 with " + std::to_string(numerics::kAmaxWords) + " values, got " +
         amax.describe());
  }
}

GemmDims check_gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const Tensor& c, const Tensor& amax, const Tensor& scratch,
                               const Device& device) {
  auto fail = [](const std::string& what) {
    throw Error{ErrorKind::invalid_argument, "gemm_round_amax: " + what};
  };
  const GemmDims d = check_gemm(a, trans_a, b, trans_b, c, device);
  if (c.dtype() != DType::f16 && c.dtype() != DType::bf16) {
    fail("c must be f16 or bf16, got " + c.describe());
  }
  if (!amax.defined() || !scratch.defined()) fail("amax and scratch are required");
  for (const Tensor* t : {&amax, &scratch}) {
    if (t->device() != device) fail(t->describe() + " is not on " + device.str());
  }
  if (amax.dtype() != DType::f32 || amax.numel() != static_cast<size_t>(numerics::kAmaxWords)) {
    fail("amax must be f32 with " + std::to_string(numerics::kAmaxWords) + " values, got " +
         amax.describe());
  }
  if (scratch.dtype() != DType::f32 || scratch.numel() < c.numel()) {
    fail("scratch must be f32 of at least c's " + std::to_string(c.numel()) + " elements, got " +
         scratch.describe());
  }
  for (const Tensor* t : {&a, &b, &c, &amax}) {
    if (checks::overlaps(scratch, *t)) fail("scratch shares memory with " + t->describe());
  }
  return d;
}

}  // namespace ampctl
