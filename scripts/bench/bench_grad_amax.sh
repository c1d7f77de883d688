#!/usr/bin/env bash
# What grad_amax costs (logging.grad_amax; docs/reference.md "grad_amax"): each config trained
# with it off and on, interleaved round by round so that a noisy shared machine hits both
# columns alike. Prints each column's median steady step time, the ratio, and whether both
# columns ended at the same final loss (grad_amax changes no training bit).
#
#   scripts/bench/bench_grad_amax.sh [--build DIR] [--rounds N] [--steps N] [--device cpu|cuda]
#                              [--config FILE]...
#
#   --build DIR   the build directory holding ampctl (default: build)
#   --rounds N    interleaved rounds (default 5); each number is the median over them
#   --steps N     training steps per run (default 300)
#   --device D    cpu (default) or cuda
#   --config F    a config to time (repeatable; default: configs/quickstart.yaml and
#                 configs/gpt_fortunes.yaml)
#
# Columns: each column's median step time; ratio, the median over the rounds of on / off (a
# round's two runs ran back to back, so the ratio cancels the machine's drift; which of the two
# runs first alternates round by round), and its range.
# The step time is summary.json's steady_step_ms (the mean step time after the first logging
# interval), so data loading and setup are not in it. Every model's roundings are instrumented
# on the CPU (the MLP, the CNN, the GPT); the GPT on CUDA in fp16/bf16 is not (the console says
# so) and has no grad_amax, so its ratio there measures noise only.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=build
ROUNDS=5
STEPS=300
DEVICE=cpu
CONFIGS=()
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --config) CONFIGS+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench_grad_amax.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((${#CONFIGS[@]})) || CONFIGS=(configs/quickstart.yaml configs/gpt_fortunes.yaml)
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_grad_amax.sh: no $AMPCTL (build first)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

for cfg in "${CONFIGS[@]}"; do
  name=$(basename "$cfg" .yaml)
  for ((r = 1; r <= ROUNDS; ++r)); do
    # Alternating which column runs first cancels what running second costs or gains.
    cols=(off on)
    ((r % 2 == 0)) && cols=(on off)
    for col in "${cols[@]}"; do
      dir=$WORK/$name-$col-$r
      flag=false
      [[ $col == on ]] && flag=true
      "$AMPCTL" train --config "$cfg" --run-dir "$dir" --set device="$DEVICE" \
        --set training.max_steps="$STEPS" --set training.eval_every=0 \
        --set logging.every_steps=50 --set logging.grad_amax=$flag >"$WORK/$name-$col.log" 2>&1 ||
        { echo "bench_grad_amax.sh: $col run of $cfg failed:" >&2; tail -5 "$WORK/$name-$col.log" >&2; exit 1; }
      python3 - "$dir/summary.json" "$WORK/$name-$col" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
open(sys.argv[2] + ".ms", "a").write(f"{s['steady_step_ms']}\n")
open(sys.argv[2] + ".loss", "w").write(repr(s.get("final_loss")))
PY
      rm -rf "$dir"
    done
    echo "$name: round $r/$ROUNDS done" >&2
  done
done
python3 - "$WORK" "${CONFIGS[@]}" <<'PY'
import os, statistics, sys
work, cfgs = sys.argv[1], sys.argv[2:]
print(f"{'config':<16} {'off ms':>9} {'on ms':>9} {'ratio':>7} {'range':>13} same final loss")
for cfg in cfgs:
    name = os.path.basename(cfg)[:-5]
    ms = {c: [float(x) for x in open(f"{work}/{name}-{c}.ms")] for c in ("off", "on")}
    med = {c: statistics.median(v) for c, v in ms.items()}
    # Each round's two runs ran back to back: their ratio cancels the machine's slow drift.
    ratios = sorted(on / off for off, on in zip(ms["off"], ms["on"]))
    same = open(f"{work}/{name}-off.loss").read() == open(f"{work}/{name}-on.loss").read()
    print(f"{name:<16} {med['off']:>9.4f} {med['on']:>9.4f} {statistics.median(ratios):>7.3f} "
          f"{ratios[0]:>6.3f}-{ratios[-1]:<6.3f} {same}")
PY
