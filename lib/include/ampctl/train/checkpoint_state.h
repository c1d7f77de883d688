// The training state a checkpoint holds, assembled from and restored into the objects of a run
// (build.h) and its monitor: parameters, optimizer state and tensors, scaler state, the data
// cursor, the model's RNG, and the monitor's totals, attribution counts and divergence streaks
// (the "metrics" object), so that a resumed run continues exactly as an uninterrupted one.
#pragma once

#include <cstdint>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/config/run_config.h"

namespace ampctl::train {

struct RunObjects;
class Monitor;

// The state after step `step` (the monitor has been flushed). `eval_pending`: a stop request
// cut the evaluation of `step` short (the resumed run evaluates first).
checkpoint::CheckpointData assemble_checkpoint(int64_t step, const config::RunConfig& config,
                                               const RunObjects& objects, const Monitor& monitor,
                                               bool eval_pending);

// Restores `ckpt` into a freshly built objects. Throws Error{input} naming the section and tensor
// when the checkpoint does not fit the model, optimizer or scaler, or a metrics key is missing
// or mistyped.
void restore_checkpoint(const checkpoint::CheckpointData& ckpt, RunObjects& objects,
                        Monitor& monitor, bool& eval_pending);

}  // namespace ampctl::train
