// The CUDA backend against the CPU reference: casts, fill and the elementwise ops (backend.h,
// "memory", "casts and elementwise"), bitwise (the same per-element code on both sides: half.h,
// amp_math.h); the backend's description and its refusal of wrong arguments. The harness and the
// comparison rules: cpu_vs_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "cpu_vs_cuda.h"

namespace ampctl::test {
namespace {

void add_cast_cases(std::vector<CudaCase>& cases) {
  const DType all[] = {DType::f32, DType::f16, DType::bf16, DType::i32};
  for (DType src : all) {
    for (DType dst : all) {
      CudaCase c;
      c.name = std::string("cast_") + dtype_name(src) + "_to_" + dtype_name(dst);
      c.make_inputs = [src, dst](std::mt19937_64& rng) {
        std::vector<uint32_t> bits;
        if (src == DType::f16 || src == DType::bf16) {
          // Every 16-bit pattern: all the finite values, both infinities, every NaN.
          for (uint32_t b = 0; b < 65536; ++b) bits.push_back(b);
          if (dst == DType::i32) {  // float -> i32 is defined inside i32's range only
            std::vector<uint32_t> in_range;
            for (uint32_t b : bits) {
              const float v = decode(b, src);
              if (v > -2147483904.0f && v < 2147483648.0f) in_range.push_back(b);
            }
            bits = in_range;
          }
        } else if (src == DType::f32 && dst != DType::i32) {
          // Random patterns hit every class (subnormals, NaN payloads, values that overflow a
          // 16-bit format); the fixed ones are the rounding boundaries of f16 and bf16.
          for (int i = 0; i < 1 << 16; ++i) bits.push_back(static_cast<uint32_t>(rng()));
          for (float v :
               {65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.002p0f,
                0x1.006p0f, 0x1.01p0f, 0x1.03p0f, 3.3895314e38f, 3.4028235e38f, 0.0f, -0.0f}) {
            bits.push_back(float_bits(v));
            bits.push_back(float_bits(-v));
          }
        } else if (src == DType::f32) {  // to i32: finite values inside i32's range
          for (float v : random_values(rng, 1 << 16, -10, 30)) bits.push_back(float_bits(v));
          for (float v : {2147483520.0f, -2147483648.0f, 0.5f, -0.5f, 0.0f, -0.0f}) {
            bits.push_back(float_bits(v));
          }
        } else {  // i32: every magnitude, so i32 -> float rounds at many exponents
          for (int i = 0; i < 1 << 16; ++i) {
            const int shift = static_cast<int>(rng() % 32);
            bits.push_back(static_cast<uint32_t>(static_cast<int32_t>(rng()) >> shift));
          }
          for (int32_t v : {INT32_MAX, INT32_MIN, 16777217, -16777217, 2049, 0}) {
            bits.push_back(static_cast<uint32_t>(v));
          }
        }
        return std::vector<HostInput>{{{static_cast<int64_t>(bits.size())}, src, bits}};
      };
      c.run = [dst](Backend& be, std::vector<Tensor>& in) {
        Tensor out = be.empty(in[0].shape(), dst);
        be.cast(in[0], out);
        return std::vector<Tensor>{out};
      };
      cases.push_back(c);
    }
  }
}

void add_fill_cases(std::vector<CudaCase>& cases) {
  // Values around the formats' edges; 1 + 2^-11 + 2^-40 is a double that rounds to f16
  // differently through float (to 1, a tie) than directly (to 1 + 2^-10): both backends go
  // through float, as PyTorch's fill_ does.
  const std::vector<double> float_values = {0.0,
                                            -0.0,
                                            1.0,
                                            1.0 / 3.0,
                                            65504.0,
                                            65519.99,
                                            65520.0,
                                            1e-8,
                                            -3.5e38,
                                            1e39,
                                            5.96e-8,
                                            1.0 + 0x1p-11 + 0x1p-40,
                                            std::numeric_limits<double>::infinity(),
                                            std::numeric_limits<double>::quiet_NaN()};
  const std::vector<double> int_values = {0.0, 1.0, -7.0, 2147483647.0, -2147483647.0, 123456789.0};
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    const std::vector<double>& values = d == DType::i32 ? int_values : float_values;
    CudaCase c;
    c.name = std::string("fill_") + dtype_name(d);
    c.make_inputs = [](std::mt19937_64&) { return std::vector<HostInput>{}; };
    c.run = [d, values](Backend& be, std::vector<Tensor>&) {
      std::vector<Tensor> out;
      for (double v : values) {
        Tensor t = be.empty({1003}, d);
        be.fill(t, v);
        out.push_back(t);
      }
      return out;
    };
    cases.push_back(c);
  }
}

void add_elementwise_cases(std::vector<CudaCase>& cases) {
  constexpr size_t n = 10007;
  for (DType x_type : kFloatDTypes) {
    for (DType out_type : kFloatDTypes) {
      // A power of two (exact but for overflow and subnormals) and a scale that rounds.
      for (float scale : {65536.0f, 0.3f}) {
        CudaCase c;
        c.name = std::string("mul_scalar_tensor_") + dtype_name(x_type) + "_to_" +
                 dtype_name(out_type) + (scale == 65536.0f ? "_pow2" : "_inexact");
        c.make_inputs = [x_type, scale](std::mt19937_64& rng) {
          return std::vector<HostInput>{
              from_values({n}, x_type, random_with_specials(rng, n, -20, 12, 0.01)),
              scalar_input(scale)};
        };
        c.run = [out_type](Backend& be, std::vector<Tensor>& in) {
          Tensor out = be.empty(in[0].shape(), out_type);
          be.mul_scalar_tensor(in[0], in[1], out);
          return std::vector<Tensor>{out};
        };
        cases.push_back(c);
      }
      for (float alpha : {1.0f, -0.37f}) {
        CudaCase c;
        c.name = std::string("add_") + dtype_name(x_type) + "_plus_" + dtype_name(out_type) +
                 (alpha == 1.0f ? "_alpha1" : "_alpha_inexact");
        const DType dst_type = x_type, src_type = out_type;
        c.make_inputs = [dst_type, src_type](std::mt19937_64& rng) {
          return std::vector<HostInput>{
              from_values({n}, dst_type, random_with_specials(rng, n, -12, 12, 0.01)),
              from_values({n}, src_type, random_with_specials(rng, n, -12, 12, 0.01))};
        };
        c.run = [alpha](Backend& be, std::vector<Tensor>& in) {
          be.add_(in[0], in[1], alpha);
          return std::vector<Tensor>{in[0]};
        };
        cases.push_back(c);
      }
    }
    CudaCase c;  // out aliases x
    c.name = std::string("mul_scalar_tensor_in_place_") + dtype_name(x_type);
    c.make_inputs = [x_type](std::mt19937_64& rng) {
      return std::vector<HostInput>{
          from_values({n}, x_type, random_with_specials(rng, n, -20, 12, 0.01)),
          scalar_input(0x1p-16f)};
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.mul_scalar_tensor(in[0], in[1], in[0]);
      return std::vector<Tensor>{in[0]};
    };
    cases.push_back(c);
  }
}

std::vector<CudaCase> memory_cases() {
  std::vector<CudaCase> cases;
  add_cast_cases(cases);
  add_fill_cases(cases);
  add_elementwise_cases(cases);
  return cases;
}

AMPCTL_CPU_VS_CUDA_TABLE(Memory, memory_cases);

// ---- properties of the GPU alone ----

TEST(CudaBackend, DescribesItselfAndRejectsWrongArguments) {
  AMPCTL_REQUIRE_GPU();
  EXPECT_TRUE(cuda_compiled());
  EXPECT_FALSE(cuda_architectures().empty());
  EXPECT_EQ(gpu().device(), (Device{DeviceType::cuda, 0}));
  EXPECT_NE(gpu().description().find("cuda:0"), std::string::npos) << gpu().description();
  try {
    (void)make_cuda_backend(cuda_device_count());
    ADD_FAILURE() << "make_cuda_backend with an index past the last GPU did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::cuda) << e.what();
    EXPECT_FALSE(e.hint().empty()) << e.what();
  }
  Tensor host = Tensor::host({4}, DType::f32);
  Tensor dev = gpu().zeros({4}, DType::f32);
  expect_invalid_argument([&] { gpu().add_(dev, host); }, "add_ with a host tensor");
  expect_invalid_argument([&] { gpu().cast(dev, gpu().empty({5}, DType::f16)); }, "cast, numel");
  expect_invalid_argument(
      [&] {
        gpu().gemm(gpu().empty({2, 3}, DType::f32), false, gpu().empty({4, 5}, DType::f32), false,
                   gpu().empty({2, 5}, DType::f32));
      },
      "gemm, inner dimensions");
  expect_invalid_argument([&] { gpu().fill(gpu().empty({2}, DType::i32), 0.5); }, "fill i32 0.5");
}

}  // namespace
}  // namespace ampctl::test
