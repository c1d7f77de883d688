// `ampctl replay RUN [--grid KEY=V1,V2,...]... [--set KEY=VALUE]... [--json] [--html FILE]`:
// replays a finished run's per-step grad_amax under other scaler settings (replay/replay.h), one
// row per point of the grid (the cartesian product of --grid, first flag outermost; --set applies
// to every point), and prints a table, or with --json a list of objects; --html also writes the
// trajectories beside the recorded one as a page (sweep/report.h's scale chart).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ampctl/checkpoint/output_file.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/format.h"
#include "ampctl/replay/replay.h"
#include "ampctl/report/report.h"
#include "ampctl/sweep/sweep.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct ReplayOptions {
  std::string run;
  std::vector<std::string> grid;
  std::vector<std::string> sets;
  bool json = false;
  std::string html;
};

// Every point of the grid, each override with who said it: the --set overrides, then one value
// per axis (later ones win). More than replay::kMaxPoints points is Error{usage}, before any is
// expanded; a value listed twice in one --grid is Error{usage} (two rows of one setting).
std::vector<std::vector<config::SaidOverride>> points(const ReplayOptions& o) {
  const std::vector<sweep::GridAxis> axes = sweep::parse_grid_flags(o.grid);
  uint64_t count = 1;
  std::string factors;
  for (const sweep::GridAxis& axis : axes) {
    if (count <= replay::kMaxPoints) count *= axis.values.size();
    if (!factors.empty()) factors += " x ";
    factors += std::to_string(axis.values.size());
  }
  if (count > replay::kMaxPoints) {
    throw Error{ErrorKind::usage,
                "--grid: too many settings (" + factors + "); replay takes at most " +
                    std::to_string(replay::kMaxPoints) + " in one call",
                "replay the grid in parts: split one --grid list over several calls"};
  }
  for (const sweep::GridAxis& axis : axes) {
    std::set<std::string> seen;
    for (const std::string& v : axis.values) {
      if (!seen.insert(v).second) {
        throw Error{ErrorKind::usage,
                    "--grid " + axis.key + ": the value " + v +
                        " is listed twice (two rows of one setting)",
                    "list each value once"};
      }
    }
  }
  std::vector<config::SaidOverride> base;
  for (const std::string& s : o.sets) base.push_back({s, config::Where{}});
  std::vector<std::vector<config::SaidOverride>> out{base};
  out.reserve(static_cast<size_t>(count));
  for (const sweep::GridAxis& axis : axes) {
    std::vector<std::vector<config::SaidOverride>> next;
    next.reserve(out.size() * axis.values.size());
    for (const auto& p : out) {
      for (const std::string& v : axis.values) {
        next.push_back(p);
        next.back().push_back({axis.key + "=" + v, config::Where{"--grid"}});
      }
    }
    out = std::move(next);
  }
  return out;
}

// Two values of one --grid axis spelled apart that resolve to the same scaler settings (1024 and
// 1024.0, 0.5 and 5e-1) give every row twice: Error{usage} naming both. Each value is resolved
// once on RUN's configuration with --set (a value valid only beside another axis's is left to
// the rows, which name its problem).
void refuse_equal_values(const replay::Recording& rec, const ReplayOptions& o) {
  std::vector<config::SaidOverride> base;
  for (const std::string& s : o.sets) base.push_back({s, config::Where{}});
  for (const sweep::GridAxis& axis : sweep::parse_grid_flags(o.grid)) {
    std::vector<std::pair<std::string, config::ScalerConfig>> seen;
    for (const std::string& v : axis.values) {
      std::vector<config::SaidOverride> one = base;
      one.push_back({axis.key + "=" + v, config::Where{"--grid"}});
      config::ScalerConfig scaler;
      try {
        scaler = rec.config_template
                     ? rec.config_template->resolve(one).scaler
                     : config::parse_config_said(rec.config_text, "config.yaml", one).scaler;
      } catch (const Error&) {
        continue;
      }
      for (const auto& [w, other] : seen) {
        if (other == scaler) {
          throw Error{ErrorKind::usage,
                      "--grid " + axis.key + ": " + w + " and " + v +
                          " are the same setting (every row would be there twice)",
                      "list each value once"};
        }
      }
      seen.emplace_back(v, scaler);
    }
  }
}

// A row's name: its own --grid values first, then the --set overrides still in effect (one a
// --grid value of the same key replaced names nothing).
std::vector<std::pair<std::string, std::string>> row_name(
    const std::vector<config::SaidOverride>& point) {
  std::vector<std::pair<std::string, std::string>> grid, set;
  for (size_t i = 0; i < point.size(); ++i) {
    const std::string& t = point[i].text;
    const size_t eq = t.find('=');
    const std::string key = t.substr(0, eq);
    bool replaced = false;
    for (size_t j = i + 1; j < point.size(); ++j) {
      replaced = replaced || point[j].text.substr(0, point[j].text.find('=')) == key;
    }
    if (replaced) continue;
    (point[i].said.origin == "--grid" ? grid : set).emplace_back(key, t.substr(eq + 1));
  }
  grid.insert(grid.end(), set.begin(), set.end());
  return grid;
}

// --html draws at most this many replayed settings beside the recorded run (the report's ten
// colours): past that the lines are no longer told apart, and the page of a 100,000-row grid
// would hold every step of every row. A larger grid draws rows spread evenly over it, first and
// last included; its table lists those, and the console and --json list every row.
constexpr size_t kMaxDrawn = 9;

std::vector<size_t> drawn_rows(size_t rows) {
  std::vector<size_t> out;
  if (rows <= kMaxDrawn) {
    for (size_t i = 0; i < rows; ++i) out.push_back(i);
    return out;
  }
  for (size_t i = 0; i < kMaxDrawn; ++i) out.push_back(i * (rows - 1) / (kMaxDrawn - 1));
  return out;
}

// The page of --html: the recorded trajectory (trajectory 0) and one per drawn row beside it,
// then the drawn rows of the table.
std::string html_page(const replay::Recording& rec, const std::vector<replay::Outcome>& outcomes,
                      const std::vector<size_t>& drawn) {
  report::ScalePage page;
  page.title = "ampctl replay: " + rec.dir.filename().string();
  if (rec.dir.filename().empty()) page.title = "ampctl replay: " + rec.dir.string();
  page.meta = "Replayed from " + rec.dir.string() + ": " + std::to_string(rec.steps.size()) +
              " steps, " + rec.precision + ", " + std::to_string(rec.accum) +
              " micro-batch(es) per rank. Nothing was trained: each setting's scales and skips "
              "are predicted from the recorded grad_amax.";
  if (drawn.size() < outcomes.size()) {
    page.meta += " " + std::to_string(outcomes.size()) +
                 " settings were replayed; the chart and "
                 "the table show " +
                 std::to_string(drawn.size()) +
                 " of them, spread evenly over the grid (the console and --json list every one).";
  }
  report::ScaleTrajectory recorded;
  recorded.name = "recorded";
  recorded.reference = true;
  for (const replay::RecordedStep& s : rec.steps) {
    recorded.scale.push_back({s.step, s.scale});
    if (s.found_inf) recorded.skips.push_back({s.step, s.scale});
  }
  page.trajectories.push_back(std::move(recorded));
  for (size_t i : drawn) {
    const replay::Outcome& o = outcomes[i];
    report::ScaleTrajectory t;
    t.name = replay::setting_text(o);
    for (const replay::ReplayedStep& s : o.steps) {
      t.scale.push_back({s.step, s.scale});
      if (s.skipped) t.skips.push_back({s.step, s.scale});
    }
    page.trajectories.push_back(std::move(t));
  }
  page.note =
      "The loss scale each step kept (the last attempt's), on a log2 axis: the recorded run's "
      "(dashed) and each replayed setting's; red dots mark skipped steps. Headroom: log2(max "
      "finite / "
      "(grad_amax x scale / micro-batches)) at the scale each step kept; uncertain: steps whose "
      "grad_amax is a lower bound (the recorded run overflowed at a higher scale, or "
      "grad_amax_exact was false).";
  page.columns = {"setting",
                  "skipped",
                  "first skip",
                  "retries",
                  "min scale",
                  "max scale",
                  "final scale",
                  "mean headroom (log2)",
                  "min headroom (log2)",
                  "uncertain steps"};
  for (size_t i : drawn) {
    const replay::Outcome& o = outcomes[i];
    page.rows.push_back({replay::setting_text(o), std::to_string(o.skipped),
                         o.first_skip ? std::to_string(*o.first_skip) : "-",
                         std::to_string(o.retries), fmt("%.10g", o.min_scale),
                         fmt("%.10g", o.max_scale), fmt("%.10g", o.final_scale),
                         o.mean_headroom_log2 ? fmt("%.3f", *o.mean_headroom_log2) : "-",
                         o.min_headroom_log2 ? fmt("%.3f", *o.min_headroom_log2) : "-",
                         std::to_string(o.uncertain_steps)});
  }
  page.first_row_trajectory = 1;
  return report::render_scale_page(page);
}

int run_replay(const ReplayOptions& options) {
  const replay::Recording rec = replay::load_recording(options.run);
  // The output is checked before anything is computed or printed: a command writes only paths
  // it owns (checkpoint/output_file.h), never the run's own files.
  std::filesystem::path html_file;
  if (!options.html.empty()) {
    html_file = checkpoint::checked_output_path(
        options.html, {rec.dir / "metrics.jsonl", rec.dir / "config.yaml"}, "--html");
  }
  // Every point is checked before any output; only the drawn rows keep their steps.
  const std::vector<std::vector<config::SaidOverride>> grid = points(options);
  refuse_equal_values(rec, options);
  const std::vector<size_t> drawn =
      html_file.empty() ? std::vector<size_t>{} : drawn_rows(grid.size());
  std::vector<replay::Outcome> outcomes;
  outcomes.reserve(grid.size());
  size_t next_drawn = 0;
  for (size_t i = 0; i < grid.size(); ++i) {
    const bool keep = next_drawn < drawn.size() && drawn[next_drawn] == i;
    if (keep) ++next_drawn;
    outcomes.push_back(replay::replay(rec, grid[i], keep));
    outcomes.back().overrides = row_name(grid[i]);
  }
  if (!html_file.empty()) {
    checkpoint::write_output_file(html_file, html_page(rec, outcomes, drawn), "--html");
  }
  if (options.json) {
    std::printf("%s\n", replay::to_json(outcomes).dump(2).c_str());
    if (!html_file.empty()) std::fprintf(stderr, "[replay] wrote %s\n", html_file.c_str());
    return 0;
  }
  std::fputs(replay::table_intro(rec).c_str(), stdout);
  std::fputs(replay::table_text(outcomes).c_str(), stdout);
  std::fputs(replay::kTableNote, stdout);
  if (!html_file.empty()) std::printf("[replay] wrote %s\n", html_file.c_str());
  return 0;
}

}  // namespace

void register_replay(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* sub = app.add_subcommand(
      "replay",
      "replay a run's recorded grad_amax under other scaler settings (skips, retries, scales, "
      "headroom) without retraining; the run needs logging.grad_amax: true");
  // No type name: CLI11 would print the positional's name twice ("RUN RUN REQUIRED").
  sub->add_option("RUN", options->run, "a run directory (config.yaml, metrics.jsonl)")
      ->required()
      ->type_name("");
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
  sub->add_option("--html", options->html,
                  "also write a self-contained HTML page: the replayed scale trajectories beside "
                  "the recorded one (log2 axis, skipped steps marked) and the table")
      ->type_name("FILE.html");
  commands.push_back({sub, [options] { return run_replay(*options); }});
}

}  // namespace ampctl::app
