#!/usr/bin/env bash
# What grad_amax costs (docs/reference.md "grad_amax"): it is always on in fp16/bf16, so the
# comparison is two binaries, one without it (a build of the commit before it, e.g. main's) and
# one with it, trained on the same config, interleaved round by round so that a noisy shared
# machine hits both columns alike. Prints each column's median steady step time and the ratio.
#
#   scripts/bench_grad_amax.sh --base AMPCTL_WITHOUT [--new AMPCTL_WITH] [--rounds N]
#                              [--steps N] [--device cpu|cuda] [--config FILE]...
#
#   --base FILE   the ampctl binary without grad_amax (required)
#   --new FILE    the ampctl binary with it (default: build/ampctl)
#   --rounds N    interleaved rounds (default 5); each number is the median over them
#   --steps N     training steps per run (default 300)
#   --device D    cpu (default) or cuda
#   --config F    a config to time (repeatable; default: configs/quickstart.yaml and
#                 configs/gpt_fortunes.yaml)
#
# The step time is summary.json's steady_step_ms (the mean step time after the first logging
# interval), so data loading and setup are not in it. Both binaries must train the config to
# the same losses (checked: the final loss is compared), which is what "grad_amax changes no
# training bit" promises. A model whose roundings are not instrumented (the console says so)
# has no grad_amax, and its ratio measures nothing but noise.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=
NEW=build/ampctl
ROUNDS=5
STEPS=300
DEVICE=cpu
CONFIGS=()
while (($#)); do
  case $1 in
    --base) BASE=$2; shift 2 ;;
    --new) NEW=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --config) CONFIGS+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench_grad_amax.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((${#CONFIGS[@]})) || CONFIGS=(configs/quickstart.yaml configs/gpt_fortunes.yaml)
for bin in "$BASE" "$NEW"; do
  [[ -n $bin && -x $bin ]] || { echo "bench_grad_amax.sh: no binary '$bin' (see --help)" >&2; exit 2; }
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

for cfg in "${CONFIGS[@]}"; do
  name=$(basename "$cfg" .yaml)
  for ((r = 1; r <= ROUNDS; ++r)); do
    for col in base new; do
      bin=$BASE
      [[ $col == new ]] && bin=$NEW
      dir=$WORK/$name-$col-$r
      "$bin" train --config "$cfg" --run-dir "$dir" --set device="$DEVICE" \
        --set training.max_steps="$STEPS" --set training.eval_every=0 \
        --set logging.every_steps=50 >"$WORK/$name-$col.log" 2>&1 ||
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
print(f"{'config':<16} {'without ms':>11} {'with ms':>9} {'ratio':>7}  same final loss")
for cfg in cfgs:
    name = os.path.basename(cfg)[:-5]
    med = {c: statistics.median(float(x) for x in open(f"{work}/{name}-{c}.ms")) for c in ("base", "new")}
    same = open(f"{work}/{name}-base.loss").read() == open(f"{work}/{name}-new.loss").read()
    print(f"{name:<16} {med['base']:>11.4f} {med['new']:>9.4f} {med['new'] / med['base']:>7.3f}  {same}")
PY
