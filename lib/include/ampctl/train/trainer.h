// Trainer: `ampctl train`'s run, and the loop around the step: it opens the run directory,
// builds the run's objects (build.h), and then, step after step (step.h), keeps the cadence of
// read-backs (monitor.h), evaluation, checkpoints and stop signals; at the end it writes the
// summary. Resume rebuilds the same objects and restores their state from a checkpoint.
//
// Everything a step needs is allocated in begin(), before the first step; the per-step metrics
// stay on the device until the monitor reads them back, so a GPU step has no host sync.
//
// Overflow attribution: with loss scaling on, the scaler's one unscale / check pass over the flat
// gradient arena also records, per parameter tensor (one segment of the arena each), whether it
// held an inf or NaN (GradScaler::set_grad_segments). Metrics lines of overflowing steps carry
// `overflow_tensors` (the parameter names, as in checkpoints); summary.json carries
// `overflow_counts` {name: overflowing steps} and `most_overflowing` (names, most first).
//
// Divergence (training.divergence_patience = P > 0; 0 turns the two streak rules off, not the
// third). The run has diverged, with nothing left to do, at step k when
//   * overflow at the floor: steps k-P+1..k all overflowed (found_inf) while the scale their
//     backward used was at its floor: scaler.min_scale when that is > 0, else 2^-126 (FLT_MIN,
//     the smallest normal float: below it the scale is subnormal and its inverse, the unscale
//     factor, is about to overflow to inf, so no backoff can help any more); or
//   * non-finite loss: steps k-P+1..k all had a non-finite training loss (any precision, with or
//     without a scaler); or
//   * non-finite state: a checkpoint is due after step k (periodic, SIGUSR1, a stop, the end)
//     and its f32 master parameters, buffers or optimizer moments hold an inf or NaN
//     (checkpoint::state_problems, the loader's own rule: the state is lost, and writing it
//     would rotate a good checkpoint out). Reason nonfinite_parameters, or
//     nonfinite_optimizer_state when only the optimizer's state is.
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
#include <cstdio>
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
#include "ampctl/dist/communicator.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/run_dir.h"

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

namespace ampctl::run {
struct Summary;
}

namespace ampctl::train {

class NumericsRecorder;  // train/numerics.h
struct InitSource;       // train/init_from.h

struct RunObjects;
class Monitor;
class TrainStep;

struct TrainOutcome {
  nlohmann::json summary;  // what summary.json holds
};

// What a resumed run does with the history around its checkpoint (ampctl resume).
struct ResumeHistory {
  // A branch (--run-dir), when `checkpoint_file` is set: the checkpoint is copied into the
  // trainer's (new) run directory, with the history up to its step of the run directory
  // `branch_of` it lies in (RunDir::import_history; "" for a checkpoint outside a run), which is
  // never written.
  std::filesystem::path branch_of;
  std::filesystem::path checkpoint_file;
  // A rewind (--rewind): the run's checkpoints after the checkpoint's step, removed (with the
  // metrics lines after it) once the checkpoint is restored.
  std::vector<std::filesystem::path> rewind;
};

class Trainer {
 public:
  Trainer(const config::RunConfig& config, const std::filesystem::path& run_dir);
  // A trainer in a process group made by `comm` (build.h): every rank trains, rank 0 writes.
  Trainer(const config::RunConfig& config, const std::filesystem::path& run_dir,
          dist::CommunicatorFactory comm);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // `--log-format json` (before begin or resume): each console line is its step's metrics line,
  // and each evaluation's, written to `out` (MonitorOptions::json_console).
  void set_json_console(std::FILE* out) { m_json_console = out; }

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
  // optimizer (a tensor's name, dtype or shape), Error{config} when max_steps < k. `history`
  // (ampctl resume's --run-dir and --rewind) says what becomes of the run's history once the
  // checkpoint is restored.
  void resume(const checkpoint::CheckpointData& ckpt, const ResumeHistory& history = {});

  // Flushes the pending metrics and returns the complete training state after the last step
  // run (call between steps).
  checkpoint::CheckpointData checkpoint_data();
  // checkpoint_data() written atomically to RUN_DIR/checkpoints (keep_last applied). Training
  // writes one every checkpoint.every_steps steps and one at the end.
  std::filesystem::path write_checkpoint();

  // For tests and tools.
  int64_t next_step() const { return m_next_step; }
  // The parameter tensors' names in the gradient arena's order (what overflow_tensors names).
  const std::vector<std::string>& param_names() const;
  Backend& backend() const;
  nn::Model& model() const;
  optim::Optimizer& optimizer() const;
  amp::GradScaler& scaler() const;

 private:
  void setup();
  // init.from: the source's weights into the model (train/init_from.h), checked against the
  // run's vocabulary and data.normalize first; then broadcast from rank 0.
  void apply_init();
  nlohmann::json evaluate(int64_t step);
  void restore(const checkpoint::CheckpointData& ckpt);
  // Writes a checkpoint after the last step run and throws Error{interrupted} (signals.h).
  [[noreturn]] void stop(int signo);
  // A stop came between the micro-batches of `step`: rewinds the data cursor and dropout RNG to
  // where the step started (`cursor`, `dropout_calls`), then stop().
  [[noreturn]] void abandon_step(int64_t step, Batcher::Cursor cursor, uint64_t dropout_calls);
  // The monitor's flush, then diverge() when a divergence rule has been met.
  void flush_and_check();
  // Stops a diverged run (see the top of this file): checkpoint when the state is good,
  // summary.json, Error{runtime}.
  [[noreturn]] void diverge();
  ampctl::run::Summary summary_of(const std::string& status) const;
  void write_summary(const nlohmann::json& summary) const;
  // Only rank 0 writes files (config.yaml, metrics.jsonl, summary.json, checkpoints) and console
  // lines (dist/communicator.h).
  bool is_root() const;
  // stop_signal() (signals.h), agreed over the ranks: the same on every rank.
  int agreed_stop() const;
  // The requests every rank acts on at this step boundary: the stop signal (0: none) and, with
  // `take_checkpoint`, whether a checkpoint was asked for (SIGUSR1), each agreed over the ranks
  // in one host all-reduce, whichever rank received the signal (docs/distributed.md).
  struct Requests {
    int stop = 0;
    bool checkpoint = false;
  };
  Requests agreed_requests(bool take_checkpoint) const;
  // Several ranks: Error{runtime} unless every rank's parameters have the same bits.
  void check_replicas() const;
  void log_start() const;
  // checkpoint::write_checkpoint with keep_last and keep_best's file kept, the prune named on
  // the console.
  std::filesystem::path write_checkpoint_file(const checkpoint::CheckpointData& d);
  // A resume that changes training.max_steps on a decaying schedule: the lr of the next step
  // under the checkpoint's schedule and under this one, and the key that keeps the old decay.
  void log_schedule_change(const checkpoint::CheckpointData& ck) const;
  // Gradient numerics and TensorBoard (train/numerics.h, run/tensorboard.h): after a sampled
  // step, its line, scalars and warning; after metrics.jsonl is opened, the event file.
  void record_numerics(int64_t step);
  void open_tensorboard(std::optional<int64_t> purge_step = std::nullopt);

  const config::RunConfig m_cfg;  // a copy: the trainer outlives any caller temporary
  int64_t m_accum = 1;
  double m_last_eval_seconds = -1;  // the last evaluation's time (-1: none yet), for progress //
                                    // micro-batches per step on each rank (grad_accum_steps_for)
  std::filesystem::path m_run_dir;
  std::chrono::steady_clock::time_point m_t0;
  int64_t m_next_step = 1;
  std::optional<int64_t> m_resumed_at;  // the checkpoint's step, when resumed
  std::FILE* m_json_console = nullptr;  // set_json_console
  bool m_stopped_early = false;         // training.early_stop ended the run at m_next_step - 1
  int64_t m_last_checkpoint = -1;       // the step of the last checkpoint written
  // A signal cut the evaluation of the last step short: the checkpoint says so and resume runs
  // that evaluation first.
  bool m_eval_pending = false;
  bool m_diverging = false;
  std::optional<int64_t> m_stopped_in_step;  // a stop between this step's micro-batches

  dist::CommunicatorFactory m_comm_factory;
  std::unique_ptr<RunDir> m_dir;  // held for the run's life
  std::unique_ptr<RunObjects> m_run;
  std::unique_ptr<InitSource> m_init;  // init.from, read by begin() before the run directory
  // data.normalize statistics to apply instead of computing them (a resumed checkpoint's, an
  // init.from source's); null: compute them from the data.
  nlohmann::json m_saved_input;
  nlohmann::json m_saved_vocab;  // the weights' vocabulary (init.from, a checkpoint): the text's
  std::unique_ptr<Monitor> m_monitor;
  std::unique_ptr<TrainStep> m_step;
  Tensor m_eval_loss;                            // f32[1]
  std::unique_ptr<NumericsRecorder> m_numerics;  // logging.numerics_every in fp16/bf16
  bool m_underflow_warned = false;               // the last sample was above the warning threshold
};

// Trains `config` in `run_dir` (created; config.yaml, metrics.jsonl and summary.json written
// there). Throws ampctl::Error on failure.
TrainOutcome train(const config::RunConfig& config, const std::filesystem::path& run_dir);

}  // namespace ampctl::train
