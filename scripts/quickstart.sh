#!/usr/bin/env bash
# The README's run command: installs what building needs (scripts/setup.sh build: not the test
# data, clang, benchmarks or Chromium, which scripts/test.sh adds), builds ampctl (CUDA too when
# nvcc is at /usr/local/cuda/bin) and trains configs/quickstart.yaml (on a GPU when one is usable,
# else on the CPU). Extra arguments go to `ampctl train`, e.g. --set precision=bf16.
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
cmake --build "$BUILD_DIR" -j "$(nproc)" --target ampctl
exec "$BUILD_DIR/ampctl" train --config configs/quickstart.yaml "$@"
