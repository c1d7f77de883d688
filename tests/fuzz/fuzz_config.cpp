// Fuzzes the configuration path `ampctl validate` and `ampctl train` take: YAML text plus
// `--set` overrides -> parse, apply the overrides, validate (config::parse_config).
//
// Input: YAML text. Each line of the form "#set KEY=VALUE" (a YAML comment, so the document is
// unchanged by it) also becomes one --set argument, in order, at most kMaxOverrides of them.
// On success the resolved configuration must survive its own dumps: parse_config(to_yaml(c))
// == c (plain and annotated) and from_json(to_json(c)) == c, as run_config.h promises.
#include <string>
#include <vector>

#include "ampctl/config/problems.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "fuzz_util.h"

namespace {

using namespace ampctl;

constexpr size_t kMaxOverrides = 4;

std::vector<std::string> overrides_in(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < kMaxOverrides) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    if (line.rfind("#set ", 0) == 0) out.emplace_back(line.substr(5));
    pos = eol + 1;
  }
  return out;
}

void check_round_trip(const config::RunConfig& c) {
  for (const auto style : {config::YamlStyle::plain, config::YamlStyle::annotated}) {
    const std::string yaml = config::to_yaml(c, style);
    try {
      if (!(config::parse_config(yaml, "resolved.yaml") == c)) {
        fuzz::invariant_failed("parse_config(to_yaml(c)) != c for:\n" + yaml);
      }
    } catch (const Error& e) {
      fuzz::invariant_failed(
          "the resolved configuration does not parse back: " + std::string(e.what()) + "\n" + yaml);
    }
  }
  const nlohmann::json json = config::to_json(c);
  try {
    if (!(config::from_json(json, "checkpoint config") == c)) {
      fuzz::invariant_failed("from_json(to_json(c)) != c for:\n" + json.dump());
    }
  } catch (const Error& e) {
    fuzz::invariant_failed("to_json(c) does not validate: " + std::string(e.what()) + "\n" +
                           json.dump());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  const std::vector<std::string> overrides = overrides_in(text);
  config::RunConfig resolved;
  try {
    resolved = config::parse_config(text, "fuzz.yaml", overrides);
  } catch (const Error& e) {
    // refused with a message: the expected outcome for bad input. A --set that is no KEY=VALUE
    // is a usage error; everything else a configuration error naming the file or the --set.
    if (e.kind() == ErrorKind::usage) {
      fuzz::check_refusal(e, ErrorKind::usage, "--set '");
    } else {
      fuzz::check_refusal(e, ErrorKind::config, "");
      for (const config::Problem& p : dynamic_cast<const config::ConfigError&>(e).problems()) {
        if (p.where.origin != "fuzz.yaml" && p.where.origin.rfind("--set ", 0) != 0) {
          fuzz::invariant_failed("a problem names neither the file nor a --set: " + p.str());
        }
      }
    }
    return 0;
  }
  check_round_trip(resolved);
  return 0;
}
