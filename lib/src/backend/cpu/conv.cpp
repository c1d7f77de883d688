// The CPU backend's convolution ops (backend.h, "convolution ops"): im2col / col2im, the
// per-channel broadcast and sum, pooling and BatchNorm. The conv2d ops themselves are composed
// in compose.cpp from these and gemm, so on the CPU a convolution runs on the packed GEMM
// kernels (engine/cpu_gemm.cpp) with im2col as the packing of its right operand.
//
// Every op here is a plain loop in a fixed order: float32 arithmetic, inputs widened exactly,
// each output rounded once (store_f32). Work is split over the thread pool by whole planes or
// channels only, so which thread computes a value never changes its bits.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/math/conv_math.h"
#include "cpu_backend.h"
#include "engine/cpu_parallel.h"

namespace ampctl::cpu {
namespace {

template <typename T>
void im2col_plane(const T* x, T* col, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                  int64_t oh, int64_t ow, const Conv2dGeometry& g) {
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      T* row = col + ((c * kh + i) * kw + j) * oh * ow;
      for (int64_t y = 0; y < oh; ++y) {
        const int64_t ih = y * g.stride_h - g.pad_h + i;
        T* out = row + y * ow;
        if (ih < 0 || ih >= h) {
          std::memset(out, 0, static_cast<size_t>(ow) * sizeof(T));
          continue;
        }
        const T* in = x + (c * h + ih) * w;
        for (int64_t xo = 0; xo < ow; ++xo) {
          const int64_t iw = xo * g.stride_w - g.pad_w + j;
          out[xo] = (iw < 0 || iw >= w) ? T{} : in[iw];
        }
      }
    }
  }
}

// Elements per (n, c) plane of an [N, C, ...] tensor.
int64_t plane_size(const Tensor& t) {
  int64_t p = 1;
  for (size_t d = 2; d < t.rank(); ++d) p *= t.dim(d);
  return p;
}

}  // namespace

void CpuBackend::im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
                        const Conv2dGeometry& g) {
  check_im2col(x, col, kernel_h, kernel_w, g, device());
  const int64_t c = x.dim(0), h = x.dim(1), w = x.dim(2);
  const int64_t oh = conv_out_size(h, kernel_h, g.stride_h, g.pad_h);
  const int64_t ow = conv_out_size(w, kernel_w, g.stride_w, g.pad_w);
  // A copy of x's elements: the 2- or 4-byte storage moves as it is (no rounding).
  m_pool->run(c, [&](int64_t ch, int) {
    if (dtype_size(x.dtype()) == 4) {
      im2col_plane(static_cast<const uint32_t*>(x.data()), static_cast<uint32_t*>(col.data()), ch,
                   h, w, kernel_h, kernel_w, oh, ow, g);
    } else {
      im2col_plane(static_cast<const uint16_t*>(x.data()), static_cast<uint16_t*>(col.data()), ch,
                   h, w, kernel_h, kernel_w, oh, ow, g);
    }
  });
}

void CpuBackend::col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                        const Conv2dGeometry& g) {
  check_col2im(col, x, kernel_h, kernel_w, g, device());
  const int64_t c = x.dim(0), h = x.dim(1), w = x.dim(2);
  const int64_t oh = conv_out_size(h, kernel_h, g.stride_h, g.pad_h);
  const int64_t ow = conv_out_size(w, kernel_w, g.stride_w, g.pad_w);
  m_ws_d.assign(x.numel(), 0.0f);
  float* acc = m_ws_d.data();
  const float* cp = col.data_as<float>();
  // Per input element the contributions arrive in (i, j) order (each (i, j) reaches it from at
  // most one output position), the order the GPU's gather uses.
  m_pool->run(c, [&](int64_t ch, int) {
    for (int64_t i = 0; i < kernel_h; ++i) {
      for (int64_t j = 0; j < kernel_w; ++j) {
        const float* row = cp + ((ch * kernel_h + i) * kernel_w + j) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t ih = y * g.stride_h - g.pad_h + i;
          if (ih < 0 || ih >= h) continue;
          float* out = acc + (ch * h + ih) * w;
          for (int64_t xo = 0; xo < ow; ++xo) {
            const int64_t iw = xo * g.stride_w - g.pad_w + j;
            if (iw >= 0 && iw < w) out[iw] = out[iw] + row[y * ow + xo];
          }
        }
      }
    }
  });
  store_f32(acc, x);
}

void CpuBackend::broadcast_channels(const Tensor& b, const Tensor& y) {
  check_broadcast_channels(b, y, device());
  const float* bp = as_f32(b, m_ws_a);
  const int64_t n = y.dim(0), c = y.dim(1), p = plane_size(y);
  m_ws_d.resize(y.numel());
  float* out = m_ws_d.data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) std::fill_n(out + (i * c + ch) * p, p, bp[ch]);
  }
  store_f32(out, y);
}

void CpuBackend::channel_sum(const Tensor& x, const Tensor& out) {
  check_channel_sum(x, out, device());
  const float* xp = as_f32(x, m_ws_a);
  const int64_t n = x.dim(0), c = x.dim(1), p = plane_size(x);
  m_ws_d.resize(static_cast<size_t>(c));
  float* sums = m_ws_d.data();
  m_pool->run(c, [&](int64_t ch, int) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float* plane = xp + (i * c + ch) * p;
      for (int64_t k = 0; k < p; ++k) s = s + plane[k];
    }
    sums[ch] = s;
  });
  store_f32(sums, out);
}

void CpuBackend::max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                                    const Pool2dGeometry& g) {
  check_max_pool2d_forward(x, y, indices, g, device());
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = y.dim(2), ow = y.dim(3);
  const float* xp = as_f32(x, m_ws_a);
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  int32_t* ip = indices.data_as<int32_t>();
  m_pool->run(planes, [&](int64_t pl, int) {
    const float* in = xp + pl * h * w;
    for (int64_t a = 0; a < oh; ++a) {
      const nn::PoolWindow wh =
          nn::pool_window(a, h, oh, g.kernel_h, g.stride_h, g.pad_h, g.adaptive);
      for (int64_t b = 0; b < ow; ++b) {
        const nn::PoolWindow ww =
            nn::pool_window(b, w, ow, g.kernel_w, g.stride_w, g.pad_w, g.adaptive);
        // PyTorch's loop: a later element wins only when strictly greater, or when it is NaN.
        float best = -std::numeric_limits<float>::infinity();
        int64_t arg = wh.start * w + ww.start;
        for (int64_t r = wh.start; r < wh.end; ++r) {
          for (int64_t s = ww.start; s < ww.end; ++s) {
            const float v = in[r * w + s];
            if (v > best || std::isnan(v)) {
              best = v;
              arg = r * w + s;
            }
          }
        }
        yp[(pl * oh + a) * ow + b] = best;
        ip[(pl * oh + a) * ow + b] = static_cast<int32_t>(arg);
      }
    }
  });
  store_f32(yp, y);
}

void CpuBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                     const Pool2dGeometry& g) {
  check_max_pool2d_backward(dy, indices, dx, g, device());
  // The indices are checked below (the GPU trusts them: no sync).
  const int64_t planes = dx.dim(0) * dx.dim(1), hw = dx.dim(2) * dx.dim(3);
  const int64_t ohw = dy.dim(2) * dy.dim(3);
  const float* dyp = as_f32(dy, m_ws_a);
  const int32_t* ip = indices.data_as<int32_t>();
  m_ws_d.assign(dx.numel(), 0.0f);
  float* dxp = m_ws_d.data();
  for (int64_t k = 0; k < static_cast<int64_t>(indices.numel()); ++k) {
    if (ip[k] < 0 || ip[k] >= hw) {
      throw Error{ErrorKind::invalid_argument, "max_pool2d_backward: index " +
                                                   std::to_string(ip[k]) + " outside a plane of " +
                                                   std::to_string(hw)};
    }
  }
  m_pool->run(planes, [&](int64_t pl, int) {
    float* out = dxp + pl * hw;
    for (int64_t k = 0; k < ohw; ++k) {
      const int32_t at = ip[pl * ohw + k];
      out[at] = out[at] + dyp[pl * ohw + k];
    }
  });
  store_f32(dxp, dx);
}

void CpuBackend::avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) {
  check_avg_pool2d(x, y, g, "avg_pool2d_forward", device());
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = y.dim(2), ow = y.dim(3);
  const float* xp = as_f32(x, m_ws_a);
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  m_pool->run(planes, [&](int64_t pl, int) {
    const float* in = xp + pl * h * w;
    for (int64_t a = 0; a < oh; ++a) {
      const nn::PoolWindow wh =
          nn::pool_window(a, h, oh, g.kernel_h, g.stride_h, g.pad_h, g.adaptive);
      for (int64_t b = 0; b < ow; ++b) {
        const nn::PoolWindow ww =
            nn::pool_window(b, w, ow, g.kernel_w, g.stride_w, g.pad_w, g.adaptive);
        float s = 0.0f;
        for (int64_t r = wh.start; r < wh.end; ++r) {
          for (int64_t c = ww.start; c < ww.end; ++c) s = s + in[r * w + c];
        }
        yp[(pl * oh + a) * ow + b] = s / static_cast<float>(wh.count * ww.count);
      }
    }
  });
  store_f32(yp, y);
}

void CpuBackend::avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dGeometry& g) {
  check_avg_pool2d(dx, dy, g, "avg_pool2d_backward", device());
  const int64_t planes = dx.dim(0) * dx.dim(1), h = dx.dim(2), w = dx.dim(3);
  const int64_t oh = dy.dim(2), ow = dy.dim(3);
  const float* dyp = as_f32(dy, m_ws_a);
  m_ws_d.assign(dx.numel(), 0.0f);
  float* dxp = m_ws_d.data();
  // Scatter in output order: each input receives its windows' shares in (a, b) order.
  m_pool->run(planes, [&](int64_t pl, int) {
    float* out = dxp + pl * h * w;
    for (int64_t a = 0; a < oh; ++a) {
      const nn::PoolWindow wh =
          nn::pool_window(a, h, oh, g.kernel_h, g.stride_h, g.pad_h, g.adaptive);
      for (int64_t b = 0; b < ow; ++b) {
        const nn::PoolWindow ww =
            nn::pool_window(b, w, ow, g.kernel_w, g.stride_w, g.pad_w, g.adaptive);
        const float share = dyp[(pl * oh + a) * ow + b] / static_cast<float>(wh.count * ww.count);
        for (int64_t r = wh.start; r < wh.end; ++r) {
          for (int64_t c = ww.start; c < ww.end; ++c) out[r * w + c] = out[r * w + c] + share;
        }
      }
    }
  });
  store_f32(dxp, dx);
}

void CpuBackend::batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& y, const Tensor& save_mean,
                                    const Tensor& save_invstd, const Tensor& running_mean,
                                    const Tensor& running_var, const Tensor& num_batches_tracked,
                                    const BatchNormParams& params) {
  const int64_t c =
      check_batch_norm_forward(x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var,
                               num_batches_tracked, params, device());
  const int64_t n = x.dim(0), p = plane_size(x);
  const int64_t m = n * p;
  const float* xp = as_f32(x, m_ws_a);
  m_ws_d.resize(y.numel());
  float* yp = m_ws_d.data();
  const float* g = gamma.data_as<float>();
  const float* bt = beta.data_as<float>();
  float* sm = save_mean.data_as<float>();
  float* si = save_invstd.data_as<float>();
  float* rm = running_mean.data_as<float>();
  float* rv = running_var.data_as<float>();
  m_pool->run(c, [&](int64_t ch, int) {
    float mean, invstd;
    if (params.training) {
      // Two passes, each plane summed in order and the planes added in order.
      float s = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float* pl = xp + (i * c + ch) * p;
        float ps = 0.0f;
        for (int64_t k = 0; k < p; ++k) ps = ps + pl[k];
        s = s + ps;
      }
      mean = s / static_cast<float>(m);
      float q = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float* pl = xp + (i * c + ch) * p;
        float ps = 0.0f;
        for (int64_t k = 0; k < p; ++k) {
          const float d = pl[k] - mean;
          ps = ps + d * d;
        }
        q = q + ps;
      }
      invstd = nn::batch_norm_invstd(q / static_cast<float>(m), params.eps);
      rm[ch] = nn::batch_norm_running(rm[ch], mean, params.momentum);
      rv[ch] = nn::batch_norm_running(rv[ch], q / static_cast<float>(m - 1), params.momentum);
    } else {
      mean = rm[ch];
      invstd = nn::batch_norm_invstd(rv[ch], params.eps);
    }
    sm[ch] = mean;
    si[ch] = invstd;
    const float alpha = nn::batch_norm_alpha(invstd, g[ch]);
    const float shift = nn::batch_norm_shift(bt[ch], mean, alpha);
    for (int64_t i = 0; i < n; ++i) {
      const float* pl = xp + (i * c + ch) * p;
      float* out = yp + (i * c + ch) * p;
      for (int64_t k = 0; k < p; ++k) out[k] = nn::batch_norm_apply(pl[k], alpha, shift);
    }
  });
  store_f32(yp, y);
  if (params.training && num_batches_tracked.defined()) {
    int32_t* t = num_batches_tracked.data_as<int32_t>();
    t[0] = t[0] + 1;
  }
}

void CpuBackend::batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                                     const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t c =
      check_batch_norm_backward(x, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, device());
  const int64_t n = x.dim(0), p = plane_size(x);
  const float m = static_cast<float>(n * p);
  const float* xp = as_f32(x, m_ws_a);
  const float* dyp = as_f32(dy, m_ws_b);
  float* dxp = nullptr;
  if (dx.defined()) {
    m_ws_d.resize(dx.numel());
    dxp = m_ws_d.data();
  }
  m_ws_e.resize(2 * static_cast<size_t>(c));
  float* sums = m_ws_e.data();  // sum dy, then sum dy * (x - mean), per channel
  const float* g = gamma.data_as<float>();
  const float* mp = save_mean.data_as<float>();
  const float* ip = save_invstd.data_as<float>();
  m_pool->run(c, [&](int64_t ch, int) {
    const float mean = mp[ch], invstd = ip[ch];
    float sum_dy = 0.0f, dotp = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float* xr = xp + (i * c + ch) * p;
      const float* dr = dyp + (i * c + ch) * p;
      float ps = 0.0f, pd = 0.0f;
      for (int64_t k = 0; k < p; ++k) {
        ps = ps + dr[k];
        pd = pd + dr[k] * (xr[k] - mean);
      }
      sum_dy = sum_dy + ps;
      dotp = dotp + pd;
    }
    sums[ch] = sum_dy;
    sums[c + ch] = dotp;
    if (!dxp) return;
    const float k_coef = nn::batch_norm_grad_k(dotp, invstd, m);
    const float mean_dy = sum_dy / m;
    for (int64_t i = 0; i < n; ++i) {
      const float* xr = xp + (i * c + ch) * p;
      const float* dr = dyp + (i * c + ch) * p;
      float* out = dxp + (i * c + ch) * p;
      for (int64_t k = 0; k < p; ++k) {
        out[k] = nn::batch_norm_grad_dx(xr[k], dr[k], mean, k_coef, mean_dy, invstd, g[ch]);
      }
    }
  });
  if (dxp) store_f32(dxp, dx);
  if (dgamma.defined()) {
    float* dg = dgamma.data_as<float>();
    for (int64_t ch = 0; ch < c; ++ch) dg[ch] = dg[ch] + sums[c + ch] * ip[ch];
  }
  if (dbeta.defined()) {
    float* db = dbeta.data_as<float>();
    for (int64_t ch = 0; ch < c; ++ch) db[ch] = db[ch] + sums[ch];
  }
}

}  // namespace ampctl::cpu
