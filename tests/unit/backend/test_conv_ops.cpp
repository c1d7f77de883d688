// The convolution ops of the CPU backend (backend.h, "convolution ops") against references in
// double, with error bounds derived from the float arithmetic each op does:
//   * a float32 chain of n additions of terms t_i has |err| <= gamma_n * sum |t_i|
//     (gamma_n = n u / (1 - n u), u = 2^-24; Higham 3.1); the output's one rounding adds
//     u_out (|ref| + err) (+ half of f16's smallest subnormal);
//   * max pooling is exact (a selection), and so is a backward whose windows do not overlap.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/conv_math.h"
#include "backend_test_util.h"

namespace ampctl::test {
namespace {

constexpr double kU = 0x1p-24;

double gamma_n(double n) {
  return n * kU / (1.0 - n * kU);
}
double unit_out(DType d) {
  return d == DType::f16 ? 0x1p-11 : d == DType::bf16 ? 0x1p-8 : kU;
}
double rounding(double ref, double err, DType d) {
  return err + unit_out(d) * (std::fabs(ref) + err) + (d == DType::f16 ? 0x1p-25 : 0.0);
}

std::vector<float> rounded_values(std::mt19937_64& rng, size_t n, DType d) {
  std::vector<float> v = random_values(rng, n, -3, 1);
  for (float& x : v) x = round_to(x, d);
  return v;
}

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, pad;
};
constexpr ConvCase kConvCases[] = {{2, 3, 7, 6, 4, 3, 1, 1},
                                   {3, 2, 5, 5, 3, 1, 1, 0},
                                   {2, 2, 8, 7, 5, 3, 2, 1},
                                   {1, 4, 6, 6, 2, 5, 1, 2},
                                   {2, 1, 4, 5, 3, 2, 1, 0}};

// The double reference of conv2d at output (n, o, y, x) and the sum of |terms|.
void conv_ref(const ConvCase& cc, const std::vector<float>& x, const std::vector<float>& w,
              const std::vector<float>* b, int64_t n, int64_t o, int64_t oy, int64_t ox,
              double& sum, double& abs_sum) {
  sum = b ? (*b)[o] : 0.0;
  abs_sum = std::fabs(sum);
  for (int64_t c = 0; c < cc.c; ++c) {
    for (int64_t i = 0; i < cc.k; ++i) {
      for (int64_t j = 0; j < cc.k; ++j) {
        const int64_t ih = oy * cc.stride - cc.pad + i, iw = ox * cc.stride - cc.pad + j;
        if (ih < 0 || ih >= cc.h || iw < 0 || iw >= cc.w) continue;
        const double t = static_cast<double>(x[((n * cc.c + c) * cc.h + ih) * cc.w + iw]) *
                         w[((o * cc.c + c) * cc.k + i) * cc.k + j];
        sum += t;
        abs_sum += std::fabs(t);
      }
    }
  }
}

TEST(ConvOps, Conv2dForwardWithinFp32Bound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xc0c0);
  for (const ConvCase& cc : kConvCases) {
    for (DType d : kFloatDTypes) {
      for (bool bias : {true, false}) {
        const int64_t oh = conv_out_size(cc.h, cc.k, cc.stride, cc.pad);
        const int64_t ow = conv_out_size(cc.w, cc.k, cc.stride, cc.pad);
        const auto xv = rounded_values(rng, cc.n * cc.c * cc.h * cc.w, d);
        const auto wv = rounded_values(rng, cc.o * cc.c * cc.k * cc.k, d);
        const auto bv = rounded_values(rng, cc.o, d);
        Tensor x = upload_values(*be, {cc.n, cc.c, cc.h, cc.w}, d, xv);
        Tensor w = upload_values(*be, {cc.o, cc.c, cc.k, cc.k}, d, wv);
        Tensor b = bias ? upload_values(*be, {cc.o}, d, bv) : Tensor{};
        Tensor y = be->empty({cc.n, cc.o, oh, ow}, d);
        Tensor col = be->empty({cc.c * cc.k * cc.k * oh * ow}, d);
        be->conv2d_forward(x, w, b, y, {cc.stride, cc.stride, cc.pad, cc.pad}, col);
        const auto got = download_values(*be, y);
        ErrorBudget budget;
        const double terms = static_cast<double>(cc.c * cc.k * cc.k + 1);
        for (int64_t n = 0; n < cc.n; ++n)
          for (int64_t o = 0; o < cc.o; ++o)
            for (int64_t a = 0; a < oh; ++a)
              for (int64_t c = 0; c < ow; ++c) {
                double ref, abs_sum;
                conv_ref(cc, xv, wv, bias ? &bv : nullptr, n, o, a, c, ref, abs_sum);
                const size_t at = static_cast<size_t>(((n * cc.o + o) * oh + a) * ow + c);
                budget.add(at, got[at], ref, rounding(ref, gamma_n(terms) * abs_sum, d));
              }
        EXPECT_TRUE(budget.ok()) << dtype_name(d) << " k=" << cc.k << ": " << budget.report();
      }
    }
  }
}

TEST(ConvOps, Conv2dBackwardWithinFp32Bound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xbacc);
  for (const ConvCase& cc : kConvCases) {
    for (DType d : kFloatDTypes) {
      const int64_t oh = conv_out_size(cc.h, cc.k, cc.stride, cc.pad);
      const int64_t ow = conv_out_size(cc.w, cc.k, cc.stride, cc.pad);
      const int64_t kk = cc.c * cc.k * cc.k;
      const auto xv = rounded_values(rng, cc.n * cc.c * cc.h * cc.w, d);
      const auto wv = rounded_values(rng, cc.o * kk, d);
      const auto dyv = rounded_values(rng, cc.n * cc.o * oh * ow, d);
      Tensor x = upload_values(*be, {cc.n, cc.c, cc.h, cc.w}, d, xv);
      Tensor w = upload_values(*be, {cc.o, cc.c, cc.k, cc.k}, d, wv);
      Tensor dy = upload_values(*be, {cc.n, cc.o, oh, ow}, d, dyv);
      Tensor dx = be->empty({cc.n, cc.c, cc.h, cc.w}, d);
      Tensor dw = be->empty({cc.o, cc.c, cc.k, cc.k}, d);
      Tensor db = be->empty({cc.o}, d);
      Tensor col = be->empty({kk * oh * ow}, d);
      Tensor dcol = be->empty({kk * oh * ow}, DType::f32);
      Tensor acc = be->empty({cc.o * kk}, DType::f32);
      const Conv2dGeometry g{cc.stride, cc.stride, cc.pad, cc.pad};
      be->conv2d_backward_input(dy, w, dx, g, dcol);
      be->conv2d_backward_weight(x, dy, dw, db, g, col, acc);
      // References: the adjoint sums, in double, with their |terms|.
      std::vector<double> rdx(xv.size(), 0.0), adx(xv.size(), 0.0);
      std::vector<double> rdw(wv.size(), 0.0), adw(wv.size(), 0.0);
      std::vector<double> rdb(cc.o, 0.0), adb(cc.o, 0.0);
      for (int64_t n = 0; n < cc.n; ++n)
        for (int64_t o = 0; o < cc.o; ++o)
          for (int64_t a = 0; a < oh; ++a)
            for (int64_t b = 0; b < ow; ++b) {
              const double gy = dyv[((n * cc.o + o) * oh + a) * ow + b];
              rdb[o] += gy;
              adb[o] += std::fabs(gy);
              for (int64_t c = 0; c < cc.c; ++c)
                for (int64_t i = 0; i < cc.k; ++i)
                  for (int64_t j = 0; j < cc.k; ++j) {
                    const int64_t ih = a * cc.stride - cc.pad + i, iw = b * cc.stride - cc.pad + j;
                    if (ih < 0 || ih >= cc.h || iw < 0 || iw >= cc.w) continue;
                    const size_t xi = static_cast<size_t>(((n * cc.c + c) * cc.h + ih) * cc.w + iw);
                    const size_t wi = static_cast<size_t>(((o * cc.c + c) * cc.k + i) * cc.k + j);
                    rdx[xi] += gy * wv[wi];
                    adx[xi] += std::fabs(gy * wv[wi]);
                    rdw[wi] += gy * xv[xi];
                    adw[wi] += std::fabs(gy * xv[xi]);
                  }
            }
      const auto gdx = download_values(*be, dx);
      const auto gdw = download_values(*be, dw);
      const auto gdb = download_values(*be, db);
      ErrorBudget bx, bw, bb;
      // dx: a chain over O (the product w^T dy) and then over the kh*kw taps (col2im).
      for (size_t i = 0; i < rdx.size(); ++i)
        bx.add(i, gdx[i], rdx[i], rounding(rdx[i], gamma_n(cc.o + cc.k * cc.k) * adx[i], d));
      // dw and db: one chain over every (image, position).
      const double np = static_cast<double>(cc.n * oh * ow);
      for (size_t i = 0; i < rdw.size(); ++i)
        bw.add(i, gdw[i], rdw[i], rounding(rdw[i], gamma_n(np) * adw[i], d));
      for (int64_t o = 0; o < cc.o; ++o)
        bb.add(o, gdb[o], rdb[o], rounding(rdb[o], gamma_n(np) * adb[o], d));
      EXPECT_TRUE(bx.ok()) << dtype_name(d) << " dx: " << bx.report();
      EXPECT_TRUE(bw.ok()) << dtype_name(d) << " dw: " << bw.report();
      EXPECT_TRUE(bb.ok()) << dtype_name(d) << " db: " << bb.report();
    }
  }
}

TEST(ConvOps, MaxPoolPicksTheFirstMaximumAndRoutesGradients) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0x9001);
  std::uniform_int_distribution<int> small(-2, 2);  // many ties
  for (DType d : kFloatDTypes) {
    for (int64_t stride : {2, 1}) {
      const int64_t n = 2, c = 3, h = 6, w = 5, k = 2;
      const int64_t oh = conv_out_size(h, k, stride, 0), ow = conv_out_size(w, k, stride, 0);
      std::vector<float> xv(n * c * h * w);
      for (float& v : xv) v = static_cast<float>(small(rng));
      const auto dyv = rounded_values(rng, n * c * oh * ow, d);
      Tensor x = upload_values(*be, {n, c, h, w}, d, xv);
      Tensor y = be->empty({n, c, oh, ow}, d);
      Tensor idx = be->empty({n, c, oh, ow}, DType::i32);
      const Pool2dGeometry g{k, k, stride, stride, 0, 0, false};
      be->max_pool2d_forward(x, y, idx, g);
      Tensor dy = upload_values(*be, {n, c, oh, ow}, d, dyv);
      Tensor dx = be->empty({n, c, h, w}, d);
      be->max_pool2d_backward(dy, idx, dx, g);
      const auto yg = download_values(*be, y);
      const auto ig = download_i32(*be, idx);
      const auto dxg = download_values(*be, dx);
      std::vector<double> rdx(xv.size(), 0.0), adx(xv.size(), 0.0);
      for (int64_t p = 0; p < n * c; ++p)
        for (int64_t a = 0; a < oh; ++a)
          for (int64_t b = 0; b < ow; ++b) {
            float best = -INFINITY;
            int64_t arg = -1;
            for (int64_t r = a * stride; r < a * stride + k; ++r)
              for (int64_t s = b * stride; s < b * stride + k; ++s)
                if (xv[p * h * w + r * w + s] > best) {
                  best = xv[p * h * w + r * w + s];
                  arg = r * w + s;
                }
            const size_t o = static_cast<size_t>((p * oh + a) * ow + b);
            EXPECT_EQ(yg[o], best) << dtype_name(d) << " output " << o;
            EXPECT_EQ(ig[o], arg) << dtype_name(d) << " output " << o << ": not the first maximum";
            rdx[p * h * w + arg] += dyv[o];
            adx[p * h * w + arg] += std::fabs(dyv[o]);
          }
      ErrorBudget bx;
      // Non-overlapping windows (stride 2): one term each, exact; overlapping: a chain of <= 4.
      for (size_t i = 0; i < rdx.size(); ++i)
        bx.add(i, dxg[i], rdx[i], stride == k ? 0.0 : rounding(rdx[i], gamma_n(4) * adx[i], d));
      EXPECT_TRUE(bx.ok()) << dtype_name(d) << " stride " << stride << ": " << bx.report();
    }
  }
}

TEST(ConvOps, MaxPoolPropagatesNaN) {
  auto be = cpu_backend();
  Tensor x = upload_values(*be, {1, 1, 2, 2}, DType::f32, {1.0f, NAN, 3.0f, 2.0f});
  Tensor y = be->empty({1, 1, 1, 1}, DType::f32);
  Tensor idx = be->empty({1, 1, 1, 1}, DType::i32);
  be->max_pool2d_forward(x, y, idx, {2, 2, 2, 2, 0, 0, false});
  EXPECT_TRUE(std::isnan(download_values(*be, y)[0]));
  EXPECT_EQ(download_i32(*be, idx)[0], 1);
}

TEST(ConvOps, AvgAndAdaptivePoolWithinFp32Bound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xa7a7);
  struct PoolCase {
    Pool2dGeometry g;
    int64_t oh, ow;
  };
  const int64_t n = 2, c = 2, h = 7, w = 5;
  const PoolCase cases[] = {{{2, 2, 2, 2, 0, 0, false}, 3, 2},
                            {{3, 3, 2, 2, 1, 1, false}, 4, 3},
                            {{1, 1, 1, 1, 0, 0, true}, 3, 2},
                            {{1, 1, 1, 1, 0, 0, true}, 1, 1}};
  for (DType d : kFloatDTypes) {
    for (const PoolCase& pc : cases) {
      const auto xv = rounded_values(rng, n * c * h * w, d);
      const auto dyv = rounded_values(rng, n * c * pc.oh * pc.ow, d);
      Tensor x = upload_values(*be, {n, c, h, w}, d, xv);
      Tensor y = be->empty({n, c, pc.oh, pc.ow}, d);
      be->avg_pool2d_forward(x, y, pc.g);
      Tensor dy = upload_values(*be, {n, c, pc.oh, pc.ow}, d, dyv);
      Tensor dx = be->empty({n, c, h, w}, d);
      be->avg_pool2d_backward(dy, dx, pc.g);
      const auto yg = download_values(*be, y);
      const auto dxg = download_values(*be, dx);
      std::vector<double> rdx(xv.size(), 0.0), adx(xv.size(), 0.0), cnt(xv.size(), 0.0);
      ErrorBudget by, bx;
      for (int64_t p = 0; p < n * c; ++p)
        for (int64_t a = 0; a < pc.oh; ++a)
          for (int64_t b = 0; b < pc.ow; ++b) {
            const auto wh = nn::pool_window(a, h, pc.oh, pc.g.kernel_h, pc.g.stride_h, pc.g.pad_h,
                                            pc.g.adaptive);
            const auto ww = nn::pool_window(b, w, pc.ow, pc.g.kernel_w, pc.g.stride_w, pc.g.pad_w,
                                            pc.g.adaptive);
            if (pc.g.adaptive) {  // PyTorch's adaptive windows, written out
              EXPECT_EQ(wh.start, (a * h) / pc.oh);
              EXPECT_EQ(wh.end, static_cast<int64_t>(std::ceil((a + 1) * h / double(pc.oh))));
            }
            const double div = static_cast<double>(wh.count * ww.count);
            double s = 0, as = 0;
            const size_t o = static_cast<size_t>((p * pc.oh + a) * pc.ow + b);
            for (int64_t r = wh.start; r < wh.end; ++r)
              for (int64_t q = ww.start; q < ww.end; ++q) {
                s += xv[p * h * w + r * w + q];
                as += std::fabs(xv[p * h * w + r * w + q]);
                rdx[p * h * w + r * w + q] += dyv[o] / div;
                adx[p * h * w + r * w + q] += std::fabs(dyv[o]) / div;
                cnt[p * h * w + r * w + q] += 1;
              }
            const double ref = s / div;
            const double terms = static_cast<double>((wh.end - wh.start) * (ww.end - ww.start));
            by.add(o, yg[o], ref,
                   rounding(ref, (gamma_n(terms) * as + kU * std::fabs(s)) / div, d));
          }
      // dx: each share dy / count is rounded once (u), then a chain over the windows.
      for (size_t i = 0; i < rdx.size(); ++i)
        bx.add(i, dxg[i], rdx[i], rounding(rdx[i], gamma_n(cnt[i] + 1) * adx[i], d));
      EXPECT_TRUE(by.ok()) << dtype_name(d) << " y: " << by.report();
      EXPECT_TRUE(bx.ok()) << dtype_name(d) << " dx: " << bx.report();
    }
  }
}

// BatchNorm2d: the batch statistics, y, the running statistics (momentum 0.1, unbiased
// variance) and the counter, against double. Bounds: the mean is a chain over M values
// (e_mean = gamma_M mean|x|); the variance a chain over M squares of float differences
// (e_var = gamma_{M+3} mean (|x - mean| + e_mean)^2 + 2 e_mean mean |x - mean|); invstd's relative
// error is half var's relative error plus 3u (add eps, sqrt, divide); y = x alpha + shift adds
// a few roundings of its terms.
TEST(ConvOps, BatchNormForwardTrainingAndEval) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xb4);
  const int64_t n = 3, c = 4, h = 5, w = 3, p = h * w, m = n * p;
  const float eps = 1e-5f;
  for (DType d : kFloatDTypes) {
    std::vector<float> xv = rounded_values(rng, n * c * p, d);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = round_to(xv[i] + 0.5f * (i % c), d);  // offsets
    const auto gv = random_values(rng, c, -1, 1);
    const auto bv = random_values(rng, c, -1, 1);
    Tensor x = upload_values(*be, {n, c, h, w}, d, xv);
    Tensor gamma = upload_values(*be, {c}, DType::f32, gv);
    Tensor beta = upload_values(*be, {c}, DType::f32, bv);
    Tensor y = be->empty({n, c, h, w}, d);
    Tensor sm = be->empty({c}, DType::f32), si = be->empty({c}, DType::f32);
    Tensor rm = be->zeros({c}, DType::f32), rv = be->empty({c}, DType::f32);
    be->fill(rv, 1.0);
    Tensor nbt = be->zeros(Shape{}, DType::i32);
    be->batch_norm_forward(x, gamma, beta, y, sm, si, rm, rv, nbt, {true, 0.1f, eps});
    const auto yg = download_values(*be, y);
    const auto smg = download_values(*be, sm), sig = download_values(*be, si);
    const auto rmg = download_values(*be, rm), rvg = download_values(*be, rv);
    EXPECT_EQ(download_i32(*be, nbt)[0], 1);
    ErrorBudget bmean, binv, by, brm, brv;
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0, as = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < p; ++k) {
          s += xv[(i * c + ch) * p + k];
          as += std::fabs(xv[(i * c + ch) * p + k]);
        }
      const double mean = s / m;
      double q = 0, ad = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < p; ++k) {
          const double dd = xv[(i * c + ch) * p + k] - mean;
          q += dd * dd;
          ad += std::fabs(dd);
        }
      const double var = q / m, invstd = 1.0 / std::sqrt(var + eps);
      const double e_mean = gamma_n(m + 1) * as / m;
      const double e_var =
          gamma_n(m + 3) * (q + 2 * e_mean * ad + m * e_mean * e_mean) / m + 2 * e_mean * ad / m;
      const double e_inv = invstd * (0.5 * e_var / (var + eps) + 3 * kU);
      bmean.add(ch, smg[ch], mean, e_mean);
      binv.add(ch, sig[ch], invstd, e_inv);
      brm.add(ch, rmg[ch], 0.1 * mean, 0.1 * e_mean + 3 * kU * std::fabs(0.1 * mean));
      const double unbiased = q / (m - 1);
      const double e_unb = e_var * m / (m - 1) + kU * unbiased;
      brv.add(ch, rvg[ch], 0.1 * unbiased + 0.9, 0.1 * e_unb + 3 * kU * (0.1 * unbiased + 0.9));
      const double alpha = invstd * gv[ch];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < p; ++k) {
          const size_t at = static_cast<size_t>((i * c + ch) * p + k);
          const double xd = xv[at];
          const double ref = (xd - mean) * alpha + bv[ch];
          const double e = std::fabs(gv[ch]) * (std::fabs(xd - mean) * e_inv + invstd * e_mean) +
                           4 * kU *
                               (std::fabs(xd * alpha) + std::fabs(mean * alpha) +
                                std::fabs(bv[ch]) + std::fabs(ref));
          by.add(at, yg[at], ref, rounding(ref, e, d));
        }
    }
    EXPECT_TRUE(bmean.ok()) << dtype_name(d) << " mean: " << bmean.report();
    EXPECT_TRUE(binv.ok()) << dtype_name(d) << " invstd: " << binv.report();
    EXPECT_TRUE(by.ok()) << dtype_name(d) << " y: " << by.report();
    EXPECT_TRUE(brm.ok()) << dtype_name(d) << " running_mean: " << brm.report();
    EXPECT_TRUE(brv.ok()) << dtype_name(d) << " running_var: " << brv.report();

    // Eval: the running statistics normalise; nothing is updated.
    Tensor y2 = be->empty({n, c, h, w}, d);
    be->batch_norm_forward(x, gamma, beta, y2, sm, si, rm, rv, nbt, {false, 0.1f, eps});
    EXPECT_EQ(download_i32(*be, nbt)[0], 1);
    EXPECT_EQ(download_values(*be, rm), rmg);
    const auto y2g = download_values(*be, y2);
    ErrorBudget be2;
    for (int64_t ch = 0; ch < c; ++ch) {
      const double inv = 1.0 / std::sqrt(static_cast<double>(rvg[ch]) + eps);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < p; ++k) {
          const size_t at = static_cast<size_t>((i * c + ch) * p + k);
          const double ref = (xv[at] - static_cast<double>(rmg[ch])) * inv * gv[ch] + bv[ch];
          const double e = 8 * kU *
                           (std::fabs(xv[at] * inv * gv[ch]) + std::fabs(rmg[ch] * inv * gv[ch]) +
                            std::fabs(bv[ch]) + std::fabs(ref));
          be2.add(at, y2g[at], ref, rounding(ref, e, d));
        }
    }
    EXPECT_TRUE(be2.ok()) << dtype_name(d) << " eval y: " << be2.report();
  }
}

// The double reference of the training-mode gradient is checked by central differences first
// (tiny problem), then the backend against it with a bound relative to the magnitudes of the
// terms the float formula combines (each of its two sums is a chain over M).
double bn_objective(const std::vector<double>& x, const std::vector<double>& g,
                    const std::vector<double>& b, const std::vector<double>& dy, int64_t n,
                    int64_t c, int64_t p, double eps) {
  double total = 0;
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) s += x[(i * c + ch) * p + k];
    const double mean = s / (n * p);
    double q = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) q += std::pow(x[(i * c + ch) * p + k] - mean, 2);
    const double inv = 1.0 / std::sqrt(q / (n * p) + eps);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) {
        const size_t at = static_cast<size_t>((i * c + ch) * p + k);
        total += dy[at] * ((x[at] - mean) * inv * g[ch] + b[ch]);
      }
  }
  return total;
}

struct BnGrads {
  std::vector<double> dx, dg, db, scale;  // scale: the magnitude of dx's terms
};

BnGrads bn_backward_ref(const std::vector<double>& x, const std::vector<double>& g,
                        const std::vector<double>& dy, int64_t n, int64_t c, int64_t p,
                        double eps) {
  BnGrads r{std::vector<double>(x.size()), std::vector<double>(c), std::vector<double>(c),
            std::vector<double>(x.size())};
  const double m = static_cast<double>(n * p);
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) s += x[(i * c + ch) * p + k];
    const double mean = s / m;
    double q = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) q += std::pow(x[(i * c + ch) * p + k] - mean, 2);
    const double inv = 1.0 / std::sqrt(q / m + eps);
    double sdy = 0, sdyx = 0, asdy = 0, asdyx = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) {
        const size_t at = static_cast<size_t>((i * c + ch) * p + k);
        const double xhat = (x[at] - mean) * inv;
        sdy += dy[at];
        sdyx += dy[at] * xhat;
        asdy += std::fabs(dy[at]);
        asdyx += std::fabs(dy[at] * xhat);
      }
    r.dg[ch] = sdyx;
    r.db[ch] = sdy;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < p; ++k) {
        const size_t at = static_cast<size_t>((i * c + ch) * p + k);
        const double xhat = (x[at] - mean) * inv;
        r.dx[at] = g[ch] * inv * (dy[at] - sdy / m - xhat * sdyx / m);
        r.scale[at] =
            std::fabs(g[ch]) * inv * (std::fabs(dy[at]) + asdy / m + std::fabs(xhat) * asdyx / m);
      }
  }
  return r;
}

TEST(ConvOps, BatchNormBackwardReferenceMatchesFiniteDifferences) {
  std::mt19937_64 rng(0xfd);
  const int64_t n = 2, c = 2, p = 3;
  const double eps = 1e-5;
  std::vector<double> x(n * c * p), g(c), b(c), dy(n * c * p);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  for (double& v : x) v = u(rng);
  for (double& v : g) v = u(rng);
  for (double& v : b) v = u(rng);
  for (double& v : dy) v = u(rng);
  const BnGrads r = bn_backward_ref(x, g, dy, n, c, p, eps);
  const double h = 1e-6;
  for (size_t k = 0; k < x.size(); ++k) {
    const double x0 = x[k];
    x[k] = x0 + h;
    const double fp = bn_objective(x, g, b, dy, n, c, p, eps);
    x[k] = x0 - h;
    const double fm = bn_objective(x, g, b, dy, n, c, p, eps);
    x[k] = x0;
    EXPECT_NEAR((fp - fm) / (2 * h), r.dx[k], 1e-6 * (1 + r.scale[k])) << "dx " << k;
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    const double g0 = g[ch];
    g[ch] = g0 + h;
    const double fp = bn_objective(x, g, b, dy, n, c, p, eps);
    g[ch] = g0 - h;
    const double fm = bn_objective(x, g, b, dy, n, c, p, eps);
    g[ch] = g0;
    EXPECT_NEAR((fp - fm) / (2 * h), r.dg[ch], 1e-6) << "dgamma " << ch;
  }
}

TEST(ConvOps, BatchNormBackwardWithinFp32Bound) {
  auto be = cpu_backend();
  std::mt19937_64 rng(0xbb);
  const int64_t n = 4, c = 3, h = 4, w = 5, p = h * w, m = n * p;
  const float eps = 1e-5f;
  for (DType d : kFloatDTypes) {
    const auto xv = rounded_values(rng, n * c * p, d);
    const auto dyv = rounded_values(rng, n * c * p, d);
    const auto gv = random_values(rng, c, -1, 1);
    Tensor x = upload_values(*be, {n, c, h, w}, d, xv);
    Tensor gamma = upload_values(*be, {c}, DType::f32, gv);
    Tensor beta = be->zeros({c}, DType::f32);
    Tensor y = be->empty({n, c, h, w}, d);
    Tensor sm = be->empty({c}, DType::f32), si = be->empty({c}, DType::f32);
    Tensor rm = be->zeros({c}, DType::f32), rv = be->zeros({c}, DType::f32);
    be->batch_norm_forward(x, gamma, beta, y, sm, si, rm, rv, Tensor{}, {true, 0.1f, eps});
    Tensor dy = upload_values(*be, {n, c, h, w}, d, dyv);
    Tensor dx = be->empty({n, c, h, w}, d);
    const std::vector<float> g0{0.25f, -0.5f, 1.0f}, b0{2.0f, 0.0f, -1.0f};  // existing grads
    Tensor dg = upload_values(*be, {c}, DType::f32, g0);
    Tensor db = upload_values(*be, {c}, DType::f32, b0);
    be->batch_norm_backward(x, gamma, sm, si, dy, dx, dg, db);
    const BnGrads r = bn_backward_ref(std::vector<double>(xv.begin(), xv.end()),
                                      std::vector<double>(gv.begin(), gv.end()),
                                      std::vector<double>(dyv.begin(), dyv.end()), n, c, p, eps);
    const auto dxg = download_values(*be, dx);
    const auto dgg = download_values(*be, dg), dbg = download_values(*be, db);
    ErrorBudget bx, bg, bb;
    const double e_rel = gamma_n(2 * m + 20);  // the statistics' chains, then ~10 roundings
    for (size_t i = 0; i < dxg.size(); ++i)
      bx.add(i, dxg[i], r.dx[i], rounding(r.dx[i], e_rel * r.scale[i], d));
    for (int64_t ch = 0; ch < c; ++ch) {
      double asdy = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < p; ++k) asdy += std::fabs(dyv[(i * c + ch) * p + k]);
      // sum dy * xhat: |xhat| <= sqrt(M), so its terms are bounded by sqrt(M) sum |dy|.
      bg.add(ch, dgg[ch], g0[ch] + r.dg[ch],
             e_rel * std::sqrt(static_cast<double>(m)) * asdy + kU * std::fabs(g0[ch] + r.dg[ch]));
      bb.add(ch, dbg[ch], b0[ch] + r.db[ch], gamma_n(m + 1) * (asdy + std::fabs(b0[ch])));
    }
    EXPECT_TRUE(bx.ok()) << dtype_name(d) << " dx: " << bx.report();
    EXPECT_TRUE(bg.ok()) << dtype_name(d) << " dgamma: " << bg.report();
    EXPECT_TRUE(bb.ok()) << dtype_name(d) << " dbeta: " << bb.report();
  }
}

TEST(ConvOps, ArgumentChecks) {
  auto be = cpu_backend();
  Tensor x = be->zeros({2, 3, 5, 5}, DType::f32);
  Tensor w = be->zeros({4, 3, 3, 3}, DType::f32);
  Tensor col = be->zeros({27 * 25}, DType::f32);
  expect_invalid_argument(
      [&] {
        be->conv2d_forward(x, w, Tensor{}, be->zeros({2, 4, 4, 4}, DType::f32), {1, 1, 1, 1}, col);
      },
      "wrong conv output size");
  expect_invalid_argument(
      [&] {
        be->conv2d_forward(x, be->zeros({4, 2, 3, 3}, DType::f32), Tensor{},
                           be->zeros({2, 4, 5, 5}, DType::f32), {1, 1, 1, 1}, col);
      },
      "channel mismatch");
  expect_invalid_argument(
      [&] {
        be->conv2d_forward(x, w, Tensor{}, be->zeros({2, 4, 5, 5}, DType::f32), {1, 1, 1, 1},
                           be->zeros({10}, DType::f32));
      },
      "small workspace");
  expect_invalid_argument(
      [&] {
        be->max_pool2d_forward(x, be->zeros({2, 3, 3, 3}, DType::f32),
                               be->zeros({2, 3, 3, 3}, DType::i32), {2, 2, 2, 2, 0, 0, false});
      },
      "wrong pool output size");
  Tensor one = be->zeros({1, 3, 1, 1}, DType::f32);
  Tensor c3 = be->zeros({3}, DType::f32);
  expect_invalid_argument(
      [&] {
        be->batch_norm_forward(one, c3, c3, be->zeros({1, 3, 1, 1}, DType::f32), c3, c3, c3, c3,
                               Tensor{}, {});
      },
      "one value per channel in training");
}

}  // namespace
}  // namespace ampctl::test
