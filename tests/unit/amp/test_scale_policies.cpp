// The four scale rules (scaler.policy) against the reference written from the upstream update
// functions (scripts/golden/scaler_policies.py -> tests/data/golden/scaler_policies.json): every
// step's scale (its float32 bits) and every tracker equal the reference's, on the CPU backend's
// update_scale_ (the code the CUDA kernel runs, amp_math.h); and a GradScaler saved after any
// step and loaded into a new one continues bit for bit (an exact resume of the rule's state).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/core/half.h"
#include "ampctl/math/amp_math.h"
#include "test_util.h"

namespace ampctl::amp {
namespace {

nlohmann::json golden() {
  const std::string path = testing::test_data_dir() + "/golden/scaler_policies.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

ScalePolicy policy_of(const std::string& name) {
  if (name == "deepspeed") return ScalePolicy::deepspeed;
  if (name == "megatron") return ScalePolicy::megatron;
  if (name == "fairseq") return ScalePolicy::fairseq;
  EXPECT_EQ(name, "pytorch");
  return ScalePolicy::pytorch;
}

double number(const nlohmann::json& v) {
  if (v.is_string() && v.get<std::string>() == ".inf")
    return std::numeric_limits<double>::infinity();
  return v.get<double>();
}

GradScalerOptions options_of(const nlohmann::json& c) {
  const nlohmann::json& p = c.at("params");
  GradScalerOptions o;
  o.init_scale = number(p.at("init_scale"));
  o.rule.growth_factor = number(p.at("growth_factor"));
  o.rule.backoff_factor = number(p.at("backoff_factor"));
  o.rule.growth_interval = p.at("growth_interval").get<int64_t>();
  o.rule.hysteresis = p.at("hysteresis").get<int32_t>();
  o.rule.min_scale = number(p.at("min_scale"));
  o.rule.max_scale = number(p.at("max_scale"));
  o.rule.policy = policy_of(c.at("policy").get<std::string>());
  o.rule.consecutive_hysteresis = p.at("consecutive_hysteresis").get<bool>();
  o.rule.tolerance = number(p.at("tolerance"));
  return o;
}

// What GradScaler::update hands the backend for these options: its settings as they are.
ScaleUpdateParams params_of(const GradScalerOptions& o) {
  return o.rule;
}

// The state the scaler's tensors hold, as one row of the golden file names it.
struct Row {
  uint32_t scale_bits;
  int32_t growth, hysteresis, iter, last_overflow, last_rescale, overflows;
};

Row read_row(Backend& b, const GradScaler& s) {
  int32_t t[kTrackerCount];
  b.download(t, s.trackers_tensor());
  return {float_bits(b.read_scalar_f32(s.scale_tensor())),
          b.read_scalar_i32(s.growth_tracker_tensor()),
          b.read_scalar_i32(s.hysteresis_tracker_tensor()),
          t[kIter],
          t[kLastOverflowIter],
          t[kLastRescaleIter],
          t[kOverflowsSinceRescale]};
}

// Compares `got` with the golden step (only the trackers the rule keeps are in the file; a rule
// that does not use one leaves it at its initial value, which is checked too).
::testing::AssertionResult matches(const Row& got, const nlohmann::json& want,
                                   const GradScalerOptions& o) {
  auto field = [&](const char* key, int32_t initial) {
    return want.contains(key) ? want.at(key).get<int32_t>() : initial;
  };
  const Row w{want.at("scale_bits").get<uint32_t>(),
              field("growth_tracker", 0),
              field("hysteresis_tracker", o.rule.hysteresis),
              field("iter", 0),
              field("last_overflow_iter", -1),
              field("last_rescale_iter", -1),
              field("overflows_since_rescale", 0)};
  if (got.scale_bits == w.scale_bits && got.growth == w.growth && got.hysteresis == w.hysteresis &&
      got.iter == w.iter && got.last_overflow == w.last_overflow &&
      got.last_rescale == w.last_rescale && got.overflows == w.overflows) {
    return ::testing::AssertionSuccess();
  }
  auto text = [](const Row& r) {
    return "scale " + std::to_string(bits_float(r.scale_bits)) + " (bits " +
           std::to_string(r.scale_bits) + "), growth " + std::to_string(r.growth) +
           ", hysteresis " + std::to_string(r.hysteresis) + ", iter " + std::to_string(r.iter) +
           ", last_overflow " + std::to_string(r.last_overflow) + ", last_rescale " +
           std::to_string(r.last_rescale) + ", overflows " + std::to_string(r.overflows);
  };
  return ::testing::AssertionFailure() << "got " << text(got) << "; the reference has " << text(w);
}

// One update of the scaler's own state tensors, as GradScaler::update makes it.
void update(Backend& b, const GradScaler& s, bool found, const ScaleUpdateParams& p,
            const Tensor& found_inf) {
  b.fill(found_inf, found ? 1.0 : 0.0);
  b.update_scale_(s.scale_tensor(), s.growth_tracker_tensor(), s.hysteresis_tracker_tensor(),
                  s.trackers_tensor(), found_inf, p);
}

TEST(ScalePolicies, EveryStepEqualsTheUpstreamReferenceBitForBit) {
  const nlohmann::json g = golden();
  auto b = make_cpu_backend(1);
  Tensor found_inf = b->zeros({1}, DType::f32);
  int policies_seen[4] = {0, 0, 0, 0};
  for (const nlohmann::json& c : g.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const GradScalerOptions o = options_of(c);
    ++policies_seen[static_cast<int>(o.rule.policy)];
    GradScaler s(*b, o);
    s.init_state();
    const ScaleUpdateParams p = params_of(o);
    const nlohmann::json& steps = c.at("steps");
    for (size_t i = 0; i < steps.size(); ++i) {
      update(*b, s, steps[i].at("found_inf").get<int>() != 0, p, found_inf);
      ASSERT_TRUE(matches(read_row(*b, s), steps[i], o)) << name << ", step " << i;
    }
  }
  // The bar: at least four overflow patterns per rule.
  for (int n : policies_seen) EXPECT_GE(n, 4);
}

// A scaler saved (state_dict, through JSON text) after step k and loaded into a new scaler of the
// same options continues exactly as the reference, for every k of every case.
TEST(ScalePolicies, ResumeAtEveryStepIsBitwise) {
  const nlohmann::json g = golden();
  auto b = make_cpu_backend(1);
  Tensor found_inf = b->zeros({1}, DType::f32);
  for (const nlohmann::json& c : g.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const GradScalerOptions o = options_of(c);
    const ScaleUpdateParams p = params_of(o);
    const nlohmann::json& steps = c.at("steps");
    for (size_t k = 0; k <= steps.size(); ++k) {
      GradScaler first(*b, o);
      first.init_state();
      for (size_t i = 0; i < k; ++i) {
        update(*b, first, steps[i].at("found_inf").get<int>() != 0, p, found_inf);
      }
      const nlohmann::json saved = nlohmann::json::parse(first.state_dict().dump());
      GradScaler resumed(*b, o);
      resumed.load_state_dict(saved);
      resumed.init_state();
      EXPECT_EQ(resumed.state_dict(), saved) << name << ", saved after step " << k;
      for (size_t i = k; i < steps.size(); ++i) {
        update(*b, resumed, steps[i].at("found_inf").get<int>() != 0, p, found_inf);
        ASSERT_TRUE(matches(read_row(*b, resumed), steps[i], o))
            << name << ", resumed after step " << k << ", step " << i;
      }
    }
  }
}

// The state_dict holds PyTorch's five keys plus the rule's state under its framework's names.
TEST(ScalePolicies, StateDictNamesTheRulesState) {
  auto b = make_cpu_backend(1);
  auto keys_of = [&](ScalePolicy policy) {
    GradScalerOptions o;
    o.rule.policy = policy;
    GradScaler s(*b, o);
    const nlohmann::json sd = s.state_dict();
    std::vector<std::string> keys;
    for (const auto& [k, v] : sd.items()) keys.push_back(k);
    return keys;
  };
  using V = std::vector<std::string>;
  const V five = {"_growth_tracker", "backoff_factor", "growth_factor", "growth_interval", "scale"};
  auto with = [&](V extra) {
    V all = five;
    all.insert(all.end(), extra.begin(), extra.end());
    std::sort(all.begin(), all.end());
    return all;
  };
  EXPECT_EQ(keys_of(ScalePolicy::pytorch), with({"_hysteresis_tracker"}));
  EXPECT_EQ(keys_of(ScalePolicy::megatron), with({"hysteresis_tracker", "policy"}));
  EXPECT_EQ(keys_of(ScalePolicy::deepspeed),
            with({"cur_hysteresis", "cur_iter", "last_overflow_iter", "policy"}));
  EXPECT_EQ(keys_of(ScalePolicy::fairseq),
            with({"_iter", "_last_overflow_iter", "_last_rescale_iter", "_overflows_since_rescale",
                  "policy"}));
}

// Loading another rule's state: the scale carries over, the counters start afresh.
TEST(ScalePolicies, AnotherRulesStateKeepsOnlyTheScale) {
  auto b = make_cpu_backend(1);
  GradScalerOptions ds;
  ds.rule.policy = ScalePolicy::deepspeed;
  ds.rule.hysteresis = 3;
  ds.rule.growth_interval = 5;
  GradScaler a(*b, ds);
  a.init_state();
  Tensor found_inf = b->zeros({1}, DType::f32);
  const ScaleUpdateParams p = params_of(ds);
  for (bool f : {false, false, true, false, true, true, true, false})
    update(*b, a, f, p, found_inf);
  const nlohmann::json saved = a.state_dict();
  ASSERT_EQ(saved.at("cur_iter").get<int>(), 8);
  GradScalerOptions fs;
  fs.rule.policy = ScalePolicy::fairseq;
  fs.rule.growth_interval = 5;
  GradScaler f(*b, fs);
  f.load_state_dict(saved);
  f.init_state();
  const nlohmann::json loaded = f.state_dict();
  EXPECT_EQ(loaded.at("scale"), saved.at("scale"));
  EXPECT_EQ(loaded.at("_growth_tracker").get<int>(), 0);
  EXPECT_EQ(loaded.at("_iter").get<int>(), 0);
  EXPECT_EQ(loaded.at("_last_overflow_iter").get<int>(), -1);
  EXPECT_EQ(loaded.at("_last_rescale_iter").get<int>(), -1);
  EXPECT_EQ(loaded.at("_overflows_since_rescale").get<int>(), 0);
}

// The one validator (checkpoint/scaler_state.h) refuses a rule's state that is incomplete,
// mixed with another rule's, or out of range, naming the key.
TEST(ScalePolicies, LoadRefusesABadRuleState) {
  auto b = make_cpu_backend(1);
  GradScalerOptions o;
  o.rule.policy = ScalePolicy::fairseq;
  GradScaler s(*b, o);
  const nlohmann::json good = s.state_dict();
  auto refused = [&](nlohmann::json state, const std::string& words) {
    try {
      s.load_state_dict(state);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted " << state.dump();
  };
  nlohmann::json j = good;
  j.erase("_last_rescale_iter");
  refused(j, "missing key '_last_rescale_iter' (policy fairseq)");
  j = good;
  j["cur_iter"] = 3;
  refused(j, "unknown key 'cur_iter' (policy fairseq)");
  j = good;
  j["_iter"] = 4;
  j["_last_overflow_iter"] = 4;
  refused(j, "scaler._last_overflow_iter: must be in [-1, _iter - 1 = 3], got 4");
  j = good;
  j["policy"] = "apex";
  refused(j, "scaler.policy: expected one of pytorch, deepspeed, megatron, fairseq");
  j = good;
  j["_overflows_since_rescale"] = 1.5;
  refused(j, "scaler._overflows_since_rescale: expected an integer");
  s.load_state_dict(good);
}

}  // namespace
}  // namespace ampctl::amp
