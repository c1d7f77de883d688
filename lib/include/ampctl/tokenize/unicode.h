// The Unicode the tokenizer needs, without ICU: UTF-8 decoding and validation, the character
// classes of the pre-tokenizer regexes (\p{L}, \p{N}, \s) and NFC normalization (Qwen2/Qwen3's
// tokenizer.json normalizer).
//
// The tables are generated from Python's unicodedata by scripts/dev/gen_unicode_tables.py into
// lib/src/tokenize/unicode_tables.inc (unicode_version() says which Unicode). Code points assigned
// in later versions are neither letters nor numbers here; a reference built on a newer Unicode may
// split text holding them differently.
//
// Invariants: every function here is pure and thread-safe; the text functions take well-formed
// UTF-8 (checked first by utf8_error_offset) and give well-formed UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ampctl::tokenize {

const char* unicode_version();

// The byte offset of the first byte that is not well-formed UTF-8 (overlong forms, surrogates,
// code points beyond U+10FFFF, truncated or stray continuation bytes), or nullopt.
std::optional<size_t> utf8_error_offset(std::string_view text);

// The code point at byte `pos` of well-formed UTF-8 `text`; `*length` gets its byte count.
inline char32_t decode_utf8(std::string_view text, size_t pos, size_t* length) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    *length = 1;
    return b0;
  }
  const auto cont = [&](size_t i) { return static_cast<char32_t>(text[pos + i] & 0x3f); };
  if (b0 < 0xe0) {
    *length = 2;
    return (static_cast<char32_t>(b0 & 0x1f) << 6) | cont(1);
  }
  if (b0 < 0xf0) {
    *length = 3;
    return (static_cast<char32_t>(b0 & 0x0f) << 12) | (cont(1) << 6) | cont(2);
  }
  *length = 4;
  return (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void append_utf8(std::string& out, char32_t cp);

// General category L* (\p{L}), N* (\p{N}), and the White_Space property (\s in Oniguruma and
// Rust's regex: Zs, Zl, Zp, U+0009..U+000D, U+0085).
bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_white_space(char32_t cp);

// The canonical combining class (0 for starters).
int combining_class(char32_t cp);

// True when an NFC boundary may lie before `cp`: NFC(a + b) == NFC(a) + NFC(b) whenever b starts
// with such a code point (class 0 and NFC_Quick_Check Yes).
bool nfc_boundary_before(char32_t cp);

// Unicode Normalization Form C of well-formed UTF-8 (canonical decomposition, canonical
// ordering, canonical composition; Hangul by arithmetic). Text that is already NFC comes back
// unchanged, and the common case (no code point that NFC could touch) costs one scan.
std::string nfc(std::string_view text);

}  // namespace ampctl::tokenize
