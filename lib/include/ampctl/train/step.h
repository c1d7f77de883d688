// TrainStep: one optimizer iteration, in PyTorch's order:
//   lr of this iteration -> zero_grad -> for each micro-batch: batch, forward, loss (seeded with
//   the loss scale: the scaled loss's backward), backward -> [debug injection] -> gradient
//   sync (dist: the mean over the ranks; the loss too) -> [unscale_, clip_grad_norm_] ->
//   scaler.step -> scaler.update. The gradient norm (grad_norm, the Monitor's) is computed every
//   step: by the scaler's check pass (GradScaler::set_norm_output) when loss scaling is on and
//   every rank checks the whole arena; by global_norm otherwise (ZeRO-1: after an all-gather of
//   the unscaled shards, bitwise ZeRO-0's norm; bf16/fp32: no check pass to fuse it into).
// The injection comes before the sync, as a rank's own overflow would: an inf on one rank
// reaches every rank's averaged gradients, so every rank skips (one process: the sync is the
// identity and the order does not matter). With ZeRO-1 (StepOptions::zero) the sync is a
// reduce-scatter, the scaler checks and the optimizer updates this rank's shard only (found_inf
// agreed over the ranks first), and the parameters are all-gathered after the update.
//
// With StepOptions::retry an overflowing attempt is followed by another, from the same data
// cursor and dropout RNG position, at the backed-off scale; the lr, the step number and the data
// cursor advance once per step, the scaler updates once per attempt. Injection poisons only a
// step's first attempt. Every rank reads the same found_inf (all-reduced before the check), so
// every rank retries alike.
//
// Everything it touches is allocated at construction (and by the objects it drives before the
// first step), so a step allocates nothing and, on a GPU, never waits for the device: what the
// run reports goes to the Monitor's device ring.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "ampctl/core/tensor.h"

namespace ampctl {
class Backend;
namespace amp {
class GradScaler;
}
namespace dist {
class Communicator;
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

class NumericsRecorder;  // train/numerics.h

class Batcher;
class Monitor;

struct StepOptions {
  int64_t grad_accum_steps = 1;
  std::optional<double> grad_clip_norm;
  // debug.inject_nonfinite_at: after the backward of these steps, the gradient element at
  // inject_offset of the flat arena is set to inject_value (inf or NaN).
  std::set<int64_t> inject_at;
  double inject_value = 0;
  size_t inject_offset = 0;
  int64_t inject_rank = -1;  // debug.inject_rank: only this rank injects (-1: every rank)
  // distributed.zero: 1 (docs/distributed.md): the optimizer holds this rank's shard of the
  // arena; the gradients are reduce-scattered, found_inf is reduced (max) over the ranks before
  // anything reads it, and the updated parameters (and their fp16/bf16 copy) are all-gathered.
  bool zero = false;
  // scaler.on_overflow: retry (docs/reference.md, "Scaler"): an overflowing attempt is run
  // again from the step's start (the same batches, the dropout RNG rewound) at the scale
  // update() backed off to, up to max_retries times; the last attempt is kept. Reads found_inf
  // on the host after every attempt: the one sync this adds to a GPU step (docs/design.md).
  bool retry = false;
  int64_t max_retries = 0;
  // scaler.min_scale as the scale's float (0: no floor): an attempt that overflowed at it is not
  // retried (the backoff cannot lower the scale, so the retry would be the same attempt).
  float min_scale = 0.0f;
  // logging.grad_amax: every step of an instrumented fp16/bf16 model measures its roundings' max.
  bool grad_amax = false;
};

// The objects a step drives; they outlive it.
struct StepParts {
  Backend& backend;
  nn::Model& model;
  optim::Optimizer& optimizer;
  amp::GradScaler& scaler;
  const optim::LrSchedule& schedule;
  Batcher& batcher;
  Monitor& monitor;
  dist::Communicator& comm;
  NumericsRecorder* numerics = nullptr;  // logging.numerics_every (train/numerics.h), or null
};

class TrainStep {
 public:
  TrainStep(const StepParts& parts, const StepOptions& options);
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Runs optimizer iteration `step` (1-based) and returns true; or returns false, having changed
  // no parameter, optimizer or scaler state, when a stop signal (signals.h) is seen between two
  // of its micro-batches: a long accumulation must not hold a stop up. The data cursor and the
  // dropout RNG have then moved on by the micro-batches run; the caller rewinds them to the
  // state after the last complete step before it checkpoints.
  bool run(int64_t step);

  // Failed attempts of the last step run() completed (0 unless StepOptions::retry).
  int64_t retries() const { return m_retries; }

 private:
  StepParts m_p;
  StepOptions m_opts;
  Tensor m_loss, m_loss_acc;  // f32[1]: one micro-batch's mean loss; the step's
  Tensor m_accum_inv;         // f32[1] = 1 / grad_accum_steps
  Tensor m_seed;              // f32[1]: the backward seed, loss scale / grad_accum_steps
  Tensor m_norm, m_coef;      // f32[1]: the gradient norm and the clip coefficient
  Tensor m_inject_at;         // the gradient element debug injection poisons
  Tensor m_attempt_scale;     // f32[1]: the scale the last attempt ran at (retry with a floor)
  bool m_inject_here = true;  // this rank injects (debug.inject_rank)
  bool m_fused_norm = false;  // the scaler's check pass writes m_norm (set_norm_output)
  int64_t m_retries = 0;
  // With retry: the model's state buffers (BatchNorm's running statistics, which a training
  // forward updates) and copies made at construction: saved at each step's start, restored
  // before a retry, so a retried step updates them once, as a step without the overflow does.
  std::vector<std::pair<Tensor, Tensor>> m_buffers;  // (buffer, saved copy)
  // One attempt of `step`: micro-batches, sync, unscale/clip, optimizer, update. Returns false
  // on a stop between micro-batches (only a step's first attempt looks); `samples` gets the
  // global rows the attempt ran.
  bool attempt(int64_t step, int64_t attempt_index, int64_t& samples);
  // ZeRO-1 with an fp16/bf16 copy: (masters, copy) views of every other rank's shard.
  std::vector<std::pair<Tensor, Tensor>> m_other_shards;
};

}  // namespace ampctl::train
