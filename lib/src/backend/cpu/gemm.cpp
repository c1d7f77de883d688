// The CPU backend's gemm family (backend.h, "gemm"): the packed kernels of engine/cpu_gemm.cpp
// where they apply, else OpenBLAS sgemm on operands widened exactly to float.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/core/convert.h"
#include "cpu_backend.h"
#include "engine/cpu_parallel.h"
#include "engine/cpu_vector.h"

namespace ampctl::cpu {

void CpuBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                      float alpha, float beta) {
  const GemmDims d = check_gemm(a, trans_a, b, trans_b, c, device());
  const int64_t m = d.m, n = d.n, k = d.k;
  if (m > 0 && n > 0 && k > 0 && !overlaps(c, a) && !overlaps(c, b)) {
    const GemmOperand ga{a.data(), a.dtype(), a.dim(1), trans_a};
    const GemmOperand gb{b.data(), b.dtype(), b.dim(1), trans_b};
    const GemmOutput gc{c.data(), c.dtype(), n, alpha, beta, nullptr, DType::f32};
    if (m_packed && m_gemm.run(m, n, k, ga, gb, gc, *m_pool, m_bf16_dot)) return;
  }
  const float* ap = as_f32(a, m_ws_a);
  const float* bp = as_f32(b, m_ws_b);
  float* cp;
  if (c.dtype() == DType::f32) {
    cp = c.data_as<float>();
  } else {
    if (beta != 0.0f) {
      as_f32(c, m_ws_c);
    } else {
      m_ws_c.resize(c.numel());
    }
    cp = m_ws_c.data();
  }
  if (m > 0 && n > 0) {
    if (k == 0) {
      // sgemm with k == 0 still scales C by beta; keep the same contract explicitly.
      for (int64_t i = 0; i < m * n; ++i) cp[i] = beta == 0.0f ? 0.0f : beta * cp[i];
    } else {
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                  static_cast<blasint>(n), static_cast<blasint>(k), alpha, ap,
                  static_cast<blasint>(a.dim(1)), bp, static_cast<blasint>(b.dim(1)), beta, cp,
                  static_cast<blasint>(n));
    }
  }
  if (c.dtype() != DType::f32) store_f32(cp, c);
}

}  // namespace ampctl::cpu
