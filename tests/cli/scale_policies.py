#!/usr/bin/env python3
"""scaler.policy end to end through the real binary (issue 27):

  trajectories  each rule trains the quickstart MLP with the overflows of a golden pattern
                injected (debug.inject_nonfinite_at); every metrics.jsonl line's found_inf is the
                pattern's, its scale the reference's scale before that step, and its growth and
                hysteresis trackers the reference's after it (tests/data/golden/
                scaler_policies.json, written by scripts/golden/scaler_policies.py).
  resume        a run resumed from a mid-run checkpoint under the same rule (a branch,
                --run-dir) continues with the same lines and leaves the run as it was;
                `resume --set scaler.policy=... --rewind` continues under another rule from the
                checkpoint's scale, in place.
  refusals      a key the rule does not use (not at its default) exits 2 naming the key and the
                rule, and creates no run directory.

Usage: scale_policies.py AMPCTL QUICKSTART_YAML GOLDEN_JSON WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

AMPCTL, CONFIG, GOLDEN, WORK = sys.argv[1:5]
WORK = os.path.join(WORK, "scale-policies-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what, flush=True)


def run(args, expect=0):
    p = subprocess.run([AMPCTL] + args, capture_output=True, text=True)
    if p.returncode != expect:
        print(p.stdout[-2000:], p.stderr[-2000:])
    check(p.returncode == expect, f"{' '.join(args[:6])}...: exit {p.returncode}, expected {expect}")
    return p


def lines(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if '"kind":"train"' in l]


def settings(case):
    """--set arguments for a golden case's parameters (the keys its rule uses)."""
    p = case["params"]
    out = ["scaler.policy=" + case["policy"]]
    for key in ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "min_scale"):
        out.append(f"scaler.{key}={p[key]!r}")
    if case["policy"] in ("pytorch", "deepspeed", "megatron"):
        out.append(f"scaler.hysteresis={p['hysteresis']}")
    if case["policy"] == "pytorch":
        out.append("scaler.max_scale=" + (".inf" if p["max_scale"] == ".inf"
                                          else repr(p["max_scale"])))
    if case["policy"] == "deepspeed":
        out.append("scaler.consecutive_hysteresis=" + str(p["consecutive_hysteresis"]).lower())
    if case["policy"] == "fairseq":
        out.append(f"scaler.tolerance={p['tolerance']!r}")
    return out


def train(case, run_dir, extra=()):
    steps = case["steps"]
    inject = [i + 1 for i, s in enumerate(steps) if s["found_inf"]]
    args = ["train", "--config", CONFIG, "--run-dir", run_dir, "--set", "device=cpu",
            "--set", f"training.max_steps={len(steps)}", "--set", "training.eval_every=0",
            "--set", "logging.metrics_every=1", "--set", "logging.every_steps=1000",
            "--set", "debug.inject_nonfinite_at=[" + ",".join(map(str, inject)) + "]"]
    for s in settings(case) + list(extra):
        args += ["--set", s]
    return run(args)


def expect_trajectory(case, got, what):
    steps = case["steps"]
    check(len(got) == len(steps), f"{what}: {len(got)} lines for {len(steps)} steps")
    previous = float(case["params"]["init_scale"])
    for i, (line, ref) in enumerate(zip(got, steps)):
        ok = (line["step"] == i + 1 and line["found_inf"] == bool(ref["found_inf"])
              and line["scale"] == previous and line["growth_tracker"] == ref["growth_tracker"]
              and ("hysteresis_tracker" not in ref
                   or line["hysteresis_tracker"] == ref["hysteresis_tracker"]))
        if not ok:
            check(False, f"{what}, step {i + 1}: line {line}; the reference: scale {previous} "
                         f"before the step, then {ref}")
            return
        previous = ref["scale"]


golden = {c["name"]: c for c in json.load(open(GOLDEN))["cases"]}

# ---- trajectories: four rules, the absorbing and tolerance patterns too ----
for name in ("pytorch_runs", "pytorch_hysteresis_min_max", "deepspeed_runs",
             "deepspeed_hysteresis_absorbing", "deepspeed_consecutive_hysteresis",
             "megatron_runs", "megatron_floor", "fairseq_runs", "fairseq_tolerance_above",
             "fairseq_floor"):
    d = os.path.join(WORK, name)
    train(golden[name], d)
    if os.path.exists(os.path.join(d, "metrics.jsonl")):
        expect_trajectory(golden[name], lines(d), name)

# ---- resume: the same rule continues bitwise; another rule starts from the scale ----
case = golden["deepspeed_hysteresis_absorbing"]
d = os.path.join(WORK, "resume")
train(case, d, ["checkpoint.every_steps=10", "checkpoint.keep_last=10"])
whole = [dict(l, time_s=None) for l in lines(d)]
ck = os.path.join(d, "checkpoints", "step-00000020.json")
# A branch (--run-dir) continues the run elsewhere and leaves it as it is.
run(["resume", "--checkpoint", ck, "--run-dir", d + "-same"])
again = [dict(l, time_s=None) for l in lines(d + "-same")]
check(again == whole, "resume at step 20 under the same rule gives the same lines")
check([dict(l, time_s=None) for l in lines(d)] == whole, "a branch left its run's lines alone")
with open(ck) as f:
    saved = json.load(f)["scaler"]
check(saved.get("policy") == "deepspeed" and "cur_iter" in saved and saved["cur_iter"] == 20,
      f"the checkpoint's scaler holds DeepSpeed's counters: {saved}")
# The run's hysteresis (2) is a key fairseq does not use: refused, the hint giving its default.
kept = sorted(os.listdir(os.path.join(d, "checkpoints")))
p = run(["resume", "--checkpoint", ck, "--set", "scaler.policy=fairseq", "--rewind"], expect=2)
check("scaler.hysteresis" in p.stderr and "give its default (1)" in p.stderr,
      "a switch that leaves a key the new rule does not use: named with its default\n" + p.stderr)
check(sorted(os.listdir(os.path.join(d, "checkpoints"))) == kept,
      "a refused resume --rewind changed the checkpoints: " + str(kept))
run(["resume", "--checkpoint", ck, "--set", "scaler.policy=fairseq", "--set",
     "scaler.hysteresis=1", "--rewind"])
switched = lines(d)
check(switched[20]["scale"] == saved["scale"] and len(switched) == len(whole),
      f"resume under fairseq continues from the checkpoint's scale: {switched[20]}")

# ---- refusals ----
for key, policy in (("scaler.tolerance=0.1", "pytorch"), ("scaler.hysteresis=2", "fairseq"),
                    ("scaler.max_scale=1024.0", "deepspeed"),
                    ("scaler.consecutive_hysteresis=true", "megatron")):
    d = os.path.join(WORK, "refused")
    p = run(["train", "--config", CONFIG, "--run-dir", d, "--set", "device=cpu", "--set",
             "scaler.policy=" + policy, "--set", key], expect=2)
    check(key.split("=")[0] in p.stderr and "scaler.policy" in p.stderr and policy in p.stderr,
          f"{key} under {policy}: refused naming the key and the rule: {p.stderr}")
    check(not os.path.exists(d), f"{key} under {policy}: no run directory")

if FAILURES:
    print(f"{len(FAILURES)} failure(s)")
    sys.exit(1)
print("scale policies: all checks passed")
