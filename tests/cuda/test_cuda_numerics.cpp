// The CUDA backend against the CPU reference: round_counted (backend.h, "gradient numerics"),
// bitwise, counters included. The harness and the comparison rules: cpu_vs_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

// round_counted (backend.h, "gradient numerics"): the rounded values and every counter (the
// int64 words compared as i32 pairs, bit for bit) over values from f32's subnormals to past
// 65504, with zeros, infinities and NaNs; two calls into one counters row (accumulation).
void add_round_counted_cases(std::vector<CudaCase>& cases) {
  for (DType dst : {DType::f16, DType::bf16}) {
    CudaCase c;
    c.name = std::string("round_counted_to_") + dtype_name(dst);
    c.make_inputs = [](std::mt19937_64& rng) {
      std::vector<float> v = random_with_specials(rng, 40000, -149, 127, 0.01);
      for (size_t i = 0; i < v.size(); i += 17) v[i] = 0.0f;
      for (size_t i = 5; i < v.size(); i += 29) v[i] = std::ldexp(v[i], -30);  // near 2^-25
      return std::vector<HostInput>{from_values({static_cast<int64_t>(v.size())}, DType::f32, v)};
    };
    c.run = [dst](Backend& be, std::vector<Tensor>& in) {
      const Tensor& src = in[0];
      const auto n = static_cast<int64_t>(src.numel());
      Tensor out = be.zeros({n}, dst);
      Tensor counters = be.zeros({numerics::kWords}, DType::i32);
      be.round_counted(src.view(0, {n / 2}), out.view(0, {n / 2}), counters);
      be.round_counted(src.view(static_cast<size_t>(n / 2), {n - n / 2}),
                       out.view(static_cast<size_t>(n / 2), {n - n / 2}), counters);
      return std::vector<Tensor>{out, counters};
    };
    cases.push_back(std::move(c));
  }
}

std::vector<CudaCase> numerics_cases() {
  std::vector<CudaCase> cases;
  add_round_counted_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Numerics, numerics_cases);

}  // namespace
}  // namespace ampctl::test
