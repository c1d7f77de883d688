// What a CUDA device of a given compute capability can run: the decisions taken from the
// capability alone, as pure functions (so the CPU tests check them for every GPU generation).
//
// The builds carry SASS for sm_75, sm_80 and sm_90 and PTX for compute_90 (CMakeLists.txt).
// sm_75 (T4) is the floor: CUDA 13's nvcc no longer builds for sm_70. bf16 needs sm_80: cuBLAS's
// bf16 matrix products and the bf16 WMMA fragments of the fused attention do not exist on sm_75,
// so a bf16 run on a 7.x GPU is refused at start, before its run directory exists.
//
// AMPCTL_FORCE_SM75=1 makes a newer GPU take every decision below as a 7.5 device would (bf16
// refused, the attention's bf16 tile products off the tensor cores): how scripts/gpu-check.sh
// exercises the sm_75 paths on an H200. The SASS a GPU runs is still its own generation's.
#pragma once

#include <string>

#include "ampctl/core/tensor.h"

namespace ampctl {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  // 75 for 7.5: orders capabilities.
  int value() const { return major * 10 + minor; }
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
};

inline constexpr ComputeCapability kMinComputeCapability{7, 5};   // sm_75, the build's floor
inline constexpr ComputeCapability kBf16ComputeCapability{8, 0};  // bf16 cuBLAS and WMMA

// Empty when a run computing in `compute` (f32, f16 or bf16: the precision's dtype) can run on a
// device of capability `cc`; else the reason, e.g. "bf16 needs compute capability 8.0; this GPU
// is 7.5: use fp16".
std::string precision_refusal(DType compute, ComputeCapability cc);

// Whether the fused attention's tile products for `dtype` run on the tensor cores (WMMA) on `cc`:
// f16 from 7.0, bf16 from 8.0. Otherwise the same kernels take their fp32 FMA products.
bool attention_tensor_cores(DType dtype, ComputeCapability cc);

// The capability the decisions use: the device's, or at most 7.5 when `force_sm75` (the value of
// AMPCTL_FORCE_SM75) is "1". Unset (nullptr), "" and "0" leave it; any other value is an
// Error{config} naming the variable.
ComputeCapability effective_capability(ComputeCapability device, const char* force_sm75);

}  // namespace ampctl
