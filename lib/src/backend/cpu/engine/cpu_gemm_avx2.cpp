// The packed matrix product of the avx2 path (cpu_gemm.h, GemmEngine::run_avx2): cpu_gemm.cpp
// compiled with AMPCTL_GEMM_AVX2 against cpu_avx512_on_avx2.h: the same packing (f16 widened by
// F16C, bf16 by a shift, while packing), blocking, thread split and fused epilogue (alpha, beta,
// bias, the rounding to C's dtype, grad_amax), with a 6 x 16 AVX2 + FMA micro-kernel. The
// functions carry the AVX2 target attribute; GemmEngine::run calls run_avx2 only on the avx2 path.
#include "cpu_avx512_on_avx2.h"

#define simd simd_avx2
#define AMPCTL_GEMM_AVX2 1
#include "cpu_gemm.cpp"
