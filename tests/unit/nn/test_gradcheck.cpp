// Every backward, checked by finite differences in fp64 (docs/design.md: explicit backward). The
// model runs in fp32 precision; the reference forward is nn_reference.h's plain double loops.
//
// For each parameter element p, the derivative of the fp64 loss is estimated by central
// differences with steps h = 2^-17 and h/2 and Richardson extrapolation:
//     R = (4 D(h/2) - D(h)) / 3,   error(R) <= |D(h) - D(h/2)| + 2 e_f / (h/2)
// (D(h) - D(h/2) = 3/4 c h^2 estimates the h^2 term that R removes; e_f <= 1e-13 (|L| + 1)
// bounds the rounding of an fp64 forward: fewer than 100 chained operations, each within
// 2^-53 relative). A coordinate whose perturbation moves any relu input across zero is skipped
// (the loss has a kink there) and counted. One relu input near zero excludes every parameter
// upstream of it, so the count is not a rate; instead at least 3/4 of all coordinates, and half
// of every tensor's, must be checked (so the test cannot pass by skipping).
//
// Two checks per element:
//   1. the reference's own fp64 backward against R, within error(R): the reference that the
//      fp16/bf16 emulation tests build on is right;
//   2. the model's fp32 gradient against R, within error(R) + 2 D, D being nn_reference.h's
//      first-order bound for fp32 evaluation (u = 2^-24 per operation, K per K-term sum).
#include <gtest/gtest.h>

#include <cmath>

#include "nn_reference.h"

namespace ampctl::nn {
namespace {

using config::Activation;
using config::LossType;
using ref::Vec;

struct GradCase {
  const char* name;
  config::ModelConfig model;
  LossType loss;
  int64_t in, out, batch;
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.name;
}

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, ModelAndReferenceGradientsMatchFiniteDifferences) {
  const GradCase& c = GetParam();
  auto be = make_cpu_backend(1);
  const uint64_t seed = 1234;
  TestMlp model(*be, c.model, config::Precision::fp32, c.loss, c.in, c.out, c.batch, seed);
  const ref::Net net = ref::net_of(model, c.model, c.loss);
  const ref::Batch batch = ref::make_batch(c.batch, c.in, c.out, c.loss, seed + 1);
  const ref::DeviceBatch d = ref::upload(*be, batch, c.in, c.out);

  Tensor loss = be->zeros({1}, DType::f32);
  Tensor one = be->zeros({1}, DType::f32);
  be->fill(one, 1.0);
  model.zero_grad();
  model.forward(d.x, c.batch, /*training=*/true);
  model.loss(d.targets, c.batch, loss, Tensor{}, one);
  model.backward(c.batch);
  const auto grads = ref::read_named(model, model.grads());

  ref::BoundCoef fp32;
  fp32.op = ref::kU32;
  const ref::Result exact = ref::run(net, batch, true, 1.0, ref::Rounding{}, fp32);
  const double model_loss = be->read_scalar_f32(loss);
  EXPECT_TRUE(ref::within("loss", {model_loss}, {exact.loss}, {2.0 * exact.loss_bound}));

  const double h = 0x1p-17;
  size_t checked = 0, skipped = 0;
  double worst_model = 0.0, worst_ref = 0.0;
  for (const auto& [name, values] : net.params) {
    Vec fd(values.size()), fd_err(values.size()), model_tol(values.size());
    Vec got = grads.at(name), ref_grad = exact.grads.at(name);
    size_t tensor_skipped = 0;
    for (size_t j = 0; j < values.size(); ++j) {
      ref::Net probe = net;
      bool kink = false;
      auto f = [&](double step) {
        probe.params[name][j] = values[j] + step;
        const ref::Result r = ref::run(probe, batch, true, 0.0, ref::Rounding{}, {});
        kink = kink || r.relu_signs != exact.relu_signs;
        return r.loss;
      };
      const double d1 = (f(h) - f(-h)) / (2.0 * h);
      const double d2 = (f(h / 2) - f(-h / 2)) / h;
      if (kink) {
        ++skipped;
        ++tensor_skipped;
        // An excluded coordinate compares equal to itself.
        fd[j] = got[j] = ref_grad[j];
        continue;
      }
      ++checked;
      fd[j] = (4.0 * d2 - d1) / 3.0;
      fd_err[j] = std::abs(d1 - d2) + 2.0 * 1e-13 * (std::abs(exact.loss) + 1.0) / (h / 2);
      model_tol[j] = fd_err[j] + 2.0 * exact.grad_bounds.at(name)[j];
    }
    EXPECT_TRUE(
        ref::within(name + " (reference backward vs finite differences)", ref_grad, fd, fd_err));
    EXPECT_TRUE(
        ref::within(name + " (model fp32 gradient vs finite differences)", got, fd, model_tol));
    EXPECT_LE(2 * tensor_skipped, values.size()) << name << ": too many coordinates at relu kinks";
    worst_ref = std::max(worst_ref, ref::budget_used(ref_grad, fd, fd_err));
    worst_model = std::max(worst_model, ref::budget_used(got, fd, model_tol));
  }
  EXPECT_LE(4 * skipped, checked + skipped) << "too many coordinates at relu kinks";
  std::cout << "[ info ] " << c.name << ": " << checked << " coordinates checked, " << skipped
            << " skipped at relu kinks; budget used: reference " << worst_ref * 100 << "%, model "
            << worst_model * 100 << "%\n";
}

INSTANTIATE_TEST_SUITE_P(
    Mlp, GradCheck,
    ::testing::Values(
        GradCase{"relu_ce", ref::mlp({7, 6}, Activation::relu), LossType::cross_entropy, 5, 3, 8},
        GradCase{"gelu_layernorm_dropout_ce", ref::mlp({7, 6}, Activation::gelu, true, 0.25),
                 LossType::cross_entropy, 5, 3, 8},
        GradCase{"tanh_mse", ref::mlp({7, 6}, Activation::tanh), LossType::mse, 5, 3, 8},
        GradCase{"relu_layernorm_dropout_mse", ref::mlp({7, 6}, Activation::relu, true, 0.25),
                 LossType::mse, 5, 3, 7},
        GradCase{"tanh_layernorm_single_hidden_ce", ref::mlp({6}, Activation::tanh, true),
                 LossType::cross_entropy, 4, 5, 6}),
    [](const ::testing::TestParamInfo<GradCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ampctl::nn
