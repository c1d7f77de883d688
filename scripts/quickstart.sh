#!/usr/bin/env bash
# The README's run command: installs what is missing, builds ampctl (CUDA too when nvcc is at
# /usr/local/cuda/bin) and trains configs/quickstart.yaml (on a GPU when one is usable, else on
# the CPU). Extra arguments go to `ampctl train`, e.g. --set precision=bf16.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPCTL_CUDA=AUTO >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target ampctl
exec "$BUILD_DIR/ampctl" train --config configs/quickstart.yaml "$@"
