#include "ampctl/train/memory_plan.h"

#include <algorithm>
#include <system_error>
#include <utility>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/config/problems.h"
#include "ampctl/core/checked.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/data/idx.h"
#include "ampctl/data/lm.h"
#include "ampctl/nn/models.h"
#include "ampctl/train/build.h"
#include "ampctl/train/monitor.h"

namespace ampctl::train {

namespace {

constexpr ErrorKind kKind = ErrorKind::config;
uint64_t u(int64_t v) {
  return static_cast<uint64_t>(v);
}

int64_t data_bytes(int64_t samples, int64_t features, int64_t outputs, bool classification,
                   const std::string& key) {
  // x as fp32, labels as int32 (classification) or targets as fp32.
  const int64_t per_row = checked_add(
      checked_mul(features, int64_t{4}, key, kKind),
      classification ? int64_t{4} : checked_mul(outputs, int64_t{4}, key, kKind), key, kKind);
  return checked_mul(samples, per_row, key, kKind);
}

// The model's own estimate (nn::estimate_model_memory, nn/memory_estimate.h), for
// the options the run would build it with.
nn::ModelMemory model_memory(const config::RunConfig& config, const DataShape& shape,
                             const Backend* backend) {
  const nn::ModelOptions options =
      model_options(config.model, config.precision, config.loss, shape.features, shape.outputs,
                    config.data.batch_size, static_cast<uint64_t>(config.seed));
  return nn::estimate_model_memory(options, backend);
}

}  // namespace

std::string MemoryPlan::str() const {
  std::string s =
      "parameters " + format_bytes(parameters) + ", gradients " + format_bytes(gradients);
  if (lowp_copy) s += ", fp16/bf16 copy " + format_bytes(lowp_copy);
  if (optimizer) s += ", optimizer state " + format_bytes(optimizer);
  s += ", activations " + format_bytes(activations) + ", data " + format_bytes(data);
  if (eval_windows) s += ", evaluation windows " + format_bytes(eval_windows);
  return s;
}

MemoryPlan plan_memory(const config::RunConfig& config, const DataShape& shape,
                       const Backend* backend) {
  const nn::ModelMemory model = model_memory(config, shape, backend);
  const int64_t params = model.parameters;
  const std::string& pkey = model.parameter_key;
  MemoryPlan plan;
  plan.parameter_count = params;
  const int64_t fp32 = checked_mul(params, int64_t{4}, pkey, kKind);
  plan.parameters = u(fp32);
  plan.gradients = u(fp32);
  if (config.precision != config::Precision::fp32) {
    plan.lowp_copy = u(checked_mul(params, int64_t{2}, pkey, kKind));
  }
  switch (config.optimizer.type) {
    case config::OptimizerType::adam:
    case config::OptimizerType::adamw:
      plan.optimizer = u(checked_mul(fp32, int64_t{2}, pkey, kKind));
      break;
    case config::OptimizerType::sgd:
      plan.optimizer = config.optimizer.momentum != 0.0 ? u(fp32) : 0;
      break;
  }
  plan.activations = u(model.activation_bytes);
  const bool classification = config::task_of(config.data.train) == config::Task::classification;
  plan.data = u(checked_add(
      data_bytes(shape.train_samples, shape.features, shape.outputs, classification, "data.train"),
      data_bytes(shape.eval_samples, shape.features, shape.outputs, classification, "data.eval"),
      "data", kKind));
  // A language model's evaluation windows are fixed: training.eval_batches x data.batch_size
  // windows of model.block_size token positions, built on the host as int32 and uploaded once
  // (train/batcher.h), so held twice while they are made.
  const config::DataConfig& d = config.data;
  const bool lm_eval =
      config::is_language_model(d.train) && (d.eval.has_value() || d.train.split_fraction > 0.0);
  if (lm_eval) {
    const char* key = "training.eval_batches";
    const int64_t windows = checked_mul(config.training.eval_batches, d.batch_size, key, kKind);
    const int64_t positions = checked_mul(windows, config.model.block_size, key, kKind);
    // One set of windows per evaluation set (data.eval's further sets each have theirs).
    const auto sets = static_cast<int64_t>(1 + d.eval_sets.size());
    plan.eval_windows =
        u(checked_mul(checked_mul(positions, int64_t{8}, key, kKind), sets, key, kKind));
  }
  uint64_t total = 0;
  for (uint64_t part : {plan.parameters, plan.gradients, plan.lowp_copy, plan.optimizer,
                        plan.activations, plan.data, plan.eval_windows}) {
    if (__builtin_add_overflow(total, part, &total)) {
      throw Error{kKind, pkey + ": the run's memory (" + plan.str() + ") overflows a 64-bit size"};
    }
  }
  plan.total = total;
  return plan;
}

namespace {

// The images file's header: {count, rows * cols}, or nullopt when it cannot be read.
std::optional<std::pair<int64_t, int64_t>> idx_shape(const std::filesystem::path& images) {
  std::error_code ec;
  if (!std::filesystem::exists(images, ec)) return std::nullopt;
  if (!non_regular_kind(images).empty()) return std::nullopt;  // the loader reports it
  try {
    const data::IdxHeader h = data::read_idx_header(images, data::kIdxImagesMagic);
    return std::make_pair(static_cast<int64_t>(h.dims[0]),
                          static_cast<int64_t>(h.dims[1] * h.dims[2]));
  } catch (const Error&) {
    return std::nullopt;  // a damaged file is the loader's to report, with its full message
  }
}

// {samples, features, outputs, exact} of one source.
struct SourceShape {
  int64_t samples = 0, features = 1, outputs = 1;
  bool exact = false;
};

SourceShape source_shape(const config::DataSource& s) {
  SourceShape out;
  switch (s.source) {
    case config::SourceKind::synthetic:
      out = {s.samples, s.features, s.task == config::Task::classification ? s.classes : 1, true};
      break;
    case config::SourceKind::idx:
    case config::SourceKind::fashion_mnist: {
      std::filesystem::path images = s.images;
      if (s.source == config::SourceKind::fashion_mnist) {
        const std::string stem =
            std::string(s.split == config::DatasetSplit::train ? "train" : "t10k") +
            "-images-idx3-ubyte";
        std::error_code ec;
        images = std::filesystem::path(s.dir) / (stem + ".gz");
        if (!std::filesystem::exists(images, ec)) images = std::filesystem::path(s.dir) / stem;
      }
      out.outputs = 10;
      if (const auto shape = idx_shape(images)) {
        out.samples = shape->first;
        out.features = shape->second;
        out.exact = true;
      }
      break;
    }
    case config::SourceKind::tokens:
      // The vocabulary is the config's (a GPT's logits are [rows, vocab_size]).
      out.outputs = std::max<int64_t>(s.vocab_size, 1);
      break;
    default:
      break;  // csv, text: the width is only known once the file is read
  }
  return out;
}

}  // namespace

DataShape data_shape_from_config(const config::RunConfig& config) {
  const SourceShape train = source_shape(config.data.train);
  DataShape shape{train.features, train.outputs, train.samples, 0, train.exact};
  if (config.data.eval && config.data.eval->source != config::SourceKind::split) {
    const SourceShape eval = source_shape(*config.data.eval);
    shape.eval_samples = eval.samples;
    shape.exact = shape.exact && eval.exact;
  }
  // data.eval's further sets are resident beside the first: their rows count as its.
  for (const config::NamedEvalSource& e : config.data.eval_sets) {
    const SourceShape more = source_shape(e.source);
    shape.eval_samples = checked_add(shape.eval_samples, more.samples, "data.eval", kKind);
    shape.exact = shape.exact && more.exact;
  }
  return shape;
}

void check_memory(const config::RunConfig& config, const DataShape& shape,
                  std::optional<uint64_t> available, const std::string& where,
                  const Backend* backend) {
  const MemoryPlan plan = plan_memory(config, shape, backend);
  if (!available || plan.total <= *available) return;
  const uint64_t model = plan.parameters + plan.gradients + plan.lowp_copy + plan.optimizer;
  const nn::ModelMemory keys = model_memory(config, shape, backend);
  const char* key = plan.eval_windows > model && plan.eval_windows > plan.activations &&
                            plan.eval_windows > plan.data
                        ? "training.eval_batches"
                    : model >= plan.activations && model >= plan.data ? keys.model_key.c_str()
                    : plan.activations >= plan.data                   ? keys.activation_key.c_str()
                                                                      : "data.train";
  throw Error{kKind,
              std::string(key) + ": the run needs about " + format_bytes(plan.total) + " of " +
                  where + " (" + plan.str() + "; " + std::to_string(plan.parameter_count) +
                  " parameters), and " + format_bytes(*available) + " is available",
              std::string("make ") + key + " smaller" +
                  (shape.exact ? "" : " (data files not read yet count as empty here)")};
}

void check_run_memory(const config::RunConfig& config, int64_t features, int64_t outputs,
                      int64_t train_samples, int64_t eval_samples, const Device& device,
                      const Backend* backend) {
  const DataShape shape{features, outputs, train_samples, eval_samples, true};
  if (device.type == DeviceType::cpu) {
    check_memory(config, shape, host_memory_available(), "host memory", backend);
  } else {
    // Everything the plan counts lives on the GPU for a CUDA run (the data sets are resident
    // there too); its free memory is read after the backend made its context and workspaces.
    check_memory(config, shape, cuda_free_memory(device.index), "memory on " + device.str(),
                 backend);
  }
}

void check_inject_tensor(const std::string& name, const std::vector<std::string>& names) {
  if (name.empty() || std::find(names.begin(), names.end(), name) != names.end()) return;
  const std::string near = config::closest_match(name, names);
  throw Error{ErrorKind::config, "debug.inject_tensor: the model has no parameter '" + name + "'",
              (near.empty() ? std::string() : "did you mean '" + near + "'? ") +
                  "the parameters are " + join_names(names, 64)};
}

void check_config_memory(const config::RunConfig& config) {
  // A language model's files, as their loaders check them before reading (train refuses the
  // same, before any run directory).
  for (const config::DataSource* s :
       {&config.data.train, config.data.eval ? &*config.data.eval : nullptr}) {
    if (s == nullptr ||
        (s->source != config::SourceKind::text && s->source != config::SourceKind::tokens)) {
      continue;
    }
    data::check_lm_file_memory(
        s->path, s != &config.data.train, s->source == config::SourceKind::text,
        s->vocab == config::VocabKind::byte ? data::VocabKind::byte : data::VocabKind::character,
        !s->tokenizer.empty());
  }
  const DataShape shape = data_shape_from_config(config);
  if (!config.debug.inject_tensor.empty()) {
    const nn::ModelMemory model = model_memory(config, shape, nullptr);
    if (!model.parameter_names.empty()) {
      check_inject_tensor(config.debug.inject_tensor, model.parameter_names);
    }
  }
  const bool host = config.device == "cpu" || (config.device == "auto" && cuda_device_count() == 0);
  if (host) {
    check_cpu_backend_room();  // the threads train would start, under an address-space limit
    check_memory(config, shape, host_memory_available());
  } else {
    plan_memory(config, shape);  // the GPU may be another machine's: only the sizes are checked
  }
}

}  // namespace ampctl::train
