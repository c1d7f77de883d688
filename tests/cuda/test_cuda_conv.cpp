// The CUDA backend against the CPU reference: the convolution ops (backend.h, "convolution
// ops"). The harness and the comparison rules: cpu_vs_cuda.h.
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

// ---- convolution ops (backend.h, "convolution ops") ----

// conv2d forward / backward through im2col and each backend's gemm: two float orders of the same
// sums (cuBLAS may use tensor cores that truncate products: u = 2^-23), so |cuda - cpu| <=
// 2 gamma_n(2^-23) sum |terms| per output, n the chain length (C*k*k + 1 forward, O + k*k for dx,
// N*OH*OW for dw and db). Pooling runs the same float operations in the same order: bitwise.
// BatchNorm: the statistics' sums are reassociated (one block tree on the GPU); the bound is the
// first-order propagation of 2 gamma_M(u) through mean, variance and the affine map.
void add_conv_cases(std::vector<CudaCase>& cases) {
  constexpr double kUTc = 0x1p-23;
  struct Variant {
    DType d;
    int64_t n, c, h, w, o, k, stride, pad;
  };
  const Variant variants[] = {{DType::f32, 2, 3, 9, 7, 5, 3, 1, 1},
                              {DType::f16, 3, 4, 8, 8, 6, 3, 2, 1},
                              {DType::bf16, 2, 2, 6, 5, 3, 5, 1, 2}};
  for (const Variant& v : variants) {
    const int64_t oh = conv_out_size(v.h, v.k, v.stride, v.pad);
    const int64_t ow = conv_out_size(v.w, v.k, v.stride, v.pad);
    const int64_t kk = v.c * v.k * v.k;
    const Conv2dGeometry g{v.stride, v.stride, v.pad, v.pad};
    CudaCase c;
    c.name = "conv2d_" + tag(v.d) + "_k" + std::to_string(v.k) + "_s" + std::to_string(v.stride);
    c.make_inputs = [=](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({v.n, v.c, v.h, v.w}, v.d, random_values(rng, v.n * v.c * v.h * v.w, -2, 1)),
          from_values({v.o, v.c, v.k, v.k}, v.d, random_values(rng, v.o * kk, -2, 1)),
          from_values({v.o}, v.d, random_values(rng, v.o, -2, 1)),
          from_values({v.n, v.o, oh, ow}, v.d, random_values(rng, v.n * v.o * oh * ow, -2, 1))};
    };
    c.run = [=](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty({v.n, v.o, oh, ow}, v.d);
      Tensor dx = be.empty({v.n, v.c, v.h, v.w}, v.d);
      Tensor dw = be.empty({v.o, v.c, v.k, v.k}, v.d);
      Tensor db = be.empty({v.o}, v.d);
      Tensor col = be.empty({kk * oh * ow}, v.d);
      Tensor dcol = be.empty({kk * oh * ow}, DType::f32);
      Tensor acc = be.empty({v.o * kk}, DType::f32);
      be.conv2d_forward(in[0], in[1], in[2], y, g, col);
      be.conv2d_backward_input(in[3], in[1], dx, g, dcol);
      be.conv2d_backward_weight(in[0], in[3], dw, db, g, col, acc);
      return std::vector<Tensor>{y, dx, dw, db};
    };
    c.specs = [=](const std::vector<HostInput>& in, const std::vector<std::vector<double>>&) {
      const auto x = in[0].values(), w = in[1].values(), b = in[2].values(), dy = in[3].values();
      std::vector<double> sy(v.n * v.o * oh * ow), sx(x.size()), sw(w.size()), sb(v.o);
      for (int64_t n = 0; n < v.n; ++n)
        for (int64_t o = 0; o < v.o; ++o)
          for (int64_t a = 0; a < oh; ++a)
            for (int64_t q = 0; q < ow; ++q) {
              const size_t yo = static_cast<size_t>(((n * v.o + o) * oh + a) * ow + q);
              sy[yo] += std::fabs(b[o]);
              sb[o] += std::fabs(dy[yo]);
              for (int64_t ch = 0; ch < v.c; ++ch)
                for (int64_t i = 0; i < v.k; ++i)
                  for (int64_t j = 0; j < v.k; ++j) {
                    const int64_t ih = a * v.stride - v.pad + i, iw = q * v.stride - v.pad + j;
                    if (ih < 0 || ih >= v.h || iw < 0 || iw >= v.w) continue;
                    const size_t xi = static_cast<size_t>(((n * v.c + ch) * v.h + ih) * v.w + iw);
                    const size_t wi = static_cast<size_t>(((o * v.c + ch) * v.k + i) * v.k + j);
                    sy[yo] += std::fabs(x[xi] * w[wi]);
                    sx[xi] += std::fabs(dy[yo] * w[wi]);
                    sw[wi] += std::fabs(dy[yo] * x[xi]);
                  }
            }
      auto scaled = [](std::vector<double> s, double n, double u) {
        for (double& e : s) e *= 2.0 * gamma_n(n, u);
        return s;
      };
      const double np = static_cast<double>(v.n * oh * ow);
      return std::vector<Spec>{within(scaled(sy, kk + 1, kUTc)),
                               within(scaled(sx, v.o + v.k * v.k, kUTc)),
                               within(scaled(sw, np, kUTc)), within(scaled(sb, np, kU))};
    };
    cases.push_back(c);
  }
  // Pooling: max (ties from small integers), average and adaptive average, forward and backward.
  struct PoolVariant {
    const char* name;
    DType d;
    Pool2dGeometry g;
    int64_t oh, ow;
  };
  const PoolVariant pools[] = {{"max_k2", DType::f16, {2, 2, 2, 2, 0, 0, false}, 3, 3},
                               {"max_k3_s1", DType::f32, {3, 3, 1, 1, 1, 1, false}, 7, 6},
                               {"avg_k3_s2", DType::bf16, {3, 3, 2, 2, 1, 1, false}, 4, 3},
                               {"adaptive_3x2", DType::f32, {1, 1, 1, 1, 0, 0, true}, 3, 2}};
  for (const PoolVariant& pv : pools) {
    const bool is_max = std::string(pv.name).rfind("max", 0) == 0;
    CudaCase c;
    c.name = std::string("pool2d_") + pv.name + "_" + tag(pv.d);
    c.make_inputs = [=](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({2, 3, 7, 6}, pv.d, small_integers(rng, 2 * 3 * 7 * 6, -3, 3)),
          from_values({2, 3, pv.oh, pv.ow}, pv.d, random_values(rng, 6 * pv.oh * pv.ow, -3, 2))};
    };
    c.run = [=](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty({2, 3, pv.oh, pv.ow}, pv.d);
      Tensor dx = be.empty({2, 3, 7, 6}, pv.d);
      if (is_max) {
        Tensor idx = be.empty({2, 3, pv.oh, pv.ow}, DType::i32);
        be.max_pool2d_forward(in[0], y, idx, pv.g);
        be.max_pool2d_backward(in[1], idx, dx, pv.g);
        return std::vector<Tensor>{y, idx, dx};
      }
      be.avg_pool2d_forward(in[0], y, pv.g);
      be.avg_pool2d_backward(in[1], dx, pv.g);
      return std::vector<Tensor>{y, dx};
    };
    cases.push_back(c);  // bitwise: the same operations in the same order
  }
  // BatchNorm2d, training forward then backward.
  for (DType d : {DType::f32, DType::f16}) {
    const int64_t n = 5, ch = 4, p = 6 * 7;
    CudaCase c;
    c.name = "batch_norm_" + tag(d);
    c.make_inputs = [=](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({n, ch, 6, 7}, d, random_values(rng, n * ch * p, -2, 1)),
          from_values({ch}, DType::f32, uniform_values(rng, ch, 0.5f, 1.5f)),
          from_values({ch}, DType::f32, uniform_values(rng, ch, -0.5f, 0.5f)),
          from_values({n, ch, 6, 7}, d, random_values(rng, n * ch * p, -2, 1))};
    };
    c.run = [=](Backend& be, std::vector<Tensor>& in) {
      Tensor y = be.empty({n, ch, 6, 7}, d), dx = be.empty({n, ch, 6, 7}, d);
      Tensor sm = be.empty({ch}, DType::f32), si = be.empty({ch}, DType::f32);
      Tensor rm = be.zeros({ch}, DType::f32), rv = be.zeros({ch}, DType::f32);
      Tensor dg = be.zeros({ch}, DType::f32), db = be.zeros({ch}, DType::f32);
      Tensor nbt = be.zeros(Shape{}, DType::i32);
      be.batch_norm_forward(in[0], in[1], in[2], y, sm, si, rm, rv, nbt, {true, 0.1f, 1e-5f});
      be.batch_norm_backward(in[0], in[1], sm, si, in[3], dx, dg, db);
      return std::vector<Tensor>{y, sm, si, rm, rv, nbt, dx, dg, db};
    };
    c.specs = [=](const std::vector<HostInput>& in, const std::vector<std::vector<double>>& want) {
      // Relative to each channel's magnitudes: e = 2 gamma_{M + 8}(u) covers the reassociated
      // sums and the handful of roundings after them, propagated to first order.
      const auto x = in[0].values(), gam = in[1].values(), dy = in[3].values();
      const double m = static_cast<double>(n * p), e = 2.0 * gamma_n(m + 8, kU);
      std::vector<double> dy_(x.size()), dsm(ch), dsi(ch), drm(ch), drv(ch), ddx(x.size()), ddg(ch),
          ddb(ch);
      for (int64_t k = 0; k < ch; ++k) {
        double ax = 0, ady = 0, adyx = 0;
        const double mean = want[1][k], inv = want[2][k];
        for (int64_t i = 0; i < n; ++i)
          for (int64_t q = 0; q < p; ++q) {
            const size_t at = static_cast<size_t>((i * ch + k) * p + q);
            ax += std::fabs(x[at]);
            ady += std::fabs(dy[at]);
            adyx += std::fabs(dy[at] * (x[at] - mean)) * inv;
          }
        const double e_mean = e * ax / m;
        const double e_inv = e * 4.0 * inv + inv * inv * inv * e_mean * ax / m;
        dsm[k] = e_mean;
        dsi[k] = e_inv;
        drm[k] = e_mean;
        drv[k] = e * 4.0 * std::fabs(want[4][k]) + 2 * e_mean * ax / m;
        ddg[k] = e * (adyx + ady) * 4.0 + adyx * e_inv / inv;
        ddb[k] = e * ady;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t q = 0; q < p; ++q) {
            const size_t at = static_cast<size_t>((i * ch + k) * p + q);
            const double xh = std::fabs(x[at] - mean) * inv;
            dy_[at] = std::fabs(gam[k]) * (xh * e_inv / inv + inv * e_mean) +
                      e * 4.0 * std::fabs(want[0][at]) + e * std::fabs(gam[k]) * (xh + 1.0);
            ddx[at] = std::fabs(gam[k]) * inv *
                      (e * 8.0 * (std::fabs(dy[at]) + ady / m + (xh + 1.0) * adyx / m) +
                       (xh + 1.0) * (adyx / m) * (e_inv / inv + e_mean * inv) +
                       e_inv / inv * std::fabs(dy[at]));
          }
      }
      return std::vector<Spec>{within(dy_), within(dsm), within(dsi), within(drm), within(drv),
                               bitwise(),   within(ddx), within(ddg), within(ddb)};
    };
    cases.push_back(c);
  }
}

std::vector<CudaCase> conv_cases() {
  std::vector<CudaCase> cases;
  add_conv_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Conv, conv_cases);

}  // namespace
}  // namespace ampctl::test
