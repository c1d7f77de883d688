// What a sweep answers (report.cpp's "Settings" section, the sweep's console verdict and
// sweep.json's "best"): its runs grouped into settings (a run's overrides without its seed, or the
// name of its `runs:` entry), and per setting and metric the mean and sample standard deviation
// over the setting's seeds, Welch's t-test (sweep/stats.h) against the first setting in the table
// and, for the verdict, of the setting with the best mean against the runner-up: a setting is
// "best" only when that test says it differs (p < 0.05).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/sweep/stats.h"

namespace ampctl::sweep {

struct SettingsRun {
  std::string name;
  std::vector<std::string> overrides;     // "key=value", as sweep.json lists them
  std::string status;                     // only "ok" runs count
  std::map<std::string, double> metrics;  // sweep.json's finite numbers by column name
  std::string setting;                    // the setting's name when the sweep file named it
};

struct Setting {
  std::string label;        // its name, else its overrides without the seed, joined by ", "
  std::string short_label;  // the value alone over a one-key sweep ("megatron"), else label
  bool named = false;       // the label is the sweep file's name for it
  std::vector<std::pair<std::string, std::string>> values;  // key -> value, in the sweep's order
  std::vector<size_t> runs;                                 // indexes into the input
};

// The completed ("ok") runs grouped into settings, in the sweep's order, and the keys whose
// values differ between them (the sweep's axes).
struct Settings {
  std::vector<Setting> settings;
  std::vector<std::string> axes;
};
Settings group_settings(const std::vector<SettingsRun>& runs);

// The metric's statistics over each setting's runs (n 0: none of them has it).
std::vector<SampleStats> metric_stats(const Settings& s, const std::vector<SettingsRun>& runs,
                                      const std::string& metric);

// The answer to the sweep's question for `metric` (lower is better unless it names accuracy).
struct Verdict {
  Settings settings;
  std::string metric;
  int leader = -1;     // the setting with the best mean (-1: no completed run has the metric)
  int runner_up = -1;  // the next best mean
  std::optional<WelchTest> test;  // leader against runner-up (none: a side has < 2 runs, or
                                  // both sides every seed the same value)
  int best = -1;     // the leader when the test says it differs (p < 0.05), else -1: none marked
  std::string line;  // one line, e.g. "scaler.policy: no setting differs in final loss (...)"
};
Verdict sweep_verdict(const std::vector<SettingsRun>& runs, const std::string& metric);

}  // namespace ampctl::sweep
