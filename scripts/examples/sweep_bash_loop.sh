#!/usr/bin/env bash
# A scripted sweep without the built-in command: a plain bash loop over `ampctl train --set ...`,
# one run directory per combination of scaler.init_scale x scaler.growth_interval. Finished runs
# (summary.json present) are skipped, so the loop can be re-run after an interruption (runs cut
# short are NOT resumed here; `ampctl sweep` does that: see scripts/examples/sweep_builtin.sh).
#   AMPCTL=build/ampctl OUT=sweeps/bash_loop scripts/examples/sweep_bash_loop.sh [extra --set flags]
set -euo pipefail
cd "$(dirname "$0")/../.."

AMPCTL=${AMPCTL:-build/ampctl}
CONFIG=${CONFIG:-configs/quickstart.yaml}
OUT=${OUT:-sweeps/bash_loop}
mkdir -p "$OUT"

status=0
for init_scale in 1024.0 65536.0; do
  for growth_interval in 20 2000; do
    dir="$OUT/init_scale=${init_scale},growth_interval=${growth_interval}"
    if [[ -f "$dir/summary.json" ]]; then
      echo "skip $dir (finished)"
      continue
    fi
    rm -rf "$dir"
    echo "train $dir"
    if ! "$AMPCTL" train --config "$CONFIG" --run-dir "$dir" \
        --set scaler.init_scale="$init_scale" --set scaler.growth_interval="$growth_interval" \
        --set training.max_steps=200 "$@" >"$OUT/$(basename "$dir").log" 2>&1; then
      echo "FAILED $dir: $(tail -n 1 "$OUT/$(basename "$dir").log")" >&2
      status=1
    fi
  done
done
exit $status
