// metrics.jsonl: one JSON object per line, written by the training monitor and read by resume
// (which drops the lines after its checkpoint) and by `ampctl report`. The field names exist
// here only.
//
//   train line: {"kind": "train", "step", "loss", "scale", "found_inf", "skipped",
//                "grad_norm", "growth_tracker", "lr", "time_s"[, "hysteresis_tracker" when loss
//                scaling is on][, "overflow_tensors": [names] on an overflowing step with
//                attribution][, "retries": failed attempts of a step that
//                scaler.on_overflow: retry ran again, when > 0][, "grad_amax",
//                "grad_amax_exact" when the model's backward roundings to fp16/bf16
//                are measured (docs/reference.md "grad_amax")]}
//   eval line:  {"kind": "eval", "step", "loss"[, "accuracy" for classification], "time_s"}
// A non-finite loss or scale is written as null (run/numbers.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ampctl::run {

inline constexpr const char* kMetricsFile = "metrics.jsonl";

struct TrainLine {
  int64_t step = 0;
  double loss = 0;   // the step's mean loss over its micro-batches
  double scale = 1;  // the loss scale its backward used (1 without scaling)
  bool found_inf = false;
  double grad_norm = 0;  // the global norm of the unscaled gradients (before clipping)
  int32_t growth_tracker = 0;
  std::optional<int32_t> hysteresis_tracker;  // with loss scaling
  double lr = 0;
  double time_s = 0;  // since the run started
  std::optional<std::vector<std::string>> overflow_tensors;
  std::optional<int64_t> retries;  // scaler.on_overflow: retry; present when > 0
  // The largest finite |x| any rounding of the step's backward to fp16/bf16 saw, in the units
  // of the gradients of a micro-batch's mean loss (divided by the backward's seed, scale /
  // micro-batches); false exactness when a non-finite value reached a rounding (then a lower
  // bound). Both unset when nothing is measured.
  std::optional<double> grad_amax;
  std::optional<bool> grad_amax_exact;
};

struct EvalLine {
  int64_t step = 0;
  double loss = 0;
  std::optional<double> accuracy;
  std::optional<double> perplexity;  // language models: exp(loss) (null when it overflows)
  double time_s = 0;
};

nlohmann::json to_json(const TrainLine& line);
nlohmann::json to_json(const EvalLine& line);

// One line as a reader sees it: any field may be missing.
struct MetricsRecord {
  std::string kind;                 // "train" when the line names none
  std::optional<int64_t> step;      // a finite number (truncated)
  bool step_is_integer = false;     // written as a JSON integer (every line the trainer writes)
  std::optional<double> loss;       // finite only
  std::optional<double> scale;      // finite only
  std::optional<double> accuracy;   // finite only
  bool overflowed = false;          // found_inf or skipped
  std::optional<double> grad_amax;  // finite only
  bool has_grad_amax = false;       // the key is there (null included: a step with no finite value)
  std::optional<bool> grad_amax_exact;
  // A train line whose known fields have the wrong type or range (a damaged or hand-edited
  // file): "KEY must be ..., got VALUE"; empty otherwise. The readers that decide from the line
  // (replay) refuse it; the report draws what it can.
  std::string defect;
  std::optional<double> lr;      // finite only
  std::optional<double> time_s;  // finite only: seconds since the run started
  bool is_train() const { return kind == "train"; }
  bool is_eval() const { return kind == "eval"; }
};

// Reads one line; nullopt when it is not a JSON object (a torn last line, or not ours).
std::optional<MetricsRecord> read_metrics_line(const std::string& text);

}  // namespace ampctl::run
