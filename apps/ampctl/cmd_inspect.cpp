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

// A checkpoint's string as it may be shown on a terminal: control characters (ESC, CR, BEL, the
// C1 range U+0080..U+009F) are written as escapes (backslash, x, two hex digits; backslash, u,
// four hex digits for C1) and a backslash is doubled, so a crafted tensor name cannot move the
// cursor, recolour or retitle the terminal, or hide part of a line.
std::string terminal_safe(const std::string& s) {
  std::string out;
  char buf[8];
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[++i]));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

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
  out += "checkpoint:     " + terminal_safe(s["file"].get<std::string>()) + "\n";
  out += "step:           " + std::to_string(s["step"].get<int64_t>()) + "\n";
  out += "precision:      " +
         (s["precision"].is_null() ? std::string("unknown")
                                   : terminal_safe(s["precision"].get<std::string>())) +
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
    out += "optimizer:      " + terminal_safe(s["optimizer"].get<std::string>()) + " (" +
           std::to_string(s["optimizer_tensors"].get<size_t>()) + " state tensors)\n";
  }
  const auto& tensors = s["tensors"];
  out += "model:          " + std::to_string(tensors.size()) + " tensors\n";
  size_t width = 0;
  for (const auto& t : tensors) {
    width = std::max(width, terminal_safe(t["name"].get<std::string>()).size());
  }
  for (const auto& t : tensors) {
    std::string name = terminal_safe(t["name"].get<std::string>());
    name.resize(width, ' ');
    std::string dtype = terminal_safe(t["dtype"].get<std::string>());
    dtype.resize(5, ' ');
    out += "  " + name + "  " + dtype + t["shape"].dump() + "\n";
  }
  return out;
}

int run_inspect(const InspectOptions& options) {
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(options.checkpoint);
  const nlohmann::ordered_json summary = checkpoint::summarize(loaded.data, loaded.path);
  // JSON escapes control characters itself (ESC is \u001b).
  const std::string text =
      options.json
          ? summary.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n"
          : render_text(summary);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* sub =
      app.add_subcommand("inspect", "show a checkpoint's step, loss scale, parameters and tensors");
  // Positional, or --checkpoint as resume, eval, export and sample take it.
  sub->add_option("checkpoint,--checkpoint", options->checkpoint,
                  "a checkpoint file, or a run directory (its newest complete checkpoint); "
                  "given as is or with --checkpoint")
      ->required()
      ->type_name("CHECKPOINT");
  sub->add_flag("--json", options->json, "print one JSON object instead of text");
  commands.push_back({sub, [options] { return run_inspect(*options); }});
}

}  // namespace ampctl::app
