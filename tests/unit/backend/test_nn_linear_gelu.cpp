// Backend::linear_gelu_forward / linear_gelu_backward_input on the CPU (their default
// implementation, the composition backend.h spells out): bitwise against the unfused ops called
// one by one, as the GPT's MLP called them before the pair existed (the golden GPT tests rest on
// that); against double precision as a check of the structure (which operand is transposed, what
// pre holds, which input the GELU gradient reads); the same bits for one and two threads; and the
// argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/nn_math.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

struct Variant {
  DType dtype;  // x, w, pre, y (and dy, dpre)
  bool has_bias;
  DType bias;  // the bias's dtype (the GPT passes the lowp copy; f32 is the master)
  int64_t rows, in, out;
};

std::string name_of(const Variant& v) {
  return std::string(dtype_name(v.dtype)) + "_b" + (v.has_bias ? dtype_name(v.bias) : "none") +
         "_" + std::to_string(v.rows) + "x" + std::to_string(v.in) + "x" + std::to_string(v.out);
}

const Variant kVariants[] = {{DType::f32, true, DType::f32, 37, 45, 29},
                             {DType::f32, false, DType::f32, 5, 8, 16},
                             {DType::f16, true, DType::f16, 37, 45, 29},
                             {DType::f16, true, DType::f32, 19, 64, 40},
                             {DType::f16, false, DType::f16, 33, 100, 7},
                             {DType::bf16, true, DType::bf16, 37, 45, 29},
                             {DType::bf16, false, DType::bf16, 16, 32, 64},
                             // Products split over threads, with partial tiles and two k blocks (k
                             // 300 > 256; the backward's k, out2, 280).
                             {DType::f16, false, DType::f16, 389, 300, 517},
                             {DType::bf16, true, DType::bf16, 389, 300, 517},
                             {DType::f16, true, DType::f32, 768, 128, 512}};

struct Data {
  std::vector<float> x, w, b, dy, w2;  // w2: the next Linear's weight [out2, out] for backward
  int64_t out2;
};

Data make_data(const Variant& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto draw = [&](int64_t n, float scale, DType d) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x) e = round_to(scale * u(rng), d);
    return x;
  };
  Data d;
  d.out2 = v.rows > 100 ? 280 : 13;  // the big variants: the backward's k over two blocks
  // Pre-activations of order 1: GELU's curved part, where its two halves differ most.
  const float w_scale = 2.0f / std::sqrt(static_cast<float>(v.in));
  d.x = draw(v.rows * v.in, 1.5f, v.dtype);
  d.w = draw(v.out * v.in, w_scale, v.dtype);
  d.b = draw(v.out, 0.5f, v.bias);
  d.dy = draw(v.rows * d.out2, 1.0f, v.dtype);
  d.w2 = draw(d.out2 * v.out, 0.3f, v.dtype);
  return d;
}

struct Tensors {
  Tensor x, w, b, dy, w2;
};

Tensors upload(Backend& be, const Variant& v, const Data& d) {
  Tensors t;
  t.x = upload_values(be, {v.rows, v.in}, v.dtype, d.x);
  t.w = upload_values(be, {v.out, v.in}, v.dtype, d.w);
  if (v.has_bias) t.b = upload_values(be, {v.out}, v.bias, d.b);
  t.dy = upload_values(be, {v.rows, d.out2}, v.dtype, d.dy);
  t.w2 = upload_values(be, {d.out2, v.out}, v.dtype, d.w2);
  return t;
}

struct Outputs {
  std::vector<uint32_t> pre, y, dpre, scratch;
};

// The op pair; backward reads the forward's own pre.
Outputs run_op(Backend& be, const Variant& v, const Data& d) {
  const Tensors t = upload(be, v, d);
  Tensor pre = be.empty({v.rows, v.out}, v.dtype), y = be.empty({v.rows, v.out}, v.dtype);
  be.linear_gelu_forward(t.x, t.w, t.b, pre, y);
  Tensor dpre = be.empty({v.rows, v.out}, v.dtype), scratch = be.empty({v.rows, v.out}, v.dtype);
  be.linear_gelu_backward_input(t.dy, t.w2, pre, dpre, scratch);
  return {download_bits(be, pre), download_bits(be, y), download_bits(be, dpre),
          download_bits(be, scratch)};
}

// The ops the GPT's MLP called before the pair existed, in its order.
Outputs run_unfused(Backend& be, const Variant& v, const Data& d) {
  const Tensors t = upload(be, v, d);
  Tensor pre = be.empty({v.rows, v.out}, v.dtype), y = be.empty({v.rows, v.out}, v.dtype);
  be.linear_forward(t.x, t.w, t.b, pre);
  be.activation_forward(nn::ActivationKind::gelu_tanh, pre, y);
  Tensor d4a = be.empty({v.rows, v.out}, v.dtype), d4b = be.empty({v.rows, v.out}, v.dtype);
  be.gemm(t.dy, false, t.w2, false, d4a);
  be.activation_backward(nn::ActivationKind::gelu_tanh, pre, y, d4a, d4b);
  return {download_bits(be, pre), download_bits(be, y), download_bits(be, d4b),
          download_bits(be, d4a)};
}

void expect_same(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want, DType d,
                 const std::string& what) {
  BitwiseCheck check(d);
  check.add_all(got, want);
  EXPECT_TRUE(check.ok()) << what << ": " << check.report();
}

TEST(LinearGelu, DefaultIsTheUnfusedOpsBitForBit) {
  auto be = cpu_backend();
  for (const Variant& v : kVariants) {
    const std::string name = name_of(v);
    const Data d = make_data(v, 7);
    const Outputs op = run_op(*be, v, d), ref = run_unfused(*be, v, d);
    expect_same(op.pre, ref.pre, v.dtype, name + " pre");
    expect_same(op.y, ref.y, v.dtype, name + " y");
    expect_same(op.dpre, ref.dpre, v.dtype, name + " dpre");
    expect_same(op.scratch, ref.scratch, v.dtype, name + " scratch (dy w, rounded)");
  }
}

TEST(LinearGelu, SameBitsForOneAndTwoThreads) {
  auto one = cpu_backend(1), two = cpu_backend(2);
  for (const Variant& v : kVariants) {
    const Data d = make_data(v, 8);
    const Outputs a = run_op(*one, v, d), b = run_op(*two, v, d);
    const std::string name = name_of(v);
    expect_same(a.pre, b.pre, v.dtype, name + " pre");
    expect_same(a.y, b.y, v.dtype, name + " y");
    expect_same(a.dpre, b.dpre, v.dtype, name + " dpre");
  }
}

// In f32: pre = x w^T + b, y = gelu_tanh(pre) and dpre = gelu_tanh'(pre) (dy w2) against double
// sums, within 2 gamma_{n+2}(2^-24) of the summed magnitudes (plus a few float ulps for the
// GELU's own float formula, whose tanh is within 2 ulps).
TEST(LinearGelu, MatchesDoublePrecisionInF32) {
  auto be = cpu_backend();
  const Variant v{DType::f32, true, DType::f32, 23, 40, 24};
  const Data d = make_data(v, 9);
  const Tensors t = upload(*be, v, d);
  Tensor pre = be->empty({v.rows, v.out}, DType::f32), y = be->empty({v.rows, v.out}, DType::f32);
  be->linear_gelu_forward(t.x, t.w, t.b, pre, y);
  Tensor dpre = be->empty({v.rows, v.out}, DType::f32);
  Tensor scratch = be->empty({v.rows, v.out}, DType::f32);
  be->linear_gelu_backward_input(t.dy, t.w2, pre, dpre, scratch);
  const std::vector<float> got_pre = download_values(*be, pre), got_y = download_values(*be, y),
                           got_dpre = download_values(*be, dpre);
  const double u = 0x1p-24;
  const double kBeta = 0.79788456080286535588, kKappa = 0.044715;
  auto gelu = [&](double x) {
    return 0.5 * x * (1.0 + std::tanh(kBeta * (x + kKappa * x * x * x)));
  };
  auto gelu_grad = [&](double x) {
    const double th = std::tanh(kBeta * (x + kKappa * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kBeta * (1.0 + 3.0 * kKappa * x * x);
  };
  for (int64_t r = 0; r < v.rows; ++r) {
    for (int64_t o = 0; o < v.out; ++o) {
      const size_t i = static_cast<size_t>(r * v.out + o);
      double want = d.b[static_cast<size_t>(o)], mag = std::fabs(want);
      for (int64_t k = 0; k < v.in; ++k) {
        const double p = static_cast<double>(d.x[static_cast<size_t>(r * v.in + k)]) *
                         d.w[static_cast<size_t>(o * v.in + k)];
        want += p;
        mag += std::fabs(p);
      }
      const double g = static_cast<double>(v.in + 2) * u * 2.0;
      EXPECT_NEAR(got_pre[i], want, g * mag) << "pre at " << r << ", " << o;
      // y from the float pre the op kept: only the GELU's own rounding errors.
      const double p = got_pre[i];
      EXPECT_NEAR(got_y[i], gelu(p), 16.0 * u * (std::fabs(p) + 1.0)) << "y at " << r << ", " << o;
      double acc = 0.0, amag = 0.0;
      for (int64_t k = 0; k < d.out2; ++k) {
        const double q = static_cast<double>(d.dy[static_cast<size_t>(r * d.out2 + k)]) *
                         d.w2[static_cast<size_t>(k * v.out + o)];
        acc += q;
        amag += std::fabs(q);
      }
      const double gg = gelu_grad(p);
      const double tol =
          std::fabs(gg) * static_cast<double>(d.out2 + 2) * u * 2.0 * amag +
          32.0 * u * (1.0 + std::fabs(p) * std::fabs(p) * std::fabs(p)) * std::fabs(acc);
      EXPECT_NEAR(got_dpre[i], gg * acc, tol + 1e-30) << "dpre at " << r << ", " << o;
    }
  }
}

TEST(LinearGelu, RejectsWrongArguments) {
  auto be = cpu_backend();
  const DType h = DType::f16;
  Tensor x = be->zeros({4, 6}, h), w = be->zeros({8, 6}, h), b = be->zeros({8}, h);
  Tensor pre = be->zeros({4, 8}, h), y = be->zeros({4, 8}, h);
  expect_invalid_argument(
      [&] {
        be->linear_gelu_forward(x, be->zeros({8, 5}, h), b, pre, y);
      },
      "forward, w's in features");
  expect_invalid_argument([&] { be->linear_gelu_forward(x, w, be->zeros({7}, h), pre, y); },
                          "forward, bias length");
  expect_invalid_argument(
      [&] {
        be->linear_gelu_forward(x, w, b, be->zeros({4, 7}, h), y);
      },
      "forward, pre's shape");
  expect_invalid_argument(
      [&] {
        be->linear_gelu_forward(x, w, b, pre, be->zeros({4, 8}, DType::bf16));
      },
      "forward, y's dtype differs from pre's");
  expect_invalid_argument([&] { be->linear_gelu_forward(x, w, b, pre, pre); }, "forward, y is pre");
  Tensor big = be->zeros({64}, h);
  expect_invalid_argument(
      [&] {
        be->linear_gelu_forward(big.view(0, {4, 6}), w, b, big.view(16, {4, 8}), y);
      },
      "forward, pre overlaps x");

  Tensor dy = be->zeros({4, 3}, h), w2 = be->zeros({3, 8}, h);
  Tensor dpre = be->zeros({4, 8}, h), scratch = be->zeros({4, 8}, h);
  expect_invalid_argument(
      [&] {
        be->linear_gelu_backward_input(dy, be->zeros({3, 7}, h), pre, dpre, scratch);
      },
      "backward, w's in features");
  expect_invalid_argument([&] { be->linear_gelu_backward_input(dy, w2, pre, dpre, Tensor{}); },
                          "backward, no scratch");
  expect_invalid_argument(
      [&] {
        be->linear_gelu_backward_input(dy, w2, pre, dpre, be->zeros({4, 8}, DType::f32));
      },
      "backward, scratch's dtype");
  expect_invalid_argument([&] { be->linear_gelu_backward_input(dy, w2, pre, pre, scratch); },
                          "backward, dpre is pre");
  expect_invalid_argument([&] { be->linear_gelu_backward_input(dy, w2, pre, dpre, dpre); },
                          "backward, scratch is dpre");
}

// Where the CPU fuses nothing: the GPT takes the composition, bit for bit.
TEST(LinearGelu, CpuBackendFusesNothing) {
  auto be = cpu_backend();
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_FALSE(be->linear_gelu_fused(d, 3072)) << dtype_name(d);
  }
}

}  // namespace
}  // namespace ampctl::test
