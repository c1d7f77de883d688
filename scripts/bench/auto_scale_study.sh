#!/usr/bin/env bash
# Study (not a test): scaler.policy auto against PyTorch's rule from good and bad starting scales
# (docs/performance.md, "The auto rule's defaults, measured"). Trains CONFIG five times, every run with
# grad_amax and gradient numerics on every N-th step:
#   pytorch from its default init_scale (2^16), pytorch from 2^40, pytorch from 2^-20,
#   auto from 2^40, auto from 2^-20
# and prints one row per run: skipped steps, the first skipped step, final / min / max scale,
# the final and best evaluation loss, the mean underflow fraction of the numerics samples and
# the wall time. Extra --set arguments go to every run (e.g. --set scaler.margin=2).
#
#   scripts/bench/auto_scale_study.sh [--build DIR] [--config FILE] [--steps N]
#                                     [--numerics-every N] [--out DIR] [--set KEY=VALUE]...
#
#   --build DIR          the build directory holding ampctl (default: build)
#   --config FILE        the config (default: configs/gpt_fortunes.yaml)
#   --steps N            training.max_steps (default: the config's)
#   --numerics-every N   logging.numerics_every (default 10)
#   --out DIR            keep the five run directories here (default: a temporary folder)
#
# The run directories keep metrics.jsonl with grad_amax on every step, so
# `ampctl replay DIR/pytorch_default --grid scaler.margin=0,1,2 ...` previews other settings.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=build
CONFIG=configs/gpt_fortunes.yaml
STEPS=
NUMERICS=10
OUT=
SETS=()
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --numerics-every) NUMERICS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "auto_scale_study.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "auto_scale_study.sh: $AMPCTL not found (build first)" >&2; exit 2; }
if [[ -z $OUT ]]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"

common=(--set logging.grad_amax=true --set logging.metrics_every=1
  --set "logging.numerics_every=$NUMERICS" "${SETS[@]}")
[[ -n $STEPS ]] && common+=(--set "training.max_steps=$STEPS")

runs=(
  "pytorch_default|scaler.policy=pytorch"
  "pytorch_2^40|scaler.policy=pytorch scaler.init_scale=1099511627776.0"
  "pytorch_2^-20|scaler.policy=pytorch scaler.init_scale=9.5367431640625e-07"
  "auto_2^40|scaler.policy=auto scaler.init_scale=1099511627776.0"
  "auto_2^-20|scaler.policy=auto scaler.init_scale=9.5367431640625e-07"
)
for r in "${runs[@]}"; do
  name=${r%%|*}
  sets=()
  for kv in ${r#*|}; do sets+=(--set "$kv"); done
  dir=$OUT/$name
  rm -rf "$dir"
  t0=$(date +%s.%N)
  "$AMPCTL" train --config "$CONFIG" --run-dir "$dir" "${common[@]}" "${sets[@]}" \
    >"$OUT/$name.log" 2>&1 || { echo "$name failed: $(tail -3 "$OUT/$name.log")" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", b - a}' >"$dir.wall"
done

python3 - "$OUT" "${runs[@]}" <<'EOF'
import json, sys
out = sys.argv[1]
print(f"{'run':<16} {'skipped':>7} {'first':>6} {'final scale':>12} {'min scale':>10} "
      f"{'max scale':>10} {'eval loss':>9} {'best eval':>9} {'underflow':>10} {'wall s':>7}")
for r in sys.argv[2:]:
    name = r.split("|")[0]
    d = f"{out}/{name}"
    s = json.load(open(f"{d}/summary.json"))
    first = None
    for line in open(f"{d}/metrics.jsonl"):
        m = json.loads(line)
        if m.get("kind") == "train" and m.get("skipped"):
            first = m["step"]
            break
    num = s.get("numerics") or {}
    ev = (s.get("eval") or {}).get("loss")
    print(f"{name:<16} {s['skipped_steps']:>7} {first if first is not None else '-':>6} "
          f"{s['final_scale']:>12.6g} {s['min_scale']:>10.3g} {s['max_scale']:>10.3g} "
          f"{ev if ev is not None else float('nan'):>9.4f} {s.get('best_eval_loss', float('nan')):>9.4f} "
          f"{num.get('mean_underflow_frac', float('nan')):>10.3g} "
          f"{float(open(d + '.wall').read()):>7.1f}")
EOF
