#!/usr/bin/python3
"""`ampctl tokenize` end to end on a small GPT-2-style tokenizer written here (256 byte tokens, a
few merges, <|endoftext|>): the ids against a BPE written here in Python after GPT-2's
encoder.py (ASCII text, so Python's re can spell the pre-tokenizer regex), the uint16 / uint32
layouts, --bos / --eos around each document, and every refusal (exit 2, the file and field
named, --out not written). tests/cli/tokenize_reference.py compares real tokenizers with
Hugging Face's and tiktoken's ids.

Usage: tokenize_cli.py AMPCTL WORKDIR
"""
import json
import os
import re
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import FAILURES, check, run_ampctl  # noqa: E402

MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("e", "ll"), ("h", "ell"),
          ("Ġ", "a"), ("i", "n"), ("Ġa", "n"), ("Ġan", "d"), ("o", "r"), ("Ġ", "w"),
          ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld")]
ASCII_GPT2 = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def make_vocab():
    a = alphabet()
    vocab = {a[b]: b for b in range(256)}
    for left, right in MERGES:
        vocab[left + right] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def bpe(word, ranks):
    """GPT-2's encoder.py bpe(): merge every occurrence of the lowest-ranked pair, left to right,
    until no pair has a rank."""
    parts = list(word)
    while len(parts) > 1:
        pair = min(zip(parts, parts[1:]), key=lambda p: ranks.get(p, 1 << 30))
        if pair not in ranks:
            break
        i, out = 0, []
        while i < len(parts):
            if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                out.append(parts[i] + parts[i + 1])
                i += 2
            else:
                out.append(parts[i])
                i += 1
        parts = out
    return parts


def encode(text, vocab):
    a = alphabet()
    ranks = {m: i for i, m in enumerate(MERGES)}
    ids = []
    for word in ASCII_GPT2.findall(text):
        ids += [vocab[t] for t in bpe("".join(a[b] for b in word.encode()), ranks)]
    return ids


def read(path, width):
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // width}{'H' if width == 2 else 'I'}", data))


def main():
    ampctl, work = sys.argv[1], os.path.join(os.path.abspath(sys.argv[2]), "tokenize_cli")
    shutil.rmtree(work, ignore_errors=True)
    tok = os.path.join(work, "gpt2ish")
    os.makedirs(tok)
    vocab = make_vocab()
    json.dump(vocab, open(os.path.join(tok, "vocab.json"), "w"))
    with open(os.path.join(tok, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{l} {r}\n" for l, r in MERGES))
    doc1 = os.path.join(work, "one.txt")
    doc2 = os.path.join(work, "two.txt")
    text1 = "hello the world and the  other world's end\n\n\tin 1234 words!!  \n"
    text2 = "Another document: and the world; it's 42.   "
    open(doc1, "w").write(text1)
    open(doc2, "w").write(text2)
    eot = vocab["<|endoftext|>"]

    p = run_ampctl(ampctl, ["tokenize", "--help"])
    check("--tokenizer" in p.stdout and "--eos" in p.stdout, "tokenize --help lists its options")

    out = os.path.join(work, "train.bin")
    p = run_ampctl(ampctl, ["tokenize", "--tokenizer", tok, doc1, doc2, "--out", out])
    want = encode(text1, vocab) + encode(text2, vocab)
    check(read(out, 2) == want, f"ids: {read(out, 2)} against the Python BPE's {want}")
    check(f"{len(want)} tokens (uint16) from 2 documents" in p.stdout,
          f"summary names tokens, dtype and documents: {p.stdout}")
    check("tokens/s" in p.stdout, "summary gives tokens/s")

    run_ampctl(ampctl, ["tokenize", "--tokenizer", os.path.join(tok, "vocab.json"), doc1, doc2,
                        "--out", out, "--dtype", "u32", "--bos", "--eos"])
    want_special = ([eot] + encode(text1, vocab) + [eot]) + ([eot] + encode(text2, vocab) + [eot])
    check(read(out, 4) == want_special, "--dtype u32 --bos --eos: BOS and EOS around each document")

    # Refusals: exit 2, the file and field named, --out left alone.
    before = open(out, "rb").read()

    def refused(args, *parts, what):
        p = run_ampctl(ampctl, ["tokenize"] + args, expect=2)
        for part in parts:
            check(part in p.stderr, f"{what}: stderr names '{part}': {p.stderr.strip()}")
        check(open(out, "rb").read() == before, f"{what}: --out unchanged")

    bad = os.path.join(work, "bad.txt")
    open(bad, "wb").write(b"fine text \xc3\x28 then not")
    refused(["--tokenizer", tok, doc1, bad, "--out", out], "bad.txt", "byte 10", "UTF-8",
            what="non-UTF-8 input")
    wordpiece = os.path.join(work, "wordpiece.json")
    json.dump({"model": {"type": "WordPiece", "vocab": {}}}, open(wordpiece, "w"))
    refused(["--tokenizer", wordpiece, doc1, "--out", out], "wordpiece.json", "model.type",
            "WordPiece", what="unsupported model type")
    badmerges = os.path.join(work, "badmerges")
    os.makedirs(badmerges)
    shutil.copy(os.path.join(tok, "vocab.json"), badmerges)
    open(os.path.join(badmerges, "merges.txt"), "w").write("#version: 0.2\nh e\nq z\n")
    refused(["--tokenizer", badmerges, doc1, "--out", out], "merges.txt", "line 3", "'qz'",
            what="merges that do not match the vocabulary")
    big = os.path.join(work, "big")
    os.makedirs(big)
    big_vocab = dict(vocab)
    big_vocab["<|big|>"] = 70000
    json.dump(big_vocab, open(os.path.join(big, "vocab.json"), "w"))
    shutil.copy(os.path.join(tok, "merges.txt"), big)
    refused(["--tokenizer", big, doc1, "--out", out, "--dtype", "u16"], "--dtype u16", "70001",
            what="u16 for a vocabulary above 65536")
    refused(["--tokenizer", tok, doc1, "--out", out, "--dtype", "u8"], "--dtype", what="bad dtype")
    refused(["--tokenizer", tok, os.path.join(work, "missing.txt"), "--out", out], "missing.txt",
            what="missing input")
    refused(["--tokenizer", tok, doc1, "--out", doc1], "--out", what="--out naming an input")
    check(open(doc1).read() == text1, "--out naming an input leaves the input alone")
    merges_before = open(os.path.join(tok, "merges.txt")).read()
    refused(["--tokenizer", os.path.join(tok, "vocab.json"), doc1, "--out",
             os.path.join(tok, "merges.txt")], "--out", what="--out naming the tokenizer's merges")
    check(open(os.path.join(tok, "merges.txt")).read() == merges_before,
          "--out naming the tokenizer's merges.txt leaves it alone")
    refused(["--tokenizer", tok, doc1, "--out", os.path.join(work, "no", "such", "x.bin")],
            "--out", what="--out in a missing folder")
    nobos = os.path.join(work, "nobos")
    os.makedirs(nobos)
    json.dump({k: v for k, v in vocab.items() if k != "<|endoftext|>"},
              open(os.path.join(nobos, "vocab.json"), "w"))
    shutil.copy(os.path.join(tok, "merges.txt"), nobos)
    refused(["--tokenizer", nobos, doc1, "--out", out, "--bos"], "--bos", "BOS",
            what="--bos without a BOS token")
    refused(["--tokenizer", tok, "--out", out], "inputs is required", what="no input")
    # --threads out of range: the range in words (before: CLI11's "Value 0 not in range 0.000000
    # to 1.797...e+308").
    for bad in ("0", "-3", "5000", "two"):
        refused(["--tokenizer", tok, doc1, "--out", out, "--threads", bad],
                f"--threads: {bad}: expected an integer N >= 1 (at most 4096)",
                what=f"--threads {bad}")
    if FAILURES:
        sys.exit(1)
    print("tokenize: ok")


if __name__ == "__main__":
    main()
