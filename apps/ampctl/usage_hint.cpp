// The hint for a command line CLI11 refused: what the user most likely meant, in the words of
// the tools they come from (a misspelt command or flag, a path given without the flag that
// takes it, PyTorch-style --out / --output-dir for train's --run-dir).
#include <filesystem>
#include <string>
#include <vector>

#include "ampctl/config/problems.h"
#include "commands.h"

namespace ampctl::app {

namespace {

// The flag a bare word belongs to on `command`: --config for a YAML file, --checkpoint for a
// checkpoint or run directory; "" when the command takes positionals or neither fits.
std::string flag_for_word(const std::string& command, const std::string& word) {
  const bool yaml = word.ends_with(".yaml") || word.ends_with(".yml");
  if (yaml && (command == "train" || command == "validate" || command == "sweep")) {
    return "--config";
  }
  std::error_code ec;
  if (!yaml && std::filesystem::exists(word, ec) &&
      (command == "resume" || command == "eval" || command == "export" || command == "sample")) {
    return "--checkpoint";
  }
  return {};
}

// The hint for an option `name` (with its dashes) that `sub` does not have.
std::string unknown_option_hint(const CLI::App& sub, const std::string& name) {
  const std::string command = sub.get_name();
  const bool has_run_dir = sub.get_option_no_throw("--run-dir") != nullptr;
  for (const char* out : {"--out", "--output", "--output-dir", "--output_dir", "--out-dir",
                          "--save-dir", "--save_dir", "--log-dir", "--logdir"}) {
    if (name == out && has_run_dir) {
      return "ampctl " + command + " writes its run into --run-dir DIR (default runs/<name>)";
    }
  }
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
  }
  const std::string near = config::closest_match(name, names);
  if (near.empty()) return {};
  return "did you mean " + near + "? (ampctl " + command + " --help lists its options)";
}

}  // namespace

std::string usage_hint(CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty()) return {};
  const std::string& first = args[0];
  CLI::App* sub = nullptr;
  std::vector<std::string> commands;
  for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; })) {
    commands.push_back(s->get_name());
    if (s->get_name() == first) sub = s;
  }
  if (sub == nullptr) {
    if (first.empty() || first[0] == '-') return {};
    const std::string near = config::closest_match(first, commands);
    if (!near.empty()) return "did you mean 'ampctl " + near + "'?";
    std::string list;
    for (const std::string& c : commands) {
      if (!list.empty()) list += ", ";
      list += c;
    }
    return "'" + first + "' is not a command; the commands are " + list;
  }
  const bool takes_positionals = !sub->get_options([](const CLI::Option* o) {
                                       return o->get_positional() && !o->nonpositional();
                                     })
                                      .empty();
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 1 && a[0] == '-') {
      const std::string name = a.substr(0, a.find('='));
      const CLI::Option* opt = sub->get_option_no_throw(name);
      if (opt == nullptr) {
        if (name == "-h" || name == "--help") continue;
        const std::string hint = unknown_option_hint(*sub, name);
        if (!hint.empty()) return hint;
        continue;
      }
      // The option's value is the next word unless it came with '=' or the option is a flag.
      if (a.find('=') == std::string::npos && opt->get_type_size() != 0) ++i;
      continue;
    }
    if (takes_positionals) continue;
    const std::string flag = flag_for_word(sub->get_name(), a);
    if (!flag.empty()) {
      return "give it with " + flag + ": ampctl " + sub->get_name() + " " + flag + " " + a;
    }
  }
  return "run 'ampctl " + sub->get_name() + " --help' for its options";
}

}  // namespace ampctl::app
