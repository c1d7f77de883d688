#!/usr/bin/env bash
# CNN benchmark: configs/fashion_mnist_cnn.yaml in ampctl (fp16) beside the same model and recipe
# in PyTorch fp32 (scripts/bench_cnn.py, Debian's python3-torch with oneDNN), both on the CPU
# with the same thread count.
#   1. step time: interleaved rounds (ampctl, then PyTorch, R times), each side's median over the
#      rounds and the ratio ampctl / PyTorch (goal: <= 0.5). ampctl's number is summary.json's
#      steady_step_ms of a short run without evaluation; PyTorch's the median step of a short run.
#   2. accuracy and wall time: each side trains the full recipe once and is evaluated on the
#      10,000 test images (skipped with --time-only).
#
#   scripts/bench_cnn.sh [--build DIR] [--rounds N] [--threads N] [--time-only]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
ROUNDS=3
THREADS=2
FULL=1
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --time-only) FULL=0; shift ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench_cnn.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_cnn.sh: $AMPCTL not found (build it, or pass --build DIR)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_cnn.sh: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-bench-cnn.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

exec /usr/bin/python3 - "$AMPCTL" "$WORK" "$ROUNDS" "$THREADS" "$FULL" <<'PY'
import json, os, statistics, subprocess, sys, time

ampctl, work, rounds, threads, full = sys.argv[1:6]
rounds, threads, full = int(rounds), int(threads), full == "1"
env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))

def ampctl_train(tag, sets):
    run = os.path.join(work, tag)
    subprocess.run(["rm", "-rf", run], check=True)
    t0 = time.perf_counter()
    cmd = [ampctl, "train", "--config", "configs/fashion_mnist_cnn.yaml", "--run-dir", run,
           "--set", "device=cpu"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(os.path.join(run, "summary.json")) as f:
        return json.load(f), wall

def torch_run(args):
    out = subprocess.run(["/usr/bin/python3", "scripts/bench_cnn.py", "--threads", str(threads)] + args,
                         env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])

a_ms, t_ms = [], []
for r in range(rounds):
    s, _ = ampctl_train(f"time{r}", ["training.max_steps=60", "training.eval_every=0",
                                     "data.eval=null", "logging.every_steps=20"])
    a_ms.append(s["steady_step_ms"])
    t_ms.append(torch_run(["--mode", "time", "--steps", "40"])["step_ms"])
    print(f"round {r + 1}: ampctl fp16 {a_ms[-1]:.1f} ms, PyTorch fp32 {t_ms[-1]:.1f} ms", flush=True)
am, tm = statistics.median(a_ms), statistics.median(t_ms)
print(f"step time (median of {rounds}, {threads} threads, batch 128): ampctl fp16 {am:.1f} ms, "
      f"PyTorch fp32 {tm:.1f} ms, ratio {am / tm:.2f} (goal <= 0.5)")
if full:
    s, wall = ampctl_train("full", [])
    acc = s.get("final_eval_accuracy", s.get("best_eval_accuracy"))
    print(f"ampctl fp16: test accuracy {acc}, wall {wall:.0f} s", flush=True)
    t = torch_run(["--mode", "train"])
    print(f"PyTorch fp32: test accuracy {t['accuracy']:.4f}, wall {t['wall_s']:.0f} s")
PY
