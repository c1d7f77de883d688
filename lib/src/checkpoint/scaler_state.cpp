#include "ampctl/checkpoint/scaler_state.h"

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "ampctl/core/error.h"

namespace ampctl::checkpoint {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The rule's counters: the field, and where a rule's row (amp::ScaleStateKeys) names its key
// ("" = the rule does not keep it).
struct RuleKey {
  std::optional<int64_t> ScalerState::*field;
  const char* amp::ScaleStateKeys::*name;
};
constexpr std::array<RuleKey, 5> kRuleKeys = {{
    {&ScalerState::hysteresis_tracker, &amp::ScaleStateKeys::hysteresis_tracker},
    {&ScalerState::iter, &amp::ScaleStateKeys::iter},
    {&ScalerState::last_overflow_iter, &amp::ScaleStateKeys::last_overflow_iter},
    {&ScalerState::last_rescale_iter, &amp::ScaleStateKeys::last_rescale_iter},
    {&ScalerState::overflows_since_rescale, &amp::ScaleStateKeys::overflows_since_rescale},
}};
constexpr std::array<const char*, 3> kFloatKeys = {"scale", "growth_factor", "backoff_factor"};
constexpr std::array<const char*, 2> kIntKeys = {"growth_interval", "_growth_tracker"};

std::string type_of(const nlohmann::json& v) {
  if (v.is_number_integer() || v.is_number_float()) return "number";
  return v.type_name();
}

std::string short_dump(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// The keys every rule's state has (PyTorch's): present, and floats or integers as PyTorch
// writes them.
std::optional<std::string> check_common_keys(const nlohmann::json& state) {
  for (const char* key : kFloatKeys) {
    if (!state.contains(key)) return std::string("scaler: missing key '") + key + "'";
    const nlohmann::json& v = state.at(key);
    // PyTorch stores these as Python floats; an integer here was not written by a GradScaler.
    if (!v.is_number_float()) {
      return std::string("scaler.") + key + ": expected a float, got " + type_of(v) + " " +
             short_dump(v);
    }
    if (!std::isfinite(v.get<double>())) {
      return std::string("scaler.") + key + ": expected a finite float, got " + short_dump(v);
    }
  }
  for (const char* key : kIntKeys) {
    if (!state.contains(key)) return std::string("scaler: missing key '") + key + "'";
    const nlohmann::json& v = state.at(key);
    if (!v.is_number_integer()) {
      return std::string("scaler.") + key + ": expected an integer, got " + type_of(v) + " " +
             short_dump(v);
    }
  }
  return std::nullopt;
}

// The counters `rule` keeps under its own names (and the auto rule's amax_history), read into
// `out`; each key read is added to `known`.
std::optional<std::string> read_rule_keys(const nlohmann::json& state, const amp::ScaleRule* rule,
                                          bool pytorch, ScalerState& out,
                                          std::set<std::string>& known) {
  for (const RuleKey& rk : kRuleKeys) {
    const std::string name = rule->keys.*rk.name;
    if (name.empty()) continue;
    known.insert(name);
    if (!state.contains(name)) {
      if (pytorch) continue;  // PyTorch's own state dict has no hysteresis counter
      return "scaler: missing key '" + name + "' (policy " + out.policy + ")";
    }
    const nlohmann::json& v = state.at(name);
    if (!v.is_number_integer()) {
      return "scaler." + name + ": expected an integer, got " + type_of(v) + " " + short_dump(v);
    }
    out.*rk.field = v.get<int64_t>();
  }
  if (rule->keys.amax_history) {
    known.insert("amax_history");
    if (!state.contains("amax_history")) {
      return "scaler: missing key 'amax_history' (policy " + out.policy + ")";
    }
    const nlohmann::json& v = state.at("amax_history");
    if (!v.is_array() || v.empty() || v.size() > static_cast<size_t>(amp::kMaxAmaxHistory)) {
      return "scaler.amax_history: expected a list of 1 to " +
             std::to_string(amp::kMaxAmaxHistory) + " numbers, got " + short_dump(v);
    }
    out.amax_history.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      const nlohmann::json& x = v[i];
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0.0 ||
          x.get<double>() > static_cast<double>(std::numeric_limits<float>::max())) {
        return "scaler.amax_history[" + std::to_string(i) +
               "]: expected a finite float32 >= 0, got " + short_dump(x);
      }
      out.amax_history.push_back(x.get<double>());
    }
  }
  return std::nullopt;
}

// The values in range: the scale, the factors and interval, and each counter against the
// iteration it counts up to.
std::optional<std::string> check_values(const nlohmann::json& state, const amp::ScaleRule* rule,
                                        const ScalerState& out) {
  auto bad = [&](const std::string& key, const std::string& rule, const std::string& got) {
    return "scaler." + key + ": must be " + rule + ", got " + got;
  };
  auto name_of = [&](std::optional<int64_t> ScalerState::*field) {
    for (const RuleKey& rk : kRuleKeys) {
      if (rk.field == field) return std::string(rule->keys.*rk.name);
    }
    return std::string();
  };
  if (out.scale < 0.0) return bad("scale", ">= 0", short_dump(state.at("scale")));
  if (!(out.growth_factor > 1.0)) {
    return bad("growth_factor", "> 1.0", short_dump(state.at("growth_factor")));
  }
  if (!(out.backoff_factor > 0.0 && out.backoff_factor < 1.0)) {
    return bad("backoff_factor", "in (0, 1)", short_dump(state.at("backoff_factor")));
  }
  if (out.growth_interval < 1 || out.growth_interval > kInt32Max) {
    return bad("growth_interval", ">= 1 and <= 2^31 - 1", std::to_string(out.growth_interval));
  }
  if (out.growth_tracker < 0 || out.growth_tracker > kInt32Max) {
    return bad("_growth_tracker", ">= 0 and <= 2^31 - 1", std::to_string(out.growth_tracker));
  }
  if (out.hysteresis_tracker &&
      (*out.hysteresis_tracker < 0 || *out.hysteresis_tracker > kInt32Max)) {
    return bad(name_of(&ScalerState::hysteresis_tracker), ">= 0 and <= 2^31 - 1",
               std::to_string(*out.hysteresis_tracker));
  }
  if (out.iter) {
    const int64_t it = *out.iter;
    if (it < 0 || it > kInt32Max) {
      return bad(name_of(&ScalerState::iter), ">= 0 and <= 2^31 - 1", std::to_string(it));
    }
    // Iterations already counted: -1 (none yet) up to iter - 1.
    for (auto field : {&ScalerState::last_overflow_iter, &ScalerState::last_rescale_iter}) {
      const std::optional<int64_t>& v = out.*field;
      if (v && (*v < -1 || *v >= it)) {
        return bad(
            name_of(field),
            "in [-1, " + name_of(&ScalerState::iter) + " - 1 = " + std::to_string(it - 1) + "]",
            std::to_string(*v));
      }
    }
    if (out.overflows_since_rescale &&
        (*out.overflows_since_rescale < 0 || *out.overflows_since_rescale > it)) {
      return bad(name_of(&ScalerState::overflows_since_rescale),
                 "in [0, " + name_of(&ScalerState::iter) + " = " + std::to_string(it) + "]",
                 std::to_string(*out.overflows_since_rescale));
    }
  }
  return std::nullopt;
}

// Parses into `out`; returns the first problem.
std::optional<std::string> read(const nlohmann::json& state, ScalerState& out) {
  if (!state.is_object()) return "scaler: expected an object, got " + type_of(state);
  if (auto problem = check_common_keys(state)) return problem;
  const amp::ScaleRule* rule = &amp::kScaleRules[0];
  if (state.contains("policy")) {
    const nlohmann::json& v = state.at("policy");
    rule = v.is_string() ? amp::find_scale_rule(v.get<std::string>()) : nullptr;
    if (!rule) {
      std::string names;
      for (const amp::ScaleRule& r : amp::kScaleRules) {
        names += (names.empty() ? "" : ", ") + std::string(r.name);
      }
      return "scaler.policy: expected one of " + names + ", got " + short_dump(v);
    }
  }
  // The first rule's state is PyTorch's own state dict: no "policy", no hysteresis counter.
  const bool pytorch = rule == &amp::kScaleRules[0];
  out.policy = rule->name;
  std::set<std::string> known = {"policy"};
  for (const char* k : kFloatKeys) known.insert(k);
  for (const char* k : kIntKeys) known.insert(k);
  if (auto problem = read_rule_keys(state, rule, pytorch, out, known)) return problem;
  for (const auto& [key, v] : state.items()) {
    if (!known.count(key)) {
      return "scaler: unknown key '" + key + "'" +
             (pytorch ? std::string() : " (policy " + out.policy + ")");
    }
  }
  out.scale = state.at("scale").get<double>();
  out.growth_factor = state.at("growth_factor").get<double>();
  out.backoff_factor = state.at("backoff_factor").get<double>();
  out.growth_interval = state.at("growth_interval").get<int64_t>();
  out.growth_tracker = state.at("_growth_tracker").get<int64_t>();

  return check_values(state, rule, out);
}

}  // namespace

std::optional<std::string> scaler_state_problem(const nlohmann::json& state) {
  if (state.is_object() && state.empty()) return std::nullopt;
  ScalerState s;
  return read(state, s);
}

std::optional<std::string> scaler_state_problem(const nlohmann::ordered_json& state) {
  return scaler_state_problem(nlohmann::json(state));
}

ScalerState parse_scaler_state(const nlohmann::json& state) {
  ScalerState s;
  if (std::optional<std::string> problem = read(state, s)) throw Error{ErrorKind::input, *problem};
  return s;
}

nlohmann::json scaler_state_json(const ScalerState& s) {
  nlohmann::json j = nlohmann::json::object();
  j["scale"] = s.scale;
  j["growth_factor"] = s.growth_factor;
  j["backoff_factor"] = s.backoff_factor;
  j["growth_interval"] = s.growth_interval;
  j["_growth_tracker"] = s.growth_tracker;
  const amp::ScaleRule* found = amp::find_scale_rule(s.policy);
  const amp::ScaleRule& rule = found ? *found : amp::kScaleRules[0];
  if (&rule != &amp::kScaleRules[0]) j["policy"] = s.policy;
  for (const RuleKey& rk : kRuleKeys) {
    const std::optional<int64_t>& v = s.*rk.field;
    const char* name = rule.keys.*rk.name;
    if (v && name[0] != '\0') j[name] = *v;
  }
  if (rule.keys.amax_history) j["amax_history"] = s.amax_history;
  return j;
}

}  // namespace ampctl::checkpoint
