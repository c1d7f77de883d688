// The CPU backend's memory family: upload, download, copy, fill, casts, the elementwise
// scalings and additions, and gather_rows (backend.h, "memory"). Plain loops with one rounding
// per element; on the avx512 and avx2 paths the vector loops of engine/cpu_vector.cpp, which give
// the same bits.
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

void CpuBackend::upload(const Tensor& dst, const void* host, size_t bytes) {
  check_upload(dst, bytes, device());
  if (bytes) std::memmove(dst.data(), host, bytes);
}

void CpuBackend::download(void* host, const Tensor& src) {
  check_download(src, device());
  if (src.nbytes()) std::memmove(host, src.data(), src.nbytes());
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  check_copy(dst, src, device());
  if (dst.nbytes()) std::memmove(dst.data(), src.data(), dst.nbytes());
}

void CpuBackend::fill(const Tensor& dst, double value) {
  check_fill(dst, value, device());
  if (dst.dtype() == DType::i32) {
    std::fill_n(dst.data_as<int32_t>(), dst.numel(), static_cast<int32_t>(value));
    return;
  }
  // The value goes through float first, as PyTorch's fill_ converts its scalar (c10::Half and
  // c10::BFloat16 are built from a float).
  const float v = static_cast<float>(value);
  dispatch_float(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst.data());
    const T x = from_f32<T>(v);
    parallel_for(*m_pool, dst.numel(), [&](size_t b, size_t e) { std::fill(d + b, d + e, x); });
  });
}

void CpuBackend::cast(const Tensor& src, const Tensor& dst) {
  check_cast(src, dst, device());
  if (src.dtype() == DType::i32 || dst.dtype() == DType::i32) {
    cast_integer(src, dst);
    return;
  }
  if (src.dtype() == dst.dtype()) {
    copy(dst, src);
    return;
  }
  if (m_packed && !overlaps(src, dst)) {
    parallel_for(*m_pool, src.numel(), [&](size_t b, size_t e) {
      vec::cast(src.data(), src.dtype(), dst.data(), dst.dtype(), b, e);
    });
    return;
  }
  store_f32(as_f32(src, m_ws_a), dst);
}

void CpuBackend::mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) {
  check_mul_scalar_tensor(x, scale, out, device());
  const float s = *scale.data_as<float>();
  if (m_packed && is_floating(x.dtype()) && is_floating(out.dtype()) && same_or_disjoint(x, out)) {
    parallel_for(*m_pool, x.numel(), [&](size_t b, size_t e) {
      vec::mul_scalar(x.data(), x.dtype(), out.data(), out.dtype(), s, b, e);
    });
    return;
  }
  dispatch_float(x.dtype(), [&](auto xt) {
    using X = decltype(xt);
    dispatch_float(out.dtype(), [&](auto ot) {
      using O = decltype(ot);
      const X* xp = static_cast<const X*>(x.data());
      O* op = static_cast<O*>(out.data());
      for (size_t i = 0; i < x.numel(); ++i) op[i] = from_f32<O>(to_f32(xp[i]) * s);
    });
  });
}

void CpuBackend::add_(const Tensor& dst, const Tensor& src, float alpha) {
  check_add(dst, src, device());
  if (m_packed && is_floating(dst.dtype()) && is_floating(src.dtype()) &&
      same_or_disjoint(dst, src)) {
    parallel_for(*m_pool, dst.numel(), [&](size_t b, size_t e) {
      vec::add(dst.data(), dst.dtype(), src.data(), src.dtype(), alpha, b, e);
    });
    return;
  }
  dispatch_float(dst.dtype(), [&](auto dt) {
    using D = decltype(dt);
    dispatch_float(src.dtype(), [&](auto st) {
      using S = decltype(st);
      D* dp = static_cast<D*>(dst.data());
      const S* sp = static_cast<const S*>(src.data());
      if (alpha == 1.0f) {
        for (size_t i = 0; i < dst.numel(); ++i) dp[i] = from_f32<D>(to_f32(dp[i]) + to_f32(sp[i]));
      } else {
        for (size_t i = 0; i < dst.numel(); ++i) {
          dp[i] = from_f32<D>(to_f32(dp[i]) + alpha * to_f32(sp[i]));
        }
      }
    });
  });
}

void CpuBackend::cast_integer(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == DType::i32 && dst.dtype() == DType::i32) {
    copy(dst, src);
  } else if (src.dtype() == DType::i32) {
    m_ws_a.resize(src.numel());
    const int32_t* s = src.data_as<int32_t>();
    for (size_t i = 0; i < src.numel(); ++i) m_ws_a[i] = static_cast<float>(s[i]);
    store_f32(m_ws_a.data(), dst);
  } else {
    dst.check_dtype(DType::i32);
    const float* s = as_f32(src, m_ws_a);
    int32_t* d = dst.data_as<int32_t>();
    for (size_t i = 0; i < src.numel(); ++i) {
      // Truncation toward zero, as a C cast and PyTorch's .to(torch.int32); NaN and values
      // outside int32 are rejected instead of being undefined behaviour.
      if (!(s[i] > -2147483904.0f && s[i] < 2147483648.0f)) {
        throw Error{ErrorKind::invalid_argument, "cast: element " + std::to_string(i) + " (" +
                                                     std::to_string(s[i]) + ") does not fit int32"};
      }
      d[i] = static_cast<int32_t>(s[i]);
    }
  }
}

void CpuBackend::gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                             const Tensor& dst) {
  // The indices are checked here (the GPU clamps them: no sync).
  const size_t row_bytes =
      static_cast<size_t>(check_gather_rows(src, index, offset, dst, device())) * 4;
  const int64_t n = src.dim(0), rows = dst.dim(0);
  const int32_t* idx = index.data_as<int32_t>() + offset;
  const char* from = static_cast<const char*>(src.data());
  char* to = static_cast<char*>(dst.data());
  for (int64_t r = 0; r < rows; ++r) {
    if (idx[r] < 0 || idx[r] >= n) {
      throw Error{ErrorKind::invalid_argument, "gather_rows: index " + std::to_string(idx[r]) +
                                                   " outside [0, " + std::to_string(n) + ")"};
    }
    std::memcpy(to + static_cast<size_t>(r) * row_bytes,
                from + static_cast<size_t>(idx[r]) * row_bytes, row_bytes);
  }
}

}  // namespace ampctl::cpu
