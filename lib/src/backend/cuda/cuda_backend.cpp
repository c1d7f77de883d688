// The CUDA backend: Backend's ops on one GPU, on one non-default stream, in issue order. This file
// holds the handles, the stream, device memory and the backend's lifetime (and the plugin's
// table); the ops live in one file per family (memory.cpp, gemm.cpp, amp.cpp, nn.cpp,
// transformer.cpp, conv.cpp, optim.cpp, numerics.cpp); cuda_backend.h the class and what they
// share.
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

#include "ampctl/backend/backend.h"
#include "ampctl/backend/cuda_plugin.h"
#include "ampctl/build_info.h"
#include "cuda_backend.h"
#include "device_probe.h"
#include "amp_global_norm.cuh"
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
// ---- errors ----

[[noreturn]] void invalid(const std::string& message) {
  throw Error{ErrorKind::invalid_argument, message};
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

float* CudaBackend::grow_workspace(DeviceBuffer& buffer, size_t floats, const char* what) {
  const size_t bytes = floats * sizeof(float);
  if (buffer.bytes() < bytes) {
    // Free before allocating (peak memory); the free waits for queued readers of the old one.
    buffer.reset();
    buffer = DeviceBuffer(m_device.index, bytes, what);
  }
  return static_cast<float*>(buffer.get());
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
