// The CUDA backend's convolution ops (backend.h, "convolution ops"): argument checks (the shared
// ones of backend.cpp, plus the device), then one kernel of kernels/conv.cu each. The conv2d ops
// themselves are composed in backend.cpp from im2col / col2im and gemm (cuBLAS), as on the CPU.
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
  check_here(x, "im2col", "x");
  check_here(col, "im2col", "col");
  check_im2col(x, col, kernel_h, kernel_w, g, "im2col");
  if (x.dtype() != col.dtype()) invalid("im2col: x and col must share a dtype");
  DeviceScope scope(m_device.index);
  kernels::launch_im2col(x.data(), col.data(), dtype_size(x.dtype()),
                         im2col_shape(x, kernel_h, kernel_w, g), stream());
}

void CudaBackend::col2im(const Tensor& col, const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                         const Conv2dGeometry& g) {
  check_here(x, "col2im", "x");
  check_here(col, "col2im", "col");
  check_im2col(x, col, kernel_h, kernel_w, g, "col2im");
  if (col.dtype() != DType::f32) invalid("col2im: col must be f32, got " + col.describe());
  DeviceScope scope(m_device.index);
  kernels::launch_col2im(static_cast<const float*>(col.data()), x.data(), elem_type(x.dtype()),
                         im2col_shape(x, kernel_h, kernel_w, g), stream());
}

void CudaBackend::broadcast_channels(const Tensor& b, const Tensor& y) {
  const char* op = "broadcast_channels";
  check_here(b, op, "b");
  check_here(y, op, "y");
  check_floating(b, op, "b");
  check_floating(y, op, "y");
  if (b.rank() != 1 || y.rank() < 2 || y.dim(1) != b.dim(0)) {
    invalid("broadcast_channels: b " + b.describe() + " is not [C] for y " + y.describe());
  }
  DeviceScope scope(m_device.index);
  kernels::launch_broadcast_channels(b.data(), elem_type(b.dtype()), y.data(), elem_type(y.dtype()),
                                     y.dim(0), y.dim(1), plane(y), stream());
}

void CudaBackend::channel_sum(const Tensor& x, const Tensor& out) {
  const char* op = "channel_sum";
  check_here(x, op, "x");
  check_here(out, op, "out");
  check_floating(x, op, "x");
  check_floating(out, op, "out");
  if (x.rank() < 2 || out.rank() != 1 || out.dim(0) != x.dim(1)) {
    invalid("channel_sum: out " + out.describe() + " is not [C] for x " + x.describe());
  }
  DeviceScope scope(m_device.index);
  kernels::launch_channel_sum(x.data(), elem_type(x.dtype()), out.data(), elem_type(out.dtype()),
                              x.dim(0), x.dim(1), plane(x), stream());
}

void CudaBackend::max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                                     const Pool2dGeometry& g) {
  const char* op = "max_pool2d_forward";
  check_here(x, op, "x");
  check_here(y, op, "y");
  check_here(indices, op, "indices");
  check_pool2d(x, y, g, op);
  if (x.dtype() != y.dtype()) invalid("max_pool2d_forward: x and y must share a dtype");
  if (indices.dtype() != DType::i32) invalid("max_pool2d_forward: indices must be i32");
  check_shape(indices, y.shape(), op, "indices");
  DeviceScope scope(m_device.index);
  kernels::launch_max_pool2d_forward(x.data(), y.data(), elem_type(x.dtype()),
                                     static_cast<int32_t*>(indices.data()), x.dim(0) * x.dim(1),
                                     pool_shape(x, y, g), stream());
}

void CudaBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                      const Pool2dGeometry& g) {
  const char* op = "max_pool2d_backward";
  check_here(dy, op, "dy");
  check_here(dx, op, "dx");
  check_here(indices, op, "indices");
  check_pool2d(dx, dy, g, op);
  if (indices.dtype() != DType::i32) invalid("max_pool2d_backward: indices must be i32");
  check_shape(indices, dy.shape(), op, "indices");
  DeviceScope scope(m_device.index);
  kernels::launch_max_pool2d_backward(
      dy.data(), elem_type(dy.dtype()), static_cast<const int32_t*>(indices.data()), dx.data(),
      elem_type(dx.dtype()), dx.dim(0) * dx.dim(1), pool_shape(dx, dy, g), stream());
}

void CudaBackend::avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dGeometry& g) {
  const char* op = "avg_pool2d_forward";
  check_here(x, op, "x");
  check_here(y, op, "y");
  check_pool2d(x, y, g, op);
  DeviceScope scope(m_device.index);
  kernels::launch_avg_pool2d_forward(x.data(), elem_type(x.dtype()), y.data(), elem_type(y.dtype()),
                                     x.dim(0) * x.dim(1), pool_shape(x, y, g), stream());
}

void CudaBackend::avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dGeometry& g) {
  const char* op = "avg_pool2d_backward";
  check_here(dy, op, "dy");
  check_here(dx, op, "dx");
  check_pool2d(dx, dy, g, op);
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
  const char* op = "batch_norm_forward";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&gamma, "gamma"},
                                {&beta, "beta"},
                                {&y, "y"},
                                {&save_mean, "save_mean"},
                                {&save_invstd, "save_invstd"},
                                {&running_mean, "running_mean"},
                                {&running_var, "running_var"}}) {
    check_here(*t, op, name);
  }
  const int64_t c = check_batch_norm(
      x, {&gamma, &beta, &save_mean, &save_invstd, &running_mean, &running_var}, op);
  check_floating(y, op, "y");
  check_same_numel(x, "x", y, "y", op);
  if (num_batches_tracked.defined()) {
    check_here(num_batches_tracked, op, "num_batches_tracked");
    check_scalar(num_batches_tracked, DType::i32, op, "num_batches_tracked");
  }
  const int64_t n = x.dim(0), p = plane(x);
  if (params.training && n * p < 2) {
    invalid("batch_norm_forward: expected more than 1 value per channel when training, got " +
            x.describe());
  }
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
  const char* op = "batch_norm_backward";
  for (const auto& [t, name] : {std::pair{&x, "x"},
                                {&gamma, "gamma"},
                                {&save_mean, "save_mean"},
                                {&save_invstd, "save_invstd"},
                                {&dy, "dy"}}) {
    check_here(*t, op, name);
  }
  const int64_t c = check_batch_norm(x, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta}, op);
  check_floating(dy, op, "dy");
  check_same_numel(x, "x", dy, "dy", op);
  if (dx.defined()) {
    check_here(dx, op, "dx");
    check_floating(dx, op, "dx");
    check_same_numel(x, "x", dx, "dx", op);
  }
  if (dgamma.defined()) check_here(dgamma, op, "dgamma");
  if (dbeta.defined()) check_here(dbeta, op, "dbeta");
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
