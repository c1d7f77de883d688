// The CPU backend's neural-network ops: the reference the CUDA kernels are checked against.
//
// Each op widens its f16/bf16 operands exactly to float (convert.h), computes every output in
// float32 with plain loops that call the per-element math of math/nn_math.h, and rounds each output
// once to its dtype (store_f32). Reductions run sequentially in index order, so results do not
// depend on the thread count (on the OpenBLAS path linear_forward's order is the one OpenBLAS
// fixes for the backend's fixed thread count, as for gemm; the packed kernels never split k, so
// theirs does not depend on it at all). Outputs are formed in a workspace and stored at the
// end, so an output may alias an input of the same op. Operand checks come before any write.
// On the avx512 and avx2 paths (CpuKernels), linear_forward runs on the packed GEMM with the bias
// and the one rounding in its epilogue, and relu and sum_rows on vector loops that give the plain
// loops' bits (sum_rows: one lane per column, rows in order); they take that path only when the
// output does not partly overlap an input. The tanh GELU uses cpu_gelu.h's tanh (double, one
// rounding) at every level, on 16 lanes and the pool's threads on the avx512 and avx2 paths.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/math/nn_math.h"
#include "cpu_backend.h"
#include "engine/cpu_gelu.h"
#include "engine/cpu_parallel.h"
#include "engine/cpu_vector.h"

namespace ampctl::cpu {
namespace {

// Runs fn(r0, r1, thread) over [0, rows) in ranges of whole 16-row blocks (the LayerNorm passes'
// lane groups), a few per thread when rows * cols is worth waking threads for. The boundaries
// depend only on the problem and the pool's size; every row's arithmetic is independent of them.
template <typename F>
void for_row_blocks(ThreadPool& pool, int64_t rows, int64_t cols, F&& fn) {
  if (rows <= 0) return;
  const int64_t blocks = (rows + 15) / 16;
  const double work = static_cast<double>(rows) * static_cast<double>(std::max<int64_t>(cols, 1));
  int64_t parts = std::min<int64_t>(
      4 * pool.threads(), static_cast<int64_t>(work / static_cast<double>(kParallelGrain)));
  parts = std::clamp<int64_t>(parts, 1, blocks);
  pool.run(parts, [&](int64_t p, int thread) {
    const int64_t lo = std::min(rows, blocks * p / parts * 16);
    const int64_t hi = std::min(rows, blocks * (p + 1) / parts * 16);
    if (lo < hi) fn(lo, hi, thread);
  });
}

// One row of softmax_cross_entropy: ls := log_softmax(row), PyTorch's (x - max) -
// log(sum(exp(x - max))) with the sum in index order; returns the argmax as torch.argmax takes
// it (the first maximum, and a NaN counts as the maximum). Its value is also the softmax's shift
// (a NaN or inf maximum makes the row NaN, as in PyTorch). The scalar and the threaded op both
// use it, so they give the same bits.
int64_t xent_log_softmax_row(const float* row, int64_t cols, float* ls) {
  int64_t arg = 0;
  for (int64_t j = 1; j < cols; ++j) {
    const float best = row[arg];
    if (best != best) break;
    if (row[j] != row[j] || row[j] > best) arg = j;
  }
  const float mx = row[arg];
  float sum = 0.0f;
  for (int64_t j = 0; j < cols; ++j) sum = sum + expf(row[j] - mx);
  const float lse = logf(sum);
  for (int64_t j = 0; j < cols; ++j) ls[j] = nn::xent_log_softmax(row[j], mx, lse);
  return arg;
}

}  // namespace

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& y) {
  const LinearDims d = check_linear_forward(x, w, b, y, device());
  const int64_t rows = d.rows, in = d.in, out = d.out;
  if (rows > 0 && out > 0 && in > 0 && !overlaps(y, x) && !overlaps(y, w)) {
    // The packed kernels add the bias to the float accumulator and round once (cpu_gemm.h).
    const GemmOperand gx{x.data(), x.dtype(), in, false};
    const GemmOperand gw{w.data(), w.dtype(), in, true};
    const GemmOutput gy{y.data(),
                        y.dtype(),
                        out,
                        1.0f,
                        0.0f,
                        b.defined() ? b.data() : nullptr,
                        b.defined() ? b.dtype() : DType::f32};
    if (m_packed && m_gemm.run(rows, out, in, gx, gw, gy, *m_pool, m_bf16_dot)) return;
  }
  const float* xp = as_f32(x, m_ws_a);
  const float* wp = as_f32(w, m_ws_b);
  m_ws_d.resize(y.numel());
  float* acc = m_ws_d.data();
  if (rows > 0 && out > 0) {
    if (in == 0) {
      std::fill_n(acc, y.numel(), 0.0f);
    } else {
      // y = x @ w^T in float32 (OpenBLAS's accumulation order, fixed for a fixed thread count).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
                  static_cast<blasint>(out), static_cast<blasint>(in), 1.0f, xp,
                  static_cast<blasint>(in), wp, static_cast<blasint>(in), 0.0f, acc,
                  static_cast<blasint>(out));
    }
  }
  if (b.defined()) {
    // The bias joins the float accumulator before the one rounding, as a cuBLASLt bias epilogue
    // does (a separate add would round twice in f16/bf16).
    dispatch_float(b.dtype(), [&](auto tag) {
      using B = decltype(tag);
      const B* bp = static_cast<const B*>(b.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) acc[r * out + o] = acc[r * out + o] + to_f32(bp[o]);
      }
    });
  }
  store_f32(acc, y);
}

void CpuBackend::sum_rows(const Tensor& x, const Tensor& out) {
  check_sum_rows(x, out, device());
  const int64_t rows = x.dim(0), cols = x.dim(1);
  if (m_packed && !overlaps(x, out)) {
    // One lane per column, the rows in order (a bias gradient is a few microseconds: one thread).
    m_ws_d.resize(static_cast<size_t>(cols));
    float* acc = m_ws_d.data();
    vec::sum_rows(x.data(), x.dtype(), rows, cols, 0, cols, acc);
    store_f32(acc, out);
    return;
  }
  m_ws_d.resize(static_cast<size_t>(cols));
  float* acc = m_ws_d.data();
  std::fill_n(acc, cols, 0.0f);
  // Row by row, so each column is summed in row order (fixed, thread-independent).
  dispatch_float(x.dtype(), [&](auto tag) {
    using X = decltype(tag);
    const X* xp = static_cast<const X*>(x.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) acc[c] = acc[c] + to_f32(xp[r * cols + c]);
    }
  });
  store_f32(acc, out);
}

void CpuBackend::activation_forward(nn::ActivationKind kind, const Tensor& x, const Tensor& y) {
  check_activation_forward(kind, x, y, device());
  if (kind == nn::ActivationKind::relu && m_packed && same_or_disjoint(x, y)) {
    parallel_for(*m_pool, x.numel(), [&](size_t b, size_t e) {
      vec::relu_forward(x.data(), x.dtype(), y.data(), y.dtype(), b, e);
    });
    return;
  }
  if (kind == nn::ActivationKind::gelu_tanh && m_packed && same_or_disjoint(x, y)) {
    parallel_for(*m_pool, x.numel(), [&](size_t b, size_t e) {
      vec::gelu_tanh_forward(x.data(), x.dtype(), y.data(), y.dtype(), b, e);
    });
    return;
  }
  const float* xp = as_f32(x, m_ws_a);
  m_ws_d.resize(x.numel());
  float* yp = m_ws_d.data();
  if (kind == nn::ActivationKind::gelu_tanh) {
    // cpu_gelu.h's tanh, so that this level and the vector one give the same bits.
    for (size_t i = 0; i < x.numel(); ++i) yp[i] = gelu_tanh(xp[i]);
  } else {
    for (size_t i = 0; i < x.numel(); ++i) yp[i] = nn::activation_forward(kind, xp[i]);
  }
  store_f32(yp, y);
}

void CpuBackend::activation_backward(nn::ActivationKind kind, const Tensor& x, const Tensor& y,
                                     const Tensor& dy, const Tensor& dx) {
  check_activation_backward(kind, x, y, dy, dx, device());
  // relu and tanh read only the output and the gelus only the input (nn_math.h).
  const bool reads_input = nn::activation_reads_input(kind);
  const Tensor& used = reads_input ? x : y;
  if (kind == nn::ActivationKind::relu && m_packed && same_or_disjoint(dy, dx) &&
      !overlaps(y, dx)) {
    parallel_for(*m_pool, dy.numel(), [&](size_t b, size_t e) {
      vec::relu_backward(y.data(), y.dtype(), dy.data(), dy.dtype(), dx.data(), dx.dtype(), b, e);
    });
    return;
  }
  if (kind == nn::ActivationKind::gelu_tanh && m_packed && same_or_disjoint(dy, dx) &&
      same_or_disjoint(x, dx)) {
    parallel_for(*m_pool, dy.numel(), [&](size_t b, size_t e) {
      vec::gelu_tanh_backward(x.data(), x.dtype(), dy.data(), dy.dtype(), dx.data(), dx.dtype(), b,
                              e);
    });
    return;
  }
  const float* up = as_f32(used, m_ws_a);
  const float* dyp = as_f32(dy, m_ws_b);
  m_ws_d.resize(dy.numel());
  float* dxp = m_ws_d.data();
  if (kind == nn::ActivationKind::gelu_tanh) {
    for (size_t i = 0; i < dy.numel(); ++i) dxp[i] = dyp[i] * gelu_tanh_grad(up[i]);
    store_f32(dxp, dx);
    return;
  }
  for (size_t i = 0; i < dy.numel(); ++i) {
    const float xi = reads_input ? up[i] : 0.0f;
    const float yi = reads_input ? 0.0f : up[i];
    dxp[i] = nn::activation_backward(kind, xi, yi, dyp[i]);
  }
  store_f32(dxp, dx);
}

void CpuBackend::dropout_apply(const Tensor& in, const Tensor& out, float p, uint64_t seed,
                               uint64_t offset, const char* what) {
  check_dropout(in, out, p, what, device());
  // p == 1 makes the scale inf, but then no element is kept, so it is never used.
  const float scale = nn::dropout_scale(p);
  const float* ip = as_f32(in, m_ws_a);
  m_ws_d.resize(in.numel());
  float* op = m_ws_d.data();
  for (size_t i = 0; i < in.numel(); ++i) {
    op[i] = nn::dropout_keep(seed, offset, i, p) ? ip[i] * scale : 0.0f;
  }
  store_f32(op, out);
}

void CpuBackend::dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed,
                                 uint64_t offset) {
  dropout_apply(x, y, p, seed, offset, "dropout_forward");
}

void CpuBackend::dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed,
                                  uint64_t offset) {
  dropout_apply(dy, dx, p, seed, offset, "dropout_backward");
}

void CpuBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                       const Tensor& loss, const Tensor& correct,
                                       const Tensor& dlogits, const Tensor& grad_scale) {
  check_softmax_cross_entropy(logits, labels, loss, correct, dlogits, grad_scale, device());
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  // The labels are checked here (the GPU clamps them: no sync).
  const int32_t* lab = labels.data_as<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    if (lab[r] < 0 || lab[r] >= cols) {
      throw Error{ErrorKind::invalid_argument,
                  "softmax_cross_entropy: label " + std::to_string(lab[r]) + " of row " +
                      std::to_string(r) + " is outside [0, " + std::to_string(cols) + ")"};
    }
  }
  if (m_packed && rows > 0 && cols > 0 && !overlaps(loss, logits) &&
      (!dlogits.defined() || !overlaps(loss, dlogits))) {
    softmax_cross_entropy_rows(logits, lab, loss, correct, dlogits, grad_scale);
    return;
  }
  const float* xp = as_f32(logits, m_ws_a);
  m_ws_e.resize(static_cast<size_t>(cols));
  float* ls = m_ws_e.data();  // log_softmax of the current row
  float* dp = nullptr;
  float c = 0.0f;
  if (dlogits.defined()) {
    m_ws_d.resize(dlogits.numel());
    dp = m_ws_d.data();
    // nll_loss_backward with reduction 'mean' hands -grad_output / total_weight to the target.
    c = -*grad_scale.data_as<float>() / static_cast<float>(rows);
  }
  float loss_sum = 0.0f;
  int32_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    const int64_t target = lab[r];
    const int64_t arg = xent_log_softmax_row(row, cols, ls);
    loss_sum = loss_sum + nn::xent_row_loss(ls[target]);
    if (arg == target) ++hits;
    if (dp) {
      for (int64_t j = 0; j < cols; ++j) dp[r * cols + j] = nn::xent_grad(ls[j], j == target, c);
    }
  }
  // Mean over rows as nll_loss divides by its total weight (rows == 0 gives NaN, as there).
  *loss.data_as<float>() = loss_sum / static_cast<float>(rows);
  if (correct.defined()) *correct.data_as<int32_t>() = hits;
  if (dp) store_f32(dp, dlogits);
}

// softmax_cross_entropy fused per row, the rows split over the pool's threads: each row is
// widened into a per-thread float row, its log_softmax formed there and its gradient rounded
// once into dlogits, so the vocabulary-wide row is written once (no float copy of the logits or
// of the gradient). Every row's arithmetic is the scalar loop's above; the row losses are kept
// and summed afterwards in row order, so the loss has its bits too.
void CpuBackend::softmax_cross_entropy_rows(const Tensor& logits, const int32_t* lab,
                                            const Tensor& loss, const Tensor& correct,
                                            const Tensor& dlogits, const Tensor& grad_scale) {
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  const size_t threads = static_cast<size_t>(m_pool->threads());
  if (m_ws_e.size() < 2 * threads * static_cast<size_t>(cols)) {
    m_ws_e.resize(2 * threads * static_cast<size_t>(cols));
  }
  if (m_ws_d.size() < static_cast<size_t>(rows)) m_ws_d.resize(static_cast<size_t>(rows));
  if (m_ws_idx.size() < static_cast<size_t>(rows)) m_ws_idx.resize(static_cast<size_t>(rows));
  float* row_loss = m_ws_d.data();
  int32_t* row_hit = m_ws_idx.data();
  const bool grad = dlogits.defined();
  const float c = grad ? -*grad_scale.data_as<float>() / static_cast<float>(rows) : 0.0f;
  const size_t in_size = dtype_size(logits.dtype());
  const size_t out_size = grad ? dtype_size(dlogits.dtype()) : 0;
  const auto* in = static_cast<const char*>(logits.data());
  auto* out = grad ? static_cast<char*>(dlogits.data()) : nullptr;
  for_row_blocks(*m_pool, rows, 8 * cols, [&](int64_t r0, int64_t r1, int thread) {
    float* row = m_ws_e.data() + 2 * static_cast<size_t>(thread) * static_cast<size_t>(cols);
    float* ls = row + cols;
    for (int64_t r = r0; r < r1; ++r) {
      vec::cast(in + static_cast<size_t>(r * cols) * in_size, logits.dtype(), row, DType::f32, 0,
                static_cast<size_t>(cols));
      const int64_t target = lab[r];
      const int64_t arg = xent_log_softmax_row(row, cols, ls);
      row_loss[r] = nn::xent_row_loss(ls[target]);
      row_hit[r] = arg == target ? 1 : 0;
      if (grad) {
        for (int64_t j = 0; j < cols; ++j) row[j] = nn::xent_grad(ls[j], j == target, c);
        vec::cast(row, DType::f32, out + static_cast<size_t>(r * cols) * out_size, dlogits.dtype(),
                  0, static_cast<size_t>(cols));
      }
    }
  });
  float loss_sum = 0.0f;
  int32_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    loss_sum = loss_sum + row_loss[r];
    hits += row_hit[r];
  }
  *loss.data_as<float>() = loss_sum / static_cast<float>(rows);
  if (correct.defined()) *correct.data_as<int32_t>() = hits;
}

void CpuBackend::mse(const Tensor& pred, const Tensor& target, const Tensor& loss,
                     const Tensor& dpred, const Tensor& grad_scale) {
  check_mse(pred, target, loss, dpred, grad_scale, device());
  const size_t n = pred.numel();
  const float* pp = as_f32(pred, m_ws_a);
  const float* tp = target.data_as<float>();
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float d = pp[i] - tp[i];
    sum = sum + d * d;
  }
  if (dpred.defined()) {
    // mse_loss_backward's norm is the double 2. / numel, used as a float scalar.
    const float two_over_n = static_cast<float>(2.0 / static_cast<double>(n));
    const float gs = *grad_scale.data_as<float>();
    m_ws_d.resize(n);
    float* dp = m_ws_d.data();
    for (size_t i = 0; i < n; ++i) dp[i] = nn::mse_grad(pp[i], tp[i], two_over_n, gs);
    store_f32(dp, dpred);
  }
  *loss.data_as<float>() = sum / static_cast<float>(n);
}

void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                    float eps) {
  const std::array<int64_t, 2> rc =
      check_layer_norm_forward(x, gamma, beta, y, mean, rstd, device());
  const int64_t rows = rc[0], cols = rc[1];
  if (m_packed && same_or_disjoint(x, y) && !overlaps(mean, x) && !overlaps(mean, y) &&
      !overlaps(rstd, x) && !overlaps(rstd, y) && !overlaps(y, gamma) && !overlaps(y, beta) &&
      !overlaps(mean, rstd)) {
    // 16 rows per vector, each lane summing its row in index order (cpu_vector.h): the bits
    // below, on the pool's threads.
    const size_t per_thread = 16 * static_cast<size_t>(cols);
    const size_t need = per_thread * static_cast<size_t>(m_pool->threads());
    if (m_ws_ln.size() < need) m_ws_ln.resize(need);
    for_row_blocks(*m_pool, rows, cols, [&](int64_t r0, int64_t r1, int thread) {
      vec::layer_norm_forward_rows(x.data(), x.dtype(), gamma.data_as<float>(),
                                   beta.data_as<float>(), y.data(), y.dtype(),
                                   mean.data_as<float>(), rstd.data_as<float>(), cols, r0, r1, eps,
                                   m_ws_ln.data() + per_thread * static_cast<size_t>(thread));
    });
    return;
  }
  const float* xp = as_f32(x, m_ws_a);
  const float* g = gamma.data_as<float>();
  const float* b = beta.data_as<float>();
  float* mp = mean.data_as<float>();
  float* rp = rstd.data_as<float>();
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  const float n = static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * cols;
    // Two passes (mean, then the biased variance of the centred values), each summed in index
    // order: the textbook two-pass algorithm, which cannot go negative as E[x^2] - E[x]^2 can.
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) sum = sum + row[j];
    const float mu = sum / n;
    float sq = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float d = row[j] - mu;
      sq = sq + d * d;
    }
    const float rs = nn::layer_norm_rstd(sq / n, eps);
    for (int64_t j = 0; j < cols; ++j) {
      yp[r * cols + j] = nn::layer_norm_forward(row[j], mu, rs, g[j], b[j]);
    }
    mp[r] = mu;
    rp[r] = rs;
  }
  store_f32(yp, y);
}

// dx by PyTorch's CPU LayerNormBackward (aten/src/ATen/native/cpu/layer_norm_kernel.cpp,
// layer_norm_backward_frame), per row with a = rstd, mean, gamma and C columns:
//   ds = sum_j dy_j * gamma_j * x_j,   db = sum_j dy_j * gamma_j
//   b  = (db * mean - ds) * a^3 / C,   c = -b * mean - db * a / C
//   dx_j = a * dy_j * gamma_j + b * x_j + c
// which is the closed form of d/dx of ((x - mean) * rstd * gamma) with the mean and the biased
// variance both depending on x. dgamma += sum_r dy * (x - mean) * rstd and dbeta += sum_r dy are
// summed from zero over the rows in order and then added to the existing gradients once, as
// autograd accumulates a fresh gradient into .grad.
void CpuBackend::layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                     const Tensor& dgamma, const Tensor& dbeta) {
  const std::array<int64_t, 2> rc =
      check_layer_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, device());
  const int64_t rows = rc[0], cols = rc[1];
  const bool dx_ok =
      !dx.defined() ||
      (same_or_disjoint(dx, x) && same_or_disjoint(dx, dy) && !overlaps(dx, gamma) &&
       !overlaps(dx, mean) && !overlaps(dx, rstd) && (!dgamma.defined() || !overlaps(dx, dgamma)) &&
       (!dbeta.defined() || !overlaps(dx, dbeta)));
  if (m_packed && dx_ok) {
    // The parameter sums first (they read every row of x and dy, which dx may overwrite), one
    // lane per column over the rows in order, the pool's threads splitting the columns; then dx,
    // 16 rows per vector as the forward. The bits of the scalar code below.
    const float* mp = mean.data_as<float>();
    const float* rp = rstd.data_as<float>();
    if (dgamma.defined() || dbeta.defined()) {
      m_ws_e.resize(2 * static_cast<size_t>(cols));
      float* pg = m_ws_e.data();
      float* pb = pg + cols;
      const int64_t col_blocks = (cols + 15) / 16;
      int64_t parts = std::min<int64_t>(
          4 * m_pool->threads(),
          static_cast<int64_t>(static_cast<double>(rows) * static_cast<double>(cols) /
                               static_cast<double>(kParallelGrain)));
      parts = std::clamp<int64_t>(parts, 1, col_blocks);
      m_pool->run(parts, [&](int64_t p, int) {
        const int64_t c0 = std::min(cols, col_blocks * p / parts * 16);
        const int64_t c1 = std::min(cols, col_blocks * (p + 1) / parts * 16);
        if (c0 < c1) {
          vec::layer_norm_backward_params(x.data(), x.dtype(), dy.data(), dy.dtype(), mp, rp, rows,
                                          cols, c0, c1, pg, pb);
        }
      });
      if (dgamma.defined()) {
        float* dg = dgamma.data_as<float>();
        for (int64_t j = 0; j < cols; ++j) dg[j] = dg[j] + pg[j];
      }
      if (dbeta.defined()) {
        float* dbp = dbeta.data_as<float>();
        for (int64_t j = 0; j < cols; ++j) dbp[j] = dbp[j] + pb[j];
      }
    }
    if (dx.defined()) {
      const size_t per_thread = 32 * static_cast<size_t>(cols);
      const size_t need = per_thread * static_cast<size_t>(m_pool->threads());
      if (m_ws_ln.size() < need) m_ws_ln.resize(need);
      for_row_blocks(*m_pool, rows, cols, [&](int64_t r0, int64_t r1, int thread) {
        vec::layer_norm_backward_dx_rows(
            x.data(), x.dtype(), dy.data(), dy.dtype(), gamma.data_as<float>(), mp, rp, dx.data(),
            dx.dtype(), cols, r0, r1, m_ws_ln.data() + per_thread * static_cast<size_t>(thread));
      });
    }
    return;
  }
  const float* xp = as_f32(x, m_ws_a);
  const float* dyp = as_f32(dy, m_ws_b);
  const float* g = gamma.data_as<float>();
  const float* mp = mean.data_as<float>();
  const float* rp = rstd.data_as<float>();
  float* dxp = nullptr;
  if (dx.defined()) {
    m_ws_d.resize(dx.numel());
    dxp = m_ws_d.data();
  }
  m_ws_e.resize(2 * static_cast<size_t>(cols));
  float* pg = m_ws_e.data();  // this call's dgamma, then dbeta
  float* pb = pg + cols;
  std::fill_n(pg, 2 * cols, 0.0f);
  const float scale = 1.0f / static_cast<float>(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * cols;
    const float* dyr = dyp + r * cols;
    const float a = rp[r];
    const float mu = mp[r];
    if (dxp) {
      float ds = 0.0f, db = 0.0f;
      for (int64_t j = 0; j < cols; ++j) {
        const float dyg = dyr[j] * g[j];
        ds = ds + dyg * xr[j];
        db = db + dyg;
      }
      const float b = nn::layer_norm_backward_b(ds, db, mu, a, scale);
      const float c = nn::layer_norm_backward_c(b, db, mu, a, scale);
      float* dxr = dxp + r * cols;
      for (int64_t j = 0; j < cols; ++j)
        dxr[j] = nn::layer_norm_backward_dx(a, dyr[j], g[j], b, xr[j], c);
    }
    for (int64_t j = 0; j < cols; ++j) {
      pg[j] = pg[j] + dyr[j] * nn::layer_norm_xhat(xr[j], mu, a);
      pb[j] = pb[j] + dyr[j];
    }
  }
  if (dxp) store_f32(dxp, dx);
  if (dgamma.defined()) {
    float* dg = dgamma.data_as<float>();
    for (int64_t j = 0; j < cols; ++j) dg[j] = dg[j] + pg[j];
  }
  if (dbeta.defined()) {
    float* dbp = dbeta.data_as<float>();
    for (int64_t j = 0; j < cols; ++j) dbp[j] = dbp[j] + pb[j];
  }
}

void CpuBackend::clip_coef(const Tensor& norm, float max_norm, const Tensor& coef) {
  check_clip_coef(norm, coef, device());
  // nn::clip_coef: clip_grad_norm_'s reciprocal-then-product, clamped at 1 with NaN kept.
  *coef.data_as<float>() = nn::clip_coef(*norm.data_as<float>(), max_norm);
}

// RMSNorm: per row the squares summed in index order from 0, rstd, then weight * round_x(x *
// rstd) (nn_math.h); rows are independent, split over the pool's threads in 16-row blocks, so the
// thread count changes no bit. y is formed in a workspace and stored at the end (y may be x).
void CpuBackend::rms_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& y,
                                  const Tensor& rstd, float eps) {
  const auto [rows, cols] = check_rms_norm_forward(x, weight, y, rstd, device());
  const float* xp = as_f32(x, m_ws_a);
  const float* w = weight.data_as<float>();
  float* rp = rstd.data_as<float>();
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  const int x_dtype = static_cast<int>(x.dtype());
  const float n = static_cast<float>(cols);
  for_row_blocks(*m_pool, rows, cols, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = xp + r * cols;
      float sq = 0.0f;
      for (int64_t j = 0; j < cols; ++j) sq = sq + row[j] * row[j];
      const float a = nn::rms_norm_rstd(sq, n, eps);
      for (int64_t j = 0; j < cols; ++j)
        yp[r * cols + j] = nn::rms_norm_forward(row[j], a, w[j], x_dtype);
      rp[r] = a;
    }
  });
  store_f32(yp, y);
}

// sum := x + r in float (add_'s x + 1 * r: the product is exact), then rms_norm_forward on sum:
// the composition itself, so bitwise it.
void CpuBackend::residual_rms_norm_forward(const Tensor& x, const Tensor& r, const Tensor& sum,
                                           const Tensor& weight, const Tensor& y,
                                           const Tensor& rstd, float eps) {
  check_residual_rms_norm(x, r, sum, weight, y, rstd, device());
  const float* rp = as_f32(r, m_ws_b);
  const float* xp = x.data_as<float>();
  float* sp = sum.data_as<float>();
  parallel_for(*m_pool, x.numel(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) sp[i] = xp[i] + rp[i];
  });
  rms_norm_forward(sum, weight, y, rstd, eps);
}

// RMSNorm backward (backend.h): per row the dot of g = round_x(dy * weight) with x in index order,
// then dx; dweight sums dy * round_x(x * rstd) over the rows in order per column, from 0, added
// once. Rows (dx) and columns (dweight) are split over the threads; no sum crosses a split.
void CpuBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                   const Tensor& dy, const Tensor& dx, const Tensor& dweight,
                                   bool accumulate, const Tensor& dy_weight) {
  const auto [rows, cols] =
      check_rms_norm_backward(x, weight, rstd, dy, dx, dweight, accumulate, dy_weight, device());
  const float* xp = as_f32(x, m_ws_a);
  const float* dyp = as_f32(dy, m_ws_b);
  const float* w = weight.data_as<float>();
  const float* rp = rstd.data_as<float>();
  const int x_dtype = static_cast<int>(x.dtype());
  if (dweight.defined()) {
    float* dw = dweight.data_as<float>();
    parallel_for(
        *m_pool, static_cast<size_t>(cols),
        [&](size_t c0, size_t c1) {
          for (size_t j = c0; j < c1; ++j) {
            float s = 0.0f;
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = static_cast<size_t>(r * cols) + j;
              s = s + dyp[i] * nn::round_through(x_dtype, xp[i] * rp[r]);
            }
            dw[j] = dw[j] + s;
          }
        },
        16);
  }
  if (dy_weight.defined()) {  // the floats round_x rounds (dy and weight are read only)
    float* dw = dy_weight.data_as<float>();
    parallel_for(*m_pool, dy_weight.numel(), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) dw[i] = dyp[i] * w[i % static_cast<size_t>(cols)];
    });
  }
  if (!dx.defined()) return;
  const float* prev = accumulate ? as_f32(dx, m_ws_c) : nullptr;
  m_ws_d.resize(dx.numel());
  float* dxp = m_ws_d.data();
  const float scale = 1.0f / static_cast<float>(cols);
  for_row_blocks(*m_pool, rows, cols, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * cols;
      const float* dyr = dyp + r * cols;
      const float a = rp[r];
      float dot = 0.0f;
      for (int64_t j = 0; j < cols; ++j)
        dot = dot + nn::rms_norm_grad_in(dyr[j], w[j], x_dtype) * xr[j];
      const float b = nn::rms_norm_backward_b(dot, a, scale);
      float* dxr = dxp + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float v =
            nn::rms_norm_backward_dx(a, nn::rms_norm_grad_in(dyr[j], w[j], x_dtype), b, xr[j]);
        // The accumulate form: add_(dx, t) of the float gradient t, one rounding.
        dxr[j] = prev ? prev[r * cols + j] + v : v;
      }
    }
  });
  store_f32(dxp, dx);
}

// SwiGLU (backend.h): elementwise over [R, I], the gate at column i and the up at I + i of each
// row; nn_math.h's swiglu_* with the roundings to gate_up's dtype.
void CpuBackend::swiglu_forward(const Tensor& gate_up, const Tensor& y) {
  const auto [rows, width] = check_swiglu_forward(gate_up, y, device());
  const float* gp = as_f32(gate_up, m_ws_a);
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  const int lowp = static_cast<int>(gate_up.dtype());
  parallel_for(*m_pool, y.numel(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const size_t r = i / static_cast<size_t>(width), c = i % static_cast<size_t>(width);
      const float* row = gp + r * 2 * static_cast<size_t>(width);
      yp[i] = nn::swiglu_forward(row[c], row[width + c], lowp);
    }
  });
  store_f32(yp, y);
}

void CpuBackend::swiglu_backward(const Tensor& gate_up, const Tensor& dy, const Tensor& dgate_up,
                                 const Tensor& dy_up) {
  const auto [rows, width] = check_swiglu_backward(gate_up, dy, dgate_up, dy_up, device());
  float* dyu = dy_up.defined() ? dy_up.data_as<float>() : nullptr;
  const float* gp = as_f32(gate_up, m_ws_a);
  const float* dyp = as_f32(dy, m_ws_b);
  m_ws_d.resize(dgate_up.numel());
  float* dp = m_ws_d.data();
  const int lowp = static_cast<int>(gate_up.dtype());
  const auto w = static_cast<size_t>(width);
  parallel_for(*m_pool, dy.numel(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const size_t r = i / w, c = i % w;
      const float g = gp[r * 2 * w + c], u = gp[r * 2 * w + w + c];
      dp[r * 2 * w + c] = nn::swiglu_dgate(dyp[i], g, u, lowp);
      if (dyu) dyu[i] = dyp[i] * u;
      dp[r * 2 * w + w + c] = nn::swiglu_dup(dyp[i], g, lowp);
    }
  });
  store_f32(dp, dgate_up);
}

}  // namespace ampctl::cpu
