// The fused residual/LayerNorm ops and the in-place classifier (backend.h) on the CPU backend:
// each against the unfused ops it stands for, bit for bit, and against the element formula it
// promises computed on the host (sum = float(x) + float(r) rounded once; dx = round(dx0 + t)),
// plus the calls they refuse. The CUDA backend's fused kernels are checked against these
// compositions in tests/cuda/test_cuda_nn.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

constexpr float kEps = 1e-5f;

std::string name_of(DType d) {
  return dtype_name(d);
}

struct Shape2 {
  int64_t rows, cols;
};

// Rows with an offset each, so the mean matters (as the LayerNorm tests' inputs).
std::vector<float> shifted_rows(std::mt19937_64& rng, Shape2 s) {
  std::vector<float> v = random_values(rng, static_cast<size_t>(s.rows * s.cols), -4, 2);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float shift = random_value(rng, -2, 3);
    for (int64_t j = 0; j < s.cols; ++j) v[static_cast<size_t>(r * s.cols + j)] += shift;
  }
  return v;
}

TEST(FusedNormOps, ResidualLayerNormIsAddThenLayerNorm) {
  auto be = cpu_backend(2);
  const Shape2 shapes[] = {{37, 45}, {5, 1024}, {1, 1}, {64, 33}, {19, 768}};
  for (const Shape2 s : shapes) {
    for (DType rt : {DType::f32, DType::f16, DType::bf16}) {
      for (DType yt : {DType::f32, DType::f16, DType::bf16}) {
        for (bool in_place : {false, true}) {
          const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.cols) + " r " +
                                   name_of(rt) + " y " + name_of(yt) +
                                   (in_place ? " in place" : "");
          std::mt19937_64 rng(static_cast<uint64_t>(s.rows * 131 + s.cols) +
                              static_cast<uint64_t>(rt) * 7 + static_cast<uint64_t>(yt));
          const std::vector<float> xv = shifted_rows(rng, s);
          const std::vector<float> rv =
              random_values(rng, static_cast<size_t>(s.rows * s.cols), -5, 1);
          const std::vector<float> gv = random_values(rng, static_cast<size_t>(s.cols), -1, 0);
          const std::vector<float> bv = random_values(rng, static_cast<size_t>(s.cols), -3, -1);
          const Shape rc{s.rows, s.cols};
          const Tensor x = upload_values(*be, rc, DType::f32, xv);
          const Tensor r = upload_values(*be, rc, rt, rv);
          const Tensor gamma = upload_values(*be, {s.cols}, DType::f32, gv);
          const Tensor beta = upload_values(*be, {s.cols}, DType::f32, bv);

          // The unfused ops, as the GPT ran them.
          const Tensor sum0 = be->empty(rc, DType::f32);
          const Tensor y0 = be->empty(rc, yt);
          const Tensor m0 = be->empty({s.rows}, DType::f32), s0 = be->empty({s.rows}, DType::f32);
          be->copy(sum0, x);
          be->add_(sum0, r);
          be->layer_norm_forward(sum0, gamma, beta, y0, m0, s0, kEps);

          const Tensor x1 = upload_values(*be, rc, DType::f32, xv);
          const Tensor sum1 = in_place ? x1 : be->empty(rc, DType::f32);
          const Tensor y1 = be->empty(rc, yt);
          const Tensor m1 = be->empty({s.rows}, DType::f32), s1 = be->empty({s.rows}, DType::f32);
          be->residual_layer_norm_forward(x1, r, sum1, gamma, beta, y1, m1, s1, kEps);

          // sum is float(x) + float(r), rounded once, element by element.
          const std::vector<float> rr = download_values(*be, r);
          const std::vector<float> got_sum = download_values(*be, sum1);
          size_t bad = 0;
          for (size_t i = 0; i < xv.size(); ++i) {
            if (std::bit_cast<uint32_t>(got_sum[i]) != std::bit_cast<uint32_t>(xv[i] + rr[i])) {
              ++bad;
            }
          }
          EXPECT_EQ(bad, 0u) << what << ": sum is not x + r";
          EXPECT_EQ(download_bits(*be, sum1), download_bits(*be, sum0)) << what << ": sum";
          EXPECT_EQ(download_bits(*be, y1), download_bits(*be, y0)) << what << ": y";
          EXPECT_EQ(download_bits(*be, m1), download_bits(*be, m0)) << what << ": mean";
          EXPECT_EQ(download_bits(*be, s1), download_bits(*be, s0)) << what << ": rstd";
        }
      }
    }
  }
}

TEST(FusedNormOps, LayerNormBackwardAccumulateIsBackwardThenAdd) {
  auto be = cpu_backend(2);
  struct Variant {
    Shape2 s;
    DType x, dy, dx;
    bool params;
  };
  const Variant variants[] = {
      {{37, 45}, DType::f32, DType::f16, DType::f32, true},
      {{300, 64}, DType::f32, DType::bf16, DType::f32, true},
      {{5, 1024}, DType::f32, DType::f32, DType::f32, false},
      {{21, 33}, DType::f16, DType::f16, DType::f16, true},
      {{8, 100}, DType::f32, DType::f16, DType::bf16, false},
  };
  for (const Variant& v : variants) {
    const Shape2 s = v.s;
    const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.cols) + " x " +
                             name_of(v.x) + " dy " + name_of(v.dy) + " dx " + name_of(v.dx) +
                             (v.params ? "" : " no param grads");
    std::mt19937_64 rng(static_cast<uint64_t>(s.rows * 977 + s.cols) + static_cast<uint64_t>(v.dx));
    const Shape rc{s.rows, s.cols};
    const auto n = static_cast<size_t>(s.rows * s.cols);
    const Tensor x = upload_values(*be, rc, v.x, shifted_rows(rng, s));
    const Tensor gamma = upload_values(*be, {s.cols}, DType::f32,
                                       random_values(rng, static_cast<size_t>(s.cols), -1, 0));
    const Tensor beta = be->zeros({s.cols}, DType::f32);
    const Tensor y = be->empty(rc, v.x);
    const Tensor mean = be->empty({s.rows}, DType::f32), rstd = be->empty({s.rows}, DType::f32);
    be->layer_norm_forward(x, gamma, beta, y, mean, rstd, kEps);
    const Tensor dy = upload_values(*be, rc, v.dy, random_values(rng, n, -8, 0));
    const std::vector<float> dx_start = random_values(rng, n, -6, 0);
    const std::vector<float> dg_start = random_values(rng, static_cast<size_t>(s.cols), -4, 0);
    const std::vector<float> db_start = random_values(rng, static_cast<size_t>(s.cols), -4, 0);

    // The unfused ops: backward into an f32 t, then add_.
    const Tensor dx0 = upload_values(*be, rc, v.dx, dx_start);
    const Tensor dg0 = upload_values(*be, {s.cols}, DType::f32, dg_start);
    const Tensor db0 = upload_values(*be, {s.cols}, DType::f32, db_start);
    const Tensor t = be->empty(rc, DType::f32);
    be->layer_norm_backward(x, gamma, mean, rstd, dy, t, v.params ? dg0 : Tensor{},
                            v.params ? db0 : Tensor{});
    const std::vector<float> start = download_values(*be, dx0);
    be->add_(dx0, t);

    const Tensor dx1 = upload_values(*be, rc, v.dx, dx_start);
    const Tensor dg1 = upload_values(*be, {s.cols}, DType::f32, dg_start);
    const Tensor db1 = upload_values(*be, {s.cols}, DType::f32, db_start);
    const Tensor scratch = be->empty({static_cast<int64_t>(n) + 5}, DType::f32);  // larger is fine
    be->layer_norm_backward_accumulate(x, gamma, mean, rstd, dy, dx1, v.params ? dg1 : Tensor{},
                                       v.params ? db1 : Tensor{}, scratch);

    // dx = round_dx(dx_start + t), element by element.
    const std::vector<float> tv = download_values(*be, t);
    const std::vector<uint32_t> got = download_bits(*be, dx1);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != encode(start[i] + tv[i], v.dx)) ++bad;
    }
    EXPECT_EQ(bad, 0u) << what << ": dx is not round(dx + t)";
    EXPECT_EQ(got, download_bits(*be, dx0)) << what << ": dx";
    EXPECT_EQ(download_bits(*be, dg1), download_bits(*be, dg0)) << what << ": dgamma";
    EXPECT_EQ(download_bits(*be, db1), download_bits(*be, db0)) << what << ": dbeta";
  }
}

TEST(FusedNormOps, RefuseWrongArguments) {
  auto be = cpu_backend(1);
  const Tensor buf = be->zeros({4 * 8 + 4}, DType::f32);
  const Tensor x = buf.view(0, {4, 8});
  const Tensor r = be->zeros({4, 8}, DType::f16);
  const Tensor sum = be->zeros({4, 8}, DType::f32);
  const Tensor g = be->zeros({8}, DType::f32), b = be->zeros({8}, DType::f32);
  const Tensor y = be->zeros({4, 8}, DType::f16);
  const Tensor m = be->zeros({4}, DType::f32), s = be->zeros({4}, DType::f32);
  expect_invalid_argument(
      [&] {
        be->residual_layer_norm_forward(x, r, buf.view(4, {4, 8}), g, b, y, m, s, kEps);
      },
      "sum overlapping x without being it");
  expect_invalid_argument(
      [&] { be->residual_layer_norm_forward(x, r, sum, g, b, sum, m, s, kEps); }, "y is sum");
  expect_invalid_argument([&] { be->residual_layer_norm_forward(r, x, sum, g, b, y, m, s, kEps); },
                          "f16 x");
  expect_invalid_argument(
      [&] {
        be->residual_layer_norm_forward(x, r, be->zeros({4, 8}, DType::f16), g, b, y, m, s, kEps);
      },
      "f16 sum");
  expect_invalid_argument([&] { be->residual_layer_norm_forward(x, r, sum, g, b, y, m, m, kEps); },
                          "mean is rstd");
  expect_invalid_argument(
      [&] {
        be->residual_layer_norm_forward(x, be->zeros({4, 7}, DType::f16), sum, g, b, y, m, s, kEps);
      },
      "r of another shape");

  const Tensor dy = be->zeros({4, 8}, DType::f16);
  const Tensor dx = be->zeros({4, 8}, DType::f32);
  const Tensor scratch = be->zeros({32}, DType::f32);
  expect_invalid_argument(
      [&] { be->layer_norm_backward_accumulate(sum, g, m, s, dy, dx, g, b, Tensor{}); },
      "no scratch on a backend that composes it");
  expect_invalid_argument(
      [&] { be->layer_norm_backward_accumulate(sum, g, m, s, dy, dx, g, b, buf.view(0, {31})); },
      "scratch too small");
  expect_invalid_argument(
      [&] { be->layer_norm_backward_accumulate(sum, g, m, s, dx, dx, g, b, scratch); }, "dx is dy");
  expect_invalid_argument(
      [&] { be->layer_norm_backward_accumulate(sum, g, m, s, dy, dx, g, b, dx); }, "scratch is dx");
  expect_invalid_argument(
      [&] { be->layer_norm_backward_accumulate(sum, g, m, s, dy, Tensor{}, g, b, scratch); },
      "undefined dx");
}

// softmax_cross_entropy with dlogits = logits (in place) gives the out-of-place op's loss,
// correct count and gradient bits, on shapes that take the threaded row path and the small one.
TEST(FusedNormOps, CrossEntropyInPlaceIsOutOfPlace) {
  auto be = cpu_backend(2);
  const Shape2 shapes[] = {{64, 1000}, {3, 7}, {130, 65}, {1, 1}};
  for (const Shape2 s : shapes) {
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      const std::string what =
          std::to_string(s.rows) + "x" + std::to_string(s.cols) + " " + name_of(d);
      std::mt19937_64 rng(static_cast<uint64_t>(s.rows * 31 + s.cols) + static_cast<uint64_t>(d));
      const auto n = static_cast<size_t>(s.rows * s.cols);
      std::vector<float> lv = random_values(rng, n, -3, 3);
      std::vector<int32_t> labels(static_cast<size_t>(s.rows));
      for (auto& l : labels) l = static_cast<int32_t>(rng() % static_cast<uint64_t>(s.cols));
      const Shape rc{s.rows, s.cols};
      const Tensor lab = upload_i32(*be, {s.rows}, labels);
      const Tensor scale = scalar_f32(*be, 1024.0f);
      const Tensor logits0 = upload_values(*be, rc, d, lv);
      const Tensor dl0 = be->empty(rc, d);
      const Tensor loss0 = be->empty({1}, DType::f32), loss1 = be->empty({1}, DType::f32);
      const Tensor c0 = be->empty({1}, DType::i32), c1 = be->empty({1}, DType::i32);
      be->softmax_cross_entropy(logits0, lab, loss0, c0, dl0, scale);
      const Tensor logits1 = upload_values(*be, rc, d, lv);
      be->softmax_cross_entropy(logits1, lab, loss1, c1, logits1, scale);
      EXPECT_EQ(download_bits(*be, loss1), download_bits(*be, loss0)) << what << ": loss";
      EXPECT_EQ(download_i32(*be, c1), download_i32(*be, c0)) << what << ": correct";
      EXPECT_EQ(download_bits(*be, logits1), download_bits(*be, dl0)) << what << ": dlogits";
    }
  }
  // A partial overlap is refused.
  const Tensor buf = be->zeros({2 * 8 + 8}, DType::f32);
  expect_invalid_argument(
      [&] {
        be->softmax_cross_entropy(buf.view(0, {2, 8}), upload_i32(*be, {2}, {0, 1}),
                                  be->empty({1}, DType::f32), Tensor{}, buf.view(8, {2, 8}),
                                  scalar_f32(*be, 1.0f));
      },
      "dlogits overlapping the logits without being them");
}

}  // namespace
}  // namespace ampctl::test
