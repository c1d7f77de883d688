#!/usr/bin/env bash
# The README's test command: installs what is missing, configures, builds (CUDA kernels too when
# nvcc is at /usr/local/cuda/bin) and runs every test. cuda-labelled tests report "skipped"
# where no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPCTL_CUDA=AUTO
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
