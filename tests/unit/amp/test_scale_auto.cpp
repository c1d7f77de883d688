// scaler.policy: auto (amp_math.h update_scale_auto, Backend::update_scale_auto_, GradScaler).
// The reference here is written another way: the scale by a brute-force search over every float
// exponent (products formed exactly in double), the ring as a list of every update's entry with
// the window taken from its tail; the scaler under test runs the CPU backend's op, the code the
// CUDA kernel runs (amp_math.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/core/half.h"
#include "ampctl/math/amp_math.h"
#include "ampctl/math/numerics_math.h"
#include "ampctl/optim/sgd.h"

namespace ampctl::amp {
namespace {

constexpr double kHalfMax = 65504.0;
constexpr double kBf16Max = 3.3895313892515355e38;

// The largest power of two 2^e, e in [-126, 127], with 2^e x 2^margin x amax <= max_finite, or
// 2^-126 when none; then clamped to [min_scale, max_scale]. Every product is exact in double
// (exponents stay within [-300, 330]).
float brute_force_scale(float amax, int margin, double max_finite, float min_scale = 0.0f,
                        float max_scale = std::numeric_limits<float>::infinity()) {
  float s = std::ldexp(1.0f, -126);
  for (int e = 127; e >= -126; --e) {
    if (std::ldexp(static_cast<double>(amax), e + margin) <= max_finite) {
      s = std::ldexp(1.0f, e);
      break;
    }
  }
  return std::clamp(s, min_scale, max_scale);
}

ScaleUpdateParams auto_params(int margin, int history, double max_finite) {
  ScaleUpdateParams p;
  p.policy = ScalePolicy::automatic;
  p.margin = margin;
  p.amax_history = history;
  p.max_finite = static_cast<float>(max_finite);
  p.max_scale = std::numeric_limits<float>::infinity();
  return p;
}

TEST(ScaleAuto, ScaleForEqualsABruteForceSearch) {
  std::mt19937 rng(7);
  std::vector<float> values;
  // Every exponent with random mantissas, and the edges: the range divided by powers of two
  // exactly, one ulp either side, the smallest subnormal and float's largest value.
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  for (int e = 1; e < 255; ++e) {
    for (int k = 0; k < 4; ++k) values.push_back(bits_float((uint32_t(e) << 23) | mantissa(rng)));
  }
  for (double m : {kHalfMax, kBf16Max}) {
    for (int k = -100; k <= 100; k += 3) {
      const float x = static_cast<float>(std::ldexp(m, k));
      if (!std::isfinite(x) || x == 0.0f) continue;
      values.insert(values.end(), {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e38f)});
    }
  }
  values.insert(values.end(), {bits_float(1), std::numeric_limits<float>::max(), 1.0f});
  int checked = 0;
  for (double max_finite : {kHalfMax, kBf16Max}) {
    for (int margin : {0, 1, 2, 7}) {
      const ScaleUpdateParams p = auto_params(margin, 1, max_finite);
      for (float v : values) {
        ASSERT_EQ(float_bits(auto_scale_for(v, p)),
                  float_bits(brute_force_scale(v, margin, max_finite)))
            << "amax " << v << " margin " << margin << " max_finite " << max_finite;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 8000);
  // The bounds clamp.
  ScaleUpdateParams p = auto_params(1, 1, kHalfMax);
  p.min_scale = 3.0f;
  p.max_scale = 1000.0f;
  EXPECT_EQ(auto_scale_for(1e-9f, p), 1000.0f);
  EXPECT_EQ(auto_scale_for(1e9f, p), 3.0f);
  EXPECT_EQ(auto_scale_for(1.0f, p), 1000.0f);  // 2^14 capped
  EXPECT_EQ(auto_scale_for(40.0f, p), 512.0f);  // 2^9 x 2 x 40 = 40960 <= 65504 < 2^10 x 80
}

// An independent model of the rule over a run: every update's ring entry kept in a list.
struct Model {
  double max_finite;
  int margin;
  int history;
  float backoff = 0.5f;
  float scale;
  std::vector<float> entries;  // one per update, oldest first
  int skipped = 0;

  void update(float raw, bool found) {
    float r = found ? std::max(raw, static_cast<float>(max_finite)) : raw;
    double q = static_cast<double>(r) / static_cast<double>(scale);
    entries.push_back(static_cast<float>(std::min<double>(q, std::numeric_limits<float>::max())));
    float m = 0.0f;
    for (size_t i = entries.size() > size_t(history) ? entries.size() - history : 0;
         i < entries.size(); ++i) {
      m = std::max(m, entries[i]);
    }
    const float target = m > 0.0f ? brute_force_scale(m, margin, max_finite) : scale;
    if (found) {
      ++skipped;
      scale = std::min(static_cast<float>(static_cast<double>(scale) * backoff), target);
    } else {
      scale = target;
    }
  }
};

// A run's measurements: per unit of scale, drifting over the steps with bursts; the device's
// accumulator at scale s holds float(u x s) and overflows past the range (or, now and then, a
// non-finite value reached a rounding: the accumulator then holds only the finite part).
struct Measure {
  float raw;
  bool found;
  float nonfinite_flag;
};
Measure measure(double per_unit, float scale, double max_finite, bool nonfinite) {
  const auto raw = static_cast<float>(per_unit * static_cast<double>(scale));
  if (nonfinite) return {raw * 0.25f, true, 1.0f};
  return {raw, static_cast<double>(raw) > max_finite, 0.0f};
}

GradScalerOptions auto_options(double init, int margin, int history, double max_finite) {
  GradScalerOptions o;
  o.rule.policy = ScalePolicy::automatic;
  o.init_scale = init;
  o.rule.margin = margin;
  o.rule.amax_history = history;
  o.rule.max_finite = max_finite;
  return o;
}

ScaleUpdateParams params_of(const GradScalerOptions& o) {
  ScaleUpdateParams p = auto_params(o.rule.margin, o.rule.amax_history, o.rule.max_finite);
  p.backoff_factor = o.rule.backoff_factor;
  p.min_scale = static_cast<float>(o.rule.min_scale);
  p.max_scale = static_cast<float>(o.rule.max_scale);
  return p;
}

std::vector<double> per_unit_series(uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> drift(0.0, 0.15);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> out;
  double level = 1e-3;
  for (int i = 0; i < steps; ++i) {
    level *= std::exp(drift(rng));
    out.push_back(u(rng) < 0.03 ? level * 40.0 : level);  // a burst now and then
  }
  return out;
}

TEST(ScaleAuto, EveryUpdateEqualsTheModel) {
  auto b = make_cpu_backend(1);
  Tensor amax = b->zeros({numerics::kAmaxWords}, DType::f32);
  Tensor found_inf = b->zeros({1}, DType::f32);
  int overflows = 0, nonfinite_steps = 0;
  for (double max_finite : {kHalfMax, kBf16Max}) {
    for (double init : {std::ldexp(1.0, 40), std::ldexp(1.0, -20), 65536.0}) {
      for (int margin : {0, 1, 3}) {
        for (int history : {1, 4, 16}) {
          const GradScalerOptions o = auto_options(init, margin, history, max_finite);
          GradScaler s(*b, o);
          s.init_state();
          Model model{max_finite, margin, history, 0.5f, static_cast<float>(init), {}, 0};
          const std::vector<double> series = per_unit_series(history * 31 + margin, 200);
          std::mt19937 rng(margin);
          for (size_t i = 0; i < series.size(); ++i) {
            const bool nonfinite = rng() % 50 == 0;
            const Measure m = measure(series[i], model.scale, max_finite, nonfinite);
            overflows += m.found;
            nonfinite_steps += nonfinite;
            const float words[numerics::kAmaxWords] = {m.raw, m.nonfinite_flag};
            b->upload(amax, words, sizeof(words));
            b->fill(found_inf, m.found ? 1.0 : 0.0);
            b->update_scale_auto_(s.scale_tensor(), s.growth_tracker_tensor(), s.trackers_tensor(),
                                  found_inf, amax, s.amax_history_tensor(), params_of(o));
            model.update(m.raw, m.found);
            ASSERT_EQ(float_bits(b->read_scalar_f32(s.scale_tensor())), float_bits(model.scale))
                << "init " << init << " margin " << margin << " history " << history << " update "
                << i;
          }
        }
      }
    }
  }
  // The series exercised the overflow branch, both through the range and through a non-finite.
  EXPECT_GT(overflows, 100);
  EXPECT_GT(nonfinite_steps, 20);
}

// Saved after any update and loaded into a new scaler, the rule continues bit for bit; loaded
// with another amax_history it keeps the most recent entries that fit.
TEST(ScaleAuto, ResumeAtEveryUpdateIsBitwise) {
  auto b = make_cpu_backend(1);
  Tensor amax = b->zeros({numerics::kAmaxWords}, DType::f32);
  Tensor found_inf = b->zeros({1}, DType::f32);
  const std::vector<double> series = per_unit_series(3, 40);
  for (int new_history : {6, 3, 11}) {
    const GradScalerOptions o = auto_options(std::ldexp(1.0, 30), 1, 6, kHalfMax);
    const GradScalerOptions o2 = auto_options(std::ldexp(1.0, 30), 1, new_history, kHalfMax);
    for (size_t k = 0; k <= series.size(); ++k) {
      GradScaler first(*b, o);
      first.init_state();
      Model model{kHalfMax, 1, 6, 0.5f, std::ldexp(1.0f, 30), {}, 0};
      for (size_t i = 0; i < k; ++i) {
        const Measure m = measure(series[i], model.scale, kHalfMax, false);
        const float w[2] = {m.raw, 0.0f};
        b->upload(amax, w, sizeof(w));
        b->fill(found_inf, m.found ? 1.0 : 0.0);
        b->update_scale_auto_(first.scale_tensor(), first.growth_tracker_tensor(),
                              first.trackers_tensor(), found_inf, amax, first.amax_history_tensor(),
                              params_of(o));
        model.update(m.raw, m.found);
      }
      const nlohmann::json saved = nlohmann::json::parse(first.state_dict().dump());
      ASSERT_EQ(saved.at("policy"), "auto");
      ASSERT_EQ(saved.at("amax_history").size(), 6u);
      ASSERT_EQ(saved.at("_iter").get<size_t>(), k);
      GradScaler resumed(*b, o2);
      resumed.load_state_dict(saved);
      resumed.init_state();
      if (new_history == 6) {
        EXPECT_EQ(resumed.state_dict(), saved) << "saved after " << k;
      }
      // The model resumed: the entries the saved ring still held (the last 6), then the window
      // of the new length.
      Model after = model;
      after.history = new_history;
      for (size_t i = 0; i + 6 < after.entries.size(); ++i) after.entries[i] = 0.0f;
      for (size_t i = k; i < series.size(); ++i) {
        const Measure m = measure(series[i], after.scale, kHalfMax, false);
        const float w[2] = {m.raw, 0.0f};
        b->upload(amax, w, sizeof(w));
        b->fill(found_inf, m.found ? 1.0 : 0.0);
        b->update_scale_auto_(resumed.scale_tensor(), resumed.growth_tracker_tensor(),
                              resumed.trackers_tensor(), found_inf, amax,
                              resumed.amax_history_tensor(), params_of(o2));
        after.update(m.raw, m.found);
        ASSERT_EQ(float_bits(b->read_scalar_f32(resumed.scale_tensor())), float_bits(after.scale))
            << "history 6 -> " << new_history << ", saved after " << k << ", update " << i;
      }
    }
  }
}

// GradScaler::update under auto reads the input set_amax_input names (the step's accumulator),
// and refuses to run without one.
TEST(ScaleAuto, UpdateReadsTheAmaxInput) {
  auto b = make_cpu_backend(1);
  Tensor params = b->zeros({4}, DType::f32);
  Tensor grads = b->zeros({4}, DType::f32);
  std::vector<optim::ParamGroup> groups{{params, grads, Tensor{}, 0.1}};
  optim::Sgd opt(*b, groups, optim::SgdOptions{});
  GradScaler s(*b, auto_options(1024.0, 1, 4, kHalfMax));
  s.init_state();
  s.step(opt);
  try {
    s.update();
    ADD_FAILURE() << "update without an amax input ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::state);
    EXPECT_NE(std::string(e.what()).find("set_amax_input"), std::string::npos) << e.what();
  }
  // The accumulator at scale 1024 holds 40 x 1024: the next
  // scale is the largest power of two with s x 2 x 40 <= 65504, 2^9.
  Tensor amax = b->zeros({numerics::kAmaxWords}, DType::f32);
  b->fill(amax.view(0, {1}), 40.0 * 1024.0);
  s.set_amax_input(amax);
  s.update();  // the refused update left the step's check recorded
  EXPECT_EQ(s.get_scale(), 512.0);
}

TEST(ScaleAuto, StateDictKeysAndRefusals) {
  auto b = make_cpu_backend(1);
  GradScaler s(*b, auto_options(1024.0, 1, 4, kHalfMax));
  const nlohmann::json sd = s.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, v] : sd.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"_growth_tracker", "_iter", "_last_overflow_iter",
                                            "amax_history", "backoff_factor", "growth_factor",
                                            "growth_interval", "policy", "scale"}));
  EXPECT_EQ(sd.at("amax_history"), nlohmann::json::array({0.0, 0.0, 0.0, 0.0}));
  auto refused = [&](nlohmann::json state, const std::string& words) {
    GradScaler t(*b, auto_options(1024.0, 1, 4, kHalfMax));
    try {
      t.load_state_dict(state);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted " << state.dump();
  };
  nlohmann::json bad = sd;
  bad.erase("amax_history");
  refused(bad, "missing key 'amax_history'");
  bad = sd;
  bad["amax_history"] = nlohmann::json::array();
  refused(bad, "scaler.amax_history: expected a list of 1 to 4096");
  bad["amax_history"] = {1.0, -2.0};
  refused(bad, "scaler.amax_history[1]: expected a finite float32 >= 0");
  bad["amax_history"] = {1.0, 1e300};
  refused(bad, "scaler.amax_history[1]");
  bad["amax_history"] = {"x"};
  refused(bad, "scaler.amax_history[0]");
  bad = sd;
  bad["cur_iter"] = 3;
  refused(bad, "unknown key 'cur_iter' (policy auto)");
}

// Both backends share one check (backend.h check_update_scale_auto): a ring of another length
// than params.amax_history, another rule, a missing operand.
TEST(ScaleAuto, TheOpRefusesBadOperands) {
  auto b = make_cpu_backend(1);
  GradScaler s(*b, auto_options(1024.0, 1, 4, kHalfMax));
  s.init_state();
  Tensor amax = b->zeros({numerics::kAmaxWords}, DType::f32);
  Tensor found_inf = b->zeros({1}, DType::f32);
  auto call = [&](const Tensor& history, const Tensor& a, ScaleUpdateParams p) {
    b->update_scale_auto_(s.scale_tensor(), s.growth_tracker_tensor(), s.trackers_tensor(),
                          found_inf, a, history, p);
  };
  ScaleUpdateParams p = auto_params(1, 4, kHalfMax);
  EXPECT_NO_THROW(call(s.amax_history_tensor(), amax, p));
  ScaleUpdateParams five = auto_params(1, 5, kHalfMax);
  EXPECT_THROW(call(s.amax_history_tensor(), amax, five), Error);
  ScaleUpdateParams other = p;
  other.policy = ScalePolicy::pytorch;
  EXPECT_THROW(call(s.amax_history_tensor(), amax, other), Error);
  EXPECT_THROW(call(s.amax_history_tensor(), Tensor{}, p), Error);
  EXPECT_THROW(call(s.amax_history_tensor(), b->zeros({1}, DType::f32), p), Error);
  EXPECT_THROW(call(b->zeros({4}, DType::i32), amax, p), Error);
}

}  // namespace
}  // namespace ampctl::amp
