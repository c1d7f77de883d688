// LayerNorm over the last dimension of x [R, C] with f32 gamma and beta, PyTorch's formulas in
// float32 (inputs widened exactly, outputs rounded once).
//
// Forward, one warp per row (8 rows per block), lanes striding over the columns:
//   mean = warp_sum(x) / C; var = warp_sum((x - mean)^2) / C (the biased variance of the centred
//   values, two passes rather than Welford so the CPU's plain loops compute the same quantities);
//   rstd = 1.0f / sqrtf(var + eps), IEEE division and square root (nvcc's defaults, no fast math),
//   so it is the CPU's rstd whenever var is; y = round(((x - mean) * rstd) * gamma + beta).
//   The per-element and per-row formulas here are nn_math.h's layer_norm_* functions, which the
//   CPU backend calls too; only the reductions are this file's.
//
// Residual add + LayerNorm forward (residual_layer_norm_forward), one warp per row as above:
//   s = x + r (f32 x, any float r; rounded once to f32, stored to sum) in the same pass as the
//   lanes' partial sums, the row then kept in shared memory (re-read from sum beyond C = 1536)
//   for the centred pass and y. The statistics and y are layer_norm_row, the very code the plain
//   forward runs, on the same floats in the same order: the fused op is bitwise add_ followed
//   by layer_norm_forward on this backend (tests/cuda checks it), while it reads x and r once and
//   writes sum once instead of copy + add_ + three reads of sum.
//
// Backward, PyTorch's CPU LayerNormBackward with a = rstd and scale = 1 / C:
//   ds = sum_c (dy * gamma) * x, db = sum_c dy * gamma      (warp_sum per row)
//   b = (db * mean - ds) * a * a * a * scale, c = -b * mean - db * a * scale
//   dx = a * dy * gamma + b * x + c         (left to right, as PyTorch's loop)
// and the parameter gradients dgamma[c] += sum_r dy * ((x - mean) * rstd), dbeta[c] += sum_r dy
// by column_chunk_sums (device_util.cuh): chunks of kRowsPerChunk rows in a fixed order, then the
// chunks in order, added once to the existing gradient. The column kernels run before the row
// kernel, so dx may overwrite dy. The accumulate form (layer_norm_backward_accumulate) adds the
// float dx to what dx holds in the row kernel's store, one rounding: bitwise a backward into an
// f32 buffer followed by add_ (dx then aliases no input).
//
// Every reduction order depends on the shape alone: the bits repeat run to run and GPU to GPU.
// Against the CPU the sums differ by float reassociation (a few ulps of the row's magnitudes).
//
// Invariants: no atomics; each output element has one writer; no host sync.
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "nn_layer_norm.cuh"

namespace ampctl::kernels {

// kernels

constexpr unsigned kLnRowsPerBlock = kBlockSize / 32;

// One row's forward statistics and output, shared by the plain and the residual kernel so that
// both run the very same float operations in the very same order (the fused op's bitwise
// promise): `value(j)` is the row's float element j, lanes stride over the columns.
template <class Value>
static __device__ __forceinline__ void layer_norm_row(Value value, const float* gamma,
                                                      const float* beta, void* y, ElemType y_type,
                                                      float* mean_out, float* rstd_out, float eps,
                                                      int64_t r, int64_t cols, int lane,
                                                      float sum) {
  const size_t base = static_cast<size_t>(r * cols);
  const float n = static_cast<float>(cols);
  const float mean = warp_sum(sum) / n;
  float sq = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float d = value(j) - mean;
    sq = sq + d * d;
  }
  const float var = warp_sum(sq) / n;
  const float rstd = nn::layer_norm_rstd(var, eps);
  for (int64_t j = lane; j < cols; j += 32) {
    store_float(y, y_type, base + j,
                nn::layer_norm_forward(value(j), mean, rstd, gamma[j], beta[j]));
  }
  if (lane == 0) {
    mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
}

static __global__ void __launch_bounds__(kBlockSize)
    layer_norm_forward_kernel(const void* x, ElemType x_type, const float* gamma, const float* beta,
                              void* y, ElemType y_type, float* mean_out, float* rstd_out, float eps,
                              int64_t rows, int64_t cols) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  auto value = [&](int64_t j) { return load_float(x, x_type, base + j); };
  float sum = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) sum = sum + value(j);
  layer_norm_row(value, gamma, beta, y, y_type, mean_out, rstd_out, eps, r, cols, lane, sum);
}

// Residual add + LayerNorm: s = x + r is formed, stored (f32) and summed in one pass, then kept
// in shared memory (row_in_shared: the block's 8 rows fit; else re-read from sum_out, which this
// thread itself wrote) for the statistics and y. x may be sum_out (in place): each element is
// read, then written, by one thread. s rounds as add_'s x + 1 * r does (exact product), and the
// statistics are layer_norm_row on those floats: bitwise add_ then layer_norm_forward.
static __global__ void __launch_bounds__(kBlockSize)
    residual_layer_norm_forward_kernel(const float* x, const void* res, ElemType res_type,
                                       float* sum_out, const float* gamma, const float* beta,
                                       void* y, ElemType y_type, float* mean_out, float* rstd_out,
                                       float eps, int64_t rows, int64_t cols, bool row_in_shared) {
  extern __shared__ float ln_rows[];
  const unsigned warp = threadIdx.x / 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRowsPerBlock + warp;
  if (r >= rows) return;  // the whole warp (the rows are the warps': no block barrier)
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  float* row = row_in_shared ? ln_rows + static_cast<size_t>(warp) * static_cast<size_t>(cols)
                             : sum_out + base;
  float sum = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float v = x[base + j] + load_float(res, res_type, base + j);
    sum_out[base + j] = v;
    if (row_in_shared) row[j] = v;
    sum = sum + v;
  }
  // Each lane reads back only the columns it wrote: no barrier needed.
  auto value = [&](int64_t j) { return row[j]; };
  layer_norm_row(value, gamma, beta, y, y_type, mean_out, rstd_out, eps, r, cols, lane, sum);
}

static __global__ void __launch_bounds__(kBlockSize)
    layer_norm_backward_rows_kernel(const void* x, ElemType x_type, const float* gamma,
                                    const float* mean_in, const float* rstd_in, const void* dy,
                                    ElemType dy_type, void* dx, ElemType dx_type, int64_t rows,
                                    int64_t cols, bool accumulate) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  const float mean = mean_in[r];
  const float a = rstd_in[r];
  const float scale = 1.0f / static_cast<float>(cols);

  float ds = 0.0f, db = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float dyg = load_float(dy, dy_type, base + j) * gamma[j];
    ds = ds + dyg * load_float(x, x_type, base + j);
    db = db + dyg;
  }
  ds = warp_sum(ds);
  db = warp_sum(db);
  const float b = nn::layer_norm_backward_b(ds, db, mean, a, scale);
  const float c = nn::layer_norm_backward_c(b, db, mean, a, scale);
  // Every lane has read its dy elements above (and the warp_sum orders the passes), so dx may
  // overwrite dy here.
  for (int64_t j = lane; j < cols; j += 32) {
    const float g = load_float(dy, dy_type, base + j);
    float v = nn::layer_norm_backward_dx(a, g, gamma[j], b, load_float(x, x_type, base + j), c);
    // The accumulate form: add_(dx, t) of the float gradient t (1 * t is exact), one rounding.
    if (accumulate) v = load_float(dx, dx_type, base + j) + v;
    store_float(dx, dx_type, base + j, v);
  }
}

// One block per (column tile, row chunk); `partials` ([chunks][2][cols]) is nullptr when there is
// one chunk, and then the block adds its sums to dgamma/dbeta itself.
static __global__ void __launch_bounds__(kColTile* kRowThreads)
    layer_norm_param_grads_kernel(const void* x, ElemType x_type, const float* mean,
                                  const float* rstd, const void* dy, ElemType dy_type,
                                  float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                                  float* partials) {
  float sums[2];
  column_chunk_sums<2>(
      [&](int64_t r, int64_t c, float(&v)[2]) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const float g = load_float(dy, dy_type, i);
        v[0] = g * nn::layer_norm_xhat(load_float(x, x_type, i), mean[r], rstd[r]);
        v[1] = g;
      },
      rows, cols, sums);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  if (threadIdx.y != 0 || c >= cols) return;
  if (partials == nullptr) {
    if (dgamma != nullptr) dgamma[c] = dgamma[c] + sums[0];
    if (dbeta != nullptr) dbeta[c] = dbeta[c] + sums[1];
  } else {
    partials[(2 * static_cast<int64_t>(blockIdx.y)) * cols + c] = sums[0];
    partials[(2 * static_cast<int64_t>(blockIdx.y) + 1) * cols + c] = sums[1];
  }
}

static __global__ void layer_norm_param_grads_finalize_kernel(const float* partials, int64_t chunks,
                                                              float* dgamma, float* dbeta,
                                                              int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float g = 0.0f, b = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    g = g + partials[(2 * k) * cols + c];
    b = b + partials[(2 * k + 1) * cols + c];
  }
  if (dgamma != nullptr) dgamma[c] = dgamma[c] + g;
  if (dbeta != nullptr) dbeta[c] = dbeta[c] + b;
}

// launchers

namespace {

void check_floating(ElemType t, const char* what) {
  if (t == ElemType::i32) {
    throw Error{ErrorKind::invalid_argument,
                std::string(what) + ": expected a floating dtype, got i32"};
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kLnRowsPerBlock - 1) / kLnRowsPerBlock);
}

}  // namespace

void launch_layer_norm_forward(const void* x, ElemType x_type, const float* gamma,
                               const float* beta, void* y, ElemType y_type, float* mean,
                               float* rstd, float eps, int64_t rows, int64_t cols,
                               cudaStream_t stream) {
  check_floating(x_type, "layer_norm_forward x");
  check_floating(y_type, "layer_norm_forward y");
  if (rows == 0) return;
  layer_norm_forward_kernel<<<row_blocks(rows), kBlockSize, 0, stream>>>(
      x, x_type, gamma, beta, y, y_type, mean, rstd, eps, rows, cols);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_residual_layer_norm_forward(const float* x, const void* r, ElemType r_type, float* sum,
                                        const float* gamma, const float* beta, void* y,
                                        ElemType y_type, float* mean, float* rstd, float eps,
                                        int64_t rows, int64_t cols, cudaStream_t stream) {
  check_floating(r_type, "residual_layer_norm_forward r");
  check_floating(y_type, "residual_layer_norm_forward y");
  if (rows == 0) return;
  // The block's rows in shared memory when they fit the default 48 KiB (C <= 1536: GPT-2 small
  // to large); wider rows are re-read from sum, where L1/L2 still hold them.
  const size_t shared =
      static_cast<size_t>(kLnRowsPerBlock) * static_cast<size_t>(cols) * sizeof(float);
  const bool in_shared = shared <= 48 * 1024;
  residual_layer_norm_forward_kernel<<<row_blocks(rows), kBlockSize, in_shared ? shared : 0,
                                       stream>>>(x, r, r_type, sum, gamma, beta, y, y_type, mean,
                                                 rstd, eps, rows, cols, in_shared);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

size_t layer_norm_backward_workspace_floats(int64_t rows, int64_t cols) {
  const int64_t chunks = column_chunks(rows);
  return chunks > 1 ? static_cast<size_t>(2 * chunks * cols) : 0;
}

void launch_layer_norm_backward(const void* x, ElemType x_type, const float* gamma,
                                const float* mean, const float* rstd, const void* dy,
                                ElemType dy_type, void* dx, ElemType dx_type, float* dgamma,
                                float* dbeta, int64_t rows, int64_t cols, float* workspace,
                                cudaStream_t stream, bool accumulate_dx) {
  check_floating(x_type, "layer_norm_backward x");
  check_floating(dy_type, "layer_norm_backward dy");
  check_floating(dx_type, "layer_norm_backward dx");
  if (rows == 0 || cols == 0) return;
  const int64_t chunks = column_chunks(rows);
  if (chunks > 65535) {
    throw Error{ErrorKind::invalid_argument,
                "layer_norm_backward: " + std::to_string(rows) + " rows exceed the " +
                    std::to_string(65535 * kRowsPerChunk) + " one launch reduces"};
  }
  // The parameter gradients read dy, so they go first: dx may overwrite it.
  if (dgamma != nullptr || dbeta != nullptr) {
    const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
                    static_cast<unsigned>(chunks));
    const dim3 block(kColTile, kRowThreads);
    layer_norm_param_grads_kernel<<<grid, block, 0, stream>>>(x, x_type, mean, rstd, dy, dy_type,
                                                              dgamma, dbeta, rows, cols,
                                                              chunks > 1 ? workspace : nullptr);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
    if (chunks > 1) {
      layer_norm_param_grads_finalize_kernel<<<
          static_cast<unsigned>((cols + kBlockSize - 1) / kBlockSize), kBlockSize, 0, stream>>>(
          workspace, chunks, dgamma, dbeta, cols);
      AMPCTL_CUDA_CHECK(cudaGetLastError());
    }
  }
  if (dx != nullptr) {
    layer_norm_backward_rows_kernel<<<row_blocks(rows), kBlockSize, 0, stream>>>(
        x, x_type, gamma, mean, rstd, dy, dy_type, dx, dx_type, rows, cols, accumulate_dx);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace ampctl::kernels
