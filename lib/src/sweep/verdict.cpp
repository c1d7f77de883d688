// What a sweep answers: its settings, their statistics and the verdict (sweep/verdict.h).
#include "ampctl/sweep/verdict.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ampctl/core/format.h"

namespace ampctl::sweep {

namespace {

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

}  // namespace ampctl::sweep
