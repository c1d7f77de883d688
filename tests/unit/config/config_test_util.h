// Helpers shared by the config tests: the fixture folder, a minimal valid document, and running
// a parse that must fail to get its problems.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ampctl/config/problems.h"
#include "ampctl/config/run_config.h"

namespace ampctl::config::testing {

// tests/data/configs: from AMPCTL_TEST_DATA (set by ctest), else beside this source file.
inline std::filesystem::path configs_dir() {
  if (const char* env = std::getenv("AMPCTL_TEST_DATA"); env != nullptr && *env != '\0') {
    return std::filesystem::path(env) / "configs";
  }
  return std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "data" / "configs";
}

// The smallest valid document: the two required sections, every key at its default.
inline constexpr const char* kMinimal = "model: {}\ndata: {}\n";

// Parses `yaml` (named run.yaml) with `sets`; the test fails unless it throws a ConfigError.
inline std::vector<Problem> problems_of(const std::string& yaml,
                                        const std::vector<std::string>& sets = {},
                                        ErrorKind expected_kind = ErrorKind::config) {
  try {
    parse_config(yaml, "run.yaml", sets);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), expected_kind);
    return e.problems();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return {};
}

// The one problem of a parse that must fail with exactly one.
inline Problem only_problem(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  std::vector<Problem> problems = problems_of(yaml, sets);
  EXPECT_EQ(problems.size(), 1u) << [&] {
    std::string all;
    for (const Problem& p : problems) all += p.str() + "\n";
    return all;
  }();
  return problems.empty() ? Problem{} : problems.front();
}

}  // namespace ampctl::config::testing
