// The loss-scaling ops (SPEC section 3). The per-element and per-step math is amp_math.h's, the
// same functions the CPU backend calls; these kernels only decide who runs it on which element.
//
//   non_finite_check_and_unscale: PyTorch's _amp_foreach_non_finite_check_and_unscale_ as one
//     launch over up to kMaxTensorsPerLaunch tensors (the descriptors travel as the kernel's
//     parameter: no host-to-device copy, no sync). The pass is memory-bound, so it is shaped for
//     bandwidth: each tensor is split into a scalar head up to the first 16-byte boundary, a body
//     of aligned 16-byte words (4 floats or 8 halves) moved with 128-bit loads and stores, two
//     words per thread per iteration so that enough bytes are in flight, and a scalar tail. The
//     grid is one resident wave (resident_grid_size), each thread grid-striding over the body.
//     Every element still goes through amp::unscale_value and one rounding to its dtype, so the
//     bits are those of the scalar loop. Each thread ORs its own found flag over everything it
//     saw; a block then votes (__syncthreads_or) and one thread per block stores 1.0f to
//     found_inf when the vote is set. Racing stores all write the same value, so no atomic is
//     needed, and nothing ever writes 0: the flag accumulates across launches and calls until the
//     caller resets it. No thread leaves early, so the vote sees every thread.
//     With inv_scale == 1 the pass only checks: nothing is stored, so the elements keep their bits
//     (NaN payloads included) and the pass reads the memory once.
//   inv_scale and update_scale: one thread runs amp::inv_scale_of / amp::update_scale_state on the
//     device scalars, so the scaler's state never visits the host during a step.
//
// Invariants: element i of a tensor is read and written by one thread only; the found flag is
// monotone (0 -> 1).
#include "amp.cuh"
#include "device_util.cuh"

namespace ampctl::kernels {

// kernels

// Unscales one element in place (check only when inv == 1); ORs a non-finite into *found.
template <typename T>
static __device__ __forceinline__ void unscale_element(T* x, float inv, float* found) {
  const float r = amp::unscale_value(static_cast<float>(*x), inv, found);
  if (inv != 1.0f) *x = T(r);
}

template <typename T>
static __device__ __forceinline__ void unscale_lanes(Lanes<T>& l, float inv, float* found) {
  for (int k = 0; k < Lanes<T>::kCount; ++k) {
    l.v[k] = T(amp::unscale_value(static_cast<float>(l.v[k]), inv, found));
  }
}

// Registers for kUnscaleBlocksPerSm resident blocks of kBlockSize threads: at most 64 per thread.
constexpr unsigned kUnscaleBlocksPerSm = 4;

// 16-byte words in flight per thread: with kUnscaleBlocksPerSm blocks of kBlockSize threads that
// is 64 KiB per multiprocessor, about twice what HBM3e's bandwidth-latency product asks for.
constexpr unsigned kUnscaleUnroll = 4;

// Thread `tid` of `nthreads` takes its share of x[0, n): head and tail elements by index, body
// words by grid stride. Returns non-zero when it saw an inf or NaN.
template <typename T>
static __device__ float unscale_tensor(T* x, size_t n, size_t tid, size_t nthreads, float inv) {
  float found = 0.0f;
  const size_t head = elements_to_alignment(x, n);
  const size_t words = (n - head) / Lanes<T>::kCount;
  const size_t tail = head + words * Lanes<T>::kCount;
  if (tid < head) unscale_element(x + tid, inv, &found);
  if (tid < n - tail) unscale_element(x + tail + tid, inv, &found);
  T* body = x + head;
  size_t w = tid;
  for (; w + (kUnscaleUnroll - 1) * nthreads < words; w += kUnscaleUnroll * nthreads) {
    // Every load of the group is issued before any word is used.
    Lanes<T> l[kUnscaleUnroll];
    for (unsigned u = 0; u < kUnscaleUnroll; ++u) {
      l[u] = load_lanes(body + (w + u * nthreads) * Lanes<T>::kCount);
    }
    for (unsigned u = 0; u < kUnscaleUnroll; ++u) unscale_lanes(l[u], inv, &found);
    if (inv != 1.0f) {
      for (unsigned u = 0; u < kUnscaleUnroll; ++u) {
        store_lanes(body + (w + u * nthreads) * Lanes<T>::kCount, l[u]);
      }
    }
  }
  for (; w < words; w += nthreads) {
    Lanes<T> l = load_lanes(body + w * Lanes<T>::kCount);
    unscale_lanes(l, inv, &found);
    if (inv != 1.0f) store_lanes(body + w * Lanes<T>::kCount, l);
  }
  return found;
}

static __global__ void __launch_bounds__(kBlockSize, kUnscaleBlocksPerSm)
    non_finite_check_and_unscale_kernel(const TensorPack pack, float* found_inf,
                                        const float* inv_scale) {
  const float inv = *inv_scale;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nthreads = static_cast<size_t>(gridDim.x) * blockDim.x;
  float found = 0.0f;
  for (int t = 0; t < pack.count; ++t) {
    const TensorDesc& d = pack.tensors[t];
    float f = 0.0f;
    switch (d.type) {
      case ElemType::f32:
        f = unscale_tensor(static_cast<float*>(d.data), d.numel, tid, nthreads, inv);
        break;
      case ElemType::f16:
        f = unscale_tensor(static_cast<half*>(d.data), d.numel, tid, nthreads, inv);
        break;
      case ElemType::bf16:
        f = unscale_tensor(static_cast<bfloat16*>(d.data), d.numel, tid, nthreads, inv);
        break;
      case ElemType::i32:
        break;  // rejected by the launcher
    }
    if (f != 0.0f) found = 1.0f;
  }
  if (__syncthreads_or(found != 0.0f) && threadIdx.x == 0) *found_inf = 1.0f;
}

static __global__ void inv_scale_kernel(const float* scale, float* inv) {
  *inv = amp::inv_scale_of(*scale);
}

static __global__ void update_scale_kernel(float* scale, int32_t* growth_tracker,
                                           int32_t* hysteresis_tracker, const float* found_inf,
                                           const amp::ScaleUpdateParams params) {
  amp::update_scale_state(scale, growth_tracker, hysteresis_tracker, *found_inf, params);
}

// launchers

void launch_non_finite_check_and_unscale(const TensorPack& pack, float* found_inf,
                                         const float* inv_scale, cudaStream_t stream) {
  if (pack.count == 0 || pack.max_numel == 0) return;
  for (int t = 0; t < pack.count; ++t) {
    if (pack.tensors[t].type == ElemType::i32) {
      throw Error{ErrorKind::invalid_argument,
                  "non_finite_check_and_unscale_: tensor " + std::to_string(t) +
                      " of the pack is i32, expected a floating dtype"};
    }
  }
  // One thread per 16-byte word of the largest tensor (4 floats: the fewest elements per word).
  const unsigned blocks = resident_grid_size((pack.max_numel + 3) / 4, kUnscaleBlocksPerSm);
  non_finite_check_and_unscale_kernel<<<blocks, kBlockSize, 0, stream>>>(pack, found_inf,
                                                                         inv_scale);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_inv_scale(const float* scale, float* inv, cudaStream_t stream) {
  inv_scale_kernel<<<1, 1, 0, stream>>>(scale, inv);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                         const float* found_inf, const amp::ScaleUpdateParams& params,
                         cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, hysteresis_tracker, found_inf,
                                           params);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
