// Bounds shared by the modules that read step counts (the config's training.max_steps, a
// checkpoint's step): one constant in core, so neither has to include the other.
#pragma once

#include <cstdint>

namespace ampctl {

// The most optimizer steps a run may take (training.max_steps, a checkpoint's step): far beyond
// any real run, and far from int64's end, so step arithmetic (step + 1, step * accum) and the
// double a schedule computes from a step stay exact.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;

}  // namespace ampctl
