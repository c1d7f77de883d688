// CSV sources: comma-separated numbers, one sample per line, an optional header row naming the
// columns, one column the label (classification: an integer >= 0; the class count is the largest
// label + 1) or the target (regression: a float; targets = 1), every other column a feature.
//
// Accepted: surrounding spaces/tabs in a cell, "double-quoted" cells ("" inside is a quote),
// CRLF line ends, a UTF-8 byte order mark, blank lines (skipped). Numbers are read as double
// (std::from_chars, a leading '+' allowed) and must fit float. Errors are Error{input} located
// as a spreadsheet shows them, 1-based: "data.csv:17:3: not a number: 'abc'".
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "ampctl/data/dataset.h"

namespace ampctl::data {

// Classification labels above this are refused: a class count beyond it is a broken file rather
// than a model anyone trains here (the output layer alone would be hidden * 2^20 weights).
inline constexpr int64_t kMaxCsvClasses = int64_t{1} << 20;

Dataset load_csv(const std::filesystem::path& file, Task task, const LabelColumn& label_column,
                 bool header);

// The same from text; `origin` names it in messages.
Dataset parse_csv(std::string_view text, const std::string& origin, Task task,
                  const LabelColumn& label_column, bool header);

}  // namespace ampctl::data
