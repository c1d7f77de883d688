// `ampctl validate --config FILE [--set KEY=VALUE]...`: prints the resolved configuration (every
// default filled in, each key with its help) and exits 0, or lets the ConfigError listing every
// problem reach main, which prints them and exits 2. A file with a `sweep:` section is checked as
// `ampctl sweep` would check it (the base and every run), and its runs are listed after the base.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "ampctl/config/run_config.h"
#include "ampctl/sweep/sweep.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ValidateOptions {
  std::string config;
  std::vector<std::string> sets;
};

// The file's text when it holds a top-level `sweep:` section; empty otherwise (an unreadable
// file is left to load_config, which reports it).
std::string sweep_text(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  return sweep::strip_sweep_section(text) == text ? std::string() : text;
}

int run_validate(const ValidateOptions& options) {
  const std::string text = sweep_text(options.config);
  if (text.empty()) {
    const config::RunConfig resolved = config::load_config(options.config, options.sets);
    std::fputs(config::to_yaml(resolved, config::YamlStyle::annotated).c_str(), stdout);
    return 0;
  }
  // --set applies to the base, as it would to every run of the sweep.
  sweep::Sweep spec = sweep::parse_sweep(text, options.config);
  for (sweep::Run& run : spec.runs) {
    run.overrides.insert(run.overrides.begin(), options.sets.begin(), options.sets.end());
  }
  sweep::validate(spec);
  const config::RunConfig base = config::parse_config(spec.base_text, spec.origin, options.sets);
  std::fputs(config::to_yaml(base, config::YamlStyle::annotated).c_str(), stdout);
  std::printf("# sweep: %zu run(s), each valid (ampctl sweep --config %s)\n", spec.runs.size(),
              options.config.c_str());
  for (const sweep::Run& run : spec.runs) {
    std::string line = "#   " + run.name + ":";
    for (const std::string& o : run.overrides) line += " " + o;
    std::printf("%s\n", line.c_str());
  }
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
