#include "ampctl/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/data/random.h"

namespace ampctl::data {

namespace {

// The world stream is split into regions (index = region << 48 | offset) so that each kind of
// parameter has its own draws whatever the sizes.
enum class WorldRegion : uint64_t { projection = 0, centres = 1, w1 = 2, b1 = 3, w2 = 4 };

float world_normal(uint64_t seed, WorldRegion region, uint64_t offset) {
  return draw_normal(seed, DataStream::synthetic_world,
                     static_cast<uint64_t>(region) << 48 | offset);
}

void make_classification(Dataset& out, int64_t n, uint64_t seed, DataStream samples) {
  const int64_t f = out.features, k = out.classes;
  const int64_t d = std::min(f, kLatentDims);
  std::vector<double> projection(static_cast<size_t>(f * d));
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t j = 0; j < f * d; ++j) {
    projection[static_cast<size_t>(j)] =
        world_normal(seed, WorldRegion::projection, static_cast<uint64_t>(j)) * inv_sqrt_d;
  }
  // Per sample: label, cluster, d latent normals, f feature-noise normals.
  const auto per_sample = static_cast<uint64_t>(2 + d + f);
  std::vector<double> z(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    if ((i & 1023) == 0) check_stop("generating the synthetic data");
    const uint64_t base = static_cast<uint64_t>(i) * per_sample;
    const auto label = static_cast<int64_t>(
        uniform_below(draw_u64(seed, samples, base), static_cast<uint64_t>(k)));
    const auto cluster =
        static_cast<int64_t>(uniform_below(draw_u64(seed, samples, base + 1), kClustersPerClass));
    const auto centre = static_cast<uint64_t>((label * kClustersPerClass + cluster) * d);
    for (int64_t l = 0; l < d; ++l) {
      z[static_cast<size_t>(l)] =
          kCentreSpread * world_normal(seed, WorldRegion::centres, centre + l) +
          draw_normal(seed, samples, base + 2 + static_cast<uint64_t>(l));
    }
    float* row = out.x.data() + i * f;
    for (int64_t j = 0; j < f; ++j) {
      double v = kFeatureNoise * draw_normal(seed, samples, base + 2 + d + j);
      const double* a = projection.data() + j * d;
      for (int64_t l = 0; l < d; ++l) v += a[l] * z[static_cast<size_t>(l)];
      row[j] = static_cast<float>(v);
    }
    out.labels[static_cast<size_t>(i)] = static_cast<int32_t>(label);
  }
}

void make_regression(Dataset& out, int64_t n, uint64_t seed, DataStream samples) {
  const int64_t f = out.features, h = kTeacherHidden;
  std::vector<double> w1(static_cast<size_t>(h * f)), b1(h), w2(h);
  for (int64_t j = 0; j < h * f; ++j) {
    w1[static_cast<size_t>(j)] = world_normal(seed, WorldRegion::w1, static_cast<uint64_t>(j));
  }
  for (int64_t u = 0; u < h; ++u) {
    b1[static_cast<size_t>(u)] =
        kTeacherBias * world_normal(seed, WorldRegion::b1, static_cast<uint64_t>(u));
    w2[static_cast<size_t>(u)] = world_normal(seed, WorldRegion::w2, static_cast<uint64_t>(u));
  }
  const double in_gain = kTeacherInputGain / std::sqrt(static_cast<double>(f));
  const double out_gain = kTeacherGain / std::sqrt(static_cast<double>(h));
  // Per sample: f input normals, then the target noise.
  const auto per_sample = static_cast<uint64_t>(f + 1);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t base = static_cast<uint64_t>(i) * per_sample;
    float* row = out.x.data() + i * f;
    for (int64_t j = 0; j < f; ++j) row[j] = draw_normal(seed, samples, base + j);
    double y = 0.0;
    for (int64_t u = 0; u < h; ++u) {
      const double* w = w1.data() + u * f;
      double pre = 0.0;
      for (int64_t j = 0; j < f; ++j) pre += w[j] * row[j];
      y += w2[static_cast<size_t>(u)] * std::tanh(pre * in_gain + b1[static_cast<size_t>(u)]);
    }
    y = out_gain * y + kTargetNoise * draw_normal(seed, samples, base + f);
    out.y[static_cast<size_t>(i)] = static_cast<float>(y);
  }
}

}  // namespace

Dataset make_synthetic(const SourceOptions& source, uint64_t seed, Role role) {
  if (source.source != SourceKind::synthetic) {
    throw Error{ErrorKind::invalid_argument, "make_synthetic: not a synthetic source"};
  }
  const int64_t n = source.samples, f = source.features;
  const bool classification = source.task == Task::classification;
  if (n < 1 || f < 1 || (classification && source.classes < 1)) {
    throw Error{ErrorKind::config, "synthetic source: samples, features and classes must be >= 1"};
  }
  // x plus the largest world (the teacher's first layer), in values.
  if (n > kMaxSyntheticValues / f || n * f > kMaxSyntheticValues - f * kTeacherHidden) {
    throw Error{ErrorKind::config,
                "synthetic source: " + std::to_string(n) + " samples x " + std::to_string(f) +
                    " features is too large (the limit is " + std::to_string(kMaxSyntheticValues) +
                    " values)",
                "lower samples or features"};
  }
  Dataset out;
  out.task = source.task;
  out.features = f;
  out.origin = role == Role::train ? "synthetic (train)" : "synthetic (eval)";
  out.x.resize(static_cast<size_t>(n * f));
  const DataStream samples =
      role == Role::train ? DataStream::synthetic_train : DataStream::synthetic_eval;
  if (classification) {
    out.classes = source.classes;
    out.labels.resize(static_cast<size_t>(n));
    make_classification(out, n, seed, samples);
  } else {
    out.targets = 1;
    out.y.resize(static_cast<size_t>(n));
    make_regression(out, n, seed, samples);
  }
  return out;
}

}  // namespace ampctl::data
