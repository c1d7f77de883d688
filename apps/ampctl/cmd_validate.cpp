// `ampctl validate --config FILE [--set KEY=VALUE]...`: prints the resolved configuration (every
// default filled in, each key with its help) and exits 0, or lets the ConfigError listing every
// problem reach main, which prints them and exits 2.
#include <cstdio>
#include <memory>

#include "ampctl/config/run_config.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ValidateOptions {
  std::string config;
  std::vector<std::string> sets;
};

int run_validate(const ValidateOptions& options) {
  const config::RunConfig resolved = config::load_config(options.config, options.sets);
  std::fputs(config::to_yaml(resolved, config::YamlStyle::annotated).c_str(), stdout);
  return 0;
}

}  // namespace

void register_validate(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* sub = app.add_subcommand(
      "validate", "check a configuration and print it resolved (every default filled in)");
  sub->add_option("--config", options->config, "the run's YAML configuration")
      ->required()
      ->type_name("FILE");
  add_set_option(*sub, options->sets);
  commands.push_back({sub, [options] { return run_validate(*options); }});
}

}  // namespace ampctl::app
