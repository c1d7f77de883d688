// amp::update_scale_state and the backend's update_scale_ against PyTorch's documented numbers
// (test_grad_scaling_update_scale and the GradScaler docs) and against sequences worked out by
// hand from docs/reference.md, "Scaler".
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/amp_math.h"

namespace ampctl::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct State {
  float scale;
  int32_t tracker;
  int32_t hysteresis;
};

ScaleUpdateParams pytorch_params(double growth, double backoff, int32_t interval) {
  ScaleUpdateParams p;
  p.growth_factor = growth;
  p.backoff_factor = backoff;
  p.growth_interval = interval;
  p.hysteresis = 1;
  p.min_scale = 0.0f;
  p.max_scale = kInf;
  return p;
}

void step(State& s, bool found_inf, const ScaleUpdateParams& p) {
  update_scale_state(&s.scale, &s.tracker, &s.hysteresis, found_inf ? 1.0f : 0.0f, p);
}

TEST(UpdateScale, PyTorchUnitTestNumbers) {
  // torch's test: scale 4, tracker 0, growth 2, backoff 0.25, interval 2.
  const ScaleUpdateParams p = pytorch_params(2.0, 0.25, 2);
  State s{4.0f, 0, 1};
  step(s, false, p);
  EXPECT_EQ(s.scale, 4.0f);
  EXPECT_EQ(s.tracker, 1);
  step(s, false, p);
  EXPECT_EQ(s.scale, 8.0f);
  EXPECT_EQ(s.tracker, 0);
  step(s, true, p);
  EXPECT_EQ(s.scale, 2.0f);
  EXPECT_EQ(s.tracker, 0);
}

TEST(UpdateScale, DefaultsGrowAfter2000CleanSteps) {
  const ScaleUpdateParams p = pytorch_params(2.0, 0.5, 2000);
  State s{65536.0f, 0, 1};
  for (int i = 0; i < 1999; ++i) step(s, false, p);
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_EQ(s.tracker, 1999);
  step(s, false, p);
  EXPECT_EQ(s.scale, 131072.0f);
  EXPECT_EQ(s.tracker, 0);
}

TEST(UpdateScale, GrowthThatWouldOverflowFloatIsRefused) {
  const ScaleUpdateParams p = pytorch_params(2.0, 0.5, 1);
  State s{std::ldexp(1.0f, 127), 0, 1};
  for (int i = 0; i < 3; ++i) {
    step(s, false, p);
    EXPECT_EQ(s.scale, std::ldexp(1.0f, 127));
    EXPECT_EQ(s.tracker, 0);  // the tracker still resets, as in PyTorch
  }
}

TEST(UpdateScale, BackoffsWalkDownThroughSubnormalsToZero) {
  const ScaleUpdateParams p = pytorch_params(2.0, 0.5, 2000);
  State s{65536.0f, 0, 1};
  for (int i = 0; i < 16; ++i) step(s, true, p);
  EXPECT_EQ(s.scale, 1.0f);
  for (int i = 16; i < 165; ++i) step(s, true, p);
  EXPECT_EQ(s.scale, std::ldexp(1.0f, -149));  // the smallest subnormal
  step(s, true, p);
  // 2^-150 is exactly halfway between 0 and 2^-149: ties to even gives +0.
  EXPECT_EQ(s.scale, 0.0f);
  EXPECT_FALSE(std::signbit(s.scale));
}

TEST(UpdateScale, TrackerAboveIntervalNeverGrows) {
  // PyTorch compares with ==, so a tracker already past the interval (a state_dict loaded with a
  // smaller interval) only counts up.
  const ScaleUpdateParams p = pytorch_params(2.0, 0.5, 2);
  State s{1024.0f, 5, 1};
  for (int i = 0; i < 10; ++i) {
    step(s, false, p);
    EXPECT_EQ(s.scale, 1024.0f);
    EXPECT_EQ(s.tracker, 6 + i);
  }
}

TEST(UpdateScale, ProductIsFormedInDoubleAndRoundedOnce) {
  // backoff 0.3 is not a float: PyTorch multiplies the float scale by the double 0.3 and rounds
  // once. Rounding 0.3 to float first would give 0.900000036 for scale 3 instead.
  const ScaleUpdateParams p = pytorch_params(2.0, 0.3, 2000);
  State s{3.0f, 0, 1};
  step(s, true, p);
  EXPECT_EQ(s.scale, static_cast<float>(3.0 * 0.3));
  volatile float backoff_f = 0.3f;  // volatile: keep the compiler from folding in double
  EXPECT_NE(s.scale, 3.0f * backoff_f);
}

TEST(UpdateScale, HysteresisMinAndMaxByHand) {
  // Worked out from docs/reference.md, "Scaler": hysteresis 2, min 256, max 2048, growth 2, backoff
  // 0.5, interval 2, starting at scale 1024 with a full hysteresis counter.
  ScaleUpdateParams p;
  p.growth_factor = 2.0;
  p.backoff_factor = 0.5;
  p.growth_interval = 2;
  p.hysteresis = 2;
  p.min_scale = 256.0f;
  p.max_scale = 2048.0f;
  struct Row {
    bool found_inf;
    float scale;
    int32_t tracker;
    int32_t hysteresis;
  };
  const Row rows[] = {
      {true, 1024, 0, 1},   // absorbed by hysteresis
      {true, 512, 0, 0},    // counter exhausted: back off
      {true, 256, 0, 0},    // keeps backing off while exhausted
      {true, 256, 0, 0},    // 128 is below min_scale: floored
      {false, 256, 1, 0},   //
      {false, 512, 0, 2},   // growth refills the counter
      {true, 512, 0, 1},    // absorbed again
      {false, 512, 1, 1},   //
      {false, 1024, 0, 2},  //
      {false, 1024, 1, 2},  //
      {false, 2048, 0, 2},  //
      {false, 2048, 1, 2},  //
      {false, 2048, 0, 2},  // 4096 capped at max_scale
      {true, 2048, 0, 1},   //
      {true, 1024, 0, 0},   //
  };
  State s{1024.0f, 0, 2};
  int i = 0;
  for (const Row& r : rows) {
    step(s, r.found_inf, p);
    EXPECT_EQ(s.scale, r.scale) << "row " << i;
    EXPECT_EQ(s.tracker, r.tracker) << "row " << i;
    EXPECT_EQ(s.hysteresis, r.hysteresis) << "row " << i;
    ++i;
  }
}

TEST(UpdateScale, NanFoundInfCountsAsOverflow) {
  // found_inf is a sum of per-optimizer flags; anything non-zero is an overflow.
  const ScaleUpdateParams p = pytorch_params(2.0, 0.5, 2000);
  State s{8.0f, 3, 1};
  update_scale_state(&s.scale, &s.tracker, &s.hysteresis, 2.0f, p);
  EXPECT_EQ(s.scale, 4.0f);
  EXPECT_EQ(s.tracker, 0);
}

TEST(UpdateScale, CpuBackendOpRunsTheSameRule) {
  auto b = make_cpu_backend(1);
  Tensor scale = b->empty({1}, DType::f32);
  Tensor tracker = b->zeros({1}, DType::i32);
  Tensor hyst = b->empty({1}, DType::i32);
  Tensor found = b->zeros({1}, DType::f32);
  Tensor trackers = b->zeros({kTrackerCount}, DType::i32);
  b->fill(scale, 4.0);
  b->fill(hyst, 1.0);
  const ScaleUpdateParams p = pytorch_params(2.0, 0.25, 2);
  b->update_scale_(scale, tracker, hyst, trackers, found, p);
  b->update_scale_(scale, tracker, hyst, trackers, found, p);
  EXPECT_EQ(b->read_scalar_f32(scale), 8.0f);
  EXPECT_EQ(b->read_scalar_i32(tracker), 0);
  b->fill(found, 1.0);
  b->update_scale_(scale, tracker, hyst, trackers, found, p);
  EXPECT_EQ(b->read_scalar_f32(scale), 2.0f);
  EXPECT_THROW(b->update_scale_(tracker, scale, hyst, trackers, found, p), Error);  // swapped
  EXPECT_THROW(b->update_scale_(scale, tracker, hyst, hyst, found, p), Error);      // one tracker
  // pytorch leaves the other rules' counters alone.
  std::vector<int32_t> t(kTrackerCount);
  b->download(t.data(), trackers);
  EXPECT_EQ(t, std::vector<int32_t>(kTrackerCount, 0));
}

TEST(UpdateScale, InvScaleIsDoubleReciprocalRoundedToFloat) {
  EXPECT_EQ(inv_scale_of(4.0f), 0.25f);
  EXPECT_EQ(inv_scale_of(65536.0f), std::ldexp(1.0f, -16));
  // 3 has no exact reciprocal; 1/3 in double then rounded once.
  EXPECT_EQ(inv_scale_of(3.0f), static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(inv_scale_of(std::ldexp(1.0f, 127)), std::ldexp(1.0f, -127));  // subnormal, exact
  EXPECT_EQ(inv_scale_of(0.0f), kInf);
}

}  // namespace
}  // namespace ampctl::amp
