// `ampctl resume --checkpoint FILE|RUN_DIR [--set KEY=VALUE]...`: continues a run from a
// checkpoint (a file, or a run directory's newest complete one) in the run directory that holds
// it (the parent of its checkpoints/ folder), up to training.max_steps. A checkpoint outside a
// run's checkpoints/ folder is refused (exit 2); the run directory is locked for the whole run
// (a second writer gets exit 2). Only the keys config/resume_rules.h lists may be overridden:
// training.*, logging.*, checkpoint.*, debug.*, distributed.* (the checkpoint's format is the
// same for every setting), device, optimizer.lr, scheduler.* (the schedule continues from the
// checkpoint's step with the new values) and scaler.* but scaler.enabled and scaler.init_scale
// (the scale continues from the checkpoint's, under the new rule and settings).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/checkpoint/output_file.h"
#include "ampctl/config/resume_rules.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/core/run_lock.h"
#include "ampctl/dist/process_group.h"
#include "ampctl/run/layout.h"
#include "ampctl/run/summary.h"
#include "ampctl/train/agreement.h"
#include "ampctl/train/signals.h"
#include "ampctl/train/trainer.h"
#include "commands.h"
#include "console.h"

namespace ampctl::app {

namespace {

namespace fs = std::filesystem;

struct ResumeOptions {
  std::string checkpoint;
  std::vector<std::string> sets;
  std::string run_dir;  // a branch: continue in this new directory
  bool rewind = false;  // drop the run's history after the checkpoint and continue in place
  ConsoleFlags console;
};

// Refuses overrides that change a key whose state the checkpoint holds (config/resume_rules.h):
// the resolved configurations before and after them are compared, so the refusal holds however
// the override spells the change (`--set scaler.init_scale=5`, `--set 'scaler={init_scale: 5}'`).
// The error names the --set that wrote the key (the last one whose key is the key or a section
// above it).
void check_overrides(const config::RunConfig& before, const config::RunConfig& after,
                     const std::vector<std::string>& sets) {
  const std::optional<config::RefusedChange> change = config::refused_change(before, after);
  if (!change) return;
  std::string said;
  for (const std::string& set : sets) {
    const std::string key = set.substr(0, set.find('='));
    const bool above = change->key == key || (change->key.size() > key.size() &&
                                              change->key.compare(0, key.size(), key) == 0 &&
                                              change->key[key.size()] == '.');
    if (above || key.rfind(change->key + ".", 0) == 0) said = set;
  }
  if (said.empty()) {  // not one --set alone (a condition another one changed): name them all
    for (const std::string& set : sets) said += (said.empty() ? "" : " --set ") + set;
  }
  throw Error{ErrorKind::usage,
              "--set " + said + ": " + change->key + " cannot be changed when resuming (" +
                  change->before + " -> " + change->after + "): " + change->why,
              "resume may override " + config::resumable_keys_text() +
                  "; start a new run with 'ampctl train' to change " + change->key};
}

// The run directory that holds `given` (a checkpoint file, a run directory or its checkpoints/
// folder): resume writes config.yaml and metrics.jsonl there, so it must be one. A checkpoint
// anywhere else (a download, a copy) is refused rather than have its grandparent taken for a run;
// a branch (`branch`), which only reads it, takes it with no run around it (returns "").
fs::path run_dir_of(const fs::path& given, bool branch) {
  std::error_code ec;
  const fs::file_status st = fs::status(given, ec);
  if (!fs::exists(st)) return {};  // load_checkpoint reports it
  const fs::path norm = fs::absolute(given, ec).lexically_normal();
  const fs::path path = norm.has_filename() ? norm : norm.parent_path();
  // Messages and hints name the run as the user would: relative when they gave a relative path.
  auto as_given = [&](const fs::path& run) {
    if (given.is_absolute()) return run;
    const fs::path rel = run.lexically_relative(fs::current_path(ec));
    return rel.empty() ? run : rel;
  };
  if (fs::is_directory(st)) {
    if (fs::is_directory(path / "checkpoints", ec)) return given;
    if (path.filename() == "checkpoints") return as_given(path.parent_path());
  } else if (path.parent_path().filename() == "checkpoints") {
    return as_given(path.parent_path().parent_path());
  }
  if (branch) return {};
  throw Error{ErrorKind::usage,
              "--checkpoint " + given.string() +
                  ": not inside a run directory's checkpoints/ folder (resume continues the run "
                  "that holds the checkpoint and writes its config.yaml and metrics.jsonl)",
              "continue it in a new run directory, which only reads it: ampctl resume "
              "--checkpoint " +
                  given.string() + " --run-dir NEW_DIR"};
}

// A branch's directory: new (or holding no run), and not the run it starts from.
void check_branch_dir(const fs::path& target, const fs::path& source) {
  std::error_code ec;
  if (!source.empty() && fs::equivalent(target, source, ec)) {
    throw Error{ErrorKind::usage,
                "--run-dir " + target.string() + ": is the checkpoint's own run directory",
                "omit --run-dir to continue the run in place"};
  }
  if (run::holds_sweep(target)) {
    throw Error{ErrorKind::usage,
                "--run-dir " + target.string() + ": holds a sweep (" + run::kSweepFile + ")",
                "a branch starts in a new directory: choose another --run-dir"};
  }
  if (run::is_run_directory(target)) {
    throw Error{ErrorKind::usage, "--run-dir " + target.string() + ": already holds a run",
                "a branch starts in a new directory: choose another --run-dir"};
  }
}

[[noreturn]] void refuse_replacing_history(const std::string& given, int64_t step,
                                           const std::vector<fs::path>& later) {
  // A few by name; more as the first, the last and the count (a long run keeps many).
  std::string names;
  if (later.size() <= 3) {
    for (const fs::path& f : later) {
      if (!names.empty()) names += ", ";
      names += f.filename().string();
    }
  } else {
    names = std::to_string(later.size()) + ": " + later.front().filename().string() + " to " +
            later.back().filename().string();
  }
  const std::string k = std::to_string(step);
  throw Error{ErrorKind::usage,
              "--checkpoint " + given + ": the run has later checkpoints (" + names +
                  "); continuing from step " + k +
                  " here would replace its history after that step",
              "continue it in a new directory and keep this run as it is: ampctl resume "
              "--checkpoint " +
                  given + " --run-dir NEW_DIR; or drop this run's steps after " + k +
                  " (their metrics lines and those checkpoints) and continue here: add "
                  "--rewind"};
}

// What resume continues from, checked: the checkpoint, the configuration in effect, the run
// directory to write and what becomes of the run's history.
struct Prepared {
  std::unique_ptr<RunLock> lock;  // the writer's (rank 0's) lock on the run directory
  checkpoint::LoadedCheckpoint loaded;
  config::RunConfig cfg;
  train::ResumeHistory history;
  fs::path run_dir;
};

Prepared prepare(const ResumeOptions& options) {
  Prepared p;
  const bool branch = !options.run_dir.empty();
  const fs::path source = run_dir_of(options.checkpoint, branch);
  if (branch) check_branch_dir(options.run_dir, source);
  // One writer per run directory, for this process's whole life (run_lock.h); taken before the
  // checkpoint is chosen, so it is the newest one a previous writer left. A branch only reads
  // the run it starts from (which may even be training still); the trainer locks the new one.
  // Rank 0 is the run's writer: other ranks only read the checkpoint.
  if (!branch && !source.empty() && dist::process_rank() == 0) {
    p.lock = std::make_unique<RunLock>(source);
  }
  p.loaded = checkpoint::load_checkpoint(options.checkpoint);
  const std::string origin = p.loaded.path.string() + ": config";
  p.cfg = config::from_json(p.loaded.data.config, origin, options.sets);
  if (!options.sets.empty()) {
    check_overrides(config::from_json(p.loaded.data.config, origin), p.cfg, options.sets);
  }
  if (branch) {
    p.history.branch_of = source;  // "" for a checkpoint outside a run
    p.history.checkpoint_file = p.loaded.path;
  } else {
    // The run's checkpoints after this one are its history past it: continuing here would
    // replace that history (the metrics lines and, step by step, those files). Named as a file,
    // an older checkpoint needs --rewind to say so (or --run-dir, to keep both); a run directory
    // resumes its newest complete one, and any later file is one that does not verify.
    std::vector<fs::path> later =
        checkpoint::checkpoints_after(p.loaded.path.parent_path(), p.loaded.data.step);
    std::error_code ec;
    const bool named_file = !fs::is_directory(options.checkpoint, ec);
    if (options.rewind) {
      p.history.rewind = std::move(later);
    } else if (named_file && !later.empty()) {
      refuse_replacing_history(options.checkpoint, p.loaded.data.step, later);
    }
  }
  p.run_dir = branch ? fs::path(options.run_dir) : source;
  return p;
}

// A run that finished at the checkpoint: its step is training.max_steps, no evaluation is
// pending and its summary.json says ok (a run stopped or diverged at its last step still has
// its outcome to write).
// A run stopped early (training.early_stop) at the checkpoint's step is finished too, unless the
// resume turns the early stop off. Returns the key that ended it, or "" when it is not finished.
std::string finished_by(const Prepared& p) {
  const checkpoint::CheckpointData& ck = p.loaded.data;
  const auto pending = ck.metrics.find("pending_eval");
  if (pending != ck.metrics.end() && pending->is_boolean() && pending->get<bool>()) return {};
  // Read as every run file is (a regular file, capped): a FIFO here must not block the resume.
  const fs::path summary_file = p.run_dir / run::kSummaryFile;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(summary_file, ec))) return {};
  const nlohmann::json summary =
      nlohmann::json::parse(read_regular_file(summary_file, kMaxRecordBytes, "summary"), nullptr,
                            /*allow_exceptions=*/false);
  if (!summary.is_object() || run::summary_status(summary) != run::kStatusOk) return {};
  if (ck.step == p.cfg.training.max_steps) return "training.max_steps";
  const auto early = summary.find("early_stop");
  if (early != summary.end() && early->is_object() &&
      early->value("step", int64_t{-1}) == ck.step &&
      p.cfg.training.early_stop.metric.kind != config::EvalMetric::none) {
    return "training.early_stop";
  }
  return {};
}

int run_resume(const ResumeOptions& options) {
  std::FILE* json_console = apply_console(options.console);
  // Before any input is opened (signals.h).
  train::install_stop_handlers();
  // Several ranks stop together, at the trainer's agreement: loading gives up on no rank alone.
  if (dist::process_world_size() > 1) set_stop_deferred(true);
  // Rank 0 checks the command line, the run directory and the checkpoint first; its verdict goes
  // to every rank, so a refusal (an override resume does not take, a run with later
  // checkpoints, a locked or damaged run) is reported once and every rank exits with its code.
  // The other ranks then read the checkpoint themselves (a failure there is that rank's own).
  const bool root = dist::process_rank() == 0;
  Prepared prepared;
  root_decides([&] { prepared = prepare(options); });
  if (!root) prepared = prepare(options);
  const checkpoint::LoadedCheckpoint& loaded = prepared.loaded;
  const config::RunConfig& cfg = prepared.cfg;
  const train::ResumeHistory& history = prepared.history;
  const fs::path& run_dir = prepared.run_dir;
  const std::string finished =
      options.run_dir.empty() && !options.rewind ? finished_by(prepared) : std::string();
  if (finished == "training.early_stop") {
    if (root) {
      spdlog::info(
          "run '{}' in {} stopped early at step {} (training.early_stop): nothing to "
          "resume",
          cfg.name, run_dir.string(), loaded.data.step);
      spdlog::info(
          "to train it on: ampctl resume --checkpoint {} --set "
          "training.early_stop.metric=none",
          run_dir.string());
    }
    return 0;
  }
  if (!finished.empty()) {
    // Nothing to run: said without loading the data (every rank sees the same files).
    if (root) {
      const int64_t k = loaded.data.step;
      spdlog::info("run '{}' in {} finished at step {} (training.max_steps): nothing to resume",
                   cfg.name, run_dir.string(), k);
      spdlog::info(
          "to train it further: ampctl resume --checkpoint {} --set training.max_steps=N, N > "
          "{}{}",
          run_dir.string(), k,
          config::schedule_decays(cfg) && cfg.scheduler.decay_steps == 0
              ? fmt::format(" (add --set scheduler.decay_steps={} to keep the {} schedule's "
                            "length: the lr then holds its end value)",
                            k, config::to_string(cfg.scheduler.type))
              : std::string());
    }
    return 0;
  }
  if (const int signo = dist::process_world_size() == 1 ? train::stop_signal() : 0) {
    std::fprintf(stderr, "stopped by %s before training resumed; nothing was written\n",
                 train::signal_name(signo));
    return train::stop_exit_code(signo);
  }
  try {
    train::Trainer trainer(cfg, run_dir);
    trainer.set_json_console(json_console);
    try {
      trainer.resume(loaded.data, history);
    } catch (const Error& e) {  // a state that does not restore: name the file it came from
      if (e.kind() != ErrorKind::input) throw;
      throw Error{e.kind(), loaded.path.string() + ": " + e.what(), e.hint()};
    }
    while (!trainer.done()) trainer.step();
    trainer.finish();
  } catch (const Error& e) {
    return interrupted_exit(e);
  }
  return 0;
}

}  // namespace

void register_resume(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ResumeOptions>();
  CLI::App* sub = app.add_subcommand(
      "resume", "continue a run from a checkpoint, in the run directory that holds it");
  sub->add_option("--checkpoint", options->checkpoint,
                  "a checkpoint file, or a run directory (its newest complete checkpoint)")
      ->required()
      ->type_name("FILE|RUN_DIR");
  add_set_option(*sub, options->sets);
  CLI::Option* run_dir =
      sub->add_option("--run-dir", options->run_dir,
                      "continue in this new directory instead (a branch): the run's steps up to "
                      "the checkpoint are copied there and the run itself is left as it is")
          ->type_name("DIR");
  sub->add_flag("--rewind", options->rewind,
                "continue in place from a checkpoint older than the run's newest: its later "
                "checkpoints and metrics lines are dropped")
      ->excludes(run_dir);
  add_console_options(*sub, options->console);
  commands.push_back({sub, [options] { return run_resume(*options); }});
}

}  // namespace ampctl::app
