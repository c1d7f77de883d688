// Launchers of kernels/optim_sgd.cu: the fused SGD step over one flat f32 parameter buffer.
#pragma once

#include "ampctl/math/sgd_math.h"
#include "kernel_common.cuh"

namespace ampctl::kernels {

struct SgdStepPointers {
  float* params;            // n elements, updated in place
  const float* grads;       // n elements
  float* momentum_buf;      // n elements; nullptr when hyper.momentum == 0
  int32_t* step;            // one element: real steps so far (0: initialise momentum)
  const float* found_inf;   // one element or nullptr: non-zero skips the whole step
  const float* inv_scale;   // one element or nullptr (= 1)
  void* lowp_params;        // n elements of lowp_type, or nullptr
  ElemType lowp_type;       // f32, f16 or bf16 when lowp_params is set
  const float* decay_mask;  // n elements or nullptr: where 0, the update has weight_decay = 0
};

// One step: the update pass, then step[0] += 1 unless skipped. Both stay on `stream`.
void launch_sgd_step(const SgdStepPointers& p, size_t n, const optim::SgdHyper& hyper,
                     cudaStream_t stream);

}  // namespace ampctl::kernels
