// gather_rows on the CPU backend: rows picked by index equal a direct copy, for f32 and i32,
// for 1-D and 2-D sources, at an offset into the index; bad indices and shapes are errors.
#include <gtest/gtest.h>

#include <random>

#include "ampctl/backend/backend.h"

namespace ampctl {
namespace {

TEST(GatherRows, PicksRowsByIndexAtAnOffset) {
  auto b = make_cpu_backend(1);
  std::mt19937 rng(5);
  const int64_t n = 37, w = 13, rows = 9, offset = 4;
  std::vector<float> src(n * w);
  for (auto& v : src) v = std::uniform_real_distribution<float>(-5, 5)(rng);
  std::vector<int32_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i * 7 % 10);
  std::vector<int32_t> index(offset + rows + 3);
  for (auto& v : index) v = std::uniform_int_distribution<int32_t>(0, n - 1)(rng);
  Tensor s = b->from_host({n, w}, DType::f32, src.data());
  Tensor l = b->from_host({n}, DType::i32, labels.data());
  Tensor idx = b->from_host({static_cast<int64_t>(index.size())}, DType::i32, index.data());
  Tensor d = b->empty({rows, w}, DType::f32);
  Tensor dl = b->empty({rows}, DType::i32);
  b->gather_rows(s, idx, offset, d);
  b->gather_rows(l, idx, offset, dl);
  std::vector<float> got(rows * w);
  std::vector<int32_t> got_l(rows);
  b->download(got.data(), d);
  b->download(got_l.data(), dl);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t k = index[offset + r];
    EXPECT_EQ(got_l[r], labels[k]) << "row " << r;
    for (int64_t c = 0; c < w; ++c) EXPECT_EQ(got[r * w + c], src[k * w + c]) << r << "," << c;
  }
}

TEST(GatherRows, RejectsBadIndicesAndShapes) {
  auto b = make_cpu_backend(1);
  Tensor s = b->zeros({4, 3}, DType::f32);
  Tensor d = b->zeros({2, 3}, DType::f32);
  const int32_t bad[] = {0, 4};
  Tensor idx = b->from_host({2}, DType::i32, bad);
  EXPECT_THROW(b->gather_rows(s, idx, 0, d), Error);  // index 4 is out of range
  EXPECT_THROW(b->gather_rows(s, idx, 1, d), Error);  // offset + rows past the index
  Tensor wrong = b->zeros({2, 2}, DType::f32);
  const int32_t ok[] = {0, 3};
  Tensor idx_ok = b->from_host({2}, DType::i32, ok);
  EXPECT_THROW(b->gather_rows(s, idx_ok, 0, wrong), Error);  // row widths differ
  Tensor h = b->zeros({2, 3}, DType::f16);
  EXPECT_THROW(b->gather_rows(s, idx_ok, 0, h), Error);  // dtypes differ
  b->gather_rows(s, idx_ok, 0, d);
}

}  // namespace
}  // namespace ampctl
