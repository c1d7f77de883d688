// `ampctl eval --checkpoint CKPT|RUN [--set KEY=VALUE]... [--json]`, or `ampctl eval --config FILE
// --init-from PATH [--set ...] [--json]`: the loss and accuracy (classification) or perplexity
// (language models) of a model's weights on the configuration's evaluation data (train/evaluate.h).
// On a run's own evaluation split it equals the run's last eval line bit for bit. --set changes
// the checkpoint's configuration (e.g. --set data.eval.path=other.txt). Bad inputs exit 2.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "ampctl/core/error.h"
#include "ampctl/run/numbers.h"
#include "ampctl/train/evaluate.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct EvalOptions {
  std::string checkpoint, config, init_from;
  std::vector<std::string> sets;
  bool json = false;
};

int run_eval(const EvalOptions& options) {
  train::EvalRequest request;
  if (!options.checkpoint.empty()) {
    if (!options.config.empty() || !options.init_from.empty()) {
      throw Error{ErrorKind::usage,
                  "--checkpoint evaluates a checkpoint with its own configuration: it takes no "
                  "--config or --init-from",
                  "change the configuration with --set KEY=VALUE"};
    }
    request.checkpoint = options.checkpoint;
  } else {
    if (options.config.empty() || options.init_from.empty()) {
      throw Error{ErrorKind::usage,
                  "give --checkpoint CKPT|RUN, or --config FILE with --init-from PATH",
                  "run 'ampctl eval --help' for usage"};
    }
    request.config = options.config;
    request.init_from = options.init_from;
  }
  request.overrides = options.sets;
  // stdout holds the result alone (one line, or one JSON object): no loading progress lines.
  spdlog::set_level(spdlog::level::warn);
  const nlohmann::ordered_json r = train::evaluate_checkpoint(request);
  if (options.json) {
    std::printf("%s\n", r.dump().c_str());
  } else {
    // The console's short format (4 significant digits); --json has every digit.
    const auto number = [](const nlohmann::ordered_json& v) {
      return v.is_number() ? run::short_number(v.get<double>()) : std::string("-");
    };
    std::string line = "eval loss " + number(r["loss"]);
    if (r.contains("accuracy")) line += " accuracy " + number(r["accuracy"]);
    if (r.contains("perplexity")) line += " perplexity " + number(r["perplexity"]);
    line += " (" + r["rows"].dump() + " rows; " + r["source"].get<std::string>();
    if (!r["step"].is_null()) line += ", step " + r["step"].dump();
    line += ")";
    std::printf("%s\n", line.c_str());
  }
  if (std::fflush(stdout) != 0) throw Error{ErrorKind::runtime, "cannot write to stdout"};
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* sub = app.add_subcommand(
      "eval", "evaluate a checkpoint's (or a weights file's) model on evaluation data");
  sub->add_option("--checkpoint", options->checkpoint,
                  "a checkpoint file, or a run directory (its newest complete checkpoint)")
      ->type_name("PATH");
  sub->add_option("--config", options->config,
                  "with --init-from: the run configuration whose model and data to use")
      ->type_name("FILE");
  sub->add_option("--init-from", options->init_from,
                  "with --config: the weights (as train --init-from reads them)")
      ->type_name("PATH");
  add_set_option(*sub, options->sets);
  sub->add_flag("--json", options->json,
                "print one JSON object: step, loss, accuracy or perplexity, rows, source");
  commands.push_back({sub, [options] { return run_eval(*options); }});
}

}  // namespace ampctl::app
