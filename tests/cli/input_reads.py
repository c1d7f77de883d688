#!/usr/bin/env python3
"""Every file a command reads is read to its end or refused (issue 47, classes 1 and 2), end to
end through the real binary, on the files inside a run directory (not only the command line's):

  long line    metrics.jsonl with one line longer than the line cap (16 MiB) in the middle:
               resume, replay and report exit 2 naming the file and the line, and metrics.jsonl
               is byte for byte what it was (before: the failed read was taken for the end of
               the file, resume rewrote it from the lines before, exit 0; replay and report
               printed the shorter history, exit 0). A file that fits is still read whole.
  not regular  metrics.jsonl as a FIFO or a symbolic link to /dev/zero (before: resume blocked
               in open() forever, or read without end); config.yaml, summary.json, vocab.json,
               input.json and checkpoints/latest as a FIFO: resume, replay and report exit 2 at
               once naming the path (each run under a 60 s timeout: a hang fails the test), and
               nothing in the run is changed.
  sweep        a sweep run folder whose stderr.log or summary.json is a FIFO: the sweep exits 2
               naming it before any run starts.
  memory       resume under a memory limit (RLIMIT_AS) too small to hold the long metrics file:
               exit 1 naming the file (or, where the limit is hit first elsewhere, any failure),
               never exit 0, and metrics.jsonl unchanged.

Usage: input_reads.py AMPCTL CONFIGS WORKDIR
"""
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check

AMPCTL, CONFIGS, WORK = sys.argv[1:4]
WORK = os.path.join(WORK, "input-reads-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

LINE_CAP = 16 << 20


def run(args, expect=0, timeout=60, limit_as=None):
    pre = None
    if limit_as is not None:
        def pre():
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    try:
        p = subprocess.run([AMPCTL] + args, capture_output=True, text=True, timeout=timeout,
                           preexec_fn=pre)
    except subprocess.TimeoutExpired:
        check(False, f"ampctl {' '.join(args)}: still running after {timeout} s (a hang)")
        return None
    if expect is not None and p.returncode != expect:
        check(False, f"ampctl {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                     f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def digest(path):
    """A hash of every regular file under path (names and bytes), to show nothing changed."""
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            if name == ".lock":
                continue  # the holder record: rewritten by every writer that takes the lock
            p = os.path.join(root, name)
            h.update(os.path.relpath(p, path).encode())
            if os.path.islink(p):
                h.update(b"link:" + os.readlink(p).encode())
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
            else:
                h.update(b"special")
    return h.hexdigest()


# A small MLP with normalised inputs (input.json), every step's line with grad_amax (replay).
QUICK = os.path.join(CONFIGS, "quickstart.yaml")
BASE = ["--config", QUICK, "--set", "device=cpu", "--set", "model.hidden=[8]", "--set", "scheduler.warmup_steps=0",
        "--set", "data.train.samples=256", "--set", "data.batch_size=32",
        "--set", "data.normalize=true", "--set", "training.max_steps=12",
        "--set", "training.eval_every=0", "--set", "logging.every_steps=4",
        "--set", "logging.grad_amax=true", "--set", "checkpoint.every_steps=6"]
RUN = os.path.join(WORK, "run")
run(["train", *BASE, "--run-dir", RUN])
check(os.path.isfile(os.path.join(RUN, "input.json")), "the run wrote input.json")


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(RUN, d, symlinks=True)
    return d


def says(p, *words):
    return p is not None and all(w in p.stderr for w in words)


# --- a line longer than the cap, in the middle of metrics.jsonl --------------------------------
LONG = fresh("long")
metrics = os.path.join(LONG, "metrics.jsonl")
with open(metrics) as f:
    lines = f.readlines()
n_lines = len(lines)
# A JSON object whose "note" fills the line past the cap: line 3.
long_line = '{"kind":"note","note":"' + "x" * (LINE_CAP + 16) + '"}\n'
with open(metrics, "w") as f:
    f.writelines(lines[:2] + [long_line] + lines[2:])
before = digest(LONG)
p = run(["resume", "--checkpoint", LONG, "--set", "training.max_steps=14"], expect=2)
check(says(p, metrics, "line 3", "longer than"),
      "resume names metrics.jsonl and line 3 as too long: " + (p.stderr if p else ""))
check(digest(LONG) == before, "resume with a too-long metrics line left the run as it was")
p = run(["replay", LONG], expect=2)
check(says(p, metrics, "line 3"), "replay names metrics.jsonl line 3: " + (p.stderr if p else ""))
p = run(["report", LONG, "--out", os.path.join(WORK, "long.html")], expect=2)
check(says(p, metrics, "line 3"), "report names metrics.jsonl line 3: " + (p.stderr if p else ""))
check(not os.path.exists(os.path.join(WORK, "long.html")), "report wrote no page")
check(digest(LONG) == before, "replay and report left the run as it was")

# A line just under the cap is read whole: replay counts every step of the run.
UNDER = fresh("under")
metrics_u = os.path.join(UNDER, "metrics.jsonl")
with open(metrics_u) as f:
    lines = f.readlines()
with open(metrics_u, "w") as f:
    f.writelines(lines[:2] + ['{"kind":"note","note":"' + "x" * (LINE_CAP - 64) + '"}\n']
                 + lines[2:])
p = run(["replay", UNDER, "--json"])
whole = run(["replay", RUN, "--json"])
if p is not None and whole is not None:
    check(json.loads(p.stdout) == json.loads(whole.stdout),
          "replay of a file with a long (allowed) line reads every step: as the run's own")

# Under a memory limit that cannot hold the file's lines, resume never ends as if the file were
# shorter: a clear error (exit 1, naming the file) or another refusal, and metrics.jsonl stays.
MEM = fresh("memory")
metrics_m = os.path.join(MEM, "metrics.jsonl")
with open(metrics_m) as f:
    lines = f.readlines()
# Lines with a step (kept by resume's rewrite): 24 x 16 MiB, more than the limit leaves.
big = ['{"kind":"note","step":1,"note":"' + "y" * (LINE_CAP - 64) + '"}\n'] * 24
with open(metrics_m, "w") as f:
    f.writelines(lines[:2] + big + lines[2:])
before = digest(MEM)
p = run(["resume", "--checkpoint", MEM, "--set", "training.max_steps=14"], expect=None,
        limit_as=600 << 20)
if p is not None:
    check(p.returncode != 0, "resume under a memory limit too small for metrics.jsonl: not exit 0")
    check("internal" not in p.stderr and "bad_alloc" not in p.stderr,
          "no internal error under the memory limit: " + p.stderr)
check(digest(MEM) == before, "resume under a memory limit left metrics.jsonl as it was")
shutil.rmtree(MEM, ignore_errors=True)
shutil.rmtree(UNDER, ignore_errors=True)
shutil.rmtree(LONG, ignore_errors=True)

# --- files of the run that are not regular files ------------------------------------------------
def replace_with_fifo(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
    os.mkfifo(path)


cases = [
    ("metrics.jsonl", "fifo"), ("metrics.jsonl", "zero"), ("config.yaml", "fifo"),
    ("summary.json", "fifo"), ("vocab.json", "fifo"), ("input.json", "fifo"),
    ("checkpoints/latest", "fifo"),
]
for name, kind in cases:
    d = fresh("special-" + name.replace("/", "-") + "-" + kind)
    target = os.path.join(d, name)
    if kind == "fifo":
        replace_with_fifo(target)
    else:
        os.remove(target)
        os.symlink("/dev/zero", target)
    before = digest(d)
    what = f"{name} as {'a FIFO' if kind == 'fifo' else 'a link to /dev/zero'}"
    p = run(["resume", "--checkpoint", d, "--set", "training.max_steps=14"], expect=2)
    check(says(p, name.split("/")[-1]), f"resume with {what}: exit 2 naming it: "
          + (p.stderr if p else ""))
    check(digest(d) == before, f"resume with {what} changed nothing")
    if name in ("metrics.jsonl", "config.yaml"):
        p = run(["replay", d], expect=2)
        check(says(p, name), f"replay with {what}: exit 2 naming it: " + (p.stderr if p else ""))
    if name in ("metrics.jsonl", "summary.json"):
        p = run(["report", d, "--out", os.path.join(WORK, "special.html")], expect=2)
        check(says(p, name), f"report with {what}: exit 2 naming it: " + (p.stderr if p else ""))
    check(digest(d) == before, f"{what}: the run is as it was")
    shutil.rmtree(d, ignore_errors=True)

# A branch (resume --run-dir NEW) reads the source run's metrics.jsonl: a FIFO there is refused
# too, and the new directory is not left behind.
d = fresh("branch-src")
replace_with_fifo(os.path.join(d, "metrics.jsonl"))
branch = os.path.join(WORK, "branch")
p = run(["resume", "--checkpoint", os.path.join(d, "checkpoints", "step-00000006.json"),
         "--run-dir", branch], expect=2)
check(says(p, "metrics.jsonl"), "a branch of a run whose metrics.jsonl is a FIFO: exit 2 naming it: "
      + (p.stderr if p else ""))
check(not os.path.exists(branch), "the refused branch left no directory")

# --- a sweep run folder with a FIFO among its files --------------------------------------------
SWEEP = ["sweep", "--config", QUICK, "--set", "device=cpu", "--set", "model.hidden=[8]", "--set", "scheduler.warmup_steps=0",
         "--set", "data.train.samples=256", "--set", "training.max_steps=4",
         "--set", "training.eval_every=0", "--grid", "optimizer.lr=0.001"]
OUT = os.path.join(WORK, "sweep")
p = run(SWEEP + ["--out", OUT], expect=None)
if p is not None and p.returncode == 0:
    runs = [e for e in os.listdir(OUT) if os.path.isdir(os.path.join(OUT, e))]
    check(len(runs) == 1, f"the sweep made one run folder: {runs}")
    for name in ("stderr.log", "summary.json"):
        folder = os.path.join(OUT, runs[0])
        saved = os.path.join(WORK, "saved-" + name)
        shutil.copy(os.path.join(folder, name), saved)
        replace_with_fifo(os.path.join(folder, name))
        q = run(SWEEP + ["--out", OUT], expect=2)
        check(says(q, name), f"a sweep run folder with {name} as a FIFO: exit 2 naming it: "
              + (q.stderr if q else ""))
        os.remove(os.path.join(folder, name))
        shutil.move(saved, os.path.join(folder, name))
else:
    check(False, "the sweep ran: " + (p.stderr if p else "timeout"))

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("input reads: all checks passed")
