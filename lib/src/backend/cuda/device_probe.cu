// Build-time facts about the kernels, read where nvcc defines them.
//
// __CUDA_ARCH_LIST__ is nvcc's own list of the architectures it compiles for (e.g. 900 for
// CMAKE_CUDA_ARCHITECTURES=90), so cuda_architectures() reports what was built rather than
// guessing from the device. Whether a device can run the kernels is asked of the runtime by
// loading one (cudaFuncGetAttributes), which also accepts a newer GPU that JIT-compiles the
// embedded PTX.
#include <string>

#include "device_probe.h"

namespace ampctl::cuda_detail {

// kernels

static __global__ void probe_kernel() {}

// launchers

#define AMPCTL_STRINGIFY_LIST(...) #__VA_ARGS__
#define AMPCTL_EXPAND_STRINGIFY(...) AMPCTL_STRINGIFY_LIST(__VA_ARGS__)

std::string compiled_architectures() {
#if defined(__CUDA_ARCH_LIST__)
  const std::string list = AMPCTL_EXPAND_STRINGIFY(__CUDA_ARCH_LIST__);  // "800,900"
#else
  const std::string list;
#endif
  std::string out;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    if (!item.empty()) {
      if (!out.empty()) out += ",";
      out += std::to_string(std::stoi(item) / 10);  // 900 -> 90, 1000 -> 100
    }
    start = end + 1;
  }
  return out;
}

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it for the next call
  return err;
}

}  // namespace ampctl::cuda_detail
