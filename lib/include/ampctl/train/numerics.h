// Gradient numerics on the training side (logging.numerics_every; docs/reference.md "Gradient
// numerics"): which steps are sampled, the read-back of the counters nn::GradNumerics filled,
// the numerics line of metrics.jsonl, the console warning, and what summary.json says over the
// run's samples (the worst-underflowing tensors and the scale advice).
//
// Scale advice. A sample at scale s holds, besides the counts, a histogram of ceil(log2 |x|) of
// the values before each rounding (math/numerics_math.h). Had the scale been s * 2^k, a value x
// would have been x * 2^k before the rounding (scaling by a power of two is exact, and to first
// order the gradients are linear in the scale), so
//   * the underflow at s * 2^k is the histogram's mass at bins <= zero_limit - k (exact for the
//     same pre-rounding values: tested against a brute-force recount), and
//   * no rounding overflows while k <= floor(min over tensors of headroom_log2).
// A sample allows k in [k_lo, k_hi]: k_lo the least k with underflow < 1 % of the values, k_hi
// from the headroom (no bound when no tensor had a finite non-zero value). The run's advice is
// the intersection of the samples' scale ranges [s * 2^k_lo, s * 2^k_hi]: {min, max}, null where
// unbounded, and both null with a "note" when the samples admit no common scale.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/core/tensor.h"
#include "ampctl/math/numerics_math.h"

namespace ampctl {
class Backend;
namespace amp {
class GradScaler;
}
namespace nn {
class GradNumerics;
}
}  // namespace ampctl

namespace ampctl::train {

inline constexpr double kAdviceUnderflowFrac = 0.01;  // "< 1 % underflow"
inline constexpr double kWarnUnderflowFrac = 0.01;    // the console warning's threshold

// Half the smallest subnormal (log2) of a lowp dtype (its largest finite value: core/tensor.h,
// max_finite).
int zero_limit_log2(DType lowp);

// One sampled step, summed per parameter tensor (numerics::kWidth counters each).
struct NumericsSample {
  int64_t step = 0;
  double scale = 1;
  DType lowp = DType::f16;
  std::vector<std::string> names;
  std::vector<int64_t> counters;  // names.size() * kWidth

  const int64_t* row(size_t t) const { return counters.data() + t * numerics::kWidth; }
  int64_t total(numerics::Counter c) const;
  // Values finite and non-zero before their rounding (the histogram's mass) of tensor t / all:
  // the denominator of the underflow fractions (zeros before a rounding, the consequence of an
  // underflow upstream or of a dead unit, cannot be lost).
  int64_t nonzero(size_t t) const;
  int64_t nonzero() const;
  double underflow_frac() const;  // underflow / nonzero (0 when nothing was non-zero)
  // log2(max_finite / max |x|) of tensor t; nullopt when it had no finite non-zero value.
  std::optional<double> headroom_log2(size_t t) const;
  std::optional<double> min_headroom_log2() const;
  // Values that would underflow had every value been multiplied by 2^k (k = 0: the counted
  // underflow, up to values that were non-finite before the rounding).
  int64_t underflow_at_shift(int k) const;
  // The sample's allowed shifts [k_lo, k_hi] (nullopt: unbounded); nullopt when nothing counted.
  struct Shifts {
    int lo = 0;
    std::optional<int> hi;
  };
  std::optional<Shifts> allowed_shifts() const;
};

// The metrics.jsonl line of a sample (run/numerics.h names the fields).
nlohmann::json numerics_line(const NumericsSample& sample);

// What summary.json holds over the samples: accumulated sample by sample.
class NumericsSummary {
 public:
  void add(const NumericsSample& sample);
  int64_t samples() const { return m_samples; }
  // {"samples", "values", "underflow", "underflow_frac", "min_headroom_log2", "worst_underflow":
  // [{"tensor", "underflow", "values", "underflow_frac"}, ...]} (at most 5, underflow > 0).
  nlohmann::json numerics_json() const;
  // {"min", "max"} (null: unbounded), or both null with a "note".
  nlohmann::json advice_json() const;

 private:
  int64_t m_samples = 0, m_values = 0, m_nonzero = 0, m_underflow = 0;
  double m_frac_sum = 0;  // of the samples' underflow_frac
  std::optional<double> m_min_headroom;
  std::vector<std::string> m_names;
  std::vector<int64_t> m_tensor_values, m_tensor_nonzero, m_tensor_underflow;
  int64_t m_advised = 0;             // samples that constrained the advice
  std::optional<double> m_lo, m_hi;  // the intersection so far (hi nullopt: unbounded)
  bool m_empty = false;              // some sample admitted no scale, or the ranges do not meet
};

// The console warning of a sample whose underflow passes kWarnUnderflowFrac, or "".
std::string underflow_warning(const NumericsSample& sample);

// The per-run side: sampling, the read-back and the summary. Made by the trainer when
// logging.numerics_every > 0 in fp16/bf16 (the model then has its GradNumerics).
class NumericsRecorder {
 public:
  NumericsRecorder(Backend& backend, nn::GradNumerics& numerics, const amp::GradScaler& scaler,
                   std::vector<std::string> names, int64_t every);

  bool sampled(int64_t step) const { return m_every > 0 && step % m_every == 0; }
  // Inside the step (device ops only): before the first backward / after the last.
  void begin();
  void end();
  // After a sampled step: reads the counters and the scale its backward used back (one sync).
  const NumericsSample& read(int64_t step);
  NumericsSummary& summary() { return m_summary; }
  const NumericsSummary& summary() const { return m_summary; }

 private:
  Backend* m_backend;
  nn::GradNumerics* m_numerics;
  const amp::GradScaler* m_scaler;
  int64_t m_every;
  Tensor m_scale;  // f32[1]: the scale of the sampled step's backward
  NumericsSample m_sample;
  NumericsSummary m_summary;
};

}  // namespace ampctl::train
