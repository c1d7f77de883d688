#include "ampctl/train/checkpoint_state.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/build.h"
#include "ampctl/train/monitor.h"

namespace ampctl::train {
namespace {

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
                      dtype_name(s.dtype) + " " + shape_str(s.shape) + ", expected " +
                      dtype_name(t.dtype()) + " " + shape_str(t.shape()),
                  "the checkpoint was written for another model configuration"};
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    b.upload(targets[i].second, stored[i].data.data(), stored[i].data.size());
  }
}

}  // namespace

checkpoint::CheckpointData assemble_checkpoint(int64_t step, const config::RunConfig& cfg,
                                               const RunObjects& run, const Monitor& mon,
                                               bool eval_pending) {
  Backend& b = *run.backend;
  checkpoint::CheckpointData d;
  d.step = step;
  d.config = config::to_json(cfg);
  d.scaler = run.scaler->state_dict();
  d.model = download_all(b, run.model->state_tensors());
  d.optimizer = run.optimizer->state_dict();
  d.optimizer_tensors = download_all(b, run.optimizer->state_tensors());
  nlohmann::json sched_type = nullptr;
  if (d.config.contains("scheduler") && d.config["scheduler"].contains("type")) {
    sched_type = d.config["scheduler"]["type"];
  }
  d.scheduler = {{"type", sched_type}, {"last_step", d.step}};
  d.rng = run.model->rng_state();
  d.data = run.batcher->state();
  const RunTotals& t = mon.totals();
  d.metrics = {
      {"steps_done", t.steps_done},
      {"skipped", t.skipped},
      {"samples", t.samples},
      {"final_loss", encode_double(t.final_loss)},
      {"best_loss", encode_double(t.best_loss)},
      {"final_scale", encode_double(t.final_scale)},
      {"min_scale", encode_double(t.min_scale)},
      {"max_scale", encode_double(t.max_scale)},
      {"train_seconds", t.train_seconds},
      {"eval_seconds", t.eval_seconds},
      {"steady", t.steady},
      {"steady_seconds", t.steady_seconds},
      {"steady_samples", t.steady_samples},
      {"wall_time_s", mon.elapsed()},
      {"last_eval", t.last_eval},
      {"best_eval_loss", t.best_eval_loss ? nlohmann::json(*t.best_eval_loss) : nlohmann::json()},
      {"best_eval_accuracy",
       t.best_eval_accuracy ? nlohmann::json(*t.best_eval_accuracy) : nlohmann::json()}};
  if (eval_pending) d.metrics["pending_eval"] = true;
  if (std::isfinite(t.final_loss)) d.metrics["last_loss"] = t.final_loss;
  // Attribution and divergence state, so a resumed run reports and stops as an uninterrupted one.
  d.metrics["overflow_counts"] = mon.counts_json(mon.overflow_counts());
  for (const auto& [key, streak] :
       {std::pair<const char*, const Streak*>{"floor_streak", &mon.floor_streak()},
        std::pair<const char*, const Streak*>{"loss_streak", &mon.loss_streak()}}) {
    d.metrics[key] = {{"length", streak->length},
                      {"first_step", streak->first_step},
                      {"overflow_counts", mon.counts_json(streak->counts)}};
  }
  return d;
}

void restore_checkpoint(const checkpoint::CheckpointData& ck, RunObjects& run, Monitor& mon,
                        bool& eval_pending) {
  Backend& b = *run.backend;
  upload_all(b, run.model->state_tensors(), ck.model, "model");
  run.model->sync_lowp();
  run.optimizer->load_state_dict(ck.optimizer);
  upload_all(b, run.optimizer->state_tensors(), ck.optimizer_tensors, "optimizer");
  // The scaler's state exists (the step created it): load_state_dict fills it.
  if (run.scaler->is_enabled()) {
    run.scaler->load_state_dict(ck.scaler);
  } else if (!ck.scaler.empty()) {
    throw Error{ErrorKind::input, "checkpoint scaler: holds a state but loss scaling is off"};
  }
  run.batcher->restore(ck.data);
  run.model->set_rng_state(ck.rng);

  const nlohmann::json& m = ck.metrics;
  const char* sec = "metrics";
  RunTotals& t = mon.totals();
  t.steps_done = member_int(m, sec, "steps_done");
  t.skipped = member_int(m, sec, "skipped");
  t.samples = member_int(m, sec, "samples");
  t.final_loss = decode_double(member(m, sec, "final_loss"), "final_loss");
  t.best_loss = decode_double(member(m, sec, "best_loss"), "best_loss");
  t.final_scale = decode_double(member(m, sec, "final_scale"), "final_scale");
  t.min_scale = decode_double(member(m, sec, "min_scale"), "min_scale");
  t.max_scale = decode_double(member(m, sec, "max_scale"), "max_scale");
  t.train_seconds = decode_double(member(m, sec, "train_seconds"), "train_seconds");
  t.eval_seconds = decode_double(member(m, sec, "eval_seconds"), "eval_seconds");
  const nlohmann::json& steady = member(m, sec, "steady");
  if (!steady.is_boolean()) {
    throw Error{ErrorKind::input, "checkpoint metrics: 'steady' must be a boolean"};
  }
  t.steady = steady.get<bool>();
  t.steady_seconds = decode_double(member(m, sec, "steady_seconds"), "steady_seconds");
  t.steady_samples = member_int(m, sec, "steady_samples");
  mon.set_elapsed(decode_double(member(m, sec, "wall_time_s"), "wall_time_s"));
  t.last_eval = member(m, sec, "last_eval");
  const nlohmann::json& bel = member(m, sec, "best_eval_loss");
  t.best_eval_loss.reset();
  if (!bel.is_null()) t.best_eval_loss = decode_double(bel, "best_eval_loss");
  const nlohmann::json& bea = member(m, sec, "best_eval_accuracy");
  t.best_eval_accuracy.reset();
  if (!bea.is_null()) t.best_eval_accuracy = decode_double(bea, "best_eval_accuracy");
  // Absent from checkpoints written before overflow attribution: start from zero.
  mon.floor_streak().reset();
  mon.loss_streak().reset();
  std::fill(mon.overflow_counts().begin(), mon.overflow_counts().end(), 0);
  if (m.contains("overflow_counts")) {
    mon.counts_from_json(m.at("overflow_counts"), mon.overflow_counts(), "overflow_counts");
  }
  for (auto& [key, streak] : {std::pair<const char*, Streak*>{"floor_streak", &mon.floor_streak()},
                              std::pair<const char*, Streak*>{"loss_streak", &mon.loss_streak()}}) {
    if (!m.contains(key)) continue;
    const nlohmann::json& j = m.at(key);
    streak->length = member_int(j, key, "length");
    streak->first_step = member_int(j, key, "first_step");
    if (streak->length < 0 || streak->first_step < 0) {
      throw Error{ErrorKind::input, std::string("checkpoint ") + key + ": negative length or step"};
    }
    mon.counts_from_json(member(j, key, "overflow_counts"), streak->counts, key);
  }
  eval_pending = false;
  if (m.contains("pending_eval")) {
    if (!m.at("pending_eval").is_boolean()) {
      throw Error{ErrorKind::input, "checkpoint metrics: 'pending_eval' must be a boolean"};
    }
    eval_pending = m.at("pending_eval").get<bool>();
  }
}

}  // namespace ampctl::train
