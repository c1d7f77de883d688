// round_counted's, round_amax's and update_scale_auto_'s argument checks (backend.h), shared by
// both backends.
#include <cstdint>
#include <string>

#include "ampctl/backend/backend.h"

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

void check_update_scale_auto(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& trackers, const Tensor& found_inf, const Tensor& amax,
                             const Tensor& history, const amp::ScaleUpdateParams& params,
                             const Device& device) {
  auto fail = [](const std::string& what) {
    throw Error{ErrorKind::invalid_argument, "update_scale_auto_: " + what};
  };
  struct Operand {
    const Tensor* t;
    const char* name;
    DType dtype;
    int64_t numel;
  };
  const Operand operands[] = {
      {&scale, "scale", DType::f32, 1},
      {&growth_tracker, "growth_tracker", DType::i32, 1},
      {&trackers, "trackers", DType::i32, amp::kTrackerCount},
      {&found_inf, "found_inf", DType::f32, 1},
      {&amax, "amax", DType::f32, numerics::kAmaxWords},
      {&history, "history", DType::f32, params.amax_history},
  };
  if (params.policy != amp::ScalePolicy::automatic) fail("params.policy must be auto");
  if (params.amax_history < 1 || params.margin < 0 || !(params.max_finite > 0.0f)) {
    fail("params need amax_history >= 1, margin >= 0 and max_finite > 0, got " +
         std::to_string(params.amax_history) + ", " + std::to_string(params.margin) + ", " +
         std::to_string(params.max_finite));
  }
  for (const Operand& o : operands) {
    if (!o.t->defined()) fail(std::string(o.name) + " is required");
    if (o.t->device() != device)
      fail(std::string(o.name) + " " + o.t->describe() + " is not on " + device.str());
    if (o.t->dtype() != o.dtype || o.t->numel() != static_cast<size_t>(o.numel)) {
      fail(std::string(o.name) + " must be " + dtype_name(o.dtype) + " of " +
           std::to_string(o.numel) + " elements, got " + o.t->describe());
    }
  }
}

}  // namespace ampctl
