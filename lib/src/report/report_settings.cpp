// The report's per-setting section: statistics, charts and table (report_settings.h).
#include "report_settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "ampctl/core/format.h"
#include "ampctl/report/report.h"
#include "ampctl/sweep/stats.h"

namespace ampctl::report {

namespace {

// The metrics a sweep compares, as sweep.json names them, with their labels.
constexpr std::pair<const char*, const char*> kMetrics[] = {
    {"final_loss", "final loss"},
    {"best_eval_loss", "best eval loss"},
    {"skipped_steps", "skipped steps"},
    {"mean_underflow_frac", "mean underflow"},
};

// "mean ± sd" (3 significant digits past the mean's own, enough to compare seeds), or the value
// alone for one run.
std::string mean_text(const SampleStats& s) {
  if (s.n < 2) return short_number(s.mean);
  return short_number(s.mean) + " &plusmn; " + fmt("%.2g", s.sd);
}

struct Cell {
  SampleStats stats;
  std::optional<WelchTest> test;  // against the reference setting
  bool marked = false;            // p < 0.05
};

std::string cell_html(const Cell& c, const std::string& reference) {
  if (c.stats.n == 0) return "&mdash;";
  std::string s = mean_text(c.stats);
  if (c.test) {
    const std::string title =
        "Welch t-test against " + reference + ": t = " + fmt("%.3g", c.test->t) +
        ", df = " + fmt("%.3g", c.test->df) + ", p = " + fmt("%.3g", c.test->p);
    s += " <span class=\"" + std::string(c.marked ? "mark" : "p") + "\" title=\"" +
         html_escape(title) + "\">" + (c.marked ? "&#10033;" : "") + "</span>";
  }
  return s;
}

// A sequential colour for t in [0, 1]: light (low) to dark blue (high).
std::string heat_colour(double t) {
  const auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", mix(0xf7, 0x21), mix(0xfb, 0x71),
                mix(0xff, 0xb5));
  return buf;
}

bool is_number_text(const std::string& text) {
  if (text.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(v);
}

}  // namespace

namespace {

using MetricName = std::pair<const char*, const char*>;  // key, caption (kMetrics)

// Per metric with any value and per setting: the statistics and the test against the first
// setting. `metrics` receives the metrics kept, in kMetrics' order; the result is
// [metric][setting].
std::vector<std::vector<Cell>> metric_cells(const std::vector<SettingsRun>& runs,
                                            const Verdict& verdict,
                                            std::vector<MetricName>& metrics) {
  const std::vector<Setting>& settings = verdict.settings.settings;
  std::vector<std::vector<Cell>> cells;
  for (const auto& m : kMetrics) {
    std::vector<Cell> row(settings.size());
    bool any = false;
    const std::vector<SampleStats> stats = metric_stats(verdict.settings, runs, m.first);
    for (size_t k = 0; k < settings.size(); ++k) {
      row[k].stats = stats[k];
      any = any || stats[k].n > 0;
    }
    if (!any) continue;
    for (size_t k = 1; k < settings.size(); ++k) {
      row[k].test = welch_t_test(row[k].stats, row[0].stats);
      row[k].marked = row[k].test && row[k].test->p < 0.05;
    }
    metrics.push_back(m);
    cells.push_back(std::move(row));
  }
  return cells;
}

std::string value_of(const Setting& s, const std::string& key) {
  for (const auto& [k, v] : s.values) {
    if (k == key) return v;
  }
  return std::string();
}

// How the settings lie for the plots: a two-key grid (every setting one cell: xs by ys), or
// one numeric key (an ordered axis: `order` sorts the settings by it), or categories.
struct SettingsLayout {
  std::vector<std::string> xs, ys;
  bool grid = false;
  bool numeric = false;
  std::vector<size_t> order;
};

SettingsLayout settings_layout(const std::vector<Setting>& settings,
                               const std::vector<std::string>& axes) {
  SettingsLayout l;
  l.grid = axes.size() == 2;
  if (l.grid) {
    for (const Setting& s : settings) {
      for (const auto& [key, value] : s.values) {
        auto& list = key == axes[0] ? l.xs : key == axes[1] ? l.ys : l.xs;
        if (key != axes[0] && key != axes[1]) continue;
        if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
      }
    }
    l.grid = l.xs.size() * l.ys.size() == settings.size() && l.xs.size() > 1 && l.ys.size() > 1;
  }
  // One key whose every value is a number: an ordered axis; else categories.
  l.numeric = axes.size() == 1;
  for (const Setting& s : settings) l.numeric = l.numeric && is_number_text(value_of(s, axes[0]));
  l.order.resize(settings.size());
  for (size_t k = 0; k < l.order.size(); ++k) l.order[k] = k;
  if (l.numeric) {
    std::stable_sort(l.order.begin(), l.order.end(), [&](size_t a, size_t b) {
      return std::strtod(value_of(settings[a], axes[0]).c_str(), nullptr) <
             std::strtod(value_of(settings[b], axes[0]).c_str(), nullptr);
    });
  }
  return l;
}

// The heat map of one metric over the two-key grid.
std::string heat_map(const MetricName& metric, const std::vector<Cell>& row,
                     const std::vector<Setting>& settings, const std::vector<std::string>& axes,
                     const SettingsLayout& layout, double lo, double hi) {
  std::string h = "<table class=\"heat\" id=\"heat-" + std::string(metric.first) +
                  "\">\n<caption>" + metric.second + "</caption>\n<thead><tr><th>" +
                  html_escape(axes[1]) + " \\ " + html_escape(axes[0]) + "</th>";
  for (const std::string& x : layout.xs) h += "<th>" + html_escape(x) + "</th>";
  h += "</tr></thead>\n<tbody>\n";
  for (const std::string& y : layout.ys) {
    h += "<tr><th>" + html_escape(y) + "</th>";
    for (const std::string& x : layout.xs) {
      size_t k = settings.size();
      for (size_t j = 0; j < settings.size(); ++j) {
        if (value_of(settings[j], axes[0]) == x && value_of(settings[j], axes[1]) == y) k = j;
      }
      if (k == settings.size() || row[k].stats.n == 0) {
        h += "<td class=\"na\">&mdash;</td>";
        continue;
      }
      const double t = hi > lo ? (row[k].stats.mean - lo) / (hi - lo) : 0.0;
      h += "<td style=\"background:" + heat_colour(t) + (t > 0.6 ? ";color:#fff" : "") + "\">" +
           cell_html(row[k], settings[0].label) + "</td>";
    }
    h += "</tr>\n";
  }
  return h + "</tbody>\n</table>\n";
}

// One metric against the setting: each setting's mean with whiskers of one standard deviation.
// Over one numeric key the settings are placed in the key's order and joined by a line;
// categories (a key with words for values, `runs` entries that change several keys) are points
// alone, in the sweep's order: a line between them would invent an order.
std::string line_plot(const MetricName& metric, const std::vector<Cell>& row,
                      const std::vector<Setting>& settings, const std::vector<std::string>& axes,
                      const SettingsLayout& layout, double lo, double hi) {
  constexpr double W = 600, H = 260, L = 70, R = 16, T = 24, B = 64;
  double y_lo = lo, y_hi = hi;
  for (const Cell& c : row) {
    if (c.stats.n == 0) continue;
    y_lo = std::min(y_lo, c.stats.mean - c.stats.sd);
    y_hi = std::max(y_hi, c.stats.mean + c.stats.sd);
  }
  if (!(y_hi > y_lo)) y_lo -= 0.5, y_hi += 0.5;
  const size_t n = settings.size();
  const auto px = [&](size_t pos) {
    return n == 1
               ? (L + W - R) / 2
               : L + 20 + static_cast<double>(pos) / static_cast<double>(n - 1) * (W - L - R - 40);
  };
  const auto py = [&](double v) { return T + (y_hi - v) / (y_hi - y_lo) * (H - T - B); };
  const std::string axis = axes.size() == 1 ? axes[0] : "setting";
  std::string h = "<svg id=\"line-" + std::string(metric.first) + "\" class=\"plot small" +
                  (layout.numeric ? "" : " categorical") +
                  "\" viewBox=\"0 0 600 260\" width=\"600\" height=\"260\" role=\"img\" "
                  "aria-label=\"" +
                  std::string(metric.second) + " against " + html_escape(axis) + "\">\n<title>" +
                  metric.second + " against " + html_escape(axis) + "</title>\n";
  h += "<text x=\"" + fmt("%.1f", L) + "\" y=\"16\">" + metric.second + "</text>\n";
  h += "<g class=\"axes\"><line x1=\"" + fmt("%.1f", L) + "\" y1=\"" + fmt("%.1f", H - B) +
       "\" x2=\"" + fmt("%.1f", W - R) + "\" y2=\"" + fmt("%.1f", H - B) + "\"/><line x1=\"" +
       fmt("%.1f", L) + "\" y1=\"" + fmt("%.1f", T) + "\" x2=\"" + fmt("%.1f", L) + "\" y2=\"" +
       fmt("%.1f", H - B) + "\"/></g>\n";
  for (double v : {y_lo, (y_lo + y_hi) / 2, y_hi}) {
    h += "<text x=\"" + fmt("%.1f", L - 6) + "\" y=\"" + fmt("%.1f", py(v) + 4) +
         "\" text-anchor=\"end\">" + short_number(std::stod(fmt("%.4g", v))) + "</text>\n";
  }
  std::string pts;
  for (size_t pos = 0; pos < n; ++pos) {
    const size_t k = layout.order[pos];
    // The value over one key; else the setting's name when short, or its row number in the
    // table below (the full name in the tooltip).
    std::string label = settings[k].short_label;
    if (axes.size() != 1 && label.size() > 14) label = "#" + std::to_string(k + 1);
    h += "<text x=\"" + fmt("%.1f", px(pos)) + "\" y=\"" + fmt("%.1f", H - B + 16) +
         "\" text-anchor=\"middle\"><title>" + html_escape(settings[k].label) + "</title>" +
         html_escape(label) + "</text>\n";
    if (row[k].stats.n == 0) continue;
    const Cell& c = row[k];
    if (!pts.empty()) pts += ' ';
    pts += fmt("%.1f", px(pos));
    pts += ',';
    pts += fmt("%.1f", py(c.stats.mean));
    if (c.stats.n > 1) {
      const std::string x = fmt("%.1f", px(pos)), x0 = fmt("%.1f", px(pos) - 5),
                        x1 = fmt("%.1f", px(pos) + 5);
      const std::string y0 = fmt("%.1f", py(c.stats.mean - c.stats.sd)),
                        y1 = fmt("%.1f", py(c.stats.mean + c.stats.sd));
      h += "<g class=\"sd\" stroke=\"#555\" stroke-width=\"1.5\"><line x1=\"" + x + "\" y1=\"" +
           y0 + "\" x2=\"" + x + "\" y2=\"" + y1 + "\"/><line x1=\"" + x0 + "\" y1=\"" + y0 +
           "\" x2=\"" + x1 + "\" y2=\"" + y0 + "\"/><line x1=\"" + x0 + "\" y1=\"" + y1 +
           "\" x2=\"" + x1 + "\" y2=\"" + y1 + "\"/></g>\n";
    }
    h += "<circle class=\"mean" + std::string(c.marked ? " marked" : "") + "\" cx=\"" +
         fmt("%.1f", px(pos)) + "\" cy=\"" + fmt("%.1f", py(c.stats.mean)) + "\" r=\"4\" fill=\"" +
         (c.marked ? "#b00000" : "#1f77b4") + "\"><title>" + html_escape(settings[k].label) + ": " +
         mean_text(c.stats) + "</title></circle>\n";
  }
  if (layout.numeric) {
    h += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" + pts +
         "\"/>\n";
  }
  h += "<text x=\"" + fmt("%.1f", (L + W - R) / 2) + "\" y=\"" + fmt("%.1f", H - 8) +
       "\" text-anchor=\"middle\">" + html_escape(axis) + "</text>\n</svg>\n";
  return h;
}

// The table: a row per setting.
std::string settings_table(const Verdict& verdict, const std::vector<MetricName>& metrics,
                           const std::vector<std::vector<Cell>>& cells, size_t seeds) {
  const std::vector<Setting>& settings = verdict.settings.settings;
  std::string h = "<table id=\"settings\">\n<thead><tr><th>#</th><th>setting</th><th>runs</th>";
  for (const auto& m : metrics) h += "<th>" + std::string(m.second) + "</th>";
  h += "</tr></thead>\n<tbody>\n";
  for (size_t k = 0; k < settings.size(); ++k) {
    const bool best = static_cast<int>(k) == verdict.best;
    h += "<tr class=\"setting" + std::string(best ? " best" : "") + "\"><td>" +
         std::to_string(k + 1) + "</td><td class=\"overrides\">" +
         wrap_at_commas(settings[k].label) + (k == 0 && seeds > 1 ? " (reference)" : "") +
         (best ? " <span class=\"badge\">best</span>" : "") + "</td><td class=\"num\">" +
         std::to_string(settings[k].runs.size()) + "</td>";
    for (size_t m = 0; m < metrics.size(); ++m) {
      h += "<td class=\"num\">" + cell_html(cells[m][k], settings[0].label) + "</td>";
    }
    h += "</tr>\n";
  }
  return h + "</tbody>\n</table>\n";
}

}  // namespace

std::string settings_section(const std::vector<SettingsRun>& runs, const Verdict& verdict) {
  const std::vector<Setting>& settings = verdict.settings.settings;
  const std::vector<std::string>& axes = verdict.settings.axes;
  size_t completed = 0;
  for (const Setting& s : settings) completed += s.runs.size();
  if (completed < 2) return {};

  std::vector<MetricName> metrics;
  const std::vector<std::vector<Cell>> cells = metric_cells(runs, verdict, metrics);

  size_t seeds = 0;
  for (const Setting& s : settings) seeds = std::max(seeds, s.runs.size());
  std::string h =
      "<h2>Settings</h2>\n<p class=\"note\">" + std::to_string(settings.size()) + " setting(s)";
  if (seeds > 1) {
    h += ", up to " + std::to_string(seeds) +
         " seeds each: each cell is the mean &plusmn; the sample standard deviation over the "
         "setting's seeds, and <span class=\"mark\">&#10033;</span> marks a setting whose "
         "mean differs from the first setting's (" +
         html_escape(settings[0].label) +
         ") by Welch's t-test at p &lt; 0.05 (hover a cell for t, df and p)";
  }
  h += ". Completed runs only.</p>\n";

  // A heat map per metric over a two-key grid (every setting one cell), else a line per metric
  // against the setting.
  const SettingsLayout layout = settings_layout(settings, axes);
  for (size_t m = 0; m < metrics.size(); ++m) {
    const std::vector<Cell>& row = cells[m];
    double lo = 0, hi = 0;
    bool any = false;
    for (const Cell& c : row) {
      if (c.stats.n == 0) continue;
      lo = any ? std::min(lo, c.stats.mean) : c.stats.mean;
      hi = any ? std::max(hi, c.stats.mean) : c.stats.mean;
      any = true;
    }
    h += layout.grid ? heat_map(metrics[m], row, settings, axes, layout, lo, hi)
                     : line_plot(metrics[m], row, settings, axes, layout, lo, hi);
  }
  return h + settings_table(verdict, metrics, cells, seeds);
}

}  // namespace ampctl::report
