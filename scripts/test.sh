#!/usr/bin/env bash
# The README's test command (and CI's, through .ci/run). Installs what is missing, then:
#   1. configures, builds (CUDA kernels too when nvcc is at /usr/local/cuda/bin) and runs every
#      test in build/ (cuda-labelled tests report "skipped" where no GPU is usable); then, on a
#      CPU with AVX-512, the CPU unit tests and the multi-rank GPT tests once more on the path of
#      a CPU without it (AMPCTL_CPU_ISA=avx2, OpenBLAS's Haswell kernels), so CI holds both
#      paths whatever CPU it runs on (skipped, with the reason, on a CPU whose best path is
#      already avx2 or that lacks AVX2);
#   2. builds the whole suite again with AddressSanitizer + UndefinedBehaviorSanitizer (GCC,
#      CPU only, build-asan/) and runs it: any sanitizer report fails its test;
#   3. scripts/fuzz.sh: builds the libFuzzer targets (clang, build-fuzz/) and runs each parser's
#      fuzzer for AMPCTL_FUZZ_SECONDS (default 60) seconds, two at a time, from a fixed seed
#      (AMPCTL_FUZZ_SEED, default 1): each run tries the same inputs in the same order, so a test
#      run's verdict does not depend on which inputs a random seed happened to reach. Exploring
#      (new seeds, longer runs) is `bash scripts/fuzz.sh SECONDS`, whose default seed is random.
# AMPCTL_QUICK=1 runs step 1 only (for developers). Arguments go to step 1's ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
bash scripts/setup.sh
# ccache (installed by setup.sh) makes a second run of this script, or one on another clone of the
# same sources, recompile only what changed; CCACHE_BASEDIR makes its keys independent of where
# the clone lies. AMPCTL_CCACHE=0 builds without it (a cold build: what a first run costs).
launcher=()
if [[ "${AMPCTL_CCACHE:-1}" == 1 ]] && command -v ccache >/dev/null; then
  # NOHASHDIR: the debug builds (-g1) would otherwise hash the clone's path and never hit.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# The same configuration as scripts/quickstart.sh's (keep them equal): build/ after a quickstart
# is then up to date for everything the quickstart built.
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPCTL_CUDA=AUTO "${launcher[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
times=("tests:      $((SECONDS - start)) s")

# 1b. The avx2 path (docs/reference.md, AMPCTL_CPU_ISA): every cpu-labelled GoogleTest case (the
# CLI, docs and build checks run the same code on either path, and take most of step 1's time)
# and the multi-rank GPT tests, with OpenBLAS on the kernels an AVX2 CPU gets.
step=$SECONDS
best=$("$BUILD_DIR/ampctl" --version | sed -n 's/^cpu path: \([a-z0-9]*\).*/\1/p')
if [[ -n "${AMPCTL_CPU_ISA:-}" ]]; then
  echo "test.sh: skipped the avx2 pass: AMPCTL_CPU_ISA=$AMPCTL_CPU_ISA is set, step 1 ran that path"
elif [[ $# -gt 0 ]]; then
  echo "test.sh: skipped the avx2 pass: arguments given (they select step 1's tests only)"
elif [[ "$best" == avx2 ]]; then
  echo "test.sh: skipped the avx2 pass: this CPU has no AVX-512, step 1 ran the avx2 path"
elif [[ "$best" != avx512 ]]; then
  echo "test.sh: skipped the avx2 pass: this CPU lacks AVX2 + FMA + F16C (its path: ${best:-?})"
else
  AMPCTL_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --test-dir "$BUILD_DIR" --output-on-failure \
    -j "$(nproc)" -L cpu -E '^(cli|docs|deps|build|gpu_check|cuda)\.'
  AMPCTL_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell ctest --test-dir "$BUILD_DIR" --output-on-failure \
    -j "$(nproc)" -R '^cli\.(dist_lm_|dist_grad_amax$|version$)'
  times+=("avx2 path:  $((SECONDS - step)) s")
fi

if [[ "${AMPCTL_QUICK:-0}" == 1 ]]; then
  echo "test.sh: AMPCTL_QUICK=1: skipped the sanitizer build and the fuzzers"
  exit 0
fi

# 2. ASan + UBSan at -O1 -g1 (line tables are all a report needs): half the compile time of
# -O2 -g, which dominates this step. No NDEBUG, so assertions stay on. exitcode=86: a sanitizer
# report must not pass for the exit code 1 a test may expect.
step=$SECONDS
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
cmake -S . -B "$ASAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DAMPCTL_SANITIZE=ON -DAMPCTL_CUDA=OFF "${launcher[@]}"
cmake --build "$ASAN_BUILD_DIR" -j "$(nproc)"
ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1:exitcode=86 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=86 \
  ctest --test-dir "$ASAN_BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600
times+=("sanitizers: $((SECONDS - step)) s")

# 3. Fuzzing.
step=$SECONDS
FUZZ_SEED=${AMPCTL_FUZZ_SEED:-1} bash scripts/fuzz.sh "${AMPCTL_FUZZ_SECONDS:-60}"
times+=("fuzzing:    $((SECONDS - step)) s")

printf 'test.sh: %s\n' "${times[@]}" "total:      $((SECONDS - start)) s"
