// `base:` merging (config/base.h): merge_over's rules on documents (maps merged, everything else
// replaced, positions kept from the file that wrote each key, duplicates kept for the schema),
// and merge_bases on real files: a list of bases, a base's base from its own folder, a cycle and
// a missing file as problems that name the files. The CLI side (validate's origins, train,
// resume) is tests/cli/config_base.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ampctl/config/base.h"
#include "ampctl/config/document.h"
#include "ampctl/config/run_config.h"

namespace ampctl::config {
namespace {

namespace fs = std::filesystem;

Value doc_of(const std::string& yaml, const std::string& origin) {
  Problems problems;
  Value v;
  EXPECT_TRUE(parse_yaml(yaml, origin, v, problems));
  EXPECT_TRUE(problems.empty());
  return v;
}

const Value& at(const Value& v, std::initializer_list<const char*> path) {
  const Value* node = &v;
  for (const char* k : path) {
    const Value::Entry* e = node->find(k);
    if (e == nullptr) throw std::runtime_error(std::string("no key ") + k);
    node = &e->value;
  }
  return *node;
}

TEST(ConfigBase, MapsMergeEverythingElseIsReplaced) {
  Value under = doc_of(
      "a: {x: 1, y: [1, 2], z: {deep: 1, keep: 2}}\nlist: [1, 2, 3]\nonly_base: 7\nnulled: 5\n",
      "base.yaml");
  Value over = doc_of("a: {y: [9], z: {deep: 3}, new: 4}\nlist: [4]\nnulled: null\nadded: 1\n",
                      "child.yaml");
  merge_over(under, std::move(over));
  EXPECT_EQ(at(under, {"a", "x"}).text, "1");
  ASSERT_EQ(at(under, {"a", "y"}).items.size(), 1u);  // a list is replaced, not appended
  EXPECT_EQ(at(under, {"a", "y"}).items[0].text, "9");
  EXPECT_EQ(at(under, {"a", "z", "deep"}).text, "3");
  EXPECT_EQ(at(under, {"a", "z", "keep"}).text, "2");
  EXPECT_EQ(at(under, {"a", "new"}).text, "4");
  ASSERT_EQ(at(under, {"list"}).items.size(), 1u);
  EXPECT_EQ(at(under, {"only_base"}).text, "7");
  EXPECT_TRUE(at(under, {"nulled"}).is_null());  // null replaces too
  EXPECT_EQ(at(under, {"added"}).text, "1");
  // Each key keeps the position of the file that wrote it.
  EXPECT_EQ(under.find("only_base")->key_where.origin, "base.yaml");
  EXPECT_EQ(under.find("list")->key_where.origin, "child.yaml");
  EXPECT_EQ(at(under, {"a"}).find("x")->key_where.origin, "base.yaml");
  EXPECT_EQ(at(under, {"a"}).find("y")->key_where.origin, "child.yaml");
  EXPECT_EQ(at(under, {"a"}).find("y")->key_where.line, 1);
  // The base's key order, then the child's new keys.
  std::string order;
  for (const Value::Entry& e : under.entries) order += e.key + " ";
  EXPECT_EQ(order, "a list only_base nulled added ");
}

TEST(ConfigBase, ADuplicateKeyOfTheChildStaysForTheSchema) {
  Value under = doc_of("seed: 1\n", "base.yaml");
  merge_over(under, doc_of("seed: 2\nseed: 3\n", "child.yaml"));
  int seeds = 0;
  for (const Value::Entry& e : under.entries) seeds += e.key == "seed";
  EXPECT_EQ(seeds, 2);
  EXPECT_THROW(parse_config("seed: 1\nseed: 2\nmodel: {}\ndata: {}\n", "x"), ConfigError);
}

class ConfigBaseFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = fs::temp_directory_path() /
            ("ampctl-base-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(m_dir);
    fs::create_directories(m_dir / "a" / "b");
  }
  void TearDown() override { fs::remove_all(m_dir); }
  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = m_dir / rel;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path m_dir;
};

TEST_F(ConfigBaseFiles, ListsAndBasesOfBases) {
  write("a/b/root.yaml", "seed: 1\nmodel: {hidden: [4]}\ndata: {batch_size: 8}\n");
  write("a/mid.yaml", "base: b/root.yaml\nseed: 2\n");  // from a/, its own folder
  write("a/other.yaml", "seed: 3\ndata: {shuffle: false}\n");
  const std::string child = write("child.yaml", "base: [a/mid.yaml, a/other.yaml]\n");
  const RunConfig c = load_config(child);
  EXPECT_EQ(c.seed, 3);  // the later base wins
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{4}));
  EXPECT_EQ(c.data.batch_size, 8);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.name, "child");
  // The same base twice (not a cycle) is merged twice, harmlessly.
  const std::string twice = write("twice.yaml",
                                  "base: [a/other.yaml, a/other.yaml]\n"
                                  "model: {}\ndata: {}\n");
  EXPECT_EQ(load_config(twice).seed, 3);
}

TEST_F(ConfigBaseFiles, CycleAndMissingNameTheFiles) {
  const std::string x = write("x.yaml", "base: a/y.yaml\nmodel: {}\ndata: {}\n");
  write("a/y.yaml", "base: ../x.yaml\n");
  try {
    load_config(x);
    FAIL() << "a cycle was accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();  // nothing else: the keys are not "missing"
    const Problem& p = e.problems()[0];
    EXPECT_EQ(p.key, "base");
    EXPECT_EQ(p.where.origin, (m_dir / "a" / "y.yaml").string());
    EXPECT_EQ(p.where.line, 1);
    EXPECT_NE(p.message.find("cycle"), std::string::npos) << p.message;
    EXPECT_NE(p.message.find(x), std::string::npos) << p.message;
  }
  const std::string lost = write("lost.yaml", "model: {}\nbase: nowhere.yaml\ndata: {}\n");
  try {
    load_config(lost);
    FAIL() << "a missing base was accepted";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    EXPECT_EQ(e.problems()[0].where.origin, lost);
    EXPECT_EQ(e.problems()[0].where.line, 2);
    EXPECT_NE(e.problems()[0].message.find((m_dir / "nowhere.yaml").string()), std::string::npos)
        << e.problems()[0].message;
  }
}

TEST_F(ConfigBaseFiles, ASecondBaseKeyAndOddValuesAreProblems) {
  write("a/other.yaml", "seed: 3\n");
  for (const char* text :
       {"base: a/other.yaml\nbase: a/other.yaml\nmodel: {}\ndata: {}\n",
        "base: {x: 1}\nmodel: {}\ndata: {}\n", "base: [a/other.yaml, [x]]\nmodel: {}\ndata: {}\n",
        "base: ''\nmodel: {}\ndata: {}\n"}) {
    const std::string file = write("odd.yaml", text);
    try {
      load_config(file);
      FAIL() << "accepted: " << text;
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_EQ(e.problems()[0].key, "base") << e.what();
      EXPECT_EQ(e.problems()[0].where.origin, file) << e.what();
    }
  }
  // null and [] name no base.
  EXPECT_EQ(load_config(write("none.yaml", "base: null\nmodel: {}\ndata: {}\nseed: 5\n")).seed, 5);
  EXPECT_EQ(load_config(write("none.yaml", "base: []\nmodel: {}\ndata: {}\nseed: 6\n")).seed, 6);
}

TEST_F(ConfigBaseFiles, ADeepChainIsRefusedNotRecursedForever) {
  // 40 files, each the base of the one before: past kMaxBaseDepth, a problem.
  for (int i = 0; i < 40; ++i) {
    std::string name = "c", text = "base: c";
    name.append(std::to_string(i)).append(".yaml");
    text.append(std::to_string(i + 1)).append(".yaml\n");
    write(name, text);
  }
  write("c40.yaml", "model: {}\ndata: {}\n");
  try {
    load_config((m_dir / "c0.yaml").string());
    FAIL() << "a chain of 40 bases was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("levels deep"), std::string::npos) << e.what();
  }
}

TEST(ConfigPaths, AFileWithoutAFolderIsTheCurrentDirectorys) {
  // "run.yaml" (no folder in its name) read its paths from "" before: they stayed relative.
  const std::string yaml =
      "model: {}\ndata: {train: {source: csv, path: rows.csv, label_column: -1}}\n";
  const fs::path cwd = fs::current_path();
  EXPECT_EQ(parse_config(yaml, "run.yaml").data.train.path, (cwd / "rows.csv").string());
  EXPECT_EQ(parse_config(yaml, "sub/run.yaml").data.train.path,
            (cwd / "sub" / "rows.csv").string());
  EXPECT_EQ(parse_config(yaml, "sub/run.yaml", {"data.train.path=../set.csv"}).data.train.path,
            (cwd.parent_path() / "set.csv").string());
}

}  // namespace
}  // namespace ampctl::config
