// The CPU's instruction path: the one place that decides which vector code the host runs
// (docs/design.md, "The CPU's instruction path"). Every dispatch point asks cpu_isa() (the CPU
// backend's packed GEMM and vector passes, the loss-scaling passes, the batch conversions), so a
// process runs one path throughout:
//   avx512    AVX-512 F/BW/VL/DQ + FMA + F16C: the packed GEMM engine and the vector passes
//             (with AVX512_BF16 the bf16 dot-product kernel, with AMX the tiles: cpu_amx()).
//   avx2      AVX2 + FMA + F16C, without AVX-512: the same packed GEMM engine (f32 kernel, 6 x 16
//             YMM tiles) and vector passes built on AVX2 (cpu_gemm_avx2.cpp,
//             cpu_vector_avx2.cpp), the F16C / AVX2 conversions and the AVX2 unscale pass.
//   portable  no vector intrinsics of ampctl's own (OpenBLAS keeps its own kernels).
// Chosen once, at first use, as the best the CPU has; AMPCTL_CPU_ISA=avx512|avx2|portable forces
// one (config::check_environment refuses, at a command's start, a path the CPU lacks).
#pragma once

#include <string>

namespace ampctl {

enum class CpuIsa { portable, avx2, avx512 };  // ordered: a path runs on every CPU of a later one

const char* cpu_isa_name(CpuIsa isa);  // "portable", "avx2", "avx512"

// What the CPU (and the OS, for the vector registers' state) supports.
struct CpuCaps {
  bool avx2 = false;         // AVX2 + FMA + F16C
  bool avx512 = false;       // AVX-512 F, BW, VL, DQ + FMA + F16C
  bool avx512_bf16 = false;  // and AVX512_BF16
  bool amx_bf16 = false;     // and AMX-TILE + AMX-BF16 (the OS's leave is asked separately)
};

struct CpuIsaChoice {
  CpuIsa best = CpuIsa::portable;  // the best path the CPU has
  CpuIsa isa = CpuIsa::portable;   // the path this process runs
  bool forced = false;             // chosen by AMPCTL_CPU_ISA
  bool bf16_dot = false;           // avx512 with AVX512_BF16: the VDPBF16PS kernel
  bool amx = false;  // avx512 with AMX-BF16, AMPCTL_CPU_AMX not 0 (and the OS's leave)
  // Non-empty when AMPCTL_CPU_ISA asks for a path this CPU lacks: the refusal's message (the
  // process then runs `best`, and a command refuses to start: check_cpu_isa_environment).
  std::string refused;
};

// The decision from the CPU's features and the two variables' values (null: unset); pure, so the
// tests can give it any CPU. A value AMPCTL_CPU_ISA does not list counts as unset here
// (config::check_environment refuses it with its near miss). amx here means the CPU has the AMX
// units and AMPCTL_CPU_AMX allows them; cpu_isa_choice() also asks the OS for the tile state.
CpuIsaChoice decide_cpu_isa(const CpuCaps& caps, const char* isa_env, const char* amx_env);

const CpuCaps& cpu_caps();             // probed once (CPUID and the OS's XSAVE support)
const CpuIsaChoice& cpu_isa_choice();  // decided once, from cpu_caps() and the environment
inline CpuIsa cpu_isa() {
  return cpu_isa_choice().isa;
}
inline bool cpu_amx() {
  return cpu_isa_choice().amx;
}

// One line for `ampctl --version`, e.g. "avx512 + amx (the CPU's best)" or
// "avx2 (forced by AMPCTL_CPU_ISA; the CPU's best: avx512)".
std::string cpu_isa_description();

// Throws Error{config} (exit 2) when AMPCTL_CPU_ISA forces a path the CPU lacks, naming the
// variable, the value and what the CPU has.
void check_cpu_isa_environment();

}  // namespace ampctl
