// `ampctl train --config FILE [--set KEY=VALUE]... [--run-dir DIR] [--init-from PATH]
// [--print-config]`: trains the
// configured model and writes config.yaml, metrics.jsonl and summary.json into the run directory
// (runs/<name> by default, runs/<name>-2, -3, ... when that one already holds a run). It never
// overwrites its input: a --config that is the run directory's own config.yaml is refused.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <system_error>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/dist/process_group.h"
#include "ampctl/train/agreement.h"
#include "ampctl/train/signals.h"
#include "ampctl/train/trainer.h"
#include "commands.h"
#include "console.h"

namespace ampctl::app {

namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> sets;
  std::string run_dir;
  std::string init_from;
  bool print_config = false;
  ConsoleFlags console;
};

// --init-from PATH is init.from=PATH after the --set overrides (a YAML single-quoted scalar, so
// any path reads back as itself).
std::vector<std::string> overrides_of(const TrainOptions& options) {
  std::vector<std::string> sets = options.sets;
  if (!options.init_from.empty()) {
    std::string quoted = "'";
    for (char c : options.init_from) quoted += c == '\'' ? std::string("''") : std::string(1, c);
    sets.push_back("init.from=" + quoted + "'");
  }
  return sets;
}

// train writes the run's resolved configuration to RUN_DIR/config.yaml; when that is the file
// it was given, refuse (exit 2) rather than overwrite the user's text (comments and all). Writing
// the resolved copy under another name instead would make this one run directory differ from
// every other, and everything that reads a run (resume, sweep, report, people) looks for
// config.yaml.
void refuse_config_in_run_dir(const std::filesystem::path& config,
                              const std::filesystem::path& dir) {
  const std::filesystem::path written = dir / "config.yaml";
  std::error_code ec;
  if (!std::filesystem::equivalent(config, written, ec) || ec) return;
  throw Error{ErrorKind::usage,
              "--config " + config.string() + " is " + written.string() +
                  ", which train writes (the run's resolved configuration): it would be "
                  "overwritten",
              "keep your configuration outside the run directory, e.g. cp " + written.string() +
                  " my-run.yaml && ampctl train --config my-run.yaml --run-dir NEW_DIR"};
}

int run_train(const TrainOptions& options) {
  std::FILE* json_console = apply_console(options.console);
  // Before any input is opened: a signal while the config or data is read is then recorded and
  // honoured, never the default action (signals.h).
  train::install_stop_handlers();
  // Several ranks stop together, at the trainer's agreement: loading gives up on no rank alone.
  if (dist::process_world_size() > 1) set_stop_deferred(true);
  // Rank 0 alone reads and checks the configuration first, and alone chooses (and probes) the
  // run directory; its verdict goes to every rank, so a configuration error is reported once and
  // every rank exits 2 (one process: all of this is the plain sequence).
  const bool root = dist::process_rank() == 0;
  config::RunConfig resolved;
  std::filesystem::path dir;
  root_decides([&] {
    resolved = config::load_config(options.config, overrides_of(options));
    if (options.print_config) std::fputs(config::to_yaml(resolved).c_str(), stdout);
    dir = train::choose_run_dir(resolved, options.run_dir);
    refuse_config_in_run_dir(options.config, dir);
  });
  std::string dir_text = dir.string();
  dist::broadcast_from_root(dir_text);
  if (!root) {
    resolved = config::load_config(options.config, overrides_of(options));
    dir = dir_text;
  }
  // With several ranks a stop is agreed inside the trainer (every rank checkpoints together).
  const int signo = dist::process_world_size() == 1 ? train::stop_signal() : 0;
  if (signo != 0) {
    std::fprintf(stderr, "stopped by %s before training started; nothing was written\n",
                 train::signal_name(signo));
    return train::stop_exit_code(signo);
  }
  try {
    train::Trainer trainer(resolved, dir);
    trainer.set_json_console(json_console);
    trainer.run();
  } catch (const Error& e) {
    return interrupted_exit(e);
  }
  return 0;
}

}  // namespace

void register_train(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* sub = app.add_subcommand("train", "train a model from a YAML configuration");
  sub->add_option("--config", options->config, "the run's YAML configuration")
      ->required()
      ->type_name("FILE");
  add_set_option(*sub, options->sets);
  sub->add_option("--run-dir", options->run_dir,
                  "where to write the run (default: runs/<name>; must not hold a run)")
      ->type_name("DIR");
  sub->add_option("--init-from", options->init_from,
                  "start from these weights (sets init.from): an ampctl checkpoint or run "
                  "directory, a safetensors file (ampctl export, or Hugging Face GPT-2), or an "
                  "export --format hf directory (a relative PATH is read from the current "
                  "directory)")
      ->type_name("PATH");
  sub->add_flag("--print-config", options->print_config,
                "print the resolved configuration before training");
  add_console_options(*sub, options->console);
  commands.push_back({sub, [options] { return run_train(*options); }});
}

}  // namespace ampctl::app
