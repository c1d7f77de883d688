// Language-model data: `source: text` and `source: tokens` (docs/reference.md, "Text and token
// data") read into token arrays, split into a training and an evaluation part, and the windows
// a batch is made of.
//
// A batch is B windows of block_size + 1 consecutive tokens (nanoGPT's get_batch): the input is
// the first block_size tokens of each window, the target the last block_size. Window starts
// are drawn uniformly from [0, n - block_size) by Philox (data/random.h): training batch k
// (counting every micro-batch of the run from 0) draws its row r from stream lm_train at index
// k * B + r, so the whole sequence of batches is a pure function of (seed, B, n, block_size)
// and the data cursor a checkpoint keeps is just k. Evaluation batch j draws from stream
// lm_eval at index j * B + r: the same eval_batches batches at every evaluation.
//
// Invariants of an LmData returned by load_lm_data: vocab_size >= 1 and every token id is in
// [0, vocab_size); train holds >= block_size + 1 tokens, and so does eval when present; the
// token count of each part is below 2^31 (device indices are int32). Bad files are
// Error{input} naming the file and byte offset; settings the data cannot meet Error{config}.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ampctl/data/options.h"
#include "ampctl/data/vocab.h"
#include "ampctl/tokenize/tokenizer.h"

namespace ampctl::data {

// One part (training or evaluation) of a language-model data set.
struct TokenSet {
  std::vector<int32_t> tokens;
  std::string origin;  // "data.txt", "data.txt (last 10%)": for messages

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

struct LmData {
  TokenSet train;
  std::optional<TokenSet> eval;
  std::vector<TokenSet> more_eval;  // data.eval's further named sets (DataOptions::more_eval)
  int64_t vocab_size = 0;
  std::optional<Vocab> vocab;  // text sources without a tokenizer; token files have none
  // Text read through a tokenizer (data.train.tokenizer): its ids; vocab_size is its size.
  std::shared_ptr<const tokenize::Tokenizer> tokenizer;
};

// The biggest files read whole: text is held as int32 ids (4 bytes per character), token files
// as int32 as well; both stay below 2^31 tokens.
inline constexpr uint64_t kMaxTextBytes = uint64_t{1} << 31;
inline constexpr uint64_t kMaxTokenFileBytes = uint64_t{1} << 33;
inline constexpr int64_t kMaxTokens = (int64_t{1} << 31) - 1;

// llm.c's token files (dev/data/data_common.py): a header of 256 little-endian int32 (magic,
// version, token count, zeros), then the tokens. GPT-2 files: magic 20240520, version 1,
// uint16 tokens; Llama 3 files: magic 20240801, version 7, uint32 tokens.
inline constexpr int32_t kLlmcGpt2Magic = 20240520;
inline constexpr int32_t kLlmcLlama3Magic = 20240801;
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;

// Each loader refuses, before reading, a file whose loading needs more memory than
// host_memory_available() gives: Error{input} "data.train.path FILE: N need about M of memory to
// load (...)" (data.eval.path for `eval`); an allocation that fails anyway is Error{runtime}
// "out of memory while loading data.train.path FILE".
//
// A text file's ids with `vocab` (data/vocab.h); `vocab` is built from the file when null.
// Error{input} "<path>: byte N: ..." for non-UTF-8 with a character vocabulary (or, with a
// given vocabulary, a character outside it), "<path>: empty".
// `eval`: the file is data.eval's (an empty one says it has no text to evaluate on).
TokenSet load_text(const std::string& path, VocabKind kind, std::optional<Vocab>& vocab,
                   bool eval = false);

// A text file's ids through `tokenizer` (as one string, on all the machine's cores: the same ids
// as on one). Error{input} for a missing or empty file, or bytes that are not UTF-8 (the offset).
TokenSet load_text(const std::string& path, const tokenize::Tokenizer& tokenizer,
                   bool eval = false);

// The loaders' check alone, before anything is read (`ampctl validate`, a sweep's checks): a text
// file (`tokenizer`: read through one) or a token file (`text` false) whose loading needs more
// memory than is available is Error{input} as the loader throws it.
void check_lm_file_memory(const std::string& path, bool eval, bool text, VocabKind kind,
                          bool tokenizer);

// A token file (raw uint16, or llm.c's header + tokens). Error{input} naming the file and byte
// offset for an empty file, an odd byte count, a wrong magic or version, a header whose count
// disagrees with the file's size, a token id >= vocab_size.
TokenSet load_token_file(const std::string& path, TokenFormat format, int64_t vocab_size,
                         bool eval = false);

// data.train / data.eval of a language model (both text, or both tokens; SourceKind::split or
// the training source's own split_fraction hold out the file's last part), checked against
// `block_size`: each part needs block_size + 1 tokens.
// `vocab` (given): a text source's vocabulary is that one instead of the file's own (the weights'
// when a run starts from them or resumes): every character of the text must be in it (else
// Error{input} naming the character and its byte offset), and its kind must be data.train.vocab's
// (else Error{config}). With data.train.tokenizer, both texts are read through it (loaded once;
// a data.eval.tokenizer must be the same file's content, else Error{config}), and a `vocab`
// given is Error{config} (the weights were trained on a character or byte vocabulary).
LmData load_lm_data(const DataOptions& options, int64_t block_size,
                    const std::optional<Vocab>& vocab = std::nullopt);

// Each part of `data` holds at least block_size + 1 tokens (one window), else Error{input}
// naming it (load_lm_data checks this for the block_size it is given).
void check_lm_windows(const LmData& data, int64_t block_size);

// How many of n tokens train when the last `fraction` is held out: floor(n * (1 - fraction))
// in double, as nanoGPT's int(n * 0.9).
int64_t lm_train_count(int64_t n, double fraction);

// The start of row `row` of batch `batch` (stream lm_train or lm_eval) over n tokens:
// uniform in [0, n - block_size).
int64_t window_start(uint64_t seed, bool eval, int64_t batch, int64_t batch_size, int64_t row,
                     int64_t n, int64_t block_size);

// Fills index[b * T + t] = start_(first_row + b) + t for rows first_row, first_row + 1, ... of
// the batch_size windows of batch `batch`: the element indices of their inputs (their targets
// are the same + 1). index holds rows * block_size values, first_row + rows <= batch_size (all
// of the batch by default; a data-parallel rank fills its own rows of the global batch).
void window_indices(uint64_t seed, bool eval, int64_t batch, int64_t batch_size, int64_t n,
                    int64_t block_size, std::span<int32_t> index, int64_t first_row = 0);

}  // namespace ampctl::data
