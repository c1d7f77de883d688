// Backend::adam_step against a scalar float re-statement of torch.optim.Adam / AdamW
// (_single_tensor_adam), written here rather than taken from adam_math.h: the scalars PyTorch
// forms in Python (double) are formed here in double and rounded to float once, and every tensor
// operation is one float32 operation rounded on its own (the project compiles with
// -ffp-contract=off), so the comparison is bitwise.
//
// Not covered, because AdamHyper cannot express them: amsgrad (no field; the optimizer layer must
// reject it), and beta1 <= 0.5, where PyTorch's lerp_ switches to its other branch
// (end - (end - self) * (1 - weight)) while adam_math.h always takes the weight < 0.5 one; every
// case here has beta1 > 0.5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

// One update, `step` being the update's number (1 on the first), in PyTorch's order:
//   grad *= inv_scale (fused amp path only); grad = -grad if maximize
//   weight_decay != 0: AdamW param.mul_(1 - lr * wd); Adam grad = grad.add(param, alpha=wd)
//   exp_avg.lerp_(grad, 1 - beta1)            -> m + w * (grad - m)   (w < 0.5)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) -> v * beta2 + (value * g) * g
//   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2^step)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1^step))  -> p + (value * m) / denom
void reference_adam(std::vector<float>& p, const std::vector<float>& grad, std::vector<float>& m,
                    std::vector<float>& v, std::optional<float> inv_scale, int step,
                    const optim::AdamHyper& h) {
  // Python floats (double), converted to float where the kernel receives them.
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  const float neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float lerp_weight = static_cast<float>(1.0 - h.beta1);
  const float beta2 = static_cast<float>(h.beta2);
  const float addcmul_value = static_cast<float>(1.0 - h.beta2);
  const float eps = static_cast<float>(h.eps);
  const float weight_decay = static_cast<float>(h.weight_decay);
  const float decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  for (size_t i = 0; i < p.size(); ++i) {
    float g = grad[i];
    if (inv_scale) g = g * *inv_scale;
    if (h.maximize) g = -g;
    float param = p[i];
    if (h.weight_decay != 0.0) {
      if (h.decoupled) {
        param = param * decay;
      } else {
        const float wp = weight_decay * param;
        g = g + wp;
      }
    }
    const float diff = g - m[i];
    const float moved = lerp_weight * diff;
    m[i] = m[i] + moved;
    const float kept = v[i] * beta2;
    const float vg = addcmul_value * g;
    const float vgg = vg * g;
    v[i] = kept + vgg;
    const float root = std::sqrt(v[i]);
    const float corrected = root / bias_correction2_sqrt;
    const float denom = corrected + eps;
    const float numerator = neg_step_size * m[i];
    const float update = numerator / denom;
    p[i] = param + update;
  }
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_bits(v[i]);
  return b;
}

std::vector<uint32_t> lowp_bits_of(const std::vector<float>& v, DType d) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = encode(v[i], d);
  return b;
}

optim::AdamHyper hyper(double lr, double beta1, double beta2, double eps, double wd, bool decoupled,
                       bool maximize) {
  optim::AdamHyper h;
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps;
  h.weight_decay = wd;
  h.decoupled = decoupled;
  h.maximize = maximize;
  return h;
}

std::string describe(const optim::AdamHyper& h) {
  return std::string(h.decoupled ? "AdamW" : "Adam") + " lr " + fmt(h.lr) + ", betas (" +
         fmt(h.beta1) + ", " + fmt(h.beta2) + "), eps " + fmt(h.eps) + ", weight_decay " +
         fmt(h.weight_decay) + (h.maximize ? ", maximize" : "");
}

struct Variant {
  bool fused;  // inv_scale, found_inf and a low-precision copy, as the amp path calls it
  float inv_scale;
  DType lowp;
};

// Several steps per case; on the fused path the third step overflows (found_inf = 1) and must
// leave params, both moments, step and the low-precision copy bitwise unchanged, and the steps
// after it must use the unskipped step count in their bias corrections.
TEST(AdamStep, MatchesPyTorchFormulaBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xada3);
  const optim::AdamHyper hypers[] = {
      hyper(1e-3, 0.9, 0.999, 1e-8, 0.0, false, false),  // torch defaults
      hyper(3e-3, 0.8, 0.99, 1e-6, 0.01, false, false),  // L2 weight decay
      hyper(1e-3, 0.9, 0.999, 1e-8, 0.01, true, false),  // AdamW
      hyper(2e-3, 0.9, 0.999, 1e-8, 0.01, false, true),  // maximize
      hyper(0.1, 0.6, 0.95, 1e-3, 0.1, true, true),      // AdamW, maximize, large steps
      hyper(1e-3, 0.9, 0.999, 1e-8, 0.0, true, false)};  // AdamW without decay
  const Variant variants[] = {{false, 1.0f, DType::f32},
                              {true, 0x1p-10f, DType::f16},
                              {true, static_cast<float>(1.0 / 1536.0), DType::bf16}};
  const int kSteps = 6, kSkipped = 2;
  for (const optim::AdamHyper& h : hypers) {
    for (const Variant& var : variants) {
      for (size_t n : {1u, 37u, 4099u}) {
        SCOPED_TRACE(describe(h) +
                     (var.fused
                          ? ", inv_scale " + fmt(var.inv_scale) + ", lowp " + dtype_name(var.lowp)
                          : ", plain") +
                     ", n " + std::to_string(n));
        const int64_t len = static_cast<int64_t>(n);
        std::vector<float> p = random_values(rng, n, -4, 1), m(n, 0.0f), v(n, 0.0f);
        Tensor params = upload_values(*be, {len}, DType::f32, p);
        Tensor exp_avg = be->zeros({len}, DType::f32);
        Tensor exp_avg_sq = be->zeros({len}, DType::f32);
        Tensor step = scalar_i32(*be, 0);
        Tensor lowp = var.fused ? be->zeros({len}, var.lowp) : Tensor{};
        int real_steps = 0;
        for (int s = 0; s < kSteps; ++s) {
          SCOPED_TRACE("call " + std::to_string(s));
          // Gradients over many binades (as scaled gradients are, when fused).
          std::vector<float> g = random_values(rng, n, -12, 2);
          if (var.fused) {
            for (float& x : g) x = x / var.inv_scale;
          }
          const bool skip = var.fused && s == kSkipped;
          OptimizerStepArgs args;
          args.params = params;
          args.grads = upload_values(*be, {len}, DType::f32, g);
          args.exp_avg = exp_avg;
          args.exp_avg_sq = exp_avg_sq;
          args.step = step;
          if (var.fused) {
            args.found_inf = scalar_f32(*be, skip ? 1.0f : 0.0f);
            args.inv_scale = scalar_f32(*be, var.inv_scale);
            args.lowp_params = lowp;
          }
          args.hyper = h;
          const auto lowp_before = var.fused ? download_bits(*be, lowp) : std::vector<uint32_t>{};
          be->optimizer_step(args);
          if (!skip) {
            ++real_steps;
            reference_adam(p, g, m, v,
                           var.fused ? std::optional<float>(var.inv_scale) : std::nullopt,
                           real_steps, h);
          }
          BitwiseCheck cp(DType::f32), cm(DType::f32), cv(DType::f32);
          cp.add_all(download_bits(*be, params), bits_of(p));
          cm.add_all(download_bits(*be, exp_avg), bits_of(m));
          cv.add_all(download_bits(*be, exp_avg_sq), bits_of(v));
          EXPECT_TRUE(cp.ok()) << "params: " << cp.report();
          EXPECT_TRUE(cm.ok()) << "exp_avg: " << cm.report();
          EXPECT_TRUE(cv.ok()) << "exp_avg_sq: " << cv.report();
          EXPECT_EQ(be->read_scalar_i32(step), real_steps) << "step counts real steps only";
          if (var.fused) {
            BitwiseCheck cl(var.lowp);
            cl.add_all(download_bits(*be, lowp), skip ? lowp_before : lowp_bits_of(p, var.lowp));
            EXPECT_TRUE(cl.ok()) << "lowp copy: " << cl.report();
          }
          if (::testing::Test::HasFailure()) return;  // one report per failing case is enough
        }
      }
    }
  }
}

// A skipped step writes nothing, from any state (here: after two real steps, so the moments are
// non-zero and the low-precision copy holds data).
TEST(AdamStep, SkippedStepLeavesEverythingBitwiseUnchanged) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xada4);
  const size_t n = 1031;
  const int64_t len = static_cast<int64_t>(n);
  for (DType lowp_dtype : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(lowp_dtype));
    OptimizerStepArgs args;
    args.params = upload_values(*be, {len}, DType::f32, random_values(rng, n, -4, 1));
    args.exp_avg = be->zeros({len}, DType::f32);
    args.exp_avg_sq = be->zeros({len}, DType::f32);
    args.step = scalar_i32(*be, 0);
    args.found_inf = scalar_f32(*be, 0.0f);
    args.inv_scale = scalar_f32(*be, 0x1p-8f);
    args.lowp_params = be->zeros({len}, lowp_dtype);
    args.hyper = hyper(1e-2, 0.9, 0.999, 1e-8, 0.01, true, false);
    for (int s = 0; s < 2; ++s) {
      args.grads = upload_values(*be, {len}, DType::f32, random_values(rng, n, -4, 8));
      be->optimizer_step(args);
    }
    const auto p0 = download_bits(*be, args.params);
    const auto m0 = download_bits(*be, args.exp_avg);
    const auto v0 = download_bits(*be, args.exp_avg_sq);
    const auto l0 = download_bits(*be, args.lowp_params);
    std::vector<float> g = random_values(rng, n, -4, 8);
    g[n / 2] = std::numeric_limits<float>::infinity();  // the overflow that set found_inf
    args.grads = upload_values(*be, {len}, DType::f32, g);
    args.found_inf = scalar_f32(*be, 1.0f);
    be->optimizer_step(args);
    BitwiseCheck cp(DType::f32), cm(DType::f32), cv(DType::f32), cl(lowp_dtype);
    cp.add_all(download_bits(*be, args.params), p0);
    cm.add_all(download_bits(*be, args.exp_avg), m0);
    cv.add_all(download_bits(*be, args.exp_avg_sq), v0);
    cl.add_all(download_bits(*be, args.lowp_params), l0);
    EXPECT_TRUE(cp.ok()) << "params: " << cp.report();
    EXPECT_TRUE(cm.ok()) << "exp_avg: " << cm.report();
    EXPECT_TRUE(cv.ok()) << "exp_avg_sq: " << cv.report();
    EXPECT_TRUE(cl.ok()) << "lowp copy: " << cl.report();
    EXPECT_EQ(be->read_scalar_i32(args.step), 2) << "a skipped step is not counted";
  }
}

// Worked by hand: on the first step, with zero moments, m = (1 - beta1) g and v = (1 - beta2) g^2,
// so the bias-corrected m_hat = g and sqrt(v_hat) = |g|, and the update is
// -lr g / (|g| + eps): |delta| = lr (1 - eps / |g|). For |g| >= 1e-3 and eps = 1e-8 that is lr
// within 1e-8; the float arithmetic adds a few u lr (~1e-10) and rounding the new parameter
// (|p| <= 1) at most 2^-24 ~ 6e-8. So | |delta| - lr | <= 1e-6 has ample room and delta has the
// sign of -g.
TEST(AdamStep, FirstStepMovesEachParameterByLr) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xada5);
  const size_t n = 2049;
  const int64_t len = static_cast<int64_t>(n);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-3.0f, 1.0f);
  std::vector<float> p(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = unit(rng);
    g[i] = std::pow(10.0f, log_mag(rng)) * (unit(rng) < 0 ? -1.0f : 1.0f);
  }
  OptimizerStepArgs args;
  args.params = upload_values(*be, {len}, DType::f32, p);
  args.grads = upload_values(*be, {len}, DType::f32, g);
  args.exp_avg = be->zeros({len}, DType::f32);
  args.exp_avg_sq = be->zeros({len}, DType::f32);
  args.step = scalar_i32(*be, 0);
  args.hyper = optim::AdamHyper{};  // lr 1e-3, betas (0.9, 0.999), eps 1e-8
  be->optimizer_step(args);
  const auto after = download_values(*be, args.params);
  const auto m = download_values(*be, args.exp_avg);
  const auto v = download_values(*be, args.exp_avg_sq);
  ErrorBudget delta, mb, vb;
  size_t wrong_sign = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(after[i]) - p[i];
    delta.add(i, std::fabs(d), 1e-3, 1e-6);
    if ((d < 0) != (g[i] > 0)) ++wrong_sign;
    // m = 0 + w (g - 0) and v = 0 * beta2 + (value g) g: one and two float roundings of the
    // rounded constants 1 - beta1, 1 - beta2 (relative u each): <= 3u and 4u relative.
    mb.add(i, m[i], 0.1 * g[i], 3 * 0x1p-24 * std::fabs(0.1 * g[i]));
    vb.add(i, v[i], 0.001 * g[i] * g[i], 4 * 0x1p-24 * 0.001 * g[i] * g[i]);
  }
  EXPECT_TRUE(delta.ok()) << "|delta| vs lr: " << delta.report();
  EXPECT_EQ(wrong_sign, 0u) << "each parameter moves against its gradient";
  EXPECT_TRUE(mb.ok()) << "exp_avg: " << mb.report();
  EXPECT_TRUE(vb.ok()) << "exp_avg_sq: " << vb.report();
  EXPECT_EQ(be->read_scalar_i32(args.step), 1);
}

TEST(AdamStep, RejectsMismatchedOperands) {
  auto be = cpu_backend();
  auto args_of = [&](const Tensor& params, const Tensor& grads, const Tensor& m) {
    OptimizerStepArgs a;
    a.params = params;
    a.grads = grads;
    a.exp_avg = m;
    a.exp_avg_sq = be->zeros({8}, DType::f32);
    a.step = scalar_i32(*be, 0);
    a.hyper = optim::AdamHyper{};
    return a;
  };
  Tensor f8 = be->zeros({8}, DType::f32);
  expect_invalid_argument(
      [&] {
        be->optimizer_step(args_of(f8, be->zeros({7}, DType::f32), be->zeros({8}, DType::f32)));
      },
      "grads of another length");
  expect_invalid_argument(
      [&] {
        be->optimizer_step(args_of(be->zeros({8}, DType::f16), f8, be->zeros({8}, DType::f32)));
      },
      "f16 params");
  expect_invalid_argument([&] { be->optimizer_step(args_of(f8, f8, be->zeros({9}, DType::f32))); },
                          "exp_avg too long");
  OptimizerStepArgs a = args_of(f8, f8, be->zeros({8}, DType::f32));
  a.step = scalar_f32(*be, 0.0f);
  expect_invalid_argument([&] { be->optimizer_step(a); }, "f32 step counter");
}

}  // namespace
}  // namespace ampctl::test
