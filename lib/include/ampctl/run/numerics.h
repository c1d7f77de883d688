// The gradient-numerics records of a run directory (docs/reference.md "Gradient numerics"): the
// field names of metrics.jsonl's numerics lines and of summary.json's "numerics" and
// "scale_advice" objects, written by train/numerics and read by `ampctl sweep` and the report.
//
//   numerics line: {"kind": "numerics", "step", "scale", "values", "underflow", "subnormal",
//                   "underflow_frac", "subnormal_frac", "min_headroom_log2",
//                   "tensors": {NAME: {"values", "underflow", "subnormal", "headroom_log2"}}}
//   (a headroom with no finite non-zero value to measure is null)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ampctl::run {

namespace numerics_key {
inline constexpr const char* kKind = "numerics";  // the line's "kind"
inline constexpr const char* kStep = "step";
inline constexpr const char* kScale = "scale";
inline constexpr const char* kValues = "values";
inline constexpr const char* kUnderflow = "underflow";
inline constexpr const char* kSubnormal = "subnormal";
inline constexpr const char* kUnderflowFrac = "underflow_frac";
inline constexpr const char* kSubnormalFrac = "subnormal_frac";
inline constexpr const char* kMinHeadroom = "min_headroom_log2";
inline constexpr const char* kTensors = "tensors";
inline constexpr const char* kHeadroom = "headroom_log2";
// summary.json
inline constexpr const char* kSummaryNumerics = "numerics";
inline constexpr const char* kSamples = "samples";
inline constexpr const char* kMeanUnderflowFrac = "mean_underflow_frac";
inline constexpr const char* kWorstUnderflow = "worst_underflow";
inline constexpr const char* kTensor = "tensor";
inline constexpr const char* kScaleAdvice = "scale_advice";
inline constexpr const char* kMin = "min";
inline constexpr const char* kMax = "max";
inline constexpr const char* kNote = "note";
}  // namespace numerics_key

// What a reader (the report) takes from a numerics line.
struct NumericsRecord {
  int64_t step = 0;
  double underflow_frac = 0;
  std::optional<double> min_headroom_log2;
};

// A numerics line's record; nullopt for any other line (or a torn one).
std::optional<NumericsRecord> read_numerics_line(const nlohmann::json& line);

}  // namespace ampctl::run
