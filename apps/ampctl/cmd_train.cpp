// `ampctl train --config FILE [--set KEY=VALUE]... [--run-dir DIR] [--print-config]`: trains the
// configured model and writes config.yaml, metrics.jsonl and summary.json into the run directory
// (runs/<name> by default, runs/<name>-2, -3, ... when that one already holds a run).
#include <cstdio>
#include <memory>

#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/train/signals.h"
#include "ampctl/train/trainer.h"
#include "commands.h"

namespace ampctl::app {

namespace {

// A run stopped by SIGINT / SIGTERM (Error{interrupted}, thrown after its checkpoint was
// written): prints the message and returns 130 / 143. Call from a catch handler: any other error
// is rethrown to main.
int interrupted_exit(const Error& e) {
  if (e.kind() != ErrorKind::interrupted) throw;
  std::fprintf(stderr, "%s\n", e.what());
  if (!e.hint().empty()) std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
  const int signo = train::stop_signal();
  return signo != 0 ? train::stop_exit_code(signo) : e.exit_code();
}

struct TrainOptions {
  std::string config;
  std::vector<std::string> sets;
  std::string run_dir;
  bool print_config = false;
};

int run_train(const TrainOptions& options) {
  const config::RunConfig resolved = config::load_config(options.config, options.sets);
  if (options.print_config) std::fputs(config::to_yaml(resolved).c_str(), stdout);
  const auto dir = train::choose_run_dir(resolved, options.run_dir);
  train::install_stop_handlers();
  try {
    train::train(resolved, dir);
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
  sub->add_flag("--print-config", options->print_config,
                "print the resolved configuration before training");
  commands.push_back({sub, [options] { return run_train(*options); }});
}

}  // namespace ampctl::app
