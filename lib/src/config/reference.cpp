// The key table of docs/reference.md, rendered from key_docs() (run_config.cpp), and the
// comparison that the docs.key_table test runs on the checked-in copy.
#include "ampctl/config/reference.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "ampctl/core/error.h"

namespace ampctl::config {

namespace {

// A table cell of text: '|' would end the cell and '<' open an HTML tag, so both are escaped
// (GitHub renders "\|" and "\<" as the characters themselves).
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|' || c == '<') out += '\\';
    out += c;
  }
  return out;
}

// A cell holding a code span: inside one, only "\|" is an escape (GitHub's table rule); any
// other backslash would be shown. Appended piecewise: GCC 12's -Wrestrict misfires on
// "`" + std::string&& here.
std::string code_cell(const std::string& text) {
  std::string out;
  if (text.empty()) return out;
  out += '`';
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  out += '`';
  return out;
}

std::string section_of(const std::string& path) {
  const size_t dot = path.find('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

constexpr const char* kTableHead =
    "| key | type | default | accepted values | applies when | help |\n"
    "|---|---|---|---|---|---|\n";

// The key of a table row ("| `scaler.init_scale` | ..."), or "" for any other line.
std::string row_key(const std::string& line) {
  if (line.rfind("| `", 0) != 0) return {};
  const size_t end = line.find('`', 3);
  return end == std::string::npos ? std::string() : line.substr(3, end - 3);
}

struct Rows {
  std::vector<std::string> order;           // keys, as they appear
  std::map<std::string, std::string> line;  // key -> its row
  std::vector<std::string> repeated;        // keys with more than one row
};

Rows rows_of(const std::string& text) {
  Rows rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string key = row_key(line);
    if (key.empty()) continue;
    if (!rows.line.emplace(key, line).second) {
      rows.repeated.push_back(key);
      continue;
    }
    rows.order.push_back(key);
  }
  return rows;
}

// Where the markers are: [begin of the generated text, its end).
std::pair<size_t, size_t> generated_span(const std::string& document) {
  const std::string begin = kKeyTableBegin, end = kKeyTableEnd;
  const size_t b = document.find(begin);
  const size_t e = document.find(end);
  if (b == std::string::npos || e == std::string::npos) {
    throw Error{ErrorKind::input,
                std::string("the key table's markers are missing: expected a line ") +
                    (b == std::string::npos ? begin : end)};
  }
  if (document.find(begin, b + 1) != std::string::npos ||
      document.find(end, e + 1) != std::string::npos) {
    throw Error{ErrorKind::input, "the key table's markers appear more than once"};
  }
  if (e < b) throw Error{ErrorKind::input, "the key table's end marker comes before its begin"};
  size_t start = b + begin.size();
  if (start < document.size() && document[start] == '\n') ++start;
  return {start, e};
}

}  // namespace

std::string key_reference_markdown(const std::vector<KeyDoc>& keys) {
  // Top-level keys first, then one table per section in declaration order.
  std::vector<std::string> sections{""};
  for (const KeyDoc& k : keys) {
    const std::string s = section_of(k.path);
    if (std::find(sections.begin(), sections.end(), s) == sections.end()) sections.push_back(s);
  }
  std::string out;
  for (const std::string& section : sections) {
    out += section.empty() ? "#### Top-level keys\n\n" : "#### `" + section + "`\n\n";
    out += kTableHead;
    for (const KeyDoc& k : keys) {
      if (section_of(k.path) != section) continue;
      const bool word = k.default_value == "required" || k.default_value == "derived";
      out += "| " + code_cell(k.path) + " | " + cell(k.type) + " | " +
             (word ? k.default_value : code_cell(k.default_value)) + " | " + cell(k.range) + " | " +
             cell(k.applies) + " | " + cell(k.help) + " |\n";
    }
    out += '\n';
  }
  return out;
}

std::string generated_part(const std::string& document) {
  const auto [start, end] = generated_span(document);
  return document.substr(start, end - start);
}

std::string replace_generated(const std::string& document, const std::string& generated) {
  const auto [start, end] = generated_span(document);
  return document.substr(0, start) + generated + document.substr(end);
}

std::vector<std::string> key_table_differences(const std::string& checked_in,
                                               const std::string& generated) {
  std::vector<std::string> out;
  const Rows have = rows_of(checked_in), want = rows_of(generated);
  for (const std::string& key : have.repeated) {
    out.push_back("row for `" + key + "` appears more than once");
  }
  for (const std::string& key : want.order) {
    auto it = have.line.find(key);
    if (it == have.line.end()) {
      out.push_back("missing row for `" + key + "` (a key without its row):\n  + " +
                    want.line.at(key));
    } else if (it->second != want.line.at(key)) {
      out.push_back("row for `" + key + "` differs from the declaration:\n  docs: " + it->second +
                    "\n  code: " + want.line.at(key));
    }
  }
  for (const std::string& key : have.order) {
    if (!want.line.count(key)) {
      out.push_back("row for `" + key + "` is not in the declaration (removed or renamed?):\n  - " +
                    have.line.at(key));
    }
  }
  if (out.empty() && have.order != want.order) out.push_back("the rows are in a different order");
  if (out.empty() && checked_in != generated) {
    out.push_back("the rows match, but the text around them (headings, table heads) differs");
  }
  return out;
}

}  // namespace ampctl::config
