// Activations (relu, gelu, tanh, gelu_tanh) forward and backward: one grid-stride pass, each
// element widened exactly to float, put through nn::activation_forward / nn::activation_backward
// (the functions the CPU backend calls) and rounded once to the output's dtype.
//
// relu is exact, so it matches the CPU bit for bit; gelu, gelu_tanh and tanh call CUDA's erff /
// expf / tanhf, which may differ from the host's libm by an ulp or two before the rounding
// (nn_math.h).
//
// Invariants: element i of the output depends only on element i of the inputs, so y may alias x
// and dx may alias dy (same index, same thread); no __restrict__.
#include "nn_activation.cuh"
#include "device_util.cuh"

namespace ampctl::kernels {

// kernels

static __global__ void activation_forward_kernel(nn::ActivationKind kind, const void* x,
                                                 ElemType x_type, void* y, ElemType y_type,
                                                 size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    store_float(y, y_type, i, nn::activation_forward(kind, load_float(x, x_type, i)));
  }
}

static __global__ void activation_backward_kernel(nn::ActivationKind kind, const void* x,
                                                  ElemType x_type, const void* y, ElemType y_type,
                                                  const void* dy, ElemType dy_type, void* dx,
                                                  ElemType dx_type, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float xv = x != nullptr ? load_float(x, x_type, i) : 0.0f;
    const float yv = y != nullptr ? load_float(y, y_type, i) : 0.0f;
    store_float(dx, dx_type, i, nn::activation_backward(kind, xv, yv, load_float(dy, dy_type, i)));
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

void launch_activation_forward(nn::ActivationKind kind, const void* x, ElemType x_type, void* y,
                               ElemType y_type, size_t n, cudaStream_t stream) {
  check_floating(x_type, "activation_forward x");
  check_floating(y_type, "activation_forward y");
  if (n == 0) return;
  activation_forward_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(kind, x, x_type, y, y_type, n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_activation_backward(nn::ActivationKind kind, const void* x, ElemType x_type,
                                const void* y, ElemType y_type, const void* dy, ElemType dy_type,
                                void* dx, ElemType dx_type, size_t n, cudaStream_t stream) {
  check_floating(x_type, "activation_backward x");
  check_floating(y_type, "activation_backward y");
  check_floating(dy_type, "activation_backward dy");
  check_floating(dx_type, "activation_backward dx");
  if (n == 0) return;
  activation_backward_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(kind, x, x_type, y, y_type,
                                                                      dy, dy_type, dx, dx_type, n);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
