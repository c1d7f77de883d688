// Batch conversions between float and half / bfloat16 arrays on the host. They use the CPU's
// F16C or AVX-512 instructions on the path core/cpu_isa.h chose and otherwise the portable
// scalar code of half.h; every path gives identical bits (tests/unit/core checks all of them).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ampctl {

enum class ConvertPath { portable, fast };

void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n,
                        ConvertPath path = ConvertPath::fast);
void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n,
                        ConvertPath path = ConvertPath::fast);
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n,
                         ConvertPath path = ConvertPath::fast);
void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n,
                         ConvertPath path = ConvertPath::fast);

// What the fast path uses on this CPU, e.g. "f16: avx512f, bf16: avx512f" or "portable".
const char* convert_fast_path_name();

}  // namespace ampctl
