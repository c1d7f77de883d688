// AVX-512 versions of the CPU backend's elementwise passes, each over an index range [begin, end)
// so the caller can split it between threads (cpu_parallel.h). Internal to lib/src/backend/cpu.
//
// Contract: every function gives bitwise the result of the scalar loop it replaces, which calls
// the shared per-element math (math/adam_math.h, math/sgd_math.h, math/nn_math.h) in float32 and
// rounds each output once by half.h's rules. The vector code performs the same IEEE operations
// in the same order on each lane (add, sub, mul, div and sqrt are correctly rounded in SIMD as in
// scalar code; the build has contraction off, so no FMA appears on either side); branches on
// per-call constants (inv_scale == 1, maximize, weight decay, which lerp branch) are taken once
// per call instead of per element. Conversions are cpu_simd.h's, identical to half.h's.
// tests/unit/backend checks the ops bitwise against scalar references, tails included.
//
// Two builds of the same code (cpu_vector.cpp): vec_avx512 on AVX-512, and vec_avx2, the same
// source compiled against cpu_avx512_on_avx2.h (cpu_vector_avx2.cpp), which gives the same bits.
// The functions of vec (cpu_vector_dispatch.cpp) call the build of the CPU's instruction path
// (core/cpu_isa.h). Callers check cpu_features().vector first; dtypes are f32, f16 or bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ampctl/core/tensor.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/sgd_math.h"

namespace ampctl::cpu::vec {
#include "cpu_vector_api.inc"
}  // namespace ampctl::cpu::vec

namespace ampctl::cpu::vec_avx512 {
#include "cpu_vector_api.inc"
}  // namespace ampctl::cpu::vec_avx512

namespace ampctl::cpu::vec_avx2 {
#include "cpu_vector_api.inc"
}  // namespace ampctl::cpu::vec_avx2
