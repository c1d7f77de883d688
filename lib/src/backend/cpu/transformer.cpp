// The CPU backend's transformer ops (backend.h, "transformer ops"): the reference the CUDA
// kernels are checked against.
//
//   * embedding_forward: one float add per element, rows split over the pool's threads.
//   * embedding_backward: the rows are grouped by token with a counting sort (ascending row order
//     inside each group, in a grow-only index workspace); each vocabulary row present sums its
//     rows' gradients in float in ascending row order, starting from 0, and adds that sum to
//     dwte once; the position gradient likewise over b. Threads split the vocabulary (and the
//     positions) into fixed ranges, so no element's summation order depends on the thread count.
//     Vocabulary rows of tokens absent from the batch are left untouched (not even + 0).
//   * gemm_batched: each matrix of the batch on the packed kernels of cpu_gemm.cpp, run whole on
//     one thread (an engine per contiguous chunk of the batch, a workerless pool; run_chunked),
//     the pool's threads claiming chunks (or, with fewer matrices than threads, each split over
//     the pool as gemm splits it); the packed
//     kernels never split k, so each output has the same bits as gemm would give it.
//     On the portable path, OpenBLAS's sgemm per matrix on widened copies, as gemm does.
//   * heads_from_rows / heads_to_rows: row-slice copies (memcpy of hs elements), the (b, h)
//     matrices split over the pool's threads.
//   * causal_softmax_forward: one pass over each row's unmasked prefix j <= i forms s_j (rounded
//     to the scores' dtype first when round_scaled) and the max in a per-thread row buffer, a
//     second the exponentials (cpu_exp.h's expf_glibc: glibc's expf, computed here so that both
//     levels share its bits) and their float sum in ascending j, a third the one rounding of
//     e_j / sum; masked entries are stored as exact zeros.
//   * causal_softmax_backward: the float dot sum_k dp_k * p_k in ascending k, then
//     round(round?(p_j * (dp_j - dot)) * scale) per element.
// Rows are independent in both softmax passes, so splitting them over threads changes no bit.
//   * attention_forward / attention_backward (avx512 and avx2 paths): Backend's default
//   composition, op
//     for op on the same buffers, but one (b, h) head at a time on the thread that claimed it:
//     the head's products on that thread's packed engine (as gemm_batched runs a matrix whole),
//     then its softmax rows and its cast, while its T x T scores are still in L1/L2. One pool job
//     instead of four (forward) or five (backward); the arithmetic of every element is the
//     composition's, so the bits are too. The products skip the causal mask's work (cpu_gemm.h,
//     GemmTriangle): the score tiles above the diagonal (never read), and the k steps where the
//     probabilities or dscores (or their transposes) are exact zeros, which leave the sums'
//     bits unchanged while q, k, v and dy are finite; about a third of the products' work at
//     T 64 and nearly half at large T. Grouped-query attention (G query heads per key/value
//     head): the forward's head i reads kv head i / G; the backward claims a kv head, runs its
//     G query heads in order and then dv and dk as one product over their G T rows (the
//     composition's grouped view), so the group's sum has one order whatever the threads.
//     On the portable path the default composition runs.
//   * rope_forward / rope_backward: per (head, position) row the rotate-half pairs of nn_math.h,
//     rows split over the threads (each element computed alone: no order to keep).
// On the avx512 and avx2 paths (cpu_vector.h) the same order runs with the scaling, the max, the
// division and the backward's per-element products and the exponentials on 16 lanes; both sums
// stay
// sequential in j per row, 16 rows at a time (row q in lane q, from 16 x 16 tiles transposed in
// registers), so the bits are the scalar code's.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/math/nn_math.h"
#include "cpu_backend.h"
#include "engine/cpu_exp.h"
#include "engine/cpu_parallel.h"
#include "engine/cpu_vector.h"

namespace ampctl::cpu {
namespace {

template <typename T>
float round_as(float v) {
  return to_f32(from_f32<T>(v));
}

// fn(i, engine, thread) for every i in [0, count), over the pool: the range is cut into one
// contiguous chunk per thread and chunk c works on engine c, whichever thread runs it. So every
// engine a call needs works in every call and its grow-only workspace is sized by the first one:
// a steady-state step allocates nothing. (With the engine of the thread that claims a matrix, a
// thread that stayed idle through the first steps, as one may on a loaded machine, allocated
// when it first took one.) Each matrix is computed whole by one engine, which only lends it
// workspace, so the results do not depend on the cut.
template <typename F>
void run_chunked(ThreadPool& pool, int64_t count, F&& fn) {
  const int64_t chunks = std::min<int64_t>(pool.threads(), count);
  pool.run(chunks, [&](int64_t c, int thread) {
    for (int64_t i = count * c / chunks; i < count * (c + 1) / chunks; ++i) {
      fn(i, static_cast<size_t>(c), thread);
    }
  });
}

}  // namespace

void CpuBackend::check_token_ids(const Tensor& tokens, int64_t vocab, const char* what) {
  const int32_t* ids = tokens.data_as<int32_t>();
  const int64_t t = tokens.dim(1);
  for (size_t i = 0; i < tokens.numel(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      const int64_t r = static_cast<int64_t>(i);
      throw Error{ErrorKind::invalid_argument,
                  std::string(what) + ": token id " + std::to_string(ids[i]) + " at [" +
                      std::to_string(r / t) + ", " + std::to_string(r % t) + "] is outside [0, " +
                      std::to_string(vocab) + ")"};
    }
  }
}

void CpuBackend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                   const Tensor& out) {
  const EmbeddingDims d = check_embedding_forward(tokens, wte, wpe, out, device());
  check_token_ids(tokens, d.vocab, "embedding_forward");
  const int32_t* ids = tokens.data_as<int32_t>();
  const float* te = wte.data_as<float>();
  const float* pe = wpe.data_as<float>();
  float* o = out.data_as<float>();
  const int64_t c = d.channels;
  for_rows(*m_pool, d.batch * d.time, c, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* tr = te + static_cast<int64_t>(ids[r]) * c;
      const float* pr = pe + (r % d.time) * c;
      float* orow = o + r * c;
      for (int64_t j = 0; j < c; ++j) orow[j] = tr[j] + pr[j];
    }
  });
}

void CpuBackend::embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                    const Tensor& dwpe) {
  const EmbeddingDims d = check_embedding_backward(tokens, dout, dwte, dwpe, device());
  if (dwte.defined()) check_token_ids(tokens, d.vocab, "embedding_backward");
  const int64_t rows = d.batch * d.time, c = d.channels;
  const float* g = dout.data_as<float>();
  // One row of float sums per thread.
  const size_t threads = static_cast<size_t>(m_pool->threads());
  if (m_ws_e.size() < threads * static_cast<size_t>(c)) m_ws_e.resize(threads * c);

  // Positions: dwpe[t] += sum over b ascending (rows b*T + t).
  float* dp = dwpe.data_as<float>();
  for_rows(*m_pool, d.time, d.batch * c, [&](int64_t t0, int64_t t1, int thread) {
    float* acc = m_ws_e.data() + static_cast<size_t>(thread) * c;
    for (int64_t t = t0; t < t1; ++t) {
      std::fill_n(acc, c, 0.0f);
      for (int64_t b = 0; b < d.batch; ++b) {
        const float* gr = g + (b * d.time + t) * c;
        for (int64_t j = 0; j < c; ++j) acc[j] = acc[j] + gr[j];
      }
      float* drow = dp + t * c;
      for (int64_t j = 0; j < c; ++j) drow[j] = drow[j] + acc[j];
    }
  });
  if (!dwte.defined() || rows == 0) return;

  // Tokens: a stable counting sort of the rows by id (start[v] .. start[v + 1] in `order`).
  const int32_t* ids = tokens.data_as<int32_t>();
  const size_t v_count = static_cast<size_t>(d.vocab);
  m_ws_idx.resize(v_count + 1 + static_cast<size_t>(rows));
  int32_t* start = m_ws_idx.data();
  int32_t* order = start + v_count + 1;
  std::fill_n(start, v_count + 1, 0);
  for (int64_t r = 0; r < rows; ++r) ++start[ids[r] + 1];
  for (size_t v = 0; v < v_count; ++v) start[v + 1] += start[v];
  // Placing row r at the running end of its group keeps each group in ascending r; the running
  // ends end up where the next group starts, so `start` is shifted back afterwards.
  for (int64_t r = 0; r < rows; ++r) order[start[ids[r]]++] = static_cast<int32_t>(r);
  for (size_t v = v_count; v > 0; --v) start[v] = start[v - 1];
  start[0] = 0;

  float* dw = dwte.data_as<float>();
  // Split the vocabulary evenly; the cost per vocabulary row is on average rows / V rows of C.
  for_rows(*m_pool, d.vocab, std::max<int64_t>(1, rows * c / std::max<int64_t>(d.vocab, 1)),
           [&](int64_t v0, int64_t v1, int thread) {
             float* acc = m_ws_e.data() + static_cast<size_t>(thread) * c;
             for (int64_t v = v0; v < v1; ++v) {
               const int32_t b = start[v], e = start[v + 1];
               if (b == e) continue;
               std::fill_n(acc, c, 0.0f);
               for (int32_t i = b; i < e; ++i) {
                 const float* gr = g + static_cast<int64_t>(order[i]) * c;
                 for (int64_t j = 0; j < c; ++j) acc[j] = acc[j] + gr[j];
               }
               float* drow = dw + v * c;
               for (int64_t j = 0; j < c; ++j) drow[j] = drow[j] + acc[j];
             }
           });
}

// The packed kernels' batched product (batch, m, n, k >= 1, AVX-512), the epilogue's max into
// amax when given (gemm_batched_round_amax).
void CpuBackend::gemm_batched_packed(const GemmBatchedDims& d, const Tensor& a, bool trans_a,
                                     const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                                     float beta, AmaxSink* amax) {
  const int64_t m = d.m, n = d.n, k = d.k;
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  const size_t a_elems = static_cast<size_t>(m * k), b_elems = static_cast<size_t>(k * n),
               c_elems = static_cast<size_t>(m * n);
  const size_t as = dtype_size(a.dtype()), bs = dtype_size(b.dtype()), cs = dtype_size(c.dtype());
  const auto* ap = static_cast<const char*>(a.data());
  const auto* bp = static_cast<const char*>(b.data());
  auto* cp = static_cast<char*>(c.data());
  const auto operands = [&](int64_t i, GemmOperand& ga, GemmOperand& gb, GemmOutput& gc) {
    ga = GemmOperand{ap + static_cast<size_t>(i) * a_elems * as, a.dtype(), lda, trans_a};
    gb = GemmOperand{bp + static_cast<size_t>(i) * b_elems * bs, b.dtype(), ldb, trans_b};
    gc = GemmOutput{cp + static_cast<size_t>(i) * c_elems * cs,
                    c.dtype(),
                    n,
                    alpha,
                    beta,
                    nullptr,
                    DType::f32,
                    amax};
  };
  // run() declines only on the portable path, for an i32 output or an empty product, all excluded
  // by the callers, so a decline is a broken invariant, reported rather than half-computed.
  std::atomic<bool> declined{false};
  if (d.batch < m_pool->threads()) {
    // Fewer matrices than threads: each one split over the pool, as gemm does.
    for (int64_t i = 0; i < d.batch; ++i) {
      GemmOperand ga{}, gb{};
      GemmOutput gc{};
      operands(i, ga, gb, gc);
      if (!m_gemm.run(m, n, k, ga, gb, gc, *m_pool, m_bf16_dot)) declined = true;
    }
  } else {
    // Claimed one matrix at a time, each whole on the thread that claimed it.
    if (m_batch_gemm.size() < static_cast<size_t>(m_pool->threads())) {
      m_batch_gemm.resize(static_cast<size_t>(m_pool->threads()));
    }
    run_chunked(*m_pool, d.batch, [&](int64_t i, size_t engine, int) {
      GemmOperand ga{}, gb{};
      GemmOutput gc{};
      operands(i, ga, gb, gc);
      if (!m_batch_gemm[engine].run(m, n, k, ga, gb, gc, *m_serial_pool, m_bf16_dot)) {
        declined = true;
      }
    });
  }
  if (!declined) return;
  throw Error{ErrorKind::runtime, "gemm_batched: the packed kernels declined a float product"};
}

void CpuBackend::gemm_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                              const Tensor& c, float alpha, float beta) {
  const GemmBatchedDims d = check_gemm_batched(a, trans_a, b, trans_b, c, device());
  const int64_t m = d.m, n = d.n, k = d.k;
  if (d.batch == 0 || m == 0 || n == 0) return;
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  const size_t a_elems = static_cast<size_t>(m * k), b_elems = static_cast<size_t>(k * n),
               c_elems = static_cast<size_t>(m * n);
  if (k == 0) {
    // No products: C := beta * C (0 when beta == 0, as gemm), one rounding.
    const float* cp = as_f32(c, m_ws_c);
    m_ws_d.resize(c.numel());
    for (size_t i = 0; i < c.numel(); ++i) m_ws_d[i] = beta == 0.0f ? 0.0f : beta * cp[i];
    store_f32(m_ws_d.data(), c);
    return;
  }
  if (m_packed) {
    gemm_batched_packed(d, a, trans_a, b, trans_b, c, alpha, beta, nullptr);
    return;
  }
  // Portable: OpenBLAS per matrix on widened operands, C widened when it is read or not f32.
  const float* af = as_f32(a, m_ws_a);
  const float* bf = as_f32(b, m_ws_b);
  float* cf;
  if (c.dtype() == DType::f32) {
    cf = c.data_as<float>();
  } else {
    if (beta != 0.0f) {
      as_f32(c, m_ws_c);
    } else {
      m_ws_c.resize(c.numel());
    }
    cf = m_ws_c.data();
  }
  for (int64_t i = 0; i < d.batch; ++i) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha,
                af + static_cast<size_t>(i) * a_elems, static_cast<blasint>(lda),
                bf + static_cast<size_t>(i) * b_elems, static_cast<blasint>(ldb), beta,
                cf + static_cast<size_t>(i) * c_elems, static_cast<blasint>(n));
  }
  if (c.dtype() != DType::f32) store_f32(cf, c);
}

void CpuBackend::heads_from_rows(const Tensor& src, int64_t column, const Tensor& dst) {
  const HeadsDims d = check_heads(src, column, dst, "heads_from_rows", device());
  const size_t es = dtype_size(src.dtype());
  const auto* s = static_cast<const char*>(src.data());
  auto* o = static_cast<char*>(dst.data());
  const size_t row_bytes = static_cast<size_t>(d.head_size) * es;
  // One (b, h) matrix per item, split over the pool's threads (copies: no arithmetic).
  for_rows(*m_pool, d.batch * d.heads, d.time * d.head_size, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.heads, h = i % d.heads;
      for (int64_t t = 0; t < d.time; ++t) {
        const int64_t from = (b * d.time + t) * d.width + column + h * d.head_size;
        const int64_t to = ((b * d.heads + h) * d.time + t) * d.head_size;
        std::memcpy(o + static_cast<size_t>(to) * es, s + static_cast<size_t>(from) * es,
                    row_bytes);
      }
    }
  });
}

void CpuBackend::heads_to_rows(const Tensor& src, const Tensor& dst, int64_t column) {
  const HeadsDims d = check_heads(dst, column, src, "heads_to_rows", device());
  const size_t es = dtype_size(src.dtype());
  const auto* s = static_cast<const char*>(src.data());
  auto* o = static_cast<char*>(dst.data());
  const size_t row_bytes = static_cast<size_t>(d.head_size) * es;
  for_rows(*m_pool, d.batch * d.heads, d.time * d.head_size, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.heads, h = i % d.heads;
      for (int64_t t = 0; t < d.time; ++t) {
        const int64_t to = (b * d.time + t) * d.width + column + h * d.head_size;
        const int64_t from = ((b * d.heads + h) * d.time + t) * d.head_size;
        std::memcpy(o + static_cast<size_t>(to) * es, s + static_cast<size_t>(from) * es,
                    row_bytes);
      }
    }
  });
}

void CpuBackend::causal_softmax_forward(const Tensor& scores, float scale, bool round_scaled,
                                        const Tensor& probs) {
  const SoftmaxDims d = check_causal_softmax_forward(scores, probs, device());
  const int64_t t = d.time;
  // Per thread: 16 rows of t floats (vec::causal_softmax_forward_rows sums 16 rows at once).
  const size_t threads = static_cast<size_t>(m_pool->threads()), ws = 16 * static_cast<size_t>(t);
  if (m_ws_e.size() < threads * ws) m_ws_e.resize(threads * ws);
  if (m_packed) {
    for_rows(*m_pool, d.count * t, t, [&](int64_t r0, int64_t r1, int thread) {
      vec::causal_softmax_forward_rows(scores.data(), scores.dtype(), probs.data(), probs.dtype(),
                                       t, r0, r1, scale, round_scaled,
                                       m_ws_e.data() + static_cast<size_t>(thread) * ws);
    });
    return;
  }
  dispatch_float(scores.dtype(), [&](auto stag) {
    using S = decltype(stag);
    dispatch_float(probs.dtype(), [&](auto ptag) {
      using P = decltype(ptag);
      const S* x = static_cast<const S*>(scores.data());
      P* y = static_cast<P*>(probs.data());
      for_rows(*m_pool, d.count * t, t, [&](int64_t r0, int64_t r1, int thread) {
        float* e = m_ws_e.data() + static_cast<size_t>(thread) * ws;
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t i = r % t;
          const S* xr = x + r * t;
          P* yr = y + r * t;
          // The row is read whole before it is written, so probs may be scores (in place).
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j <= i; ++j) {
            float s = to_f32(xr[j]) * scale;
            if (round_scaled) s = round_as<S>(s);
            e[j] = s;
            mx = s > mx ? s : mx;
          }
          float sum = 0.0f;
          for (int64_t j = 0; j <= i; ++j) {
            e[j] = expf_glibc(e[j] - mx);
            sum = sum + e[j];
          }
          for (int64_t j = 0; j <= i; ++j) yr[j] = from_f32<P>(e[j] / sum);
          for (int64_t j = i + 1; j < t; ++j) yr[j] = from_f32<P>(0.0f);
        }
      });
    });
  });
}

void CpuBackend::causal_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                         bool round_scaled, const Tensor& dscores) {
  const SoftmaxDims d = check_causal_softmax_backward(probs, dprobs, dscores, device());
  const int64_t t = d.time;
  if (m_packed) {
    for_rows(*m_pool, d.count * t, t, [&](int64_t r0, int64_t r1, int) {
      vec::causal_softmax_backward_rows(probs.data(), probs.dtype(), dprobs.data(), dprobs.dtype(),
                                        dscores.data(), dscores.dtype(), t, r0, r1, scale,
                                        round_scaled);
    });
    return;
  }
  dispatch_float(probs.dtype(), [&](auto ptag) {
    using P = decltype(ptag);
    dispatch_float(dprobs.dtype(), [&](auto gtag) {
      using G = decltype(gtag);
      dispatch_float(dscores.dtype(), [&](auto otag) {
        using O = decltype(otag);
        const P* p = static_cast<const P*>(probs.data());
        const G* g = static_cast<const G*>(dprobs.data());
        O* o = static_cast<O*>(dscores.data());
        for_rows(*m_pool, d.count * t, t, [&](int64_t r0, int64_t r1, int) {
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t i = r % t;
            const P* pr = p + r * t;
            const G* gr = g + r * t;
            O* orow = o + r * t;
            float dot = 0.0f;
            for (int64_t k = 0; k <= i; ++k) dot = dot + to_f32(gr[k]) * to_f32(pr[k]);
            for (int64_t j = 0; j <= i; ++j) {
              float v = to_f32(pr[j]) * (to_f32(gr[j]) - dot);
              if (round_scaled) v = round_as<O>(v);
              orow[j] = from_f32<O>(v * scale);
            }
            for (int64_t j = i + 1; j < t; ++j) orow[j] = from_f32<O>(0.0f);
          }
        });
      });
    });
  });
}

// Rotary embedding (backend.h): the rows (n, t) of [N, T, hs] in a workspace, stored at the end
// (out may be in itself).
void CpuBackend::rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                              const Tensor& y, int64_t pos0) {
  const auto [n, t, hs] = check_rope(x, cos, sin, y, pos0, "rope_forward", device());
  const float* xp = as_f32(x, m_ws_a);
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  const float* cp = cos.data_as<float>();
  const float* sp = sin.data_as<float>();
  const int64_t h = hs / 2;
  parallel_for(
      *m_pool, static_cast<size_t>(n * t),
      [&](size_t b, size_t e) {
        for (size_t row = b; row < e; ++row) {
          const int64_t p = pos0 + static_cast<int64_t>(row) % t;
          const float* xr = xp + row * static_cast<size_t>(hs);
          float* yr = yp + row * static_cast<size_t>(hs);
          for (int64_t d = 0; d < h; ++d) {
            const float c = cp[p * h + d], s = sp[p * h + d];
            yr[d] = nn::rope_first(xr[d], xr[d + h], c, s);
            yr[d + h] = nn::rope_second(xr[d], xr[d + h], c, s);
          }
        }
      },
      1);
  store_f32(yp, y);
}

void CpuBackend::rope_backward(const Tensor& dy, const Tensor& cos, const Tensor& sin,
                               const Tensor& dx, int64_t pos0, DType input_dtype) {
  const auto [n, t, hs] = check_rope(dy, cos, sin, dx, pos0, "rope_backward", device());
  if (input_dtype == DType::i32) checks::fail("rope_backward", "input_dtype must be a float dtype");
  const float* gp = as_f32(dy, m_ws_a);
  m_ws_d.resize(dx.numel());
  float* dp = m_ws_d.data();
  const float* cp = cos.data_as<float>();
  const float* sp = sin.data_as<float>();
  const int64_t h = hs / 2;
  const int in_dtype = static_cast<int>(input_dtype);
  parallel_for(
      *m_pool, static_cast<size_t>(n * t),
      [&](size_t b, size_t e) {
        for (size_t row = b; row < e; ++row) {
          const int64_t p = pos0 + static_cast<int64_t>(row) % t;
          const float* gr = gp + row * static_cast<size_t>(hs);
          float* dr = dp + row * static_cast<size_t>(hs);
          for (int64_t d = 0; d < h; ++d) {
            const float c = cp[p * h + d], s = sp[p * h + d];
            dr[d] = nn::rope_grad_first(gr[d], gr[d + h], c, s, in_dtype);
            dr[d + h] = nn::rope_grad_second(gr[d], gr[d + h], c, s, in_dtype);
          }
        }
      },
      1);
  store_f32(dp, dx);
}

namespace {

// One head's matrices: element offset i * count of a batch of [count] matrices, as bytes.
const void* head_at(const Tensor& t, int64_t i, int64_t count) {
  return static_cast<const char*>(t.data()) +
         static_cast<size_t>(i * count) * dtype_size(t.dtype());
}
void* head_at_mut(const Tensor& t, int64_t i, int64_t count) {
  return const_cast<void*>(head_at(t, i, count));
}

// One head's products on the claiming thread's engine, run whole (serial: a workerless pool);
// a product the packed kernels decline sets `declined`, which the op reports once after the
// pass.
auto head_product(GemmEngine& g, ThreadPool& serial, bool bf16_dot, std::atomic<bool>& declined) {
  return [&g, &serial, bf16_dot, &declined](int64_t m, int64_t n, int64_t k, const GemmOperand& a,
                                            const GemmOperand& b, const GemmOutput& out,
                                            GemmTriangle triangle) {
    if (!g.run(m, n, k, a, b, out, serial, bf16_dot, triangle)) declined = true;
  };
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                                   const Tensor& y, const AttentionBuffers& buffers) {
  if (!m_packed || !q.defined() || q.rank() != 3) {
    Backend::attention_forward(q, k, v, scale, y, buffers);
    return;
  }
  const AttentionSizes sizes = attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d =
      check_attention({&q, &k, &v}, {&y}, buffers, sizes, "attention_forward", device());
  const int64_t T = d.time, hs = d.head_size, tt = T * T, G = d.group;
  const DType dt = q.dtype();
  // att, the compute-dtype copy of probs that att @ v reads; probs itself for f32.
  const Tensor& att = dt == DType::f32 ? buffers.saved_f32 : buffers.saved_lowp;
  const size_t threads = static_cast<size_t>(m_pool->threads()), ws = 16 * static_cast<size_t>(T);
  if (m_ws_e.size() < threads * ws) m_ws_e.resize(threads * ws);
  if (m_batch_gemm.size() < threads) m_batch_gemm.resize(threads);
  std::atomic<bool> declined{false};
  run_chunked(*m_pool, d.count, [&](int64_t i, size_t engine, int thread) {
    const auto product = head_product(m_batch_gemm[engine], *m_serial_pool, m_bf16_dot, declined);
    void* scores = head_at_mut(buffers.scratch_lowp, i, tt);
    // scores := q k^T (gemm_batched(q, false, k, true, scores)).
    product(T, T, hs, GemmOperand{head_at(q, i, T * hs), dt, hs, false},
            GemmOperand{head_at(k, i / G, T * hs), dt, hs, true}, GemmOutput{scores, dt, T},
            GemmTriangle::out_lower);
    vec::causal_softmax_forward_rows(buffers.scratch_lowp.data(), dt, buffers.saved_f32.data(),
                                     DType::f32, T, i * T, (i + 1) * T, scale,
                                     /*round_scaled=*/true,
                                     m_ws_e.data() + static_cast<size_t>(thread) * ws);
    if (dt != DType::f32) {
      vec::cast(buffers.saved_f32.data(), DType::f32, buffers.saved_lowp.data(), dt,
                static_cast<size_t>(i * tt), static_cast<size_t>((i + 1) * tt));
    }
    // y := att v.
    product(T, hs, T, GemmOperand{head_at(att, i, tt), dt, T, false},
            GemmOperand{head_at(v, i / G, T * hs), dt, hs, false},
            GemmOutput{head_at_mut(y, i, T * hs), dt, hs}, GemmTriangle::a_lower);
  });
  if (declined) {
    throw Error{ErrorKind::runtime, "attention_forward: the packed kernels declined a product"};
  }
}

void CpuBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& y, const Tensor& dy, float scale,
                                    const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const AttentionBuffers& buffers) {
  if (!m_packed || !q.defined() || q.rank() != 3) {
    Backend::attention_backward(q, k, v, y, dy, scale, dq, dk, dv, buffers);
    return;
  }
  const AttentionSizes sizes = attention_workspace(q.dim(0), q.dim(1), q.dim(2), q.dtype());
  const AttentionDims d = check_attention({&q, &k, &v, &y, &dy}, {&dq, &dk, &dv}, buffers, sizes,
                                          "attention_backward", device());
  const int64_t T = d.time, hs = d.head_size, tt = T * T, m = d.count * tt, G = d.group;
  const DType dt = q.dtype();
  const Tensor& att = dt == DType::f32 ? buffers.saved_f32 : buffers.saved_lowp;
  // datt in the first half of scratch_lowp, dscores in the second (the default's layout).
  const Tensor datt = buffers.scratch_lowp.view(0, {m});
  const Tensor dscores = buffers.scratch_lowp.view(static_cast<size_t>(m), {m});
  const size_t threads = static_cast<size_t>(m_pool->threads());
  if (m_batch_gemm.size() < threads) m_batch_gemm.resize(threads);
  std::atomic<bool> declined{false};
  // One key/value head j at a time: its G query heads in order (datt, the softmax backward, dq),
  // then dv and dk as one product over the group's G T rows, the default composition's
  // gemm_batched on the grouped views (G = 1: the head's own products).
  run_chunked(*m_pool, d.count / G, [&](int64_t j, size_t engine, int) {
    const auto product = head_product(m_batch_gemm[engine], *m_serial_pool, m_bf16_dot, declined);
    const GemmOperand k_j{head_at(k, j, T * hs), dt, hs, false};
    for (int64_t i = j * G; i < (j + 1) * G; ++i) {
      const GemmOperand dy_i{head_at(dy, i, T * hs), dt, hs, false};
      // datt := dy v^T.
      product(T, T, hs, dy_i, GemmOperand{head_at(v, j, T * hs), dt, hs, true},
              GemmOutput{head_at_mut(datt, i, tt), dt, T}, GemmTriangle::out_lower);
      vec::causal_softmax_backward_rows(buffers.saved_f32.data(), DType::f32, datt.data(), dt,
                                        dscores.data(), dt, T, i * T, (i + 1) * T, scale,
                                        /*round_scaled=*/true);
      // dq := dscores k.
      product(T, hs, T, GemmOperand{head_at(dscores, i, tt), dt, T, false}, k_j,
              GemmOutput{head_at_mut(dq, i, T * hs), dt, hs}, GemmTriangle::a_lower);
    }
    // dv := att^T dy; dk := dscores^T q, over the group's G T rows (one head: its triangle).
    const GemmTriangle upper = G == 1 ? GemmTriangle::a_upper : GemmTriangle::none;
    const GemmOperand dy_g{head_at(dy, j * G, T * hs), dt, hs, false};
    product(T, hs, G * T, GemmOperand{head_at(att, j * G, tt), dt, T, true}, dy_g,
            GemmOutput{head_at_mut(dv, j, T * hs), dt, hs}, upper);
    product(T, hs, G * T, GemmOperand{head_at(dscores, j * G, tt), dt, T, true},
            GemmOperand{head_at(q, j * G, T * hs), dt, hs, false},
            GemmOutput{head_at_mut(dk, j, T * hs), dt, hs}, upper);
  });
  if (declined) {
    throw Error{ErrorKind::runtime, "attention_backward: the packed kernels declined a product"};
  }
}

}  // namespace ampctl::cpu
