// The pre-tokenizer scanners: hand-derived splits of each regex (the expected words below follow
// the regex's alternation order and backtracking by hand, one comment per subtle case), and the
// chunk-boundary property that parallel encoding relies on, on seeded random text.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ampctl/tokenize/pretokenize.h"

namespace ampctl::tokenize {
namespace {

std::vector<std::string> words(Pattern p, std::string_view text) {
  std::vector<std::string_view> views;
  split_words(p, text, views);
  return {views.begin(), views.end()};
}

using V = std::vector<std::string>;

TEST(PreTokenize, RecognisesTheThreeRegexesExactly) {
  EXPECT_EQ(pattern_of_regex(kGpt2Regex), Pattern::gpt2);
  EXPECT_EQ(pattern_of_regex(kLlama3Regex), Pattern::llama3);
  EXPECT_EQ(pattern_of_regex(kQwen2Regex), Pattern::qwen2);
  EXPECT_FALSE(pattern_of_regex(std::string(kGpt2Regex) + "|x"));
  EXPECT_FALSE(pattern_of_regex(""));
}

TEST(PreTokenize, Gpt2) {
  const Pattern p = Pattern::gpt2;
  EXPECT_EQ(words(p, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(words(p, "I'm here's"), (V{"I", "'m", " here", "'s"}));
  // Case-sensitive contractions: "'S" is punctuation, then a letter.
  EXPECT_EQ(words(p, "IT'S"), (V{"IT", "'", "S"}));
  // \s+(?!\S) leaves the last space of a run to the word after it.
  EXPECT_EQ(words(p, "a  b"), (V{"a", " ", " b"}));
  // ...and a lone newline before a letter is \s+ alone (" ?\p{L}+" takes only a space).
  EXPECT_EQ(words(p, "a \n\nb"), (V{"a", " \n", "\n", "b"}));
  EXPECT_EQ(words(p, "x  "), (V{"x", "  "}));  // at the end the whole run
  EXPECT_EQ(words(p, "123abc 456"), (V{"123", "abc", " 456"}));
  EXPECT_EQ(words(p, "hi!!! ok"), (V{"hi", "!!!", " ok"}));
  EXPECT_EQ(words(p, "caf\u00e9 \u4e2d\u6587"), (V{"caf\u00e9", " \u4e2d\u6587"}));
  EXPECT_EQ(words(p, "\u00a0x"), (V{"\u00a0", "x"}));  // NBSP is \s but not the optional space
  EXPECT_EQ(words(p, ""), V{});
}

TEST(PreTokenize, Llama3) {
  const Pattern p = Pattern::llama3;
  EXPECT_EQ(words(p, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(words(p, "I'M HE'LL"), (V{"I", "'M", " HE", "'LL"}));  // (?i:...)
  EXPECT_EQ(words(p, "12345"), (V{"123", "45"}));                  // \p{N}{1,3}
  // \s*[\r\n]+ runs to the last newline of a white-space run.
  EXPECT_EQ(words(p, "a \n\nb"), (V{"a", " \n\n", "b"}));
  EXPECT_EQ(words(p, "a \n \tb"), (V{"a", " \n", " ", "\tb"}));
  EXPECT_EQ(words(p, "a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(words(p, "hi!!!\n\nok"), (V{"hi", "!!!\n\n", "ok"}));    // [\r\n]* after symbols
  EXPECT_EQ(words(p, "\tword (word"), (V{"\tword", " (", "word"}));  // one non-letter before
  EXPECT_EQ(words(p, "(word"), (V{"(word"}));        // ...but " (" is two, so " ?[^\s..]+" takes it
  EXPECT_EQ(words(p, "\nword"), (V{"\n", "word"}));  // ...but never CR or LF
  EXPECT_EQ(words(p, "3rd"), (V{"3", "rd"}));        // ...nor a number
  EXPECT_EQ(words(p, "x  "), (V{"x", "  "}));
  EXPECT_EQ(words(p, " 42"), (V{" ", "42"}));
  // U+017F LONG S case-folds to s, so "'\u017f" is a contraction; after a space the
  // apostrophe is taken by " ?[^\s\p{L}\p{N}]+" first.
  EXPECT_EQ(words(p, "'\u017f"), (V{"'\u017f"}));
  EXPECT_EQ(words(p, "it\u017fs '\u017f"), (V{"it\u017fs", " '", "\u017f"}));
}

TEST(PreTokenize, Qwen2DigitsOneByOne) {
  EXPECT_EQ(words(Pattern::qwen2, "x12345"), (V{"x", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(words(Pattern::qwen2, "a \n\nb"), (V{"a", " \n\n", "b"}));
}

// Random text from pieces that exercise every alternative.
std::string random_text(std::mt19937_64& rng, size_t pieces) {
  static const std::vector<std::string> parts = {"a",          "Z",      "word",    " ",
                                                 "  ",         "\t",     "\n",      "\r\n",
                                                 "\n\n",       "'s",     "'LL",     "'",
                                                 "1",          "2024",   "!",       "...",
                                                 "?!",         "\u00e9", "e\u0301", "\u4e2d\u6587",
                                                 "\U0001F600", "\u200d", "\u00a0",  "\u3000",
                                                 "\u0664",     "\u2028", "x y",     "ab cd"};
  std::string out;
  for (size_t i = 0; i < pieces; ++i) out += parts[rng() % parts.size()];
  return out;
}

// pretokenize.h's proof: at every chunk boundary p, the words of the text are the words of its
// two halves.
TEST(PreTokenize, ChunkBoundariesSplitNoWord) {
  std::mt19937_64 rng(45);
  int checked = 0;
  for (const Pattern p : {Pattern::gpt2, Pattern::llama3, Pattern::qwen2}) {
    for (int trial = 0; trial < 200; ++trial) {
      const std::string text = random_text(rng, 1 + rng() % 40);
      const auto whole = words(p, text);
      for (size_t cut = 1; cut < text.size(); ++cut) {
        if (!is_chunk_boundary(text, cut)) continue;
        auto left = words(p, std::string_view(text).substr(0, cut));
        const auto right = words(p, std::string_view(text).substr(cut));
        left.insert(left.end(), right.begin(), right.end());
        ASSERT_EQ(left, whole) << pattern_name(p) << " cut at " << cut << " of '" << text << "'";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// The words always cover the text exactly, in order.
TEST(PreTokenize, WordsPartitionTheText) {
  std::mt19937_64 rng(7);
  for (const Pattern p : {Pattern::gpt2, Pattern::llama3, Pattern::qwen2}) {
    for (int trial = 0; trial < 300; ++trial) {
      const std::string text = random_text(rng, 1 + rng() % 30);
      std::string joined;
      for (const auto& w : words(p, text)) {
        ASSERT_FALSE(w.empty());
        joined += w;
      }
      ASSERT_EQ(joined, text);
    }
  }
}

}  // namespace
}  // namespace ampctl::tokenize
