// Launchers of kernels/transformer.cu: the GPT's embedding, head layout and causal softmax
// kernels (backend.h, "transformer ops"; the batched products go to cuBLAS from the host).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernel_common.cuh"

namespace ampctl::kernels {

// out[r, c] := wte[clamp(tokens[r], 0, V - 1), c] + wpe[r % T, c] for r < rows (= B*T), c < C.
void launch_embedding_forward(const int32_t* tokens, const float* wte, int64_t vocab,
                              const float* wpe, float* out, int64_t rows, int64_t time,
                              int64_t channels, cudaStream_t stream);

// 32-bit words of workspace launch_embedding_backward needs for `rows` tokens over `vocab` ids
// (0 when vocab == 0: no token gradient).
size_t embedding_backward_workspace_words(int64_t rows, int64_t vocab);

// dwpe[t, c] += (0 + dout[t, c] + dout[T + t, c] + ...) over b ascending, for t < T; and, when
// dwte is not null, dwte[v, c] += (0 + dout[r0, c] + dout[r1, c] + ...) over the rows r0 < r1 <
// ... whose clamped token is v, for every v present (others untouched). The CPU's float order.
void launch_embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t vocab,
                               float* dwpe, int64_t batch, int64_t time, int64_t channels,
                               uint32_t* workspace, cudaStream_t stream);

// heads_from_rows (to_rows false): heads[b, h, t, d] := rows[b*T + t, column + h*hs + d];
// heads_to_rows (to_rows true): the inverse copy. Elements of elem_bytes (2 or 4) bytes.
void launch_heads_copy(bool to_rows, const void* src, void* dst, size_t elem_bytes, int64_t batch,
                       int64_t heads, int64_t time, int64_t head_size, int64_t width,
                       int64_t column, cudaStream_t stream);

// probs[n, i, j] := round(expf(s_j - max) / sum) for j <= i, 0 above the diagonal, with
// s_j = float(scores[n, i, j]) * scale (rounded to the scores' type when round_scaled); max and
// sum over j <= i in ascending j. probs may be scores (same type).
void launch_causal_softmax_forward(const void* scores, ElemType scores_type, float scale,
                                   bool round_scaled, void* probs, ElemType probs_type,
                                   int64_t count, int64_t time, cudaStream_t stream);

// dscores[n, i, j] := round(round?(p_j * (dp_j - dot)) * scale) for j <= i, 0 above, with
// dot = sum_{k <= i} dp_k * p_k in ascending k (round? to dscores' type when round_scaled).
void launch_causal_softmax_backward(const void* probs, ElemType probs_type, const void* dprobs,
                                    ElemType dprobs_type, float scale, bool round_scaled,
                                    void* dscores, ElemType dscores_type, int64_t count,
                                    int64_t time, cudaStream_t stream);

}  // namespace ampctl::kernels
