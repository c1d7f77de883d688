// RMSNorm over the last dimension of x [R, C] with an f32 weight (Hugging Face's LlamaRMSNorm,
// and Qwen3's per-head q/k norm with C = head_dim), in float32: inputs widened exactly, outputs
// rounded once, the per-element and per-row formulas nn_math.h's rms_norm_* (the CPU backend calls
// the same functions); only the reductions are this file's.
//
// Forward, one warp per row (8 rows per block), lanes striding over the columns:
//   sumsq = warp_sum(x^2); rstd = 1.0f / sqrtf(sumsq / C + eps) (IEEE division and square root,
//   no rsqrtf, so it is the CPU's rstd whenever sumsq is); y = round(weight * round_x(x * rstd))
//   (HF's `.to(input_dtype)` before the weight multiplies).
// Residual add + RMSNorm, one warp per row as above: s = x + r (f32 x, any float r; rounded once
// to f32, stored to sum) in the same pass as the lanes' partial sums of squares, then the same
// row code on those floats: bitwise add_ followed by rms_norm_forward on this backend (the CUDA
// table test checks it).
// Backward, with a = rstd and g = round_x(dy * weight):
//   dot = warp_sum(g * x); b = -dot * a * a * a / C; dx = a * g + b * x    (one warp per row)
// and dweight[c] += sum_r dy * round_x(x * a) by column_chunk_sums (device_util.cuh): chunks of
// kRowsPerChunk rows in a fixed order, then the chunks in order, added once. The column kernel
// runs before the row kernel, so dx may overwrite dy. The accumulate form adds the float dx to
// what dx holds in the row kernel's store (one rounding).
//
// Every reduction order depends on the shape alone: the bits repeat run to run and GPU to GPU.
// Against the CPU (sequential sums) the sums differ by float reassociation.
//
// Invariants: no atomics; each output element has one writer; no host sync.
#include "ampctl/math/nn_math.h"
#include "device_util.cuh"
#include "nn_rms_norm.cuh"

namespace ampctl::kernels {

// kernels

constexpr unsigned kRmsRowsPerBlock = kBlockSize / 32;

// One row's rstd and output from the lanes' partial sums of squares, shared by the plain and the
// residual kernel (the fused op's bitwise promise): `value(j)` is the row's float element j.
template <class Value>
static __device__ __forceinline__ void rms_norm_row(Value value, int x_dtype, const float* weight,
                                                    void* y, ElemType y_type, float* rstd_out,
                                                    float eps, int64_t r, int64_t cols, int lane,
                                                    float sq) {
  const size_t base = static_cast<size_t>(r * cols);
  const float a = nn::rms_norm_rstd(warp_sum(sq), static_cast<float>(cols), eps);
  for (int64_t j = lane; j < cols; j += 32) {
    store_float(y, y_type, base + j, nn::rms_norm_forward(value(j), a, weight[j], x_dtype));
  }
  if (lane == 0) rstd_out[r] = a;
}

static __global__ void __launch_bounds__(kBlockSize)
    rms_norm_forward_kernel(const void* x, ElemType x_type, const float* weight, void* y,
                            ElemType y_type, float* rstd_out, float eps, int64_t rows,
                            int64_t cols) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRmsRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  auto value = [&](int64_t j) { return load_float(x, x_type, base + j); };
  float sq = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float v = value(j);
    sq = sq + v * v;
  }
  // Every lane reads its own columns again before writing them: y may be x.
  rms_norm_row(value, static_cast<int>(x_type), weight, y, y_type, rstd_out, eps, r, cols, lane,
               sq);
}

// s = x + r formed, stored (f32) and squared in one pass; the row code then re-reads the
// columns this lane wrote to sum (L1 holds them).
static __global__ void __launch_bounds__(kBlockSize)
    residual_rms_norm_forward_kernel(const float* x, const void* res, ElemType res_type,
                                     float* sum_out, const float* weight, void* y, ElemType y_type,
                                     float* rstd_out, float eps, int64_t rows, int64_t cols) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRmsRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  float sq = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float v = x[base + j] + load_float(res, res_type, base + j);
    sum_out[base + j] = v;
    sq = sq + v * v;
  }
  auto value = [&](int64_t j) { return sum_out[base + j]; };
  rms_norm_row(value, static_cast<int>(ElemType::f32), weight, y, y_type, rstd_out, eps, r, cols,
               lane, sq);
}

static __global__ void __launch_bounds__(kBlockSize)
    rms_norm_backward_rows_kernel(const void* x, ElemType x_type, const float* weight,
                                  const float* rstd_in, const void* dy, ElemType dy_type, void* dx,
                                  ElemType dx_type, float* dy_weight, int64_t rows, int64_t cols,
                                  bool accumulate) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRmsRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const size_t base = static_cast<size_t>(r * cols);
  const float a = rstd_in[r];
  const int x_dtype = static_cast<int>(x_type);
  const float scale = 1.0f / static_cast<float>(cols);
  float dot = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float d = load_float(dy, dy_type, base + j);
    if (dy_weight != nullptr) dy_weight[base + j] = d * weight[j];  // before round_x
    dot = dot + nn::rms_norm_grad_in(d, weight[j], x_dtype) * load_float(x, x_type, base + j);
  }
  if (dx == nullptr) return;
  const float b = nn::rms_norm_backward_b(warp_sum(dot), a, scale);
  // Every lane has read its dy elements above (and the warp_sum orders the passes), so dx may
  // overwrite dy here.
  for (int64_t j = lane; j < cols; j += 32) {
    const float g = nn::rms_norm_grad_in(load_float(dy, dy_type, base + j), weight[j], x_dtype);
    float v = nn::rms_norm_backward_dx(a, g, b, load_float(x, x_type, base + j));
    if (accumulate) v = load_float(dx, dx_type, base + j) + v;
    store_float(dx, dx_type, base + j, v);
  }
}

// One block per (column tile, row chunk); `partials` ([chunks][cols]) is nullptr when there is
// one chunk, and then the block adds its sums to dweight itself.
static __global__ void __launch_bounds__(kColTile* kRowThreads)
    rms_norm_weight_grad_kernel(const void* x, ElemType x_type, const float* rstd, const void* dy,
                                ElemType dy_type, float* dweight, int64_t rows, int64_t cols,
                                float* partials) {
  const int x_dtype = static_cast<int>(x_type);
  float sums[1];
  column_chunk_sums<1>(
      [&](int64_t r, int64_t c, float(&v)[1]) {
        const size_t i = static_cast<size_t>(r * cols + c);
        v[0] = load_float(dy, dy_type, i) *
               nn::round_through(x_dtype, load_float(x, x_type, i) * rstd[r]);
      },
      rows, cols, sums);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  if (threadIdx.y != 0 || c >= cols) return;
  if (partials == nullptr) {
    dweight[c] = dweight[c] + sums[0];
  } else {
    partials[static_cast<int64_t>(blockIdx.y) * cols + c] = sums[0];
  }
}

static __global__ void rms_norm_weight_grad_finalize_kernel(const float* partials, int64_t chunks,
                                                            float* dweight, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s = s + partials[k * cols + c];
  dweight[c] = dweight[c] + s;
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
  return static_cast<unsigned>((rows + kRmsRowsPerBlock - 1) / kRmsRowsPerBlock);
}

}  // namespace

void launch_rms_norm_forward(const void* x, ElemType x_type, const float* weight, void* y,
                             ElemType y_type, float* rstd, float eps, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  check_floating(x_type, "rms_norm_forward x");
  check_floating(y_type, "rms_norm_forward y");
  if (rows == 0) return;
  rms_norm_forward_kernel<<<row_blocks(rows), kBlockSize, 0, stream>>>(x, x_type, weight, y, y_type,
                                                                       rstd, eps, rows, cols);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_residual_rms_norm_forward(const float* x, const void* r, ElemType r_type, float* sum,
                                      const float* weight, void* y, ElemType y_type, float* rstd,
                                      float eps, int64_t rows, int64_t cols, cudaStream_t stream) {
  check_floating(r_type, "residual_rms_norm_forward r");
  check_floating(y_type, "residual_rms_norm_forward y");
  if (rows == 0) return;
  residual_rms_norm_forward_kernel<<<row_blocks(rows), kBlockSize, 0, stream>>>(
      x, r, r_type, sum, weight, y, y_type, rstd, eps, rows, cols);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

size_t rms_norm_backward_workspace_floats(int64_t rows, int64_t cols) {
  const int64_t chunks = column_chunks(rows);
  return chunks > 1 ? static_cast<size_t>(chunks * cols) : 0;
}

void launch_rms_norm_backward(const void* x, ElemType x_type, const float* weight,
                              const float* rstd, const void* dy, ElemType dy_type, void* dx,
                              ElemType dx_type, float* dweight, float* dy_weight, bool accumulate,
                              int64_t rows, int64_t cols, float* workspace, cudaStream_t stream) {
  check_floating(x_type, "rms_norm_backward x");
  check_floating(dy_type, "rms_norm_backward dy");
  check_floating(dx_type, "rms_norm_backward dx");
  if (rows == 0 || cols == 0) return;
  const int64_t chunks = column_chunks(rows);
  if (chunks > 65535) {
    throw Error{ErrorKind::invalid_argument,
                "rms_norm_backward: " + std::to_string(rows) + " rows exceed the " +
                    std::to_string(65535 * kRowsPerChunk) + " one launch reduces"};
  }
  // The weight gradient reads dy, so it goes first: dx may overwrite it.
  if (dweight != nullptr) {
    const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile),
                    static_cast<unsigned>(chunks));
    const dim3 block(kColTile, kRowThreads);
    rms_norm_weight_grad_kernel<<<grid, block, 0, stream>>>(
        x, x_type, rstd, dy, dy_type, dweight, rows, cols, chunks > 1 ? workspace : nullptr);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
    if (chunks > 1) {
      rms_norm_weight_grad_finalize_kernel<<<
          static_cast<unsigned>((cols + kBlockSize - 1) / kBlockSize), kBlockSize, 0, stream>>>(
          workspace, chunks, dweight, cols);
      AMPCTL_CUDA_CHECK(cudaGetLastError());
    }
  }
  if (dx != nullptr || dy_weight != nullptr) {
    rms_norm_backward_rows_kernel<<<row_blocks(rows), kBlockSize, 0, stream>>>(
        x, x_type, weight, rstd, dy, dy_type, dx, dx_type, dy_weight, rows, cols, accumulate);
    AMPCTL_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace ampctl::kernels
