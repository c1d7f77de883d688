// Language-model data: text (character and byte vocabularies), token files (raw uint16 and
// llm.c's headers), the split, the window draws, and every bad-input case with its message.
// Expected values are computed here independently: the files are written byte by byte, the
// vocabulary by a std::set over code points decoded by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ampctl/data/lm.h"
#include "ampctl/data/random.h"
#include "ampctl/data/vocab.h"
#include "data_test_util.h"

namespace ampctl::data {
namespace {

using testing::expect_error;
using testing::expect_input_error;
using testing::TempDir;
using testing::write_bytes;
using testing::write_text;

void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::vector<uint8_t> llmc_file(int32_t magic, int32_t version, const std::vector<uint32_t>& ids,
                               int width, int64_t count = -1) {
  std::vector<uint8_t> out;
  put_le(out, static_cast<uint32_t>(magic), 4);
  put_le(out, static_cast<uint32_t>(version), 4);
  put_le(out, static_cast<uint32_t>(count < 0 ? static_cast<int64_t>(ids.size()) : count), 4);
  out.resize(1024, 0);
  for (uint32_t id : ids) put_le(out, id, width);
  return out;
}

std::vector<uint8_t> raw_file(const std::vector<uint32_t>& ids) {
  std::vector<uint8_t> out;
  for (uint32_t id : ids) put_le(out, id, 2);
  return out;
}

TEST(LmText, CharacterVocabularyIsTheSortedCodePoints) {
  TempDir dir;
  // "é" (U+00E9, 2 bytes), "€" (U+20AC, 3 bytes), "😀" (U+1F600, 4 bytes).
  const std::string text =
      "b\xc3\xa9"
      "a\xe2\x82\xac"
      "b\xf0\x9f\x98\x80"
      "a\n";
  write_text(dir / "t.txt", text);
  std::optional<Vocab> vocab;
  const TokenSet set = load_text((dir / "t.txt").string(), VocabKind::character, vocab);
  const std::vector<int32_t> cps = {'b', 0xe9, 'a', 0x20ac, 'b', 0x1f600, 'a', '\n'};
  const std::set<int32_t> distinct(cps.begin(), cps.end());
  ASSERT_TRUE(vocab);
  EXPECT_EQ(vocab->kind(), VocabKind::character);
  EXPECT_EQ(vocab->code_points(), std::vector<int32_t>(distinct.begin(), distinct.end()));
  ASSERT_EQ(set.size(), 8);
  for (size_t i = 0; i < cps.size(); ++i) {
    const auto id = static_cast<size_t>(std::distance(distinct.begin(), distinct.find(cps[i])));
    EXPECT_EQ(set.tokens[i], static_cast<int32_t>(id)) << i;
  }
  EXPECT_EQ(vocab->decode(set.tokens), text);
  // The JSON form round-trips and names each character.
  const nlohmann::json j = vocab->to_json();
  EXPECT_EQ(j[0], "\n");
  EXPECT_EQ(j.back(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Vocab::from_json(j, "v"), *vocab);
}

TEST(LmText, ByteVocabularyKeepsEveryByte) {
  TempDir dir;
  const std::vector<uint8_t> bytes = {0x00, 'A', 0xff, 0xc3, '\n', '<'};
  write_bytes(dir / "b.bin", bytes);
  std::optional<Vocab> vocab;
  const TokenSet set = load_text((dir / "b.bin").string(), VocabKind::byte, vocab);
  ASSERT_EQ(set.size(), 6);
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(set.tokens[i], bytes[i]);
  EXPECT_EQ(vocab->size(), 256);
  const nlohmann::json j = vocab->to_json();
  EXPECT_EQ(j[0], "<0x00>");
  EXPECT_EQ(j['A'], "A");
  EXPECT_EQ(j[0xff], "<0xFF>");
  EXPECT_EQ(j['\n'], "<0x0A>");
  EXPECT_EQ(Vocab::from_json(j, "v").kind(), VocabKind::byte);
  EXPECT_EQ(vocab->decode(set.tokens), std::string(bytes.begin(), bytes.end()));
}

TEST(LmText, BadTextNamesTheFileAndByte) {
  TempDir dir;
  std::optional<Vocab> vocab;
  write_text(dir / "empty.txt", "");
  expect_input_error([&] { load_text((dir / "empty.txt").string(), VocabKind::character, vocab); },
                     {"empty.txt", "empty"});
  // A stray continuation byte at 3, an overlong encoding of '/' at 2, a surrogate at 1,
  // a truncated sequence at the end.
  const std::pair<std::string, std::string> cases[] = {
      {"abc\x80z", "byte 3"},
      {"ab\xc0\xafz", "byte 2"},
      {"a\xed\xa0\x80", "byte 1"},
      {"abcd\xe2\x82", "byte 4"},
  };
  for (const auto& [text, where] : cases) {
    write_text(dir / "bad.txt", text);
    vocab.reset();
    expect_input_error([&] { load_text((dir / "bad.txt").string(), VocabKind::character, vocab); },
                       {"bad.txt", where, "UTF-8"});
    vocab.reset();  // the same bytes are fine as bytes
    EXPECT_EQ(load_text((dir / "bad.txt").string(), VocabKind::byte, vocab).size(),
              static_cast<int64_t>(text.size()));
  }
  // An evaluation text with a character the training text lacks.
  std::optional<Vocab> train_vocab = Vocab::characters({'a', 'b'});
  write_text(dir / "eval.txt", "abba\xc3\xa9");
  expect_input_error(
      [&] { load_text((dir / "eval.txt").string(), VocabKind::character, train_vocab); },
      {"eval.txt", "byte 4", "U+00E9"});
}

TEST(LmTokens, RawAndLlmcFilesReadTheSameIds) {
  TempDir dir;
  const std::vector<uint32_t> ids = {0, 1, 50256, 65535, 7, 300};
  write_bytes(dir / "raw.bin", raw_file(ids));
  write_bytes(dir / "v1.bin", llmc_file(kLlmcGpt2Magic, 1, ids, 2));
  std::vector<uint32_t> big = ids;
  big.push_back(128255);
  write_bytes(dir / "l3.bin", llmc_file(kLlmcLlama3Magic, 7, big, 4));
  const std::vector<int32_t> want(ids.begin(), ids.end());
  EXPECT_EQ(load_token_file((dir / "raw.bin").string(), TokenFormat::automatic, 65536).tokens,
            want);
  EXPECT_EQ(load_token_file((dir / "v1.bin").string(), TokenFormat::automatic, 65536).tokens, want);
  EXPECT_EQ(load_token_file((dir / "v1.bin").string(), TokenFormat::llmc, 65536).tokens, want);
  std::vector<int32_t> want_big(big.begin(), big.end());
  EXPECT_EQ(load_token_file((dir / "l3.bin").string(), TokenFormat::automatic, 128256).tokens,
            want_big);
  // format: raw reads even a file that starts like llm.c's header as uint16 tokens.
  const TokenSet as_raw = load_token_file((dir / "v1.bin").string(), TokenFormat::raw, 65536);
  EXPECT_EQ(as_raw.size(), (1024 + 12) / 2);
  EXPECT_EQ(as_raw.tokens[0], kLlmcGpt2Magic & 0xffff);
}

// format: u32 (what `ampctl tokenize` writes for vocabularies above 65536): raw little-endian
// uint32, written here byte by byte.
TEST(LmTokens, U32FilesReadRawUint32) {
  TempDir dir;
  const std::vector<uint32_t> ids = {0, 1, 65535, 65536, 128255, 151668, 7};
  std::vector<uint8_t> bytes;
  for (const uint32_t id : ids) put_le(bytes, id, 4);
  write_bytes(dir / "u32.bin", bytes);
  const std::vector<int32_t> want(ids.begin(), ids.end());
  EXPECT_EQ(load_token_file((dir / "u32.bin").string(), TokenFormat::u32, 151669).tokens, want);
  expect_input_error([&] { load_token_file((dir / "u32.bin").string(), TokenFormat::u32, 151668); },
                     {"u32.bin", "byte 20", "token id 151668"});
  bytes.resize(bytes.size() - 2);
  write_bytes(dir / "partial.bin", bytes);
  expect_input_error(
      [&] { load_token_file((dir / "partial.bin").string(), TokenFormat::u32, 151669); },
      {"partial.bin", "not a multiple of 4", "byte 24"});
}

TEST(LmTokens, BadFilesNameTheFileAndOffset) {
  TempDir dir;
  const auto path = [&](const char* name) { return (dir / name).string(); };
  write_bytes(dir / "empty.bin", {});
  expect_input_error([&] { load_token_file(path("empty.bin"), TokenFormat::automatic, 10); },
                     {"empty.bin", "empty"});
  write_bytes(dir / "odd.bin", {1, 0, 2, 0, 3});
  expect_input_error([&] { load_token_file(path("odd.bin"), TokenFormat::automatic, 10); },
                     {"odd.bin", "odd", "byte 4"});
  write_bytes(dir / "big.bin", raw_file({1, 2, 10, 3}));
  expect_input_error([&] { load_token_file(path("big.bin"), TokenFormat::automatic, 10); },
                     {"big.bin", "byte 4", "token id 10", "vocab_size 10"});
  write_bytes(dir / "magic.bin", llmc_file(12345, 1, {1, 2}, 2));
  expect_input_error([&] { load_token_file(path("magic.bin"), TokenFormat::llmc, 10); },
                     {"magic.bin", "byte 0", "magic", "12345"});
  write_bytes(dir / "v2.bin", llmc_file(kLlmcGpt2Magic, 2, {1, 2}, 2));
  expect_input_error([&] { load_token_file(path("v2.bin"), TokenFormat::automatic, 10); },
                     {"v2.bin", "byte 4", "version 2"});
  write_bytes(dir / "count.bin", llmc_file(kLlmcGpt2Magic, 1, {1, 2, 3}, 2, 5));
  expect_input_error([&] { load_token_file(path("count.bin"), TokenFormat::automatic, 10); },
                     {"count.bin", "byte 8", "5 tokens", "holds 3"});
  std::vector<uint8_t> short_header = llmc_file(kLlmcGpt2Magic, 1, {}, 2);
  short_header.resize(100);
  write_bytes(dir / "short.bin", short_header);
  expect_input_error([&] { load_token_file(path("short.bin"), TokenFormat::automatic, 10); },
                     {"short.bin", "header"});
  std::vector<uint8_t> oddv1 = llmc_file(kLlmcGpt2Magic, 1, {1, 2}, 2);
  oddv1.push_back(0);
  write_bytes(dir / "oddv1.bin", oddv1);
  expect_input_error([&] { load_token_file(path("oddv1.bin"), TokenFormat::automatic, 10); },
                     {"oddv1.bin", "whole number"});
}

TEST(LmData, SplitHoldsOutTheLastPartAsNanoGpt) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 103; ++i) text += static_cast<char>('a' + i % 7);
  write_text(dir / "t.txt", text);
  DataOptions o;
  o.train.source = SourceKind::text;
  o.train.path = (dir / "t.txt").string();
  o.train.split_fraction = 0.1;
  const LmData d = load_lm_data(o, 8);
  // int(103 * 0.9) = 92 training characters, 11 held out.
  EXPECT_EQ(d.train.size(), 92);
  ASSERT_TRUE(d.eval);
  EXPECT_EQ(d.eval->size(), 11);
  EXPECT_EQ(d.vocab_size, 7);
  EXPECT_EQ(d.vocab->decode(d.eval->tokens), text.substr(92));
  EXPECT_EQ(lm_train_count(1000, 0.1), 900);
  EXPECT_EQ(lm_train_count(1000000, 0.1), static_cast<int64_t>(1000000 * 0.9));
  // {split_fraction} in data.eval takes the same path; no split leaves no eval part.
  o.train.split_fraction = 0.0;
  EXPECT_FALSE(load_lm_data(o, 8).eval);
  SourceOptions split;
  split.source = SourceKind::split;
  split.split_fraction = 0.5;
  o.eval = split;
  EXPECT_EQ(load_lm_data(o, 8).eval->size(), 103 - 51);
  // Too short for one window of block_size + 1 tokens.
  expect_input_error([&] { load_lm_data(o, 60); }, {"t.txt", "block_size + 1 = 61"});
}

TEST(LmData, SeparateEvalFileUsesTheTrainingVocabulary) {
  TempDir dir;
  write_text(dir / "train.txt", "hello world, hello world");
  write_text(dir / "eval.txt", "world hello");
  DataOptions o;
  o.train.source = SourceKind::text;
  o.train.path = (dir / "train.txt").string();
  SourceOptions eval;
  eval.source = SourceKind::text;
  eval.path = (dir / "eval.txt").string();
  o.eval = eval;
  const LmData d = load_lm_data(o, 4);
  EXPECT_EQ(d.train.size(), 24);
  EXPECT_EQ(d.vocab->decode(d.eval->tokens), "world hello");
  // Token files: the training file's vocab_size checks the eval file too.
  write_bytes(dir / "tr.bin", raw_file({1, 2, 3, 4, 5, 6}));
  write_bytes(dir / "ev.bin", raw_file({1, 2, 9}));
  o.train = {};
  o.train.source = SourceKind::tokens;
  o.train.path = (dir / "tr.bin").string();
  o.train.vocab_size = 8;
  eval = {};
  eval.source = SourceKind::tokens;
  eval.path = (dir / "ev.bin").string();
  o.eval = eval;
  expect_input_error([&] { load_lm_data(o, 2); }, {"ev.bin", "byte 4", "token id 9"});
}

TEST(LmWindows, StartsAreUniformPhiloxDrawsAndIndicesAreConsecutive) {
  const uint64_t seed = 42;
  const int64_t n = 1000, T = 16, B = 4;
  std::vector<int32_t> index(static_cast<size_t>(B * T));
  for (int64_t batch : {0, 1, 1234567}) {
    window_indices(seed, false, batch, B, n, T, index);
    for (int64_t r = 0; r < B; ++r) {
      // Independently: Lemire's multiply-shift on the stream's 64 bits.
      const uint64_t bits =
          draw_u64(seed, DataStream::lm_train, static_cast<uint64_t>(batch * B + r));
      const auto want = static_cast<int64_t>(
          (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(n - T)) >> 64);
      EXPECT_EQ(index[static_cast<size_t>(r * T)], want);
      for (int64_t t = 1; t < T; ++t) {
        EXPECT_EQ(index[static_cast<size_t>(r * T + t)], want + t);
      }
      EXPECT_LT(want + T, n);  // the target's last token is inside
    }
  }
  // Eval windows come from their own stream.
  std::vector<int32_t> eval(index.size());
  window_indices(seed, false, 0, B, n, T, index);
  window_indices(seed, true, 0, B, n, T, eval);
  EXPECT_NE(index, eval);
  // Every start in [0, n - T) is reachable: a chi-square-free coverage check over many draws.
  const int64_t small = 20, t2 = 4;
  std::set<int64_t> seen;
  for (int64_t b = 0; b < 200; ++b) seen.insert(window_start(seed, false, b, 1, 0, small, t2));
  EXPECT_EQ(seen.size(), static_cast<size_t>(small - t2));
  EXPECT_EQ(*seen.rbegin(), small - t2 - 1);
}

TEST(LmWindows, ARanksRowsAreItsSliceOfTheGlobalBatch) {
  // Data parallel: rank r of N fills rows [r B, (r+1) B) of the global batch of B * N windows,
  // so the ranks' slices laid end to end are the global batch's indices exactly.
  const uint64_t seed = 9;
  const int64_t n = 500, T = 8, B = 3, N = 3;
  std::vector<int32_t> global(static_cast<size_t>(B * N * T));
  for (int64_t batch : {0, 7}) {
    for (bool eval : {false, true}) {
      window_indices(seed, eval, batch, B * N, n, T, global);
      std::vector<int32_t> joined;
      for (int64_t r = 0; r < N; ++r) {
        std::vector<int32_t> part(static_cast<size_t>(B * T));
        window_indices(seed, eval, batch, B * N, n, T, part, r * B);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, global);
    }
  }
  // A slice past the batch's end, or a length that is not whole windows, is refused.
  std::vector<int32_t> part(static_cast<size_t>(B * T));
  EXPECT_THROW(window_indices(seed, false, 0, B * N, n, T, part, B * N - 1), Error);
  std::vector<int32_t> ragged(static_cast<size_t>(B * T - 1));
  EXPECT_THROW(window_indices(seed, false, 0, B * N, n, T, ragged), Error);
}

TEST(Vocab, EncodeRefusesUnknownCharactersAndBadJson) {
  const Vocab v = Vocab::characters({'a', 'b', 0xe9});
  EXPECT_EQ(v.encode("ab\xc3\xa9"
                     "a",
                     "prompt"),
            (std::vector<int32_t>{0, 1, 2, 0}));
  expect_input_error([&] { v.encode("abz", "the prompt"); },
                     {"the prompt", "byte 2", "U+007A 'z'"});
  expect_input_error(
      [&] {
        Vocab::from_json(nlohmann::json::array({"a", "a"}), "vocab.json");
      },
      {"vocab.json", "entry 1", "out of order"});
  expect_input_error([&] { Vocab::from_json(nlohmann::json::array({"ab"}), "vocab.json"); },
                     {"vocab.json", "entry 0", "one character"});
  expect_input_error([&] { Vocab::from_json(nlohmann::json::object(), "vocab.json"); },
                     {"vocab.json", "array"});
}

}  // namespace
}  // namespace ampctl::data
