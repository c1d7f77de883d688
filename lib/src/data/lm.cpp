#include "ampctl/data/lm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "ampctl/core/error.h"
#include "ampctl/core/format.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/data/random.h"

namespace ampctl::data {

namespace {

// Long loops poll the stop request about every million elements.
constexpr size_t kStopPoll = size_t{1} << 20;

int32_t le_i32(const uint8_t* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, 4);  // the host is little-endian (checked in checkpoint.cpp)
  return static_cast<int32_t>(v);
}

// A token id is < vocab_size, else Error{input} naming the byte offset.
void check_id(uint64_t id, int64_t vocab_size, const std::string& path, size_t offset) {
  if (id >= static_cast<uint64_t>(vocab_size)) {
    throw Error{ErrorKind::input,
                path + ": byte " + std::to_string(offset) + ": token id " + std::to_string(id) +
                    " is not below vocab_size " + std::to_string(vocab_size),
                "data.train.vocab_size must exceed every id in the file (GPT-2's is 50257, "
                "often padded to 50304)"};
  }
}

void check_count(int64_t n, const std::string& path) {
  if (n > kMaxTokens) {
    throw Error{ErrorKind::input, path + ": holds " + std::to_string(n) +
                                      " tokens, more than the " + std::to_string(kMaxTokens) +
                                      " one set may hold (device indices are int32)"};
  }
}

// Splits `all` into its first lm_train_count tokens and the rest.
void split_tail(TokenSet& all, double fraction, std::optional<TokenSet>& eval) {
  const int64_t n = all.size();
  const int64_t keep = lm_train_count(n, fraction);
  TokenSet held;
  held.tokens.assign(all.tokens.begin() + keep, all.tokens.end());
  held.origin = all.origin + " (the last " + fmt(fraction * 100.0) + "%)";
  all.tokens.resize(static_cast<size_t>(keep));
  all.tokens.shrink_to_fit();
  eval = std::move(held);
}

void check_length(const TokenSet& set, int64_t block_size, const char* part) {
  if (set.size() < block_size + 1) {
    throw Error{ErrorKind::input,
                set.origin + ": " + std::to_string(set.size()) + " tokens in the " + part +
                    " part, fewer than block_size + 1 = " + std::to_string(block_size + 1) +
                    " (one window)",
                "use a longer file, a smaller model.block_size or a smaller split_fraction"};
  }
}

void require_text_file(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    // The usual first-run stumble: the corpus has not been written yet, or a path is relative to
    // the wrong folder (the config file's for a path the file says, the current directory's for
    // an override's: docs/reference.md, "Data sources").
    throw Error{ErrorKind::input, "text data " + path + ": no such file",
                path.find("fortunes") != std::string::npos
                    ? "configs/gpt_fortunes.yaml's corpus is written by 'bash "
                      "scripts/examples/fortunes_corpus.sh' (into the repository's data/)"
                    : "a relative path in a config file is read from the file's folder, one "
                      "given with --set from the current directory"};
  }
}

// An empty text file, named by the key that gave it (data.eval's says it has nothing to
// evaluate on, not nothing to train on).
Error empty_text(const std::string& path, bool eval) {
  return Error{ErrorKind::input, eval
                                     ? "data.eval.path " + path + ": empty (no text to evaluate on)"
                                     : "data.train.path " + path + ": empty (no text to train on)"};
}

// Refuses, before a byte is read, a data file whose loading would need more memory than the host
// (or the process's limit) has: `per_byte` bytes for each byte of the file at the loader's peak
// (`held` says what), Error{input} naming the key (exit 2).
void check_load_memory(const std::string& path, const std::string& key, uint64_t per_byte,
                       const char* held, uint64_t max_bytes) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  // The reader reports what it is: unreadable, empty, or past the fixed limit for the file (a
  // rule of the format, whatever memory the host has).
  if (ec || size == 0 || size > max_bytes) return;
  const std::optional<uint64_t> available = host_memory_available();
  const uint64_t need = size > UINT64_MAX / per_byte ? UINT64_MAX : size * per_byte;
  if (!available || need <= *available) return;
  throw Error{ErrorKind::input,
              key + " " + path + ": " + format_bytes(size) + " need about " + format_bytes(need) +
                  " of memory to load (" + held + "), and " + format_bytes(*available) +
                  " is available",
              "use a smaller file, or free memory / raise the process's limit (ulimit -v)"};
}

std::string path_key(bool eval) {
  return eval ? "data.eval.path" : "data.train.path";
}

// An allocation that fails anyway (another process took the memory) is an error naming the file.
[[noreturn]] void out_of_memory_loading(const std::string& path, bool eval) {
  throw Error{ErrorKind::runtime,
              "out of memory while loading " + path_key(eval) + " " + path + " (its tokens)",
              "use a smaller file, or free memory / raise the process's limit (ulimit -v)"};
}

TokenSet load_text_tokenized(const std::string& path, const tokenize::Tokenizer& tokenizer,
                             bool eval);
TokenSet load_text_vocab(const std::string& path, VocabKind kind, std::optional<Vocab>& vocab,
                         bool eval);
TokenSet load_token_file_read(const std::string& path, TokenFormat format, int64_t vocab_size);

}  // namespace

void check_lm_file_memory(const std::string& path, bool eval, bool text, VocabKind kind,
                          bool tokenizer) {
  if (!text) {
    check_load_memory(path, path_key(eval), 3, "the file and its tokens as 4-byte ids",
                      kMaxTokenFileBytes);
  } else if (tokenizer) {
    check_load_memory(path, path_key(eval), 9, "the text, its pre-tokenized pieces and the ids",
                      kMaxTextBytes);
  } else if (kind == VocabKind::byte) {
    check_load_memory(path, path_key(eval), 5, "the text and one 4-byte id per byte",
                      kMaxTextBytes);
  } else {
    check_load_memory(path, path_key(eval), 9, "the text, its code points and their ids",
                      kMaxTextBytes);
  }
}

TokenSet load_text(const std::string& path, const tokenize::Tokenizer& tokenizer, bool eval) {
  require_text_file(path);
  // The text, its pieces and their ids: the ids are at most one per byte (4 bytes each), the
  // pieces' bookkeeping about as much again.
  check_lm_file_memory(path, eval, true, VocabKind::character, /*tokenizer=*/true);
  try {
    return load_text_tokenized(path, tokenizer, eval);
  } catch (const std::bad_alloc&) {
    out_of_memory_loading(path, eval);
  }
}

namespace {
TokenSet load_text_tokenized(const std::string& path, const tokenize::Tokenizer& tokenizer,
                             bool eval) {
  const std::string text = read_regular_file(path, kMaxTextBytes, "text data");
  if (text.empty()) throw empty_text(path, eval);
  TokenSet out;
  out.origin = path;
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  out.tokens = tokenizer.encode(text, path, threads);
  check_count(out.size(), path);
  return out;
}
}  // namespace

TokenSet load_text(const std::string& path, VocabKind kind, std::optional<Vocab>& vocab,
                   bool eval) {
  require_text_file(path);
  // At the peak: the text and one int32 id per byte (byte vocabulary); a character one holds the
  // text, its code points (4 bytes per byte at most) and then either their sorted copy (building
  // the vocabulary) or the ids.
  check_lm_file_memory(path, eval, true, kind, /*tokenizer=*/false);
  try {
    return load_text_vocab(path, kind, vocab, eval);
  } catch (const std::bad_alloc&) {
    out_of_memory_loading(path, eval);
  }
}

namespace {
TokenSet load_text_vocab(const std::string& path, VocabKind kind, std::optional<Vocab>& vocab,
                         bool eval) {
  const std::string text = read_regular_file(path, kMaxTextBytes, "text data");
  if (text.empty()) throw empty_text(path, eval);
  TokenSet out;
  out.origin = path;
  if (kind == VocabKind::byte) {
    if (!vocab) vocab = Vocab::bytes();
    out.tokens.resize(text.size());
    for (size_t i = 0; i < text.size(); ++i) out.tokens[i] = static_cast<uint8_t>(text[i]);
    check_count(out.size(), path);
    return out;
  }
  // Character vocabulary: decode once into code points, then map to ids.
  std::vector<int32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if ((cps.size() & (kStopPoll - 1)) == 0) check_stop("reading the text data");
    const size_t at = pos;
    const int32_t cp = next_code_point(text, &pos);
    if (cp < 0) {
      throw Error{ErrorKind::input, path + ": byte " + std::to_string(at) + ": not valid UTF-8",
                  "vocab: char reads UTF-8 text; use vocab: byte for any other bytes"};
    }
    cps.push_back(cp);
  }
  check_count(static_cast<int64_t>(cps.size()), path);
  if (!vocab) {
    std::vector<int32_t> distinct = cps;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    vocab = Vocab::characters(std::move(distinct));
  }
  out.tokens.resize(cps.size());
  size_t at = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const int32_t id = vocab->id_of(cps[i]);
    if (id < 0) {
      throw Error{ErrorKind::input,
                  path + ": byte " + std::to_string(at) + ": the character " +
                      describe_code_point(cps[i]) + " is not in the vocabulary",
                  "a text read with another's vocabulary (an evaluation text: data.train's; a run "
                  "started from weights or resumed: the weights') may only use its characters"};
    }
    out.tokens[i] = id;
    at += utf8_of(cps[i]).size();
  }
  return out;
}
}  // namespace

TokenSet load_token_file(const std::string& path, TokenFormat format, int64_t vocab_size,
                         bool eval) {
  // The file and one int32 id per 2 bytes at most.
  check_lm_file_memory(path, eval, false, VocabKind::byte, false);
  try {
    return load_token_file_read(path, format, vocab_size);
  } catch (const std::bad_alloc&) {
    out_of_memory_loading(path, eval);
  }
}

namespace {
TokenSet load_token_file_read(const std::string& path, TokenFormat format, int64_t vocab_size) {
  const std::string bytes_s = read_regular_file(path, kMaxTokenFileBytes, "token data");
  const auto* bytes = reinterpret_cast<const uint8_t*>(bytes_s.data());
  const size_t size = bytes_s.size();
  if (size == 0) throw Error{ErrorKind::input, path + ": empty (no tokens)"};
  bool llmc = format == TokenFormat::llmc;
  if (format == TokenFormat::automatic && size >= 4) {
    const int32_t magic = le_i32(bytes);
    llmc = magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic;
  }
  TokenSet out;
  out.origin = path;
  size_t first = 0, width = 2;
  if (llmc) {
    if (size < kLlmcHeaderBytes) {
      throw Error{ErrorKind::input, path + ": " + std::to_string(size) +
                                        " bytes, shorter than llm.c's header of " +
                                        std::to_string(kLlmcHeaderBytes) + " bytes"};
    }
    const int32_t magic = le_i32(bytes), version = le_i32(bytes + 4), count = le_i32(bytes + 8);
    if (magic != kLlmcGpt2Magic && magic != kLlmcLlama3Magic) {
      throw Error{ErrorKind::input,
                  path + ": byte 0: wrong magic number " + std::to_string(magic) +
                      " (llm.c's token files start with " + std::to_string(kLlmcGpt2Magic) +
                      ", or " + std::to_string(kLlmcLlama3Magic) + " for Llama 3)",
                  "for nanoGPT's raw uint16 files set format: raw"};
    }
    const int32_t want = magic == kLlmcGpt2Magic ? 1 : 7;
    if (version != want) {
      throw Error{ErrorKind::input, path + ": byte 4: unsupported version " +
                                        std::to_string(version) + " for magic " +
                                        std::to_string(magic) + " (llm.c writes version " +
                                        std::to_string(want) + ")"};
    }
    width = magic == kLlmcGpt2Magic ? 2 : 4;
    first = kLlmcHeaderBytes;
    const size_t payload = size - first;
    if (payload % width != 0) {
      throw Error{ErrorKind::input, path + ": " + std::to_string(payload) +
                                        " bytes after the header, not a whole number of " +
                                        std::to_string(width) + "-byte tokens"};
    }
    if (count < 0 || static_cast<size_t>(count) != payload / width) {
      throw Error{ErrorKind::input,
                  path + ": byte 8: the header says " + std::to_string(count) +
                      " tokens, the file holds " + std::to_string(payload / width),
                  "the file is truncated or was not written by llm.c"};
    }
  } else if (format == TokenFormat::u32) {
    width = 4;
    if (size % 4 != 0) {
      throw Error{ErrorKind::input,
                  path + ": " + std::to_string(size) +
                      " bytes, not a multiple of 4: not a file of uint32 tokens (byte " +
                      std::to_string(size - size % 4) + " starts a partial token)"};
    }
  } else if (size % 2 != 0) {
    throw Error{ErrorKind::input, path + ": " + std::to_string(size) +
                                      " bytes, an odd count: not a file of uint16 tokens (byte " +
                                      std::to_string(size - 1) + " is half a token)"};
  }
  const size_t n = (size - first) / width;
  if (n == 0) throw Error{ErrorKind::input, path + ": holds no tokens after the header"};
  check_count(static_cast<int64_t>(n), path);
  out.tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if ((i & (kStopPoll - 1)) == 0) check_stop("reading the token data");
    const size_t at = first + i * width;
    uint32_t id = 0;
    if (width == 2) {
      id = static_cast<uint32_t>(bytes[at]) | static_cast<uint32_t>(bytes[at + 1]) << 8;
    } else {
      std::memcpy(&id, bytes + at, 4);
    }
    check_id(id, vocab_size, path, at);
    out.tokens[i] = static_cast<int32_t>(id);
  }
  return out;
}
}  // namespace

void check_lm_windows(const LmData& data, int64_t block_size) {
  check_length(data.train, block_size, "training");
  if (data.eval) check_length(*data.eval, block_size, "evaluation");
  for (const TokenSet& more : data.more_eval) check_length(more, block_size, "evaluation");
}

int64_t lm_train_count(int64_t n, double fraction) {
  return static_cast<int64_t>(std::floor(static_cast<double>(n) * (1.0 - fraction)));
}

LmData load_lm_data(const DataOptions& options, int64_t block_size,
                    const std::optional<Vocab>& vocab) {
  const SourceOptions& train = options.train;
  if (!is_language_model(train.source)) {
    throw Error{ErrorKind::invalid_argument, "load_lm_data: data.train is not text or tokens"};
  }
  LmData out;
  if (train.source == SourceKind::text && !train.tokenizer.empty()) {
    if (vocab) {
      throw Error{ErrorKind::config,
                  "data.train.tokenizer: the weights were trained with a " +
                      std::string(vocab->kind() == VocabKind::byte ? "byte" : "char") +
                      " vocabulary, not a tokenizer",
                  "read the text as they were: leave data.train.tokenizer out"};
    }
    out.tokenizer =
        std::make_shared<const tokenize::Tokenizer>(tokenize::Tokenizer::load(train.tokenizer));
    out.train = load_text(train.path, *out.tokenizer);
    out.vocab_size = out.tokenizer->vocab_size();
  } else if (train.source == SourceKind::text) {
    if (vocab && vocab->kind() != train.vocab) {
      const auto name = [](VocabKind k) { return k == VocabKind::byte ? "byte" : "char"; };
      throw Error{ErrorKind::config,
                  std::string("data.train.vocab: ") + name(train.vocab) +
                      ", but the weights were trained with a " + name(vocab->kind()) +
                      " vocabulary",
                  std::string("set data.train.vocab: ") + name(vocab->kind())};
    }
    out.vocab = vocab;
    out.train = load_text(train.path, train.vocab, out.vocab);
    out.vocab_size = out.vocab->size();
  } else {
    out.train = load_token_file(train.path, train.token_format, train.vocab_size);
    out.vocab_size = train.vocab_size;
  }
  // One evaluation source of data.train's kind, read with its vocabulary or tokenizer.
  const auto load_eval = [&](const SourceOptions& eval, std::optional<TokenSet>& into) {
    if (eval.source != train.source) {
      throw Error{ErrorKind::config,
                  "data.eval: a language model's evaluation source must be "
                  "of data.train's kind (" +
                      std::string(train.source == SourceKind::text ? "text" : "tokens") + ")"};
    }
    if (eval.source == SourceKind::text && out.tokenizer) {
      if (!eval.tokenizer.empty() && eval.tokenizer != train.tokenizer &&
          tokenize::Tokenizer::load(eval.tokenizer).content_hash() !=
              out.tokenizer->content_hash()) {
        throw Error{ErrorKind::config,
                    "data.eval.tokenizer: " + eval.tokenizer + " is not data.train's tokenizer (" +
                        train.tokenizer + ")",
                    "the evaluation text is read with the training text's tokenizer: leave "
                    "data.eval.tokenizer out"};
      }
      into = load_text(eval.path, *out.tokenizer, /*eval=*/true);
    } else if (eval.source == SourceKind::text && !eval.tokenizer.empty()) {
      throw Error{ErrorKind::config,
                  "data.eval.tokenizer: data.train reads its text without a tokenizer",
                  "set data.train.tokenizer too, or leave data.eval.tokenizer out"};
    } else if (eval.source == SourceKind::text) {
      into = load_text(eval.path, train.vocab, out.vocab, /*eval=*/true);
    } else {
      into = load_token_file(eval.path, eval.token_format, train.vocab_size, /*eval=*/true);
    }
  };
  double fraction = 0.0;
  if (!options.eval) {
    fraction = train.split_fraction;
  } else if (options.eval->source == SourceKind::split) {
    fraction = options.eval->split_fraction;
  } else {
    load_eval(*options.eval, out.eval);
  }
  for (const SourceOptions& more : options.more_eval) {
    std::optional<TokenSet> set;
    load_eval(more, set);
    out.more_eval.push_back(std::move(*set));
  }
  if (fraction > 0.0) {
    if (!(fraction < 1.0)) {
      throw Error{ErrorKind::config, "split_fraction must be in [0, 1), got " + fmt(fraction)};
    }
    split_tail(out.train, fraction, out.eval);
  }
  check_lm_windows(out, block_size);
  return out;
}

int64_t window_start(uint64_t seed, bool eval, int64_t batch, int64_t batch_size, int64_t row,
                     int64_t n, int64_t block_size) {
  const DataStream stream = eval ? DataStream::lm_eval : DataStream::lm_train;
  const auto index =
      static_cast<uint64_t>(batch) * static_cast<uint64_t>(batch_size) + static_cast<uint64_t>(row);
  const auto bound = static_cast<uint64_t>(n - block_size);
  return static_cast<int64_t>(uniform_below(draw_u64(seed, stream, index), bound));
}

void window_indices(uint64_t seed, bool eval, int64_t batch, int64_t batch_size, int64_t n,
                    int64_t block_size, std::span<int32_t> index, int64_t first_row) {
  const auto size = static_cast<int64_t>(index.size());
  if (block_size < 1 || size % block_size != 0 || first_row < 0 ||
      first_row + size / block_size > batch_size || n <= block_size) {
    throw Error{ErrorKind::invalid_argument, "window_indices: bad sizes"};
  }
  for (int64_t r = 0; r < size / block_size; ++r) {
    const int64_t start = window_start(seed, eval, batch, batch_size, first_row + r, n, block_size);
    int32_t* row = index.data() + r * block_size;
    for (int64_t t = 0; t < block_size; ++t) row[t] = static_cast<int32_t>(start + t);
  }
}

}  // namespace ampctl::data
