#include "ampctl/data/csv.h"

#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <deque>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/core/interrupt.h"
#include "ampctl/data/gz_reader.h"

namespace ampctl::data {

namespace {

std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// One CSV line split into cells. Quoted cells are unquoted; the views point into the line or,
// for cells with "" escapes, into `m_unescaped` (a deque: its strings never move).
class LineSplitter {
 public:
  LineSplitter(const std::string& origin) : m_origin(origin) {}

  const std::vector<std::string_view>& split(std::string_view line, int64_t line_no) {
    m_cells.clear();
    m_unescaped.clear();
    size_t i = 0;
    while (true) {
      size_t start = i;
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      if (i < line.size() && line[i] == '"') {
        i = quoted(line, i, line_no);
      } else {
        i = start;
        const size_t comma = line.find(',', i);
        const size_t end = comma == std::string_view::npos ? line.size() : comma;
        m_cells.push_back(trim(line.substr(i, end - i)));
        i = end;
      }
      if (i >= line.size()) break;
      ++i;  // the comma
    }
    return m_cells;
  }

 private:
  // Parses a quoted cell whose opening quote is at `i`; returns the index after the cell (at a
  // comma or the end of the line).
  size_t quoted(std::string_view line, size_t i, int64_t line_no) {
    const size_t column = m_cells.size() + 1;
    const size_t open = i++;
    bool escaped = false;
    size_t close = std::string_view::npos;
    for (; i < line.size(); ++i) {
      if (line[i] != '"') continue;
      if (i + 1 < line.size() && line[i + 1] == '"') {
        escaped = true;
        ++i;
        continue;
      }
      close = i;
      break;
    }
    if (close == std::string_view::npos) {
      throw Error{ErrorKind::input, m_origin + ":" + std::to_string(line_no) + ":" +
                                        std::to_string(column) + ": unterminated quote"};
    }
    std::string_view inner = line.substr(open + 1, close - open - 1);
    if (escaped) {
      std::string& s = m_unescaped.emplace_back();
      for (size_t k = 0; k < inner.size(); ++k) {
        s.push_back(inner[k]);
        if (inner[k] == '"') ++k;  // "" -> "
      }
      inner = s;
    }
    m_cells.push_back(inner);
    i = close + 1;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i < line.size() && line[i] != ',') {
      throw Error{ErrorKind::input, m_origin + ":" + std::to_string(line_no) + ":" +
                                        std::to_string(column) +
                                        ": unexpected text after a quoted cell"};
    }
    return i;
  }

  const std::string& m_origin;
  std::vector<std::string_view> m_cells;
  std::deque<std::string> m_unescaped;
};

enum class ParseStatus { ok, not_a_number, out_of_range, not_finite };

ParseStatus parse_number(std::string_view cell, double& out) {
  std::string_view s = cell;
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  if (s.empty()) return ParseStatus::not_a_number;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (end != s.data() + s.size()) return ParseStatus::not_a_number;
  if (ec == std::errc::result_out_of_range) return ParseStatus::out_of_range;
  if (ec != std::errc()) return ParseStatus::not_a_number;
  if (!std::isfinite(out)) return ParseStatus::not_finite;
  if (std::fabs(out) > static_cast<double>(FLT_MAX)) return ParseStatus::out_of_range;
  return ParseStatus::ok;
}

std::string quote(std::string_view s) {
  constexpr size_t kMaxShown = 40;
  std::string out(1, '\'');
  out.append(s.substr(0, kMaxShown));
  if (s.size() > kMaxShown) out.append("...");
  out.push_back('\'');
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

// The label column's 0-based index among `ncols` columns.
size_t resolve_label_column(const LabelColumn& label, const std::vector<std::string>& names,
                            size_t ncols, const std::string& origin) {
  if (!label.name.empty()) {
    if (names.empty()) {
      throw Error{ErrorKind::input,
                  origin + ": label_column '" + label.name +
                      "' is a name, and the file is read without a header",
                  "set header: true, or give the label column as an index"};
    }
    const auto it = std::find(names.begin(), names.end(), label.name);
    if (it == names.end()) {
      throw Error{ErrorKind::input,
                  origin + ": no column named '" + label.name + "' (columns: " + join(names) + ")"};
    }
    const auto again = std::find(it + 1, names.end(), label.name);
    if (again != names.end()) {
      throw Error{ErrorKind::input,
                  origin + ": column name '" + label.name + "' appears more than once (columns " +
                      std::to_string(it - names.begin() + 1) + " and " +
                      std::to_string(again - names.begin() + 1) + ")",
                  "give the label column as an index"};
    }
    return static_cast<size_t>(it - names.begin());
  }
  const auto n = static_cast<int64_t>(ncols);
  const int64_t index = label.index < 0 ? label.index + n : label.index;
  if (index < 0 || index >= n) {
    throw Error{ErrorKind::input, origin + ": label_column " + std::to_string(label.index) +
                                      " is out of range for " + std::to_string(n) +
                                      " columns (valid: " + std::to_string(-n) + " to " +
                                      std::to_string(n - 1) + ")"};
  }
  return static_cast<size_t>(index);
}

}  // namespace

Dataset parse_csv(std::string_view text, const std::string& origin, Task task,
                  const LabelColumn& label_column, bool header) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  Dataset out;
  out.task = task;
  out.origin = origin;
  const bool classification = task == Task::classification;

  LineSplitter splitter(origin);
  std::vector<std::string> names;
  size_t ncols = 0, label_col = 0;
  int64_t first_line = 0;  // the line that fixed the column count
  int64_t max_label = -1, line_no = 0;
  bool header_seen = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eol = text.find('\n', pos);
    const std::string_view line =
        text.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    ++line_no;
    if ((line_no & 1023) == 0) check_stop("parsing the CSV data");
    if (trim(line).empty()) continue;
    const auto& cells = splitter.split(line, line_no);
    // Built by appends: GCC 12 reports a false -Wrestrict for ":" + std::to_string(...).
    const auto where = [&] {
      std::string s(1, ':');
      s += std::to_string(line_no);
      return s;
    };
    if (ncols == 0) {
      ncols = cells.size();
      first_line = line_no;
      if (ncols < 2) {
        throw Error{ErrorKind::input,
                    origin + where() + ": " + std::to_string(ncols) +
                        " column; a CSV source needs at least one feature column and the label",
                    "columns are separated by commas"};
      }
      if (header) {
        for (const auto cell : cells) names.emplace_back(cell);
      }
      label_col = resolve_label_column(label_column, names, ncols, origin);
      out.features = static_cast<int64_t>(ncols) - 1;
      if (header) {
        header_seen = true;
        continue;
      }
    }
    if (cells.size() != ncols) {
      throw Error{ErrorKind::input, origin + where() + ": expected " + std::to_string(ncols) +
                                        " columns (as line " + std::to_string(first_line) +
                                        "), got " + std::to_string(cells.size())};
    }
    const int64_t sample = out.size();
    // Messages are built only on failure: this loop runs once per cell.
    const auto fail = [&](size_t c, const std::string& what, bool with_sample) {
      throw Error{ErrorKind::input,
                  origin + where() + ":" + std::to_string(c + 1) + ": " + what +
                      (with_sample ? " (sample " + std::to_string(sample) + ")" : "")};
    };
    for (size_t c = 0; c < ncols; ++c) {
      double v = 0.0;
      switch (parse_number(cells[c], v)) {
        case ParseStatus::ok:
          break;
        case ParseStatus::not_a_number:
          fail(c, "not a number: " + quote(cells[c]), false);
          break;
        case ParseStatus::out_of_range:
          fail(c, "out of float range: " + quote(cells[c]), true);
          break;
        case ParseStatus::not_finite:
          fail(c, "not finite: " + quote(cells[c]), true);
          break;
      }
      if (c != label_col) {
        out.x.push_back(static_cast<float>(v));
      } else if (!classification) {
        out.y.push_back(static_cast<float>(v));
      } else {
        if (v < 0.0 || v != std::floor(v)) {
          fail(c, "label must be an integer >= 0, got " + quote(cells[c]), true);
        }
        if (v >= static_cast<double>(kMaxCsvClasses)) {
          fail(c,
               "label " + quote(cells[c]) + " is beyond the limit of " +
                   std::to_string(kMaxCsvClasses) + " classes",
               true);
        }
        const auto label = static_cast<int32_t>(v);
        max_label = std::max<int64_t>(max_label, label);
        out.labels.push_back(label);
      }
    }
  }
  if (out.size() == 0) {
    throw Error{ErrorKind::input,
                origin + (header_seen ? ": has a header but no data rows" : ": empty file")};
  }
  if (classification) {
    out.classes = max_label + 1;
  } else {
    out.targets = 1;
  }
  return out;
}

Dataset load_csv(const std::filesystem::path& file, Task task, const LabelColumn& label_column,
                 bool header) {
  const std::string text = read_text_file(file);
  return parse_csv(text, file.string(), task, label_column, header);
}

}  // namespace ampctl::data
