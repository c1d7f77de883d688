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
// Callers check cpu_features().avx512 first; dtypes are f32, f16 or bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ampctl/core/tensor.h"
#include "ampctl/math/adam_math.h"
#include "ampctl/math/sgd_math.h"

namespace ampctl::cpu::vec {

// adam_update on every element, then lowp[i] := round(p[i]) when lowp is given. With a
// decay_mask (decay_on: matrices), elements whose mask is 0 take the constants of
// weight_decay = 0 instead (their decay factor, plain_decay, is the only constant that differs).
void adam(size_t begin, size_t end, float* p, const float* g, float* m, float* v, float inv_scale,
          bool decoupled, bool maximize, const optim::AdamStepConsts& c, void* lowp,
          DType lowp_dtype, const float* decay_mask = nullptr, float plain_decay = 1.0f);
// sgd_update on every element (buf is read/written only when momentum != 0), then the lowp copy.
void sgd(size_t begin, size_t end, float* p, const float* g, float* buf, float inv_scale,
         bool first, const optim::SgdHyper& h, void* lowp, DType lowp_dtype);
// dst := round(dst + src) (alpha == 1) or round(dst + alpha * src).
void add(void* dst, DType dst_dtype, const void* src, DType src_dtype, float alpha, size_t begin,
         size_t end);
// out := round(x) (an exact widening, or one rounding).
void cast(const void* x, DType x_dtype, void* out, DType out_dtype, size_t begin, size_t end);
// out := round(x) from f32 to f16 or bf16, and in the same pass the largest |x| of the finite
// elements as float bits (max_bits: at least its value on entry) and whether any was not finite.
void cast_amax(const float* x, void* out, DType out_dtype, size_t begin, size_t end,
               uint32_t& max_bits, bool& nonfinite);
// out := round(x * s).
void mul_scalar(const void* x, DType x_dtype, void* out, DType out_dtype, float s, size_t begin,
                size_t end);
// relu forward (NaN propagates) and backward (dy where y > 0, else 0).
void relu_forward(const void* x, DType x_dtype, void* y, DType y_dtype, size_t begin, size_t end);
void relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                   DType dx_dtype, size_t begin, size_t end);
// relu_backward with cast_amax's max_bits and nonfinite taken from the floats it rounds into dx.
void relu_backward_amax(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                        DType dx_dtype, size_t begin, size_t end, uint32_t& max_bits,
                        bool& nonfinite);
// The tanh GELU (cpu_gelu.h's gelu_tanh, bitwise): y := round(gelu_tanh(x)), and
// dx := round(dy * gelu_tanh_grad(x)).
void gelu_tanh_forward(const void* x, DType x_dtype, void* y, DType y_dtype, size_t begin,
                       size_t end);
void gelu_tanh_backward(const void* x, DType x_dtype, const void* dy, DType dy_dtype, void* dx,
                        DType dx_dtype, size_t begin, size_t end);
// causal_softmax_forward / _backward (cpu/transformer.cpp's documented float order, bitwise) on
// rows [r0, r1) of [*, t, t] matrices; row r attends to j <= r % t. The forward's e is 16 float
// rows of t elements (the caller's per-thread workspace: up to 16 rows are summed at once, one
// per lane); probs may be scores (same dtype).
// y[i] := expf_glibc(x[i]) (cpu_exp.h) for i < n, 16 lanes at a time (the softmax's exp16).
void expf_glibc_n(const float* x, float* y, size_t n);

void causal_softmax_forward_rows(const void* scores, DType scores_dtype, void* probs,
                                 DType probs_dtype, int64_t t, int64_t r0, int64_t r1, float scale,
                                 bool round_scaled, float* e);
void causal_softmax_backward_rows(const void* probs, DType probs_dtype, const void* dprobs,
                                  DType dprobs_dtype, void* dscores, DType dscores_dtype, int64_t t,
                                  int64_t r0, int64_t r1, float scale, bool round_scaled);
// The same with round_scaled, and cast_amax's max_bits and nonfinite taken from both roundings'
// floats (g, then round(g) * scale).
void causal_softmax_backward_rows_amax(const void* probs, DType probs_dtype, const void* dprobs,
                                       DType dprobs_dtype, void* dscores, DType dscores_dtype,
                                       int64_t t, int64_t r0, int64_t r1, float scale,
                                       uint32_t& max_bits, bool& nonfinite);
// LayerNorm (cpu/nn.cpp's documented float order, bitwise) on rows [r0, r1) of x [*, cols]:
// the forward's y, mean and rstd; the backward's dx; and the backward's per-column sums of
// dy * xhat and dy over every row in order (for columns [c0, c1)), which the caller adds to
// dgamma and dbeta. scratch: 16 * cols floats (forward) or 32 * cols (dx), per thread.
void layer_norm_forward_rows(const void* x, DType x_dtype, const float* gamma, const float* beta,
                             void* y, DType y_dtype, float* mean, float* rstd, int64_t cols,
                             int64_t r0, int64_t r1, float eps, float* scratch);
void layer_norm_backward_dx_rows(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                 const float* gamma, const float* mean, const float* rstd, void* dx,
                                 DType dx_dtype, int64_t cols, int64_t r0, int64_t r1,
                                 float* scratch);
void layer_norm_backward_params(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                const float* mean, const float* rstd, int64_t rows, int64_t cols,
                                int64_t c0, int64_t c1, float* pg, float* pb);
// acc[c] := sum over rows r in order of x[r, c], for columns [c0, c1) of x [rows, cols].
void sum_rows(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
              float* acc);

// global_norm's order (backend.h): each tensor in blocks of kNormBlock elements (the last one
// shorter). A block's sum of squares runs in double on kNormLanes lanes, element i of the block
// on lane i mod kNormLanes, each lane from 0 in index order (a float's square is exact in
// double, so each step is one rounding); the lanes then fold in halves: lane j += lane j + 8,
// then j + 4, j + 2, j + 1, and lane 0 is the block's sum. The blocks' sums are added in order.
inline constexpr size_t kNormBlock = 4096;
inline constexpr int kNormLanes = 16;

// The sum of squares of block [begin, end) (end - begin <= kNormBlock) of x in that order, on
// AVX-512 (norm_block) and in plain scalar code for any CPU (norm_block_portable): the same bits.
double norm_block(const void* x, DType x_dtype, size_t begin, size_t end);
double norm_block_portable(const void* x, DType x_dtype, size_t begin, size_t end);
// The same order over the values an unscale by `inv` leaves: each element's float(x) * inv (x
// itself when inv == 1) rounded to x's dtype, then squared (the trainer's grad_norm in the
// check pass: non_finite_check_unscale_norm_). With inv == 1 the bits of norm_block.
double norm_block_scaled(const void* x, DType x_dtype, size_t begin, size_t end, float inv);
double norm_block_scaled_portable(const void* x, DType x_dtype, size_t begin, size_t end,
                                  float inv);

}  // namespace ampctl::cpu::vec
