// The CPU backend's optim family (backend.h, "optimizers"): the fused SGD and Adam updates
// (engine/cpu_vector.cpp's loops on the avx512 and avx2 paths, the scalar math/ reference
// otherwise).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/dtype_dispatch.h"
#include "ampctl/core/convert.h"
#include "cpu_backend.h"
#include "engine/cpu_parallel.h"
#include "engine/cpu_vector.h"

namespace ampctl::cpu {

namespace {

// The low-precision copy can be written in the optimizer's own pass when it is a float dtype
// (f32 included: a plain copy) and shares no byte with the buffers the pass reads or writes.
bool lowp_fusable(const Tensor& lowp, std::initializer_list<const Tensor*> others) {
  if (!lowp.defined()) return true;
  if (!is_floating(lowp.dtype())) return false;
  for (const Tensor* t : others) {
    if (overlaps(lowp, *t)) return false;
  }
  return true;
}

}  // namespace

void CpuBackend::optimizer_step(const OptimizerStepArgs& args) {
  check_optimizer_step(args, device());
  // Skipped: params, state buffers, step and the low-precision copy stay bitwise unchanged.
  if (args.found_inf.defined() && *args.found_inf.data_as<float>() != 0.0f) return;
  const float inv = args.inv_scale.defined() ? *args.inv_scale.data_as<float>() : 1.0f;
  if (const auto* sgd = std::get_if<optim::SgdHyper>(&args.hyper)) {
    sgd_pass(args, *sgd, inv);
  } else {
    adam_pass(args, std::get<optim::AdamHyper>(args.hyper), inv);
  }
  *args.step.data_as<int32_t>() += 1;
}

void CpuBackend::sgd_pass(const OptimizerStepArgs& args, const optim::SgdHyper& hyper, float inv) {
  const bool momentum = hyper.momentum != 0.0f;
  const bool first = *args.step.data_as<int32_t>() == 0;
  float* p = args.params.data_as<float>();
  const float* g = args.grads.data_as<float>();
  float* buf = momentum ? args.momentum_buf.data_as<float>() : nullptr;
  const size_t n = args.params.numel();
  if (args.decay_mask.defined()) {
    // decay_on: matrices: the masked-out elements take the update without weight decay.
    optim::SgdHyper plain = hyper;
    plain.weight_decay = 0.0f;
    const float* mask = args.decay_mask.data_as<float>();
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      float dummy = 0.0f;
      for (size_t i = b; i < e; ++i) {
        optim::sgd_update(&p[i], g[i], buf ? &buf[i] : &dummy, inv, first,
                          mask[i] != 0.0f ? hyper : plain);
      }
    });
    if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
    return;
  }
  if (m_packed && lowp_fusable(args.lowp_params, {&args.params, &args.grads, &args.momentum_buf})) {
    void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
    const DType lowp_dtype = args.lowp_params.defined() ? args.lowp_params.dtype() : DType::f32;
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      vec::sgd(b, e, p, g, buf, inv, first, hyper, lowp, lowp_dtype);
    });
    return;
  }
  parallel_for(*m_pool, n, [&](size_t b, size_t e) {
    float dummy = 0.0f;
    for (size_t i = b; i < e; ++i) {
      optim::sgd_update(&p[i], g[i], buf ? &buf[i] : &dummy, inv, first, hyper);
    }
  });
  if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
}

void CpuBackend::adam_pass(const OptimizerStepArgs& args, const optim::AdamHyper& hyper,
                           float inv) {
  // The constants of update step + 1, formed in double and rounded to float once, as PyTorch's
  // Python-side scalars are (math/adam_math.h).
  const optim::AdamStepConsts consts = optim::adam_consts(hyper, *args.step.data_as<int32_t>() + 1);
  float* p = args.params.data_as<float>();
  const float* g = args.grads.data_as<float>();
  float* m = args.exp_avg.data_as<float>();
  float* v = args.exp_avg_sq.data_as<float>();
  const size_t n = args.params.numel();
  if (args.decay_mask.defined()) {
    // decay_on: matrices: the masked-out elements take the constants of weight_decay = 0
    // (AdamW's factor 1 - lr * 0 is exactly 1: the same bits as no decay).
    optim::AdamHyper plain = hyper;
    plain.weight_decay = 0.0;
    const optim::AdamStepConsts plain_consts =
        optim::adam_consts(plain, *args.step.data_as<int32_t>() + 1);
    const float* mask = args.decay_mask.data_as<float>();
    if (m_packed && lowp_fusable(args.lowp_params, {&args.params, &args.grads, &args.exp_avg,
                                                    &args.exp_avg_sq, &args.decay_mask})) {
      // The same per-element choice of constants on 16 lanes, with the low-precision copy in
      // the same pass (cpu_vector.h).
      void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
      const DType lowp_dtype = args.lowp_params.defined() ? args.lowp_params.dtype() : DType::f32;
      parallel_for(*m_pool, n, [&](size_t b, size_t e) {
        vec::adam(b, e, p, g, m, v, inv, hyper.decoupled, hyper.maximize, consts, lowp, lowp_dtype,
                  mask, plain_consts.decay);
      });
      return;
    }
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        optim::adam_update(&p[i], g[i], &m[i], &v[i], inv, hyper.decoupled, hyper.maximize,
                           mask[i] != 0.0f ? consts : plain_consts);
      }
    });
    if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
    return;
  }
  if (m_packed && lowp_fusable(args.lowp_params,
                               {&args.params, &args.grads, &args.exp_avg, &args.exp_avg_sq})) {
    // One pass: the update and the rounded low-precision copy of each parameter.
    void* lowp = args.lowp_params.defined() ? args.lowp_params.data() : nullptr;
    const DType lowp_dtype = args.lowp_params.defined() ? args.lowp_params.dtype() : DType::f32;
    parallel_for(*m_pool, n, [&](size_t b, size_t e) {
      vec::adam(b, e, p, g, m, v, inv, hyper.decoupled, hyper.maximize, consts, lowp, lowp_dtype);
    });
    return;
  }
  parallel_for(*m_pool, n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      optim::adam_update(&p[i], g[i], &m[i], &v[i], inv, hyper.decoupled, hyper.maximize, consts);
    }
  });
  if (args.lowp_params.defined()) store_f32(p, args.lowp_params);
}

}  // namespace ampctl::cpu
