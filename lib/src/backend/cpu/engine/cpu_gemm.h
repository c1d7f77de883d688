// The CPU backend's own matrix product for CPUs with AVX-512 or AVX2: packed panels and
// register-tiled micro-kernels (the BLIS / GotoBLAS structure), split over the backend's threads by
// output tiles. Internal to the CPU backend (cpu_backend.cpp calls it from gemm and
// linear_forward).
//
// Two kernels, both accumulating in float32:
//   * f32 FMA kernel (AVX-512F): operands of any float dtype are widened exactly to float while
//     they are packed (f16 by VCVTPH2PS, bf16 by a shift), so f16 operands cost no extra pass.
//     Each output element is one sequential chain of fused multiply-adds over k = 0, 1, ...:
//     every product is exact inside the FMA and each step rounds once, so the result is within
//     the classic bound gamma_k * sum |a||b| (Higham 3.1) that the gemm tests check.
//   * bf16 dot-product kernel (AVX512_BF16, VDPBF16PS), used when both operands are bf16: each
//     instruction adds two bf16 x bf16 products (exact in float: 8 + 8 significand bits) to the
//     float accumulator with round-to-nearest-even, pair by pair along k. Same bound as above,
//     with one difference: VDPBF16PS treats bf16 subnormal inputs as zero and flushes subnormal
//     float results to zero (it ignores MXCSR), so each step may also lose up to 2^-126 in
//     absolute terms (k * 2^-126 in all, far below any tolerance; training values never come
//     near bf16's subnormal range, 2^-133..2^-126). CPUs without AVX512_BF16 use the exact f32
//     kernel for bf16 operands.
//   * AMX bf16 kernel (AMX-TILE + AMX-BF16, Intel Sapphire Rapids and later), used instead of
//     VDPBF16PS for bf16 x bf16 where the CPU has it and Linux grants the tile state
//     (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process): TDPBF16PS on 16 x 16 float tiles,
//     32 k values per instruction, in the order the hardware fixes; the same flushing of
//     subnormals as VDPBF16PS and the same gamma_k bound, but not VDPBF16PS's bits (about three
//     results in four differ in the last places). k is not split and each tile's instruction
//     sequence depends only on the problem, so the thread count still changes no bit.
//     AMPCTL_CPU_AMX=0 in the environment turns it off (the VDPBF16PS kernel then runs).
// The epilogue (alpha, beta * C, the bias, the one rounding to C's dtype by half.h's rules) runs
// on each finished tile while it is in L1. The output is cut into a few parts per thread (by
// columns, or by rows when it is narrow) that the pool's threads claim; which thread computes a
// part never changes its arithmetic (k is never split), so results do not depend on the thread
// count or on timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "ampctl/core/tensor.h"
#include "cpu_parallel.h"

namespace ampctl::cpu {

struct CpuFeatures {
  bool avx512 = false;       // the avx512 path: the f32 kernel and vector elementwise
  bool avx512_bf16 = false;  // and AVX512_BF16: the bf16 kernel
  bool amx_bf16 = false;     // and AMX-TILE + AMX-BF16, with the OS's leave to use the tiles
  bool avx2 = false;         // the avx2 path: the same engine on AVX2 + FMA + F16C (f32 kernel)
  bool vector = false;       // avx512 or avx2: the packed kernels and the vector passes run
};
// The path core/cpu_isa.h chose once for the process (cpu_isa(), cpu_amx()): avx512 and its
// extensions, or avx2 (AMPCTL_CPU_ISA=avx2 on an AVX-512 CPU), or neither (portable).
const CpuFeatures& cpu_features();

// op(X) of a row-major matrix: element (i, l) of op(X) is data[i * ld + l], or data[l * ld + i]
// when trans.
struct GemmOperand {
  const void* data;
  DType dtype;
  int64_t ld;
  bool trans;
};

// grad_amax taken in the epilogue (Backend::gemm_round_amax): the largest finite |v| of the
// floats v the epilogue rounds into C, as float bits (non-negative floats order like their
// bits), and whether a non-finite v was among them. Each thread share keeps its own max and
// merges it here once; a max is order-free, so the result does not depend on the split.
struct AmaxSink {
  std::atomic<uint32_t> max_bits{0};
  std::atomic<bool> nonfinite{false};
  void merge(uint32_t bits, bool bad) {
    uint32_t cur = max_bits.load(std::memory_order_relaxed);
    while (bits > cur && !max_bits.compare_exchange_weak(cur, bits, std::memory_order_relaxed)) {
    }
    if (bad) nonfinite.store(true, std::memory_order_relaxed);
  }
};

// out[i, j] := round_out(alpha * acc[i, j] + beta * out[i, j] + bias[j]); out is not read when
// beta == 0; bias may be null. amax, when set, takes every such float before its rounding.
struct GemmOutput {
  void* data;
  DType dtype;
  int64_t ld;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;
  DType bias_dtype = DType::f32;
  AmaxSink* amax = nullptr;
};

// What a causal attention's products let the kernels skip (cpu/transformer.cpp), at whole
// micro-tiles and k steps, never changing a bit of what they compute:
//   * out_lower: only out[i, j] with j <= i is wanted. A tile wholly above the diagonal is not
//     computed; its elements keep whatever they held.
//   * a_lower: op(A)[i, l] == 0 for l > i (the probabilities, dscores). A row's sum stops after
//     the last k step its tile's rows can reach.
//   * a_upper: op(A)[i, l] == 0 for l < i (their transposes). A row's sum starts at the first k
//     step its tile's rows can reach.
// A skipped term is an exact zero times a finite op(B) element, +-0, and a float sum that starts
// from +0 is never -0 (an exact cancellation rounds to +0), so adding +-0 leaves it unchanged:
// the results are the full product's bits whenever op(B) is finite. Where op(B) holds an inf or
// NaN the skipped 0 * inf terms (NaN in the full product) are not formed, as on the GPU, whose
// fused attention skips the masked blocks.
enum class GemmTriangle { none, out_lower, a_lower, a_upper };

class GemmEngine {
 public:
  // Computes the product when this CPU has a kernel for it (m, n, k >= 1) and returns true;
  // returns false, touching nothing, when it has not (the caller uses OpenBLAS).
  // bf16_dot: the VDPBF16PS kernel may be used (bf16 x bf16 on a CPU with AVX512_BF16).
  bool run(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
           const GemmOutput& out, ThreadPool& pool, bool bf16_dot = true,
           GemmTriangle triangle = GemmTriangle::none);

 private:
  // run on the avx2 path (cpu_gemm_avx2.cpp): the f32 kernel, 6 x 16 tiles in YMM registers.
  bool run_avx2(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
                const GemmOutput& out, ThreadPool& pool, GemmTriangle triangle);

  // Grow-only, so a steady-state training step does not allocate: per-thread packed panels,
  // the float partial sums (only when k spans several blocks and C cannot hold them) and the
  // widened bias.
  std::vector<std::vector<float>> m_pack_a, m_pack_b;
  std::vector<float> m_acc, m_bias;
  // op(B) packed whole, shared by the parts (cpu_gemm.cpp: shared B).
  std::vector<float> m_shared_b;
};

}  // namespace ampctl::cpu
