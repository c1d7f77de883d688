// The report's "Settings" section for a sweep (report.cpp): what the sweep's question asks, per
// setting (a run's overrides without its seed) and metric: the mean and sample standard deviation
// over the setting's seeds, Welch's t-test against the first setting (sweep/stats.h), and a chart
// per metric: a heat map over a two-key grid, else a line against the setting.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ampctl::sweep {

struct SettingsRun {
  std::string name;
  std::vector<std::string> overrides;     // "key=value", as sweep.json lists them
  std::string status;                     // only "ok" runs count
  std::map<std::string, double> metrics;  // sweep.json's finite numbers by column name
};

// The section's HTML (h2, notes, charts, table#settings), or "" when the sweep has fewer than two
// completed runs.
std::string settings_section(const std::vector<SettingsRun>& runs);

}  // namespace ampctl::sweep
