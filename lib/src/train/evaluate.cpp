// One evaluation of a run's model; see evaluate.h.
#include "ampctl/train/evaluate.h"

#include <cmath>

#include "ampctl/backend/backend.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/model.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/build.h"
#include "ampctl/train/init_from.h"

namespace ampctl::train {

EvalResult evaluate_run(RunObjects& run, const Tensor& loss_scratch,
                        const std::function<bool()>& interrupted) {
  Batcher& batcher = *run.batcher;
  Backend& b = *run.backend;
  nn::Model& model = *run.model;
  const bool classification = batcher.classification();
  Tensor loss_sum = b.zeros({1}, DType::f32);
  Tensor correct = b.zeros({1}, DType::i32);
  Tensor correct_sum = b.zeros({1}, DType::f32);
  Tensor correct_f = b.zeros({1}, DType::f32);
  const int64_t n = batcher.eval_size();  // this rank's shard
  dist::Communicator& comm = *run.comm;
  EvalResult out;
  for (int64_t done = 0; done < n;) {
    // With several ranks the evaluation runs to its end (its sums are reduced over the ranks).
    if (comm.world_size() == 1 && interrupted && interrupted()) {
      out.complete = false;
      return out;
    }
    const Batch batch = batcher.eval_batch(done);
    model.forward(batch.input, batch.rows, /*training=*/false);
    model.loss(batch.target, batch.rows, loss_scratch, classification ? correct : Tensor{},
               Tensor{});
    b.add_(loss_sum, loss_scratch, static_cast<float>(batch.rows));
    if (classification) {
      b.cast(correct, correct_f);
      b.add_(correct_sum, correct_f);
    }
    done += batch.rows;
  }
  // The ranks' shards' sums added in rank order (the identity for one process).
  comm.all_reduce(loss_sum, dist::ReduceOp::sum);
  if (classification) comm.all_reduce(correct_sum, dist::ReduceOp::sum);
  const auto total = static_cast<double>(batcher.eval_total());
  out.rows = batcher.eval_total();
  out.loss = b.read_scalar_f32(loss_sum) / total;
  if (classification) out.accuracy = b.read_scalar_f32(correct_sum) / total;
  return out;
}

namespace {

// Uploads a checkpoint's model tensors (names, dtypes and shapes as the model's, else
// Error{input} naming the first that differs).
void load_model_tensors(const checkpoint::CheckpointData& ck, const std::string& origin,
                        nn::Model& model) {
  std::vector<std::pair<std::string, Tensor>> targets = model.state_tensors();
  for (auto& buffer : model.state_buffers()) targets.push_back(std::move(buffer));
  if (targets.size() != ck.model.size()) {
    throw Error{ErrorKind::input,
                origin + ": " + std::to_string(ck.model.size()) +
                    " model tensors, the configuration's model has " +
                    std::to_string(targets.size()),
                "evaluate a checkpoint with the configuration it was trained with"};
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const checkpoint::NamedTensor& s = ck.model[i];
    const Tensor& t = targets[i].second;
    if (s.name != targets[i].first || s.dtype != t.dtype() || s.shape != t.shape()) {
      throw Error{ErrorKind::input,
                  origin + ": model tensor '" + s.name + "' " + dtype_name(s.dtype) + " " +
                      shape_str(s.shape) + " does not fit the configuration's model ('" +
                      targets[i].first + "' " + dtype_name(t.dtype()) + " " + shape_str(t.shape()) +
                      ")",
                  "evaluate a checkpoint with the configuration it was trained with"};
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    model.backend().upload(targets[i].second, ck.model[i].data.data(), ck.model[i].data.size());
  }
  model.sync_lowp();
}

void require_eval_data(const RunObjects& run, const std::string& origin) {
  if (!run.batcher->has_eval()) {
    throw Error{ErrorKind::config, origin + ": the configuration has no evaluation data",
                "give one: --set data.eval={source: ..., ...} (or a split_fraction)"};
  }
}

}  // namespace

nlohmann::ordered_json evaluate_checkpoint(const EvalRequest& request) {
  nlohmann::ordered_json out;
  std::unique_ptr<RunObjects> run;
  std::string source;
  if (!request.checkpoint.empty()) {
    const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(request.checkpoint);
    source = loaded.path.string();
    // What only training reads goes: checkpoint.keep_best and training.early_stop may name one
    // of data.eval's sets, which a --set of data.eval (another set to evaluate) replaces.
    nlohmann::json saved = loaded.data.config;
    if (saved.is_object()) {
      if (auto c = saved.find("checkpoint"); c != saved.end() && c->is_object()) {
        c->erase("keep_best");
      }
      if (auto t = saved.find("training"); t != saved.end() && t->is_object()) {
        t->erase("early_stop");
      }
    }
    const config::RunConfig cfg = config::from_json(saved, source + ": config", request.overrides);
    // The checkpoint's tensors are its model's: a --set of model.* that keeps their shapes
    // (n_head, activation) would evaluate another function with them.
    if (std::string m = structure_mismatch(loaded.data.config.value("model", nlohmann::json()),
                                           config::to_json(cfg)["model"], source);
        !m.empty()) {
      throw Error{ErrorKind::input, m, "leave model.* as the checkpoint records it"};
    }
    // The statistics the model was trained with (an older checkpoint without them: computed
    // from the data, as its run did).
    run = build_run(cfg, {}, input_from_json(loaded.data.input, source),
                    vocab_from_json(loaded.data.vocab, source));
    require_eval_data(*run, source);
    if (run->lm.vocab && !loaded.data.vocab.is_null() &&
        loaded.data.vocab != run->lm.vocab->to_json()) {
      throw Error{ErrorKind::input,
                  source + ": the checkpoint's vocabulary (" +
                      std::to_string(loaded.data.vocab.size()) +
                      " tokens) differs from the one the evaluation text gives (" +
                      std::to_string(run->lm.vocab->size()) + ")",
                  "evaluate on text whose characters give the run's vocabulary"};
    }
    load_model_tensors(loaded.data, source, *run->model);
    out["step"] = loaded.data.step;
  } else {
    const config::RunConfig cfg = config::load_config(request.config, request.overrides);
    const InitSource init = read_init_source(request.init_from);
    check_init_structure(init, config::to_json(cfg)["model"]);
    source = init.file.string();
    if (!init.input.is_null() && !cfg.data.normalize) {
      throw Error{ErrorKind::config,
                  "data.normalize: false, but " + source + " was trained on normalised inputs",
                  "--set data.normalize=true"};
    }
    run = build_run(cfg, {}, input_from_json(init.input, source),
                    config::is_language_model(cfg.data.train) ? vocab_from_json(init.vocab, source)
                                                              : std::nullopt);
    require_eval_data(*run, source);
    if (run->lm.vocab) check_init_vocab(init, run->lm.vocab->to_json());
    load_init_weights(init, *run->model, cfg.init.strict);
    out["step"] = nullptr;
  }
  const Tensor scratch = run->backend->zeros({1}, DType::f32);
  const EvalResult r = evaluate_run(*run, scratch);
  out["loss"] = r.loss;
  if (r.accuracy) out["accuracy"] = *r.accuracy;
  if (run->language_model) out["perplexity"] = std::exp(r.loss);
  out["rows"] = r.rows;
  out["source"] = source;
  return out;
}

}  // namespace ampctl::train
