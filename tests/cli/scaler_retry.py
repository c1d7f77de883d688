#!/usr/bin/env python3
"""scaler.on_overflow: retry, scaler.on_min_scale: stop and the scale-below-1 warning (issue 27),
end to end through the real binary:

  retry        an overflow injected at step 5: no step is skipped, step 5 has retries: 1 and
               half the clean run's scale, its loss is the clean run's bit for bit (the same
               batch and dropout masks: the forward does not depend on the scale), and the lr,
               the data cursor and the dropout RNG equal the clean run's at every step (a
               checkpoint after each). The same injection with on_overflow: skip skips step 5
               (what the retry avoids). A scale every gradient overflows at: each step tries
               max_retries + 1 times before it is skipped, and summary.json counts the retries.
  min scale    an overflow at a scale above the floor backs off to it and training goes on; the
               next overflow at the floor stops the run (exit 1, the scale and the floor named,
               summary.json diverged with reason overflow_at_min_scale, a checkpoint), and
               `ampctl resume` from it runs to the end. on_min_scale: continue runs through.
  below 1      the console warns once when the scale falls below 1, naming bf16 and clipping;
               a run that stays at or above 1 does not.
  keys         bad values of the new keys are refused with exit 2 naming the key, before a run
               directory exists.

Usage: scaler_retry.py AMPCTL WORKDIR    (AMPCTL_TEST_DEVICE=cuda: every run on the GPU)
"""
import json
import os
import shutil
import sys

from cli_harness import FAILURES, check, run_ampctl, train_lines

AMPCTL, WORK = sys.argv[1:3]
WORK = os.path.join(WORK, "scaler-retry-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def lines(run_dir):
    return {l["step"]: l for l in train_lines(run_dir)}


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def checkpoints(run_dir):
    d = os.path.join(run_dir, "checkpoints")
    out = {}
    for name in sorted(os.listdir(d)):
        if name.startswith("step-") and name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                out[int(name[5:13])] = json.load(f)
    return out


# A small MLP with dropout and two micro-batches per step: a retry must rewind both the data
# cursor (two batches per attempt) and the dropout RNG.
BASE = os.path.join(WORK, "base.yaml")
with open(BASE, "w") as f:
    f.write("""name: retry
seed: 7
device: """ + os.environ.get("AMPCTL_TEST_DEVICE", "cpu") + """
precision: fp16
model: {type: mlp, hidden: [64, 64], activation: relu, dropout: 0.2}
data:
  train: {source: synthetic, task: classification, samples: 1024, features: 16, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 0.003}
scheduler: {type: cosine, warmup_steps: 3}
scaler: {init_scale: 1024.0, growth_interval: 1000}
training: {max_steps: 12, grad_accum_steps: 2, eval_every: 0}
checkpoint: {every_steps: 1, keep_last: 100}
logging: {every_steps: 4, metrics_every: 1}
""")


def train(name, *sets, expect=0):
    args = ["train", "--config", BASE, "--run-dir", os.path.join(WORK, name)]
    for s in sets:
        args += ["--set", s]
    return run(args, expect)


# ---- retry ----
RETRY = "scaler.on_overflow=retry"
train("clean", RETRY)
train("retried", RETRY, "debug.inject_nonfinite_at=[5]")
train("skipped", "debug.inject_nonfinite_at=[5]")
clean = lines(os.path.join(WORK, "clean"))
retried = lines(os.path.join(WORK, "retried"))
skipped = lines(os.path.join(WORK, "skipped"))
check(sorted(clean) == list(range(1, 13)) and sorted(retried) == list(range(1, 13)),
      f"train lines: clean {sorted(clean)}, retried {sorted(retried)}")
check(skipped[5]["found_inf"] and skipped[5]["skipped"],
      "on_overflow: skip: the injected step 5 was not skipped (the retry test would prove nothing)")
check(not any(l["found_inf"] or l["skipped"] for l in retried.values()),
      "retry: a step was skipped: " + str([s for s, l in retried.items() if l["skipped"]]))
check(retried[5].get("retries") == 1, f"retry: step 5 has retries {retried[5].get('retries')}")
check(all("retries" not in l for s, l in retried.items() if s != 5),
      "retry: a step other than 5 has retries")
check(all("retries" not in l for l in clean.values()), "the clean run has retries")
# The kept attempt's scale: the clean run's halved by the failed attempt's backoff (0.5).
check(retried[5]["scale"] == clean[5]["scale"] * 0.5,
      f"retry: step 5 scale {retried[5]['scale']}, expected {clean[5]['scale']} * 0.5")
check(retried[4]["scale"] == clean[4]["scale"], "retry: the scale before step 5 differs")
# Same batch, same dropout masks, same weights: the forward (and its fp32 loss) does not depend
# on the scale, so step 5's loss is the clean run's bit for bit.
check(retried[5]["loss"] == clean[5]["loss"],
      f"retry: step 5 loss {retried[5]['loss']!r} != clean {clean[5]['loss']!r} "
      "(another batch or other dropout masks)")
for s in range(1, 13):
    check(retried[s]["lr"] == clean[s]["lr"],
          f"retry: step {s} lr {retried[s]['lr']} != clean {clean[s]['lr']}")
ck_clean = checkpoints(os.path.join(WORK, "clean"))
ck_retried = checkpoints(os.path.join(WORK, "retried"))
check(sorted(ck_clean) == list(range(1, 13)) and sorted(ck_retried) == list(range(1, 13)),
      f"a checkpoint per step: clean {sorted(ck_clean)}, retried {sorted(ck_retried)}")
for s in sorted(ck_clean):
    if s not in ck_retried:
        continue
    for section in ("data", "rng", "scheduler"):
        check(ck_retried[s][section] == ck_clean[s][section],
              f"retry: after step {s} the checkpoint's {section} differs: "
              f"{ck_retried[s][section]} vs {ck_clean[s][section]}")
check(summary(os.path.join(WORK, "retried"))["retries"] == 1,
      f"summary.json retries: {summary(os.path.join(WORK, 'retried')).get('retries')}")
check(summary(os.path.join(WORK, "retried"))["skipped_steps"] == 0, "summary.json: skipped steps")
check(summary(os.path.join(WORK, "clean"))["retries"] == 0, "summary.json of the clean run: retries")
# Deterministic: the same retried run again gives the same lines but for time_s.
train("retried2", RETRY, "debug.inject_nonfinite_at=[5]")
again = lines(os.path.join(WORK, "retried2"))
strip = lambda d: {s: {k: v for k, v in l.items() if k != "time_s"} for s, l in d.items()}
check(strip(again) == strip(retried), "retry: a repeat run's lines differ")

# Every gradient overflows at 2^40 (fp16's largest finite value is 65504): each step tries
# max_retries + 1 = 3 times, backing off each time, until the scale is low enough.
train("exhaust", RETRY, "scaler.init_scale=1099511627776", "training.max_steps=10",
      "checkpoint.every_steps=0")
ex = lines(os.path.join(WORK, "exhaust"))
check(ex[1]["retries"] == 2 and ex[1]["skipped"],
      f"exhausted: step 1 {ex[1].get('retries')} retries, skipped {ex[1]['skipped']}")
check(ex[1]["scale"] == 2.0**40 / 4, f"exhausted: step 1 kept the third attempt's scale, got {ex[1]['scale']}")
check(ex[2]["scale"] <= 2.0**40 / 8 or "retries" in ex[2],
      "exhausted: step 2 started from the backed-off scale")
s_ex = summary(os.path.join(WORK, "exhaust"))
check(s_ex["retries"] == sum(l.get("retries", 0) for l in ex.values()),
      f"summary.json retries {s_ex['retries']} != the lines' sum")
check(s_ex["skipped_steps"] == sum(1 for l in ex.values() if l["skipped"]),
      "summary.json skipped_steps != the lines' count")
check(any(not l["skipped"] for l in ex.values()), "exhausted: no step ever succeeded")
# Each failed attempt is an update: after 3 failed attempts per skipped step and one more per
# retried-then-kept step, the scale fell by 2^(retries + skipped) from 2^40.
last = max(ex)
falls = s_ex["retries"] + s_ex["skipped_steps"]
check(ex[last]["scale"] == 2.0**40 / 2**falls or ex[last]["growth_tracker"] > 0,
      f"exhausted: scale {ex[last]['scale']} after {falls} backoffs")

# ---- on_min_scale: stop ----
STOP = ["scaler.on_min_scale=stop", "scaler.init_scale=2048", "scaler.min_scale=1024",
        "logging.every_steps=1", "checkpoint.every_steps=0"]
p = train("floor", *STOP, "debug.inject_nonfinite_at=[3,6]", expect=1)
floor = lines(os.path.join(WORK, "floor"))
check(floor[3]["found_inf"] and floor[3]["scale"] == 2048, "floor: step 3 overflowed above the floor")
check(floor[6]["found_inf"] and floor[6]["scale"] == 1024, "floor: step 6 overflowed at the floor")
check(max(floor) == 6, f"floor: the run went on to step {max(floor)}")
check("error: training diverged at step 6" in p.stderr and "1024" in p.stderr and
      "scaler.min_scale" in p.stderr and "hint: " in p.stderr,
      "floor: the error does not name the step, the scale and the floor:\n" + p.stderr)
s_floor = summary(os.path.join(WORK, "floor"))
check(s_floor["status"] == "diverged" and s_floor["divergence"]["reason"] == "overflow_at_min_scale",
      f"floor: summary.json {s_floor['status']} {s_floor.get('divergence')}")
cks = checkpoints(os.path.join(WORK, "floor"))
check(6 in cks, f"floor: no checkpoint of step 6: {sorted(cks)}")
p = run(["resume", "--checkpoint", os.path.join(WORK, "floor")])
resumed = lines(os.path.join(WORK, "floor"))
check(max(resumed) == 12 and summary(os.path.join(WORK, "floor"))["status"] == "ok",
      f"floor: the resumed run ended at step {max(resumed)}")
check(resumed[7]["scale"] == 1024, f"floor: the resumed run's scale {resumed[7]['scale']}")
p = train("floor-continue", *STOP[1:], "debug.inject_nonfinite_at=[3,6]")
check(summary(os.path.join(WORK, "floor-continue"))["status"] == "ok",
      "on_min_scale: continue stopped")

# ---- the scale falls below 1 ----
BELOW = ["scaler.init_scale=2", "debug.inject_nonfinite_at=[2,3,8]", "checkpoint.every_steps=0"]
p = train("below", *BELOW)
text = p.stdout + p.stderr
below = lines(os.path.join(WORK, "below"))
check(below[4]["scale"] == 0.5, f"below: step 4's scale {below[4]['scale']}, expected 0.5")
check(text.count("fell below 1") == 1,
      f"below: expected one warning, got {text.count('fell below 1')}:\n{text}")
check("step 4: the loss scale fell below 1 (0.5)" in text and "bf16" in text and
      "training.grad_clip_norm" in text, "below: the warning's content:\n" + text)
p = train("above", "scaler.init_scale=2", "debug.inject_nonfinite_at=[2]",
          "checkpoint.every_steps=0")
check("fell below 1" not in p.stdout + p.stderr, "a run that stays at 1 warned")

# ---- the keys ----
for sets, key in [
    (["scaler.on_overflow=again"], "scaler.on_overflow"),
    (["scaler.on_overflow=retry", "scaler.max_retries=0"], "scaler.max_retries"),
    (["scaler.on_overflow=retry", "scaler.max_retries=1001"], "scaler.max_retries"),
    (["scaler.max_retries=3"], "scaler.max_retries"),  # only with retry
    (["scaler.on_overflow=retry", "precision=bf16"], "scaler.on_overflow"),
    (["scaler.on_min_scale=halt"], "scaler.on_min_scale"),
    (["scaler.on_min_scale=stop"], "scaler.on_min_scale"),  # min_scale 0: no floor
    (["scaler.on_min_scale=stop", "scaler.min_scale=1", "scaler.enabled=false"],
     "scaler.on_min_scale"),
]:
    d = os.path.join(WORK, "refused")
    p = train("refused", *sets, expect=2)
    check(key in p.stderr, f"{sets}: the error does not name {key}:\n{p.stderr}")
    check(not os.path.exists(d), f"{sets}: a run directory was left behind")
p = run(["validate", "--config", BASE, "--set", "scaler.on_overflow=retry", "--set",
         "scaler.max_retries=5", "--set", "scaler.on_min_scale=stop", "--set",
         "scaler.min_scale=1"])

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("scaler_retry: all checks passed")
