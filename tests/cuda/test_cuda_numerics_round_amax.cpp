// round_amax (backend.h, grad_amax) on the GPU equals the CPU backend's bitwise (a NaN's payload
// aside): the rounded values and both accumulator words, over random values in every binade, with
// an inf and a NaN in a second pass, in two calls that accumulate (a max over both halves, as the
// layers' roundings of one step do). Then the table of the ops that take grad_amax inside them
// (gemm_round_amax, gemm_batched_round_amax, activation_backward_amax,
// causal_softmax_backward_amax): the CPU's fused overrides against CUDA's default compositions
// (the op into f32, then round_amax), each within its plain op's bound (cpu_vs_cuda.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "activation_bounds.h"
#include "ampctl/backend/backend.h"
#include "ampctl/math/numerics_math.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

TEST(CudaRoundAmax, MatchesCpuBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto cpu = make_cpu_backend(2);
  auto gpu = make_cuda_backend(0);
  std::mt19937 rng(29);
  const int64_t n = 1 << 18;
  std::vector<float> src(n);
  for (auto& v : src) {
    const uint32_t bits = (rng() & ~(0xffu << 23)) | ((rng() % 255u) << 23);  // finite
    std::memcpy(&v, &bits, sizeof v);
  }
  for (bool poison : {false, true}) {
    if (poison) {
      src[12345] = std::numeric_limits<float>::infinity();
      src[n - 3] = std::numeric_limits<float>::quiet_NaN();
    }
    for (DType dst : {DType::f16, DType::bf16}) {
      std::vector<uint16_t> want(n), got(n);
      float want_amax[numerics::kAmaxWords], got_amax[numerics::kAmaxWords];
      for (Backend* b : {cpu.get(), gpu.get()}) {
        Tensor s = b->from_host({n}, DType::f32, src.data());
        Tensor d = b->zeros({n}, dst);
        Tensor amax = b->zeros({numerics::kAmaxWords}, DType::f32);
        b->round_amax(s.view(0, {n / 2}), d.view(0, {n / 2}), amax);
        b->round_amax(s.view(static_cast<size_t>(n / 2), {n - n / 2}),
                      d.view(static_cast<size_t>(n / 2), {n - n / 2}), amax);
        const bool is_cpu = b == cpu.get();
        b->download(is_cpu ? want.data() : got.data(), d);
        b->download(is_cpu ? want_amax : got_amax, amax);
      }
      const std::string what = std::string(dtype_name(dst)) + (poison ? ", inf and NaN" : "");
      // Bitwise, except that a NaN may carry any payload (the GPU's conversion returns the
      // canonical NaN, the CPU's keeps the payload: core/half.h); it must stay a NaN.
      BitwiseCheck check(dst, /*nan_any=*/true);
      check.add_all(std::vector<uint32_t>(got.begin(), got.end()),
                    std::vector<uint32_t>(want.begin(), want.end()));
      EXPECT_TRUE(check.ok()) << what << " (got = cuda, expected = cpu): " << check.report();
      EXPECT_EQ(0, std::memcmp(want_amax, got_amax, sizeof want_amax)) << what;
      EXPECT_EQ(want_amax[1], poison ? 1.0f : 0.0f) << what;
    }
  }
}

// ---- the ops that take grad_amax inside them: the table (cpu_vs_cuda.h) ----
//
// Each case's outputs: the rounded f16/bf16 output, then the accumulator (inputs' last, holding
// a start value each case's name gives). The rounded output compares as the plain op's table row
// does (bitwise, or within the float bound of the op's values plus one ulp of the output);
// amax[0] is the largest finite |value| the op rounds, and a max moves by at most the largest of
// its arguments' moves, so it is within the largest element bound (bitwise where the output is);
// amax[1], the non-finite flag, is exact. The CPU runs its fused overrides, CUDA the default
// compositions: this is the equality of the two within the table's bound that grad_amax's docs
// state.

Spec amax_spec(const std::vector<double>& delta) {
  double worst = 0.0;
  for (double d : delta) worst = std::max(worst, d);
  return within({worst, 0.0});
}

HostInput accumulator(float held) {
  return from_values({numerics::kAmaxWords}, DType::f32, {held, 0.0f});
}

std::string held_tag(float held) {
  return held == 0.0f ? "" : "_held";
}

struct ProductVariant {
  DType dtype;
  int64_t batch, m, n, k;  // batch 0: gemm_round_amax on m x n; else gemm_batched_round_amax
  bool ta, tb;
  bool integers;  // small integers, every partial sum exact: bitwise
  float held;     // the accumulator's start value (above every product: it stays)
};

void add_product_cases(std::vector<CudaCase>& cases) {
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<ProductVariant> variants = {
      // The Linear's three products, then the attention's four (q k^T, att v, and their grads).
      {f16, 0, 96, 80, 300, false, false, false, 0.0f},
      {f16, 0, 64, 48, 37, true, false, false, 0.0f},
      {bf16, 0, 37, 70, 64, false, true, false, 0.0f},
      {bf16, 0, 33, 17, 64, true, true, false, 0.0f},
      {f16, 0, 40, 24, 32, false, false, false, 1.0e6f},
      {f16, 0, 32, 32, 64, false, true, true, 0.0f},
      {f16, 12, 37, 37, 16, false, true, false, 0.0f},
      {f16, 12, 37, 16, 37, false, false, false, 0.0f},
      {bf16, 6, 20, 24, 32, true, false, false, 0.0f},
      {bf16, 4, 16, 33, 20, false, false, false, 0.0f},
      {bf16, 8, 16, 48, 64, true, false, true, 0.0f},
  };
  for (const ProductVariant& v : variants) {
    const bool batched = v.batch > 0;
    const int64_t count = batched ? v.batch : 1;
    CudaCase c;
    c.name = std::string(batched ? "gemm_batched_round_amax_" : "gemm_round_amax_") + tag(v.dtype) +
             "_" + (batched ? std::to_string(v.batch) + "x" : "") + std::to_string(v.m) + "x" +
             std::to_string(v.n) + "x" + std::to_string(v.k) + (v.ta ? "_At" : "") +
             (v.tb ? "_Bt" : "") + (v.integers ? "_exact" : "") + held_tag(v.held);
    const int64_t ar = v.ta ? v.k : v.m, ac = v.ta ? v.m : v.k;
    const int64_t br = v.tb ? v.n : v.k, bc = v.tb ? v.k : v.n;
    const Shape as = batched ? Shape{v.batch, ar, ac} : Shape{ar, ac};
    const Shape bs = batched ? Shape{v.batch, br, bc} : Shape{br, bc};
    const Shape cs = batched ? Shape{v.batch, v.m, v.n} : Shape{v.m, v.n};
    c.make_inputs = [v, as, bs](std::mt19937_64& rng) {
      if (v.integers) {
        return std::vector<HostInput>{
            from_values(as, v.dtype, small_integers(rng, numel_of(as), -8, 8)),
            from_values(bs, v.dtype, small_integers(rng, numel_of(bs), -8, 8)),
            accumulator(v.held)};
      }
      return std::vector<HostInput>{
          from_values(as, v.dtype, random_values(rng, numel_of(as), -3, 2)),
          from_values(bs, v.dtype, random_values(rng, numel_of(bs), -3, 2)), accumulator(v.held)};
    };
    c.run = [v, cs, batched](Backend& be, std::vector<Tensor>& in) {
      Tensor out = be.zeros(cs, v.dtype);
      Tensor scratch = be.zeros({shape_numel(cs)}, DType::f32);
      if (batched) {
        be.gemm_batched_round_amax(in[0], v.ta, in[1], v.tb, out, in[2], scratch);
      } else {
        be.gemm_round_amax(in[0], v.ta, in[1], v.tb, out, in[2], scratch);
      }
      return std::vector<Tensor>{out, in[2]};
    };
    if (!v.integers) {
      c.specs = [v, count](const std::vector<HostInput>& in,
                           const std::vector<std::vector<double>>&) {
        // Each side within gamma_{k+2}(2^-23) sum |a b| of the exact product (any order, tensor
        // cores possibly truncating): twice that apart.
        const double g = gamma_n(static_cast<double>(v.k + 2), 0x1p-23);
        std::vector<double> delta =
            abs_products(in[0].values(), in[1].values(), v.ta, v.tb, count, v.m, v.n, v.k);
        for (double& d : delta) d *= 2.0 * g;
        return std::vector<Spec>{within(delta), amax_spec(delta)};
      };
    }
    cases.push_back(c);
  }
}

void add_activation_backward_cases(std::vector<CudaCase>& cases) {
  constexpr int64_t n = 4099;
  const nn::ActivationKind kinds[] = {nn::ActivationKind::relu, nn::ActivationKind::tanh,
                                      nn::ActivationKind::gelu, nn::ActivationKind::gelu_tanh};
  for (nn::ActivationKind kind : kinds) {
    // relu's and tanh's backward read only y, the same float operations: bitwise, with infs and
    // NaNs among the inputs (the flag). The GELUs' go through erff/expf/tanhf: finite inputs,
    // within gelu(_tanh)_grad_delta.
    const bool exact = !nn::activation_reads_input(kind);
    for (DType dtype : {DType::f16, DType::bf16}) {
      for (float held : {0.0f, 1.0e-3f}) {
        CudaCase c;
        c.name = std::string("activation_backward_amax_") + kind_name(kind) + "_" + tag(dtype) +
                 (held == 0.0f ? "" : "_raised");
        c.make_inputs = [kind, dtype, exact, held](std::mt19937_64& rng) {
          std::vector<float> x =
              exact ? random_with_specials(rng, n, -12, 4, 0.002) : random_values(rng, n, -12, 4);
          std::vector<float> y(n);
          for (int64_t i = 0; i < n; ++i) y[i] = nn::activation_forward(kind, x[i]);
          std::vector<float> dy =
              exact ? random_with_specials(rng, n, -16, 8, 0.002) : random_values(rng, n, -16, 8);
          return std::vector<HostInput>{from_values({n}, dtype, x), from_values({n}, dtype, y),
                                        from_values({n}, dtype, dy), accumulator(held)};
        };
        c.run = [kind, dtype](Backend& be, std::vector<Tensor>& in) {
          Tensor dx = be.zeros({n}, dtype), scratch = be.zeros({n}, DType::f32);
          be.activation_backward_amax(kind, in[0], in[1], in[2], dx, in[3], scratch);
          return std::vector<Tensor>{dx, in[3]};
        };
        if (!exact) {
          c.specs = [kind](const std::vector<HostInput>& in,
                           const std::vector<std::vector<double>>&) {
            const std::vector<double> x = in[0].values(), dy = in[2].values();
            std::vector<double> delta(x.size());
            for (size_t i = 0; i < x.size(); ++i) {
              delta[i] = kind == nn::ActivationKind::gelu ? gelu_grad_delta(x[i], dy[i])
                                                          : gelu_tanh_grad_delta(x[i], dy[i]);
            }
            return std::vector<Spec>{within(delta), amax_spec(delta)};
          };
        }
        cases.push_back(c);
      }
    }
  }
}

void add_causal_softmax_backward_cases(std::vector<CudaCase>& cases) {
  // No transcendental and the same float operations in the same order on both sides (the plain
  // op's row is bitwise, and so are round_amax's and mul_scalar_tensor's): bitwise. dprobs large
  // enough that round(g) * scale rounds again.
  struct Variant {
    DType probs, dprobs, dscores;
    int64_t count, time;
  };
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const Variant variants[] = {{f32, f16, f16, 6, 37},
                              {f32, bf16, bf16, 2, 130},
                              {f16, f16, f16, 3, 64},
                              {f32, f32, f16, 1, 1}};
  for (const Variant& v : variants) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(v.time));
    const Shape shape{v.count, v.time, v.time};
    CudaCase c;
    c.name = "causal_softmax_backward_amax_" + tag(v.probs) + "_" + tag(v.dprobs) + "_to_" +
             tag(v.dscores) + "_" + std::to_string(v.count) + "x" + std::to_string(v.time);
    c.make_inputs = [v, shape, scale](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values(shape, v.probs, uniform_values(rng, numel_of(shape), 0.0f, 0.2f)),
          from_values(shape, v.dprobs, random_values(rng, numel_of(shape), -8, 10)),
          scalar_input(scale), accumulator(0.0f)};
    };
    c.run = [v, shape](Backend& be, std::vector<Tensor>& in) {
      Tensor ds = be.zeros(shape, v.dscores);
      Tensor scratch = be.zeros({shape_numel(shape)}, DType::f32);
      be.causal_softmax_backward_amax(in[0], in[1], in[2], ds, in[3], scratch);
      return std::vector<Tensor>{ds, in[3]};
    };
    cases.push_back(c);
  }
}

std::vector<CudaCase> amax_cases() {
  std::vector<CudaCase> cases;
  add_product_cases(cases);
  add_activation_backward_cases(cases);
  add_causal_softmax_backward_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(NumericsAmax, amax_cases);

}  // namespace
}  // namespace ampctl::test
