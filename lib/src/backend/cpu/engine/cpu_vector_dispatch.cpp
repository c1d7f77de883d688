// The vector passes of the CPU's instruction path (cpu_vector.h): each function of vec calls its
// twin in vec_avx2 on the avx2 path and in vec_avx512 otherwise (the callers asked
// cpu_features().vector first). The portable references are plain code, the same in both builds.
#include "ampctl/core/cpu_isa.h"
#include "cpu_vector.h"

namespace ampctl::cpu::vec {
namespace {

bool on_avx2() {
  static const bool avx2 = cpu_isa() == CpuIsa::avx2;
  return avx2;
}

}  // namespace

void adam(size_t begin, size_t end, float* p, const float* g, float* m, float* v, float inv_scale,
          bool decoupled, bool maximize, const optim::AdamStepConsts& c, void* lowp,
          DType lowp_dtype, const float* decay_mask, float plain_decay) {
  if (on_avx2()) {
    vec_avx2::adam(begin, end, p, g, m, v, inv_scale, decoupled, maximize, c, lowp, lowp_dtype,
                   decay_mask, plain_decay);
    return;
  }
  vec_avx512::adam(begin, end, p, g, m, v, inv_scale, decoupled, maximize, c, lowp, lowp_dtype,
                   decay_mask, plain_decay);
}

void sgd(size_t begin, size_t end, float* p, const float* g, float* buf, float inv_scale,
         bool first, const optim::SgdHyper& h, void* lowp, DType lowp_dtype) {
  if (on_avx2()) {
    vec_avx2::sgd(begin, end, p, g, buf, inv_scale, first, h, lowp, lowp_dtype);
    return;
  }
  vec_avx512::sgd(begin, end, p, g, buf, inv_scale, first, h, lowp, lowp_dtype);
}

void add(void* dst, DType dst_dtype, const void* src, DType src_dtype, float alpha, size_t begin,
         size_t end) {
  if (on_avx2()) {
    vec_avx2::add(dst, dst_dtype, src, src_dtype, alpha, begin, end);
    return;
  }
  vec_avx512::add(dst, dst_dtype, src, src_dtype, alpha, begin, end);
}

void cast(const void* x, DType x_dtype, void* out, DType out_dtype, size_t begin, size_t end) {
  if (on_avx2()) {
    vec_avx2::cast(x, x_dtype, out, out_dtype, begin, end);
    return;
  }
  vec_avx512::cast(x, x_dtype, out, out_dtype, begin, end);
}

void cast_amax(const float* x, void* out, DType out_dtype, size_t begin, size_t end,
               uint32_t& max_bits, bool& nonfinite) {
  if (on_avx2()) {
    vec_avx2::cast_amax(x, out, out_dtype, begin, end, max_bits, nonfinite);
    return;
  }
  vec_avx512::cast_amax(x, out, out_dtype, begin, end, max_bits, nonfinite);
}

void mul_scalar(const void* x, DType x_dtype, void* out, DType out_dtype, float s, size_t begin,
                size_t end) {
  if (on_avx2()) {
    vec_avx2::mul_scalar(x, x_dtype, out, out_dtype, s, begin, end);
    return;
  }
  vec_avx512::mul_scalar(x, x_dtype, out, out_dtype, s, begin, end);
}

void relu_forward(const void* x, DType x_dtype, void* y, DType y_dtype, size_t begin, size_t end) {
  if (on_avx2()) {
    vec_avx2::relu_forward(x, x_dtype, y, y_dtype, begin, end);
    return;
  }
  vec_avx512::relu_forward(x, x_dtype, y, y_dtype, begin, end);
}

void relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                   DType dx_dtype, size_t begin, size_t end) {
  if (on_avx2()) {
    vec_avx2::relu_backward(y, y_dtype, dy, dy_dtype, dx, dx_dtype, begin, end);
    return;
  }
  vec_avx512::relu_backward(y, y_dtype, dy, dy_dtype, dx, dx_dtype, begin, end);
}

void relu_backward_amax(const void* y, DType y_dtype, const void* dy, DType dy_dtype, void* dx,
                        DType dx_dtype, size_t begin, size_t end, uint32_t& max_bits,
                        bool& nonfinite) {
  if (on_avx2()) {
    vec_avx2::relu_backward_amax(y, y_dtype, dy, dy_dtype, dx, dx_dtype, begin, end, max_bits,
                                 nonfinite);
    return;
  }
  vec_avx512::relu_backward_amax(y, y_dtype, dy, dy_dtype, dx, dx_dtype, begin, end, max_bits,
                                 nonfinite);
}

void gelu_tanh_forward(const void* x, DType x_dtype, void* y, DType y_dtype, size_t begin,
                       size_t end) {
  if (on_avx2()) {
    vec_avx2::gelu_tanh_forward(x, x_dtype, y, y_dtype, begin, end);
    return;
  }
  vec_avx512::gelu_tanh_forward(x, x_dtype, y, y_dtype, begin, end);
}

void gelu_tanh_backward(const void* x, DType x_dtype, const void* dy, DType dy_dtype, void* dx,
                        DType dx_dtype, size_t begin, size_t end) {
  if (on_avx2()) {
    vec_avx2::gelu_tanh_backward(x, x_dtype, dy, dy_dtype, dx, dx_dtype, begin, end);
    return;
  }
  vec_avx512::gelu_tanh_backward(x, x_dtype, dy, dy_dtype, dx, dx_dtype, begin, end);
}

void expf_glibc_n(const float* x, float* y, size_t n) {
  if (on_avx2()) {
    vec_avx2::expf_glibc_n(x, y, n);
    return;
  }
  vec_avx512::expf_glibc_n(x, y, n);
}

void causal_softmax_forward_rows(const void* scores, DType scores_dtype, void* probs,
                                 DType probs_dtype, int64_t t, int64_t r0, int64_t r1, float scale,
                                 bool round_scaled, float* e) {
  if (on_avx2()) {
    vec_avx2::causal_softmax_forward_rows(scores, scores_dtype, probs, probs_dtype, t, r0, r1,
                                          scale, round_scaled, e);
    return;
  }
  vec_avx512::causal_softmax_forward_rows(scores, scores_dtype, probs, probs_dtype, t, r0, r1,
                                          scale, round_scaled, e);
}

void causal_softmax_backward_rows(const void* probs, DType probs_dtype, const void* dprobs,
                                  DType dprobs_dtype, void* dscores, DType dscores_dtype, int64_t t,
                                  int64_t r0, int64_t r1, float scale, bool round_scaled) {
  if (on_avx2()) {
    vec_avx2::causal_softmax_backward_rows(probs, probs_dtype, dprobs, dprobs_dtype, dscores,
                                           dscores_dtype, t, r0, r1, scale, round_scaled);
    return;
  }
  vec_avx512::causal_softmax_backward_rows(probs, probs_dtype, dprobs, dprobs_dtype, dscores,
                                           dscores_dtype, t, r0, r1, scale, round_scaled);
}

void causal_softmax_backward_rows_amax(const void* probs, DType probs_dtype, const void* dprobs,
                                       DType dprobs_dtype, void* dscores, DType dscores_dtype,
                                       int64_t t, int64_t r0, int64_t r1, float scale,
                                       uint32_t& max_bits, bool& nonfinite) {
  if (on_avx2()) {
    vec_avx2::causal_softmax_backward_rows_amax(probs, probs_dtype, dprobs, dprobs_dtype, dscores,
                                                dscores_dtype, t, r0, r1, scale, max_bits,
                                                nonfinite);
    return;
  }
  vec_avx512::causal_softmax_backward_rows_amax(probs, probs_dtype, dprobs, dprobs_dtype, dscores,
                                                dscores_dtype, t, r0, r1, scale, max_bits,
                                                nonfinite);
}

void layer_norm_forward_rows(const void* x, DType x_dtype, const float* gamma, const float* beta,
                             void* y, DType y_dtype, float* mean, float* rstd, int64_t cols,
                             int64_t r0, int64_t r1, float eps, float* scratch) {
  if (on_avx2()) {
    vec_avx2::layer_norm_forward_rows(x, x_dtype, gamma, beta, y, y_dtype, mean, rstd, cols, r0, r1,
                                      eps, scratch);
    return;
  }
  vec_avx512::layer_norm_forward_rows(x, x_dtype, gamma, beta, y, y_dtype, mean, rstd, cols, r0, r1,
                                      eps, scratch);
}

void layer_norm_backward_dx_rows(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                 const float* gamma, const float* mean, const float* rstd, void* dx,
                                 DType dx_dtype, int64_t cols, int64_t r0, int64_t r1,
                                 float* scratch) {
  if (on_avx2()) {
    vec_avx2::layer_norm_backward_dx_rows(x, x_dtype, dy, dy_dtype, gamma, mean, rstd, dx, dx_dtype,
                                          cols, r0, r1, scratch);
    return;
  }
  vec_avx512::layer_norm_backward_dx_rows(x, x_dtype, dy, dy_dtype, gamma, mean, rstd, dx, dx_dtype,
                                          cols, r0, r1, scratch);
}

void layer_norm_backward_params(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                const float* mean, const float* rstd, int64_t rows, int64_t cols,
                                int64_t c0, int64_t c1, float* pg, float* pb) {
  if (on_avx2()) {
    vec_avx2::layer_norm_backward_params(x, x_dtype, dy, dy_dtype, mean, rstd, rows, cols, c0, c1,
                                         pg, pb);
    return;
  }
  vec_avx512::layer_norm_backward_params(x, x_dtype, dy, dy_dtype, mean, rstd, rows, cols, c0, c1,
                                         pg, pb);
}

void sum_rows(const void* x, DType x_dtype, int64_t rows, int64_t cols, int64_t c0, int64_t c1,
              float* acc) {
  if (on_avx2()) {
    vec_avx2::sum_rows(x, x_dtype, rows, cols, c0, c1, acc);
    return;
  }
  vec_avx512::sum_rows(x, x_dtype, rows, cols, c0, c1, acc);
}

double norm_block(const void* x, DType x_dtype, size_t begin, size_t end) {
  if (on_avx2()) {
    return vec_avx2::norm_block(x, x_dtype, begin, end);
  }
  return vec_avx512::norm_block(x, x_dtype, begin, end);
}

double norm_block_portable(const void* x, DType x_dtype, size_t begin, size_t end) {
  return vec_avx512::norm_block_portable(x, x_dtype, begin, end);
}

double norm_block_scaled(const void* x, DType x_dtype, size_t begin, size_t end, float inv) {
  if (on_avx2()) {
    return vec_avx2::norm_block_scaled(x, x_dtype, begin, end, inv);
  }
  return vec_avx512::norm_block_scaled(x, x_dtype, begin, end, inv);
}

double norm_block_scaled_portable(const void* x, DType x_dtype, size_t begin, size_t end,
                                  float inv) {
  return vec_avx512::norm_block_scaled_portable(x, x_dtype, begin, end, inv);
}

}  // namespace ampctl::cpu::vec
