// GradScaler's API against PyTorch's behaviour: its documented numbers, its state machine and
// error messages, the disabled scaler, state_dict round trips, and skipped steps that leave
// parameters and optimizer state bitwise unchanged. Every behavioural test runs on both the
// unfused path (found_inf read on the host, as PyTorch's eager optimizers) and the fused path
// (the optimizer skips on the device).
#include "ampctl/amp/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "ampctl/optim/sgd.h"
#include "test_util.h"

namespace ampctl::amp {
namespace {

using testing::bits_of;
using testing::make_f32;
using testing::read_f32;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// An optimizer without the fused amp path: GradScaler must unscale, read found_inf on the host
// and decide itself whether to call step(). It counts its calls.
class UnfusedSgd final : public optim::Optimizer {
 public:
  UnfusedSgd(Backend& b, std::vector<optim::ParamGroup> groups)
      : Optimizer(b, std::move(groups)), m_step(b.zeros({1}, DType::i32)) {}
  void step() override {
    ++calls;
    for (auto& g : param_groups()) {
      OptimizerStepArgs a;
      a.params = g.params;
      a.grads = g.grads;
      a.step = m_step;
      optim::SgdHyper h;
      h.lr = static_cast<float>(g.lr);
      a.hyper = h;
      backend().optimizer_step(a);
    }
  }
  nlohmann::json state_dict() const override { return {}; }
  void load_state_dict(const nlohmann::json&) override {}
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override {
    return {{"step", m_step}};
  }
  int calls = 0;

 private:
  Tensor m_step;
};

// One model's worth of parameters and gradients with an optimizer over them.
struct Model {
  Tensor params, grads;
  std::unique_ptr<optim::Optimizer> opt;

  Model(Backend& b, bool fused, std::vector<float> p, float lr = 0.5f, float momentum = 0.9f) {
    params = make_f32(b, p);
    grads = b.zeros(params.shape(), DType::f32);
    std::vector<optim::ParamGroup> groups{{params, grads, Tensor{}, lr}};
    if (fused) {
      optim::SgdOptions o;
      o.momentum = momentum;
      opt = std::make_unique<optim::Sgd>(b, groups, o);
    } else {
      opt = std::make_unique<UnfusedSgd>(b, groups);
    }
  }
  void set_grads(Backend& b, const std::vector<float>& g) {
    b.upload(grads, g.data(), grads.nbytes());
  }
};

class GradScalerTest : public ::testing::TestWithParam<bool> {
 protected:
  bool fused() const { return GetParam(); }
  std::unique_ptr<Backend> b = make_cpu_backend(1);

  // One PyTorch iteration: scale(loss) stands in for the backward pass that produced `grads`.
  StepStatus iterate(GradScaler& s, Model& m, const std::vector<float>& grads) {
    s.scale(make_f32(*b, {1.0f}));
    m.set_grads(*b, grads);
    StepStatus st = s.step(*m.opt);
    s.update();
    return st;
  }
};

TEST_P(GradScalerTest, PyTorchNumbersThroughTheScaler) {
  GradScalerOptions o;
  o.init_scale = 4.0;
  o.rule.growth_factor = 2.0;
  o.rule.backoff_factor = 0.25;
  o.rule.growth_interval = 2;
  GradScaler s(*b, o);
  Model m(*b, fused(), {1.0f, 2.0f});
  iterate(s, m, {0.5f, 0.5f});
  EXPECT_EQ(s.get_scale(), 4.0);
  EXPECT_EQ(s.get_growth_tracker(), 1);
  iterate(s, m, {0.5f, 0.5f});
  EXPECT_EQ(s.get_scale(), 8.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
  iterate(s, m, {kInf, 0.5f});
  EXPECT_EQ(s.get_scale(), 2.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
}

TEST_P(GradScalerTest, DefaultsGrowOnce2000CleanStepsHavePassed) {
  GradScaler s(*b);
  Model m(*b, fused(), {1.0f}, 0.0f);
  for (int i = 0; i < 1999; ++i) iterate(s, m, {1.0f});
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.get_growth_tracker(), 1999);
  iterate(s, m, {1.0f});
  EXPECT_EQ(s.get_scale(), 131072.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
}

TEST_P(GradScalerTest, UnscalingFourByScaleFourGivesExactlyOne) {
  GradScalerOptions o;
  o.init_scale = 4.0;
  GradScaler s(*b, o);
  Model m(*b, fused(), {0.0f, 0.0f, 0.0f});
  s.scale(make_f32(*b, {1.0f}));
  m.set_grads(*b, {4.0f, -4.0f, 2.0f});
  s.unscale_(*m.opt);
  EXPECT_EQ(read_f32(*b, m.grads), (std::vector<float>{1.0f, -1.0f, 0.5f}));
  EXPECT_EQ(s.stage(*m.opt), OptState::unscaled);
  EXPECT_EQ(s.step(*m.opt), fused() ? StepStatus::on_device : StepStatus::stepped);
  s.update();
  EXPECT_EQ(s.stage(*m.opt), OptState::ready);
}

TEST_P(GradScalerTest, InfAndNanBothSkipAndBackOff) {
  for (float bad : {kInf, -kInf, kNaN}) {
    GradScaler s(*b);
    Model m(*b, fused(), {1.0f, 2.0f, 3.0f});
    iterate(s, m, {0.1f, 0.2f, 0.3f});  // one real step: momentum buffer and step count exist
    const std::vector<float> p_before = read_f32(*b, m.params);
    auto state_bytes = [&] {
      std::vector<std::vector<uint8_t>> out;
      for (auto& [name, t] : m.opt->state_tensors()) {
        out.emplace_back(t.nbytes());
        b->download(out.back().data(), t);
      }
      return out;
    };
    const auto state_before = state_bytes();
    const StepStatus st = iterate(s, m, {0.1f, bad, 0.3f});
    EXPECT_EQ(st, fused() ? StepStatus::on_device : StepStatus::skipped);
    EXPECT_EQ(bits_of(read_f32(*b, m.params)), bits_of(p_before)) << "bad=" << bad;
    EXPECT_EQ(state_bytes(), state_before) << "optimizer state changed on a skipped step";
    EXPECT_EQ(s.get_scale(), 32768.0);
    EXPECT_EQ(b->read_scalar_f32(s.found_inf_tensor()), 1.0f);
  }
}

TEST_P(GradScalerTest, TwoOptimizersOneOverflowBacksOffOnceAndOnlyThatOneSkips) {
  GradScaler s(*b);
  Model clean(*b, fused(), {1.0f, 1.0f});
  Model bad(*b, fused(), {2.0f, 2.0f});
  s.scale(make_f32(*b, {1.0f}));
  clean.set_grads(*b, {65536.0f, 65536.0f});  // 1.0 once unscaled
  bad.set_grads(*b, {kInf, 65536.0f});
  s.step(*clean.opt);
  s.step(*bad.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 32768.0);  // one backoff, not two
  EXPECT_EQ(s.get_growth_tracker(), 0);
  // lr 0.5, first momentum step: p - 0.5 * 1.0.
  EXPECT_EQ(read_f32(*b, clean.params), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(read_f32(*b, bad.params), (std::vector<float>{2.0f, 2.0f}));
  if (!fused()) {
    EXPECT_EQ(static_cast<UnfusedSgd&>(*clean.opt).calls, 1);
    EXPECT_EQ(static_cast<UnfusedSgd&>(*bad.opt).calls, 0);
  }
}

TEST_P(GradScalerTest, ErrorMessagesOfPyTorch) {
  GradScaler s(*b);
  Model m(*b, fused(), {1.0f});
  auto expect_state_error = [](auto&& f, const std::string& message) {
    try {
      f();
      ADD_FAILURE() << "no error, expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::state);
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  // Before the first scale() nothing is initialised.
  expect_state_error([&] { s.step(*m.opt); },
                     "Attempted step but _scale is None.  This may indicate your script did not "
                     "use scaler.scale(loss or outputs) earlier in the iteration.");
  s.scale(make_f32(*b, {1.0f}));
  expect_state_error([&] { s.update(); }, "No inf checks were recorded prior to update.");
  s.unscale_(*m.opt);
  expect_state_error(
      [&] { s.unscale_(*m.opt); },
      "unscale_() has already been called on this optimizer since the last update().");
  s.step(*m.opt);
  expect_state_error([&] { s.unscale_(*m.opt); }, "unscale_() is being called after step().");
  expect_state_error([&] { s.step(*m.opt); },
                     "step() has already been called since the last update().");
  s.update();
  // After update() the optimizer is READY again.
  s.unscale_(*m.opt);
  s.step(*m.opt);
  s.update();
}

TEST_P(GradScalerTest, NoInfChecksForAnOptimizerWithoutGradients) {
  GradScaler s(*b);
  Tensor empty_p = b->zeros({0}, DType::f32);
  Tensor empty_g = b->zeros({0}, DType::f32);
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<optim::ParamGroup> groups{{empty_p, empty_g, Tensor{}, 0.1f}};
  if (fused()) {
    opt = std::make_unique<optim::Sgd>(*b, groups);
  } else {
    opt = std::make_unique<UnfusedSgd>(*b, groups);
  }
  s.scale(make_f32(*b, {1.0f}));
  try {
    s.step(*opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "No inf checks were recorded for this optimizer.");
  }
}

TEST_P(GradScalerTest, UnscalingFp16GradientsIsRefused) {
  GradScaler s(*b);
  Tensor p = make_f32(*b, {1.0f});
  Tensor g = b->zeros({1}, DType::f16);
  UnfusedSgd opt(*b, {{p, g, Tensor{}, 0.1f}});
  s.scale(make_f32(*b, {1.0f}));
  try {
    s.unscale_(opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "Attempting to unscale FP16 gradients.");
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  }
}

// Attribution: with segments set, each check (step's, or unscale_'s) records which segments
// held an inf or NaN, zeroing the previous step's record first; found_inf and the skip are as
// without it.
TEST_P(GradScalerTest, SegmentsRecordWhichPartsOfTheGradientsOverflowed) {
  GradScaler s(*b);
  Model m(*b, fused(), std::vector<float>(10, 1.0f));
  s.set_grad_segments(*m.opt, {0, 3, 4, 8});  // [0,3) [3,4) [4,8) [8,10)
  const std::vector<std::pair<std::vector<float>, std::vector<int32_t>>> cases = {
      {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0}},
      {{1, 1, 1, kInf, 1, 1, 1, 1, 1, kNaN}, {0, 1, 0, 1}},
      {{kNaN, 1, 1, 1, 1, 1, 1, -kInf, 1, 1}, {1, 0, 1, 0}},
      {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    for (bool explicit_unscale : {false, true}) {
      s.scale(make_f32(*b, {1.0f}));
      m.set_grads(*b, cases[c].first);
      if (explicit_unscale) s.unscale_(*m.opt);
      s.step(*m.opt);
      s.update();
      std::vector<int32_t> got(4);
      b->download(got.data(), s.segment_found_tensor(*m.opt));
      EXPECT_EQ(got, cases[c].second) << "case " << c << ", unscale_ " << explicit_unscale;
      const bool any = cases[c].second != std::vector<int32_t>(4, 0);
      EXPECT_EQ(b->read_scalar_f32(s.found_inf_tensor()), any ? 1.0f : 0.0f) << "case " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GradScalerTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "fused" : "unfused"; });

class GradScalerApi : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> b = make_cpu_backend(1);
};

TEST_F(GradScalerApi, ScaleMultipliesInFloatAndRoundsToTheTensorsDtype) {
  GradScalerOptions o;
  o.init_scale = 3.0;
  GradScaler s(*b, o);
  EXPECT_EQ(read_f32(*b, s.scale(make_f32(*b, {0.1f, -2.0f}))),
            (std::vector<float>{0.1f * 3.0f, -6.0f}));
  // An f16 output is rounded once: 0.1 (as f16) * 3 = 0.2999267578125 -> f16 0.2998046875.
  const half x(0.1f);
  Tensor h = b->from_host({1}, DType::f16, &x);
  Tensor scaled = s.scale(h);
  EXPECT_EQ(scaled.dtype(), DType::f16);
  half out;
  b->download(&out, scaled);
  EXPECT_EQ(out.bits, half(static_cast<float>(x) * 3.0f).bits);
  // A list is scaled element by element.
  auto list = s.scale(std::vector<Tensor>{make_f32(*b, {1.0f}), make_f32(*b, {2.0f})});
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(read_f32(*b, list[1]), std::vector<float>{6.0f});
  // 30000 * 3 = 90000 overflows f16 once scaled.
  const half big(30000.0f);
  Tensor hb = b->from_host({1}, DType::f16, &big);
  b->download(&out, s.scale(hb));
  EXPECT_TRUE(std::isinf(static_cast<float>(out)));
}

TEST_F(GradScalerApi, GetScaleBeforeFirstUseIsTheInitialScale) {
  GradScalerOptions o;
  o.init_scale = 1024.0;
  GradScaler s(*b, o);
  EXPECT_EQ(s.get_scale(), 1024.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
  EXPECT_FALSE(s.scale_tensor().defined());
  EXPECT_TRUE(s.is_enabled());
}

TEST_F(GradScalerApi, UpdateWithANewScaleLeavesTheTrackerAlone) {
  GradScaler s(*b);
  Model m(*b, true, {1.0f});
  s.scale(make_f32(*b, {1.0f}));
  s.step(*m.opt);
  s.update();
  ASSERT_EQ(s.get_growth_tracker(), 1);
  s.update(1024.0);
  EXPECT_EQ(s.get_scale(), 1024.0);
  EXPECT_EQ(s.get_growth_tracker(), 1);
  s.update(make_f32(*b, {512.0f}));
  EXPECT_EQ(s.get_scale(), 512.0);
  EXPECT_EQ(s.get_growth_tracker(), 1);
  // The tensor is copied: changing it later does not change the scale.
  Tensor t = make_f32(*b, {256.0f});
  s.update(t);
  b->fill(t, 7.0);
  EXPECT_EQ(s.get_scale(), 256.0);
  EXPECT_THROW(s.update(make_f32(*b, {1.0f, 2.0f})), Error);  // not one element
  // A python float is a double: it is rounded to the f32 scale.
  s.update(0.1);
  EXPECT_EQ(s.get_scale(), static_cast<double>(0.1f));
}

TEST_F(GradScalerApi, StateDictHasPyTorchsKeysAndTypesAndRoundTrips) {
  GradScalerOptions o;
  o.init_scale = 8.0;
  o.rule.growth_interval = 3;
  GradScaler s(*b, o);
  Model m(*b, true, {1.0f});
  for (int i = 0; i < 2; ++i) {
    s.scale(make_f32(*b, {1.0f}));
    s.step(*m.opt);
    s.update();
  }
  const nlohmann::json sd = s.state_dict();
  ASSERT_TRUE(sd.is_object());
  EXPECT_TRUE(sd.at("scale").is_number_float());
  EXPECT_TRUE(sd.at("growth_factor").is_number_float());
  EXPECT_TRUE(sd.at("backoff_factor").is_number_float());
  EXPECT_TRUE(sd.at("growth_interval").is_number_integer());
  EXPECT_TRUE(sd.at("_growth_tracker").is_number_integer());
  EXPECT_TRUE(sd.at("_hysteresis_tracker").is_number_integer());
  EXPECT_EQ(sd.size(), 6u);  // PyTorch's five plus the extensions' counter
  EXPECT_EQ(sd.at("scale").get<double>(), 8.0);
  EXPECT_EQ(sd.at("_growth_tracker").get<int>(), 2);
  EXPECT_EQ(sd.at("growth_interval").get<int>(), 3);
  // The JSON text survives a dump/parse cycle with its types.
  const nlohmann::json back = nlohmann::json::parse(sd.dump());
  GradScaler r(*b);
  r.load_state_dict(back);
  EXPECT_EQ(r.get_scale(), 8.0);
  EXPECT_EQ(r.get_growth_tracker(), 2);
  EXPECT_EQ(r.get_growth_interval(), 3);
  EXPECT_EQ(r.state_dict(), sd);
  // Loaded before lazy init, then the next clean step grows (tracker 2 -> 3 == interval).
  Model m2(*b, true, {1.0f});
  r.scale(make_f32(*b, {1.0f}));
  r.step(*m2.opt);
  r.update();
  EXPECT_EQ(r.get_scale(), 16.0);
  // A PyTorch state dict (no hysteresis key) loads with a full hysteresis counter.
  nlohmann::json torch_sd = sd;
  torch_sd.erase("_hysteresis_tracker");
  GradScaler t(*b);
  t.load_state_dict(torch_sd);
  EXPECT_EQ(t.get_hysteresis_tracker(), 1);
}

TEST_F(GradScalerApi, LoadStateDictValidates) {
  GradScaler s(*b);
  try {
    s.load_state_dict(nlohmann::json::object());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "The source state dict is empty, possibly because it was saved from a disabled "
              "instance of GradScaler.");
    EXPECT_EQ(e.kind(), ErrorKind::input);
  }
  const nlohmann::json good = {{"scale", 1024.0},
                               {"growth_factor", 2.0},
                               {"backoff_factor", 0.5},
                               {"growth_interval", 2000},
                               {"_growth_tracker", 10}};
  s.load_state_dict(good);
  for (const char* key :
       {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    nlohmann::json missing = good;
    missing.erase(key);
    try {
      s.load_state_dict(missing);
      ADD_FAILURE() << "missing " << key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  nlohmann::json wrong = good;
  wrong["_growth_tracker"] = "37";
  EXPECT_THROW(s.load_state_dict(wrong), Error);
  wrong = good;
  wrong["growth_interval"] = 2.5;
  EXPECT_THROW(s.load_state_dict(wrong), Error);
  wrong = good;
  wrong["scale"] = -1.0;
  EXPECT_THROW(s.load_state_dict(wrong), Error);
  // A failed load changes nothing.
  EXPECT_EQ(s.get_scale(), 1024.0);
  EXPECT_EQ(s.get_growth_tracker(), 10);
}

TEST_F(GradScalerApi, DisabledScalerIsTransparent) {
  GradScalerOptions o;
  o.enabled = false;
  o.rule.growth_factor = 0.5;  // not validated when disabled, as in PyTorch
  GradScaler s(*b, o);
  EXPECT_FALSE(s.is_enabled());
  EXPECT_EQ(s.get_scale(), 1.0);
  EXPECT_EQ(s.state_dict(), nlohmann::json::object());
  Tensor loss = make_f32(*b, {3.0f});
  Tensor scaled = s.scale(loss);
  EXPECT_TRUE(scaled.shares_storage_with(loss));
  // step passes straight through, inf gradients and all.
  Tensor p = make_f32(*b, {1.0f});
  Tensor g = make_f32(*b, {2.0f});
  UnfusedSgd opt(*b, {{p, g, Tensor{}, 0.5f}});
  EXPECT_EQ(s.step(opt), StepStatus::stepped);
  EXPECT_EQ(opt.calls, 1);
  EXPECT_EQ(read_f32(*b, p), std::vector<float>{0.0f});
  s.unscale_(opt);
  s.update();
  s.update(5.0);
  s.load_state_dict(nlohmann::json::object());  // a no-op, no error
  EXPECT_EQ(s.get_scale(), 1.0);
}

TEST_F(GradScalerApi, ConstructorValidation) {
  auto message = [&](GradScalerOptions o) -> std::string {
    try {
      GradScaler s(*b, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      return e.what();
    }
    return "";
  };
  GradScalerOptions o;
  o.rule.growth_factor = 1.0;
  EXPECT_EQ(message(o), "The growth factor must be > 1.0.");
  o = {};
  o.rule.backoff_factor = 1.0;
  EXPECT_EQ(message(o), "The backoff factor must be < 1.0.");
  o = {};
  o.init_scale = 0.0;
  EXPECT_NE(message(o), "");
  o.init_scale = std::numeric_limits<double>::infinity();
  EXPECT_NE(message(o), "");
  o = {};
  o.rule.growth_interval = 0;
  EXPECT_NE(message(o), "");
  o = {};
  o.rule.hysteresis = 0;
  EXPECT_NE(message(o), "");
  o = {};
  o.rule.min_scale = 10.0;
  o.rule.max_scale = 1.0;
  EXPECT_NE(message(o), "");
  o = {};
  o.device = "cuda";  // the backend is the CPU one
  EXPECT_NE(message(o), "");
  o = {};
  o.device = "cpu";
  EXPECT_EQ(message(o), "");
}

TEST_F(GradScalerApi, SettersChangeTheNextUpdate) {
  GradScalerOptions o;
  o.init_scale = 16.0;
  GradScaler s(*b, o);
  s.set_growth_interval(1);
  s.set_growth_factor(4.0);
  s.set_backoff_factor(0.125);
  EXPECT_EQ(s.get_growth_interval(), 1);
  EXPECT_EQ(s.get_growth_factor(), 4.0);
  EXPECT_EQ(s.get_backoff_factor(), 0.125);
  Model m(*b, true, {1.0f});
  s.scale(make_f32(*b, {1.0f}));
  s.step(*m.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 64.0);
  s.scale(make_f32(*b, {1.0f}));
  m.set_grads(*b, {kNaN});
  s.step(*m.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 8.0);
}

TEST_F(GradScalerApi, FusedAndUnfusedGiveTheSameBits) {
  // The fused optimizer multiplies by inv_scale as it reads the gradients; the unfused path
  // unscales in place first. Both are one float multiply of the same values.
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1000.0f);
  std::vector<float> p(257), g(257);
  for (auto& v : p) v = dist(rng);
  for (auto& v : g) v = dist(rng);
  GradScalerOptions o;
  o.init_scale = 3.0;  // inv_scale is not a power of two: rounding matters
  GradScaler s1(*b, o), s2(*b, o);
  Model m1(*b, true, p, 0.01f, 0.0f), m2(*b, false, p, 0.01f, 0.0f);
  for (auto [s, m] : {std::pair{&s1, &m1}, std::pair{&s2, &m2}}) {
    s->scale(make_f32(*b, {1.0f}));
    m->set_grads(*b, g);
    s->step(*m->opt);
    s->update();
  }
  EXPECT_EQ(bits_of(read_f32(*b, m1.params)), bits_of(read_f32(*b, m2.params)));
}

TEST_F(GradScalerApi, GradSegmentsAreValidated) {
  GradScaler s(*b);
  Model m(*b, true, std::vector<float>(10, 1.0f));
  EXPECT_FALSE(s.segment_found_tensor(*m.opt).defined());
  for (const std::vector<int64_t>& bad : std::vector<std::vector<int64_t>>{
           {}, {1}, {0, 5, 5}, {0, 7, 3}, {0, 11}, {0, int64_t{1} << 31}}) {
    try {
      s.set_grad_segments(*m.opt, bad);
      ADD_FAILURE() << "accepted segments of size " << bad.size();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
    }
  }
  s.set_grad_segments(*m.opt, {0, 10});  // an empty last segment is allowed
  EXPECT_EQ(s.segment_found_tensor(*m.opt).numel(), 2u);
  GradScalerOptions off;
  off.enabled = false;
  GradScaler disabled(*b, off);
  disabled.set_grad_segments(*m.opt, {0});
  EXPECT_FALSE(disabled.segment_found_tensor(*m.opt).defined());
}

TEST_F(GradScalerApi, HysteresisThroughTheScaler) {
  GradScalerOptions o;
  o.init_scale = 1024.0;
  o.rule.hysteresis = 2;
  o.rule.min_scale = 512.0;
  GradScaler s(*b, o);
  Model m(*b, true, {1.0f});
  const float expected[] = {1024.0f, 512.0f, 512.0f};  // absorbed, backed off, floored
  for (float e : expected) {
    s.scale(make_f32(*b, {1.0f}));
    m.set_grads(*b, {kInf});
    s.step(*m.opt);
    s.update();
    EXPECT_EQ(s.get_scale(), e);
  }
  EXPECT_EQ(s.state_dict().at("_hysteresis_tracker").get<int>(), 0);
}

}  // namespace
}  // namespace ampctl::amp
