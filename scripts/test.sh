#!/usr/bin/env bash
# The README's test command (and CI's, through .ci/run). Installs what is missing, then:
#   1. configures, builds (CUDA kernels too when nvcc is at /usr/local/cuda/bin) and runs every
#      test in build/ (cuda-labelled tests report "skipped" where no GPU is usable);
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
