// The sweep: section is parsed like the rest of the configuration: broken YAML, a TAB, deep
// nesting, duplicate keys anywhere in it and a second sweep: section are ConfigErrors with
// file:line, never a section that is dropped so that the base run alone is trained.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ampctl/config/problems.h"
#include "ampctl/core/error.h"
#include "ampctl/sweep/sweep.h"

namespace ampctl::sweep {
namespace {

const std::string kBase = R"(name: tiny
device: cpu
model: {type: mlp, hidden: [8]}
data:
  train: {source: synthetic, task: classification, samples: 128, features: 4, classes: 3}
  batch_size: 32
training: {max_steps: 4}
)";  // 7 lines: the sweep section starts on line 8

// The problems parse_sweep reports, as "origin:line:col: key: message" lines.
std::vector<std::string> problems_of(const std::string& text) {
  try {
    parse_sweep(text, "s.yaml");
  } catch (const config::ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    std::vector<std::string> out;
    for (const config::Problem& p : e.problems()) out.push_back(p.str());
    return out;
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return {};
}

bool has(const std::vector<std::string>& problems, const std::string& part) {
  for (const std::string& p : problems) {
    if (p.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(SweepStrict, BrokenYamlInTheSectionIsAnError) {
  const auto p = problems_of(kBase + "sweep:\n  grid: {optimizer.lr: [1e-3, 2e-3}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("s.yaml:9:", 0), 0u) << p[0];
  EXPECT_TRUE(has(p, "invalid YAML")) << p[0];
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  grid:\n\toptimizer.lr: [1e-3]\n"), "s.yaml:1"));
}

TEST(SweepStrict, DeepNestingIsAnError) {
  const std::string deep = std::string(3000, '[') + "1" + std::string(3000, ']');
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  grid: {seed: [1]}\n  runs: " + deep + "\n"),
                  "s.yaml:10:"));
  const std::string nested = std::string(40, '[') + "1" + std::string(40, ']');
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  grid: {seed: " + nested + "}\n"),
                  "nested more than 32 levels deep"));
}

TEST(SweepStrict, DuplicateKeysAreErrorsWithBothPlaces) {
  const auto grid =
      problems_of(kBase + "sweep:\n  grid:\n    optimizer.lr: [1e-3]\n    optimizer.lr: [2e-3]\n");
  ASSERT_EQ(grid.size(), 1u);
  EXPECT_EQ(grid[0], "s.yaml:11:5: sweep.grid.optimizer.lr: duplicate key (also at s.yaml:10:5)");
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  grid: {seed: [1], seed: [2]}\n"),
                  "sweep.grid.seed: duplicate key"));
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  runs: [{seed: 1}, {seed: 2, seed: 3}]\n"),
                  "sweep.runs[1].seed: duplicate key"));
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  seeds: [1]\n  seeds: [2]\n"),
                  "sweep.seeds: duplicate key"));
  EXPECT_TRUE(has(problems_of(kBase + "sweep:\n  random: {n: 2, n: 3, params: {seed: {choice: "
                                      "[1, 2]}}}\n"),
                  "sweep.random.n: duplicate key"));
}

TEST(SweepStrict, ASecondSectionIsAnError) {
  const auto p = problems_of(kBase +
                             "sweep:\n  grid: {optimizer.lr: [1e-3]}\nsweep:\n  grid: "
                             "{seed: [1, 2]}\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "s.yaml:10:1: sweep: a second sweep: section (the first is at s.yaml:8:1)");
}

TEST(SweepStrict, ARunListedTwiceIsAnError) {
  // Found by fuzz_sweep: two identical runs got the same folder name.
  for (const std::string& section :
       {std::string("sweep:\n  seeds: [0, 0]\n"), std::string("sweep:\n  grid: {seed: [3, 3]}\n"),
        std::string("sweep:\n  runs: [{seed: 1}, {seed: 1}]\n")}) {
    try {
      parse_sweep(kBase + section, "s.yaml");
      ADD_FAILURE() << "accepted: " << section;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_NE(std::string(e.what()).find("s.yaml: sweep: the run 'seed="), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("is listed twice"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_sweep(kBase, "s.yaml", {"seed=1,1"}), Error);
  // Random draws that repeat (six draws from two choices) are dropped, not refused.
  const Sweep random = parse_sweep(
      kBase + "sweep:\n  random: {n: 6, seed: 0, params: {seed: {choice: [1, 2]}}}\n", "s.yaml");
  ASSERT_EQ(random.runs.size(), 2u);
  EXPECT_NE(random.runs[0].name, random.runs[1].name);
}

TEST(SweepStrict, GoodSectionsStillExpand) {
  const Sweep s =
      parse_sweep(kBase + "sweep:\n  grid: {scaler.init_scale: [1, 2]}\n  seeds: [5]\n", "s.yaml");
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.runs[0].overrides, (std::vector<std::string>{"scaler.init_scale=1", "seed=5"}));
  // The same key in two runs (different mappings) is no duplicate.
  EXPECT_EQ(parse_sweep(kBase + "sweep:\n  runs: [{seed: 1}, {seed: 2}]\n", "s.yaml").runs.size(),
            2u);
}

}  // namespace
}  // namespace ampctl::sweep
