// `ampctl sample --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
// [--seed S]`: text from a language-model checkpoint (train/sample.h), the prompt and the new
// tokens printed to stdout. Options out of range are usage errors, a checkpoint that is not a
// language model's or a prompt character outside its vocabulary input errors (exit 2).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/core/error.h"
#include "ampctl/train/sample.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct SampleArgs {
  std::string checkpoint;
  train::SampleOptions options;
  int64_t top_k = 0;  // 0: not given
};

int run_sample(SampleArgs args) {
  if (args.top_k != 0) args.options.top_k = args.top_k;
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(args.checkpoint);
  const train::SampleResult result = train::sample(loaded.data, args.options);
  std::fwrite(result.text.data(), 1, result.text.size(), stdout);
  std::fputc('\n', stdout);
  if (std::fflush(stdout) != 0) throw Error{ErrorKind::runtime, "cannot write to stdout"};
  return 0;
}

}  // namespace

void register_sample(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<SampleArgs>();
  CLI::App* sub = app.add_subcommand(
      "sample", "generate text from a language-model checkpoint (model.type: gpt)");
  sub->add_option("--checkpoint", args->checkpoint,
                  "a checkpoint file, or a run directory (its newest complete checkpoint)")
      ->required()
      ->type_name("PATH");
  sub->add_option("--prompt", args->options.prompt,
                  "the text to continue, encoded with the run's vocabulary (token data without "
                  "one: ids separated by spaces); empty: start from a newline")
      ->type_name("TEXT");
  sub->add_option("--tokens", args->options.tokens, "new tokens to generate (default 200)")
      ->type_name("N");
  sub->add_option("--temperature", args->options.temperature,
                  "divide the logits by T > 0 before the softmax (default 1.0)")
      ->type_name("T");
  sub->add_option("--top-k", args->top_k, "draw only among the K most likely tokens (K >= 1)")
      ->check(CLI::PositiveNumber)  // 0 would read as "not given": refuse it (exit 2)
      ->type_name("K");
  sub->add_option("--seed", args->options.seed,
                  "seeds the draws: the same seed gives the same text (default 0)")
      ->type_name("S");
  commands.push_back({sub, [args] { return run_sample(*args); }});
}

}  // namespace ampctl::app
