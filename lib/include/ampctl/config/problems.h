// Configuration problems: where each was written, which key it is about, what is wrong and how to
// fix it. Parsing collects every problem of a configuration before it throws, so one run of
// `ampctl validate` shows them all.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ampctl/core/error.h"

namespace ampctl::config {

// Where a value was written: a file position ("run.yaml:12:3"), a command-line override
// ("--set scaler.growth_factor=0.5") or a whole document without positions ("checkpoint config").
struct Where {
  std::string origin;
  int line = 0;  // 1-based; 0 = no position
  int column = 0;

  bool has_position() const { return line > 0; }
  std::string str() const;  // "origin:line:column", or "origin" without a position
};

struct Problem {
  Where where;
  std::string key;      // dotted key path ("scaler.growth_factor"); empty when about no one key
  std::string message;  // what is wrong, e.g. "must be > 1.0, got 0.5"
  std::string hint;     // how to fix it ("did you mean 'growth_interval'?"); may be empty

  // "where: key: message" (the form of docs/reference.md, "Errors and hints"), without the hint.
  std::string str() const;
};

// Every problem of one configuration, thrown together. what() holds one line per problem, each
// followed by a "hint: ..." line when it has a hint; the app prints every other line as
// "error: LINE". hint() is empty: hints travel with their problems.
class ConfigError : public Error {
 public:
  ConfigError(ErrorKind kind, std::vector<Problem> problems);

  const std::vector<Problem>& problems() const { return m_problems; }

 private:
  std::vector<Problem> m_problems;
};

// Collects problems; throw_if_any() raises them as one ConfigError, positioned problems first in
// document order, then the rest (overrides, whole-document problems) in the order found.
class Problems {
 public:
  void add(Where where, std::string key, std::string message, std::string hint = {});
  bool empty() const { return m_problems.empty(); }
  size_t size() const { return m_problems.size(); }
  const std::vector<Problem>& list() const { return m_problems; }
  void throw_if_any(ErrorKind kind) const;

 private:
  std::vector<Problem> m_problems;
};

// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions), so both
// "growth_intervl" and "grwoth_interval" are one edit from "growth_interval".
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a plausible typo (distance at most
// a third of the word's length, and at least 1), else empty. Ties go to the earlier candidate.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace ampctl::config
