// Bounds shared by modules that must not include each other: the step counts (the config's
// training.max_steps, a checkpoint's step) and the half types' ranges (the scaler, the metrics,
// replay, the report), one constant each in core.
#pragma once

#include <cstdint>

namespace ampctl {

// The most optimizer steps a run may take (training.max_steps, a checkpoint's step): far beyond
// any real run, and far from int64's end, so step arithmetic (step + 1, step * accum) and the
// double a schedule computes from a step stay exact.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;

// The largest finite values: fp16's (2 - 2^-10) x 2^15, bf16's (2 - 2^-7) x 2^127 (exact in
// double; max_finite(DType) in core/tensor.h picks one).
inline constexpr double kHalfMaxFinite = 65504.0;
inline constexpr double kBf16MaxFinite = 3.3895313892515355e38;

}  // namespace ampctl
