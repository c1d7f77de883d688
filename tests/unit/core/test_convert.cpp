// Batch conversions (core/convert.h): vector bodies, scalar tails, unaligned pointers and odd
// lengths. Every path must give the same bits as half.h's scalar functions applied one element at
// a time (budget: 0 ulps; the conversions are exact or correctly rounded, so no error is allowed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "ampctl/core/convert.h"
#include "ampctl/core/half.h"

namespace ampctl {
namespace {

// Odd lengths around the vector widths (8 and 16 lanes), plus one long enough for many vectors.
constexpr size_t kLengths[] = {0, 1, 7, 15, 16, 17, 33, 1000 + 3};
// Element offsets from a 64-byte aligned base: aligned, and misaligned for every vector width.
constexpr size_t kOffsets[] = {0, 1, 3};
// Guard elements after each output: the conversion must not write past n.
constexpr size_t kGuard = 24;
constexpr uint16_t kGuard16 = 0xa5a5;
constexpr uint32_t kGuard32 = 0x5a5a5a5au;

// Random float bit patterns mixed with values around half's and bf16's rounding and overflow
// boundaries, so that every lane position sees special cases.
std::vector<float> mixed_floats(size_t n, uint32_t seed) {
  const float specials[] = {0.0f,       -0.0f,          65504.0f,        65520.0f,
                            -65519.99f, INFINITY,       -INFINITY,       std::nanf(""),
                            0x1p-25f,   0x1.8p-24f,     FLT_MAX,         FLT_MIN,
                            0x1p-140f,  1.0f + 0x1p-8f, 1.0f + 0x1p-11f, -0x1.ffcp-15f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 3) {
      case 0:
        out[i] = bits_float(static_cast<uint32_t>(rng()));
        break;
      case 1:
        out[i] = in_range(rng);
        break;
      default:
        out[i] = specials[rng() % std::size(specials)];
        break;
    }
  }
  return out;
}

std::vector<uint16_t> random_u16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> out(n);
  for (uint16_t& v : out) v = static_cast<uint16_t>(rng());
  return out;
}

// A 64-byte aligned buffer of T with room for offset + n + guard elements.
template <typename T>
struct Buffer {
  explicit Buffer(size_t offset, size_t n, T fill) : storage(offset + n + kGuard + 64 / sizeof(T)) {
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    const size_t skip = ((64 - base % 64) % 64) / sizeof(T);
    ptr = storage.data() + skip + offset;
    for (size_t i = 0; i < n + kGuard; ++i) ptr[i] = fill;
  }
  std::vector<T> storage;
  T* ptr;
};

std::string path_name(ConvertPath path) {
  return path == ConvertPath::fast ? std::string("fast (") + convert_fast_path_name() + ")"
                                   : "portable";
}

std::string where(size_t n, size_t offset, ConvertPath path) {
  return "n=" + std::to_string(n) + ", offset=" + std::to_string(offset) +
         ", path=" + path_name(path);
}

// Converts n floats to 16 bits with `convert` and compares with `scalar` element by element.
template <typename Convert, typename Scalar>
void check_from_f32(Convert convert, Scalar scalar, const char* what) {
  for (size_t n : kLengths) {
    for (size_t offset : kOffsets) {
      const std::vector<float> values = mixed_floats(n, static_cast<uint32_t>(n * 31 + offset));
      Buffer<float> src(offset, n, 0.0f);
      std::copy(values.begin(), values.end(), src.ptr);
      for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
        // Output offset differs from the input's so the two misalignments do not coincide.
        Buffer<uint16_t> dst(offset + 1, n, kGuard16);
        convert(src.ptr, dst.ptr, n, path);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const uint16_t expected = scalar(values[i]);
          if (dst.ptr[i] != expected && bad++ == 0) {
            ADD_FAILURE() << what << ", " << where(n, offset, path) << ": element " << i
                          << " input 0x" << std::hex << float_bits(values[i]) << " expected 0x"
                          << expected << " got 0x" << dst.ptr[i];
          }
        }
        EXPECT_EQ(bad, 0u) << what << ", " << where(n, offset, path) << ": mismatches";
        for (size_t i = n; i < n + kGuard; ++i) {
          ASSERT_EQ(dst.ptr[i], kGuard16)
              << what << ", " << where(n, offset, path) << ": wrote past the end at " << i;
        }
      }
    }
  }
}

template <typename Convert, typename Scalar>
void check_to_f32(Convert convert, Scalar scalar, const char* what) {
  for (size_t n : kLengths) {
    for (size_t offset : kOffsets) {
      const std::vector<uint16_t> values = random_u16(n, static_cast<uint32_t>(n * 17 + offset));
      Buffer<uint16_t> src(offset, n, 0);
      std::copy(values.begin(), values.end(), src.ptr);
      for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
        Buffer<float> dst(offset + 1, n, bits_float(kGuard32));
        convert(src.ptr, dst.ptr, n, path);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const uint32_t expected = float_bits(scalar(values[i]));
          if (float_bits(dst.ptr[i]) != expected && bad++ == 0) {
            ADD_FAILURE() << what << ", " << where(n, offset, path) << ": element " << i
                          << " input 0x" << std::hex << values[i] << " expected float bits 0x"
                          << expected << " got 0x" << float_bits(dst.ptr[i]);
          }
        }
        EXPECT_EQ(bad, 0u) << what << ", " << where(n, offset, path) << ": mismatches";
        for (size_t i = n; i < n + kGuard; ++i) {
          ASSERT_EQ(float_bits(dst.ptr[i]), kGuard32)
              << what << ", " << where(n, offset, path) << ": wrote past the end at " << i;
        }
      }
    }
  }
}

TEST(ConvertBatch, F32ToF16OddLengthsUnalignedMatchScalar) {
  check_from_f32(convert_f32_to_f16, float_to_half_bits_portable, "f32->f16");
}

TEST(ConvertBatch, F16ToF32OddLengthsUnalignedMatchScalar) {
  check_to_f32(convert_f16_to_f32, half_bits_to_float_portable, "f16->f32");
}

TEST(ConvertBatch, F32ToBf16OddLengthsUnalignedMatchScalar) {
  check_from_f32(convert_f32_to_bf16, float_to_bf16_bits_portable, "f32->bf16");
}

TEST(ConvertBatch, Bf16ToF32OddLengthsUnalignedMatchScalar) {
  check_to_f32(convert_bf16_to_f32, bf16_bits_to_float, "bf16->f32");
}

TEST(ConvertBatch, ZeroLengthTouchesNoMemory) {
  for (ConvertPath path : {ConvertPath::portable, ConvertPath::fast}) {
    convert_f32_to_f16(nullptr, nullptr, 0, path);
    convert_f16_to_f32(nullptr, nullptr, 0, path);
    convert_f32_to_bf16(nullptr, nullptr, 0, path);
    convert_bf16_to_f32(nullptr, nullptr, 0, path);
  }
  SUCCEED() << "no crash with null pointers and n = 0";
}

TEST(ConvertBatch, FastPathNameIsWellFormed) {
  const std::string name = convert_fast_path_name();
  std::cout << "convert fast path: " << name << "\n";
  // Either no vector path at all, or which one each format uses.
  const std::regex form(R"(portable|f16: (avx512f|f16c|portable), bf16: (avx512f|avx2|portable))");
  EXPECT_TRUE(std::regex_match(name, form)) << "got '" << name << "'";
  // The choice is made once: the same string every call.
  EXPECT_EQ(static_cast<const void*>(convert_fast_path_name()),
            static_cast<const void*>(convert_fast_path_name()));
}

}  // namespace
}  // namespace ampctl
