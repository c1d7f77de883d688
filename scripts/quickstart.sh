#!/usr/bin/env bash
# The README's run command: installs what building needs (scripts/setup.sh build: not the test
# data, clang, benchmarks or Chromium, which scripts/test.sh adds), builds ampctl, and its CUDA
# plugin only where a GPU is usable (nvcc at /usr/local/cuda/bin and `nvidia-smi -L` lists a GPU:
# compiling the kernels for every supported GPU takes longer than the rest of ampctl), and trains
# configs/quickstart.yaml (on that GPU, else on the CPU). Extra arguments go to `ampctl train`,
# e.g. --set precision=bf16.
#
# It configures build/ exactly as scripts/test.sh does (the same options and ccache launcher), so
# the test command that follows rebuilds nothing this one built.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh build
launcher=()
if [[ "${AMPCTL_CCACHE:-1}" == 1 ]] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPCTL_CUDA=AUTO "${launcher[@]}" \
  >/dev/null
targets=(ampctl)
if [[ -x /usr/local/cuda/bin/nvcc || -n "$(command -v nvcc)" ]] &&
  nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  targets+=(ampctl_cuda)
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"
exec "$BUILD_DIR/ampctl" train --config configs/quickstart.yaml "$@"
