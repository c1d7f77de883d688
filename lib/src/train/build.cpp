#include "ampctl/train/build.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/config/problems.h"
#include "ampctl/data/loader.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/adam.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/optim/sgd.h"
#include "ampctl/train/batcher.h"

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

amp::GradScalerOptions scaler_options(const config::RunConfig& c) {
  amp::GradScalerOptions o;
  o.enabled = config::scaler_enabled(c);
  o.init_scale = c.scaler.init_scale;
  o.growth_factor = c.scaler.growth_factor;
  o.backoff_factor = c.scaler.backoff_factor;
  o.growth_interval = c.scaler.growth_interval;
  o.hysteresis = static_cast<int32_t>(c.scaler.hysteresis);
  o.min_scale = c.scaler.min_scale;
  o.max_scale = c.scaler.max_scale;
  return o;
}

}  // namespace

RunObjects::RunObjects() = default;
RunObjects::~RunObjects() = default;

nn::ModelOptions model_options(const config::ModelConfig& model, config::Precision precision,
                               config::LossType loss, int64_t in_features, int64_t out_features,
                               int64_t max_batch, uint64_t seed) {
  nn::ModelOptions o;
  o.type = config::to_string(model.type);
  o.compute = compute_dtype(precision);
  o.precision = config::to_string(precision);
  o.loss =
      loss == config::LossType::cross_entropy ? nn::LossKind::cross_entropy : nn::LossKind::mse;
  o.in_features = in_features;
  o.out_features = out_features;
  o.max_batch = max_batch;
  o.seed = seed;
  o.mlp.hidden = model.hidden;
  o.mlp.activation = activation_kind(model.activation);
  o.mlp.dropout = model.dropout;
  o.mlp.layer_norm = model.layer_norm;
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

std::string resolve_device(const std::string& device) {
  if (device == "cpu") return "cpu";
  if (device == "auto") return cuda_device_count() > 0 ? "cuda:0" : "cpu";
  int index = 0;
  if (device.rfind("cuda:", 0) == 0) index = std::stoi(device.substr(5));
  if (!cuda_compiled()) {
    throw Error{ErrorKind::config,
                "device: '" + device + "' requested, but this build has no CUDA backend",
                "rebuild with -DAMPCTL_CUDA=ON, or set device: cpu (or auto)"};
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

std::unique_ptr<RunObjects> build_run(const config::RunConfig& cfg,
                                      const dist::CommunicatorFactory& comm) {
  auto run = std::make_unique<RunObjects>();
  RunObjects& r = *run;
  const auto seed = static_cast<uint64_t>(cfg.seed);
  r.device = resolve_device(cfg.device);
  r.backend = make_backend(r.device);
  Backend& b = *r.backend;
  r.comm = comm ? comm(b) : std::make_unique<dist::SingleProcess>(b);

  r.data = data::load_data(cfg.data, seed);
  const int64_t batch = cfg.data.batch_size;
  r.loader = std::make_unique<data::DataLoader>(r.data.train, batch, cfg.data.shuffle,
                                                cfg.data.drop_last, seed);
  // What the model is (model.type) comes from the registry; its input and output widths from
  // the data source.
  const data::Dataset& train = r.data.train;
  r.model = nn::build_model(
      b, model_options(cfg.model, cfg.precision, cfg.loss, train.features,
                       train.task == config::Task::classification ? train.classes : train.targets,
                       batch, seed));
  r.optimizer = make_optimizer(b, cfg.optimizer, param_groups(*r.model, cfg.optimizer.lr));
  r.scaler = std::make_unique<amp::GradScaler>(b, scaler_options(cfg));
  r.schedule =
      std::make_unique<optim::LrSchedule>(cfg.scheduler, cfg.optimizer.lr, cfg.training.max_steps);
  // The data sets go to the backend once, for the whole run.
  r.batcher = std::make_unique<DeviceBatcher>(b, r.data, *r.loader, batch);
  return run;
}

StepOptions step_options(const config::RunConfig& cfg, const nn::Model& model) {
  StepOptions o;
  o.grad_accum_steps = cfg.training.grad_accum_steps;
  o.grad_clip_norm = cfg.training.grad_clip_norm;
  o.inject_at.insert(cfg.debug.inject_nonfinite_at.begin(), cfg.debug.inject_nonfinite_at.end());
  o.inject_value = cfg.debug.inject_value == config::InjectValue::inf
                       ? std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::quiet_NaN();
  if (!cfg.debug.inject_tensor.empty()) {
    const std::vector<FlatLayout::Entry>& entries = model.layout().entries();
    std::vector<std::string> names;
    for (const FlatLayout::Entry& e : entries) names.push_back(e.name);
    const auto it = std::find(names.begin(), names.end(), cfg.debug.inject_tensor);
    if (it == names.end()) {
      const std::string near = config::closest_match(cfg.debug.inject_tensor, names);
      throw Error{
          ErrorKind::config,
          "debug.inject_tensor: the model has no parameter '" + cfg.debug.inject_tensor + "'",
          (near.empty() ? std::string() : "did you mean '" + near + "'? ") + "the parameters are " +
              join_names(names, 64)};
    }
    o.inject_offset = entries[static_cast<size_t>(it - names.begin())].offset;
  }
  return o;
}

MonitorOptions monitor_options(const config::RunConfig& cfg, Clock::time_point start) {
  MonitorOptions o;
  o.max_steps = cfg.training.max_steps;
  o.metrics_every = cfg.logging.metrics_every;
  o.ring_steps = cfg.logging.every_steps;
  o.divergence_patience = cfg.training.divergence_patience;
  o.min_scale = cfg.scaler.min_scale;
  o.profile = cfg.logging.profile;
  o.start = start;
  return o;
}

}  // namespace ampctl::train
