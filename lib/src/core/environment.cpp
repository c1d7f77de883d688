#include "ampctl/core/environment.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "ampctl/core/error.h"

namespace ampctl {

const std::vector<EnvironmentChoice>& environment_choices() {
  static const std::vector<EnvironmentChoice> choices = {
      {"AMPCTL_ATTENTION",
       {"fused", "fused_fma", "materialised"},
       "the GPU's attention path (fused: tensor-core tiles, the default)"},
      {"AMPCTL_GELU",
       {"fused", "composed"},
       "the GPU's Linear + GELU (fused: cuBLASLt's epilogues, the default)"},
      {"AMPCTL_CPU_AMX", {"0", "1"}, "0 keeps the CPU's bf16 products off the AMX tiles"},
      {"AMPCTL_FORCE_SM75", {"0", "1"}, "1 makes a newer GPU decide as a T4 (sm_75) does"},
  };
  return choices;
}

namespace {

// Levenshtein distance, case-insensitive (materialized -> materialised is 1).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void check_environment() {
  for (const EnvironmentChoice& c : environment_choices()) {
    const char* set = std::getenv(c.name);
    if (set == nullptr || *set == '\0') continue;
    const std::string value = set;
    if (std::find(c.values.begin(), c.values.end(), value) != c.values.end()) continue;
    std::string list, closest;
    size_t best = 3;  // suggest only a near miss
    for (const std::string& v : c.values) {
      list += (list.empty() ? "" : ", ") + v;
      if (const size_t d = distance(value, v); d < best) {
        best = d;
        closest = v;
      }
    }
    std::string message = c.name;
    message += "='";
    message += value;
    message += "': expected one of ";
    message += list;
    message += " (or unset)";
    std::string hint;
    if (!closest.empty()) {
      hint = "did you mean ";
      hint += c.name;
      hint += "=";
      hint += closest;
      hint += "? ";
    }
    hint += c.name;
    hint += " chooses ";
    hint += c.what;
    throw Error{ErrorKind::config, message, hint};
  }
}

}  // namespace ampctl
