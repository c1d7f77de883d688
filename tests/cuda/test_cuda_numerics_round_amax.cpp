// round_amax (backend.h, grad_amax) on the GPU equals the CPU backend's bitwise: the rounded
// values and both accumulator words, over random values in every binade, with an inf and a NaN
// in a second pass, in two calls that accumulate (a max over both halves, as the layers'
// roundings of one step do). gemm_round_amax (the CUDA side runs the default composition,
// cuBLAS's product then round_amax) agrees with the CPU's fused epilogue within the product's
// bound: non-negative operands, so no cancellation, each output within gamma_{k+2} of the other
// in float (Higham 3.1, both orders), each lowp output within one step of the other, the amax
// within the float bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/numerics_math.h"

namespace ampctl {
namespace {

TEST(CudaRoundAmax, MatchesCpuBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto cpu = make_cpu_backend(2);
  auto gpu = make_cuda_backend(0);
  std::mt19937 rng(29);
  const int64_t n = 1 << 18;
  std::vector<float> src(n);
  for (auto& v : src) {
    const uint32_t bits = (rng() & ~(0xffu << 23)) | ((rng() % 255u) << 23);  // finite
    std::memcpy(&v, &bits, sizeof v);
  }
  for (bool poison : {false, true}) {
    if (poison) {
      src[12345] = std::numeric_limits<float>::infinity();
      src[n - 3] = std::numeric_limits<float>::quiet_NaN();
    }
    for (DType dst : {DType::f16, DType::bf16}) {
      std::vector<uint16_t> want(n), got(n);
      float want_amax[numerics::kAmaxWords], got_amax[numerics::kAmaxWords];
      for (Backend* b : {cpu.get(), gpu.get()}) {
        Tensor s = b->from_host({n}, DType::f32, src.data());
        Tensor d = b->zeros({n}, dst);
        Tensor amax = b->zeros({numerics::kAmaxWords}, DType::f32);
        b->round_amax(s.view(0, {n / 2}), d.view(0, {n / 2}), amax);
        b->round_amax(s.view(static_cast<size_t>(n / 2), {n - n / 2}),
                      d.view(static_cast<size_t>(n / 2), {n - n / 2}), amax);
        const bool is_cpu = b == cpu.get();
        b->download(is_cpu ? want.data() : got.data(), d);
        b->download(is_cpu ? want_amax : got_amax, amax);
      }
      const std::string what = std::string(dtype_name(dst)) + (poison ? ", inf and NaN" : "");
      EXPECT_EQ(want, got) << what;
      EXPECT_EQ(0, std::memcmp(want_amax, got_amax, sizeof want_amax)) << what;
      EXPECT_EQ(want_amax[1], poison ? 1.0f : 0.0f) << what;
    }
  }
}

TEST(CudaGemmRoundAmax, MatchesCpuWithinTheProductsBound) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto cpu = make_cpu_backend(2);
  auto gpu = make_cuda_backend(0);
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> dist(0.0f, 4.0f);
  const int64_t m = 96, n = 80, k = 300;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (auto& v : a) v = dist(rng);
  for (auto& v : b) v = dist(rng);
  const double gamma = (k + 2) * std::ldexp(1.0, -24) / (1 - (k + 2) * std::ldexp(1.0, -24));
  for (DType dtype : {DType::f16, DType::bf16}) {
    std::vector<uint16_t> bits[2];
    float amax[2][numerics::kAmaxWords];
    for (int side = 0; side < 2; ++side) {
      Backend& be = side == 0 ? *cpu : *gpu;
      Tensor ta = be.empty({m, k}, dtype), tb = be.empty({k, n}, dtype);
      be.cast(be.from_host({m, k}, DType::f32, a.data()), ta);
      be.cast(be.from_host({k, n}, DType::f32, b.data()), tb);
      Tensor c = be.zeros({m, n}, dtype), acc = be.zeros({numerics::kAmaxWords}, DType::f32);
      Tensor scratch = be.zeros({m * n}, DType::f32);
      be.gemm_round_amax(ta, false, tb, false, c, acc, scratch);
      bits[side].resize(static_cast<size_t>(m * n));
      be.download(bits[side].data(), c);
      be.download(amax[side], acc);
    }
    const std::string what = dtype_name(dtype);
    for (size_t i = 0; i < bits[0].size(); ++i) {
      ASSERT_LE(std::abs(int{bits[0][i]} - int{bits[1][i]}), 1) << what << " at " << i;
    }
    EXPECT_GT(amax[0][0], 0.0f) << what;
    EXPECT_LE(std::fabs(double{amax[0][0]} - double{amax[1][0]}), 2 * gamma * amax[0][0]) << what;
    EXPECT_EQ(amax[0][1], 0.0f) << what;
    EXPECT_EQ(amax[1][1], 0.0f) << what;
  }
}

}  // namespace
}  // namespace ampctl
