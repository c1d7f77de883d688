// Totals: the running outcome of a run, updated at each metrics read-back and by evaluation.
// summary.json reports them and the checkpoint's metrics object carries them over to a resumed
// run, so a resumed run ends with the summary an uninterrupted one would have written.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

namespace ampctl::run {

struct Totals {
  int64_t steps_done = 0, skipped = 0, samples = 0;
  int64_t clipped = 0;  // steps whose gradients training.grad_clip_norm scaled down
  int64_t retries = 0;  // failed attempts that scaler.on_overflow: retry ran again
  double final_loss =
      std::numeric_limits<double>::quiet_NaN();  // the last loss (NaN: none, or not finite)
  double best_loss = std::numeric_limits<double>::infinity();
  double final_scale = 1.0;
  double min_scale = std::numeric_limits<double>::infinity();
  double max_scale = 0;
  double train_seconds = 0, eval_seconds = 0;
  bool steady = false;  // past the first logging interval
  double steady_seconds = 0;
  int64_t steady_samples = 0;
  nlohmann::json last_eval;                                  // the last eval line, or null
  std::optional<double> best_eval_loss, best_eval_accuracy;  // the first evaluation set's
  // data.eval's named sets (null for the single form): {NAME: {"loss", "accuracy", "best_loss",
  // "best_accuracy"}} for every set, the first's included (docs/reference.md, "Evaluation sets").
  nlohmann::json eval_sets;
};

}  // namespace ampctl::run
