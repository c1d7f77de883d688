#!/usr/bin/env bash
# What gradient numerics cost (logging.numerics_every; docs/reference.md "Gradient numerics"):
# the quickstart model (fp16, 32-256-256-10, batch 128) trained with numerics off, sampled every
# step, and sampled every 100 steps, interleaved round by round so that a noisy shared machine
# hits every column alike. Prints each column's median steady step time and the ratios to "off".
#
#   scripts/bench_numerics.sh [--build DIR] [--rounds N] [--steps N] [--device cpu|cuda]
#
#   --build DIR   the build directory holding ampctl (default: build)
#   --rounds N    interleaved rounds (default 5); each number is the median over them
#   --steps N     training steps per run (default 400)
#   --device D    cpu (default) or cuda
#
# The step time is summary.json's steady_step_ms (the mean step time after the first logging
# interval), so data loading and setup are not in it.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build
ROUNDS=5
STEPS=400
DEVICE=cpu
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench_numerics.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_numerics.sh: no $AMPCTL (build first)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

declare -A SETTING=([off]=0 [every_1]=1 [every_100]=100)
COLUMNS=(off every_1 every_100)
for ((r = 1; r <= ROUNDS; ++r)); do
  for c in "${COLUMNS[@]}"; do
    dir=$WORK/$c-$r
    "$AMPCTL" train --config configs/quickstart.yaml --run-dir "$dir" \
      --set device="$DEVICE" --set training.max_steps="$STEPS" --set training.eval_every=0 \
      --set logging.every_steps=50 --set logging.numerics_every="${SETTING[$c]}" >/dev/null 2>&1
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steady_step_ms"])' \
      "$dir/summary.json" >>"$WORK/$c.ms"
    rm -rf "$dir"
  done
  echo "round $r/$ROUNDS done" >&2
done
python3 - "$WORK" "${COLUMNS[@]}" <<'PY'
import statistics, sys
work, cols = sys.argv[1], sys.argv[2:]
med = {c: statistics.median(float(x) for x in open(f"{work}/{c}.ms")) for c in cols}
print(f"{'numerics':<12} {'step ms (median)':>18} {'ratio to off':>14}")
for c in cols:
    print(f"{c:<12} {med[c]:>18.4f} {med[c] / med['off']:>14.3f}")
PY
