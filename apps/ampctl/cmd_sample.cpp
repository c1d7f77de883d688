// `ampctl sample --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
// [--seed S]`: text from a language-model checkpoint (train/sample.h), the prompt and the new
// tokens printed to stdout as they are drawn. Options out of range are usage errors, a checkpoint
// that is not a language model's or a prompt character outside its vocabulary input errors (exit
// 2); SIGINT / SIGTERM / SIGHUP stop it between two tokens, the text so far printed (exit 128 +
// the signal); an output that cannot be written fails it (exit 1).
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/core/error.h"
#include "ampctl/tokenize/tokenizer.h"
#include "ampctl/train/sample.h"
#include "ampctl/train/signals.h"
#include "commands.h"

namespace ampctl::app {

namespace {

struct SampleArgs {
  std::string checkpoint;
  train::SampleOptions options;
  std::string top_k;  // empty: not given
  std::string seed;   // empty: 0
};

// An integer option, whole and in range: nothing clamped, nothing wrapped, no trailing text.
template <typename T>
T integer_option(const std::string& text, const char* flag, T least, const char* range) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  bool below = false;
  (void)least;
  if constexpr (std::is_signed_v<T>) below = v < least;
  if (text.empty() || ec != std::errc{} || ptr != end || below) {
    throw Error{ErrorKind::usage,
                std::string(flag) + " " + text + ": expected an integer " + range +
                    (ec == std::errc::result_out_of_range ? " (it is out of range)" : "")};
  }
  return v;
}

void write_stdout(std::string_view text) {
  if ((!text.empty() && std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) ||
      std::fflush(stdout) != 0) {
    throw Error{ErrorKind::runtime,
                std::string("cannot write the sampled text to the standard output: ") +
                    std::strerror(errno)};
  }
}

int run_sample(SampleArgs args) {
  // A signal while the checkpoint loads or a token is drawn is recorded: the text so far stays
  // printed and the command stops between two tokens (signals.h).
  train::install_stop_handlers();
  if (!args.top_k.empty()) {
    args.options.top_k =
        integer_option<int64_t>(args.top_k, "--top-k", 1, "K >= 1 (at most 2^63 - 1)");
  }
  if (!args.seed.empty()) {
    args.options.seed = integer_option<uint64_t>(args.seed, "--seed", 0, "in [0, 2^64 - 1]");
  }
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(args.checkpoint);
  // A run on text read through a tokenizer keeps a copy in its directory (RUN/tokenizer.json,
  // beside RUN/checkpoints/): the prompt and the output go through it.
  std::optional<tokenize::Tokenizer> tokenizer;
  const nlohmann::json* said = &loaded.data.config;
  for (const char* key : {"data", "train", "tokenizer"}) {
    said = said && said->is_object() && said->contains(key) ? &(*said)[key] : nullptr;
  }
  if (said && said->is_string() && !said->get<std::string>().empty()) {
    const std::filesystem::path copy = loaded.path.parent_path().parent_path() / "tokenizer.json";
    if (!std::filesystem::exists(copy)) {
      throw Error{ErrorKind::input,
                  loaded.path.string() + ": the run read its text through a tokenizer, and " +
                      copy.string() + " (the run's copy of it) is missing",
                  "copy the tokenizer (" + said->get<std::string>() + ") there as tokenizer.json"};
    }
    tokenizer.emplace(tokenize::Tokenizer::load(copy));
    args.options.tokenizer = &*tokenizer;
  }
  // Each token is printed as it is drawn.
  args.options.on_text = write_stdout;
  const train::SampleResult result = train::sample(loaded.data, args.options);
  write_stdout("\n");
  if (result.stopped_by != 0) {
    std::fprintf(stderr, "stopped by %s after %zu of %lld new tokens\n",
                 train::signal_name(result.stopped_by), result.new_ids.size(),
                 static_cast<long long>(args.options.tokens));
    return train::stop_exit_code(result.stopped_by);
  }
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
      ->type_name("K");
  sub->add_option("--seed", args->seed,
                  "seeds the draws: the same seed gives the same text (default 0)")
      ->type_name("S");
  commands.push_back({sub, [args] { return run_sample(*args); }});
}

}  // namespace ampctl::app
