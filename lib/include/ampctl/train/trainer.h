// Trainer: `ampctl train`'s loop, in PyTorch's order for every optimizer iteration:
//   zero_grad -> for each micro-batch: forward, loss (seeded with the loss scale: the scaled
//   loss's backward), backward -> [debug injection] -> [unscale_, clip_grad_norm_] ->
//   scaler.step -> scaler.update -> the lr of the next iteration.
//
// Everything a step needs is allocated in begin(), before the first step. The per-step metrics
// (loss, the scale the backward used, found_inf, the trackers after update) are copied on the
// device into ring buffers and read back at logging intervals, so a GPU step has no host sync;
// the host then writes metrics.jsonl lines and console lines for the steps it read.
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
    std::vector<float> host_f;
    std::vector<int32_t> host_i;
    struct HostInfo {
      int64_t step;
      double lr;
      double time_s;
    };
    std::vector<HostInfo> info;  // reserved to capacity: no allocation per step
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
