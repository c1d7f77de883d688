// The AMPCTL_* environment variables that choose between code paths (for A/B comparisons and for
// checking one GPU as another would decide), checked once at a command's start: a value the
// readers do not know would otherwise fall back to the default path in silence, and a comparison
// of `materialized` against `fused` would compare the fused path with itself.
#pragma once

#include <string>
#include <vector>

namespace ampctl::config {

struct EnvironmentChoice {
  const char* name;
  std::vector<std::string> values;  // what it accepts; unset and "" take the default
  const char* what;                 // one line: what it chooses
};

// Every AMPCTL_* variable with a fixed set of values (docs/reference.md names each where its
// path is described).
const std::vector<EnvironmentChoice>& environment_choices();

// Throws Error{config} (exit 2) for a set variable of environment_choices() whose value is not
// one of its values, naming it, the values and the near miss (closest_match), and for an
// AMPCTL_CPU_ISA path the CPU lacks (check_cpu_isa_environment, core/cpu_isa.h).
void check_environment();

}  // namespace ampctl::config
