// The reference's key table (config/reference.h): every key is documented with a type and help,
// the documented defaults are the parser's (checked through --set, a second way in), every key
// the resolved dump can write has a row, and the table comparison names each drifted row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ampctl/config/reference.h"
#include "ampctl/config/run_config.h"
#include "ampctl/core/error.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::configs_dir;
using testing::kMinimal;

void collect_paths(const nlohmann::json& j, const std::string& prefix, std::set<std::string>& out) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) {
      collect_paths(value, prefix + key + ".", out);
    } else {
      out.insert(prefix + key);
    }
  }
}

std::set<std::string> documented_paths() {
  std::set<std::string> paths;
  for (const KeyDoc& k : key_docs()) paths.insert(k.path);
  return paths;
}

TEST(KeyReference, EveryKeyHasTypeDefaultAndHelp) {
  const std::vector<KeyDoc> keys = key_docs();
  ASSERT_GT(keys.size(), 50u);
  std::set<std::string> seen;
  for (const KeyDoc& k : keys) {
    EXPECT_FALSE(k.path.empty());
    EXPECT_TRUE(seen.insert(k.path).second) << k.path << " is documented twice";
    EXPECT_FALSE(k.help.empty()) << k.path << " has no help";
    EXPECT_FALSE(k.type.empty()) << k.path << " has no type (a field made without a factory?)";
    EXPECT_FALSE(k.default_value.empty()) << k.path << " has no default";
  }
}

// Every key a resolved config can hold (all fixtures, and the eval forms) has its row.
TEST(KeyReference, EveryDumpedKeyHasARow) {
  const std::set<std::string> documented = documented_paths();
  std::vector<RunConfig> configs;
  for (const auto& entry : std::filesystem::directory_iterator(configs_dir() / "good")) {
    if (entry.path().extension() == ".yaml") configs.push_back(load_config(entry.path()));
  }
  configs.push_back(parse_config(kMinimal, "a.yaml", {"data.eval={split_fraction: 0.2}"}));
  configs.push_back(parse_config(kMinimal, "a.yaml", {"data.eval={source: synthetic}"}));
  configs.push_back(
      parse_config(kMinimal, "a.yaml",
                   {"data.eval={source: fashion_mnist}", "data.train.source=fashion_mnist"}));
  ASSERT_GE(configs.size(), 8u);
  int checked = 0;
  for (const RunConfig& c : configs) {
    std::set<std::string> paths;
    collect_paths(to_json(c), "", paths);
    for (const std::string& p : paths) {
      EXPECT_TRUE(documented.count(p)) << p << " is in a resolved config but has no row";
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

// Setting a key to its documented default changes nothing: the default in the table is the
// parser's. (Keys of another choice are accepted at their default, so every key can be set.)
TEST(KeyReference, DocumentedDefaultsAreTheParsersDefaults) {
  const RunConfig base = parse_config(kMinimal, "a.yaml");
  int checked = 0;
  for (const KeyDoc& k : key_docs()) {
    if (k.default_value == "required" || k.default_value == "derived") continue;
    const std::string set = k.path + "=" + k.default_value;
    RunConfig c;
    ASSERT_NO_THROW(c = parse_config(kMinimal, "a.yaml", {set})) << set;
    // data.eval.* creates an eval section (the default is none), so only compare the others.
    if (k.path.rfind("data.eval.", 0) == 0) continue;
    EXPECT_EQ(c, base) << "--set " << set << " is not the default";
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

TEST(KeyReference, DerivedAndRequiredKeysSayWhy) {
  int derived = 0, required = 0;
  for (const KeyDoc& k : key_docs()) {
    if (k.default_value == "derived") {
      ++derived;
      EXPECT_NE(k.help.find("default"), std::string::npos)
          << k.path << ": say what it is derived from";
    }
    if (k.default_value == "required") {
      ++required;
      EXPECT_FALSE(k.applies.empty()) << k.path << ": required only for one choice";
    }
  }
  EXPECT_GE(derived, 3);   // name, loss, scheduler.max_lr
  EXPECT_GE(required, 6);  // images, labels, path for train and eval
}

TEST(KeyReference, MarkdownHasOneRowPerKey) {
  const std::vector<KeyDoc> keys = key_docs();
  const std::string md = key_reference_markdown(keys);
  for (const KeyDoc& k : keys) {
    const std::string start = "\n| `" + k.path + "` |";
    const size_t at = md.find(start);
    ASSERT_NE(at, std::string::npos) << k.path;
    EXPECT_EQ(md.find(start, at + 1), std::string::npos) << k.path << " has two rows";
  }
  // Cells escape what would break the table; in a code span only '|' (a backslash before
  // anything else would be shown).
  const std::string row =
      key_reference_markdown({{"a.b", "choice", "x|<y", "", "", "x | y, runs/<name>"}});
  EXPECT_NE(row.find("| `a.b` | choice | `x\\|<y` |  |  | x \\| y, runs/\\<name> |"),
            std::string::npos)
      << row;
}

std::string without_line_of(const std::string& md, const std::string& key) {
  const size_t at = md.find("\n| `" + key + "` |");
  const size_t end = md.find('\n', at + 1);
  return md.substr(0, at) + md.substr(end);
}

TEST(KeyReference, DifferencesNameEachRow) {
  const std::string md = key_reference_markdown();
  EXPECT_TRUE(key_table_differences(md, md).empty());

  // A key without its row.
  auto d = key_table_differences(without_line_of(md, "scaler.hysteresis"), md);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rfind("missing row for `scaler.hysteresis`", 0), 0u) << d[0];

  // A changed default.
  std::string changed = md;
  const std::string from = "| `scaler.growth_interval` | int | `2000` |";
  ASSERT_NE(changed.find(from), std::string::npos);
  changed.replace(changed.find(from), from.size(), "| `scaler.growth_interval` | int | `1000` |");
  d = key_table_differences(changed, md);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].find("row for `scaler.growth_interval` differs"), std::string::npos) << d[0];
  EXPECT_NE(d[0].find("`1000`"), std::string::npos);

  // A row for a key the declaration no longer has.
  d = key_table_differences(md + "| `scaler.old_key` | int | `1` |  |  | gone |\n", md);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].find("`scaler.old_key` is not in the declaration"), std::string::npos);

  // The same row twice; the rows reordered; only a heading changed.
  const std::string dup = md + "| `seed` | int | `0` |  |  | x |\n";
  EXPECT_NE(key_table_differences(dup, md).at(0).find("appears more than once"), std::string::npos);
  const std::vector<KeyDoc> keys = key_docs();
  std::vector<KeyDoc> swapped = keys;
  std::swap(swapped[1], swapped[2]);  // seed and device, both top-level
  d = key_table_differences(key_reference_markdown(swapped), md);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], "the rows are in a different order");
  std::string heading = md;
  heading.replace(heading.find("#### Top-level keys"), 19, "#### Top level");
  d = key_table_differences(heading, md);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].find("text around them"), std::string::npos);
}

// docs/reference.md of the source tree (tests/data is AMPCTL_TEST_DATA_DIR, an absolute path).
std::string reference_text() {
  const std::filesystem::path path =
      std::filesystem::path(AMPCTL_TEST_DATA_DIR) / ".." / ".." / "docs" / "reference.md";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The listing under "Configuration" is a valid file that holds exactly the defaults.
TEST(KeyReference, ListingParsesToTheDefaults) {
  const std::string doc = reference_text();
  const size_t section = doc.find("\n## Configuration\n");
  ASSERT_NE(section, std::string::npos);
  const size_t begin = doc.find("```yaml\n", section);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```\n", begin + 8);
  ASSERT_NE(end, std::string::npos);
  const std::string listing = doc.substr(begin + 8, end - begin - 8);
  RunConfig c;
  ASSERT_NO_THROW(c = parse_config(listing, "quickstart.yaml")) << listing;
  EXPECT_EQ(c, parse_config(kMinimal, "quickstart.yaml")) << listing;
}

TEST(KeyReference, GeneratedPartBetweenMarkers) {
  const std::string doc = std::string("# Title\n\ntext\n") + kKeyTableBegin + "\nold table\n" +
                          kKeyTableEnd + "\nmore text\n";
  EXPECT_EQ(generated_part(doc), "old table\n");
  const std::string updated = replace_generated(doc, "new table\n");
  EXPECT_EQ(updated, std::string("# Title\n\ntext\n") + kKeyTableBegin + "\nnew table\n" +
                         kKeyTableEnd + "\nmore text\n");
  EXPECT_EQ(generated_part(updated), "new table\n");

  EXPECT_THROW(generated_part("no markers"), Error);
  EXPECT_THROW(generated_part(std::string(kKeyTableEnd) + "\n" + kKeyTableBegin + "\n"), Error);
  EXPECT_THROW(generated_part(doc + doc), Error);
}

}  // namespace
}  // namespace ampctl::config
