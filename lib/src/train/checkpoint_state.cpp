#include "ampctl/train/checkpoint_state.h"

#include <string>
#include <utility>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/run/checkpoint_metrics.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/build.h"
#include "ampctl/train/init_from.h"
#include "ampctl/train/monitor.h"

namespace ampctl::train {
namespace {

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

// The model's checkpointed tensors: its parameters, then its buffers (none for the MLP, so its
// checkpoints are unchanged).
std::vector<std::pair<std::string, Tensor>> model_tensors(const nn::Model& model) {
  std::vector<std::pair<std::string, Tensor>> all = model.state_tensors();
  for (auto& buffer : model.state_buffers()) all.push_back(std::move(buffer));
  return all;
}

// ZeRO-1 (docs/distributed.md, "Checkpoints"): the optimizer holds its per-element state (the
// f32 tensors of its shard's size: moments, momentum) for this rank's shard only, and a
// checkpoint holds it whole, as ZeRO-0 writes it, so that it resumes with either setting and
// any world size. Each such tensor gets a whole-arena tensor (allocated here, outside any step)
// whose range `shard` is the optimizer's own; the step counters stay as they are.
struct WholeState {
  std::vector<std::pair<std::string, Tensor>> tensors;  // what the checkpoint reads and writes
  struct Shard {
    Tensor own;    // the optimizer's tensor: this rank's shard
    Tensor whole;  // the whole arena's
    Tensor range;  // the view of `whole` that is `own`'s range
  };
  std::vector<Shard> shards;
};

WholeState whole_optimizer_state(const RunObjects& objects) {
  WholeState w;
  w.tensors = objects.optimizer->state_tensors();
  if (!objects.zero_shard) return w;
  const dist::Communicator::Range r = *objects.zero_shard;
  const Tensor& params = objects.model->params();
  for (auto& [name, t] : w.tensors) {
    if (t.dtype() != DType::f32 || t.numel() != r.size()) continue;
    Tensor whole = objects.backend->zeros(params.shape(), DType::f32);
    w.shards.push_back({t, whole, whole.view(r.begin, t.shape())});
    t = whole;
  }
  return w;
}

}  // namespace

checkpoint::CheckpointData assemble_checkpoint(int64_t step, const config::RunConfig& cfg,
                                               const RunObjects& objects, const Monitor& mon,
                                               bool eval_pending) {
  Backend& b = *objects.backend;
  checkpoint::CheckpointData d;
  d.step = step;
  d.config = config::to_json(cfg);
  d.scaler = objects.scaler->state_dict();
  d.model = download_all(b, model_tensors(*objects.model));
  d.optimizer = objects.optimizer->state_dict();
  // ZeRO-1: every rank takes part (the gather is a collective); rank 0 writes the file.
  const WholeState state = whole_optimizer_state(objects);
  for (const WholeState::Shard& s : state.shards) {
    b.copy(s.range, s.own);
    objects.comm->all_gather_shards(s.whole);
  }
  d.optimizer_tensors = download_all(b, state.tensors);
  nlohmann::json sched_type = nullptr;
  if (d.config.contains("scheduler") && d.config["scheduler"].contains("type")) {
    sched_type = d.config["scheduler"]["type"];
  }
  d.scheduler = {{"type", sched_type}, {"last_step", d.step}};
  d.rng = objects.model->rng_state();
  d.data = objects.batcher->state();
  if (objects.lm.vocab) d.vocab = objects.lm.vocab->to_json();
  if (objects.data.normalization) d.input = input_to_json(*objects.data.normalization);
  run::CheckpointMetrics m;
  m.totals = mon.totals();
  m.wall_time_s = mon.elapsed();
  m.pending_eval = eval_pending;
  m.overflow_counts = mon.overflow_counts();
  m.floor_streak = mon.floor_streak();
  m.loss_streak = mon.loss_streak();
  m.trackers = mon.trackers_json();
  d.metrics = run::to_json(m, mon.param_names());
  return d;
}

void restore_checkpoint(const checkpoint::CheckpointData& ck, RunObjects& objects, Monitor& mon,
                        bool& eval_pending) {
  Backend& b = *objects.backend;
  upload_all(b, model_tensors(*objects.model), ck.model, "model");
  objects.model->sync_lowp();
  objects.optimizer->load_state_dict(ck.optimizer);
  const WholeState state = whole_optimizer_state(objects);
  upload_all(b, state.tensors, ck.optimizer_tensors, "optimizer");
  for (const WholeState::Shard& s : state.shards) b.copy(s.own, s.range);
  // The scaler's state exists (the step created it): load_progress fills it, keeping the
  // configuration's factors and interval (the checkpoint's unless resume --set changed them).
  if (objects.scaler->is_enabled()) {
    objects.scaler->load_progress(ck.scaler);
  } else if (!ck.scaler.empty()) {
    throw Error{ErrorKind::input, "checkpoint scaler: holds a state but loss scaling is off"};
  }
  objects.batcher->restore(ck.data);
  // The data was read again for the resumed run: a text file that changed since gives another
  // vocabulary, and the ids would mean other characters. (Checkpoints before vocabularies were
  // stored have none to compare.)
  if (objects.lm.vocab && !ck.vocab.is_null() && ck.vocab != objects.lm.vocab->to_json()) {
    throw Error{ErrorKind::input,
                "checkpoint vocab: the training text now gives another vocabulary (" +
                    std::to_string(objects.lm.vocab->size()) +
                    " tokens) than the one the "
                    "checkpoint was trained with (" +
                    std::to_string(ck.vocab.size()) + ")",
                "resume with the text file the run was trained on"};
  }
  objects.model->set_rng_state(ck.rng);

  const run::CheckpointMetrics m = run::read_checkpoint_metrics(ck.metrics, mon.param_names());
  mon.totals() = m.totals;
  mon.set_elapsed(m.wall_time_s);
  mon.overflow_counts() = m.overflow_counts;
  static_cast<run::StreakRecord&>(mon.floor_streak()) = m.floor_streak;
  static_cast<run::StreakRecord&>(mon.loss_streak()) = m.loss_streak;
  mon.restore_trackers(m.trackers);
  eval_pending = m.pending_eval;
}

}  // namespace ampctl::train
