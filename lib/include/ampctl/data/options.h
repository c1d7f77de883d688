// What the data module needs to know about a run's data, as plain values: which sources, how
// each is read, and whether to normalise. The train layer fills these from the run's config
// (docs/reference.md lists the `data.*` keys); the data module knows nothing of the config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ampctl/data/kinds.h"

namespace ampctl::data {

// Task, SourceKind, VocabKind, TokenFormat, DatasetSplit and their names: data/kinds.h.

// The language-model sources (windows of tokens rather than rows of features).
inline bool is_language_model(SourceKind kind) {
  return kind == SourceKind::text || kind == SourceKind::tokens;
}
// A csv label column: a header name, or an index (negative counts from the end; -1 = last).
struct LabelColumn {
  std::string name;   // non-empty: by name (needs header: true)
  int64_t index = 0;  // used when name is empty
};

// One data source. `source` says which members apply; the others are ignored.
struct SourceOptions {
  SourceKind source = SourceKind::synthetic;
  Task task = Task::classification;  // synthetic, csv (idx and fashion_mnist are classification)
  int64_t samples = 0;               // synthetic
  int64_t features = 0;              // synthetic
  int64_t classes = 0;               // synthetic classification
  std::string images, labels;        // idx: MNIST-format files (.gz accepted)
  DatasetSplit split = DatasetSplit::train;  // fashion_mnist
  std::string dir;                           // fashion_mnist
  std::string path;                          // csv, text, tokens
  LabelColumn label_column;                  // csv
  bool header = false;                       // csv: the first row names the columns
  // split (eval only): hold out this part of the training set. text, tokens (train only): the
  // last split_fraction of the tokens is the evaluation part when data.eval is null.
  double split_fraction = 0.0;
  VocabKind vocab = VocabKind::character;  // text
  std::string tokenizer;   // text: a tokenizer.json / folder / vocab.json (empty: `vocab`)
  int64_t vocab_size = 0;  // tokens: ids must be < vocab_size
  TokenFormat token_format = TokenFormat::automatic;  // tokens
};

// The training source, the optional evaluation source (or SourceKind::split), and whether every
// set is normalised with the training set's statistics.
struct DataOptions {
  SourceOptions train;
  std::optional<SourceOptions> eval;
  // data.eval's further named sets (never split), each read and checked as `eval` is.
  std::vector<SourceOptions> more_eval;
  bool normalize = false;
};

}  // namespace ampctl::data
