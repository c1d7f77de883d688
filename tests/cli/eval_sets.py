#!/usr/bin/env python3
"""Several named evaluation sets (issue 48 item 14): `data.eval` as a map of name -> source.

  values       a tiny GPT on text with two named sets: every eval line carries the first set's
               loss under today's keys ("set" names it) and the second's as eval.NAME.loss; each
               equals what `ampctl eval` gives on the same checkpoint with that set's file as
               the only data.eval (a reference computed another way), and the first set's
               equals the loss of a run with the single form (whose lines keep today's keys and
               no others); summary.json's eval_sets holds each set's last and best losses.
  keep_best    checkpoint.keep_best: eval.NAME.loss keeps the checkpoint best by that set
               (recomputed here from the eval lines); summary.json names the metric.
  resume       a resumed run evaluates the same sets; changing one on resume is refused.
  refusals     a bad set name, a metric naming no set, more than 8 sets, {split_fraction} as
               a further set: exit 2 naming the file, line and key, no run directory.

Usage: eval_sets.py AMPCTL WORKDIR
"""
import json
import math
import os
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl, summary, train_lines

AMPCTL, WORK = sys.argv[1:3]
WORK = os.path.join(WORK, "eval-sets-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def write(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# Three texts over one alphabet: the training text, a like one, and an unlike one.
TRAIN = write("train.txt", "the quick brown fox jumps over the lazy dog. " * 60)
VALID = write("valid.txt", "the lazy dog jumps over the quick brown fox. " * 12)
OTHER = write("other.txt", "zyxwvutsrqponmlkjihgfedcba .thequickbrownfox " * 12)

HEAD = """seed: 1
device: cpu
precision: fp16
model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 16, block_size: 16}
optimizer: {type: adamw, lr: 0.01}
training: {max_steps: 20, eval_every: 5, eval_batches: 2}
logging: {every_steps: 10}
"""
NAMED = write("named.yaml", "name: named\n" + HEAD + f"""data:
  train: {{source: text, path: {TRAIN}}}
  eval:
    valid: {{source: text, path: {VALID}}}
    other: {{source: text, path: {OTHER}}}
  batch_size: 4
""")
SINGLE = write("single.yaml", "name: single\n" + HEAD + f"""data:
  train: {{source: text, path: {TRAIN}}}
  eval: {{source: text, path: {VALID}}}
  batch_size: 4
""")


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def evals(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [l for l in map(json.loads, f) if l.get("kind") == "eval"]


def ckpt(d, step):
    return os.path.join(d, "checkpoints", "step-%08d.json" % step)


# ---- values: the eval lines against ampctl eval and against the single form ----
named = os.path.join(WORK, "named")
p = run(["train", "--config", NAMED, "--run-dir", named, "--set", "checkpoint.keep_last=10"])
ev = evals(named)
check([l["step"] for l in ev] == [5, 10, 15, 20], f"an evaluation every 5 steps: {ev}")
for l in ev:
    check(l.get("set") == "valid" and isinstance(l.get("loss"), float) and
          isinstance(l.get("eval.other.loss"), float) and "eval.valid.loss" not in l and
          abs(l.get("eval.other.perplexity", 0) - math.exp(l["eval.other.loss"])) < 1e-9 * l["eval.other.perplexity"],
          f"the first set under today's keys, the second as eval.other.loss: {l}")
check(any(l["loss"] != l["eval.other.loss"] for l in ev), "the two sets give different losses")
check("evaluation sets: valid (" in p.stdout and ", other (" in p.stdout,
      "the console lists the sets:\n" + p.stdout[-2000:])
check(" valid loss " in p.stdout and " | other loss " in p.stdout,
      "the console's eval line names each set:\n" + p.stdout[-2000:])
for step in (10, 20):
    line = next(l for l in ev if l["step"] == step)
    for path, key in ((VALID, "loss"), (OTHER, "eval.other.loss")):
        r = json.loads(run(["eval", "--checkpoint", ckpt(named, step), "--json", "--set",
                            f"data.eval={{source: text, path: {path}}}"]).stdout)
        check(r["loss"] == line[key],
              f"step {step} {key}: the run's {line[key]!r}, ampctl eval's {r['loss']!r}")
# ampctl eval of the named run itself evaluates the first set, as the line's loss.
r = json.loads(run(["eval", "--checkpoint", ckpt(named, 20), "--json"]).stdout)
check(r["loss"] == ev[-1]["loss"], f"ampctl eval on the named config: {r} vs {ev[-1]}")

single = os.path.join(WORK, "single")
run(["train", "--config", SINGLE, "--run-dir", single])
sev = evals(single)
check(all(set(l) == {"kind", "step", "loss", "perplexity", "time_s"} for l in sev),
      f"the single form's eval lines keep today's keys: {sev[:1]}")
check([l["loss"] for l in sev] == [l["loss"] for l in ev],
      "the first set's losses are the single form's: "
      f"{[l['loss'] for l in sev]} vs {[l['loss'] for l in ev]}")
check([l["loss"] for l in train_lines(single)] == [l["loss"] for l in train_lines(named)],
      "more sets change no training step")
check("eval_sets" not in summary(single), "the single form's summary.json has no eval_sets")

s = summary(named)
sets = s.get("eval_sets", {})
check(sorted(sets) == ["other", "valid"], f"summary.json's eval_sets names both: {sets}")
for name, key in (("valid", "loss"), ("other", "eval.other.loss")):
    got = sets.get(name, {})
    check(got.get("loss") == ev[-1][key] and got.get("best_loss") == min(l[key] for l in ev),
          f"summary.json eval_sets.{name}: {got}, want last {ev[-1][key]} best "
          f"{min(l[key] for l in ev)}")
check(s.get("best_eval_loss") == min(l["loss"] for l in ev),
      "best_eval_loss is the first set's, as before")

# ---- classification: the split form as the first set, accuracy per set ----
MLP = write("mlp.yaml", """name: mlp
seed: 2
device: cpu
precision: fp16
model: {type: mlp, hidden: [16], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  eval:
    held: {split_fraction: 0.25}
    fresh: {source: synthetic, task: classification, samples: 96, features: 8, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 0.01}
training: {max_steps: 12, eval_every: 6}
checkpoint: {keep_best: eval.fresh.accuracy, keep_last: 5}
""")
mlp = os.path.join(WORK, "mlp")
run(["train", "--config", MLP, "--run-dir", mlp])
ev = evals(mlp)
check(all(l.get("set") == "held" and isinstance(l.get("accuracy"), float) and
          isinstance(l.get("eval.fresh.accuracy"), float) for l in ev) and len(ev) == 2,
      f"both sets' accuracy on each line: {ev}")
fresh = "{source: synthetic, task: classification, samples: 96, features: 8, classes: 4}"
r = json.loads(run(["eval", "--checkpoint", ckpt(mlp, 12), "--json", "--set",
                    f"data.eval={fresh}"]).stdout)
check(r["loss"] == ev[-1]["eval.fresh.loss"] and r["accuracy"] == ev[-1]["eval.fresh.accuracy"]
      and r["rows"] == 96, f"the fresh set against ampctl eval: {r} vs {ev[-1]}")
r = json.loads(run(["eval", "--checkpoint", ckpt(mlp, 12), "--json"]).stdout)
check(r["loss"] == ev[-1]["loss"] and r["accuracy"] == ev[-1]["accuracy"] and r["rows"] == 64,
      f"the held-out first set against ampctl eval: {r} vs {ev[-1]}")
b = summary(mlp).get("best_checkpoint", {})
want = max(ev, key=lambda l: (l["eval.fresh.accuracy"], -l["step"]))
check(b.get("metric") == "eval.fresh.accuracy" and b.get("step") == want["step"],
      f"keep_best eval.fresh.accuracy: {b} vs {want}")

# ---- keep_best on a named set ----
best = os.path.join(WORK, "best")
p = run(["train", "--config", NAMED, "--run-dir", best, "--set",
         "checkpoint.keep_best=eval.other.loss", "--set", "checkpoint.keep_last=1"])
ev = evals(best)
best_line = min(ev, key=lambda l: (l["eval.other.loss"], l["step"]))
files = sorted(f for f in os.listdir(os.path.join(best, "checkpoints")) if f.startswith("step-"))
want = sorted({"step-%08d.json" % best_line["step"], "step-%08d.json" % 20})
check(files == want, f"keep_best eval.other.loss keeps step {best_line['step']}: {files}")
check(best_line["step"] != 20 and best_line["step"] != min(ev, key=lambda l: l["loss"])["step"],
      "the case proves something: the other set's best is neither the last evaluation nor the "
      f"first set's best: {ev}")
b = summary(best).get("best_checkpoint", {})
check(b.get("metric") == "eval.other.loss" and b.get("step") == best_line["step"] and
      b.get("value") == best_line["eval.other.loss"], f"summary.json's best_checkpoint: {b}")
check("(best eval.other.loss " in p.stdout, "the console marks the best checkpoint")

# ---- resume: the same sets; a changed set is refused ----
p = run(["resume", "--checkpoint", named, "--set", "training.max_steps=25"])
ev = evals(named)
check(ev[-1]["step"] == 25 and isinstance(ev[-1].get("eval.other.loss"), float) and
      ev[-1].get("set") == "valid", f"the resumed run evaluates both sets: {ev[-1]}")
p = run(["resume", "--checkpoint", named, "--set", "training.max_steps=30", "--set",
         f"data.eval.other.path={VALID}"], expect=2)
check("data.eval.other.path" in p.stderr and "evaluation sets" in p.stderr,
      "a changed set on resume names the key:\n" + p.stderr)

# ---- refusals: exit 2 naming file:line:key, no run directory ----
def refused(text, *needles, sets=()):
    path = write("bad.yaml", "name: bad\n" + HEAD + text)
    d = os.path.join(WORK, "bad")
    args = ["train", "--config", path, "--run-dir", d]
    for s in sets:
        args += ["--set", s]
    p = run(args, expect=None)
    check(p.returncode == 2, f"{text!r} {sets}: exit {p.returncode}, expected 2: {p.stderr}")
    for n in needles:
        check(n in p.stderr, f"{text!r} {sets}: stderr lacks {n!r}: {p.stderr}")
    check(not os.path.exists(d), f"{text!r}: left a run directory")


DATA = f"""data:
  train: {{source: text, path: {TRAIN}}}
  batch_size: 4
  eval:
    valid: {{source: text, path: {VALID}}}
"""
refused(DATA + f"    'bad name': {{source: text, path: {OTHER}}}\n",
        "bad.yaml:14:", "data.eval.bad name", "letters, digits")
refused(DATA + "checkpoint: {keep_best: eval.nope.loss}\n", "bad.yaml:14:",
        "checkpoint.keep_best", "has no set 'nope'")
refused(DATA, "training.early_stop.metric", "has no set 'nope'",
        sets=["training.early_stop.metric=eval.nope.accuracy"])
refused(DATA, "checkpoint.keep_best", "eval.NAME.loss", sets=["checkpoint.keep_best=eval.valid"])
refused(DATA + "    second: {split_fraction: 0.1}\n", "bad.yaml:14:", "data.eval.second",
        "only be the first")
refused(DATA + "".join(f"    s{i}: {{source: text, path: {OTHER}}}\n" for i in range(8)),
        "bad.yaml:12:", "data.eval", "at most 8")
refused(DATA + f"    other: {{source: tokens, path: {OTHER}, vocab_size: 50}}\n",
        "data.eval", "set other:")

if FAILURES:
    sys.exit(1)
print("eval_sets: ok")
