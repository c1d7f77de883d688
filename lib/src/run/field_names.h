// The field names that a metrics line (metrics_line.cpp) and the checkpoint's "metrics" section
// (checkpoint_metrics.cpp) share: the same count under the same name in both.
#pragma once

namespace ampctl::run {

inline constexpr const char* kSkipped = "skipped";
inline constexpr const char* kRetries = "retries";  // absent in checkpoints before retry

}  // namespace ampctl::run
