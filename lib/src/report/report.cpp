// `ampctl report`: reads a run or a sweep directory and renders one self-contained HTML page
// (see report.h).
#include "ampctl/report/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include "ampctl/checkpoint/output_file.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "ampctl/core/format.h"
#include "ampctl/core/input_file.h"
#include "ampctl/run/metrics_line.h"
#include "ampctl/run/numerics.h"
#include "ampctl/run/summary.h"
#include "ampctl/sweep/stats.h"
#include "ampctl/sweep/sweep.h"
#include "report_settings.h"

namespace ampctl::report {

using sweep::result_row;
using sweep::run_name;
using sweep::RunResult;
using sweep::short_number;
using sweep::sweep_verdict;

namespace {

namespace fs = std::filesystem;
namespace files = ampctl::run;  // the run directory's formats
using nlohmann::json;

// Run colours (no red: red marks skipped steps).
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};
constexpr const char* kSkipColour = "#e00000";

// Plot geometry (SVG user units).
constexpr double kWidth = 960, kHeight = 360;
constexpr double kLeft = 76, kRight = 16, kTop = 16, kBottom = 46;

struct RunData {
  std::string name;
  json row;  // result_row()-shaped
  bool best = false;
  std::vector<Point> loss, eval, scale, skips;
  std::vector<Point> loss_smooth;          // the training loss smoothed (smooth_series)
  std::vector<Point> lr;                   // the learning rate of each logged step
  std::vector<Point> throughput;           // steps per second between consecutive logged steps
  std::vector<Point> time;                 // time_s of the logged train lines, while reading
  std::vector<Point> underflow, headroom;  // numerics lines (logging.numerics_every)
  // grad_amax on the train lines (logging.grad_amax), and its headroom at the step's scale,
  // log2(max finite / (grad_amax x scale / micro-batches)) (amax_headroom() fills it).
  std::vector<Point> amax, amax_headroom;
  std::vector<Point> amax_at_scale;  // grad_amax x scale, while reading
  bool reference = false;            // drawn dashed, over the others (ScaleTrajectory::reference)
  fs::path dir;                      // the run directory (empty: a replayed trajectory)
};

std::string coord(double v) {
  return fmt("%.1f", v);
}

// Every number a person reads on the page: sweep/stats.h's short format (at most 5 significant
// digits), the one the sweep's console prints too.
std::string number_text(double v) {
  return short_number(v);
}

// A tick value: the tick step's rounding error dropped first (0.30000000000000004 -> 0.3).
std::string tick_text(double v) {
  return short_number(std::strtod(fmt("%.4g", v).c_str(), nullptr));
}

std::string color(size_t i) {
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The file's text, read to its end (input_file.h: a regular file, at most kMaxRecordBytes);
// Error{input} naming it and `what` when absent, not a regular file or too large.
std::string read_text(const fs::path& file, const char* what) {
  try {
    return read_regular_file(file, kMaxRecordBytes);
  } catch (const Error& e) {
    throw Error{e.kind(), std::string(e.what()) + " (" + what + ")", e.hint()};
  }
}

json read_json_file(const fs::path& file, const char* what) {
  const std::string text = read_text(file, what);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw Error{ErrorKind::input, file.string() + ": not a JSON object (" + what + ")"};
  }
  return j;
}

// TensorBoard's smoothing (an exponential moving average with weight 0.9, debiased as its
// scalars dashboard does), so the line starts at the first value rather than near zero.
std::vector<Point> smooth_series(const std::vector<Point>& points) {
  constexpr double kWeight = 0.9;
  std::vector<Point> out;
  out.reserve(points.size());
  double last = 0.0, debias = 1.0;
  for (const Point& p : points) {
    if (!std::isfinite(p.value)) continue;
    last = last * kWeight + (1.0 - kWeight) * p.value;
    debias *= kWeight;
    out.push_back({p.step, last / (1.0 - debias)});
  }
  return out;
}

void read_metrics(const fs::path& file, RunData& run) {
  std::vector<std::string> lines;
  try {
    LineReader in(file, kMaxMetricsLineBytes);
    for (std::string line; in.next(line);) lines.push_back(std::move(line));
  } catch (const Error& e) {
    throw Error{e.kind(), std::string(e.what()) + " (" + files::kMetricsFile + ")", e.hint()};
  } catch (const std::bad_alloc&) {
    throw Error{ErrorKind::runtime,
                "out of memory: cannot hold the " + std::to_string(lines.size()) + " lines of " +
                    file.string() + " read so far",
                "free memory or raise the process's memory limit (ulimit -v)"};
  }
  size_t last = lines.size();  // the last non-blank line
  while (last > 0 && lines[last - 1].find_first_not_of(" \t\r") == std::string::npos) --last;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::optional<files::MetricsRecord> r = files::read_metrics_line(line);
    if (!r) {
      // The last line of a run killed while writing it is torn; resume drops it too. Anywhere
      // else a line that does not parse is damage.
      if (i + 1 == last) break;
      throw Error{ErrorKind::input, file.string() + ":" + std::to_string(i + 1) +
                                        ": not a JSON object (" + files::kMetricsFile + ")"};
    }
    if (!r->step) continue;
    const std::int64_t s = *r->step;
    if (r->kind == files::numerics_key::kKind) {
      const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (const std::optional<files::NumericsRecord> n = files::read_numerics_line(j)) {
        run.underflow.push_back({s, n->underflow_frac});
        if (n->min_headroom_log2) run.headroom.push_back({s, *n->min_headroom_log2});
      }
      continue;
    }
    if (r->is_eval()) {
      if (r->loss) run.eval.push_back({s, *r->loss});
      continue;
    }
    if (!r->is_train()) continue;
    if (r->loss) run.loss.push_back({s, *r->loss});
    if (r->lr) run.lr.push_back({s, *r->lr});
    if (r->time_s) run.time.push_back({s, *r->time_s});
    if (r->scale && *r->scale > 0) {
      run.scale.push_back({s, *r->scale});
      if (r->overflowed) run.skips.push_back({s, *r->scale});
    }
    if (r->grad_amax) {
      run.amax.push_back({s, *r->grad_amax});
      if (r->scale && *r->grad_amax > 0)
        run.amax_at_scale.push_back({s, *r->grad_amax * *r->scale});
    }
  }
  run.loss_smooth = smooth_series(run.loss);
  for (size_t i = 1; i < run.time.size(); ++i) {
    const double dt = run.time[i].value - run.time[i - 1].value;
    const auto ds = static_cast<double>(run.time[i].step - run.time[i - 1].step);
    if (dt > 0 && ds > 0) run.throughput.push_back({run.time[i].step, ds / dt});
  }
}

// The grad_amax headroom needs the half type's range and the micro-batches per rank (the
// backward's seed is scale / micro-batches): RUN_DIR/config.yaml's precision and
// training.grad_accum_steps. Without config.yaml, or with training.global_batch (the
// micro-batches depend on the rank count, which the run directory does not record), the run has
// no headroom series.
void amax_headroom(const fs::path& run_dir, RunData& run) {
  const fs::path config_file = run_dir / "config.yaml";
  if (run.amax_at_scale.empty() || !path_exists(config_file)) return;
  const config::RunConfig cfg = config::load_config(config_file);
  if (cfg.training.global_batch != 0) return;
  const double max_finite = ampctl::max_finite(config::half_dtype(cfg.precision));
  const double accum = static_cast<double>(std::max<int64_t>(1, cfg.training.grad_accum_steps));
  for (const Point& p : run.amax_at_scale) {
    run.amax_headroom.push_back({p.step, headroom_log2(max_finite, p.value / accum)});
  }
}

// "Nice" ticks (1, 2, 5 x 10^k) covering [lo, hi]; widens lo / hi to the outer ticks.
std::vector<double> nice_ticks(double& lo, double& hi, int target = 6) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  lo = std::floor(lo / step + 1e-9) * step;
  hi = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (int i = 0; lo + i * step <= hi + step * 1e-6 && i < 100; ++i) {
    double t = lo + i * step;
    if (std::fabs(t) < step * 1e-9) t = 0;
    ticks.push_back(t);
  }
  return ticks;
}

struct Frame {
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  bool log2_y = false;
  double x(double step) const {
    return kLeft + (step - x_lo) / (x_hi - x_lo) * (kWidth - kLeft - kRight);
  }
  double y(double v) const {
    const double t = log2_y ? std::log2(v) : v;
    return kTop + (y_hi - t) / (y_hi - y_lo) * (kHeight - kTop - kBottom);
  }
};

std::string svg_open(const char* id, const std::string& label) {
  return "<svg id=\"" + std::string(id) + "\" class=\"plot\" viewBox=\"0 0 " + number_text(kWidth) +
         " " + number_text(kHeight) + "\" width=\"" + number_text(kWidth) + "\" height=\"" +
         number_text(kHeight) + "\" role=\"img\" aria-label=\"" + html_escape(label) +
         "\">\n<title>" + html_escape(label) + "</title>\n";
}

// Grid lines, axes, tick labels and axis titles.
std::string svg_axes(const Frame& f, const std::vector<double>& x_ticks,
                     const std::vector<std::pair<double, std::string>>& y_ticks,
                     const std::string& y_title) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop, y1 = kHeight - kBottom;
  std::string s = "<g class=\"grid\">\n";
  for (const auto& [v, label] : y_ticks) {
    const std::string y = coord(f.log2_y ? f.y(std::exp2(v)) : f.y(v));
    s += "<line x1=\"" + coord(x0) + "\" y1=\"" + y + "\" x2=\"" + coord(x1) + "\" y2=\"" + y +
         "\"/>\n";
  }
  for (double v : x_ticks) {
    const std::string x = coord(f.x(v));
    s += "<line x1=\"" + x + "\" y1=\"" + coord(y0) + "\" x2=\"" + x + "\" y2=\"" + coord(y1) +
         "\"/>\n";
  }
  s += "</g>\n<g class=\"axes\">\n<line x1=\"" + coord(x0) + "\" y1=\"" + coord(y1) + "\" x2=\"" +
       coord(x1) + "\" y2=\"" + coord(y1) + "\"/>\n<line x1=\"" + coord(x0) + "\" y1=\"" +
       coord(y0) + "\" x2=\"" + coord(x0) + "\" y2=\"" + coord(y1) + "\"/>\n</g>\n";
  s += "<g class=\"ticks y-ticks\" text-anchor=\"end\">\n";
  for (const auto& [v, label] : y_ticks) {
    const double y = f.log2_y ? f.y(std::exp2(v)) : f.y(v);
    s += "<text x=\"" + coord(x0 - 6) + "\" y=\"" + coord(y + 4) + "\">" + html_escape(label) +
         "</text>\n";
  }
  s += "</g>\n<g class=\"ticks x-ticks\" text-anchor=\"middle\">\n";
  for (double v : x_ticks) {
    s += "<text x=\"" + coord(f.x(v)) + "\" y=\"" + coord(y1 + 18) + "\">" + tick_text(v) +
         "</text>\n";
  }
  s += "</g>\n<text class=\"axis-title\" x=\"" + coord((x0 + x1) / 2) + "\" y=\"" +
       coord(kHeight - 6) + "\" text-anchor=\"middle\">step</text>\n";
  s += "<text class=\"axis-title\" x=\"14\" y=\"" + coord((y0 + y1) / 2) +
       "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " + coord((y0 + y1) / 2) + ")\">" +
       html_escape(y_title) + "</text>\n";
  return s;
}

// A reference line (replay's recorded trajectory) is dashed and wider, so the lines drawn over it
// (a replayed setting equal to it) leave it visible.
std::string polyline(const Frame& f, const std::vector<Point>& points, size_t index,
                     const std::string& name, const char* what, bool reference = false) {
  std::string pts;
  for (const Point& p : downsample(points)) {
    if (!pts.empty()) pts += ' ';
    pts += coord(f.x(static_cast<double>(p.step))) + "," + coord(f.y(p.value));
  }
  return "<polyline class=\"run run-" + std::to_string(index) + "\" fill=\"none\" stroke=\"" +
         color(index) + "\" stroke-width=\"" + (reference ? "3\" stroke-dasharray=\"6 4" : "1.5") +
         "\" points=\"" + pts + "\"><title>" + html_escape(name) + ": " + what +
         "</title></polyline>\n";
}

void step_range(const std::vector<RunData>& runs, double& lo, double& hi, bool& any) {
  for (const RunData& r : runs) {
    for (const auto* series : {&r.loss, &r.eval, &r.scale}) {
      for (const Point& p : *series) {
        const double s = static_cast<double>(p.step);
        lo = any ? std::min(lo, s) : s;
        hi = any ? std::max(hi, s) : s;
        any = true;
      }
    }
  }
}

std::string no_data(const char* what) {
  return "<text class=\"no-data\" x=\"" + coord(kWidth / 2) + "\" y=\"" + coord(kHeight / 2) +
         "\" text-anchor=\"middle\">no " + what + " logged</text>\n";
}

std::string loss_plot(const std::vector<RunData>& runs, Frame f) {
  bool any_step = false;
  step_range(runs, f.x_lo, f.x_hi, any_step);
  bool any = false;
  for (const RunData& r : runs) {
    for (const auto* series : {&r.loss, &r.eval}) {
      for (const Point& p : *series) {
        f.y_lo = any ? std::min(f.y_lo, p.value) : p.value;
        f.y_hi = any ? std::max(f.y_hi, p.value) : p.value;
        any = true;
      }
    }
  }
  if (!any_step) f.x_lo = 0, f.x_hi = 1;
  if (!any) f.y_lo = 0, f.y_hi = 1;
  const std::vector<double> x_ticks = nice_ticks(f.x_lo, f.x_hi);
  std::vector<std::pair<double, std::string>> y_ticks;
  for (double v : nice_ticks(f.y_lo, f.y_hi)) y_ticks.emplace_back(v, tick_text(v));
  std::string s = svg_open("loss", "training loss per step: raw (faint) and smoothed");
  s += svg_axes(f, x_ticks, y_ticks, "training loss");
  if (!any) s += no_data("losses");
  s += "<g class=\"series raw\" opacity=\"0.3\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].loss.empty()) s += polyline(f, runs[i].loss, i, runs[i].name, "train loss");
  }
  s += "</g>\n<g class=\"series smooth\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].loss_smooth.empty()) {
      s += polyline(f, runs[i].loss_smooth, i, runs[i].name, "train loss, smoothed");
    }
  }
  return s + "</g>\n</svg>\n";
}

// The evaluation loss of every run: a line through its evaluations, each a dot.
std::string eval_plot(const std::vector<RunData>& runs, Frame f) {
  bool any_step = false;
  step_range(runs, f.x_lo, f.x_hi, any_step);
  bool any = false;
  for (const RunData& r : runs) {
    for (const Point& p : r.eval) {
      f.y_lo = any ? std::min(f.y_lo, p.value) : p.value;
      f.y_hi = any ? std::max(f.y_hi, p.value) : p.value;
      any = true;
    }
  }
  if (!any_step) f.x_lo = 0, f.x_hi = 1;
  if (!any) f.y_lo = 0, f.y_hi = 1;
  const std::vector<double> x_ticks = nice_ticks(f.x_lo, f.x_hi);
  std::vector<std::pair<double, std::string>> y_ticks;
  for (double v : nice_ticks(f.y_lo, f.y_hi)) y_ticks.emplace_back(v, tick_text(v));
  std::string s = svg_open("eval", "evaluation loss per evaluation");
  s += svg_axes(f, x_ticks, y_ticks, "evaluation loss");
  if (!any) s += no_data("evaluations");
  s += "<g class=\"series\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].eval.size() > 1) s += polyline(f, runs[i].eval, i, runs[i].name, "eval loss");
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    for (const Point& p : downsample(runs[i].eval)) {
      s += "<circle class=\"eval run-" + std::to_string(i) + "\" cx=\"" +
           coord(f.x(static_cast<double>(p.step))) + "\" cy=\"" + coord(f.y(p.value)) +
           "\" r=\"3.5\" fill=\"" + color(i) + "\" stroke=\"#000\" stroke-width=\"0.6\"><title>" +
           html_escape(runs[i].name) + ": eval loss " + number_text(p.value) + " at step " +
           std::to_string(p.step) + "</title></circle>\n";
    }
  }
  return s + "</g>\n</svg>\n";
}

// A plot on a log2 axis (ticks labelled 2^k) of one series of every run (the loss scale,
// grad_amax), with `skips` (when given) as red circles, every one, never downsampled.
std::string log2_plot(const std::vector<RunData>& runs, Frame f, const char* id,
                      const std::string& label, const char* y_title,
                      std::vector<Point> RunData::*series, std::vector<Point> RunData::*skips,
                      const char* what, const char* missing) {
  bool any_step = false;
  step_range(runs, f.x_lo, f.x_hi, any_step);
  if (!any_step) f.x_lo = 0, f.x_hi = 1;
  bool any = false;
  double lo = 1, hi = 1;
  for (const RunData& r : runs) {
    for (const Point& p : r.*series) {
      if (!(p.value > 0)) continue;
      lo = any ? std::min(lo, p.value) : p.value;
      hi = any ? std::max(hi, p.value) : p.value;
      any = true;
    }
  }
  int k_lo = any ? static_cast<int>(std::floor(std::log2(lo))) : 15;
  int k_hi = any ? static_cast<int>(std::ceil(std::log2(hi))) : 17;
  if (k_hi - k_lo < 2) --k_lo, ++k_hi;  // a flat trajectory sits mid-plot
  const int stride = std::max(1, (k_hi - k_lo + 11) / 12);
  k_lo = static_cast<int>(std::floor(static_cast<double>(k_lo) / stride)) * stride;
  k_hi = static_cast<int>(std::ceil(static_cast<double>(k_hi) / stride)) * stride;
  f.log2_y = true;
  f.y_lo = k_lo;
  f.y_hi = k_hi;
  const std::vector<double> x_ticks = nice_ticks(f.x_lo, f.x_hi);
  std::vector<std::pair<double, std::string>> y_ticks;
  for (int k = k_lo; k <= k_hi; k += stride) y_ticks.emplace_back(k, "2^" + std::to_string(k));
  std::string s = svg_open(id, label);
  s += svg_axes(f, x_ticks, y_ticks, y_title);
  if (!any) s += no_data(missing);
  s += "<g class=\"series\">\n";
  for (const bool reference : {false, true}) {  // reference lines last: on top
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].reference != reference) continue;
      std::vector<Point> positive;
      for (const Point& p : runs[i].*series) {
        if (p.value > 0) positive.push_back(p);
      }
      if (!positive.empty()) s += polyline(f, positive, i, runs[i].name, what, reference);
    }
  }
  s += "</g>\n";
  if (skips) {
    s += "<g class=\"skips\">\n";
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunData& r = runs[i];
      for (const Point& p : r.*skips) {
        s += "<circle class=\"skip\" data-run=\"" + std::to_string(i) + "\" cx=\"" +
             coord(f.x(static_cast<double>(p.step))) + "\" cy=\"" + coord(f.y(p.value)) +
             "\" r=\"2.5\" fill=\"" + kSkipColour + "\"><title>" + html_escape(r.name) + ": step " +
             std::to_string(p.step) + " skipped (scale " + number_text(p.value) +
             ")</title></circle>\n";
      }
    }
    s += "</g>\n";
  }
  return s + "</svg>\n";
}

std::string scale_plot(const std::vector<RunData>& runs, Frame f) {
  return log2_plot(runs, f, "scale", "loss scale per step (log2 axis); red dots: skipped steps",
                   "loss scale (log2)", &RunData::scale, &RunData::skips, "loss scale",
                   "loss scales");
}

// A linear plot of one numerics series of every run (underflow fraction, min headroom).
std::string numerics_plot(const std::vector<RunData>& runs, Frame f, const char* id,
                          const char* label, const char* y_label,
                          std::vector<Point> RunData::*series, const char* what) {
  bool any_step = false;
  step_range(runs, f.x_lo, f.x_hi, any_step);
  if (!any_step) f.x_lo = 0, f.x_hi = 1;
  bool any = false;
  for (const RunData& r : runs) {
    for (const Point& p : r.*series) {
      f.y_lo = any ? std::min(f.y_lo, p.value) : std::min(0.0, p.value);
      f.y_hi = any ? std::max(f.y_hi, p.value) : std::max(0.0, p.value);
      any = true;
    }
  }
  if (!any || f.y_hi <= f.y_lo) f.y_hi = f.y_lo + 1;
  const std::vector<double> x_ticks = nice_ticks(f.x_lo, f.x_hi);
  std::vector<std::pair<double, std::string>> y_ticks;
  for (double v : nice_ticks(f.y_lo, f.y_hi)) y_ticks.emplace_back(v, tick_text(v));
  std::string s = svg_open(id, label);
  s += svg_axes(f, x_ticks, y_ticks, y_label);
  if (!any) s += no_data(what);
  s += "<g class=\"series\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!(runs[i].*series).empty()) s += polyline(f, runs[i].*series, i, runs[i].name, what);
  }
  return s + "</g>\n</svg>\n";
}

std::string cell(const json& v) {
  if (!v.is_number()) return "<td class=\"na\">&mdash;</td>";
  const double d = v.get<double>();
  if (!std::isfinite(d)) return "<td class=\"na\">&mdash;</td>";
  return "<td class=\"num\">" + number_text(d) + "</td>";
}

// A loss scale: 2^k for a power of two from 2^-14 up to 2^-1 and from 2^17 (exact where the
// short format would round 1048576 to 1.0486e+06), else the short format.
std::string scale_text(double v) {
  int e = 0;
  if (v > 0 && std::isfinite(v) && std::frexp(v, &e) == 0.5 && (e - 1 > 16 || e - 1 < 0)) {
    return "2^" + std::to_string(e - 1);
  }
  return number_text(v);
}

// The smallest grad_amax headroom of a run: summary.json's (numerics) when it has one, else the
// least of its per-step grad_amax headroom (logging.grad_amax), else null.
json min_headroom(const RunData& r) {
  if (r.row.contains("min_headroom_log2") && r.row["min_headroom_log2"].is_number()) {
    return r.row["min_headroom_log2"];
  }
  if (r.amax_headroom.empty()) return json();
  double lo = r.amax_headroom.front().value;
  for (const Point& p : r.amax_headroom) lo = std::min(lo, p.value);
  return lo;
}

std::string runs_table(const std::vector<RunData>& runs) {
  // 13 columns at 12 px fit 1280 px: the overrides sit under the run's name (when the name does
  // not already spell them), and the three scales share one cell.
  std::string s =
      "<table id=\"runs\">\n<thead><tr><th>run</th><th>status</th>"
      "<th>final loss</th><th>best eval loss</th><th>steps</th><th>skipped</th>"
      "<th>overflow rate</th><th>retries</th><th>scale: final (min&ndash;max)</th>"
      "<th>mean underflow</th><th>min headroom (log2)</th><th>wall time "
      "(s)</th><th>samples/s</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const json& row = r.row;
    auto field = [&](const char* k) { return row.contains(k) ? row[k] : json(); };
    std::vector<std::string> list;
    std::string overrides;
    if (field("overrides").is_array()) {
      for (const json& o : row["overrides"]) {
        list.push_back(o.is_string() ? o.get<std::string>() : o.dump());
        if (!overrides.empty()) overrides += "<br>";
        overrides += wrap_at_commas(list.back());
      }
    }
    if (!list.empty() && run_name(list) == r.name) overrides.clear();
    const std::string status = field("status").is_string() ? row["status"].get<std::string>() : "";
    const std::string error = field("error").is_string() ? row["error"].get<std::string>() : "";
    s += "<tr class=\"run" + std::string(r.best ? " best" : "") + "\"><td class=\"name\">" +
         "<span class=\"swatch\" style=\"background:" + color(i) + "\"></span>" +
         wrap_at_commas(r.name) + (r.best ? " <span class=\"badge\">best</span>" : "") +
         (overrides.empty() ? "" : "<div class=\"overrides\">" + overrides + "</div>") +
         "</td><td class=\"status status-" + html_escape(status) + "\">" + html_escape(status) +
         (error.empty() ? "" : "<div class=\"error\">" + html_escape(error) + "</div>") + "</td>";
    std::string scale = "<td class=\"na\">&mdash;</td>";
    if (field("final_scale").is_number()) {
      scale = "<td class=\"num\">" + scale_text(row["final_scale"].get<double>());
      if (field("min_scale").is_number() && field("max_scale").is_number()) {
        scale += " (" + scale_text(row["min_scale"].get<double>()) + "&ndash;" +
                 scale_text(row["max_scale"].get<double>()) + ")";
      }
      scale += "</td>";
    }
    s += cell(field("final_loss")) + cell(field("best_eval_loss")) + cell(field("steps")) +
         cell(field("skipped_steps")) + cell(field("overflow_rate")) + cell(field("retries")) +
         scale + cell(field("mean_underflow_frac")) + cell(min_headroom(r)) +
         cell(field("wall_time_s")) + cell(field("samples_per_s")) + "</tr>\n";
  }
  return s + "</tbody>\n</table>\n";
}

// A path as one shell word: quoted unless every character is safe.
std::string shell_word(const std::string& text) {
  bool safe = !text.empty();
  for (char c : text) {
    safe = safe && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                    c == '.' || c == '/' || c == ',' || c == '=' || c == '+' || c == ':');
  }
  if (safe) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A footer line per run: the `ampctl replay` command that previews the run under every scale
// rule (docs/reference.md, "Which scaler?"), or how to record what it needs.
std::string replay_footer(const std::vector<RunData>& runs) {
  std::string s =
      "<footer id=\"replay\">\n<h2>Replay</h2>\n<p class=\"note\">What each run "
      "would have skipped under the other scale rules, predicted from its recorded "
      "grad_amax without training (docs/reference.md, &ldquo;Which "
      "scaler?&rdquo;):</p>\n<ul class=\"replay\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    if (r.dir.empty()) continue;
    s += "<li class=\"run-" + std::to_string(i) +
         "\"><span class=\"swatch\" style=\"background:" + color(i) + "\"></span>";
    if (!r.amax.empty()) {
      s += "<code>ampctl replay " + wrap_at_commas(shell_word(r.dir.string())) +
           " --grid <wbr>scaler.policy=pytorch,<wbr>deepspeed,<wbr>megatron,<wbr>fairseq,<wbr>"
           "auto</code>";
    } else {
      s += wrap_at_commas(r.name) +
           ": no grad_amax recorded; train with <code>--set logging.grad_amax=true</code> to "
           "replay it";
    }
    s += "</li>\n";
  }
  return s + "</ul>\n</footer>\n";
}

// A summary value as text: numbers shortest, strings as they are, a list of scalars joined.
std::string value_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number()) return number_text(value.get<double>());
  if (value.is_array()) {
    std::string t;
    for (const json& v : value) t += (t.empty() ? "" : ", ") + value_text(v);
    return t;
  }
  return value.dump();
}

// summary.json as a table of rows, nested objects flattened into dotted keys
// (numerics.scale_advice.reason), so nothing shows as raw JSON.
void summary_rows(const json& value, const std::string& key, std::string& s) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [k, v] : value.items()) summary_rows(v, key.empty() ? k : key + "." + k, s);
    return;
  }
  // A loss scale (final_scale, min_scale, max_scale) as the runs table writes it: 2^20, exact.
  const bool scale = value.is_number() && key.size() >= 5 && key.ends_with("scale");
  s += "<tr><th>" + html_escape(key) + "</th><td>" +
       html_escape(scale ? scale_text(value.get<double>()) : value_text(value)) + "</td></tr>\n";
}

std::string summary_table(const json& summary) {
  std::string s = "<table id=\"summary\">\n<tbody>\n";
  summary_rows(summary, "", s);
  return s + "</tbody>\n</table>\n";
}

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.meta,.note{color:#555;margin:4px 0}
svg.plot{display:block;max-width:100%;height:auto;border:1px solid #ddd;background:#fff}
svg.plot.small{display:inline-block;width:48%;margin:0 1% 8px 0;vertical-align:top}
table.heat{display:inline-table;margin:0 16px 12px 0}
table.heat caption{font-weight:bold;text-align:left;padding:2px 0}
svg .grid line{stroke:#eee;stroke-width:1}
svg .axes line{stroke:#444;stroke-width:1}
svg text{font-size:12px;fill:#333}
svg .no-data{fill:#999;font-size:14px}
circle.skip{fill:#e00000;stroke:none}
ul.legend{list-style:none;padding:0;margin:8px 0;display:flex;flex-wrap:wrap;gap:4px 16px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px;border-radius:2px}
.swatch.skip{background:#e00000;border-radius:6px;width:8px;height:8px}
table{border-collapse:collapse;margin:8px 0;max-width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
table#runs{font-size:12px}
table#runs td.name{max-width:300px;min-width:110px}
table#runs .overrides,table#settings td.overrides{font-size:11px;color:#555}
table#settings td.overrides{max-width:420px}
.verdict{font-size:15px;font-weight:600;margin:8px 0;padding:6px 10px;background:#f4f8fc;border-left:4px solid #1f77b4}
footer#replay code{font-size:12px}
ul.replay{padding-left:0;list-style:none}ul.replay li{margin:2px 0}
table.heat td{text-align:right;font-variant-numeric:tabular-nums;min-width:90px}
.mark{color:#b00000;font-weight:bold}
thead th{background:#f4f4f4}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.na{color:#999;text-align:center}
tr.best td{background:#f3faf0}
.badge{font-size:11px;background:#2ca02c;color:#fff;border-radius:3px;padding:0 4px}
.status-failed,.status-diverged{color:#b00000}
.error{font-size:12px;color:#b00000;white-space:pre-wrap}
)";

std::string page(const std::string& title, const std::string& meta,
                 const std::vector<RunData>& runs, const json* summary,
                 const std::string& settings = {}, const std::string& verdict = {}) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  html_escape(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  s += "<h1>" + html_escape(title) + "</h1>\n";
  if (!verdict.empty()) s += "<p class=\"verdict\" id=\"verdict\">" + verdict + "</p>\n";
  s += "<p class=\"meta\">" + meta + "</p>\n";
  s += "<ul class=\"legend\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    s += "<li><span class=\"swatch\" style=\"background:" + color(i) + "\"></span>" +
         wrap_at_commas(runs[i].name) + "</li>\n";
  }
  s += "<li><span class=\"swatch skip\"></span>skipped step (gradients overflowed)</li>\n</ul>\n";
  s += settings;
  s += "<h2>Loss</h2>\n" + loss_plot(runs, Frame{});
  s += "<p class=\"note\">The training loss (unscaled) at each logged step, faint, and smoothed "
       "over it (an exponential moving average with weight 0.9, debiased, as TensorBoard "
       "smooths).</p>\n";
  s += eval_plot(runs, Frame{});
  s += "<p class=\"note\">The evaluation loss at each evaluation.</p>\n";
  s += "<h2>Loss scale</h2>\n" + scale_plot(runs, Frame{});
  s += "<p class=\"note\">The loss scale each logged step's backward pass used, on a log2 axis; "
       "red dots mark steps whose gradients overflowed (found_inf) and were skipped.</p>\n";
  bool numerics = false;
  for (const RunData& r : runs) numerics = numerics || !r.underflow.empty();
  if (numerics) {
    s += "<h2>Gradient numerics</h2>\n" +
         numerics_plot(runs, Frame{}, "underflow", "fraction of gradient values flushed to zero",
                       "underflow fraction", &RunData::underflow, "underflow fraction");
    s += numerics_plot(runs, Frame{}, "headroom", "min headroom (log2) over the tensors",
                       "headroom (log2)", &RunData::headroom, "headroom");
    s += "<p class=\"note\">At each sampled step (logging.numerics_every): the fraction of the "
         "gradient values that the roundings to 16 bits flushed to zero, and the smallest "
         "headroom over the parameter tensors, log2(max finite / max |scaled gradient|): "
         "negative where a rounding overflowed. Underflow falls and overflow rises as the scale "
         "above grows.</p>\n";
  }
  bool amax = false;
  for (const RunData& r : runs) amax = amax || !r.amax.empty();
  if (amax) {
    s += "<h2>Gradient amax</h2>\n" +
         log2_plot(runs, Frame{}, "grad_amax", "grad_amax per step (log2 axis)", "grad_amax (log2)",
                   &RunData::amax, nullptr, "grad_amax", "positive grad_amax");
    s += numerics_plot(runs, Frame{}, "amax_headroom", "grad_amax headroom (log2) per step",
                       "headroom (log2)", &RunData::amax_headroom, "grad_amax headroom");
    s += "<p class=\"note\">Runs recorded with logging.grad_amax: the largest finite |x| any "
         "rounding of the step's backward to 16 bits saw, in unscaled units (log2 axis), and its "
         "headroom at the step's scale, log2(max finite / (grad_amax x scale / micro-batches)): "
         "how many doublings the scale had left before a rounding overflowed; negative where one "
         "did. Runs without grad_amax have no line here.</p>\n";
  }
  s += "<h2>Learning rate and throughput</h2>\n" +
       numerics_plot(runs, Frame{}, "lr", "learning rate per logged step", "learning rate",
                     &RunData::lr, "learning rate");
  s += numerics_plot(runs, Frame{}, "throughput", "training steps per second", "steps / s",
                     &RunData::throughput, "throughput");
  s += "<p class=\"note\">The learning rate each logged step used, and the training speed between "
       "consecutive logged steps (steps over the wall-clock seconds between their lines).</p>\n";
  s += "<h2>Runs</h2>\n" + runs_table(runs);
  if (summary) s += "<h2>Summary</h2>\n" + summary_table(*summary);
  s += replay_footer(runs);
  return s + "</body>\n</html>\n";
}

// The run in `dir`: its metrics, grad_amax headroom and summary.json (in `summary`, when
// `has_summary`); named by its summary's name, else its folder's.
RunData read_run(const fs::path& dir, json& summary, bool& has_summary) {
  RunData run;
  RunResult result;
  const fs::path summary_file = dir / files::kSummaryFile;
  has_summary = path_exists(summary_file);
  if (has_summary) result.summary = read_json_file(summary_file, files::kSummaryFile);
  read_metrics(dir / files::kMetricsFile, run);
  amax_headroom(dir, run);
  run.dir = dir;
  const json& sm = result.summary;
  const json name = files::summary_field(sm, files::summary_key::kName);
  run.name = has_summary && name.is_string()
                 ? name.get<std::string>()
                 : fs::absolute(dir).lexically_normal().filename().string();
  if (run.name.empty()) run.name = "run";
  result.run.name = run.name;
  result.dir = dir;
  result.status = has_summary ? "ok" : "unfinished";
  run.row = result_row(result);
  summary = std::move(result.summary);
  return run;
}

std::string render_run(const fs::path& dir) {
  json sm;
  bool has_summary = false;
  std::vector<RunData> runs{read_run(dir, sm, has_summary)};
  const std::string meta = "Run directory " + html_escape(dir.string()) +
                           (has_summary ? "" : " (no summary.json yet: the run is unfinished)");
  return page("ampctl report: " + runs[0].name, meta, runs, has_summary ? &sm : nullptr);
}

// Several run directories side by side (branches of one run, runs of separate trainings): each
// named by its directory as given, since branches share their configuration's name.
std::string render_runs(const std::vector<fs::path>& dirs) {
  std::vector<RunData> runs;
  std::string meta = std::to_string(dirs.size()) + " run directories:";
  for (const fs::path& dir : dirs) {
    json sm;
    bool has_summary = false;
    RunData run = read_run(dir, sm, has_summary);
    run.name = dir.string();
    run.row["name"] = run.name;
    meta += ' ';
    meta += html_escape(dir.string());
    if (!has_summary) meta += " (unfinished)";
    if (&dir != &dirs.back()) meta += ',';
    runs.push_back(std::move(run));
  }
  return page("ampctl report: " + std::to_string(dirs.size()) + " runs", meta, runs, nullptr);
}

// The recorded run_dir of a run, when it lies inside the sweep folder `dir`: a relative path
// without "..", or an absolute one under DIR's absolute path (what a sweep run with an absolute
// --out records). Relative paths were recorded relative to where the sweep ran, so one is taken
// as DIR/<its last component>. Anything else is Error{input}.
fs::path confined_run_dir(const fs::path& dir, const std::string& recorded,
                          const fs::path& sweep_file, const std::string& name) {
  const fs::path p(recorded);
  const fs::path base = fs::absolute(dir).lexically_normal();
  bool inside = !recorded.empty();
  for (const fs::path& part : p) inside = inside && part != "..";
  if (inside && p.is_absolute()) {
    const fs::path rel = p.lexically_normal().lexically_relative(base);
    inside = !rel.empty() && *rel.begin() != ".." && rel != ".";
  }
  if (!inside) {
    throw Error{ErrorKind::input,
                sweep_file.string() + ": run '" + name + "': run_dir '" + recorded +
                    "' is outside the sweep folder " + dir.string(),
                "a sweep's runs live in DIR/<name>; sweep.json may not point elsewhere (no '..', "
                "no absolute path outside the folder)"};
  }
  if (p.is_absolute()) return p;
  return dir / p.lexically_normal().filename();
}

std::string render_sweep(const fs::path& dir) {
  const fs::path sweep_file = dir / "sweep.json";
  const json sweep = read_json_file(sweep_file, "sweep.json");
  if (!sweep.contains("runs") || !sweep["runs"].is_array()) {
    throw Error{ErrorKind::input, sweep_file.string() + ": has no \"runs\" list (sweep.json)"};
  }
  std::vector<RunData> runs;
  for (const json& row : sweep["runs"]) {
    if (!row.is_object()) {
      throw Error{ErrorKind::input, sweep_file.string() + ": a run that is not an object"};
    }
    RunData run;
    run.row = row;
    run.name = row.contains("name") && row["name"].is_string()
                   ? row["name"].get<std::string>()
                   : "run-" + std::to_string(runs.size());
    // The run's directory: DIR/<name> (a moved sweep), else the recorded run_dir; both confined
    // to the sweep folder, so a sweep.json cannot make the report read files elsewhere.
    const fs::path name_path(run.name);
    if (run.name.empty() || name_path.is_absolute() || run.name.find('/') != std::string::npos ||
        run.name == "." || run.name == "..") {
      throw Error{ErrorKind::input,
                  sweep_file.string() + ": run name '" + run.name +
                      "' is not a folder name inside the sweep folder",
                  "a sweep's runs live in DIR/<name>; sweep.json may not point elsewhere"};
    }
    fs::path run_dir = dir / run.name;
    // (A run the sweep was stopped before has an empty run_dir and no folder.)
    if (!path_exists(run_dir) && row.contains("run_dir") && row["run_dir"].is_string() &&
        !row["run_dir"].get<std::string>().empty()) {
      run_dir = confined_run_dir(dir, row["run_dir"].get<std::string>(), sweep_file, run.name);
    }
    const std::string status =
        row.contains("status") && row["status"].is_string() ? row["status"].get<std::string>() : "";
    // A run that failed or never started may have no metrics; a finished one must.
    if (status == "ok" || path_exists(run_dir / files::kMetricsFile)) {
      read_metrics(run_dir / files::kMetricsFile, run);
      amax_headroom(run_dir, run);
      run.dir = run_dir;
    }
    runs.push_back(std::move(run));
  }
  // The question the sweep asks: each setting's metrics over its seeds.
  std::vector<SettingsRun> settings_runs;
  for (const RunData& r : runs) {
    SettingsRun s;
    s.name = r.name;
    if (r.row.contains("status") && r.row["status"].is_string()) s.status = r.row["status"];
    if (r.row.contains("overrides") && r.row["overrides"].is_array()) {
      for (const json& o : r.row["overrides"]) {
        if (o.is_string()) s.overrides.push_back(o.get<std::string>());
      }
    }
    if (r.row.contains("setting") && r.row["setting"].is_string()) s.setting = r.row["setting"];
    for (const auto& [key, value] : r.row.items()) {
      if (value.is_number() && std::isfinite(value.get<double>())) {
        s.metrics[key] = value.get<double>();
      }
    }
    settings_runs.push_back(std::move(s));
  }
  // The verdict by the sweep's metric (sweep.json's, else the sweep's default), computed here
  // from the rows as the sweep computed it: the runs of a setting that differs are marked.
  std::string metric = sweep.contains("metric") && sweep["metric"].is_string()
                           ? sweep["metric"].get<std::string>()
                           : "";
  if (metric.empty()) {
    metric = "final_loss";
    for (const SettingsRun& r : settings_runs) {
      if (r.metrics.count("best_eval_loss")) metric = "best_eval_loss";
    }
  }
  const Verdict verdict = sweep_verdict(settings_runs, metric);
  if (verdict.best >= 0) {
    for (size_t i : verdict.settings.settings[static_cast<size_t>(verdict.best)].runs) {
      runs[i].best = true;
    }
  }
  std::string meta = "Sweep directory " + html_escape(dir.string()) + ": " +
                     std::to_string(runs.size()) + " run(s); compared by " + html_escape(metric) +
                     " (Welch's t-test of the best mean against the runner-up; a setting is "
                     "marked best only when p &lt; 0.05)";
  const std::string name = fs::absolute(dir).lexically_normal().filename().string();
  return page("ampctl sweep report: " + (name.empty() ? std::string("sweep") : name), meta, runs,
              nullptr, settings_section(settings_runs, verdict), html_escape(verdict.line));
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string wrap_at_commas(std::string_view text) {
  std::string out;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find_first_of(",=/", begin);
    end = end == std::string_view::npos ? text.size() : end + 1;
    out += html_escape(text.substr(begin, end - begin));
    if (end < text.size()) out += "<wbr>";
    begin = end;
  }
  return out;
}

std::vector<Point> downsample(const std::vector<Point>& points, std::size_t max_points) {
  if (points.size() <= max_points || max_points < 4) return points;
  const std::size_t n = points.size(), interior = n - 2, buckets = (max_points - 2) / 2;
  std::vector<Point> out;
  out.reserve(max_points);
  out.push_back(points.front());
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t begin = 1 + b * interior / buckets, end = 1 + (b + 1) * interior / buckets;
    if (begin >= end) continue;
    std::size_t lo = begin, hi = begin;
    for (std::size_t i = begin; i < end; ++i) {
      if (points[i].value < points[lo].value) lo = i;
      if (points[i].value > points[hi].value) hi = i;
    }
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(points[std::max(lo, hi)]);
  }
  out.push_back(points.back());
  return out;
}

std::string render_scale_page(const ScalePage& pg) {
  std::vector<RunData> runs;
  for (const ScaleTrajectory& t : pg.trajectories) {
    RunData r;
    r.name = t.name;
    r.scale = t.scale;
    r.skips = t.skips;
    r.reference = t.reference;
    runs.push_back(std::move(r));
  }
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  html_escape(pg.title) + "</title>\n<style>" + kStyle +
                  "</style>\n</head>\n<body>\n";
  s += "<h1>" + html_escape(pg.title) + "</h1>\n<p class=\"meta\">" + html_escape(pg.meta) +
       "</p>\n<ul class=\"legend\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    s += "<li><span class=\"swatch\" style=\"background:" + color(i) + "\"></span>" +
         html_escape(runs[i].name) + "</li>\n";
  }
  s += "<li><span class=\"swatch skip\"></span>skipped step</li>\n</ul>\n";
  s += "<h2>Loss scale</h2>\n" + scale_plot(runs, Frame{});
  if (!pg.note.empty()) s += "<p class=\"note\">" + html_escape(pg.note) + "</p>\n";
  s += "<table id=\"" + html_escape(pg.table_id) + "\">\n<thead><tr>";
  for (const std::string& c : pg.columns) s += "<th>" + html_escape(c) + "</th>";
  s += "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < pg.rows.size(); ++r) {
    const size_t t = pg.first_row_trajectory + r;
    s += "<tr class=\"run\" data-run=\"" + std::to_string(t) + "\">";
    for (size_t c = 0; c < pg.rows[r].size(); ++c) {
      const std::string& text = pg.rows[r][c];
      if (c == 0) {
        s += "<td class=\"name\"><span class=\"swatch\" style=\"background:" + color(t) +
             "\"></span>" + html_escape(text) + "</td>";
      } else {
        s += "<td class=\"num\">" + html_escape(text) + "</td>";
      }
    }
    s += "</tr>\n";
  }
  return s + "</tbody>\n</table>\n</body>\n</html>\n";
}

namespace {

void check_report_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    throw Error{ErrorKind::input, dir.string() + ": no such directory"};
  }
  if (!fs::is_directory(dir, ec)) {
    throw Error{ErrorKind::input, dir.string() + ": not a directory",
                "give a run directory (metrics.jsonl) or a sweep directory (sweep.json)"};
  }
}

bool is_run_dir(const fs::path& dir) {
  return path_exists(dir / "metrics.jsonl") || path_exists(dir / "summary.json");
}

}  // namespace

std::string render_report(const fs::path& dir) {
  check_report_dir(dir);
  if (path_exists(dir / "sweep.json")) return render_sweep(dir);
  if (is_run_dir(dir)) return render_run(dir);
  // A folder of runs (the branches of one, say) is several directories to name.
  std::string runs;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && is_run_dir(it->path())) {
      runs = dir.string();
      runs += dir.string().ends_with("/") ? "*" : "/*";
      break;
    }
  }
  throw Error{ErrorKind::input,
              dir.string() +
                  ": neither a run directory (no metrics.jsonl) nor a sweep directory "
                  "(no sweep.json)",
              runs.empty() ? std::string()
                           : "it holds run directories: compare them on one page with 'ampctl "
                             "report " +
                                 runs + " --out FILE.html'"};
}

std::string render_report(const std::vector<fs::path>& dirs) {
  if (dirs.size() == 1) return render_report(dirs[0]);
  for (size_t i = 0; i < dirs.size(); ++i) {
    const fs::path& dir = dirs[i];
    check_report_dir(dir);
    // The same directory twice (`r` and `./r/`, or a link to it) would draw one run as two.
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (fs::equivalent(dirs[j], dir, ec)) {
        throw Error{
            ErrorKind::usage,
            "report: " + dirs[j].string() + " and " + dir.string() + " are the same directory",
            "give each run once"};
      }
    }
    if (!is_run_dir(dir)) {
      throw Error{
          ErrorKind::input,
          dir.string() + ": not a run directory (no metrics.jsonl)" +
              std::string(path_exists(dir / "sweep.json") ? "; a sweep directory is reported alone"
                                                          : ""),
          "several directories are compared as runs: give run directories"};
    }
  }
  return render_runs(dirs);
}

fs::path write_html_report(const std::vector<fs::path>& dirs, const fs::path& out) {
  if (dirs.empty()) throw Error{ErrorKind::usage, "report: no directory given"};
  if (dirs.size() > 1 && out.empty()) {
    throw Error{ErrorKind::usage,
                "report: " + std::to_string(dirs.size()) + " directories and no --out",
                "several runs go on one page that belongs to none of them: give --out FILE.html"};
  }
  // Rendered first (an unusable DIR is the first thing to report), then the output is checked:
  // a command writes only paths it owns (output_file.h).
  const std::string html = render_report(dirs);
  const std::string flag = out.empty() ? "the report" : "--out";
  std::vector<fs::path> inputs;
  for (const fs::path& dir : dirs) {
    for (const char* name : {"metrics.jsonl", "summary.json", "sweep.json", "sweep.csv"}) {
      inputs.push_back(dir / name);
    }
  }
  const fs::path file =
      checkpoint::checked_output_path(out.empty() ? dirs[0] / "report.html" : out, inputs, flag);
  checkpoint::write_output_file(file, html, flag);
  return file;
}

fs::path write_html_report(const fs::path& dir, const fs::path& out) {
  return write_html_report(std::vector<fs::path>{dir}, out);
}

}  // namespace ampctl::report
