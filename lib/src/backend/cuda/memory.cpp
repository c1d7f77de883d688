// The CUDA backend's memory family (backend.h, "memory"): allocation, upload, download, copy,
// fill, synchronize, casts, the elementwise scalings and additions, and gather_rows; each a copy
// or one kernel (kernels/memory_fill.cu, memory_cast.cu, memory_elementwise.cu, memory_gather.cu) on the backend's stream.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "ampctl/backend/backend.h"
#include "memory_cast.cuh"
#include "cuda_backend.h"
#include "memory_elementwise.cuh"
#include "memory_fill.cuh"
#include "memory_gather.cuh"

namespace ampctl::cuda_detail {

namespace {

// The bits a fill writes, computed on the host exactly as the CPU backend computes its fill value:
// float values go through float first, as PyTorch's fill_ builds c10::Half/BFloat16 from a float.
// (So a double between two f16 values can round twice; backend.h's "rounded once" holds for every
// value that is a float.)
uint32_t fill_bits(DType dtype, double value) {
  switch (dtype) {
    case DType::f32:
      return float_bits(static_cast<float>(value));
    case DType::f16:
      return half(static_cast<float>(value)).bits;
    case DType::bf16:
      return bfloat16(static_cast<float>(value)).bits;
    case DType::i32:
      // check_fill refused a value that is not an int32 one.
      return static_cast<uint32_t>(static_cast<int32_t>(value));
  }
  return 0;
}

}  // namespace

Tensor CudaBackend::empty(const Shape& shape, DType dtype) {
  DeviceScope scope(m_device.index);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  const int index = m_device.index;
  void* p = bytes ? allocate_device_memory(index, bytes,
                                           std::string(dtype_name(dtype)) + shape_str(shape))
                  : nullptr;
  auto storage = std::make_shared<Storage>(p, bytes, m_device,
                                           [index](void* q) { free_device_memory(index, q); });
  return Tensor{std::move(storage), 0, shape, dtype};
}

void CudaBackend::upload(const Tensor& dst, const void* host, size_t bytes) {
  check_upload(dst, bytes, m_device);
  if (bytes == 0) return;
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host, bytes, cudaMemcpyHostToDevice, stream()));
  // From pageable memory cudaMemcpyAsync returns only after the bytes are staged, so the caller
  // may reuse its buffer at once. From page-locked memory the copy is truly asynchronous; wait,
  // so that upload() means the same for every kind of host buffer.
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) == cudaSuccess &&
      attributes.type == cudaMemoryTypeHost) {
    AMPCTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  (void)cudaGetLastError();  // cudaPointerGetAttributes may leave a non-sticky error behind
}

void CudaBackend::download(void* host, const Tensor& src) {
  check_download(src, m_device);
  if (src.nbytes() == 0) return;
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(
      cudaMemcpyAsync(host, src.data(), src.nbytes(), cudaMemcpyDeviceToHost, stream()));
  AMPCTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  check_copy(dst, src, m_device);
  if (dst.nbytes() == 0 || dst.data() == src.data()) return;
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(
      cudaMemcpyAsync(dst.data(), src.data(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream()));
}

void CudaBackend::fill(const Tensor& dst, double value) {
  check_fill(dst, value, m_device);
  const uint32_t bits = fill_bits(dst.dtype(), value);
  DeviceScope scope(m_device.index);
  kernels::launch_fill(dst.data(), dtype_size(dst.dtype()), bits, dst.numel(), stream());
}

void CudaBackend::synchronize() {
  DeviceScope scope(m_device.index);
  AMPCTL_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::cast(const Tensor& src, const Tensor& dst) {
  check_cast(src, dst, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_cast(src.data(), elem_type(src.dtype()), dst.data(), elem_type(dst.dtype()),
                       src.numel(), stream());
}

void CudaBackend::mul_scalar_tensor(const Tensor& x, const Tensor& scale, const Tensor& out) {
  check_mul_scalar_tensor(x, scale, out, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_mul_scalar_tensor(x.data(), elem_type(x.dtype()),
                                    static_cast<const float*>(scale.data()), out.data(),
                                    elem_type(out.dtype()), x.numel(), stream());
}

void CudaBackend::add_(const Tensor& dst, const Tensor& src, float alpha) {
  check_add(dst, src, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_add(dst.data(), elem_type(dst.dtype()), src.data(), elem_type(src.dtype()), alpha,
                      dst.numel(), stream());
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& index, int64_t offset,
                              const Tensor& dst) {
  // The indices are clamped by the kernel (checking them would be a sync).
  const int64_t width = check_gather_rows(src, index, offset, dst, m_device);
  const int64_t n = src.dim(0), rows = dst.dim(0);
  DeviceScope scope(m_device.index);
  kernels::launch_gather_rows(static_cast<const uint32_t*>(src.data()), n, width,
                              static_cast<const int32_t*>(index.data()) + offset,
                              static_cast<uint32_t*>(dst.data()), rows, stream());
}

}  // namespace ampctl::cuda_detail
