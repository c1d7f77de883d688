// The convolution primitives, pooling and BatchNorm2d on the GPU (conv.cuh). One thread per
// output element for the gathers (im2col, col2im, pooling): each output is one sequential float
// sum in the CPU backend's order, so these give the CPU's bits. BatchNorm uses one block per
// channel: each thread sums whole planes in order, the plane sums are added by a fixed tree
// (block_tree_sum), so the statistics differ from the CPU's sequential sum by reassociation only.
// The per-element math is math/conv_math.h's, shared with the CPU backend.
//
// Invariants: no atomics; each output element has one writer; no host sync.
#include "ampctl/math/conv_math.h"
#include "conv.cuh"
#include "device_util.cuh"

namespace ampctl::kernels {
namespace {

template <typename T>
__global__ void im2col_kernel(const T* x, T* col, ConvShape s, int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  // t = ((c * kh + i) * kw + j) * OH * OW + oy * OW + ox
  const int64_t ox = t % s.ow, oy = (t / s.ow) % s.oh, r = t / (s.ow * s.oh);
  const int64_t j = r % s.kw, i = (r / s.kw) % s.kh, c = r / (s.kw * s.kh);
  const int64_t ih = oy * s.sh - s.ph + i, iw = ox * s.sw - s.pw + j;
  col[t] = (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) ? T{} : x[(c * s.h + ih) * s.w + iw];
}

__global__ void col2im_kernel(const float* col, void* x, ElemType x_type, ConvShape s,
                              int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const int64_t iw = t % s.w, ih = (t / s.w) % s.h, c = t / (s.w * s.h);
  float sum = 0.0f;
  for (int64_t i = 0; i < s.kh; ++i) {
    const int64_t ny = ih + s.ph - i;
    if (ny < 0 || ny % s.sh != 0 || ny / s.sh >= s.oh) continue;
    for (int64_t j = 0; j < s.kw; ++j) {
      const int64_t nx = iw + s.pw - j;
      if (nx < 0 || nx % s.sw != 0 || nx / s.sw >= s.ow) continue;
      sum = sum + col[((c * s.kh + i) * s.kw + j) * s.oh * s.ow + (ny / s.sh) * s.ow + nx / s.sw];
    }
  }
  store_float(x, x_type, static_cast<size_t>(t), sum);
}

__global__ void broadcast_channels_kernel(const void* b, ElemType b_type, void* y, ElemType y_type,
                                          int64_t c, int64_t p, int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  store_float(y, y_type, static_cast<size_t>(t),
              load_float(b, b_type, static_cast<size_t>((t / p) % c)));
}

__global__ void channel_sum_kernel(const void* x, ElemType x_type, void* out, ElemType out_type,
                                   int64_t n, int64_t c, int64_t p) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < p; ++k)
      s = s + load_float(x, x_type, static_cast<size_t>((i * c + ch) * p + k));
  store_float(out, out_type, static_cast<size_t>(ch), s);
}

__device__ nn::PoolWindow window_h(int64_t a, const ConvShape& s) {
  return nn::pool_window(a, s.h, s.oh, s.kh, s.sh, s.ph, s.adaptive);
}
__device__ nn::PoolWindow window_w(int64_t b, const ConvShape& s) {
  return nn::pool_window(b, s.w, s.ow, s.kw, s.sw, s.pw, s.adaptive);
}

__global__ void max_pool_forward_kernel(const void* x, void* y, ElemType type, int32_t* indices,
                                        ConvShape s, int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const int64_t b = t % s.ow, a = (t / s.ow) % s.oh, pl = t / (s.ow * s.oh);
  const nn::PoolWindow wh = window_h(a, s), ww = window_w(b, s);
  float best = -INFINITY;
  int64_t arg = wh.start * s.w + ww.start;
  for (int64_t r = wh.start; r < wh.end; ++r)
    for (int64_t q = ww.start; q < ww.end; ++q) {
      const float v = load_float(x, type, static_cast<size_t>(pl * s.h * s.w + r * s.w + q));
      if (v > best || isnan(v)) {
        best = v;
        arg = r * s.w + q;
      }
    }
  store_float(y, type, static_cast<size_t>(t), best);
  indices[t] = static_cast<int32_t>(arg);
}

// Gathers, per input, the dy of the windows whose maximum it is, in output order (the CPU's
// scatter order).
__global__ void max_pool_backward_kernel(const void* dy, ElemType dy_type, const int32_t* indices,
                                         void* dx, ElemType dx_type, ConvShape s, int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const int64_t q = t % s.w, r = (t / s.w) % s.h, pl = t / (s.w * s.h);
  const int64_t self = r * s.w + q;
  float sum = 0.0f;
  for (int64_t a = 0; a < s.oh; ++a) {
    const nn::PoolWindow wh = window_h(a, s);
    if (r < wh.start || r >= wh.end) continue;
    for (int64_t b = 0; b < s.ow; ++b) {
      const nn::PoolWindow ww = window_w(b, s);
      if (q < ww.start || q >= ww.end) continue;
      const size_t o = static_cast<size_t>((pl * s.oh + a) * s.ow + b);
      if (indices[o] == self) sum = sum + load_float(dy, dy_type, o);
    }
  }
  store_float(dx, dx_type, static_cast<size_t>(t), sum);
}

__global__ void avg_pool_forward_kernel(const void* x, ElemType x_type, void* y, ElemType y_type,
                                        ConvShape s, int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const int64_t b = t % s.ow, a = (t / s.ow) % s.oh, pl = t / (s.ow * s.oh);
  const nn::PoolWindow wh = window_h(a, s), ww = window_w(b, s);
  float sum = 0.0f;
  for (int64_t r = wh.start; r < wh.end; ++r)
    for (int64_t q = ww.start; q < ww.end; ++q)
      sum = sum + load_float(x, x_type, static_cast<size_t>(pl * s.h * s.w + r * s.w + q));
  store_float(y, y_type, static_cast<size_t>(t), sum / static_cast<float>(wh.count * ww.count));
}

__global__ void avg_pool_backward_kernel(const void* dy, ElemType dy_type, void* dx,
                                         ElemType dx_type, ConvShape s, int64_t total) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const int64_t q = t % s.w, r = (t / s.w) % s.h, pl = t / (s.w * s.h);
  float sum = 0.0f;
  for (int64_t a = 0; a < s.oh; ++a) {
    const nn::PoolWindow wh = window_h(a, s);
    if (r < wh.start || r >= wh.end) continue;
    for (int64_t b = 0; b < s.ow; ++b) {
      const nn::PoolWindow ww = window_w(b, s);
      if (q < ww.start || q >= ww.end) continue;
      const size_t o = static_cast<size_t>((pl * s.oh + a) * s.ow + b);
      sum = sum + load_float(dy, dy_type, o) / static_cast<float>(wh.count * ww.count);
    }
  }
  store_float(dx, dx_type, static_cast<size_t>(t), sum);
}

// Sums f(i, k) over the channel's planes: each thread whole planes in order, then the block's
// partial sums by a fixed tree. Every thread of the block must call it; all get the total.
template <typename F>
__device__ float channel_total(int64_t n, int64_t p, const F& f) {
  __shared__ float shared[kBlockSize];
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float ps = 0.0f;
    for (int64_t k = 0; k < p; ++k) ps = ps + f(i, k);
    acc = acc + ps;
  }
  shared[threadIdx.x] = acc;
  block_tree_sum<kBlockSize>(shared);
  const float total = shared[0];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kBlockSize)
    batch_norm_forward_kernel(const void* x, ElemType x_type, const float* gamma, const float* beta,
                              void* y, ElemType y_type, float* save_mean, float* save_invstd,
                              float* running_mean, float* running_var, int32_t* num_batches_tracked,
                              bool training, float momentum, float eps, int64_t n, int64_t c,
                              int64_t p) {
  const int64_t ch = blockIdx.x;
  auto at = [&](int64_t i, int64_t k) { return static_cast<size_t>((i * c + ch) * p + k); };
  float mean, invstd;
  const float m = static_cast<float>(n * p);
  if (training) {
    mean =
        channel_total(n, p, [&](int64_t i, int64_t k) { return load_float(x, x_type, at(i, k)); }) /
        m;
    const float q = channel_total(n, p, [&](int64_t i, int64_t k) {
      const float d = load_float(x, x_type, at(i, k)) - mean;
      return d * d;
    });
    invstd = nn::batch_norm_invstd(q / m, eps);
    if (threadIdx.x == 0) {
      running_mean[ch] = nn::batch_norm_running(running_mean[ch], mean, momentum);
      running_var[ch] = nn::batch_norm_running(running_var[ch], q / (m - 1.0f), momentum);
      if (ch == 0 && num_batches_tracked) num_batches_tracked[0] = num_batches_tracked[0] + 1;
    }
  } else {
    mean = running_mean[ch];
    invstd = nn::batch_norm_invstd(running_var[ch], eps);
  }
  if (threadIdx.x == 0) {
    save_mean[ch] = mean;
    save_invstd[ch] = invstd;
  }
  const float alpha = nn::batch_norm_alpha(invstd, gamma[ch]);
  const float shift = nn::batch_norm_shift(beta[ch], mean, alpha);
  for (int64_t e = threadIdx.x; e < n * p; e += blockDim.x) {
    const size_t idx = at(e / p, e % p);
    store_float(y, y_type, idx, nn::batch_norm_apply(load_float(x, x_type, idx), alpha, shift));
  }
}

__global__ void __launch_bounds__(kBlockSize)
    batch_norm_backward_kernel(const void* x, ElemType x_type, const float* gamma,
                               const float* save_mean, const float* save_invstd, const void* dy,
                               ElemType dy_type, void* dx, ElemType dx_type, float* dgamma,
                               float* dbeta, int64_t n, int64_t c, int64_t p) {
  const int64_t ch = blockIdx.x;
  auto at = [&](int64_t i, int64_t k) { return static_cast<size_t>((i * c + ch) * p + k); };
  const float mean = save_mean[ch], invstd = save_invstd[ch], m = static_cast<float>(n * p);
  const float sum_dy =
      channel_total(n, p, [&](int64_t i, int64_t k) { return load_float(dy, dy_type, at(i, k)); });
  const float dotp = channel_total(n, p, [&](int64_t i, int64_t k) {
    return load_float(dy, dy_type, at(i, k)) * (load_float(x, x_type, at(i, k)) - mean);
  });
  if (threadIdx.x == 0) {
    if (dgamma) dgamma[ch] = dgamma[ch] + dotp * invstd;
    if (dbeta) dbeta[ch] = dbeta[ch] + sum_dy;
  }
  if (!dx) return;
  const float k_coef = nn::batch_norm_grad_k(dotp, invstd, m);
  const float mean_dy = sum_dy / m;
  for (int64_t e = threadIdx.x; e < n * p; e += blockDim.x) {
    const size_t idx = at(e / p, e % p);
    store_float(dx, dx_type, idx,
                nn::batch_norm_grad_dx(load_float(x, x_type, idx), load_float(dy, dy_type, idx),
                                       mean, k_coef, mean_dy, invstd, gamma[ch]));
  }
}

}  // namespace

void launch_im2col(const void* x, void* col, size_t elem_bytes, const ConvShape& s,
                   cudaStream_t stream) {
  const int64_t total = s.c * s.kh * s.kw * s.oh * s.ow;
  if (total == 0) return;
  if (elem_bytes == 4) {
    im2col_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(
        static_cast<const uint32_t*>(x), static_cast<uint32_t*>(col), s, total);
  } else {
    im2col_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(
        static_cast<const uint16_t*>(x), static_cast<uint16_t*>(col), s, total);
  }
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_col2im(const float* col, void* x, ElemType x_type, const ConvShape& s,
                   cudaStream_t stream) {
  const int64_t total = s.c * s.h * s.w;
  if (total == 0) return;
  col2im_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(col, x, x_type, s, total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_broadcast_channels(const void* b, ElemType b_type, void* y, ElemType y_type, int64_t n,
                               int64_t c, int64_t p, cudaStream_t stream) {
  const int64_t total = n * c * p;
  if (total == 0) return;
  broadcast_channels_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(b, b_type, y, y_type, c, p,
                                                                         total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_channel_sum(const void* x, ElemType x_type, void* out, ElemType out_type, int64_t n,
                        int64_t c, int64_t p, cudaStream_t stream) {
  if (c == 0) return;
  channel_sum_kernel<<<grid_size(c), kBlockSize, 0, stream>>>(x, x_type, out, out_type, n, c, p);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_max_pool2d_forward(const void* x, void* y, ElemType type, int32_t* indices,
                               int64_t planes, const ConvShape& s, cudaStream_t stream) {
  const int64_t total = planes * s.oh * s.ow;
  if (total == 0) return;
  max_pool_forward_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(x, y, type, indices, s,
                                                                       total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_max_pool2d_backward(const void* dy, ElemType dy_type, const int32_t* indices, void* dx,
                                ElemType dx_type, int64_t planes, const ConvShape& s,
                                cudaStream_t stream) {
  const int64_t total = planes * s.h * s.w;
  if (total == 0) return;
  max_pool_backward_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(dy, dy_type, indices, dx,
                                                                        dx_type, s, total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_avg_pool2d_forward(const void* x, ElemType x_type, void* y, ElemType y_type,
                               int64_t planes, const ConvShape& s, cudaStream_t stream) {
  const int64_t total = planes * s.oh * s.ow;
  if (total == 0) return;
  avg_pool_forward_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(x, x_type, y, y_type, s,
                                                                       total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_avg_pool2d_backward(const void* dy, ElemType dy_type, void* dx, ElemType dx_type,
                                int64_t planes, const ConvShape& s, cudaStream_t stream) {
  const int64_t total = planes * s.h * s.w;
  if (total == 0) return;
  avg_pool_backward_kernel<<<grid_size(total), kBlockSize, 0, stream>>>(dy, dy_type, dx, dx_type, s,
                                                                        total);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_batch_norm_forward(const void* x, ElemType x_type, const float* gamma,
                               const float* beta, void* y, ElemType y_type, float* save_mean,
                               float* save_invstd, float* running_mean, float* running_var,
                               int32_t* num_batches_tracked, bool training, float momentum,
                               float eps, int64_t n, int64_t c, int64_t p, cudaStream_t stream) {
  if (c == 0) return;
  batch_norm_forward_kernel<<<static_cast<unsigned>(c), kBlockSize, 0, stream>>>(
      x, x_type, gamma, beta, y, y_type, save_mean, save_invstd, running_mean, running_var,
      num_batches_tracked, training, momentum, eps, n, c, p);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

void launch_batch_norm_backward(const void* x, ElemType x_type, const float* gamma,
                                const float* save_mean, const float* save_invstd, const void* dy,
                                ElemType dy_type, void* dx, ElemType dx_type, float* dgamma,
                                float* dbeta, int64_t n, int64_t c, int64_t p,
                                cudaStream_t stream) {
  if (c == 0) return;
  batch_norm_backward_kernel<<<static_cast<unsigned>(c), kBlockSize, 0, stream>>>(
      x, x_type, gamma, save_mean, save_invstd, dy, dy_type, dx, dx_type, dgamma, dbeta, n, c, p);
  AMPCTL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ampctl::kernels
