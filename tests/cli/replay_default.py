#!/usr/bin/env python3
"""grad_amax on by default (issue 48 item 2), end to end through the real binary.

  quickstart    configs/quickstart.yaml as shipped records grad_amax on every train line, and
                `ampctl replay` previews a grid from its run (exit 0); the run's own setting
                replays to its recorded skips and final scale.
  gpt           configs/gpt_fortunes.yaml as shipped (fewer steps, a smaller model) records it
                too, and replays.
  same bits     logging.grad_amax: false trains the same bits (every field of every line but
                grad_amax, grad_amax_exact and time_s).
  refusals      replay of a run without grad_amax is exit 2 with the reason and how to record it
                next time: logging.grad_amax: false (train without it), precision fp32.

Usage: replay_default.py AMPCTL ROOT WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check, run_ampctl, summary, train_lines

AMPCTL, ROOT, WORK = sys.argv[1:4]
WORK = os.path.join(WORK, "replay-default-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.yaml")
FORTUNES = os.path.join(ROOT, "configs", "gpt_fortunes.yaml")


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def training_bits(lines):
    drop = {"grad_amax", "grad_amax_exact", "time_s"}
    return [{k: v for k, v in l.items() if k not in drop} for l in lines]


# ---- the quickstart as shipped ----
q = os.path.join(WORK, "quickstart")
run(["train", "--config", QUICKSTART, "--set", "device=cpu", "--run-dir", q])
lines = train_lines(q)
check(len(lines) == 400 and all(l.get("grad_amax", -1) >= 0 for l in lines),
      "the quickstart records grad_amax on every one of its 400 train lines")
p = run(["replay", q, "--grid", "scaler.init_scale=1024,65536,1.0e9", "--json"])
rows = json.loads(p.stdout)
check(len(rows) == 3, f"replay of the quickstart: 3 rows: {p.stdout[:300]}")
own = [r for r in rows if r["overrides"].get("scaler.init_scale") in (65536, 65536.0)]
s = summary(q)
check(len(own) == 1 and own[0]["skipped"] == s["skipped_steps"] and
      own[0]["final_scale"] == s["final_scale"],
      f"the run's own setting replays to its skips and final scale: {own} vs {s}")

# ---- grad_amax changes no training bit ----
off = os.path.join(WORK, "quickstart-off")
run(["train", "--config", QUICKSTART, "--set", "device=cpu", "--run-dir", off,
     "--set", "logging.grad_amax=false"])
check(training_bits(train_lines(off)) == training_bits(lines),
      "logging.grad_amax: false trains the same bits as the default")
check(all("grad_amax" not in l for l in train_lines(off)), "false: no grad_amax field")
p = run(["replay", off], expect=2)
check("has no grad_amax" in p.stderr and "logging.grad_amax: false" in p.stderr and
      "train it again" in p.stderr, "replay without grad_amax: why, and how next time:\n" + p.stderr)

f32 = os.path.join(WORK, "fp32")
run(["train", "--config", QUICKSTART, "--set", "device=cpu", "--run-dir", f32,
     "--set", "precision=fp32", "--set", "training.max_steps=30"])
p = run(["replay", f32], expect=None)
check(p.returncode == 2 and "fp32" in p.stderr, "replay of an fp32 run: exit 2 naming fp32:\n" +
      p.stderr)

# ---- the fortunes GPT as shipped ----
corpus = os.path.join(WORK, "fortunes.txt")
made = subprocess.run(["bash", os.path.join(ROOT, "scripts", "examples", "fortunes_corpus.sh"),
                       corpus], capture_output=True, text=True)
if made.returncode != 0:
    print("SKIPPED (part): the GPT run needs the fortunes package: " + made.stderr)
else:
    g = os.path.join(WORK, "gpt")
    run(["train", "--config", FORTUNES, "--set", "device=cpu", "--run-dir", g,
         "--set", f"data.train.path={corpus}", "--set", "training.max_steps=30",
         "--set", "model.n_layer=1", "--set", "training.eval_every=0",
         "--set", "scheduler.warmup_steps=10",
         "--set", "training.eval_batches=2"])
    glines = train_lines(g)
    check(len(glines) == 30 and all(l.get("grad_amax", 0) > 0 for l in glines),
          "the GPT records a positive grad_amax on every train line")
    p = run(["replay", g, "--grid", "scaler.policy=pytorch,auto", "--json"])
    check(len(json.loads(p.stdout)) == 2, "replay of the GPT run: 2 rows")

if FAILURES:
    sys.exit(f"{len(FAILURES)} check(s) failed")
print("replay_default: all checks passed")
