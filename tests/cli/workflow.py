#!/usr/bin/env python3
"""What a new user trips on (issue 31), end to end through the real binary:

  grad_norm     every train line carries the unscaled gradients' global norm, the console and
                TensorBoard too; summary.json counts the clipped steps (checked against the
                lines' own norms); repeat runs give the same bits.
  sweep --set   overrides the base of every run; run names unchanged; k/N done with an ETA.
  resume        optimizer.lr and scheduler.* may change (the lines after the checkpoint carry
                the new lr); other keys are refused with a reason that names their state; the
                divergence hint names only what resume accepts.
  progress      data loading lines, a line before the first evaluation, the console's cadence
                kept across evaluations, its loss the interval's mean and its scale the metrics
                line's.
  global batch  training.global_batch = batch x accumulation gives the bits of grad_accum_steps;
                one that data.batch_size does not divide is refused (exit 2, nothing created).

Usage: workflow.py AMPCTL QUICKSTART_YAML SWEEP_YAML WORKDIR
"""
import json
import math
import os
import re
import shutil
import struct
import sys

from cli_harness import FAILURES, check, run_ampctl, summary, train_lines

AMPCTL, CONFIG, SWEEP, WORK = sys.argv[1:5]
WORK = os.path.join(WORK, "friction-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


lines = train_lines


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def clip_coef(norm, max_norm):
    # nn_math.h's clip_coef in float32: max_norm / (norm + 1e-6), clamped at 1.
    denom = f32(f32(norm) + f32(1e-6))
    return min(f32(f32(max_norm) / denom), 1.0)


CPU = ["--set", "device=cpu"]
SHORT = CPU + ["--set", "training.max_steps=30", "--set", "logging.metrics_every=1",
               "--set", "training.eval_every=0", "--set", "logging.every_steps=10"]

# ---- 1. grad_norm ----
a = os.path.join(WORK, "norm-a")
p = run(["train", "--config", CONFIG] + SHORT + ["--set", "logging.tensorboard=true",
                                                  "--run-dir", a])
train_a = lines(a)
check(len(train_a) == 30, f"30 train lines, got {len(train_a)}")
norms = [l.get("grad_norm") for l in train_a]
check(all(isinstance(n, float) and math.isfinite(n) and n > 0 for n in norms),
      f"every train line has a finite grad_norm > 0: {norms[:5]}...")
check(summary(a).get("clipped_steps") == 0, "no clipping: clipped_steps 0")
check(re.search(r"gnorm [0-9.e+-]+", p.stdout) is not None, "the console shows the grad norm")
tb = [f for f in os.listdir(a) if f.startswith("events.out.tfevents")]
tb_bytes = b"".join(open(os.path.join(a, f), "rb").read() for f in tb)
check(b"train/grad_norm" in tb_bytes, "TensorBoard has train/grad_norm")

b = os.path.join(WORK, "norm-b")
run(["train", "--config", CONFIG] + SHORT + ["--run-dir", b])
strip = lambda ls: [{k: v for k, v in l.items() if k != "time_s"} for l in ls]
check(strip(lines(b)) == strip(train_a), "a repeat run gives the same grad_norm bits")

# Clipping at the median norm: every step whose own norm the coefficient scales down counts.
threshold = sorted(norms)[len(norms) // 2]
c = os.path.join(WORK, "norm-clip")
run(["train", "--config", CONFIG] + SHORT +
    ["--set", f"training.grad_clip_norm={threshold!r}", "--run-dir", c])
train_c = lines(c)
expected = sum(1 for l in train_c
               if l["grad_norm"] is not None and clip_coef(l["grad_norm"], threshold) < 1.0)
check(summary(c).get("clipped_steps") == expected,
      f"clipped_steps {summary(c).get('clipped_steps')} == steps with norm > {threshold}: "
      f"{expected}")
check(0 < expected < 30, f"the median threshold clips some steps, not all: {expected}")
check(train_c[0]["grad_norm"] == train_a[0]["grad_norm"],
      "step 1's norm is the same with clipping (it is the norm before clipping)")

# ---- 2. sweep --set ----
out = os.path.join(WORK, "sweep")
p = run(["sweep", "--config", SWEEP, "--out", out, "--set", "device=cpu",
         "--set", "training.max_steps=12", "--set", "training.eval_every=0",
         "--set", "scheduler.warmup_steps=2",
         "--set", "logging.every_steps=4"])
runs = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d)))
check(len(runs) == 4 and not any("max_steps" in r for r in runs),
      f"four runs named by the grid only: {runs}")
check(all(summary(os.path.join(out, r))["steps"] == 12 for r in runs),
      "--set training.max_steps=12 reached every run")
check(re.search(r"\[sweep\] 4/4 done, \d+s so far, ETA \d+:\d\d:\d\d", p.stdout) is not None,
      "the sweep prints k/N done with an ETA")
# The run's own value wins over --set for the same key.
p = run(["sweep", "--config", SWEEP, "--out", os.path.join(WORK, "sweep2"), "--set",
         "device=cpu", "--set", "training.max_steps=4", "--set", "scaler.init_scale=8.0",
         "--set", "scheduler.warmup_steps=2",
         "--set", "training.eval_every=0"])
with open(os.path.join(WORK, "sweep2", "init_scale=1024.0,growth_interval=20", "config.yaml")) as f:
    check(re.search(r"init_scale: 1024", f.read()) is not None, "the grid's value beats --set")
p = run(["sweep", "--config", SWEEP, "--out", os.path.join(WORK, "sweep-bad"), "--set",
         "training.max_stepz=3"], expect=2)
check("training.max_stepz" in p.stderr and not os.path.exists(os.path.join(WORK, "sweep-bad")),
      f"a bad --set is refused naming the key, nothing created: {p.stderr}")

# ---- 3. resume overrides ----
r = os.path.join(WORK, "resume")
run(["train", "--config", CONFIG] + SHORT +
    ["--set", "scheduler.type=constant", "--set", "scheduler.warmup_steps=0",
     "--set", "checkpoint.every_steps=10",
     "--set", "checkpoint.keep_last=5", "--run-dir", r])
p = run(["resume", "--checkpoint", os.path.join(r, "checkpoints", "step-00000010.json"),
         "--set", "optimizer.lr=0.0005", "--rewind"])
lrs = [l["lr"] for l in lines(r)]
check(lrs[:10] == [0.001] * 10 and lrs[10:] == [0.0005] * 20,
      f"optimizer.lr changes from the checkpoint's step on: {lrs[8:13]}")
p = run(["resume", "--checkpoint", os.path.join(r, "checkpoints", "step-00000020.json"),
         "--set", "scheduler.type=linear", "--set", "scheduler.min_lr=0.0", "--rewind"])
lrs = [l["lr"] for l in lines(r)]
check(lrs[20] > lrs[-1] and lrs[-1] < 0.0005,
      f"scheduler.* on resume: the schedule continues with the new values: {lrs[19:]}")
for key, words in [("scaler.init_scale=1024", "loss scaler"),
                   ("optimizer.betas=[0.8,0.9]", "optimizer's state"),
                   ("model.hidden=[8]", "model's tensors"),
                   ("data.batch_size=64", "cursor")]:
    p = run(["resume", "--checkpoint", r, "--set", key], expect=2)
    check(words in p.stderr and "optimizer.lr" in p.stderr,
          f"resume --set {key}: refused with a reason naming its state: {p.stderr}")
d = os.path.join(WORK, "diverge")
p = run(["train", "--config", CONFIG] + CPU +
        ["--set", "training.max_steps=10", "--set", "scaler.init_scale=1024",
         "--set", "scheduler.warmup_steps=2",
         "--set", "scaler.min_scale=1024", "--set", "debug.inject_nonfinite_at=[2,3,4,5]",
         "--set", "training.divergence_patience=3", "--set", "checkpoint.every_steps=1",
         "--set", "training.eval_every=0", "--run-dir", d], expect=1)
hint = [l for l in p.stderr.splitlines() if l.startswith("hint: ")]
# Resume accepts scaler.* (issue 27) but scaler.enabled and scaler.init_scale: the hint says so.
check(len(hint) == 1 and "optimizer.lr" in hint[0]
      and "scaler.* but scaler.enabled and scaler.init_scale" in hint[0]
      and "precision" not in hint[0], f"the divergence hint names what resume accepts: {hint}")

# ---- 5. progress ----
g = os.path.join(WORK, "progress")
p = run(["train", "--config", CONFIG] + CPU +
        ["--set", "training.max_steps=40", "--set", "logging.every_steps=10",
         "--set", "training.eval_every=15", "--set", "logging.metrics_every=1", "--run-dir", g])
steps = [int(m) for m in re.findall(r"step +(\d+)/40 ", p.stdout)]
check(steps == [10, 20, 30, 40], f"console lines at 10, 20, 30, 40 despite evaluations: {steps}")
check(re.search(r"data: loading synthetic data \(\d+ samples x \d+ features\)\n", p.stdout) and
      re.search(r"data: loaded \d+ training rows, \d+ eval rows in \d+\.\ds", p.stdout),
      "data loading start and end lines with rows and seconds")
check(re.search(r"eval  step +15: evaluating \d+ examples", p.stdout) is not None,
      "a line before the first evaluation")
check(re.search(r"^step +40/40 .* skip 0 lr ", p.stdout, re.M) is not None,
      "the skipped count on the console")
train_g = lines(g)
found = 0
for m in re.finditer(r"step +(\d+)/40 ep [0-9.e+-]+ loss ([0-9.e+-]+) gnorm "
                     r"[0-9.e+-]+ scale 2\^(-?\d+) ", p.stdout):
    found += 1
    step, loss, n, scale = int(m[1]), float(m[2]), 10, 2.0 ** int(m[3])
    window = [l for l in train_g if step - n < l["step"] <= step]
    mean = sum(l["loss"] for l in window) / len(window)
    check(abs(loss - mean) <= 1e-3 * abs(mean),
          f"step {step}: console loss {loss} is the mean {mean} of its {n} steps")
    check(scale == window[-1]["scale"], f"step {step}: console scale {scale} is the line's")
check(found == 4, f"4 console lines with loss and scale: {found}")

# ---- 6. global batch ----
ga = os.path.join(WORK, "global")
p = run(["train", "--config", CONFIG] + SHORT +
        ["--set", "data.batch_size=32", "--set", "training.global_batch=128", "--run-dir", ga])
check("global batch 128 examples per step" in p.stdout, "the start line prints the global batch")
gb = os.path.join(WORK, "accum")
run(["train", "--config", CONFIG] + SHORT +
    ["--set", "data.batch_size=32", "--set", "training.grad_accum_steps=4", "--run-dir", gb])
check(strip(lines(ga)) == strip(lines(gb)),
      "training.global_batch=128 with batch 32 trains as grad_accum_steps=4")
bad = os.path.join(WORK, "global-bad")
p = run(["train", "--config", CONFIG] + SHORT +
        ["--set", "data.batch_size=32", "--set", "training.global_batch=100", "--run-dir", bad],
        expect=2)
check("training.global_batch" in p.stderr and not os.path.exists(bad),
      f"a global batch the micro-batch does not divide is refused: {p.stderr}")

if FAILURES:
    raise SystemExit(f"{len(FAILURES)} check(s) failed")
print("all friction checks passed")
