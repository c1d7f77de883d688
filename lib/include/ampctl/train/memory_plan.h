// The memory a run needs, estimated from its configuration before anything is allocated, so a
// run that cannot fit (or whose sizes do not even fit in 64 bits) is refused with the key to
// change, instead of crashing or dying of "out of memory" minutes later.
//
// What is counted (bytes, every product overflow-checked): the fp32 parameters, their fp32
// gradients, the fp16/bf16 copy of the parameters (mixed precision), the optimizer's moments
// (two per parameter for adam/adamw, one for sgd with momentum), the activations of one batch of
// data.batch_size rows through every layer, and the data sets (features and labels as stored).
// The parameter count and the activations are the model's own estimate (nn::estimate_model_memory,
// nn/models.h and nn/memory_estimate.h), so no model is named here.
// It is an estimate of the large buffers, not an exact count: small tensors are left out.
//
// Invariant: check_memory throws Error{config} (exit 2) whose message starts with the key that
// drives the largest part ("model.hidden", "data.batch_size", "data.train") and gives the sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ampctl/config/run_config.h"
#include "ampctl/core/tensor.h"

namespace ampctl {
class Backend;
}  // namespace ampctl

namespace ampctl::train {

// What the model and data look like once the data is known (features in, outputs out, rows).
struct DataShape {
  int64_t features = 0;
  int64_t outputs = 0;
  int64_t train_samples = 0;
  int64_t eval_samples = 0;
  bool exact = true;  // false: a lower bound (validate could not read a data file's header)
};

struct MemoryPlan {
  uint64_t parameters = 0;    // the fp32 master weights
  uint64_t gradients = 0;     // fp32
  uint64_t lowp_copy = 0;     // fp16/bf16 weights (0 for fp32)
  uint64_t optimizer = 0;     // moments
  uint64_t activations = 0;   // one batch, forward and backward
  uint64_t data = 0;          // training and evaluation sets
  uint64_t eval_windows = 0;  // a language model's fixed evaluation windows (training.eval_batches)
  uint64_t total = 0;
  int64_t parameter_count = 0;

  std::string str() const;  // "parameters 1.0 GiB, gradients 1.0 GiB, ..."
};

// The estimate for `config` with data of `shape`. Throws Error{config} "KEY: ... overflows" when
// a size does not fit in 64 bits (e.g. model.hidden[1] for two widths near 2^31).
// `backend` reaches the model's estimate: a GPT's attention buffers are sized by its
// attention_workspace (the fused CUDA attention keeps no T x T); without a backend, as Backend's
// default (the CPU's materialised attention: the most).
MemoryPlan plan_memory(const config::RunConfig& config, const DataShape& shape,
                       const Backend* backend = nullptr);

// The data's shape as far as the configuration tells without loading it: synthetic sources say;
// idx and fashion_mnist headers are read when the files are there (16 bytes each); a csv file
// counts as one feature and no rows (a lower bound).
DataShape data_shape_from_config(const config::RunConfig& config);

// plan_memory, then refuses a plan larger than `available` bytes (when known) on `device`:
// Error{config} "KEY: the run needs about N of host memory (...), only M is available".
void check_memory(const config::RunConfig& config, const DataShape& shape,
                  std::optional<uint64_t> available, const std::string& where = "host memory",
                  const Backend* backend = nullptr);

// What the trainer calls once the data is loaded and the backend exists: against the host's
// available memory for cpu runs, and against the GPU's free memory (cuda_free_memory) for cuda
// runs, whose data sets and model all live on the device ("KEY: ... of memory on cuda:0").
// `backend`: the run's, whose attention_workspace sizes a GPT's attention (plan_memory).
void check_run_memory(const config::RunConfig& config, int64_t features, int64_t outputs,
                      int64_t train_samples, int64_t eval_samples, const Device& device,
                      const Backend* backend = nullptr);

// What `ampctl validate` calls, before any data is loaded: data_shape_from_config, then
// check_memory against the host when the run would train on it (device cpu, or auto without a
// usable GPU); for a GPU run only the sizes' arithmetic is checked.
// It also checks debug.inject_tensor against the model's parameter names
// (check_inject_tensor), which the model's estimate lists without building it.
void check_config_memory(const config::RunConfig& config);

// debug.inject_tensor `name` (empty: none) against the model's parameter `names`: Error{config}
// naming the key, the closest name and the parameters when it is not one of them.
void check_inject_tensor(const std::string& name, const std::vector<std::string>& names);

}  // namespace ampctl::train
