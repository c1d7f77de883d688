// summary.json: a run's outcome, written once by the trainer when the run finishes or diverges,
// read by `ampctl sweep` (its results table) and `ampctl report`. The field names exist here
// only: readers use the key constants below.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/run/totals.h"

namespace ampctl::run {

inline constexpr const char* kSummaryFile = "summary.json";

// The keys of summary.json.
namespace summary_key {
inline constexpr const char* kName = "name";
inline constexpr const char* kStatus = "status";  // kStatusOk | kStatusDiverged
inline constexpr const char* kSteps = "steps";
inline constexpr const char* kSkippedSteps = "skipped_steps";
inline constexpr const char* kClippedSteps = "clipped_steps";
inline constexpr const char* kRetries = "retries";  // failed attempts run again (on_overflow)
inline constexpr const char* kFinalScale = "final_scale";
inline constexpr const char* kMinScale = "min_scale";
inline constexpr const char* kMaxScale = "max_scale";
inline constexpr const char* kFinalLoss = "final_loss";
inline constexpr const char* kBestLoss = "best_loss";
inline constexpr const char* kEval = "eval";  // the last eval line, or null
inline constexpr const char* kBestEvalLoss = "best_eval_loss";
inline constexpr const char* kBestEvalAccuracy = "best_eval_accuracy";
inline constexpr const char* kOverflowCounts = "overflow_counts";
inline constexpr const char* kMostOverflowing = "most_overflowing";
inline constexpr const char* kWallTimeS = "wall_time_s";
inline constexpr const char* kTrainTimeS = "train_time_s";
inline constexpr const char* kSamplesPerS = "samples_per_s";
inline constexpr const char* kSteadySamplesPerS = "steady_samples_per_s";
inline constexpr const char* kSteadyStepMs = "steady_step_ms";
// Language models only: training tokens (batch windows x block_size) per second.
inline constexpr const char* kTokensPerS = "tokens_per_s";
inline constexpr const char* kBackend = "backend";
inline constexpr const char* kDevice = "device";
inline constexpr const char* kPrecision = "precision";
inline constexpr const char* kScalerEnabled = "scaler_enabled";
inline constexpr const char* kPhaseMs = "phase_ms";
inline constexpr const char* kAmpctlVersion = "ampctl_version";
inline constexpr const char* kDivergence = "divergence";  // only when diverged
}  // namespace summary_key

inline constexpr const char* kStatusOk = "ok";
inline constexpr const char* kStatusDiverged = "diverged";

struct SummaryDivergence {
  int64_t step = 0;
  int64_t detected_at_step = 0;
  std::string reason;
  std::vector<std::string> tensors;
  std::optional<std::string> checkpoint;
  std::optional<int64_t> checkpoint_step;
  std::string message;
};

struct Summary {
  std::string name;
  std::string status = kStatusOk;
  Totals totals;
  nlohmann::json overflow_counts = nlohmann::json::object();  // {name: overflowing steps}
  std::vector<std::string> most_overflowing;
  double wall_time_s = 0;
  std::optional<double> steady_step_ms;
  int64_t tokens_per_sample = 0;  // language models: block_size (0: not a language model)
  std::string backend, device, precision;
  bool scaler_enabled = false;
  nlohmann::json phase_ms;  // null without logging.profile
  // logging.numerics_every (run/numerics.h): "numerics" and "scale_advice", null when off.
  nlohmann::json numerics, scale_advice;
  std::string version;
  std::optional<SummaryDivergence> divergence;
  // checkpoint.keep_best: {"metric", "value", "step", "checkpoint"}; training.early_stop: the
  // stop's {"step", "metric", "best", "best_step", "patience"}. Null when not set / not stopped.
  nlohmann::json best_checkpoint, early_stop;
};

nlohmann::json to_json(const Summary& summary);
// Writes summary.json in `dir` (Error{runtime} naming it when the disk is full or unwritable).
void write_summary(const std::filesystem::path& dir, const nlohmann::json& summary);

// A finished run's status from its summary.json: "status" when the trainer wrote one (ok or
// diverged), else ok (a summary is written only by a run that finished).
std::string summary_status(const nlohmann::json& summary);
// summary[key], or null when the summary has no such key.
nlohmann::json summary_field(const nlohmann::json& summary, const char* key);

}  // namespace ampctl::run
