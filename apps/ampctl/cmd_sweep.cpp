// `ampctl sweep --config FILE [--set KEY=VALUE]... [--grid KEY=V1,V2,...]... [--jobs N]
// [--out DIR] [--metric KEY] [--replay-from RUN]`: expands the sweep (--grid flags and the file's
// `sweep:` section), applies --set to the base of every run (run names unchanged), validates every
// run before any starts, runs each as its own `ampctl train` / `ampctl resume` process in
// OUT/<run>, and writes OUT/sweep.csv and OUT/sweep.json, then the verdict (sweep.h: Answer).
// Running it again skips finished runs and resumes interrupted ones. With --replay-from RUN it
// trains nothing: the settings (scaler.* keys only; seeds are one row) are replayed from RUN's
// recorded grad_amax and `ampctl replay`'s table is printed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/config/problems.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/replay/replay.h"
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
  std::string replay_from;
};

// `--replay-from RUN`: the sweep's settings replayed from RUN's recorded grad_amax
// (replay/replay.h) instead of trained: nothing is created or run. Every run of the sweep may
// differ from RUN in scaler.* keys only (its overrides by name, its resolved configuration key
// by key), and in its seed: replay is seed-free (it predicts from RUN's one recording), so a
// sweep's seeds (`seeds:`, `--set seed=`) give one row per setting. The table is `ampctl replay`'s.
int run_replay_preview(const SweepOptions& options) {
  const replay::Recording rec = replay::load_recording(options.replay_from);
  const fs::path config_file =
      options.config.empty() ? rec.dir / "config.yaml" : fs::path(options.config);
  sweep::Sweep spec = sweep::load_sweep(config_file, options.grid);
  spec.base_overrides = options.sets;
  const auto key_of = [](const std::string& o) { return o.substr(0, o.find('=')); };
  auto check_key = [&](const std::string& o, const std::string& where) {
    const std::string key = key_of(o);
    if (key.rfind("scaler.", 0) != 0 && key != "seed") {
      throw Error{ErrorKind::config,
                  where + ": " + key +
                      ": sweep --replay-from previews scaler.* keys only (any other key changes "
                      "the gradients, which RUN's recording cannot predict)",
                  "run the sweep without --replay-from to train it"};
    }
  };
  for (const std::string& o : spec.base_overrides) check_key(o, "--set");
  for (const sweep::Run& r : spec.runs) {
    for (const std::string& o : r.overrides) check_key(o, "run '" + r.name + "'");
  }
  sweep::validate(spec);
  // One row per setting: a run whose overrides without its seed repeat an earlier run's is
  // that setting again.
  std::vector<const sweep::Run*> settings;
  std::set<std::vector<std::string>> seen;
  bool seeds = false;
  for (const std::string& o : spec.base_overrides) seeds = seeds || key_of(o) == "seed";
  for (const sweep::Run& r : spec.runs) {
    std::vector<std::string> unseeded;
    for (const std::string& o : r.overrides) {
      if (key_of(o) == "seed") {
        seeds = true;
      } else {
        unseeded.push_back(o);
      }
    }
    if (seen.insert(unseeded).second) settings.push_back(&r);
  }
  std::vector<replay::Outcome> outcomes;
  int64_t max_steps = 0;
  for (const sweep::Run* r : settings) {
    const config::RunConfig cfg = config::parse_config(r->resolved_yaml, config_file.string());
    if (const std::string key = replay::gradient_key_differing(rec, cfg); !key.empty()) {
      throw Error{ErrorKind::config,
                  config_file.string() + ": " + key + " differs from " +
                      (rec.dir / "config.yaml").string() +
                      ": sweep --replay-from previews the scaler.* keys of RUN's own training "
                      "(model, data, optimizer, precision the same)",
                  "record RUN from this sweep's base configuration, or leave --config out to "
                  "use RUN's"};
    }
    max_steps = std::max(max_steps, cfg.training.max_steps);
    // The setting's name: its own overrides first (without the seed), then --set's still in
    // effect, then the scaler keys in which the base differs from RUN, as `ampctl replay` names
    // a row: its --grid values, then --set. A named run is named by its name.
    std::vector<std::pair<std::string, std::string>> overrides;
    std::set<std::string> overridden;
    for (const std::string& o : r->overrides) {
      if (key_of(o) == "seed") continue;
      overrides.emplace_back(key_of(o), o.substr(o.find('=') + 1));
      overridden.insert(key_of(o));
    }
    for (const std::string& o : spec.base_overrides) {
      if (key_of(o) == "seed" || overridden.count(key_of(o))) continue;
      overrides.emplace_back(key_of(o), o.substr(o.find('=') + 1));
      overridden.insert(key_of(o));
    }
    const nlohmann::json base_scaler = config::to_json(cfg).at("scaler");
    const nlohmann::json run_scaler = config::to_json(rec.config).at("scaler");
    for (const auto& [k, v] : base_scaler.items()) {
      if (overridden.count("scaler." + k) || (run_scaler.contains(k) && run_scaler.at(k) == v)) {
        continue;
      }
      overrides.emplace_back("scaler." + k, v.is_string() ? v.get<std::string>() : v.dump());
    }
    replay::Outcome o = replay::replay(rec, cfg, std::move(overrides), false);
    o.label = r->setting;
    outcomes.push_back(std::move(o));
  }
  std::printf(
      "[sweep] replay preview of %zu setting(s) from %s: nothing trained, no run directory "
      "created\n",
      outcomes.size(), rec.dir.c_str());
  if (seeds) {
    std::printf(
        "[sweep] seeds: replay is seed-free (each row is predicted from RUN's one recording), "
        "so the %zu run(s) are %zu row(s), one per setting\n",
        spec.runs.size(), outcomes.size());
  }
  std::fputs(replay::table_intro(rec).c_str(), stdout);
  std::fputs(replay::table_text(outcomes).c_str(), stdout);
  std::fputs(replay::kTableNote, stdout);
  std::printf(
      "[sweep] a replay preview: predictions over RUN's %zu recorded steps%s; run the "
      "sweep without --replay-from to train it\n",
      rec.steps.size(),
      static_cast<size_t>(max_steps) > rec.steps.size()
          ? (" (the sweep's runs would train " + std::to_string(max_steps) + ")").c_str()
          : "");
  return 0;
}

// The files each run reads before its first step (data, init.from): a missing one would fail
// its run when it starts, maybe hours into the sweep; every run missing one is listed now, before
// anything runs. Only their existence is checked: reading them is the run's work. A run that
// finished in an earlier call (OUT/<run>/summary.json) is not run again and reads nothing.
void check_sweep_inputs(const sweep::Sweep& spec, const fs::path& out) {
  std::string message;
  bool fashion_mnist = false;  // a missing data.*.dir: the package's folder, most likely
  for (const sweep::Run& run : spec.runs) {
    std::error_code ec;
    if (fs::exists(out / run.name / "summary.json", ec)) continue;
    const config::RunConfig cfg = config::parse_config(run.resolved_yaml, spec.origin);
    std::vector<std::pair<std::string, std::string>> files;  // key, absolute path
    if (!cfg.init.from.empty()) files.emplace_back("init.from", cfg.init.from);
    const auto source = [&](const config::DataSource& d, const std::string& role) {
      for (const auto& [key, path] : {std::pair<const char*, const std::string&>{"path", d.path},
                                      {"images", d.images},
                                      {"labels", d.labels},
                                      {"dir", d.dir}}) {
        if (!path.empty()) files.emplace_back("data." + role + "." + key, path);
      }
    };
    source(cfg.data.train, "train");
    if (cfg.data.eval) {
      source(*cfg.data.eval,
             cfg.data.eval_name.empty() ? std::string("eval") : "eval." + cfg.data.eval_name);
    }
    for (const config::NamedEvalSource& e : cfg.data.eval_sets) source(e.source, "eval." + e.name);
    for (const auto& [key, path] : files) {
      if (fs::exists(path, ec) || ec) continue;  // unreadable: the run says why
      message += "run " + run.name + ": " + key + " " + path + ": no such file or directory\n";
      fashion_mnist = fashion_mnist || key.ends_with(".dir");
    }
  }
  if (message.empty()) return;
  message.pop_back();
  std::string hint =
      "nothing was run; relative paths in the file are read from its folder, those of --set and "
      "--grid from the current directory";
  if (fashion_mnist)
    hint += "; fashion_mnist's dir: install the Debian package dataset-fashion-mnist";
  throw Error{ErrorKind::input, message, hint};
}

int run_sweep(const SweepOptions& options) {
  if (!options.replay_from.empty()) return run_replay_preview(options);
  if (options.config.empty()) {
    throw Error{ErrorKind::usage, "--config is required (without --replay-from)",
                "run 'ampctl sweep --help' for usage"};
  }
  if (options.jobs < 1) {
    throw Error{ErrorKind::usage, "--jobs " + std::to_string(options.jobs) + ": must be >= 1"};
  }
  if (!options.metric.empty()) {
    // A misspelt metric would run the whole sweep for a verdict on nothing.
    const std::vector<std::string>& metrics = sweep::sweep_metrics();
    if (std::find(metrics.begin(), metrics.end(), options.metric) == metrics.end()) {
      const std::string near = config::closest_match(options.metric, metrics);
      std::string list;
      for (const std::string& m : metrics) list += (list.empty() ? "" : ", ") + m;
      throw Error{ErrorKind::usage,
                  "--metric " + options.metric + ": not a metric of a sweep's runs",
                  (near.empty() ? std::string() : "did you mean '" + near + "'? ") +
                      "the metrics are " + list};
    }
  }
  sweep::Sweep spec = sweep::load_sweep(options.config, options.grid);
  spec.base_overrides = options.sets;
  // Every run's configuration, and what only train would find (sizes too large, a parameter
  // name): refused for every run before any starts.
  check_sweep_runs(spec);
  sweep::ExecOptions exec;
  exec.out = options.out.empty() ? fs::path("sweeps") / spec.base_name : fs::path(options.out);
  check_sweep_inputs(spec, exec.out);
  std::error_code ec;
  exec.exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error{ErrorKind::runtime, "cannot locate the ampctl binary: " + ec.message()};
  exec.jobs = options.jobs;
  std::printf("[sweep] %zu run(s) in %s, %d at once\n", spec.runs.size(), exec.out.c_str(),
              exec.jobs);
  std::fflush(stdout);
  const sweep::ExecResult result = sweep::execute(spec, exec);
  const std::string metric =
      options.metric.empty() ? sweep::default_metric(result.results) : options.metric;
  // The table, then the verdict line (the sweep's answer: write_report's last line).
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
                  "the base YAML configuration (its optional sweep: section adds runs); with "
                  "--replay-from, default RUN/config.yaml")
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
  CLI::Option* jobs =
      sub->add_option("--jobs", options->jobs, "runs at once (default 1)")->type_name("N");
  CLI::Option* out =
      sub->add_option("--out", options->out, "the sweep's directory (default sweeps/<name>)")
          ->type_name("DIR");
  CLI::Option* metric =
      sub->add_option("--metric", options->metric,
                      "the summary key the verdict compares: each setting's mean over its "
                      "seeds, the best marked only when Welch's test says it differs from the "
                      "runner-up (default best_eval_loss when present, else final_loss; lower is "
                      "better unless it names accuracy)")
          ->type_name("KEY");
  sub->add_option("--replay-from", options->replay_from,
                  "preview the sweep without training: replay RUN's recorded grad_amax "
                  "(logging.grad_amax: true) under each run's settings and print ampctl "
                  "replay's table, one row per setting (replay is seed-free: seeds: and --set "
                  "seed= are accepted); every run may change scaler.* keys only (others exit "
                  "2); nothing is created")
      ->type_name("RUN")
      ->excludes(jobs)
      ->excludes(out)
      ->excludes(metric);
  commands.push_back({sub, [options] { return run_sweep(*options); }});
}

}  // namespace ampctl::app
