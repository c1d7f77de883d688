// `ampctl replay RUN [--grid KEY=V1,V2,...]... [--set KEY=VALUE]... [--json]`: replays a finished
// run's per-step grad_amax under other scaler settings (replay/replay.h), one row per point of
// the grid (the cartesian product of --grid, first flag outermost; --set applies to every point),
// and prints a table, or with --json a list of objects.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/replay/replay.h"
#include "ampctl/sweep/sweep.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ReplayOptions {
  std::string run;
  std::vector<std::string> grid;
  std::vector<std::string> sets;
  bool json = false;
};

// Every point of the grid: the --set overrides, then one value per axis (later ones win).
std::vector<std::vector<std::string>> points(const ReplayOptions& o) {
  std::vector<std::vector<std::string>> out{o.sets};
  for (const std::string& flag : o.grid) {
    const sweep::GridAxis axis = sweep::parse_grid_flag(flag);
    std::vector<std::vector<std::string>> next;
    for (const auto& p : out) {
      for (const std::string& v : axis.values) {
        next.push_back(p);
        next.back().push_back(axis.key + "=" + v);
      }
    }
    out = std::move(next);
  }
  return out;
}

// A YAML value as JSON: a number, bool or null when it reads as one, else its text.
nlohmann::ordered_json value_json(const std::string& text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || j.is_object() || j.is_array()) return text;
  return j;
}

nlohmann::ordered_json number_or_null(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

std::string setting_text(const replay::Outcome& o) {
  if (o.overrides.empty()) return "(as recorded)";
  std::string s;
  for (const auto& [k, v] : o.overrides) {
    if (!s.empty()) s += " ";
    s += (k.rfind("scaler.", 0) == 0 ? k.substr(7) : k) + "=" + v;
  }
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int run_replay(const ReplayOptions& options) {
  const replay::Recording rec = replay::load_recording(options.run);
  // Every point is checked before any output.
  std::vector<replay::Outcome> outcomes;
  for (const auto& p : points(options)) outcomes.push_back(replay::replay(rec, p));
  if (options.json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const replay::Outcome& o : outcomes) {
      nlohmann::ordered_json ov = nlohmann::ordered_json::object();
      for (const auto& [k, v] : o.overrides) ov[k] = value_json(v);
      nlohmann::ordered_json j;
      j["overrides"] = ov;
      j["skipped"] = o.skipped;
      j["first_skip"] = o.first_skip ? nlohmann::ordered_json(*o.first_skip) : nullptr;
      j["retries"] = o.retries;
      j["min_scale"] = o.min_scale;
      j["max_scale"] = o.max_scale;
      j["final_scale"] = o.final_scale;
      j["mean_headroom_log2"] = number_or_null(o.mean_headroom_log2);
      j["min_headroom_log2"] = number_or_null(o.min_headroom_log2);
      j["uncertain_steps"] = o.uncertain_steps;
      list.push_back(j);
    }
    std::printf("%s\n", list.dump(2).c_str());
    return 0;
  }
  std::printf("[replay] %s: %zu steps, %s, %lld micro-batch(es) per rank\n",
              rec.dir.string().c_str(), rec.steps.size(), rec.precision.c_str(),
              static_cast<long long>(rec.accum));
  size_t width = 7;
  for (const auto& o : outcomes) width = std::max(width, setting_text(o).size());
  std::printf("%-*s %7s %10s %7s %10s %10s %10s %9s %9s %9s\n", static_cast<int>(width), "setting",
              "skipped", "first_skip", "retries", "min_scale", "max_scale", "final", "mean_head",
              "min_head", "uncertain");
  for (const auto& o : outcomes) {
    const std::string first = o.first_skip ? std::to_string(*o.first_skip) : "-";
    const std::string mean =
        o.mean_headroom_log2 ? fmt("%.2f", *o.mean_headroom_log2) : std::string("-");
    const std::string min =
        o.min_headroom_log2 ? fmt("%.2f", *o.min_headroom_log2) : std::string("-");
    std::printf("%-*s %7lld %10s %7lld %10.4g %10.4g %10.4g %9s %9s %9lld\n",
                static_cast<int>(width), setting_text(o).c_str(), static_cast<long long>(o.skipped),
                first.c_str(), static_cast<long long>(o.retries), o.min_scale, o.max_scale,
                o.final_scale, mean.c_str(), min.c_str(),
                static_cast<long long>(o.uncertain_steps));
  }
  std::printf(
      "[replay] headroom: log2(max finite / (grad_amax x scale / micro-batches)) at the scale "
      "each step kept; uncertain: steps whose grad_amax is a lower bound (the recorded run "
      "overflowed at a higher scale, or grad_amax_exact was false)\n");
  return 0;
}

}  // namespace

void register_replay(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* sub = app.add_subcommand(
      "replay",
      "replay a run's recorded grad_amax under other scaler settings (skips, retries, scales, "
      "headroom) without retraining; the run needs logging.grad_amax: true");
  sub->add_option("RUN", options->run, "a run directory (config.yaml, metrics.jsonl)")
      ->required()
      ->type_name("RUN");
  sub->add_option("--grid", options->grid,
                  "a grid axis over a scaler.* key: KEY=V1,V2,... (values are YAML; "
                  "repeatable: cartesian product, one row per point)")
      ->type_name("KEY=V1,V2,...")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_set_option(*sub, options->sets)
      ->description(
          "override one scaler.* key of RUN's config.yaml for every row: VALUE is a YAML "
          "scalar (repeatable; later ones win; a --grid value for the key wins)");
  sub->add_flag("--json", options->json,
                "print a JSON list, one object per row: overrides, skipped, first_skip, retries, "
                "min_scale, max_scale, final_scale, mean_headroom_log2, min_headroom_log2, "
                "uncertain_steps");
  commands.push_back({sub, [options] { return run_replay(*options); }});
}

}  // namespace ampctl::app
