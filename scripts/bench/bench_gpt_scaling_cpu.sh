#!/usr/bin/env bash
# How the GPT step's cost grows on the CPU: ms per training step for T (block size) x n_embd,
# ampctl fp16 beside PyTorch fp32 (Debian's python3-torch, scripts/bench/bench_gpt_cpu.py: nanoGPT's
# model and ampctl's recipe), the small end of the GPU table (scripts/bench/bench_gpt_gpu.py, T 256-1024
# x n_embd 384-1024, which overlaps it at T 256, n_embd 384).
#
# Grid: T in 64, 128, 256 x n_embd in 128, 256, 384; 4 layers, heads of 64 (n_head = n_embd / 64,
# as GPT-2), batch 8, character level on the fortunes corpus (scripts/examples/fortunes_corpus.sh), dropout
# 0, no biases. Each cell runs ampctl then PyTorch, back to back, so that both see the same load:
#   * ampctl: summary.json's phase_ms (logging.profile) total minus its data phase over the steady
#     steps, those after the first logging interval (--steps steps, logged every --steps / 3);
#   * PyTorch: the median of --steps timed steps after 2 warm-up ones (the batch drawn outside the
#     clock), at --torch-threads OpenMP threads and --torch-blas OpenBLAS threads (Debian's torch
#     runs fp32 products on OpenBLAS; defaults 1 and 2: pick them with scripts/bench/bench_gpt_cpu.sh's
#     trial of every pair).
# With --rounds R every cell runs R times (interleaved by round) and the medians are printed.
# Prints a markdown table of ms/step and the ratio ampctl / PyTorch, and how each side's time
# grows along each axis (the cell over the smallest cell of its row or column).
#
#   scripts/bench/bench_gpt_scaling_cpu.sh [--build DIR] [--threads N] [--torch-threads N] [--torch-blas M]
#                                    [--steps N] [--rounds R] [--precision fp16|bf16|fp32]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
THREADS=2
TORCH_THREADS=1
TORCH_BLAS=2
STEPS=6
ROUNDS=1
PRECISION=fp16
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --torch-threads) TORCH_THREADS=$2; shift 2 ;;
    --torch-blas) TORCH_BLAS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench_gpt_scaling_cpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case $PRECISION in fp16 | bf16 | fp32) ;; *)
  echo "bench_gpt_scaling_cpu.sh: --precision must be fp16, bf16 or fp32" >&2; exit 2 ;;
esac
((STEPS >= 3)) || { echo "bench_gpt_scaling_cpu.sh: --steps must be at least 3" >&2; exit 2; }
AMPCTL=$BUILD/ampctl
[[ -x $AMPCTL ]] || { echo "bench_gpt_scaling_cpu.sh: $AMPCTL not found (build it, or pass --build DIR)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_gpt_scaling_cpu.sh: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ampctl-bench-scaling.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
bash scripts/examples/fortunes_corpus.sh "$WORK/fortunes.txt" >/dev/null

/usr/bin/python3 - "$AMPCTL" "$WORK" "$THREADS" "$TORCH_THREADS" "$STEPS" "$ROUNDS" "$PRECISION" "$TORCH_BLAS" <<'PY'
import json, os, statistics, subprocess, sys

ampctl, work, threads, torch_threads, steps, rounds, precision, torch_blas = sys.argv[1:9]
threads, torch_threads, steps, rounds = int(threads), int(torch_threads), int(steps), int(rounds)
torch_blas = int(torch_blas)
corpus = os.path.join(work, "fortunes.txt")
env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
TS, CS, L, B = [64, 128, 256], [128, 256, 384], 4, 8
every = max(1, steps // 3)
torch_precision = "bf16" if precision == "bf16" else "fp32"

def ampctl_step(T, C):
    run = os.path.join(work, f"run-{T}-{C}")
    subprocess.run(["rm", "-rf", run], check=True)
    cmd = [ampctl, "train", "--config", "configs/gpt_fortunes.yaml", "--run-dir", run]
    for s in ["device=cpu", f"precision={precision}", f"data.train.path={corpus}",
              f"model.n_layer={L}", f"model.n_head={C // 64}", f"model.n_embd={C}",
              f"model.block_size={T}", f"data.batch_size={B}", f"training.max_steps={steps}",
              "model.dropout=0", "model.bias=false", "training.eval_every=0",
              "checkpoint.every_steps=0", "scheduler.warmup_steps=1",
              f"logging.every_steps={every}", "logging.profile=true"]:
        cmd += ["--set", s]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(run, "summary.json")) as f:
        ph = json.load(f)["phase_ms"]
    subprocess.run(["rm", "-rf", run], check=True)
    return ph["total"] - ph["data"]

def torch_step(T, C):
    out = subprocess.run(["/usr/bin/python3", "scripts/bench/bench_gpt_cpu.py", "--corpus", corpus,
                          "--n-layer", str(L), "--n-head", str(C // 64), "--n-embd", str(C),
                          "--block-size", str(T), "--batch", str(B), "--precision",
                          torch_precision, "--warmup", "2", "--steps", str(steps),
                          "--threads", str(torch_threads)],
                         env=dict(env, OMP_NUM_THREADS=str(torch_threads),
                                  OPENBLAS_NUM_THREADS=str(torch_blas)), check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_ms"]

print(f"ampctl: {subprocess.run([ampctl, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"PyTorch: {subprocess.run(['/usr/bin/python3', '-c', 'import torch; print(torch.__version__)'], capture_output=True, text=True).stdout.strip()}")
print(f"GPT {L} layers, heads of 64, batch {B}; ampctl {precision} on {threads} threads, PyTorch "
      f"{torch_precision} on {torch_threads} OpenMP + {torch_blas} OpenBLAS; {steps} steps per side and cell, {rounds} round(s)\n",
      flush=True)
res = {(T, C): ([], []) for T in TS for C in CS}
for r in range(rounds):
    for T in TS:
        for C in CS:
            a, t = ampctl_step(T, C), torch_step(T, C)
            res[T, C][0].append(a)
            res[T, C][1].append(t)
            print(f"  round {r + 1}: T {T:4d}, n_embd {C:4d}: ampctl {a:9.1f} ms, "
                  f"PyTorch {t:9.1f} ms", flush=True)
med = {k: (statistics.median(a), statistics.median(t)) for k, (a, t) in res.items()}

tp = "PyTorch " + torch_precision
print(f"\nms per step, ampctl {precision} / {tp} (ratio):\n")
print("| T \\ n_embd | " + " | ".join(str(C) for C in CS) + " |")
print("|---|" + "---:|" * len(CS))
for T in TS:
    print(f"| {T} | " + " | ".join(f"{med[T, C][0]:.1f} / {med[T, C][1]:.1f} "
                                   f"({med[T, C][0] / med[T, C][1]:.2f})" for C in CS) + " |")
print(f"\ngrowth against T {TS[0]} (same n_embd), ampctl / {tp}:\n")
print("| T \\ n_embd | " + " | ".join(str(C) for C in CS) + " |")
print("|---|" + "---:|" * len(CS))
for T in TS:
    print(f"| {T} | " + " | ".join(f"{med[T, C][0] / med[TS[0], C][0]:.2f}x / "
                                   f"{med[T, C][1] / med[TS[0], C][1]:.2f}x" for C in CS) + " |")
print(f"\ngrowth against n_embd {CS[0]} (same T), ampctl / {tp}:\n")
print("| T \\ n_embd | " + " | ".join(str(C) for C in CS) + " |")
print("|---|" + "---:|" * len(CS))
for T in TS:
    print(f"| {T} | " + " | ".join(f"{med[T, C][0] / med[T, CS[0]][0]:.2f}x / "
                                   f"{med[T, C][1] / med[T, CS[0]][1]:.2f}x" for C in CS) + " |")
PY
