// Per-element math of the loss-scaling ops, shared by the CPU backend and the CUDA kernels
// (kernels/amp.cu), so host tests exercise exactly the code the GPU runs.
//
// Semantics (docs/reference.md, "Scaler"):
//   * unscale: x is widened to float, multiplied by inv_scale in float, rounded once to the
//     tensor's dtype. When inv_scale == 1 nothing is multiplied (a check-only pass), as in
//     PyTorch's _amp_foreach_non_finite_check_and_unscale_.
//   * inv_scale = float32(1 / double(scale)), as PyTorch's scale.double().reciprocal().float().
//   * update: PyTorch >= 2.1 _amp_update_scale_, whose factors are doubles: the product
//     scale * factor is formed in double and rounded to float once. Extensions (Megatron-LM's
//     DynamicGradScaler): a hysteresis counter absorbs overflows before a backoff, min_scale
//     floors a backoff and max_scale caps a growth. With hysteresis 1, min 0, max inf this is
//     exactly PyTorch's rule.
#pragma once

#include <cstdint>

#include "ampctl/core/half.h"
#include "ampctl/core/hd.h"

namespace ampctl::amp {

AMPCTL_HD bool is_finite_bits(float v) {
  return (float_bits(v) & 0x7f800000u) != 0x7f800000u;
}

AMPCTL_HD float inv_scale_of(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

// Unscale one element already widened to float. Sets *found_inf to 1 on inf or NaN (never clears
// it). Returns the float product; the caller rounds it to the tensor's dtype.
AMPCTL_HD float unscale_value(float v, float inv_scale, float* found_inf) {
  if (!is_finite_bits(v)) *found_inf = 1.0f;
  return inv_scale == 1.0f ? v : v * inv_scale;
}

struct ScaleUpdateParams {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int32_t growth_interval = 2000;
  int32_t hysteresis = 1;  // overflows absorbed before a backoff (1 = PyTorch)
  float min_scale = 0.0f;  // a backoff never goes below this (0 = PyTorch)
  float max_scale = 0.0f;  // a growth never goes above this; set to +inf for PyTorch
};

// One update of (scale, growth_tracker, hysteresis_tracker) given whether any inf/NaN was found
// (found_inf != 0, as PyTorch tests `if (*found_inf)`).
AMPCTL_HD void update_scale_state(float* scale, int32_t* growth_tracker,
                                  int32_t* hysteresis_tracker, float found_inf,
                                  const ScaleUpdateParams& p) {
  if (found_inf != 0.0f) {
    *growth_tracker = 0;
    // Megatron decrements without bound; stopping at 0 backs off identically and keeps the
    // counter in [0, hysteresis] (no int32 wrap after 2^31 overflows).
    if (*hysteresis_tracker > 0) *hysteresis_tracker = *hysteresis_tracker - 1;
    if (*hysteresis_tracker <= 0) {
      float backed = static_cast<float>(static_cast<double>(*scale) * p.backoff_factor);
      // NaN-safe max: a NaN scale stays NaN rather than being floored.
      if (backed < p.min_scale) backed = p.min_scale;
      *scale = backed;
    }
  } else {
    const int32_t successful = *growth_tracker + 1;
    if (successful == p.growth_interval) {
      float grown = static_cast<float>(static_cast<double>(*scale) * p.growth_factor);
      if (is_finite_bits(grown)) {
        if (grown > p.max_scale) grown = p.max_scale;
        if (grown > *scale) *scale = grown;  // a cap below the current scale never lowers it
      }
      *growth_tracker = 0;
      *hysteresis_tracker = p.hysteresis;
    } else {
      *growth_tracker = successful;
    }
  }
}

}  // namespace ampctl::amp
