// SwiGLU (backend.h: swiglu_forward / swiglu_backward) on the CPU backend: against its contract
// written out again here in float (bitwise: autocast's roundings of silu(g) and dy * u to the
// inputs' dtype, PyTorch's silu and silu_backward formulas), the f32 op against double (forward:
// the formula; backward: central differences of a double forward), the same bits on one and three
// threads, and the calls it refuses. The CUDA kernel is checked against it in
// tests/cuda/test_cuda_nn.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

struct Dims {
  int64_t rows, width;  // R, I (gate_up is [R, 2I])
};

const Dims kDims[] = {{1, 1}, {5, 16}, {33, 45}, {64, 300}};

std::vector<uint32_t> bits_of(const std::vector<float>& v, DType d) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = encode(v[i], d);
  return b;
}

// Gates over [-12, 12] (both tails of the sigmoid) and ups of mixed scales.
std::vector<float> gate_up_values(std::mt19937_64& rng, Dims d, DType dt) {
  std::uniform_real_distribution<float> g(-12.0f, 12.0f);
  std::vector<float> v(static_cast<size_t>(d.rows * 2 * d.width));
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t c = 0; c < 2 * d.width; ++c) {
      v[static_cast<size_t>(r * 2 * d.width + c)] =
          round_to(c < d.width ? g(rng) : random_value(rng, -3, 2), dt);
    }
  }
  return v;
}

TEST(SwigluOps, MatchesItsContractBitwise) {
  auto be = cpu_backend(2);
  for (const Dims d : kDims) {
    for (DType it : kFloatDTypes) {
      for (DType ot : kFloatDTypes) {
        std::mt19937_64 rng(static_cast<uint64_t>(d.rows * 17 + d.width) +
                            3 * static_cast<uint64_t>(it) + static_cast<uint64_t>(ot));
        const std::vector<float> gu = gate_up_values(rng, d, it);
        std::vector<float> dy = random_values(rng, static_cast<size_t>(d.rows * d.width), -4, 3);
        for (float& e : dy) e = round_to(e, ot);
        const Tensor gut = upload_values(*be, {d.rows, 2 * d.width}, it, gu);
        const Tensor y = be->empty({d.rows, d.width}, ot);
        const Tensor dgu = be->empty({d.rows, 2 * d.width}, ot);
        be->swiglu_forward(gut, y);
        const Tensor dyu = be->empty({d.rows, d.width}, DType::f32);
        be->swiglu_backward(gut, upload_values(*be, {d.rows, d.width}, ot, dy), dgu, dyu);
        std::vector<float> want_y(dy.size()), want_d(gu.size()), want_dyu(dy.size());
        for (int64_t r = 0; r < d.rows; ++r) {
          for (int64_t c = 0; c < d.width; ++c) {
            const size_t i = static_cast<size_t>(r * d.width + c);
            const float g = gu[static_cast<size_t>(r * 2 * d.width + c)];
            const float u = gu[static_cast<size_t>(r * 2 * d.width + d.width + c)];
            const float s = round_to(g / (1.0f + std::exp(-g)), it);
            want_y[i] = s * u;
            const float sig = 1.0f / (1.0f + std::exp(-g));
            want_dyu[i] = dy[i] * u;  // the float round_in rounds, for the numerics hook
            const float ds = round_to(dy[i] * u, it);
            want_d[static_cast<size_t>(r * 2 * d.width + c)] = ds * sig * (1.0f + g * (1.0f - sig));
            want_d[static_cast<size_t>(r * 2 * d.width + d.width + c)] = dy[i] * s;
          }
        }
        const std::string what = std::to_string(d.rows) + "x" + std::to_string(d.width) + " in " +
                                 dtype_name(it) + " out " + dtype_name(ot);
        BitwiseCheck by(ot), bd(ot), bu(DType::f32);
        by.add_all(download_bits(*be, y), bits_of(want_y, ot));
        bd.add_all(download_bits(*be, dgu), bits_of(want_d, ot));
        bu.add_all(download_bits(*be, dyu), bits_of(want_dyu, DType::f32));
        EXPECT_TRUE(bu.ok()) << what << ", dy_up: " << bu.report();
        EXPECT_TRUE(by.ok()) << what << ", y: " << by.report();
        EXPECT_TRUE(bd.ok()) << what << ", dgate_up: " << bd.report();
      }
    }
  }
}

// f32 against double. Forward: silu's exp (glibc's expf, within 1 ulp), its add and division and
// the product with u: 6 2^-24 of |y|. Backward against central differences of the double forward
// (h = 1e-3 max(1, |g|): O(h^2) terms of silu''' far below the bound): dgate's float chain (the
// product dy u, exp, the reciprocal, 1 - sigmoid, g (1 - sigmoid), 1 + that, two products) within
// 12 2^-24 of |dy u| (|sigmoid| + |g| sigmoid (1 - sigmoid) + ...) bounded by 12 2^-24 |dy u|
// (1 + |g|); dup = dy silu(g) as the forward.
TEST(SwigluOps, F32MatchesDoubleAndFiniteDifferences) {
  auto be = cpu_backend(2);
  const Dims d{9, 40};
  std::mt19937_64 rng(3);
  const std::vector<float> gu = gate_up_values(rng, d, DType::f32);
  const std::vector<float> dy = random_values(rng, static_cast<size_t>(d.rows * d.width), -2, 2);
  const Tensor gut = upload_values(*be, {d.rows, 2 * d.width}, DType::f32, gu);
  const Tensor y = be->empty({d.rows, d.width}, DType::f32);
  const Tensor dgu = be->empty({d.rows, 2 * d.width}, DType::f32);
  be->swiglu_forward(gut, y);
  be->swiglu_backward(gut, upload_values(*be, {d.rows, d.width}, DType::f32, dy), dgu);
  const std::vector<float> gy = download_values(*be, y), gd = download_values(*be, dgu);
  auto silu = [](double g) { return g / (1.0 + std::exp(-g)); };
  ErrorBudget by, bg, bu;
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t c = 0; c < d.width; ++c) {
      const size_t i = static_cast<size_t>(r * d.width + c);
      const size_t ig = static_cast<size_t>(r * 2 * d.width + c),
                   iu = ig + static_cast<size_t>(d.width);
      const double g = gu[ig], u = gu[iu], t = dy[i];
      const double yv = silu(g) * u;
      by.add(i, gy[i], yv, 6 * 0x1p-24 * std::fabs(yv) + 1e-38);
      const double h = 1e-3 * std::max(1.0, std::fabs(g));
      const double fd = t * u * (silu(g + h) - silu(g - h)) / (2 * h);
      bg.add(
          ig, gd[ig], fd,
          12 * 0x1p-24 * std::fabs(t * u) * (1 + std::fabs(g)) + 1e-6 * std::fabs(t * u) + 1e-38);
      bu.add(iu, gd[iu], t * silu(g), 6 * 0x1p-24 * std::fabs(t * silu(g)) + 1e-38);
    }
  }
  EXPECT_TRUE(by.ok()) << "y: " << by.report();
  EXPECT_TRUE(bg.ok()) << "dgate: " << bg.report();
  EXPECT_TRUE(bu.ok()) << "dup: " << bu.report();
}

TEST(SwigluOps, SameBitsOnOneAndThreeThreads) {
  auto one = cpu_backend(1), three = cpu_backend(3);
  const Dims d{128, 700};  // large enough to be split
  for (DType dt : kFloatDTypes) {
    std::mt19937_64 rng(21);
    const std::vector<float> gu = gate_up_values(rng, d, dt);
    const std::vector<float> dy = random_values(rng, static_cast<size_t>(d.rows * d.width), -3, 1);
    std::vector<uint32_t> outs[2][2];
    for (int k = 0; k < 2; ++k) {
      Backend& be = k == 0 ? *one : *three;
      const Tensor gut = upload_values(be, {d.rows, 2 * d.width}, dt, gu);
      const Tensor y = be.empty({d.rows, d.width}, dt), dgu = be.empty({d.rows, 2 * d.width}, dt);
      be.swiglu_forward(gut, y);
      be.swiglu_backward(gut, upload_values(be, {d.rows, d.width}, dt, dy), dgu);
      outs[k][0] = download_bits(be, y);
      outs[k][1] = download_bits(be, dgu);
    }
    for (int o = 0; o < 2; ++o) {
      BitwiseCheck b(dt);
      b.add_all(outs[1][o], outs[0][o]);
      EXPECT_TRUE(b.ok()) << dtype_name(dt) << (o ? " dgate_up: " : " y: ") << b.report();
    }
  }
}

TEST(SwigluOps, RefusesBadCallsBeforeWriting) {
  auto be = cpu_backend(1);
  const Tensor gu = be->zeros({4, 8}, DType::f16);
  expect_invalid_argument(
      [&] {
        be->swiglu_forward(be->zeros({4, 7}, DType::f16), be->zeros({4, 3}, DType::f16));
      },
      "an odd gate_up width");
  expect_invalid_argument(
      [&] {
        be->swiglu_forward(gu, be->zeros({4, 8}, DType::f16));
      },
      "y as wide as gate_up");
  expect_invalid_argument([&] { be->swiglu_forward(gu, gu.view(0, {4, 4})); }, "y inside gate_up");
  expect_invalid_argument(
      [&] {
        be->swiglu_backward(gu, be->zeros({4, 4}, DType::f16), be->zeros({4, 4}, DType::f16));
      },
      "dgate_up of y's shape");
  expect_invalid_argument(
      [&] {
        be->swiglu_backward(gu, be->zeros({4, 4}, DType::f16), gu);
      },
      "dgate_up that is gate_up");
  expect_invalid_argument(
      [&] {
        be->swiglu_backward(gu, be->zeros({4, 4}, DType::f16), be->zeros({4, 8}, DType::f16),
                            be->zeros({4, 4}, DType::f16));
      },
      "an f16 dy_up");
  expect_invalid_argument(
      [&] {
        be->swiglu_forward(be->zeros({4, 8}, DType::i32), be->zeros({4, 4}, DType::f16));
      },
      "i32 gate_up");
}

}  // namespace
}  // namespace ampctl::test
