// The report's per-setting statistics and charts (report_settings.h).
#include "report_settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

bool higher_is_better(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos;
}

// "final_loss" -> "final loss".
std::string metric_words(const std::string& metric) {
  std::string s = metric;
  for (char& c : s) {
    if (c == '_') c = ' ';
  }
  return s;
}

}  // namespace

Settings group_settings(const std::vector<SettingsRun>& runs) {
  Settings out;
  std::vector<Setting>& settings = out.settings;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].status != "ok") continue;
    Setting s;
    std::string joined;
    for (const std::string& o : runs[i].overrides) {
      const size_t eq = o.find('=');
      const std::string key = o.substr(0, eq);
      if (key == "seed") continue;
      s.values.emplace_back(key, eq == std::string::npos ? "" : o.substr(eq + 1));
      if (!joined.empty()) joined += ", ";
      joined += o;
    }
    s.named = !runs[i].setting.empty();
    s.label = s.named ? runs[i].setting : joined.empty() ? "(base)" : joined;
    auto it = std::find_if(settings.begin(), settings.end(),
                           [&](const Setting& x) { return x.label == s.label; });
    if (it == settings.end()) {
      s.runs.push_back(i);
      settings.push_back(std::move(s));
    } else {
      it->runs.push_back(i);
    }
  }
  // The keys whose values differ between settings: the sweep's axes.
  for (const Setting& s : settings) {
    for (const auto& [key, value] : s.values) {
      if (std::find(out.axes.begin(), out.axes.end(), key) != out.axes.end()) continue;
      for (const Setting& t : settings) {
        const auto other = std::find_if(t.values.begin(), t.values.end(),
                                        [&](const auto& kv) { return kv.first == key; });
        if (other == t.values.end() || other->second != value) {
          out.axes.push_back(key);
          break;
        }
      }
    }
  }
  // Over one key an unnamed setting is its value ("megatron"); a named one keeps its name, and
  // several keys need theirs.
  for (Setting& s : settings) {
    s.short_label = s.label;
    if (out.axes.size() != 1 || s.named) continue;
    for (const auto& [k, v] : s.values) {
      if (k == out.axes[0]) s.short_label = v;
    }
  }
  return out;
}

std::vector<SampleStats> metric_stats(const Settings& s, const std::vector<SettingsRun>& runs,
                                      const std::string& metric) {
  std::vector<SampleStats> out;
  for (const Setting& setting : s.settings) {
    std::vector<double> values;
    for (size_t i : setting.runs) {
      if (const auto it = runs[i].metrics.find(metric); it != runs[i].metrics.end()) {
        values.push_back(it->second);
      }
    }
    out.push_back(sample_stats(values));
  }
  return out;
}

Verdict sweep_verdict(const std::vector<SettingsRun>& runs, const std::string& metric) {
  Verdict v;
  v.settings = group_settings(runs);
  v.metric = metric;
  const std::vector<Setting>& settings = v.settings.settings;
  std::string axes;
  for (const std::string& a : v.settings.axes) axes += (axes.empty() ? "" : ", ") + a;
  if (axes.empty()) axes = settings.size() > 1 ? "settings" : "sweep";
  const std::string what = metric_words(metric);
  const std::vector<SampleStats> stats = metric_stats(v.settings, runs, metric);
  const bool higher = higher_is_better(metric);
  const auto better = [&](const SampleStats& a, const SampleStats& b) {
    return higher ? a.mean > b.mean : a.mean < b.mean;
  };
  for (size_t k = 0; k < settings.size(); ++k) {
    if (stats[k].n == 0) continue;
    const int i = static_cast<int>(k);
    if (v.leader < 0 || better(stats[k], stats[static_cast<size_t>(v.leader)])) {
      v.runner_up = v.leader;
      v.leader = i;
    } else if (v.runner_up < 0 || better(stats[k], stats[static_cast<size_t>(v.runner_up)])) {
      v.runner_up = i;
    }
  }
  if (v.leader < 0) {
    v.line = axes + ": no completed run has " + what;
    return v;
  }
  const SampleStats& lead = stats[static_cast<size_t>(v.leader)];
  const std::string lead_name = settings[static_cast<size_t>(v.leader)].short_label;
  if (v.runner_up < 0) {
    v.line = axes + ": one setting (" + lead_name + "), " + what + " " + short_number(lead.mean) +
             ": nothing to compare";
    return v;
  }
  const SampleStats& next = stats[static_cast<size_t>(v.runner_up)];
  const std::string next_name = settings[static_cast<size_t>(v.runner_up)].short_label;
  v.test = welch_t_test(lead, next);
  const std::string means =
      short_number(lead.mean) + " vs " + short_number(next.mean) + " for " + next_name;
  if (lead.n < 2 || next.n < 2) {
    v.line = axes + ": not tested: " + lead_name + " has the " + (higher ? "highest " : "lowest ") +
             what + " (" + means +
             "), but a setting has fewer than 2 completed seeds (add sweep.seeds: [0, 1, 2])";
  } else if (v.test && v.test->p < 0.05) {
    v.best = v.leader;
    v.line = axes + ": " + lead_name + " has the " + (higher ? "highest " : "lowest ") + what +
             " (" + means + ", p = " + fmt("%.2g", v.test->p) + ")";
  } else {
    v.line = axes + ": no setting differs in " + what + " (p " +
             (v.test ? "= " + fmt("%.2g", v.test->p) : std::string("= 1")) + " >= 0.05 for " +
             lead_name + " against " + next_name + ")";
  }
  // What the settings cost in skipped steps, when that differs (Welch at p < 0.05 between the
  // settings that skipped most and least).
  if (metric != "skipped_steps") {
    const std::vector<SampleStats> skips = metric_stats(v.settings, runs, "skipped_steps");
    int most = -1, least = -1;
    for (size_t k = 0; k < settings.size(); ++k) {
      if (skips[k].n == 0) continue;
      if (most < 0 || skips[k].mean > skips[static_cast<size_t>(most)].mean) {
        most = static_cast<int>(k);
      }
      if (least < 0 || skips[k].mean < skips[static_cast<size_t>(least)].mean) {
        least = static_cast<int>(k);
      }
    }
    if (most >= 0 && most != least) {
      const SampleStats& a = skips[static_cast<size_t>(most)];
      const SampleStats& b = skips[static_cast<size_t>(least)];
      const std::optional<WelchTest> t = welch_t_test(a, b);
      if (t && t->p < 0.05 && a.mean > b.mean) {
        v.line += "; " + settings[static_cast<size_t>(most)].short_label + " skips " +
                  short_number(a.mean - b.mean) + " steps more than " +
                  settings[static_cast<size_t>(least)].short_label;
      }
    }
  }
  return v;
}

std::string settings_section(const std::vector<SettingsRun>& runs, const Verdict& verdict) {
  const std::vector<Setting>& settings = verdict.settings.settings;
  const std::vector<std::string>& axes = verdict.settings.axes;
  size_t completed = 0;
  for (const Setting& s : settings) completed += s.runs.size();
  if (completed < 2) return {};

  // Per metric and setting: the statistics and the test against the first setting.
  std::vector<std::pair<const char*, const char*>> metrics;
  std::vector<std::vector<Cell>> cells;  // [metric][setting]
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
  // One key whose every value is a number: an ordered axis; else categories.
  bool numeric = axes.size() == 1;
  for (const Setting& s : settings) numeric = numeric && is_number_text(value_of(s, axes[0]));
  std::vector<size_t> order(settings.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  if (numeric) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::strtod(value_of(settings[a], axes[0]).c_str(), nullptr) <
             std::strtod(value_of(settings[b], axes[0]).c_str(), nullptr);
    });
  }
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
    // Against the setting: each setting's mean with whiskers of one standard deviation. Over one
    // numeric key the settings are placed in the key's order and joined by a line; categories (a
    // key with words for values, `runs` entries that change several keys) are points alone, in
    // the sweep's order: a line between them would invent an order.
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
      return n == 1 ? (L + W - R) / 2
                    : L + 20 +
                          static_cast<double>(pos) / static_cast<double>(n - 1) * (W - L - R - 40);
    };
    const auto py = [&](double v) { return T + (y_hi - v) / (y_hi - y_lo) * (H - T - B); };
    const std::string axis = axes.size() == 1 ? axes[0] : "setting";
    h += "<svg id=\"line-" + std::string(metrics[m].first) + "\" class=\"plot small" +
         (numeric ? "" : " categorical") +
         "\" viewBox=\"0 0 600 260\" width=\"600\" height=\"260\" role=\"img\" aria-label=\"" +
         std::string(metrics[m].second) + " against " + html_escape(axis) + "\">\n<title>" +
         metrics[m].second + " against " + html_escape(axis) + "</title>\n";
    h += "<text x=\"" + fmt("%.1f", L) + "\" y=\"16\">" + metrics[m].second + "</text>\n";
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
      const size_t k = order[pos];
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
           fmt("%.1f", px(pos)) + "\" cy=\"" + fmt("%.1f", py(c.stats.mean)) +
           "\" r=\"4\" fill=\"" + (c.marked ? "#b00000" : "#1f77b4") + "\"><title>" +
           html_escape(settings[k].label) + ": " + mean_text(c.stats) + "</title></circle>\n";
    }
    if (numeric) {
      h += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" + pts +
           "\"/>\n";
    }
    h += "<text x=\"" + fmt("%.1f", (L + W - R) / 2) + "\" y=\"" + fmt("%.1f", H - 8) +
         "\" text-anchor=\"middle\">" + html_escape(axis) + "</text>\n</svg>\n";
  }

  // The table: a row per setting.
  h += "<table id=\"settings\">\n<thead><tr><th>#</th><th>setting</th><th>runs</th>";
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

}  // namespace ampctl::sweep
