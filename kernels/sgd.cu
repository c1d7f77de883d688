// Fused SGD step: for each element, optim::sgd_update (the per-element math the CPU backend runs)
// on the f32 parameter and momentum buffer, with the gradient unscaled by inv_scale on the way in,
// and the f16/bf16 copy of the new parameter written in the same pass.
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
// Invariants: element i of params/buf/lowp is read and written by one thread only; step[0]
// changes only after the whole pass and only when the step was not skipped.
#include <type_traits>

#include "sgd.cuh"

namespace ampctl::kernels {

// kernels

struct NoLowp {};

template <typename L>
static __global__ void sgd_step_kernel(float* __restrict__ params, const float* __restrict__ grads,
                                       float* __restrict__ momentum_buf, const int32_t* step,
                                       const float* found_inf, const float* inv_scale,
                                       L* __restrict__ lowp, const optim::SgdHyper hyper,
                                       size_t n) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const bool first = *step == 0;
  const float inv = inv_scale != nullptr ? *inv_scale : 1.0f;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float p = params[i];
    float b = momentum_buf != nullptr ? momentum_buf[i] : 0.0f;
    optim::sgd_update(&p, grads[i], &b, inv, first, hyper);
    params[i] = p;
    if (momentum_buf != nullptr) momentum_buf[i] = b;
    if constexpr (!std::is_same_v<L, NoLowp>) lowp[i] = L(p);
  }
}

static __global__ void sgd_count_step_kernel(int32_t* step, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *step = *step + 1;
}

// launchers

namespace {

template <typename L>
void launch_update(const SgdStepPointers& p, size_t n, const optim::SgdHyper& hyper,
                   cudaStream_t stream) {
  sgd_step_kernel<L><<<grid_size(n), kBlockSize, 0, stream>>>(
      p.params, p.grads, p.momentum_buf, p.step, p.found_inf, p.inv_scale,
      static_cast<L*>(p.lowp_params), hyper, n);
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
    } else {
      throw Error{ErrorKind::invalid_argument,
                  "sgd_step: the low-precision copy must be f16 or bf16"};
    }
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
  sgd_count_step_kernel<<<1, 1, 0, stream>>>(p.step, p.found_inf);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
