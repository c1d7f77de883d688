// The CUDA backend's amp family (backend.h, "the amp ops"): the global norm, the fused
// non-finite check, unscale and norm, inv_scale and the scale update: kernels/amp.cu and
// kernels/global_norm.cu, reading and writing device scalars only (no host sync).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "amp.cuh"
#include "ampctl/backend/backend.h"
#include "cuda_backend.h"
#include "global_norm.cuh"

namespace ampctl::cuda_detail {

namespace {

// Splits tensors into kernel-parameter packs of at most kMaxTensorsPerLaunch, skipping empty
// ones, in order.
std::vector<kernels::TensorPack> make_packs(std::span<const Tensor> tensors) {
  std::vector<kernels::TensorPack> packs;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    if (packs.empty() || packs.back().count == kernels::kMaxTensorsPerLaunch) packs.emplace_back();
    kernels::TensorPack& pack = packs.back();
    pack.tensors[pack.count++] = kernels::TensorDesc{t.data(), t.numel(), elem_type(t.dtype())};
    pack.max_numel = std::max(pack.max_numel, t.numel());
  }
  return packs;
}

}  // namespace

void CudaBackend::global_norm(std::span<const Tensor> tensors, const Tensor& out) {
  check_here(out, "global_norm", "out");
  check_scalar(out, DType::f32, "global_norm", "out");
  for (const Tensor& t : tensors) {
    check_here(t, "global_norm", "input");
    check_floating(t, "global_norm", "input");
  }
  DeviceScope scope(m_device.index);
  auto* partials = static_cast<double*>(m_norm_partials.get());
  std::vector<kernels::TensorPack> packs = make_packs(tensors);
  if (packs.empty()) packs.emplace_back();  // zeroes the partials: the norm of nothing is 0
  for (size_t i = 0; i < packs.size(); ++i) {
    kernels::launch_global_norm_partials(packs[i], partials, /*accumulate=*/i > 0, stream());
  }
  kernels::launch_global_norm_finalize(partials, static_cast<float*>(out.data()), stream());
}

void CudaBackend::non_finite_check_and_unscale_(std::span<const Tensor> tensors,
                                                const Tensor& found_inf, const Tensor& inv_scale,
                                                const Tensor& segment_starts,
                                                const Tensor& segment_found) {
  const char* op = "non_finite_check_and_unscale_";
  check_here(found_inf, op, "found_inf");
  check_here(inv_scale, op, "inv_scale");
  check_scalar(found_inf, DType::f32, op, "found_inf");
  check_scalar(inv_scale, DType::f32, op, "inv_scale");
  size_t total = 0;
  for (const Tensor& t : tensors) {
    check_here(t, op, "input");
    check_floating(t, op, "input");
    total += t.numel();
  }
  kernels::SegmentAttribution attr;
  if (segment_starts.defined() != segment_found.defined()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(op) + ": segment_starts and segment_found go together, got " +
                    (segment_starts.defined() ? "only segment_starts" : "only segment_found")};
  }
  if (segment_starts.defined()) {
    check_here(segment_starts, op, "segment_starts");
    check_here(segment_found, op, "segment_found");
    // The starts themselves stay on the device (reading them would be a sync): the caller
    // guarantees 0 first and strictly increasing, as Backend documents; the CPU checks it.
    if (segment_starts.dtype() != DType::i32 || segment_found.dtype() != DType::i32 ||
        segment_starts.rank() != 1 || segment_starts.numel() == 0 ||
        segment_found.numel() != segment_starts.numel() ||
        segment_starts.numel() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw Error{ErrorKind::invalid_argument,
                  std::string(op) +
                      ": expected segment_starts and segment_found i32 [S] with S >= 1, got " +
                      segment_starts.describe() + " and " + segment_found.describe()};
    }
    if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + std::to_string(total) +
                                                   " elements are too many for i32 segment starts"};
    }
    attr.starts = static_cast<const int32_t*>(segment_starts.data());
    attr.found = static_cast<int32_t*>(segment_found.data());
    attr.count = static_cast<int32_t>(segment_starts.numel());
  }
  DeviceScope scope(m_device.index);
  for (const kernels::TensorPack& pack : make_packs(tensors)) {
    kernels::launch_non_finite_check_and_unscale(pack, static_cast<float*>(found_inf.data()),
                                                 static_cast<const float*>(inv_scale.data()), attr,
                                                 stream());
    for (int t = 0; t < pack.count; ++t) attr.base += pack.tensors[t].numel;
  }
}

void CudaBackend::non_finite_check_unscale_norm_(std::span<const Tensor> tensors,
                                                 const Tensor& found_inf, const Tensor& inv_scale,
                                                 bool unscale, const Tensor& norm,
                                                 const Tensor& segment_starts,
                                                 const Tensor& segment_found) {
  const char* op = "non_finite_check_unscale_norm_";
  check_here(norm, op, "norm");
  check_scalar(norm, DType::f32, op, "norm");
  check_here(found_inf, op, "found_inf");
  check_here(inv_scale, op, "inv_scale");
  check_scalar(found_inf, DType::f32, op, "found_inf");
  check_scalar(inv_scale, DType::f32, op, "inv_scale");
  size_t total = 0;
  for (const Tensor& t : tensors) {
    check_here(t, op, "input");
    check_floating(t, op, "input");
    total += t.numel();
  }
  kernels::SegmentAttribution attr;
  if (segment_starts.defined() != segment_found.defined()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(op) + ": segment_starts and segment_found go together"};
  }
  if (segment_starts.defined()) {
    check_here(segment_starts, op, "segment_starts");
    check_here(segment_found, op, "segment_found");
    if (segment_starts.dtype() != DType::i32 || segment_found.dtype() != DType::i32 ||
        segment_starts.rank() != 1 || segment_starts.numel() == 0 ||
        segment_found.numel() != segment_starts.numel() ||
        total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw Error{ErrorKind::invalid_argument,
                  std::string(op) +
                      ": expected segment_starts and segment_found i32 [S] with S >= 1 over "
                      "fewer than 2^31 elements, got " +
                      segment_starts.describe() + " and " + segment_found.describe()};
    }
    attr.starts = static_cast<const int32_t*>(segment_starts.data());
    attr.found = static_cast<int32_t*>(segment_found.data());
    attr.count = static_cast<int32_t>(segment_starts.numel());
  }
  DeviceScope scope(m_device.index);
  auto* partials = static_cast<double*>(m_norm_partials.get());
  std::vector<kernels::TensorPack> packs = make_packs(tensors);
  if (packs.empty()) packs.emplace_back();  // zeroes the partials: the norm of nothing is 0
  for (size_t i = 0; i < packs.size(); ++i) {
    kernels::launch_non_finite_check_unscale_norm_partials(
        packs[i], static_cast<float*>(found_inf.data()),
        static_cast<const float*>(inv_scale.data()), unscale, partials, /*accumulate=*/i > 0, attr,
        stream());
    for (int t = 0; t < packs[i].count; ++t) attr.base += packs[i].tensors[t].numel;
  }
  kernels::launch_global_norm_finalize(partials, static_cast<float*>(norm.data()), stream());
}

void CudaBackend::inv_scale(const Tensor& scale, const Tensor& inv) {
  check_here(scale, "inv_scale", "scale");
  check_here(inv, "inv_scale", "inv");
  check_scalar(scale, DType::f32, "inv_scale", "scale");
  check_scalar(inv, DType::f32, "inv_scale", "inv");
  DeviceScope scope(m_device.index);
  kernels::launch_inv_scale(static_cast<const float*>(scale.data()),
                            static_cast<float*>(inv.data()), stream());
}

void CudaBackend::update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                const Tensor& hysteresis_tracker, const Tensor& trackers,
                                const Tensor& found_inf, const amp::ScaleUpdateParams& params) {
  const char* op = "update_scale_";
  check_here(scale, op, "scale");
  check_here(growth_tracker, op, "growth_tracker");
  check_here(hysteresis_tracker, op, "hysteresis_tracker");
  check_here(trackers, op, "trackers");
  if (trackers.dtype() != DType::i32 || trackers.numel() != amp::kTrackerCount) {
    invalid(std::string(op) + ": trackers must be an i32 tensor of " +
            std::to_string(amp::kTrackerCount) + " elements, got " + trackers.describe());
  }
  check_here(found_inf, op, "found_inf");
  check_scalar(scale, DType::f32, op, "scale");
  check_scalar(growth_tracker, DType::i32, op, "growth_tracker");
  check_scalar(hysteresis_tracker, DType::i32, op, "hysteresis_tracker");
  check_scalar(found_inf, DType::f32, op, "found_inf");
  DeviceScope scope(m_device.index);
  kernels::launch_update_scale(
      static_cast<float*>(scale.data()), static_cast<int32_t*>(growth_tracker.data()),
      static_cast<int32_t*>(hysteresis_tracker.data()), static_cast<int32_t*>(trackers.data()),
      static_cast<const float*>(found_inf.data()), params, stream());
}

void CudaBackend::update_scale_auto_(const Tensor& scale, const Tensor& growth_tracker,
                                     const Tensor& trackers, const Tensor& found_inf,
                                     const Tensor& amax, const Tensor& history,
                                     const amp::ScaleUpdateParams& params) {
  check_update_scale_auto(scale, growth_tracker, trackers, found_inf, amax, history, params,
                          m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_update_scale_auto(
      static_cast<float*>(scale.data()), static_cast<int32_t*>(growth_tracker.data()),
      static_cast<int32_t*>(trackers.data()), static_cast<const float*>(found_inf.data()),
      static_cast<const float*>(amax.data()), static_cast<float*>(history.data()), params,
      stream());
}

}  // namespace ampctl::cuda_detail
