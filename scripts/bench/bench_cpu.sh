#!/usr/bin/env bash
# CPU training-step benchmark: ampctl (fp16, bf16, fp32) side by side with PyTorch on the CPU
# (fp32, bf16 autocast; scripts/bench/bench_pytorch_cpu.py), on the same MLPs with the same work per
# step (Adam, cross-entropy, a fresh batch, no evaluation or checkpoint inside the timed steps),
# interleaved round by round so that a noisy shared machine hits every column alike. Prints a
# table of medians and ratios (ampctl / PyTorch; below 1 means ampctl is faster).
#
#   scripts/bench/bench_cpu.sh [--build DIR] [--rounds N] [--quick] [--ops | --ops-only] [--threads N]
#
#   --build DIR   the build directory holding ampctl (and ampctl_bench_ops); default: build
#   --rounds N    interleaved rounds (default 5); each column's number is the median over them
#   --quick       fewer steps per run (a smoke test of the script, not a measurement)
#   --ops         also run ampctl_bench_ops (Google Benchmark, interleaved repetitions) and print
#                 each op's ratio to its baseline (cblas_sgemm, memcpy of the same bytes)
#   --ops-only    only the op-level part
#   --threads N   threads for both sides (default: the number of cores)
#
# ampctl's number is summary.json's steady_step_ms (the mean step time after the first logging
# interval); PyTorch's is the median single-step time after its warm-up. PyTorch gets its best
# environment: before the rounds each of a few thread settings (OpenBLAS's own pool or not, the
# OpenMP wait policy) is tried and the fastest kept, per model and precision; the table says
# which. Models: 784-1024-1024-10 at batch 256 and 32-256-256-10 at batch 128.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=build
ROUNDS=5
QUICK=0
OPS=0
THREADS=$(nproc)
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --ops) OPS=1; shift ;;
    --ops-only) OPS=2; shift ;;
    --threads) THREADS=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "bench_cpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_cpu.sh: $AMPCTL not found (build it, or pass --build DIR)" >&2; exit 2; }
PY=""
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import torch' 2>/dev/null; then PY=$cand; break; fi
done
[[ -n $PY ]] || { echo "bench_cpu.sh: no python3 with torch (Debian: apt-get install python3-torch)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-bench-cpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

exec "$PY" - "$AMPCTL" "$WORK" "$ROUNDS" "$QUICK" "$THREADS" "$OPS" "$BUILD" <<'PY'
import json, os, statistics, subprocess, sys

ampctl, work, rounds, quick, threads, ops, build = sys.argv[1:8]
rounds, quick, threads = int(rounds), quick == "1", int(threads)
ops, steps = ops != "0", ops != "2"
env0 = dict(os.environ)

# name, features, hidden, classes, batch, ampctl steps, torch steps
models = [("784-1024-1024-10 b256", 784, [1024, 1024], 10, 256, 160, 120),
          ("32-256-256-10 b128", 32, [256, 256], 10, 128, 1000, 600)]
if quick:
    models = [(n, f, h, c, b, max(60, s // 8), max(20, t // 8)) for n, f, h, c, b, s, t in models]
log_every = 40

def ampctl_run(model, precision, tag):
    name, features, hidden, classes, batch, steps, _ = model
    cfg = os.path.join(work, f"cfg_{tag}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""name: bench
seed: 0
device: cpu
precision: {precision}
model: {{type: mlp, hidden: [{', '.join(map(str, hidden))}], activation: relu}}
data:
  train: {{source: synthetic, task: classification, samples: 8192, features: {features}, classes: {classes}}}
  eval: null
  batch_size: {batch}
optimizer: {{type: adam, lr: 1.0e-3}}
training: {{max_steps: {steps}, eval_every: 0}}
checkpoint: {{every_steps: 0}}
logging: {{every_steps: {log_every}, metrics_every: {log_every}, profile: true}}
""")
    run_dir = os.path.join(work, f"run_{tag}")
    subprocess.run(["rm", "-rf", run_dir], check=True)
    env = dict(env0, OPENBLAS_NUM_THREADS=str(threads))
    subprocess.run([ampctl, "train", "--config", cfg, "--run-dir", run_dir], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    # logging.profile costs a few clock reads per step on the CPU (no device to wait for).
    phases[(model[0], precision)].append(summary["phase_ms"])
    return summary["steady_step_ms"]

def torch_run(model, precision, extra_env, steps=None):
    name, features, hidden, classes, batch, _, tsteps = model
    env = dict(env0, **extra_env)
    out = subprocess.run([sys.executable, "scripts/bench/bench_pytorch_cpu.py", "--features", str(features),
                          "--hidden", ",".join(map(str, hidden)), "--classes", str(classes),
                          "--batch", str(batch), "--precision", precision,
                          "--steps", str(steps or tsteps), "--warmup", "20" if quick else "30",
                          "--threads", str(threads)],
                         env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["step_ms"]

phases = {(m[0], p): [] for m in models for p in ("fp16", "bf16", "fp32")}
PHASES = ["data", "forward", "backward", "unscale", "optimizer", "update", "metrics"]

def step_benchmark():
    # PyTorch's environment, tuned per model and precision: the fastest of these in a short trial.
    variants = {
        "default": {},
        "omp-passive": {"OMP_WAIT_POLICY": "PASSIVE"},
        "blas-1thr": {"OPENBLAS_NUM_THREADS": "1"},
        "blas-1thr+omp-passive": {"OPENBLAS_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
    }
    best = {}
    for model in models:
        for prec in ("fp32", "bf16"):
            trial = {k: [] for k in variants}
            for _ in range(1 if quick else 2):
                for k, v in variants.items():
                    trial[k].append(torch_run(model, prec, v, steps=20 if quick else 40))
            best[(model[0], prec)] = min(trial, key=lambda k: statistics.median(trial[k]))

    columns = [("PyTorch fp32", "torch", "fp32"), ("PyTorch bf16", "torch", "bf16"),
               ("ampctl fp16", "ampctl", "fp16"), ("ampctl bf16", "ampctl", "bf16"),
               ("ampctl fp32", "ampctl", "fp32")]
    times = {(m[0], c[0]): [] for m in models for c in columns}
    for r in range(rounds):
        for mi, model in enumerate(models):
            # Rotate the order each round so no column always runs first or last.
            order = columns[r % len(columns):] + columns[:r % len(columns)]
            for label, who, prec in order:
                if who == "torch":
                    ms = torch_run(model, prec, variants[best[(model[0], prec)]])
                else:
                    ms = ampctl_run(model, prec, f"{mi}_{prec}")
                times[(model[0], label)].append(ms)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nCPU training step, ms (median of {rounds} interleaved rounds), {threads} threads; "
          f"ratio = ampctl / PyTorch (< 1: ampctl faster)\n")
    hdr = ["model"] + [c[0] for c in columns] + ["fp16 / PT fp32", "bf16 / PT bf16", "fp32 / PT fp32"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" for _ in hdr) + "|")
    for model in models:
        m = model[0]
        g = lambda label: med[(m, label)]
        row = [m] + [f"{g(c[0]):.2f}" for c in columns]
        row += [f"{g('ampctl fp16') / g('PyTorch fp32'):.2f}", f"{g('ampctl bf16') / g('PyTorch bf16'):.2f}",
                f"{g('ampctl fp32') / g('PyTorch fp32'):.2f}"]
        print("| " + " | ".join(row) + " |")
    print(f"\nampctl's step by phase (logging.profile), ms, median of {rounds} rounds\n")
    print("| model | precision | " + " | ".join(PHASES) + " | total |")
    print("|" + "|".join("---" for _ in range(len(PHASES) + 3)) + "|")
    for (m, p), runs in phases.items():
        if not runs:
            continue
        cells = [f"{statistics.median(r[k] for r in runs):.3f}" for k in PHASES + ["total"]]
        print(f"| {m} | {p} | " + " | ".join(cells) + " |")
    print("\nPyTorch environment kept (fastest in a trial): " +
          "; ".join(f"{m} {p}: {best[(m, p)]}" for m, p in best))
    print("all runs (ms): " + json.dumps({f"{m} / {c}": [round(x, 2) for x in v] for (m, c), v in times.items()}))


if steps:
    step_benchmark()

if ops:
    exe = os.path.join(build, "ampctl_bench_ops")
    if not os.access(exe, os.X_OK):
        print(f"\n{exe} not built (needs libbenchmark-dev)", file=sys.stderr)
        sys.exit(0)
    reps = 3 if quick else 7
    out = subprocess.run([exe, "--threads", str(threads), f"--benchmark_repetitions={reps}",
                          "--benchmark_enable_random_interleaving=true",
                          "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
                          "--benchmark_min_time=0.1" if quick else "--benchmark_min_time=0.3"],
                         env=dict(env0, OPENBLAS_NUM_THREADS=str(threads)),
                         check=True, capture_output=True, text=True)
    res = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            res[b["run_name"].removesuffix("/real_time")] = b
    print(f"\nOps (median of {reps} interleaved repetitions; ratio = rate / the baseline's rate:"
          f" gemm against cblas_sgemm at the same shape, passes against memcpy of the same bytes)\n")
    print("| op | time | rate | ratio |")
    print("|---|---|---|---|")
    for name in sorted(res):
        b = res[name]
        t = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0}[b["time_unit"]]
        base = None
        if "FLOP/s" in b:
            rate, unit = b["FLOP/s"] / 1e9, "GFLOP/s"
            if name.startswith("gemm/"):
                base = name.rsplit("/", 1)[0] + "/sgemm_openblas"
            brate = res[base]["FLOP/s"] / 1e9 if base in res else None
        else:
            rate, unit = b["bytes_per_second"] / 1e9, "GB/s"
            base = "mem/memcpy_f32/" + name.rsplit("/", 1)[-1]
            brate = res[base]["bytes_per_second"] / 1e9 if base in res else None
        ratio = f"{rate / brate:.2f}" if brate and base != name else ""
        print(f"| {name} | {t:.3f} ms | {rate:.1f} {unit} | {ratio} |")
PY
