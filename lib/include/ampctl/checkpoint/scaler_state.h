// The loss scaler's state_dict (docs/reference.md, "Checkpoints" and "Scale rules"): its one
// reader and validator, shared by the checkpoint document (parse_checkpoint, serialize) and
// GradScaler::load_state_dict, so a scaler state is judged the same way wherever it arrives.
//
// The format: PyTorch's five keys with PyTorch's types ("scale", "growth_factor" and
// "backoff_factor" floats; "growth_interval" and "_growth_tracker" integers), then "policy" (the
// rule's name; absent for PyTorch's own, the first rule, whose hysteresis counter is optional)
// and the state of the scale rule that wrote it, under the keys its row of amp::kScaleRules
// (math/scale_rules.h) names, as that framework names them; "amax_history", for a rule that keeps
// the amax ring, is a list of 1 to amp::kMaxAmaxHistory finite floats >= 0. A key of another
// rule, or any other key, is refused. {} is a disabled scaler's state.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/math/scale_rules.h"

namespace ampctl::checkpoint {

struct ScalerState {
  double scale = 0.0;
  double growth_factor = 0.0;
  double backoff_factor = 0.0;
  int64_t growth_interval = 0;
  int64_t growth_tracker = 0;
  std::string policy = amp::kScaleRules[0].name;
  // The rule's counters; each is set when the rule that wrote the state keeps it.
  std::optional<int64_t> hysteresis_tracker;       // _hysteresis_tracker, hysteresis_tracker,
                                                   // cur_hysteresis
  std::optional<int64_t> iter;                     // cur_iter, _iter
  std::optional<int64_t> last_overflow_iter;       // last_overflow_iter, _last_overflow_iter
  std::optional<int64_t> last_rescale_iter;        // _last_rescale_iter
  std::optional<int64_t> overflows_since_rescale;  // _overflows_since_rescale
  std::vector<double> amax_history;  // the amax ring (empty for a rule that keeps none)
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
