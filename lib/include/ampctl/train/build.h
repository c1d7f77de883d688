// build: a run configuration turned into the objects a run is made of (backend, data, loader,
// model, optimizer, scaler, schedule) and the option structs of the step and the monitor. The
// one place of the train layer that reads config::RunConfig to make things; the step, the
// monitor and the batcher take what they need as small option structs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ampctl/config/run_config.h"
#include "ampctl/data/dataset.h"
#include "ampctl/data/lm.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/train/monitor.h"
#include "ampctl/train/step.h"

#include "ampctl/nn/models.h"
#include "ampctl/optim/optimizer.h"

namespace ampctl {
class Backend;
namespace amp {
class GradScaler;
}
namespace data {
class DataLoader;
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

class Batcher;

// Picks the backend for `device` ("auto", "cpu", "cuda", "cuda:N"): "cpu" or "cuda:N". Throws
// Error{config} with a hint when CUDA is asked for and not compiled in or no such GPU is usable.
std::string resolve_device(const std::string& device);

// Refuses (Error{config}, exit 2) a run whose precision the resolved device ("cpu" or "cuda:N")
// cannot compute in: bf16 below compute capability 8.0, anything below 7.5 (device_support.h),
// with AMPCTL_FORCE_SM75 applied. The CPU does every precision.
void check_device_precision(const std::string& resolved, config::Precision precision);

// Everything a run trains with, built in dependency order; members are destroyed in reverse.
// The objects point at each other (the loader at the data, the batcher at the loader), so a
// RunObjects never moves: build_run returns it on the heap.
struct RunObjects {
  std::string device;  // resolve_device's answer
  std::unique_ptr<Backend> backend;
  std::unique_ptr<dist::Communicator> comm;
  data::DataSplit data;                      // feature data (empty for a language model)
  std::unique_ptr<data::DataLoader> loader;  // feature data only
  data::LmData lm;                           // text / tokens data (empty otherwise)
  bool language_model = false;               // data.train is text or tokens
  int64_t lm_block_size = 0;                 // its windows' length: the model's block_size
  std::unique_ptr<Batcher> batcher;
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<optim::LrSchedule> schedule;
  // distributed.zero: 1: the range of the parameter arena this rank's optimizer holds and
  // updates (dist::Communicator::shard_range); unset with zero: 0.
  std::optional<dist::Communicator::Range> zero_shard;

  RunObjects();
  ~RunObjects();
  RunObjects(const RunObjects&) = delete;
  RunObjects& operator=(const RunObjects&) = delete;
};

// Loads the data and builds every object of `config`; the communicator from `comm` (empty: a
// single process, dist::SingleProcess). With data.normalize, `saved_input` (a checkpoint's or
// an init.from source's statistics) is applied instead of statistics computed from the data;
// `saved_vocab` (likewise) is a text source's vocabulary instead of the file's own
// (data::load_lm_data). Throws ampctl::Error for an unusable device, bad data or an invalid
// model.
std::unique_ptr<RunObjects> build_run(const config::RunConfig& config,
                                      const dist::CommunicatorFactory& comm = {},
                                      const std::optional<data::Normalization>& saved_input = {},
                                      const std::optional<data::Vocab>& saved_vocab = {});

// The lr schedule of a configuration (scheduler.*, optimizer.lr, over config::schedule_steps).
optim::LrSchedule make_schedule(const config::RunConfig& config);

// The model options of a run's configuration: the architecture (model.*), the activation dtype
// of the precision, the loss, the sizes the data set gives, the largest batch and the seed.
nn::ModelOptions model_options(const config::ModelConfig& model, config::Precision precision,
                               config::LossType loss, int64_t in_features, int64_t out_features,
                               int64_t max_batch, uint64_t seed);
// A language model's block_size: the rows of its position embedding (transformer.wpe.weight,
// nanoGPT's name). Error{config} for a model without one (it cannot take token windows).
int64_t lm_block_size(const nn::Model& model);
// One group over the model's whole arenas (params, grads, lowp) with learning rate lr.
std::vector<optim::ParamGroup> param_groups(const nn::Model& model, float lr);
// optimizer.decay_on: matrices: an f32 mask over the model's parameter arena, 1 on the elements
// of tensors with >= 2 dimensions (weight matrices, embeddings) and 0 on vectors (biases,
// LayerNorm weights) and padding: nanoGPT's two AdamW groups over one flat arena. With `shard`
// (ZeRO-1) only that range of it: the mask indexes the global arena position.
Tensor matrix_decay_mask(const nn::Model& model,
                         std::optional<dist::Communicator::Range> shard = std::nullopt);
// The groups restricted to the range `shard` of their arenas (views; ZeRO-1's optimizer).
std::vector<optim::ParamGroup> shard_groups(std::vector<optim::ParamGroup> groups,
                                            dist::Communicator::Range shard);

// The step's options; resolves debug.inject_tensor against the model's parameters (Error{config}
// with the closest name when it has none of that name).
StepOptions step_options(const config::RunConfig& config, const nn::Model& model);
// Micro-batches per optimizer step on each rank: training.grad_accum_steps, or, when
// training.global_batch is set, global_batch / (data.batch_size x world). Throws Error{config}
// naming training.global_batch when that does not divide.
int64_t grad_accum_steps_for(const config::RunConfig& config, int world);
// The monitor's options (`start`: when the run started).
MonitorOptions monitor_options(const config::RunConfig& config, Clock::time_point start);

}  // namespace ampctl::train
