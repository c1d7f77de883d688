#!/usr/bin/env python3
"""The CPU's instruction paths train alike (docs/reference.md, AMPCTL_CPU_ISA; issue 49).

The avx2 path runs the AVX-512 path's packed GEMM engine and vector passes built on AVX2, which
give the same bits (docs/design.md, "The CPU's instruction path"), so a tiny fp16 MLP and a tiny
fp16 GPT trained on each path the CPU has must log the same losses, grad norms, grad_amax and
scales at every logged step, bit for bit, and so must the avx2 path at 1 and 3 threads. The run's
backend line names the avx2 kernels. On a CPU without AVX2 there is nothing to compare (the test
says so and passes); without AVX-512 it compares the avx2 path's thread counts only.

    cpu_isa_paths.py AMPCTL WORK_DIR
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import FAILURES, check, run_ampctl, summary, train_lines  # noqa: E402

ampctl, work = sys.argv[1], os.path.join(sys.argv[2], "cli_cpu_isa_paths")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
for var in ("AMPCTL_CPU_ISA", "OPENBLAS_NUM_THREADS"):
    os.environ.pop(var, None)

best = re.search(r"cpu path: (\w+)", run_ampctl(ampctl, ["--version"]).stdout).group(1)
order = ["portable", "avx2", "avx512"]
paths = [p for p in ("avx512", "avx2") if order.index(p) <= order.index(best)]
if "avx2" not in paths:
    print(f"cpu_isa_paths: this CPU's best path is {best}: no avx2 path to compare")
    sys.exit(0)

mlp = os.path.join(work, "mlp.yaml")
with open(mlp, "w") as f:
    f.write("""name: isa
seed: 3
device: cpu
precision: fp16
model: {type: mlp, hidden: [384, 128], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 512, features: 300, classes: 7}
  eval: null
  batch_size: 37
optimizer: {type: adam, lr: 1.0e-3}
training: {max_steps: 12, eval_every: 0}
checkpoint: {every_steps: 0}
logging: {every_steps: 3, metrics_every: 3}
""")
corpus = os.path.join(work, "corpus.txt")
with open(corpus, "w") as f:
    f.write("".join(f"line {i}: the quick brown fox {i * 7 % 13} jumps over {i % 5} dogs.\n"
                    for i in range(400)))
gpt_sets = ["device=cpu", "precision=fp16", f"data.train.path={corpus}", "model.n_layer=2",
            "model.n_head=2", "model.n_embd=64", "model.block_size=24", "data.batch_size=5",
            "training.max_steps=8", "scheduler.warmup_steps=1", "training.eval_every=0",
            "checkpoint.every_steps=0", "logging.every_steps=2"]
MODELS = {"mlp": ["--config", mlp],
          "gpt": ["--config", "configs/gpt_fortunes.yaml"] + [a for s in gpt_sets for a in ("--set", s)]}
KEYS = ("step", "loss", "grad_norm", "grad_amax", "scale", "found_inf")


def train(model, path, threads):
    run = os.path.join(work, f"{model}-{path}-{threads}")
    os.environ["AMPCTL_CPU_ISA"] = path
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    run_ampctl(ampctl, ["train", *MODELS[model], "--run-dir", run])
    lines = [tuple(l.get(k) for k in KEYS) for l in train_lines(run)]
    return lines, summary(run)["backend"]


os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
for model in MODELS:
    ref, ref_backend = train(model, "avx2", 3)
    check(len(ref) >= 3, f"{model}: avx2 logged {len(ref)} train lines")
    check("AVX2 kernels, 3 threads" in ref_backend, f"{model}: avx2 backend line '{ref_backend}'")
    runs = [("avx2", 1)] + ([("avx512", 2)] if "avx512" in paths else [])
    for path, threads in runs:
        got, backend = train(model, path, threads)
        # The floats as JSON wrote them (shortest round trip): equal text is equal bits.
        check(got == ref, f"{model}: {path} at {threads} threads ({backend}) logged other values "
                          f"than avx2 at 3 threads: {got} vs {ref}")
    print(f"cpu_isa_paths: {model}: {len(ref)} train lines compared on " +
          ", ".join(f"{p} x {t}" for p, t in [("avx2", 3)] + runs))

sys.exit(1 if FAILURES else 0)
