// OneCycleLR's cycle_momentum in ampctl: the schedule sets each group's momentum (SGD) or beta1
// (Adam, AdamW) per iteration as a host value, and the fused update uses it.
//   * A resume is exact: the momentum is a function of the iteration alone, so an optimizer
//     rebuilt from its state_dict and state tensors and driven by a fresh schedule continues
//     bitwise as the uninterrupted run does.
//   * cycle_momentum: false leaves the optimizer's own momentum / beta1 in force: the trajectory
//     is bitwise that of the optimizer with no schedule momentum at all, and differs from the
//     cycled one (so the comparison above is not vacuous).
// The values themselves are checked against PyTorch in test_pytorch_golden.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "ampctl/optim/adam.h"
#include "ampctl/optim/scheduler.h"
#include "ampctl/optim/sgd.h"
#include "test_util.h"

namespace ampctl::optim {
namespace {

using testing::bits_of;
using testing::make_f32;
using testing::read_f32;

constexpr int64_t kSteps = 14;
constexpr size_t kN = 37;

ScheduleOptions onecycle(bool cycle) {
  ScheduleOptions o;
  o.type = ScheduleType::onecycle;
  o.max_lr = 0.05;
  o.pct_start = 0.3;
  o.three_phase = true;  // all three momentum phases, the last one flat
  o.cycle_momentum = cycle;
  return o;
}

std::vector<float> grads_at(int64_t t) {
  std::mt19937 rng(static_cast<uint32_t>(1000 + t));
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> g(kN);
  for (float& v : g) v = d(rng);
  return g;
}

struct TrainRun {
  std::unique_ptr<Backend> b = make_cpu_backend(1);
  Tensor p, g;
  std::unique_ptr<Optimizer> opt;
  LrSchedule sched;

  TrainRun(const std::string& type, const ScheduleOptions& so, bool use_schedule_momentum = true)
      : sched(so, 0.05, kSteps) {
    std::vector<float> init(kN);
    for (size_t i = 0; i < kN; ++i) init[i] = 0.1f * static_cast<float>(i) - 1.5f;
    p = make_f32(*b, init);
    g = b->zeros(p.shape(), DType::f32);
    std::vector<ParamGroup> groups{{p, g, Tensor{}, 0.05}};
    sched.apply(0, groups);
    if (!use_schedule_momentum) groups[0].momentum.reset();
    if (type == "sgd") {
      SgdOptions o;
      o.momentum = 0.9f;
      o.weight_decay = 1e-3f;
      opt = std::make_unique<Sgd>(*b, groups, o);
    } else {
      AdamOptions o;
      o.beta1 = 0.9;
      o.beta2 = 0.99;
      o.weight_decay = 0.01;
      o.decoupled = type == "adamw";
      opt = std::make_unique<Adam>(*b, groups, o);
    }
  }

  // Iterations [from, to): the schedule sets lr and momentum, then one fused step.
  void steps(int64_t from, int64_t to, bool use_schedule_momentum = true) {
    for (int64_t t = from; t < to; ++t) {
      const std::vector<float> gs = grads_at(t);
      b->upload(g, gs.data(), g.nbytes());
      sched.apply(t, opt->param_groups());
      if (!use_schedule_momentum) opt->param_groups()[0].momentum.reset();
      opt->step();
    }
  }
};

// Moves what a checkpoint holds (state_dict and state tensors) from one run to another.
void restore(TrainRun& from, TrainRun& to) {
  to.b->upload(to.p, read_f32(*from.b, from.p).data(), to.p.nbytes());
  const auto src = from.opt->state_tensors();
  const auto dst = to.opt->state_tensors();
  ASSERT_EQ(src.size(), dst.size());
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(src[i].first, dst[i].first);
    const Tensor host = from.b->to_host(src[i].second);
    to.b->upload(dst[i].second, host.data(), host.nbytes());
  }
  to.opt->load_state_dict(from.opt->state_dict());
}

TEST(OneCycleMomentum, ResumeIsBitwiseExact) {
  for (const std::string type : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(type);
    TrainRun whole(type, onecycle(true));
    whole.steps(0, kSteps);
    for (int64_t split : {1, 5, 9}) {  // inside each of the three phases
      SCOPED_TRACE("split at " + std::to_string(split));
      TrainRun first(type, onecycle(true));
      first.steps(0, split);
      TrainRun second(type, onecycle(true));
      restore(first, second);
      second.steps(split, kSteps);
      EXPECT_EQ(bits_of(read_f32(*second.b, second.p)), bits_of(read_f32(*whole.b, whole.p)));
    }
  }
}

TEST(OneCycleMomentum, OffKeepsTheOptimizersOwnMomentum) {
  for (const std::string type : {"sgd", "adamw"}) {
    SCOPED_TRACE(type);
    TrainRun off(type, onecycle(false));
    EXPECT_FALSE(off.opt->param_groups()[0].momentum.has_value());
    off.steps(0, kSteps);
    // The same schedule's lr with the momentum taken away by hand: the option's momentum.
    TrainRun plain(type, onecycle(true), false);
    plain.steps(0, kSteps, false);
    EXPECT_EQ(bits_of(read_f32(*off.b, off.p)), bits_of(read_f32(*plain.b, plain.p)));
    TrainRun cycled(type, onecycle(true));
    cycled.steps(0, kSteps);
    EXPECT_NE(bits_of(read_f32(*off.b, off.p)), bits_of(read_f32(*cycled.b, cycled.p)));
  }
}

TEST(OneCycleMomentum, SgdWithoutMomentumGetsABufferWhenCycled) {
  // PyTorch's OneCycleLR writes group['momentum'] even for SGD(momentum=0), which then runs
  // with momentum; ampctl's Sgd keeps a buffer for a group whose momentum a schedule sets.
  auto b = make_cpu_backend(1);
  Tensor p = make_f32(*b, {1.0f}), g = make_f32(*b, {0.5f});
  LrSchedule sched(onecycle(true), 0.05, kSteps);
  std::vector<ParamGroup> groups{{p, g, Tensor{}, 0.05}};
  Sgd unscheduled(*b, groups, SgdOptions{});
  EXPECT_EQ(unscheduled.state_tensors().size(), 1u) << "step counter only";
  sched.apply(0, groups);
  Sgd sgd(*b, groups, SgdOptions{});
  ASSERT_EQ(sgd.state_tensors().size(), 2u);
  EXPECT_EQ(sgd.state_tensors()[1].first, "param_groups.0.momentum_buffer");
  // Two steps by hand: momentum 0.95 then m1 (the schedule's), lr from the schedule.
  const double lr0 = sched.lr_at(0), lr1 = sched.lr_at(1);
  const float m1 = static_cast<float>(*sched.momentum_at(1));
  sched.apply(0, sgd.param_groups());
  sgd.step();  // buf = 0.5; p = 1 - lr0 * 0.5
  const float p1 = 1.0f - static_cast<float>(lr0) * 0.5f;
  EXPECT_EQ(read_f32(*b, p)[0], p1);
  sched.apply(1, sgd.param_groups());
  sgd.step();  // buf = m1 * 0.5 + 0.5; p = p1 - lr1 * buf
  const float buf = m1 * 0.5f + 1.0f * 0.5f;
  EXPECT_EQ(read_f32(*b, p)[0], p1 - static_cast<float>(lr1) * buf);
}

}  // namespace
}  // namespace ampctl::optim
