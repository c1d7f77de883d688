// The CUDA backend against the CPU reference: optimizer_step (backend.h, "optimizers") for SGD
// and Adam/AdamW, aligned and not, with decay masks, bitwise (sgd_math.h / adam_math.h; the one
// freedom, Adam's bias corrections through double pow, CUDA's and glibc's, agrees after rounding
// to float unless within ~2^-50 of a float midpoint, which these inputs do not hit); a skipped
// step leaves every state bit unchanged. The harness and the comparison rules: cpu_vs_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/nn_math.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

void add_sgd_cases(std::vector<CudaCase>& cases) {
  struct Variant {
    const char* name;
    optim::SgdHyper hyper;
    bool use_inv_scale;
    bool use_found_inf;
  };
  const Variant variants[] = {
      {"plain", {0.1f, 0.0f, 0.0f, 0.0f, false, false}, false, false},
      {"momentum_dampening_wd", {0.01f, 0.9f, 0.1f, 1e-4f, false, false}, true, true},
      {"nesterov_maximize", {0.03f, 0.8f, 0.0f, 0.01f, true, true}, true, false},
      {"wd_no_momentum", {0.05f, 0.0f, 0.0f, 0.1f, false, false}, true, true},
  };
  constexpr int64_t n = 10007;
  constexpr int kSteps = 3;
  for (const Variant& v : variants) {
    // i32 stands for "no copy"; an f32 copy is a plain copy in the same pass.
    for (DType lowp : {DType::i32, DType::f32, DType::f16, DType::bf16}) {
      CudaCase c;
      c.name = std::string("sgd_step_") + v.name +
               (lowp == DType::i32 ? "" : std::string("_lowp_") + dtype_name(lowp));
      c.make_inputs = [v, lowp](std::mt19937_64& rng) {
        // The middle step is skipped when found_inf is used: momentum is initialised on the
        // first real step and the counter counts real steps only.
        std::vector<float> found = {0.0f, 1.0f, 0.0f};
        return std::vector<HostInput>{
            from_values({n}, DType::f32, random_values(rng, n, -4, 2)),
            from_values({kSteps, n}, DType::f32, random_values(rng, kSteps * n, -2, 14)),
            // Garbage in the buffer: the first step must overwrite it, not blend it in.
            from_values({n}, DType::f32, random_values(rng, n, -3, 3)),
            from_i32({1}, {0}),
            from_values({kSteps}, DType::f32, found),
            scalar_input(0x1p-12f),
            from_values({n}, lowp == DType::i32 ? DType::f16 : lowp, std::vector<float>(n, 0.0f)),
        };
      };
      c.run = [v, lowp](Backend& be, std::vector<Tensor>& in) {
        for (int s = 0; s < kSteps; ++s) {
          OptimizerStepArgs args;
          args.params = in[0];
          args.grads = in[1].view(static_cast<size_t>(s * n), {n});
          if (v.hyper.momentum != 0.0f) args.momentum_buf = in[2];
          args.step = in[3];
          if (v.use_found_inf) args.found_inf = in[4].view(static_cast<size_t>(s), {1});
          if (v.use_inv_scale) args.inv_scale = in[5];
          if (lowp != DType::i32) args.lowp_params = in[6];
          args.hyper = v.hyper;
          be.optimizer_step(args);
        }
        std::vector<Tensor> out = {in[0], in[2], in[3]};
        if (lowp != DType::i32) out.push_back(in[6]);
        return out;
      };
      cases.push_back(c);
    }
  }
}

// ---- the optimizers and the unscale pass on aligned and misaligned buffers ----

struct AdamVariant {
  const char* name;
  optim::AdamHyper hyper;
  bool inv_scale;
  DType lowp;     // i32: no lowp copy (f32: a plain copy in the same pass)
  size_t offset;  // elements: views this far into their buffers (offset % 4 != 0: scalar path)
};

void add_adam_cases(std::vector<CudaCase>& cases) {
  const AdamVariant variants[] = {
      {"adam", {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false}, false, DType::i32, 0},
      {"adamw_lowp_f32", {1e-3, 0.9, 0.999, 1e-8, 0.01, true, false}, true, DType::f32, 0},
      {"adam_lowp_f32_misaligned",
       {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false},
       true,
       DType::f32,
       3},
      {"adam_wd_amp_f16", {3e-3, 0.9, 0.99, 1e-6, 0.1, false, false}, true, DType::f16, 0},
      {"adamw_bf16", {1e-2, 0.8, 0.999, 1e-8, 0.01, true, false}, true, DType::bf16, 0},
      {"adam_maximize_misaligned", {1e-3, 0.9, 0.999, 1e-8, 0.0, false, true}, true, DType::f16, 1},
      {"adamw_misaligned_lowp", {2e-3, 0.95, 0.98, 1e-7, 0.05, true, false}, false, DType::bf16, 2},
  };
  constexpr int64_t n = 10007;  // odd: the vectorised pass has a scalar tail
  constexpr int kSteps = 4;
  for (const AdamVariant& v : variants) {
    CudaCase c;
    c.name = std::string("adam_step_") + v.name;
    c.make_inputs = [v](std::mt19937_64& rng) {
      const auto m = static_cast<int64_t>(n + v.offset);
      std::vector<float> v_sq = random_values(rng, static_cast<size_t>(m), -20, -4);
      for (float& e : v_sq) e = std::fabs(e);
      return std::vector<HostInput>{
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -4, 1)),
          from_values({kSteps * n}, DType::f32, random_values(rng, kSteps * n, -18, -2)),
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -12, -4)),
          from_values({m}, DType::f32, v_sq), from_i32({1}, {5}),
          // Step 3 of 4 overflowed: it must be skipped (nothing written, step not counted).
          from_values({kSteps}, DType::f32, {0.0f, 0.0f, 1.0f, 0.0f}), scalar_input(0x1p-10f),
          from_values({m}, v.lowp == DType::i32 ? DType::f16 : v.lowp,
                      random_values(rng, static_cast<size_t>(m), -4, 1))};
    };
    c.run = [v](Backend& be, std::vector<Tensor>& in) {
      for (int s = 0; s < kSteps; ++s) {
        OptimizerStepArgs args;
        args.params = in[0].view(v.offset, {n});
        args.grads = in[1].view(static_cast<size_t>(s * n), {n});
        args.exp_avg = in[2].view(v.offset, {n});
        args.exp_avg_sq = in[3].view(v.offset, {n});
        args.step = in[4];
        args.found_inf = in[5].view(static_cast<size_t>(s), {1});
        if (v.inv_scale) args.inv_scale = in[6];
        if (v.lowp != DType::i32) args.lowp_params = in[7].view(v.offset, {n});
        args.hyper = v.hyper;
        be.optimizer_step(args);
      }
      return std::vector<Tensor>{in[0], in[2], in[3], in[4], in[7]};
    };
    cases.push_back(c);
  }
}

void add_sgd_alignment_cases(std::vector<CudaCase>& cases) {
  constexpr int64_t n = 4099;
  for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
    CudaCase c;
    c.name = "sgd_step_offset" + std::to_string(offset);
    c.make_inputs = [offset](std::mt19937_64& rng) {
      const auto m = static_cast<int64_t>(n + offset);
      return std::vector<HostInput>{
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -4, 1)),
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -14, -2)),
          from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -10, -2)),
          from_i32({1}, {3}),
          scalar_input(0x1p-8f),
          from_values({m}, DType::f16, random_values(rng, static_cast<size_t>(m), -4, 1))};
    };
    c.run = [offset](Backend& be, std::vector<Tensor>& in) {
      OptimizerStepArgs args;
      args.params = in[0].view(offset, {n});
      args.grads = in[1].view(offset, {n});
      args.momentum_buf = in[2].view(offset, {n});
      args.step = in[3];
      args.inv_scale = in[4];
      args.lowp_params = in[5].view(offset, {n});
      args.hyper = optim::SgdHyper{0.05f, 0.9f, 0.0f, 1e-4f, true, false};
      be.optimizer_step(args);
      return std::vector<Tensor>{in[0], in[2], in[3], in[5]};
    };
    cases.push_back(c);
  }
}

// optimizer.decay_on: matrices: a decay mask (runs of 0 and 1, odd lengths, so vectorised
// groups mix both) on AdamW, Adam's L2 and SGD, aligned and not.
void add_decay_mask_cases(std::vector<CudaCase>& cases) {
  constexpr int64_t n = 4099;
  for (int kind = 0; kind < 3; ++kind) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      CudaCase c;
      c.name = std::string("decay_mask_") +
               (kind == 0   ? "adamw"
                : kind == 1 ? "adam"
                            : "sgd") +
               "_offset" + std::to_string(offset);
      c.make_inputs = [offset](std::mt19937_64& rng) {
        const auto m = static_cast<int64_t>(n + offset);
        std::vector<float> v_sq = random_values(rng, static_cast<size_t>(m), -20, -4);
        for (float& e : v_sq) e = std::fabs(e);
        std::vector<float> mask(static_cast<size_t>(m));
        for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i / 7) % 3 == 0 ? 0.0f : 1.0f;
        return std::vector<HostInput>{
            from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -4, 1)),
            from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -14, -2)),
            from_values({m}, DType::f32, random_values(rng, static_cast<size_t>(m), -12, -4)),
            from_values({m}, DType::f32, v_sq),
            from_i32({1}, {2}),
            from_values({m}, DType::f32, mask),
            from_values({m}, DType::f16, random_values(rng, static_cast<size_t>(m), -4, 1))};
      };
      c.run = [kind, offset](Backend& be, std::vector<Tensor>& in) {
        for (int s = 0; s < 2; ++s) {
          OptimizerStepArgs args;
          args.params = in[0].view(offset, {n});
          args.grads = in[1].view(offset, {n});
          args.step = in[4];
          args.decay_mask = in[5].view(offset, {n});
          args.lowp_params = in[6].view(offset, {n});
          if (kind == 2) {
            args.momentum_buf = in[2].view(offset, {n});
            args.hyper = optim::SgdHyper{0.05f, 0.9f, 0.0f, 0.1f, false, false};
          } else {
            args.exp_avg = in[2].view(offset, {n});
            args.exp_avg_sq = in[3].view(offset, {n});
            args.hyper = optim::AdamHyper{1e-2, 0.9, 0.99, 1e-8, 0.1, kind == 0, false};
          }
          be.optimizer_step(args);
        }
        return std::vector<Tensor>{in[0], in[2], in[3], in[4], in[6]};
      };
      cases.push_back(c);
    }
  }
}

std::vector<CudaCase> optim_cases() {
  std::vector<CudaCase> cases;
  add_sgd_cases(cases);
  add_adam_cases(cases);
  add_sgd_alignment_cases(cases);
  add_decay_mask_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Optim, optim_cases);

// ---- properties of the GPU alone ----

// A step with found_inf set writes nothing: params, momentum buffer, lowp copy and step keep every
// bit, NaN payloads included.
TEST(CudaSgdStep, SkippedStepLeavesStateBitwiseUnchanged) {
  AMPCTL_REQUIRE_GPU();
  std::mt19937_64 rng(9);
  const int64_t n = 4099;
  for (bool first_step : {true, false}) {
    std::vector<uint32_t> param_bits(n), buf_bits(n), lowp_bits(n);
    for (auto& b : param_bits) b = static_cast<uint32_t>(rng());  // any bits, NaNs included
    for (auto& b : buf_bits) b = static_cast<uint32_t>(rng());
    for (auto& b : lowp_bits) b = static_cast<uint32_t>(rng()) & 0xffffu;
    OptimizerStepArgs args;
    args.params = upload_bits(gpu(), {n}, DType::f32, param_bits);
    args.grads = upload_values(gpu(), {n}, DType::f32, random_values(rng, n, -4, 4));
    args.momentum_buf = upload_bits(gpu(), {n}, DType::f32, buf_bits);
    args.step = scalar_i32(gpu(), first_step ? 0 : 5);
    args.found_inf = scalar_f32(gpu(), 1.0f);
    args.inv_scale = scalar_f32(gpu(), 0x1p-8f);
    args.lowp_params = upload_bits(gpu(), {n}, DType::f16, lowp_bits);
    args.hyper = optim::SgdHyper{0.1f, 0.9f, 0.0f, 0.01f, true, false};
    gpu().optimizer_step(args);
    BitwiseCheck params(DType::f32), buf(DType::f32), lowp(DType::f16);
    params.add_all(download_bits(gpu(), args.params), param_bits);
    buf.add_all(download_bits(gpu(), args.momentum_buf), buf_bits);
    lowp.add_all(download_bits(gpu(), args.lowp_params), lowp_bits);
    EXPECT_TRUE(params.ok()) << "params: " << params.report();
    EXPECT_TRUE(buf.ok()) << "momentum_buf: " << buf.report();
    EXPECT_TRUE(lowp.ok()) << "lowp_params: " << lowp.report();
    EXPECT_EQ(gpu().read_scalar_i32(args.step), first_step ? 0 : 5);
  }
}

// A step with found_inf set writes nothing: params, both moments, the lowp copy and step keep
// every bit, NaN payloads included.
TEST(CudaAdamStep, SkippedStepLeavesStateBitwiseUnchanged) {
  if (ampctl::cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  std::mt19937_64 rng(11);
  const int64_t n = 4099;
  for (DType lowp : {DType::f16, DType::bf16}) {
    std::vector<uint32_t> param_bits(n), m_bits(n), v_bits(n), lowp_bits(n);
    for (auto& b : param_bits) b = static_cast<uint32_t>(rng());  // any bits, NaNs included
    for (auto& b : m_bits) b = static_cast<uint32_t>(rng());
    for (auto& b : v_bits) b = static_cast<uint32_t>(rng());
    for (auto& b : lowp_bits) b = static_cast<uint32_t>(rng()) & 0xffffu;
    OptimizerStepArgs args;
    args.params = upload_bits(gpu(), {n}, DType::f32, param_bits);
    args.grads = upload_values(gpu(), {n}, DType::f32, random_values(rng, n, -4, 4));
    args.exp_avg = upload_bits(gpu(), {n}, DType::f32, m_bits);
    args.exp_avg_sq = upload_bits(gpu(), {n}, DType::f32, v_bits);
    args.step = scalar_i32(gpu(), 7);
    args.found_inf = scalar_f32(gpu(), 1.0f);
    args.inv_scale = scalar_f32(gpu(), 0x1p-8f);
    args.lowp_params = upload_bits(gpu(), {n}, lowp, lowp_bits);
    args.hyper = optim::AdamHyper{1e-3, 0.9, 0.999, 1e-8, 0.01, true, false};
    gpu().optimizer_step(args);
    BitwiseCheck params(DType::f32), m(DType::f32), v(DType::f32), low(lowp);
    params.add_all(download_bits(gpu(), args.params), param_bits);
    m.add_all(download_bits(gpu(), args.exp_avg), m_bits);
    v.add_all(download_bits(gpu(), args.exp_avg_sq), v_bits);
    low.add_all(download_bits(gpu(), args.lowp_params), lowp_bits);
    EXPECT_TRUE(params.ok()) << "params: " << params.report();
    EXPECT_TRUE(m.ok()) << "exp_avg: " << m.report();
    EXPECT_TRUE(v.ok()) << "exp_avg_sq: " << v.report();
    EXPECT_TRUE(low.ok()) << tag(lowp) << " lowp_params: " << low.report();
    EXPECT_EQ(gpu().read_scalar_i32(args.step), 7);
  }
}

}  // namespace
}  // namespace ampctl::test
