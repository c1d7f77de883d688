#!/usr/bin/env bash
# Data-parallel scaling on this machine's CPUs (docs/distributed.md, "Measured"):
#   scripts/bench/bench_dist.sh [BUILD_DIR] [STEPS]
# Trains the same global batch three ways with logging.profile on and prints, from each run's
# summary.json (phase_ms: milliseconds per steady step):
#   A: 2 ranks x 1 thread (mpirun -np 2, batch B per rank)
#   B: 1 rank x 2 threads (batch 2B)
#   C: 1 rank x 1 thread  (batch B): the per-rank work of A without communication
#   D: A with distributed.zero: 1 (ZeRO-1: sharded optimizer state)
# each REPEATS times (default 3; the medians over the repeats are reported), and the ratio of
# the step times A / B, and the share of A's step spent in the all-reduce. The
# all-reduce runs between the backward and the unscale/check, inside the profile's `unscale`
# phase, so its time is A's unscale phase less C's (the same arena pass, one thread each).
# And D's step time against A's, with the optimizer state per rank that each run logs.
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-300}
REPEATS=${REPEATS:-3}
AMPCTL=$(realpath "$BUILD/ampctl")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/bench.yaml" <<YAML
name: bench_dist
device: cpu
precision: fp16
model: {type: mlp, hidden: [1024, 1024], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 16384, features: 256, classes: 10}
  batch_size: 128
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: $STEPS}
logging: {every_steps: 100, profile: true}
YAML
run() {  # NAME THREADS LAUNCHER... -- ampctl args
  local name=$1 threads=$2
  shift 2
  OPENBLAS_NUM_THREADS=$threads "$@" --run-dir "$WORK/$name" >"$WORK/$name.out" 2>"$WORK/$name.err" ||
    { cat "$WORK/$name.err"; exit 1; }
}
for i in $(seq 1 "$REPEATS"); do
  run "a$i" 1 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -x OPENBLAS_NUM_THREADS=1 -np 2 "$AMPCTL" train --config "$WORK/bench.yaml"
  run "b$i" 2 "$AMPCTL" train --config "$WORK/bench.yaml" --set data.batch_size=256
  run "c$i" 1 "$AMPCTL" train --config "$WORK/bench.yaml"
  run "d$i" 1 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -x OPENBLAS_NUM_THREADS=1 -np 2 "$AMPCTL" train --config "$WORK/bench.yaml" \
    --set distributed.zero=1
done
python3 - "$WORK" "$REPEATS" <<'PY'
import json, os, statistics, sys
w, repeats = sys.argv[1], int(sys.argv[2])
def phases(k):
    runs = [json.load(open(os.path.join(w, f"{k}{i}", "summary.json")))["phase_ms"]
            for i in range(1, repeats + 1)]
    return {n: statistics.median(r[n] for r in runs) for n in runs[0] if n != "steps"}
p = {k: phases(k) for k in "abcd"}
for k, label in (("a", "2 ranks x 1 thread, batch 128/rank"), ("b", "1 rank x 2 threads, batch 256"),
                 ("c", "1 rank x 1 thread,  batch 128"),
                 ("d", "2 ranks x 1 thread, ZeRO-1")):
    print(f"{label}: step {p[k]['total']:.3f} ms  (" +
          ", ".join(f"{n} {p[k][n]:.3f}" for n in ("data", "forward", "backward", "unscale",
                                                     "optimizer", "update")) + ")")
ratio = p["a"]["total"] / p["b"]["total"]
allreduce = max(0.0, p["a"]["unscale"] - p["c"]["unscale"])
print(f"step time ratio (2 ranks x 1 thread) / (1 rank x 2 threads): {ratio:.3f}")
print(f"all-reduce: {allreduce:.3f} ms of {p['a']['total']:.3f} ms "
      f"= {100 * allreduce / p['a']['total']:.1f}% of the 2-rank step")
import re
def state_mib(k):
    text = open(os.path.join(w, f"{k}1.out")).read() + open(os.path.join(w, f"{k}1.err")).read()
    m = re.search(r"optimizer state ([0-9.]+) MiB", text)
    return float(m.group(1)) if m else float("nan")
print(f"ZeRO-1 2-rank step: {p['d']['total']:.3f} ms against ZeRO-0's {p['a']['total']:.3f} ms "
      f"(ratio {p['d']['total'] / p['a']['total']:.3f}; optimizer {p['d']['optimizer']:.3f} "
      f"against {p['a']['optimizer']:.3f} ms)")
print(f"optimizer state per rank: ZeRO-1 {state_mib('d'):.3f} MiB, ZeRO-0 {state_mib('a'):.3f} MiB")
PY
