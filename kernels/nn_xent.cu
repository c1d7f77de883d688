// Softmax cross-entropy over logits [R, C] with integer labels, PyTorch's log_softmax + nll_loss
// (reduction 'mean') and their backward, all in float32 (logits widened exactly).
//
// Rows kernel: one warp per row (8 rows per block). Lanes stride over the columns; three passes
// over the row, which stays in L1/L2 between them:
//   1. max and first argmax: each lane keeps the first maximum of its columns (strict >), then the
//      warp combines (value, index) pairs, keeping the larger value and, on ties, the smaller
//      index;
//   2. sum of expf(x - max), reduced by warp_sum (a fixed xor butterfly); lse = logf(sum);
//   3. when dlogits is wanted: log_softmax_j = nn::xent_log_softmax(x_j, max, lse), i.e.
//      (x_j - max) - lse, and dlogits_j = round(nn::xent_grad(log_softmax_j, j == label, c)),
//      c = -grad_scale / R.
// dlogits may be the logits themselves (in place, as llm.c's fused classifier writes its
// gradient over the logits): each column is read and then written by one lane, and x_label, the
// one value a lane reads outside its own columns, is read before the gradient pass.
// Lane 0 stores the row's loss nn::xent_row_loss(log_softmax_label) = -((x_label - max) - lse)
// (the per-element formulas are nn_math.h's, the CPU backend's) and whether argmax == label into
// the workspace ([R] floats, then [R] i32). Labels are clamped into [0, C): the data loader has
// already validated them, and checking here would need a sync.
//
// Finalize kernel: one block sums the R row losses (each thread a strided share in row order, then
// block_tree_sum) and divides by R; the correct counts the same way in i32 (exact). Every order is
// fixed by the shape, so the loss repeats bit for bit; against the CPU's sequential sums it
// differs by float reassociation and by CUDA's expf/logf against libm's (an ulp or two each).
//
// Invariants: no atomics; each output element has one writer; no host sync.
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "nn_xent.cuh"

namespace ampctl::kernels {

// kernels

constexpr unsigned kXentRowsPerBlock = kBlockSize / 32;
constexpr unsigned kXentFinalizeThreads = 256;

// Whether (v, j) comes before (best, best_j) in torch.argmax's order: NaN first, then larger
// values, then smaller indices.
static __device__ __forceinline__ bool better_logit(float v, int64_t j, float best,
                                                    int64_t best_j) {
  const bool v_nan = v != v, best_nan = best != best;
  if (v_nan || best_nan) return v_nan && (!best_nan || j < best_j);
  return v > best || (v == best && j < best_j);
}

static __global__ void __launch_bounds__(kBlockSize)
    xent_rows_kernel(const XentPointers p, int64_t rows, int64_t cols, float* row_loss,
                     int32_t* row_correct) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kXentRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp: no shuffles are left hanging
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  auto logit = [&](int64_t j) { return load_float(p.logits, p.logits_type, base + j); };

  // argmax as torch.argmax: the first maximum, a NaN counting as larger than any number (so the
  // first NaN wins). Each lane scans its columns in order, then the warp combines the lanes.
  float best = 0.0f;
  int64_t best_j = cols;  // none yet
  for (int64_t j = lane; j < cols; j += 32) {
    const float v = logit(j);
    if (best_j == cols || better_logit(v, j, best, best_j)) {
      best = v;
      best_j = j;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int64_t other_j = __shfl_xor_sync(0xffffffffu, best_j, offset);
    if (other_j != cols && (best_j == cols || better_logit(other, other_j, best, best_j))) {
      best = other;
      best_j = other_j;
    }
  }
  // better_logit is a strict total order on (value, index) pairs, so every lane now holds the same
  // pair. Its value shifts the softmax, as the CPU's row[argmax] does (a NaN or inf there makes
  // the row's loss NaN, as in PyTorch).
  const float max = best;

  int32_t label = p.labels[r];
  label = label < 0 ? 0 : (label >= cols ? static_cast<int32_t>(cols - 1) : label);
  // Read before any lane writes a gradient: dlogits may be the logits (in place), and the
  // label's column belongs to another lane's share of the last pass.
  const float x_label = logit(label);

  float sum = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) sum = sum + expf(logit(j) - max);
  sum = warp_sum(sum);
  const float lse = logf(sum);

  if (p.dlogits != nullptr) {
    // Every lane's reads of other lanes' columns (x_label) are done: the warp meets here
    // (warp_sum's shuffles converged it; __syncwarp also orders the memory accesses).
    __syncwarp();
    const float c = -*p.grad_scale / static_cast<float>(rows);
    for (int64_t j = lane; j < cols; j += 32) {
      // Column j is read, then written, by this lane alone.
      const float log_softmax = nn::xent_log_softmax(logit(j), max, lse);
      store_float(p.dlogits, p.dlogits_type, base + j, nn::xent_grad(log_softmax, j == label, c));
    }
  }
  if (lane == 0) {
    row_loss[r] = nn::xent_row_loss(nn::xent_log_softmax(x_label, max, lse));
    row_correct[r] = best_j == label ? 1 : 0;
  }
}

static __global__ void __launch_bounds__(kXentFinalizeThreads)
    xent_finalize_kernel(const float* row_loss, const int32_t* row_correct, int64_t rows,
                         float* loss, int32_t* correct) {
  __shared__ float loss_sums[kXentFinalizeThreads];
  __shared__ int32_t correct_sums[kXentFinalizeThreads];
  float l = 0.0f;
  int32_t k = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kXentFinalizeThreads) {
    l = l + row_loss[r];
    k = k + row_correct[r];
  }
  loss_sums[threadIdx.x] = l;
  correct_sums[threadIdx.x] = k;
  block_tree_sum<kXentFinalizeThreads>(loss_sums);
  block_tree_sum<kXentFinalizeThreads>(correct_sums);
  if (threadIdx.x == 0) {
    *loss = loss_sums[0] / static_cast<float>(rows);
    if (correct != nullptr) *correct = correct_sums[0];
  }
}

// launchers

size_t xent_workspace_floats(int64_t rows) {
  return 2 * static_cast<size_t>(rows);  // row losses, then row_correct as i32 (same size)
}

void launch_softmax_cross_entropy(const XentPointers& p, int64_t rows, int64_t cols,
                                  float* workspace, cudaStream_t stream) {
  if (p.logits_type == ElemType::i32 || (p.dlogits != nullptr && p.dlogits_type == ElemType::i32)) {
    throw Error{ErrorKind::invalid_argument,
                "softmax_cross_entropy: logits and dlogits must be floating, got i32"};
  }
  if (cols <= 0) {
    throw Error{ErrorKind::invalid_argument, "softmax_cross_entropy: no classes (C = 0)"};
  }
  float* row_loss = workspace;
  int32_t* row_correct = reinterpret_cast<int32_t*>(workspace + rows);
  if (rows > 0) {
    const auto blocks = static_cast<unsigned>((rows + kXentRowsPerBlock - 1) / kXentRowsPerBlock);
    xent_rows_kernel<<<blocks, kBlockSize, 0, stream>>>(p, rows, cols, row_loss, row_correct);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
  // With R == 0 the mean is 0 / 0 = NaN, as PyTorch's mean of nothing.
  xent_finalize_kernel<<<1, kXentFinalizeThreads, 0, stream>>>(row_loss, row_correct, rows, p.loss,
                                                               p.correct);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
