// The BPE tokenizer on a small hand-made byte-level vocabulary whose ids for a few words are
// worked out by hand below (merge order decides them), the round trip on seeded random UTF-8,
// parallel and chunked encoding against the one-piece encoding, added tokens, GPT-2's two-file
// form, and every refused input with the file and field its message names. (The real GPT-2,
// Llama 3 and Qwen3 tokenizers are compared with Hugging Face's and tiktoken's ids in
// tests/cli/tokenize_reference.py.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "ampctl/tokenize/tokenizer.h"
#include "ampctl/tokenize/unicode.h"
#include "unit/data/data_test_util.h"

namespace ampctl::tokenize {
namespace {

using data::testing::expect_input_error;
using data::testing::TempDir;
using data::testing::write_text;
using nlohmann::json;

std::string ch(uint8_t b) {
  std::string s;
  append_utf8(s, byte_to_unicode(b));
  return s;
}

// Ids 0..255: the byte alphabet in byte order; then the merges' results, in merge order.
json small_tokenizer(const std::string& regex = std::string(kGpt2Regex),
                     bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ch(static_cast<uint8_t>(b))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"e", "ll"}, {"h", "ell"}, {"hell", "o"}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(a + " " + b);
  }
  vocab["hello"] = 263;  // reachable by merges only when "he" is not merged first
  json pre =
      regex == kGpt2Regex
          ? json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}
          : json{{"type", "Sequence"},
                 {"pretokenizers",
                  {{{"type", "Split"},
                    {"pattern", {{"Regex", regex}}},
                    {"behavior", "Isolated"},
                    {"invert", false}},
                   {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 264},
             {"content", "<|end|>"},
             {"special", true},
             {"lstrip", false},
             {"rstrip", false},
             {"single_word", false},
             {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

Tokenizer make(const json& doc) {
  return Tokenizer::from_tokenizer_json(doc.dump(), "tokenizer.json");
}

int32_t byte_id(char c) {
  return static_cast<unsigned char>(c);
}

TEST(Tokenizer, MergesInRankOrder) {
  const Tokenizer t = make(small_tokenizer());
  // "hello": h+e (rank 1) before l+l (rank 3); then "he" "ll" "o" has no merge ("e ll" needed
  // a lone "e"), so the vocabulary's "hello" is not reached.
  EXPECT_EQ(t.encode("hello", "x"), (std::vector<int32_t>{257, 259, byte_id('o')}));
  // " the": Ġ+t (0), h+e (1), Ġt+he (2).
  EXPECT_EQ(t.encode(" the", "x"), (std::vector<int32_t>{258}));
  EXPECT_EQ(t.encode("hello the", "x"), (std::vector<int32_t>{257, 259, byte_id('o'), 258}));
  EXPECT_EQ(t.vocab_size(), 265);
  EXPECT_EQ(t.token_id("Ġthe"), 258);
  EXPECT_EQ(t.token_string(258), "Ġthe");
  EXPECT_EQ(t.decode(std::vector<int32_t>{257, 259, byte_id('o'), 258}), "hello the");
}

TEST(Tokenizer, IgnoreMergesTakesWholeWords) {
  const Tokenizer t = make(small_tokenizer(std::string(kLlama3Regex), true));
  EXPECT_EQ(t.encode("hello", "x"), (std::vector<int32_t>{263}));
  EXPECT_EQ(t.encode("hellos", "x"), (std::vector<int32_t>{257, 259, byte_id('o'), byte_id('s')}));
}

TEST(Tokenizer, AddedTokensAreWholeStrings) {
  const Tokenizer t = make(small_tokenizer());
  EXPECT_EQ(t.encode("a<|end|>the", "x"),
            (std::vector<int32_t>{byte_id('a'), 264, byte_id('t'), 257}));
  EXPECT_EQ(t.encode("<|end|", "x").size(), 6u);  // not whole: six bytes, no merge among them
  EXPECT_EQ(t.decode(std::vector<int32_t>{264}), "<|end|>");
  EXPECT_EQ(t.eos_id(), std::nullopt);  // "<|end|>" is no name ampctl knows for EOS
}

TEST(Tokenizer, LongWordsMergeAsShortOnes) {
  // A word of 200 symbols takes the heap path; the same merges apply piece by piece.
  const Tokenizer t = make(small_tokenizer());
  std::string word;
  std::vector<int32_t> expected;
  for (int i = 0; i < 40; ++i) {
    word += "hello";
    expected.insert(expected.end(), {257, 259, byte_id('o')});
  }
  EXPECT_EQ(t.encode(word, "x"), expected);
}

std::string random_utf8(std::mt19937_64& rng, size_t n) {
  std::string s;
  static const std::vector<std::string> common = {" ",     "  ", "\n",      "\t", "the",     " the",
                                                  "hello", "'s", "<|end|>", "12", "e\u0301", "!"};
  for (size_t i = 0; i < n; ++i) {
    const unsigned kind = rng() % 4;
    if (kind == 0) {
      s += common[rng() % common.size()];
    } else {
      char32_t cp = 0;
      do {
        cp = kind == 1   ? static_cast<char32_t>(rng() % 0x80)
             : kind == 2 ? static_cast<char32_t>(rng() % 0x3000)
                         : static_cast<char32_t>(rng() % 0x110000);
      } while (cp >= 0xd800 && cp <= 0xdfff);
      append_utf8(s, cp);
    }
  }
  return s;
}

TEST(Tokenizer, RoundTripsAnyUtf8) {
  std::mt19937_64 rng(2025);
  for (const std::string_view regex : {kGpt2Regex, kLlama3Regex, kQwen2Regex}) {
    const Tokenizer t = make(small_tokenizer(std::string(regex)));
    for (int trial = 0; trial < 200; ++trial) {
      const std::string text = random_utf8(rng, rng() % 60);
      const auto ids = t.encode(text, "x");
      ASSERT_EQ(t.decode(ids), text);
      for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
    }
  }
}

TEST(Tokenizer, ChunkedAndParallelEncodingGiveTheSameIds) {
  std::mt19937_64 rng(99);
  for (const std::string_view regex : {kGpt2Regex, kLlama3Regex, kQwen2Regex}) {
    const Tokenizer t = make(small_tokenizer(std::string(regex)));
    for (int trial = 0; trial < 40; ++trial) {
      std::string text;
      for (int k = 0; k < 30; ++k) text += random_utf8(rng, 5) + (rng() % 2 ? "ab cd " : "x ");
      const auto whole = t.encode(text, "x");
      for (const size_t chunk : {1, 2, 7, 64}) {
        for (const int threads : {1, 3}) {
          ASSERT_EQ(t.encode_chunked(text, "x", threads, chunk), whole)
              << "chunk " << chunk << " threads " << threads;
        }
      }
    }
  }
}

TEST(Tokenizer, NfcNormalizerComposes) {
  json doc = small_tokenizer(std::string(kQwen2Regex));
  doc["normalizer"] = {{"type", "NFC"}};
  const Tokenizer t = make(doc);
  EXPECT_TRUE(t.normalizes_nfc());
  const std::string composed = "\u00e9";
  EXPECT_EQ(t.encode("e\u0301", "x"), t.encode(composed, "x"));
  EXPECT_EQ(t.decode(t.encode("e\u0301 x", "x")), "\u00e9 x");
}

TEST(Tokenizer, RefusesWhatItCannotRead) {
  auto with = [](auto edit) {
    json doc = small_tokenizer();
    edit(doc);
    return [doc] { make(doc); };
  };
  expect_input_error(with([](json& d) { d["model"]["type"] = "WordPiece"; }),
                     {"tokenizer.json", "model.type", "WordPiece"});
  expect_input_error(with([](json& d) { d["model"]["merges"].push_back("h q"); }),
                     {"tokenizer.json", "model.merges[7]", "'hq'", "not in the vocabulary"});
  expect_input_error(with([](json& d) { d["model"]["merges"].push_back("ÿÿ z"); }),
                     {"model.merges[7]", "left part"});
  expect_input_error(with([](json& d) { d["model"]["merges"][2] = "Ġthe"; }),
                     {"model.merges[2]", "two tokens"});
  expect_input_error(with([](json& d) { d["model"]["vocab"].erase(ch('\n')); }),
                     {"model.vocab", "0x0a", "byte-level"});
  expect_input_error(with([](json& d) {
                       d["normalizer"] = {{"type", "NFKC"}};
                     }),
                     {"normalizer.type", "NFKC"});
  expect_input_error(with([](json& d) { d["pre_tokenizer"]["add_prefix_space"] = true; }),
                     {"pre_tokenizer.add_prefix_space"});
  expect_input_error(
      with([](json& d) {
        d["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}},
              {{"type", "ByteLevel"}, {"use_regex", false}}}}};
      }),
      {"pre_tokenizer.pretokenizers[0].pattern.Regex", "\\w+"});
  expect_input_error([] { Tokenizer::from_tokenizer_json("{\"model\": ", "tok.json"); },
                     {"tok.json", "not JSON"});
  const Tokenizer t = make(small_tokenizer());
  expect_input_error(
      [&] {
        t.encode(
            "abc\xff"
            "def",
            "notes.txt");
      },
      {"notes.txt", "byte 3", "not valid UTF-8"});
}

TEST(Tokenizer, Gpt2FilesAndFolders) {
  TempDir dir;
  const json doc = small_tokenizer();
  json vocab = doc["model"]["vocab"];
  vocab["model"] = 265;  // a vocab.json may hold the token "model"; it is still a vocab.json
  std::string merges = "#version: 0.2\n";
  for (const auto& m : doc["model"]["merges"]) merges += m.get<std::string>() + "\n";
  write_text(dir / "vocab.json", vocab.dump());
  write_text(dir / "merges.txt", merges);
  const Tokenizer folder = Tokenizer::load(dir.path());
  const Tokenizer file = Tokenizer::load(dir / "vocab.json");
  const Tokenizer reference = make(doc);
  for (const std::string text : {"hello the", "model the", " the the\n\n"}) {
    EXPECT_EQ(folder.encode(text, "x"), reference.encode(text, "x")) << text;
    EXPECT_EQ(file.encode(text, "x"), reference.encode(text, "x")) << text;
  }
  // Its tokenizer.json form reads back to the same tokenizer.
  const Tokenizer again = Tokenizer::from_tokenizer_json(folder.json(), "again");
  EXPECT_EQ(again.encode("hello the model", "x"), folder.encode("hello the model", "x"));

  write_text(dir / "merges.txt", "#version: 0.2\nh e\nq z\n");
  expect_input_error([&] { Tokenizer::load(dir.path()); },
                     {"merges.txt", "line 3", "'qz'", "not in the vocabulary"});
  std::filesystem::remove(dir / "merges.txt");
  expect_input_error([&] { Tokenizer::load(dir / "vocab.json"); }, {"merges.txt"});
  expect_input_error([&] { Tokenizer::load(dir.path()); }, {"neither tokenizer.json"});
  expect_input_error([&] { Tokenizer::load(dir / "missing.json"); }, {"no such file"});
  write_text(dir / "tokenizer.json", doc.dump());
  write_text(dir / "tokenizer_config.json", R"({"eos_token": "<|end|>", "bos_token": null})");
  const Tokenizer with_config = Tokenizer::load(dir.path());
  EXPECT_EQ(with_config.eos_id(), 264);
  EXPECT_EQ(with_config.bos_id(), std::nullopt);
}

}  // namespace
}  // namespace ampctl::tokenize
