// Byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2/Qwen3 and the like), read from a Hugging
// Face tokenizer.json, a folder holding one, or GPT-2's vocab.json + merges.txt.
//
// Encoding, as Hugging Face's `tokenizers` does it: the added tokens (tokenizer.json's
// added_tokens, special or not) are found first as whole strings (leftmost, longest at a
// position; lstrip/rstrip take the white space beside them); each stretch of text between
// them is normalized (NFC when tokenizer.json says so), cut into words by the pre-tokenizer
// regex (tokenize/pretokenize.h), each word's bytes mapped to GPT-2's byte alphabet
// (byte_level.h) and merged by BPE: the adjacent pair with the lowest merge rank first, the
// leftmost of equal ones, until no pair has a merge (with model.ignore_merges, a word that is
// itself in the vocabulary is that one token). No special token is added around the text.
//
// Invariants: decode(encode(x)) == normalize(x) for every well-formed UTF-8 x (x itself when the
// tokenizer has no normalizer); encode(x, threads = k) == encode(x, threads = 1) for every k (the
// text is cut only at pre-tokenizer chunk boundaries, pretokenize.h, outside added tokens); every
// id is in [0, vocab_size()). Load errors are Error{input} naming the file and the field
// ("tokenizer.json: model.type: ...", "merges.txt: line 7: ..."); text that is not UTF-8 is
// Error{input} naming its byte offset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/tokenize/pretokenize.h"

namespace ampctl::tokenize {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false;
};

class Tokenizer {
 public:
  // A tokenizer.json file, a folder holding tokenizer.json (or vocab.json + merges.txt), or a
  // vocab.json with merges.txt beside it.
  static Tokenizer load(const std::filesystem::path& path);
  // tokenizer.json's text; `origin` names it in errors.
  static Tokenizer from_tokenizer_json(std::string json_text, const std::string& origin);
  // GPT-2's two files (vocab.json: token -> id; merges.txt: "#version" line, then "a b" lines).
  // "<|endoftext|>", when in the vocabulary, is a special added token (as GPT2Tokenizer has it).
  static Tokenizer from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt,
                                   const std::string& vocab_origin,
                                   const std::string& merges_origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text`; `what` names it in errors ("data.txt"). `threads` > 1 encodes pieces in
  // parallel (same ids). `progress`, when given, is called now and then with the bytes done.
  std::vector<int32_t> encode(std::string_view text, const std::string& what, int threads = 1,
                              const std::function<void(size_t)>& progress = {}) const;
  // encode with the text cut into pieces of about `chunk_bytes` (0: chosen from the size and
  // `threads`); the same ids for every chunk_bytes (tests use tiny ones).
  std::vector<int32_t> encode_chunked(std::string_view text, const std::string& what, int threads,
                                      size_t chunk_bytes,
                                      const std::function<void(size_t)>& progress = {}) const;
  // The bytes of `ids` (each in [0, vocab_size()) and a token, else Error{invalid_argument}).
  // Not necessarily UTF-8 for an arbitrary sequence (a character's bytes may be split).
  std::string decode(std::span<const int32_t> ids) const;

  // One past the largest id (vocabulary and added tokens).
  int64_t vocab_size() const;
  // The id of a token written as in tokenizer.json (an added token's content, or a vocabulary
  // entry in the byte alphabet), or nullopt.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token of `id` as tokenizer.json writes it, or "" for an id that is no token.
  std::string token_string(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  // The BOS / EOS token: tokenizer_config.json's bos_token / eos_token when that file lies beside
  // tokenizer.json, else the first added special token named <|begin_of_text|>, <s>,
  // <|endoftext|> (BOS) or <|end_of_text|>, <|endoftext|>, </s> (EOS); nullopt when none.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  Pattern pattern() const;
  bool normalizes_nfc() const;
  // "byte-level BPE, 50257 tokens, 50000 merges, gpt2 pre-tokenizer"
  std::string describe() const;
  // The tokenizer as a tokenizer.json document: the file read, byte for byte, or (from GPT-2's
  // files) the equivalent document Hugging Face's GPT2TokenizerFast would save.
  const std::string& json() const;
  // FNV-1a 64 of json(), as 16 hex digits: names the tokenizer in caches and records.
  std::string content_hash() const;

 private:
  struct Impl;
  static Tokenizer from_document(const nlohmann::json& doc, std::string json_text,
                                 const std::string& origin);
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m;
};

// GPT-2's byte alphabet (bytes_to_unicode): the code point that stands for byte `b` in vocab
// strings: b itself for '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF, else 256 + n for the n-th
// other byte in increasing order.
char32_t byte_to_unicode(uint8_t b);
// The byte a code point stands for, or -1.
int unicode_to_byte(char32_t cp);

// FNV-1a 64 of `bytes`, as 16 lower-case hex digits.
std::string fnv1a64_hex(std::string_view bytes);

}  // namespace ampctl::tokenize
