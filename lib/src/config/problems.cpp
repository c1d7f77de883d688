#include "ampctl/config/problems.h"

#include <algorithm>
#include <utility>

namespace ampctl::config {

std::string Where::str() const {
  if (!has_position()) return origin;
  return origin + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string Problem::str() const {
  std::string s = where.str();
  if (!s.empty()) s += ": ";
  if (!key.empty()) s += key + ": ";
  return s + message;
}

namespace {

std::string join_problems(const std::vector<Problem>& problems) {
  std::string text;
  for (const Problem& p : problems) {
    if (!text.empty()) text += '\n';
    text += p.str();
    if (!p.hint.empty()) text += "\nhint: " + p.hint;
  }
  return text;
}

}  // namespace

ConfigError::ConfigError(ErrorKind kind, std::vector<Problem> problems)
    : Error(kind, join_problems(problems)), m_problems(std::move(problems)) {}

void Problems::add(Where where, std::string key, std::string message, std::string hint) {
  m_problems.push_back({std::move(where), std::move(key), std::move(message), std::move(hint)});
}

void Problems::throw_if_any(ErrorKind kind) const {
  if (m_problems.empty()) return;
  std::vector<Problem> sorted = m_problems;
  // Document order reads best; problems without a position keep the order they were found in.
  std::stable_sort(sorted.begin(), sorted.end(), [](const Problem& a, const Problem& b) {
    if (a.where.has_position() != b.where.has_position()) return a.where.has_position();
    if (!a.where.has_position()) return false;
    return std::pair(a.where.line, a.where.column) < std::pair(b.where.line, b.where.column);
  });
  throw ConfigError(kind, std::move(sorted));
}

size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // A third of the length: "growth_factr" (12) may be 4 edits away, "lr" only 1.
  const size_t limit = std::max<size_t>(1, (word.size() + 2) / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t dist = edit_distance(word, c);
    if (dist > 0 && dist < best_distance) {
      best = c;
      best_distance = dist;
    }
  }
  return best;
}

}  // namespace ampctl::config
