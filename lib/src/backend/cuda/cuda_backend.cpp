// The CUDA backend: Backend's ops on one GPU, on one non-default stream, in issue order. This file
// holds memory, casts, gemm, the amp ops and the optimizer updates; cuda_nn.cpp the neural-network
// ops; cuda_backend.h the class and what both share.
//
// Ownership: see cuda_backend.h. Every resource has one owner, the backend object or a tensor's
// Storage.
//
// Synchronisation: every op only enqueues work on m_stream. download() and synchronize() wait;
// upload() returns once the host buffer may be reused (see there); nothing else blocks, so a
// training step, whose scaler state lives in device scalars, never waits for the device.
//
// Numerics: per-element math is in the kernels (kernels/*.cu), which call the AMPCTL_HD functions
// the CPU backend calls. Matrix products go to cuBLAS with 32-bit compute and no TF32, with
// reductions kept in fp32 even for fp16/bf16 outputs, and without atomics, so they are
// deterministic and round to the output type once.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cstdlib>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "adam.cuh"
#include "amp.cuh"
#include "ampctl/backend/backend.h"
#include "ampctl/backend/cuda_plugin.h"
#include "ampctl/build_info.h"
#include "cast.cuh"
#include "cuda_backend.h"
#include "device_probe.h"
#include "elementwise.cuh"
#include "fill.cuh"
#include "gather.cuh"
#include "global_norm.cuh"
#include "sgd.cuh"
namespace ampctl::cuda_detail {

// ---- cuBLAS errors ----

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line) {
  const char* slash = std::strrchr(file, '/');
  throw Error{ErrorKind::cuda, std::string(slash ? slash + 1 : file) + ":" + std::to_string(line) +
                                   ": " + expr + ": " + cublasGetStatusName(status) + " (" +
                                   cublasGetStatusString(status) + ")"};
}

// Frees device memory. A deleter cannot throw, so errors (a sticky fault, a runtime already torn
// down at exit) are dropped. The explicit device sync makes the free safe whatever is still
// queued on any stream that reads the memory; frees happen outside the training step.
void free_device_memory(int device, void* p) noexcept {
  if (p == nullptr) return;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device) (void)cudaSetDevice(device);
  (void)cudaDeviceSynchronize();
  (void)cudaFree(p);
  if (previous >= 0 && previous != device) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

void* allocate_device_memory(int device, size_t bytes, const std::string& what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error{ErrorKind::cuda,
                "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what +
                    " on cuda:" + std::to_string(device) + " failed: " + cudaGetErrorName(err) +
                    " (" + cudaGetErrorString(err) + ")",
                "the model, batch or workspaces do not fit in GPU memory: reduce them"};
  }
  return p;
}
// ---- argument checks ----

[[noreturn]] void invalid(const std::string& message) {
  throw Error{ErrorKind::invalid_argument, message};
}

void check_scalar(const Tensor& t, DType dtype, const char* op, const char* name) {
  if (t.dtype() != dtype || t.numel() != 1) {
    invalid(std::string(op) + ": " + name + " must be a one-element " + dtype_name(dtype) +
            " tensor, got " + t.describe());
  }
}

void check_same_numel(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                      const char* op) {
  if (a.numel() != b.numel()) {
    invalid(std::string(op) + ": " + a_name + " " + a.describe() + " and " + b_name + " " +
            b.describe() + " differ in element count");
  }
}

void check_floating(const Tensor& t, const char* op, const char* name) {
  if (!is_floating(t.dtype())) {
    invalid(std::string(op) + ": " + name + " must be f32, f16 or bf16, got " + t.describe());
  }
}
void check_shape(const Tensor& t, const Shape& shape, const char* op, const char* name) {
  if (t.shape() != shape) {
    invalid(std::string(op) + ": " + name + " must have shape " + shape_str(shape) + ", got " +
            t.describe());
  }
}

cudaDataType cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::i32:
      break;
  }
  invalid("gemm: i32 operands are not supported");
}

namespace {

constexpr const char* kNoGpuHint =
    "run on a machine with an NVIDIA GPU and its driver (nvidia-smi lists it), or use device: cpu";

// The bits a fill writes, computed on the host exactly as the CPU backend computes its fill value:
// float values go through float first, as PyTorch's fill_ builds c10::Half/BFloat16 from a float.
// (So a double between two f16 values can round twice; backend.h's "rounded once" holds for every
// value that is a float.)
uint32_t fill_bits(DType dtype, double value) {
  switch (dtype) {
    case DType::f32:
      return float_bits(static_cast<float>(value));
    case DType::f16:
      return half(static_cast<float>(value)).bits;
    case DType::bf16:
      return bfloat16(static_cast<float>(value)).bits;
    case DType::i32:
      if (value != std::trunc(value) || value < -2147483648.0 || value > 2147483647.0) {
        invalid("fill: " + std::to_string(value) + " is not an int32 value");
      }
      return static_cast<uint32_t>(static_cast<int32_t>(value));
  }
  return 0;
}

// Splits tensors into kernel-parameter packs of at most kMaxTensorsPerLaunch, skipping empty
// ones, in order.
std::vector<kernels::TensorPack> make_packs(std::span<const Tensor> tensors) {
  std::vector<kernels::TensorPack> packs;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    if (packs.empty() || packs.back().count == kernels::kMaxTensorsPerLaunch) packs.emplace_back();
    kernels::TensorPack& pack = packs.back();
    pack.tensors[pack.count++] = kernels::TensorDesc{t.data(), t.numel(), elem_type(t.dtype())};
    pack.max_numel = std::max(pack.max_numel, t.numel());
  }
  return packs;
}
}  // namespace

CudaBackend::CudaBackend(int index, const cudaDeviceProp& props)
    : m_device{DeviceType::cuda, index},
      m_description("cuda:" + std::to_string(index) + " (" + props.name + ", sm_" +
                    std::to_string(props.major) + std::to_string(props.minor) + ")"),
      m_capability(
          effective_capability({props.major, props.minor}, std::getenv("AMPCTL_FORCE_SM75"))),
      m_cublas_workspace(index, kCublasWorkspaceBytes, "the cuBLAS workspace"),
      m_norm_partials(index, kernels::kNormBlocks * sizeof(double), "global-norm partial sums") {
  cublasHandle_t h = m_cublas.get();
  // cublasSetStream resets the workspace, so the workspace is set after it.
  AMPCTL_CUBLAS_CHECK(cublasSetStream(h, stream()));
  AMPCTL_CUBLAS_CHECK(cublasSetWorkspace(h, m_cublas_workspace.get(), m_cublas_workspace.bytes()));
  AMPCTL_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  AMPCTL_CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  // Default math: tensor cores for f16/bf16 inputs, never TF32 for f32 inputs (which would need
  // CUBLAS_TF32_TENSOR_OP_MATH or a FAST_TF32 compute type). Split-K reductions stay in fp32 even
  // when the output is f16/bf16, so the output is rounded once.
  AMPCTL_CUBLAS_CHECK(cublasSetMathMode(
      h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
}

void CudaBackend::check_here(const Tensor& t, const char* op, const char* name) const {
  if (!t.defined()) invalid(std::string(op) + ": " + name + " is undefined");
  if (t.device() != m_device) {
    invalid(std::string(op) + ": " + name + " is " + t.describe() + ", expected a tensor on " +
            m_device.str() + " (move data with upload/download)");
  }
}

Tensor CudaBackend::empty(const Shape& shape, DType dtype) {
  DeviceScope scope(m_device.index);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  const int index = m_device.index;
  void* p = bytes ? allocate_device_memory(index, bytes,
                                           std::string(dtype_name(dtype)) + shape_str(shape))
                  : nullptr;
  auto storage = std::make_shared<Storage>(p, bytes, m_device,
                                           [index](void* q) { free_device_memory(index, q); });
  return Tensor{std::move(storage), 0, shape, dtype};
}

void CudaBackend::upload(const Tensor& dst, const void* host, size_t bytes) {
  check_here(dst, "upload", "destination");
  if (bytes != dst.nbytes()) {
    invalid("upload: " + std::to_string(bytes) + " bytes given for " + dst.describe() + " of " +
            std::to_string(dst.nbytes()) + " bytes");
  }
  if (bytes == 0) return;
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host, bytes, cudaMemcpyHostToDevice, stream()));
  // From pageable memory cudaMemcpyAsync returns only after the bytes are staged, so the caller
  // may reuse its buffer at once. From page-locked memory the copy is truly asynchronous; wait,
  // so that upload() means the same for every kind of host buffer.
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) == cudaSuccess &&
      attributes.type == cudaMemoryTypeHost) {
    AMPCTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  (void)cudaGetLastError();  // cudaPointerGetAttributes may leave a non-sticky error behind
}

void CudaBackend::download(void* host, const Tensor& src) {
  check_here(src, "download", "source");
  if (src.nbytes() == 0) return;
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(
      cudaMemcpyAsync(host, src.data(), src.nbytes(), cudaMemcpyDeviceToHost, stream()));
  AMPCTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  check_here(dst, "copy", "destination");
  check_here(src, "copy", "source");
  if (dst.dtype() != src.dtype()) {
    invalid("copy: destination " + dst.describe() + " and source " + src.describe() +
            " differ in dtype (use cast)");
  }
  check_same_numel(dst, "destination", src, "source", "copy");
  if (dst.nbytes() == 0 || dst.data() == src.data()) return;
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), src.data(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream()));
}

void CudaBackend::fill(const Tensor& dst, double value) {
  check_here(dst, "fill", "destination");
  const uint32_t bits = fill_bits(dst.dtype(), value);
  DeviceScope scope(m_device.index);
  kernels::launch_fill(dst.data(), dtype_size(dst.dtype()), bits, dst.numel(), stream());
}

void CudaBackend::synchronize() {
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::cast(const Tensor& src, const Tensor& dst) {
  check_here(src, "cast", "source");
  check_here(dst, "cast", "destination");
  check_same_numel(src, "source", dst, "destination", "cast");
  DeviceScope scope(m_device.index);
  kernels::launch_cast(src.data(), elem_type(src.dtype()), dst.data(), elem_type(dst.dtype()),
                       src.numel(), stream());
}

void CudaBackend::mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) {
  check_here(x, "mul_scalar_tensor", "x");
  check_here(scale, "mul_scalar_tensor", "scale");
  check_here(out, "mul_scalar_tensor", "out");
  check_scalar(scale, DType::f32, "mul_scalar_tensor", "scale");
  check_floating(x, "mul_scalar_tensor", "x");
  check_floating(out, "mul_scalar_tensor", "out");
  check_same_numel(x, "x", out, "out", "mul_scalar_tensor");
  DeviceScope scope(m_device.index);
  kernels::launch_mul_scalar_tensor(x.data(), elem_type(x.dtype()),
                                    static_cast<const float*>(scale.data()), out.data(),
                                    elem_type(out.dtype()), x.numel(), stream());
}

void CudaBackend::add_(const Tensor& dst, const Tensor& src, float alpha) {
  check_here(dst, "add_", "dst");
  check_here(src, "add_", "src");
  check_floating(dst, "add_", "dst");
  check_floating(src, "add_", "src");
  check_same_numel(dst, "dst", src, "src", "add_");
  DeviceScope scope(m_device.index);
  kernels::launch_add(dst.data(), elem_type(dst.dtype()), src.data(), elem_type(src.dtype()), alpha,
                      dst.numel(), stream());
}

float* CudaBackend::grow_workspace(DeviceBuffer& buffer, size_t floats, const char* what) {
  const size_t bytes = floats * sizeof(float);
  if (buffer.bytes() < bytes) {
    // Free before allocating (peak memory); the free waits for queued readers of the old one.
    buffer.reset();
    buffer = DeviceBuffer(m_device.index, bytes, what);
  }
  return static_cast<float*>(buffer.get());
}

float* CudaBackend::gemm_workspace(size_t floats) {
  return grow_workspace(m_gemm_workspace, floats, "the gemm widening workspace");
}

void CudaBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                       const Tensor& c, float alpha, float beta) {
  check_here(a, "gemm", "A");
  check_here(b, "gemm", "B");
  check_here(c, "gemm", "C");
  check_floating(a, "gemm", "A");
  check_floating(b, "gemm", "B");
  check_floating(c, "gemm", "C");
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2) {
    invalid("gemm: A, B and C must be matrices, got A " + a.describe() + ", B " + b.describe() +
            ", C " + c.describe());
  }
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t k_b = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (k != k_b || c.dim(0) != m || c.dim(1) != n) {
    invalid("gemm: op(A) is " + shape_str({m, k}) + " (A " + a.describe() +
            (trans_a ? ", transposed" : "") + "), op(B) is " + shape_str({k_b, n}) + " (B " +
            b.describe() + (trans_b ? ", transposed" : "") + "), C is " + c.describe() +
            "; expected op(A) [m, k], op(B) [k, n], C [m, n]");
  }
  for (int64_t d : {m, n, k}) {
    if (d > INT_MAX)
      invalid("gemm: dimension " + std::to_string(d) + " exceeds cuBLAS's int range");
  }
  if (m == 0 || n == 0) return;
  DeviceScope scope(m_device.index);
  if (k == 0) {
    // An empty product: C := beta * C, done here rather than trusting every cuBLAS path with k = 0.
    kernels::launch_scale_in_place(c.data(), elem_type(c.dtype()), beta, c.numel(), stream());
    return;
  }

  // cuBLAS with 32-bit compute takes equal input types, and for f32 inputs an f32 output, for
  // f16 inputs an f16 or f32 output, for bf16 inputs a bf16 or f32 output. Other combinations go
  // through an f32 workspace: mixed inputs are widened to f32 (exact, so the product is the one
  // asked for), and an output cuBLAS cannot write is computed in f32 and rounded once by a cast.
  const bool mixed_inputs = a.dtype() != b.dtype();
  const DType input_type = mixed_inputs ? DType::f32 : a.dtype();
  const bool widen_a = mixed_inputs && a.dtype() != DType::f32;
  const bool widen_b = mixed_inputs && b.dtype() != DType::f32;
  const bool c_via_workspace = c.dtype() != DType::f32 && c.dtype() != input_type;
  auto aligned = [](size_t floats) { return (floats + 63) / 64 * 64; };  // 256-byte regions
  const size_t a_floats = widen_a ? aligned(a.numel()) : 0;
  const size_t b_floats = widen_b ? aligned(b.numel()) : 0;
  const size_t c_floats = c_via_workspace ? aligned(c.numel()) : 0;
  float* workspace =
      a_floats + b_floats + c_floats > 0 ? gemm_workspace(a_floats + b_floats + c_floats) : nullptr;

  const void* a_ptr = a.data();
  const void* b_ptr = b.data();
  void* c_ptr = c.data();
  if (widen_a) {
    kernels::launch_cast(a.data(), elem_type(a.dtype()), workspace, ElemType::f32, a.numel(),
                         stream());
    a_ptr = workspace;
  }
  if (widen_b) {
    float* b_ws = workspace + a_floats;
    kernels::launch_cast(b.data(), elem_type(b.dtype()), b_ws, ElemType::f32, b.numel(), stream());
    b_ptr = b_ws;
  }
  if (c_via_workspace) {
    float* c_ws = workspace + a_floats + b_floats;
    // With beta == 0 cuBLAS does not read C (NaNs in it are ignored), so it is not widened.
    if (beta != 0.0f) {
      kernels::launch_cast(c.data(), elem_type(c.dtype()), c_ws, ElemType::f32, c.numel(),
                           stream());
    }
    c_ptr = c_ws;
  }
  const cudaDataType ab_type = cuda_data_type(input_type);
  const cudaDataType c_type = c_via_workspace ? CUDA_R_32F : cuda_data_type(c.dtype());

  // Row-major X [r, c] is column-major X^T with leading dimension c, so the row-major product
  // C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: cuBLAS's first operand is our B.
  const int lda = static_cast<int>(std::max<int64_t>(1, a.dim(1)));
  const int ldb = static_cast<int>(std::max<int64_t>(1, b.dim(1)));
  const int ldc = static_cast<int>(n);
  AMPCTL_CUBLAS_CHECK(cublasGemmEx(
      m_cublas.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b_ptr, ab_type, ldb,
      a_ptr, ab_type, lda, &beta, c_ptr, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (c_via_workspace) {
    kernels::launch_cast(c_ptr, ElemType::f32, c.data(), elem_type(c.dtype()), c.numel(), stream());
  }
}

void CudaBackend::global_norm(std::span<const Tensor> tensors, const Tensor& out) {
  check_here(out, "global_norm", "out");
  check_scalar(out, DType::f32, "global_norm", "out");
  for (const Tensor& t : tensors) {
    check_here(t, "global_norm", "input");
    check_floating(t, "global_norm", "input");
  }
  DeviceScope scope(m_device.index);
  auto* partials = static_cast<double*>(m_norm_partials.get());
  std::vector<kernels::TensorPack> packs = make_packs(tensors);
  if (packs.empty()) packs.emplace_back();  // zeroes the partials: the norm of nothing is 0
  for (size_t i = 0; i < packs.size(); ++i) {
    kernels::launch_global_norm_partials(packs[i], partials, /*accumulate=*/i > 0, stream());
  }
  kernels::launch_global_norm_finalize(partials, static_cast<float*>(out.data()), stream());
}

void CudaBackend::non_finite_check_and_unscale_(std::span<const Tensor> tensors,
                                                const Tensor& found_inf, const Tensor& inv_scale,
                                                const Tensor& segment_starts,
                                                const Tensor& segment_found) {
  const char* op = "non_finite_check_and_unscale_";
  check_here(found_inf, op, "found_inf");
  check_here(inv_scale, op, "inv_scale");
  check_scalar(found_inf, DType::f32, op, "found_inf");
  check_scalar(inv_scale, DType::f32, op, "inv_scale");
  size_t total = 0;
  for (const Tensor& t : tensors) {
    check_here(t, op, "input");
    check_floating(t, op, "input");
    total += t.numel();
  }
  kernels::SegmentAttribution attr;
  if (segment_starts.defined() != segment_found.defined()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(op) + ": segment_starts and segment_found go together, got " +
                    (segment_starts.defined() ? "only segment_starts" : "only segment_found")};
  }
  if (segment_starts.defined()) {
    check_here(segment_starts, op, "segment_starts");
    check_here(segment_found, op, "segment_found");
    // The starts themselves stay on the device (reading them would be a sync): the caller
    // guarantees 0 first and strictly increasing, as Backend documents; the CPU checks it.
    if (segment_starts.dtype() != DType::i32 || segment_found.dtype() != DType::i32 ||
        segment_starts.rank() != 1 || segment_starts.numel() == 0 ||
        segment_found.numel() != segment_starts.numel() ||
        segment_starts.numel() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw Error{ErrorKind::invalid_argument,
                  std::string(op) +
                      ": expected segment_starts and segment_found i32 [S] with S >= 1, got " +
                      segment_starts.describe() + " and " + segment_found.describe()};
    }
    if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw Error{ErrorKind::invalid_argument, std::string(op) + ": " + std::to_string(total) +
                                                   " elements are too many for i32 segment starts"};
    }
    attr.starts = static_cast<const int32_t*>(segment_starts.data());
    attr.found = static_cast<int32_t*>(segment_found.data());
    attr.count = static_cast<int32_t>(segment_starts.numel());
  }
  DeviceScope scope(m_device.index);
  for (const kernels::TensorPack& pack : make_packs(tensors)) {
    kernels::launch_non_finite_check_and_unscale(pack, static_cast<float*>(found_inf.data()),
                                                 static_cast<const float*>(inv_scale.data()), attr,
                                                 stream());
    for (int t = 0; t < pack.count; ++t) attr.base += pack.tensors[t].numel;
  }
}

void CudaBackend::non_finite_check_unscale_norm_(std::span<const Tensor> tensors,
                                                 const Tensor& found_inf, const Tensor& inv_scale,
                                                 bool unscale, const Tensor& norm,
                                                 const Tensor& segment_starts,
                                                 const Tensor& segment_found) {
  const char* op = "non_finite_check_unscale_norm_";
  check_here(norm, op, "norm");
  check_scalar(norm, DType::f32, op, "norm");
  check_here(found_inf, op, "found_inf");
  check_here(inv_scale, op, "inv_scale");
  check_scalar(found_inf, DType::f32, op, "found_inf");
  check_scalar(inv_scale, DType::f32, op, "inv_scale");
  size_t total = 0;
  for (const Tensor& t : tensors) {
    check_here(t, op, "input");
    check_floating(t, op, "input");
    total += t.numel();
  }
  kernels::SegmentAttribution attr;
  if (segment_starts.defined() != segment_found.defined()) {
    throw Error{ErrorKind::invalid_argument,
                std::string(op) + ": segment_starts and segment_found go together"};
  }
  if (segment_starts.defined()) {
    check_here(segment_starts, op, "segment_starts");
    check_here(segment_found, op, "segment_found");
    if (segment_starts.dtype() != DType::i32 || segment_found.dtype() != DType::i32 ||
        segment_starts.rank() != 1 || segment_starts.numel() == 0 ||
        segment_found.numel() != segment_starts.numel() ||
        total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      throw Error{ErrorKind::invalid_argument,
                  std::string(op) +
                      ": expected segment_starts and segment_found i32 [S] with S >= 1 over "
                      "fewer than 2^31 elements, got " +
                      segment_starts.describe() + " and " + segment_found.describe()};
    }
    attr.starts = static_cast<const int32_t*>(segment_starts.data());
    attr.found = static_cast<int32_t*>(segment_found.data());
    attr.count = static_cast<int32_t>(segment_starts.numel());
  }
  DeviceScope scope(m_device.index);
  auto* partials = static_cast<double*>(m_norm_partials.get());
  std::vector<kernels::TensorPack> packs = make_packs(tensors);
  if (packs.empty()) packs.emplace_back();  // zeroes the partials: the norm of nothing is 0
  for (size_t i = 0; i < packs.size(); ++i) {
    kernels::launch_non_finite_check_unscale_norm_partials(
        packs[i], static_cast<float*>(found_inf.data()),
        static_cast<const float*>(inv_scale.data()), unscale, partials, /*accumulate=*/i > 0, attr,
        stream());
    for (int t = 0; t < packs[i].count; ++t) attr.base += packs[i].tensors[t].numel;
  }
  kernels::launch_global_norm_finalize(partials, static_cast<float*>(norm.data()), stream());
}

void CudaBackend::inv_scale(const Tensor& scale, const Tensor& inv) {
  check_here(scale, "inv_scale", "scale");
  check_here(inv, "inv_scale", "inv");
  check_scalar(scale, DType::f32, "inv_scale", "scale");
  check_scalar(inv, DType::f32, "inv_scale", "inv");
  DeviceScope scope(m_device.index);
  kernels::launch_inv_scale(static_cast<const float*>(scale.data()),
                            static_cast<float*>(inv.data()), stream());
}

void CudaBackend::update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                const Tensor& hysteresis_tracker, const Tensor& trackers,
                                const Tensor& found_inf, const amp::ScaleUpdateParams& params) {
  const char* op = "update_scale_";
  check_here(scale, op, "scale");
  check_here(growth_tracker, op, "growth_tracker");
  check_here(hysteresis_tracker, op, "hysteresis_tracker");
  check_here(trackers, op, "trackers");
  if (trackers.dtype() != DType::i32 || trackers.numel() != amp::kTrackerCount) {
    invalid(std::string(op) + ": trackers must be an i32 tensor of " +
            std::to_string(amp::kTrackerCount) + " elements, got " + trackers.describe());
  }
  check_here(found_inf, op, "found_inf");
  check_scalar(scale, DType::f32, op, "scale");
  check_scalar(growth_tracker, DType::i32, op, "growth_tracker");
  check_scalar(hysteresis_tracker, DType::i32, op, "hysteresis_tracker");
  check_scalar(found_inf, DType::f32, op, "found_inf");
  DeviceScope scope(m_device.index);
  kernels::launch_update_scale(
      static_cast<float*>(scale.data()), static_cast<int32_t*>(growth_tracker.data()),
      static_cast<int32_t*>(hysteresis_tracker.data()), static_cast<int32_t*>(trackers.data()),
      static_cast<const float*>(found_inf.data()), params, stream());
}

void CudaBackend::update_scale_auto_(const Tensor& scale, const Tensor& growth_tracker,
                                     const Tensor& trackers, const Tensor& found_inf,
                                     const Tensor& amax, const Tensor& history,
                                     const amp::ScaleUpdateParams& params) {
  check_update_scale_auto(scale, growth_tracker, trackers, found_inf, amax, history, params,
                          m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_update_scale_auto(
      static_cast<float*>(scale.data()), static_cast<int32_t*>(growth_tracker.data()),
      static_cast<int32_t*>(trackers.data()), static_cast<const float*>(found_inf.data()),
      static_cast<const float*>(amax.data()), static_cast<float*>(history.data()), params,
      stream());
}

void CudaBackend::optimizer_step(const OptimizerStepArgs& args) {
  check_optimizer_step(args, m_device);
  // The optional operands every kind shares; the kernels read found_inf and inv_scale themselves
  // (no host sync) and skip the whole update when found_inf[0] != 0.
  const float* found_inf =
      args.found_inf.defined() ? static_cast<const float*>(args.found_inf.data()) : nullptr;
  const float* inv_scale =
      args.inv_scale.defined() ? static_cast<const float*>(args.inv_scale.data()) : nullptr;
  void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
  const float* decay_mask =
      args.decay_mask.defined() ? static_cast<const float*>(args.decay_mask.data()) : nullptr;
  const ElemType lowp_type =
      args.lowp_params.defined() ? elem_type(args.lowp_params.dtype()) : ElemType::f16;
  DeviceScope scope(m_device.index);
  if (const auto* sgd = std::get_if<optim::SgdHyper>(&args.hyper)) {
    kernels::SgdStepPointers p{};
    p.params = static_cast<float*>(args.params.data());
    p.grads = static_cast<const float*>(args.grads.data());
    // Without momentum the buffer is neither read nor written, even when one is passed.
    p.momentum_buf =
        sgd->momentum != 0.0f ? static_cast<float*>(args.momentum_buf.data()) : nullptr;
    p.step = static_cast<int32_t*>(args.step.data());
    p.found_inf = found_inf;
    p.inv_scale = inv_scale;
    p.lowp_params = lowp;
    p.lowp_type = lowp_type;
    p.decay_mask = decay_mask;
    kernels::launch_sgd_step(p, args.params.numel(), *sgd, stream());
    return;
  }
  kernels::AdamStepPointers p{};
  p.params = static_cast<float*>(args.params.data());
  p.grads = static_cast<const float*>(args.grads.data());
  p.exp_avg = static_cast<float*>(args.exp_avg.data());
  p.exp_avg_sq = static_cast<float*>(args.exp_avg_sq.data());
  p.step = static_cast<int32_t*>(args.step.data());
  p.found_inf = found_inf;
  p.inv_scale = inv_scale;
  p.lowp_params = lowp;
  p.lowp_type = lowp_type;
  p.decay_mask = decay_mask;
  kernels::launch_adam_step(p, args.params.numel(), std::get<optim::AdamHyper>(args.hyper),
                            stream());
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                              const Tensor& dst) {
  check_here(src, "gather_rows", "src");
  check_here(index, "gather_rows", "index");
  check_here(dst, "gather_rows", "dst");
  const int64_t width = check_gather_rows(src, index, offset, dst);
  const int64_t n = src.dim(0), rows = dst.dim(0);
  DeviceScope scope(m_device.index);
  kernels::launch_gather_rows(static_cast<const uint32_t*>(src.data()), n, width,
                              static_cast<const int32_t*>(index.data()) + offset,
                              static_cast<uint32_t*>(dst.data()), rows, stream());
}

}  // namespace ampctl::cuda_detail

#if AMPCTL_HAVE_NCCL
namespace ampctl::dist {
// dist/nccl_communicator.h's, compiled into this plugin beside the backend whose stream it takes.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, int rank, int world);
}  // namespace ampctl::dist
#endif

// ---- the plugin's table (cuda_plugin.h): the core's make_cuda_backend & co. call these
namespace ampctl {
namespace {

using cuda_detail::CudaBackend;
using cuda_detail::DeviceScope;
using cuda_detail::kNoGpuHint;

std::unique_ptr<Backend> plugin_make_backend(int index) {
  const std::string name = "cuda:" + std::to_string(index);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error{ErrorKind::cuda,
                "device " + name +
                    " requested, but CUDA finds no usable GPU: cudaGetDeviceCount: " +
                    cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")",
                kNoGpuHint};
  }
  if (count == 0) {
    throw Error{ErrorKind::cuda, "device " + name + " requested, but this machine has no GPU",
                kNoGpuHint};
  }
  if (index < 0 || index >= count) {
    throw Error{
        ErrorKind::cuda,
        "device " + name + " requested, but this machine has " + std::to_string(count) +
            " GPU(s): cuda:0 to cuda:" + std::to_string(count - 1),
        "use an index below " + std::to_string(count) + " (CUDA_VISIBLE_DEVICES renumbers them)"};
  }
  DeviceScope scope(index);
  cudaDeviceProp props{};
  AMPCTL_CUDA_CHECK(cudaGetDeviceProperties(&props, index));
  const cudaError_t probe = cuda_detail::probe_kernel_image();
  if (probe != cudaSuccess) {
    const std::string arch = std::to_string(props.major) + std::to_string(props.minor);
    throw Error{ErrorKind::cuda,
                name + " (" + props.name + ", sm_" + arch +
                    ") cannot run this build's kernels, built for sm_" +
                    cuda_detail::compiled_architectures() + ": " + cudaGetErrorName(probe) + " (" +
                    cudaGetErrorString(probe) + ")",
                "rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + arch + ", or use device: cpu"};
  }
  return std::make_unique<CudaBackend>(index, props);
}

int plugin_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::optional<ComputeCapability> plugin_capability(int index) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return ComputeCapability{major, minor};
}

std::optional<uint64_t> plugin_free_memory(int index) {
  int current = 0;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(index) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaSetDevice(current);
    return std::nullopt;
  }
  (void)cudaSetDevice(current);
  return static_cast<uint64_t>(free_bytes);
}

}  // namespace

}  // namespace ampctl

extern "C" const ampctl::CudaPluginApi* ampctl_cuda_plugin_v1() {
  static const ampctl::CudaPluginApi api {
    ampctl::kCudaPluginAbi, AMPCTL_VERSION, ampctl::plugin_make_backend,
        ampctl::plugin_device_count, ampctl::plugin_free_memory, ampctl::plugin_capability,
#if AMPCTL_HAVE_NCCL
        ampctl::dist::make_nccl_communicator,
#else
        nullptr,
#endif
  };
  return &api;
}
