#!/usr/bin/env python3
"""resume and the lr schedule (issue 48 items 1 and 13), end to end through the real binary.

  decay_steps     scheduler.decay_steps = training.max_steps trains the same bits as leaving it
                  at 0 (its default: the run's length); the lr of every step is the closed form
                  of docs/reference.md recomputed here.
  extension       a finished cosine run extended by `resume --set training.max_steps=N`:
                  without decay_steps the schedule re-stretches, and resume warns with the lr of
                  the next step before and after (the value the next metrics line records) and
                  names --set scheduler.decay_steps=OLD; with decay_steps set (at the start, or on
                  the resume) every new step's lr is min_lr, exactly.
  finished        `resume` of a finished run with nothing to extend: exit 0, says it is finished
                  and how to extend it, loads no data, leaves the run's files as they were.
  later ckpts     the refusal to resume from an older checkpoint names at most three later
                  checkpoints; more as the count, the first and the last.

Usage: resume_schedule.py AMPCTL WORKDIR
"""
import json
import math
import os
import re
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl, train_lines

AMPCTL, WORK = sys.argv[1:3]
WORK = os.path.join(WORK, "resume-schedule-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

STEPS, LR, MIN_LR, WARMUP = 20, 0.01, 0.001, 2
BASE = os.path.join(WORK, "base.yaml")
with open(BASE, "w") as f:
    f.write(f"""name: sched
seed: 0
device: cpu
precision: fp16
model: {{type: mlp, hidden: [16], activation: relu}}
data:
  train: {{source: synthetic, task: classification, samples: 256, features: 8, classes: 4}}
  batch_size: 32
optimizer: {{type: adamw, lr: {LR}}}
scheduler: {{type: cosine, warmup_steps: {WARMUP}, min_lr: {MIN_LR}}}
training: {{max_steps: {STEPS}, eval_every: 0}}
logging: {{every_steps: 5, metrics_every: 1}}
""")


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def train(name, *sets):
    d = os.path.join(WORK, name)
    args = ["train", "--config", BASE, "--run-dir", d]
    for s in sets:
        args += ["--set", s]
    run(args)
    return d


def cosine(t, total):
    """docs/reference.md's closed form (iteration t, 0-based), min_lr past the decay's end."""
    if t < WARMUP:
        return LR * t / WARMUP
    t = min(t, total)
    return MIN_LR + (LR - MIN_LR) * (1 + math.cos(math.pi * (t - WARMUP) / (total - WARMUP))) / 2


def strip(lines):
    return [{k: v for k, v in l.items() if k != "time_s"} for l in lines]


# ---- decay_steps = max_steps is the default's schedule, bit for bit ----
plain = train("plain")
fixed = train("fixed", f"scheduler.decay_steps={STEPS}")
check(strip(train_lines(plain)) == strip(train_lines(fixed)),
      "decay_steps = max_steps trains as the default (0) does")
for l in train_lines(plain):
    want = cosine(l["step"] - 1, STEPS)
    check(abs(l["lr"] - want) <= 1e-12 * LR, f"step {l['step']}: lr {l['lr']} != {want}")

# ---- finished: nothing to resume, no data loaded, nothing changed ----
before = {f: open(os.path.join(plain, f), "rb").read() for f in ("metrics.jsonl", "summary.json")}
p = run(["resume", "--checkpoint", plain])
out = p.stdout + p.stderr
check(f"finished at step {STEPS}" in out and "nothing to resume" in out,
      "resume of a finished run says it is finished:\n" + out)
check(f"--set training.max_steps=N, N > {STEPS}" in out and
      f"--set scheduler.decay_steps={STEPS}" in out,
      "it says how to extend the run, and which key keeps the decay:\n" + out)
check("data: loading" not in out and "resuming" not in out, "it loads no data:\n" + out)
after = {f: open(os.path.join(plain, f), "rb").read() for f in before}
check(before == after, "metrics.jsonl and summary.json are left as they were")

# ---- extension without decay_steps: re-stretched, and said ----
NEW = 30
ext = os.path.join(WORK, "ext")
shutil.copytree(plain, ext)
p = run(["resume", "--checkpoint", ext, "--set", f"training.max_steps={NEW}"])
out = p.stdout + p.stderr
m = re.search(rf"warning: schedule: training.max_steps {STEPS} -> {NEW} stretches the cosine "
              rf"schedule from {STEPS} to {NEW} steps: lr at step {STEPS + 1} (\S+) -> (\S+); .*"
              rf"--set scheduler.decay_steps={STEPS}\n", out)
check(m is not None, "the extension's warning with the lr before and after:\n" + out)
lines = {l["step"]: l for l in train_lines(ext)}
check(sorted(lines) == list(range(1, NEW + 1)), f"steps 1..{NEW}: {sorted(lines)}")
if m:
    was, now = float(m[1]), float(m[2])
    check(was == float("%.4g" % cosine(STEPS, STEPS)), f"the old lr {was} (min_lr {MIN_LR})")
    check(now == float("%.4g" % lines[STEPS + 1]["lr"]),
          f"the new lr {now} is step {STEPS + 1}'s ({lines[STEPS + 1]['lr']})")
    check(now > 2 * MIN_LR, f"re-stretched: the lr rose off the floor ({now})")
for s in range(STEPS + 1, NEW + 1):
    check(abs(lines[s]["lr"] - cosine(s - 1, NEW)) <= 1e-12 * LR,
          f"extended step {s}: lr {lines[s]['lr']} follows the {NEW}-step cosine")

# ---- extension with decay_steps: the lr stays at the floor ----
for name, start_sets, resume_sets in [
        ("kept", [f"scheduler.decay_steps={STEPS}"], []),
        ("kept-on-resume", [], [f"scheduler.decay_steps={STEPS}"])]:
    d = train(name, *start_sets)
    args = ["resume", "--checkpoint", d, "--set", f"training.max_steps={NEW}"]
    for s in resume_sets:
        args += ["--set", s]
    p = run(args)
    out = p.stdout + p.stderr
    check("stretches" not in out and
          f"keeps its {STEPS} steps (scheduler.decay_steps): lr at step {STEPS + 1}" in out,
          f"{name}: resume says the decay keeps its length:\n" + out)
    new = [l for l in train_lines(d) if l["step"] > STEPS]
    check(len(new) == NEW - STEPS and all(l["lr"] == MIN_LR for l in new),
          f"{name}: every extended step runs at min_lr: {[l['lr'] for l in new]}")

# ---- decay_steps is checked against the warm-up ----
p = run(["validate", "--config", BASE, "--set", "scheduler.decay_steps=2"], expect=2)
check("scheduler.warmup_steps" in p.stderr and "scheduler.decay_steps (2)" in p.stderr,
      "warmup_steps >= decay_steps is refused naming both:\n" + p.stderr)

# ---- the refusal to replace a run's history names a long list briefly ----
many = train("many", "checkpoint.every_steps=1", "checkpoint.keep_last=100")
ck2 = os.path.join(many, "checkpoints", "step-00000002.json")
p = run(["resume", "--checkpoint", ck2], expect=2)
check(f"later checkpoints ({STEPS - 2}: step-00000003.json to step-{STEPS:08d}.json)" in p.stderr,
      "the later checkpoints as the count, the first and the last:\n" + p.stderr)
few = train("few", "checkpoint.every_steps=9")
p = run(["resume", "--checkpoint", os.path.join(few, "checkpoints", "step-00000009.json")],
        expect=2)
check(f"later checkpoints (step-00000018.json, step-{STEPS:08d}.json)" in p.stderr,
      "two later checkpoints by name:\n" + p.stderr)

if FAILURES:
    sys.exit(f"{len(FAILURES)} check(s) failed")
print("resume_schedule: all checks passed")
