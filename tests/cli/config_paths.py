#!/usr/bin/env python3
"""Relative paths (docs/reference.md, "Paths") from another current directory, with the shipped
configs/gpt_fortunes.yaml and configs/gpt_finetune.yaml (its `base:`) copied into a scratch
repository with tiny corpora, on tiny settings.

  config paths   the finetune config run from a directory that is neither the repository nor
                 the config's folder: its init.from (../runs/gpt_fortunes) and data path are read
                 from the config's folder, the run directory (runs/<name>) from the current
                 directory; the run starts from the source's weights (a step-0 evaluation) and
                 its config.yaml holds the absolute paths. validate from the config's own folder
                 resolves the same paths.
  cwd source     a source run that lives under the current directory's runs/ (not the
                 config's): exit 2 before any run directory, the hint names --init-from
                 runs/gpt_fortunes; with that flag (a command-line path: the current directory)
                 the run trains.
  copied run     the finetune run copied to another folder resumes from a third directory.

Usage: config_paths.py AMPCTL SOURCE_DIR WORKDIR
"""
import json
import os
import random
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check, train_lines

AMPCTL, ROOT, WORK = sys.argv[1:4]
AMPCTL = os.path.abspath(AMPCTL)
WORK = os.path.join(os.path.abspath(WORK), "config-paths-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

SMALL = ["--set", "device=cpu", "--set", "model.n_layer=1", "--set", "model.n_embd=32",
         "--set", "model.n_head=2", "--set", "training.eval_batches=2", "--set",
         "checkpoint.every_steps=0", "--set", "scheduler.warmup_steps=2", "--set",
         "training.max_steps=8", "--set", "training.eval_every=4", "--set", "logging.every_steps=4"]


def run(args, cwd, expect=0):
    p = subprocess.run([AMPCTL] + args, capture_output=True, text=True, timeout=300, cwd=cwd)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        raise SystemExit(f"ampctl {' '.join(args)} (in {cwd}): exit {p.returncode}, "
                         f"expected {expect}")
    return p


def corpus(path, letters, n):
    rng = random.Random(len(letters))
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(200)]
    with open(path, "w") as f:
        f.write(" ".join(rng.choice(words) for _ in range(n)) + "\n")


def scratch_repo(name):
    repo = os.path.join(WORK, name)
    os.makedirs(os.path.join(repo, "configs"))
    os.makedirs(os.path.join(repo, "data"))
    for c in ("gpt_fortunes.yaml", "gpt_finetune.yaml"):
        shutil.copy(os.path.join(ROOT, "configs", c), os.path.join(repo, "configs", c))
    corpus(os.path.join(repo, "data", "fortunes.txt"), "abcdefghijklmnopqrstuvwxyz.,", 1500)
    corpus(os.path.join(repo, "data", "bofh.txt"), "abcdefghijklm", 1500)
    return repo


def directory(*parts):
    d = os.path.join(WORK, *parts)
    os.makedirs(d, exist_ok=True)
    return d


def evals(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return [l for l in lines if l.get("kind") == "eval"]


# ---- config paths ----
repo = scratch_repo("repo")
run(["train", "--config", "configs/gpt_fortunes.yaml"] + SMALL, cwd=repo)  # as the header says
source = os.path.join(repo, "runs", "gpt_fortunes")
check(os.path.isdir(source), "the source run is runs/gpt_fortunes under the current directory")

elsewhere = directory("elsewhere")
finetune = os.path.join(repo, "configs", "gpt_finetune.yaml")
run(["train", "--config", os.path.relpath(finetune, elsewhere)] + SMALL, cwd=elsewhere)
ft = os.path.join(elsewhere, "runs", "gpt_finetune")
check(os.path.isdir(ft), "the run directory is runs/gpt_finetune under the current directory")
ev = evals(ft)
check(bool(ev) and ev[0]["step"] == 0, f"a step-0 evaluation of the loaded weights: {ev[:1]}")
with open(os.path.join(ft, "config.yaml")) as f:
    saved = f.read()
check(f"from: {source}\n" in saved, "config.yaml's init.from is the config folder's "
      "../runs/gpt_fortunes, absolute")
check(f"path: {os.path.join(repo, 'data', 'bofh.txt')}\n" in saved,
      "config.yaml's data path is the config folder's ../data/bofh.txt, absolute")
v = run(["validate", "--config", "gpt_finetune.yaml"], cwd=os.path.join(repo, "configs")).stdout
check(f"from: {source} " in v and f"path: {os.path.join(repo, 'data', 'bofh.txt')} " in v,
      "validate from the config's folder resolves the same paths")

# ---- cwd source ----
repo2 = scratch_repo("repo2")  # the configs and data, no runs/
other = directory("other")
shutil.copytree(source, os.path.join(other, "runs", "gpt_fortunes"))  # a source copied here
p = run(["train", "--config", os.path.join(repo2, "configs", "gpt_finetune.yaml")] + SMALL,
        cwd=other, expect=2)
check(f"init.from {os.path.join(repo2, 'runs', 'gpt_fortunes')}: no such file" in p.stderr,
      "the missing source is named: " + p.stderr)
check("--init-from runs/gpt_fortunes" in p.stderr, "the hint names --init-from runs/gpt_fortunes: "
      + p.stderr)
check(not os.path.exists(os.path.join(other, "runs", "gpt_finetune")), "no run directory")
run(["train", "--config", os.path.join(repo2, "configs", "gpt_finetune.yaml"), "--init-from",
     "runs/gpt_fortunes"] + SMALL, cwd=other)
with open(os.path.join(other, "runs", "gpt_finetune", "config.yaml")) as f:
    check(f"from: {os.path.join(other, 'runs', 'gpt_fortunes')}\n" in f.read(),
          "--init-from is read from the current directory")

# ---- copied run ----
moved = os.path.join(directory("moved"), "ft")
shutil.copytree(ft, moved)
third = directory("third")
run(["resume", "--checkpoint", os.path.relpath(moved, third), "--set", "training.max_steps=12"],
    cwd=third)
check(train_lines(moved)[-1]["step"] == 12, "the copied run resumed to step 12 from elsewhere")
check(train_lines(ft)[-1]["step"] == 8, "the original run is untouched")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("config_paths: every check passed")
