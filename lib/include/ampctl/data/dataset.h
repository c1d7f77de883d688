// Dataset: a whole data set in host memory, as the sources produce it and the DataLoader serves
// it; load_data turns data.train / data.eval (docs/reference.md, "Configuration") into the
// normalised pair.
//
// Invariants of a Dataset returned by this module: features >= 1; x holds size() rows of
// `features` floats, row-major; every value in x and y is finite.
//   classification: labels holds size() values in [0, classes); classes >= 1; y is empty and
//                   targets is 0.
//   regression:     y holds size() rows of `targets` floats; labels is empty and classes is 0.
// Bad input of any kind is reported as Error{input} (a data file) or Error{config} (a setting
// that cannot be met by the data), naming the file or key and the problem; nothing here aborts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/data/options.h"

namespace ampctl::data {

struct Dataset {
  Task task = Task::classification;
  int64_t features = 0;
  int64_t classes = 0;  // classification: labels are in [0, classes); 0 for regression
  int64_t targets = 0;  // regression: width of a target row (1 for csv and synthetic)
  std::vector<float> x;
  std::vector<int32_t> labels;
  std::vector<float> y;
  bool pixels = false;  // x holds 0..255 intensities (idx, fashion_mnist): normalising divides
                        // by 255 first
  std::string origin;   // where the samples came from, for messages ("data.csv", "synthetic")
  // Image sources (idx, fashion_mnist): each row is one image [C, H, W] (row-major, C*H*W ==
  // features); empty for feature rows. What a cnn needs; an MLP reads the same rows flat.
  std::vector<int64_t> image;

  int64_t size() const { return features > 0 ? static_cast<int64_t>(x.size()) / features : 0; }
};

// Which part a source provides: only synthetic sources care (train and eval draw different
// samples of the same distribution).
enum class Role { train, eval };

// Per-feature statistics of the training set, applied to every set: x' = (x * s - mean) / d
// with s = 1/255 for pixel data (else 1) and d = std, or d = 1 where std < kMinStd (a feature
// that is constant in the training set is only centred: dividing by a tiny std would turn an
// eval value that differs into something huge, far beyond fp16's 65504).
struct Normalization {
  static constexpr double kMinStd = 1e-6;
  std::vector<double> mean;  // of x * s over the training samples
  std::vector<double> std;   // population std (divides by N, as torchvision and sklearn do)
  bool pixels = false;       // made from pixel data: applied to x / 255

  double divisor(int64_t feature) const {
    const double s = std[static_cast<size_t>(feature)];
    return s < kMinStd ? 1.0 : s;
  }
};

struct DataSplit {
  Dataset train;
  std::optional<Dataset> eval;
  std::vector<Dataset> more_eval;  // data.eval's further named sets (DataOptions::more_eval)
  std::optional<Normalization> normalization;  // set when data.normalize
};

// One source, as stored (not normalised). `seed` drives synthetic sources; `role` picks their
// sample stream. SourceKind::split is not a source (it is handled by load_data).
Dataset load_source(const SourceOptions& source, uint64_t seed, Role role);

// data.train and data.eval, checked against each other (same task and features; eval labels
// within the training classes, whose count the eval set then takes), the split applied and
// everything normalised with the training part's statistics when data.normalize is set.
DataSplit load_data(const DataOptions& options, uint64_t seed);
// The same with statistics saved by an earlier run (a checkpoint's, an export's) instead of
// computed ones, when options.normalize: resume, evaluation and --init-from feed the model
// what it was trained on. Throws Error{input} when they do not fit the data (another feature
// count, or pixel statistics for non-pixel data and back).
DataSplit load_data(const DataOptions& options, uint64_t seed,
                    const std::optional<Normalization>& saved);

// {split_fraction: f}: how many of `samples` are held out: f * samples rounded to nearest
// (halves up), at least 1. Throws Error{config} when that leaves no training sample.
int64_t split_eval_count(int64_t samples, double fraction);

// Holds out split_eval_count(size, fraction) samples: the LAST ones of a seeded permutation of
// all samples (DataStream::split). Each part keeps the samples in their original order, so an
// unshuffled loader still walks the file's order.
DataSplit split_off(const Dataset& all, double fraction, uint64_t seed);

// Statistics over `train` (in double, each feature summed in sample order; two passes: mean,
// then the mean squared deviation).
Normalization compute_normalization(const Dataset& train);

// Applies `stats` to `data` in place: computed in double and rounded once to float; afterwards
// data.pixels is false (the /255 is done). Throws Error{input} naming the sample when a result
// is not finite (a value far outside the training range overflowing float).
void apply_normalization(const Normalization& stats, Dataset& data);

// Throws Error{input} "<origin>: sample I: feature J is not finite (nan)" (or target, or label
// out of range) for the first sample that breaks the invariants above.
void check_dataset(const Dataset& data);

// Copies samples rows[0..count) of `data` into caller-owned buffers (x: count * features, labels:
// count, y: count * targets); a null buffer is skipped. Allocates nothing.
void gather(const Dataset& data, const int64_t* rows, int64_t count, float* x, int32_t* labels,
            float* y);

}  // namespace ampctl::data
