// `base:` (docs/reference.md, "base:"): a configuration file that starts from others. A file's
// top-level `base:` names one file or a list of them, each relative to the folder of the file
// that names it; each base is read (its own bases first) and the file is merged over it key by
// key: maps merge recursively, anything else (a scalar, a list, null) is replaced whole by the
// file's value, and a key only the base has is kept. With a list, a later base wins over an
// earlier one and the file over all of them.
//
// Every value keeps the Where of the file that wrote it, so a problem names that file's line and
// column, a relative path is read from that file's folder (run_config.cpp, resolve_paths), and
// `ampctl validate` prints each key's origin.
//
// Invariants: a file that is its own base (directly or through others) is a problem naming both
// files, never a loop; bases nest at most kMaxBaseDepth deep; at most kMaxBaseFiles base files and
// kMaxNodes values in all are read for one document.
#pragma once

#include <string>

#include "ampctl/config/document.h"
#include "ampctl/config/problems.h"

namespace ampctl::config {

inline constexpr int kMaxBaseDepth = 16;
inline constexpr int kMaxBaseFiles = 64;

// Replaces the `base:` entry of `doc` (the document of the file `origin`, a map) by the merge of
// its bases under the document. What is wrong (a base that is missing or unreadable, a cycle, a
// `base:` that is not a file name or a list of them, a second `base:`) is added to `problems`,
// naming the file and line of the `base:` that says it; what can be read is still merged, so the
// schema reports the rest.
void merge_bases(Value& doc, const std::string& origin, Problems& problems);

// `over` merged onto `under` (both maps): for each of over's keys, a map under a map merges
// recursively, anything else replaces under's value (and its key's Where); under's other keys
// stay, in their order, over's new ones follow in theirs. A key `over` writes twice is kept
// twice, so the schema still reports the duplicate.
void merge_over(Value& under, Value over);

}  // namespace ampctl::config
