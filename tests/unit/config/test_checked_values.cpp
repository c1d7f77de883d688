// Issue 47 in the configuration (classes 7 and 13): resume's rule over the resolved
// configuration (config::refused_change), the scaler keys with the scaler off, and a rule broken
// by a --set reported at that --set rather than at the file's key it conflicts with.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ampctl/config/resume_rules.h"
#include "ampctl/config/run_config.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::kMinimal;
using testing::only_problem;

const char* kRun =
    "model: {hidden: [16]}\ndata: {}\noptimizer: {lr: 0.01}\n"
    "scheduler: {type: cosine, min_lr: 0.001}\nscaler: {init_scale: 1024.0}\n";

RunConfig with(const std::vector<std::string>& sets) {
  return parse_config(kRun, "run.yaml", sets);
}

TEST(ResumeRules, TheResolvedChangeIsRefusedWhateverSpelledIt) {
  const RunConfig before = with({});
  for (const char* set : {"scaler.init_scale=5", "scaler={init_scale: 5.0}"}) {
    SCOPED_TRACE(set);
    const std::optional<RefusedChange> c = refused_change(before, with({set}));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->key, "scaler.init_scale");
    EXPECT_EQ(c->before, "1024.0");
    EXPECT_EQ(c->after, "5.0");
  }
  // A section value that leaves init_scale out resets it to its default: a change too.
  const std::optional<RefusedChange> reset =
      refused_change(before, with({"scaler={growth_interval: 500}"}));
  ASSERT_TRUE(reset.has_value());
  EXPECT_EQ(reset->key, "scaler.init_scale");
  EXPECT_EQ(reset->after, "65536.0");
  // Nothing the checkpoint holds changes: accepted, however it is written.
  EXPECT_FALSE(refused_change(before, with({"model.hidden=[16]"})).has_value());
  EXPECT_FALSE(refused_change(before, with({"scaler={init_scale: 1024.0, growth_interval: 500}"})));
  EXPECT_FALSE(refused_change(before, with({"training.max_steps=5", "optimizer.lr=0.1"})));
  const std::optional<RefusedChange> model = refused_change(before, with({"model={hidden: [8]}"}));
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->key, "model.hidden");
}

TEST(ScalerKeys, RefusedWhenTheScalerIsSwitchedOffUnlessAtTheirDefault) {
  EXPECT_EQ(only_problem(kMinimal, {"scaler.enabled=false", "scaler.init_scale=1024"}).str(),
            "--set scaler.init_scale=1024: scaler.init_scale: only used with loss scaling, and "
            "scaler.enabled is false: remove it or give its default (65536.0), or set "
            "scaler.enabled to auto or true");
  EXPECT_NO_THROW(parse_config(kMinimal, "x", {"scaler.enabled=false", "scaler.init_scale=65536"}));
  // With auto, a precision without the scaler leaves them unread: listed for train's warning.
  const RunConfig bf16 = parse_config(kRun, "run.yaml", {"precision=bf16"});
  EXPECT_EQ(unused_scaler_keys(bf16), (std::vector<std::string>{"scaler.init_scale: 1024.0"}));
  EXPECT_TRUE(unused_scaler_keys(with({})).empty());  // fp16: the scaler reads them
}

TEST(SetBlame, ARuleBrokenByASetIsReportedAtTheSet) {
  // Before: "run.yaml:4:...: scheduler.min_lr: must be <= optimizer.lr" (the file's line).
  const Problem p = only_problem(kRun, {"optimizer.lr=0.0001"});
  EXPECT_EQ(p.where.str(), "--set optimizer.lr=0.0001");
  EXPECT_EQ(p.key, "scheduler.min_lr");
  // A --set that switches the choice a key of the file belongs to.
  const Problem q =
      only_problem("model: {}\ndata: {}\noptimizer:\n  type: adamw\n  betas: [0.8, 0.9]\n",
                   {"optimizer.type=sgd"});
  EXPECT_EQ(q.where.str(), "--set optimizer.type=sgd");
  EXPECT_EQ(q.key, "optimizer.betas");
  // The file's own conflicts stay at the file's lines.
  const Problem r = only_problem(
      "model: {}\ndata: {}\noptimizer: {lr: 0.0001}\n"
      "scheduler: {type: cosine, min_lr: 0.001}\n");
  EXPECT_EQ(r.where.origin, "run.yaml");
  EXPECT_TRUE(r.where.has_position());
}

}  // namespace
}  // namespace ampctl::config
