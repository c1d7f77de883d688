// Documents and overrides: --set semantics (later wins, maps created on the way, a whole
// sub-object replaced), positions, hostile YAML (deep nesting, alias bombs, odd keys) reported
// without a crash, and the JSON form (from_json validates like YAML and names the keys).
#include <gtest/gtest.h>

#include <string>

#include "ampctl/config/document.h"
#include "ampctl/config/run_config.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::kMinimal;
using testing::only_problem;
using testing::problems_of;

TEST(ConfigOverrides, LaterOnesWin) {
  const RunConfig c = parse_config(
      kMinimal, "x", {"seed=1", "seed=2", "model.hidden=[8]", "model.hidden=[64, 64]"});
  EXPECT_EQ(c.seed, 2);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{64, 64}));
}

TEST(ConfigOverrides, ReplaceFileValues) {
  const RunConfig c = parse_config(
      "model: {hidden: [8]}\ndata: {}\nscaler:\n  enabled: true\n  growth_factor: 4.0\n", "x",
      {"scaler.enabled=auto", "scaler.growth_factor=3"});
  EXPECT_EQ(c.scaler.enabled, Toggle::automatic);
  EXPECT_EQ(c.scaler.growth_factor, 3.0);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{8}));  // untouched keys stay
}

TEST(ConfigOverrides, CreateSectionsAndReplaceNulls) {
  // `data.eval: null` in the file, then a key under it.
  const RunConfig c = parse_config("model:\ndata:\n  eval: null\n", "x",
                                   {"data.eval.split_fraction=0.2", "training.grad_clip_norm=1"});
  ASSERT_TRUE(c.data.eval.has_value());
  EXPECT_EQ(c.data.eval->source, SourceKind::split);
  EXPECT_EQ(c.training.grad_clip_norm, 1.0);
  // The required sections may come from overrides alone.
  const RunConfig d = parse_config("", "x", {"model.hidden=[4]", "data.batch_size=4"});
  EXPECT_EQ(d.model.hidden, (std::vector<int64_t>{4}));
}

TEST(ConfigOverrides, FlowValuesReplaceWholeObjects) {
  const RunConfig c = parse_config(
      "model: {}\ndata:\n  train: {source: synthetic, samples: 100}\n  eval: {samples: 50}\n", "x",
      {"data.eval={split_fraction: 0.1}",
       "data.train={source: csv, path: x.csv, label_column: target}"});
  EXPECT_EQ(c.data.eval->source, SourceKind::split);
  EXPECT_EQ(c.data.train.source, SourceKind::csv);
  EXPECT_EQ(c.data.train.label_column.name, "target");
  EXPECT_EQ(c.data.train.samples, 8192);  // the file's 100 went with the replaced object
}

TEST(ConfigOverrides, ValuesAreYaml) {
  const RunConfig c = parse_config(kMinimal, "x",
                                   {"name=my run", "device=cuda:1", "scaler.max_scale=.inf",
                                    "training.grad_clip_norm=null", "name=\"123\""});
  EXPECT_EQ(c.name, "123");
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_FALSE(c.training.grad_clip_norm.has_value());
}

TEST(ConfigOverrides, ProblemsNameTheOverride) {
  EXPECT_EQ(only_problem(kMinimal, {"scaler.growth_factr=3"}).str(),
            "--set scaler.growth_factr=3: scaler.growth_factr: unknown key");
  EXPECT_EQ(only_problem(kMinimal, {"scaler.growth_factr=3"}).hint,
            "did you mean 'scaler.growth_factor'?");
  EXPECT_EQ(only_problem(kMinimal, {"modle.hidden=[1]"}).hint, "did you mean 'model'?");
  // A key that only exists elsewhere points there.
  EXPECT_EQ(only_problem(kMinimal, {"scaler.lr=1"}).hint, "did you mean 'optimizer.lr'?");
  EXPECT_EQ(only_problem(kMinimal, {"scaler.growth_factor=fast"}).str(),
            "--set scaler.growth_factor=fast: scaler.growth_factor: expected a number, got fast");
  // Going below a leaf is going into a value that is no section.
  EXPECT_EQ(only_problem(kMinimal, {"seed.x=1"}).str(),
            "--set seed.x=1: seed: expected an integer, got a mapping");
}

TEST(ConfigOverrides, FileAndOverrideProblemsTogether) {
  const std::vector<Problem> problems =
      problems_of("model: {}\ndata: {}\nseed: -3\n", {"scaler.hysteresis=0"});
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].str(), "run.yaml:3:1: seed: must be >= 0, got -3");
  EXPECT_EQ(problems[1].str(),
            "--set scaler.hysteresis=0: scaler.hysteresis: must be in [1, 2147483647], got 0");
}

// Found by fuzzing (tests/fuzz/corpus/config/deep_set_key.yaml): every component of a --set key
// builds a level of maps whose values each carried the whole override as their origin, so a key
// of 50,000 components took gigabytes (and a recursion that deep to destroy). It is now a usage
// error, as deep as the deepest configuration allows.
TEST(ConfigOverrides, KeyPathsDeeperThanAnyConfigurationAreRefused) {
  std::string key = "a";
  for (int i = 1; i < kMaxDepth; ++i) key += ".a";
  EXPECT_EQ(parse_override(key + "=1").key.size(), static_cast<size_t>(kMaxDepth));
  for (const int components : {kMaxDepth + 1, 50000}) {
    std::string deep = "a";
    for (int i = 1; i < components; ++i) deep += ".a";
    try {
      parse_config(kMinimal, "run.yaml", {deep + "=1"});
      ADD_FAILURE() << components << " components: accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      EXPECT_NE(std::string(e.what()).find("KEY has " + std::to_string(components) +
                                           " components, more than the 32 levels"),
                std::string::npos)
          << e.what();
      // The message quotes the start of the argument, not all of it.
      EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
    }
  }
}

// Found by fuzzing, the same cause: a long --set value (here a list of 60,000 elements, 120 KB)
// gave each element a copy of the whole argument as its origin, quadratic in the argument.
// Problems now name a long override by its first 80 characters and its length.
TEST(ConfigOverrides, LongOverridesAreNamedShortened) {
  std::string list = "[";
  for (int i = 0; i < 60000; ++i) list += "0,";
  list += "0]";
  const std::string set = "model.hidden=" + list;
  Value doc;
  Problems problems;
  ASSERT_TRUE(parse_yaml(kMinimal, "run.yaml", doc, problems));
  apply_overrides(doc, {parse_override(set)}, problems);
  EXPECT_TRUE(problems.empty());
  const Value::Entry* hidden = doc.find("model")->value.find("hidden");
  ASSERT_NE(hidden, nullptr);
  ASSERT_EQ(hidden->value.items.size(), 60001u);
  const std::string expected =
      "--set " + set.substr(0, 80) + "... (" + std::to_string(set.size()) + " characters)";
  EXPECT_EQ(hidden->value.items.back().where.origin, expected);
  // Every element is refused (a width must be >= 1), each problem naming the shortened --set.
  const std::vector<Problem> all = problems_of(kMinimal, {set});
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().where.origin, expected);
  EXPECT_NE(all.front().str().find("model.hidden"), std::string::npos) << all.front().str();
}

TEST(ConfigDocument, PositionsAreOneBased) {
  Problems problems;
  Value doc;
  ASSERT_TRUE(parse_yaml("a: 1\nsection:\n  key: [1, two]\n", "f.yaml", doc, problems));
  ASSERT_EQ(doc.entries.size(), 2u);
  EXPECT_EQ(doc.entries[0].key_where.str(), "f.yaml:1:1");
  const Value::Entry& key = doc.entries[1].value.entries[0];
  EXPECT_EQ(key.key_where.str(), "f.yaml:3:3");
  EXPECT_EQ(key.value.items[1].where.str(), "f.yaml:3:12");
  EXPECT_TRUE(key.value.items[1].plain);
  EXPECT_TRUE(problems.empty());
}

TEST(ConfigDocument, HostileYamlIsReportedNotFollowed) {
  // Deep nesting.
  std::string deep = "model: {}\ndata: {}\ndebug: {inject_nonfinite_at: ";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}\n";
  EXPECT_FALSE(problems_of(deep).empty());
  // A self-referencing anchor (yaml-cpp builds a cycle).
  EXPECT_FALSE(problems_of("model: {}\ndata: {}\nx: &a [1, *a]\n").empty());
  // Keys that are not names.
  const std::vector<Problem> keys = problems_of("model: {}\ndata: {}\n[1, 2]: 3\n");
  ASSERT_FALSE(keys.empty());
  EXPECT_EQ(keys[0].str(), "run.yaml:3:1: a key must be a name, got a list");
  // Binary junk.
  EXPECT_FALSE(problems_of(std::string("\x00\xff\xfe: [\x01", 6)).empty());
}

TEST(ConfigJson, FromJsonValidatesAndNamesKeys) {
  nlohmann::json j = to_json(parse_config(kMinimal, "x.yaml"));
  j["scaler"]["growth_factor"] = 0.5;
  j["scaler"]["growth_intervl"] = 10;
  j["model"]["hidden"] = {64, "x"};
  try {
    from_json(j, "runs/x/checkpoints/step-00000100.json: config");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);  // a bad checkpoint
    const std::string what = e.what();
    const std::string origin = "runs/x/checkpoints/step-00000100.json: config: ";
    EXPECT_NE(what.find(origin + "scaler.growth_factor: must be > 1.0, got 0.5"), std::string::npos)
        << what;
    EXPECT_NE(what.find(origin + "scaler.growth_intervl: unknown key\nhint: did you mean "
                                 "'growth_interval'?"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(origin + "model.hidden[1]: expected an integer, got \"x\""),
              std::string::npos)
        << what;
  }
}

TEST(ConfigJson, FromJsonWithOverrides) {
  const nlohmann::json j = to_json(parse_config(kMinimal, "x.yaml"));
  const RunConfig c = from_json(j, "ckpt", {"training.max_steps=5000"});
  EXPECT_EQ(c.training.max_steps, 5000);
  EXPECT_EQ(c.name, "x");
  try {
    from_json(j, "ckpt", {"training.max_steps=0"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);  // only the override is wrong
  }
  try {
    from_json(nlohmann::json::array({1, 2}), "ckpt");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_EQ(std::string(e.what()), "ckpt: expected a JSON object, got a list");
  }
}

TEST(ConfigJson, TypesInJson) {
  nlohmann::json j = to_json(parse_config(kMinimal, "x.yaml"));
  j["scaler"]["init_scale"] = 1024;  // an integer where a float goes: fine
  j["scaler"]["enabled"] = true;
  EXPECT_EQ(from_json(j).scaler.init_scale, 1024.0);
  j["data"]["batch_size"] = "128";  // a string where an integer goes: not fine
  EXPECT_THROW(from_json(j), ConfigError);
}

}  // namespace
}  // namespace ampctl::config
