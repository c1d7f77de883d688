#!/usr/bin/env python3
"""scaler.policy: auto (issue 28 item 2), end to end through the real binary.

  the rule      three runs of a small fp16 MLP with two micro-batches per step, from init_scale
                2^40, 2^-20 and 65536: each skips at most 3 steps; every step's scale is the one
                the rule gives from the recorded grad_amax, restated here in Python (the largest
                power of two s with s x 2^margin x max(entries) <= 65504 over the last
                amax_history entries, an entry being grad_amax / grad_accum_steps, or on an
                overflow max(that x scale, 65504) / scale and at most scale x backoff_factor).
  resume        a copy of a run rewound to its step-15 checkpoint (--rewind) writes every later
                train line bit for bit as the uninterrupted run; the checkpoint holds the ring (amax_history).
  repeat        the same run twice: identical train lines.
  replay        `ampctl replay` of an auto run predicts its own skips, first skip and final
                scale exactly (the replay runs amp_math.h's rule on the recorded grad_amax).
  refusals      scaler.margin / amax_history without policy auto, out of range, and auto with
                precision fp32 and the scaler on: exit 2 naming the key, no run directory.

Usage: scale_auto.py AMPCTL WORKDIR
"""
import json
import math
import os
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl, train_lines

AMPCTL, WORK = sys.argv[1:3]
WORK = os.path.join(WORK, "scale-auto-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

MAXF = 65504.0
STEPS = 40
BASE = os.path.join(WORK, "base.yaml")
with open(BASE, "w") as f:
    f.write(f"""name: auto
seed: 3
device: cpu
precision: fp16
model: {{type: mlp, hidden: [64, 64], activation: relu, dropout: 0.1}}
data:
  train: {{source: synthetic, task: classification, samples: 2048, features: 32, classes: 10}}
  batch_size: 32
optimizer: {{type: adamw, lr: 0.003}}
scheduler: {{type: cosine, warmup_steps: 5}}
scaler: {{policy: auto, margin: 1, amax_history: 4}}
training: {{max_steps: {STEPS}, grad_accum_steps: 2, eval_every: 0}}
checkpoint: {{every_steps: 5, keep_last: 100}}
logging: {{every_steps: 10, metrics_every: 1}}
""")


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def train(name, *sets, expect=0):
    args = ["train", "--config", BASE, "--run-dir", os.path.join(WORK, name)]
    for s in sets:
        args += ["--set", s]
    return run(args, expect)


def rule_scale(entries, margin):
    """The largest power of two s (exponent in [-126, 127]) with s * 2^margin * max <= MAXF."""
    m = max(entries)
    if m == 0.0:
        return None
    ma, ka = math.frexp(m)
    mf, kf = math.frexp(MAXF)
    e = kf - ka - margin - (1 if ma > mf else 0)
    return math.ldexp(1.0, max(-126, min(127, e)))


def check_rule(name, lines, margin=1, history=4, accum=2, backoff=0.5):
    entries = []
    for i, l in enumerate(lines[:-1]):
        scale = l["scale"]
        raw = l["grad_amax"] / accum * scale  # the device's accumulator at this step's scale
        if l["found_inf"]:
            raw = max(raw, MAXF)
        # float32(raw / scale): exact for the power-of-two scales the rule makes.
        entries.append(raw / scale)
        target = rule_scale(entries[-history:], margin)
        want = scale if target is None else target
        if l["found_inf"]:
            want = min(scale * backoff, want)
        got = lines[i + 1]["scale"]
        if got != want:
            check(False, f"{name}: step {lines[i + 1]['step']} scale {got}, the rule gives {want}")
            return


runs = {}
for tag, init in (("high", 2.0 ** 40), ("low", 2.0 ** -20), ("default", 65536.0)):
    train(tag, f"scaler.init_scale={init!r}")
    runs[tag] = train_lines(os.path.join(WORK, tag))
    lines = runs[tag]
    check(len(lines) == STEPS, f"{tag}: {len(lines)} train lines")
    check(all("grad_amax" in l for l in lines), f"{tag}: a train line without grad_amax")
    skipped = sum(1 for l in lines if l["skipped"])
    check(skipped <= 3, f"{tag}: {skipped} skipped steps (at most 3 wanted)")
    check_rule(tag, lines)
check(any(l["skipped"] for l in runs["high"]),
      "from 2^40 no step overflowed: the overflow branch was not exercised")

# ---- resume and repeat ----
shutil.copytree(os.path.join(WORK, "default"), os.path.join(WORK, "resumed"))
ck = os.path.join(WORK, "resumed", "checkpoints", "step-00000015.json")
with open(ck) as f:
    state = json.load(f)["scaler"]
check(state.get("policy") == "auto" and len(state.get("amax_history", [])) == 4,
      f"the checkpoint's scaler state: {sorted(state)}")
run(["resume", "--checkpoint", ck, "--rewind"])
resumed = train_lines(os.path.join(WORK, "resumed"))
strip = lambda ls: [{k: v for k, v in l.items() if k != "time_s"} for l in ls]
check(strip(resumed) == strip(runs["default"]),
      "resume from step 15: the train lines differ from the uninterrupted run's")
train("again", "scaler.init_scale=65536.0")
check(strip(train_lines(os.path.join(WORK, "again"))) == strip(runs["default"]),
      "a repeat run's train lines differ")

# ---- replay of its own recording ----
for tag in ("high", "low"):
    p = run(["replay", os.path.join(WORK, tag), "--json"])
    row = json.loads(p.stdout)[0]
    lines = runs[tag]
    skips = [l["step"] for l in lines if l["skipped"]]
    check(row["skipped"] == len(skips) and row["first_skip"] == (skips[0] if skips else None),
          f"replay {tag}: predicted {row['skipped']} skips from {row['first_skip']}, real {skips}")
    # The scale after the last update (the next step's), which no line shows: the rule's.
    want = rule_scale([l["grad_amax"] / 2 for l in lines[-4:]], 1)
    inexact = sum(1 for l in lines if not l["grad_amax_exact"])
    check(row["final_scale"] == want and row["uncertain_steps"] == inexact,
          f"replay {tag}: final scale {row['final_scale']} (the rule gives {want}), "
          f"uncertain {row['uncertain_steps']}")

# ---- refusals ----
for sets, words in (
        (["scaler.policy=pytorch", "scaler.margin=2"], "scaler.margin"),
        (["scaler.policy=fairseq", "scaler.amax_history=8"], "scaler.amax_history"),
        (["scaler.margin=65"], "scaler.margin"),
        (["scaler.amax_history=0"], "scaler.amax_history"),
        (["scaler.amax_history=4097"], "scaler.amax_history"),
        (["precision=fp32", "scaler.enabled=true"], "precision fp32 rounds nothing"),
):
    d = os.path.join(WORK, "refused")
    p = train("refused", *sets, expect=2)
    check(words in p.stderr, f"{sets}: the error does not name {words!r}: {p.stderr[-300:]}")
    check(not os.path.exists(d), f"{sets}: a run directory was created")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("scale_auto: all checks passed")
