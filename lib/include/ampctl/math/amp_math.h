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
//   * update_scale_policy: the same update under one of four rules (scaler.policy; the fifth,
//     auto, is update_scale_auto_ring below). `pytorch` is
//     update_scale_state above, unchanged. `megatron`, `deepspeed` and `fairseq` restate the
//     upstream update functions (Megatron-LM DynamicGradScaler.update, DeepSpeed
//     DynamicLossScaler.update_scale, fairseq DynamicLossScaler.update + check_overflow); the
//     reference in scripts/golden/scaler_policies.py and docs/reference.md, "Scale rules", say
//     where ours departs from them: the scale is a float32 (DeepSpeed's and fairseq's are Python
//     floats, i.e. doubles: we form each product in double and round it to float once, the
//     same bits whenever the factors are powers of two and the scale stays in float32's range);
//     a growth whose float32 result is not finite leaves the scale where it is (as PyTorch's
//     rule; upstream would reach inf in Megatron, a double above float32's range elsewhere);
//     a backoff multiplies by backoff_factor (DeepSpeed and fairseq divide by their one
//     scale_factor: the same bits for 2 and 0.5); Megatron's hysteresis counter stops at 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "ampctl/core/half.h"
#include "ampctl/core/hd.h"
#include "ampctl/math/scale_rules.h"

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

// The rules (ScalePolicy), their settings (ScaleUpdateParams) and counters (ScaleTracker) are
// declared in scale_rules.h, with the table of what each keeps and reads.

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

namespace detail {

// scale * factor formed in double and rounded to float once; a non-finite result keeps the
// scale (see the file comment).
AMPCTL_HD void grow_scale(float* scale, double factor) {
  const float grown = static_cast<float>(static_cast<double>(*scale) * factor);
  if (is_finite_bits(grown)) *scale = grown;
}

// scale * factor rounded once, floored at min_scale (NaN-safe: a NaN scale stays NaN).
AMPCTL_HD void back_off_scale(float* scale, double factor, float min_scale) {
  float backed = static_cast<float>(static_cast<double>(*scale) * factor);
  if (backed < min_scale) backed = min_scale;
  *scale = backed;
}

// Megatron-LM: hysteresis overflows in a row (a growth refills the counter) before a backoff;
// its factors are float32 tensors, so each product is float32's correctly rounded one: the exact
// double product of two floats rounded once.
AMPCTL_HD void update_megatron(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                               bool found, const ScaleUpdateParams& p) {
  if (found) {
    *growth_tracker = 0;
    if (*hysteresis_tracker > 0) *hysteresis_tracker = *hysteresis_tracker - 1;
    if (*hysteresis_tracker <= 0) {
      back_off_scale(scale, static_cast<double>(static_cast<float>(p.backoff_factor)), p.min_scale);
    }
  } else {
    *growth_tracker = *growth_tracker + 1;
    if (*growth_tracker == p.growth_interval) {
      *growth_tracker = 0;
      *hysteresis_tracker = p.hysteresis;
      grow_scale(scale, static_cast<double>(static_cast<float>(p.growth_factor)));
    }
  }
}

// DeepSpeed: the window counts from the last overflow (stable = iter - last_overflow - 1, a
// growth when stable > 0 and stable % window == 0: the first after window + 1 clean steps, then
// every window); an overflow the hysteresis absorbs still restarts it. The counter stays at 1
// once spent (every later overflow backs off) until a growth refills it, or every clean step
// with consecutive_hysteresis. growth_tracker is ours (clean steps since the last overflow or
// growth), for the metrics line.
AMPCTL_HD void update_deepspeed(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                                int32_t* t, bool found, const ScaleUpdateParams& p) {
  if (found) {
    if (p.hysteresis == 1 || *hysteresis_tracker == 1) {
      back_off_scale(scale, p.backoff_factor, p.min_scale);
    } else {
      *hysteresis_tracker = *hysteresis_tracker - 1;
    }
    t[kLastOverflowIter] = t[kIter];
    *growth_tracker = 0;
  } else {
    if (p.consecutive_hysteresis) *hysteresis_tracker = p.hysteresis;
    const int32_t stable = t[kIter] - t[kLastOverflowIter] - 1;
    if (stable > 0 && stable % p.growth_interval == 0) {
      if (!p.consecutive_hysteresis) *hysteresis_tracker = p.hysteresis;
      grow_scale(scale, p.growth_factor);
      *growth_tracker = 0;
    } else {
      *growth_tracker = *growth_tracker + 1;
    }
  }
  t[kIter] = t[kIter] + 1;
}

// fairseq: a growth when (iter - last_overflow) % window == 0 (the first after window clean
// steps); an overflow backs off when the overflows since the last rescale, over the updates
// since it, reach the tolerance (a double division, as Python's). min_scale is fairseq's
// threshold_loss_scale floor. growth_tracker as for DeepSpeed.
AMPCTL_HD void update_fairseq(float* scale, int32_t* growth_tracker, int32_t* t, bool found,
                              const ScaleUpdateParams& p) {
  if (found) {
    int32_t since_rescale = t[kIter] - t[kLastRescaleIter];
    if (since_rescale == 0) since_rescale = 1000;  // upstream's guard, kept as it is
    t[kLastOverflowIter] = t[kIter];
    t[kOverflowsSinceRescale] = t[kOverflowsSinceRescale] + 1;
    const double pct =
        static_cast<double>(t[kOverflowsSinceRescale]) / static_cast<double>(since_rescale);
    if (pct >= p.tolerance) {
      back_off_scale(scale, p.backoff_factor, p.min_scale);
      t[kLastRescaleIter] = t[kIter];
      t[kOverflowsSinceRescale] = 0;
    }
    *growth_tracker = 0;
  } else if ((t[kIter] - t[kLastOverflowIter]) % p.growth_interval == 0) {
    grow_scale(scale, p.growth_factor);
    t[kLastRescaleIter] = t[kIter];
    *growth_tracker = 0;
  } else {
    *growth_tracker = *growth_tracker + 1;
  }
  t[kIter] = t[kIter] + 1;
}

}  // namespace detail

// One update under p.policy. trackers: int32[kTrackerCount] (ScaleTracker). The iteration
// counters are int32: the configuration refuses deepspeed and fairseq runs longer than
// 2^31 - 1 steps.
AMPCTL_HD void update_scale_policy(float* scale, int32_t* growth_tracker,
                                   int32_t* hysteresis_tracker, int32_t* trackers, float found_inf,
                                   const ScaleUpdateParams& p) {
  const bool found = found_inf != 0.0f;
  switch (p.policy) {
    case ScalePolicy::deepspeed:
      detail::update_deepspeed(scale, growth_tracker, hysteresis_tracker, trackers, found, p);
      break;
    case ScalePolicy::megatron:
      detail::update_megatron(scale, growth_tracker, hysteresis_tracker, found, p);
      break;
    case ScalePolicy::fairseq:
      detail::update_fairseq(scale, growth_tracker, trackers, found, p);
      break;
    case ScalePolicy::pytorch:
    default:  // auto updates through update_scale_auto (its ring), not here
      update_scale_state(scale, growth_tracker, hysteresis_tracker, found_inf, p);
      break;
  }
}

// ---- scaler.policy: auto (docs/reference.md, "Scale rules") ----
// The rule keeps a ring of amax_history values, each an update's largest |x| before a rounding
// of the backward to the half type divided by the scale that step used (grad_amax /
// grad_accum_steps: per unit of scale, what a micro-batch's roundings see). The slot of update
// number trackers[kIter] is kIter % amax_history.
//
// The ring's entry for one update: raw is the step's grad_amax accumulator (max finite |x| at
// the step's scale). On an overflow the true max was at least the range (something rounded to
// inf, or a non-finite value reached a rounding), so the entry is a lower bound: max(raw,
// max_finite) / scale. The quotient is formed in double and rounded to float once (exact for a
// power-of-two scale); a quotient above float's range is kept as float's largest value.
AMPCTL_HD float auto_history_entry(float raw, float scale, bool found, const ScaleUpdateParams& p) {
  if (found && !(raw >= p.max_finite)) raw = p.max_finite;
  const double q = static_cast<double>(raw) / static_cast<double>(scale);
  const double kFloatMax = 3.4028234663852886e38;
  return static_cast<float>(q > kFloatMax ? kFloatMax : q);
}

// The largest power of two s with s x 2^margin x amax <= max_finite, for amax > 0, as a float
// (the exponent kept in [-126, 127]: a normal float whose reciprocal is finite), then clamped to
// [min_scale, max_scale]. Exact: with amax = ma 2^ka and max_finite = mf 2^kf (frexp, mantissas
// in [0.5, 1)), s = 2^(kf - ka - margin), halved once more when ma > mf.
AMPCTL_HD float auto_scale_for(float amax, const ScaleUpdateParams& p) {
  int ka = 0, kf = 0;
  const double ma = frexp(static_cast<double>(amax), &ka);
  const double mf = frexp(static_cast<double>(p.max_finite), &kf);
  int e = kf - ka - p.margin - (ma > mf ? 1 : 0);
  if (e > 127) e = 127;
  if (e < -126) e = -126;
  float s = static_cast<float>(ldexp(1.0, e));
  if (s > p.max_scale) s = p.max_scale;
  if (s < p.min_scale) s = p.min_scale;
  return s;
}

// One update under auto, after the caller wrote this update's entry (auto_history_entry) into
// the ring and took the ring's max (hist_max; a max of floats, the same whatever the order).
// A clean step: scale := auto_scale_for(hist_max). An overflow: the step is skipped (the
// optimizer saw found_inf) and scale := min(scale x backoff_factor floored at min_scale,
// auto_scale_for(hist_max)): at least the backoff, lower when the measurement says so.
// growth_tracker counts the clean updates since the last overflow (the metrics line's).
AMPCTL_HD void update_scale_auto(float* scale, int32_t* growth_tracker, int32_t* t, bool found,
                                 float hist_max, const ScaleUpdateParams& p) {
  const float target = hist_max > 0.0f ? auto_scale_for(hist_max, p) : *scale;
  if (found) {
    float backed = static_cast<float>(static_cast<double>(*scale) * p.backoff_factor);
    if (backed < p.min_scale) backed = p.min_scale;
    *scale = target < backed ? target : backed;
    *growth_tracker = 0;
    t[kLastOverflowIter] = t[kIter];
  } else {
    *scale = target;
    *growth_tracker = *growth_tracker + 1;
  }
  t[kIter] = t[kIter] + 1;
}

// The ring slot of the update that trackers[kIter] numbers.
AMPCTL_HD int32_t auto_history_slot(const int32_t* t, const ScaleUpdateParams& p) {
  return t[kIter] % p.amax_history;
}

// Writes this update's entry into the ring (f32[amax_history]): auto_history_entry of the step's
// grad_amax accumulator `raw` at the scale the step ran with, in auto_history_slot.
AMPCTL_HD void auto_history_push(float* ring, const int32_t* t, float raw, float scale, bool found,
                                 const ScaleUpdateParams& p) {
  ring[auto_history_slot(t, p)] = auto_history_entry(raw, scale, found, p);
}

// The ring's max. Every entry is a float >= 0 (never NaN), so the max is the same in any order:
// the CUDA kernel takes it over a block instead.
AMPCTL_HD float auto_history_max(const float* ring, const ScaleUpdateParams& p) {
  float m = 0.0f;
  for (int32_t i = 0; i < p.amax_history; ++i) m = ring[i] > m ? ring[i] : m;
  return m;
}

// One whole update under auto on one thread (the CPU backend, replay): the ring's new entry, its
// max, update_scale_auto. trackers: int32[kTrackerCount]; ring: f32[p.amax_history].
AMPCTL_HD void update_scale_auto_ring(float* scale, int32_t* growth_tracker, int32_t* trackers,
                                      float* ring, float raw, bool found,
                                      const ScaleUpdateParams& p) {
  auto_history_push(ring, trackers, raw, *scale, found, p);
  update_scale_auto(scale, growth_tracker, trackers, found, auto_history_max(ring, p), p);
}

}  // namespace ampctl::amp
