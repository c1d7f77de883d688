// `ampctl report DIR`: one self-contained HTML page (inline CSS and SVG, no scripts, no network)
// for a run directory (metrics.jsonl + summary.json) or a sweep directory (sweep.json + one
// directory per run):
//   (a sweep) table#settings, and table.heat#heat-METRIC (two keys) or svg#line-METRIC: each
//               setting's mean ± sd over its seeds, Welch's test against the first setting
//               (report_settings.h, sweep/stats.h),
//   svg#loss    train loss per step, raw (faint) and smoothed, one polyline each per run,
//   svg#eval    eval loss per evaluation: a polyline and a circle.eval per evaluation,
//   svg#scale   the loss scale on a log2 axis (ticks labelled 2^k), one polyline per run, with
//               every step whose gradients overflowed (found_inf or skipped) as a circle.skip
//               (data-run: the run's index),
//   svg#grad_amax, svg#amax_headroom  (only when some run recorded grad_amax) grad_amax on a log2
//               axis and its headroom at the step's scale, log2(max finite / (grad_amax x scale
//               / micro-batches)), one polyline per run that recorded it (the headroom needs
//               the run's config.yaml: precision, training.grad_accum_steps),
//   svg#lr, svg#throughput  the learning rate and the steps per second per logged step,
//   table#runs  a row per run (tr.run): overrides, status, final loss, best eval, steps, skipped,
//               overflow rate, retries, final / min / max scale, wall time, samples/s;
//   table#summary  (a single run) every key of its summary.json.
// Series longer than kMaxPoints are downsampled (min/max per bucket); skip markers never are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ampctl::report {

inline constexpr std::size_t kMaxPoints = 2000;

// & < > " ' as entities.
std::string html_escape(std::string_view text);
// The same with a line-break opportunity (<wbr>) after each ',', '=' and '/': a long run or
// setting name wraps between its parts in a table cell, never character by character.
std::string wrap_at_commas(std::string_view text);

struct Point {
  std::int64_t step = 0;
  double value = 0.0;
};

// At most about max_points points: the first and last points kept, and each bucket's minimum and
// maximum in step order. Input of max_points or fewer comes back unchanged.
std::vector<Point> downsample(const std::vector<Point>& points,
                              std::size_t max_points = kMaxPoints);

// One line of a scale chart: a run's, or a replayed setting's, scale per step and the steps it
// skipped (each at the scale it skipped with).
struct ScaleTrajectory {
  std::string name;
  std::vector<Point> scale, skips;
  bool reference = false;  // drawn dashed and wider, after (over) the others
};

// `ampctl replay --html`: a self-contained page (the report's CSS, no scripts) with a legend, the
// report's svg#scale chart of the trajectories (trajectory i: polyline.run-i in the report's
// run colour i, its skips as circle.skip with data-run="i"), `note` below it, and a
// table#<table_id> of plain-text cells (escaped here): row r is tr.run with data-run="t",
// t = first_row_trajectory + r, its first cell with trajectory t's colour.
struct ScalePage {
  std::string title, meta, note;
  std::vector<ScaleTrajectory> trajectories;
  std::string table_id = "replay";
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::size_t first_row_trajectory = 0;
};
std::string render_scale_page(const ScalePage& page);

// The page for DIR. Throws Error{input} naming the file for a missing or unreadable
// metrics.jsonl, a line that is not a JSON object, a summary.json / sweep.json that is not JSON,
// or a directory that is neither a run nor a sweep (the hint names `DIR/*` when it holds runs).
std::string render_report(const std::filesystem::path& dir);

// Writes render_report(dir) to `out` (default DIR/report.html) atomically and returns the path
// written (a symlink's target). Throws Error{usage} (exit 2) for an output the command may not
// own or cannot write: a device, FIFO or directory, a run's own file, a missing folder, a full
// file system (checkpoint/output_file.h).
std::filesystem::path write_html_report(const std::filesystem::path& dir,
                                        const std::filesystem::path& out = {});

// Several run directories on one page (a single one: render_report(dir)): their curves drawn
// together and one table, each run named by its directory as given. Error{input} for a
// directory that is not a run (a sweep is reported alone).
std::string render_report(const std::vector<std::filesystem::path>& dirs);
// Writes render_report(dirs) to `out`, which several directories need (Error{usage} without
// it); one directory: as above.
std::filesystem::path write_html_report(const std::vector<std::filesystem::path>& dirs,
                                        const std::filesystem::path& out);

}  // namespace ampctl::report
