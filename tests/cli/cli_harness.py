"""What the Python CLI tests share: a failure list, running ampctl, reading a run's train lines
and summary.json.

Import it from a test beside it (its directory is on sys.path when the test runs as a script).
"""
import json
import os
import subprocess

FAILURES = []


def check(cond, what):
    """Records a failed check and goes on (the test exits 1 at the end when any failed)."""
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what, flush=True)


def run_ampctl(ampctl, args, expect=0):
    """Runs ampctl; an exit status other than expect (None: any) ends the test."""
    p = subprocess.run([ampctl] + args, capture_output=True, text=True, timeout=300)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        raise SystemExit(f"ampctl {' '.join(args)}: exit {p.returncode}, expected {expect}")
    return p


def train_lines(run_dir):
    """The train lines of RUN_DIR/metrics.jsonl, in order."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        out = [json.loads(l) for l in f if l.strip()]
    return [l for l in out if l.get("kind") == "train"]


def summary(run_dir):
    """RUN_DIR/summary.json."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)
