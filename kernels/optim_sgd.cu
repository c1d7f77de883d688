// Fused SGD step: for each element, optim::sgd_update (the per-element math the CPU backend runs)
// on the f32 parameter and momentum buffer, with the gradient unscaled by inv_scale on the way in,
// and the low-precision (f16/bf16, or f32) copy of the new parameter written in the same pass.
//
// Skipping without a sync: every thread reads found_inf itself and returns before touching memory
// when it is non-zero, so a step with an inf/NaN gradient leaves params, buffer, lowp copy and
// step bitwise unchanged while the host never waits for the flag.
//
// The momentum buffer is initialised (buf = g) on the first real step, i.e. when step[0] == 0.
// Every thread reads step[0] in the update pass and the counter is incremented afterwards by a
// second, one-thread kernel on the same stream: incrementing it inside the pass would let late
// threads see the new value, and some elements would take the wrong branch.
//
// The pass is memory-bound: a resident grid (resident_grid_size) moves aligned groups of 4 elements
// with 16-byte loads and stores (4 elements of its dtype for the lowp copy), the same per-element
// math either way.
//
// Invariants: element i of params/buf/lowp is read and written by one thread only; step[0]
// changes only after the whole pass and only when the step was not skipped.
#include <type_traits>

#include "device_util.cuh"
#include "optim_sgd.cuh"

namespace ampctl::kernels {

// kernels

struct NoLowp {};

// Registers for kSgdBlocksPerSm resident blocks of kBlockSize threads: at most 32 per thread
// (the kernel needs 30), a full multiprocessor: 2048 threads from sm_80, 1024 on sm_75 (Turing),
// where 8 blocks of 256 would ask for more threads than an SM holds (ptxas refuses the bound).
// The host's grid size takes the 2048-thread figure: on a T4 that is two waves of the same
// grid-stride loop, with the same result.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr unsigned kSgdBlocksPerSm = 4;
#else
constexpr unsigned kSgdBlocksPerSm = 8;
#endif

template <typename L>
static __device__ __forceinline__ void sgd_element(float* params, const float* grads,
                                                   float* momentum_buf, L* lowp, size_t i,
                                                   float inv, bool first,
                                                   const optim::SgdHyper& hyper,
                                                   const float* decay_mask) {
  float p = params[i];
  float b = momentum_buf != nullptr ? momentum_buf[i] : 0.0f;
  optim::SgdHyper h = hyper;
  if (decay_mask != nullptr && decay_mask[i] == 0.0f) h.weight_decay = 0.0f;
  optim::sgd_update(&p, grads[i], &b, inv, first, h);
  params[i] = p;
  if (momentum_buf != nullptr) momentum_buf[i] = b;
  if constexpr (!std::is_same_v<L, NoLowp>) lowp[i] = L(p);
}

// `vectorised`: params, grads and momentum_buf are 16-byte aligned and lowp aligned to 4 of its
// elements, so
// groups of 4 elements move as float4 (and 4 halves as one 8-byte word); the last n % 4 elements
// go one by one. Either way each element gets the same optim::sgd_update.
template <typename L>
static __global__ void __launch_bounds__(kBlockSize, kSgdBlocksPerSm)
    sgd_step_kernel(float* params, const float* grads, float* momentum_buf, const int32_t* step,
                    const float* found_inf, const float* inv_scale, L* lowp,
                    const float* decay_mask, const optim::SgdHyper hyper, size_t n,
                    bool vectorised) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const bool first = *step == 0;
  const float inv = inv_scale != nullptr ? *inv_scale : 1.0f;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if (!vectorised) {
    for (size_t i = tid; i < n; i += stride) {
      sgd_element(params, grads, momentum_buf, lowp, i, inv, first, hyper, decay_mask);
    }
    return;
  }
  const size_t groups = n / 4;
  for (size_t w = tid; w < groups; w += stride) {
    const size_t i = 4 * w;
    Vec<float, 4> p = load_vec<4>(params + i);
    const Vec<float, 4> g = load_vec<4>(grads + i);
    Vec<float, 4> b{};
    if (momentum_buf != nullptr) b = load_vec<4>(momentum_buf + i);
    for (int k = 0; k < 4; ++k) {
      optim::SgdHyper h = hyper;
      if (decay_mask != nullptr && decay_mask[i + k] == 0.0f) h.weight_decay = 0.0f;
      optim::sgd_update(&p.v[k], g.v[k], &b.v[k], inv, first, h);
    }
    store_vec(params + i, p);
    if (momentum_buf != nullptr) store_vec(momentum_buf + i, b);
    if constexpr (!std::is_same_v<L, NoLowp>) {
      Vec<L, 4> l;
      for (int k = 0; k < 4; ++k) l.v[k] = L(p.v[k]);
      store_vec(lowp + i, l);
    }
  }
  if (tid < n - 4 * groups) {
    sgd_element(params, grads, momentum_buf, lowp, 4 * groups + tid, inv, first, hyper, decay_mask);
  }
}

static __global__ void sgd_count_step_kernel(int32_t* step, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *step = *step + 1;
}

// launchers

namespace {

bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <typename L>
void launch_update(const SgdStepPointers& p, size_t n, const optim::SgdHyper& hyper,
                   cudaStream_t stream) {
  const bool vectorised = aligned_to(p.params, 16) && aligned_to(p.grads, 16) &&
                          aligned_to(p.momentum_buf, 16) &&
                          aligned_to(p.lowp_params, 4 * sizeof(L));
  const unsigned blocks = resident_grid_size(vectorised ? (n + 3) / 4 : n, kSgdBlocksPerSm);
  sgd_step_kernel<L><<<blocks, kBlockSize, 0, stream>>>(
      p.params, p.grads, p.momentum_buf, p.step, p.found_inf, p.inv_scale,
      static_cast<L*>(p.lowp_params), p.decay_mask, hyper, n, vectorised);
}

}  // namespace

void launch_sgd_step(const SgdStepPointers& p, size_t n, const optim::SgdHyper& hyper,
                     cudaStream_t stream) {
  if (hyper.momentum != 0.0f && p.momentum_buf == nullptr) {
    throw Error{ErrorKind::invalid_argument, "sgd_step: momentum != 0 needs a momentum buffer"};
  }
  if (n > 0) {
    if (p.lowp_params == nullptr) {
      launch_update<NoLowp>(p, n, hyper, stream);
    } else if (p.lowp_type == ElemType::f16) {
      launch_update<half>(p, n, hyper, stream);
    } else if (p.lowp_type == ElemType::bf16) {
      launch_update<bfloat16>(p, n, hyper, stream);
    } else if (p.lowp_type == ElemType::f32) {
      launch_update<float>(p, n, hyper, stream);
    } else {
      throw Error{ErrorKind::invalid_argument,
                  "sgd_step: the low-precision copy must be f32, f16 or bf16"};
    }
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
  sgd_count_step_kernel<<<1, 1, 0, stream>>>(p.step, p.found_inf);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
