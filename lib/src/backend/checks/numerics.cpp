// The numerics family's argument checks (checks.h; backend.h, "numerics"), shared by both backends.
#include <cstdint>
#include <initializer_list>
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

namespace {

// What every op with the amax taken in it checks after its plain op's checks (checks.h).
void check_amax_output(const char* op, const Tensor& out, const Tensor& amax, const Tensor& scratch,
                       std::initializer_list<const Tensor*> operands, const Device& device) {
  auto fail = [op](const std::string& what) {
    throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + what};
  };
  if (out.dtype() != DType::f16 && out.dtype() != DType::bf16) {
    fail("the output must be f16 or bf16, got " + out.describe());
  }
  if (!amax.defined() || !scratch.defined()) fail("amax and scratch are required");
  for (const Tensor* t : {&amax, &scratch}) {
    if (t->device() != device) fail(t->describe() + " is not on " + device.str());
  }
  if (amax.dtype() != DType::f32 || amax.numel() != static_cast<size_t>(numerics::kAmaxWords)) {
    fail("amax must be f32 with " + std::to_string(numerics::kAmaxWords) + " values, got " +
         amax.describe());
  }
  if (scratch.dtype() != DType::f32 || scratch.numel() < out.numel()) {
    fail("scratch must be f32 of at least the output's " + std::to_string(out.numel()) +
         " elements, got " + scratch.describe());
  }
  for (const Tensor* t : operands) {
    if (t->defined() && checks::overlaps(scratch, *t)) {
      fail("scratch shares memory with " + t->describe());
    }
  }
  if (checks::overlaps(scratch, amax) || checks::overlaps(scratch, out)) {
    fail("scratch shares memory with the output or amax");
  }
}

}  // namespace

GemmDims check_gemm_round_amax(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                               const Tensor& c, const Tensor& amax, const Tensor& scratch,
                               const Device& device) {
  const GemmDims d = check_gemm(a, trans_a, b, trans_b, c, device);
  check_amax_output("gemm_round_amax", c, amax, scratch, {&a, &b}, device);
  return d;
}

GemmBatchedDims check_gemm_batched_round_amax(const Tensor& a, bool trans_a, const Tensor& b,
                                              bool trans_b, const Tensor& c, const Tensor& amax,
                                              const Tensor& scratch, const Device& device) {
  const GemmBatchedDims d = check_gemm_batched(a, trans_a, b, trans_b, c, device);
  check_amax_output("gemm_batched_round_amax", c, amax, scratch, {&a, &b}, device);
  return d;
}

void check_activation_backward_amax(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                    const Tensor& dy, const Tensor& dx, const Tensor& amax,
                                    const Tensor& scratch, const Device& device) {
  check_activation_backward(kind, x, y, dy, dx, device);
  check_amax_output("activation_backward_amax", dx, amax, scratch, {&x, &y, &dy}, device);
}

SoftmaxDims check_causal_softmax_backward_amax(const Tensor& probs, const Tensor& dprobs,
                                               const Tensor& scale, const Tensor& dscores,
                                               const Tensor& amax, const Tensor& scratch,
                                               const Device& device) {
  const SoftmaxDims d = check_causal_softmax_backward(probs, dprobs, dscores, device);
  const char* op = "causal_softmax_backward_amax";
  if (!scale.defined() || scale.device() != device || scale.dtype() != DType::f32 ||
      scale.numel() != 1) {
    throw Error{ErrorKind::invalid_argument,
                std::string(op) + ": scale must be f32[1] on " + device.str() + ", got " +
                    (scale.defined() ? scale.describe() : std::string("none"))};
  }
  check_amax_output(op, dscores, amax, scratch, {&probs, &dprobs, &scale}, device);
  return d;
}

}  // namespace ampctl
