// Trainer: `ampctl train`'s loop, in PyTorch's order for every optimizer iteration:
//   zero_grad -> for each micro-batch: forward, loss (seeded with the loss scale: the scaled
//   loss's backward), backward -> [debug injection] -> [unscale_, clip_grad_norm_] ->
//   scaler.step -> scaler.update -> the lr of the next iteration.
//
// Everything a step needs is allocated in begin(), before the first step. The per-step metrics
// (loss, the scale the backward used, found_inf, the trackers after update, and which parameter
// tensors held non-finite gradients) are copied on the device into ring buffers and read back at
// logging intervals, so a GPU step has no host sync; the host then writes metrics.jsonl lines and
// console lines for the steps it read.
//
// Overflow attribution: with loss scaling on, the scaler's one unscale / check pass over the flat
// gradient arena also records, per parameter tensor (one segment of the arena each), whether it
// held an inf or NaN (GradScaler::set_grad_segments). Metrics lines of overflowing steps carry
// `overflow_tensors` (the parameter names, as in checkpoints); summary.json carries
// `overflow_counts` {name: overflowing steps} and `most_overflowing` (names, most first).
//
// Divergence (training.divergence_patience = P > 0; 0 turns all of this off). The run has
// diverged, with nothing left to do, at step k when
//   * overflow at the floor: steps k-P+1..k all overflowed (found_inf) while the scale their
//     backward used was at its floor: scaler.min_scale when that is > 0, else 2^-126 (FLT_MIN,
//     the smallest normal float: below it the scale is subnormal and its inverse, the unscale
//     factor, is about to overflow to inf, so no backoff can help any more); or
//   * non-finite loss: steps k-P+1..k all had a non-finite training loss (any precision, with or
//     without a scaler); or
//   * non-finite parameters: a checkpoint is due after step k and the f32 master parameters hold
//     an inf or NaN (the state is lost; writing it would rotate a good checkpoint out).
// The rules are checked on the host when the metrics ring is read back: every logging.every_steps
// steps (at most 1024), before each evaluation and checkpoint, and at the end. So the GPU step
// keeps no host sync, and a divergence is detected up to logging.every_steps - 1 steps after the
// step k where it happened (those steps have run; their metrics are written).
// Then the trainer stops: if the parameters are finite (every update applied had finite
// gradients, and a skipped step changes nothing) it writes a checkpoint of the current state,
// the last good one; otherwise it writes none, so checkpoints/latest keeps naming the newest
// periodic checkpoint (finite by the third rule) and nothing is pruned. It writes summary.json
// with "status": "diverged" and a "divergence" object (step, detected_at_step, reason, tensors,
// checkpoint, message), and throws Error{runtime} (exit 1) naming the step and the tensors: the
// ones that overflowed during the streak, else those whose parameters are non-finite.
// A run that finishes writes "status": "ok".
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ampctl/config/run_config.h"
#include "ampctl/core/tensor.h"
#include "ampctl/data/dataset.h"

namespace ampctl {
class Backend;
namespace amp {
class GradScaler;
}
namespace checkpoint {
struct CheckpointData;
}
namespace data {
class DataLoader;
}
namespace nn {
class Model;
}
namespace optim {
class Optimizer;
class LrSchedule;
}  // namespace optim
}  // namespace ampctl

namespace ampctl::train {

struct TrainOutcome {
  nlohmann::json summary;  // what summary.json holds
};

class Trainer {
 public:
  Trainer(const config::RunConfig& config, const std::filesystem::path& run_dir);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Creates the run directory and config.yaml, loads the data, builds the model, optimizer,
  // scaler and every buffer a step needs, and opens metrics.jsonl.
  void begin();
  bool done() const;
  // One optimizer iteration (plus the metrics flush and evaluation when they are due).
  void step();
  // Final flush and evaluation; writes summary.json.
  TrainOutcome finish();
  TrainOutcome run();  // begin, step until done, finish

  // Instead of begin(): continues the run in the run directory from `ckpt` (its step k must be
  // <= training.max_steps). Rewrites config.yaml with this trainer's configuration, builds
  // everything as begin() does, then restores the parameters (and the lowp copy), optimizer
  // state, scaler state, data cursor, dropout RNG and the summary's accumulators, drops the lines
  // of metrics.jsonl with step > k (a run that died after the checkpoint) and appends from there.
  // The next step is k + 1. Throws Error{input} when the checkpoint does not fit the model or
  // optimizer (a tensor's name, dtype or shape), Error{config} when max_steps < k.
  void resume(const checkpoint::CheckpointData& ckpt);

  // Flushes the pending metrics and returns the complete training state after the last step
  // run (call between steps).
  checkpoint::CheckpointData checkpoint_data();
  // checkpoint_data() written atomically to RUN_DIR/checkpoints (keep_last applied). Training
  // writes one every checkpoint.every_steps steps and one at the end.
  std::filesystem::path write_checkpoint();

  // For tests and tools.
  int64_t next_step() const { return m_next_step; }
  // The parameter tensors' names in the gradient arena's order (what overflow_tensors names).
  const std::vector<std::string>& param_names() const { return m_param_names; }
  Backend& backend() const { return *m_backend; }
  nn::Model& model() const { return *m_model; }
  optim::Optimizer& optimizer() const { return *m_opt; }
  amp::GradScaler& scaler() const { return *m_scaler; }

 private:
  // Per-step values kept on the device until the next flush.
  struct StepRing {
    static constexpr int kF = 3;  // loss, scale used by the backward, found_inf
    static constexpr int kI = 2;  // growth tracker and hysteresis tracker after update
    Tensor f, i;
    int64_t capacity = 0;
    // i32 [capacity, segments]: which parameter tensors held an inf or NaN (scaling only).
    Tensor seg;
    int64_t segments = 0;
    std::vector<float> host_f;
    std::vector<int32_t> host_i;
    std::vector<int32_t> host_seg;
    struct HostInfo {
      int64_t step;
      double lr;
      double time_s;
    };
    std::vector<HostInfo> info;  // reserved to capacity: no allocation per step
  };

  // A run of consecutive steps that satisfy one divergence rule, with how often each parameter
  // tensor overflowed during it.
  struct Streak {
    int64_t length = 0;
    int64_t first_step = 0;
    std::vector<int64_t> counts;                      // per parameter tensor
    void extend(int64_t step, const int32_t* flags);  // flags: per tensor, or nullptr
    void reset();
  };
  struct Divergence {
    int64_t step = 0;         // the step at which a rule was met
    int64_t detected_at = 0;  // the last step run when the host saw it
    std::string reason;       // overflow_at_scale_floor | nonfinite_loss | nonfinite_parameters
    std::string what;         // the rule, in words
    std::vector<std::string> tensors;
  };

  // A data set as backend tensors (labels for classification, y for regression).
  struct Resident {
    Tensor x, labels, y;
  };
  static Resident resident(Backend& b, const data::Dataset& d);
  void upload_order();
  void setup();
  void train_step(int64_t step);
  void flush();
  nlohmann::json evaluate(int64_t step);
  void restore(const checkpoint::CheckpointData& ckpt);
  void truncate_metrics(int64_t last_step);
  // Writes a checkpoint after the last step run and throws Error{interrupted} (signals.h).
  [[noreturn]] void stop(int signo);
  // flush(), then diverge() when a divergence rule has been met.
  void flush_and_check();
  // Stops a diverged run (see the top of this file): checkpoint when the state is good,
  // summary.json, Error{runtime}.
  [[noreturn]] void diverge();
  // The parameter tensors whose elements in `arena` (params or grads) are not all finite. Reads
  // the device: for the rare paths only.
  std::vector<std::string> nonfinite_tensors(const Tensor& arena);
  // Names with a count > 0, most first (ties in arena order).
  std::vector<std::string> ranked(const std::vector<int64_t>& counts) const;
  nlohmann::json summary_json(const std::string& status) const;
  void write_summary(const nlohmann::json& summary) const;
  // "most overflowing: NAME (N steps), ..." on the console, when any tensor overflowed.
  void log_most_overflowing() const;
  void check_metrics_stream();
  // logging.profile: closes the current phase of a step (waiting for the device first, so the
  // time is the phase's own) and opens the next. A no-op when profiling is off.
  enum Phase { kData, kForward, kBackward, kUnscale, kOptimizer, kUpdate, kMetrics, kPhases };
  void phase_end(Phase phase);
  nlohmann::json phase_json() const;

  const config::RunConfig m_cfg;  // a copy: the trainer outlives any caller temporary
  std::filesystem::path m_run_dir;
  std::chrono::steady_clock::time_point m_t0;
  int64_t m_next_step = 1;
  std::optional<int64_t> m_resumed_at;  // the checkpoint's step, when resumed
  int64_t m_last_checkpoint = -1;       // the step of the last checkpoint written
  // A signal cut the evaluation of the last step short: the checkpoint says so and resume runs
  // that evaluation first.
  bool m_eval_pending = false;

  std::string m_device;
  std::unique_ptr<Backend> m_backend;
  data::DataSplit m_data;
  std::unique_ptr<data::DataLoader> m_loader;
  std::unique_ptr<nn::Model> m_model;
  std::unique_ptr<optim::Optimizer> m_opt;
  std::unique_ptr<amp::GradScaler> m_scaler;
  std::unique_ptr<optim::LrSchedule> m_schedule;
  bool m_classification = true;
  int64_t m_features = 0, m_outputs = 0, m_batch = 0;

  // The resident data sets, the epoch's order (host staging + backend copy) and one batch.
  Resident m_train_dev, m_eval_dev;
  std::vector<int32_t> m_order_host;
  Tensor m_order_dev;
  Tensor m_x, m_labels, m_y;
  Tensor m_loss, m_loss_acc, m_ones, m_seed, m_accum_inv, m_norm, m_coef, m_zero_f;
  std::set<int64_t> m_inject;
  Tensor m_inject_at;  // the gradient element debug injection poisons

  // Overflow attribution and divergence (see the top of this file).
  std::vector<std::string> m_param_names;
  std::vector<int64_t> m_overflow_counts;  // overflowing steps per parameter tensor
  float m_scale_floor = 0.0f;
  Streak m_floor_streak, m_loss_streak;
  std::optional<Divergence> m_divergence;
  bool m_diverging = false;

  StepRing m_ring;
  std::ofstream m_metrics;

  // Running outcome, updated at each flush.
  int64_t m_steps_done = 0, m_skipped = 0, m_samples = 0;
  double m_final_loss = 0, m_best_loss = 0;
  double m_final_scale = 1.0, m_min_scale = 0, m_max_scale = 0;
  double m_train_seconds = 0, m_eval_seconds = 0;
  bool m_steady = false;  // past the first logging interval
  double m_steady_seconds = 0;
  int64_t m_steady_samples = 0;
  // logging.profile: seconds per phase over the steady-state steps (m_phase_steps of them).
  bool m_profile = false;
  bool m_phase_counting = false;  // this step is a steady-state one
  std::chrono::steady_clock::time_point m_phase_t;
  double m_phase_seconds[kPhases] = {};
  int64_t m_phase_steps = 0;
  nlohmann::json m_last_eval;
  std::optional<double> m_best_eval_loss;
  std::optional<double> m_best_eval_acc;
};

// Picks the backend for `device` ("auto", "cpu", "cuda", "cuda:N"): "cpu" or "cuda:N". Throws
// Error{config} with a hint when CUDA is asked for and not compiled in or no such GPU is usable.
std::string resolve_device(const std::string& device);

// Trains `config` in `run_dir` (created; config.yaml, metrics.jsonl and summary.json written
// there). Throws ampctl::Error on failure.
TrainOutcome train(const config::RunConfig& config, const std::filesystem::path& run_dir);

// The run directory for a config: `requested` when given (it must not hold a previous run), else
// runs/<name>, or runs/<name>-2, -3, ... when that already holds one.
std::filesystem::path choose_run_dir(const config::RunConfig& config,
                                     const std::filesystem::path& requested);

}  // namespace ampctl::train
