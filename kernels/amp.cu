// The loss-scaling ops (docs/reference.md, "Scaler"). The per-element and per-step math is
// amp_math.h's, the same functions the CPU backend calls; these kernels only decide who runs it on
// which element.
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
//     Attribution (optional: which segments held an inf or NaN). When a thread's share of a
//     tensor held a non-finite value (never, on a clean step) it walks that share again after
//     the pass and, for each inf or NaN, finds its segment (the last one whose start is <= the
//     element's global index: its pack's base, plus the sizes of the tensors before it, plus its
//     index) by binary search over segment_starts and stores 1 there (racing stores write the
//     same value, as for found_inf). The second walk reads the values the pass left, which
//     classify exactly as the originals when 0 < inv_scale <= 1: inf and NaN stay so, and a
//     finite x gives |x * inv| <= |x|, rounded to at most |x| (already representable), so never
//     inf. That covers check-only passes (the trainer's fused path) and every unscale with a
//     scale >= 1. For inv_scale > 1 (a scale below 1: a finite x * inv may overflow) a separate
//     check-only launch before the pass (non_finite_check_attribute_kernel, which returns at once
//     otherwise) marks from the untouched originals. Marking inside the unscale loop instead
//     needs the original lanes live beside the unscaled ones: it spilled registers and cost a
//     third of the pass's bandwidth.
//   inv_scale and update_scale: one thread runs amp::inv_scale_of / amp::update_scale_policy on
//     the device scalars, so the scaler's state never visits the host during a step.
//   update_scale_auto: one block of kAutoThreads. Thread 0 writes the ring's new entry
//     (amp::auto_history_push), the block takes the ring's max (a tree of fmaxf: the entries are
//     floats >= 0, so any order gives amp::auto_history_max's value), and thread 0 runs
//     amp::update_scale_auto with it: amp::update_scale_auto_ring's steps, the max in parallel.
//
// Invariants: element i of a tensor is read and written by one thread only; the found flag is
// monotone (0 -> 1).
#include "amp.cuh"
#include "amp_global_norm.cuh"
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

// segment_found[s] := 1 for the segment s holding global element `element`: the last segment
// whose start is <= element (segment_starts[0] == 0, so there is one).
static __device__ void mark_segment(const SegmentAttribution& a, size_t element) {
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (static_cast<size_t>(a.starts[mid]) <= element) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  a.found[lo] = 1;
}

template <typename T>
static __device__ __forceinline__ void mark_if_nonfinite(T v, const SegmentAttribution& a,
                                                         size_t element) {
  if (!amp::is_finite_bits(static_cast<float>(v))) mark_segment(a, element);
}

// The rare path of attribution: walks thread `tid`'s share of x[0, n) (exactly the elements
// unscale_tensor gave it) and marks the segment of every inf or NaN; x[i] is global element
// base + i. Exact on the values left by a pass with 0 < inv <= 1 (see the top of this file).
template <typename T>
static __device__ __noinline__ void mark_tensor(const T* x, size_t n, size_t tid, size_t nthreads,
                                                const SegmentAttribution a, size_t base) {
  const size_t head = elements_to_alignment(x, n);
  const size_t words = (n - head) / Lanes<T>::kCount;
  const size_t tail = head + words * Lanes<T>::kCount;
  if (tid < head) mark_if_nonfinite(x[tid], a, base + tid);
  if (tid < n - tail) mark_if_nonfinite(x[tail + tid], a, base + tail + tid);
  for (size_t w = tid; w < words; w += nthreads) {
    const size_t first = head + w * Lanes<T>::kCount;
    for (int k = 0; k < Lanes<T>::kCount; ++k) {
      mark_if_nonfinite(x[first + k], a, base + first + k);
    }
  }
}

// One tensor of the pass: unscale (check only when inv == 1), then, when `mark` and something
// was non-finite, mark its segments.
template <typename T>
static __device__ float unscale_and_mark(const TensorDesc& d, size_t tid, size_t nthreads,
                                         float inv, bool mark, const SegmentAttribution& a,
                                         size_t base) {
  T* x = static_cast<T*>(d.data);
  const float f = unscale_tensor(x, d.numel, tid, nthreads, inv);
  if (mark && f != 0.0f) mark_tensor<T>(x, d.numel, tid, nthreads, a, base);
  return f;
}

// kAttribute: mark segments too. With inv_scale > 1 (or NaN) the pass only unscales:
// non_finite_check_attribute_kernel has marked from the originals before it.
template <bool kAttribute>
static __global__ void __launch_bounds__(kBlockSize, kUnscaleBlocksPerSm)
    non_finite_check_and_unscale_kernel(const TensorPack pack, float* found_inf,
                                        const float* inv_scale, const SegmentAttribution attr) {
  const float inv = *inv_scale;
  const bool mark = kAttribute && inv <= 1.0f;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nthreads = static_cast<size_t>(gridDim.x) * blockDim.x;
  float found = 0.0f;
  size_t base = attr.base;
  for (int t = 0; t < pack.count; ++t) {
    const TensorDesc& d = pack.tensors[t];
    float f = 0.0f;
    switch (d.type) {
      case ElemType::f32:
        f = unscale_and_mark<float>(d, tid, nthreads, inv, mark, attr, base);
        break;
      case ElemType::f16:
        f = unscale_and_mark<half>(d, tid, nthreads, inv, mark, attr, base);
        break;
      case ElemType::bf16:
        f = unscale_and_mark<bfloat16>(d, tid, nthreads, inv, mark, attr, base);
        break;
      case ElemType::i32:
        break;  // rejected by the launcher
    }
    if (f != 0.0f) found = 1.0f;
    base += d.numel;
  }
  if (__syncthreads_or(found != 0.0f) && threadIdx.x == 0) *found_inf = 1.0f;
}

// Attribution for a pass with inv_scale > 1 (or NaN), launched before it: a check-only pass that
// marks from the original values. Returns at once for 0 < inv_scale <= 1 (the pass marks).
static __global__ void __launch_bounds__(kBlockSize, kUnscaleBlocksPerSm)
    non_finite_check_attribute_kernel(const TensorPack pack, float* found_inf,
                                      const float* inv_scale, const SegmentAttribution attr) {
  if (*inv_scale <= 1.0f) return;  // uniform: every thread leaves, none waits below
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nthreads = static_cast<size_t>(gridDim.x) * blockDim.x;
  float found = 0.0f;
  size_t base = attr.base;
  for (int t = 0; t < pack.count; ++t) {
    const TensorDesc& d = pack.tensors[t];
    float f = 0.0f;
    switch (d.type) {
      case ElemType::f32:
        f = unscale_and_mark<float>(d, tid, nthreads, 1.0f, true, attr, base);
        break;
      case ElemType::f16:
        f = unscale_and_mark<half>(d, tid, nthreads, 1.0f, true, attr, base);
        break;
      case ElemType::bf16:
        f = unscale_and_mark<bfloat16>(d, tid, nthreads, 1.0f, true, attr, base);
        break;
      case ElemType::i32:
        break;  // rejected by the launcher
    }
    if (f != 0.0f) found = 1.0f;
    base += d.numel;
  }
  if (__syncthreads_or(found != 0.0f) && threadIdx.x == 0) *found_inf = 1.0f;
}

// The check pass with the norm (Backend::non_finite_check_unscale_norm_): amp_global_norm.cu's
// fixed geometry and order (kNormBlocks x kNormThreads, element i of a tensor on thread i mod
// (kNormBlocks * kNormThreads), each tensor's squares summed from 0 in double, the block's threads
// reduced by a fixed tree into partials[b]), so the norm is bitwise global_norm's of the values an
// unscale leaves; each element is also checked, and unscaled when `unscale`, in the same visit.
// Marking a segment happens inside the loop, from the original value (exact for any inv_scale):
// with one element per visit there is no vector of lanes to keep live, and a clean step never
// takes the branch.
template <typename T>
static __device__ double unscale_norm_tensor(T* x, size_t n, size_t first, size_t stride, float inv,
                                             bool write, float* found, const SegmentAttribution& a,
                                             size_t base) {
  double acc = 0.0;
  for (size_t i = first; i < n; i += stride) {
    float f = 0.0f;
    const T r = T(amp::unscale_value(static_cast<float>(x[i]), inv, &f));
    if (f != 0.0f) {
      *found = 1.0f;
      if (a.found != nullptr) mark_segment(a, base + i);
    }
    if (write) x[i] = r;
    const double v = static_cast<double>(static_cast<float>(r));
    acc = acc + v * v;
  }
  return acc;
}

static __global__ void __launch_bounds__(kNormThreads)
    unscale_norm_partials_kernel(const TensorPack pack, float* found_inf, const float* inv_scale,
                                 bool unscale, double* partials, bool accumulate,
                                 const SegmentAttribution attr) {
  __shared__ double shared[kNormThreads];
  const float inv = *inv_scale;
  const bool write = unscale && inv != 1.0f;
  const size_t first = static_cast<size_t>(blockIdx.x) * kNormThreads + threadIdx.x;
  const size_t stride = static_cast<size_t>(kNormBlocks) * kNormThreads;
  float found = 0.0f;
  double acc = 0.0;
  size_t base = attr.base;
  for (int t = 0; t < pack.count; ++t) {
    const TensorDesc& d = pack.tensors[t];
    switch (d.type) {
      case ElemType::f32:
        acc = acc + unscale_norm_tensor(static_cast<float*>(d.data), d.numel, first, stride, inv,
                                        write, &found, attr, base);
        break;
      case ElemType::f16:
        acc = acc + unscale_norm_tensor(static_cast<half*>(d.data), d.numel, first, stride, inv,
                                        write, &found, attr, base);
        break;
      case ElemType::bf16:
        acc = acc + unscale_norm_tensor(static_cast<bfloat16*>(d.data), d.numel, first, stride, inv,
                                        write, &found, attr, base);
        break;
      case ElemType::i32:
        break;  // rejected by the launcher
    }
    base += d.numel;
  }
  if (__syncthreads_or(found != 0.0f) && threadIdx.x == 0) *found_inf = 1.0f;
  shared[threadIdx.x] = acc;
  for (unsigned half_width = kNormThreads / 2; half_width > 0; half_width /= 2) {
    __syncthreads();
    if (threadIdx.x < half_width)
      shared[threadIdx.x] = shared[threadIdx.x] + shared[threadIdx.x + half_width];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = accumulate ? partials[blockIdx.x] + shared[0] : shared[0];
  }
}

static __global__ void inv_scale_kernel(const float* scale, float* inv) {
  *inv = amp::inv_scale_of(*scale);
}

static __global__ void update_scale_kernel(float* scale, int32_t* growth_tracker,
                                           int32_t* hysteresis_tracker, int32_t* trackers,
                                           const float* found_inf,
                                           const amp::ScaleUpdateParams params) {
  amp::update_scale_policy(scale, growth_tracker, hysteresis_tracker, trackers, *found_inf, params);
}

static constexpr int kAutoThreads = 256;

static __global__ void update_scale_auto_kernel(float* scale, int32_t* growth_tracker,
                                                int32_t* trackers, const float* found_inf,
                                                const float* amax, float* history,
                                                const amp::ScaleUpdateParams params) {
  __shared__ float shared[kAutoThreads];
  const bool found = *found_inf != 0.0f;
  if (threadIdx.x == 0) amp::auto_history_push(history, trackers, amax[0], *scale, found, params);
  __syncthreads();
  float m = 0.0f;
  for (int32_t i = threadIdx.x; i < params.amax_history; i += kAutoThreads)
    m = fmaxf(m, history[i]);
  shared[threadIdx.x] = m;
  for (unsigned half_width = kAutoThreads / 2; half_width > 0; half_width /= 2) {
    __syncthreads();
    if (threadIdx.x < half_width) {
      shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + half_width]);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    amp::update_scale_auto(scale, growth_tracker, trackers, found, shared[0], params);
  }
}

// launchers

void launch_non_finite_check_and_unscale(const TensorPack& pack, float* found_inf,
                                         const float* inv_scale, const SegmentAttribution& attr,
                                         cudaStream_t stream) {
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
  if ((attr.found == nullptr) != (attr.starts == nullptr) || (attr.found && attr.count < 1)) {
    throw Error{ErrorKind::invalid_argument,
                "non_finite_check_and_unscale_: segment attribution needs starts, found and a "
                "count >= 1"};
  }
  if (attr.found != nullptr) {
    non_finite_check_attribute_kernel<<<blocks, kBlockSize, 0, stream>>>(pack, found_inf, inv_scale,
                                                                         attr);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
    non_finite_check_and_unscale_kernel<true>
        <<<blocks, kBlockSize, 0, stream>>>(pack, found_inf, inv_scale, attr);
  } else {
    non_finite_check_and_unscale_kernel<false>
        <<<blocks, kBlockSize, 0, stream>>>(pack, found_inf, inv_scale, attr);
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_non_finite_check_unscale_norm_partials(const TensorPack& pack, float* found_inf,
                                                   const float* inv_scale, bool unscale,
                                                   double* partials, bool accumulate,
                                                   const SegmentAttribution& attr,
                                                   cudaStream_t stream) {
  for (int t = 0; t < pack.count; ++t) {
    if (pack.tensors[t].type == ElemType::i32) {
      throw Error{ErrorKind::invalid_argument,
                  "non_finite_check_unscale_norm_: tensor " + std::to_string(t) +
                      " of the pack is i32, expected a floating dtype"};
    }
  }
  if ((attr.found == nullptr) != (attr.starts == nullptr) || (attr.found && attr.count < 1)) {
    throw Error{ErrorKind::invalid_argument,
                "non_finite_check_unscale_norm_: segment attribution needs starts, found and a "
                "count >= 1"};
  }
  // Launched even for an empty pack: the partials must be written (zeroed) all the same.
  unscale_norm_partials_kernel<<<kNormBlocks, kNormThreads, 0, stream>>>(
      pack, found_inf, inv_scale, unscale, partials, accumulate, attr);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_inv_scale(const float* scale, float* inv, cudaStream_t stream) {
  inv_scale_kernel<<<1, 1, 0, stream>>>(scale, inv);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker,
                         int32_t* trackers, const float* found_inf,
                         const amp::ScaleUpdateParams& params, cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, hysteresis_tracker, trackers,
                                           found_inf, params);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_update_scale_auto(float* scale, int32_t* growth_tracker, int32_t* trackers,
                              const float* found_inf, const float* amax, float* history,
                              const amp::ScaleUpdateParams& params, cudaStream_t stream) {
  update_scale_auto_kernel<<<1, kAutoThreads, 0, stream>>>(scale, growth_tracker, trackers,
                                                           found_inf, amax, history, params);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
