#include "ampctl/train/trainer.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/build_info.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/config/problems.h"
#include "ampctl/data/dataset.h"
#include "ampctl/data/loader.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/adam.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/optim/sgd.h"
#include "ampctl/train/memory_plan.h"
#include "ampctl/train/signals.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

// JSON numbers: non-finite values have no JSON spelling; metrics write them as null.
nlohmann::json number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

// Checkpoint metrics hold doubles that may be infinite or NaN (a best loss before any finite
// one): JSON has no spelling for them, so they are stored as ".inf", "-.inf", ".nan".
nlohmann::json encode_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return v;
}

double decode_double(const nlohmann::json& j, const char* key) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == ".nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == ".inf") return std::numeric_limits<double>::infinity();
    if (s == "-.inf") return -std::numeric_limits<double>::infinity();
  }
  throw Error{ErrorKind::input,
              std::string("checkpoint metrics: '") + key + "' must be a number, got " + j.dump()};
}

const nlohmann::json& member(const nlohmann::json& j, const char* section, const char* key) {
  if (!j.is_object() || !j.contains(key)) {
    throw Error{ErrorKind::input,
                std::string("checkpoint ") + section + ": missing key '" + key + "'"};
  }
  return j.at(key);
}

int64_t member_int(const nlohmann::json& j, const char* section, const char* key) {
  const nlohmann::json& v = member(j, section, key);
  if (!v.is_number_integer()) {
    throw Error{ErrorKind::input, std::string("checkpoint ") + section + ": '" + key +
                                      "' must be an integer, got " + v.dump()};
  }
  return v.get<int64_t>();
}

std::vector<checkpoint::NamedTensor> download_all(
    Backend& b, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<checkpoint::NamedTensor> out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors)
    out.push_back(checkpoint::from_host_tensor(name, b.to_host(t)));
  return out;
}

std::string shape_text(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Uploads `stored` into `targets` (same names, order, dtypes and shapes, else Error{input}).
void upload_all(Backend& b, const std::vector<std::pair<std::string, Tensor>>& targets,
                const std::vector<checkpoint::NamedTensor>& stored, const char* section) {
  if (stored.size() != targets.size()) {
    throw Error{ErrorKind::input,
                std::string("checkpoint ") + section + ": " + std::to_string(stored.size()) +
                    " tensors, the model needs " + std::to_string(targets.size()),
                "the checkpoint was written for another model or optimizer configuration"};
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto& [name, t] = targets[i];
    const checkpoint::NamedTensor& s = stored[i];
    if (s.name != name) {
      throw Error{ErrorKind::input, std::string("checkpoint ") + section + ": tensor " +
                                        std::to_string(i) + " is '" + s.name + "', expected '" +
                                        name + "'"};
    }
    if (s.dtype != t.dtype() || s.shape != t.shape()) {
      throw Error{ErrorKind::input,
                  std::string("checkpoint ") + section + ": tensor '" + name + "' is " +
                      dtype_name(s.dtype) + " " + shape_text(s.shape) + ", expected " +
                      dtype_name(t.dtype()) + " " + shape_text(t.shape()),
                  "the checkpoint was written for another model configuration"};
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    b.upload(targets[i].second, stored[i].data.data(), stored[i].data.size());
  }
}

// "a, b, c" for at most `max` names, then "and N more".
std::string join_names(const std::vector<std::string>& names, size_t max = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > max) out += " and " + std::to_string(names.size() - max) + " more";
  return out;
}

Error unusable_run_dir(const fs::path& dir, const std::string& why) {
  return Error{ErrorKind::usage, "run directory " + dir.string() + ": " + why,
               "give a writable directory (train: --run-dir DIR; resume: copy the run directory "
               "somewhere writable and resume the copy)"};
}

// Makes `dir` (and its missing parents) and proves it writable with a probe file that is removed
// again, before any data is loaded or anything else is written: an unusable run directory (a
// path through a regular file, a file of that name, no permission, a read-only or pseudo file
// system) is refused up front, naming the path. Returns the directories it created, outermost
// first, so a run that fails before writing anything can remove them again.
std::vector<fs::path> prepare_run_dir(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> missing;
  fs::path p = dir;
  while (!p.empty()) {
    const fs::file_status st = fs::status(p, ec);
    if (st.type() == fs::file_type::not_found) {
      missing.push_back(p);
      const fs::path parent = p.parent_path();
      if (parent == p) break;
      p = parent;
      continue;
    }
    if (ec) throw unusable_run_dir(dir, "cannot inspect " + p.string() + ": " + ec.message());
    if (st.type() != fs::file_type::directory) {
      throw unusable_run_dir(
          dir, p == dir ? "exists and is not a directory" : p.string() + " is not a directory");
    }
    break;
  }
  std::reverse(missing.begin(), missing.end());
  std::vector<fs::path> created;
  for (const fs::path& m : missing) {
    if (!fs::create_directory(m, ec) && ec) {
      for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);
      throw unusable_run_dir(dir, "cannot create " + m.string() + ": " + ec.message());
    }
    created.push_back(m);
  }
  const fs::path probe = dir / (".ampctl-write-test-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);
    throw unusable_run_dir(dir, std::string("is not writable: ") + std::strerror(err));
  }
  ::close(fd);
  fs::remove(probe, ec);
  return created;
}

// Removes the directories prepare_run_dir created, innermost first, if they are still empty.
void remove_created_dirs(const std::vector<fs::path>& created) {
  std::error_code ec;
  for (auto it = created.rbegin(); it != created.rend(); ++it) {
    if (fs::is_empty(*it, ec)) fs::remove(*it, ec);
  }
}

nlohmann::json counts_json(const std::vector<std::string>& names,
                           const std::vector<int64_t>& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < names.size() && i < counts.size(); ++i) {
    if (counts[i] > 0) j[names[i]] = counts[i];
  }
  return j;
}

// Reads counts_json back into `counts` (names it does not know are a damaged checkpoint).
void counts_from_json(const nlohmann::json& j, const std::vector<std::string>& names,
                      std::vector<int64_t>& counts, const char* key) {
  counts.assign(names.size(), 0);
  if (!j.is_object()) {
    throw Error{ErrorKind::input,
                std::string("checkpoint metrics: '") + key + "' must be an object"};
  }
  for (const auto& [name, v] : j.items()) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end() || !v.is_number_integer() || v.get<int64_t>() < 0) {
      throw Error{ErrorKind::input, std::string("checkpoint metrics: '") + key + "': entry '" +
                                        name + "' is not a parameter with a count >= 0"};
    }
    counts[static_cast<size_t>(it - names.begin())] = v.get<int64_t>();
  }
}

}  // namespace

void Trainer::Streak::extend(int64_t step, const int32_t* flags) {
  if (length++ == 0) first_step = step;
  if (flags == nullptr) return;
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += flags[i] != 0;
}

void Trainer::Streak::reset() {
  length = 0;
  first_step = 0;
  std::fill(counts.begin(), counts.end(), 0);
}

Trainer::Resident Trainer::resident(Backend& b, const data::Dataset& d) {
  // On the CPU the tensors view the data set's own vectors (it lives as long as the trainer);
  // elsewhere they are copied to the device once.
  auto wrap = [&](const void* p, const Shape& shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    if (b.device().type == DeviceType::cpu) {
      return Tensor{std::make_shared<Storage>(const_cast<void*>(p), bytes, Device{}, nullptr), 0,
                    shape, dtype};
    }
    return b.from_host(shape, dtype, p);
  };
  Resident r;
  const int64_t n = d.size();
  r.x = wrap(d.x.data(), {n, d.features}, DType::f32);
  if (d.task == config::Task::classification) {
    r.labels = wrap(d.labels.data(), {n}, DType::i32);
  } else {
    r.y = wrap(d.y.data(), {n, d.targets}, DType::f32);
  }
  return r;
}

void Trainer::upload_order() {
  const std::vector<int64_t>& order = m_loader->order();
  for (size_t i = 0; i < order.size(); ++i) m_order_host[i] = static_cast<int32_t>(order[i]);
  m_backend->upload(m_order_dev, m_order_host.data(), m_order_dev.nbytes());
}

void Trainer::setup() {
  m_final_loss = std::numeric_limits<double>::quiet_NaN();
  m_best_loss = std::numeric_limits<double>::infinity();
  m_min_scale = std::numeric_limits<double>::infinity();
  m_device = resolve_device(m_cfg.device);
  m_backend = make_backend(m_device);
  Backend& b = *m_backend;

  m_data = data::load_data(m_cfg.data, static_cast<uint64_t>(m_cfg.seed));
  const data::Dataset& train = m_data.train;
  m_classification = train.task == config::Task::classification;
  m_features = train.features;
  m_outputs = m_classification ? train.classes : train.targets;
  check_run_memory(m_cfg, m_features, m_outputs, train.size(),
                   m_data.eval ? m_data.eval->size() : 0, b.device());
  m_batch = m_cfg.data.batch_size;
  m_loader = std::make_unique<data::DataLoader>(
      train, m_batch, m_cfg.data.shuffle, m_cfg.data.drop_last, static_cast<uint64_t>(m_cfg.seed));

  m_model = std::make_unique<nn::Model>(b, m_cfg.model, m_cfg.precision, m_cfg.loss, m_features,
                                        m_outputs, m_batch, static_cast<uint64_t>(m_cfg.seed));
  m_opt = make_optimizer(b, m_cfg.optimizer, m_model->param_groups(m_cfg.optimizer.lr));
  m_scaler = std::make_unique<amp::GradScaler>(b, scaler_options(m_cfg));
  m_profile = m_cfg.logging.profile;
  if (m_profile) m_scaler->set_phase_hook([this] { phase_end(kUnscale); });
  m_schedule = std::make_unique<optim::LrSchedule>(m_cfg.scheduler, m_cfg.optimizer.lr,
                                                   m_cfg.training.max_steps);

  // The data sets live on the backend for the whole run and each batch is gathered there by
  // the loader's permutation (uploaded once per epoch), so a step copies nothing from the host.
  m_train_dev = resident(b, train);
  if (m_data.eval) m_eval_dev = resident(b, *m_data.eval);
  m_order_host.resize(static_cast<size_t>(train.size()));
  m_order_dev = b.empty({train.size()}, DType::i32);
  upload_order();
  m_x = b.empty({m_batch, m_features}, DType::f32);
  if (m_classification) {
    m_labels = b.empty({m_batch}, DType::i32);
  } else {
    m_y = b.empty({m_batch, m_outputs}, DType::f32);
  }
  m_loss = b.zeros({1}, DType::f32);
  m_loss_acc = b.zeros({1}, DType::f32);
  m_ones = b.empty({1}, DType::f32);
  b.fill(m_ones, 1.0);
  m_seed = b.zeros({1}, DType::f32);
  m_accum_inv = b.empty({1}, DType::f32);
  b.fill(m_accum_inv, 1.0 / static_cast<double>(m_cfg.training.grad_accum_steps));
  m_norm = b.zeros({1}, DType::f32);
  m_coef = b.zeros({1}, DType::f32);
  m_zero_f = b.zeros({1}, DType::f32);
  m_inject.insert(m_cfg.debug.inject_nonfinite_at.begin(), m_cfg.debug.inject_nonfinite_at.end());

  // One segment of the gradient arena per parameter tensor: the scaler's check pass tells which
  // of them held an inf or NaN.
  const std::vector<FlatLayout::Entry>& entries = m_model->layout().entries();
  m_param_names.clear();
  std::vector<int64_t> starts;
  for (const FlatLayout::Entry& e : entries) {
    m_param_names.push_back(e.name);
    starts.push_back(static_cast<int64_t>(e.offset));
  }
  const size_t n_params = m_param_names.size();
  m_overflow_counts.assign(n_params, 0);
  m_floor_streak.counts.assign(n_params, 0);
  m_loss_streak.counts.assign(n_params, 0);
  m_floor_streak.reset();
  m_loss_streak.reset();
  m_scale_floor = m_cfg.scaler.min_scale > 0 ? static_cast<float>(m_cfg.scaler.min_scale) : FLT_MIN;
  size_t inject_offset = 0;
  if (!m_cfg.debug.inject_tensor.empty()) {
    const auto it =
        std::find(m_param_names.begin(), m_param_names.end(), m_cfg.debug.inject_tensor);
    if (it == m_param_names.end()) {
      const std::string near = config::closest_match(m_cfg.debug.inject_tensor, m_param_names);
      throw Error{
          ErrorKind::config,
          "debug.inject_tensor: the model has no parameter '" + m_cfg.debug.inject_tensor + "'",
          (near.empty() ? std::string() : "did you mean '" + near + "'? ") + "the parameters are " +
              join_names(m_param_names, 64)};
    }
    inject_offset = entries[static_cast<size_t>(it - m_param_names.begin())].offset;
  }
  m_inject_at = m_model->grads().view(inject_offset, {1});

  // PyTorch creates the scaler's state at the first scale(); we create it here, before the
  // first step, so no step allocates.
  if (m_scaler->is_enabled()) m_scaler->scale(m_ones);
  const bool attribute = m_scaler->is_enabled() && !starts.empty() && m_opt->grads().size() == 1 &&
                         m_opt->grads()[0].numel() == m_model->layout().total();
  if (attribute) m_scaler->set_grad_segments(*m_opt, starts);

  m_ring.capacity = std::clamp<int64_t>(m_cfg.logging.every_steps, 1, 1024);
  m_ring.f = b.zeros({m_ring.capacity, StepRing::kF}, DType::f32);
  m_ring.i = b.zeros({m_ring.capacity, StepRing::kI}, DType::i32);
  m_ring.host_f.resize(static_cast<size_t>(m_ring.capacity * StepRing::kF));
  m_ring.host_i.resize(static_cast<size_t>(m_ring.capacity * StepRing::kI));
  m_ring.segments = attribute ? static_cast<int64_t>(n_params) : 0;
  if (attribute) m_ring.seg = b.zeros({m_ring.capacity, m_ring.segments}, DType::i32);
  m_ring.host_seg.assign(static_cast<size_t>(m_ring.capacity * m_ring.segments), 0);
  m_ring.info.reserve(static_cast<size_t>(m_ring.capacity));
}

void Trainer::train_step(int64_t step) {
  Backend& b = *m_backend;
  const double lr = m_schedule->lr_at(step - 1);
  for (auto& g : m_opt->param_groups()) g.lr = lr;

  const int64_t accum = m_cfg.training.grad_accum_steps;
  const bool scaling = m_scaler->is_enabled();
  // The backward seed: the loss scale (the scaled loss's gradient), divided by the number of
  // micro-batches as PyTorch's recipe divides the loss.
  Tensor seed = scaling ? m_scaler->scale_tensor() : m_ones;
  if (accum > 1) {
    b.mul_scalar_tensor(m_accum_inv, seed, m_seed);
    seed = m_seed;
  }
  const int64_t row = static_cast<int64_t>(m_ring.info.size());
  // The scale this step's backward uses (before update changes it).
  b.copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 1), {1}),
         scaling ? m_scaler->scale_tensor() : m_ones);

  m_model->zero_grad();
  b.fill(m_loss_acc, 0.0);
  for (int64_t micro = 0; micro < accum; ++micro) {
    int64_t first = 0;
    bool epoch_ended = false;
    const int64_t rows = m_loader->take(&first, &epoch_ended);
    const Tensor x = m_x.view(0, {rows, m_features});
    b.gather_rows(m_train_dev.x, m_order_dev, first, x);
    Tensor target;
    if (m_classification) {
      target = m_labels.view(0, {rows});
      b.gather_rows(m_train_dev.labels, m_order_dev, first, target);
    } else {
      target = m_y.view(0, {rows, m_outputs});
      b.gather_rows(m_train_dev.y, m_order_dev, first, target);
    }
    // The batch above was gathered with the old order; the new epoch's goes up after it.
    if (epoch_ended) upload_order();
    phase_end(kData);
    m_model->forward(x, rows, /*training=*/true);
    m_model->loss(target, rows, m_loss, Tensor{}, seed);
    phase_end(kForward);
    m_model->backward(rows);
    b.add_(m_loss_acc, m_loss, 1.0f / static_cast<float>(accum));
    m_samples += rows;
    phase_end(kBackward);
  }

  if (m_inject.count(step)) {
    const double v = m_cfg.debug.inject_value == config::InjectValue::inf
                         ? std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
    b.fill(m_inject_at, v);
  }

  if (m_cfg.training.grad_clip_norm) {
    // PyTorch's recipe: unscale first so the norm and the threshold are in real units.
    m_scaler->unscale_(*m_opt);
    const Tensor grads = m_model->grads();
    b.global_norm(std::span<const Tensor>(&grads, 1), m_norm);
    b.clip_coef(m_norm, static_cast<float>(*m_cfg.training.grad_clip_norm), m_coef);
    b.mul_scalar_tensor(grads, m_coef, grads);
  }

  // The scaler's hook closes the unscale/check phase inside step(); without a scaler (bf16,
  // fp32) only clipping, if any, is in it.
  if (!m_scaler->is_enabled()) phase_end(kUnscale);
  m_scaler->step(*m_opt);
  phase_end(kOptimizer);
  m_scaler->update();
  phase_end(kUpdate);

  b.copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 0), {1}), m_loss_acc);
  if (scaling) {
    b.copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 2), {1}),
           m_scaler->found_inf_tensor());
    b.copy(m_ring.i.view(static_cast<size_t>(row * StepRing::kI + 0), {1}),
           m_scaler->growth_tracker_tensor());
    b.copy(m_ring.i.view(static_cast<size_t>(row * StepRing::kI + 1), {1}),
           m_scaler->hysteresis_tracker_tensor());
    if (m_ring.segments > 0) {
      b.copy(m_ring.seg.view(static_cast<size_t>(row * m_ring.segments), {m_ring.segments}),
             m_scaler->segment_found_tensor(*m_opt));
    }
  } else {
    b.copy(m_ring.f.view(static_cast<size_t>(row * StepRing::kF + 2), {1}), m_zero_f);
  }
  m_ring.info.push_back({step, lr, seconds_since(m_t0)});
}

void Trainer::flush() {
  if (m_ring.info.empty()) return;
  Backend& b = *m_backend;
  b.download(m_ring.host_f.data(), m_ring.f);  // the one wait per logging interval
  b.download(m_ring.host_i.data(), m_ring.i);
  const int64_t segments = m_ring.segments;
  if (segments > 0) b.download(m_ring.host_seg.data(), m_ring.seg);
  const bool scaling = m_scaler->is_enabled();
  const int64_t patience = m_cfg.training.divergence_patience;
  // This interval's overflows per tensor, for the console line.
  std::vector<int64_t> interval_counts(static_cast<size_t>(segments), 0);
  for (size_t r = 0; r < m_ring.info.size(); ++r) {
    const auto& info = m_ring.info[r];
    const float loss = m_ring.host_f[r * StepRing::kF + 0];
    const float scale = m_ring.host_f[r * StepRing::kF + 1];
    const bool found_inf = m_ring.host_f[r * StepRing::kF + 2] != 0.0f;
    const int32_t tracker = m_ring.host_i[r * StepRing::kI + 0];
    const int32_t hysteresis = m_ring.host_i[r * StepRing::kI + 1];
    const int32_t* flags =
        segments > 0 ? m_ring.host_seg.data() + r * static_cast<size_t>(segments) : nullptr;
    m_steps_done = info.step;
    if (found_inf) ++m_skipped;
    if (std::isfinite(loss)) {
      m_final_loss = loss;
      m_best_loss = std::min(m_best_loss, static_cast<double>(loss));
    }
    m_min_scale = std::min(m_min_scale, static_cast<double>(scale));
    m_max_scale = std::max(m_max_scale, static_cast<double>(scale));
    nlohmann::json overflow_tensors = nlohmann::json::array();
    if (found_inf && flags != nullptr) {
      for (int64_t s = 0; s < segments; ++s) {
        if (flags[s] == 0) continue;
        ++m_overflow_counts[static_cast<size_t>(s)];
        ++interval_counts[static_cast<size_t>(s)];
        overflow_tensors.push_back(m_param_names[static_cast<size_t>(s)]);
      }
    }

    // Divergence rules (see trainer.h), step by step in order.
    const int32_t* streak_flags = found_inf ? flags : nullptr;
    if (scaling && found_inf && scale <= m_scale_floor) {
      m_floor_streak.extend(info.step, streak_flags);
    } else {
      m_floor_streak.reset();
    }
    if (!std::isfinite(loss)) {
      m_loss_streak.extend(info.step, streak_flags);
    } else {
      m_loss_streak.reset();
    }
    if (patience > 0 && !m_divergence) {
      const int64_t last_step = m_ring.info.back().step;
      if (m_floor_streak.length >= patience) {
        m_divergence = Divergence{
            info.step, last_step, "overflow_at_scale_floor",
            fmt::format(
                "the gradients overflowed in {} consecutive steps ({}-{}) with the loss "
                "scale at its floor {:g} ({})",
                m_floor_streak.length, m_floor_streak.first_step, info.step,
                static_cast<double>(m_scale_floor),
                m_cfg.scaler.min_scale > 0 ? "scaler.min_scale" : "2^-126: scaler.min_scale is 0"),
            ranked(m_floor_streak.counts)};
      } else if (m_loss_streak.length >= patience) {
        m_divergence = Divergence{
            info.step, last_step, "nonfinite_loss",
            fmt::format("the training loss was non-finite in {} consecutive steps ({}-{})",
                        m_loss_streak.length, m_loss_streak.first_step, info.step),
            ranked(m_loss_streak.counts)};
      }
    }

    if (info.step % m_cfg.logging.metrics_every == 0 || info.step == m_cfg.training.max_steps) {
      nlohmann::json line = {{"kind", "train"},
                             {"step", info.step},
                             {"loss", number(loss)},
                             {"scale", number(scale)},
                             {"found_inf", found_inf},
                             {"skipped", found_inf},
                             {"growth_tracker", scaling ? tracker : 0},
                             {"lr", info.lr},
                             {"time_s", info.time_s}};
      if (scaling) line["hysteresis_tracker"] = hysteresis;
      if (found_inf && flags != nullptr) line["overflow_tensors"] = std::move(overflow_tensors);
      m_metrics << line.dump() << '\n';
    }
  }
  m_metrics.flush();
  check_metrics_stream();
  const auto& last = m_ring.info.back();
  const double elapsed = seconds_since(m_t0);
  const double rate = m_train_seconds > 0 ? m_samples / m_train_seconds : 0.0;
  const double eta = m_steps_done > 0 ? (m_train_seconds / m_steps_done) *
                                            (m_cfg.training.max_steps - m_steps_done)
                                      : 0.0;
  std::string overflowed;
  if (const std::vector<std::string> names = ranked(interval_counts); !names.empty()) {
    overflowed = " overflow in " + join_names(names, 3);
  }
  spdlog::info(
      "step {:>6}/{} loss {:.5g} scale {:g} skipped {}{} lr {:.3g} {:.0f} samples/s ETA {} "
      "({:.1f}s)",
      last.step, m_cfg.training.max_steps,
      m_ring.host_f[(m_ring.info.size() - 1) * StepRing::kF + 0],
      scaling ? m_scaler->get_scale() : 1.0, m_skipped, overflowed, last.lr, rate, format_eta(eta),
      elapsed);
  m_final_scale = scaling ? m_scaler->get_scale() : 1.0;
  m_ring.info.clear();
}

void Trainer::check_metrics_stream() {
  if (!m_metrics) {
    throw Error{ErrorKind::runtime, "cannot write " + (m_run_dir / "metrics.jsonl").string() +
                                        " (disk full or I/O error)"};
  }
}

std::vector<std::string> Trainer::ranked(const std::vector<int64_t>& counts) const {
  std::vector<size_t> order;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return counts[a] > counts[b]; });
  std::vector<std::string> names;
  for (size_t i : order) names.push_back(m_param_names[i]);
  return names;
}

std::vector<std::string> Trainer::nonfinite_tensors(const Tensor& arena) {
  std::vector<float> host(arena.numel());
  m_backend->download(host.data(), arena);
  std::vector<std::string> names;
  const std::vector<FlatLayout::Entry>& entries = m_model->layout().entries();
  for (const FlatLayout::Entry& e : entries) {
    const float* p = host.data() + e.offset;
    if (!std::all_of(p, p + e.numel, [](float v) { return std::isfinite(v); })) {
      names.push_back(e.name);
    }
  }
  return names;
}

nlohmann::json Trainer::evaluate(int64_t step) {
  if (!m_data.eval) return nullptr;
  const auto t0 = Clock::now();
  Backend& b = *m_backend;
  const data::Dataset& eval = *m_data.eval;
  Tensor loss_sum = b.zeros({1}, DType::f32);
  Tensor correct = b.zeros({1}, DType::i32);
  Tensor correct_sum = b.zeros({1}, DType::f32);
  Tensor correct_f = b.zeros({1}, DType::f32);
  const int64_t n = eval.size();
  for (int64_t done = 0; done < n;) {
    if (stop_signal() != 0) {
      // A long evaluation must not hold a stop request up: the caller checkpoints, and the
      // resumed run evaluates this step again from the start.
      m_eval_pending = true;
      m_eval_seconds += seconds_since(t0);
      return m_last_eval;
    }
    const int64_t rows = std::min(m_batch, n - done);
    // Evaluation walks the resident set in stored order: contiguous rows, views only.
    const Tensor x = m_eval_dev.x.view(static_cast<size_t>(done * m_features), {rows, m_features});
    const Tensor target =
        m_classification
            ? m_eval_dev.labels.view(static_cast<size_t>(done), {rows})
            : m_eval_dev.y.view(static_cast<size_t>(done * m_outputs), {rows, m_outputs});
    m_model->forward(x, rows, /*training=*/false);
    m_model->loss(target, rows, m_loss, m_classification ? correct : Tensor{}, Tensor{});
    b.add_(loss_sum, m_loss, static_cast<float>(rows));
    if (m_classification) {
      b.cast(correct, correct_f);
      b.add_(correct_sum, correct_f);
    }
    done += rows;
  }
  const double loss = b.read_scalar_f32(loss_sum) / static_cast<double>(n);
  nlohmann::json line = {{"kind", "eval"}, {"step", step}, {"loss", number(loss)}};
  if (m_classification) {
    const double acc = b.read_scalar_f32(correct_sum) / static_cast<double>(n);
    line["accuracy"] = acc;
    m_best_eval_acc = std::max(m_best_eval_acc.value_or(0.0), acc);
  }
  line["time_s"] = seconds_since(m_t0);
  if (std::isfinite(loss)) m_best_eval_loss = std::min(m_best_eval_loss.value_or(loss), loss);
  m_metrics << line.dump() << '\n';
  m_metrics.flush();
  spdlog::info("eval  step {:>6} loss {:.5g}{}", step, loss,
               m_classification ? fmt::format(" accuracy {:.4f}", line["accuracy"].get<double>())
                                : std::string());
  m_eval_seconds += seconds_since(t0);
  return line;
}

void Trainer::begin() {
  // Refuse an unusable device or run directory before anything is loaded or written.
  resolve_device(m_cfg.device);
  const std::vector<fs::path> created = prepare_run_dir(m_run_dir);
  try {
    setup();
  } catch (...) {
    remove_created_dirs(created);  // bad data, an unknown debug.inject_tensor: leave nothing
    throw;
  }
  {
    std::ofstream out(m_run_dir / "config.yaml");
    out << config::to_yaml(m_cfg);
    if (!out)
      throw Error{ErrorKind::runtime, "cannot write " + (m_run_dir / "config.yaml").string()};
  }
  m_metrics.open(m_run_dir / "metrics.jsonl", std::ios::trunc);
  if (!m_metrics) {
    throw Error{ErrorKind::runtime, "cannot write " + (m_run_dir / "metrics.jsonl").string()};
  }
  spdlog::info("ampctl {}: run '{}' in {}", AMPCTL_VERSION, m_cfg.name, m_run_dir.string());
  spdlog::info("backend {}, precision {}, loss scaling {}", m_backend->description(),
               config::to_string(m_cfg.precision), m_scaler->is_enabled() ? "on" : "off");
  spdlog::info("model: {} parameters; data: {} training samples x {} features{}",
               m_model->num_params(), m_data.train.size(), m_features,
               m_data.eval ? fmt::format(", {} eval samples", m_data.eval->size()) : "");
  spdlog::info("schedule: {}", m_schedule->describe());
  m_next_step = 1;
  if (const int sig = stop_signal()) stop(sig);  // it came while the data loaded
}

checkpoint::CheckpointData Trainer::checkpoint_data() {
  flush();
  Backend& b = *m_backend;
  checkpoint::CheckpointData d;
  d.step = m_next_step - 1;
  d.config = config::to_json(m_cfg);
  d.scaler = m_scaler->state_dict();
  d.model = download_all(b, m_model->state_tensors());
  d.optimizer = m_opt->state_dict();
  d.optimizer_tensors = download_all(b, m_opt->state_tensors());
  nlohmann::json sched_type = nullptr;
  if (d.config.contains("scheduler") && d.config["scheduler"].contains("type")) {
    sched_type = d.config["scheduler"]["type"];
  }
  d.scheduler = {{"type", sched_type}, {"last_step", d.step}};
  d.rng = m_model->rng_state();
  d.data = m_loader->state();
  d.metrics = {
      {"steps_done", m_steps_done},
      {"skipped", m_skipped},
      {"samples", m_samples},
      {"final_loss", encode_double(m_final_loss)},
      {"best_loss", encode_double(m_best_loss)},
      {"final_scale", encode_double(m_final_scale)},
      {"min_scale", encode_double(m_min_scale)},
      {"max_scale", encode_double(m_max_scale)},
      {"train_seconds", m_train_seconds},
      {"eval_seconds", m_eval_seconds},
      {"steady", m_steady},
      {"steady_seconds", m_steady_seconds},
      {"steady_samples", m_steady_samples},
      {"wall_time_s", seconds_since(m_t0)},
      {"last_eval", m_last_eval},
      {"best_eval_loss", m_best_eval_loss ? nlohmann::json(*m_best_eval_loss) : nlohmann::json()},
      {"best_eval_accuracy",
       m_best_eval_acc ? nlohmann::json(*m_best_eval_acc) : nlohmann::json()}};
  if (m_eval_pending) d.metrics["pending_eval"] = true;
  if (std::isfinite(m_final_loss)) d.metrics["last_loss"] = m_final_loss;
  // Attribution and divergence state, so a resumed run reports and stops as an uninterrupted one.
  d.metrics["overflow_counts"] = counts_json(m_param_names, m_overflow_counts);
  for (const auto& [key, streak] :
       {std::pair<const char*, const Streak*>{"floor_streak", &m_floor_streak},
        std::pair<const char*, const Streak*>{"loss_streak", &m_loss_streak}}) {
    d.metrics[key] = {{"length", streak->length},
                      {"first_step", streak->first_step},
                      {"overflow_counts", counts_json(m_param_names, streak->counts)}};
  }
  return d;
}

fs::path Trainer::write_checkpoint() {
  flush_and_check();
  if (m_cfg.training.divergence_patience > 0) {
    // A non-finite state is lost: written, it would become latest and rotate good ones out.
    std::vector<std::string> bad = nonfinite_tensors(m_model->params());
    if (!bad.empty()) {
      const int64_t step = m_next_step - 1;
      m_divergence = Divergence{step,
                                step,
                                "nonfinite_parameters",
                                "the checkpoint due after it found non-finite parameters",
                                {}};
      diverge();
    }
  }
  const checkpoint::CheckpointData d = checkpoint_data();
  const fs::path path = checkpoint::write_checkpoint(m_run_dir, d, m_cfg.checkpoint.keep_last);
  m_last_checkpoint = d.step;
  spdlog::info("checkpoint: {}", path.string());
  return path;
}

void Trainer::restore(const checkpoint::CheckpointData& ck) {
  Backend& b = *m_backend;
  upload_all(b, m_model->state_tensors(), ck.model, "model");
  m_model->sync_lowp();
  m_opt->load_state_dict(ck.optimizer);
  upload_all(b, m_opt->state_tensors(), ck.optimizer_tensors, "optimizer");
  // The scaler's tensors exist (setup() ran its first scale()): load_state_dict fills them.
  if (m_scaler->is_enabled()) {
    m_scaler->load_state_dict(ck.scaler);
  } else if (!ck.scaler.empty()) {
    throw Error{ErrorKind::input, "checkpoint scaler: holds a state but loss scaling is off"};
  }
  m_loader->restore(ck.data);
  upload_order();
  m_model->set_rng_state(ck.rng);

  const nlohmann::json& m = ck.metrics;
  const char* sec = "metrics";
  m_steps_done = member_int(m, sec, "steps_done");
  m_skipped = member_int(m, sec, "skipped");
  m_samples = member_int(m, sec, "samples");
  m_final_loss = decode_double(member(m, sec, "final_loss"), "final_loss");
  m_best_loss = decode_double(member(m, sec, "best_loss"), "best_loss");
  m_final_scale = decode_double(member(m, sec, "final_scale"), "final_scale");
  m_min_scale = decode_double(member(m, sec, "min_scale"), "min_scale");
  m_max_scale = decode_double(member(m, sec, "max_scale"), "max_scale");
  m_train_seconds = decode_double(member(m, sec, "train_seconds"), "train_seconds");
  m_eval_seconds = decode_double(member(m, sec, "eval_seconds"), "eval_seconds");
  const nlohmann::json& steady = member(m, sec, "steady");
  if (!steady.is_boolean()) {
    throw Error{ErrorKind::input, "checkpoint metrics: 'steady' must be a boolean"};
  }
  m_steady = steady.get<bool>();
  m_steady_seconds = decode_double(member(m, sec, "steady_seconds"), "steady_seconds");
  m_steady_samples = member_int(m, sec, "steady_samples");
  const double wall = decode_double(member(m, sec, "wall_time_s"), "wall_time_s");
  if (std::isfinite(wall) && wall >= 0) {
    m_t0 = Clock::now() -
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wall));
  }
  m_last_eval = member(m, sec, "last_eval");
  const nlohmann::json& bel = member(m, sec, "best_eval_loss");
  m_best_eval_loss.reset();
  if (!bel.is_null()) m_best_eval_loss = decode_double(bel, "best_eval_loss");
  const nlohmann::json& bea = member(m, sec, "best_eval_accuracy");
  m_best_eval_acc.reset();
  if (!bea.is_null()) m_best_eval_acc = decode_double(bea, "best_eval_accuracy");
  // Absent from checkpoints written before overflow attribution: start from zero.
  m_floor_streak.reset();
  m_loss_streak.reset();
  std::fill(m_overflow_counts.begin(), m_overflow_counts.end(), 0);
  if (m.contains("overflow_counts")) {
    counts_from_json(m.at("overflow_counts"), m_param_names, m_overflow_counts, "overflow_counts");
  }
  for (auto& [key, streak] : {std::pair<const char*, Streak*>{"floor_streak", &m_floor_streak},
                              std::pair<const char*, Streak*>{"loss_streak", &m_loss_streak}}) {
    if (!m.contains(key)) continue;
    const nlohmann::json& j = m.at(key);
    streak->length = member_int(j, key, "length");
    streak->first_step = member_int(j, key, "first_step");
    if (streak->length < 0 || streak->first_step < 0) {
      throw Error{ErrorKind::input, std::string("checkpoint ") + key + ": negative length or step"};
    }
    counts_from_json(member(j, key, "overflow_counts"), m_param_names, streak->counts, key);
  }
  m_eval_pending = false;
  if (m.contains("pending_eval")) {
    if (!m.at("pending_eval").is_boolean()) {
      throw Error{ErrorKind::input, "checkpoint metrics: 'pending_eval' must be a boolean"};
    }
    m_eval_pending = m.at("pending_eval").get<bool>();
  }
}

void Trainer::truncate_metrics(int64_t last_step) {
  const fs::path path = m_run_dir / "metrics.jsonl";
  std::string kept;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      // A line that does not parse is the torn end of a killed run's last write.
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
      if (j["step"].get<int64_t>() > last_step) continue;
      kept += line;
      kept += '\n';
    }
  }
  const fs::path tmp = m_run_dir / "metrics.jsonl.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << kept;
    out.flush();
    if (!out) throw Error{ErrorKind::runtime, "cannot write " + tmp.string()};
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error{ErrorKind::runtime, "cannot replace " + path.string() + ": " + ec.message()};
}

void Trainer::resume(const checkpoint::CheckpointData& ck) {
  if (ck.step > m_cfg.training.max_steps) {
    throw Error{ErrorKind::config,
                "training.max_steps: " + std::to_string(m_cfg.training.max_steps) +
                    " is below the checkpoint's step " + std::to_string(ck.step),
                "resume with --set training.max_steps=N for N >= " + std::to_string(ck.step)};
  }
  prepare_run_dir(m_run_dir);
  setup();
  restore(ck);
  {
    std::ofstream out(m_run_dir / "config.yaml");
    out << config::to_yaml(m_cfg);
    if (!out)
      throw Error{ErrorKind::runtime, "cannot write " + (m_run_dir / "config.yaml").string()};
  }
  truncate_metrics(ck.step);
  m_metrics.open(m_run_dir / "metrics.jsonl", std::ios::app);
  if (!m_metrics) {
    throw Error{ErrorKind::runtime, "cannot write " + (m_run_dir / "metrics.jsonl").string()};
  }
  m_next_step = ck.step + 1;
  m_resumed_at = ck.step;
  m_last_checkpoint = ck.step;
  if (m_eval_pending) {
    m_eval_pending = false;
    m_last_eval = evaluate(ck.step);
  }
  if (const int sig = stop_signal()) stop(sig);
  spdlog::info("ampctl {}: resuming run '{}' in {} from step {} to {}", AMPCTL_VERSION, m_cfg.name,
               m_run_dir.string(), ck.step, m_cfg.training.max_steps);
  spdlog::info("backend {}, precision {}, loss scaling {} (scale {:g})", m_backend->description(),
               config::to_string(m_cfg.precision), m_scaler->is_enabled() ? "on" : "off",
               m_scaler->get_scale());
}

bool Trainer::done() const {
  return m_next_step > m_cfg.training.max_steps;
}

void Trainer::flush_and_check() {
  flush();
  if (m_divergence && !m_diverging) diverge();
}

void Trainer::step() {
  if (m_divergence) diverge();  // seen by a flush outside step() (checkpoint_data)
  const int64_t step = m_next_step++;
  const int64_t max_steps = m_cfg.training.max_steps;
  const auto t0 = Clock::now();
  const int64_t samples_before = m_samples;
  m_phase_counting = m_steady;
  m_phase_t = t0;
  train_step(step);
  const bool flush_now =
      static_cast<int64_t>(m_ring.info.size()) >= m_ring.capacity || step == max_steps;
  if (flush_now) m_backend->synchronize();
  const double dt = seconds_since(t0);
  m_train_seconds += dt;
  if (m_steady) {
    m_steady_seconds += dt;
    m_steady_samples += m_samples - samples_before;
  }
  if (flush_now) {
    // Steady state starts after the first logging interval: first-use costs (cuBLASLt
    // heuristics, workspaces, page faults) are behind, and the device has just been drained.
    m_steady = true;
    flush_and_check();
  }
  phase_end(kMetrics);
  if (m_profile && m_phase_counting) ++m_phase_steps;
  const int64_t eval_every = m_cfg.training.eval_every;
  if (eval_every > 0 && step % eval_every == 0 && step != max_steps) {
    flush_and_check();
    m_last_eval = evaluate(step);
  }
  const int64_t ckpt_every = m_cfg.checkpoint.every_steps;
  if (ckpt_every > 0 && step % ckpt_every == 0 && step != max_steps) write_checkpoint();
  // After the last step finish() comes next: it honours a stop request in its evaluation.
  if (step != max_steps) {
    if (const int sig = stop_signal()) stop(sig);
  }
}

void Trainer::stop(int signo) {
  const int64_t step = m_next_step - 1;
  fs::path path;
  if (m_last_checkpoint == step && !m_eval_pending) {
    flush_and_check();
    path = m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(step);
  } else {
    path = write_checkpoint();
  }
  const char* name = signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "a signal";
  throw Error{ErrorKind::interrupted,
              std::string("stopped by ") + name + " after step " + std::to_string(step) +
                  "; checkpoint " + path.string(),
              "continue with 'ampctl resume --checkpoint " + m_run_dir.string() + "'"};
}

TrainOutcome Trainer::finish() {
  flush_and_check();
  // A resume with nothing left to run (the checkpoint is the end) evaluates nothing twice.
  const bool ran = !m_resumed_at || m_next_step - 1 > *m_resumed_at;
  if (ran) m_last_eval = evaluate(m_steps_done);
  m_backend->synchronize();
  // A stop request cut the final evaluation short: checkpoint (the resumed run evaluates). One
  // that came after it lets the run finish: only the checkpoint and summary are left to write.
  if (m_eval_pending) stop(stop_signal());
  if (m_last_checkpoint != m_next_step - 1) write_checkpoint();

  const nlohmann::json summary = summary_json("ok");
  write_summary(summary);
  spdlog::info("done: {} steps, {} skipped, final loss {:.5g}, final scale {:g}, {:.1f}s",
               m_steps_done, m_skipped, m_final_loss, m_final_scale, seconds_since(m_t0));
  if (const nlohmann::json& ph = summary["phase_ms"]; ph.is_object()) {
    spdlog::info(
        "step phases (ms, mean of {} steady steps): data {:.3f}, forward {:.3f}, backward {:.3f}, "
        "unscale/check {:.3f}, optimizer {:.3f}, scaler update {:.3f}, metrics {:.3f}; "
        "total {:.3f}",
        ph["steps"].get<int64_t>(), ph["data"].get<double>(), ph["forward"].get<double>(),
        ph["backward"].get<double>(), ph["unscale"].get<double>(), ph["optimizer"].get<double>(),
        ph["update"].get<double>(), ph["metrics"].get<double>(), ph["total"].get<double>());
  }
  log_most_overflowing();
  return TrainOutcome{summary};
}

void Trainer::log_most_overflowing() const {
  const std::vector<std::string> names = ranked(m_overflow_counts);
  if (names.empty()) return;
  std::string text;
  for (size_t i = 0; i < names.size() && i < 5; ++i) {
    const auto at = std::find(m_param_names.begin(), m_param_names.end(), names[i]);
    text += fmt::format("{}{} ({} steps)", i ? ", " : "", names[i],
                        m_overflow_counts[static_cast<size_t>(at - m_param_names.begin())]);
  }
  if (names.size() > 5) text += fmt::format(" and {} more", names.size() - 5);
  spdlog::info("most overflowing: {}", text);
}

nlohmann::json Trainer::summary_json(const std::string& status) const {
  return {
      {"name", m_cfg.name},
      {"status", status},
      {"steps", m_steps_done},
      {"skipped_steps", m_skipped},
      {"final_scale", number(m_final_scale)},
      {"min_scale", number(m_min_scale)},
      {"max_scale", number(m_max_scale)},
      {"final_loss", number(m_final_loss)},
      {"best_loss", number(m_best_loss)},
      {"eval", m_last_eval},
      {"best_eval_loss", m_best_eval_loss ? nlohmann::json(*m_best_eval_loss) : nlohmann::json()},
      {"best_eval_accuracy", m_best_eval_acc ? nlohmann::json(*m_best_eval_acc) : nlohmann::json()},
      {"overflow_counts", counts_json(m_param_names, m_overflow_counts)},
      {"most_overflowing", ranked(m_overflow_counts)},
      {"wall_time_s", seconds_since(m_t0)},
      {"train_time_s", m_train_seconds},
      {"samples_per_s", m_train_seconds > 0 ? m_samples / m_train_seconds : 0.0},
      {"steady_samples_per_s", m_steady_seconds > 0
                                   ? nlohmann::json(m_steady_samples / m_steady_seconds)
                                   : nlohmann::json()},
      {"steady_step_ms",
       m_steady_seconds > 0 && m_steady_samples > 0
           ? nlohmann::json(m_steady_seconds * 1e3 * static_cast<double>(m_batch) /
                            static_cast<double>(m_steady_samples) /
                            static_cast<double>(m_cfg.training.grad_accum_steps))
           : nlohmann::json()},
      {"backend", m_backend->description()},
      {"device", m_device},
      {"precision", config::to_string(m_cfg.precision)},
      {"scaler_enabled", m_scaler->is_enabled()},
      {"phase_ms", phase_json()},
      {"ampctl_version", AMPCTL_VERSION}};
}

void Trainer::phase_end(Phase phase) {
  if (!m_profile) return;
  m_backend->synchronize();
  const auto now = Clock::now();
  if (m_phase_counting) {
    m_phase_seconds[phase] += std::chrono::duration<double>(now - m_phase_t).count();
  }
  m_phase_t = now;
}

nlohmann::json Trainer::phase_json() const {
  if (!m_profile || m_phase_steps == 0) return nullptr;
  static constexpr const char* kNames[kPhases] = {"data",      "forward", "backward", "unscale",
                                                  "optimizer", "update",  "metrics"};
  nlohmann::json j = nlohmann::json::object();
  double total = 0;
  for (int p = 0; p < kPhases; ++p) {
    const double ms = m_phase_seconds[p] * 1e3 / static_cast<double>(m_phase_steps);
    j[kNames[p]] = ms;
    total += ms;
  }
  j["total"] = total;
  j["steps"] = m_phase_steps;
  return j;
}

void Trainer::write_summary(const nlohmann::json& summary) const {
  std::ofstream out(m_run_dir / "summary.json");
  out << summary.dump(2) << '\n';
  out.flush();
  if (!out) {
    throw Error{ErrorKind::runtime, "cannot write " + (m_run_dir / "summary.json").string() +
                                        " (disk full or I/O error)"};
  }
}

void Trainer::diverge() {
  m_diverging = true;
  flush();  // the metrics of every step run, whatever found the divergence
  Divergence& d = *m_divergence;
  const int64_t last = m_next_step - 1;
  d.detected_at = std::max(d.detected_at, last);
  // Which tensors: those that overflowed during the streak (the scaler's attribution), else
  // those whose parameters (or, failing that, last gradients) are not finite.
  const std::vector<std::string> bad_params = nonfinite_tensors(m_model->params());
  std::string where = "non-finite gradients in ";
  if (d.tensors.empty()) {
    d.tensors = bad_params;
    where = "non-finite parameters in ";
  }
  if (d.tensors.empty()) {
    d.tensors = nonfinite_tensors(m_model->grads());
    where = "non-finite gradients in ";
  }

  // The checkpoint of the last good state: the current one when its parameters are finite (a
  // skipped step changes nothing), else the newest periodic one, left as latest.
  std::optional<fs::path> ckpt;
  std::optional<int64_t> ckpt_step;
  std::string ckpt_text;
  if (bad_params.empty()) {
    if (m_last_checkpoint == last) {
      ckpt = m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(last);
    } else {
      const checkpoint::CheckpointData data = checkpoint_data();
      ckpt = checkpoint::write_checkpoint(m_run_dir, data, m_cfg.checkpoint.keep_last);
      m_last_checkpoint = data.step;
    }
    ckpt_step = last;
    ckpt_text = "checkpoint " + ckpt->string() + " holds the last good state (step " +
                std::to_string(last) + ")";
  } else if (m_last_checkpoint >= 0) {
    ckpt = m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(m_last_checkpoint);
    ckpt_step = m_last_checkpoint;
    ckpt_text = "no checkpoint written (the parameters are non-finite); the last good one is " +
                ckpt->string() + " (step " + std::to_string(m_last_checkpoint) + ")";
  } else {
    ckpt_text = "no checkpoint written (the parameters are non-finite) and none was written before";
  }

  std::string message = "training diverged at step " + std::to_string(d.step) + ": " + d.what;
  if (!d.tensors.empty()) message += "; " + where + join_names(d.tensors);
  if (d.detected_at > d.step) {
    message += " (detected at step " + std::to_string(d.detected_at) +
               ": the metrics are read back every " + std::to_string(m_ring.capacity) + " steps)";
  }
  message += "; " + ckpt_text;

  nlohmann::json summary = summary_json("diverged");
  summary["divergence"] = {
      {"step", d.step},
      {"detected_at_step", d.detected_at},
      {"reason", d.reason},
      {"tensors", d.tensors},
      {"checkpoint", ckpt ? nlohmann::json(ckpt->string()) : nlohmann::json()},
      {"checkpoint_step", ckpt_step ? nlohmann::json(*ckpt_step) : nlohmann::json()},
      {"message", message}};
  write_summary(summary);
  log_most_overflowing();
  std::string hint;
  if (d.reason == "overflow_at_scale_floor") {
    hint =
        "the gradients overflow even at the smallest loss scale: lower optimizer.lr, clip with "
        "training.grad_clip_norm, or train in bf16";
  } else {
    hint = "lower optimizer.lr, clip with training.grad_clip_norm, or check the data";
  }
  hint += "; then continue from the last good state with 'ampctl resume --checkpoint " +
          m_run_dir.string() +
          " --set KEY=VALUE' (training.divergence_patience: 0 never stops a run)";
  throw Error{ErrorKind::runtime, message, hint};
}

TrainOutcome Trainer::run() {
  begin();
  while (!done()) step();
  return finish();
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

fs::path choose_run_dir(const config::RunConfig& config, const fs::path& requested) {
  auto holds_run = [](const fs::path& d) {
    std::error_code ec;
    return fs::exists(d / "metrics.jsonl", ec) || fs::exists(d / "summary.json", ec) ||
           fs::exists(d / "checkpoints", ec);
  };
  if (!requested.empty()) {
    if (holds_run(requested)) {
      throw Error{ErrorKind::usage, "run directory " + requested.string() + " already holds a run",
                  "choose another --run-dir, or continue it with 'ampctl resume --checkpoint " +
                      requested.string() + "'"};
    }
    return requested;
  }
  const fs::path base = fs::path("runs") / config.name;
  if (!holds_run(base)) return base;
  for (int i = 2;; ++i) {
    fs::path p = fs::path("runs") / (config.name + "-" + std::to_string(i));
    if (!holds_run(p)) return p;
  }
}

Trainer::Trainer(const config::RunConfig& cfg, const fs::path& run_dir)
    : m_cfg(cfg), m_run_dir(run_dir), m_t0(Clock::now()) {}

Trainer::~Trainer() = default;

TrainOutcome train(const config::RunConfig& config, const fs::path& run_dir) {
  Trainer trainer(config, run_dir);
  return trainer.run();
}

}  // namespace ampctl::train
