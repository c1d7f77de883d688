// Launchers of kernels/optim_adam.cu: the fused Adam / AdamW step over one flat f32 parameter buffer.
#pragma once

#include "ampctl/math/adam_math.h"
#include "kernel_common.cuh"

namespace ampctl::kernels {

struct AdamStepPointers {
  float* params;            // n elements, updated in place
  const float* grads;       // n elements
  float* exp_avg;           // n elements
  float* exp_avg_sq;        // n elements
  int32_t* step;            // one element: real steps so far; this update is step + 1
  const float* found_inf;   // one element or nullptr: non-zero skips the whole step
  const float* inv_scale;   // one element or nullptr (= 1)
  void* lowp_params;        // n elements of lowp_type, or nullptr
  ElemType lowp_type;       // f32, f16 or bf16 when lowp_params is set
  const float* decay_mask;  // n elements or nullptr: where 0, the update has weight_decay = 0
};

// One step: the update pass, then step[0] += 1 unless skipped. Both stay on `stream`.
void launch_adam_step(const AdamStepPointers& p, size_t n, const optim::AdamHyper& hyper,
                      cudaStream_t stream);

}  // namespace ampctl::kernels
