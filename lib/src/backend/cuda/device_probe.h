// What the CUDA backend's host code (C++20) needs to know that only nvcc can tell it: the
// architectures this build's kernels were compiled for, and whether they load on a device.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace ampctl::cuda_detail {

// The real architectures of this build, from nvcc's __CUDA_ARCH_LIST__: "90", or "80,90".
std::string compiled_architectures();

// Loads one of this build's kernels on the current device: cudaSuccess, or the error a launch
// would give (cudaErrorNoKernelImageForDevice when the device is older than every built arch).
cudaError_t probe_kernel_image();

}  // namespace ampctl::cuda_detail
