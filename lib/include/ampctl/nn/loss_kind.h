// The losses' closed choice (the config's `loss`) and its YAML names: plain data with no other
// include, so the config reads the names from here (scripts/dev/check_deps.py, SHARED_HEADERS)
// and holds the value as it is (nn/loss.h says what each one computes).
#pragma once

#include <utility>

namespace ampctl::nn {

enum class LossKind { cross_entropy, mse };

inline constexpr std::pair<LossKind, const char*> kLossKindNames[] = {
    {LossKind::cross_entropy, "cross_entropy"}, {LossKind::mse, "mse"}};

}  // namespace ampctl::nn
