// optim::Sgd against torch.optim.SGD's formula on numbers worked by hand (in decimal, then
// compared with a float tolerance of a few ulps: each step is a handful of float roundings),
// plus its validation messages and state_dict.
#include "ampctl/optim/sgd.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace ampctl::optim {
namespace {

using testing::make_f32;
using testing::read_f32;

// Each update is at most 5 float operations on values of order 1: 5 * 2^-24 relative, rounded
// up to 1e-6 absolute for values of order 1.
constexpr float kTol = 1e-6f;

struct Fixture {
  std::unique_ptr<Backend> b = make_cpu_backend(1);
  Tensor p, g;
  Fixture(float p0, float g0) : p(make_f32(*b, {p0})), g(make_f32(*b, {g0})) {}
};

TEST(Sgd, MomentumAndWeightDecayWorkedByHand) {
  Fixture f(1.0f, 0.5f);
  SgdOptions o;
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  Sgd sgd(*f.b, {{f.p, f.g, Tensor{}, 0.1f}}, o);
  sgd.step();
  // g' = 0.5 + 0.01 * 1 = 0.51; buf = 0.51; p = 1 - 0.1 * 0.51 = 0.949
  EXPECT_NEAR(read_f32(*f.b, f.p)[0], 0.949f, kTol);
  sgd.step();
  // g' = 0.5 + 0.01 * 0.949 = 0.50949; buf = 0.9 * 0.51 + 0.50949 = 0.96849;
  // p = 0.949 - 0.1 * 0.96849 = 0.852151
  EXPECT_NEAR(read_f32(*f.b, f.p)[0], 0.852151f, kTol);
  EXPECT_EQ(sgd.state_dict()["param_groups"][0]["step"].get<int>(), 2);
}

TEST(Sgd, NesterovAndDampeningWorkedByHand) {
  {
    Fixture f(1.0f, 0.5f);
    SgdOptions o;
    o.momentum = 0.9f;
    o.nesterov = true;
    Sgd sgd(*f.b, {{f.p, f.g, Tensor{}, 0.1f}}, o);
    sgd.step();
    // buf = 0.5; g = 0.5 + 0.9 * 0.5 = 0.95; p = 1 - 0.095 = 0.905
    EXPECT_NEAR(read_f32(*f.b, f.p)[0], 0.905f, kTol);
    sgd.step();
    // buf = 0.45 + 0.5 = 0.95; g = 0.5 + 0.855 = 1.355; p = 0.905 - 0.1355 = 0.7695
    EXPECT_NEAR(read_f32(*f.b, f.p)[0], 0.7695f, kTol);
  }
  {
    Fixture f(1.0f, 0.5f);
    SgdOptions o;
    o.momentum = 0.9f;
    o.dampening = 0.5f;
    Sgd sgd(*f.b, {{f.p, f.g, Tensor{}, 0.1f}}, o);
    sgd.step();  // the first step ignores dampening: buf = 0.5, p = 0.95
    EXPECT_NEAR(read_f32(*f.b, f.p)[0], 0.95f, kTol);
    sgd.step();  // buf = 0.45 + 0.25 = 0.7; p = 0.95 - 0.07 = 0.88
    EXPECT_NEAR(read_f32(*f.b, f.p)[0], 0.88f, kTol);
  }
}

TEST(Sgd, MaximizeAscends) {
  Fixture f(1.0f, 0.5f);
  SgdOptions o;
  o.maximize = true;
  Sgd sgd(*f.b, {{f.p, f.g, Tensor{}, 0.1f}}, o);
  sgd.step();
  EXPECT_EQ(read_f32(*f.b, f.p)[0], 1.0f + 0.1f * 0.5f);
}

TEST(Sgd, GroupsHaveTheirOwnLearningRateAndLowPrecisionCopy) {
  auto b = make_cpu_backend(1);
  Tensor flat = make_f32(*b, {1.0f, 1.0f, 1.0f});
  Tensor grads = make_f32(*b, {1.0f, 1.0f, 1.0f});
  Tensor lowp = b->zeros({3}, DType::f16);
  Sgd sgd(*b, {{flat.view(0, {1}), grads.view(0, {1}), lowp.view(0, {1}), 0.1f},
               {flat.view(1, {2}), grads.view(1, {2}), lowp.view(1, {2}), 0.3f}});
  sgd.step();
  const std::vector<float> p = read_f32(*b, flat);
  EXPECT_EQ(p[0], 1.0f - 0.1f);
  EXPECT_EQ(p[2], 1.0f - 0.3f);
  std::vector<half> h(3);
  b->download(h.data(), lowp);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h[i].bits, half(p[i]).bits);
}

TEST(Sgd, ValidationMessagesOfPyTorch) {
  Fixture f(1.0f, 0.5f);
  auto message = [&](SgdOptions o, float lr) -> std::string {
    try {
      Sgd sgd(*f.b, {{f.p, f.g, Tensor{}, lr}}, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({}, -1.0f), "Invalid learning rate: -1");
  SgdOptions o;
  o.momentum = -0.5f;
  EXPECT_EQ(message(o, 0.1f), "Invalid momentum value: -0.5");
  o = {};
  o.weight_decay = -1.0f;
  EXPECT_EQ(message(o, 0.1f), "Invalid weight_decay value: -1");
  o = {};
  o.nesterov = true;
  EXPECT_EQ(message(o, 0.1f), "Nesterov momentum requires a momentum and zero dampening");
}

TEST(Sgd, StateDictRoundTrip) {
  Fixture f(1.0f, 0.5f);
  SgdOptions o;
  o.momentum = 0.9f;
  Sgd a(*f.b, {{f.p, f.g, Tensor{}, 0.1f}}, o);
  a.step();
  a.step();
  Fixture f2(1.0f, 0.5f);
  Sgd c(*f2.b, {{f2.p, f2.g, Tensor{}, 0.5f}}, o);
  c.load_state_dict(a.state_dict());
  EXPECT_EQ(c.state_dict(), a.state_dict());
  EXPECT_EQ(c.param_groups()[0].lr, 0.1f);
  ASSERT_EQ(a.state_tensors().size(), 2u);
  EXPECT_EQ(a.state_tensors()[1].first, "param_groups.0.momentum_buffer");
  nlohmann::json bad = a.state_dict();
  bad["param_groups"][0]["step"] = "two";
  EXPECT_THROW(c.load_state_dict(bad), Error);
  EXPECT_THROW(c.load_state_dict(nlohmann::json{{"type", "adam"}}), Error);
}

}  // namespace
}  // namespace ampctl::optim
