// Launchers of kernels/transformer_rope.cu: rotary position embedding in Hugging Face's
// rotate-half layout, forward and backward (Backend::rope_forward / rope_backward).
#pragma once

#include "kernel_common.cuh"

namespace ampctl::kernels {

// in, out [count, time, head_size] (head_size even, h = head_size / 2), tables cos, sin f32
// [P, h]; row t at position pos0 + t. Forward: out := the rotation of in (nn_math.h's
// rope_first / rope_second); inverse: out := the inverse rotation's gradient (rope_grad_first /
// rope_grad_second) with the branches rounded to `input_type` first. out may be in.
void launch_rope(bool inverse, const void* in, ElemType in_type, const float* cos, const float* sin,
                 void* out, ElemType out_type, int64_t count, int64_t time, int64_t head_size,
                 int64_t pos0, ElemType input_type, cudaStream_t stream);

}  // namespace ampctl::kernels
