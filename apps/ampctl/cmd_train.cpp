// `ampctl train --config FILE [--set KEY=VALUE]... [--run-dir DIR] [--print-config]`: trains the
// configured model and writes config.yaml, metrics.jsonl and summary.json into the run directory
// (runs/<name> by default, runs/<name>-2, -3, ... when that one already holds a run).
#include <cstdio>
#include <memory>

#include "ampctl/config/run_config.h"
#include "ampctl/train/trainer.h"
#include "commands.h"

namespace ampctl::app {

namespace {

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
  train::train(resolved, dir);
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
