#!/usr/bin/env python3
"""`ampctl replay` (issue 28 item 3) against reality, end to end through the real binary.

  replay vs real  one run of a small fp16 MLP (logging.grad_amax: true) is recorded with settings
                  that overflow; `ampctl replay --json` previews a 3 x 3 grid of init_scale x
                  growth_interval from it; each of the nine settings is then trained for real.
                  Each prediction must match the real run's skipped-step count within
                  max(2, 10 %) and its first skipped step exactly. The grid of the recording's
                  own setting must reproduce the recording exactly (skips and scales).
  table           the text table has one row per grid point; --json has exactly the keys
                  documented in docs/reference.md.
  refusals        a run without grad_amax: exit 2 with the hint; a non-scaler key, an unknown
                  scaler key and a bad value: exit 2 naming the key.

Usage: replay.py AMPCTL WORKDIR
"""
import json
import math
import os
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl, train_lines

AMPCTL, WORK = sys.argv[1:3]
WORK = os.path.join(WORK, "replay-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


lines = train_lines


STEPS = 300
BASE = os.path.join(WORK, "base.yaml")
with open(BASE, "w") as f:
    f.write(f"""name: replay
seed: 0
device: cpu
precision: fp16
model: {{type: mlp, hidden: [64, 64], activation: relu}}
data:
  train: {{source: synthetic, task: classification, samples: 2048, features: 32, classes: 10}}
  batch_size: 64
optimizer: {{type: adamw, lr: 0.001}}
scheduler: {{type: cosine, warmup_steps: 20}}
scaler: {{init_scale: 65536.0, growth_interval: 100}}
training: {{max_steps: {STEPS}, eval_every: 0}}
logging: {{every_steps: 100, metrics_every: 1, grad_amax: true}}
""")


def train(name, *sets):
    d = os.path.join(WORK, name)
    args = ["train", "--config", BASE, "--run-dir", d]
    for s in sets:
        args += ["--set", s]
    run(args)
    return d


INIT_V = [2.0**12, 2.0**20, 2.0**28]
GROWTH = [5, 20, 80]
REC_SETS = ["scaler.init_scale=1048576.0", "scaler.growth_interval=20"]
rec = train("recorded", *REC_SETS)
rec_lines = lines(rec)
check(len(rec_lines) == STEPS and all("grad_amax" in l for l in rec_lines),
      "the recording has grad_amax on every step")

grid = ["--grid", "scaler.init_scale=" + ",".join(str(v) for v in INIT_V),
        "--grid", "scaler.growth_interval=" + ",".join(str(g) for g in GROWTH)]
p = run(["replay", rec, "--json"] + grid)
pred = json.loads(p.stdout)
check(len(pred) == 9, f"9 rows, got {len(pred)}")
KEYS = ["overrides", "skipped", "first_skip", "retries", "min_scale", "max_scale",
        "final_scale", "mean_headroom_log2", "min_headroom_log2", "uncertain_steps"]
for row in pred:
    check(list(row) == KEYS, f"--json keys {list(row)}")

# The recording's own setting replays the recording exactly.
rec_skips = [l["step"] for l in rec_lines if l["skipped"]]
own = json.loads(run(["replay", rec, "--json"]).stdout)
check(len(own) == 1 and own[0]["overrides"] == {}, "no flags: one row, no overrides")
check(own[0]["skipped"] == len(rec_skips) and
      own[0]["first_skip"] == (rec_skips[0] if rec_skips else None),
      f"own setting: replay {own[0]['skipped']} skips from {own[0]['first_skip']}, "
      f"recorded {len(rec_skips)} from {rec_skips[:1]}")
check(own[0]["max_scale"] >= max(l["scale"] for l in rec_lines) and
      own[0]["min_scale"] <= min(l["scale"] for l in rec_lines),
      "own setting: the scale range covers the recorded one")

print(f"{'init_scale':>10} {'growth':>6} | {'real skips':>10} {'first':>5} | "
      f"{'replay skips':>12} {'first':>5} {'uncertain':>9}")
for row in pred:
    init = row["overrides"]["scaler.init_scale"]
    growth = row["overrides"]["scaler.growth_interval"]
    real = train(f"real-{init:g}-{growth}", f"scaler.init_scale={init!r}",
                 f"scaler.growth_interval={growth}")
    skips = [l["step"] for l in lines(real) if l["skipped"]]
    first = skips[0] if skips else None
    print(f"{init:>10g} {growth:>6} | {len(skips):>10} {str(first):>5} | "
          f"{row['skipped']:>12} {str(row['first_skip']):>5} {row['uncertain_steps']:>9}",
          flush=True)
    tol = max(2, math.floor(0.1 * len(skips)))
    check(abs(row["skipped"] - len(skips)) <= tol,
          f"init {init:g} growth {growth}: replay {row['skipped']} skips, real {len(skips)}")
    check(row["first_skip"] == first,
          f"init {init:g} growth {growth}: replay first skip {row['first_skip']}, real {first}")
check(any(r["skipped"] > 5 for r in pred), "some setting of the grid overflows often")

# on_overflow: retry, predicted and trained: the same retries and skips (a retried attempt tests
# the same grad_amax at the backed-off scale).
for init, retries in [(2.0**20, 2), (2.0**28, 1)]:
    sets = [f"scaler.init_scale={init!r}", "scaler.growth_interval=20",
            "scaler.on_overflow=retry", f"scaler.max_retries={retries}"]
    row = json.loads(run(["replay", rec, "--json"] + sum([["--set", s] for s in sets], [])).stdout)[0]
    real = train(f"retry-{init:g}-{retries}", *sets)
    real_lines = lines(real)
    skips = [l["step"] for l in real_lines if l["skipped"]]
    real_retries = sum(l.get("retries", 0) for l in real_lines)
    print(f"retry init {init:g} max_retries {retries}: real {len(skips)} skips from "
          f"{skips[:1]}, {real_retries} retries; replay {row['skipped']} from "
          f"{row['first_skip']}, {row['retries']} retries", flush=True)
    check(abs(row["skipped"] - len(skips)) <= max(2, math.floor(0.1 * len(skips))) and
          row["first_skip"] == (skips[0] if skips else None),
          f"retry init {init:g}: skips replay {row['skipped']}/{row['first_skip']}, real "
          f"{len(skips)}/{skips[:1]}")
    check(abs(row["retries"] - real_retries) <= max(2, math.floor(0.1 * real_retries)),
          f"retry init {init:g}: retries replay {row['retries']}, real {real_retries}")

# The text table: one row per point.
table = run(["replay", rec] + grid).stdout
check(sum(1 for l in table.splitlines() if "growth_interval=" in l) == 9,
      "the table has 9 rows:\n" + table)

# Refusals.
plain = os.path.join(WORK, "plain")
run(["train", "--config", BASE, "--run-dir", plain, "--set", "logging.grad_amax=false",
     "--set", "training.max_steps=30"])
p = run(["replay", plain], expect=2)
check("logging.grad_amax" in p.stderr, "a run without grad_amax: the hint\n" + p.stderr)
sparse = os.path.join(WORK, "sparse")
run(["train", "--config", BASE, "--run-dir", sparse, "--set", "logging.metrics_every=2",
     "--set", "training.max_steps=30"])
p = run(["replay", sparse], expect=2)
check("logging.metrics_every" in p.stderr, "a run without every step's line: the hint\n" + p.stderr)
gb = os.path.join(WORK, "global-batch")
run(["train", "--config", BASE, "--run-dir", gb, "--set", "training.global_batch=128",
     "--set", "training.max_steps=30"])
p = run(["replay", gb], expect=2)
check("training.global_batch" in p.stderr, "a global_batch run: refused naming the key\n" + p.stderr)
# A grad_accum_steps run replays with grad_amax x scale / 2 (the seed is scale / micro-batches):
# the recorded setting reproduces its own skips.
acc = train("accum", "training.grad_accum_steps=2", "scaler.init_scale=268435456.0",
            "scaler.growth_interval=20", "training.max_steps=100")
acc_skips = [l["step"] for l in lines(acc) if l["skipped"]]
row = json.loads(run(["replay", acc, "--json"]).stdout)[0]
check(row["skipped"] == len(acc_skips) and row["first_skip"] == (acc_skips[0] if acc_skips else None),
      f"grad_accum_steps 2: replay {row['skipped']} from {row['first_skip']}, recorded "
      f"{len(acc_skips)} from {acc_skips[:1]}")
for bad, key in [("optimizer.lr=0.1", "optimizer.lr"), ("scaler.nosuch=1", "scaler.nosuch"),
                 ("scaler.growth_interval=-3", "scaler.growth_interval")]:
    p = run(["replay", rec, "--set", bad], expect=2)
    check(key in p.stderr, f"--set {bad}: names {key}\n" + p.stderr)
p = run(["replay", rec, "--grid", "scaler.backoff_factor=0.5,7"], expect=2)
check("scaler.backoff_factor" in p.stderr, "--grid bad value names the key\n" + p.stderr)
# A damaged metrics.jsonl: a train line whose field has the wrong type or range is refused
# naming the file, the line and the key (exit 2, not an internal error); a torn last line (a
# killed run) is dropped, as resume drops it.
rec_text = open(os.path.join(rec, "metrics.jsonl")).read().splitlines()
first = next(i for i, l in enumerate(rec_text) if json.loads(l).get("kind", "train") == "train")
for key, value in [("step", '"3"'), ("step", "2.5"), ("step", "-1"), ("scale", '"big"'),
                   ("scale", "-2.0"), ("found_inf", '"no"'), ("grad_amax", "-1.0"),
                   ("grad_amax", '"x"'), ("grad_amax_exact", "3")]:
    damaged = os.path.join(WORK, "damaged")
    shutil.rmtree(damaged, ignore_errors=True)
    shutil.copytree(rec, damaged)
    text = list(rec_text)
    obj = json.loads(text[first])
    obj[key] = json.loads(value)
    text[first] = json.dumps(obj)
    with open(os.path.join(damaged, "metrics.jsonl"), "w") as f:
        f.write("\n".join(text) + "\n")
    p = run(["replay", damaged], expect=2)
    check(f"metrics.jsonl: line {first + 1}: {key} must be" in p.stderr,
          f"{key}={value}: refused naming the line and the key\n" + p.stderr)
torn = os.path.join(WORK, "torn")
shutil.rmtree(torn, ignore_errors=True)
shutil.copytree(rec, torn)
with open(os.path.join(torn, "metrics.jsonl"), "a") as f:
    f.write('{"kind":"train","step":99999,"lo')
check(json.loads(run(["replay", torn, "--json"]).stdout) == json.loads(run(["replay", rec, "--json"]).stdout),
      "a torn last line is dropped")

if FAILURES:
    print(f"{len(FAILURES)} failure(s)")
    sys.exit(1)
print("replay: all checks passed")
