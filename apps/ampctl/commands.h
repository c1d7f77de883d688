// ampctl's subcommands. Each lives in its own apps/ampctl/cmd_<name>.cpp and exposes one
// `register_<name>(app, commands)`: it adds a CLI11 subcommand with its options (bound to an
// options struct the run function shares) and appends a Command whose `run` does the work and
// returns the exit code. main.cpp registers them all, parses the command line and runs the one
// the user chose; errors propagate as ampctl::Error to main, the only place that catches them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace ampctl::app {

struct Command {
  CLI::App* subcommand = nullptr;  // owned by the parent CLI::App
  std::function<int()> run;        // the exit code on success; throws ampctl::Error otherwise
};

using Commands = std::vector<Command>;

// `--set KEY=VALUE`, repeatable, one KEY=VALUE per flag, kept in command-line order (later ones
// win). The values are checked by the config module (config::parse_override), not here.
inline CLI::Option* add_set_option(CLI::App& subcommand, std::vector<std::string>& sets) {
  return subcommand
      .add_option("--set", sets,
                  "override one key: VALUE is a YAML scalar or flow value, e.g. "
                  "--set model.hidden=[64,64] (repeatable; later ones win)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void register_validate(CLI::App& app, Commands& commands);
void register_inspect(CLI::App& app, Commands& commands);
void register_export(CLI::App& app, Commands& commands);
void register_train(CLI::App& app, Commands& commands);
void register_resume(CLI::App& app, Commands& commands);
void register_sweep(CLI::App& app, Commands& commands);
void register_report(CLI::App& app, Commands& commands);
void register_sample(CLI::App& app, Commands& commands);

}  // namespace ampctl::app
