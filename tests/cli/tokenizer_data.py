#!/usr/bin/python3
"""Text read through a tokenizer as training data (issue 45): `data.train: {source: text, path,
tokenizer}` trains a tiny GPT on the tokenizer's ids, the run directory keeps a copy of the
tokenizer (tokenizer.json), `ampctl sample` encodes the prompt and decodes the output through
it and `export --format hf` carries it; `ampctl tokenize --dtype u32` output trains as `{source: tokens, format: u32}`. Refused before
a run directory exists (exit 2): a tokenizer ampctl cannot read, text that is not UTF-8, a
tokenizer with `vocab: byte`, a data.eval tokenizer other than data.train's.

Usage: tokenizer_data.py AMPCTL WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import FAILURES, check, run_ampctl  # noqa: E402
from tokenize_cli import MERGES, make_vocab  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(ROOT, "configs", "gpt_fortunes.yaml")
TINY = ["--set", "device=cpu", "--set", "model.n_layer=1", "--set", "model.n_head=2",
        "--set", "model.n_embd=16", "--set", "model.block_size=8", "--set", "data.batch_size=4",
        "--set", "training.max_steps=4", "--set", "scheduler.warmup_steps=1",
        "--set", "training.eval_every=0", "--set", "training.eval_batches=1",
        "--set", "checkpoint.every_steps=0"]


def main():
    ampctl, work = sys.argv[1], os.path.join(os.path.abspath(sys.argv[2]), "tokenizer_data")
    shutil.rmtree(work, ignore_errors=True)
    tok = os.path.join(work, "tok")
    os.makedirs(tok)
    vocab = make_vocab()
    json.dump(vocab, open(os.path.join(tok, "vocab.json"), "w"))
    with open(os.path.join(tok, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{l} {r}\n" for l, r in MERGES))
    text = os.path.join(work, "text.txt")
    open(text, "w").write("hello the world and the other world, in the end.\n" * 30)

    run = os.path.join(work, "run")
    run_ampctl(ampctl, ["train", "--config", CONFIG, "--run-dir", run, "--set",
                        f"data.train.path={text}", "--set", f"data.train.tokenizer={tok}"] + TINY)
    copy = os.path.join(run, "tokenizer.json")
    check(os.path.exists(copy), "the run directory holds tokenizer.json")
    check(not os.path.exists(os.path.join(run, "vocab.json")), "and no character vocab.json")
    if os.path.exists(copy):
        doc = json.load(open(copy))
        check(doc["model"]["vocab"] == vocab, "its vocabulary is the tokenizer's")
    def sample(seed):
        # Bytes: a few steps of training draw byte tokens, whose text need not be UTF-8.
        p = subprocess.run([ampctl, "sample", "--checkpoint", run, "--prompt", "hello the",
                            "--tokens", "12", "--seed", str(seed)], capture_output=True,
                           timeout=300)
        check(p.returncode == 0, f"sample exit {p.returncode}: {p.stderr[-2000:]!r}")
        return p.stdout

    a, b = sample(3), sample(3)
    check(a == b, "one seed, one text")
    check(a.startswith(b"hello the"), f"sample decodes the prompt through the tokenizer: {a!r}")
    check(a != b"hello the 257 259", "sample prints text, not ids")
    # Without the run's copy of the tokenizer, sample refuses (exit 2) and names it.
    os.rename(copy, copy + ".away")
    p = subprocess.run([ampctl, "sample", "--checkpoint", run, "--tokens", "2"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 2 and "tokenizer.json" in p.stderr,
          f"sample without the run's tokenizer.json: exit {p.returncode}, {p.stderr.strip()}")
    os.rename(copy + ".away", copy)

    # export --format hf carries the run's tokenizer.
    hf = os.path.join(work, "hf")
    run_ampctl(ampctl, ["export", "--checkpoint", run, "--format", "hf", "--out", hf])
    check(sorted(os.listdir(hf)) == [".ampctl-export", "config.json", "model.safetensors", "tokenizer.json"],
          f"the hf export holds the tokenizer: {sorted(os.listdir(hf))}")
    if os.path.exists(os.path.join(hf, "tokenizer.json")):
        check(open(os.path.join(hf, "tokenizer.json"), "rb").read() == open(copy, "rb").read(),
              "the export's tokenizer.json is the run's copy")
    # ...and a second export over the first is allowed (tokenizer.json is an export's file).
    run_ampctl(ampctl, ["export", "--checkpoint", run, "--format", "hf", "--out", hf])

    # The same text as u32 token ids trains as {source: tokens, format: u32}.
    ids = os.path.join(work, "text.bin")
    run_ampctl(ampctl, ["tokenize", "--tokenizer", tok, text, "--out", ids, "--dtype", "u32"])
    run_ampctl(ampctl, ["train", "--config", CONFIG, "--run-dir", os.path.join(work, "run_u32"),
                        "--set", f"data.train={{source: tokens, path: {ids}, format: u32, "
                        f"vocab_size: {len(vocab)}}}"] + TINY)

    # Refusals, before a run directory exists.
    def refused(sets, *parts, what):
        target = os.path.join(work, "refused")
        p = run_ampctl(ampctl, ["train", "--config", CONFIG, "--run-dir", target] + sets + TINY,
                       expect=2)
        for part in parts:
            check(part in p.stderr, f"{what}: stderr names '{part}': {p.stderr.strip()}")
        check(not os.path.exists(target), f"{what}: no run directory")

    wordpiece = os.path.join(work, "wordpiece.json")
    json.dump({"model": {"type": "WordPiece", "vocab": {}}}, open(wordpiece, "w"))
    refused(["--set", f"data.train.path={text}", "--set", f"data.train.tokenizer={wordpiece}"],
            "wordpiece.json", "model.type", what="unsupported tokenizer")
    bad = os.path.join(work, "bad.txt")
    open(bad, "wb").write(b"hello the world\xff and more\n" * 10)
    refused(["--set", f"data.train.path={bad}", "--set", f"data.train.tokenizer={tok}"],
            "bad.txt", "byte 15", "UTF-8", what="text that is not UTF-8")
    refused(["--set", f"data.train.path={text}", "--set", f"data.train.tokenizer={tok}", "--set",
             "data.train.vocab=byte"], "tokenizer", what="a tokenizer with vocab: byte")
    other = os.path.join(work, "other")
    os.makedirs(other)
    shutil.copy(os.path.join(tok, "vocab.json"), other)
    open(os.path.join(other, "merges.txt"), "w").write("#version: 0.2\nh e\n")
    refused(["--set", f"data.train.path={text}", "--set", f"data.train.tokenizer={tok}", "--set",
             f"data.eval={{source: text, path: {text}, tokenizer: {other}}}"],
            "data.eval.tokenizer", what="another tokenizer for data.eval")
    if FAILURES:
        sys.exit(1)
    print("tokenizer_data: ok")


if __name__ == "__main__":
    main()
