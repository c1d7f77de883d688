// Fused Adam / AdamW step: for each element, optim::adam_update (the per-element math the CPU
// backend runs) on the f32 parameter and both moments, with the gradient unscaled by inv_scale on
// the way in, and the low-precision (f16/bf16, or f32) copy of the new parameter written in the
// same pass.
//
// Step constants: every thread reads step[0] and forms optim::adam_consts(hyper, step + 1) itself,
// in double as the CPU does (bias corrections through pow), so no extra launch or buffer is
// needed and every element of the step uses the same float constants. The counter is incremented
// afterwards by a second, one-thread kernel on the same stream (as in optim_sgd.cu): incrementing it in
// the pass would let late threads see the new value.
//
// Skipping without a sync: every thread reads found_inf and returns before touching memory when
// it is non-zero, so a step with an inf/NaN gradient leaves params, moments, lowp copy and step
// bitwise unchanged while the host never waits for the flag.
//
// The pass is memory-bound (read p, g, m, v; write p, m, v and the lowp copy): a resident grid
// (resident_grid_size) moves aligned groups of 4 elements with 16-byte loads and stores (4
// elements of its dtype for the lowp copy); misaligned buffers take the element-by-element path.
// Same math either way.
//
// Invariants: element i of params/moments/lowp is read and written by one thread only; step[0]
// changes only after the whole pass and only when the step was not skipped.
#include <type_traits>

#include "optim_adam.cuh"
#include "device_util.cuh"

namespace ampctl::kernels {

// kernels

struct NoLowp {};

// Registers for kAdamBlocksPerSm resident blocks of kBlockSize threads: at most 64 per thread.
constexpr unsigned kAdamBlocksPerSm = 4;

template <typename L>
static __device__ __forceinline__ void adam_element(const AdamStepPointers& ptr, L* lowp, size_t i,
                                                    float inv, const optim::AdamHyper& h,
                                                    const optim::AdamStepConsts& c,
                                                    const optim::AdamStepConsts& plain) {
  float p = ptr.params[i], m = ptr.exp_avg[i], v = ptr.exp_avg_sq[i];
  const bool decay = ptr.decay_mask == nullptr || ptr.decay_mask[i] != 0.0f;
  optim::adam_update(&p, ptr.grads[i], &m, &v, inv, h.decoupled, h.maximize, decay ? c : plain);
  ptr.params[i] = p;
  ptr.exp_avg[i] = m;
  ptr.exp_avg_sq[i] = v;
  if constexpr (!std::is_same_v<L, NoLowp>) lowp[i] = L(p);
}

template <typename L>
static __global__ void __launch_bounds__(kBlockSize, kAdamBlocksPerSm)
    adam_step_kernel(const AdamStepPointers ptr, const optim::AdamHyper hyper, size_t n,
                     bool vectorised) {
  if (ptr.found_inf != nullptr && *ptr.found_inf != 0.0f) return;
  const optim::AdamStepConsts c = optim::adam_consts(hyper, *ptr.step + 1);
  // decay_on: matrices: the constants of the same update without weight decay.
  optim::AdamHyper no_decay = hyper;
  no_decay.weight_decay = 0.0;
  const optim::AdamStepConsts plain =
      ptr.decay_mask != nullptr ? optim::adam_consts(no_decay, *ptr.step + 1) : c;
  const float inv = ptr.inv_scale != nullptr ? *ptr.inv_scale : 1.0f;
  L* lowp = static_cast<L*>(ptr.lowp_params);
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if (!vectorised) {
    for (size_t i = tid; i < n; i += stride) adam_element(ptr, lowp, i, inv, hyper, c, plain);
    return;
  }
  const size_t groups = n / 4;
  for (size_t w = tid; w < groups; w += stride) {
    const size_t i = 4 * w;
    Vec<float, 4> p = load_vec<4>(ptr.params + i);
    const Vec<float, 4> g = load_vec<4>(ptr.grads + i);
    Vec<float, 4> m = load_vec<4>(ptr.exp_avg + i);
    Vec<float, 4> v = load_vec<4>(ptr.exp_avg_sq + i);
    for (int k = 0; k < 4; ++k) {
      const bool decay = ptr.decay_mask == nullptr || ptr.decay_mask[i + k] != 0.0f;
      optim::adam_update(&p.v[k], g.v[k], &m.v[k], &v.v[k], inv, hyper.decoupled, hyper.maximize,
                         decay ? c : plain);
    }
    store_vec(ptr.params + i, p);
    store_vec(ptr.exp_avg + i, m);
    store_vec(ptr.exp_avg_sq + i, v);
    if constexpr (!std::is_same_v<L, NoLowp>) {
      Vec<L, 4> l;
      for (int k = 0; k < 4; ++k) l.v[k] = L(p.v[k]);
      store_vec(lowp + i, l);
    }
  }
  if (tid < n - 4 * groups) adam_element(ptr, lowp, 4 * groups + tid, inv, hyper, c, plain);
}

static __global__ void adam_count_step_kernel(int32_t* step, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *step = *step + 1;
}

// launchers

namespace {

bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <typename L>
void launch_update(const AdamStepPointers& p, size_t n, const optim::AdamHyper& hyper,
                   cudaStream_t stream) {
  const bool vectorised = aligned_to(p.params, 16) && aligned_to(p.grads, 16) &&
                          aligned_to(p.exp_avg, 16) && aligned_to(p.exp_avg_sq, 16) &&
                          aligned_to(p.lowp_params, 4 * sizeof(L));
  const unsigned blocks = resident_grid_size(vectorised ? (n + 3) / 4 : n, kAdamBlocksPerSm);
  adam_step_kernel<L><<<blocks, kBlockSize, 0, stream>>>(p, hyper, n, vectorised);
}

}  // namespace

void launch_adam_step(const AdamStepPointers& p, size_t n, const optim::AdamHyper& hyper,
                      cudaStream_t stream) {
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
                  "adam_step: the low-precision copy must be f32, f16 or bf16"};
    }
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
  adam_count_step_kernel<<<1, 1, 0, stream>>>(p.step, p.found_inf);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
