// Monitor: what a run reports and watches while it trains, kept apart from the step.
//
// * The device metrics ring. Per step, loss, the scale the backward used, found_inf, the
//   scaler's trackers after update and which parameter tensors held non-finite gradients are
//   copied on the device into ring buffers (the scaler writes its own values: GradScaler::
//   record_scale / record_update) and read back at logging intervals, so a GPU step has no host
//   sync; flush() then writes the metrics.jsonl lines and the console line of the steps it read.
// * Console lines and the ETA; the running totals a summary and a checkpoint hold (RunTotals).
// * Overflow attribution: per parameter tensor, how many steps overflowed in it.
// * The divergence rules (trainer.h), checked step by step in order at each flush; a rule met
//   is left in divergence() for the loop, which stops the run; so is an overflow at
//   scaler.min_scale with scaler.on_min_scale: stop.
// * A console warning, once per run, at the first step whose scale is below 1.
// * logging.profile: the split of a step's time by phase (phase_end waits for the device).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/core/tensor.h"
#include "ampctl/run/checkpoint_metrics.h"
#include "ampctl/run/tensorboard.h"
#include "ampctl/run/totals.h"

namespace ampctl {
class Backend;
namespace amp {
class GradScaler;
}
namespace optim {
class Optimizer;
}
}  // namespace ampctl

namespace ampctl::train {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0);
// "a, b, c" for at most `max` names, then "and N more".
std::string join_names(const std::vector<std::string>& names, size_t max = 8);

// The phases logging.profile times, in step order.
enum Phase { kData, kForward, kBackward, kUnscale, kOptimizer, kUpdate, kMetrics, kPhases };

// The best evaluation so far by one metric (checkpoint.keep_best, training.early_stop): "eval_loss"
// or "eval.NAME.loss" (lower is better; a non-finite loss never improves) or "eval_accuracy"
// (higher is better). An evaluation improves on the best when it beats it by more than min_delta
// (Keras's EarlyStopping); the first one always does.
struct MetricTracker {
  std::string metric;  // "" = off; "eval.NAME.loss" / "eval.NAME.accuracy": a named set's
  size_t set = 0;      // the evaluation set it reads (0: the first; i: record_eval's more[i - 1])
  double min_delta = 0;
  std::optional<double> best;
  int64_t best_step = 0;
  int64_t since = 0;  // evaluations since the best

  bool active() const { return !metric.empty(); }
  // Records the evaluation at `step`; true when it is the new best.
  bool update(int64_t step, double loss, std::optional<double> accuracy);
  nlohmann::json to_json() const;
  // A checkpoint's record of the same metric (another metric's, or none: starts afresh).
  void restore(const nlohmann::json& j);
};

struct MonitorOptions {
  int64_t max_steps = 1;
  int64_t metrics_every = 1;  // logging.metrics_every
  int64_t ring_steps = 1;     // logging.every_steps: steps between read-backs (<= 1024)
  // logging.every_steps: the console line comes at its multiples (and the last step), whatever
  // other read-backs (before an evaluation or a checkpoint) happen in between.
  int64_t console_every = 1;
  int64_t divergence_patience = 0;  // 0: no divergence rule
  double min_scale = 0;             // scaler.min_scale (the floor; 0: 2^-126)
  // scaler.on_min_scale: stop: an overflow at a step whose scale was already at min_scale (> 0)
  // is a divergence (reason overflow_at_min_scale), whatever divergence_patience says.
  bool stop_at_min_scale = false;
  // scaler.on_overflow: retry (with loss scaling): TensorBoard gets amp/retries at every logged
  // step and the console line the run's retries so far.
  bool retry = false;
  bool profile = false;
  // Language models: tokens per sample (block_size): the console adds tokens/s and eval lines
  // perplexity. 0 for other data.
  int64_t tokens_per_sample = 0;
  // training.grad_clip_norm: a step whose grad_norm it clipped counts in totals().clipped.
  std::optional<double> grad_clip_norm;
  // grad_amax (docs/reference.md): the lowp dtype the measured roundings go to, unset when the
  // model's backward is not measured (fp32, or a model whose roundings are not instrumented);
  // grad_accum: micro-batches per rank, the seed's divisor (scale / grad_accum).
  std::optional<DType> grad_amax;
  int64_t grad_accum = 1;
  Clock::time_point start = Clock::now();  // when the run started (time_s counts from it)
  // Examples in one pass over the training data (a language model's: its tokens /
  // tokens_per_sample): the console's epoch, the passes so far. 0: no epoch shown.
  double epoch_samples = 0;
  // `--log-format json`: each console line becomes its step's metrics line (the same JSON
  // object metrics.jsonl holds), written to this stream, and each evaluation's line too; null:
  // the text lines (spdlog).
  std::FILE* json_console = nullptr;
  // checkpoint.keep_best and training.early_stop (metric "" = off).
  std::string keep_best;
  std::string early_stop;
  size_t keep_best_set = 0, early_stop_set = 0;  // the sets they read (MetricTracker::set)
  // data.eval's map form: the first set's name (its eval line says "set": NAME); "": the single
  // form, whose line is as it always was.
  std::string eval_set_name;
  double early_stop_min_delta = 0;
};

// The running outcome of a run (summary.json and the checkpoint carry it: run/totals.h).
using RunTotals = run::Totals;

// A run of consecutive steps that satisfy one divergence rule, with how often each parameter
// tensor overflowed during it (what a checkpoint keeps of it: run::StreakRecord).
struct Streak : run::StreakRecord {
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

class Monitor {
 public:
  // `layout`: the parameter tensors of the flat arenas, in the gradient arena's order (what
  // overflow attribution and nonfinite_tensors name; copied). Allocates the ring, and cuts the
  // optimizer's gradients into one segment per tensor when the scaler is on and the optimizer
  // holds the one flat gradient arena.
  Monitor(Backend& backend, amp::GradScaler& scaler, optim::Optimizer& optimizer,
          const FlatLayout& layout, const MonitorOptions& options);
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // metrics.jsonl: truncated (a new run) or appended to (a resumed one).
  void open_metrics(const std::filesystem::path& path, bool append);

  // ---- inside the step (device copies only, no host sync, no allocation) ----
  // Before the scaler's update: records the scale this step's backward uses.
  void record_scale(bool first_attempt = true);
  // After the step's norm is computed: records grad_norm (f32[1], the global norm of the
  // unscaled gradients). Call before record_step.
  void record_grad_norm(const Tensor& norm);
  // After the step's amax is reduced over the ranks: records it (f32[numerics::kAmaxWords],
  // nn/numerics.h) when MonitorOptions::grad_amax is set.
  void record_grad_amax(const Tensor& amax);
  // After the update: records the step's loss (f32[1]), the scaler's found_inf, trackers and
  // overflow flags, and the step's lr, `samples` and `retries` (scaler.on_overflow: retry: its
  // failed attempts; a host number, known to the step already).
  void record_step(int64_t step, double lr, const Tensor& loss, int64_t samples,
                   int64_t retries = 0);
  // logging.profile: closes the current phase of a step (waiting for the device first, so the
  // time is the phase's own) and opens the next. A no-op when profiling is off.
  void phase_end(Phase phase);

  // ---- around the step (the loop) ----
  void step_started();
  // Times the step; flushes when the ring is full or `step` is the last (then divergence() may
  // be set).
  void step_finished(int64_t step);
  // Closes the step's metrics phase (after the loop acted on a divergence).
  void step_closed();
  // Reads the ring back: metrics lines, totals, divergence rules, the console line.
  void flush();

  // An evaluation's result: writes its metrics line and console line, updates the best values
  // and returns the line (what summary.json's "eval" holds).
  // `more`: data.eval's further sets, in order; their values join the line as
  // "eval.NAME.loss" / "eval.NAME.accuracy" (docs/reference.md, "Evaluation sets").
  struct SetResult {
    std::string name;
    double loss = 0;
    std::optional<double> accuracy;
  };
  nlohmann::json record_eval(int64_t step, double loss, std::optional<double> accuracy,
                             double seconds, const std::vector<SetResult>& more = {});
  // Time spent in an evaluation cut short by a stop request.
  void add_eval_seconds(double seconds) { m_totals.eval_seconds += seconds; }

  // ---- divergence and attribution ----
  // Whether a rule has been met (or set_divergence called); divergence() is then what.
  bool diverged() const { return m_divergence.has_value(); }
  Divergence& divergence() { return *m_divergence; }
  void set_divergence(Divergence d) { m_divergence = std::move(d); }
  // The parameter tensors whose elements in `arena` (params or grads) are not all finite. Reads
  // the device: for the rare paths only.
  std::vector<std::string> nonfinite_tensors(const Tensor& arena) const;
  // Names with a count > 0, most first (ties in arena order).
  std::vector<std::string> ranked(const std::vector<int64_t>& counts) const;
  // {name: count} for counts > 0 (run::counts_json over this run's parameter names).
  nlohmann::json counts_json(const std::vector<int64_t>& counts) const;
  // "most overflowing: NAME (N steps), ..." on the console, when any tensor overflowed.
  void log_most_overflowing() const;
  // Phase means in ms ({"data": ..., "total": ..., "steps": N}), null without profiling.
  nlohmann::json phase_json() const;
  // The console line of phase_json(), when there is one.
  void log_phases() const;

  // checkpoint.keep_best's and training.early_stop's trackers (record_eval updates them); whether
  // the last evaluation was keep_best's new best.
  MetricTracker& keep_best() { return m_keep_best; }
  MetricTracker& early_stop() { return m_early_stop; }
  bool last_eval_was_best() const { return m_last_eval_best; }
  // The trackers as a checkpoint's metrics.trackers ({} when neither is on), and back.
  nlohmann::json trackers_json() const;
  void restore_trackers(const nlohmann::json& j);

  // ---- state ----
  const std::vector<std::string>& param_names() const { return m_param_names; }
  const std::vector<int64_t>& overflow_counts() const { return m_overflow_counts; }
  std::vector<int64_t>& overflow_counts() { return m_overflow_counts; }
  Streak& floor_streak() { return m_floor_streak; }
  Streak& loss_streak() { return m_loss_streak; }
  const Streak& floor_streak() const { return m_floor_streak; }
  const Streak& loss_streak() const { return m_loss_streak; }
  RunTotals& totals() { return m_totals; }
  const RunTotals& totals() const { return m_totals; }
  int64_t ring_steps() const { return m_ring.capacity; }
  // Seconds since the run started (a resumed run continues its predecessor's clock).
  double elapsed() const { return seconds_since(m_t0); }
  void set_elapsed(double seconds);
  // Whether this process writes metrics.jsonl and console lines (dist: rank 0 only).
  void set_writer(bool on) { m_writer = on; }

  // ---- additions: numerics lines and TensorBoard (docs/reference.md) ----
  // A line for metrics.jsonl written at the next flush, right after the train line of its
  // "step" (the numerics line of a sampled step), or after the flush's train lines without one.
  // Lines are queued in step order.
  void queue_line(nlohmann::json line);
  // logging.tensorboard: the event file the train and eval scalars also go to (rank 0 only).
  void set_tensorboard(std::unique_ptr<run::EventWriter> writer) { m_tb = std::move(writer); }
  run::EventWriter* tensorboard() const { return m_tb.get(); }

 private:
  struct StepRing {
    // loss, scale used by the backward, found_inf, grad_norm, the amax words (max |x| at the
    // step's scale, non-finite flag), the scale of the step's first attempt (with
    // scaler.on_overflow: retry the largest the step used: a retry runs at a backed-off scale)
    static constexpr int kF = 7;
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
      int64_t retries;
    };
    std::vector<HostInfo> info;  // reserved to capacity: no allocation per step
  };
  // One row of the ring as flush() reads it back.
  struct RingRow {
    explicit RingRow(const StepRing::HostInfo& host_info) : info(host_info) {}
    const StepRing::HostInfo& info;
    float loss = 0.0f, scale = 0.0f, grad_norm = 0.0f;
    float first_scale = 0.0f;  // the scale of the step's first attempt
    bool found_inf = false;
    std::optional<double> grad_amax, headroom;  // logging.grad_amax only
    bool amax_exact = true;
    int32_t tracker = 0, hysteresis = 0;
    const int32_t* flags = nullptr;  // the overflow flag of each parameter tensor, or null
  };
  RingRow ring_row(size_t r) const;
  // The run's and the console interval's totals of one step; the names of the tensors that
  // overflowed in it.
  std::vector<std::string> tally(const RingRow& row, bool scaling);
  // The divergence rules (trainer.h) at this step: sets m_divergence when one is met.
  void check_divergence(const RingRow& row, bool scaling,
                        const std::vector<std::string>& overflow_tensors);
  // The step's metrics line (metrics.jsonl, TensorBoard) and/or its JSON console line.
  void write_train_line(const RingRow& row, bool scaling, bool metrics_line, bool json_line,
                        std::vector<std::string> overflow_tensors);
  void check_metrics_stream();
  // Whether `step` gets a console line: logging.every_steps' multiples and the last step.
  bool is_console_step(int64_t step) const;
  // The compact console line of the interval that ends at `step` (docs/reference.md, "Console").
  void log_console_line(int64_t step, double scale) const;
  void write_json_console(const std::string& line) const;

  Backend* m_backend;
  amp::GradScaler* m_scaler;
  optim::Optimizer* m_opt;
  MonitorOptions m_opts;
  FlatLayout m_layout;
  std::vector<std::string> m_param_names;
  float m_scale_floor = 0.0f;
  Clock::time_point m_t0;
  bool m_writer = true;

  StepRing m_ring;
  std::filesystem::path m_metrics_path;
  std::ofstream m_metrics;
  RunTotals m_totals;
  std::vector<int64_t> m_overflow_counts;  // overflowing steps per parameter tensor
  Streak m_floor_streak, m_loss_streak;
  std::optional<Divergence> m_divergence;
  bool m_below_one_warned = false;       // the console warning of a scale below 1, once per run
  std::vector<nlohmann::json> m_queued;  // queue_line
  std::unique_ptr<run::EventWriter> m_tb;
  // The console interval so far (it may span several read-backs): finite losses and grad_norms
  // summed, steps, and overflows per tensor.
  double m_int_loss_sum = 0, m_int_norm_sum = 0;
  int64_t m_int_loss_n = 0, m_int_norm_n = 0, m_int_steps = 0;
  // The interval's time in steps and the examples they took (ms/step, samples/s).
  double m_int_seconds = 0;
  int64_t m_int_samples = 0;
  std::vector<int64_t> m_int_counts;
  MetricTracker m_keep_best, m_early_stop;
  bool m_last_eval_best = false;

  // The step being timed.
  Clock::time_point m_step_t0;
  int64_t m_samples_before = 0;
  // logging.profile: seconds per phase over the steady-state steps (m_phase_steps of them).
  bool m_phase_counting = false;  // this step is a steady-state one
  Clock::time_point m_phase_t;
  double m_phase_seconds[kPhases] = {};
  int64_t m_phase_steps = 0;
};

}  // namespace ampctl::train
