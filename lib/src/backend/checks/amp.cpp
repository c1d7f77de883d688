// The amp family's argument checks (checks.h; backend.h, "amp"), shared by both backends.
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "checks.h"

namespace ampctl {
namespace {

size_t check_unscale_operands(std::span<const Tensor> tensors, const Tensor& found_inf,
                              const Tensor& inv_scale, const Tensor& segment_starts,
                              const Tensor& segment_found, const char* op, const Device& device) {
  checks::scalar(found_inf, DType::f32, device, op, "found_inf");
  checks::scalar(inv_scale, DType::f32, device, op, "inv_scale");
  size_t total = 0;
  for (const Tensor& t : tensors) {
    checks::float_on(t, device, op, "input");
    total += t.numel();
  }
  if (segment_starts.defined() != segment_found.defined()) {
    checks::fail(op, std::string("segment_starts and segment_found go together, got ") +
                         (segment_starts.defined() ? "only segment_starts" : "only segment_found"));
  }
  if (!segment_starts.defined()) return total;
  checks::on(segment_starts, device, op, "segment_starts");
  checks::on(segment_found, device, op, "segment_found");
  if (segment_starts.dtype() != DType::i32 || segment_found.dtype() != DType::i32 ||
      segment_starts.rank() != 1 || segment_starts.numel() == 0 ||
      segment_found.numel() != segment_starts.numel() ||
      segment_starts.numel() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    checks::fail(op, "expected segment_starts and segment_found i32 [S] with S >= 1, got " +
                         segment_starts.describe() + " and " + segment_found.describe());
  }
  if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    checks::fail(op, std::to_string(total) + " elements are too many for i32 segment starts");
  }
  return total;
}

}  // namespace

void check_global_norm(std::span<const Tensor> tensors, const Tensor& out, const Device& device) {
  checks::scalar(out, DType::f32, device, "global_norm", "out");
  for (const Tensor& t : tensors) {
    checks::float_on(t, device, "global_norm", "input");
  }
}

size_t check_non_finite_check_and_unscale(std::span<const Tensor> tensors, const Tensor& found_inf,
                                          const Tensor& inv_scale, const Tensor& segment_starts,
                                          const Tensor& segment_found, const Device& device) {
  return check_unscale_operands(tensors, found_inf, inv_scale, segment_starts, segment_found,
                                "non_finite_check_and_unscale_", device);
}

size_t check_non_finite_check_unscale_norm(std::span<const Tensor> tensors, const Tensor& found_inf,
                                           const Tensor& inv_scale, const Tensor& norm,
                                           const Tensor& segment_starts,
                                           const Tensor& segment_found, const Device& device) {
  const char* op = "non_finite_check_unscale_norm_";
  checks::scalar(norm, DType::f32, device, op, "norm");
  return check_unscale_operands(tensors, found_inf, inv_scale, segment_starts, segment_found, op,
                                device);
}

void check_inv_scale(const Tensor& scale, const Tensor& inv, const Device& device) {
  checks::scalar(scale, DType::f32, device, "inv_scale", "scale");
  checks::scalar(inv, DType::f32, device, "inv_scale", "inv");
}

void check_update_scale(const Tensor& scale, const Tensor& growth_tracker,
                        const Tensor& hysteresis_tracker, const Tensor& trackers,
                        const Tensor& found_inf, const Device& device) {
  const char* op = "update_scale_";
  checks::scalar(scale, DType::f32, device, op, "scale");
  checks::scalar(growth_tracker, DType::i32, device, op, "growth_tracker");
  checks::scalar(hysteresis_tracker, DType::i32, device, op, "hysteresis_tracker");
  checks::scalar(found_inf, DType::f32, device, op, "found_inf");
  checks::on(trackers, device, op, "trackers");
  if (trackers.dtype() != DType::i32 || trackers.numel() != amp::kTrackerCount) {
    checks::fail(op, "trackers must be an i32 tensor of " + std::to_string(amp::kTrackerCount) +
                         " elements, got " + trackers.describe());
  }
}

void check_update_scale_auto(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& trackers, const Tensor& found_inf, const Tensor& amax,
                             const Tensor& history, const amp::ScaleUpdateParams& params,
                             const Device& device) {
  const char* op = "update_scale_auto_";
  if (params.policy != amp::ScalePolicy::automatic) checks::fail(op, "params.policy must be auto");
  if (params.amax_history < 1 || params.margin < 0 || !(params.max_finite > 0.0f)) {
    checks::fail(op, "params need amax_history >= 1, margin >= 0 and max_finite > 0, got " +
                         std::to_string(params.amax_history) + ", " +
                         std::to_string(params.margin) + ", " + std::to_string(params.max_finite));
  }
  checks::scalar(scale, DType::f32, device, op, "scale");
  checks::scalar(growth_tracker, DType::i32, device, op, "growth_tracker");
  checks::scalar(found_inf, DType::f32, device, op, "found_inf");
  struct Operand {
    const Tensor* t;
    const char* name;
    DType dtype;
    int64_t numel;
  };
  const Operand operands[] = {
      {&trackers, "trackers", DType::i32, amp::kTrackerCount},
      {&amax, "amax", DType::f32, numerics::kAmaxWords},
      {&history, "history", DType::f32, params.amax_history},
  };
  for (const Operand& o : operands) {
    checks::on(*o.t, device, op, o.name);
    if (o.t->dtype() != o.dtype || o.t->numel() != static_cast<size_t>(o.numel)) {
      checks::fail(op, std::string(o.name) + " must be " + dtype_name(o.dtype) + " of " +
                           std::to_string(o.numel) + " elements, got " + o.t->describe());
    }
  }
}

}  // namespace ampctl
