// The loop of a run (trainer.h): begin / resume, the cadence around each step, finish, and the
// two ways a run stops early (a signal, a divergence).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <limits>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/build_info.h"
#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/checkpoint/encoding.h"
#include "ampctl/config/resume_rules.h"
#include "ampctl/data/loader.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/dist/process_group.h"
#include "ampctl/nn/model.h"
#include "ampctl/optim/optimizer.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/run/numbers.h"
#include "ampctl/run/summary.h"
#include "ampctl/train/batcher.h"
#include "ampctl/train/build.h"
#include "ampctl/train/checkpoint_state.h"
#include "ampctl/train/evaluate.h"
#include "ampctl/train/init_from.h"
#include "ampctl/train/monitor.h"
#include "ampctl/train/numerics.h"
#include "ampctl/train/signals.h"
#include "ampctl/train/step.h"
#include "ampctl/train/trainer.h"

namespace ampctl::train {
namespace {

namespace fs = std::filesystem;
// The run directory's formats (Trainer::run() hides the namespace's plain name).
namespace files = ampctl::run;

}  // namespace

Trainer::Trainer(const config::RunConfig& cfg, const fs::path& run_dir)
    : m_cfg(cfg), m_run_dir(run_dir), m_t0(Clock::now()) {}

Trainer::Trainer(const config::RunConfig& cfg, const fs::path& run_dir,
                 dist::CommunicatorFactory comm)
    : m_cfg(cfg), m_run_dir(run_dir), m_t0(Clock::now()), m_comm_factory(std::move(comm)) {}

Trainer::~Trainer() = default;

const std::vector<std::string>& Trainer::param_names() const {
  return m_monitor->param_names();
}
Backend& Trainer::backend() const {
  return *m_run->backend;
}
nn::Model& Trainer::model() const {
  return *m_run->model;
}
optim::Optimizer& Trainer::optimizer() const {
  return *m_run->optimizer;
}
amp::GradScaler& Trainer::scaler() const {
  return *m_run->scaler;
}

bool Trainer::is_root() const {
  return m_run->comm->rank() == 0;
}

void Trainer::setup() {
  m_run = build_run(m_cfg, m_comm_factory, input_from_json(m_saved_input, "the saved statistics"),
                    vocab_from_json(m_saved_vocab, "the weights' vocabulary"));
  RunObjects& r = *m_run;
  m_accum = grad_accum_steps_for(m_cfg, r.comm->world_size());
  MonitorOptions monitor = monitor_options(m_cfg, m_t0);
  monitor.tokens_per_sample = r.lm_block_size;  // 0 unless a language model
  monitor.epoch_samples = r.language_model ? static_cast<double>(r.lm.train.size()) /
                                                 static_cast<double>(r.lm_block_size)
                                           : static_cast<double>(r.data.train.size());
  monitor.json_console = m_json_console;
  // grad_amax (docs/reference.md): a model whose backward rounds through the hook, in fp16/bf16.
  const bool measured = r.model->numerics() != nullptr && r.model->roundings_instrumented();
  if (config::measures_grad_amax(m_cfg) && measured) {
    monitor.grad_amax = r.model->numerics()->lowp();
    monitor.grad_accum = m_accum;
  }
  // A scale rule that reads grad_amax (auto) takes the step's (every rank's max) at each update.
  const amp::ScaleRule& rule = amp::scale_rule(m_cfg.scaler.policy);
  if (rule.reads_amax && r.scaler->is_enabled()) {
    if (!measured) {
      throw Error{ErrorKind::config,
                  "scaler.policy: " + std::string(rule.name) +
                      " sets the scale from grad_amax, but the " + r.model->type() +
                      " model's backward roundings are not measured",
                  "use another scaler.policy, or, on CUDA (fused attention and Linear + GELU), "
                  "run with AMPCTL_ATTENTION=materialised AMPCTL_GELU=composed: the composed ops, "
                  "every rounding measured"};
    }
    r.scaler->set_amax_input(r.model->numerics()->amax());
  }
  m_monitor =
      std::make_unique<Monitor>(*r.backend, *r.scaler, *r.optimizer, r.model->layout(), monitor);
  m_monitor->set_writer(is_root());
  if (m_cfg.logging.profile) r.scaler->set_phase_hook([this] { m_monitor->phase_end(kUnscale); });
  if (m_cfg.logging.numerics_every > 0 && r.model->numerics() != nullptr &&
      r.model->roundings_instrumented()) {
    m_numerics =
        std::make_unique<NumericsRecorder>(*r.backend, *r.model->numerics(), *r.scaler,
                                           m_monitor->param_names(), m_cfg.logging.numerics_every);
  }
  StepOptions step_opts = step_options(m_cfg, *r.model);
  step_opts.grad_accum_steps = m_accum;
  m_step = std::make_unique<TrainStep>(
      StepParts{*r.backend, *r.model, *r.optimizer, *r.scaler, *r.schedule, *r.batcher, *m_monitor,
                *r.comm, m_numerics.get()},
      step_opts);
  m_eval_loss = r.backend->zeros({1}, DType::f32);
}

void Trainer::begin() {
  // Refuse an unusable device or run directory before anything is loaded or written.
  check_device_precision(resolve_device(m_cfg.device), m_cfg.precision);
  // The weights to start from are read before the run directory exists: a missing or damaged
  // file leaves nothing behind.
  if (!m_cfg.init.from.empty()) {
    m_init = std::make_unique<InitSource>(read_init_source(m_cfg.init.from));
    check_init_structure(*m_init, config::to_json(m_cfg)["model"]);
    if (!m_init->input.is_null() && !m_cfg.data.normalize) {
      throw Error{ErrorKind::config,
                  "data.normalize: false, but init.from " + m_init->file.string() +
                      " was trained on normalised inputs: its weights expect them",
                  "set data.normalize: true (the saved statistics are applied, not recomputed)"};
    }
    m_saved_input = m_init->input;
    // A text run reads its text with the weights' vocabulary (a second corpus whose characters
    // are among the first's fine-tunes the same ids).
    if (config::is_language_model(m_cfg.data.train)) m_saved_vocab = m_init->vocab;
  }
  // Other ranks of a job never create or probe the run directory (rank 0 writes it).
  if (dist::process_rank() == 0) m_dir = std::make_unique<RunDir>(m_run_dir);
  try {
    setup();
    if (m_init) apply_init();
    // The writer claims the run directory (lock and check in one step, run_dir.h) after the
    // data has loaded and before it writes anything.
    if (is_root()) m_dir->claim(RunDir::Claim::new_run);
  } catch (...) {
    // Bad data, an unknown debug.inject_tensor: leave nothing.
    if (m_dir) m_dir->remove_if_unused();
    throw;
  }
  if (is_root()) m_dir->write_config(config::to_yaml(m_cfg));
  if (is_root() && m_run->lm.vocab) m_dir->write_vocab(m_run->lm.vocab->to_json().dump());
  if (is_root() && m_run->lm.tokenizer) m_dir->write_tokenizer(m_run->lm.tokenizer->json());
  if (is_root() && m_run->data.normalization) {
    m_dir->write_input_stats(input_to_json(*m_run->data.normalization).dump());
  }
  m_monitor->open_metrics(m_run_dir / files::kMetricsFile, /*append=*/false);
  open_tensorboard();
  if (is_root()) log_start();
  m_next_step = 1;
  // Where fine-tuning starts: an evaluation of the loaded weights, logged at step 0.
  if (m_init) m_monitor->totals().last_eval = evaluate(0);
  if (const int sig = agreed_stop()) stop(sig);  // it came while the data loaded
}

void Trainer::apply_init() {
  RunObjects& r = *m_run;
  if (r.lm.vocab) check_init_vocab(*m_init, r.lm.vocab->to_json());
  if (!r.language_model && m_cfg.data.normalize && m_init->input.is_null() && is_root()) {
    spdlog::warn(
        "init.from {} holds no input statistics: data.normalize computes them from this "
        "run's data",
        m_init->file.string());
  }
  const InitReport report = load_init_weights(*m_init, *r.model, m_cfg.init.strict);
  if (r.comm->world_size() > 1) {
    // Every rank read the same file; rank 0's values are the replicas' start, bit for bit.
    r.comm->broadcast(r.model->params(), 0);
    for (const auto& [name, t] : r.model->state_buffers()) r.comm->broadcast(t, 0);
    r.model->sync_lowp();
  }
  if (is_root()) {
    spdlog::info("init.from {} ({}): {} tensors loaded", m_init->file.string(), m_init->format,
                 m_init->tensors.size() - report.unexpected.size());
    for (const std::string& a : report.adapted) spdlog::info("init.from: {}", a);
  }
  m_init->tensors.clear();  // the values are on the device now
  m_init->tensors.shrink_to_fit();
}

namespace {

// Scaler settings a precision without loss scaling leaves unread (config::unused_scaler_keys):
// said, not silently ignored; the same file runs with them in fp16.
void warn_unused_scaler_keys(const config::RunConfig& cfg) {
  const std::vector<std::string> unused = config::unused_scaler_keys(cfg);
  if (unused.empty()) return;
  std::string list;
  for (const std::string& k : unused) list += (list.empty() ? "" : ", ") + k;
  spdlog::warn(
      "the scaler is off (precision {}, scaler.enabled: auto): {} {} not used (they apply when "
      "the precision is fp16)",
      config::to_string(cfg.precision), list, unused.size() == 1 ? "is" : "are");
}

}  // namespace

void Trainer::log_start() const {
  const RunObjects& r = *m_run;
  spdlog::info("ampctl {}: run '{}' in {}", AMPCTL_VERSION, m_cfg.name, m_run_dir.string());
  spdlog::info("backend {}, precision {}, loss scaling {}", r.backend->description(),
               config::to_string(m_cfg.precision), r.scaler->is_enabled() ? "on" : "off");
  warn_unused_scaler_keys(m_cfg);
  if (r.language_model) {
    spdlog::info("model: {} parameters; data: {} training tokens, vocabulary {}{}; windows of {}",
                 r.model->num_params(), r.lm.train.size(), r.lm.vocab_size,
                 r.lm.eval ? fmt::format(", {} eval tokens ({} batches per evaluation)",
                                         r.lm.eval->size(), m_cfg.training.eval_batches)
                           : "",
                 r.lm_block_size + 1);
  } else {
    spdlog::info("model: {} parameters; data: {} training samples x {} features{}",
                 r.model->num_params(), r.data.train.size(), r.data.train.features,
                 r.data.eval ? fmt::format(", {} eval samples", r.data.eval->size()) : "");
  }
  if (!m_cfg.data.eval_sets.empty()) {  // data.eval's map form: each set and its size
    const std::vector<std::string> names = config::eval_set_names(m_cfg);
    std::string sets;
    for (size_t i = 0; i < names.size(); ++i) {
      const int64_t size = r.language_model
                               ? (i == 0 ? r.lm.eval->size() : r.lm.more_eval.at(i - 1).size())
                               : (i == 0 ? r.data.eval->size() : r.data.more_eval.at(i - 1).size());
      sets += fmt::format("{}{} ({} {})", i ? ", " : "", names[i], size,
                          r.language_model ? "tokens" : "samples");
    }
    spdlog::info("evaluation sets: {}", sets);
  }
  // The batch as nanoGPT counts it: data.batch_size and grad_accum_steps are per rank.
  const int64_t world = r.comm->world_size();
  const int64_t global = m_cfg.data.batch_size * world * m_accum;
  spdlog::info(
      "batch: {} per micro-batch (data.batch_size, per rank) x {} rank{} x {} "
      "micro-batch{} (grad_accum_steps{}) = global batch {} examples per step{}",
      m_cfg.data.batch_size, world, world == 1 ? "" : "s", m_accum, m_accum == 1 ? "" : "es",
      m_cfg.training.global_batch > 0 ? ", from training.global_batch" : ", per rank", global,
      r.language_model ? fmt::format(" ({} tokens per step)", global * r.lm_block_size)
                       : std::string());
  spdlog::info("schedule: {}", r.schedule->describe());
  if (r.comm->world_size() > 1) {
    // What ZeRO-1 saves: the optimizer state this rank holds (docs/distributed.md).
    size_t bytes = 0;
    for (const auto& [name, t] : r.optimizer->state_tensors()) bytes += t.nbytes();
    spdlog::info(
        "data parallel: {} ranks, distributed.zero: {}; optimizer state {:.3f} MiB ({} bytes) "
        "per rank",
        r.comm->world_size(), m_cfg.distributed.zero,
        static_cast<double>(bytes) / (1024.0 * 1024.0), bytes);
  }
}

void Trainer::resume(const checkpoint::CheckpointData& ck, const ResumeHistory& history) {
  if (ck.step > m_cfg.training.max_steps) {
    throw Error{ErrorKind::config,
                "training.max_steps: " + std::to_string(m_cfg.training.max_steps) +
                    " is below the checkpoint's step " + std::to_string(ck.step),
                "resume with --set training.max_steps=N for N >= " + std::to_string(ck.step)};
  }
  if (dist::process_rank() == 0) m_dir = std::make_unique<RunDir>(m_run_dir);
  // The statistics the run was trained with (a checkpoint from before they were stored has
  // none: they are computed from the data again, as that build did).
  m_saved_input = ck.input;
  m_saved_vocab = ck.vocab;  // a fine-tuned run's text keeps the vocabulary it started from
  try {
    setup();
    // A branch's directory must still hold no run; resume in place holds the lock already
    // (cmd_resume), which is then shared.
    if (is_root()) {
      m_dir->claim(history.checkpoint_file.empty() ? RunDir::Claim::continued_run
                                                   : RunDir::Claim::new_run);
    }
    restore(ck);
    if (is_root() && !history.checkpoint_file.empty()) {
      m_dir->import_history(history.branch_of, history.checkpoint_file, ck.step);
    }
  } catch (...) {
    // A branch's new directory that nothing was written to goes again (as a new run's does).
    if (m_dir) m_dir->remove_if_unused();
    throw;
  }
  int64_t dropped = 0;
  if (is_root()) {
    // metrics.jsonl first: it is read to its end before anything of the run is written, so a
    // file that cannot be read (a line over the cap, no memory) leaves the whole run as it was.
    dropped = m_dir->truncate_metrics(ck.step);
    m_dir->remove_checkpoints(history.rewind);
    m_dir->write_config(config::to_yaml(m_cfg));
    // The vocabulary the checkpoint was trained with (restore_checkpoint checked the text gives
    // the same): a damaged or deleted vocab.json is written again, as sample and export read it.
    if (m_run->lm.vocab) m_dir->write_vocab(m_run->lm.vocab->to_json().dump());
    if (m_run->lm.tokenizer) m_dir->write_tokenizer(m_run->lm.tokenizer->json());
    // So are the input statistics the checkpoint holds (a branch's input.json comes from here).
    if (m_run->data.normalization) {
      m_dir->write_input_stats(input_to_json(*m_run->data.normalization).dump());
    }
    // summary.json is a finished run's outcome: an extended or rewound run is not finished
    // until it writes its own (a sweep skips a run folder that holds one).
    m_dir->remove_summary();
  }
  m_monitor->open_metrics(m_run_dir / files::kMetricsFile, /*append=*/true);
  // metrics.jsonl keeps the steps up to the checkpoint's: so does TensorBoard's view.
  open_tensorboard(ck.step + 1);
  m_next_step = ck.step + 1;
  m_resumed_at = ck.step;
  m_last_checkpoint = ck.step;
  if (m_eval_pending) {
    m_eval_pending = false;
    m_monitor->totals().last_eval = evaluate(ck.step);
  }
  if (const int sig = agreed_stop()) stop(sig);
  if (!is_root()) return;
  spdlog::info("ampctl {}: resuming run '{}' in {} from step {} to {}", AMPCTL_VERSION, m_cfg.name,
               m_run_dir.string(), ck.step, m_cfg.training.max_steps);
  if (!history.branch_of.empty()) {
    spdlog::info(
        "branch of {}: its steps up to {} copied here (metrics, TensorBoard events, the "
        "checkpoint); {} is left as it is",
        history.branch_of.string(), ck.step, history.branch_of.string());
  } else if (!history.checkpoint_file.empty()) {
    spdlog::info("a new run from {} (copied into checkpoints/; no run history around it)",
                 history.checkpoint_file.string());
  }
  if (!history.rewind.empty() || dropped > 0) {
    std::string removed;
    for (const fs::path& f : history.rewind) {
      if (!removed.empty()) removed += ", ";
      removed += f.filename().string();
    }
    spdlog::info("{}dropped {} metrics line{} after step {}{}{}",
                 history.rewind.empty() ? "" : "rewind: ", dropped, dropped == 1 ? "" : "s",
                 ck.step, removed.empty() ? "" : " and removed ", removed);
  }
  spdlog::info("backend {}, precision {}, loss scaling {} (scale {})",
               m_run->backend->description(), config::to_string(m_cfg.precision),
               m_run->scaler->is_enabled() ? "on" : "off",
               files::short_scale(m_run->scaler->get_scale()));
  warn_unused_scaler_keys(m_cfg);
  log_schedule_change(ck);
}

void Trainer::log_schedule_change(const checkpoint::CheckpointData& ck) const {
  const config::RunConfig before = config::from_json(ck.config, "the checkpoint's configuration");
  const int64_t old_max = before.training.max_steps, new_max = m_cfg.training.max_steps;
  if (old_max == new_max || !config::schedule_decays(m_cfg) || ck.step >= new_max) return;
  // Iteration ck.step is the next step's (lr_at is 0-based).
  const double was = make_schedule(before).lr_at(ck.step);
  const double now = m_run->schedule->lr_at(ck.step);
  const int64_t old_len = config::schedule_steps(before), new_len = config::schedule_steps(m_cfg);
  const char* type = config::to_string(m_cfg.scheduler.type);
  if (old_len == new_len) {
    spdlog::info(
        "schedule: training.max_steps {} -> {}; the {} schedule keeps its {} steps "
        "(scheduler.decay_steps): lr at step {} {} (was {})",
        old_max, new_max, type, new_len, ck.step + 1, files::short_number(now),
        files::short_number(was));
    return;
  }
  spdlog::warn(
      "schedule: training.max_steps {} -> {} stretches the {} schedule from {} to {} steps: lr at "
      "step {} {} -> {}; to keep the old decay (the lr then holds its end value), resume with "
      "--set scheduler.decay_steps={}",
      old_max, new_max, type, old_len, new_len, ck.step + 1, files::short_number(was),
      files::short_number(now), old_len);
}

bool Trainer::done() const {
  return m_next_step > m_cfg.training.max_steps || m_stopped_early;
}

void Trainer::flush_and_check() {
  m_monitor->flush();
  if (m_monitor->diverged() && !m_diverging) diverge();
}

void Trainer::step() {
  if (m_monitor->diverged()) diverge();  // seen by a flush outside step() (checkpoint_data)
  const int64_t step = m_next_step++;
  const int64_t max_steps = m_cfg.training.max_steps;
  m_monitor->step_started();
  // Where the step starts from: a stop between its micro-batches returns here (signals.h).
  const Batcher::Cursor cursor = m_run->batcher->cursor();
  const uint64_t dropout_calls = m_run->model->rng_position();
  if (!m_step->run(step)) abandon_step(step, cursor, dropout_calls);
  if (m_numerics && m_numerics->sampled(step)) record_numerics(step);
  m_monitor->step_finished(step);
  if (m_monitor->diverged() && !m_diverging) diverge();
  m_monitor->step_closed();
  const int64_t eval_every = m_cfg.training.eval_every;
  const bool eval_step = eval_every > 0 && step % eval_every == 0 && step != max_steps;
  bool evaluated = false;
  if (eval_step) {
    flush_and_check();
    m_monitor->totals().last_eval = evaluate(step);
    evaluated = !m_eval_pending;
  }
  // Periodic checkpoints: every checkpoint.every_steps, at every evaluation step
  // (checkpoint.at_eval), and at each evaluation that is keep_best's new best.
  const int64_t ckpt_every = m_cfg.checkpoint.every_steps;
  const bool periodic = (ckpt_every > 0 && step % ckpt_every == 0) ||
                        (m_cfg.checkpoint.at_eval && eval_step) ||
                        (evaluated && m_monitor->last_eval_was_best());
  if (periodic && step != max_steps) write_checkpoint();
  // training.early_stop: finish() comes next (the evaluation and the checkpoint are this step's).
  const MetricTracker& early = m_monitor->early_stop();
  if (evaluated && early.active() && early.since >= m_cfg.training.early_stop.patience) {
    m_stopped_early = true;
    if (is_root()) {
      spdlog::info(
          "early stop at step {}: {} has not improved by more than {} in {} evaluations (best {} "
          "at step {}; training.early_stop)",
          step, early.metric, files::short_number(m_cfg.training.early_stop.min_delta), early.since,
          early.best ? files::short_number(*early.best) : std::string("-"), early.best_step);
    }
    return;
  }
  // After the last step finish() comes next: it honours a stop request in its evaluation and
  // writes a checkpoint anyway.
  if (step == max_steps) return;
  // SIGUSR1 (Slurm's --signal before a time limit): a checkpoint now, and training goes on. A
  // stop (SIGINT, SIGTERM, ...) checkpoints and ends the run. Both are agreed over the ranks
  // here, so every rank checkpoints or stops after this same step, whichever rank received the
  // signal (a checkpoint is a collective with ZeRO-1).
  const Requests requests = agreed_requests(/*take_checkpoint=*/true);
  if (requests.stop != 0) stop(requests.stop);
  if (requests.checkpoint) {
    // The periodic checkpoint of this step, when there is one, is the one asked for.
    if (m_last_checkpoint != step) write_checkpoint();
    if (is_root()) spdlog::info("SIGUSR1: checkpoint after step {}; training goes on", step);
  }
}

void Trainer::check_replicas() const {
  // Several ranks: every replica must hold the same parameters, bit for bit (the averaged
  // gradients are identical on every rank, so are the updates). Checked once, at the end.
  dist::Communicator& comm = *m_run->comm;
  if (comm.world_size() == 1) return;
  const Tensor& params = m_run->model->params();
  std::vector<unsigned char> host(params.nbytes());
  m_run->backend->download(host.data(), params);
  const auto crc = static_cast<int64_t>(checkpoint::crc32(host.data(), host.size()));
  const int64_t most = comm.all_reduce_host(crc, dist::ReduceOp::max);
  const int64_t least = -comm.all_reduce_host(-crc, dist::ReduceOp::max);
  if (most != least) {
    throw Error{ErrorKind::runtime, "the ranks' parameters differ at the end of training (crc32 " +
                                        fmt::format("{:08x}", static_cast<uint32_t>(crc)) +
                                        " on rank " + std::to_string(comm.rank()) + ")"};
  }
  if (is_root()) {
    spdlog::info("parameters bitwise identical on all {} ranks (crc32 {:08x})", comm.world_size(),
                 static_cast<uint32_t>(crc));
  }
}

int Trainer::agreed_stop() const {
  return agreed_requests(/*take_checkpoint=*/false).stop;
}

Trainer::Requests Trainer::agreed_requests(bool take_checkpoint) const {
  // Several ranks: a signal seen by any rank acts on all of them after the same step (one host
  // all-reduce per step, no device work), so they checkpoint together and none waits alone in
  // the next collective. One word carries both requests: the stop signal times 2, plus 1 for a
  // checkpoint request. Its max over the ranks is the largest stop signal when any rank has one
  // (a stop checkpoints anyway, so it outranks a checkpoint request), else whether any rank
  // asked for a checkpoint: deterministic, whatever the ranks' timing.
  const int sig = stop_signal();
  const bool checkpoint = take_checkpoint && take_checkpoint_request();
  if (m_run->comm->world_size() == 1) return {sig, checkpoint};
  const int64_t word = int64_t{sig} * 2 + (checkpoint ? 1 : 0);
  const int64_t agreed = m_run->comm->all_reduce_host(word, dist::ReduceOp::max);
  const auto stop = static_cast<int>(agreed / 2);
  // A rank that did not receive the stop signal exits as the others do.
  if (stop != 0 && sig == 0) note_agreed_stop(stop);
  return {stop, stop == 0 && agreed % 2 == 1};
}

nlohmann::json Trainer::evaluate(int64_t step) {
  if (!m_run->batcher->has_eval()) return nullptr;
  const auto t0 = Clock::now();
  // Progress: a line before the first evaluation, and before any after one that took a second
  // or more, so a long one does not look like a hang.
  if (is_root() && (m_last_eval_seconds < 0 || m_last_eval_seconds >= 1.0)) {
    int64_t examples = 0;  // over every evaluation set
    for (size_t set = 0; set < m_run->batcher->eval_sets(); ++set) {
      m_run->batcher->select_eval(set);
      examples += m_run->batcher->eval_total();
    }
    m_run->batcher->select_eval(0);
    spdlog::info("eval  step {:>6}: evaluating {} examples{}", step, examples,
                 m_last_eval_seconds >= 0
                     ? fmt::format(" (the last evaluation took {:.1f}s)", m_last_eval_seconds)
                     : std::string());
  }
  // A long evaluation must not hold a stop request up: the caller checkpoints, and the resumed
  // run evaluates this step again from the start.
  // Every set of data.eval in order, each over its own batches (the batcher's selected set).
  Batcher& batcher = *m_run->batcher;
  const std::vector<std::string> names = config::eval_set_names(m_cfg);
  EvalResult first;
  std::vector<Monitor::SetResult> more;
  for (size_t set = 0; set < batcher.eval_sets(); ++set) {
    batcher.select_eval(set);
    const EvalResult r = evaluate_run(*m_run, m_eval_loss, [] { return stop_signal() != 0; });
    if (!r.complete) {
      batcher.select_eval(0);
      m_eval_pending = true;
      m_monitor->add_eval_seconds(seconds_since(t0));
      return m_monitor->totals().last_eval;
    }
    if (set == 0) {
      first = r;
    } else {
      more.push_back({set < names.size() ? names[set] : std::to_string(set), r.loss, r.accuracy});
    }
  }
  batcher.select_eval(0);
  m_last_eval_seconds = seconds_since(t0);
  return m_monitor->record_eval(step, first.loss, first.accuracy, m_last_eval_seconds, more);
}

void Trainer::abandon_step(int64_t step, Batcher::Cursor cursor, uint64_t dropout_calls) {
  // Nothing of the step reached the parameters, the optimizer or the scaler; its partial
  // gradients are dropped. Rewinding the data cursor and the dropout RNG makes the state exactly
  // the one after step - 1, so the checkpoint resumes bitwise to the uninterrupted run.
  m_run->batcher->rewind(cursor);
  m_run->model->rewind_rng(dropout_calls);
  m_next_step = step;
  m_stopped_in_step = step;
  stop(stop_signal());
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
  // No rank leaves before rank 0's checkpoint is written: a rank that exits first is taken by
  // mpirun for a failed job, and it kills the others, rank 0 in the middle of its write.
  if (m_run->comm->world_size() > 1) m_run->comm->barrier();
  const std::string where =
      m_stopped_in_step ? " between micro-batches of step " + std::to_string(*m_stopped_in_step) +
                              " (its partial gradients dropped), the state after step "
                        : " after step ";
  throw Error{ErrorKind::interrupted,
              std::string("stopped by ") + signal_name(signo) + where + std::to_string(step) +
                  "; checkpoint " + path.string(),
              "continue with 'ampctl resume --checkpoint " + m_run_dir.string() + "'"};
}

TrainOutcome Trainer::finish() {
  flush_and_check();
  RunTotals& t = m_monitor->totals();
  // A resume with nothing left to run (the checkpoint is the end) evaluates nothing twice.
  // An early stop evaluated its step already.
  const bool ran = (!m_resumed_at || m_next_step - 1 > *m_resumed_at) && !m_stopped_early;
  if (ran) t.last_eval = evaluate(t.steps_done);
  m_run->backend->synchronize();
  // A stop request cut the final evaluation short: checkpoint (the resumed run evaluates). One
  // that came after it lets the run finish: only the checkpoint and summary are left to write.
  if (m_eval_pending) stop(stop_signal());
  if (m_last_checkpoint != m_next_step - 1) write_checkpoint();
  check_replicas();

  const nlohmann::json summary = files::to_json(summary_of(files::kStatusOk));
  write_summary(summary);
  if (is_root()) {
    spdlog::info("done: {} steps, {} skipped, final loss {}, final scale {}, {} s", t.steps_done,
                 t.skipped, files::short_number(t.final_loss), files::short_scale(t.final_scale),
                 files::short_number(m_monitor->elapsed()));
  }
  m_monitor->log_phases();
  m_monitor->log_most_overflowing();
  return TrainOutcome{summary};
}

files::Summary Trainer::summary_of(const std::string& status) const {
  const Monitor& mon = *m_monitor;
  const RunTotals& t = mon.totals();
  files::Summary s;
  s.name = m_cfg.name;
  s.status = status;
  s.totals = t;
  s.overflow_counts = mon.counts_json(mon.overflow_counts());
  s.most_overflowing = mon.ranked(mon.overflow_counts());
  s.wall_time_s = mon.elapsed();
  if (t.steady_seconds > 0 && t.steady_samples > 0) {
    s.steady_step_ms = t.steady_seconds * 1e3 * static_cast<double>(m_cfg.data.batch_size) /
                       static_cast<double>(t.steady_samples) / static_cast<double>(m_accum);
  }
  s.tokens_per_sample = m_run->lm_block_size;
  s.backend = m_run->backend->description();
  s.device = m_run->device;
  s.precision = config::to_string(m_cfg.precision);
  s.scaler_enabled = m_run->scaler->is_enabled();
  s.phase_ms = mon.phase_json();
  if (m_numerics) {
    s.numerics = m_numerics->summary().numerics_json();
    s.scale_advice = m_numerics->summary().advice_json();
  }
  s.version = AMPCTL_VERSION;
  const MetricTracker& best = m_monitor->keep_best();
  if (best.active() && best.best) {
    s.best_checkpoint = {
        {"metric", best.metric},
        {"value", *best.best},
        {"step", best.best_step},
        {"checkpoint",
         (m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(best.best_step)).string()}};
  }
  const MetricTracker& early = m_monitor->early_stop();
  if (m_stopped_early) {
    s.early_stop = {{"step", t.steps_done},
                    {"metric", early.metric},
                    {"best", early.best ? nlohmann::json(*early.best) : nlohmann::json()},
                    {"best_step", early.best_step},
                    {"patience", m_cfg.training.early_stop.patience}};
  }
  return s;
}

void Trainer::open_tensorboard(std::optional<int64_t> purge_step) {
  if (m_cfg.logging.tensorboard && is_root()) {
    m_monitor->set_tensorboard(std::make_unique<files::EventWriter>(m_dir->path(), purge_step));
  }
  const nn::Model& model = *m_run->model;
  if (model.numerics() != nullptr && !model.roundings_instrumented() && is_root()) {
    // Said once, instead of partial counts: the roundings of this model are not all measured
    // (the GPT on a backend that fuses its attention or Linear + GELU backward: CUDA fp16/bf16).
    spdlog::info(
        "numerics: the {} model's backward roundings are not instrumented on this backend (it "
        "fuses ops whose roundings cannot be taken apart): no {}; on CUDA, "
        "AMPCTL_ATTENTION=materialised AMPCTL_GELU=composed run them composed, every rounding "
        "measured (docs/reference.md, \"Precision\")",
        model.type(),
        m_cfg.logging.numerics_every > 0
            ? (config::measures_grad_amax(m_cfg) ? "numerics lines and no grad_amax"
                                                 : "numerics lines")
            : "grad_amax on the metrics lines");
  } else if (m_cfg.logging.numerics_every > 0 && !m_numerics && is_root()) {
    spdlog::info(
        "numerics: precision {} rounds no gradient to 16 bits: nothing to count, no "
        "numerics lines",
        config::to_string(m_cfg.precision));
  }
}

void Trainer::record_numerics(int64_t step) {
  const NumericsSample& s = m_numerics->read(step);
  if (!is_root()) return;
  m_monitor->queue_line(numerics_line(s));
  if (files::EventWriter* tb = m_monitor->tensorboard()) {
    tb->scalar(step, "amp/underflow_frac", s.underflow_frac());
    for (size_t t = 0; t < s.names.size(); ++t) {
      if (const std::optional<double> h = s.headroom_log2(t)) {
        tb->scalar(step, "amp/headroom_log2/" + s.names[t], *h);
      }
    }
  }
  // Warned when a sample crosses the threshold, not again until one falls below it.
  const std::string warning = underflow_warning(s);
  if (!warning.empty() && !m_underflow_warned) spdlog::warn("{}", warning);
  m_underflow_warned = !warning.empty();
}

void Trainer::write_summary(const nlohmann::json& summary) const {
  if (is_root()) files::write_summary(m_dir->path(), summary);
}

checkpoint::CheckpointData Trainer::checkpoint_data() {
  m_monitor->flush();
  return assemble_checkpoint(m_next_step - 1, m_cfg, *m_run, *m_monitor, m_eval_pending);
}

namespace {

// The tensors of a checkpoint that no command would load (checkpoint::state_problems), named
// as the divergence reports them: parameters by their name, the optimizer's as "optimizer NAME".
std::vector<std::string> refused_tensor_names(const std::vector<checkpoint::StateProblem>& bad) {
  std::vector<std::string> names;
  for (const checkpoint::StateProblem& p : bad) {
    names.push_back(p.section == "model" ? p.tensor : p.section + " " + p.tensor);
  }
  return names;
}

}  // namespace

fs::path Trainer::write_checkpoint() {
  flush_and_check();
  const checkpoint::CheckpointData d = checkpoint_data();
  // A non-finite state (parameters, buffers or optimizer moments) is never written, whatever
  // training.divergence_patience says: it would become latest and rotate the good ones out,
  // and every command refuses to load it. The run ends as diverged instead, keeping them. The
  // state is the same on every rank (ZeRO-1's moments were gathered), so is the decision.
  if (const std::vector<checkpoint::StateProblem> bad = checkpoint::state_problems(d);
      !bad.empty()) {
    const bool params = bad.front().section == "model";
    m_monitor->set_divergence(Divergence{
        d.step, d.step, params ? "nonfinite_parameters" : "nonfinite_optimizer_state",
        "the checkpoint due after it found a non-finite " +
            std::string(params ? "parameter" : "optimizer state") + " (" + bad.front().section +
            " tensor " + bad.front().tensor + ": " + bad.front().problem + ")",
        params ? std::vector<std::string>{} : refused_tensor_names(bad)});
    diverge();
  }
  fs::path path = m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(d.step);
  if (is_root()) path = write_checkpoint_file(d);
  m_last_checkpoint = d.step;
  return path;
}

fs::path Trainer::write_checkpoint_file(const checkpoint::CheckpointData& d) {
  const MetricTracker& best = m_monitor->keep_best();
  std::vector<std::string> keep;
  if (best.active() && best.best) keep.push_back(checkpoint::checkpoint_file_name(best.best_step));
  std::vector<fs::path> removed;
  const fs::path path =
      checkpoint::write_checkpoint(m_run_dir, d, m_cfg.checkpoint.keep_last, keep, &removed);
  const bool is_best = best.active() && best.best && best.best_step == d.step;
  spdlog::info("checkpoint: {}{}", path.string(),
               is_best ? fmt::format(" (best {} {}, checkpoint.keep_best)", best.metric,
                                     files::short_number(*best.best))
                       : std::string());
  if (!removed.empty()) {
    std::string names;
    for (const fs::path& f : removed) names += (names.empty() ? "" : ", ") + f.filename().string();
    spdlog::info("checkpoint: removed {} (checkpoint.keep_last {}{})", names,
                 m_cfg.checkpoint.keep_last,
                 best.active() ? "; the best by " + best.metric + " is kept besides" : "");
  }
  return path;
}

void Trainer::restore(const checkpoint::CheckpointData& ck) {
  restore_checkpoint(ck, *m_run, *m_monitor, m_eval_pending);
}

void Trainer::diverge() {
  m_diverging = true;
  Monitor& mon = *m_monitor;
  mon.flush();  // the metrics of every step run, whatever found the divergence
  Divergence& d = mon.divergence();
  const int64_t last = m_next_step - 1;
  d.detected_at = std::max(d.detected_at, last);
  // Which tensors: those that overflowed during the streak (the scaler's attribution), else
  // those whose parameters (or, failing that, last gradients) are not finite.
  const std::vector<std::string> bad_params = mon.nonfinite_tensors(m_run->model->params());
  std::string where = d.reason == "nonfinite_optimizer_state" ? "non-finite optimizer state in "
                                                              : "non-finite gradients in ";
  if (d.tensors.empty()) {
    d.tensors = bad_params;
    where = "non-finite parameters in ";
  }
  if (d.tensors.empty()) {
    d.tensors = mon.nonfinite_tensors(m_run->model->grads());
    where = "non-finite gradients in ";
  }

  // The checkpoint of the last good state: the current one when its state is finite (a skipped
  // step changes nothing), else the newest periodic one, left as latest. A checkpoint written at
  // this step was checked when it was written.
  std::optional<fs::path> ckpt;
  std::optional<int64_t> ckpt_step;
  std::string ckpt_text;
  std::vector<checkpoint::StateProblem> bad_state;
  std::optional<checkpoint::CheckpointData> data;
  if (m_last_checkpoint != last) {
    data = checkpoint_data();
    bad_state = checkpoint::state_problems(*data);
  }
  const std::string bad_what = bad_state.empty() || bad_state.front().section == "model"
                                   ? "the parameters are non-finite"
                                   : "the optimizer state is non-finite";
  if (bad_state.empty()) {
    ckpt = m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(last);
    if (data) {
      if (is_root()) ckpt = write_checkpoint_file(*data);
      m_last_checkpoint = data->step;
    }
    ckpt_step = last;
    ckpt_text = "checkpoint " + ckpt->string() + " holds the last good state (step " +
                std::to_string(last) + ")";
  } else if (m_last_checkpoint >= 0) {
    ckpt = m_run_dir / "checkpoints" / checkpoint::checkpoint_file_name(m_last_checkpoint);
    ckpt_step = m_last_checkpoint;
    ckpt_text = "no checkpoint written (" + bad_what + "); the last good one is " + ckpt->string() +
                " (step " + std::to_string(m_last_checkpoint) + ")";
  } else {
    ckpt_text = "no checkpoint written (" + bad_what + ") and none was written before";
  }
  if (d.tensors.empty() && !bad_state.empty()) {
    d.tensors = refused_tensor_names(bad_state);
    where = "non-finite state in ";
  }

  std::string message = "training diverged at step " + std::to_string(d.step) + ": " + d.what;
  if (!d.tensors.empty()) message += "; " + where + join_names(d.tensors);
  if (d.detected_at > d.step) {
    message += " (detected at step " + std::to_string(d.detected_at) +
               ": the metrics are read back every " + std::to_string(mon.ring_steps()) + " steps)";
  }
  message += "; " + ckpt_text;

  files::Summary summary = summary_of(files::kStatusDiverged);
  summary.divergence =
      files::SummaryDivergence{d.step,
                               d.detected_at,
                               d.reason,
                               d.tensors,
                               ckpt ? std::optional<std::string>(ckpt->string()) : std::nullopt,
                               ckpt_step,
                               message};
  write_summary(files::to_json(summary));
  mon.log_most_overflowing();
  // The hint suggests only what `ampctl resume --set` accepts (config/resume_rules.h).
  std::string hint;
  const std::string resume = "'ampctl resume --checkpoint " + m_run_dir.string() + " --set ";
  if (d.reason == "overflow_at_min_scale") {
    hint =
        "the scale cannot back off below scaler.min_scale: continue from the last good state "
        "with a lower learning rate or with clipping, " +
        resume +
        "optimizer.lr=LR' or --set training.grad_clip_norm=1.0; or train again with a lower "
        "scaler.min_scale, scaler.on_min_scale: continue, or in bf16";
  } else if (d.reason == "overflow_at_scale_floor") {
    hint =
        "the gradients overflow even at the smallest loss scale: continue from the last good "
        "state with a lower learning rate or with clipping, " +
        resume + "optimizer.lr=LR' or --set training.grad_clip_norm=1.0; or train again in bf16";
  } else {
    hint =
        "check the data; or continue from the last good state with a lower learning rate or "
        "with clipping, " +
        resume + "optimizer.lr=LR' or --set training.grad_clip_norm=1.0";
  }
  if (ckpt) {
    hint += " (resume accepts " + config::resumable_keys_text() +
            "; training.divergence_patience: 0 turns off the streak rules)";
  } else {
    // Nothing to resume from: no good state was ever written.
    hint =
        "no checkpoint of a good state exists to resume from: train again with a lower "
        "learning rate or with clipping ('ampctl train ... --set optimizer.lr=LR' or --set "
        "training.grad_clip_norm=1.0), or in bf16 (training.divergence_patience: 0 turns off "
        "the streak rules)";
  }
  throw Error{ErrorKind::runtime, message, hint};
}

TrainOutcome Trainer::run() {
  begin();
  while (!done()) step();
  return finish();
}

TrainOutcome train(const config::RunConfig& config, const fs::path& run_dir) {
  Trainer trainer(config, run_dir);
  return trainer.run();
}

}  // namespace ampctl::train
