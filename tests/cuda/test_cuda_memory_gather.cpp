// gather_rows on the GPU equals the CPU backend's bitwise (it only moves words), including
// out-of-range indices, which the GPU clamps (the CPU rejects them, so they are not compared).
#include <gtest/gtest.h>

#include <random>

#include "ampctl/backend/backend.h"

namespace ampctl {
namespace {

TEST(CudaGatherRows, MatchesCpuBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto cpu = make_cpu_backend(1);
  auto gpu = make_cuda_backend(0);
  std::mt19937 rng(11);
  for (int64_t w : {1, 3, 784}) {
    const int64_t n = 301, rows = 64, offset = 17;
    std::vector<float> src(n * w);
    for (auto& v : src) v = std::normal_distribution<float>(0, 3)(rng);
    std::vector<int32_t> index(offset + rows);
    for (auto& v : index) v = std::uniform_int_distribution<int32_t>(0, n - 1)(rng);
    std::vector<float> want(rows * w), got(rows * w);
    for (Backend* b : {cpu.get(), gpu.get()}) {
      Tensor s = b->from_host({n, w}, DType::f32, src.data());
      Tensor idx = b->from_host({offset + rows}, DType::i32, index.data());
      Tensor d = b->empty({rows, w}, DType::f32);
      b->gather_rows(s, idx, offset, d);
      b->download(b == cpu.get() ? want.data() : got.data(), d);
    }
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "w=" << w;
  }
}

}  // namespace
}  // namespace ampctl
