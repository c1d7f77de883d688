// The report's per-setting statistics and charts (report_settings.h).
#include "report_settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "ampctl/core/format.h"
#include "ampctl/sweep/report.h"
#include "ampctl/sweep/stats.h"

namespace ampctl::sweep {

namespace {

// The metrics a sweep compares, as sweep.json names them, with their labels.
constexpr std::pair<const char*, const char*> kMetrics[] = {
    {"final_loss", "final loss"},
    {"best_eval_loss", "best eval loss"},
    {"skipped_steps", "skipped steps"},
    {"mean_underflow_frac", "mean underflow"},
};

struct Setting {
  std::string label;  // its overrides without the seed, joined
  std::vector<std::pair<std::string, std::string>> values;  // key -> value, in the sweep's order
  std::vector<size_t> runs;                                 // indexes into the input
};

// "mean ± sd" (3 significant digits past the mean's own, enough to compare seeds), or the value
// alone for one run.
std::string mean_text(const SampleStats& s) {
  if (s.n < 2) return shortest_number(s.mean);
  return fmt("%.5g", s.mean) + " &plusmn; " + fmt("%.2g", s.sd);
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

}  // namespace

std::string settings_section(const std::vector<SettingsRun>& runs) {
  // Group the completed runs by their overrides without the seed, in the sweep's order.
  std::vector<Setting> settings;
  size_t completed = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].status != "ok") continue;
    ++completed;
    Setting s;
    for (const std::string& o : runs[i].overrides) {
      const size_t eq = o.find('=');
      const std::string key = o.substr(0, eq);
      if (key == "seed") continue;
      s.values.emplace_back(key, eq == std::string::npos ? "" : o.substr(eq + 1));
      if (!s.label.empty()) s.label += ", ";
      s.label += o;
    }
    if (s.label.empty()) s.label = "(base)";
    auto it = std::find_if(settings.begin(), settings.end(),
                           [&](const Setting& x) { return x.label == s.label; });
    if (it == settings.end()) {
      s.runs.push_back(i);
      settings.push_back(std::move(s));
    } else {
      it->runs.push_back(i);
    }
  }
  if (completed < 2) return {};

  // The keys whose values differ between settings: the sweep's axes.
  std::vector<std::string> axes;
  for (const Setting& s : settings) {
    for (const auto& [key, value] : s.values) {
      if (std::find(axes.begin(), axes.end(), key) != axes.end()) continue;
      for (const Setting& t : settings) {
        const auto other = std::find_if(t.values.begin(), t.values.end(),
                                        [&](const auto& kv) { return kv.first == key; });
        if (other == t.values.end() || other->second != value) {
          axes.push_back(key);
          break;
        }
      }
    }
  }

  // Per metric and setting: the statistics and the test against the first setting.
  std::vector<std::pair<const char*, const char*>> metrics;
  std::vector<std::vector<Cell>> cells;  // [metric][setting]
  for (const auto& m : kMetrics) {
    std::vector<Cell> row(settings.size());
    bool any = false;
    for (size_t k = 0; k < settings.size(); ++k) {
      std::vector<double> values;
      for (size_t i : settings[k].runs) {
        if (const auto it = runs[i].metrics.find(m.first); it != runs[i].metrics.end()) {
          values.push_back(it->second);
        }
      }
      row[k].stats = sample_stats(values);
      any = any || !values.empty();
    }
    if (!any) continue;
    for (size_t k = 1; k < settings.size(); ++k) {
      row[k].test = welch_t_test(row[k].stats, row[0].stats);
      row[k].marked = row[k].test && row[k].test->p < 0.05;
    }
    metrics.push_back(m);
    cells.push_back(std::move(row));
  }

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
  std::vector<std::string> xs, ys;
  bool grid = axes.size() == 2;
  if (grid) {
    for (const Setting& s : settings) {
      for (const auto& [key, value] : s.values) {
        auto& list = key == axes[0] ? xs : key == axes[1] ? ys : xs;
        if (key != axes[0] && key != axes[1]) continue;
        if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
      }
    }
    grid = xs.size() * ys.size() == settings.size() && xs.size() > 1 && ys.size() > 1;
  }
  const auto value_of = [](const Setting& s, const std::string& key) {
    for (const auto& [k, v] : s.values) {
      if (k == key) return v;
    }
    return std::string();
  };
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
    if (grid) {
      h += "<table class=\"heat\" id=\"heat-" + std::string(metrics[m].first) + "\">\n<caption>" +
           metrics[m].second + "</caption>\n<thead><tr><th>" + html_escape(axes[1]) + " \\ " +
           html_escape(axes[0]) + "</th>";
      for (const std::string& x : xs) h += "<th>" + html_escape(x) + "</th>";
      h += "</tr></thead>\n<tbody>\n";
      for (const std::string& y : ys) {
        h += "<tr><th>" + html_escape(y) + "</th>";
        for (const std::string& x : xs) {
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
      h += "</tbody>\n</table>\n";
      continue;
    }
    // A line against the setting: the mean at each setting in the sweep's order, with whiskers
    // of one standard deviation.
    constexpr double W = 600, H = 260, L = 70, R = 16, T = 24, B = 64;
    double y_lo = lo, y_hi = hi;
    for (const Cell& c : row) {
      if (c.stats.n == 0) continue;
      y_lo = std::min(y_lo, c.stats.mean - c.stats.sd);
      y_hi = std::max(y_hi, c.stats.mean + c.stats.sd);
    }
    if (!(y_hi > y_lo)) y_lo -= 0.5, y_hi += 0.5;
    const auto px = [&](size_t k) {
      return L + (settings.size() == 1 ? 0.5 : static_cast<double>(k) / (settings.size() - 1)) *
                     (W - L - R);
    };
    const auto py = [&](double v) { return T + (y_hi - v) / (y_hi - y_lo) * (H - T - B); };
    const std::string axis = axes.size() == 1 ? axes[0] : "setting";
    h += "<svg id=\"line-" + std::string(metrics[m].first) +
         "\" class=\"plot small\" viewBox=\"0 0 600 260\" width=\"600\" height=\"260\" "
         "role=\"img\" aria-label=\"" +
         std::string(metrics[m].second) + " against " + html_escape(axis) + "\">\n<title>" +
         metrics[m].second + " against " + html_escape(axis) + "</title>\n";
    h += "<text x=\"" + fmt("%.1f", L) + "\" y=\"16\">" + metrics[m].second + "</text>\n";
    h += "<g class=\"axes\"><line x1=\"" + fmt("%.1f", L) + "\" y1=\"" + fmt("%.1f", H - B) +
         "\" x2=\"" + fmt("%.1f", W - R) + "\" y2=\"" + fmt("%.1f", H - B) + "\"/><line x1=\"" +
         fmt("%.1f", L) + "\" y1=\"" + fmt("%.1f", T) + "\" x2=\"" + fmt("%.1f", L) + "\" y2=\"" +
         fmt("%.1f", H - B) + "\"/></g>\n";
    for (double v : {y_lo, (y_lo + y_hi) / 2, y_hi}) {
      h += "<text x=\"" + fmt("%.1f", L - 6) + "\" y=\"" + fmt("%.1f", py(v) + 4) +
           "\" text-anchor=\"end\">" + fmt("%.4g", v) + "</text>\n";
    }
    std::string pts;
    for (size_t k = 0; k < settings.size(); ++k) {
      std::string label = std::to_string(k + 1);
      if (axes.size() == 1) label = value_of(settings[k], axes[0]);
      h += "<text x=\"" + fmt("%.1f", px(k)) + "\" y=\"" + fmt("%.1f", H - B + 16) +
           "\" text-anchor=\"middle\"><title>" + html_escape(settings[k].label) + "</title>" +
           html_escape(label) + "</text>\n";
      if (row[k].stats.n == 0) continue;
      const Cell& c = row[k];
      if (!pts.empty()) pts += ' ';
      pts += fmt("%.1f", px(k));
      pts += ',';
      pts += fmt("%.1f", py(c.stats.mean));
      if (c.stats.n > 1) {
        h += "<line class=\"sd\" x1=\"" + fmt("%.1f", px(k)) + "\" y1=\"" +
             fmt("%.1f", py(c.stats.mean - c.stats.sd)) + "\" x2=\"" + fmt("%.1f", px(k)) +
             "\" y2=\"" + fmt("%.1f", py(c.stats.mean + c.stats.sd)) +
             "\" stroke=\"#555\" stroke-width=\"1.5\"/>\n";
      }
      h += "<circle class=\"mean" + std::string(c.marked ? " marked" : "") + "\" cx=\"" +
           fmt("%.1f", px(k)) + "\" cy=\"" + fmt("%.1f", py(c.stats.mean)) + "\" r=\"4\" fill=\"" +
           (c.marked ? "#b00000" : "#1f77b4") + "\"><title>" + html_escape(settings[k].label) +
           ": " + mean_text(c.stats) + "</title></circle>\n";
    }
    h += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" + pts +
         "\"/>\n";
    h += "<text x=\"" + fmt("%.1f", (L + W - R) / 2) + "\" y=\"" + fmt("%.1f", H - 8) +
         "\" text-anchor=\"middle\">" + html_escape(axis) + "</text>\n</svg>\n";
  }

  // The table: a row per setting.
  h += "<table id=\"settings\">\n<thead><tr><th>#</th><th>setting</th><th>runs</th>";
  for (const auto& m : metrics) h += "<th>" + std::string(m.second) + "</th>";
  h += "</tr></thead>\n<tbody>\n";
  for (size_t k = 0; k < settings.size(); ++k) {
    h += "<tr class=\"setting\"><td>" + std::to_string(k + 1) + "</td><td class=\"overrides\">" +
         html_escape(settings[k].label) + (k == 0 && seeds > 1 ? " (reference)" : "") +
         "</td><td class=\"num\">" + std::to_string(settings[k].runs.size()) + "</td>";
    for (size_t m = 0; m < metrics.size(); ++m) {
      h += "<td class=\"num\">" + cell_html(cells[m][k], settings[0].label) + "</td>";
    }
    h += "</tr>\n";
  }
  return h + "</tbody>\n</table>\n";
}

}  // namespace ampctl::sweep
