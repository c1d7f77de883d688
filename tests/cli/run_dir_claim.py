#!/usr/bin/env python3
"""The claim of a run directory is one step (issue 47, class 11), end to end through the real
binary: the lock and the "holds no run yet" test are taken together, after the data has loaded,
so of two writers into one new directory exactly one writes it and the other exits 2.

  train x2     SLOW (a data set that takes a while to generate) starts into a new D and, once D
               exists (SLOW has checked it and is loading), FAST trains into D start to finish.
               SLOW must then exit 2 naming D, and D must hold FAST's run, byte for byte as FAST
               left it (before: SLOW claimed D after FAST finished and replaced FAST's
               config.yaml and metrics.jsonl, both exit 0). Then both started at the same moment,
               several times: exactly one exits 0, the other 2, and D holds the winner's run.
  branch       resume --checkpoint R --run-dir D (a branch, loading SLOW's data) against a train
               into D that finishes first: the branch exits 2, D holds the train's run.
  sweep        two sweeps of the same one-run grid into one --out, the second started while the
               first's run trains: the second finds the run finished under the lock and skips it
               ("finished meanwhile"), never training it again over the first's files (before:
               it started the run again, removing the finished run's metrics and summary).

Usage: run_dir_claim.py AMPCTL CONFIGS WORKDIR
"""
import hashlib
import os
import shutil
import subprocess
import sys
import time

from cli_harness import FAILURES, check

AMPCTL, CONFIGS, WORK = sys.argv[1:4]
WORK = os.path.join(WORK, "run-dir-claim-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

QUICK = os.path.join(CONFIGS, "quickstart.yaml")
COMMON = ["--config", QUICK, "--set", "device=cpu", "--set", "model.hidden=[8]", "--set", "scheduler.warmup_steps=0",
          "--set", "training.eval_every=0", "--set", "data.batch_size=32"]
# Generating this many synthetic samples takes a second or more; the run itself is one step.
SLOW = COMMON + ["--set", "name=slow", "--set", "data.train.samples=1500000",
                 "--set", "data.train.features=16", "--set", "training.max_steps=1"]
FAST = COMMON + ["--set", "name=fast", "--set", "data.train.samples=256",
                 "--set", "training.max_steps=3"]


def start(args):
    return subprocess.Popen([AMPCTL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            if name == ".lock":
                continue  # the holder record changes with every writer
            p = os.path.join(root, name)
            h.update(os.path.relpath(p, path).encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def name_in(d):
    with open(os.path.join(d, "config.yaml")) as f:
        for line in f:
            if line.startswith("name:"):
                return line.split(":", 1)[1].strip()
    return None


def wait_for(path, p, seconds=60):
    t0 = time.time()
    while not os.path.exists(path):
        if p.poll() is not None or time.time() - t0 > seconds:
            return False
        time.sleep(0.005)
    return True


# --- SLOW checks D and loads; FAST trains D start to finish meanwhile --------------------------
D = os.path.join(WORK, "d")
slow = start(["train", *SLOW, "--run-dir", D])
if not wait_for(D, slow):
    check(False, "the slow train created its run directory")
fast = subprocess.run([AMPCTL, "train", *FAST, "--run-dir", D], capture_output=True, text=True,
                      timeout=300)
code, _, err = finish(slow)
if fast.returncode == 0:
    fast_files = digest(D)
    # FAST finished while SLOW loaded (the case of the issue): SLOW is refused under the lock.
    check(code == 2, f"the slow train into a directory finished meanwhile: exit {code}, expected 2"
                     f"\n{err}")
    check("already holds a run" in err and D in err, "it names the directory: " + err)
    check(name_in(D) == "fast" and digest(D) == fast_files,
          "the finished run's files are intact (config.yaml is fast's, nothing changed)")
else:
    # SLOW won the lock first: then FAST is the one refused, and SLOW's run stands.
    check(fast.returncode == 2, f"fast train: exit {fast.returncode}, expected 0 or 2\n"
                                f"{fast.stderr}")
    check(code == 0 and name_in(D) == "slow", "slow train wrote its run: " + err)
    print("note: the slow train claimed first (its data loaded before the fast run started)")

# --- both at the same moment, several times --------------------------------------------------
for i in range(4):
    d = os.path.join(WORK, f"race-{i}")
    a = start(["train", *FAST, "--set", "name=a", "--run-dir", d])
    b = start(["train", *FAST, "--set", "name=b", "--run-dir", d])
    ca, _, ea = finish(a)
    cb, _, eb = finish(b)
    check(sorted([ca, cb]) == [0, 2], f"race {i}: exits {ca}, {cb}; expected one 0 and one 2\n"
                                      f"{ea}\n{eb}")
    winner = "a" if ca == 0 else "b"
    check(name_in(d) == winner, f"race {i}: the directory holds the winner's ({winner}) run")
    with open(os.path.join(d, "metrics.jsonl")) as f:
        steps = [l for l in f if '"kind":"train"' in l.replace(" ", "")]
    check(len(steps) == 3, f"race {i}: the winner's 3 train lines, once: {len(steps)}")

# --- a branch into a directory that a train finishes meanwhile --------------------------------
SRC = os.path.join(WORK, "src")
r = subprocess.run([AMPCTL, "train", *SLOW, "--run-dir", SRC], capture_output=True, text=True,
                   timeout=300)
check(r.returncode == 0, "the slow source run trained: " + r.stderr)
B = os.path.join(WORK, "branch")
branch = start(["resume", "--checkpoint", SRC, "--set", "training.max_steps=2", "--run-dir", B])
if wait_for(B, branch):
    fast = subprocess.run([AMPCTL, "train", *FAST, "--run-dir", B], capture_output=True,
                          text=True, timeout=300)
    code, _, err = finish(branch)
    if fast.returncode == 0:
        files = digest(B)
        check(code == 2, f"the branch into a directory finished meanwhile: exit {code}\n{err}")
        check(name_in(B) == "fast" and digest(B) == files, "the train's run in it is intact")
    else:
        check(code == 0 and fast.returncode == 2, "the branch claimed first; the train exits 2")
else:
    code, _, err = finish(branch)
    check(False, f"the branch created its directory (exit {code}): {err}")

# --- two sweeps of one run into one --out ------------------------------------------------------
OUT = os.path.join(WORK, "sweep")
SWEEP = ["sweep", *SLOW, "--set", "checkpoint.every_steps=0", "--grid", "optimizer.lr=0.001",
         "--out", OUT]
first = start(SWEEP)
marks = []
t0 = time.time()
while time.time() - t0 < 60 and first.poll() is None:
    marks = [e for e in os.listdir(OUT)] if os.path.isdir(OUT) else []
    if any(not e.startswith(".") and os.path.isdir(os.path.join(OUT, e)) for e in marks):
        break
    time.sleep(0.005)
second = start(SWEEP)
c1, o1, e1 = finish(first)
c2, o2, e2 = finish(second)
check(c1 == 0, f"the first sweep: exit {c1}\n{o1}\n{e1}")
runs = [e for e in os.listdir(OUT) if not e.startswith(".") and os.path.isdir(os.path.join(OUT, e))]
check(len(runs) == 1, f"one run folder: {runs}")
if "starting" in o1 and c2 == 0:
    check("finished meanwhile" in o2 or "finished before" in o2,
          "the second sweep skipped the run the first finished:\n" + o2)
    check("starting" not in o2, "the second sweep did not train the run again:\n" + o2)

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("run directory claim: all checks passed")
