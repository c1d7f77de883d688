// A configuration document as plain values that remember where they were written: YAML (a file
// or a --set value) and JSON (a checkpoint's config) both become a Value tree, --set overrides
// are applied to that tree, and the schema (schema.h) reads the typed RunConfig from it. Keeping
// positions on every key and value is what lets each problem name its file:line:column.
//
// Invariants: a tree is at most kMaxDepth deep and holds at most kMaxNodes values (deeper or
// larger input — alias bombs, self-referencing anchors — is reported, never recursed into);
// overrides put a value of at most that depth under a key path of at most kMaxDepth levels.
// Map entries keep document order, duplicates included (the schema reports duplicates).
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/config/problems.h"

namespace ampctl::config {

struct Value {
  enum class Kind { null, scalar, list, map };
  struct Entry;

  Kind kind = Kind::null;
  std::string text;   // scalar: the text as written, without quotes
  bool plain = true;  // scalar: unquoted and untagged, so it may read as a number, bool or null
  std::vector<Value> items;    // list
  std::vector<Entry> entries;  // map, in document order
  Where where;                 // where the value itself starts

  bool is_null() const { return kind == Kind::null; }
  bool is_scalar() const { return kind == Kind::scalar; }
  bool is_list() const { return kind == Kind::list; }
  bool is_map() const { return kind == Kind::map; }
  // The last entry with this key (YAML leaves duplicates undefined; ours are reported anyway).
  const Entry* find(std::string_view key) const;
  Entry* find(std::string_view key);
};

struct Value::Entry {
  std::string key;
  Where key_where;  // where the key is written: the position problems about this key name
  Value value;
};

inline constexpr int kMaxDepth = 32;
inline constexpr size_t kMaxNodes = 100000;

// Parses YAML text into `out`, a mapping (an empty document is an empty mapping). Returns false,
// with the problem added, when the text is no usable mapping: broken YAML (with the parser's
// line:column), a second document, a top level that is not a mapping, more than kMaxNodes
// values. Non-scalar keys, aliases inside their own anchor and containers nested deeper than
// kMaxDepth are added to `problems` too, but leave the rest readable (they read as null).
bool parse_yaml(std::string_view text, const std::string& origin, Value& out, Problems& problems);

// A JSON value as a document without positions (every value's where is `origin`). Strings stay
// quoted scalars; numbers, booleans and null become plain scalars.
Value value_from_json(const nlohmann::json& json, const std::string& origin, Problems& problems);

// One `--set KEY=VALUE`: KEY is a dotted path, VALUE a YAML scalar or flow value.
struct Override {
  std::string spelling;          // "KEY=VALUE" as given: the origin of every problem it causes
  std::vector<std::string> key;  // KEY split at '.'
  std::string value_text;        // VALUE
  // Who said it: no origin for a command line's --set; an origin without a position for another
  // flag ("--grid"); a configuration file's line and column for a value written there (a sweep
  // section's). Problems name it so, and apply_overrides marks what it writes with it.
  Where said;
};

// Splits "KEY=VALUE". No '=', an empty key component or more than kMaxDepth components is a
// usage error (thrown at once).
Override parse_override(std::string_view arg);

// Applies overrides in order (later ones win) to `doc`, a map. Problems name an override as
// "--set KEY=VALUE" (or "--grid KEY=VALUE" for said.origin "--grid"), cut to its first 80
// characters when longer, or by its file, line and column when it was said in a file. Each value
// replaces what was at KEY (creating the maps on the way, and replacing a non-map on the way by a
// map) and the key and everything under it are marked as written by the override. A VALUE that is
// not valid YAML is added to `problems` and skipped.
// `values`, when given, keeps each override's VALUE as read (by who said it and its text), so
// applying the same overrides to many copies of one document reads each VALUE's YAML once
// (ConfigTemplate, run_config.h).
struct OverrideValues {
  struct Read {
    bool ok = false;
    Value value;        // marked as written by the override
    Problems problems;  // what reading it found
  };
  std::map<std::string, Read> by_spelling;  // where + '\n' + VALUE
};
void apply_overrides(Value& doc, const std::vector<Override>& overrides, Problems& problems,
                     OverrideValues* values = nullptr);

}  // namespace ampctl::config
