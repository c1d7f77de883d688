// init.from (`ampctl train --init-from PATH`): a run that starts from existing weights.
//
// What PATH may be (read_init_source):
//   * an ampctl checkpoint, or a run directory (its newest complete checkpoint): the model's
//     tensors (parameters and buffers), its vocabulary and input statistics; the optimizer,
//     scaler, step, data cursor and RNG are not read (the run starts fresh);
//   * a safetensors file whose __metadata__ has "ampctl_version" (`ampctl export --format
//     safetensors`): ampctl's names and layout; its "vocab" and "input" metadata (JSON text) are
//     the vocabulary and statistics, and its input.mean / input.std tensors are not weights;
//   * any other safetensors file: Hugging Face GPT-2's names and layout (checkpoint/hf_gpt2.h):
//     Conv1D weights transposed to [out, in], the "transformer." prefix added when absent,
//     attn.bias / attn.masked_bias skipped, a missing lm_head.weight read as the tied head;
//   * a directory holding model.safetensors (`ampctl export --format hf`, or a Hugging Face
//     model folder): that file, and the vocabulary of its vocab.json when there is one.
//
// Matching (load_init_weights): every tensor of the model (parameters, then buffers) is looked
// up by name. It fits when the shapes are equal, or
//   * transformer.wpe.weight holds more rows than the model's block_size: the first rows are
//     taken (nanoGPT's crop_block_size);
//   * transformer.wte.weight / lm_head.weight hold fewer rows than the model's vocabulary, which
//     is their count rounded up to a multiple of 64 (GPT-2's 50257 in a 50304 model): the rows
//     beyond take the mean of the file's rows, so those ids' logits sit at the mean logit, far
//     below the likely tokens', and the padding does not take the softmax's mass;
//   * a bias the model does not have (model.bias: false) whose values are all zero (an hf export
//     of a bias-free GPT) is consumed: it changes nothing;
//   * a file's lm_head.weight equal to its transformer.wte.weight is consumed by a tied model.
// f16 and bf16 values are widened exactly to the f32 masters. A shape that does not fit is an
// error even with init.strict: false; with init.strict (the default) a missing or an unexpected
// tensor is one too. Every problem is listed in one Error{input} (exit 2), each naming the tensor
// and both shapes; with init.strict: false missing and unexpected tensors are listed as a warning
// and the missing ones keep the model's initialisation.
//
// Several ranks: every rank reads the same file and matches it (so a bad file fails on every
// rank with the same error, as a bad data file does, and no rank waits alone in a collective);
// the loaded parameters and buffers are then broadcast from rank 0, so the replicas start from
// rank 0's bits even if a node's copy of the file differs.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ampctl/checkpoint/checkpoint.h"
#include "ampctl/data/dataset.h"
#include "ampctl/data/vocab.h"

namespace ampctl::nn {
class Model;
}

namespace ampctl::train {

struct InitSource {
  std::filesystem::path file;  // the file read
  std::string
      format;  // "ampctl checkpoint", "ampctl safetensors", "Hugging Face GPT-2 safetensors"
  std::vector<checkpoint::NamedTensor> tensors;  // ampctl's names and [out, in] layout
  nlohmann::json vocab;  // the source's vocabulary (data/vocab.h's array), or null
  nlohmann::json input;  // its input statistics (CheckpointData::input's form), or null
  // What the source records about the model's structure, as the model section of a resolved
  // configuration ({"type": "gpt", "n_head": 2, ...}): an ampctl checkpoint's config, an ampctl
  // export's "model" metadata, a Hugging Face folder's config.json (n_head, n_layer, n_embd as
  // model keys; its layer_norm_epsilon and activation are checked when it is read: ampctl's GPT
  // has GPT-2's). Null when the source records none (an older export, a bare safetensors file).
  nlohmann::json model;
  std::string model_origin;  // where `model` was read ("DIR/config.json", the file)
};

// Reads PATH (see above). Throws Error{input} naming the path: no such file, no checkpoint in a
// directory, a damaged checkpoint or safetensors file.
InitSource read_init_source(const std::filesystem::path& path);

struct InitReport {
  std::vector<std::string> missing, unexpected;  // "name shape", listed (init.strict: false)
  std::vector<std::string> adapted;              // crops, paddings, consumed zero biases
};

// Matches `source` to `model` (see above) and uploads the values into its parameters and
// buffers (then sync_lowp). Nothing is uploaded when it throws.
InitReport load_init_weights(const InitSource& source, nn::Model& model, bool strict);

// The structure the source records (InitSource::model) against the model's configuration
// (config::to_json's "model" object): every recorded key that changes the function while
// leaving the tensors' shapes alone, or that the shapes show, must be equal: gpt: n_head,
// n_layer, n_embd; mlp: hidden, activation, layer_norm; cnn: hidden, activation, conv, pool,
// batch_norm (another model.type shares no tensor: load_init_weights refuses it). Not compared:
// dropout (training only) and what the matching above adapts with the same function (block_size's
// crop, a tied head, zero biases) or refuses by its tensors (bias, tie_embeddings). Error{input}
// (exit 2) naming the key and both values.
void check_init_structure(const InitSource& source, const nlohmann::json& model);

// The same rule between two model sections (`recorded` said by `origin`); "" when they agree,
// else the message ("ORIGIN records model.n_head: 2, and the model has 4").
std::string structure_mismatch(const nlohmann::json& recorded, const nlohmann::json& model,
                               const std::string& origin);

// A text run's vocabulary (`run_vocab`, null for other runs) against the source's: Error{input}
// when both exist and differ (the ids would mean other characters), naming the first difference.
void check_init_vocab(const InitSource& source, const nlohmann::json& run_vocab);

// Normalization <-> CheckpointData::input's JSON (Error{input} naming `origin` for bad JSON).
nlohmann::json input_to_json(const data::Normalization& stats);
std::optional<data::Normalization> input_from_json(const nlohmann::json& json,
                                                   const std::string& origin);
// A vocabulary's JSON (a checkpoint's or a source's "vocab"; null: none) as data::Vocab, the
// vocabulary a text run reads its text with when it starts from those weights or resumes
// (build_run's saved_vocab). Error{input} naming `origin` for a malformed one.
std::optional<data::Vocab> vocab_from_json(const nlohmann::json& json, const std::string& origin);

}  // namespace ampctl::train
