// The console's form: every command logs through spdlog as plain lines ("warning: " before a
// warning, no timestamp); train and resume take --quiet, --log-format text|json and --log-time
// (docs/reference.md, "Console").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

namespace ampctl::app {

struct ConsoleFlags {
  bool quiet = false;           // warnings and errors only
  std::string format = "text";  // text | json
  bool time = false;            // a [HH:MM:SS] prefix
};

// --quiet, --log-format and --log-time on `subcommand`, bound to `flags`.
void add_console_options(CLI::App& subcommand, ConsoleFlags& flags);

// Sets spdlog's default logger as `flags` say (main calls it with the defaults before any
// command runs). --log-format json moves every log line to stderr and returns stdout, the
// stream the trainer writes its JSON lines to (train::Trainer::set_json_console); else null.
std::FILE* apply_console(const ConsoleFlags& flags);

}  // namespace ampctl::app
