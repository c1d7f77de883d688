// Synthetic sources: seeded data sets that a small MLP can learn but not trivially.
//
// Everything is drawn with the data module's Philox streams (data/random.h). The "world" (class
// centres, projection, teacher weights) depends only on (seed, features, classes) and is shared
// by Role::train and Role::eval, which draw different samples from it: a synthetic data.eval is
// a fresh sample of the training distribution.
//
// classification (features F, classes K): a mixture of K * kClustersPerClass Gaussian clusters
//   in a latent space of d = min(F, kLatentDims) dimensions, seen through a random projection:
//     centre(k, c) = kCentreSpread * N(0, I_d)                         (world)
//     A            = N(0, 1/d) entries, F x d                          (world)
//     label        = uniform in [0, K), cluster c uniform in [0, kClustersPerClass)
//     x            = A (centre(label, c) + N(0, I_d)) + kFeatureNoise * N(0, I_F)
//   Two clusters per class make the classes non-convex and the within-cluster noise makes them
//   overlap: at F = 32, K = 10, 8192 samples, softmax regression reaches 70-84% on the eval
//   set and 15-nearest-neighbours 85-92% (seeds 0-2), so an MLP has something to learn and
//   nothing reaches 100%.
// regression (features F, targets 1): a random 2-layer tanh teacher plus noise:
//     x = N(0, I_F);  h = tanh(kTeacherInputGain * W1 x / sqrt(F) + b1),
//     W1: kTeacherHidden x F of N(0, 1), b1 = kTeacherBias * N(0, 1), w2 = N(0, 1) (H of them),
//     y = kTeacherGain * w2 . h / sqrt(H) + kTargetNoise * N(0, 1)
//   Pre-activations are N(0, 4.25), so most units saturate: a least-squares linear fit leaves
//   a mean squared error of about 0.2 (R^2 about 0.8, measured over seeds at F = 32), twenty
//   times the noise floor kTargetNoise^2 = 0.01 that a network can approach. kTeacherGain makes
//   Var(y) about 1 (E[tanh(N(0, 4.25))^2] is about 0.64).
//
// Each sample's draws come from a block of indices of its own, so a sample is a pure function
// of (seed, role, index): generating 100 samples gives the first 100 of a 1000-sample set.
#pragma once

#include <cstdint>

#include "ampctl/data/dataset.h"

namespace ampctl::data {

inline constexpr int64_t kLatentDims = 8;
inline constexpr int64_t kClustersPerClass = 2;
inline constexpr double kCentreSpread = 1.5;
inline constexpr double kFeatureNoise = 0.1;
inline constexpr int64_t kTeacherHidden = 32;
inline constexpr double kTeacherInputGain = 2.0;
inline constexpr double kTeacherBias = 0.5;
inline constexpr double kTeacherGain = 1.3;
inline constexpr double kTargetNoise = 0.1;

// Synthetic sets are refused (Error{config}) beyond this many floats in x and the world
// together (1 GiB): far beyond any useful toy set, and a typo in samples cannot exhaust memory.
inline constexpr int64_t kMaxSyntheticValues = int64_t{1} << 28;

// `source` must be SourceKind::synthetic (samples, features, task and classes as validated by
// the config module).
Dataset make_synthetic(const SourceOptions& source, uint64_t seed, Role role);

}  // namespace ampctl::data
