// `ampctl sweep`: a set of runs over one base configuration, each an ordered list of `--set`
// overrides, expanded from --grid flags and the config file's `sweep:` section, validated as a
// whole before anything runs, then executed as separate `ampctl train` / `ampctl resume`
// processes, and summarised in sweep.csv / sweep.json.
//
// The `sweep:` section:
//   sweep:
//     grid: {scaler.init_scale: [1024, 65536], scaler.growth_interval: [100, 2000]}
//     runs: [{optimizer.lr: 1.0e-3}, {optimizer.lr: 3.0e-3}]
//     random: {n: 4, seed: 0, params: {optimizer.lr: {log_uniform: [1.0e-4, 1.0e-2]},
//                                      scaler.hysteresis: {choice: [1, 2]}}}
//     seeds: [0, 1, 2]
// The runs are: each explicit run (or one empty run) x the grid's cartesian product (first key
// outermost) x the random samples x the seeds (`seed=S` appended last). A `runs` entry's `name:`
// names its runs (folder, rows, legend) instead of its overrides; duplicate or filesystem-unsafe
// names are errors naming their line. A run listed twice (a
// repeated grid, runs or seeds value) is an error; a random sample that repeats an earlier run is
// dropped. A sweep has at most kMaxRuns runs and kMaxOverrides overrides in all: more (a large
// random.n, a grid whose product explodes) is refused before any run is expanded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/config/run_config.h"

namespace ampctl::sweep {

// Each run is a training (a process and a folder): ten thousand is past any sweep's purpose, and
// the bound keeps expansion itself (and a fuzzer's inputs) fast.
inline constexpr std::size_t kMaxRuns = 10000;
// And at most this many overrides over all its runs (runs x keys per run).
inline constexpr std::size_t kMaxOverrides = 200000;

struct Run {
  std::string name;  // a stable short id from the overrides (the dir's name)
  // The setting's name when its `runs:` entry has `name:` (the name, then any grid or random
  // value it is combined with: "fast,init_scale=1024"; without the seed), else "": the report
  // and the verdict group seeds by it, and by the overrides without `seed` otherwise.
  std::string setting;
  std::vector<std::string> overrides;  // "KEY=VALUE", applied in order
  std::string resolved_yaml;           // filled by validate(): config::to_yaml of the run
  // Who said each override (config::SaidOverride::said): its line in the file for a sweep
  // section's value, {"--grid"} for a --grid flag's. Problems name it; a relative path said in
  // the file is read from the file's folder, as the file's own paths are.
  std::vector<config::Where> said;
};

struct Sweep {
  std::string base_text;  // the config file without its `sweep:` section (lines kept blank)
  std::string origin;     // the config file's name, for messages
  std::string base_name;  // the resolved base config's name (filled by validate())
  // `--set KEY=VALUE` overrides of the base: applied before each run's own overrides, so a run
  // may still override the same key; they are not part of the run names.
  std::vector<std::string> base_overrides;
  std::vector<Run> runs;
};

// Splits "V1,V2,..." at commas outside [], {} and quotes; each part trimmed.
std::vector<std::string> split_values(std::string_view text);

// "KEY=V1,V2,..." -> key and values. Throws Error{config} naming the key for an empty list.
struct GridAxis {
  std::string key;
  std::vector<std::string> values;
};
GridAxis parse_grid_flag(std::string_view flag);
// Every --grid flag, in order; a key given by two flags is Error{usage} naming it (its values
// belong in one list).
std::vector<GridAxis> parse_grid_flags(const std::vector<std::string>& flags);

// The text with its top-level `sweep:` block blanked (line numbers stay the same).
std::string strip_sweep_section(std::string_view text);

// A run's directory name from its overrides: "init_scale=1024,growth_interval=100" (last key
// component, sanitised), or "run-<hash>" when too long; "base" for no overrides.
std::string run_name(const std::vector<std::string>& overrides);

// Why `name` cannot name a run (its folder), or "" when it can: letters, digits, '.', '_', '-'
// and '+', at most 64 characters, not starting with '.' or '-'.
std::string run_name_problem(std::string_view name);

// Expands the sweep from YAML text (with or without a `sweep:` section) and --grid flags.
// Throws Error{config} for a malformed spec (naming the key).
Sweep parse_sweep(std::string_view text, const std::string& origin,
                  const std::vector<std::string>& grid_flags = {});
Sweep load_sweep(const std::filesystem::path& file,
                 const std::vector<std::string>& grid_flags = {});

// The overrides of one run as config::parse_config_said takes them: the sweep's --set
// (base_overrides), then the run's own with who said each.
std::vector<config::SaidOverride> said_overrides(const Sweep& sweep, const Run& run);

// Resolves every run's configuration; any problem throws Error{config} listing each failing
// run with its problems (key, message, hint). Fills resolved_yaml and base_name.
void validate(Sweep& sweep);

struct ExecOptions {
  std::filesystem::path exe;  // the ampctl binary
  std::filesystem::path out;  // OUT: one directory per run
  int jobs = 1;
  bool quiet = false;  // no console lines
};

struct RunResult {
  Run run;
  std::filesystem::path dir;
  std::string status;  // ok | failed | diverged | interrupted | not_started (stopped before it)
  std::string error;   // the last stderr line of a failed run
  int exit_code = 0;
  bool trained = false;    // a process was started for it this time
  nlohmann::json summary;  // summary.json, or null
};

struct ExecResult {
  std::vector<RunResult> results;
  int stop_signal = 0;  // SIGINT / SIGTERM received (forwarded to the children)
};

// Runs every run not yet finished (summary.json absent): `train` for a new one, `resume` for one
// with a checkpoint; at most `jobs` at once.
ExecResult execute(const Sweep& sweep, const ExecOptions& options);

// A row per run (sweep.csv, sweep.json's "runs").
nlohmann::json result_row(const RunResult& r);
// What the sweep answers by `metric` (lower is better unless it names accuracy): the runs grouped
// into settings (the overrides without the seed, or the `runs:` entry's name), the setting with
// the best mean over its seeds tested against the runner-up with Welch's t-test (sweep/stats.h,
// the one the report's table uses), and marked best only when they differ at p < 0.05.
struct Answer {
  std::string line;          // one line: "scaler.policy: no setting differs in final loss (...)"
  std::string best_setting;  // the setting marked best, or "" (none differs, or not tested)
  std::vector<size_t> best_runs;  // its runs' indexes
};
Answer answer(const std::vector<RunResult>& results, const std::string& metric);
// The default metric: best_eval_loss when any run has it, else final_loss.
std::string default_metric(const std::vector<RunResult>& results);

// The names --metric may give: the numeric fields of a sweep.json row (final_loss, best_eval_loss,
// skipped_steps, ...), in the row's order.
const std::vector<std::string>& sweep_metrics();
// Writes OUT/sweep.csv and OUT/sweep.json; returns the table for the console.
std::string write_report(const std::filesystem::path& out, const std::vector<RunResult>& results,
                         const std::string& metric);

}  // namespace ampctl::sweep
