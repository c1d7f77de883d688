// SGD, Adam, AdamW and the lr schedules against trajectories computed by PyTorch itself
// (scripts/golden/golden_pytorch.py, torch 1.13 on the CPU, float32, checked in as
// tests/data/golden/pytorch_optim_sched.json), alone and driven by OneCycleLR with its default
// cycle_momentum (SGD's momentum or Adam's beta1 cycled per step).
//
// Tolerances: the optimizers follow PyTorch's operation order, but PyTorch's CPU kernels are
// vectorised with fused multiply-adds in places and 1.13's Adam forms exp_avg with mul_/add_
// where we (as PyTorch >= 2.0) use lerp_; each step can therefore differ by a few float
// roundings. Over 6 steps on values of order 1 that is < 64 ulps: |d| <= 64 * 2^-24 * max(1,|p|)
// ~= 4e-6 * max(1, |p|). Schedules are double arithmetic in both (PyTorch's cosine is the
// recursive "chainable" form, ours the closed form; they agree to ~1e-15 relative): 1e-12.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>

#include "ampctl/optim/adam.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/optim/sgd.h"
#include "test_util.h"

namespace ampctl::optim {
namespace {

// A schedule's options as the golden file spells them (OneCycleLR's argument names).
ScheduleOptions schedule_of(const nlohmann::json& c) {
  ScheduleOptions sc;
  const std::string type = c.at("type");
  if (type == "onecycle") {
    sc.type = ScheduleType::onecycle;
    sc.max_lr = c.at("max_lr");
    sc.pct_start = c.at("pct_start");
    sc.div_factor = c.at("div_factor");
    sc.final_div_factor = c.at("final_div_factor");
    sc.anneal = c.at("anneal_strategy") == "cos" ? Anneal::cos : Anneal::linear;
    sc.three_phase = c.at("three_phase");
    // The older entries were computed with cycle_momentum=False.
    sc.cycle_momentum = c.value("cycle_momentum", false);
    sc.base_momentum = c.value("base_momentum", 0.85);
    sc.max_momentum = c.value("max_momentum", 0.95);
  } else if (type == "step") {
    sc.type = ScheduleType::step;
    sc.step_size = c.at("step_size");
    sc.gamma = c.at("gamma");
  } else {
    sc.type = ScheduleType::cosine;
    sc.min_lr = c.at("min_lr");
  }
  return sc;
}

nlohmann::json golden() {
  const std::string path = testing::test_data_dir() + "/golden/pytorch_optim_sched.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

TEST(PyTorchGolden, OptimizerTrajectories) {
  const nlohmann::json g = golden();
  auto b = make_cpu_backend(1);
  for (const auto& [name, run] : g.at("optimizers").items()) {
    const nlohmann::json& o = run.at("options");
    const std::vector<float> init = run.at("init").get<std::vector<float>>();
    Tensor p = testing::make_f32(*b, init);
    Tensor grad = b->zeros(p.shape(), DType::f32);
    std::vector<ParamGroup> groups{{p, grad, Tensor{}, o.at("lr").get<double>()}};
    // With a schedule, the groups start with its iteration-0 lr and momentum, as OneCycleLR's
    // constructor writes them into param_groups (SGD then keeps a momentum buffer even when its
    // own momentum is 0).
    std::unique_ptr<LrSchedule> sched;
    if (run.contains("schedule")) {
      sched = std::make_unique<LrSchedule>(schedule_of(run.at("schedule")), o.at("lr"),
                                           run.at("schedule").at("total").get<int64_t>());
      sched->apply(0, groups);
    }
    std::unique_ptr<Optimizer> opt;
    const std::string type = o.at("type");
    if (type == "sgd") {
      SgdOptions so;
      so.momentum = o.at("momentum").get<float>();
      so.dampening = o.at("dampening").get<float>();
      so.weight_decay = o.at("weight_decay").get<float>();
      so.nesterov = o.at("nesterov").get<bool>();
      opt = std::make_unique<Sgd>(*b, groups, so);
    } else {
      AdamOptions ao;
      ao.beta1 = o.at("betas")[0].get<double>();
      ao.beta2 = o.at("betas")[1].get<double>();
      ao.eps = o.at("eps").get<double>();
      ao.weight_decay = o.at("weight_decay").get<double>();
      ao.decoupled = type == "adamw";
      opt = std::make_unique<Adam>(*b, groups, ao);
    }
    const auto& grads = run.at("grads");
    const auto& params = run.at("params");
    double worst = 0.0;
    for (size_t s = 0; s < grads.size(); ++s) {
      const std::vector<float> gs = grads[s].get<std::vector<float>>();
      b->upload(grad, gs.data(), grad.nbytes());
      if (sched) {
        const auto t = static_cast<int64_t>(s);
        sched->apply(t, opt->param_groups());
        // The lr and momentum PyTorch's step t ran with: the same double arithmetic.
        const double want_lr = run.at("lrs")[s], want_m = run.at("momentums")[s];
        EXPECT_NEAR(opt->param_groups()[0].lr, want_lr, 1e-15 * want_lr) << name << " t=" << t;
        ASSERT_TRUE(opt->param_groups()[0].momentum.has_value()) << name;
        EXPECT_NEAR(*opt->param_groups()[0].momentum, want_m, 1e-15) << name << " t=" << t;
      }
      opt->step();
      const std::vector<float> got = testing::read_f32(*b, p);
      const std::vector<float> want = params[s].get<std::vector<float>>();
      for (size_t i = 0; i < got.size(); ++i) {
        const double tol = 4e-6 * std::max(1.0, std::fabs(static_cast<double>(want[i])));
        const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
        worst = std::max(worst, err / tol);
        EXPECT_LE(err, tol) << name << " step " << s + 1 << " element " << i << ": ours " << got[i]
                            << ", PyTorch " << want[i];
      }
    }
    std::printf("%s: worst error %.3f of its budget\n", name.c_str(), worst);
  }
}

TEST(PyTorchGolden, Schedules) {
  const nlohmann::json g = golden();
  for (const auto& [name, run] : g.at("schedulers").items()) {
    const ScheduleOptions sc = schedule_of(run.at("config"));
    const int64_t total = run.at("total");
    LrSchedule sched(sc, 0.1, total);
    const std::vector<double> want = run.at("lrs").get<std::vector<double>>();
    for (int64_t t = 0; t < total; ++t) {
      EXPECT_NEAR(sched.lr_at(t), want[t], 1e-12 * std::max(1e-3, std::fabs(want[t])))
          << name << " t=" << t;
    }
    if (run.contains("momentums")) {
      const std::vector<double> moms = run.at("momentums").get<std::vector<double>>();
      for (int64_t t = 0; t < total; ++t) {
        ASSERT_TRUE(sched.momentum_at(t).has_value()) << name;
        EXPECT_NEAR(*sched.momentum_at(t), moms[t], 1e-15) << name << " t=" << t;
      }
    } else {
      EXPECT_FALSE(sched.momentum_at(0).has_value()) << name << ": momentum is not cycled";
    }
  }
}

TEST(Schedules, WarmupAndLinearDecayWorkedByHand) {
  ScheduleOptions sc;
  sc.type = ScheduleType::linear;
  sc.warmup_steps = 4;
  sc.min_lr = 0.0;
  LrSchedule s(sc, 1.0, 12);
  // warm-up: t / 4; then (12 - t) / 8
  const double want[] = {0.0, 0.25, 0.5, 0.75, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125};
  for (int t = 0; t < 12; ++t) EXPECT_DOUBLE_EQ(s.lr_at(t), want[t]) << "t=" << t;
  sc.type = ScheduleType::constant;
  EXPECT_DOUBLE_EQ(LrSchedule(sc, 1.0, 12).lr_at(2), 0.5);
  EXPECT_DOUBLE_EQ(LrSchedule(sc, 1.0, 12).lr_at(7), 1.0);
}

// scheduler.decay_steps shorter than the run (nanoGPT's lr_decay_iters): past the schedule's T
// steps linear and cosine hold min_lr exactly (their closed forms at t = T), onecycle its final
// lr (t = T - 1, the last phase's end), and inside T nothing changes.
TEST(Schedules, PastTheDecayTheLrHoldsItsEnd) {
  for (const ScheduleType type : {ScheduleType::linear, ScheduleType::cosine}) {
    ScheduleOptions sc;
    sc.type = type;
    sc.warmup_steps = 2;
    sc.min_lr = 0.01;
    const LrSchedule s(sc, 1.0, 10);
    for (const int64_t t : {10, 11, 50, 1000000}) EXPECT_EQ(s.lr_at(t), 0.01) << "t=" << t;
    EXPECT_GT(s.lr_at(9), 0.01);  // the last step inside still decays
  }
  ScheduleOptions sc;
  sc.type = ScheduleType::onecycle;
  const LrSchedule s(sc, 1.0, 10);
  EXPECT_DOUBLE_EQ(s.lr_at(9), sc.max_lr / sc.div_factor / sc.final_div_factor);
  for (const int64_t t : {10, 11, 500}) EXPECT_EQ(s.lr_at(t), s.lr_at(9)) << "t=" << t;
}

}  // namespace
}  // namespace ampctl::optim
