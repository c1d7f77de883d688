// The pre-tokenizers of byte-level BPE tokenizers: the regexes that cut text into words before
// BPE runs on each word, written as scanners over Unicode classes (std::regex has no \p{L}).
//
// Three patterns, exactly as tokenizer.json spells them (kGpt2Regex, kLlama3Regex, kQwen2Regex):
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2   llama3's with \p{N} for \p{N}{1,3} (Qwen2, Qwen2.5, Qwen3)
// A scanner tries the alternatives in order at each position, as a backtracking regex engine does
// (the first alternative that matches wins, and greedy runs give back what a later part needs);
// each alternative's exact effect is written beside its code. The alternatives together match
// every character, so the words partition the text ("Isolated" split behaviour).
//
// Chunk boundaries (the proof that a file may be encoded in parallel pieces): a position p whose
// previous byte is an ASCII letter and whose byte is a space is a boundary of every pattern's
// words: the word holding the letter ends at it (no alternative continues a letter run with a
// space; a space is only ever a word's first character), and the words before p do not change
// when the text ends at p (the only lookahead, (?!\S), follows \s+, and byte p - 1 is not
// white space). The words after p start at p and read no byte before it (no lookbehind). So
// words(text) == words(text[0, p)) + words(text[p, end)); tests/unit/tokenize checks it on
// random text at every such p.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace ampctl::tokenize {

enum class Pattern { gpt2, llama3, qwen2 };

inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern a tokenizer.json regex names, or nullopt.
std::optional<Pattern> pattern_of_regex(std::string_view regex);
const char* pattern_name(Pattern pattern);

// Appends the words of well-formed UTF-8 `text` (views into it, in order, together exactly
// `text`) to `words`.
void split_words(Pattern pattern, std::string_view text, std::vector<std::string_view>& words);

// True when byte offset `p` (0 < p < text.size()) is a chunk boundary as defined above.
inline bool is_chunk_boundary(std::string_view text, size_t p) {
  const char a = text[p - 1];
  return text[p] == ' ' && ((a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z'));
}

}  // namespace ampctl::tokenize
