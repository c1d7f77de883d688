#include "ampctl/run/checkpoint_metrics.h"

#include <algorithm>
#include <cmath>

#include "ampctl/core/error.h"
#include "ampctl/run/numbers.h"
#include "field_names.h"

namespace ampctl::run {
namespace {

constexpr const char* kSection = "metrics";
constexpr const char* kStepsDone = "steps_done";
constexpr const char* kSamples = "samples";
constexpr const char* kFinalLoss = "final_loss";
constexpr const char* kBestLoss = "best_loss";
constexpr const char* kFinalScale = "final_scale";
constexpr const char* kMinScale = "min_scale";
constexpr const char* kMaxScale = "max_scale";
constexpr const char* kTrainSeconds = "train_seconds";
constexpr const char* kEvalSeconds = "eval_seconds";
constexpr const char* kSteady = "steady";
constexpr const char* kSteadySeconds = "steady_seconds";
constexpr const char* kSteadySamples = "steady_samples";
constexpr const char* kClipped = "clipped_steps";  // absent in checkpoints before grad_norm
constexpr const char* kWallTimeS = "wall_time_s";
constexpr const char* kLastEval = "last_eval";
constexpr const char* kBestEvalLoss = "best_eval_loss";
constexpr const char* kBestEvalAccuracy = "best_eval_accuracy";
constexpr const char* kPendingEval = "pending_eval";
constexpr const char* kLastLoss = "last_loss";  // written for other readers: final_loss if finite
constexpr const char* kOverflowCounts = "overflow_counts";
constexpr const char* kFloorStreak = "floor_streak";
constexpr const char* kLossStreak = "loss_streak";
constexpr const char* kLength = "length";
constexpr const char* kFirstStep = "first_step";

const nlohmann::json& member(const nlohmann::json& j, const char* section, const char* key) {
  if (!j.is_object() || !j.contains(key)) {
    throw Error{ErrorKind::input,
                std::string("checkpoint ") + section + ": missing key '" + key + "'"};
  }
  return j.at(key);
}

int64_t member_int(const nlohmann::json& j, const char* section, const char* key) {
  const nlohmann::json& v = member(j, section, key);
  if (!v.is_number_integer()) {
    throw Error{ErrorKind::input, std::string("checkpoint ") + section + ": '" + key +
                                      "' must be an integer, got " + v.dump()};
  }
  return v.get<int64_t>();
}

double as_double(const nlohmann::json& j, const char* key) {
  if (const std::optional<double> v = decode_double(j)) return *v;
  throw Error{ErrorKind::input,
              std::string("checkpoint metrics: '") + key + "' must be a number, got " + j.dump()};
}

double member_double(const nlohmann::json& j, const char* key) {
  return as_double(member(j, kSection, key), key);
}

bool member_bool(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = member(j, kSection, key);
  if (!v.is_boolean()) {
    throw Error{ErrorKind::input,
                std::string("checkpoint metrics: '") + key + "' must be a boolean"};
  }
  return v.get<bool>();
}

std::optional<double> member_optional(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = member(j, kSection, key);
  if (v.is_null()) return std::nullopt;
  return as_double(v, key);
}

// Reads counts_json back (names it does not know are a damaged checkpoint).
std::vector<int64_t> counts_from_json(const nlohmann::json& j,
                                      const std::vector<std::string>& names, const char* key) {
  std::vector<int64_t> counts(names.size(), 0);
  if (!j.is_object()) {
    throw Error{ErrorKind::input,
                std::string("checkpoint metrics: '") + key + "' must be an object"};
  }
  for (const auto& [name, v] : j.items()) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end() || !v.is_number_integer() || v.get<int64_t>() < 0) {
      throw Error{ErrorKind::input, std::string("checkpoint metrics: '") + key + "': entry '" +
                                        name + "' is not a parameter with a count >= 0"};
    }
    counts[static_cast<size_t>(it - names.begin())] = v.get<int64_t>();
  }
  return counts;
}

}  // namespace

nlohmann::json counts_json(const std::vector<std::string>& names,
                           const std::vector<int64_t>& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < names.size() && i < counts.size(); ++i) {
    if (counts[i] > 0) j[names[i]] = counts[i];
  }
  return j;
}

nlohmann::json to_json(const CheckpointMetrics& m, const std::vector<std::string>& names) {
  const Totals& t = m.totals;
  nlohmann::json j = {{kStepsDone, t.steps_done},
                      {kSkipped, t.skipped},
                      {kSamples, t.samples},
                      {kFinalLoss, encode_double(t.final_loss)},
                      {kBestLoss, encode_double(t.best_loss)},
                      {kFinalScale, encode_double(t.final_scale)},
                      {kMinScale, encode_double(t.min_scale)},
                      {kMaxScale, encode_double(t.max_scale)},
                      {kTrainSeconds, t.train_seconds},
                      {kEvalSeconds, t.eval_seconds},
                      {kSteady, t.steady},
                      {kSteadySeconds, t.steady_seconds},
                      {kSteadySamples, t.steady_samples},
                      {kClipped, t.clipped},
                      {kRetries, t.retries},
                      {kWallTimeS, m.wall_time_s},
                      {kLastEval, t.last_eval},
                      {kBestEvalLoss, json_or_null(t.best_eval_loss)},
                      {kBestEvalAccuracy, json_or_null(t.best_eval_accuracy)}};
  if (!t.eval_sets.is_null()) j["eval_sets"] = t.eval_sets;
  if (m.pending_eval) j[kPendingEval] = true;
  if (!m.trackers.empty()) j["trackers"] = m.trackers;
  if (std::isfinite(t.final_loss)) j[kLastLoss] = t.final_loss;
  j[kOverflowCounts] = counts_json(names, m.overflow_counts);
  for (const auto& [key, streak] :
       {std::pair<const char*, const StreakRecord*>{kFloorStreak, &m.floor_streak},
        std::pair<const char*, const StreakRecord*>{kLossStreak, &m.loss_streak}}) {
    j[key] = {{kLength, streak->length},
              {kFirstStep, streak->first_step},
              {kOverflowCounts, counts_json(names, streak->counts)}};
  }
  return j;
}

CheckpointMetrics read_checkpoint_metrics(const nlohmann::json& m,
                                          const std::vector<std::string>& names) {
  CheckpointMetrics out;
  Totals& t = out.totals;
  t.steps_done = member_int(m, kSection, kStepsDone);
  t.skipped = member_int(m, kSection, kSkipped);
  t.samples = member_int(m, kSection, kSamples);
  t.final_loss = member_double(m, kFinalLoss);
  t.best_loss = member_double(m, kBestLoss);
  t.final_scale = member_double(m, kFinalScale);
  t.min_scale = member_double(m, kMinScale);
  t.max_scale = member_double(m, kMaxScale);
  t.train_seconds = member_double(m, kTrainSeconds);
  t.eval_seconds = member_double(m, kEvalSeconds);
  t.steady = member_bool(m, kSteady);
  t.steady_seconds = member_double(m, kSteadySeconds);
  t.steady_samples = member_int(m, kSection, kSteadySamples);
  t.clipped = m.contains(kClipped) ? member_int(m, kSection, kClipped) : 0;
  t.retries = m.contains(kRetries) ? member_int(m, kSection, kRetries) : 0;
  out.wall_time_s = member_double(m, kWallTimeS);
  t.last_eval = member(m, kSection, kLastEval);
  t.best_eval_loss = member_optional(m, kBestEvalLoss);
  t.best_eval_accuracy = member_optional(m, kBestEvalAccuracy);
  if (const auto it = m.find("eval_sets"); it != m.end() && it->is_object()) t.eval_sets = *it;
  out.overflow_counts.assign(names.size(), 0);
  out.floor_streak.counts.assign(names.size(), 0);
  out.loss_streak.counts.assign(names.size(), 0);
  if (m.contains(kOverflowCounts)) {
    out.overflow_counts = counts_from_json(m.at(kOverflowCounts), names, kOverflowCounts);
  }
  for (auto& [key, streak] :
       {std::pair<const char*, StreakRecord*>{kFloorStreak, &out.floor_streak},
        std::pair<const char*, StreakRecord*>{kLossStreak, &out.loss_streak}}) {
    if (!m.contains(key)) continue;
    const nlohmann::json& j = m.at(key);
    streak->length = member_int(j, key, kLength);
    streak->first_step = member_int(j, key, kFirstStep);
    if (streak->length < 0 || streak->first_step < 0) {
      throw Error{ErrorKind::input, std::string("checkpoint ") + key + ": negative length or step"};
    }
    streak->counts = counts_from_json(member(j, key, kOverflowCounts), names, key);
  }
  if (m.contains(kPendingEval)) out.pending_eval = member_bool(m, kPendingEval);
  if (m.contains("trackers")) {
    out.trackers = m.at("trackers");
    if (!out.trackers.is_object()) {
      throw Error{ErrorKind::input, "checkpoint metrics.trackers: expected an object"};
    }
  }
  return out;
}

}  // namespace ampctl::run
