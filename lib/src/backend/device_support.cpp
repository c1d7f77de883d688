#include "ampctl/backend/device_support.h"

#include <cstring>

#include "ampctl/core/error.h"

namespace ampctl {

namespace {

// The precision's name as configurations spell it.
const char* precision_name(DType d) {
  switch (d) {
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    default:
      return "fp32";
  }
}

}  // namespace

std::string precision_refusal(DType compute, ComputeCapability cc) {
  if (cc.value() < kMinComputeCapability.value()) {
    return std::string(precision_name(compute)) + " on this GPU: ampctl's kernels need compute " +
           "capability " + kMinComputeCapability.str() + " or newer (sm_75, CUDA 13's floor); " +
           "this GPU is " + cc.str() + ": use device: cpu";
  }
  if (compute == DType::bf16 && cc.value() < kBf16ComputeCapability.value()) {
    return "bf16 needs compute capability " + kBf16ComputeCapability.str() + "; this GPU is " +
           cc.str() + ": use fp16";
  }
  return {};
}

bool attention_tensor_cores(DType dtype, ComputeCapability cc) {
  if (dtype == DType::f16) return cc.value() >= 70;  // fp16 WMMA: sm_70 and newer
  if (dtype == DType::bf16) return cc.value() >= kBf16ComputeCapability.value();
  return false;
}

ComputeCapability effective_capability(ComputeCapability device, const char* force_sm75) {
  if (force_sm75 == nullptr || std::strcmp(force_sm75, "") == 0 ||
      std::strcmp(force_sm75, "0") == 0) {
    return device;
  }
  if (std::strcmp(force_sm75, "1") != 0) {
    throw Error{ErrorKind::config,
                std::string("AMPCTL_FORCE_SM75='") + force_sm75 + "': expected 1 (or 0, or unset)",
                "AMPCTL_FORCE_SM75=1 takes a newer GPU's decisions as a T4 (sm_75) would"};
  }
  return device.value() <= kMinComputeCapability.value() ? device : kMinComputeCapability;
}

}  // namespace ampctl
