// Launchers of kernels/memory_gather.cu: pick rows of a resident data set by index.
#pragma once

#include <cstdint>

#include "kernel_common.cuh"

namespace ampctl::kernels {

// dst[r * width + c] := src[clamp(index[r], 0, n - 1) * width + c] for r < rows, c < width, on
// 32-bit words.
void launch_gather_rows(const uint32_t* src, int64_t n, int64_t width, const int32_t* index,
                        uint32_t* dst, int64_t rows, cudaStream_t stream);

}  // namespace ampctl::kernels
