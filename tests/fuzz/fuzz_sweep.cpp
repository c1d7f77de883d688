// Fuzzes the sweep path `ampctl sweep` and `ampctl validate` take for a file with a sweep:
// section: the whole file through the configuration parser (syntax, TABs, nesting, duplicate
// keys, a second sweep: section), the section expanded into runs (sweep::parse_sweep), then,
// for a small sweep, every run validated (sweep::validate).
//
// Invariants: a refusal is an Error of kind config naming the file (or, from validate, the runs
// that fail); an accepted sweep has at least one run, distinct run names, and a base text with the
// same number of lines as the file (problems keep their line numbers).
#include <algorithm>
#include <set>
#include <string>

#include "ampctl/config/problems.h"
#include "ampctl/core/error.h"
#include "ampctl/sweep/sweep.h"
#include "fuzz_util.h"

namespace {

using namespace ampctl;

// Validating resolves every run's configuration: bounded so one input stays fast.
constexpr size_t kMaxValidatedRuns = 16;

void check_config_refusal(const Error& e) {
  if (const auto* ce = dynamic_cast<const config::ConfigError*>(&e)) {
    fuzz::check_refusal(e, ErrorKind::config, "");
    for (const config::Problem& p : ce->problems()) {
      if (p.where.origin != "fuzz.yaml" && p.where.origin.rfind("--set ", 0) != 0) {
        fuzz::invariant_failed("a problem names neither the file nor a --set: " + p.str());
      }
    }
    return;
  }
  if (e.kind() == ErrorKind::usage) return;  // a run's override that is no KEY=VALUE
  fuzz::check_refusal(e, ErrorKind::config, "fuzz.yaml");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  sweep::Sweep spec;
  try {
    spec = sweep::parse_sweep(text, "fuzz.yaml");
  } catch (const Error& e) {
    check_config_refusal(e);
    return 0;
  }
  if (spec.runs.empty()) fuzz::invariant_failed("a sweep without runs");
  std::set<std::string> names;
  for (const sweep::Run& run : spec.runs) {
    if (!names.insert(run.name).second) fuzz::invariant_failed("two runs named " + run.name);
  }
  if (std::count(spec.base_text.begin(), spec.base_text.end(), '\n') !=
      std::count(text.begin(), text.end(), '\n')) {
    fuzz::invariant_failed("stripping the sweep section changed the line count");
  }
  if (spec.runs.size() > kMaxValidatedRuns) return 0;
  try {
    sweep::validate(spec);
  } catch (const config::ConfigError& e) {
    check_config_refusal(e);  // the base configuration itself
  } catch (const Error& e) {
    // One message listing each failing run: "run NAME: ORIGIN:...: KEY: ...".
    fuzz::check_refusal(e, ErrorKind::config, "run ");
  }
  return 0;
}
