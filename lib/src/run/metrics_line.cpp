#include "ampctl/run/metrics_line.h"

#include <cmath>

#include "ampctl/run/numbers.h"
#include "field_names.h"

namespace ampctl::run {
namespace {

constexpr const char* kKind = "kind";
constexpr const char* kStep = "step";
constexpr const char* kLoss = "loss";
constexpr const char* kScale = "scale";
constexpr const char* kFoundInf = "found_inf";
constexpr const char* kGradNorm = "grad_norm";
constexpr const char* kGrowthTracker = "growth_tracker";
constexpr const char* kHysteresisTracker = "hysteresis_tracker";
constexpr const char* kLr = "lr";
constexpr const char* kTimeS = "time_s";
constexpr const char* kOverflowTensors = "overflow_tensors";
constexpr const char* kGradAmax = "grad_amax";
constexpr const char* kGradAmaxExact = "grad_amax_exact";
constexpr const char* kAccuracy = "accuracy";
constexpr const char* kPerplexity = "perplexity";
constexpr const char* kTrain = "train";
constexpr const char* kEval = "eval";

bool flag(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::optional<double> field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() ? std::nullopt : finite_number(*it);
}

// The first of a train line's known fields that has the wrong type or range, as
// "KEY must be ..., got VALUE"; empty when none has.
std::string train_line_defect(const nlohmann::json& j) {
  const auto got = [](const nlohmann::json& v) { return ", got " + v.dump(); };
  const auto step = j.find(kStep);
  if (step == j.end()) return std::string(kStep) + " is missing";
  if (!step->is_number_integer() || step->get<int64_t>() < 1) {
    return std::string(kStep) + " must be a positive integer" + got(*step);
  }
  const auto scale = j.find(kScale);
  if (scale != j.end() && !scale->is_null() &&
      !(scale->is_number() && finite_number(*scale) && scale->get<double>() > 0)) {
    return std::string(kScale) + " must be a positive number or null" + got(*scale);
  }
  for (const char* key : {kFoundInf, kSkipped, kGradAmaxExact}) {
    const auto it = j.find(key);
    if (it != j.end() && !it->is_boolean())
      return std::string(key) + " must be true or false" + got(*it);
  }
  const auto amax = j.find(kGradAmax);
  if (amax != j.end() && !amax->is_null() &&
      !(amax->is_number() && finite_number(*amax) && amax->get<double>() >= 0)) {
    return std::string(kGradAmax) + " must be a non-negative number or null" + got(*amax);
  }
  const auto retries = j.find(kRetries);
  if (retries != j.end() && !(retries->is_number_integer() && retries->get<int64_t>() >= 0)) {
    return std::string(kRetries) + " must be a non-negative integer" + got(*retries);
  }
  return {};
}

}  // namespace

nlohmann::json to_json(const TrainLine& l) {
  nlohmann::json j = {{kKind, kTrain},
                      {kStep, l.step},
                      {kLoss, finite_or_null(l.loss)},
                      {kScale, finite_or_null(l.scale)},
                      {kFoundInf, l.found_inf},
                      {kSkipped, l.found_inf},
                      {kGradNorm, finite_or_null(l.grad_norm)},
                      {kGrowthTracker, l.growth_tracker},
                      {kLr, l.lr},
                      {kTimeS, l.time_s}};
  if (l.hysteresis_tracker) j[kHysteresisTracker] = *l.hysteresis_tracker;
  if (l.overflow_tensors) j[kOverflowTensors] = *l.overflow_tensors;
  if (l.retries) j[kRetries] = *l.retries;
  if (l.grad_amax) j[kGradAmax] = finite_or_null(*l.grad_amax);
  if (l.grad_amax_exact) j[kGradAmaxExact] = *l.grad_amax_exact;
  return j;
}

nlohmann::json to_json(const EvalLine& l) {
  nlohmann::json j = {{kKind, kEval}, {kStep, l.step}, {kLoss, finite_or_null(l.loss)}};
  if (l.accuracy) j[kAccuracy] = *l.accuracy;
  if (l.perplexity) j[kPerplexity] = finite_or_null(*l.perplexity);
  j[kTimeS] = l.time_s;
  return j;
}

std::optional<MetricsRecord> read_metrics_line(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  MetricsRecord r;
  const auto kind = j.find(kKind);
  r.kind = kind != j.end() && kind->is_string() ? kind->get<std::string>() : std::string(kTrain);
  if (const auto step = field(j, kStep)) {
    r.step = static_cast<int64_t>(*step);
    r.step_is_integer = j.at(kStep).is_number_integer();
  }
  r.loss = field(j, kLoss);
  r.scale = field(j, kScale);
  r.accuracy = field(j, kAccuracy);
  r.grad_amax = field(j, kGradAmax);
  r.lr = field(j, kLr);
  r.time_s = field(j, kTimeS);
  r.overflowed = flag(j, kFoundInf) || flag(j, kSkipped);
  r.has_grad_amax = j.contains(kGradAmax);
  if (const auto exact = j.find(kGradAmaxExact); exact != j.end() && exact->is_boolean()) {
    r.grad_amax_exact = exact->get<bool>();
  }
  if (r.is_train()) r.defect = train_line_defect(j);
  return r;
}

}  // namespace ampctl::run
