// Backend::sgd_step against a scalar float re-statement of torch.optim.SGD (_single_tensor_sgd),
// written here rather than taken from sgd_math.h. Every operation is one float32 operation
// rounded on its own (the project compiles with -ffp-contract=off), so the comparison is bitwise.
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

// PyTorch's order, one rounding per line:
//   grad *= inv_scale (fused amp path only); grad = -grad if maximize;
//   grad = grad + wd * p; buf = grad (first step) or momentum * buf + (1 - dampening) * grad;
//   grad = grad + momentum * buf (nesterov) or buf; p = p - lr * grad.
void reference_sgd(std::vector<float>& p, const std::vector<float>& grad, std::vector<float>& buf,
                   std::optional<float> inv_scale, bool first, const optim::SgdHyper& h) {
  for (size_t i = 0; i < p.size(); ++i) {
    float g = grad[i];
    if (inv_scale) g = g * *inv_scale;
    if (h.maximize) g = -g;
    if (h.weight_decay != 0.0f) {
      const float decay = h.weight_decay * p[i];
      g = g + decay;
    }
    if (h.momentum != 0.0f) {
      if (first) {
        buf[i] = g;
      } else {
        const float kept = h.momentum * buf[i];
        const float one_minus_dampening = 1.0f - h.dampening;
        const float added = one_minus_dampening * g;
        buf[i] = kept + added;
      }
      if (h.nesterov) {
        const float look_ahead = h.momentum * buf[i];
        g = g + look_ahead;
      } else {
        g = buf[i];
      }
    }
    const float delta = h.lr * g;
    p[i] = p[i] - delta;
  }
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_bits(v[i]);
  return b;
}

struct SgdCase {
  optim::SgdHyper h;
  bool use_inv_scale;
  bool use_found_inf;
  std::optional<DType> lowp;
};

std::string describe(const SgdCase& c, size_t n) {
  const optim::SgdHyper& h = c.h;
  return "n " + std::to_string(n) + ", lr " + fmt(h.lr) + ", momentum " + fmt(h.momentum) +
         ", dampening " + fmt(h.dampening) + ", weight_decay " + fmt(h.weight_decay) +
         (h.nesterov ? ", nesterov" : "") + (h.maximize ? ", maximize" : "") +
         (c.use_inv_scale ? ", inv_scale" : "") + (c.use_found_inf ? ", found_inf" : "") +
         ", lowp " + (c.lowp ? dtype_name(*c.lowp) : "none");
}

std::vector<SgdCase> all_cases() {
  std::vector<SgdCase> cases;
  for (float momentum : {0.0f, 0.9f}) {
    for (float dampening : {0.0f, 0.1f}) {
      for (bool nesterov : {false, true}) {
        // PyTorch requires momentum > 0 and dampening == 0 for nesterov.
        if (nesterov && (momentum == 0.0f || dampening != 0.0f)) continue;
        for (float wd : {0.0f, 1e-2f}) {
          for (bool maximize : {false, true}) {
            for (int variant = 0; variant < 3; ++variant) {
              SgdCase c;
              c.h.lr = 0.05f;
              c.h.momentum = momentum;
              c.h.dampening = dampening;
              c.h.nesterov = nesterov;
              c.h.weight_decay = wd;
              c.h.maximize = maximize;
              // variant 0: plain fp32 SGD; 1: the fused amp path with an f16 copy; 2: the same
              // with a bf16 copy.
              c.use_inv_scale = variant != 0;
              c.use_found_inf = variant != 0;
              if (variant == 1) c.lowp = DType::f16;
              if (variant == 2) c.lowp = DType::bf16;
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

// Several steps per case: the first initialises the momentum buffer (whose prior contents are
// garbage and must not be read), later ones update it; on the fused path some steps overflow and
// must leave params, buffer, step and the low-precision copy bitwise unchanged.
TEST(SgdStep, MatchesPyTorchFormulaBitwise) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x5d5d);
  const std::vector<SgdCase> cases = all_cases();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const SgdCase& c = cases[ci];
    for (size_t n : {1u, 37u, 4099u}) {
      const std::string ctx = describe(c, n);
      SCOPED_TRACE(ctx);
      const Shape shape{static_cast<int64_t>(n)};
      std::vector<float> p = random_values(rng, n, -6, 1);
      std::vector<float> buf = random_values(rng, n, 5, 10);  // garbage before the first step
      Tensor tp = upload_values(*be, shape, DType::f32, p);
      Tensor tbuf = c.h.momentum != 0.0f ? upload_values(*be, shape, DType::f32, buf) : Tensor{};
      Tensor tstep = scalar_i32(*be, 0);
      Tensor tlowp;
      std::vector<uint32_t> lowp_bits;
      if (c.lowp) {
        // Arbitrary contents, unrelated to p, so a missing or a spurious write shows.
        for (float v : random_values(rng, n, -3, 3)) lowp_bits.push_back(encode(v, *c.lowp));
        tlowp = upload_bits(*be, shape, *c.lowp, lowp_bits);
      }
      int32_t steps = 0;
      // On the fused path calls 0, 2 and 3 overflow: call 0 comes before any real step, so call 1
      // is the first real one and must still initialise the buffer; 2 and 3 skip back to back.
      const bool overflow_at[] = {true, false, true, true, false, false};
      for (int s = 0; s < 6; ++s) {
        const bool overflow = c.use_found_inf && overflow_at[s];
        const float scale = std::ldexp(1.0f, 10 + s);
        const float inv = static_cast<float>(1.0 / static_cast<double>(scale));
        // Gradients as they come out of a scaled backward pass (inf where it overflowed).
        std::vector<float> g = random_values(rng, n, -8, 0);
        if (c.use_inv_scale) {
          for (float& x : g) x *= scale * 0.9f;
        }
        if (overflow) g[n / 2] = std::numeric_limits<float>::infinity();
        OptimizerStepArgs args;
        args.params = tp;
        args.grads = upload_values(*be, shape, DType::f32, g);
        args.momentum_buf = tbuf;
        args.step = tstep;
        args.found_inf = c.use_found_inf ? scalar_f32(*be, overflow ? 1.0f : 0.0f) : Tensor{};
        args.inv_scale = c.use_inv_scale ? scalar_f32(*be, inv) : Tensor{};
        args.lowp_params = tlowp;
        args.hyper = c.h;
        be->optimizer_step(args);

        if (!overflow) {
          reference_sgd(p, g, buf, c.use_inv_scale ? std::optional<float>(inv) : std::nullopt,
                        steps == 0, c.h);
          ++steps;
          if (c.lowp) {
            for (size_t i = 0; i < n; ++i) lowp_bits[i] = encode(p[i], *c.lowp);
          }
        }
        SCOPED_TRACE("step " + std::to_string(s) + (overflow ? " (overflow: skipped)" : ""));
        BitwiseCheck pc(DType::f32);
        pc.add_all(download_bits(*be, tp), bits_of(p));
        ASSERT_TRUE(pc.ok()) << "params: " << pc.report();
        if (c.h.momentum != 0.0f) {
          BitwiseCheck bc(DType::f32);
          bc.add_all(download_bits(*be, tbuf), bits_of(buf));
          ASSERT_TRUE(bc.ok()) << "momentum buffer: " << bc.report();
        }
        if (c.lowp) {
          BitwiseCheck lc(*c.lowp);
          lc.add_all(download_bits(*be, tlowp), lowp_bits);
          ASSERT_TRUE(lc.ok()) << "lowp params (the rounded new params): " << lc.report();
        }
        ASSERT_EQ(be->read_scalar_i32(tstep), steps) << "step counter";
      }
    }
  }
}

// The multiplication by inv_scale comes first: with weight decay and a non-power-of-two inverse
// scale, multiplying after the decay term (or folding it into lr) gives other bits. This case
// checks that the test above can tell the orders apart.
TEST(SgdStep, InvScaleIsAppliedBeforeWeightDecay) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x1e5d);
  optim::SgdHyper h;
  h.lr = 0.1f;
  h.weight_decay = 0.3f;
  h.momentum = 0.9f;
  const size_t n = 2000;
  const float inv = 1.0f / 3000.0f;
  std::vector<float> p = random_values(rng, n, -2, 1);
  std::vector<float> g = random_values(rng, n, 5, 12);
  std::vector<float> buf(n);
  Tensor tp = upload_values(*be, {2000}, DType::f32, p);
  OptimizerStepArgs args;
  args.params = tp;
  args.grads = upload_values(*be, {2000}, DType::f32, g);
  args.momentum_buf = be->zeros({2000}, DType::f32);
  args.step = scalar_i32(*be, 0);
  args.inv_scale = scalar_f32(*be, inv);
  args.hyper = h;
  be->optimizer_step(args);

  std::vector<float> wrong = p;
  std::vector<float> wrong_buf(n);
  std::vector<float> unscaled_later(n);
  // A wrong order, for contrast: decay added to the scaled gradient, then the sum unscaled.
  for (size_t i = 0; i < n; ++i) {
    const float decayed = g[i] + h.weight_decay * p[i];
    unscaled_later[i] = decayed * inv;
    wrong[i] = p[i] - h.lr * unscaled_later[i];
  }
  reference_sgd(p, g, buf, inv, true, h);
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += float_bits(wrong[i]) != float_bits(p[i]);
  ASSERT_GT(differ, 0u) << "the wrong order gives the same bits: this test cannot fail";
  BitwiseCheck check(DType::f32);
  check.add_all(download_bits(*be, tp), bits_of(p));
  EXPECT_TRUE(check.ok()) << check.report();
}

}  // namespace
}  // namespace ampctl::test
