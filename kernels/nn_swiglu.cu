// SwiGLU (Backend::swiglu_forward / swiglu_backward): one grid-stride pass over the [R, I]
// outputs, element (r, i) reading its gate at column i and its up at column I + i of gate_up's
// row r, widened exactly, put through nn_math.h's swiglu_* (the functions the CPU backend calls,
// with autocast's roundings to gate_up's type) and rounded once to the output's type. The only
// difference from the CPU is CUDA's expf in silu (an ulp or two before the roundings).
//
// Invariants: each output element has one writer; outputs alias no input; no host sync.
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "nn_swiglu.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void swiglu_forward_kernel(const void* gate_up, ElemType in_type, void* y,
                                             ElemType y_type, int64_t width, size_t n) {
  const int lowp = static_cast<int>(in_type);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const auto w = static_cast<size_t>(width);
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t r = i / w, c = i - r * w;
    const float g = load_float(gate_up, in_type, r * 2 * w + c);
    const float u = load_float(gate_up, in_type, r * 2 * w + w + c);
    store_float(y, y_type, i, nn::swiglu_forward(g, u, lowp));
  }
}

static __global__ void swiglu_backward_kernel(const void* gate_up, ElemType in_type, const void* dy,
                                              ElemType dy_type, void* dgate_up, ElemType out_type,
                                              float* dy_up, int64_t width, size_t n) {
  const int lowp = static_cast<int>(in_type);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const auto w = static_cast<size_t>(width);
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t r = i / w, c = i - r * w;
    const float g = load_float(gate_up, in_type, r * 2 * w + c);
    const float u = load_float(gate_up, in_type, r * 2 * w + w + c);
    const float d = load_float(dy, dy_type, i);
    store_float(dgate_up, out_type, r * 2 * w + c, nn::swiglu_dgate(d, g, u, lowp));
    store_float(dgate_up, out_type, r * 2 * w + w + c, nn::swiglu_dup(d, g, lowp));
    if (dy_up != nullptr) dy_up[i] = d * u;
  }
}

// launchers

namespace {

void check_floating(ElemType t, const char* what) {
  if (t == ElemType::i32) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": expected a floating dtype, got i32"};
  }
}

}  // namespace

void launch_swiglu_forward(const void* gate_up, ElemType in_type, void* y, ElemType y_type,
                           int64_t rows, int64_t width, cudaStream_t stream) {
  check_floating(in_type, "swiglu_forward gate_up");
  check_floating(y_type, "swiglu_forward y");
  const auto n = static_cast<size_t>(rows * width);
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(gate_up, in_type, y, y_type, width,
                                                                 n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_swiglu_backward(const void* gate_up, ElemType in_type, const void* dy, ElemType dy_type,
                            void* dgate_up, ElemType out_type, float* dy_up, int64_t rows,
                            int64_t width, cudaStream_t stream) {
  check_floating(in_type, "swiglu_backward gate_up");
  check_floating(dy_type, "swiglu_backward dy");
  check_floating(out_type, "swiglu_backward dgate_up");
  const auto n = static_cast<size_t>(rows * width);
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(
      gate_up, in_type, dy, dy_type, dgate_up, out_type, dy_up, width, n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
