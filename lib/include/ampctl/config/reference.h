// The configuration keys as the user reference shows them: docs/reference.md's key table is
// rendered from the field tables of run_config.cpp (the one declaration of every key), so the
// table cannot drift from what the parser accepts. `ampctl_gen_reference --write` rewrites the
// table in the document; `--check` (a ctest test) fails when the checked-in table differs from
// the declaration, naming each missing, changed or extra row.
//
// Invariants: key_docs() lists every key of the declaration once, in table order, each with a
// non-empty path, type and help; the rendered table has one line per key, so a difference is a
// difference of whole rows.
#pragma once

#include <string>
#include <vector>

namespace ampctl::config {

// One key, as the reference describes it.
struct KeyDoc {
  std::string path;           // full dotted key path: "scaler.init_scale"
  std::string type;           // "int", "float", "bool", "string", "choice", "list of int", ...
  std::string default_value;  // as YAML writes it; "required" or "derived" where there is none
  std::string range;          // the accepted values in words ("> 0.0", "fp16, bf16, fp32"), or ""
  std::string applies;        // "optimizer.type is adam or adamw"; "" = always
  std::string help;
};

// Every key of the run configuration, in declaration order (defined in run_config.cpp, beside
// the tables).
std::vector<KeyDoc> key_docs();

// The markers around the generated part of docs/reference.md.
inline constexpr const char* kKeyTableBegin =
    "<!-- config-keys:begin (generated from lib/src/config/run_config.cpp by "
    "ampctl_gen_reference; do not edit by hand) -->";
inline constexpr const char* kKeyTableEnd = "<!-- config-keys:end -->";

// The key table as Markdown: one table per section (top-level keys first), one line per key.
std::string key_reference_markdown(const std::vector<KeyDoc>& keys);
inline std::string key_reference_markdown() {
  return key_reference_markdown(key_docs());
}

// `document` with the text between the markers replaced by `generated`. Throws Error{input}
// when the markers are missing, repeated or out of order.
std::string replace_generated(const std::string& document, const std::string& generated);

// The text between the markers (without them). Throws as replace_generated.
std::string generated_part(const std::string& document);

// How the checked-in table differs from the generated one, one message per row: "missing row
// for `k`: ...", "row for `k` differs: ...", "row for `k` is not in the declaration: ...", and
// "the rows are in a different order" when only their order differs. Empty when they are equal.
std::vector<std::string> key_table_differences(const std::string& checked_in,
                                               const std::string& generated);

}  // namespace ampctl::config
