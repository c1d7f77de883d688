#!/usr/bin/env python3
"""Checkpoints by default, the best one kept, early stopping (issue 48 item 9), end to end.

  at_eval       with the defaults a run with training.eval_every checkpoints at every
                evaluation step (checkpoint.at_eval: true); false: only at the end. keep_last
                prunes the older ones, and the console names each file it removes.
  keep_best     checkpoint.keep_best: eval_accuracy / eval_loss keeps the checkpoint of the best
                evaluation (the first to reach the best value, computed here from the eval lines)
                beside the last keep_last, never pruned; summary.json names it.
  early_stop    training.early_stop stops the run (exit 0, status ok, a checkpoint) at the
                evaluation where the metric has gone `patience` evaluations without improving by
                more than min_delta, recomputed here from the eval lines; summary.json says so;
                a resume of it says it stopped early and how to go on; a run resumed before its
                stop stops where the uninterrupted one did (the count is in the checkpoint).
  refusals      keep_best / early_stop without evaluation data, eval_accuracy on a regression,
                early_stop without training.eval_every: exit 2 naming the key.

Usage: checkpoint_policy.py AMPCTL WORKDIR
"""
import json
import os
import re
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl, summary, train_lines

AMPCTL, WORK = sys.argv[1:3]
WORK = os.path.join(WORK, "checkpoint-policy-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

BASE = os.path.join(WORK, "base.yaml")
with open(BASE, "w") as f:
    f.write("""name: ckpt
seed: 0
device: cpu
precision: fp16
model: {type: mlp, hidden: [32], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  eval: {split_fraction: 0.25}
  batch_size: 32
optimizer: {type: adamw, lr: 0.01}
training: {max_steps: 30, eval_every: 5}
logging: {every_steps: 10}
""")


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def train(name, *sets, expect=0):
    d = os.path.join(WORK, name)
    args = ["train", "--config", BASE, "--run-dir", d]
    for s in sets:
        args += ["--set", s]
    return d, run(args, expect)


def files(d):
    return sorted(f for f in os.listdir(os.path.join(d, "checkpoints")) if f.startswith("step-"))


def name(step):
    return "step-%08d.json" % step


def evals(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [l for l in map(json.loads, f) if l.get("kind") == "eval"]


def track(lines, key, lower, min_delta=0.0):
    """The tracker's rule: (best step, best value, evaluations since) after each line."""
    best, best_step, since, out = None, 0, 0, []
    for l in lines:
        v = l.get(key)
        if v is not None and (best is None or (v < best - min_delta if lower else v > best + min_delta)):
            best, best_step, since = v, l["step"], 0
        else:
            since += 1
        out.append((best_step, best, since))
    return out


# ---- at_eval, keep_last and the prune on the console ----
d, p = train("all", "checkpoint.keep_last=100")
check(files(d) == [name(s) for s in range(5, 31, 5)], f"a checkpoint at every evaluation: {files(d)}")
d, p = train("pruned")
check(files(d) == [name(s) for s in (20, 25, 30)], f"keep_last 3 of them: {files(d)}")
check(re.search(r"^checkpoint: removed step-00000005\.json \(checkpoint\.keep_last 3\)$",
                p.stdout, re.M) is not None, "the console names the pruned file:\n" + p.stdout)
d, p = train("end-only", "checkpoint.at_eval=false")
check(files(d) == [name(30)], f"at_eval: false: only the end's: {files(d)}")

# ---- keep_best ----
for metric, key, lower in (("eval_accuracy", "accuracy", False), ("eval_loss", "loss", True)):
    d, p = train("best-" + metric, f"checkpoint.keep_best={metric}", "checkpoint.keep_last=1",
                 "training.max_steps=60", "optimizer.lr=0.05")
    ev = evals(d)
    best_step, best, _ = track(ev, key, lower)[-1]
    want = sorted({name(best_step), name(60)})
    check(files(d) == want, f"{metric}: the best ({best_step}) and the last: {files(d)} vs {want}")
    b = summary(d).get("best_checkpoint", {})
    check(b.get("step") == best_step and b.get("value") == best and b.get("metric") == metric and
          b.get("checkpoint", "").endswith(name(best_step)),
          f"{metric}: summary.json's best_checkpoint {b}, want step {best_step} value {best}")
    check(f"(best {metric} " in p.stdout, f"{metric}: the console marks the best checkpoint")
    if metric == "eval_accuracy":
        check(best_step != 60, "the case proves something: the best is not the last evaluation")

# ---- early_stop ----
d, p = train("early", "training.early_stop.metric=eval_loss", "training.early_stop.patience=2",
             "training.early_stop.min_delta=100.0", "training.max_steps=200")
# min_delta 100: only the first evaluation improves, so the third (step 15) stops the run.
check([l["step"] for l in evals(d)] == [5, 10, 15], f"evaluations until the stop: {evals(d)}")
check(train_lines(d)[-1]["step"] == 15, "no step after the stop")
s = summary(d)
check(s["status"] == "ok" and s.get("early_stop", {}).get("step") == 15 and
      s["early_stop"].get("best_step") == 5, f"summary.json's early_stop: {s.get('early_stop')}")
check(name(15) in files(d), "a checkpoint at the stop")
check("early stop at step 15: eval_loss has not improved by more than 100 in 2 evaluations" in
      p.stdout, "the console says why it stopped:\n" + p.stdout)
p = run(["resume", "--checkpoint", d])
check("stopped early at step 15" in p.stdout and "training.early_stop.metric=none" in p.stdout,
      "resume of an early-stopped run says so:\n" + p.stdout)

sets = ["training.early_stop.metric=eval_accuracy", "training.early_stop.patience=3",
        "optimizer.lr=0.05"]
full, _ = train("early-full", *sets, "training.max_steps=300")
ev = evals(full)
stops = [l["step"] for l, t in zip(ev, track(ev, "accuracy", False)) if t[2] >= 3]
check(stops and stops[0] == ev[-1]["step"] < 300,
      f"the stop is the first evaluation 3 past the best: {stops[:1]}, last eval {ev[-1]['step']}")
part, _ = train("early-part", *sets, "training.max_steps=10")
run(["resume", "--checkpoint", part, "--set", "training.max_steps=300"])
strip = lambda ls: [{k: v for k, v in l.items() if k != "time_s"} for l in ls]
check(strip(train_lines(part)) == strip(train_lines(full)) and
      [l["step"] for l in evals(part)] == [l["step"] for l in ev],
      "a run resumed before its stop stops where the uninterrupted one did")

# ---- refusals ----
p = run(["validate", "--config", BASE, "--set", "data.eval=null", "--set",
         "checkpoint.keep_best=eval_loss"], expect=2)
check("checkpoint.keep_best" in p.stderr and "data.eval" in p.stderr, "keep_best without eval data")
p = run(["validate", "--config", BASE, "--set", "training.eval_every=0", "--set",
         "training.early_stop.metric=eval_loss"], expect=2)
check("training.early_stop.metric" in p.stderr and "training.eval_every" in p.stderr,
      "early_stop without eval_every:\n" + p.stderr)
p = run(["validate", "--config", BASE, "--set",
         "data.train={source: synthetic, task: regression, samples: 256, features: 8}",
         "--set", "checkpoint.keep_best=eval_accuracy"], expect=2)
check("eval_accuracy needs a classification task" in p.stderr, "eval_accuracy on a regression")

if FAILURES:
    sys.exit(f"{len(FAILURES)} check(s) failed")
print("checkpoint_policy: all checks passed")
