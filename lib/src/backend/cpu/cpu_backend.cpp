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
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/core/convert.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/error.h"
#include "ampctl/core/input_file.h"
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

// VmSize of this process, in bytes (0 when unknown).
uint64_t vm_size() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmSize:", 7) == 0) {
      kb = std::strtoull(line + 7, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

// OpenBLAS 0.3.21 on x86-64 maps a buffer of BUFFER_SIZE (128 MiB) and a page for every thread
// that runs its level-3 products: each worker as it starts, the calling thread at its first
// product past the small-matrix path (measured as VmSize before and after: 128 MiB + 4 KiB per
// thread, + the 8 MiB stack of each worker; malloc's fallback asks for 128 MiB + 8 KiB). A buffer
// it cannot map it retries forever (blas_memory_alloc), spinning a core: so every buffer is
// checked against the process's limit first and taken at once.
constexpr uint64_t kOpenBlasBufferBytes = (uint64_t{128} << 20) + 8192;

// OpenBLAS's threads, started and given their buffers once per process (OpenBLAS is one per
// process).
struct OpenBlasThreads {
  std::mutex mutex;
  int started = 0;            // OpenBLAS's threads whose buffers exist (0: not known yet)
  bool caller_ready = false;  // the calling thread's buffer exists
};
OpenBlasThreads& openblas_threads() {
  static OpenBlasThreads state;
  return state;
}

// What starting a backend of `threads` threads still has to map.
struct Reservation {
  int new_workers = 0;   // OpenBLAS threads to start
  bool caller = false;   // the caller's OpenBLAS buffer
  int pool_workers = 0;  // the backend's own pool
  uint64_t openblas = 0;
  uint64_t total = 0;
};
Reservation reservation(OpenBlasThreads& s, int threads, bool packed) {
  // Workers OpenBLAS started when it was loaded (OPENBLAS_NUM_THREADS, else one per core; under
  // a memory limit apps/ampctl loads it with one) took their buffers then.
  if (s.started == 0) s.started = std::max(1, openblas_get_num_threads());
  Reservation r;
  r.new_workers = std::max(0, threads - s.started);
  r.caller = !s.caller_ready;
  // Without the packed kernels the products run on OpenBLAS's own threads (CpuBackend's pool has
  // no workers then).
  r.pool_workers = packed ? threads - 1 : 0;
  const uint64_t stack = thread_stack_bytes();
  r.openblas = static_cast<uint64_t>(r.new_workers) * (kOpenBlasBufferBytes + stack) +
               (r.caller ? kOpenBlasBufferBytes : 0);
  r.total = r.openblas + static_cast<uint64_t>(r.pool_workers) * stack;
  return r;
}

// Refuses, before any of it is mapped, address space the process's limit cannot give.
void check_reservation(const Reservation& r, int threads) {
  const std::optional<uint64_t> room = address_space_available();
  if (r.total == 0 || !room || r.total <= *room) return;
  const uint64_t stack = thread_stack_bytes();
  std::string parts;
  if (r.openblas > 0) {
    parts = "OpenBLAS's " + format_bytes(kOpenBlasBufferBytes) + " buffer for each of " +
            std::to_string(r.new_workers + (r.caller ? 1 : 0)) + " thread(s)";
    if (r.new_workers > 0) parts += " and a " + format_bytes(stack) + " stack for each it starts";
  }
  if (r.pool_workers > 0) {
    parts += std::string(parts.empty() ? "" : ", ") + "a " + format_bytes(stack) +
             " stack for each of its " + std::to_string(r.pool_workers) + " pool thread(s)";
  }
  throw Error{ErrorKind::config,
              "host memory: the CPU backend's " + std::to_string(threads) + " thread(s) reserve " +
                  format_bytes(r.total) + " of address space (" + parts +
                  "), and the process's limit, " + address_space_limit_name() + ", leaves " +
                  format_bytes(*room),
              "raise the limit, or run fewer threads: with OPENBLAS_NUM_THREADS=1 the backend "
              "reserves " +
                  format_bytes(kOpenBlasBufferBytes) +
                  " (the thread count is part of a run's numbers on OpenBLAS's products)"};
}

// The packed GEMM engine and vector passes (AVX-512 or AVX2) run the products, on the backend's
// own pool; else OpenBLAS does.
bool uses_packed(CpuKernels kernels) {
  return kernels != CpuKernels::portable && cpu_features().vector;
}

}  // namespace

void check_room(int threads) {
  OpenBlasThreads& s = openblas_threads();
  std::lock_guard<std::mutex> lock(s.mutex);
  const int n = threads > 0 ? threads : default_threads();
  check_reservation(reservation(s, n, uses_packed(CpuKernels::best)), n);
}

void CpuBackend::start_openblas_threads() {
  OpenBlasThreads& s = openblas_threads();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Reservation r = reservation(s, m_threads, m_packed);
  check_reservation(r, m_threads);
  const uint64_t before = vm_size();
  // A fixed thread count keeps OpenBLAS's blocking, and so its summation order, the same from
  // run to run.
  openblas_set_num_threads(m_threads);
  if (r.openblas == 0) return;
  // Every buffer is taken now, while the room just checked is there: the new workers map theirs
  // as they start, the calling thread at this first product (256^3 is past OpenBLAS's
  // small-matrix path and splits over the threads). The workers start in their own time: wait a
  // bounded while until VmSize shows their buffers.
  const int n = 256;
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), c(static_cast<size_t>(n) * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, a.data(), n,
              0.0f, c.data(), n);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (before > 0 && vm_size() < before + r.openblas - r.openblas / 64 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s.caller_ready = true;
  s.started = std::max(s.started, m_threads);
}

CpuBackend::CpuBackend(int threads, CpuKernels kernels) {
  m_threads = threads > 0 ? threads : default_threads();
  m_packed = uses_packed(kernels);
  m_bf16_dot = kernels == CpuKernels::best && m_packed && cpu_features().avx512_bf16;
  // Without the packed kernels the products run on OpenBLAS's own threads; a pool beside them
  // would spin while OpenBLAS works and steal its cores, so the passes stay on this thread.
  start_openblas_threads();
  m_pool = std::make_unique<ThreadPool>(m_packed ? m_threads : 1);
  m_serial_pool = std::make_unique<ThreadPool>(1);
  m_batch_gemm.resize(static_cast<size_t>(m_pool->threads()));
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

void check_cpu_backend_room(int threads) {
  cpu::check_room(threads);
}

std::string cpu_blas_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

}  // namespace ampctl
