// The vector passes of the avx2 path (cpu_vector.h, vec_avx2): cpu_vector.cpp compiled against
// cpu_avx512_on_avx2.h, which implements each AVX-512 instruction it uses on AVX2 + FMA + F16C
// with the same bits. The functions carry the AVX2 target attribute (the rest of the library is
// built for any x86-64) and run only on the avx2 path (cpu_vector_dispatch.cpp).
#include "cpu_avx512_on_avx2.h"

#define simd simd_avx2
#define AMPCTL_VEC_NS vec_avx2
#include "cpu_vector.cpp"
