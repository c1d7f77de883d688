// Launchers of kernels/amp.cu: the loss-scaling ops of docs/reference.md, "Scaler".
#pragma once

#include "ampctl/math/amp_math.h"
#include "kernel_common.cuh"

namespace ampctl::kernels {

// Which segments of the checked elements held an inf or NaN (Backend::
// non_finite_check_and_unscale_): the elements of a pack are numbered from `base` (the elements
// of the tensors in earlier packs), tensor by tensor; segment s starts at starts[s] (starts[0] ==
// 0, strictly increasing, device memory) and runs to the next start. found: device i32 [count].
// All null / 0: no attribution.
struct SegmentAttribution {
  const int32_t* starts = nullptr;
  int32_t* found = nullptr;
  int32_t count = 0;
  size_t base = 0;
};

// For every element of every tensor in the pack (floating types): found_inf[0] := 1 on inf or
// NaN (never cleared); the element := round(float(x) * inv_scale[0]), not written when
// inv_scale[0] == 1; with attribution, found[s] := 1 for the segment s of each such element
// (never cleared). found_inf and inv_scale are device f32 scalars.
void launch_non_finite_check_and_unscale(const TensorPack& pack, float* found_inf,
                                         const float* inv_scale, const SegmentAttribution& attr,
                                         cudaStream_t stream);

// launch_non_finite_check_and_unscale's check (and, when `unscale`, its unscale) in the geometry
// of launch_global_norm_partials, which it replaces: partials[b] := (accumulate ? partials[b] :
// 0) + block b's sum of squares of the unscaled values (each element's round(float(x) *
// inv_scale[0]), stored or not). launch_global_norm_finalize then gives the norm: bitwise
// global_norm's of the tensors an unscale leaves. partials: kNormBlocks device doubles.
void launch_non_finite_check_unscale_norm_partials(const TensorPack& pack, float* found_inf,
                                                   const float* inv_scale, bool unscale,
                                                   double* partials, bool accumulate,
                                                   const SegmentAttribution& attr,
                                                   cudaStream_t stream);

// inv[0] := float32(1 / double(scale[0])).
void launch_inv_scale(const float* scale, float* inv, cudaStream_t stream);

// One amp::update_scale_policy on device scalars (trackers: i32[amp::kTrackerCount]).
void launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                         int32_t* trackers, const float* found_inf,
                         const amp::ScaleUpdateParams& params, cudaStream_t stream);

// One update under scaler.policy auto (Backend::update_scale_auto_): one block writes the ring's
// new entry, takes the ring's max (an exact max: the CPU's bits) and runs amp::update_scale_auto.
void launch_update_scale_auto(float* scale, int32_t* growth_tracker, int32_t* trackers,
                              const float* found_inf, const float* amax, float* history,
                              const amp::ScaleUpdateParams& params, cudaStream_t stream);

}  // namespace ampctl::kernels
