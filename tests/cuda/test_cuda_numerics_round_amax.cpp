// round_amax (backend.h, grad_amax) on the GPU equals the CPU backend's bitwise: the rounded
// values and both accumulator words, over random values in every binade, with an inf and a NaN
// in a second pass, in two calls that accumulate (a max over both halves, as the layers'
// roundings of one step do).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

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

}  // namespace
}  // namespace ampctl
