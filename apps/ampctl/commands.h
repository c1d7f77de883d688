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

#include "ampctl/core/error.h"

namespace ampctl::sweep {
struct Sweep;
}

namespace ampctl::app {

// Every run of a sweep, checked as train would check it before its run directory exists
// (sweep::validate's configuration, then its memory plan and the model's parameter names:
// train/memory_plan.h), filling each valid run's resolved_yaml: one Error{config} listing every
// run that fails, each "run NAME: ..." with its hint (validate and sweep, before any run starts).
void check_sweep_runs(sweep::Sweep& spec);

// The hint for a command line CLI11 refused (`args`: argv without the program name), or "":
// the command a misspelt one is closest to, the flag a bare path belongs to (train FILE.yaml:
// --config; resume RUN: --checkpoint), --run-dir for train's --out / --output-dir, the closest
// option to an unknown one; else, within a command, its --help.
std::string usage_hint(CLI::App& app, const std::vector<std::string>& args);

struct Command {
  CLI::App* subcommand = nullptr;  // owned by the parent CLI::App
  std::function<int()> run;        // the exit code on success; throws ampctl::Error otherwise
};

using Commands = std::vector<Command>;

// Several ranks (dist/process_group.h): an outcome every rank reached together (rank 0's
// configuration error, broadcast; a stop all ranks agreed on) is marked agreed, so main prints
// it on rank 0 alone and every rank exits with its code; any other failure is that rank's own and
// ends the job (dist::abort_job). SilentExit: a non-root rank's exit for an agreed error that
// rank 0 prints.
void mark_exit_agreed();
bool exit_is_agreed();
struct SilentExit {
  int code;
};
// Runs `check` on rank 0 alone and gives its verdict to every rank: an ampctl::Error it throws
// is rethrown on rank 0 and every other rank throws SilentExit with its exit code, all marked
// agreed (printed once, no abort). One process: just `check()`.
void root_decides(const std::function<void()>& check);
// A run stopped by SIGINT / SIGTERM / SIGHUP (Error{interrupted}, thrown after its checkpoint
// was written): prints the message on rank 0 and returns 130 / 143 / 129 (train, resume). Call
// from a catch handler: ranks that disagree (train/agreement.h) exit 2, the differing rank
// saying why; any other error is rethrown to main.
int interrupted_exit(const Error& e);

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
void register_eval(CLI::App& app, Commands& commands);
void register_replay(CLI::App& app, Commands& commands);
void register_tokenize(CLI::App& app, Commands& commands);

}  // namespace ampctl::app
