// The CUDA backend's convolution ops (backend.h, "convolution ops"): argument checks (the shared
// ones of checks/conv.cpp, plus the device), then one kernel of kernels/conv.cu each. The conv2d
// ops themselves are composed in compose.cpp from im2col / col2im and gemm (cuBLAS), as on the CPU.
#include <string>

#include "conv.cuh"
#include "cuda_backend.h"

namespace ampctl::cuda_detail {
namespace {

int64_t plane(const Tensor& t) {
  int64_t p = 1;
  for (size_t d = 2; d < t.rank(); ++d) p *= t.dim(d);
  return p;
}

kernels::ConvShape pool_shape(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) {
  return {x.dim(1),   x.dim(2),   x.dim(3),   y.dim(2), y.dim(3), g.kernel_h,
          g.kernel_w, g.stride_h, g.stride_w, g.pad_h,  g.pad_w,  g.adaptive};
}

kernels::ConvShape im2col_shape(const Tensor& x, int64_t kh, int64_t kw, const Conv2dGeometry& g) {
  return {x.dim(0),
          x.dim(1),
          x.dim(2),
          conv_out_size(x.dim(1), kh, g.stride_h, g.pad_h),
          conv_out_size(x.dim(2), kw, g.stride_w, g.pad_w),
          kh,
          kw,
          g.stride_h,
          g.stride_w,
          g.pad_h,
          g.pad_w,
          false};
}

}  // namespace

void CudaBackend::im2col(const Tensor& x, const Tensor& col, int64_t kernel_h, int64_t kernel_w,
                         const Conv2dGeometry& g) {
  check_im2col(x, col, kernel_h, kernel_w, g, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_im2col(x.data(), col.data(), dtype_size(x.dtype()),
                         im2col_shape(x, kernel_h, kernel_w, g), stream());
}

void CudaBackend::col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                         const Conv2dGeometry& g) {
  check_col2im(col, x, kernel_h, kernel_w, g, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_col2im(static_cast<const float*>(col.data()), x.data(), elem_type(x.dtype()),
                         im2col_shape(x, kernel_h, kernel_w, g), stream());
}

void CudaBackend::broadcast_channels(const Tensor& b, const Tensor& y) {
  check_broadcast_channels(b, y, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_broadcast_channels(b.data(), elem_type(b.dtype()), y.data(), elem_type(y.dtype()),
                                     y.dim(0), y.dim(1), plane(y), stream());
}

void CudaBackend::channel_sum(const Tensor& x, const Tensor& out) {
  check_channel_sum(x, out, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_channel_sum(x.data(), elem_type(x.dtype()), out.data(), elem_type(out.dtype()),
                              x.dim(0), x.dim(1), plane(x), stream());
}

void CudaBackend::max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                                     const Pool2dGeometry& g) {
  check_max_pool2d_forward(x, y, indices, g, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_max_pool2d_forward(x.data(), y.data(), elem_type(x.dtype()),
                                     static_cast<int32_t*>(indices.data()), x.dim(0) * x.dim(1),
                                     pool_shape(x, y, g), stream());
}

void CudaBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                      const Pool2dGeometry& g) {
  check_max_pool2d_backward(dy, indices, dx, g, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_max_pool2d_backward(
      dy.data(), elem_type(dy.dtype()), static_cast<const int32_t*>(indices.data()), dx.data(),
      elem_type(dx.dtype()), dx.dim(0) * dx.dim(1), pool_shape(dx, dy, g), stream());
}

void CudaBackend::avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) {
  check_avg_pool2d(x, y, g, "avg_pool2d_forward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_avg_pool2d_forward(x.data(), elem_type(x.dtype()), y.data(), elem_type(y.dtype()),
                                     x.dim(0) * x.dim(1), pool_shape(x, y, g), stream());
}

void CudaBackend::avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dGeometry& g) {
  check_avg_pool2d(dx, dy, g, "avg_pool2d_backward", m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_avg_pool2d_backward(dy.data(), elem_type(dy.dtype()), dx.data(),
                                      elem_type(dx.dtype()), dx.dim(0) * dx.dim(1),
                                      pool_shape(dx, dy, g), stream());
}

void CudaBackend::batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& y, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& running_mean,
                                     const Tensor& running_var, const Tensor& num_batches_tracked,
                                     const BatchNormParams& params) {
  const int64_t c =
      check_batch_norm_forward(x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var,
                               num_batches_tracked, params, m_device);
  const int64_t n = x.dim(0), p = plane(x);
  DeviceScope scope(m_device.index);
  kernels::launch_batch_norm_forward(
      x.data(), elem_type(x.dtype()), static_cast<const float*>(gamma.data()),
      static_cast<const float*>(beta.data()), y.data(), elem_type(y.dtype()),
      static_cast<float*>(save_mean.data()), static_cast<float*>(save_invstd.data()),
      static_cast<float*>(running_mean.data()), static_cast<float*>(running_var.data()),
      num_batches_tracked.defined() ? static_cast<int32_t*>(num_batches_tracked.data()) : nullptr,
      params.training, params.momentum, params.eps, n, c, p, stream());
}

void CudaBackend::batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                      const Tensor& save_invstd, const Tensor& dy, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t c =
      check_batch_norm_backward(x, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_batch_norm_backward(
      x.data(), elem_type(x.dtype()), static_cast<const float*>(gamma.data()),
      static_cast<const float*>(save_mean.data()), static_cast<const float*>(save_invstd.data()),
      dy.data(), elem_type(dy.dtype()), dx.defined() ? dx.data() : nullptr,
      dx.defined() ? elem_type(dx.dtype()) : ElemType::f32,
      dgamma.defined() ? static_cast<float*>(dgamma.data()) : nullptr,
      dbeta.defined() ? static_cast<float*>(dbeta.data()) : nullptr, x.dim(0), c, plane(x),
      stream());
}

}  // namespace ampctl::cuda_detail
