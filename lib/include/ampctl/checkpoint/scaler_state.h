// The loss scaler's state_dict (docs/reference.md, "Checkpoints" and "Scale rules"): its one
// reader and validator, shared by the checkpoint document (parse_checkpoint, serialize) and
// GradScaler::load_state_dict, so a scaler state is judged the same way wherever it arrives.
//
// The format: PyTorch's five keys with PyTorch's types ("scale", "growth_factor" and
// "backoff_factor" floats; "growth_interval" and "_growth_tracker" integers), then the state of
// the scale rule that wrote it, named as that framework names it:
//   pytorch    "_hysteresis_tracker" (optional: a PyTorch state dict has none); no "policy" key
//   megatron   "policy", "hysteresis_tracker"
//   deepspeed  "policy", "cur_hysteresis", "cur_iter", "last_overflow_iter"
//   fairseq    "policy", "_iter", "_last_overflow_iter", "_last_rescale_iter",
//              "_overflows_since_rescale"
//   auto       "policy", "_iter", "_last_overflow_iter", "amax_history" (ampctl's own rule: a
//              list of 1 to 4096 finite floats >= 0, the ring of amp_math.h's update_scale_auto)
// A key of another rule, or any other key, is refused. {} is a disabled scaler's state.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampctl::checkpoint {

// scaler.policy's values, in amp::ScalePolicy's order.
inline constexpr std::array<std::string_view, 5> kScalePolicies = {"pytorch", "deepspeed",
                                                                   "megatron", "fairseq", "auto"};
// scaler.amax_history's bound (the auto rule's ring).
inline constexpr int64_t kMaxAmaxHistory = 4096;

struct ScalerState {
  double scale = 0.0;
  double growth_factor = 0.0;
  double backoff_factor = 0.0;
  int64_t growth_interval = 0;
  int64_t growth_tracker = 0;
  std::string policy = "pytorch";
  // The rule's counters; each is set when the rule that wrote the state keeps it.
  std::optional<int64_t> hysteresis_tracker;       // _hysteresis_tracker, hysteresis_tracker,
                                                   // cur_hysteresis
  std::optional<int64_t> iter;                     // cur_iter, _iter
  std::optional<int64_t> last_overflow_iter;       // last_overflow_iter, _last_overflow_iter
  std::optional<int64_t> last_rescale_iter;        // _last_rescale_iter
  std::optional<int64_t> overflows_since_rescale;  // _overflows_since_rescale
  std::vector<double> amax_history;                // auto: the ring (empty for the others)
};

// nullopt when `state` is {} or a valid state_dict, else the problem, "scaler[.KEY]: WHAT".
// Checks types, presence, unknown keys and every range that does not depend on the scaler's
// settings (those are GradScaler's: a hysteresis counter above its hysteresis).
std::optional<std::string> scaler_state_problem(const nlohmann::json& state);
std::optional<std::string> scaler_state_problem(const nlohmann::ordered_json& state);

// The state of a non-empty, valid state_dict; Error{input} with scaler_state_problem's text.
ScalerState parse_scaler_state(const nlohmann::json& state);

// The state_dict of `s` (the one writer): the keys of s.policy, nothing else.
nlohmann::json scaler_state_json(const ScalerState& s);

}  // namespace ampctl::checkpoint
