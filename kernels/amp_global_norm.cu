// global_norm: out[0] = float(sqrt(sum over every element x of every tensor of double(x)^2)).
//
// Algorithm: a fixed grid of kNormBlocks blocks of kNormThreads threads. Thread t of block b
// visits, tensor by tensor, the elements i = b * kNormThreads + t + j * kNormBlocks * kNormThreads
// and sums their squares in double (a float squared is exact in double: 24 + 24 < 53 bits). Each
// block reduces its threads' sums by a shared-memory tree and stores the result in partials[b];
// tensor lists longer than one pack run several launches, each adding to its own partials[b] in
// stream order. One block then reduces the kNormBlocks partials by the same fixed tree, takes the
// square root in double and rounds once to float.
//
// Invariants: no atomics and a geometry that does not depend on the device, so the result is
// bitwise reproducible run to run and GPU to GPU. The order differs from the CPU backend's
// sequential sum, so the two agree to double rounding (about 1e-16 relative) before the final
// rounding to float: at most one float ulp apart.
#include "amp_global_norm.cuh"

namespace ampctl::kernels {

// kernels

template <typename T>
static __device__ double sum_squares(const T* x, size_t n, size_t first, size_t stride) {
  double acc = 0.0;
  for (size_t i = first; i < n; i += stride) {
    const double v = static_cast<double>(static_cast<float>(x[i]));
    acc = acc + v * v;
  }
  return acc;
}

// Sums shared[0 .. kNormThreads) into shared[0] by a fixed tree; every thread must call it.
static __device__ void block_tree_sum(double* shared) {
  for (unsigned half_width = kNormThreads / 2; half_width > 0; half_width /= 2) {
    __syncthreads();
    if (threadIdx.x < half_width)
      shared[threadIdx.x] = shared[threadIdx.x] + shared[threadIdx.x + half_width];
  }
  __syncthreads();
}

static __global__ void __launch_bounds__(kNormThreads)
    global_norm_partials_kernel(const TensorPack pack, double* partials, bool accumulate) {
  __shared__ double shared[kNormThreads];
  const size_t first = static_cast<size_t>(blockIdx.x) * kNormThreads + threadIdx.x;
  const size_t stride = static_cast<size_t>(kNormBlocks) * kNormThreads;
  double acc = 0.0;
  for (int t = 0; t < pack.count; ++t) {
    const TensorDesc& d = pack.tensors[t];
    switch (d.type) {
      case ElemType::f32:
        acc = acc + sum_squares(static_cast<const float*>(d.data), d.numel, first, stride);
        break;
      case ElemType::f16:
        acc = acc + sum_squares(static_cast<const half*>(d.data), d.numel, first, stride);
        break;
      case ElemType::bf16:
        acc = acc + sum_squares(static_cast<const bfloat16*>(d.data), d.numel, first, stride);
        break;
      case ElemType::i32:
        break;  // rejected by the launcher
    }
  }
  shared[threadIdx.x] = acc;
  block_tree_sum(shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = accumulate ? partials[blockIdx.x] + shared[0] : shared[0];
  }
}

static __global__ void __launch_bounds__(kNormThreads)
    global_norm_finalize_kernel(const double* partials, float* out) {
  __shared__ double shared[kNormThreads];
  double acc = 0.0;
  for (unsigned i = threadIdx.x; i < kNormBlocks; i += kNormThreads) acc = acc + partials[i];
  shared[threadIdx.x] = acc;
  block_tree_sum(shared);
  if (threadIdx.x == 0) out[0] = static_cast<float>(sqrt(shared[0]));
}

// launchers

void launch_global_norm_partials(const TensorPack& pack, double* partials, bool accumulate,
                                 cudaStream_t stream) {
  for (int t = 0; t < pack.count; ++t) {
    if (pack.tensors[t].type == ElemType::i32) {
      throw Error{ErrorKind::invalid_argument,
                  "global_norm: tensor " + std::to_string(t) +
                      " of the pack is i32, expected a floating dtype"};
    }
  }
  global_norm_partials_kernel<<<kNormBlocks, kNormThreads, 0, stream>>>(pack, partials, accumulate);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_global_norm_finalize(const double* partials, float* out, cudaStream_t stream) {
  global_norm_finalize_kernel<<<1, kNormThreads, 0, stream>>>(partials, out);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
