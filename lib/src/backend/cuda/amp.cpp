// The CUDA backend's amp family (backend.h, "the amp ops"): the global norm, the fused
// non-finite check, unscale and norm, inv_scale and the scale update: kernels/amp.cu and
// kernels/amp_global_norm.cu, reading and writing device scalars only (no host sync).
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
#include "amp_global_norm.cuh"

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

// The kernels' view of the attribution tensors (none when undefined). The starts themselves stay
// on the device (reading them would be a sync): the caller guarantees 0 first and strictly
// increasing, as Backend documents; the CPU checks it.
kernels::SegmentAttribution attribution(const Tensor& segment_starts, const Tensor& segment_found) {
  kernels::SegmentAttribution attr;
  if (segment_starts.defined()) {
    attr.starts = static_cast<const int32_t*>(segment_starts.data());
    attr.found = static_cast<int32_t*>(segment_found.data());
    attr.count = static_cast<int32_t>(segment_starts.numel());
  }
  return attr;
}

}  // namespace

void CudaBackend::global_norm(std::span<const Tensor> tensors, const Tensor& out) {
  check_global_norm(tensors, out, m_device);
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
  check_non_finite_check_and_unscale(tensors, found_inf, inv_scale, segment_starts, segment_found,
                                     m_device);
  kernels::SegmentAttribution attr = attribution(segment_starts, segment_found);
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
  check_non_finite_check_unscale_norm(tensors, found_inf, inv_scale, norm, segment_starts,
                                      segment_found, m_device);
  kernels::SegmentAttribution attr = attribution(segment_starts, segment_found);
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
  check_inv_scale(scale, inv, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_inv_scale(static_cast<const float*>(scale.data()),
                            static_cast<float*>(inv.data()), stream());
}

void CudaBackend::update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                const Tensor& hysteresis_tracker, const Tensor& trackers,
                                const Tensor& found_inf, const amp::ScaleUpdateParams& params) {
  check_update_scale(scale, growth_tracker, hysteresis_tracker, trackers, found_inf, m_device);
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
