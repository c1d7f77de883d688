#!/usr/bin/env bash
# ampctl's CPU step time on each instruction path (core/cpu_isa.h) against PyTorch fp32 on the
# matching path, side by side in one run:
#   avx512  ampctl as the CPU chooses it      vs  PyTorch as it chooses (ATen's default)
#   avx2    ampctl with AMPCTL_CPU_ISA=avx2   vs  PyTorch with ATEN_CPU_CAPABILITY=avx2
# on two models: the MLP 784-1024-1024-10 at batch 256 with Adam (bench_cpu.sh's first) and
# nanoGPT's CPU recipe, GPT 4 x 128, block 64, batch 12 (bench_gpt_cpu.sh's fortunes model).
# A path the CPU lacks is skipped. On an AVX-512 CPU the avx2 rows are a proxy for an AVX2-only
# CPU (the same cores and caches, only the instructions differ).
#
# Method: R interleaved rounds, each running every column once, so a noisy shared machine hits
# every column alike; each column's number is the median over the rounds, the ratios are of those
# medians (ampctl / PyTorch; below 1 means ampctl is faster). ampctl's step is summary.json's
# phase_ms total minus its data phase over the steady steps (logging.profile); PyTorch's the
# median of its timed steps after warm-up. Both sides get --threads threads (PyTorch: OpenMP and
# OpenBLAS alike); PyTorch's OpenMP wait policy is the faster of active and passive in a first
# trial. The avx2 rows run OpenBLAS's Haswell kernels on both sides (OPENBLAS_CORETYPE).
#
#   scripts/bench/bench_cpu_isa.sh [--build DIR] [--rounds N] [--threads N] [--precision P]
#                                  [--models mlp,gpt] [--paths avx512,avx2] [--baseline AMPCTL]
#   --precision  ampctl's precision (default fp16); PyTorch is always fp32
#   --baseline   another ampctl binary (an earlier build) run in the same rounds, for before/after
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
ROUNDS=5
THREADS=$(nproc)
PRECISION=fp16
MODELS=mlp,gpt
PATHS=avx512,avx2
BASELINE=""
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --paths) PATHS=$2; shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench_cpu_isa.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_cpu_isa.sh: $AMPCTL not found (build it, or pass --build DIR)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_cpu_isa.sh: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-bench-isa.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
bash scripts/examples/fortunes_corpus.sh "$WORK/fortunes.txt" >/dev/null

exec /usr/bin/python3 - "$AMPCTL" "$WORK" "$ROUNDS" "$THREADS" "$PRECISION" "$MODELS" "$PATHS" "$BASELINE" <<'PY'
import json, os, re, statistics, subprocess, sys

ampctl, work, rounds, threads, precision, models, paths, baseline = sys.argv[1:9]
rounds, threads = int(rounds), int(threads)
corpus = os.path.join(work, "fortunes.txt")
env0 = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
env0.pop("AMPCTL_CPU_ISA", None)
env0.pop("ATEN_CPU_CAPABILITY", None)

def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"

best = re.search(r"cpu path: (\w+)",
                 subprocess.run([ampctl, "--version"], capture_output=True, text=True,
                                env=env0).stdout).group(1)
order = ["avx512", "avx2", "portable"]
paths = [p for p in paths.split(",") if order.index(p) >= order.index(best)]

# The avx2 rows as an AVX2 CPU runs them: OpenBLAS's Haswell kernels on both sides (PyTorch's
# fp32 products and ampctl's few OpenBLAS calls), ATen's AVX2 kernels.
def ampctl_env(path):
    env = dict(env0, AMPCTL_CPU_ISA=path)
    if path == "avx2":
        env["OPENBLAS_CORETYPE"] = "Haswell"
    return env

torch_wait = {}  # (model, path): the OpenMP wait policy PyTorch runs fastest with here

def torch_env(path, wait=None):
    env = dict(env0)
    if path == "avx2":
        env.update(ATEN_CPU_CAPABILITY="avx2", OPENBLAS_CORETYPE="Haswell")
    if wait:
        env["OMP_WAIT_POLICY"] = wait
    return env

def mlp_ampctl(path, tag, binary=None):
    cfg = os.path.join(work, "mlp.yaml")
    with open(cfg, "w") as f:
        f.write(f"""name: bench
seed: 0
device: cpu
precision: {precision}
model: {{type: mlp, hidden: [1024, 1024], activation: relu}}
data:
  train: {{source: synthetic, task: classification, samples: 8192, features: 784, classes: 10}}
  eval: null
  batch_size: 256
optimizer: {{type: adam, lr: 1.0e-3}}
training: {{max_steps: 120, eval_every: 0}}
checkpoint: {{every_steps: 0}}
logging: {{every_steps: 40, metrics_every: 40, profile: true}}
""")
    return run_ampctl(["--config", cfg], path, tag, binary)

def gpt_ampctl(path, tag, binary=None):
    sets = [f"device=cpu", f"precision={precision}", f"data.train.path={corpus}",
            "model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.block_size=64",
            "data.batch_size=12", "training.max_steps=40", "training.eval_every=0",
            "checkpoint.every_steps=0", "scheduler.warmup_steps=1", "logging.every_steps=10",
            "logging.profile=true"]
    args = ["--config", "configs/gpt_fortunes.yaml"]
    for s in sets:
        args += ["--set", s]
    return run_ampctl(args, path, tag, binary)

def run_ampctl(args, path, tag, binary=None):
    run = os.path.join(work, tag)
    subprocess.run(["rm", "-rf", run], check=True)
    subprocess.run([binary or ampctl, "train", *args, "--run-dir", run], env=ampctl_env(path), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(run, "summary.json")) as f:
        ph = json.load(f)["phase_ms"]
    subprocess.run(["rm", "-rf", run], check=True)
    return ph["total"] - ph["data"], ph

def mlp_torch(path, wait=None):
    out = subprocess.run(["/usr/bin/python3", "scripts/bench/bench_pytorch_cpu.py", "--features",
                          "784", "--hidden", "1024,1024", "--classes", "10", "--batch", "256",
                          "--precision", "fp32", "--steps", "80", "--warmup", "20",
                          "--threads", str(threads)],
                         env=torch_env(path, wait), check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["step_ms"]

def gpt_torch(path, wait=None):
    out = subprocess.run(["/usr/bin/python3", "scripts/bench/bench_gpt_cpu.py", "--corpus", corpus,
                          "--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size",
                          "64", "--batch", "12", "--precision", "fp32", "--warmup", "5",
                          "--steps", "20", "--threads", str(threads)],
                         env=torch_env(path, wait), check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_ms"]

RUNNERS = {"mlp": (mlp_ampctl, mlp_torch, "MLP 784-1024-1024-10, batch 256, Adam"),
           "gpt": (gpt_ampctl, gpt_torch, "GPT 4 x 128, block 64, batch 12")}
print(f"CPU: {cpu_model()}; the CPU's best path: {best}; {threads} threads; ampctl {precision}, "
      f"PyTorch {subprocess.run(['/usr/bin/python3', '-c', 'import torch; print(torch.__version__)'], capture_output=True, text=True).stdout.strip()} fp32; "
      f"{rounds} interleaved rounds", flush=True)
# PyTorch's OpenMP wait policy, per model and path: the faster of the default (active) and
# PASSIVE in a first trial (a loaded machine punishes spinning threads).
for model in models.split(","):
    for path in paths:
        t_fn = RUNNERS[model][1]
        trial = {w: t_fn(path, w) for w in ("ACTIVE", "PASSIVE")}
        torch_wait[(model, path)] = min(trial, key=trial.get)
        print(f"  PyTorch {model} {path}: " + ", ".join(f"OMP_WAIT_POLICY={w} {ms:.1f} ms"
                                                     for w, ms in trial.items())
              + f" -> {torch_wait[(model, path)]}", flush=True)
res, phases = {}, {}
for r in range(rounds):
    line = []
    for model in models.split(","):
        a_fn, t_fn, _ = RUNNERS[model]
        for path in paths:
            ms, ph = a_fn(path, f"{model}-{path}")
            res.setdefault((model, path, "ampctl"), []).append(ms)
            phases.setdefault((model, path), []).append(ph)
            if baseline:
                bms, _ = a_fn(path, f"{model}-{path}-base", baseline)
                res.setdefault((model, path, "base"), []).append(bms)
                line.append(f"{model} {path}: baseline {bms:.1f}")
            t = t_fn(path, torch_wait[(model, path)])
            res.setdefault((model, path, "torch"), []).append(t)
            line.append(f"{model} {path}: ampctl {ms:.1f} / torch {t:.1f}")
    print(f"  round {r + 1}: " + "; ".join(line), flush=True)

base_cols = " baseline (ms) | baseline ratio |" if baseline else ""
print(f"\n| model | path | ampctl {precision} (ms) | PyTorch fp32 (ms) | ratio |{base_cols} CPU |")
print("|---|---|---:|---:|---:|" + ("---:|---:|" if baseline else "") + "---|")
for model in models.split(","):
    for path in paths:
        a = statistics.median(res[(model, path, "ampctl")])
        t = statistics.median(res[(model, path, "torch")])
        note = " (forced avx2 on an AVX-512 CPU: a proxy)" if path == "avx2" and best == "avx512" else ""
        tp = "ATEN_CPU_CAPABILITY=avx2" if path == "avx2" else "default"
        b = ""
        if baseline:
            bm = statistics.median(res[(model, path, "base")])
            b = f" {bm:.1f} | {bm / t:.2f} |"
        print(f"| {RUNNERS[model][2]} | {path} (PyTorch {tp}) | {a:.1f} | {t:.1f} | {a / t:.2f} |"
              f"{b} {cpu_model()}{note} |")
print("\nampctl phases (median ms per step):")
for (model, path), phs in phases.items():
    keys = [k for k in phs[0] if k != "total"]
    print(f"  {model} {path}: " + ", ".join(f"{k} {statistics.median(p[k] for p in phs):.2f}"
                                            for k in keys))
PY
