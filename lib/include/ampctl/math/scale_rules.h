// The loss-scale rules (scaler.policy; docs/reference.md, "Scale rules"), one row each in
// kScaleRules: the YAML name (also the checkpoint's "policy"), the state a checkpoint keeps for
// it and under which keys, which scaler.* settings it reads, and whether it updates from the
// measured grad_amax. Its update is amp_math.h's, chosen by update_scale_policy's switch. The
// config (the key's values, its help, which keys apply to which rule), the checkpoint's scaler
// state, the GradScaler and replay read this table and name no rule themselves.
//
// Also the one settings struct of a rule (ScaleUpdateParams), which the config fills
// (config::scale_settings) and the GradScaler, both backends, the CUDA kernels and replay take
// as it is, and the rule's counters (ScaleTracker) with their initial values.
//
// Plain C++17 data, no device code: config/ and checkpoint/ include it (docs/design.md, "The
// dependency rule"), as do math/amp_math.h and through it the kernels.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "ampctl/core/limits.h"

namespace ampctl::amp {

// scaler.policy. The values are stable: kernels receive them in ScaleUpdateParams, and they index
// kScaleRules.
enum class ScalePolicy : int32_t {
  pytorch = 0,
  deepspeed = 1,
  megatron = 2,
  fairseq = 3,
  automatic = 4,  // set from the measured grad_amax (amp_math.h, update_scale_auto)
};

// The rule's counters beyond the growth and hysteresis trackers: one i32[kTrackerCount] beside
// the scale.
enum ScaleTracker : int32_t {
  kIter = 0,                   // DeepSpeed cur_iter, fairseq _iter: updates so far
  kLastOverflowIter = 1,       // DeepSpeed last_overflow_iter, fairseq _last_overflow_iter
  kLastRescaleIter = 2,        // fairseq _last_rescale_iter
  kOverflowsSinceRescale = 3,  // fairseq _overflows_since_rescale
  kTrackerCount = 4,
};
// Their initial values, the upstream constructors': iteration 0, no overflow or rescale yet
// (last overflow -1, last rescale -1), no overflows. A rule that keeps none leaves them alone.
inline constexpr std::array<int32_t, kTrackerCount> kInitialTrackers = {0, -1, -1, 0};

// The ring of the auto rule holds at most this many updates (scaler.amax_history's bound).
inline constexpr int64_t kMaxAmaxHistory = 4096;

// A rule's settings: the scaler.* keys that shape its update (config::scale_settings fills it
// from a run's config; the defaults are PyTorch's GradScaler). Passed by value to the kernels.
struct ScaleUpdateParams {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int32_t growth_interval = 2000;
  int32_t hysteresis = 1;      // overflows absorbed before a backoff (1 = PyTorch)
  float min_scale = 0.0f;      // a backoff never goes below this (0 = PyTorch)
  float max_scale = INFINITY;  // a growth never goes above this (inf = PyTorch)
  ScalePolicy policy = ScalePolicy::pytorch;
  bool consecutive_hysteresis = false;  // deepspeed: every clean step refills the hysteresis
  double tolerance = 0.0;               // fairseq: overflow fraction tolerated before a backoff
  // auto: the scale keeps grad_amax x scale x 2^margin within max_finite (the half type's
  // largest finite value), over the last amax_history updates.
  int32_t margin = 1;
  int32_t amax_history = 16;
  float max_finite = static_cast<float>(kHalfMaxFinite);
};

// The scaler.* keys that only some rules read (a bit each); the others apply to every rule.
enum ScaleSetting : uint32_t {
  kSetsHysteresis = 1u << 0,             // scaler.hysteresis
  kSetsConsecutiveHysteresis = 1u << 1,  // scaler.consecutive_hysteresis
  kSetsTolerance = 1u << 2,              // scaler.tolerance
  kSetsMargin = 1u << 3,                 // scaler.margin
  kSetsAmaxHistory = 1u << 4,            // scaler.amax_history
  kSetsMaxScale = 1u << 5,               // scaler.max_scale
};

// The checkpoint keys under which a rule keeps its counters, named as its framework names them
// ("" = the rule does not keep it), and whether it keeps the amax ring ("amax_history").
struct ScaleStateKeys {
  const char* hysteresis_tracker = "";
  const char* iter = "";
  const char* last_overflow_iter = "";
  const char* last_rescale_iter = "";
  const char* overflows_since_rescale = "";
  bool amax_history = false;
};

struct ScaleRule {
  ScalePolicy policy;
  const char* name;     // scaler.policy's value, and the checkpoint's "policy"
  uint32_t settings;    // ScaleSetting bits
  ScaleStateKeys keys;  // what checkpoint/scaler_state.h reads and writes for it
  // Updates from the step's grad_amax (Backend::update_scale_auto_, its ring): the run measures
  // grad_amax on every step, in fp16 or bf16 only, on a model whose roundings are measured.
  bool reads_amax;
};

// One row a rule, in ScalePolicy's order. The first is PyTorch's own state dict: no "policy"
// key, and its hysteresis counter optional.
inline constexpr std::array<ScaleRule, 5> kScaleRules = {{
    {ScalePolicy::pytorch,
     "pytorch",
     kSetsHysteresis | kSetsMaxScale,
     {"_hysteresis_tracker", "", "", "", "", false},
     false},
    {ScalePolicy::deepspeed,
     "deepspeed",
     kSetsHysteresis | kSetsConsecutiveHysteresis,
     {"cur_hysteresis", "cur_iter", "last_overflow_iter", "", "", false},
     false},
    {ScalePolicy::megatron,
     "megatron",
     kSetsHysteresis,
     {"hysteresis_tracker", "", "", "", "", false},
     false},
    {ScalePolicy::fairseq,
     "fairseq",
     kSetsTolerance,
     {"", "_iter", "_last_overflow_iter", "_last_rescale_iter", "_overflows_since_rescale", false},
     false},
    {ScalePolicy::automatic,
     "auto",
     kSetsMargin | kSetsAmaxHistory | kSetsMaxScale,
     {"", "_iter", "_last_overflow_iter", "", "", true},
     true},
}};

constexpr bool scale_rules_in_order() {
  for (size_t i = 0; i < kScaleRules.size(); ++i) {
    if (static_cast<size_t>(kScaleRules[i].policy) != i) return false;
  }
  return true;
}
static_assert(scale_rules_in_order(), "kScaleRules: one row per ScalePolicy, in its order");

// The row of `p` (a valid ScalePolicy).
constexpr const ScaleRule& scale_rule(ScalePolicy p) {
  return kScaleRules[static_cast<size_t>(p)];
}

// The row named `name`, or nullptr.
constexpr const ScaleRule* find_scale_rule(std::string_view name) {
  for (const ScaleRule& r : kScaleRules) {
    if (name == r.name) return &r;
  }
  return nullptr;
}

// The rule keeps int32 iteration counters (kIter): the configuration refuses its runs longer
// than 2^31 - 1 steps.
constexpr bool counts_iterations(const ScaleRule& r) {
  return r.keys.iter[0] != '\0';
}

}  // namespace ampctl::amp
