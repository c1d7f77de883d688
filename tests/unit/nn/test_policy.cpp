// The precision policy of docs/reference.md, "Precision" on the CPU backend, against
// nn_reference.h.
//
// Emulation: the reference rounds with round_to_half / round_to_bf16 at the policy's points and
// emulates each fp32 accumulation as an exact double sum rounded once to float. The model sums
// in fp32 in OpenBLAS's order instead, so before each lowp rounding the two differ by at most
// K u32 |terms| (K-term sum, u32 = 2^-24). The lowp roundings then agree unless a rounding
// boundary falls between the two values, and where one does the results differ by one lowp ulp
// (<= 2 u_lowp relative). Hence, element by element:
//     |model - emulation| <= 2 D,  D from nn_reference.h with lo = 2 u_lowp per lowp store
//                                  (a possible flip), op = u32 per fp32 operation, w = 0 (both
//                                  round the same f32 masters to the same lowp weights)
// and, because a flip needs the fp32 difference to straddle a boundary (probability about
// K u32 / u_lowp = K 2^-13 for fp16, K 2^-16 for bf16, per element, with K <= 9 here), at
// least 3/4 of the elements of every tensor must also be within 2 D0, D0 being the same bound
// with lo = 0 (no flip anywhere: fp32 summation order alone). For a lowp tensor D0 is far below
// half an ulp, so this means bitwise equality; for the f32 LayerNorm gradients it is a few
// fp32 ulps of their terms. Were a rounding point missing, added or moved, nearly every element
// would be off by up to half a lowp ulp and fail it. The loss is held to 2 D0 when the logits
// are bitwise equal, else to the adjoint bound 2 (2 u sens_lowp + u32 sens_fp32).
//
// fp32 vs fp16 / bf16: the same masters run at both precisions differ by the lowp roundings:
// each lowp store moves its value v by <= u_lowp |v|, the weight copy each weight by
// <= u_lowp |W|, and each run's fp32 arithmetic by u32 per operation. To first order the loss
// moves by the sum of those perturbations times |dL/dv| (the adjoint form; |dL/dv| from the
// reference's fp64 backward), so
//     |loss_lowp - loss_fp32| <= 2 (u_lowp (sens_lowp + sens_weights) + 2 u32 sens_fp32),
// the factor 2 covering the second-order terms.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nn_reference.h"

namespace ampctl::nn {
namespace {

using config::Activation;
using config::LossType;
using config::Precision;
using ref::Vec;

ref::Format format_of(Precision p) {
  return p == Precision::fp16 ? ref::Format::f16 : ref::Format::bf16;
}

struct StepResult {
  Vec logits;
  double loss = 0.0;
  std::map<std::string, Vec> grads;
};

// One forward/loss/backward of `model` on `batch` (its first rows of a buffer with two extra
// rows, so the model works on views).
StepResult step(Mlp& model, const ref::Batch& batch, double grad_scale, bool training = true) {
  Backend& be = model.backend();
  const ref::DeviceBatch d =
      ref::upload(be, batch, model.in_features(), model.out_features(), /*extra_rows=*/2);
  Tensor loss = be.zeros({1}, DType::f32);
  Tensor scale = be.zeros({1}, DType::f32);
  be.fill(scale, grad_scale);
  StepResult r;
  model.zero_grad();
  r.logits = ref::read_values(be, model.forward(d.x, batch.rows, training));
  model.loss(d.targets, batch.rows, loss, Tensor{}, scale);
  model.backward(batch.rows);
  r.loss = be.read_scalar_f32(loss);
  r.grads = ref::read_named(model, model.grads());
  return r;
}

struct PolicyCase {
  const char* name;
  Precision precision;
  config::ModelConfig model;
  LossType loss;
};

void PrintTo(const PolicyCase& c, std::ostream* os) {
  *os << c.name;
}

class Emulation : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(Emulation, ForwardAndBackwardEqualTheRoundedReference) {
  const PolicyCase& c = GetParam();
  auto be = make_cpu_backend(1);
  const int64_t in = 5, out = 3, rows = 6, max_batch = 8;
  const uint64_t seed = 77;
  const double grad_scale = 1024.0;
  TestMlp model(*be, c.model, c.precision, c.loss, in, out, max_batch, seed);
  const ref::Net net = ref::net_of(model, c.model, c.loss);
  const ref::Batch batch = ref::make_batch(rows, in, out, c.loss, seed + 5);
  const StepResult got = step(model, batch, grad_scale);

  const ref::Format f = format_of(c.precision);
  const double u = ref::unit_roundoff(f);
  ref::Rounding rounding;
  rounding.lowp = f;
  rounding.fp32 = true;
  ref::BoundCoef any;  // flips allowed at every lowp store
  any.lo = 2.0 * u;
  any.op = ref::kU32;
  ref::BoundCoef no_flip;  // fp32 summation order only
  no_flip.op = ref::kU32;
  const ref::Result emu = ref::run(net, batch, true, grad_scale, rounding, any);
  const ref::Result emu0 = ref::run(net, batch, true, grad_scale, rounding, no_flip);

  // Every lowp tensor the model produced is on the lowp grid.
  for (double v : got.logits) {
    ASSERT_EQ(v, rounding.L(v)) << "a logit is not a " << dtype_name(model.compute_dtype());
  }
  size_t flipped = 0, total = 0;
  auto check = [&](const std::string& what, const Vec& mine, const Vec& want, const Vec& bound,
                   const Vec& bound0) {
    EXPECT_TRUE(ref::within(what, mine, want, ref::scaled(bound, 2.0)));
    size_t outside = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      outside += !(std::abs(mine[i] - want[i]) <= 2.0 * bound0[i]);
    }
    EXPECT_LE(4 * outside, want.size())
        << what << ": " << outside << " of " << want.size()
        << " elements differ from the emulation by more than fp32 summation order explains\n"
        << ref::within(what + " (no-flip bound)", mine, want, ref::scaled(bound0, 2.0)).message();
    flipped += outside;
    total += want.size();
  };
  check("logits", got.logits, emu.logits, emu.logits_bound, emu0.logits_bound);
  for (const auto& [name, g] : emu.grads) {
    check(name + " gradient", got.grads.at(name), g, emu.grad_bounds.at(name),
          emu0.grad_bounds.at(name));
  }
  // The loss: with bitwise-equal logits only the fp32 loss itself differs; otherwise the
  // adjoint bound of one flip (2 u) at every lowp store.
  const bool same_logits = got.logits == emu.logits;
  const double loss_tol = same_logits ? 2.0 * emu0.loss_bound
                                      : 2.0 * (2.0 * u * emu.sens_lowp + ref::kU32 * emu.sens_fp32);
  EXPECT_TRUE(ref::within("loss", {got.loss}, {emu.loss}, {loss_tol}));
  std::cout << "[ info ] " << c.name << ": " << total - flipped << " of " << total
            << " logits and gradient elements within the no-flip bound; |loss diff| "
            << std::abs(got.loss - emu.loss) << " (tolerance " << loss_tol
            << (same_logits ? ", logits bitwise equal)\n" : ", adjoint bound)\n");
}

INSTANTIATE_TEST_SUITE_P(
    Policy, Emulation,
    ::testing::Values(PolicyCase{"fp16_relu_ce", Precision::fp16,
                                 ref::mlp({7, 6}, Activation::relu), LossType::cross_entropy},
                      PolicyCase{"fp16_gelu_layernorm_dropout_ce", Precision::fp16,
                                 ref::mlp({7, 6}, Activation::gelu, true, 0.25),
                                 LossType::cross_entropy},
                      PolicyCase{"fp16_tanh_layernorm_mse", Precision::fp16,
                                 ref::mlp({7, 6}, Activation::tanh, true), LossType::mse},
                      PolicyCase{"bf16_relu_ce", Precision::bf16,
                                 ref::mlp({7, 6}, Activation::relu), LossType::cross_entropy},
                      PolicyCase{"bf16_gelu_layernorm_dropout_ce", Precision::bf16,
                                 ref::mlp({7, 6}, Activation::gelu, true, 0.25),
                                 LossType::cross_entropy},
                      PolicyCase{"bf16_tanh_mse", Precision::bf16,
                                 ref::mlp({7, 6}, Activation::tanh), LossType::mse}),
    [](const ::testing::TestParamInfo<PolicyCase>& info) { return std::string(info.param.name); });

class LowpVsFp32 : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(LowpVsFp32, LossesAgreeWithinTheLowpRoundingBound) {
  const PolicyCase& c = GetParam();
  auto be = make_cpu_backend(1);
  const int64_t in = 12, out = 4, rows = 16;
  const uint64_t seed = 5;
  TestMlp lowp(*be, c.model, c.precision, c.loss, in, out, rows, seed);
  TestMlp full(*be, c.model, Precision::fp32, c.loss, in, out, rows, seed);
  const ref::Batch batch = ref::make_batch(rows, in, out, c.loss, seed + 9);
  // Both start from the same masters and draw the same dropout masks.
  const ref::Net net = ref::net_of(full, c.model, c.loss);
  const StepResult a = step(lowp, batch, 1.0);
  const StepResult b = step(full, batch, 1.0);

  const double u = ref::unit_roundoff(format_of(c.precision));
  const ref::Result exact = ref::run(net, batch, true, 1.0, ref::Rounding{}, {});
  const double tol =
      2.0 * (u * (exact.sens_lowp + exact.sens_weights) + 2.0 * ref::kU32 * exact.sens_fp32);
  EXPECT_TRUE(ref::within("loss", {a.loss}, {b.loss}, {tol}));
  // Not vacuous: the lowp run does differ from the fp32 one, and the bound is a small part of
  // the loss (it would not hide a wrong weight, a missing bias or a skipped layer).
  EXPECT_NE(a.loss, b.loss);
  EXPECT_LT(tol, 0.05 * std::abs(b.loss));
  std::cout << "[ info ] " << c.name << ": |loss diff| " << std::abs(a.loss - b.loss)
            << ", tolerance " << tol << " (loss " << b.loss << ")\n";
}

INSTANTIATE_TEST_SUITE_P(
    Policy, LowpVsFp32,
    ::testing::Values(PolicyCase{"fp16_relu_ce", Precision::fp16,
                                 ref::mlp({16, 8}, Activation::relu), LossType::cross_entropy},
                      PolicyCase{"fp16_gelu_layernorm_dropout_ce", Precision::fp16,
                                 ref::mlp({16, 8}, Activation::gelu, true, 0.1),
                                 LossType::cross_entropy},
                      PolicyCase{"fp16_tanh_mse", Precision::fp16, ref::mlp({16}, Activation::tanh),
                                 LossType::mse},
                      PolicyCase{"bf16_relu_layernorm_ce", Precision::bf16,
                                 ref::mlp({16, 8}, Activation::relu, true),
                                 LossType::cross_entropy}),
    [](const ::testing::TestParamInfo<PolicyCase>& info) { return std::string(info.param.name); });

bool representable(double v, ref::Format f) {
  ref::Rounding r;
  r.lowp = f;
  return r.L(v) == v;
}

TEST(Policy, WeightGradientsAreRoundedToLowpBeforeTheyAreAddedToFp32) {
  auto be = make_cpu_backend(1);
  const auto cfg = ref::mlp({9, 7}, Activation::gelu, /*layer_norm=*/true);
  const int64_t in = 6, out = 4, rows = 8;
  TestMlp model(*be, cfg, Precision::fp16, LossType::cross_entropy, in, out, rows, 3);
  const ref::Batch a = ref::make_batch(rows, in, out, LossType::cross_entropy, 10);
  const ref::Batch b = ref::make_batch(rows, in, out, LossType::cross_entropy, 11);
  const StepResult ga = step(model, a, 4096.0);
  const StepResult gb = step(model, b, 4096.0);

  // Accumulation: A then B without zero_grad.
  const ref::DeviceBatch da = ref::upload(*be, a, in, out), db = ref::upload(*be, b, in, out);
  Tensor loss = be->zeros({1}, DType::f32), scale = be->zeros({1}, DType::f32);
  be->fill(scale, 4096.0);
  model.zero_grad();
  for (const ref::DeviceBatch* d : {&da, &db}) {
    model.forward(d->x, rows, true);
    model.loss(d->targets, rows, loss, Tensor{}, scale);
    model.backward(rows);
  }
  const auto acc = ref::read_named(model, model.grads());

  size_t ln_off_grid = 0;
  for (const auto& [name, g] : ga.grads) {
    const bool layer_norm = name.rfind("layers.1.", 0) == 0 || name.rfind("layers.4.", 0) == 0;
    for (size_t j = 0; j < g.size(); ++j) {
      if (layer_norm) {
        ln_off_grid += !representable(g[j], ref::Format::f16);
      } else {
        ASSERT_TRUE(representable(g[j], ref::Format::f16))
            << name << "[" << j << "] = " << g[j] << " is not an fp16 value";
      }
      // One f32 addition per micro-batch: g = float(gA + gB) exactly.
      const double want = static_cast<float>(g[j] + gb.grads.at(name)[j]);
      if (layer_norm) {
        // The backend adds a fresh f32 sum once; allow one f32 rounding of the sum's terms.
        EXPECT_NEAR(acc.at(name)[j], want,
                    2.0 * ref::kU32 * (std::abs(g[j]) + std::abs(gb.grads.at(name)[j])))
            << name << "[" << j << "]";
      } else {
        ASSERT_EQ(acc.at(name)[j], want) << name << "[" << j << "]";
      }
    }
  }
  // LayerNorm's gradients are f32 sums computed directly (not through an fp16 tensor).
  EXPECT_GT(ln_off_grid, 0u);
}

TEST(Policy, HugeLossScaleOverflowsFp16GradientsButNotBf16OrFp32) {
  const auto cfg = ref::mlp({8, 8}, Activation::relu);
  const int64_t in = 6, out = 5, rows = 8;
  const ref::Batch batch = ref::make_batch(rows, in, out, LossType::cross_entropy, 21);
  auto count_nonfinite = [](const StepResult& r) {
    size_t n = 0;
    for (const auto& [name, g] : r.grads) {
      for (double v : g) n += !std::isfinite(v);
    }
    return n;
  };
  auto be = make_cpu_backend(1);
  for (Precision p : {Precision::fp16, Precision::bf16, Precision::fp32}) {
    TestMlp model(*be, cfg, p, LossType::cross_entropy, in, out, rows, 8);
    const StepResult normal = step(model, batch, 1024.0);
    const StepResult huge = step(model, batch, 0x1p40);
    SCOPED_TRACE(config::to_string(p));
    // The forward pass and the loss are not scaled: they stay finite.
    EXPECT_TRUE(std::isfinite(huge.loss));
    EXPECT_EQ(count_nonfinite(normal), 0u);
    if (p == Precision::fp16) {
      // dlogits * 2^40 / 8 exceeds fp16's 65504: inf in the lowp gradients, and so in the f32
      // gradient arena, which is what the scaler's found_inf check sees.
      EXPECT_GT(count_nonfinite(huge), 0u);
    } else {
      EXPECT_EQ(count_nonfinite(huge), 0u);
    }
  }
}

}  // namespace
}  // namespace ampctl::nn
