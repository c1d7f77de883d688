#include "ampctl/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "ampctl/core/error.h"
#include "ampctl/core/format.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/data/csv.h"
#include "ampctl/data/idx.h"
#include "ampctl/data/random.h"
#include "ampctl/data/synthetic.h"

namespace ampctl::data {

namespace {

// The rows `rows` of `all`, in that order.
Dataset subset(const Dataset& all, const std::vector<int64_t>& rows, std::string origin) {
  Dataset out;
  out.task = all.task;
  out.features = all.features;
  out.classes = all.classes;
  out.targets = all.targets;
  out.pixels = all.pixels;
  out.image = all.image;
  out.origin = std::move(origin);
  const auto n = static_cast<int64_t>(rows.size());
  out.x.resize(static_cast<size_t>(n * all.features));
  if (!all.labels.empty()) out.labels.resize(static_cast<size_t>(n));
  if (!all.y.empty()) out.y.resize(static_cast<size_t>(n * all.targets));
  gather(all, rows.data(), n, out.x.data(), out.labels.empty() ? nullptr : out.labels.data(),
         out.y.empty() ? nullptr : out.y.data());
  return out;
}

// An eval set from its own source must fit the model built for the training set.
void check_compatible(const Dataset& train, Dataset& eval) {
  const std::string names = " (data.eval: " + eval.origin + ", data.train: " + train.origin + ")";
  if (eval.task != train.task) {
    throw Error{ErrorKind::config, std::string("data.eval is a ") + to_string(eval.task) +
                                       " set and data.train a " + to_string(train.task) + " set" +
                                       names};
  }
  if (eval.features != train.features) {
    throw Error{ErrorKind::input, "data.eval has " + std::to_string(eval.features) +
                                      " features and data.train " + std::to_string(train.features) +
                                      names};
  }
  // Images: the same [C, H, W], not only the same count (a CNN's convolutions read the shape:
  // 14x56 against 28x28 would evaluate on scrambled images).
  if (eval.image != train.image && !eval.image.empty() && !train.image.empty()) {
    const auto dims = [](const std::vector<int64_t>& s) {
      std::string t;
      for (int64_t d : s) {
        if (!t.empty()) t += 'x';
        t += std::to_string(d);
      }
      return t;
    };
    throw Error{ErrorKind::input, "data.eval holds images of " + dims(eval.image) +
                                      " (channels x height x width) and data.train of " +
                                      dims(train.image) + names};
  }
  if (eval.task == Task::regression) {
    if (eval.targets != train.targets) {
      throw Error{ErrorKind::input, "data.eval has " + std::to_string(eval.targets) +
                                        " targets and data.train " + std::to_string(train.targets) +
                                        names};
    }
    return;
  }
  for (size_t i = 0; i < eval.labels.size(); ++i) {
    if (eval.labels[i] >= train.classes) {
      throw Error{ErrorKind::input, eval.origin + ": sample " + std::to_string(i) + ": label " +
                                        std::to_string(eval.labels[i]) +
                                        " is out of range for the " +
                                        std::to_string(train.classes) + " classes of data.train (" +
                                        train.origin + ")"};
    }
  }
  eval.classes = train.classes;
}

}  // namespace

Dataset load_source(const SourceOptions& source, uint64_t seed, Role role) {
  Dataset out;
  switch (source.source) {
    case SourceKind::synthetic:
      out = make_synthetic(source, seed, role);
      break;
    case SourceKind::idx:
      out = load_idx(source.images, source.labels);
      break;
    case SourceKind::fashion_mnist:
      out = load_fashion_mnist(source.dir, source.split);
      break;
    case SourceKind::csv:
      out = load_csv(source.path, source.task, source.label_column, source.header);
      break;
    case SourceKind::split:
      throw Error{ErrorKind::invalid_argument,
                  "load_source: {split_fraction} is not a source (load_data applies it)"};
    case SourceKind::text:
    case SourceKind::tokens:
      throw Error{ErrorKind::invalid_argument,
                  "load_source: text and tokens are language-model data (data/lm.h)"};
  }
  check_dataset(out);
  return out;
}

DataSplit load_data(const DataOptions& options, uint64_t seed) {
  return load_data(options, seed, std::nullopt);
}

DataSplit load_data(const DataOptions& options, uint64_t seed,
                    const std::optional<Normalization>& saved) {
  DataSplit out;
  out.train = load_source(options.train, seed, Role::train);
  if (out.train.task == Task::classification && out.train.classes < 2) {
    throw Error{ErrorKind::input, out.train.origin + ": every label is " +
                                      std::to_string(out.train.classes - 1) +
                                      "; classification needs at least 2 classes"};
  }
  if (options.eval && options.eval->source == SourceKind::split) {
    out = split_off(out.train, options.eval->split_fraction, seed);
  } else if (options.eval) {
    out.eval = load_source(*options.eval, seed, Role::eval);
    check_compatible(out.train, *out.eval);
  }
  for (const SourceOptions& more : options.more_eval) {
    out.more_eval.push_back(load_source(more, seed, Role::eval));
    check_compatible(out.train, out.more_eval.back());
  }
  if (options.normalize && saved) {
    if (static_cast<int64_t>(saved->mean.size()) != out.train.features ||
        saved->pixels != out.train.pixels) {
      throw Error{ErrorKind::input,
                  "the saved input statistics (data.normalize) are for " +
                      std::to_string(saved->mean.size()) +
                      (saved->pixels ? " pixel features" : " features") + ", " + out.train.origin +
                      " has " + std::to_string(out.train.features) +
                      (out.train.pixels ? " pixel features" : " features"),
                  "use data of the shape the weights were trained on"};
    }
    out.normalization = saved;
    apply_normalization(*out.normalization, out.train);
    if (out.eval) apply_normalization(*out.normalization, *out.eval);
    for (Dataset& d : out.more_eval) apply_normalization(*out.normalization, d);
  } else if (options.normalize) {
    out.normalization = compute_normalization(out.train);
    apply_normalization(*out.normalization, out.train);
    if (out.eval) apply_normalization(*out.normalization, *out.eval);
    for (Dataset& d : out.more_eval) apply_normalization(*out.normalization, d);
  }
  return out;
}

int64_t split_eval_count(int64_t samples, double fraction) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    throw Error{ErrorKind::config,
                "data.eval.split_fraction must be in (0, 1), got " + fmt(fraction)};
  }
  const int64_t held_out =
      std::max<int64_t>(1, std::llround(fraction * static_cast<double>(samples)));
  if (held_out >= samples) {
    throw Error{ErrorKind::config,
                "data.eval.split_fraction " + fmt(fraction) + " holds out " +
                    std::to_string(held_out) + " of the " + std::to_string(samples) +
                    " samples of data.train, leaving none to train on",
                "use a smaller fraction or more data"};
  }
  return held_out;
}

DataSplit split_off(const Dataset& all, double fraction, uint64_t seed) {
  const int64_t n = all.size();
  const int64_t held_out = split_eval_count(n, fraction);
  std::vector<int64_t> order(static_cast<size_t>(n));
  seeded_permutation(seed, DataStream::split, 0, order);
  std::vector<int64_t> train_rows(order.begin(), order.end() - held_out);
  std::vector<int64_t> eval_rows(order.end() - held_out, order.end());
  std::sort(train_rows.begin(), train_rows.end());
  std::sort(eval_rows.begin(), eval_rows.end());
  DataSplit out;
  out.train = subset(all, train_rows, all.origin);
  out.eval =
      subset(all, eval_rows, all.origin + " (held out: split_fraction " + fmt(fraction) + ")");
  return out;
}

Normalization compute_normalization(const Dataset& train) {
  const auto f = static_cast<size_t>(train.features);
  const int64_t n = train.size();
  const double pixel = train.pixels ? 255.0 : 1.0;
  Normalization stats;
  stats.pixels = train.pixels;
  stats.mean.assign(f, 0.0);
  stats.std.assign(f, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if ((i & 1023) == 0) check_stop("normalising the data");
    const float* row = train.x.data() + static_cast<size_t>(i) * f;
    for (size_t j = 0; j < f; ++j) stats.mean[j] += row[j] / pixel;
  }
  for (double& m : stats.mean) m /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = train.x.data() + static_cast<size_t>(i) * f;
    for (size_t j = 0; j < f; ++j) {
      const double d = row[j] / pixel - stats.mean[j];
      stats.std[j] += d * d;
    }
  }
  for (double& s : stats.std) s = std::sqrt(s / static_cast<double>(n));
  return stats;
}

void apply_normalization(const Normalization& stats, Dataset& data) {
  const auto f = static_cast<size_t>(data.features);
  if (stats.mean.size() != f || stats.std.size() != f) {
    throw Error{ErrorKind::invalid_argument, "apply_normalization: statistics for " +
                                                 std::to_string(stats.mean.size()) + " features, " +
                                                 data.origin + " has " + std::to_string(f)};
  }
  const double pixel = data.pixels ? 255.0 : 1.0;
  std::vector<double> divisor(f);
  for (size_t j = 0; j < f; ++j) divisor[j] = stats.divisor(static_cast<int64_t>(j));
  const int64_t n = data.size();
  for (int64_t i = 0; i < n; ++i) {
    if ((i & 1023) == 0) check_stop("normalising the data");
    float* row = data.x.data() + static_cast<size_t>(i) * f;
    for (size_t j = 0; j < f; ++j) {
      const double raw = row[j];
      const auto v = static_cast<float>((raw / pixel - stats.mean[j]) / divisor[j]);
      if (!std::isfinite(v)) {
        throw Error{ErrorKind::input, data.origin + ": sample " + std::to_string(i) + ": feature " +
                                          std::to_string(j) + " (" + fmt(raw) +
                                          ") overflows float after normalisation (training "
                                          "mean " +
                                          fmt(stats.mean[j]) + ", std " + fmt(stats.std[j]) + ")"};
      }
      row[j] = v;
    }
  }
  data.pixels = false;
}

void check_dataset(const Dataset& data) {
  const auto fail = [&](const std::string& what) {
    throw Error{ErrorKind::input, data.origin + ": " + what};
  };
  if (data.features < 1) fail("no features");
  const int64_t n = data.size();
  if (static_cast<int64_t>(data.x.size()) != n * data.features) {
    fail("x holds " + std::to_string(data.x.size()) + " values, not a multiple of " +
         std::to_string(data.features) + " features");
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* row = data.x.data() + i * data.features;
    for (int64_t j = 0; j < data.features; ++j) {
      if (!std::isfinite(row[j])) {
        fail("sample " + std::to_string(i) + ": feature " + std::to_string(j) + " is not finite (" +
             fmt(row[j]) + ")");
      }
    }
  }
  if (data.task == Task::classification) {
    if (static_cast<int64_t>(data.labels.size()) != n) {
      fail(std::to_string(data.labels.size()) + " labels for " + std::to_string(n) + " samples");
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t label = data.labels[static_cast<size_t>(i)];
      if (label < 0 || label >= data.classes) {
        fail("sample " + std::to_string(i) + ": label " + std::to_string(label) +
             " is out of range [0, " + std::to_string(data.classes) + ")");
      }
    }
    return;
  }
  if (data.targets < 1 || static_cast<int64_t>(data.y.size()) != n * data.targets) {
    fail(std::to_string(data.y.size()) + " target values for " + std::to_string(n) +
         " samples of " + std::to_string(data.targets));
  }
  for (size_t i = 0; i < data.y.size(); ++i) {
    if (!std::isfinite(data.y[i])) {
      fail("sample " + std::to_string(i / static_cast<size_t>(data.targets)) +
           ": target is not finite (" + fmt(data.y[i]) + ")");
    }
  }
}

void gather(const Dataset& data, const int64_t* rows, int64_t count, float* x, int32_t* labels,
            float* y) {
  const auto f = static_cast<size_t>(data.features);
  const auto t = static_cast<size_t>(data.targets);
  for (int64_t r = 0; r < count; ++r) {
    const auto i = static_cast<size_t>(rows[r]);
    const auto o = static_cast<size_t>(r);
    if (x != nullptr) std::memcpy(x + o * f, data.x.data() + i * f, f * sizeof(float));
    if (labels != nullptr && !data.labels.empty()) labels[o] = data.labels[i];
    if (y != nullptr && !data.y.empty())
      std::memcpy(y + o * t, data.y.data() + i * t, t * sizeof(float));
  }
}

}  // namespace ampctl::data
