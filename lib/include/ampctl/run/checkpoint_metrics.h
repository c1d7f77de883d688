// The "metrics" object of a checkpoint: the run's totals (run/totals.h), the overflow
// attribution counts and the divergence streaks, so that a resumed run reports and stops as an
// uninterrupted one would. Written and read here only.
//
// Counts are stored by parameter name ({name: count}, counts > 0 only) and held in memory in the
// order of the model's parameters (`names`). Doubles that may be non-finite are stored with
// run/numbers.h's encode_double. Checkpoints written before overflow attribution lack the
// counts and streaks; they read as zero.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ampctl/run/totals.h"

namespace ampctl::run {

struct StreakRecord {
  int64_t length = 0;
  int64_t first_step = 0;
  std::vector<int64_t> counts;  // per parameter, in `names` order
};

struct CheckpointMetrics {
  Totals totals;
  double wall_time_s = 0;     // the run's clock at the checkpoint
  bool pending_eval = false;  // a stop request cut the evaluation of this step short
  std::vector<int64_t> overflow_counts;
  StreakRecord floor_streak, loss_streak;
  // checkpoint.keep_best's and training.early_stop's best evaluation so far (the trainer's
  // MetricTracker::to_json, by name); {} when neither is set (the key is then left out).
  nlohmann::json trackers = nlohmann::json::object();
};

// {name: count} for the counts > 0 (the summary's overflow_counts too).
nlohmann::json counts_json(const std::vector<std::string>& names,
                           const std::vector<int64_t>& counts);

nlohmann::json to_json(const CheckpointMetrics& m, const std::vector<std::string>& names);
// Throws Error{input} naming the key that is missing or mistyped, or a count of a name not in
// `names`.
CheckpointMetrics read_checkpoint_metrics(const nlohmann::json& j,
                                          const std::vector<std::string>& names);

}  // namespace ampctl::run
