// The CPU backend: the reference implementation of every Backend op.
//
// Plain loops in float32 with one rounding to the output dtype (half.h's round-to-nearest-even),
// and OpenBLAS sgemm for matrix products: f16/bf16 operands are widened exactly to float, so the
// only differences from a GPU tensor-core product are the order of fp32 accumulation and nothing
// else. Workspaces for the widened operands grow once and are reused, so a steady-state training
// step does not allocate. The neural-network ops live in cpu_nn.cpp.
//
// The fast path (CpuKernels, on CPUs with AVX-512): matrix products run on the packed kernels of
// cpu_gemm.cpp (f16/bf16 operands widened while packing, or bf16 dot products), and casts,
// add_, mul_scalar_tensor, fill and the fused optimizer steps on the vector loops of
// cpu_vector.cpp, split over the backend's thread pool (cpu_parallel.h). The plain code here
// stays the reference and the fallback; the vector loops give its bits exactly, and tests
// compare the levels (tests/unit/backend/test_cpu_kernels.cpp).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/core/convert.h"
#include "cpu_backend.h"
#include "cpu_parallel.h"
#include "cpu_vector.h"

namespace ampctl::cpu {

void check_cpu(const Tensor& t, const char* what) {
  if (!t.defined())
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": undefined tensor"};
  if (!t.is_cpu()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": tensor " + t.describe() + " is not on the cpu"};
  }
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  if (a.numel() != b.numel()) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": element counts differ: " +
                                                 a.describe() + " vs " + b.describe()};
  }
}

void check_scalar(const Tensor& t, DType dtype, const char* what) {
  check_cpu(t, what);
  if (t.dtype() != dtype || t.numel() != 1) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": expected a one-element " +
                                                 dtype_name(dtype) + " tensor, got " +
                                                 t.describe()};
  }
}

void check_matrix(const Tensor& t, const char* what) {
  check_cpu(t, what);
  if (t.rank() != 2) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": expected a matrix, got " + t.describe()};
  }
}

void check_float(const Tensor& t, const char* what) {
  check_cpu(t, what);
  if (!is_floating(t.dtype())) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": expected a floating-point tensor, got " + t.describe()};
  }
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> shape, const char* what) {
  check_cpu(t, what);
  if (!std::equal(t.shape().begin(), t.shape().end(), shape.begin(), shape.end())) {
    throw Error{ErrorKind::invalid_argument, std::string(what) + ": expected shape " +
                                                 shape_str(Shape(shape)) + ", got " + t.describe()};
  }
}

// Widens any float tensor into `out` (exact) and returns a pointer to float data: the tensor's
// own data when it already is f32.
const float* as_f32(const Tensor& t, std::vector<float>& out) {
  if (t.dtype() == DType::f32) return t.data_as<float>();
  out.resize(t.numel());
  if (t.dtype() == DType::f16) {
    convert_f16_to_f32(static_cast<const uint16_t*>(t.data()), out.data(), t.numel());
  } else if (t.dtype() == DType::bf16) {
    convert_bf16_to_f32(static_cast<const uint16_t*>(t.data()), out.data(), t.numel());
  } else {
    throw Error{ErrorKind::invalid_argument,
                "expected a floating-point tensor, got " + t.describe()};
  }
  return out.data();
}

// Rounds n floats once into dst of any float dtype.
void store_f32(const float* src, const Tensor& dst) {
  switch (dst.dtype()) {
    case DType::f32:
      if (dst.data() != src) std::memcpy(dst.data(), src, dst.numel() * sizeof(float));
      return;
    case DType::f16:
      convert_f32_to_f16(src, static_cast<uint16_t*>(dst.data()), dst.numel());
      return;
    case DType::bf16:
      convert_f32_to_bf16(src, static_cast<uint16_t*>(dst.data()), dst.numel());
      return;
    case DType::i32:
      break;
  }
  throw Error{ErrorKind::invalid_argument,
              "expected a floating-point tensor, got " + dst.describe()};
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

bool same_or_disjoint(const Tensor& a, const Tensor& b) {
  return !overlaps(a, b) || (a.data() == b.data() && a.dtype() == b.dtype());
}

namespace {

// The low-precision copy can be written in the optimizer's own pass when it is a float dtype
// (f32 included: a plain copy) and shares no byte with the buffers the pass reads or writes.
bool lowp_fusable(const Tensor& lowp, std::initializer_list<const Tensor*> others) {
  if (!lowp.defined()) return true;
  if (!is_floating(lowp.dtype())) return false;
  for (const Tensor* t : others) {
    if (overlaps(lowp, *t)) return false;
  }
  return true;
}

// threads <= 0: OPENBLAS_NUM_THREADS when it holds a positive count (a sweep gives each of its
// side-by-side jobs its share of the cores there, sweep/executor.cpp), else one per core.
int default_threads() {
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v <= 1024) return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void check_bytes(const Tensor& t, size_t bytes, const char* what) {
  if (bytes != t.nbytes()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": " + std::to_string(bytes) + " bytes for " + t.describe()};
  }
}

}  // namespace

CpuBackend::CpuBackend(int threads, CpuKernels kernels) {
  m_threads = threads > 0 ? threads : default_threads();
  m_avx512 = kernels != CpuKernels::portable && cpu_features().avx512;
  m_bf16_dot = kernels == CpuKernels::best && m_avx512 && cpu_features().avx512_bf16;
  // Without the packed kernels the products run on OpenBLAS's own threads; a pool beside them
  // would spin while OpenBLAS works and steal its cores, so the passes stay on this thread.
  m_pool = std::make_unique<ThreadPool>(m_avx512 ? m_threads : 1);
  m_serial_pool = std::make_unique<ThreadPool>(1);
  m_batch_gemm.resize(static_cast<size_t>(m_pool->threads()));
  // A fixed thread count keeps OpenBLAS's blocking, and so its summation order, the same from
  // run to run.
  openblas_set_num_threads(m_threads);
}

std::string CpuBackend::description() const {
  // cpu_features().amx_bf16: the bf16 products run on AMX tiles (cpu_gemm.h).
  const char* kernels = m_bf16_dot && cpu_features().amx_bf16 ? "AVX-512 + AMX-BF16 kernels"
                        : m_bf16_dot                          ? "AVX-512 + AVX512_BF16 kernels"
                        : m_avx512                            ? "AVX-512 kernels"
                                                              : "OpenBLAS";
  return std::string("cpu (") + kernels + ", " + std::to_string(m_threads) + " threads)";
}

void CpuBackend::upload(const Tensor& dst, const void* host, size_t bytes) {
  check_cpu(dst, "upload");
  check_bytes(dst, bytes, "upload");
  if (bytes) std::memmove(dst.data(), host, bytes);
}

void CpuBackend::download(void* host, const Tensor& src) {
  check_cpu(src, "download");
  if (src.nbytes()) std::memmove(host, src.data(), src.nbytes());
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  check_cpu(dst, "copy");
  check_cpu(src, "copy");
  check_same_numel(dst, src, "copy");
  if (dst.dtype() != src.dtype()) {
    throw Error{ErrorKind::invalid_argument,
                "copy: dtypes differ: " + src.describe() + " -> " + dst.describe() + " (use cast)"};
  }
  if (dst.nbytes()) std::memmove(dst.data(), src.data(), dst.nbytes());
}

void CpuBackend::fill(const Tensor& dst, double value) {
  check_cpu(dst, "fill");
  if (dst.dtype() == DType::i32) {
    if (value != std::trunc(value) || value < -2147483648.0 || value > 2147483647.0) {
      throw Error{ErrorKind::invalid_argument,
                  "fill: " + std::to_string(value) + " is not an int32 value"};
    }
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
  check_cpu(src, "cast");
  check_cpu(dst, "cast");
  check_same_numel(src, dst, "cast");
  if (src.dtype() == DType::i32 || dst.dtype() == DType::i32) {
    cast_integer(src, dst);
    return;
  }
  if (src.dtype() == dst.dtype()) {
    copy(dst, src);
    return;
  }
  if (m_avx512 && !overlaps(src, dst)) {
    parallel_for(*m_pool, src.numel(), [&](size_t b, size_t e) {
      vec::cast(src.data(), src.dtype(), dst.data(), dst.dtype(), b, e);
    });
    return;
  }
  store_f32(as_f32(src, m_ws_a), dst);
}

void CpuBackend::mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) {
  check_cpu(x, "mul_scalar_tensor");
  check_cpu(out, "mul_scalar_tensor");
  check_scalar(scale, DType::f32, "mul_scalar_tensor scale");
  check_same_numel(x, out, "mul_scalar_tensor");
  const float s = *scale.data_as<float>();
  if (m_avx512 && is_floating(x.dtype()) && is_floating(out.dtype()) && same_or_disjoint(x, out)) {
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
  check_cpu(dst, "add_");
  check_cpu(src, "add_");
  check_same_numel(dst, src, "add_");
  if (m_avx512 && is_floating(dst.dtype()) && is_floating(src.dtype()) &&
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

void CpuBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                      float alpha, float beta) {
  check_cpu(a, "gemm A");
  check_cpu(b, "gemm B");
  check_cpu(c, "gemm C");
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2) {
    throw Error{ErrorKind::invalid_argument, "gemm: operands must be matrices, got " +
                                                 a.describe() + ", " + b.describe() + ", " +
                                                 c.describe()};
  }
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (k != kb || c.dim(0) != m || c.dim(1) != n) {
    throw Error{ErrorKind::invalid_argument,
                "gemm: shapes do not match: op(A) is [" + std::to_string(m) + ", " +
                    std::to_string(k) + "], op(B) is [" + std::to_string(kb) + ", " +
                    std::to_string(n) + "], C is " + shape_str(c.shape())};
  }
  check_float(a, "gemm A");
  check_float(b, "gemm B");
  check_float(c, "gemm C");
  if (m > 0 && n > 0 && k > 0 && !overlaps(c, a) && !overlaps(c, b)) {
    const GemmOperand ga{a.data(), a.dtype(), a.dim(1), trans_a};
    const GemmOperand gb{b.data(), b.dtype(), b.dim(1), trans_b};
    const GemmOutput gc{c.data(), c.dtype(), n, alpha, beta, nullptr, DType::f32};
    if (m_avx512 && m_gemm.run(m, n, k, ga, gb, gc, *m_pool, m_bf16_dot)) return;
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

void CpuBackend::global_norm(std::span<const Tensor> tensors, const Tensor& out) {
  check_scalar(out, DType::f32, "global_norm out");
  // The order of vec::norm_block (cpu_vector.h): independent blocks, so they are split between
  // the threads; their sums are then added in order, whichever thread computed them.
  size_t blocks = 0;
  for (const Tensor& t : tensors) {
    check_float(t, "global_norm");
    blocks += (t.numel() + vec::kNormBlock - 1) / vec::kNormBlock;
  }
  if (m_ws_norm.size() < blocks) m_ws_norm.resize(blocks);
  double* sums = m_ws_norm.data();
  size_t first = 0;  // the tensor's first block
  for (const Tensor& t : tensors) {
    const size_t n = t.numel(), nb = (n + vec::kNormBlock - 1) / vec::kNormBlock;
    const void* x = t.data();
    const DType d = t.dtype();
    // A few runs of blocks per thread (parallel_for's grain counts elements, not blocks).
    const int64_t parts =
        n < kParallelGrain ? 1 : std::min<int64_t>(4 * m_pool->threads(), static_cast<int64_t>(nb));
    m_pool->run(parts, [&](int64_t part, int) {
      const size_t b0 = nb * static_cast<size_t>(part) / static_cast<size_t>(parts);
      const size_t b1 = nb * static_cast<size_t>(part + 1) / static_cast<size_t>(parts);
      for (size_t q = b0; q < b1; ++q) {
        const size_t lo = q * vec::kNormBlock, hi = std::min(n, lo + vec::kNormBlock);
        sums[first + q] =
            m_avx512 ? vec::norm_block(x, d, lo, hi) : vec::norm_block_portable(x, d, lo, hi);
      }
    });
    first += nb;
  }
  double sum = 0.0;
  for (size_t q = 0; q < blocks; ++q) sum += sums[q];
  *out.data_as<float>() = static_cast<float>(std::sqrt(sum));
}

void CpuBackend::optimizer_step(const OptimizerStepArgs& args) {
  check_optimizer_step(args, device());
  // Skipped: params, state buffers, step and the low-precision copy stay bitwise unchanged.
  if (args.found_inf.defined() && *args.found_inf.data_as<float>() != 0.0f) return;
  const float inv = args.inv_scale.defined() ? *args.inv_scale.data_as<float>() : 1.0f;
  if (const auto* sgd = std::get_if<optim::SgdHyper>(&args.hyper)) {
    sgd_pass(args, *sgd, inv);
  } else {
    adam_pass(args, std::get<optim::AdamHyper>(args.hyper), inv);
  }
  *args.step.data_as<int32_t>() += 1;
}

void CpuBackend::sgd_pass(const OptimizerStepArgs& args, const optim::SgdHyper& hyper, float inv) {
  const bool momentum = hyper.momentum != 0.0f;
  const bool first = *args.step.data_as<int32_t>() == 0;
  float* p = args.params.data_as<float>();
  const float* g = args.grads.data_as<float>();
  float* buf = momentum ? args.momentum_buf.data_as<float>() : nullptr;
  const size_t n = args.params.numel();
  if (args.decay_mask.defined()) {
    // decay_on: matrices: the masked-out elements take the update without weight decay.
    optim::SgdHyper plain = hyper;
    plain.weight_decay = 0.0f;
    const float* mask = args.decay_mask.data_as<float>();
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      float dummy = 0.0f;
      for (size_t i = b; i < e; ++i) {
        optim::sgd_update(&p[i], g[i], buf ? &buf[i] : &dummy, inv, first,
                          mask[i] != 0.0f ? hyper : plain);
      }
    });
    if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
    return;
  }
  if (m_avx512 && lowp_fusable(args.lowp_params, {&args.params, &args.grads, &args.momentum_buf})) {
    void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
    const DType lowp_dtype = args.lowp_params.defined() ? args.lowp_params.dtype() : DType::f32;
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      vec::sgd(b, e, p, g, buf, inv, first, hyper, lowp, lowp_dtype);
    });
    return;
  }
  parallel_for(*m_pool, n, [&](size_t b, size_t e) {
    float dummy = 0.0f;
    for (size_t i = b; i < e; ++i) {
      optim::sgd_update(&p[i], g[i], buf ? &buf[i] : &dummy, inv, first, hyper);
    }
  });
  if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
}

void CpuBackend::adam_pass(const OptimizerStepArgs& args, const optim::AdamHyper& hyper,
                           float inv) {
  // The constants of update step + 1, formed in double and rounded to float once, as PyTorch's
  // Python-side scalars are (math/adam_math.h).
  const optim::AdamStepConsts consts = optim::adam_consts(hyper, *args.step.data_as<int32_t>() + 1);
  float* p = args.params.data_as<float>();
  const float* g = args.grads.data_as<float>();
  float* m = args.exp_avg.data_as<float>();
  float* v = args.exp_avg_sq.data_as<float>();
  const size_t n = args.params.numel();
  if (args.decay_mask.defined()) {
    // decay_on: matrices: the masked-out elements take the constants of weight_decay = 0
    // (AdamW's factor 1 - lr * 0 is exactly 1: the same bits as no decay).
    optim::AdamHyper plain = hyper;
    plain.weight_decay = 0.0;
    const optim::AdamStepConsts plain_consts =
        optim::adam_consts(plain, *args.step.data_as<int32_t>() + 1);
    const float* mask = args.decay_mask.data_as<float>();
    if (m_avx512 && lowp_fusable(args.lowp_params, {&args.params, &args.grads, &args.exp_avg,
                                                    &args.exp_avg_sq, &args.decay_mask})) {
      // The same per-element choice of constants on 16 lanes, with the low-precision copy in
      // the same pass (cpu_vector.h).
      void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
      const DType lowp_dtype = args.lowp_params.defined() ? args.lowp_params.dtype() : DType::f32;
      parallel_for(*m_pool, n, [&](size_t b, size_t e) {
        vec::adam(b, e, p, g, m, v, inv, hyper.decoupled, hyper.maximize, consts, lowp, lowp_dtype,
                  mask, plain_consts.decay);
      });
      return;
    }
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        optim::adam_update(&p[i], g[i], &m[i], &v[i], inv, hyper.decoupled, hyper.maximize,
                           mask[i] != 0.0f ? consts : plain_consts);
      }
    });
    if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
    return;
  }
  if (m_avx512 && lowp_fusable(args.lowp_params,
                               {&args.params, &args.grads, &args.exp_avg, &args.exp_avg_sq})) {
    // One pass: the update and the rounded low-precision copy of each parameter.
    void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
    const DType lowp_dtype = args.lowp_params.defined() ? args.lowp_params.dtype() : DType::f32;
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      vec::adam(b, e, p, g, m, v, inv, hyper.decoupled, hyper.maximize, consts, lowp, lowp_dtype);
    });
    return;
  }
  parallel_for(*m_pool, n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      optim::adam_update(&p[i], g[i], &m[i], &v[i], inv, hyper.decoupled, hyper.maximize, consts);
    }
  });
  if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
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
  check_cpu(src, "gather_rows src");
  check_cpu(index, "gather_rows index");
  check_cpu(dst, "gather_rows dst");
  const size_t row_bytes = static_cast<size_t>(check_gather_rows(src, index, offset, dst)) * 4;
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

namespace ampctl {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

}  // namespace ampctl
