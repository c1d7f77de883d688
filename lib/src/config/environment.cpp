#include "ampctl/config/environment.h"

#include <algorithm>
#include <cstdlib>

#include "ampctl/config/problems.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/error.h"

namespace ampctl::config {

const std::vector<EnvironmentChoice>& environment_choices() {
  static const std::vector<EnvironmentChoice> choices = {
      {"AMPCTL_ATTENTION",
       {"fused", "fused_fma", "materialised"},
       "the GPU's attention path (fused: tensor-core tiles, the default)"},
      {"AMPCTL_GELU",
       {"fused", "composed"},
       "the GPU's Linear + GELU (fused: cuBLASLt's epilogues, the default)"},
      {"AMPCTL_CPU_ISA",
       {"avx512", "avx2", "portable"},
       "the CPU's instruction path (unset: the best the CPU has)"},
      {"AMPCTL_CPU_AMX", {"0", "1"}, "0 keeps the CPU's bf16 products off the AMX tiles"},
      {"AMPCTL_FORCE_SM75", {"0", "1"}, "1 makes a newer GPU decide as a T4 (sm_75) does"},
  };
  return choices;
}

void check_environment() {
  for (const EnvironmentChoice& c : environment_choices()) {
    const char* set = std::getenv(c.name);
    if (set == nullptr || *set == '\0') continue;
    const std::string value = set;
    if (std::find(c.values.begin(), c.values.end(), value) != c.values.end()) continue;
    std::string list;
    for (const std::string& v : c.values) list += (list.empty() ? "" : ", ") + v;
    const std::string closest = closest_match(value, c.values);
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
  check_cpu_isa_environment();  // a listed path the CPU lacks
}

}  // namespace ampctl::config
