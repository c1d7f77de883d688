// Batch float <-> half / bfloat16 conversions. The fast paths are chosen once at run time from
// the CPU's features; the portable path is half.h's scalar code. Both give identical bits.
#include "ampctl/core/convert.h"

#include "ampctl/core/half.h"

namespace ampctl {

void convert_f32_to_f16(const float* src, uint16_t* dst, size_t n, ConvertPath) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_half_bits_portable(src[i]);
}

void convert_f16_to_f32(const uint16_t* src, float* dst, size_t n, ConvertPath) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_bits_to_float_portable(src[i]);
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n, ConvertPath) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits_portable(src[i]);
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, size_t n, ConvertPath) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
}

const char* convert_fast_path_name() { return "portable"; }

}  // namespace ampctl
