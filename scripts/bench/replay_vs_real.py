#!/usr/bin/env python3
"""Study (not a test): how well `ampctl replay` predicts real runs (docs/reference.md, "ampctl
replay"). Trains CONFIG once at the recording's settings with grad_amax on every step, replays
a grid of scaler.init_scale x scaler.growth_interval from that one run, then trains every grid
point for real and prints, per point, the predicted and the real skipped-step count and first
skipped step, and whether the prediction holds (skips within max(2, 10 %), first skip exact).
tests/cli/replay.py asserts the same on a small config; this script is for the full-size ones.

  python3 scripts/bench/replay_vs_real.py [--build DIR] [--config FILE] [--steps N]
      [--init V1,V2,V3] [--growth G1,G2,G3] [--record-init V] [--record-growth G]
      [--out DIR] [--set KEY=VALUE]...

Defaults: configs/gpt_fortunes.yaml, 600 steps, init_scale 2^10,2^20,2^30 x growth_interval
5,50,500, recorded at 2^20 / 50. Exit status 1 when a prediction misses.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--build", default="build")
ap.add_argument("--config", default="configs/gpt_fortunes.yaml")
ap.add_argument("--steps", type=int, default=600)
ap.add_argument("--init", default="1024.0,1048576.0,1073741824.0")
ap.add_argument("--growth", default="5,50,500")
ap.add_argument("--record-init", default="1048576.0")
ap.add_argument("--record-growth", default="50")
ap.add_argument("--out", default=None)
ap.add_argument("--set", action="append", default=[])
a = ap.parse_args()

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ampctl = os.path.join(a.build, "ampctl")
out = a.out or tempfile.mkdtemp(prefix="replay_vs_real.")
os.makedirs(out, exist_ok=True)
common = ["--set", f"training.max_steps={a.steps}", "--set", "logging.grad_amax=true",
          "--set", "logging.metrics_every=1", "--set", "training.eval_every=0",
          "--set", "checkpoint.every_steps=0"]
for kv in a.set:
    common += ["--set", kv]


def train(name, init, growth):
    d = os.path.join(out, name)
    if os.path.exists(os.path.join(d, "summary.json")):
        return d
    cmd = [ampctl, "train", "--config", a.config, "--run-dir", d] + common + [
        "--set", f"scaler.init_scale={init}", "--set", f"scaler.growth_interval={growth}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{name} failed ({p.returncode}): {p.stderr[-2000:]}")
    return d


def real(d):
    skipped, first = 0, None
    for line in open(os.path.join(d, "metrics.jsonl")):
        m = json.loads(line)
        if m.get("kind") == "train" and m.get("skipped"):
            skipped += 1
            first = m["step"] if first is None else first
    return skipped, first


rec = train("record", a.record_init, a.record_growth)
p = subprocess.run([ampctl, "replay", rec, "--json", "--grid", f"scaler.init_scale={a.init}",
                    "--grid", f"scaler.growth_interval={a.growth}"], capture_output=True, text=True)
if p.returncode != 0:
    sys.exit("replay failed: " + p.stderr)
pred = json.loads(p.stdout)

print(f"{a.config}, {a.steps} steps; recorded at init_scale {a.record_init}, "
      f"growth_interval {a.record_growth}")
print(f"{'init_scale':>12} {'growth':>6} | {'replay skips':>12} {'first':>5} | "
      f"{'real skips':>10} {'first':>5} | ok")
misses = 0
for r in pred:
    init, growth = r["overrides"]["scaler.init_scale"], r["overrides"]["scaler.growth_interval"]
    d = train(f"init{init}_g{growth}", init, growth)
    rs, rf = real(d)
    ok = abs(r["skipped"] - rs) <= max(2, 0.1 * rs) and r["first_skip"] == rf
    misses += not ok
    fmt = lambda v: "-" if v is None else str(v)
    print(f"{init:>12g} {growth:>6} | {r['skipped']:>12} {fmt(r['first_skip']):>5} | "
          f"{rs:>10} {fmt(rf):>5} | {'yes' if ok else 'NO'}")
print(f"{len(pred) - misses} of {len(pred)} predictions hold")
sys.exit(1 if misses else 0)
