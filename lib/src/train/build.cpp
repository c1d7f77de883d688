#include "ampctl/train/build.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/backend/cuda_plugin.h"
#include "ampctl/backend/device_support.h"
#include "ampctl/config/problems.h"
#include "ampctl/core/format.h"
#include "ampctl/core/input_file.h"
#include "ampctl/data/loader.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/dist/process_group.h"
#include "ampctl/nn/models.h"
#include "ampctl/optim/adam.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/optim/sgd.h"
#include "ampctl/train/agreement.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/memory_plan.h"
#include "ampctl/train/numerics.h"

namespace ampctl::train {
namespace {

std::unique_ptr<Backend> make_backend(const std::string& resolved) {
  if (resolved == "cpu") return make_cpu_backend(0);
  return make_cuda_backend(std::stoi(resolved.substr(5)));
}

std::unique_ptr<optim::Optimizer> make_optimizer(Backend& b, const config::OptimizerConfig& c,
                                                 std::vector<optim::ParamGroup> groups) {
  if (c.type == config::OptimizerType::sgd) {
    optim::SgdOptions o;
    o.momentum = static_cast<float>(c.momentum);
    o.dampening = static_cast<float>(c.dampening);
    o.weight_decay = static_cast<float>(c.weight_decay);
    o.nesterov = c.nesterov;
    return std::make_unique<optim::Sgd>(b, std::move(groups), o);
  }
  optim::AdamOptions o;
  o.beta1 = c.betas[0];
  o.beta2 = c.betas[1];
  o.eps = c.eps;
  o.weight_decay = c.weight_decay;
  o.decoupled = c.type == config::OptimizerType::adamw;
  return std::make_unique<optim::Adam>(b, std::move(groups), o);
}

DType compute_dtype(config::Precision precision) {
  switch (precision) {
    case config::Precision::fp16:
      return DType::f16;
    case config::Precision::bf16:
      return DType::bf16;
    case config::Precision::fp32:
      return DType::f32;
  }
  throw Error{ErrorKind::invalid_argument, "unknown precision"};
}

nn::ActivationKind activation_kind(config::Activation activation) {
  switch (activation) {
    case config::Activation::relu:
      return nn::ActivationKind::relu;
    case config::Activation::gelu:
      return nn::ActivationKind::gelu;
    case config::Activation::tanh:
      return nn::ActivationKind::tanh;
  }
  throw Error{ErrorKind::invalid_argument, "unknown activation"};
}

data::SourceOptions source_options(const config::DataSource& c) {
  data::SourceOptions o;
  o.source = c.source;
  o.task = c.task;
  o.samples = c.samples;
  o.features = c.features;
  o.classes = c.classes;
  o.images = c.images;
  o.labels = c.labels;
  o.split = c.split;
  o.dir = c.dir;
  o.path = c.path;
  o.label_column = {c.label_column.name, c.label_column.index};
  o.header = c.header;
  o.split_fraction = c.split_fraction;
  o.vocab = c.vocab;
  o.vocab_size = c.vocab_size;
  o.tokenizer = c.tokenizer;
  o.token_format = c.token_format;
  return o;
}

data::DataOptions data_options(const config::DataConfig& c) {
  data::DataOptions o;
  o.train = source_options(c.train);
  if (c.eval) o.eval = source_options(*c.eval);
  for (const config::NamedEvalSource& e : c.eval_sets)
    o.more_eval.push_back(source_options(e.source));
  o.normalize = c.normalize;
  return o;
}

optim::ScheduleOptions schedule_options(const config::SchedulerConfig& c) {
  optim::ScheduleOptions o;
  o.type = c.type;
  o.warmup_steps = c.warmup_steps;
  o.min_lr = c.min_lr;
  o.step_size = c.step_size;
  o.gamma = c.gamma;
  o.max_lr = c.max_lr;
  o.pct_start = c.pct_start;
  o.div_factor = c.div_factor;
  o.final_div_factor = c.final_div_factor;
  o.anneal = c.anneal_strategy;
  o.three_phase = c.three_phase;
  o.cycle_momentum = c.cycle_momentum;
  o.base_momentum = c.base_momentum;
  o.max_momentum = c.max_momentum;
  return o;
}

}  // namespace

optim::LrSchedule make_schedule(const config::RunConfig& c) {
  return optim::LrSchedule(schedule_options(c.scheduler), c.optimizer.lr,
                           config::schedule_steps(c));
}

namespace {

amp::GradScalerOptions scaler_options(const config::RunConfig& c) {
  amp::GradScalerOptions o;
  o.enabled = config::scaler_enabled(c);
  o.init_scale = c.scaler.init_scale;
  o.rule = config::scale_settings(c);
  return o;
}

dist::CommunicatorOptions communicator_options(const config::DistributedConfig& c) {
  dist::CommunicatorOptions o;
  o.backend = c.backend;
  o.bucket_bytes = static_cast<size_t>(std::max(1.0, c.bucket_mb * 1024.0 * 1024.0));
  return o;
}

// The MPI communicator's bucket (distributed.bucket_mb of f32 gradients, held on the host whatever
// the device) refused, before it is allocated, when the host cannot hold it.
void check_bucket_memory(const config::DistributedConfig& c, const Backend& b) {
  const bool mpi =
      c.backend == config::DistBackend::mpi ||
      (c.backend == config::DistBackend::automatic && b.device().type == DeviceType::cpu);
  if (!mpi) return;
  const uint64_t bytes = communicator_options(c).bucket_bytes;
  const std::optional<uint64_t> available = host_memory_available();
  if (!available || bytes <= *available) return;
  throw Error{ErrorKind::config,
              "distributed.bucket_mb: " + fmt("%.10g", c.bucket_mb) +
                  " MiB of all-reduce bucket on each rank (" + format_bytes(bytes) + "), and " +
                  format_bytes(*available) + " of host memory is available",
              "make distributed.bucket_mb smaller (the default is 25)"};
}

// Every rank's shard of every global batch holds at least one row: a short last batch (without
// drop_last) is split as evenly as the ranks allow, and must not leave one rank empty.
void check_shards(const data::Dataset& train, int64_t batch, int world, bool drop_last) {
  if (world == 1 || drop_last) return;
  const int64_t global = batch * world, rest = train.size() % global;
  if (rest != 0 && rest < world) {
    throw Error{ErrorKind::config,
                "data.drop_last: false leaves a last batch of " + std::to_string(rest) +
                    " samples of " + train.origin + " for " + std::to_string(world) +
                    " ranks: some rank would get none",
                "set data.drop_last: true, or change data.batch_size"};
  }
}

// A CNN's BatchNorm normalises each channel over the rows and positions of one micro-batch: it
// needs more than one value per channel in training (PyTorch refuses it too). The smallest
// micro-batch is a rank's share of a short last batch (data.drop_last: false), which comes only
// once an epoch: refused here, before step 1, rather than at whichever step reaches it (and
// again at every resume).
void check_batch_norm(const config::RunConfig& cfg, const data::Dataset& train, int world) {
  if (cfg.model.type != config::ModelType::cnn || !cfg.model.batch_norm ||
      train.image.size() != 3) {
    return;
  }
  const int64_t batch = cfg.data.batch_size, global = batch * world;
  const int64_t rest = cfg.data.drop_last ? 0 : train.size() % global;
  const int64_t rows = rest > 0 ? std::min(batch, rest / world) : batch;
  int64_t h = train.image[1], w = train.image[2];
  for (size_t i = 0; i < cfg.model.conv.size(); ++i) {
    const int64_t k = cfg.model.conv[i][1];
    h = h + 2 * (k / 2) - k + 1;  // stride 1, padding k / 2
    w = w + 2 * (k / 2) - k + 1;
    if (h < 1 || w < 1) return;  // the model reports a kernel that does not fit
    if (rows * h * w <= 1) {
      throw Error{ErrorKind::config,
                  "model.batch_norm: the BatchNorm after model.conv[" + std::to_string(i) +
                      "] would see 1 value per channel (" + std::to_string(rows) + " row" +
                      (rows == 1 ? "" : "s") + " of " + std::to_string(h) + "x" +
                      std::to_string(w) + " maps" +
                      (rows < batch ? ": the last batch of " + std::to_string(rest) + " of " +
                                          train.origin + "'s " + std::to_string(train.size()) +
                                          " samples, with data.drop_last: false"
                                    : std::string(", data.batch_size ") + std::to_string(batch)) +
                      "); it needs more than one to normalise",
                  rows < batch ? "set data.drop_last: true, or change data.batch_size"
                               : "raise data.batch_size, use fewer pools (model.pool), or set "
                                 "model.batch_norm: false"};
    }
    if (cfg.model.pool > 1) {
      h /= cfg.model.pool;
      w /= cfg.model.pool;
    }
  }
}

}  // namespace

RunObjects::RunObjects() = default;
RunObjects::~RunObjects() = default;

nn::ModelOptions model_options(const config::ModelConfig& model, config::Precision precision,
                               config::LossType loss, int64_t in_features, int64_t out_features,
                               int64_t max_batch, uint64_t seed) {
  nn::ModelOptions o;
  o.type = model.type;
  o.compute = compute_dtype(precision);
  o.precision = config::to_string(precision);
  o.loss = loss;
  o.in_features = in_features;
  o.out_features = out_features;
  o.max_batch = max_batch;
  o.seed = seed;
  o.mlp.hidden = model.hidden;
  o.mlp.activation = activation_kind(model.activation);
  o.mlp.dropout = model.dropout;
  o.mlp.layer_norm = model.layer_norm;
  if (model.type == config::ModelType::gpt) {
    // A language model: ids in, next-id logits out, both over the vocabulary (out_features);
    // max_batch counts sequences of block_size.
    o.in_features = out_features;
    o.gpt.n_layer = model.n_layer;
    o.gpt.n_head = model.n_head;
    o.gpt.n_embd = model.n_embd;
    o.gpt.block_size = model.block_size;
    o.gpt.dropout = model.dropout;
    o.gpt.bias = model.bias;
    o.gpt.tie_embeddings = model.tie_embeddings;
  }
  if (model.type == config::ModelType::cnn) {
    o.cnn.conv = model.conv;
    o.cnn.pool = model.pool;
    o.cnn.batch_norm = model.batch_norm;
    o.cnn.hidden = model.hidden;
    o.cnn.activation = activation_kind(model.activation);
    o.cnn.dropout = model.dropout;
  }
  return o;
}

std::vector<optim::ParamGroup> param_groups(const nn::Model& model, float lr) {
  optim::ParamGroup g;
  g.params = model.params();
  g.grads = model.grads();
  g.lowp_params = model.lowp_params();
  g.lr = lr;
  return {g};
}

Tensor matrix_decay_mask(const nn::Model& model, std::optional<dist::Communicator::Range> shard) {
  // Built once at setup, on the host, over the layout: the padding between tensors is 0 too.
  // Indexed by global arena position, so a ZeRO-1 shard's mask is that range of the whole one.
  std::vector<float> mask(model.layout().total(), 0.0f);
  for (const FlatLayout::Entry& e : model.layout().entries()) {
    if (e.shape.size() >= 2)
      std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(e.offset), e.numel, 1.0f);
  }
  const dist::Communicator::Range r = shard.value_or(dist::Communicator::Range{0, mask.size()});
  return model.backend().from_host({static_cast<int64_t>(r.size())}, DType::f32,
                                   mask.data() + r.begin);
}

std::vector<optim::ParamGroup> shard_groups(std::vector<optim::ParamGroup> groups,
                                            dist::Communicator::Range r) {
  const Shape shape{static_cast<int64_t>(r.size())};
  for (optim::ParamGroup& g : groups) {
    g.params = g.params.view(r.begin, shape);
    g.grads = g.grads.view(r.begin, shape);
    if (g.lowp_params.defined()) g.lowp_params = g.lowp_params.view(r.begin, shape);
  }
  return groups;
}

int64_t lm_block_size(const nn::Model& model) {
  for (const FlatLayout::Entry& e : model.layout().entries()) {
    if (e.name == "transformer.wpe.weight" && e.shape.size() == 2) return e.shape[0];
  }
  throw Error{ErrorKind::config,
              "model.type: " + model.type() + " has no position embedding " +
                  "(transformer.wpe.weight): it cannot train on text or token windows",
              "use model.type: gpt"};
}

std::string resolve_device(const std::string& device) {
  if (device == "cpu") return "cpu";
  if (device == "auto") return cuda_device_count() > 0 ? "cuda:0" : "cpu";
  int index = 0;
  if (device.rfind("cuda:", 0) == 0) index = std::stoi(device.substr(5));
  // What is missing, by name: the CUDA backend in this build, the NVIDIA driver, the CUDA plugin
  // or one of its libraries (cuBLAS, NCCL), or a GPU (cuda_plugin.h).
  if (const std::string why = cuda_unavailable_reason(); !why.empty()) {
    throw Error{ErrorKind::config, "device: '" + device + "' requested, but " + why,
                cuda_compiled() ? "set device: cpu (or auto, which falls back to the CPU)"
                                : "rebuild with -DAMPCTL_CUDA=ON, or set device: cpu (or auto)"};
  }
  const int count = cuda_device_count();
  if (index >= count) {
    throw Error{ErrorKind::config,
                "device: '" + device + "' requested, but " +
                    (count == 0 ? std::string("no usable GPU was found")
                                : std::to_string(count) + " GPU(s) are usable (cuda:0.." +
                                      std::to_string(count - 1) + ")"),
                "set device: cpu (or auto, which falls back to the CPU)"};
  }
  return "cuda:" + std::to_string(index);
}

void check_device_precision(const std::string& resolved, config::Precision precision) {
  if (resolved.rfind("cuda:", 0) != 0) return;
  const std::optional<ComputeCapability> cc = cuda_capability(std::stoi(resolved.substr(5)));
  if (!cc) return;  // the backend's own checks name what is wrong with the device
  const DType compute = precision == config::Precision::fp16   ? DType::f16
                        : precision == config::Precision::bf16 ? DType::bf16
                                                               : DType::f32;
  const std::string reason =
      precision_refusal(compute, effective_capability(*cc, std::getenv("AMPCTL_FORCE_SM75")));
  if (!reason.empty()) {
    throw Error{ErrorKind::config,
                std::string("precision: ") + config::to_string(precision) + " on " + resolved +
                    ": " + reason,
                "set precision: fp16 (loss scaling keeps its gradients), or device: cpu"};
  }
}

namespace {

// What the training data is, for the loading lines: its file or folder, or "synthetic".
// What the start line says is being read: the source's own files (only the keys its kind uses
// hold values the user chose; the others keep their defaults).
std::string source_text(const config::DataSource& s) {
  switch (s.source) {
    case config::SourceKind::synthetic:
      return fmt::format("synthetic data ({} samples x {} features)", s.samples, s.features);
    case config::SourceKind::idx:
      return s.images + " and " + s.labels;
    case config::SourceKind::fashion_mnist:
      return "Fashion-MNIST (" + s.dir + ")";
    case config::SourceKind::csv:
    case config::SourceKind::text:
    case config::SourceKind::tokens:
      return s.path;
    case config::SourceKind::split:
      break;
  }
  return "the data";
}

// The run's data, loaded (r.lm, or r.data and r.loader), agreed on by the ranks and checked
// against the memory the run may take before the model allocates; returns the model's input and
// output widths: features and classes (or targets), or a language model's vocabulary (both).
std::pair<int64_t, int64_t> load_run_data(const config::RunConfig& cfg, RunObjects& r, int world,
                                          const std::optional<data::Normalization>& saved_input,
                                          const std::optional<data::Vocab>& saved_vocab) {
  const auto seed = static_cast<uint64_t>(cfg.seed);
  const int64_t batch = cfg.data.batch_size;
  Backend& b = *r.backend;
  int64_t inputs = 0, outputs = 0;
  r.language_model = config::is_language_model(cfg.data.train);
  // Progress: loading a large corpus or image set takes a while; say when it starts and ends.
  const bool speak = dist::process_rank() == 0;
  const auto load_t0 = std::chrono::steady_clock::now();
  const auto load_seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - load_t0).count();
  };
  if (speak) spdlog::info("data: loading {}", source_text(cfg.data.train));
  if (r.language_model) {
    // The windows' length is the model's: checked once it is built.
    r.lm = data::load_lm_data(data_options(cfg.data), /*block_size=*/0, saved_vocab);
    agree_on_inputs(*r.comm, data_items(r.lm), "data");
    if (speak) {
      spdlog::info("data: loaded {} training tokens{} in {:.1f}s", r.lm.train.size(),
                   r.lm.eval ? fmt::format(", {} eval tokens", r.lm.eval->size()) : "",
                   load_seconds());
    }
    inputs = outputs = r.lm.vocab_size;
    // Now that the vocabulary and the token counts are known (validate counts a text source's
    // vocabulary as 1 and its tokens as none), refuse a run that cannot fit before the model
    // and the batcher allocate. The batcher holds each stream twice as int32 (the tokens and the
    // tokens shifted by one) on the backend's device: one int32 "feature" and one int32 "label"
    // per token.
    int64_t eval_tokens = r.lm.eval ? r.lm.eval->size() : 0;
    for (const data::TokenSet& more : r.lm.more_eval) eval_tokens += more.size();
    check_run_memory(cfg, /*features=*/1, r.lm.vocab_size, r.lm.train.size(), eval_tokens,
                     b.device(), &b);
  } else {
    r.data = data::load_data(data_options(cfg.data), seed, saved_input);
    agree_on_inputs(*r.comm, data_items(r.data), "data");
    if (speak) {
      spdlog::info("data: loaded {} training rows{} in {:.1f}s", r.data.train.size(),
                   r.data.eval ? fmt::format(", {} eval rows", r.data.eval->size()) : "",
                   load_seconds());
    }
    check_shards(r.data.train, batch, world, cfg.data.drop_last);
    check_batch_norm(cfg, r.data.train, world);
    r.loader = std::make_unique<data::DataLoader>(r.data.train, batch * world, cfg.data.shuffle,
                                                  cfg.data.drop_last, seed);
    const data::Dataset& train = r.data.train;
    inputs = train.features;
    outputs = train.task == data::Task::classification ? train.classes : train.targets;
    // Refuse a run that cannot fit (or whose sizes overflow) before anything large is allocated.
    int64_t eval_rows = r.data.eval ? r.data.eval->size() : 0;
    for (const data::Dataset& more : r.data.more_eval) eval_rows += more.size();
    check_run_memory(cfg, train.features, outputs, train.size(), eval_rows, b.device(), &b);
  }
  return {inputs, outputs};
}

}  // namespace

std::unique_ptr<RunObjects> build_run(const config::RunConfig& cfg,
                                      const dist::CommunicatorFactory& comm,
                                      const std::optional<data::Normalization>& saved_input,
                                      const std::optional<data::Vocab>& saved_vocab) {
  auto run = std::make_unique<RunObjects>();
  RunObjects& r = *run;
  const auto seed = static_cast<uint64_t>(cfg.seed);
  r.device = resolve_device(cfg.device);
  // Several ranks on a host: one GPU each, picked by the local rank (docs/distributed.md).
  if (dist::process_world_size() > 1 && r.device != "cpu" && cfg.device.rfind("cuda:", 0) != 0) {
    r.device = "cuda:" + std::to_string(dist::process_local_rank() % cuda_device_count());
  }
  r.backend = make_backend(r.device);
  Backend& b = *r.backend;
  if (!comm && dist::process_world_size() > 1) check_bucket_memory(cfg.distributed, b);
  r.comm = comm ? comm(b) : dist::make_communicator(b, communicator_options(cfg.distributed));
  // Several ranks: the same resolved configuration everywhere before anything else (agreement.h).
  agree_on_inputs(*r.comm, config_items(cfg), "configuration");

  // data.batch_size is per rank: the loader serves the global batch of one global shuffle
  // (the same for every world size) and the batcher takes this rank's shard of it.
  const int64_t batch = cfg.data.batch_size;
  const int world = r.comm->world_size();
  // A rank that does not exist would inject nothing, and the run would look like one whose
  // injection the scaler absorbed.
  if (cfg.debug.inject_rank >= world) {
    throw Error{
        ErrorKind::config,
        "debug.inject_rank: " + std::to_string(cfg.debug.inject_rank) + ", but the run has " +
            std::to_string(world) +
            (world == 1 ? " rank (rank 0)" : " ranks (0 to " + std::to_string(world - 1) + ")"),
        "give a rank of this run, or -1 for every rank"};
  }
  // What the model is (model.type) comes from nn::build_model; its input and output widths from
  // the data source: features and classes, or a language model's vocabulary size (both).
  const auto [inputs, outputs] = load_run_data(cfg, r, world, saved_input, saved_vocab);
  nn::ModelOptions model_opts =
      model_options(cfg.model, cfg.precision, cfg.loss, inputs, outputs, batch, seed);
  // The gradient-numerics hook (nn/numerics.h): the counts on logging.numerics_every's sampled
  // steps, grad_amax (logging.grad_amax, scaler.policy auto) on every step.
  model_opts.numerics = cfg.logging.numerics_every > 0 || config::measures_grad_amax(cfg);
  const bool images = cfg.model.type == config::ModelType::cnn;
  if (images) {
    // A cnn reads the data set's image shape; feature rows are a config error naming the key.
    const data::Dataset& train = r.data.train;
    if (r.language_model || train.image.size() != 3) {
      throw Error{ErrorKind::config,
                  "model.type: cnn needs image data [N, C, H, W] (data.train.source idx or "
                  "fashion_mnist), but " +
                      (r.language_model ? std::string{"the language-model data"} : train.origin) +
                      " holds " + (r.language_model ? "token windows" : "feature rows"),
                  "use model.type: mlp for feature data"};
    }
    model_opts.cnn.channels = train.image[0];
    model_opts.cnn.height = train.image[1];
    model_opts.cnn.width = train.image[2];
  }
  r.model = nn::build_model(b, model_opts);
  if (r.language_model) {
    r.lm_block_size = lm_block_size(*r.model);
    data::check_lm_windows(r.lm, r.lm_block_size);
  }
  r.schedule = std::make_unique<optim::LrSchedule>(make_schedule(cfg));
  // The groups start with iteration 0's lr and momentum (a cycled momentum keeps SGD's buffer).
  std::vector<optim::ParamGroup> groups = param_groups(*r.model, cfg.optimizer.lr);
  std::optional<dist::Communicator::Range> shard;
  if (cfg.distributed.zero == 1) {
    // ZeRO-1 (docs/distributed.md): the optimizer sees this rank's shard of the arena only, so
    // it allocates, checks and updates only that shard.
    const size_t total = r.model->params().numel();
    if (total < static_cast<size_t>(world)) {
      throw Error{ErrorKind::config,
                  "distributed.zero: 1 shards the " + std::to_string(total) + " parameters over " +
                      std::to_string(world) + " ranks: some rank would get none",
                  "set distributed.zero: 0, or run fewer ranks"};
    }
    r.zero_shard = r.comm->own_shard(total);
    shard = r.zero_shard;
    groups = shard_groups(std::move(groups), *r.zero_shard);
  }
  if (cfg.optimizer.decay_on == config::DecayOn::matrices) {
    groups[0].decay_mask = matrix_decay_mask(*r.model, shard);
  }
  r.schedule->apply(0, groups);
  r.optimizer = make_optimizer(b, cfg.optimizer, std::move(groups));
  r.scaler = std::make_unique<amp::GradScaler>(b, scaler_options(cfg));
  // The data sets go to the backend once, for the whole run.
  if (r.language_model) {
    r.batcher = std::make_unique<LmBatcher>(b, r.lm, batch, r.lm_block_size,
                                            cfg.training.eval_batches, seed, r.comm->rank(), world);
  } else {
    auto table = std::make_unique<DeviceBatcher>(b, r.data, *r.loader, batch, images);
    table->set_shard(r.comm->rank(), world);
    r.batcher = std::move(table);
  }
  return run;
}

int64_t grad_accum_steps_for(const config::RunConfig& cfg, int world) {
  const int64_t g = cfg.training.global_batch;
  if (g == 0) return cfg.training.grad_accum_steps;
  const int64_t per_step = cfg.data.batch_size * static_cast<int64_t>(world);
  if (g % per_step != 0) {
    throw Error{ErrorKind::config,
                "training.global_batch: " + std::to_string(g) +
                    " is not a multiple of data.batch_size x ranks (" +
                    std::to_string(cfg.data.batch_size) + " x " + std::to_string(world) + " = " +
                    std::to_string(per_step) + ")",
                "pick a global batch that the micro-batch times the rank count divides, or a "
                "data.batch_size that divides global_batch / ranks"};
  }
  return g / per_step;
}

StepOptions step_options(const config::RunConfig& cfg, const nn::Model& model) {
  StepOptions o;
  o.grad_accum_steps = cfg.training.grad_accum_steps;
  o.grad_clip_norm = cfg.training.grad_clip_norm;
  o.inject_at.insert(cfg.debug.inject_nonfinite_at.begin(), cfg.debug.inject_nonfinite_at.end());
  o.inject_rank = cfg.debug.inject_rank;
  o.zero = cfg.distributed.zero == 1;
  o.retry = cfg.scaler.on_overflow == config::OnOverflow::retry && config::scaler_enabled(cfg);
  o.max_retries = cfg.scaler.max_retries;
  o.min_scale = static_cast<float>(cfg.scaler.min_scale);
  // Measured where the model's backward rounds through the hook (fp16/bf16 with an instrumented
  // model): with grad_amax on by default, an fp32 run, which has no numerics, measures nothing.
  o.grad_amax = config::measures_grad_amax(cfg) && model.numerics() != nullptr &&
                model.roundings_instrumented();
  o.inject_value = cfg.debug.inject_value == config::InjectValue::inf
                       ? std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::quiet_NaN();
  if (!cfg.debug.inject_tensor.empty()) {
    const std::vector<FlatLayout::Entry>& entries = model.layout().entries();
    std::vector<std::string> names;
    for (const FlatLayout::Entry& e : entries) names.push_back(e.name);
    check_inject_tensor(cfg.debug.inject_tensor, names);
    const auto it = std::find(names.begin(), names.end(), cfg.debug.inject_tensor);
    o.inject_offset = entries[static_cast<size_t>(it - names.begin())].offset;
  }
  return o;
}

MonitorOptions monitor_options(const config::RunConfig& cfg, Clock::time_point start) {
  MonitorOptions o;
  o.max_steps = cfg.training.max_steps;
  o.metrics_every = cfg.logging.metrics_every;
  o.ring_steps = cfg.logging.every_steps;
  o.console_every = cfg.logging.every_steps;
  o.divergence_patience = cfg.training.divergence_patience;
  o.min_scale = cfg.scaler.min_scale;
  o.stop_at_min_scale = cfg.scaler.on_min_scale == config::OnMinScale::stop;
  o.retry = config::scaler_enabled(cfg) && cfg.scaler.on_overflow == config::OnOverflow::retry;
  o.profile = cfg.logging.profile;
  o.grad_clip_norm = cfg.training.grad_clip_norm;
  o.start = start;
  const auto metric = [](const config::EvalMetricRef& m) {
    return m.kind == config::EvalMetric::none ? std::string() : config::to_string(m);
  };
  o.keep_best = metric(cfg.checkpoint.keep_best);
  o.keep_best_set = config::eval_set_index(cfg, cfg.checkpoint.keep_best);
  o.early_stop = metric(cfg.training.early_stop.metric);
  o.early_stop_set = config::eval_set_index(cfg, cfg.training.early_stop.metric);
  o.eval_set_name = cfg.data.eval_name;
  o.early_stop_min_delta = cfg.training.early_stop.min_delta;
  return o;
}

}  // namespace ampctl::train
