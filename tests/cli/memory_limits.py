#!/usr/bin/env python3
"""Under a memory limit every command ends with a clear error or its result, never a spin, a hang
or "internal: std::bad_alloc" (issue 47, class 3), end to end through the real binary. Each
command runs under a timeout (a hang fails the test) with the limit set in the child only
(RLIMIT_AS, as `ulimit -v` sets it):

  train / eval   a tiny MLP with OPENBLAS_NUM_THREADS=2 under 250 MiB: exit 2, "host memory: the
                 CPU backend's 2 thread(s) reserve ... of address space (OpenBLAS's ... buffer ..."
                 naming the limit, no run directory (before: OpenBLAS's worker retried its
                 128 MiB buffer forever: train spun on a CPU without AVX-512, and every command
                 hung at exit joining the worker); validate refuses it the same way (before: it
                 passed); and under ulimit -d (RLIMIT_DATA), named as such.
  fits           the same run on OpenBLAS's products (AMPCTL_CPU_ISA=portable) under the limit
                 the refusal's numbers say it needs, plus 64 MiB: exit 0 in time. This holds the
                 per-thread reservation the backend counts (128 MiB + 8 KiB per thread, + a stack
                 per worker) against what OpenBLAS really maps: a count too small would spin here.
  no backend     report, replay, inspect, export and tokenize under 150 MiB: exit 0 in time
                 (before: each hung at exit).
  sample         under 250 MiB with 2 threads: exit 2, the backend's refusal; with 1 thread it
                 samples (before: a hang at exit).
  tokenize       a 64 MiB document under 300 MiB: exit 2 naming the file and the memory
                 encoding needs, no output (before: "internal: std::bad_alloc", exit 1).
  text           a 32 MiB text with a character vocabulary under 350 MiB (validate: 300): exit 2 naming
                 data.train.path and the memory loading needs, before any run directory
                 (before: "internal: std::bad_alloc", exit 1); validate refuses it too
                 (before: it passed).
  bucket_mb      distributed.bucket_mb: 1048576 on 2 ranks (when MPIEXEC is given): exit 2 naming
                 the key (before: "internal: std::bad_alloc" on each rank).

AddressSanitizer reserves terabytes of address space for its shadow memory, so an ASan build
cannot start under any such limit: with SANITIZE=ON the test says so and exits 77 (skipped).

Usage: memory_limits.py AMPCTL WORKDIR SANITIZE [MPIEXEC]
"""
import json
import os
import re
import resource
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check

AMPCTL, WORK, SANITIZE = sys.argv[1:4]
MPIEXEC = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
if SANITIZE.upper() in ("ON", "1", "TRUE", "YES"):
    print("skipped: the sanitizer build cannot run under an address-space limit "
          "(ASan maps terabytes of shadow memory at start)")
    sys.exit(77)
WORK = os.path.join(WORK, "memory-limits-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
MiB = 1 << 20


def run(args, expect, limit=None, env=None, timeout=60, launcher=None, rlimit=resource.RLIMIT_AS):
    """Runs ampctl with RLIMIT_AS = limit in the child; a hang is killed (SIGKILL: a spinning
    OpenBLAS worker outlives SIGTERM) and fails the test."""
    def pre():
        if limit is not None:
            resource.setrlimit(rlimit, (limit, limit))
    full_env = dict(os.environ)
    full_env.pop("OPENBLAS_NUM_THREADS", None)
    full_env.update(env or {})
    cmd = (launcher or []) + [AMPCTL] + args
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=full_env, preexec_fn=pre, cwd=WORK)
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        check(False, f"ampctl {' '.join(args)} under {limit}: still running after {timeout} s")
        return None, ""
    what = f"ampctl {' '.join(args)} (limit {limit and limit // MiB} MiB)"
    check(p.returncode == expect,
          f"{what}: exit {p.returncode}, expected {expect}\n{out[-1500:]}\n{err[-1500:]}")
    check("internal" not in err and "bad_alloc" not in err, f"{what}: no internal error: {err}")
    return p, err


def write(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


TINY = write("tiny.yaml", """name: tiny
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [8], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 3}
  eval: {split_fraction: 0.1}
  batch_size: 16
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 20, eval_every: 10}
""")
TWO = {"OPENBLAS_NUM_THREADS": "2"}

# A finished run to evaluate, report and replay (no limit).
run(["train", "--config", TINY, "--run-dir", "done"], 0, env=TWO)
DONE = os.path.join(WORK, "done")

# --- train, eval, validate under a limit too small for OpenBLAS's two buffers --------------------
LOW = 250 * MiB
for cmd in (["train", "--config", TINY, "--run-dir", "low"],
            ["eval", "--checkpoint", DONE],
            ["validate", "--config", TINY]):
    p, err = run(cmd, 2, limit=LOW, env=TWO)
    if p is None:
        continue
    check("host memory: the CPU backend's 2 thread(s) reserve" in err and
          "OpenBLAS's 128.0 MiB buffer" in err and "ulimit -v (RLIMIT_AS)" in err and
          "OPENBLAS_NUM_THREADS=1" in err, f"{cmd[0]}: the refusal names the reservation: {err}")
check(not os.path.exists(os.path.join(WORK, "low")), "train under the limit: no run directory")
# The same under a data-segment limit (ulimit -d), which OpenBLAS's buffers count against too.
p, err = run(["train", "--config", TINY, "--run-dir", "low"], 2, limit=LOW, env=TWO,
             rlimit=resource.RLIMIT_DATA)
check("ulimit -d (RLIMIT_DATA)" in err, "train under ulimit -d: the refusal names it: " + err)

# --- the same run where the numbers say it fits: OpenBLAS's products, no spin ---------------------
p, err = run(["train", "--config", TINY, "--run-dir", "low"], 2, limit=LOW,
             env=dict(TWO, AMPCTL_CPU_ISA="portable"))
m = re.search(r"reserve ([0-9.]+) MiB of address space .*leaves ([0-9.]+) (MiB|KiB|bytes)", err)
check(m is not None, "the refusal gives the reservation and the room: " + err)
if m:
    need = float(m.group(1)) * MiB
    room = float(m.group(2)) * {"MiB": MiB, "KiB": 1024, "bytes": 1}[m.group(3)]
    fits = LOW + int(need - room) + 64 * MiB
    p, err = run(["train", "--config", TINY, "--run-dir", "fits"], 0, limit=fits,
                 env=dict(TWO, AMPCTL_CPU_ISA="portable"), timeout=120)
    if p is not None:
        check(os.path.exists(os.path.join(WORK, "fits", "summary.json")),
              "the run that fits finished")

# --- commands that start no backend thread: done in time under 150 MiB ---------------------------
CORPUS = write("corpus.txt", "the quick brown fox jumps over the lazy dog\n" * 400)
GPT = write("gpt.yaml", """name: gpt
seed: 0
device: cpu
precision: fp16
model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}
data:
  train: {source: text, path: corpus.txt, vocab: char}
  eval: {split_fraction: 0.1}
  batch_size: 4
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 4, eval_every: 0, eval_batches: 1}
""")
run(["train", "--config", GPT, "--run-dir", "gpt"], 0, env=TWO)
TOK = os.path.join(WORK, "tok")
os.makedirs(TOK)
# GPT-2's byte alphabet (every byte a token), no merges: the smallest byte-level BPE.
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
alphabet, extra = {}, 0
for b in range(256):
    if b in printable:
        alphabet[b] = chr(b)
    else:
        alphabet[b] = chr(256 + extra)
        extra += 1
with open(os.path.join(TOK, "vocab.json"), "w") as f:
    json.dump({alphabet[b]: b for b in range(256)}, f)
with open(os.path.join(TOK, "merges.txt"), "w") as f:
    f.write("#version: 0.2\n")
for cmd in (["report", DONE, "--out", os.path.join(WORK, "report.html")],
            ["replay", DONE, "--set", "scaler.growth_interval=10"],
            ["inspect", DONE],
            ["export", "--checkpoint", DONE, "--format", "safetensors", "--out",
             os.path.join(WORK, "done.safetensors")],
            ["tokenize", "--tokenizer", TOK, "--out", os.path.join(WORK, "small.bin"),
             os.path.join(WORK, "tiny.yaml")]):
    run(cmd, 0, limit=150 * MiB, env=TWO)
# sample starts a backend: refused like train where its threads do not fit (before: a hang at
# exit, or a spin on OpenBLAS's products), and samples where they do.
p, err = run(["sample", "--checkpoint", os.path.join(WORK, "gpt"), "--tokens", "5"], 2,
             limit=LOW, env=TWO)
check("host memory: the CPU backend's 2 thread(s) reserve" in err, "sample: the refusal: " + err)
run(["sample", "--checkpoint", os.path.join(WORK, "gpt"), "--tokens", "5"], 0, limit=LOW,
    env={"OPENBLAS_NUM_THREADS": "1"})

# --- tokenize: a document larger than the memory encoding it needs -------------------------------
with open(os.path.join(WORK, "long.txt"), "w") as f:
    f.write("a" * (64 * MiB))
p, err = run(["tokenize", "--tokenizer", TOK, "--out", os.path.join(WORK, "long.bin"),
              os.path.join(WORK, "long.txt")], 2, limit=300 * MiB, env=TWO)
check("long.txt: 64.0 MiB need about 384.0 MiB of memory to tokenize" in err,
      "tokenize: the refusal names the file and the sizes: " + err)
check(not os.path.exists(os.path.join(WORK, "long.bin")), "tokenize refused: no output file")
os.remove(os.path.join(WORK, "long.txt"))

# --- a text larger than the memory loading it needs ----------------------------------------------
with open(os.path.join(WORK, "mid.txt"), "w") as f:
    line = "the quick brown fox jumps over the lazy dog\n"
    f.write(line * ((32 * MiB) // len(line)))
TEXT = write("text.yaml", """name: text
seed: 0
device: cpu
precision: fp16
model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}
data:
  train: {source: text, path: mid.txt, vocab: char}
  eval: {split_fraction: 0.1}
  batch_size: 4
optimizer: {type: adamw, lr: 1.0e-3}
training: {max_steps: 2, eval_every: 0, eval_batches: 1}
""")
p, err = run(["train", "--config", TEXT, "--run-dir", "text"], 2, limit=350 * MiB,
             env={"OPENBLAS_NUM_THREADS": "1"})
if p is not None:
    check(re.search(r"data\.train\.path \S*mid\.txt: 32\.0 MiB need about 288\.0 MiB of memory "
                    r"to load", err) is not None, "the text refusal names the key and sizes: " + err)
check(not os.path.exists(os.path.join(WORK, "text")), "text under the limit: no run directory")
# validate checks the file the same way (before: it counted a text source as one token, and
# passed).
p, err = run(["validate", "--config", TEXT], 2, limit=300 * MiB, env={"OPENBLAS_NUM_THREADS": "1"})
check("mid.txt: 32.0 MiB need about 288.0 MiB of memory to load" in err,
      "validate: the text refusal: " + err)

# --- an all-reduce bucket larger than the host ---------------------------------------------------
if MPIEXEC:
    BUCKET = write("bucket.yaml", open(TINY).read().replace(
        "training:", "distributed: {bucket_mb: 1048576}\ntraining:"))
    p, err = run(["train", "--config", BUCKET, "--run-dir", "bucket"], 2, env=TWO, timeout=120,
                 launcher=[MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2"])
    if p is not None:
        check("distributed.bucket_mb: 1048576 MiB of all-reduce bucket on each rank" in err,
              "the bucket refusal names the key: " + err)
    check(not os.path.exists(os.path.join(WORK, "bucket")), "bucket: no run directory")
else:
    print("bucket_mb case skipped: no MPI launcher given")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("memory limits: all checks passed")
