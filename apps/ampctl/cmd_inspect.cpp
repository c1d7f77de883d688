// `ampctl inspect CHECKPOINT [--json]`: what a checkpoint holds (step, loss scale, growth
// tracker, last loss, parameter count, precision, each model tensor), as text or one JSON
// object. CHECKPOINT is a file or a run directory (then its newest complete checkpoint). A
// damaged or foreign file is an Error{input}: exit 2.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "ampctl/checkpoint/checkpoint.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct InspectOptions {
  std::string checkpoint;
  bool json = false;
};

std::string value_text(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "n/a";
  return v.dump();
}

std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return n < 0 ? "-" + digits : digits;
}

std::string render_text(const nlohmann::ordered_json& s) {
  std::string out;
  out += "checkpoint:     " + s["file"].get<std::string>() + "\n";
  out += "step:           " + std::to_string(s["step"].get<int64_t>()) + "\n";
  out += "precision:      " +
         (s["precision"].is_null() ? std::string("unknown") : s["precision"].get<std::string>()) +
         "\n";
  if (s["scaler_enabled"].get<bool>()) {
    out += "scale:          " + value_text(s["scale"]) + "\n";
    out += "growth tracker: " + value_text(s["growth_tracker"]) + "\n";
  } else {
    out += "scaler:         disabled\n";
  }
  if (s.contains("last_loss")) out += "last loss:      " + value_text(s["last_loss"]) + "\n";
  out += "parameters:     " + with_thousands(s["parameters"].get<int64_t>()) + "\n";
  if (!s["optimizer"].is_null()) {
    out += "optimizer:      " + s["optimizer"].get<std::string>() + " (" +
           std::to_string(s["optimizer_tensors"].get<size_t>()) + " state tensors)\n";
  }
  const auto& tensors = s["tensors"];
  out += "model:          " + std::to_string(tensors.size()) + " tensors\n";
  size_t width = 0;
  for (const auto& t : tensors) width = std::max(width, t["name"].get<std::string>().size());
  for (const auto& t : tensors) {
    std::string name = t["name"].get<std::string>();
    name.resize(width, ' ');
    std::string dtype = t["dtype"].get<std::string>();
    dtype.resize(5, ' ');
    out += "  " + name + "  " + dtype + t["shape"].dump() + "\n";
  }
  return out;
}

int run_inspect(const InspectOptions& options) {
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(options.checkpoint);
  const nlohmann::ordered_json summary = checkpoint::summarize(loaded.data, loaded.path);
  const std::string text = options.json ? summary.dump(2) + "\n" : render_text(summary);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* sub =
      app.add_subcommand("inspect", "show a checkpoint's step, loss scale, parameters and tensors");
  sub->add_option("checkpoint", options->checkpoint,
                  "a checkpoint file, or a run directory (its newest complete checkpoint)")
      ->required()
      ->type_name("CHECKPOINT");
  sub->add_flag("--json", options->json, "print one JSON object instead of text");
  commands.push_back({sub, [options] { return run_inspect(*options); }});
}

}  // namespace ampctl::app
