// Launchers of kernels/memory_cast.cu: dtype conversion, one rounding.
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// dst[i] := src[i] converted, for n elements, between any two element types (i32 through float).
// Equal types are a byte copy.
void launch_cast(const void* src, ElemType src_type, void* dst, ElemType dst_type, size_t n,
                 cudaStream_t stream);

}  // namespace ampctl::kernels
