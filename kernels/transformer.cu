// The GPT's own kernels (backend.h, "transformer ops"), each giving the CPU backend's float
// operations in the CPU backend's order, so that the CPU-vs-GPU test can compare bitwise wherever
// no transcendental is involved.
//
//   * embedding forward: one grid-stride pass, out = wte[id] + wpe[t] (one float add).
//   * embedding backward, deterministic without float atomics or a host sync: a stable counting
//     sort of the rows by token on the device, then one plain float sum per (token, column) in
//     ascending row order, as the CPU sums:
//       1. rank: one 1024-thread block per chunk of 1024 rows; each thread counts the rows of its
//          chunk with its token before and after it (shared-memory broadcast reads): its rank in
//          the chunk, and the last one of each token writes the chunk's count to counts[chunk, v];
//       2. chunk offsets: one thread per token turns its column of counts into exclusive prefix
//          sums over the chunks (and the token's total);
//       3. start: one block scans the totals into start[v] (integers: exact in any order);
//       4. place: order[start[v] + offset[chunk, v] + rank] = r, so each token's rows are in
//          ascending r;
//       5. sum: blocks stride over the tokens, threads over the columns; s = 0, s += dout[r] over
//          the token's rows in order, dwte += s. Tokens absent from the batch are not touched.
//     dwpe: one thread per (t, column) sums over b ascending and adds once. Token ids are
//     clamped into [0, V) (the loader validated them; a check would need a sync). The workspace
//     holds rank, order, the [chunks, V] counts, start and the totals: 2 N + (chunks + 2) V + 1
//     words; integer atomics are not used either, so nothing depends on scheduling.
//   * heads copies: one grid-stride pass over the head layout, 2- or 4-byte words.
//   * causal softmax forward and backward: a block of 128 threads takes 128 consecutive rows of
//     the [N*T, T] scores. Phase 1, one thread per row, walks the row's unmasked prefix in
//     ascending j: the max and then the float sum of expf(s_j - max) (forward), or the float dot
//     sum_k dp_k * p_k (backward), exactly the CPU's sequential order, into shared memory. Phase 2,
//     after a barrier, the block writes its rows element by element (consecutive threads on
//     consecutive columns: coalesced), zeros above the diagonal. The backward then equals the CPU
//     bit for bit; the forward differs only by CUDA's expf against glibc's (<= 2 ulps each, so a
//     few float ulps of p before its rounding). Each thread reads an element before it writes the
//     same element, and phase 1 has read the block's rows before phase 2 writes, so probs may be
//     scores in place.
// Invariants: no allocation, no host sync, no float atomics; every output element has one writer.
#include "device_util.cuh"
#include "transformer.cuh"

namespace ampctl::kernels {

// kernels

constexpr int64_t kEmbedChunk = 1024;  // rows per rank block (= its threads)
constexpr unsigned kEmbedSumThreads = 128;
constexpr unsigned kSoftmaxRows = 128;  // rows per softmax block (= its threads)

static __device__ __forceinline__ int32_t clamp_id(int32_t id, int64_t vocab) {
  return id < 0 ? 0 : (id >= vocab ? static_cast<int32_t>(vocab - 1) : id);
}

static __global__ void embedding_forward_kernel(const int32_t* __restrict__ tokens,
                                                const float* __restrict__ wte, int64_t vocab,
                                                const float* __restrict__ wpe,
                                                float* __restrict__ out, int64_t time,
                                                int64_t channels, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / channels, c = i - r * channels;
    const int64_t id = clamp_id(tokens[r], vocab);
    out[i] = wte[id * channels + c] + wpe[(r % time) * channels + c];
  }
}

static __global__ void embedding_position_grad_kernel(const float* __restrict__ dout,
                                                      float* __restrict__ dwpe, int64_t batch,
                                                      int64_t time, int64_t channels) {
  const int64_t total = time * channels;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    float s = 0.0f;
    for (int64_t b = 0; b < batch; ++b) s = s + dout[b * total + i];
    dwpe[i] = dwpe[i] + s;
  }
}

static __global__ void embedding_rank_kernel(const int32_t* __restrict__ tokens, int64_t rows,
                                             int64_t vocab, uint32_t* __restrict__ rank,
                                             uint32_t* __restrict__ counts) {
  __shared__ int32_t ids[kEmbedChunk];
  const int64_t chunk = blockIdx.x;
  const int64_t r0 = chunk * kEmbedChunk;
  const int64_t n = rows - r0 < kEmbedChunk ? rows - r0 : kEmbedChunk;
  const int64_t q = threadIdx.x;
  const int32_t id = q < n ? clamp_id(tokens[r0 + q], vocab) : -1;
  ids[q] = id;
  __syncthreads();
  if (q >= n) return;
  uint32_t before = 0, after = 0;
  for (int64_t p = 0; p < n; ++p) {
    if (ids[p] == id) {
      before += p < q ? 1u : 0u;
      after += p > q ? 1u : 0u;
    }
  }
  rank[r0 + q] = before;
  if (after == 0) counts[chunk * vocab + id] = before + 1;
}

static __global__ void embedding_chunk_offsets_kernel(uint32_t* __restrict__ counts,
                                                      uint32_t* __restrict__ totals, int64_t chunks,
                                                      int64_t vocab) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vocab;
       v += stride) {
    uint32_t running = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const uint32_t n = counts[c * vocab + v];
      counts[c * vocab + v] = running;
      running += n;
    }
    totals[v] = running;
  }
}

constexpr unsigned kScanThreads = 1024;

// One block: start[v] = sum of totals[0 .. v), start[vocab] = the sum of all.
static __global__ void embedding_start_kernel(const uint32_t* __restrict__ totals,
                                              uint32_t* __restrict__ start, int64_t vocab) {
  __shared__ uint32_t partial[kScanThreads];
  const int64_t per = (vocab + kScanThreads - 1) / kScanThreads;
  const int64_t lo = threadIdx.x * per < vocab ? threadIdx.x * per : vocab;
  const int64_t hi = lo + per < vocab ? lo + per : vocab;
  uint32_t sum = 0;
  for (int64_t v = lo; v < hi; ++v) sum += totals[v];
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t running = 0;
    for (unsigned t = 0; t < kScanThreads; ++t) {
      const uint32_t n = partial[t];
      partial[t] = running;
      running += n;
    }
    start[vocab] = running;
  }
  __syncthreads();
  uint32_t running = partial[threadIdx.x];
  for (int64_t v = lo; v < hi; ++v) {
    start[v] = running;
    running += totals[v];
  }
}

static __global__ void embedding_place_kernel(const int32_t* __restrict__ tokens, int64_t rows,
                                              int64_t vocab, const uint32_t* __restrict__ rank,
                                              const uint32_t* __restrict__ offsets,
                                              const uint32_t* __restrict__ start,
                                              uint32_t* __restrict__ order) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride) {
    const int64_t v = clamp_id(tokens[r], vocab);
    const int64_t chunk = r / kEmbedChunk;
    order[start[v] + offsets[chunk * vocab + v] + rank[r]] = static_cast<uint32_t>(r);
  }
}

static __global__ void embedding_token_grad_kernel(const float* __restrict__ dout,
                                                   const uint32_t* __restrict__ order,
                                                   const uint32_t* __restrict__ start,
                                                   float* __restrict__ dwte, int64_t vocab,
                                                   int64_t channels) {
  for (int64_t v = blockIdx.x; v < vocab; v += gridDim.x) {
    const uint32_t b = start[v], e = start[v + 1];
    if (b == e) continue;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      float s = 0.0f;
      for (uint32_t i = b; i < e; ++i) s = s + dout[static_cast<int64_t>(order[i]) * channels + c];
      dwte[v * channels + c] = dwte[v * channels + c] + s;
    }
  }
}

template <typename W>
static __global__ void heads_copy_kernel(bool to_rows, const W* __restrict__ src,
                                         W* __restrict__ dst, int64_t heads, int64_t time,
                                         int64_t head_size, int64_t width, int64_t column,
                                         int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t d = i % head_size;
    const int64_t t = (i / head_size) % time;
    const int64_t h = (i / (head_size * time)) % heads;
    const int64_t b = i / (head_size * time * heads);
    const int64_t row = (b * time + t) * width + column + h * head_size + d;
    if (to_rows) {
      dst[row] = src[i];
    } else {
      dst[i] = src[row];
    }
  }
}

// v rounded once to type t and widened back (the identity for f32).
static __device__ __forceinline__ float round_as(ElemType t, float v) {
  switch (t) {
    case ElemType::f16:
      return static_cast<float>(half(v));
    case ElemType::bf16:
      return static_cast<float>(bfloat16(v));
    default:
      return v;
  }
}

static __device__ __forceinline__ float scaled_score(const void* x, ElemType t, size_t i,
                                                     float scale, bool round_scaled) {
  const float s = load_float(x, t, i) * scale;
  return round_scaled ? round_as(t, s) : s;
}

// No __restrict__: probs may be scores.
static __global__ void causal_softmax_forward_kernel(const void* x, ElemType x_type, float scale,
                                                     bool round_scaled, void* y, ElemType y_type,
                                                     int64_t rows, int64_t time) {
  __shared__ float row_max[kSoftmaxRows], row_sum[kSoftmaxRows];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kSoftmaxRows;
  const int64_t r = r0 + threadIdx.x;
  if (r < rows) {
    const int64_t i = r % time;
    const size_t base = static_cast<size_t>(r * time);
    float mx = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      const float s = scaled_score(x, x_type, base + j, scale, round_scaled);
      mx = s > mx ? s : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= i; ++j) {
      sum = sum + expf(scaled_score(x, x_type, base + j, scale, round_scaled) - mx);
    }
    row_max[threadIdx.x] = mx;
    row_sum[threadIdx.x] = sum;
  }
  __syncthreads();
  const int64_t n = rows - r0 < static_cast<int64_t>(kSoftmaxRows) ? rows - r0 : kSoftmaxRows;
  for (int64_t k = threadIdx.x; k < n * time; k += kSoftmaxRows) {
    const int64_t lr = k / time, j = k - lr * time;
    const int64_t row = r0 + lr;
    const size_t idx = static_cast<size_t>(row * time + j);
    float p = 0.0f;
    if (j <= row % time) {
      p = expf(scaled_score(x, x_type, idx, scale, round_scaled) - row_max[lr]) / row_sum[lr];
    }
    store_float(y, y_type, idx, p);
  }
}

static __global__ void causal_softmax_backward_kernel(const void* __restrict__ p, ElemType p_type,
                                                      const void* __restrict__ g, ElemType g_type,
                                                      float scale, bool round_scaled,
                                                      void* __restrict__ out, ElemType out_type,
                                                      int64_t rows, int64_t time) {
  __shared__ float row_dot[kSoftmaxRows];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kSoftmaxRows;
  const int64_t r = r0 + threadIdx.x;
  if (r < rows) {
    const int64_t i = r % time;
    const size_t base = static_cast<size_t>(r * time);
    float dot = 0.0f;
    for (int64_t k = 0; k <= i; ++k) {
      dot = dot + load_float(g, g_type, base + k) * load_float(p, p_type, base + k);
    }
    row_dot[threadIdx.x] = dot;
  }
  __syncthreads();
  const int64_t n = rows - r0 < static_cast<int64_t>(kSoftmaxRows) ? rows - r0 : kSoftmaxRows;
  for (int64_t k = threadIdx.x; k < n * time; k += kSoftmaxRows) {
    const int64_t lr = k / time, j = k - lr * time;
    const int64_t row = r0 + lr;
    const size_t idx = static_cast<size_t>(row * time + j);
    float v = 0.0f;
    if (j <= row % time) {
      v = load_float(p, p_type, idx) * (load_float(g, g_type, idx) - row_dot[lr]);
      if (round_scaled) v = round_as(out_type, v);
      v = v * scale;
    }
    store_float(out, out_type, idx, v);
  }
}

// launchers

namespace {

void check_floating(ElemType t, const char* what) {
  if (t == ElemType::i32) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": expected a floating dtype, got i32"};
  }
}

int64_t embed_chunks(int64_t rows) {
  return (rows + kEmbedChunk - 1) / kEmbedChunk;
}

unsigned blocks_for(int64_t items, unsigned threads) {
  const int64_t b = (items + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

}  // namespace

void launch_embedding_forward(const int32_t* tokens, const float* wte, int64_t vocab,
                              const float* wpe, float* out, int64_t rows, int64_t time,
                              int64_t channels, cudaStream_t stream) {
  const int64_t total = rows * channels;
  if (total == 0 || vocab == 0) return;
  embedding_forward_kernel<<<grid_size(static_cast<size_t>(total)), kBlockSize, 0, stream>>>(
      tokens, wte, vocab, wpe, out, time, channels, total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

size_t embedding_backward_workspace_words(int64_t rows, int64_t vocab) {
  if (vocab == 0 || rows == 0) return 0;
  return static_cast<size_t>(2 * rows + (embed_chunks(rows) + 2) * vocab + 1);
}

void launch_embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t vocab,
                               float* dwpe, int64_t batch, int64_t time, int64_t channels,
                               uint32_t* workspace, cudaStream_t stream) {
  const int64_t rows = batch * time;
  if (rows == 0 || channels == 0) return;
  embedding_position_grad_kernel<<<grid_size(static_cast<size_t>(time * channels)), kBlockSize, 0,
                                   stream>>>(dout, dwpe, batch, time, channels);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  if (dwte == nullptr || vocab == 0) return;
  const int64_t chunks = embed_chunks(rows);
  uint32_t* rank = workspace;
  uint32_t* order = rank + rows;
  uint32_t* counts = order + rows;  // [chunks, vocab], then the chunk offsets
  uint32_t* totals = counts + chunks * vocab;
  uint32_t* start = totals + vocab;  // vocab + 1
  AMPCTL_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(chunks * vocab) * 4, stream));
  embedding_rank_kernel<<<static_cast<unsigned>(chunks), static_cast<unsigned>(kEmbedChunk), 0,
                          stream>>>(tokens, rows, vocab, rank, counts);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  embedding_chunk_offsets_kernel<<<grid_size(static_cast<size_t>(vocab)), kBlockSize, 0, stream>>>(
      counts, totals, chunks, vocab);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  embedding_start_kernel<<<1, kScanThreads, 0, stream>>>(totals, start, vocab);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  embedding_place_kernel<<<grid_size(static_cast<size_t>(rows)), kBlockSize, 0, stream>>>(
      tokens, rows, vocab, rank, counts, start, order);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
  const unsigned sum_blocks =
      static_cast<unsigned>(vocab < static_cast<int64_t>(kMaxGridSize) ? vocab : kMaxGridSize);
  embedding_token_grad_kernel<<<sum_blocks, kEmbedSumThreads, 0, stream>>>(dout, order, start, dwte,
                                                                           vocab, channels);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_heads_copy(bool to_rows, const void* src, void* dst, size_t elem_bytes, int64_t batch,
                       int64_t heads, int64_t time, int64_t head_size, int64_t width,
                       int64_t column, cudaStream_t stream) {
  const int64_t total = batch * heads * time * head_size;
  if (total == 0) return;
  const unsigned grid = grid_size(static_cast<size_t>(total));
  if (elem_bytes == 4) {
    heads_copy_kernel<uint32_t><<<grid, kBlockSize, 0, stream>>>(
        to_rows, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), heads, time,
        head_size, width, column, total);
  } else if (elem_bytes == 2) {
    heads_copy_kernel<uint16_t><<<grid, kBlockSize, 0, stream>>>(
        to_rows, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), heads, time,
        head_size, width, column, total);
  } else {
    throw Error{ErrorKind::invalid_argument,
                "heads copy: elements of " + std::to_string(elem_bytes) + " bytes"};
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_causal_softmax_forward(const void* scores, ElemType scores_type, float scale,
                                   bool round_scaled, void* probs, ElemType probs_type,
                                   int64_t count, int64_t time, cudaStream_t stream) {
  check_floating(scores_type, "causal_softmax_forward scores");
  check_floating(probs_type, "causal_softmax_forward probs");
  const int64_t rows = count * time;
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<blocks_for(rows, kSoftmaxRows), kSoftmaxRows, 0, stream>>>(
      scores, scores_type, scale, round_scaled, probs, probs_type, rows, time);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_causal_softmax_backward(const void* probs, ElemType probs_type, const void* dprobs,
                                    ElemType dprobs_type, float scale, bool round_scaled,
                                    void* dscores, ElemType dscores_type, int64_t count,
                                    int64_t time, cudaStream_t stream) {
  check_floating(probs_type, "causal_softmax_backward probs");
  check_floating(dprobs_type, "causal_softmax_backward dprobs");
  check_floating(dscores_type, "causal_softmax_backward dscores");
  const int64_t rows = count * time;
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<blocks_for(rows, kSoftmaxRows), kSoftmaxRows, 0, stream>>>(
      probs, probs_type, dprobs, dprobs_type, scale, round_scaled, dscores, dscores_type, rows,
      time);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
