// Vocab: the strings of a language model's token ids, as `source: text` builds them and
// `ampctl sample` reads them back (from vocab.json or a checkpoint).
//
// Two kinds (docs/reference.md, "Text and token data"):
//   * character: one token per Unicode code point of the training file, in code point order
//     (nanoGPT's sorted(set(text))); each string is that one code point in UTF-8;
//   * byte: the 256 byte values; the string of byte b is the character itself for printable
//     ASCII (0x20..0x7e) and "<0xHH>" (two upper-case hex digits, sentencepiece's byte-fallback
//     spelling) for every other byte, so vocab.json stays readable and valid UTF-8.
// The JSON form is a plain array of those strings in id order. A byte vocabulary is recognised
// by its exact 256 strings (no character vocabulary can hold "<0x00>": it is six code points).
//
// Invariants: a character vocabulary holds >= 1 distinct code points, sorted ascending, none a
// surrogate; a byte vocabulary holds exactly 256 entries. Errors are Error{input}.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/data/options.h"

namespace ampctl::data {

// The next code point of `text` at byte `*pos` (advanced past it), or -1 when the bytes there
// are not well-formed UTF-8 (overlong, surrogate, beyond U+10FFFF, truncated, a stray
// continuation byte); *pos is then unchanged.
int32_t next_code_point(std::string_view text, size_t* pos);
// The UTF-8 bytes of code point `cp` (0 <= cp <= 0x10ffff, not a surrogate).
std::string utf8_of(int32_t cp);

class Vocab {
 public:
  Vocab() = default;
  // The 256 byte values.
  static Vocab bytes();
  // The given code points (sorted, distinct, valid: else Error{invalid_argument}).
  static Vocab characters(std::vector<int32_t> code_points);
  // Reads the JSON array form; `origin` starts each error (Error{input}).
  static Vocab from_json(const nlohmann::json& json, const std::string& origin);

  VocabKind kind() const { return m_kind; }
  int64_t size() const;
  // The string of token `id` (0 <= id < size()).
  std::string token_string(int64_t id) const;
  nlohmann::json to_json() const;

  // The ids of `text`. Character vocabulary: text must be UTF-8 whose code points are all in
  // the vocabulary, else Error{input} "<what>: byte OFFSET: ..." naming the character.
  std::vector<int32_t> encode(std::string_view text, const std::string& what) const;
  // The text of `ids` (each in [0, size()), else Error{invalid_argument}). A byte vocabulary's
  // output is the raw bytes (not necessarily UTF-8).
  std::string decode(std::span<const int32_t> ids) const;

  // Id of code point `cp` in a character vocabulary, or -1.
  int32_t id_of(int32_t cp) const;
  const std::vector<int32_t>& code_points() const { return m_code_points; }

  bool operator==(const Vocab&) const = default;

 private:
  VocabKind m_kind = VocabKind::character;
  std::vector<int32_t> m_code_points;  // character: sorted
};

// "U+00E9 'é'" for messages (the character itself only when printable).
std::string describe_code_point(int32_t cp);

}  // namespace ampctl::data
