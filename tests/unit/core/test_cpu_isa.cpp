// The CPU's instruction path (core/cpu_isa.h): decide_cpu_isa on every kind of CPU (given as its
// features, so the refusals are tested on a CPU that has everything), and the process's own
// choice against the dispatch points that follow it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ampctl/core/convert.h"
#include "ampctl/core/cpu_isa.h"
#include "ampctl/core/error.h"

namespace ampctl {
namespace {

CpuCaps caps_of(CpuIsa best, bool bf16 = false, bool amx = false) {
  CpuCaps c;
  c.avx2 = best >= CpuIsa::avx2;
  c.avx512 = best >= CpuIsa::avx512;
  c.avx512_bf16 = c.avx512 && bf16;
  c.amx_bf16 = c.avx512_bf16 && amx;
  return c;
}

TEST(CpuIsa, UnsetTakesTheBestTheCpuHas) {
  for (CpuIsa best : {CpuIsa::portable, CpuIsa::avx2, CpuIsa::avx512}) {
    const CpuIsaChoice c = decide_cpu_isa(caps_of(best), nullptr, nullptr);
    EXPECT_EQ(c.best, best);
    EXPECT_EQ(c.isa, best);
    EXPECT_FALSE(c.forced);
    EXPECT_TRUE(c.refused.empty()) << c.refused;
  }
}

TEST(CpuIsa, EveryPathUpToTheBestCanBeForced) {
  for (CpuIsa best : {CpuIsa::portable, CpuIsa::avx2, CpuIsa::avx512}) {
    for (CpuIsa want : {CpuIsa::portable, CpuIsa::avx2, CpuIsa::avx512}) {
      const CpuIsaChoice c = decide_cpu_isa(caps_of(best, true, true), cpu_isa_name(want), nullptr);
      if (want <= best) {
        EXPECT_EQ(c.isa, want) << cpu_isa_name(want) << " on " << cpu_isa_name(best);
        EXPECT_TRUE(c.forced);
        EXPECT_TRUE(c.refused.empty()) << c.refused;
      } else {
        // Refused, naming the variable, the value, what is missing and what the CPU has; the
        // process would still run only instructions the CPU has.
        EXPECT_EQ(c.isa, best);
        EXPECT_FALSE(c.forced);
        EXPECT_NE(c.refused.find(std::string("AMPCTL_CPU_ISA=") + cpu_isa_name(want)),
                  std::string::npos)
            << c.refused;
        EXPECT_NE(c.refused.find(want == CpuIsa::avx512 ? "no AVX-512" : "no AVX2"),
                  std::string::npos)
            << c.refused;
        const std::string has =
            best == CpuIsa::avx2 ? "its paths: avx2 and portable" : "its paths: portable only";
        EXPECT_NE(c.refused.find(has), std::string::npos) << c.refused;
      }
    }
  }
}

TEST(CpuIsa, AnUnlistedValueCountsAsUnsetHere) {
  // config::check_environment refuses it with its near miss before a command runs.
  for (const char* v : {"", "avx", "AVX2", "avx512 "}) {
    const CpuIsaChoice c = decide_cpu_isa(caps_of(CpuIsa::avx512), v, nullptr);
    EXPECT_EQ(c.isa, CpuIsa::avx512) << "'" << v << "'";
    EXPECT_FALSE(c.forced);
    EXPECT_TRUE(c.refused.empty());
  }
}

TEST(CpuIsa, TheBf16KernelsAndAmxOnlyOnTheAvx512Path) {
  const CpuCaps all = caps_of(CpuIsa::avx512, true, true);
  CpuIsaChoice c = decide_cpu_isa(all, nullptr, nullptr);
  EXPECT_TRUE(c.bf16_dot);
  EXPECT_TRUE(c.amx);
  c = decide_cpu_isa(all, nullptr, "0");  // AMPCTL_CPU_AMX=0: VDPBF16PS instead of the tiles
  EXPECT_TRUE(c.bf16_dot);
  EXPECT_FALSE(c.amx);
  c = decide_cpu_isa(all, nullptr, "1");
  EXPECT_TRUE(c.amx);
  for (const char* lower : {"avx2", "portable"}) {
    c = decide_cpu_isa(all, lower, nullptr);
    EXPECT_FALSE(c.bf16_dot) << lower;
    EXPECT_FALSE(c.amx) << lower;
  }
  c = decide_cpu_isa(caps_of(CpuIsa::avx512, true, false), nullptr, nullptr);
  EXPECT_TRUE(c.bf16_dot);
  EXPECT_FALSE(c.amx);
  c = decide_cpu_isa(caps_of(CpuIsa::avx512), nullptr, nullptr);
  EXPECT_FALSE(c.bf16_dot);
}

TEST(CpuIsa, TheProcessRunsThePathTheEnvironmentAsks) {
  // What this process (this test binary) runs: AMPCTL_CPU_ISA where the CPU has it, else the
  // best; scripts/test.sh runs the CPU tests once more with it set.
  const CpuIsaChoice want =
      decide_cpu_isa(cpu_caps(), std::getenv("AMPCTL_CPU_ISA"), std::getenv("AMPCTL_CPU_AMX"));
  const CpuIsaChoice& got = cpu_isa_choice();
  EXPECT_EQ(got.isa, want.isa);
  EXPECT_EQ(got.best, want.best);
  EXPECT_EQ(got.forced, want.forced);
  EXPECT_EQ(got.bf16_dot, want.bf16_dot);
  if (!want.amx) {
    EXPECT_FALSE(got.amx);  // amx also needs the OS's leave
  }
  EXPECT_EQ(cpu_isa(), got.isa);
  std::cout << "cpu path: " << cpu_isa_description() << "\n";
  // The batch conversions follow it.
  const std::string conv = convert_fast_path_name();
  switch (got.isa) {
    case CpuIsa::avx512:
      EXPECT_EQ(conv, "f16: avx512f, bf16: avx512f");
      break;
    case CpuIsa::avx2:
      EXPECT_EQ(conv, "f16: f16c, bf16: avx2");
      break;
    case CpuIsa::portable:
      EXPECT_EQ(conv, "portable");
      break;
  }
  const std::string text = cpu_isa_description();
  EXPECT_EQ(text.rfind(cpu_isa_name(got.isa), 0), 0u) << text;
  EXPECT_EQ(text.find("forced by AMPCTL_CPU_ISA") != std::string::npos, got.forced) << text;
}

}  // namespace
}  // namespace ampctl
