// The CPU's instruction path (cpu_isa.h). The probe asks CPUID for each extension and
// __builtin_cpu_supports for those it knows, which also checks that the OS saves the YMM / ZMM
// and mask registers (XGETBV); F16C, AVX512_BF16 and the AMX bits come from CPUID directly (not
// every compiler's __builtin_cpu_supports knows them; their registers are covered by the AVX /
// AVX-512 checks, and the AMX tile state is asked of Linux by arch_prctl before its first use).
#include "ampctl/core/cpu_isa.h"

#include <cstdlib>
#include <cstring>

#include "ampctl/core/error.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define AMPCTL_ISA_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#else
#define AMPCTL_ISA_X86 0
#endif

namespace ampctl {
namespace {

constexpr const char* kVariable = "AMPCTL_CPU_ISA";

bool parse_isa(const char* value, CpuIsa* out) {
  if (value == nullptr) return false;
  for (CpuIsa isa : {CpuIsa::portable, CpuIsa::avx2, CpuIsa::avx512}) {
    if (std::strcmp(value, cpu_isa_name(isa)) == 0) {
      *out = isa;
      return true;
    }
  }
  return false;
}

// "avx2 and portable", "portable": the paths a CPU whose best is `best` can run, best first.
std::string paths_up_to(CpuIsa best) {
  switch (best) {
    case CpuIsa::avx512:
      return "avx512, avx2 and portable";
    case CpuIsa::avx2:
      return "avx2 and portable";
    case CpuIsa::portable:
      break;
  }
  return "portable only";
}

const char* requirement(CpuIsa isa) {
  return isa == CpuIsa::avx512 ? "AVX-512 F, BW, VL and DQ with FMA and F16C"
                               : "AVX2 with FMA and F16C";
}

CpuCaps probe_caps() {
  CpuCaps caps;
#if AMPCTL_ISA_X86
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  const bool fma = __builtin_cpu_supports("fma");
  caps.avx2 = f16c && fma && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2");
  caps.avx512 = caps.avx2 && __builtin_cpu_supports("avx512f") &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("avx512dq");
  // AVX512_BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5.
  if (caps.avx512 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    caps.avx512_bf16 = ((eax >> 5) & 1u) != 0;
  }
  // AMX: CPUID leaf 7, sub-leaf 0, EDX bit 22 (AMX-BF16) and bit 24 (AMX-TILE).
  if (caps.avx512_bf16 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    caps.amx_bf16 = ((edx >> 22) & 1u) != 0 && ((edx >> 24) & 1u) != 0;
  }
#endif
  return caps;
}

// Linux hands out the 8 KiB AMX tile state only on request (ARCH_REQ_XCOMP_PERM for XTILEDATA,
// feature 18); asked once per process.
bool os_grants_amx_tiles() {
#if AMPCTL_ISA_X86 && defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512:
      return "avx512";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::portable:
      break;
  }
  return "portable";
}

CpuIsaChoice decide_cpu_isa(const CpuCaps& caps, const char* isa_env, const char* amx_env) {
  CpuIsaChoice c;
  c.best = caps.avx512 ? CpuIsa::avx512 : caps.avx2 ? CpuIsa::avx2 : CpuIsa::portable;
  c.isa = c.best;
  CpuIsa want = CpuIsa::portable;
  if (parse_isa(isa_env, &want)) {
    if (want <= c.best) {
      c.isa = want;
      c.forced = true;
    } else {
      c.refused = std::string(kVariable) + "=" + isa_env +
                  " forces a path this CPU lacks: it has no " + requirement(want) +
                  " (its paths: " + paths_up_to(c.best) + ")";
    }
  }
  c.bf16_dot = c.isa == CpuIsa::avx512 && caps.avx512_bf16;
  const bool amx_allowed = !(amx_env && std::strcmp(amx_env, "0") == 0);
  c.amx = c.bf16_dot && caps.amx_bf16 && amx_allowed;
  return c;
}

const CpuCaps& cpu_caps() {
  static const CpuCaps caps = probe_caps();
  return caps;
}

const CpuIsaChoice& cpu_isa_choice() {
  static const CpuIsaChoice choice = [] {
    CpuIsaChoice c =
        decide_cpu_isa(cpu_caps(), std::getenv(kVariable), std::getenv("AMPCTL_CPU_AMX"));
    if (c.amx) c.amx = os_grants_amx_tiles();
    return c;
  }();
  return choice;
}

std::string cpu_isa_description() {
  const CpuIsaChoice& c = cpu_isa_choice();
  std::string text = cpu_isa_name(c.isa);
  if (c.amx) {
    text += " + amx";
  } else if (c.bf16_dot) {
    text += " + avx512_bf16";
  }
  if (c.forced) {
    text +=
        std::string(" (forced by ") + kVariable + "; the CPU's best: " + cpu_isa_name(c.best) + ")";
  } else {
    text += " (the CPU's best)";
  }
  return text;
}

void check_cpu_isa_environment() {
  // The variable as it is now (cpu_isa_choice() read it once, at its first use).
  const CpuIsaChoice c = decide_cpu_isa(cpu_caps(), std::getenv(kVariable), nullptr);
  if (c.refused.empty()) return;
  throw Error{ErrorKind::config, c.refused,
              std::string("unset ") + kVariable + " to run the CPU's best path (" +
                  cpu_isa_name(c.best) + ")"};
}

}  // namespace ampctl
