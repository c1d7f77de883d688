// The CPU backend: the reference implementation of every Backend op. This file holds the operand
// helpers of cpu_backend.h and the backend's lifetime; the ops live in one file per family
// (memory.cpp, gemm.cpp, amp.cpp, nn.cpp, transformer.cpp, conv.cpp, optim.cpp, numerics.cpp).
//
// Plain loops in float32 with one rounding to the output dtype (half.h's round-to-nearest-even),
// and OpenBLAS sgemm for matrix products: f16/bf16 operands are widened exactly to float, so the
// only differences from a GPU tensor-core product are the order of fp32 accumulation and nothing
// else. Workspaces for the widened operands grow once and are reused, so a steady-state training
// step does not allocate.
//
// The fast path (CpuKernels, on the avx512 or avx2 instruction path of core/cpu_isa.h): matrix
// products run on the packed kernels of cpu_gemm.cpp (f16/bf16 operands widened while packing, or
// bf16 dot products), and casts, add_, mul_scalar_tensor, fill and the fused optimizer steps on the
// vector loops of cpu_vector.cpp, split over the backend's thread pool (cpu_parallel.h). The plain
// code here stays the reference and the fallback; the vector loops give its bits exactly, and tests
// compare the levels (tests/unit/backend/test_engine_kernels.cpp).
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
#include "ampctl/core/cpu_isa.h"
#include "cpu_backend.h"
#include "engine/cpu_parallel.h"
#include "engine/cpu_vector.h"

namespace ampctl::cpu {

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

bool same_or_disjoint(const Tensor& a, const Tensor& b) {
  return !overlaps(a, b) || (a.data() == b.data() && a.dtype() == b.dtype());
}

namespace {

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

}  // namespace

CpuBackend::CpuBackend(int threads, CpuKernels kernels) {
  m_threads = threads > 0 ? threads : default_threads();
  m_packed = kernels != CpuKernels::portable && cpu_features().vector;
  m_bf16_dot = kernels == CpuKernels::best && m_packed && cpu_features().avx512_bf16;
  // Without the packed kernels the products run on OpenBLAS's own threads; a pool beside them
  // would spin while OpenBLAS works and steal its cores, so the passes stay on this thread.
  m_pool = std::make_unique<ThreadPool>(m_packed ? m_threads : 1);
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
                        : m_packed && cpu_features().avx2     ? "AVX2 kernels"
                        : m_packed                            ? "AVX-512 kernels"
                                                              : "OpenBLAS";
  return std::string("cpu (") + kernels + ", " + std::to_string(m_threads) + " threads)";
}

}  // namespace ampctl::cpu

namespace ampctl {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

std::string cpu_blas_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

}  // namespace ampctl
