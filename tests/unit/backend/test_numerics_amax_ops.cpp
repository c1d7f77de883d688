// The ops that take grad_amax inside them (backend.h, "numerics": gemm_round_amax,
// gemm_batched_round_amax, activation_backward_amax) against the two ops each stands for, each
// tested on its own (test_gemm_ops.cpp and test_transformer_ops.cpp against fp64, test_nn_ops.cpp,
// test_grad_amax.cpp against a plain loop): the plain op written in f32, then round_amax
// (causal_softmax_backward_amax: the op with scale 1 unrounded, round_amax, mul_scalar_tensor,
// round_amax, as the counted GPT runs it). The CPU's fused forms (the max in the packed kernels'
// epilogue, in relu's and the softmax backward's pass, in L1-sized chunks of the GELU's) must
// give the same lowp bits and the same accumulator words (and the softmax's the bits of the plain
// op with round_scaled): for products of
// shapes that reach every epilogue path (whole tiles into C, edge tiles through the stack tile,
// k over several blocks, the shared-B and the column split, one part and many), every transpose,
// f16 and bf16 (the bf16 kernel), any thread count; it accumulates into what the accumulator
// held; a non-finite value sets the flag. Bad operands are refused alike by the CPU's overrides
// and the default compositions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/core/half.h"
#include "ampctl/math/numerics_math.h"

namespace ampctl {
namespace {

struct Result {
  std::vector<uint16_t> bits;
  float amax[numerics::kAmaxWords] = {};
};

// op(a) (m x k) and op(b) (k x n) as stored: a is k x m when trans_a, b is n x k when trans_b.
struct Case {
  int64_t m, n, k;
  bool trans_a, trans_b;
};

std::vector<float> random_values(size_t count, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// gemm_round_amax (fused: true) or gemm into f32 then round_amax, from accumulator `start`.
Result run(Backend& be, const Case& c, DType dtype, const std::vector<float>& a,
           const std::vector<float>& b, const float (&start)[numerics::kAmaxWords], bool fused) {
  const Shape sa = c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k};
  const Shape sb = c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
  Tensor ta = be.empty(sa, dtype), tb = be.empty(sb, dtype);
  be.cast(be.from_host(sa, DType::f32, a.data()), ta);
  be.cast(be.from_host(sb, DType::f32, b.data()), tb);
  Tensor out = be.zeros({c.m, c.n}, dtype);
  Tensor scratch = be.zeros({c.m * c.n + 5}, DType::f32);
  Tensor amax = be.from_host({numerics::kAmaxWords}, DType::f32, start);
  if (fused) {
    be.gemm_round_amax(ta, c.trans_a, tb, c.trans_b, out, amax, scratch);
  } else {
    const Tensor product = scratch.view(0, {c.m, c.n});
    be.gemm(ta, c.trans_a, tb, c.trans_b, product);
    be.round_amax(product, out, amax);
  }
  Result r;
  r.bits.resize(static_cast<size_t>(c.m * c.n));
  be.download(r.bits.data(), out);
  be.download(r.amax, amax);
  return r;
}

std::string describe(const Case& c, DType dtype, int threads) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.trans_a ? " A^T" : "") + (c.trans_b ? " B^T" : "") + " " + dtype_name(dtype) + ", " +
         std::to_string(threads) + " threads";
}

TEST(GemmRoundAmax, EqualsGemmThenRoundAmaxBitwise) {
  // 1 x 1 x 1; edge tiles only; whole tiles with k over two f32 blocks (256) and two bf16 blocks
  // (512); enough work to split over the threads by rows (shared B) and by columns.
  const std::vector<Case> shapes = {{1, 1, 1, false, false},     {13, 45, 7, false, false},
                                    {48, 64, 600, false, false}, {200, 96, 64, false, false},
                                    {64, 640, 96, false, false}, {37, 70, 300, false, false}};
  std::mt19937 rng(2804);
  for (int threads : {1, 3}) {
    auto be = make_cpu_backend(threads);
    for (const Case& shape : shapes) {
      for (int t = 0; t < 4; ++t) {
        Case c = shape;
        c.trans_a = (t & 1) != 0;
        c.trans_b = (t & 2) != 0;
        const auto a = random_values(static_cast<size_t>(c.m * c.k), rng, 3.0f);
        const auto b = random_values(static_cast<size_t>(c.k * c.n), rng, 0.5f);
        for (DType dtype : {DType::f16, DType::bf16}) {
          const float zero[numerics::kAmaxWords] = {0.0f, 0.0f};
          const Result want = run(*be, c, dtype, a, b, zero, false);
          const Result got = run(*be, c, dtype, a, b, zero, true);
          const std::string what = describe(c, dtype, threads);
          EXPECT_EQ(got.bits, want.bits) << what;
          EXPECT_EQ(0, std::memcmp(got.amax, want.amax, sizeof got.amax)) << what;
          EXPECT_GT(want.amax[0], 0.0f) << what;
          EXPECT_EQ(want.amax[1], 0.0f) << what;
        }
      }
    }
  }
}

TEST(GemmRoundAmax, AccumulatesAndFlagsNonFiniteProducts) {
  auto be = make_cpu_backend(2);
  const Case c{50, 70, 40, false, true};
  std::mt19937 rng(11);
  auto a = random_values(static_cast<size_t>(c.m * c.k), rng, 1.0f);
  const auto b = random_values(static_cast<size_t>(c.k * c.n), rng, 1.0f);
  // A larger max already in the accumulator stays; a smaller one is raised.
  for (float held : {1.0e6f, 1.0e-3f}) {
    const float start[numerics::kAmaxWords] = {held, 0.0f};
    const Result want = run(*be, c, DType::f16, a, b, start, false);
    const Result got = run(*be, c, DType::f16, a, b, start, true);
    EXPECT_EQ(got.bits, want.bits);
    EXPECT_EQ(0, std::memcmp(got.amax, want.amax, sizeof got.amax));
    if (held > 1.0f) {
      EXPECT_EQ(got.amax[0], held);
    } else {
      EXPECT_GT(got.amax[0], held);
    }
  }
  // An inf in op(A)'s row 17: that row's products are inf or NaN, the flag is set and the max
  // is over the finite products alone, as round_amax takes it.
  a[static_cast<size_t>(17 * c.k + 3)] = std::numeric_limits<float>::infinity();
  const float zero[numerics::kAmaxWords] = {0.0f, 0.0f};
  const Result want = run(*be, c, DType::f16, a, b, zero, false);
  const Result got = run(*be, c, DType::f16, a, b, zero, true);
  EXPECT_EQ(got.bits, want.bits);
  EXPECT_EQ(0, std::memcmp(got.amax, want.amax, sizeof got.amax));
  EXPECT_EQ(got.amax[1], 1.0f);
  EXPECT_TRUE(std::isfinite(got.amax[0]));
  EXPECT_GT(got.amax[0], 0.0f);
}

TEST(GemmBatchedRoundAmax, EqualsGemmBatchedThenRoundAmaxBitwise) {
  // Fewer matrices than threads (each split over the pool) and more (each whole on one thread),
  // the attention's four products' layouts.
  std::mt19937 rng(77);
  for (int threads : {1, 3}) {
    auto be = make_cpu_backend(threads);
    for (int64_t batch : {2, 7}) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
        const int64_t m = 40, n = 36, k = 20;
        const Shape sa = ta ? Shape{batch, k, m} : Shape{batch, m, k};
        const Shape sb = tb ? Shape{batch, n, k} : Shape{batch, k, n};
        const auto a = random_values(static_cast<size_t>(batch * m * k), rng, 2.0f);
        const auto b = random_values(static_cast<size_t>(batch * k * n), rng, 2.0f);
        for (DType dtype : {DType::f16, DType::bf16}) {
          Result r[2];
          for (int fused = 0; fused < 2; ++fused) {
            Tensor xa = be->empty(sa, dtype), xb = be->empty(sb, dtype);
            be->cast(be->from_host(sa, DType::f32, a.data()), xa);
            be->cast(be->from_host(sb, DType::f32, b.data()), xb);
            Tensor c = be->zeros({batch, m, n}, dtype);
            Tensor scratch = be->zeros({batch * m * n}, DType::f32);
            Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
            if (fused == 1) {
              be->gemm_batched_round_amax(xa, ta, xb, tb, c, amax, scratch);
            } else {
              be->gemm_batched(xa, ta, xb, tb, scratch.view(0, {batch, m, n}));
              be->round_amax(scratch.view(0, {batch, m, n}), c, amax);
            }
            r[fused].bits.resize(static_cast<size_t>(batch * m * n));
            be->download(r[fused].bits.data(), c);
            be->download(r[fused].amax, amax);
          }
          const std::string what = std::to_string(batch) + " matrices" + (ta ? " A^T" : "") +
                                   (tb ? " B^T" : "") + " " + dtype_name(dtype) + ", " +
                                   std::to_string(threads) + " threads";
          EXPECT_EQ(r[1].bits, r[0].bits) << what;
          EXPECT_EQ(0, std::memcmp(r[1].amax, r[0].amax, sizeof r[0].amax)) << what;
          EXPECT_GT(r[0].amax[0], 0.0f) << what;
        }
      }
    }
  }
}

TEST(ActivationBackwardAmax, EqualsActivationBackwardThenRoundAmaxBitwise) {
  // relu reads y, the GELUs x; 70000 elements: several parts and several L1 chunks per part,
  // with a ragged end. A NaN and an inf among dy in the second pass (relu passes a dy through
  // where y > 0: the flag must come from the values rounded, not from the inputs).
  std::mt19937 rng(5);
  const int64_t n = 70001;
  auto x = random_values(static_cast<size_t>(n), rng, 3.0f);
  auto dy = random_values(static_cast<size_t>(n), rng, 100.0f);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
  for (bool poison : {false, true}) {
    if (poison) {
      dy[123] = std::numeric_limits<float>::infinity();
      dy[static_cast<size_t>(n) - 2] = std::numeric_limits<float>::quiet_NaN();
      y[123] = 1.0f;  // passed through by relu
    }
    for (int threads : {1, 2}) {
      auto be = make_cpu_backend(threads);
      for (nn::ActivationKind kind :
           {nn::ActivationKind::relu, nn::ActivationKind::gelu_tanh, nn::ActivationKind::tanh}) {
        for (DType dtype : {DType::f16, DType::bf16}) {
          Result r[2];
          for (int fused = 0; fused < 2; ++fused) {
            Tensor tx = be->empty({n}, dtype), ty = be->empty({n}, dtype),
                   tdy = be->empty({n}, dtype);
            be->cast(be->from_host({n}, DType::f32, x.data()), tx);
            be->cast(be->from_host({n}, DType::f32, y.data()), ty);
            be->cast(be->from_host({n}, DType::f32, dy.data()), tdy);
            Tensor dx = be->zeros({n}, dtype), scratch = be->zeros({n}, DType::f32);
            Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
            if (fused == 1) {
              be->activation_backward_amax(kind, tx, ty, tdy, dx, amax, scratch);
            } else {
              be->activation_backward(kind, tx, ty, tdy, scratch);
              be->round_amax(scratch, dx, amax);
            }
            r[fused].bits.resize(static_cast<size_t>(n));
            be->download(r[fused].bits.data(), dx);
            be->download(r[fused].amax, amax);
          }
          const std::string what = "activation " + std::to_string(static_cast<int>(kind)) + " " +
                                   dtype_name(dtype) + ", " + std::to_string(threads) + " threads" +
                                   (poison ? ", inf and NaN" : "");
          EXPECT_EQ(r[1].bits, r[0].bits) << what;
          EXPECT_EQ(0, std::memcmp(r[1].amax, r[0].amax, sizeof r[0].amax)) << what;
          EXPECT_GT(r[0].amax[0], 0.0f) << what;
          EXPECT_EQ(r[0].amax[1], poison ? 1.0f : 0.0f) << what;
        }
      }
    }
  }
}

TEST(CausalSoftmaxBackwardAmax, EqualsTheCountedCompositionBitwise) {
  // 3 heads of T 37 (rows split over the threads, ragged 16-row blocks), p a causal softmax,
  // dp large enough that g * scale rounds differently from g.
  std::mt19937 rng(13);
  const int64_t heads = 3, t = 37, n = heads * t * t;
  std::vector<float> p(static_cast<size_t>(n), 0.0f);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      float sum = 0;
      std::uniform_real_distribution<float> u(0.1f, 1.0f);
      for (int64_t j = 0; j <= i; ++j) sum += p[static_cast<size_t>((h * t + i) * t + j)] = u(rng);
      for (int64_t j = 0; j <= i; ++j) p[static_cast<size_t>((h * t + i) * t + j)] /= sum;
    }
  }
  const auto dp = random_values(static_cast<size_t>(n), rng, 300.0f);
  const float scale = 0.17677669f;  // 1 / sqrt(32)
  for (int threads : {1, 3}) {
    auto be = make_cpu_backend(threads);
    for (DType dtype : {DType::f16, DType::bf16}) {
      Result r[2];
      std::vector<uint16_t> plain(static_cast<size_t>(n));
      for (int fused = 0; fused < 2; ++fused) {
        Tensor tp = be->empty({heads, t, t}, dtype), tdp = be->empty({heads, t, t}, dtype);
        be->cast(be->from_host({heads, t, t}, DType::f32, p.data()), tp);
        be->cast(be->from_host({heads, t, t}, DType::f32, dp.data()), tdp);
        Tensor ds = be->zeros({heads, t, t}, dtype), scratch = be->zeros({n}, DType::f32);
        Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
        Tensor s = be->from_host({1}, DType::f32, &scale);
        if (fused == 1) {
          be->causal_softmax_backward_amax(tp, tdp, s, ds, amax, scratch);
          Tensor direct = be->zeros({heads, t, t}, dtype);
          be->causal_softmax_backward(tp, tdp, scale, /*round_scaled=*/true, direct);
          be->download(plain.data(), direct);
        } else {
          const Tensor f = scratch.view(0, {heads, t, t});
          be->causal_softmax_backward(tp, tdp, 1.0f, /*round_scaled=*/false, f);
          be->round_amax(f, ds, amax);
          be->mul_scalar_tensor(ds, s, f);
          be->round_amax(f, ds, amax);
        }
        r[fused].bits.resize(static_cast<size_t>(n));
        be->download(r[fused].bits.data(), ds);
        be->download(r[fused].amax, amax);
      }
      const std::string what =
          std::string(dtype_name(dtype)) + ", " + std::to_string(threads) + " threads";
      EXPECT_EQ(r[1].bits, r[0].bits) << what;
      EXPECT_EQ(r[1].bits, plain) << what;
      EXPECT_EQ(0, std::memcmp(r[1].amax, r[0].amax, sizeof r[0].amax)) << what;
      EXPECT_GT(r[0].amax[0], 1.0f) << what;  // g's own rounding, above the scaled values
    }
  }
}

TEST(GemmRoundAmax, BadOperandsAreRefusedByBothForms) {
  auto be = make_cpu_backend(1);
  Tensor a = be->zeros({4, 3}, DType::f16), b = be->zeros({3, 5}, DType::f16);
  Tensor c = be->zeros({4, 5}, DType::f16), c32 = be->zeros({4, 5}, DType::f32);
  Tensor amax = be->zeros({numerics::kAmaxWords}, DType::f32);
  Tensor amax3 = be->zeros({3}, DType::f32);
  Tensor scratch = be->zeros({20}, DType::f32), small = be->zeros({19}, DType::f32);
  // An f32 op(A) in the same buffer as the scratch.
  Tensor shared = be->zeros({40}, DType::f32);
  Tensor a32 = shared.view(0, {4, 3}), overlapping = shared.view(10, {20});
  struct Bad {
    const char* what;
    Tensor a, c, amax, scratch;
  };
  const Bad bad[] = {{"the output must be f16 or bf16", a, c32, amax, scratch},
                     {"amax must be f32 with 2 values", a, c, amax3, scratch},
                     {"scratch must be f32 of at least", a, c, amax, small},
                     {"scratch shares memory with", a32, c, amax, overlapping}};
  for (const Bad& x : bad) {
    for (bool fused : {true, false}) {
      try {
        if (fused) {
          be->gemm_round_amax(x.a, false, b, false, x.c, x.amax, x.scratch);
        } else {
          be->Backend::gemm_round_amax(x.a, false, b, false, x.c, x.amax, x.scratch);
        }
        ADD_FAILURE() << x.what << ": not refused";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(x.what), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("gemm_round_amax"), std::string::npos) << e.what();
      }
    }
  }
  // The other two ops: an f32 output, a short scratch.
  Tensor x = be->zeros({6}, DType::f16), dx = be->zeros({6}, DType::f16);
  Tensor dx32 = be->zeros({6}, DType::f32), scratch5 = be->zeros({5}, DType::f32);
  for (bool fused : {true, false}) {
    Backend& d = *be;
    auto act = [&](const Tensor& out, const Tensor& s) {
      if (fused) {
        d.activation_backward_amax(nn::ActivationKind::relu, x, x, x, out, amax, s);
      } else {
        d.Backend::activation_backward_amax(nn::ActivationKind::relu, x, x, x, out, amax, s);
      }
    };
    EXPECT_THROW(act(dx32, scratch), Error);
    EXPECT_THROW(act(dx, scratch5), Error);
    Tensor ba = be->zeros({2, 4, 3}, DType::f16), bb = be->zeros({2, 3, 5}, DType::f16);
    Tensor bc = be->zeros({2, 4, 5}, DType::f16);
    if (fused) {
      EXPECT_THROW(be->gemm_batched_round_amax(ba, false, bb, false, bc, amax, scratch), Error);
    } else {
      EXPECT_THROW(be->Backend::gemm_batched_round_amax(ba, false, bb, false, bc, amax, scratch),
                   Error);
    }
  }
  // The softmax's scale must be f32[1].
  Tensor sp = be->zeros({1, 4, 4}, DType::f16), sds = be->zeros({1, 4, 4}, DType::f16);
  Tensor scale2 = be->zeros({2}, DType::f32), scale1 = be->zeros({1}, DType::f32);
  EXPECT_THROW(be->causal_softmax_backward_amax(sp, sp, scale2, sds, amax, scratch), Error);
  EXPECT_THROW(be->Backend::causal_softmax_backward_amax(sp, sp, scale2, sds, amax, scratch),
               Error);
  EXPECT_THROW(be->causal_softmax_backward_amax(sp, sp, scale1, sds, amax, small.view(0, {15})),
               Error);
  // A shape mismatch is gemm's own check.
  EXPECT_THROW(be->gemm_round_amax(a, true, b, false, c, amax, scratch), Error);
}

}  // namespace
}  // namespace ampctl
