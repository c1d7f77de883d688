// One evaluation of a run's model on its evaluation batches: what the trainer logs as an eval
// line, and what `ampctl eval` prints. One function for both, so that `ampctl eval` of a run's
// checkpoint reproduces the run's last eval line bit for bit (the same batches, the same ops in
// the same order, the same reductions over the ranks).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"

namespace ampctl {
class Tensor;
}

namespace ampctl::train {

struct RunObjects;

struct EvalResult {
  bool complete = true;            // false: `interrupted` returned true between two batches
  double loss = 0;                 // the mean loss over the evaluation rows (all ranks)
  std::optional<double> accuracy;  // classification
  int64_t rows = 0;                // the rows evaluated (all ranks)
};

// The model of `run` in eval mode over every evaluation batch; each batch's mean loss times its
// rows summed in f32 on the device, then the ranks' sums added in rank order, divided in double.
// `loss_scratch` is an f32[1] tensor of the run's backend; `interrupted` (may be empty) is asked
// before each batch with a single rank.
EvalResult evaluate_run(RunObjects& run, const Tensor& loss_scratch,
                        const std::function<bool()>& interrupted = {});

struct EvalRequest {
  std::filesystem::path checkpoint;    // a checkpoint or run directory; or
  std::filesystem::path config;        // a configuration, with
  std::filesystem::path init_from;     // the weights to evaluate (init_from.h)
  std::vector<std::string> overrides;  // --set KEY=VALUE, on the checkpoint's or the config's
};

// `ampctl eval`: the loss (and accuracy, or perplexity for a language model) of the weights on
// the configuration's evaluation data. Returns {"step": the checkpoint's (null for init_from),
// "loss", "accuracy" (classification) or "perplexity" (language models), "rows", "source"}.
// Throws Error{input} for a missing or damaged file, weights that do not fit the configuration's
// model, a vocabulary that differs from the run's; Error{config} for overrides that do not
// validate or a configuration without evaluation data.
nlohmann::ordered_json evaluate_checkpoint(const EvalRequest& request);

}  // namespace ampctl::train
