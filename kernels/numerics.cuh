// Launchers of kernels/numerics.cu: the counted rounding of Backend::round_counted.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// dst[i] := round(src[i]) to f16 (dst_type f16) or bf16, and counters (numerics::kWidth int64s,
// math/numerics_math.h) accumulate the roundings' classification, for n elements.
void launch_round_counted(const float* src, void* dst, ElemType dst_type, int64_t* counters,
                          size_t n, cudaStream_t stream);

// dst[i] := round(src[i]) as above, and amax (numerics::kAmaxWords floats) raised to [the
// largest finite |src[i]|, 1 if any src[i] is inf or NaN] (Backend::round_amax), for n elements.
void launch_round_amax(const float* src, void* dst, ElemType dst_type, float* amax, size_t n,
                       cudaStream_t stream);

}  // namespace ampctl::kernels
