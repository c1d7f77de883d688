// The data module's closed choices and their YAML names: plain data with no other include, so
// the config reads the names from here (scripts/dev/check_deps.py, SHARED_HEADERS) and its
// data.* keys hold these values as they are (data/options.h says what each one means).
#pragma once

#include <utility>

namespace ampctl::data {

enum class Task { classification, regression };
enum class SourceKind { synthetic, idx, fashion_mnist, csv, split, text, tokens };
// text: how characters become token ids (data/vocab.h).
enum class VocabKind { character, byte };
// tokens: how the file is laid out (data/tokens.h). automatic: llm.c's header when the file
// starts with one of its magic numbers, else raw uint16; u32: raw little-endian uint32 (what
// `ampctl tokenize` writes for a vocabulary above 65536 tokens).
enum class TokenFormat { automatic, raw, llmc, u32 };
enum class DatasetSplit { train, test };

inline constexpr std::pair<Task, const char*> kTaskNames[] = {
    {Task::classification, "classification"}, {Task::regression, "regression"}};
// "classification" or "regression", for messages (and the config's to_string).
constexpr const char* to_string(Task task) {
  return task == Task::classification ? kTaskNames[0].second : kTaskNames[1].second;
}

inline constexpr std::pair<SourceKind, const char*> kSourceKindNames[] = {
    {SourceKind::synthetic, "synthetic"},
    {SourceKind::idx, "idx"},
    {SourceKind::fashion_mnist, "fashion_mnist"},
    {SourceKind::csv, "csv"},
    {SourceKind::split, "split"},
    {SourceKind::text, "text"},
    {SourceKind::tokens, "tokens"}};
inline constexpr std::pair<VocabKind, const char*> kVocabKindNames[] = {
    {VocabKind::character, "char"}, {VocabKind::byte, "byte"}};
inline constexpr std::pair<TokenFormat, const char*> kTokenFormatNames[] = {
    {TokenFormat::automatic, "auto"},
    {TokenFormat::raw, "raw"},
    {TokenFormat::llmc, "llmc"},
    {TokenFormat::u32, "u32"}};
inline constexpr std::pair<DatasetSplit, const char*> kDatasetSplitNames[] = {
    {DatasetSplit::train, "train"}, {DatasetSplit::test, "test"}};

}  // namespace ampctl::data
