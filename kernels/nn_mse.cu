// Mean squared error, PyTorch's mse_loss (reduction 'mean') and its backward, in float32.
//
// Partials kernel: a fixed grid of kMseBlocks blocks; thread t of block b visits the elements
// b * kBlockSize + t + j * kMseBlocks * kBlockSize in order, adds (pred - target)^2 to its float
// sum and, when asked, writes the element's gradient nn::mse_grad(pred, target, 2 / n, grad_scale)
// (PyTorch forms 2 / n in double and hands it to the kernel as float; so does this launcher). Each
// block reduces its threads by block_tree_sum into workspace[b]. Finalize: one block sums the
// kMseBlocks partials by the same tree and divides by n.
//
// The geometry does not depend on the device, so the loss repeats bit for bit; the gradient is
// elementwise and matches the CPU exactly; the loss differs from the CPU's sequential sum by float
// reassociation only.
//
// Invariants: no atomics; each output element has one writer; dpred may alias pred (same index,
// same thread).
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "nn_mse.cuh"

namespace ampctl::kernels {

// kernels

constexpr unsigned kMseBlocks = 256;

static __global__ void __launch_bounds__(kBlockSize)
    mse_partials_kernel(const void* pred, ElemType pred_type, const float* target, void* dpred,
                        ElemType dpred_type, const float* grad_scale, float two_over_n, size_t n,
                        float* partials) {
  __shared__ float shared[kBlockSize];
  const float gs = dpred != nullptr ? *grad_scale : 0.0f;
  const size_t stride = static_cast<size_t>(kMseBlocks) * kBlockSize;
  float acc = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kBlockSize + threadIdx.x; i < n; i += stride) {
    const float p = load_float(pred, pred_type, i);
    const float t = target[i];
    const float d = p - t;
    acc = acc + d * d;
    if (dpred != nullptr) store_float(dpred, dpred_type, i, nn::mse_grad(p, t, two_over_n, gs));
  }
  shared[threadIdx.x] = acc;
  block_tree_sum<kBlockSize>(shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

static __global__ void __launch_bounds__(kBlockSize)
    mse_finalize_kernel(const float* partials, float n, float* loss) {
  __shared__ float shared[kBlockSize];
  float acc = 0.0f;
  for (unsigned b = threadIdx.x; b < kMseBlocks; b += kBlockSize) acc = acc + partials[b];
  shared[threadIdx.x] = acc;
  block_tree_sum<kBlockSize>(shared);
  if (threadIdx.x == 0) *loss = shared[0] / n;
}

// launchers

size_t mse_workspace_floats() {
  return kMseBlocks;
}

void launch_mse(const void* pred, ElemType pred_type, const float* target, float* loss, void* dpred,
                ElemType dpred_type, const float* grad_scale, size_t n, float* workspace,
                cudaStream_t stream) {
  if (pred_type == ElemType::i32 || (dpred != nullptr && dpred_type == ElemType::i32)) {
    throw Error{ErrorKind::invalid_argument, "mse: pred and dpred must be floating, got i32"};
  }
  const auto two_over_n = static_cast<float>(2.0 / static_cast<double>(n));
  mse_partials_kernel<<<kMseBlocks, kBlockSize, 0, stream>>>(
      pred, pred_type, target, dpred, dpred_type, grad_scale, two_over_n, n, workspace);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  // With n == 0 the mean is 0 / 0 = NaN, as PyTorch's mean of nothing.
  mse_finalize_kernel<<<1, kBlockSize, 0, stream>>>(workspace, static_cast<float>(n), loss);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
