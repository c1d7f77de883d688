// RMSNorm (backend.h: rms_norm_forward, residual_rms_norm_forward, rms_norm_backward) on the CPU
// backend: against its contract written out again here in float (bitwise: the op's one order of
// sums and its roundings), against double precision (forward: the formula; backward: central
// finite differences of a double forward), the fused residual form and the accumulating backward
// against the ops they stand for (bitwise), the same bits on one and three threads, and the calls
// it refuses. The CUDA kernels are checked against these in tests/cuda/test_cuda_nn.cpp.
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

constexpr float kEps = 1e-6f;

struct Dims {
  int64_t rows, cols;
};

// Rows at varied scales (a row's mean square is what rstd undoes).
std::vector<float> scaled_rows(std::mt19937_64& rng, Dims d, DType dtype) {
  std::vector<float> v = random_values(rng, static_cast<size_t>(d.rows * d.cols), -3, 1);
  for (int64_t r = 0; r < d.rows; ++r) {
    const float s = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    for (int64_t j = 0; j < d.cols; ++j) {
      float& e = v[static_cast<size_t>(r * d.cols + j)];
      e = round_to(e * s, dtype);
    }
  }
  return v;
}

// The contract in float, sums in index order (the CPU's order): rstd, y; dx, dweight.
struct Contract {
  std::vector<float> y, rstd, dx, dw;
};
Contract contract(const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& dy, Dims d, DType xt, float eps) {
  Contract c;
  c.y.resize(x.size());
  c.dx.resize(x.size());
  c.rstd.resize(static_cast<size_t>(d.rows));
  c.dw.assign(static_cast<size_t>(d.cols), 0.0f);
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r * d.cols)];
    const float* dyr = &dy[static_cast<size_t>(r * d.cols)];
    float sq = 0.0f;
    for (int64_t j = 0; j < d.cols; ++j) sq = sq + xr[j] * xr[j];
    const float a = 1.0f / std::sqrt(sq / static_cast<float>(d.cols) + eps);
    c.rstd[static_cast<size_t>(r)] = a;
    float dot = 0.0f;
    for (int64_t j = 0; j < d.cols; ++j) {
      const float h = round_to(xr[j] * a, xt);
      c.y[static_cast<size_t>(r * d.cols + j)] = w[static_cast<size_t>(j)] * h;
      dot = dot + round_to(dyr[j] * w[static_cast<size_t>(j)], xt) * xr[j];
    }
    const float b = -dot * a * a * a * (1.0f / static_cast<float>(d.cols));
    for (int64_t j = 0; j < d.cols; ++j) {
      const float g = round_to(dyr[j] * w[static_cast<size_t>(j)], xt);
      c.dx[static_cast<size_t>(r * d.cols + j)] = a * g + b * xr[j];
    }
  }
  for (int64_t j = 0; j < d.cols; ++j) {
    float s = 0.0f;
    for (int64_t r = 0; r < d.rows; ++r) {
      const size_t i = static_cast<size_t>(r * d.cols + j);
      s = s + dy[i] * round_to(x[i] * c.rstd[static_cast<size_t>(r)], xt);
    }
    c.dw[static_cast<size_t>(j)] = s;
  }
  return c;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v, DType d) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = encode(v[i], d);
  return b;
}

const Dims kDims[] = {{1, 1}, {7, 64}, {33, 45}, {300, 257}, {5, 1024}};

std::string label(Dims d, DType xt, DType yt) {
  return std::to_string(d.rows) + "x" + std::to_string(d.cols) + " x " + dtype_name(xt) + " y " +
         dtype_name(yt);
}

TEST(RmsNormOps, MatchesItsContractBitwise) {
  auto be = cpu_backend(2);
  for (const Dims d : kDims) {
    for (DType xt : kFloatDTypes) {
      for (DType yt : kFloatDTypes) {
        const std::string what = label(d, xt, yt);
        std::mt19937_64 rng(static_cast<uint64_t>(d.rows * 31 + d.cols) +
                            7 * static_cast<uint64_t>(xt) + static_cast<uint64_t>(yt));
        const std::vector<float> x = scaled_rows(rng, d, xt);
        const std::vector<float> w = random_values(rng, static_cast<size_t>(d.cols), -1, 1);
        const std::vector<float> dy = scaled_rows(rng, d, yt);
        const std::vector<float> dw0 = random_values(rng, static_cast<size_t>(d.cols), -2, 0);
        const Shape rc{d.rows, d.cols};
        const Tensor xt_ = upload_values(*be, rc, xt, x);
        const Tensor wt = upload_values(*be, {d.cols}, DType::f32, w);
        const Tensor y = be->empty(rc, yt), rstd = be->empty({d.rows}, DType::f32);
        be->rms_norm_forward(xt_, wt, y, rstd, kEps);
        const Contract c = contract(x, w, dy, d, xt, kEps);
        BitwiseCheck by(yt), br(DType::f32);
        by.add_all(download_bits(*be, y), bits_of(c.y, yt));
        br.add_all(download_bits(*be, rstd), bits_of(c.rstd, DType::f32));
        EXPECT_TRUE(by.ok()) << what << ", y: " << by.report();
        EXPECT_TRUE(br.ok()) << what << ", rstd: " << br.report();

        // Backward: dx in y's dtype (the stream's gradient dtype varies), dweight accumulated
        // onto what it held.
        const Tensor dyt = upload_values(*be, rc, yt, dy);
        const Tensor dx = be->empty(rc, yt);
        const Tensor dw = upload_values(*be, {d.cols}, DType::f32, dw0);
        const Tensor dyw = be->empty(rc, DType::f32);
        be->rms_norm_backward(xt_, wt, rstd, dyt, dx, dw, /*accumulate=*/false, dyw);
        std::vector<float> dyw_want(dy.size());  // the floats round_x rounds (numerics hook)
        for (size_t i = 0; i < dy.size(); ++i) {
          dyw_want[i] = round_to(dy[i], yt) * w[i % static_cast<size_t>(d.cols)];
        }
        BitwiseCheck bg(DType::f32);
        bg.add_all(download_bits(*be, dyw), bits_of(dyw_want, DType::f32));
        EXPECT_TRUE(bg.ok()) << what << ", dy_weight: " << bg.report();
        std::vector<float> dw_want(dw0.size());
        for (size_t j = 0; j < dw0.size(); ++j) dw_want[j] = dw0[j] + c.dw[j];
        BitwiseCheck bdx(yt), bdw(DType::f32);
        bdx.add_all(download_bits(*be, dx), bits_of(c.dx, yt));
        bdw.add_all(download_bits(*be, dw), bits_of(dw_want, DType::f32));
        EXPECT_TRUE(bdx.ok()) << what << ", dx: " << bdx.report();
        EXPECT_TRUE(bdw.ok()) << what << ", dweight: " << bdw.report();
      }
    }
  }
}

// Relative spacing of a dtype's values (one ulp over the value, at most).
double spacing(DType d) {
  return d == DType::f32 ? 0x1p-23 : d == DType::f16 ? 0x1p-10 : 0x1p-7;
}

// Forward against the formula in double. Bound, per element: the float sum of C squares and the
// rstd's division, square root and division ((C + 4) 2^-24 relative), x * rstd's and the weight's
// products (2 2^-24), one ulp of x's dtype where round_x may round the float differently from the
// double, one ulp of y's dtype for the output rounding; together (C + 8) 2^-24 + spacing(x) +
// spacing(y) of |y| (spacing(x) only for lowp x), and f16's subnormal spacing where it applies.
TEST(RmsNormOps, ForwardMatchesDoubleWithinDerivedBound) {
  auto be = cpu_backend(2);
  for (const Dims d : kDims) {
    for (DType xt : kFloatDTypes) {
      for (DType yt : kFloatDTypes) {
        std::mt19937_64 rng(static_cast<uint64_t>(d.cols * 5 + d.rows) + static_cast<uint64_t>(xt));
        const std::vector<float> x = scaled_rows(rng, d, xt);
        const std::vector<float> w = random_values(rng, static_cast<size_t>(d.cols), -1, 1);
        const Shape rc{d.rows, d.cols};
        const Tensor y = be->empty(rc, yt), rstd = be->empty({d.rows}, DType::f32);
        be->rms_norm_forward(upload_values(*be, rc, xt, x),
                             upload_values(*be, {d.cols}, DType::f32, w), y, rstd, kEps);
        const std::vector<float> got = download_values(*be, y);
        const std::vector<float> got_rstd = download_values(*be, rstd);
        ErrorBudget budget, rbudget;
        const double rel = static_cast<double>(d.cols + 8) * 0x1p-24 +
                           (xt == DType::f32 ? 0.0 : spacing(xt)) + spacing(yt);
        for (int64_t r = 0; r < d.rows; ++r) {
          double sq = 0;
          for (int64_t j = 0; j < d.cols; ++j) {
            const double v = x[static_cast<size_t>(r * d.cols + j)];
            sq += v * v;
          }
          const double a = 1.0 / std::sqrt(sq / static_cast<double>(d.cols) + kEps);
          rbudget.add(static_cast<size_t>(r), got_rstd[static_cast<size_t>(r)], a,
                      a * static_cast<double>(d.cols + 4) * 0x1p-24);
          for (int64_t j = 0; j < d.cols; ++j) {
            const size_t i = static_cast<size_t>(r * d.cols + j);
            const double want = static_cast<double>(w[static_cast<size_t>(j)]) * x[i] * a;
            // f16's subnormals (below 2^-14) are spaced 2^-24 apart: one such spacing where y
            // (or h, times |w|) is f16.
            const double sub =
                (yt == DType::f16 ? 0x1p-24 : 0.0) +
                (xt == DType::f16 ? std::fabs(w[static_cast<size_t>(j)]) * 0x1p-24 : 0.0);
            budget.add(i, got[i], want, std::fabs(want) * rel + sub + 1e-30);
          }
        }
        EXPECT_TRUE(budget.ok()) << label(d, xt, yt) << ", y: " << budget.report();
        EXPECT_TRUE(rbudget.ok()) << label(d, xt, yt) << ", rstd: " << rbudget.report();
      }
    }
  }
}

// The f32 gradients against central differences of the forward in double: L = sum dy * y(x, w).
// The op's dx_j = a g_j + b x_j from float sums of C terms: its error is within (C + 10) 2^-24 of
// a |g_j| + |b| |x_j| + a^3 |x_j| sum_k |g_k x_k| / C (the dot's own error carried by b); the
// difference quotient's error (h = 1e-4 of the row's scale, O(h^2)) is far below it. dweight sums
// R products: (R + 3) 2^-24 of sum_r |dy x a|.
TEST(RmsNormOps, BackwardMatchesFiniteDifferencesInDouble) {
  auto be = cpu_backend(2);
  const Dims dims[] = {{3, 8}, {5, 33}, {2, 128}};
  for (const Dims d : dims) {
    std::mt19937_64 rng(static_cast<uint64_t>(d.rows * 13 + d.cols));
    const std::vector<float> x = scaled_rows(rng, d, DType::f32);
    const std::vector<float> w = random_values(rng, static_cast<size_t>(d.cols), -1, 1);
    const std::vector<float> dy = random_values(rng, x.size(), -2, 1);
    const Shape rc{d.rows, d.cols};
    const Tensor xt = upload_values(*be, rc, DType::f32, x);
    const Tensor wt = upload_values(*be, {d.cols}, DType::f32, w);
    const Tensor y = be->empty(rc, DType::f32), rstd = be->empty({d.rows}, DType::f32);
    be->rms_norm_forward(xt, wt, y, rstd, kEps);
    const Tensor dx = be->empty(rc, DType::f32), dw = be->zeros({d.cols}, DType::f32);
    be->rms_norm_backward(xt, wt, rstd, upload_values(*be, rc, DType::f32, dy), dx, dw, false);
    const std::vector<float> gdx = download_values(*be, dx), gdw = download_values(*be, dw);

    // L(row) in double, for a perturbed row.
    auto loss_row = [&](const std::vector<double>& row, const std::vector<double>& wr, int64_t r) {
      double sq = 0;
      for (double v : row) sq += v * v;
      const double a = 1.0 / std::sqrt(sq / static_cast<double>(d.cols) + kEps);
      double l = 0;
      for (int64_t j = 0; j < d.cols; ++j) {
        l += static_cast<double>(dy[static_cast<size_t>(r * d.cols + j)]) *
             wr[static_cast<size_t>(j)] * row[static_cast<size_t>(j)] * a;
      }
      return l;
    };
    std::vector<double> wd(w.begin(), w.end());
    ErrorBudget bdx, bdw;
    std::vector<double> dw_fd(static_cast<size_t>(d.cols), 0.0), dw_mag(dw_fd.size(), 0.0);
    for (int64_t r = 0; r < d.rows; ++r) {
      std::vector<double> row(x.begin() + r * d.cols, x.begin() + (r + 1) * d.cols);
      double sq = 0, scale = 0;
      for (double v : row) {
        sq += v * v;
        scale = std::max(scale, std::fabs(v));
      }
      const double a = 1.0 / std::sqrt(sq / static_cast<double>(d.cols) + kEps);
      double dotabs = 0, b = 0;
      for (int64_t j = 0; j < d.cols; ++j) {
        const double g = static_cast<double>(dy[static_cast<size_t>(r * d.cols + j)]) *
                         w[static_cast<size_t>(j)];
        dotabs += std::fabs(g * row[static_cast<size_t>(j)]);
        b += g * row[static_cast<size_t>(j)];
      }
      b = -b * a * a * a / static_cast<double>(d.cols);
      const double h = 1e-4 * scale;
      for (int64_t j = 0; j < d.cols; ++j) {
        std::vector<double> p = row, m = row;
        p[static_cast<size_t>(j)] += h;
        m[static_cast<size_t>(j)] -= h;
        const double fd = (loss_row(p, wd, r) - loss_row(m, wd, r)) / (2 * h);
        const double g = static_cast<double>(dy[static_cast<size_t>(r * d.cols + j)]) *
                         w[static_cast<size_t>(j)];
        const double xj = std::fabs(row[static_cast<size_t>(j)]);
        const double bound =
            static_cast<double>(d.cols + 10) * 0x1p-24 *
                (a * std::fabs(g) + std::fabs(b) * xj +
                 a * a * a * xj * dotabs / static_cast<double>(d.cols)) +
            1e-6 * (a * std::fabs(g) + std::fabs(b) * xj);  // the difference quotient's O(h^2)
        bdx.add(static_cast<size_t>(r * d.cols + j), gdx[static_cast<size_t>(r * d.cols + j)], fd,
                bound);
        const double term = static_cast<double>(dy[static_cast<size_t>(r * d.cols + j)]) *
                            row[static_cast<size_t>(j)] * a;
        dw_fd[static_cast<size_t>(j)] += term;  // dL/dw_j (L is linear in w: exact)
        dw_mag[static_cast<size_t>(j)] += std::fabs(term);
      }
    }
    for (int64_t j = 0; j < d.cols; ++j) {
      bdw.add(static_cast<size_t>(j), gdw[static_cast<size_t>(j)], dw_fd[static_cast<size_t>(j)],
              static_cast<double>(d.rows + 3) * 0x1p-24 * dw_mag[static_cast<size_t>(j)] + 1e-30);
    }
    const std::string what = std::to_string(d.rows) + "x" + std::to_string(d.cols);
    EXPECT_TRUE(bdx.ok()) << what << ", dx: " << bdx.report();
    EXPECT_TRUE(bdw.ok()) << what << ", dweight: " << bdw.report();
  }
}

// residual_rms_norm_forward is copy + add_ + rms_norm_forward, bit for bit, in place or not.
TEST(RmsNormOps, ResidualFormIsAddThenRmsNormBitwise) {
  auto be = cpu_backend(2);
  const Dims d{37, 96};
  const Shape rc{d.rows, d.cols};
  for (DType rt : kFloatDTypes) {
    for (DType yt : kFloatDTypes) {
      for (bool in_place : {false, true}) {
        std::mt19937_64 rng(static_cast<uint64_t>(rt) * 3 + static_cast<uint64_t>(yt));
        const std::vector<float> xv = scaled_rows(rng, d, DType::f32);
        const std::vector<float> rv = scaled_rows(rng, d, rt);
        const Tensor w = upload_values(*be, {d.cols}, DType::f32,
                                       random_values(rng, static_cast<size_t>(d.cols), -1, 1));
        const Tensor x = upload_values(*be, rc, DType::f32, xv), r = upload_values(*be, rc, rt, rv);
        const Tensor sum0 = be->empty(rc, DType::f32), y0 = be->empty(rc, yt);
        const Tensor s0 = be->empty({d.rows}, DType::f32);
        be->copy(sum0, x);
        be->add_(sum0, r);
        be->rms_norm_forward(sum0, w, y0, s0, kEps);
        const Tensor x1 = upload_values(*be, rc, DType::f32, xv);
        const Tensor sum1 = in_place ? x1 : be->empty(rc, DType::f32);
        const Tensor y1 = be->empty(rc, yt), s1 = be->empty({d.rows}, DType::f32);
        be->residual_rms_norm_forward(x1, r, sum1, w, y1, s1, kEps);
        const std::string what = std::string("r ") + dtype_name(rt) + " y " + dtype_name(yt) +
                                 (in_place ? " in place" : "");
        BitwiseCheck bs(DType::f32), by(yt), br(DType::f32);
        bs.add_all(download_bits(*be, sum1), download_bits(*be, sum0));
        by.add_all(download_bits(*be, y1), download_bits(*be, y0));
        br.add_all(download_bits(*be, s1), download_bits(*be, s0));
        EXPECT_TRUE(bs.ok()) << what << ", sum: " << bs.report();
        EXPECT_TRUE(by.ok()) << what << ", y: " << by.report();
        EXPECT_TRUE(br.ok()) << what << ", rstd: " << br.report();
      }
    }
  }
}

// accumulate: dx := round(float(dx) + t) with t the backward into an f32 tensor (add_'s bits).
TEST(RmsNormOps, AccumulatingBackwardIsBackwardThenAddBitwise) {
  auto be = cpu_backend(2);
  const Dims d{21, 70};
  const Shape rc{d.rows, d.cols};
  for (DType xt : kFloatDTypes) {
    for (DType dxt : kFloatDTypes) {
      std::mt19937_64 rng(static_cast<uint64_t>(xt) * 5 + static_cast<uint64_t>(dxt));
      const Tensor x = upload_values(*be, rc, xt, scaled_rows(rng, d, xt));
      const Tensor w = upload_values(*be, {d.cols}, DType::f32,
                                     random_values(rng, static_cast<size_t>(d.cols), -1, 1));
      const Tensor dy = upload_values(*be, rc, dxt, scaled_rows(rng, d, dxt));
      const std::vector<float> dx0 = scaled_rows(rng, d, dxt);
      const Tensor y = be->empty(rc, dxt), rstd = be->empty({d.rows}, DType::f32);
      be->rms_norm_forward(x, w, y, rstd, kEps);
      const Tensor t = be->empty(rc, DType::f32), want = upload_values(*be, rc, dxt, dx0);
      const Tensor dw0 = be->zeros({d.cols}, DType::f32), dw1 = be->zeros({d.cols}, DType::f32);
      be->rms_norm_backward(x, w, rstd, dy, t, dw0, false);
      be->add_(want, t);
      const Tensor got = upload_values(*be, rc, dxt, dx0);
      be->rms_norm_backward(x, w, rstd, dy, got, dw1, /*accumulate=*/true);
      BitwiseCheck bx(dxt), bw(DType::f32);
      bx.add_all(download_bits(*be, got), download_bits(*be, want));
      bw.add_all(download_bits(*be, dw1), download_bits(*be, dw0));
      const std::string what = std::string("x ") + dtype_name(xt) + " dx " + dtype_name(dxt);
      EXPECT_TRUE(bx.ok()) << what << ": " << bx.report();
      EXPECT_TRUE(bw.ok()) << what << ", dweight: " << bw.report();
    }
  }
}

// Qwen3's per-head q/k norm: the op over [N * T, hs] rows of the head layout, weight [hs].
TEST(RmsNormOps, PerHeadNormIsTheRowOpOverHeadRows) {
  auto be = cpu_backend(2);
  const int64_t n = 6, t = 11, hs = 16;
  std::mt19937_64 rng(5);
  const std::vector<float> q = random_values(rng, static_cast<size_t>(n * t * hs), -3, 2);
  const std::vector<float> w = random_values(rng, static_cast<size_t>(hs), -1, 1);
  const Tensor heads = upload_values(*be, {n, t, hs}, DType::f16, q);
  const Tensor y = be->empty({n * t, hs}, DType::f32), rstd = be->empty({n * t}, DType::f32);
  be->rms_norm_forward(heads.view(0, {n * t, hs}), upload_values(*be, {hs}, DType::f32, w), y, rstd,
                       kEps);
  std::vector<float> qr(q.size());
  for (size_t i = 0; i < q.size(); ++i) qr[i] = round_to(q[i], DType::f16);
  const Contract c =
      contract(qr, w, std::vector<float>(q.size(), 0.0f), {n * t, hs}, DType::f16, kEps);
  BitwiseCheck b(DType::f32);
  b.add_all(download_bits(*be, y), bits_of(c.y, DType::f32));
  EXPECT_TRUE(b.ok()) << b.report();
}

TEST(RmsNormOps, SameBitsOnOneAndThreeThreads) {
  auto one = cpu_backend(1), three = cpu_backend(3);
  const Dims d{300, 257};  // large enough to be split
  const Shape rc{d.rows, d.cols};
  for (DType xt : kFloatDTypes) {
    std::vector<std::vector<uint32_t>> outs[2];
    std::mt19937_64 rng(11);
    const std::vector<float> x = scaled_rows(rng, d, xt), dy = scaled_rows(rng, d, xt);
    const std::vector<float> w = random_values(rng, static_cast<size_t>(d.cols), -1, 1);
    for (int k = 0; k < 2; ++k) {
      Backend& be = k == 0 ? *one : *three;
      const Tensor xt_ = upload_values(be, rc, xt, x),
                   wt = upload_values(be, {d.cols}, DType::f32, w);
      const Tensor y = be.empty(rc, xt), rstd = be.empty({d.rows}, DType::f32);
      be.rms_norm_forward(xt_, wt, y, rstd, kEps);
      const Tensor dx = be.empty(rc, xt), dw = be.zeros({d.cols}, DType::f32);
      be.rms_norm_backward(xt_, wt, rstd, upload_values(be, rc, xt, dy), dx, dw, false);
      outs[k] = {download_bits(be, y), download_bits(be, rstd), download_bits(be, dx),
                 download_bits(be, dw)};
    }
    for (size_t o = 0; o < outs[0].size(); ++o) {
      BitwiseCheck b(o == 1 || o == 3 ? DType::f32 : xt);
      b.add_all(outs[1][o], outs[0][o]);
      EXPECT_TRUE(b.ok()) << dtype_name(xt) << " output " << o << ": " << b.report();
    }
  }
}

TEST(RmsNormOps, RefusesBadCallsBeforeWriting) {
  auto be = cpu_backend(1);
  const Tensor x = be->zeros({4, 8}, DType::f32), w = be->zeros({8}, DType::f32);
  const Tensor y = be->zeros({4, 8}, DType::f16), rstd = be->zeros({4}, DType::f32);
  expect_invalid_argument(
      [&] { be->rms_norm_forward(x, be->zeros({7}, DType::f32), y, rstd, kEps); },
      "weight of the wrong width");
  expect_invalid_argument(
      [&] { be->rms_norm_forward(x, be->zeros({8}, DType::f16), y, rstd, kEps); }, "an f16 weight");
  expect_invalid_argument(
      [&] {
        be->rms_norm_forward(x, w, be->zeros({4, 9}, DType::f32), rstd, kEps);
      },
      "y of another shape");
  expect_invalid_argument([&] { be->rms_norm_forward(x, w, y, be->zeros({3}, DType::f32), kEps); },
                          "rstd of the wrong length");
  expect_invalid_argument([&] { be->rms_norm_forward(x, w, x, w, kEps); },
                          "rstd that is the weight");
  expect_invalid_argument(
      [&] { be->rms_norm_backward(x, w, rstd, y, Tensor{}, w, /*accumulate=*/true); },
      "accumulate without dx");
  expect_invalid_argument([&] { be->rms_norm_backward(x, w, rstd, x, x, Tensor{}, true); },
                          "an accumulated dx that is dy");
  expect_invalid_argument([&] { be->rms_norm_backward(x, w, rstd, y, y, w, false); },
                          "dweight that is weight");
  expect_invalid_argument(
      [&] {
        be->rms_norm_backward(x, w, rstd, y, be->zeros({4, 8}, DType::f32), Tensor{}, false, x);
      },
      "dy_weight that is x");
  expect_invalid_argument(
      [&] {
        be->residual_rms_norm_forward(be->zeros({4, 8}, DType::f16), x, x, w, y, rstd, kEps);
      },
      "an f16 residual stream");
}

}  // namespace
}  // namespace ampctl::test
