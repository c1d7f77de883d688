#!/usr/bin/env bash
# The whole GPT benchmark of scripts/bench/bench_gpt_gpu.py (GPT-2 small against PyTorch AMP eager and
# torch.compile, and the T x n_embd scaling table) as one device call of its own, from the same
# bundle scripts/gpu-check.sh runs (gpu-bundle/ampctl-gpu-bundle.tar.xz, made by
# scripts/gpu-bundle.sh): it unpacks the bundle into a temporary folder, puts the bundle's and
# the machine's CUDA 13 cuBLAS on LD_LIBRARY_PATH, and runs the benchmark under `timeout`.
# gpu-check runs the same benchmark without the scaling table, to stay inside its time budget.
#
# Usage (GPU machine, repo root): bash scripts/bench/bench_gpt_gpu.sh [bench_gpt_gpu.py options]
# Writes bench_gpt.log and bench_gpt.json to $OUT (or gpu-bundle/check-logs/). About 5 minutes
# on an H200.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

ARCHIVE=gpu-bundle/ampctl-gpu-bundle.tar.xz
RESULT_DIR=${OUT:-gpu-bundle/check-logs}
mkdir -p "$RESULT_DIR"
if [[ ! -f $ARCHIVE ]]; then
  echo "bench_gpt_gpu: $ARCHIVE not found: run scripts/gpu-bundle.sh on a development machine" >&2
  exit 2
fi
B=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-gpt-bench.XXXXXX")
trap 'rm -rf "$B"' EXIT
if command -v xz >/dev/null; then
  tar -C "$B" -xJf "$ARCHIVE"
else
  python3 -m tarfile -e "$ARCHIVE" "$B"
fi || {
  echo "bench_gpt_gpu: could not unpack $ARCHIVE" >&2
  exit 2
}

# The machine's CUDA 13 cuBLAS, as scripts/gpu-check.sh finds it.
lib_path=$B/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64; do
  [[ -e $d/libcublasLt.so.13 ]] && { lib_path+=:$d; break; }
done
if [[ $lib_path == "$B/lib" ]]; then
  site=$(timeout 30 python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  if [[ -n $site && -d $site/nvidia ]]; then
    d=$(find "$site/nvidia" -maxdepth 4 -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
    [[ -n $d ]] && lib_path+=:$(dirname "$d")
  fi
fi
export LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd "$B/ampctl" 2>&1 | grep -q "version .GLIBCXX\|version .CXXABI\|libstdc++.*not found"; then
  export LD_LIBRARY_PATH=$B/lib/fallback:$LD_LIBRARY_PATH
fi

timeout --kill-after=10 560 python3 scripts/bench/bench_gpt_gpu.py --ampctl "$B/ampctl" \
  --json "$RESULT_DIR/bench_gpt.json" "$@" 2>&1 | tee "$RESULT_DIR/bench_gpt.log"
exit "${PIPESTATUS[0]}"
