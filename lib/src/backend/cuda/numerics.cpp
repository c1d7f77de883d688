// The CUDA backend's counted roundings (backend.h, "gradient numerics": round_counted and
// round_amax): the shared checks, then
// one kernel (kernels/numerics.cu). No host sync: the counters stay on the device until the
// caller downloads them.
#include "numerics.cuh"
#include "cuda_backend.h"

namespace ampctl::cuda_detail {

void CudaBackend::round_counted(const Tensor& src, const Tensor& dst, const Tensor& counters) {
  check_round_counted(src, dst, counters, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_round_counted(static_cast<const float*>(src.data()), dst.data(),
                                elem_type(dst.dtype()), static_cast<int64_t*>(counters.data()),
                                src.numel(), stream());
}

void CudaBackend::round_amax(const Tensor& src, const Tensor& dst, const Tensor& amax) {
  check_round_amax(src, dst, amax, m_device);
  DeviceScope scope(m_device.index);
  kernels::launch_round_amax(static_cast<const float*>(src.data()), dst.data(),
                             elem_type(dst.dtype()), static_cast<float*>(amax.data()), src.numel(),
                             stream());
}

}  // namespace ampctl::cuda_detail
