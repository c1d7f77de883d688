// The report's "Settings" section of a sweep (report.cpp): per setting and metric the mean and
// sample standard deviation over its seeds with Welch's test against the first setting, as
// charts and a table, around the sweep's verdict (sweep/verdict.h).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ampctl/sweep/stats.h"
#include "ampctl/sweep/verdict.h"

namespace ampctl::report {

using sweep::SampleStats;
using sweep::Setting;
using sweep::SettingsRun;
using sweep::short_number;
using sweep::Verdict;
using sweep::WelchTest;

// The section's HTML (h2, notes, charts, table#settings), or "" when the sweep has fewer than two
// completed runs. The verdict's best setting is marked in its table.
std::string settings_section(const std::vector<SettingsRun>& runs, const Verdict& verdict);

}  // namespace ampctl::report
