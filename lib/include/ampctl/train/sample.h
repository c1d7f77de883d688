// Sampling from a language-model checkpoint (`ampctl sample`, docs/reference.md "Sampling"):
// the checkpoint's model is rebuilt from its configuration (nn::build_model, nn/models.h) and
// its tensors loaded; the prompt is encoded with the checkpoint's vocabulary, and tokens are
// drawn one at a time, each from the model's distribution at the last position of the context
// (the last block_size tokens; the whole context is recomputed for every token: correctness
// before speed, no KV cache).
//
// Draw i (0-based) of a run with seed S: the logits of the last position, in float, divided by
// the temperature (in double); with top_k, only the k largest stay (ties by lower id); softmax
// in double; the token is the first whose cumulative probability exceeds u, u uniform in [0, 1)
// from Philox (seed S, stream "samp", index i: 53 bits). The same checkpoint, prompt, options and
// seed give the same tokens on every run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/tokenize/tokenizer.h"

namespace ampctl::train {

struct SampleOptions {
  std::string prompt;            // text (vocabulary), or ids separated by spaces (none)
  int64_t tokens = 200;          // new tokens, >= 1
  double temperature = 1.0;      // > 0
  std::optional<int64_t> top_k;  // >= 1
  uint64_t seed = 0;
  // The run's tokenizer (a run on text read through one: its run directory's tokenizer.json):
  // the prompt is encoded and the output decoded through it.
  const tokenize::Tokenizer* tokenizer = nullptr;
  // Called with the prompt's text, then with each new token's as it is drawn: the pieces
  // concatenated are SampleResult::text (`ampctl sample` streams them to stdout).
  std::function<void(std::string_view)> on_text;
};

struct SampleResult {
  std::vector<int32_t> prompt_ids, new_ids;
  // The prompt and the new tokens decoded (text), or their ids separated by spaces (a
  // checkpoint without a vocabulary).
  std::string text;
  // A stop request (core/interrupt.h: SIGINT, SIGTERM, SIGHUP) seen between two draws ended the
  // generation early: its signal; new_ids holds what was drawn before it. 0 otherwise.
  int stopped_by = 0;
};

// The tokens to start from when the prompt is empty: the id of '\n' in a character or byte
// vocabulary (nanoGPT's sample.py starts from "\n"), else id 0.
//
// Throws Error{usage} for options out of range (and a --temperature so small that the logits
// divided by it overflow), Error{input} for a checkpoint that is not a language model's, a
// prompt character outside the vocabulary (naming it) or an id >= the vocabulary size, and
// Error{runtime} when the model's logits are not finite (no distribution to draw from).
SampleResult sample(const checkpoint::CheckpointData& ckpt, const SampleOptions& options);

// The index of the token drawn from `logits` (one row of the vocabulary) with draw `u` in
// [0, 1) under the rule above. Exposed for tests.
int64_t pick_token(const std::vector<float>& logits, double temperature,
                   std::optional<int64_t> top_k, double u);

}  // namespace ampctl::train
