// data.eval as a map of named evaluation sets (docs/reference.md, "Evaluation sets"): the two
// forms told apart, the names and order kept through the dump and the checkpoint's JSON,
// metrics that name a set, and each refusal naming its key and line. The run side is
// tests/cli/eval_sets.py.
#include <gtest/gtest.h>

#include <string>

#include "ampctl/config/run_config.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::only_problem;

const std::string kTwo =
    "model: {}\n"
    "data:\n"
    "  eval:\n"
    "    valid: {source: synthetic, samples: 100}\n"
    "    hard-2: {source: synthetic, samples: 50}\n";

TEST(ConfigEvalSets, NamedSetsKeepTheirNamesAndOrder) {
  const RunConfig c = parse_config(kTwo, "run.yaml");
  ASSERT_TRUE(c.data.eval.has_value());
  EXPECT_EQ(c.data.eval_name, "valid");
  EXPECT_EQ(c.data.eval->samples, 100);
  ASSERT_EQ(c.data.eval_sets.size(), 1u);
  EXPECT_EQ(c.data.eval_sets[0].name, "hard-2");
  EXPECT_EQ(c.data.eval_sets[0].source.samples, 50);
  EXPECT_EQ(eval_set_names(c), (std::vector<std::string>{"valid", "hard-2"}));
  EXPECT_EQ(parse_config(to_yaml(c), "again.yaml"), c);
  EXPECT_EQ(from_json(to_json(c)), c);
  EXPECT_NE(to_yaml(c).find("    hard-2:\n"), std::string::npos) << to_yaml(c);
}

TEST(ConfigEvalSets, TheSingleFormIsTheSetNamedEval) {
  const RunConfig c = parse_config("model: {}\ndata: {eval: {source: synthetic}}\n", "run.yaml");
  EXPECT_EQ(c.data.eval_name, "");
  EXPECT_TRUE(c.data.eval_sets.empty());
  EXPECT_EQ(eval_set_names(c), (std::vector<std::string>{"eval"}));
  EXPECT_TRUE(eval_set_names(parse_config(testing::kMinimal, "run.yaml")).empty());
}

TEST(ConfigEvalSets, MetricsNameASet) {
  const RunConfig c =
      parse_config(kTwo +
                       "checkpoint: {keep_best: eval.hard-2.accuracy}\n"
                       "training: {eval_every: 5, early_stop: {metric: eval.valid.loss}}\n",
                   "run.yaml");
  EXPECT_EQ(c.checkpoint.keep_best, (EvalMetricRef{EvalMetric::eval_accuracy, "hard-2"}));
  EXPECT_EQ(eval_set_index(c, c.checkpoint.keep_best), 1u);
  EXPECT_EQ(to_string(c.checkpoint.keep_best), "eval.hard-2.accuracy");
  EXPECT_EQ(eval_set_index(c, c.training.early_stop.metric), 0u);
  // early_stop's patience applies: the condition reads the metric's kind.
  EXPECT_EQ(c.training.early_stop.patience, 5);
  EXPECT_EQ(parse_config(to_yaml(c), "again.yaml"), c);
  const RunConfig plain = parse_config(kTwo + "checkpoint: {keep_best: eval_loss}\n", "run.yaml");
  EXPECT_EQ(plain.checkpoint.keep_best, (EvalMetricRef{EvalMetric::eval_loss, ""}));
  EXPECT_EQ(eval_set_index(plain, plain.checkpoint.keep_best), 0u);
}

TEST(ConfigEvalSets, RefusalsNameTheKeyAndLine) {
  Problem p = only_problem(kTwo + "    'bad name': {source: synthetic}\n");
  EXPECT_EQ(p.key, "data.eval.bad name");
  EXPECT_EQ(p.where.line, 6);
  p = only_problem(kTwo + "    second: {split_fraction: 0.1}\n");
  EXPECT_EQ(p.key, "data.eval.second");
  EXPECT_NE(p.message.find("only be the first"), std::string::npos) << p.message;
  p = only_problem(kTwo, {"checkpoint.keep_best=eval.nope.loss"});
  EXPECT_EQ(p.key, "checkpoint.keep_best");
  EXPECT_NE(p.message.find("has no set 'nope' (its sets: valid, hard-2)"), std::string::npos)
      << p.message;
  p = only_problem(kTwo, {"checkpoint.keep_best=eval.valid"});
  EXPECT_EQ(p.key, "checkpoint.keep_best");
  std::string nine = "model: {}\ndata:\n  eval:\n";
  for (int i = 0; i < 9; ++i) nine += "    s" + std::to_string(i) + ": {source: synthetic}\n";
  p = only_problem(nine);
  EXPECT_EQ(p.key, "data.eval");
  EXPECT_NE(p.message.find("at most 8"), std::string::npos) << p.message;
  // A further set is checked against data.train as the first is.
  p = only_problem(kTwo + "    wide: {source: synthetic, features: 7}\n");
  EXPECT_EQ(p.key, "data.eval");
  EXPECT_NE(p.message.find("set wide: "), std::string::npos) << p.message;
}

}  // namespace
}  // namespace ampctl::config
