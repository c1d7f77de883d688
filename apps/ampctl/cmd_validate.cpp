// `ampctl validate --config FILE [--set KEY=VALUE]...`: prints the resolved configuration (every
// default filled in, its `base:` files merged, each key with where it was written, "[FILE:LINE]"
// or "[--set KEY=VALUE]", and its help) and exits 0, or lets the ConfigError listing every
// problem reach main, which prints them and exits 2. A file with a `sweep:` section is checked as
// `ampctl sweep` would check it (the base and every run), and its runs are listed after the base.
// Each run's memory is estimated too (train/memory_plan.h): sizes that overflow, or a CPU run
// that cannot fit the host's available memory, are refused (exit 2) naming the key.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "ampctl/config/config_file.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/sweep/sweep.h"
#include "ampctl/train/memory_plan.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ValidateOptions {
  std::string config;
  std::vector<std::string> sets;
};

int run_validate(const ValidateOptions& options) {
  // One bounded read of a regular file (a FIFO or /dev/zero is refused before any byte).
  const std::string text = config::read_config_text(options.config);
  if (sweep::strip_sweep_section(text) == text) {
    const config::RunConfig resolved = config::parse_config(text, options.config, options.sets);
    train::check_config_memory(resolved);
    const auto origins = config::key_origins(text, options.config, options.sets);
    std::fputs(config::to_yaml(resolved, config::YamlStyle::annotated, &origins).c_str(), stdout);
    // Valid, but read by nothing at this precision (train warns the same): a comment, so the
    // output stays the YAML it was.
    for (const std::string& key : config::unused_scaler_keys(resolved)) {
      std::printf("# not used: %s (the scaler is off: precision %s, scaler.enabled: auto)\n",
                  key.c_str(), config::to_string(resolved.precision));
    }
    return 0;
  }
  // --set applies to the base, as it would to every run of the sweep.
  sweep::Sweep spec = sweep::parse_sweep(text, options.config);
  spec.base_overrides = options.sets;
  check_sweep_runs(spec);
  const config::RunConfig base = config::parse_config(spec.base_text, spec.origin, options.sets);
  const auto origins = config::key_origins(spec.base_text, spec.origin, options.sets);
  std::fputs(config::to_yaml(base, config::YamlStyle::annotated, &origins).c_str(), stdout);
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

void check_sweep_runs(sweep::Sweep& spec) {
  // Every failing run is listed (a sweep with two bad runs names both, whether a key's value or
  // what only the model or the memory plan knows is wrong): sweep::validate's configuration
  // problems, then the runs that passed them through the memory plan and the model's names.
  std::string message;
  try {
    sweep::validate(spec);
  } catch (const Error& e) {
    const bool any_valid = std::any_of(spec.runs.begin(), spec.runs.end(), [](const sweep::Run& r) {
      return !r.resolved_yaml.empty();
    });
    if (!any_valid) throw;  // the base, or every run: listed as they are
    message = std::string(e.what()) + "\n";
  }
  for (const sweep::Run& run : spec.runs) {
    if (run.resolved_yaml.empty()) continue;  // listed above
    try {
      train::check_config_memory(
          config::parse_config_said(spec.base_text, spec.origin, sweep::said_overrides(spec, run)));
    } catch (const Error& e) {
      message += "run " + run.name + ": " + e.what() + "\n";
      if (!e.hint().empty()) message += "hint: " + e.hint() + "\n";
    }
  }
  if (message.empty()) return;
  message.pop_back();
  throw Error{ErrorKind::config, message, "nothing was run; fix the sweep and run it again"};
}

void register_validate(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* sub = app.add_subcommand(
      "validate",
      "check a configuration and print it resolved (bases merged, defaults filled in, each "
      "key's origin)");
  sub->add_option("--config", options->config, "the run's YAML configuration")
      ->required()
      ->type_name("FILE");
  add_set_option(*sub, options->sets);
  commands.push_back({sub, [options] { return run_validate(*options); }});
}

}  // namespace ampctl::app
