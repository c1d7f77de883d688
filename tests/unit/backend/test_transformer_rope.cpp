// Rotary position embedding (backend.h: rope_forward / rope_backward; nn/rope.h's tables) on the
// CPU backend: against its contract written out again here in float (bitwise, every dtype pair
// and the backward's branch roundings), the f32 op against the rotation in double, the backward
// as the adjoint of the forward (<dy, R x> = <R^T dy, x>), pos0 as a window of a longer sequence,
// in place, the same bits on one and three threads, the tables' llama3 branches, and the calls
// it refuses. The CUDA kernel is checked against it in tests/cuda/test_cuda_transformer.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/nn/rope.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

struct Dims {
  int64_t n, t, hs;
};

std::vector<uint32_t> bits_of(const std::vector<float>& v, DType d) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = encode(v[i], d);
  return b;
}

struct Tables {
  int64_t positions, half;
  std::vector<float> cos, sin;
  Tensor tc, ts;
};

Tables make_tables(Backend& be, int64_t hs, int64_t positions, bool llama3) {
  nn::RopeScaling s;
  if (llama3) s = nn::RopeScaling{true, 8.0, 1.0, 4.0, 32};
  const nn::RopeTables t = nn::rope_tables(nn::rope_inv_freq(hs, 10000.0, s), positions);
  Tables out{positions, hs / 2, t.cos, t.sin, {}, {}};
  out.tc = be.from_host({positions, hs / 2}, DType::f32, t.cos.data());
  out.ts = be.from_host({positions, hs / 2}, DType::f32, t.sin.data());
  return out;
}

const Dims kDims[] = {{1, 1, 2}, {6, 9, 16}, {4, 33, 64}, {3, 17, 128}};

TEST(RopeOps, MatchesItsContractBitwise) {
  auto be = cpu_backend(2);
  for (const Dims d : kDims) {
    const Tables tab = make_tables(*be, d.hs, d.t + 5, true);
    for (DType it : kFloatDTypes) {
      for (DType ot : kFloatDTypes) {
        std::mt19937_64 rng(static_cast<uint64_t>(d.n * 7 + d.t * 3 + d.hs) +
                            5 * static_cast<uint64_t>(it) + static_cast<uint64_t>(ot));
        const Shape sh{d.n, d.t, d.hs};
        std::vector<float> x = random_values(rng, static_cast<size_t>(d.n * d.t * d.hs), -3, 3);
        for (float& e : x) e = round_to(e, it);
        const int64_t pos0 = 3;
        const Tensor y = be->empty(sh, ot), dx = be->empty(sh, ot);
        be->rope_forward(upload_values(*be, sh, it, x), tab.tc, tab.ts, y, pos0);
        // The backward of a forward whose input had dtype `it`, from a dy of dtype `it`.
        be->rope_backward(upload_values(*be, sh, it, x), tab.tc, tab.ts, dx, pos0, it);
        std::vector<float> wy(x.size()), wdx(x.size());
        const int64_t h = d.hs / 2;
        for (int64_t row = 0; row < d.n * d.t; ++row) {
          const int64_t p = pos0 + row % d.t;
          for (int64_t j = 0; j < h; ++j) {
            const size_t i0 = static_cast<size_t>(row * d.hs + j), i1 = i0 + static_cast<size_t>(h);
            const float c = tab.cos[static_cast<size_t>(p * h + j)];
            const float s = tab.sin[static_cast<size_t>(p * h + j)];
            const float a = x[i0] * c, b = (-x[i1]) * s;
            wy[i0] = a + b;
            const float e = x[i1] * c, f = x[i0] * s;
            wy[i1] = e + f;
            wdx[i0] = round_to(x[i0] * c, it) + round_to(x[i1] * s, it);
            wdx[i1] = round_to(x[i1] * c, it) + (-round_to(x[i0] * s, it));
          }
        }
        const std::string what = std::to_string(d.n) + "x" + std::to_string(d.t) + "x" +
                                 std::to_string(d.hs) + " in " + dtype_name(it) + " out " +
                                 dtype_name(ot);
        BitwiseCheck by(ot), bd(ot);
        by.add_all(download_bits(*be, y), bits_of(wy, ot));
        bd.add_all(download_bits(*be, dx), bits_of(wdx, ot));
        EXPECT_TRUE(by.ok()) << what << ", y: " << by.report();
        EXPECT_TRUE(bd.ok()) << what << ", dx: " << bd.report();
      }
    }
  }
}

// f32 against the rotation in double (with the same float tables): two products and a sum, within
// 3 2^-24 of |x0 c| + |x1 s| per output. The backward is the adjoint: <dy, R x> = <R^T dy, x>,
// both sides summed in double from the op's float outputs, within 4 2^-24 of sum |dy| (|x0| +
// |x1|) (each output's own error) and the backward's error likewise.
TEST(RopeOps, F32IsTheRotationAndItsAdjoint) {
  auto be = cpu_backend(2);
  const Dims d{5, 40, 32};
  const Tables tab = make_tables(*be, d.hs, d.t, false);
  std::mt19937_64 rng(8);
  const Shape sh{d.n, d.t, d.hs};
  const std::vector<float> x = random_values(rng, static_cast<size_t>(d.n * d.t * d.hs), -3, 3);
  const std::vector<float> dy = random_values(rng, x.size(), -3, 3);
  const Tensor y = be->empty(sh, DType::f32), dx = be->empty(sh, DType::f32);
  be->rope_forward(upload_values(*be, sh, DType::f32, x), tab.tc, tab.ts, y, 0);
  be->rope_backward(upload_values(*be, sh, DType::f32, dy), tab.tc, tab.ts, dx, 0, DType::f32);
  const std::vector<float> gy = download_values(*be, y), gdx = download_values(*be, dx);
  ErrorBudget b;
  double lhs = 0, rhs = 0, mag = 0;
  const int64_t h = d.hs / 2;
  for (int64_t row = 0; row < d.n * d.t; ++row) {
    const int64_t p = row % d.t;
    for (int64_t j = 0; j < h; ++j) {
      const size_t i0 = static_cast<size_t>(row * d.hs + j), i1 = i0 + static_cast<size_t>(h);
      const double c = tab.cos[static_cast<size_t>(p * h + j)];
      const double s = tab.sin[static_cast<size_t>(p * h + j)];
      const double x0 = x[i0], x1 = x[i1];
      const double m = std::fabs(x0 * c) + std::fabs(x1 * s),
                   m2 = std::fabs(x1 * c) + std::fabs(x0 * s);
      b.add(i0, gy[i0], x0 * c - x1 * s, 3 * 0x1p-24 * m);
      b.add(i1, gy[i1], x1 * c + x0 * s, 3 * 0x1p-24 * m2);
      lhs += static_cast<double>(dy[i0]) * gy[i0] + static_cast<double>(dy[i1]) * gy[i1];
      rhs += static_cast<double>(gdx[i0]) * x0 + static_cast<double>(gdx[i1]) * x1;
      mag += (std::fabs(dy[i0]) + std::fabs(dy[i1])) * (std::fabs(x0) + std::fabs(x1));
    }
  }
  EXPECT_TRUE(b.ok()) << "y: " << b.report();
  EXPECT_LE(std::fabs(lhs - rhs), 8 * 0x1p-24 * mag)
      << "<dy, R x> " << lhs << " vs <R^T dy, x> " << rhs;
}

// Rows t of a window starting at pos0 are rows pos0 + t of the whole sequence (the KV cache's
// use); in place gives the out-of-place bits.
TEST(RopeOps, WindowAtPos0AndInPlaceGiveTheSameBits) {
  auto be = cpu_backend(2);
  const int64_t n = 3, t = 20, hs = 8, pos0 = 12;
  const Tables tab = make_tables(*be, hs, t, true);
  std::mt19937_64 rng(4);
  const std::vector<float> x = random_values(rng, static_cast<size_t>(n * t * hs), -2, 2);
  const Tensor whole = be->empty({n, t, hs}, DType::f16);
  be->rope_forward(upload_values(*be, {n, t, hs}, DType::f32, x), tab.tc, tab.ts, whole, 0);
  std::vector<float> tail;
  for (int64_t i = 0; i < n; ++i) {
    tail.insert(tail.end(), x.begin() + (i * t + pos0) * hs, x.begin() + (i + 1) * t * hs);
  }
  const Tensor win = upload_values(*be, {n, t - pos0, hs}, DType::f32, tail);
  const Tensor wy = be->empty({n, t - pos0, hs}, DType::f16);
  be->rope_forward(win, tab.tc, tab.ts, wy, pos0);
  const std::vector<uint32_t> all = download_bits(*be, whole), got = download_bits(*be, wy);
  std::vector<uint32_t> want;
  for (int64_t i = 0; i < n; ++i) {
    want.insert(want.end(), all.begin() + (i * t + pos0) * hs, all.begin() + (i + 1) * t * hs);
  }
  BitwiseCheck b(DType::f16);
  b.add_all(got, want);
  EXPECT_TRUE(b.ok()) << "window: " << b.report();

  be->rope_forward(win, tab.tc, tab.ts, win, pos0);  // in place, f32
  const Tensor out = be->empty({n, t - pos0, hs}, DType::f32);
  be->rope_forward(upload_values(*be, {n, t - pos0, hs}, DType::f32, tail), tab.tc, tab.ts, out,
                   pos0);
  BitwiseCheck bi(DType::f32);
  bi.add_all(download_bits(*be, win), download_bits(*be, out));
  EXPECT_TRUE(bi.ok()) << "in place: " << bi.report();
}

TEST(RopeOps, SameBitsOnOneAndThreeThreads) {
  auto one = cpu_backend(1), three = cpu_backend(3);
  const Dims d{16, 64, 64};
  std::mt19937_64 rng(6);
  const std::vector<float> x = random_values(rng, static_cast<size_t>(d.n * d.t * d.hs), -2, 2);
  std::vector<uint32_t> outs[2][2];
  for (int k = 0; k < 2; ++k) {
    Backend& be = k == 0 ? *one : *three;
    const Tables tab = make_tables(be, d.hs, d.t, true);
    const Shape sh{d.n, d.t, d.hs};
    const Tensor y = be.empty(sh, DType::bf16), dx = be.empty(sh, DType::bf16);
    be.rope_forward(upload_values(be, sh, DType::f32, x), tab.tc, tab.ts, y, 0);
    be.rope_backward(upload_values(be, sh, DType::f32, x), tab.tc, tab.ts, dx, 0, DType::bf16);
    outs[k][0] = download_bits(be, y);
    outs[k][1] = download_bits(be, dx);
  }
  for (int o = 0; o < 2; ++o) {
    BitwiseCheck b(DType::bf16);
    b.add_all(outs[1][o], outs[0][o]);
    EXPECT_TRUE(b.ok()) << (o ? "dx: " : "y: ") << b.report();
  }
}

// The llama3 scaling's three bands, from the formula in double: wavelengths below
// original / high_freq_factor keep their frequency, above original / low_freq_factor divide it by
// factor, between them blend; each within 8 2^-24 of the double value (a handful of float ops).
TEST(RopeTables, Llama3ScalingKeepsDividesAndBlends) {
  const int64_t hs = 64;
  const nn::RopeScaling s{true, 8.0, 1.0, 4.0, 8192};
  const std::vector<float> plain = nn::rope_inv_freq(hs, 500000.0, nn::RopeScaling{});
  const std::vector<float> scaled = nn::rope_inv_freq(hs, 500000.0, s);
  int bands[3] = {0, 0, 0};
  for (size_t i = 0; i < plain.size(); ++i) {
    const double f = plain[i], wavelen = 2 * M_PI / f;
    double want;
    if (wavelen < 8192.0 / 4.0) {
      want = f;
      ++bands[0];
    } else if (wavelen > 8192.0 / 1.0) {
      want = f / 8.0;
      ++bands[2];
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8.0 + smooth * f;
      ++bands[1];
    }
    EXPECT_NEAR(scaled[i], want, 8 * 0x1p-24 * want) << "inv_freq[" << i << "]";
  }
  EXPECT_GT(bands[0], 0);
  EXPECT_GT(bands[1], 0);
  EXPECT_GT(bands[2], 0);
}

TEST(RopeTables, RefusesBadArguments) {
  expect_invalid_argument([] { nn::rope_inv_freq(7, 10000.0, {}); }, "odd head_dim");
  expect_invalid_argument([] { nn::rope_inv_freq(8, 0.0, {}); }, "theta 0");
  expect_invalid_argument(
      [] {
        nn::rope_inv_freq(8, 10000.0, {true, 8.0, 4.0, 1.0, 8192});
      },
      "high_freq_factor below low_freq_factor");
}

TEST(RopeOps, RefusesBadCallsBeforeWriting) {
  auto be = cpu_backend(1);
  const Tables tab = make_tables(*be, 8, 10, false);
  const Tensor x = be->zeros({2, 10, 8}, DType::f16);
  expect_invalid_argument(
      [&] {
        be->rope_forward(x, tab.tc, tab.ts, be->zeros({2, 10, 8}, DType::f32), 1);
      },
      "positions past the tables");
  expect_invalid_argument(
      [&] {
        be->rope_forward(be->zeros({2, 10, 7}, DType::f16), tab.tc, tab.ts,
                         be->zeros({2, 10, 7}, DType::f16), 0);
      },
      "an odd head size");
  expect_invalid_argument(
      [&] {
        be->rope_forward(x, tab.ts, tab.ts.view(0, {5, 8}), be->zeros({2, 10, 8}, DType::f16), 0);
      },
      "tables of the wrong width");
  expect_invalid_argument(
      [&] {
        be->rope_forward(x, tab.tc, tab.ts, x.view(0, {2, 10, 4}), 0);
      },
      "y of another shape");
  expect_invalid_argument(
      [&] {
        be->rope_forward(x, tab.tc, tab.ts, tab.tc.view(0, {1, 10, 4}), 0);
      },
      "y over the tables");
  expect_invalid_argument([&] { be->rope_backward(x, tab.tc, tab.ts, x, -1, DType::f16); },
                          "a negative pos0");
  expect_invalid_argument([&] { be->rope_backward(x, tab.tc, tab.ts, x, 0, DType::i32); },
                          "an i32 input dtype");
}

}  // namespace
}  // namespace ampctl::test
