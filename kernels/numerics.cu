// round_counted: dst[i] := round(src[i]) (f16 or bf16) and the classification of each rounding
// (math/numerics_math.h) summed into one counters row.
// round_amax: the same rounding with only grad_amax's max |x| and non-finite flag, every step.
//
// Each block keeps its partial counts and histogram in shared memory (64-bit, as the totals) and
// adds them to the global int64s once per block with integer atomics; max|x| is an integer
// atomicMax on the float bits. Integer addition is associative and max is order-free, so the
// counters are the same bits whatever the scheduling: deterministic. Runs on sampled steps only.
#include "ampctl/core/half.h"
#include "ampctl/math/numerics_math.h"
#include "numerics.cuh"

namespace ampctl::kernels {

template <bool kHalf>
static __global__ void round_counted_kernel(const float* __restrict__ src,
                                            uint16_t* __restrict__ dst,
                                            unsigned long long* __restrict__ counters, size_t n) {
  __shared__ unsigned long long hist[numerics::kBins];
  __shared__ unsigned long long totals[4];
  __shared__ unsigned int max_bits;
  for (int b = threadIdx.x; b < numerics::kBins; b += blockDim.x) hist[b] = 0;
  if (threadIdx.x < 4) totals[threadIdx.x] = 0;
  if (threadIdx.x == 0) max_bits = 0;
  __syncthreads();

  numerics::Partial p;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = src[i];
    const uint16_t bits = kHalf ? float_to_half_bits(x) : float_to_bf16_bits(x);
    dst[i] = bits;
    const int bin = numerics::classify(x, bits, kHalf, p);
    if (bin >= 0) atomicAdd(&hist[bin], 1ull);
  }
  atomicAdd(&totals[0], static_cast<unsigned long long>(p.values));
  atomicAdd(&totals[1], static_cast<unsigned long long>(p.underflow));
  atomicAdd(&totals[2], static_cast<unsigned long long>(p.subnormal));
  atomicAdd(&totals[3], static_cast<unsigned long long>(p.nonfinite));
  atomicMax(&max_bits, p.max_bits);
  __syncthreads();

  for (int b = threadIdx.x; b < numerics::kBins; b += blockDim.x) {
    if (hist[b] != 0) atomicAdd(&counters[numerics::kHist0 + b], hist[b]);
  }
  if (threadIdx.x < 4 && totals[threadIdx.x] != 0) {
    atomicAdd(&counters[numerics::kValues + threadIdx.x], totals[threadIdx.x]);
  }
  if (threadIdx.x == 0) {
    atomicMax(&counters[numerics::kMaxBits], static_cast<unsigned long long>(max_bits));
  }
}

// grad_amax: a warp max of the float bits, then one integer atomicMax per warp on the global
// words (non-negative floats order like their bits; the flag is 0.0f or 1.0f). Order-free, so
// deterministic. Two loads and one store per element besides the rounding: memory-bound like
// the cast it replaces.
template <bool kHalf>
static __global__ void round_amax_kernel(const float* __restrict__ src, uint16_t* __restrict__ dst,
                                         unsigned int* __restrict__ amax, size_t n) {
  uint32_t max_bits = 0;
  bool nonfinite = false;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = src[i];
    dst[i] = kHalf ? float_to_half_bits(x) : float_to_bf16_bits(x);
    numerics::amax_update(x, max_bits, nonfinite);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    max_bits = max(max_bits, __shfl_down_sync(0xffffffffu, max_bits, offset));
  }
  const bool any_nonfinite = __any_sync(0xffffffffu, nonfinite);
  if ((threadIdx.x & 31) == 0) {
    if (max_bits != 0) atomicMax(&amax[0], max_bits);
    if (any_nonfinite) atomicMax(&amax[1], 0x3f800000u);  // 1.0f
  }
}

void launch_round_amax(const float* src, void* dst, ElemType dst_type, float* amax, size_t n,
                       cudaStream_t stream) {
  if (n == 0) return;
  auto* a = reinterpret_cast<unsigned int*>(amax);
  auto* d = static_cast<uint16_t*>(dst);
  if (dst_type == ElemType::f16) {
    round_amax_kernel<true><<<grid_size(n), kBlockSize, 0, stream>>>(src, d, a, n);
  } else {
    round_amax_kernel<false><<<grid_size(n), kBlockSize, 0, stream>>>(src, d, a, n);
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_round_counted(const float* src, void* dst, ElemType dst_type, int64_t* counters,
                          size_t n, cudaStream_t stream) {
  if (n == 0) return;
  auto* c = reinterpret_cast<unsigned long long*>(counters);
  auto* d = static_cast<uint16_t*>(dst);
  if (dst_type == ElemType::f16) {
    round_counted_kernel<true><<<grid_size(n), kBlockSize, 0, stream>>>(src, d, c, n);
  } else {
    round_counted_kernel<false><<<grid_size(n), kBlockSize, 0, stream>>>(src, d, c, n);
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
