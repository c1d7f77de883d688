// optimizer_step's decay_mask (optimizer.decay_on: matrices): every element where the mask is 0
// is updated bitwise as by the same step with weight_decay = 0, every other one as by the step
// with the weight decay, for AdamW, Adam (L2) and SGD, with and without an fp16 copy and an
// inverse scale, over several steps (the moments carry the difference). The references are the
// same backend's unmasked updates, whose own math test_optim_adam.cpp and test_optim_sgd.cpp check
// against PyTorch's formulas. And train::matrix_decay_mask marks exactly the >= 2-dim tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/nn/models/gpt.h"
#include "ampctl/train/build.h"

namespace ampctl {
namespace {

struct State {
  Tensor p, g, m, v, step, lowp;
};

State make_state(Backend& b, const std::vector<float>& p, const std::vector<float>& g, bool lowp) {
  const auto n = static_cast<int64_t>(p.size());
  State s;
  s.p = b.from_host({n}, DType::f32, p.data());
  s.g = b.from_host({n}, DType::f32, g.data());
  s.m = b.zeros({n}, DType::f32);
  s.v = b.zeros({n}, DType::f32);
  s.step = b.zeros({1}, DType::i32);
  if (lowp) s.lowp = b.zeros({n}, DType::f16);
  return s;
}

void step(Backend& b, State& s, const std::variant<optim::SgdHyper, optim::AdamHyper>& hyper,
          const Tensor& mask, const Tensor& inv) {
  OptimizerStepArgs a;
  a.params = s.p;
  a.grads = s.g;
  a.step = s.step;
  a.inv_scale = inv;
  a.lowp_params = s.lowp;
  a.decay_mask = mask;
  a.hyper = hyper;
  if (std::holds_alternative<optim::SgdHyper>(hyper)) {
    a.momentum_buf = s.m;
  } else {
    a.exp_avg = s.m;
    a.exp_avg_sq = s.v;
  }
  b.optimizer_step(a);
}

std::vector<float> read(Backend& b, const Tensor& t) {
  std::vector<float> out(t.numel());
  const Tensor f = b.zeros({static_cast<int64_t>(t.numel())}, DType::f32);
  b.cast(t, f);
  b.download(out.data(), f);
  return out;
}

TEST(DecayMask, MaskedElementsUpdateAsWithoutDecayTheOthersAsWith) {
  auto be = make_cpu_backend(2);
  const size_t n = 1000;  // not a multiple of a vector width
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> p(n), g(n), mask(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = dist(rng);
    g[i] = dist(rng) * 0.1f;
    mask[i] = (i / 37) % 3 == 0 ? 0.0f : 1.0f;  // runs of both kinds
  }
  const Tensor mask_t = be->from_host({static_cast<int64_t>(n)}, DType::f32, mask.data());
  Tensor inv = be->zeros({1}, DType::f32);
  be->fill(inv, 0.25);

  optim::AdamHyper adamw{1e-2, 0.9, 0.99, 1e-8, 0.1, true, false};
  optim::AdamHyper adam = adamw;
  adam.decoupled = false;
  optim::SgdHyper sgd{0.05f, 0.9f, 0.0f, 0.1f, false, false};
  const std::vector<std::variant<optim::SgdHyper, optim::AdamHyper>> kinds = {adamw, adam, sgd};
  for (size_t k = 0; k < kinds.size(); ++k) {
    for (bool lowp : {false, true}) {
      for (bool scaled : {false, true}) {
        auto plain_hyper = kinds[k];
        std::visit([](auto& h) { h.weight_decay = 0; }, plain_hyper);
        State masked = make_state(*be, p, g, lowp);
        State with = make_state(*be, p, g, lowp);
        State without = make_state(*be, p, g, lowp);
        const Tensor i = scaled ? inv : Tensor{};
        for (int s = 0; s < 3; ++s) {
          step(*be, masked, kinds[k], mask_t, i);
          step(*be, with, kinds[k], Tensor{}, i);
          step(*be, without, plain_hyper, Tensor{}, i);
        }
        const std::vector<float> got = read(*be, masked.p), a = read(*be, with.p),
                                 z = read(*be, without.p);
        size_t differ = 0;
        for (size_t e = 0; e < n; ++e) {
          const float want = mask[e] != 0.0f ? a[e] : z[e];
          ASSERT_EQ(std::memcmp(&got[e], &want, 4), 0)
              << "kind " << k << " lowp " << lowp << " element " << e;
          differ += a[e] != z[e];
        }
        EXPECT_GT(differ, n / 2);  // the decay does change the updates: the check can fail
        std::vector<float> moments = read(*be, with.m);
        const std::vector<float> m0 = read(*be, without.m);
        for (size_t e = 0; e < n; ++e) moments[e] = mask[e] != 0.0f ? moments[e] : m0[e];
        EXPECT_EQ(read(*be, masked.m), moments);
        if (lowp) {
          const std::vector<float> l = read(*be, masked.lowp);
          for (size_t e = 0; e < n; ++e) {
            ASSERT_EQ(l[e], static_cast<float>(round_to_half(got[e]))) << e;
          }
        }
      }
    }
  }
  // A mask of the wrong size is refused, naming it.
  State s = make_state(*be, p, g, false);
  const Tensor short_mask = be->zeros({10}, DType::f32);
  try {
    step(*be, s, adamw, short_mask, Tensor{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decay_mask"), std::string::npos) << e.what();
  }
}

TEST(DecayMask, MatrixMaskMarksTheTensorsOfTwoOrMoreDims) {
  auto be = make_cpu_backend(1);
  nn::ModelOptions o;
  o.type = nn::ModelType::gpt;
  o.in_features = o.out_features = 7;
  o.max_batch = 1;
  o.gpt = {1, 2, 8, 4, 0.0, true, true};
  nn::Gpt m(*be, o);
  const std::vector<float> mask = read(*be, train::matrix_decay_mask(m));
  ASSERT_EQ(mask.size(), m.layout().total());
  std::vector<float> want(m.layout().total(), 0.0f);
  size_t matrices = 0;
  for (const auto& e : m.layout().entries()) {
    const bool matrix = e.shape.size() >= 2;
    matrices += matrix;
    for (size_t i = 0; i < e.numel; ++i) want[e.offset + i] = matrix ? 1.0f : 0.0f;
  }
  EXPECT_EQ(mask, want);
  EXPECT_EQ(matrices, 6u);  // wte, wpe, c_attn, attn.c_proj, c_fc, mlp.c_proj
}

}  // namespace
}  // namespace ampctl
