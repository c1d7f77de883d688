// Launchers of kernels/transformer_attention.cu: fused causal self-attention
// (Backend::attention_forward / attention_backward on the CUDA backend) without a T x T matrix in
// memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel_common.cuh"

namespace ampctl::kernels {

// The largest head size the fused kernels take (their shared-memory tiles are sized for it);
// larger heads, and f32, go through the materialised composition instead.
constexpr int64_t kAttentionMaxHeadSize = 64;

// Whether the fused kernels take this shape and element type (f16 or bf16, 1 <= hs <= 64, and
// the grid fits).
bool attention_fused_supported(ElemType type, int64_t count, int64_t time, int64_t head_size);

// y[n, i, :] := sum_{j <= i} round(exp(s_ij - m_i)) v[n, j, :] / l_i (online softmax), lse[n*T +
// i] := m_i + log(l_i), with s_ij = round(round(q_i . k_j) * scale)
// (kernels/transformer_attention.cu). q, k, v, y: [count, time, head_size] of `type`; lse: f32
// [count * time]. group: G query heads per key/value head (grouped-query attention): k and v are
// [count / G, time, head_size] and query head n reads kv head n / G; 1 for multi-head.
// tensor_cores: the tile products on the tensor cores (WMMA), else in fp32 FMA loops.
void launch_attention_forward(bool tensor_cores, const void* q, const void* k, const void* v,
                              void* y, float* lse, ElemType type, float scale, int64_t count,
                              int64_t group, int64_t time, int64_t head_size, cudaStream_t stream);

// dq, dk, dv of the forward above from dy (same shape), its y and lse; dsum: f32 [count * time]
// scratch (the row dots dy . y). Written, not accumulated; deterministic (no atomics); dk and dv
// ([count / group, ...]) sum their G query heads in order.
void launch_attention_backward(bool tensor_cores, const void* q, const void* k, const void* v,
                               const void* y, const void* dy, const float* lse, float* dsum,
                               void* dq, void* dk, void* dv, ElemType type, float scale,
                               int64_t count, int64_t group, int64_t time, int64_t head_size,
                               cudaStream_t stream);

}  // namespace ampctl::kernels
