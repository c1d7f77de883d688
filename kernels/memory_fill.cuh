// Launchers of kernels/memory_fill.cu: set every element to one bit pattern.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// Writes the low `elem_bytes` (2 or 4) bytes of `bits` into each of the n elements of dst. The
// caller rounds the fill value to the element type on the host, once.
void launch_fill(void* dst, size_t elem_bytes, uint32_t bits, size_t n, cudaStream_t stream);

}  // namespace ampctl::kernels
