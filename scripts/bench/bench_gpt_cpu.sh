#!/usr/bin/env bash
# GPT step time on the CPU: ampctl fp16 / bf16 / fp32 beside PyTorch fp32 and bf16 autocast
# (Debian's python3-torch, scripts/bench/bench_gpt_cpu.py with nanoGPT's model), on two models:
#   fortunes     configs/gpt_fortunes.yaml: 4 layers x 128, 4 heads, block 64, batch 12
#   shakespeare  nanoGPT's shakespeare-char size: 6 layers x 384, 6 heads, block 256, batch 64
# both character level on the fortunes corpus (scripts/examples/fortunes_corpus.sh; Shakespeare is not
# available offline), dropout 0 and no biases (bench_gpt_fortunes.py's model has no dropout).
#
# Method: PyTorch's thread setting is picked first: every pair of OpenMP threads (torch's
# set_num_threads) and OpenBLAS threads (Debian's torch runs fp32 matrix products on OpenBLAS,
# whose pool set_num_threads leaves alone) in 1..--threads, fp32, one short run each; the fastest
# pair is used for both of its precisions. Then R interleaved rounds, each running every
# side once: ampctl's step is summary.json's phase_ms (logging.profile) total minus its data phase
# over the steady steps (those after the first logging interval), PyTorch's the median of its
# timed steps after warm-up (the batch is drawn outside the clock). Each side's number is the
# median over the rounds; the ratios are of those medians. Goals (issue: GPT performance):
# ampctl fp16 <= 0.35x PyTorch fp32, ampctl bf16 <= 0.7x PyTorch bf16 autocast.
#
# The shakespeare model runs few steps (ampctl: 3, timed from the second; PyTorch: 1 warm-up and
# 2 timed) and --big-rounds rounds (default 1: a step takes seconds to tens of seconds on 2 cores).
#
# --torch-threads N skips the trial and gives PyTorch N OpenMP threads, and --torch-blas M
# (default N) M OpenBLAS threads.
#
#   scripts/bench/bench_gpt_cpu.sh [--build DIR] [--rounds N] [--big-rounds N] [--threads N]
#                            [--torch-threads N] [--torch-blas M] [--models fortunes,shakespeare]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
ROUNDS=3
BIG_ROUNDS=1
THREADS=2
TORCH_THREADS=0
TORCH_BLAS=0
MODELS=fortunes,shakespeare
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --big-rounds) BIG_ROUNDS=$2; shift 2 ;;
    --torch-threads) TORCH_THREADS=$2; shift 2 ;;
    --torch-blas) TORCH_BLAS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bench_gpt_cpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_gpt_cpu.sh: $AMPCTL not found (build it, or pass --build DIR)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_gpt_cpu.sh: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-bench-gpt.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
bash scripts/examples/fortunes_corpus.sh "$WORK/fortunes.txt" >/dev/null

exec /usr/bin/python3 - "$AMPCTL" "$WORK" "$ROUNDS" "$THREADS" "$MODELS" "$BIG_ROUNDS" "$TORCH_THREADS" "$TORCH_BLAS" <<'PY'
import json, os, statistics, subprocess, sys

ampctl, work, rounds, threads, models, big_rounds, torch_threads, torch_blas = sys.argv[1:9]
rounds, threads, big_rounds = int(rounds), int(threads), int(big_rounds)
torch_threads, torch_blas = int(torch_threads), int(torch_blas)
corpus = os.path.join(work, "fortunes.txt")
env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))

# name: (n_layer, n_head, n_embd, block, batch, ampctl steps / logging interval, torch warm-up /
# timed steps)
MODELS = {
    "fortunes": (4, 4, 128, 64, 12, (40, 10), (5, 20)),
    "shakespeare": (6, 6, 384, 256, 64, (3, 1), (1, 2)),
}

def ampctl_step(model, precision, tag):
    L, H, C, T, B, (steps, every), _ = MODELS[model]
    run = os.path.join(work, tag)
    subprocess.run(["rm", "-rf", run], check=True)
    cmd = [ampctl, "train", "--config", "configs/gpt_fortunes.yaml", "--run-dir", run]
    for s in [f"device=cpu", f"precision={precision}", f"data.train.path={corpus}",
              f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}",
              f"model.block_size={T}", f"data.batch_size={B}", f"training.max_steps={steps}",
              "training.eval_every=0", "checkpoint.every_steps=0", "scheduler.warmup_steps=1",
              f"logging.every_steps={every}", "logging.profile=true"]:
        cmd += ["--set", s]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(run, "summary.json")) as f:
        ph = json.load(f)["phase_ms"]
    subprocess.run(["rm", "-rf", run], check=True)
    return ph["total"] - ph["data"]

def torch_step(model, precision, setting):
    # setting: (OpenMP threads, OpenBLAS threads). Debian's torch runs its fp32 matrix products
    # on OpenBLAS (pthreads), whose pool torch.set_num_threads does not size.
    nthreads, blas = setting
    L, H, C, T, B, _, (warm, steps) = MODELS[model]
    out = subprocess.run(["/usr/bin/python3", "scripts/bench/bench_gpt_cpu.py", "--corpus", corpus,
                          "--n-layer", str(L), "--n-head", str(H), "--n-embd", str(C),
                          "--block-size", str(T), "--batch", str(B), "--precision", precision,
                          "--warmup", str(warm), "--steps", str(steps), "--threads", str(nthreads)],
                         env=dict(env, OMP_NUM_THREADS=str(nthreads),
                                  OPENBLAS_NUM_THREADS=str(blas)), check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_ms"]

print(f"ampctl: {subprocess.run([ampctl, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"PyTorch: {subprocess.run(['/usr/bin/python3', '-c', 'import torch; print(torch.__version__)'], capture_output=True, text=True).stdout.strip()}")
print(f"{threads} threads for ampctl; {rounds} interleaved rounds (shakespeare: {big_rounds}); "
      "dropout 0, no biases\n")
rows = []
for model in models.split(","):
    if model not in MODELS:
        sys.exit(f"bench_gpt_cpu.sh: unknown model '{model}' (fortunes, shakespeare)")
    if torch_threads > 0:
        tt, tthreads = {}, (torch_threads, torch_blas or torch_threads)
    else:
        tt = {(n, m): torch_step(model, "fp32", (n, m))
              for n in sorted({1, threads}) for m in sorted({1, threads})}
        tthreads = min(tt, key=tt.get)
    print(f"{model}: PyTorch fp32 " + ", ".join(f"{n} OpenMP + {m} OpenBLAS thread(s) {ms:.1f} ms"
                                                 for (n, m), ms in tt.items())
          + f" -> {tthreads[0]} + {tthreads[1]}", flush=True)
    res = {k: [] for k in ["a16", "abf", "a32", "t32", "tbf"]}
    for r in range(big_rounds if model == "shakespeare" else rounds):
        res["a16"].append(ampctl_step(model, "fp16", f"{model}-fp16"))
        res["abf"].append(ampctl_step(model, "bf16", f"{model}-bf16"))
        res["a32"].append(ampctl_step(model, "fp32", f"{model}-fp32"))
        res["t32"].append(torch_step(model, "fp32", tthreads))
        res["tbf"].append(torch_step(model, "bf16", tthreads))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in res.items()), flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    rows.append((model, tthreads, med))

print("\n| model | ampctl fp16 | ampctl bf16 | ampctl fp32 | PyTorch fp32 | PyTorch bf16 autocast "
      "| fp16 / PyTorch fp32 (goal <= 0.35) | bf16 / PyTorch bf16 (goal <= 0.7) | fp32 / PyTorch fp32 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for model, tthreads, m in rows:
    L, H, C, T, B = MODELS[model][:5]
    print(f"| {model} ({L} x {C}, T {T}, B {B}; PyTorch {tthreads[0]} + {tthreads[1]} thr.) | {m['a16']:.1f} ms "
          f"| {m['abf']:.1f} ms | {m['a32']:.1f} ms | {m['t32']:.1f} ms | {m['tbf']:.1f} ms "
          f"| {m['a16'] / m['t32']:.2f} | {m['abf'] / m['tbf']:.2f} | {m['a32'] / m['t32']:.2f} |")
PY
