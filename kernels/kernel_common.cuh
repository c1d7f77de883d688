// What every kernel file and the CUDA backend's host code share: the element-type codes the
// launchers take, the multi-tensor argument pack, the launch geometry and AMPCTL_CUDA_CHECK.
//
// The CUDA sources compile as C++17 (nvcc's default; the build sets no CUDA standard) while
// core/tensor.h and backend/backend.h are C++20, so kernels never see a Tensor: launchers take raw
// device pointers, element counts and ElemType. ElemType's values mirror ampctl::DType; the CUDA
// backend (lib/src/backend/cuda/cuda_backend.cpp) static_asserts that they match.
//
// This header is included by nvcc and by the host C++ compiler alike, so it holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/core/half.h"

namespace ampctl::kernels {

enum class ElemType : uint8_t { f32, f16, bf16, i32 };

// Throws Error{cuda, "file:line: expr: cudaErrorName (description)"}.
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file,
                                          int line) {
  const char* slash = std::strrchr(file, '/');
  throw Error{ErrorKind::cuda, std::string(slash ? slash + 1 : file) + ":" + std::to_string(line) +
                                   ": " + expr + ": " + cudaGetErrorName(err) + " (" +
                                   cudaGetErrorString(err) + ")"};
}

#define AMPCTL_CUDA_CHECK(expr)                                                         \
  do {                                                                                  \
    const cudaError_t ampctl_cuda_err_ = (expr);                                        \
    if (ampctl_cuda_err_ != cudaSuccess) {                                              \
      ::ampctl::kernels::throw_cuda_error(ampctl_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// Elementwise kernels run 256-thread blocks over grid-stride loops. The grid is capped so a huge
// tensor costs a few passes per thread instead of millions of blocks; 4096 blocks of 256 threads
// is about 4x what an H100/H200 (132 SMs x 2048 threads) holds at once.
constexpr unsigned kBlockSize = 256;
constexpr unsigned kMaxGridSize = 4096;

inline unsigned grid_size(size_t n) {
  const size_t blocks = (n + kBlockSize - 1) / kBlockSize;
  return static_cast<unsigned>(blocks < kMaxGridSize ? (blocks > 0 ? blocks : 1) : kMaxGridSize);
}

// Memory-bound passes (unscale, the optimizer steps) use a grid that the device holds at once:
// `blocks_per_sm` blocks of kBlockSize threads on each multiprocessor of the current device, or
// fewer when `items` (units of work, one per thread per pass) need fewer. One resident wave has
// no partially filled last wave, and every thread keeps several 16-byte loads in flight through
// its grid-stride loop. The kernel declares __launch_bounds__(kBlockSize, blocks_per_sm) so the
// registers allow that many blocks.
inline unsigned resident_grid_size(size_t items, unsigned blocks_per_sm) {
  int device = 0, sms = 0;
  AMPCTL_CUDA_CHECK(cudaGetDevice(&device));
  AMPCTL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t resident = static_cast<size_t>(sms > 0 ? sms : 1) * blocks_per_sm;
  const size_t blocks = (items + kBlockSize - 1) / kBlockSize;
  return static_cast<unsigned>(blocks < resident ? (blocks > 0 ? blocks : 1) : resident);
}

// Multi-tensor ops (unscale, global norm) take their tensors as a kernel parameter, so launching
// one needs no host-to-device copy and no sync. 96 descriptors of 24 bytes keep the parameter
// block under the 4 KiB that every architecture accepts; callers chunk longer lists.
struct TensorDesc {
  void* data;
  size_t numel;
  ElemType type;
};

constexpr int kMaxTensorsPerLaunch = 96;

struct TensorPack {
  TensorDesc tensors[kMaxTensorsPerLaunch];
  int count = 0;
  size_t max_numel = 0;  // sizes the grid
};

// Host-side dispatch on an element type: calls f(TypeTag<T>{}) with the matching C++ type.
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the floating element types; throws Error{invalid_argument} naming
// `what` for i32.
template <typename F>
void dispatch_floating(ElemType type, const char* what, F&& f) {
  switch (type) {
    case ElemType::f32:
      f(TypeTag<float>{});
      return;
    case ElemType::f16:
      f(TypeTag<half>{});
      return;
    case ElemType::bf16:
      f(TypeTag<bfloat16>{});
      return;
    case ElemType::i32:
      break;
  }
  throw Error{ErrorKind::invalid_argument,
              std::string(what) + ": expected a floating dtype, got i32"};
}

}  // namespace ampctl::kernels
