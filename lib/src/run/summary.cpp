#include "ampctl/run/summary.h"

#include <fstream>

#include "ampctl/core/error.h"
#include "ampctl/run/numbers.h"
#include "ampctl/run/numerics.h"

namespace ampctl::run {

namespace k = summary_key;

nlohmann::json to_json(const Summary& s) {
  const Totals& t = s.totals;
  nlohmann::json j = {{k::kName, s.name},
                      {k::kStatus, s.status},
                      {k::kSteps, t.steps_done},
                      {k::kSkippedSteps, t.skipped},
                      {k::kClippedSteps, t.clipped},
                      {k::kRetries, t.retries},
                      {k::kFinalScale, finite_or_null(t.final_scale)},
                      {k::kMinScale, finite_or_null(t.min_scale)},
                      {k::kMaxScale, finite_or_null(t.max_scale)},
                      {k::kFinalLoss, finite_or_null(t.final_loss)},
                      {k::kBestLoss, finite_or_null(t.best_loss)},
                      {k::kEval, t.last_eval},
                      {k::kBestEvalLoss, json_or_null(t.best_eval_loss)},
                      {k::kBestEvalAccuracy, json_or_null(t.best_eval_accuracy)},
                      {k::kOverflowCounts, s.overflow_counts},
                      {k::kMostOverflowing, s.most_overflowing},
                      {k::kWallTimeS, s.wall_time_s},
                      {k::kTrainTimeS, t.train_seconds},
                      {k::kSamplesPerS, t.train_seconds > 0 ? t.samples / t.train_seconds : 0.0},
                      {k::kSteadySamplesPerS,
                       t.steady_seconds > 0 ? nlohmann::json(t.steady_samples / t.steady_seconds)
                                            : nlohmann::json()},
                      {k::kSteadyStepMs, json_or_null(s.steady_step_ms)},
                      {k::kBackend, s.backend},
                      {k::kDevice, s.device},
                      {k::kPrecision, s.precision},
                      {k::kScalerEnabled, s.scaler_enabled},
                      {k::kPhaseMs, s.phase_ms},
                      {k::kAmpctlVersion, s.version}};
  if (s.tokens_per_sample > 0) {
    j[k::kTokensPerS] = t.train_seconds > 0
                            ? static_cast<double>(t.samples) *
                                  static_cast<double>(s.tokens_per_sample) / t.train_seconds
                            : 0.0;
  }
  // logging.numerics_every (run/numerics.h): only when the run counted.
  if (!s.numerics.is_null()) j[numerics_key::kSummaryNumerics] = s.numerics;
  if (!s.scale_advice.is_null()) j[numerics_key::kScaleAdvice] = s.scale_advice;
  if (!t.eval_sets.is_null()) j["eval_sets"] = t.eval_sets;
  if (!s.best_checkpoint.is_null()) j["best_checkpoint"] = s.best_checkpoint;
  if (!s.early_stop.is_null()) j["early_stop"] = s.early_stop;
  if (s.divergence) {
    const SummaryDivergence& d = *s.divergence;
    j[k::kDivergence] = {
        {"step", d.step},
        {"detected_at_step", d.detected_at_step},
        {"reason", d.reason},
        {"tensors", d.tensors},
        {"checkpoint", d.checkpoint ? nlohmann::json(*d.checkpoint) : nlohmann::json()},
        {"checkpoint_step",
         d.checkpoint_step ? nlohmann::json(*d.checkpoint_step) : nlohmann::json()},
        {"message", d.message}};
  }
  return j;
}

void write_summary(const std::filesystem::path& dir, const nlohmann::json& summary) {
  const std::filesystem::path path = dir / kSummaryFile;
  std::ofstream out(path);
  out << summary.dump(2) << '\n';
  out.flush();
  if (!out) {
    throw Error{ErrorKind::runtime, "cannot write " + path.string() + " (disk full or I/O error)"};
  }
}

std::string summary_status(const nlohmann::json& summary) {
  if (summary.is_object() && summary.contains(k::kStatus) && summary[k::kStatus].is_string()) {
    return summary[k::kStatus].get<std::string>();
  }
  return kStatusOk;
}

nlohmann::json summary_field(const nlohmann::json& summary, const char* key) {
  return summary.is_object() && summary.contains(key) ? summary[key] : nlohmann::json();
}

}  // namespace ampctl::run
