// scaler.policy and config::scale_settings: the YAML names of the scale rules (spelled here by
// hand, as docs/reference.md lists them, against the table they are generated from), and every
// scaler.* key reaching the one settings struct the GradScaler, the kernels and replay run with.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ampctl/core/half.h"
#include "config_test_util.h"

namespace ampctl::config {
namespace {

using testing::kMinimal;
using testing::only_problem;

RunConfig parse(const std::string& scaler, const std::string& extra = "") {
  return parse_config(std::string(kMinimal) + "scaler: {" + scaler + "}\n" + extra, "run.yaml");
}

TEST(ScaleSettings, PolicyNamesAreTheRulesInOrder) {
  const struct {
    const char* name;
    amp::ScalePolicy policy;
  } cases[] = {{"pytorch", amp::ScalePolicy::pytorch},
               {"deepspeed", amp::ScalePolicy::deepspeed},
               {"megatron", amp::ScalePolicy::megatron},
               {"fairseq", amp::ScalePolicy::fairseq},
               {"auto", amp::ScalePolicy::automatic}};
  for (const auto& c : cases) {
    const RunConfig cfg = parse(std::string("policy: ") + c.name);
    EXPECT_EQ(cfg.scaler.policy, c.policy) << c.name;
    EXPECT_EQ(scale_settings(cfg).policy, c.policy) << c.name;
    // The resolved dump writes the name back.
    EXPECT_EQ(to_json(cfg).at("scaler").at("policy"), c.name);
  }
  const Problem p = only_problem(std::string(kMinimal) + "scaler: {policy: megatorn}\n");
  EXPECT_EQ(p.key, "scaler.policy");
  EXPECT_EQ(p.message, "must be pytorch, deepspeed, megatron, fairseq or auto, got megatorn")
      << p.str();
  EXPECT_EQ(p.hint, "did you mean 'megatron'?");
  // A key of other rules: the rules that read it, in the table's order.
  const Problem q =
      only_problem(std::string(kMinimal) + "scaler: {policy: fairseq, hysteresis: 2}\n");
  EXPECT_EQ(q.message,
            "only used when scaler.policy is pytorch, deepspeed or megatron (it is fairseq)")
      << q.str();
}

TEST(ScaleSettings, EveryKeyReachesTheSettings) {
  const amp::ScaleUpdateParams d = scale_settings(
      parse("policy: deepspeed, growth_factor: 4.0, backoff_factor: 0.25, growth_interval: 7, "
            "hysteresis: 3, consecutive_hysteresis: true, min_scale: 0.5"));
  EXPECT_EQ(d.policy, amp::ScalePolicy::deepspeed);
  EXPECT_EQ(d.growth_factor, 4.0);
  EXPECT_EQ(d.backoff_factor, 0.25);
  EXPECT_EQ(d.growth_interval, 7);
  EXPECT_EQ(d.hysteresis, 3);
  EXPECT_TRUE(d.consecutive_hysteresis);
  EXPECT_EQ(d.min_scale, 0.5f);
  EXPECT_EQ(d.max_scale, INFINITY);  // not deepspeed's key: its default

  const amp::ScaleUpdateParams f = scale_settings(parse("policy: fairseq, tolerance: 0.25"));
  EXPECT_EQ(f.policy, amp::ScalePolicy::fairseq);
  EXPECT_EQ(f.tolerance, 0.25);
  EXPECT_EQ(f.hysteresis, 1);

  // 0.1 is no float: the setting holds float32's nearest, as the kernels compare in float.
  const amp::ScaleUpdateParams a =
      scale_settings(parse("policy: auto, margin: 3, amax_history: 5, max_scale: 1048576.0, "
                           "min_scale: 0.1",
                           "precision: bf16\n"));
  EXPECT_EQ(a.policy, amp::ScalePolicy::automatic);
  EXPECT_EQ(a.margin, 3);
  EXPECT_EQ(a.amax_history, 5);
  EXPECT_EQ(a.max_scale, 1048576.0f);
  EXPECT_EQ(a.min_scale, 0.1f);
  // bf16's largest finite value, (2 - 2^-7) x 2^127: bits 0x7f7f0000.
  EXPECT_EQ(float_bits(a.max_finite), 0x7f7f0000u);
  // fp16's, 65504, for fp16 and for fp32 (which rounds nothing and reports against fp16).
  EXPECT_EQ(scale_settings(parse("policy: auto")).max_finite, 65504.0f);
  EXPECT_EQ(scale_settings(parse("", "precision: fp32\n")).max_finite, 65504.0f);
}

TEST(ScaleSettings, DefaultsArePyTorchs) {
  const amp::ScaleUpdateParams p = scale_settings(parse(""));
  EXPECT_EQ(p.policy, amp::ScalePolicy::pytorch);
  EXPECT_EQ(p.growth_factor, 2.0);
  EXPECT_EQ(p.backoff_factor, 0.5);
  EXPECT_EQ(p.growth_interval, 2000);
  EXPECT_EQ(p.hysteresis, 1);
  EXPECT_EQ(p.min_scale, 0.0f);
  EXPECT_EQ(p.max_scale, INFINITY);
}

}  // namespace
}  // namespace ampctl::config
