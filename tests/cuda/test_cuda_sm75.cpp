// Issue 33 on a real GPU: the start-of-run precision check asks the device its compute
// capability, and AMPCTL_FORCE_SM75=1 makes a newer GPU answer as a T4 (sm_75). The decisions
// themselves are tested on the CPU for every GPU generation (unit/backend/test_device_support.cpp);
// the sm_75 kernel paths run under the CPU-reference table (ampctl_test_cuda with
// AMPCTL_FORCE_SM75=1: scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "ampctl/backend/backend.h"
#include "ampctl/backend/cuda_plugin.h"
#include "ampctl/backend/device_support.h"
#include "ampctl/core/error.h"
#include "ampctl/train/build.h"

namespace ampctl::test {
namespace {

// Sets AMPCTL_FORCE_SM75 for one scope, then puts back what the process had (gpu-check runs
// this binary under AMPCTL_FORCE_SM75=1 too).
class ForceSm75 {
 public:
  explicit ForceSm75(const char* value) {
    if (const char* old = std::getenv("AMPCTL_FORCE_SM75")) m_old = old;
    ::setenv("AMPCTL_FORCE_SM75", value, 1);
  }
  ~ForceSm75() {
    if (m_old) {
      ::setenv("AMPCTL_FORCE_SM75", m_old->c_str(), 1);
    } else {
      ::unsetenv("AMPCTL_FORCE_SM75");
    }
  }
  ForceSm75(const ForceSm75&) = delete;
  ForceSm75& operator=(const ForceSm75&) = delete;

 private:
  std::optional<std::string> m_old;
};

std::string refusal(config::Precision p) {
  try {
    train::check_device_precision("cuda:0", p);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config) << e.what();
    return e.what();
  }
  return "";
}

TEST(CudaSm75, DeviceCapabilityDecidesTheRunsPrecision) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const std::optional<ComputeCapability> cc = cuda_capability(0);
  ASSERT_TRUE(cc.has_value());
  EXPECT_GE(cc->value(), kMinComputeCapability.value()) << "this build's floor is sm_75";
  EXPECT_EQ(refusal(config::Precision::fp16), "");
  EXPECT_EQ(refusal(config::Precision::fp32), "");
  // As the process is run: AMPCTL_FORCE_SM75=1 (gpu-check's second pass) decides as a T4.
  const ComputeCapability used = effective_capability(*cc, std::getenv("AMPCTL_FORCE_SM75"));
  EXPECT_EQ(refusal(config::Precision::bf16).empty(), used.value() >= 80) << used.str();
}

TEST(CudaSm75, ForcedSm75RefusesBf16AsAT4Does) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  const ForceSm75 force("1");
  const std::string why = refusal(config::Precision::bf16);
  EXPECT_NE(why.find("bf16 needs compute capability 8.0; this GPU is 7.5: use fp16"),
            std::string::npos)
      << why;
  EXPECT_EQ(refusal(config::Precision::fp16), "");
}

}  // namespace
}  // namespace ampctl::test
