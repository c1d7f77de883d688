#!/usr/bin/env python3
"""No command writes over a run's own files (issue 47, class 9), end to end through the real
binary. Every output a command writes at the user's request goes through one check against one
list of a run's files (run/layout.h):

  own files    export --out, report --out and replay --html naming each of a run's files
               (input.json, config.yaml, metrics.jsonl, summary.json, vocab.json, a checkpoint,
               the lock; existing, and vocab.json where the run has none) exit 2 naming the file
               and the run that owns it, and the run is byte for byte as it was (before:
               input.json, which the list lacked, was overwritten, exit 0).
  hf folders   export --format hf writes a new directory, marks it as its own
               (.ampctl-export) and writes it again; an empty directory is taken; a folder
               holding a model it did not write (config.json and model.safetensors, no mark)
               and a run's directory exit 2, unchanged (before: the foreign model was replaced).

Usage: output_run_files.py AMPCTL CONFIGS WORKDIR
"""
import hashlib
import os
import shutil
import subprocess
import sys

from cli_harness import FAILURES, check

AMPCTL, CONFIGS, WORK = sys.argv[1:4]
WORK = os.path.join(WORK, "output-run-files-test")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    p = subprocess.run([AMPCTL] + args, capture_output=True, text=True, timeout=120)
    if expect is not None and p.returncode != expect:
        check(False, f"ampctl {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                     f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(root, name)
            h.update(os.path.relpath(p, path).encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


QUICK = os.path.join(CONFIGS, "quickstart.yaml")
RUN = os.path.join(WORK, "mlp")
run(["train", "--config", QUICK, "--set", "device=cpu", "--set", "model.hidden=[8]", "--set", "scheduler.warmup_steps=0",
     "--set", "data.train.samples=256", "--set", "data.batch_size=32",
     "--set", "data.normalize=true", "--set", "training.max_steps=4",
     "--set", "training.eval_every=0", "--set", "logging.grad_amax=true",
     "--run-dir", RUN])
check(os.path.isfile(os.path.join(RUN, "input.json")), "the MLP run wrote input.json")
ckpt = sorted(f for f in os.listdir(os.path.join(RUN, "checkpoints")) if f.endswith(".json"))[-1]

names = ["input.json", "config.yaml", "metrics.jsonl", "summary.json", "vocab.json",
         os.path.join("checkpoints", ckpt), ".lock"]
run_abs = os.path.realpath(RUN)
for name in names:
    target = os.path.join(RUN, name)
    existed = os.path.exists(target)
    for args, flag in [
        (["export", "--checkpoint", RUN, "--format", "safetensors", "--out", target], "--out"),
        (["report", RUN, "--out", target], "--out"),
        (["replay", RUN, "--html", target], "--html"),
    ]:
        before = digest(RUN)
        p = run(args, expect=2)
        check(os.path.basename(name) in p.stderr and run_abs in p.stderr,
              f"{args[0]} {flag} {name}: names the file and the run: {p.stderr}")
        check(digest(RUN) == before, f"{args[0]} {flag} {name}: the run is as it was")
        check(os.path.exists(target) == existed, f"{args[0]} {flag} {name}: nothing created")

# The same outputs beside the run are written (the check refuses only what the run owns).
run(["export", "--checkpoint", RUN, "--format", "safetensors", "--out",
     os.path.join(WORK, "mlp.safetensors")])
run(["report", RUN, "--out", os.path.join(WORK, "mlp.html")])

# --- export --format hf ------------------------------------------------------------------------
text = "the cat sat on the mat; a dog ate the hat.\n" * 40
with open(os.path.join(WORK, "tiny.txt"), "w") as f:
    f.write(text)
GPT_RUN = os.path.join(WORK, "gpt")
run(["train", "--config", os.path.join(CONFIGS, "gpt_fortunes.yaml"), "--set", "device=cpu",
     "--set", "data.train.path=" + os.path.join(WORK, "tiny.txt"), "--set", "model.n_layer=1",
     "--set", "model.n_head=2", "--set", "model.n_embd=16", "--set", "model.block_size=16",
     "--set", "data.batch_size=4", "--set", "scheduler.warmup_steps=2",
     "--set", "training.eval_every=0", "--set", "training.eval_batches=2",
     "--set", "training.max_steps=3", "--run-dir", GPT_RUN])

# vocab.json of a GPT run, through every writer.
before = digest(GPT_RUN)
for args in (["export", "--checkpoint", GPT_RUN, "--format", "safetensors", "--out",
              os.path.join(GPT_RUN, "vocab.json")],
             ["report", GPT_RUN, "--out", os.path.join(GPT_RUN, "vocab.json")]):
    p = run(args, expect=2)
    check("vocab.json" in p.stderr, f"{args[0]} over the run's vocab.json: named: {p.stderr}")
check(digest(GPT_RUN) == before, "the GPT run is as it was")

HF = os.path.join(WORK, "hf")
run(["export", "--checkpoint", GPT_RUN, "--format", "hf", "--out", HF])
check(os.path.isfile(os.path.join(HF, ".ampctl-export")), "an hf export marks its directory")
first = digest(HF)
run(["export", "--checkpoint", GPT_RUN, "--format", "hf", "--out", HF])
check(digest(HF) == first, "an hf export over its own earlier export: the same files")

EMPTY = os.path.join(WORK, "empty")
os.makedirs(EMPTY)
run(["export", "--checkpoint", GPT_RUN, "--format", "hf", "--out", EMPTY])
check(os.path.isfile(os.path.join(EMPTY, "model.safetensors")), "an empty directory is taken")

FOREIGN = os.path.join(WORK, "downloaded-model")
os.makedirs(FOREIGN)
for name, content in [("config.json", b'{"model_type": "gpt2", "n_layer": 12}\n'),
                      ("model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "),
                      ("vocab.json", b'{"a": 0}\n')]:
    with open(os.path.join(FOREIGN, name), "wb") as f:
        f.write(content)
before = digest(FOREIGN)
p = run(["export", "--checkpoint", GPT_RUN, "--format", "hf", "--out", FOREIGN], expect=2)
check("did not write" in p.stderr and FOREIGN in p.stderr,
      "a model folder ampctl did not write is refused naming it: " + p.stderr)
check(digest(FOREIGN) == before, "the foreign model folder is as it was")

before = digest(RUN)
p = run(["export", "--checkpoint", GPT_RUN, "--format", "hf", "--out", RUN], expect=2)
check("holds a run" in p.stderr, "an hf export into a run's directory is refused: " + p.stderr)
check(digest(RUN) == before, "the run is as it was after the refused hf export")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("output run files: all checks passed")
