// `ampctl sweep --config FILE [--set KEY=VALUE]... [--grid KEY=V1,V2,...]... [--jobs N]
// [--out DIR] [--metric KEY]`: expands the sweep (--grid flags and the file's `sweep:` section),
// applies --set to the base of every run (run names unchanged), validates every run before
// any starts, runs each as its own `ampctl train` / `ampctl resume` process in OUT/<run>, and
// writes OUT/sweep.csv and OUT/sweep.json. Running it again skips finished runs and resumes
// interrupted ones.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/sweep/sweep.h"
#include "commands.h"

namespace ampctl::app {

namespace {

namespace fs = std::filesystem;

struct SweepOptions {
  std::string config;
  std::vector<std::string> sets;
  std::vector<std::string> grid;
  int jobs = 1;
  std::string out;
  std::string metric;
};

int run_sweep(const SweepOptions& options) {
  if (options.jobs < 1) {
    throw Error{ErrorKind::usage, "--jobs " + std::to_string(options.jobs) + ": must be >= 1"};
  }
  sweep::Sweep spec = sweep::load_sweep(options.config, options.grid);
  spec.base_overrides = options.sets;
  sweep::validate(spec);
  // Sizes only train would find too large: refused for every run before any starts.
  check_sweep_runs(spec);
  sweep::ExecOptions exec;
  std::error_code ec;
  exec.exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error{ErrorKind::runtime, "cannot locate the ampctl binary: " + ec.message()};
  exec.out = options.out.empty() ? fs::path("sweeps") / spec.base_name : fs::path(options.out);
  exec.jobs = options.jobs;
  std::printf("[sweep] %zu run(s) in %s, %d at once\n", spec.runs.size(), exec.out.c_str(),
              exec.jobs);
  std::fflush(stdout);
  const sweep::ExecResult result = sweep::execute(spec, exec);
  const std::string metric =
      options.metric.empty() ? sweep::default_metric(result.results) : options.metric;
  std::fputs(sweep::write_report(exec.out, result.results, metric).c_str(), stdout);
  std::printf("[sweep] wrote %s and %s\n", (exec.out / "sweep.csv").c_str(),
              (exec.out / "sweep.json").c_str());
  if (result.stop_signal != 0) return 128 + result.stop_signal;
  for (const auto& r : result.results) {
    if (r.status != "ok") return 1;
  }
  return 0;
}

}  // namespace

void register_sweep(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<SweepOptions>();
  CLI::App* sub = app.add_subcommand(
      "sweep", "run a grid / list / random sweep of training runs over one base configuration");
  sub->add_option("--config", options->config,
                  "the base YAML configuration (its optional sweep: section adds runs)")
      ->required()
      ->type_name("FILE");
  add_set_option(*sub, options->sets)
      ->description(
          "override one key of the base, for every run: VALUE is a YAML scalar or flow value "
          "(repeatable; later ones win; a run's own grid/runs value for the key still wins; "
          "run names are unchanged)");
  sub->add_option("--grid", options->grid,
                  "a grid axis: KEY=V1,V2,... (values are YAML; commas inside [] do not split; "
                  "repeatable: cartesian product)")
      ->type_name("KEY=V1,V2,...")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--jobs", options->jobs, "runs at once (default 1)")->type_name("N");
  sub->add_option("--out", options->out, "the sweep's directory (default sweeps/<name>)")
      ->type_name("DIR");
  sub->add_option("--metric", options->metric,
                  "the summary key that picks the best run (default best_eval_loss when present, "
                  "else final_loss; lower is better unless it names accuracy)")
      ->type_name("KEY");
  commands.push_back({sub, [options] { return run_sweep(*options); }});
}

}  // namespace ampctl::app
