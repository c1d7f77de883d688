// The bad-configuration corpus: every tests/data/configs/bad/*.yaml must fail with exactly the
// problems its trailing comments list, in order, each naming the file's line:column (or the
// --set) and the key path:
//   # set: KEY=VALUE       passed as --set, in order
//   # expect: FILE:L:C: key.path: message     one problem (FILE = the fixture's path)
//   # hint: ...            the hint of the problem above
//   # usage: message       the parse must fail with a usage error (then # hint: is its hint)
// Plus the cases a fixture cannot hold: a missing file, a directory, an empty file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "ampctl/config/run_config.h"
#include "config_test_util.h"
#include "test_util.h"

namespace ampctl::config {
namespace {

using testing::configs_dir;

struct Expectation {
  std::vector<std::string> sets;
  std::string message;  // the expected what(): problems and hints, one per line
  std::string usage;    // non-empty: a usage error with this message
  std::string usage_hint;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

Expectation read_expectation(const std::filesystem::path& file) {
  std::ifstream in(file);
  Expectation e;
  std::string line;
  bool after_usage = false;
  // Appends, not "a" + b: GCC 12 warns falsely (-Wrestrict) on the latter.
  auto append = [&](const std::string& text) {
    if (!e.message.empty()) e.message += '\n';
    e.message += replace_all(text, "FILE", file.string());
  };
  while (std::getline(in, line)) {
    if (line.rfind("# set: ", 0) == 0) {
      e.sets.push_back(line.substr(7));
    } else if (line.rfind("# expect: ", 0) == 0) {
      append(line.substr(10));
    } else if (line.rfind("# usage: ", 0) == 0) {
      e.usage = line.substr(9);
      after_usage = true;
    } else if (line.rfind("# hint: ", 0) == 0) {
      if (after_usage) {
        e.usage_hint = line.substr(8);
      } else {
        append(std::string("hint: ").append(line, 8));
      }
    }
  }
  return e;
}

TEST(ConfigCorpus, EveryBadFixtureFailsWithItsProblems) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs_dir() / "bad")) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    SCOPED_TRACE(entry.path().string());
    const Expectation e = read_expectation(entry.path());
    ASSERT_TRUE(!e.message.empty() || !e.usage.empty()) << "fixture without expectations";
    try {
      load_config(entry.path(), e.sets);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& error) {
      EXPECT_TRUE(e.usage.empty()) << "expected a usage error, got: " << error.what();
      EXPECT_EQ(error.kind(), ErrorKind::config);
      EXPECT_EQ(error.what(), e.message);
      EXPECT_TRUE(error.hint().empty());  // hints travel with their problems
      for (const Problem& p : error.problems()) {
        // Every problem is placed: a line:column in the file, or the --set that caused it
        // (only an empty file has no position to give).
        const bool placed = p.where.has_position() || p.where.origin.rfind("--set ", 0) == 0 ||
                            entry.path().filename() == "empty.yaml";
        EXPECT_TRUE(placed) << p.str();
      }
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::usage) << error.what();
      EXPECT_EQ(error.what(), e.usage);
      EXPECT_EQ(error.hint(), e.usage_hint);
    }
  }
  EXPECT_GE(count, 25);
}

// The multi-error fixture reports each of its problems, not only the first.
TEST(ConfigCorpus, AllProblemsOfOneFileAreReported) {
  try {
    load_config(configs_dir() / "bad" / "multi_error.yaml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_GE(e.problems().size(), 10u);
    std::set<std::string> keys;
    for (const Problem& p : e.problems()) keys.insert(p.key);
    for (const char* key :
         {"seed", "precision", "model.hidden[1]", "model.activaton", "data.train.path",
          "data.batch_size", "optimizer.lr", "scaler.growth_factor", "scaler.backoff_factor",
          "scaler.growth_interval", "training.max_steps", "training.grad_clip_norm"}) {
      EXPECT_TRUE(keys.count(key)) << key;
    }
  }
}

TEST(ConfigCorpus, MissingFileIsNamed) {
  const ampctl::testing::ScratchDir dir("config");
  const auto path = dir.path() / "no-such-run.yaml";
  try {
    load_config(path);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
    EXPECT_EQ(std::string(e.what()),
              path.string() + ": cannot read the configuration file: no such file");
  }
}

TEST(ConfigCorpus, DirectoryIsRefused) {
  const ampctl::testing::ScratchDir dir("config");
  try {
    load_config(dir.path());
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.path().string() +
                  ": cannot read the configuration file: is a directory, not a regular file\n"
                  "hint: give the path of a regular file");
  }
}

TEST(ConfigCorpus, EmptyFileNeedsModelAndData) {
  const ampctl::testing::ScratchDir dir("config");
  const auto path = dir.path() / "empty.yaml";
  std::ofstream(path).close();
  try {
    load_config(path);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 2u);
    EXPECT_EQ(e.problems()[0].str(),
              path.string() + ": model: missing: every configuration needs a 'model' section");
    EXPECT_EQ(e.problems()[1].key, "data");
  }
}

TEST(ConfigCorpus, UsageErrorsComeBeforeTheFile) {
  // A malformed --set is a usage error even when the file does not exist.
  try {
    load_config("/no/such/file.yaml", {"seed"});
    FAIL() << "accepted";
  } catch (const ConfigError&) {
    FAIL() << "a config error, not usage";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
  }
  for (const char* bad : {"=1", ".seed=1", "seed.=1", "a b=1", "seed"}) {
    SCOPED_TRACE(bad);
    try {
      parse_config(testing::kMinimal, "x", {bad});
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError&) {
      ADD_FAILURE() << "a config error, not usage";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ampctl::config
