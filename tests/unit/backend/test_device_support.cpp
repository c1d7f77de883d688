// The decisions taken from a GPU's compute capability (device_support.h), on the CPU, for the
// GPUs people have. The expected answers are NVIDIA's published capabilities and features
// (CUDA C++ Programming Guide, "Compute Capabilities"): bf16 arithmetic and bf16 WMMA from 8.0,
// fp16 WMMA from 7.0; CUDA 13 builds nothing below 7.5.
#include <gtest/gtest.h>

#include "ampctl/backend/device_support.h"
#include "ampctl/core/error.h"

namespace ampctl {
namespace {

struct Gpu {
  const char* name;
  ComputeCapability cc;
  bool bf16;      // published: bf16 tensor cores
  bool loadable;  // CUDA 13 kernels exist for it (SASS or PTX JIT)
};

constexpr Gpu kGpus[] = {
    {"V100", {7, 0}, false, false}, {"T4", {7, 5}, false, true},       {"A100", {8, 0}, true, true},
    {"A10", {8, 6}, true, true},    {"L4", {8, 9}, true, true},        {"H200", {9, 0}, true, true},
    {"B200", {10, 0}, true, true},  {"RTX 5090", {12, 0}, true, true},
};

TEST(DeviceSupport, PrecisionRefusalFollowsPublishedCapabilities) {
  for (const Gpu& g : kGpus) {
    SCOPED_TRACE(g.name);
    EXPECT_EQ(precision_refusal(DType::f32, g.cc).empty(), g.loadable);
    EXPECT_EQ(precision_refusal(DType::f16, g.cc).empty(), g.loadable);
    EXPECT_EQ(precision_refusal(DType::bf16, g.cc).empty(), g.loadable && g.bf16);
    EXPECT_EQ(attention_tensor_cores(DType::f16, g.cc), true);
    EXPECT_EQ(attention_tensor_cores(DType::bf16, g.cc), g.bf16);
    EXPECT_FALSE(attention_tensor_cores(DType::f32, g.cc));
  }
}

TEST(DeviceSupport, Bf16OnAT4NamesBothCapabilitiesAndTheWayOut) {
  EXPECT_EQ(precision_refusal(DType::bf16, {7, 5}),
            "bf16 needs compute capability 8.0; this GPU is 7.5: use fp16");
  const std::string old = precision_refusal(DType::f16, {7, 0});
  EXPECT_NE(old.find("7.5 or newer"), std::string::npos) << old;
  EXPECT_NE(old.find("this GPU is 7.0"), std::string::npos) << old;
  EXPECT_NE(old.find("device: cpu"), std::string::npos) << old;
}

TEST(DeviceSupport, ForceSm75CapsNewerGpusOnly) {
  for (const Gpu& g : kGpus) {
    SCOPED_TRACE(g.name);
    for (const char* off : {static_cast<const char*>(nullptr), "", "0"}) {
      EXPECT_EQ(effective_capability(g.cc, off).value(), g.cc.value());
    }
    const ComputeCapability forced = effective_capability(g.cc, "1");
    EXPECT_EQ(forced.value(), std::min(g.cc.value(), 75));
    // Forced, an H200 answers as a T4 does.
    EXPECT_FALSE(precision_refusal(DType::bf16, forced).empty());
    EXPECT_FALSE(attention_tensor_cores(DType::bf16, forced));
  }
  EXPECT_EQ(precision_refusal(DType::bf16, effective_capability({9, 0}, "1")),
            precision_refusal(DType::bf16, {7, 5}));
}

TEST(DeviceSupport, ForceSm75RejectsOtherValues) {
  for (const char* bad : {"yes", "true", "2", " 1"}) {
    try {
      (void)effective_capability({9, 0}, bad);
      ADD_FAILURE() << "accepted AMPCTL_FORCE_SM75=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      EXPECT_NE(std::string(e.what()).find("AMPCTL_FORCE_SM75"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ampctl

#ifdef AMPCTL_TEST_CUDA_PLUGIN
// The CUDA plugin of this build loads into a program that does not link it (dlopen with
// RTLD_NOW: every reference it makes to the core resolves against this program's exports), and
// answers without a device or driver: no GPU is 0 GPUs, not a crash.
#include <cstdlib>
#include <filesystem>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/cuda_plugin.h"
#include "ampctl/build_info.h"

namespace ampctl {
namespace {

TEST(CudaPlugin, LoadsIntoAProgramThatDoesNotLinkIt) {
  // This build's plugin where the build left it; in a carried bundle (scripts/gpu-bundle.sh) the
  // build folder is absent and the loader's own search finds the bundle's lib/ below the program.
  if (std::filesystem::exists(AMPCTL_TEST_CUDA_PLUGIN)) {
    ::setenv("AMPCTL_CUDA_PLUGIN", AMPCTL_TEST_CUDA_PLUGIN, 1);
  }
  std::string why;
  const CudaPluginApi* api = cuda_plugin(&why);
  ASSERT_NE(api, nullptr) << why;
  EXPECT_EQ(api->abi, kCudaPluginAbi);
  EXPECT_STREQ(api->version, AMPCTL_VERSION);
  EXPECT_EQ(api->make_nccl_communicator != nullptr, AMPCTL_HAVE_NCCL != 0);
  EXPECT_EQ(api->device_count(), cuda_device_count());
  if (api->device_count() == 0) {
    EXPECT_FALSE(api->capability(0).has_value());
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  }
}

}  // namespace
}  // namespace ampctl
#endif
