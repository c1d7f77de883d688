#!/usr/bin/env python3
"""--init-from, `ampctl eval` and the exports that carry the vocabulary and input statistics, end
to end on the real binary (pure Python: struct reads and writes safetensors, no numpy or torch).

  python3 init_from.py AMPCTL CONFIGS WORK     (AMPCTL_TEST_DEVICE=cuda: every run on the GPU)

Checks (each failure names what differed):
  * a tiny character GPT trains; its safetensors export, its run directory and its hf export
    each start a run (--init-from) whose step-0 eval loss equals the source run's final eval
    loss bitwise (same data, precision, eval batches);
  * `ampctl eval --checkpoint RUN` prints the run's last eval loss bitwise (text and --json);
  * export --format hf -> --init-from -> (one step at lr 0) -> export --format hf: the same bytes;
  * a GPT-2-shaped file in Hugging Face's layout (no "transformer." prefix, Conv1D [in, out],
    attn.bias masks, no lm_head) loads; after one step at lr 0 the ampctl export holds the
    file's tensors (transposed where HF stores Conv1D) bitwise;
  * a file with one wrong shape and one missing tensor is refused (exit 2) naming both, and no
    run directory is left; init.strict: false still refuses the shape; a text with a character
    outside the weights' vocabulary exits 2, one whose characters are among them fine-tunes with
    that vocabulary (kept on resume and by eval); eval of a missing file or of an MLP's weights for a GPT config exits 2;
  * an MLP with data.normalize stores its statistics (checkpoint "input", input.json, export
    metadata and input.mean / input.std tensors); eval equals its last eval line; --init-from
    with data.normalize: false exits 2.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

AMPCTL, CONFIGS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
# The device every run uses: the CPU in CI; scripts/gpu-check.sh runs it again with cuda.
DEVICE = os.environ.get("AMPCTL_TEST_DEVICE", "cpu")
DIR = os.path.join(WORK, "init-from-test")
shutil.rmtree(DIR, ignore_errors=True)
os.makedirs(DIR)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(*args, expect=0):
    p = subprocess.run([AMPCTL, *args], capture_output=True, text=True, timeout=300)
    if expect is not None and p.returncode != expect:
        fail(f"ampctl {' '.join(args)} exited {p.returncode} (expected {expect}):\n{p.stderr}")
    return p


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()}
    return tensors, meta


def write_st(path, tensors, meta=None):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def transpose(blob, rows, cols, esize=4):
    out = bytearray(len(blob))
    for r in range(rows):
        for c in range(cols):
            s = (r * cols + c) * esize
            d = (c * rows + r) * esize
            out[d:d + esize] = blob[s:s + esize]
    return bytes(out)


def evals(run_dir):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if d.get("kind", d.get("type")) == "eval":
                out.append(d)
    if not out:
        fail(f"no eval lines in {run_dir}/metrics.jsonl")
    return out


text = "the cat sat on the mat; a dog ate the hat.\n" * 40
with open(os.path.join(DIR, "tiny.txt"), "w") as f:
    f.write(text)
with open(os.path.join(DIR, "other.txt"), "w") as f:
    f.write("ZZZ quick brown fox jumps over the lazy dog!\n" * 40)

GPT = ["--config", os.path.join(CONFIGS, "gpt_fortunes.yaml"), "--set", "device=" + DEVICE,
       "--set", "data.train.path=" + os.path.join(DIR, "tiny.txt"), "--set", "model.n_layer=1",
       "--set", "model.n_head=2", "--set", "model.n_embd=16", "--set", "model.block_size=16",
       "--set", "data.batch_size=4", "--set", "scheduler.warmup_steps=2",
       "--set", "training.eval_every=0", "--set", "training.eval_batches=2",
       "--set", "checkpoint.every_steps=0"]
SRC = os.path.join(DIR, "src")
run("train", *GPT, "--set", "training.max_steps=6", "--run-dir", SRC)
src_eval = evals(SRC)[-1]

# ampctl eval of the run: its last eval line, bitwise.
p = run("eval", "--checkpoint", SRC, "--json")
ev = json.loads(p.stdout)
if ev["loss"] != src_eval["loss"] or ev["step"] != 6:
    fail(f"eval --json {ev} != the run's last eval line {src_eval}")
p = run("eval", "--checkpoint", SRC)
# The text line has the console's short format (4 significant digits, as C's %.4g); --json every
# digit.
if not p.stdout.startswith("eval loss %.4g perplexity " % src_eval["loss"]):
    fail(f"eval printed {p.stdout!r}, the run's last eval loss is {src_eval['loss']!r}")

# The safetensors export, the run directory and the hf export each start a run at that loss.
ST = os.path.join(DIR, "src.safetensors")
run("export", "--checkpoint", SRC, "--format", "safetensors", "--out", ST)
tensors, meta = read_st(ST)
if json.loads(meta.get("vocab", "null")) != json.load(open(os.path.join(SRC, "vocab.json"))):
    fail("the export's metadata has no vocab equal to the run's vocab.json")
HF = os.path.join(DIR, "hf")
run("export", "--checkpoint", SRC, "--format", "hf", "--out", HF)
cfg = json.load(open(os.path.join(HF, "config.json")))
for key, want in [("model_type", "gpt2"), ("n_layer", 1), ("n_head", 2), ("n_embd", 16),
                  ("n_positions", 16), ("tie_word_embeddings", True),
                  ("architectures", ["GPT2LMHeadModel"]), ("activation_function", "gelu_new")]:
    if cfg.get(key) != want:
        fail(f"hf config.json {key} = {cfg.get(key)!r}, expected {want!r}")
hf_tensors, _ = read_st(os.path.join(HF, "model.safetensors"))
c_attn = hf_tensors["transformer.h.0.attn.c_attn.weight"]
if c_attn[1] != [16, 48] or c_attn[2] != transpose(tensors["transformer.h.0.attn.c_attn.weight"][2], 48, 16):
    fail("hf c_attn.weight is not the transpose of ampctl's [48, 16]")
if "lm_head.weight" in hf_tensors:
    fail("a tied hf export holds lm_head.weight")
vocab_hf = json.load(open(os.path.join(HF, "vocab.json")))
if sorted(vocab_hf, key=vocab_hf.get) != json.load(open(os.path.join(SRC, "vocab.json"))):
    fail("hf vocab.json is not the run's vocabulary as {token: id}")

for name, source in [("from_st", ST), ("from_run", SRC), ("from_hf", HF)]:
    d = os.path.join(DIR, name)
    p = run("train", *GPT, "--set", "training.max_steps=3", "--init-from", source, "--run-dir", d)
    first = evals(d)[0]
    if first["step"] != 0 or first["loss"] != src_eval["loss"]:
        fail(f"--init-from {source}: first eval {first}, the source's final eval {src_eval}")

# Round trip: hf -> --init-from -> one step at lr 0 -> hf: the same bytes.
LR0 = ["--set", "optimizer.lr=0", "--set", "scheduler.min_lr=0", "--set",
       "scheduler.warmup_steps=0", "--set",
       "optimizer.weight_decay=0", "--set", "training.max_steps=1"]
RT = os.path.join(DIR, "roundtrip")
run("train", *GPT, *LR0, "--init-from", HF, "--run-dir", RT)
HF2 = os.path.join(DIR, "hf2")
run("export", "--checkpoint", RT, "--format", "hf", "--out", HF2)
for f in ["config.json", "model.safetensors", "vocab.json"]:
    if open(os.path.join(HF, f), "rb").read() != open(os.path.join(HF2, f), "rb").read():
        fail(f"hf round trip: {f} differs")

# A GPT-2-shaped file in Hugging Face's own layout (GPT2Model's names: no prefix, no lm_head;
# Conv1D [in, out]; the attn.bias mask buffers), with a position table longer than block_size 16
# (cropped). Written by PyTorch (scripts/dev/hf_gpt2.py --write: the HF-structured module's own
# state_dict) where /usr/bin/python3 has torch; else by struct here, and the test says so.
V = len(json.load(open(os.path.join(SRC, "vocab.json"))))
C, T = 16, 32
GPT2_DIR = os.path.join(DIR, "gpt2")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(CONFIGS)), "scripts", "dev", "hf_gpt2.py")
torch_py = None
for py in (sys.executable, "/usr/bin/python3"):
    if os.path.exists(py) and subprocess.run([py, "-c", "import torch"],
                                             capture_output=True).returncode == 0:
        torch_py = py
        break
if torch_py:
    p = subprocess.run([torch_py, SCRIPT, "--write", GPT2_DIR, "--vocab", str(V), "--n-layer", "1",
                        "--n-head", "2", "--n-embd", str(C), "--positions", str(T)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"hf_gpt2.py --write exited {p.returncode}:\n{p.stdout}{p.stderr}")
    GPT2 = os.path.join(GPT2_DIR, "model.safetensors")
else:
    print("PyTorch not found: the HF-layout file is written by struct, not by "
          "scripts/dev/hf_gpt2.py --write (apt-get install python3-torch)")
    def values(n, k):
        return struct.pack(f"<{n}f", *[((i * 7919 + k * 104729) % 2001 - 1000) / 4096.0
                                       for i in range(n)])
    hf = {"wte.weight": ("F32", [V, C], values(V * C, 1)),
          "wpe.weight": ("F32", [T, C], values(T * C, 2))}
    shapes = {"ln_1.weight": [C], "ln_1.bias": [C], "attn.c_attn.weight": [C, 3 * C],
              "attn.c_attn.bias": [3 * C], "attn.c_proj.weight": [C, C], "attn.c_proj.bias": [C],
              "ln_2.weight": [C], "ln_2.bias": [C], "mlp.c_fc.weight": [C, 4 * C],
              "mlp.c_fc.bias": [4 * C], "mlp.c_proj.weight": [4 * C, C], "mlp.c_proj.bias": [C]}
    for k, (name, shape) in enumerate(shapes.items()):
        n = 1
        for s in shape:
            n *= s
        hf["h.0." + name] = ("F32", shape, values(n, 10 + k))
    hf["h.0.attn.bias"] = ("BOOL", [1, 1, T, T], bytes(T * T))
    hf["ln_f.weight"] = ("F32", [C], values(C, 40))
    hf["ln_f.bias"] = ("F32", [C], values(C, 41))
    GPT2 = os.path.join(DIR, "gpt2.safetensors")
    write_st(GPT2, hf, {"format": "pt"})
hf, _ = read_st(GPT2)
if "h.0.attn.c_attn.weight" not in hf or hf["h.0.attn.c_attn.weight"][1] != [C, 3 * C]:
    fail(f"{GPT2} is not in GPT-2's layout: {sorted(hf)}")
BIAS = ["--set", "model.bias=true"]
HR = os.path.join(DIR, "from_gpt2")
run("train", *GPT, *BIAS, *LR0, "--init-from", GPT2, "--run-dir", HR)
OUT = os.path.join(DIR, "from_gpt2.safetensors")
run("export", "--checkpoint", HR, "--format", "safetensors", "--out", OUT)
got, _ = read_st(OUT)
for name, (dtype, shape, blob) in hf.items():
    if name.endswith("attn.bias"):
        continue
    want = blob
    if name == "wpe.weight":
        want = blob[:16 * C * 4]
    if name.split(".", 2)[-1] in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                  "mlp.c_proj.weight"):
        want = transpose(blob, shape[0], shape[1])
    have = got.get("transformer." + name)
    if have is None or have[2] != want:
        fail(f"after --init-from of the HF file and a step at lr 0, {name} differs")

# Refusals: one wrong shape and one missing tensor, both named; nothing written.
bad = dict(tensors)
bad["transformer.wpe.weight"] = ("F32", [16, 8], bytes(16 * 8 * 4))
del bad["transformer.ln_f.weight"]
BAD = os.path.join(DIR, "bad.safetensors")
write_st(BAD, bad, meta)
for strict in ["true", "false"]:
    d = os.path.join(DIR, "refused-" + strict)
    p = run("train", *GPT, "--set", "init.strict=" + strict, "--init-from", BAD, "--run-dir", d,
            expect=2)
    if "transformer.wpe.weight" not in p.stderr or "[16, 8]" not in p.stderr or "[16, 16]" not in p.stderr:
        fail(f"init.strict {strict}: the wrong shape is not named with both shapes:\n{p.stderr}")
    if strict == "true" and "transformer.ln_f.weight" not in p.stderr:
        fail(f"the missing tensor is not named:\n{p.stderr}")
    if os.path.exists(d):
        fail(f"a refused --init-from left {d}")
p = run("train", *GPT, "--init-from", os.path.join(DIR, "nothing.safetensors"), "--run-dir",
        os.path.join(DIR, "refused-missing"), expect=2)
if os.path.exists(os.path.join(DIR, "refused-missing")):
    fail("a missing --init-from file left a run directory")
# Another text: another vocabulary.
p = run("train", *GPT, "--set", "data.train.path=" + os.path.join(DIR, "other.txt"),
        "--init-from", ST, "--run-dir", os.path.join(DIR, "refused-vocab"), expect=2)
if "vocabulary" not in p.stderr or os.path.exists(os.path.join(DIR, "refused-vocab")):
    fail(f"a vocabulary mismatch was not refused cleanly:\n{p.stderr}")

# A second text whose characters are among the first's: read with the weights' vocabulary (the
# same ids), so it fine-tunes; the run, its checkpoint and a resume keep that vocabulary.
with open(os.path.join(DIR, "subset.txt"), "w") as f:
    f.write("a hat sat on the cat; the dog ate a mat.\n" * 30)
FT = os.path.join(DIR, "finetune")
run("train", *GPT, "--set", "data.train.path=" + os.path.join(DIR, "subset.txt"),
    "--set", "training.max_steps=4", "--set", "checkpoint.every_steps=2", "--init-from", ST,
    "--run-dir", FT)
if json.load(open(os.path.join(FT, "vocab.json"))) != json.load(open(os.path.join(SRC, "vocab.json"))):
    fail("a run started from weights on a text of fewer characters did not keep their vocabulary")
run("resume", "--checkpoint", os.path.join(FT, "checkpoints", "step-00000002.json"), "--rewind")
p = run("eval", "--checkpoint", FT, "--json")
if json.loads(p.stdout)["loss"] != evals(FT)[-1]["loss"]:
    fail(f"eval of the fine-tuned run {p.stdout} != its last eval line {evals(FT)[-1]}")

p = run("train", *GPT, "--set", "data.train.vocab=byte", "--init-from", ST, "--run-dir",
        os.path.join(DIR, "refused-kind"), expect=2)
if "data.train.vocab: byte, but the weights were trained with a char vocabulary" not in p.stderr \
        or os.path.exists(os.path.join(DIR, "refused-kind")):
    fail(f"a byte run from char weights was not refused naming data.train.vocab:\n{p.stderr}")

# eval's bad inputs.
p = run("eval", "--checkpoint", os.path.join(DIR, "nothing"), expect=2)
p = run("eval", "--checkpoint", SRC, "--set", "data.train.path=" + os.path.join(DIR, "other.txt"),
        expect=2)
if "vocabulary" not in p.stderr:
    fail(f"eval on text of another vocabulary: {p.stderr}")

# An MLP with data.normalize: the statistics travel with the weights.
MLP = ["--config", os.path.join(CONFIGS, "quickstart.yaml"), "--set", "device=" + DEVICE,
       "--set", "data.normalize=true", "--set", "training.max_steps=40",
       "--set", "training.eval_every=0", "--set", "model.hidden=[16]",
       "--set", "data.train.samples=512"]
M = os.path.join(DIR, "mlp")
run("train", *MLP, "--run-dir", M)
stats = json.load(open(os.path.join(M, "input.json")))
ckpt = json.load(open(os.path.join(M, "checkpoints", open(os.path.join(M, "checkpoints", "latest")).read().strip())))
if ckpt.get("input") != stats or len(stats["mean"]) != 32 or stats["pixel_scale"] != 1:
    fail(f"the checkpoint's input statistics {ckpt.get('input')} differ from input.json")
MST = os.path.join(DIR, "mlp.safetensors")
run("export", "--checkpoint", M, "--format", "safetensors", "--out", MST)
mt, mmeta = read_st(MST)
if json.loads(mmeta["input"]) != stats:
    fail("the MLP export's metadata input differs from input.json")
mean = struct.unpack("<32f", mt["input.mean"][2])
if any(struct.unpack("<f", struct.pack("<f", m))[0] != x for m, x in zip(stats["mean"], mean)):
    fail("input.mean is not the statistics rounded to f32")
p = run("eval", "--checkpoint", M, "--json")
if json.loads(p.stdout)["loss"] != evals(M)[-1]["loss"] or "accuracy" not in json.loads(p.stdout):
    fail(f"MLP eval {p.stdout} != the run's last eval line {evals(M)[-1]}")
p = run("train", *MLP, "--set", "data.normalize=false", "--init-from", MST, "--run-dir",
        os.path.join(DIR, "refused-norm"), expect=2)
if "data.normalize" not in p.stderr:
    fail(f"--init-from normalised weights with data.normalize: false: {p.stderr}")
d = os.path.join(DIR, "mlp-init")
run("train", *MLP, "--init-from", MST, "--run-dir", d)
if evals(d)[0]["loss"] != evals(M)[-1]["loss"]:
    fail(f"MLP --init-from: step-0 eval {evals(d)[0]} != source {evals(M)[-1]}")
p = run("eval", "--config", os.path.join(CONFIGS, "gpt_fortunes.yaml"), "--set", "device=" + DEVICE,
        "--set", "data.train.path=" + os.path.join(DIR, "tiny.txt"), "--init-from", MST, expect=2)
# An MLP's weights for a GPT: refused with init.strict true or false, with a hint that does not
# offer init.strict: false, and no run directory.
for strict in ["true", "false"]:
    rd = os.path.join(DIR, "refused-mlp-for-gpt-" + strict)
    p = run("train", *GPT, "--set", "init.strict=" + strict, "--init-from", MST, "--run-dir", rd,
            expect=2)
    if "shares no tensor with the model (model.type: gpt)" not in p.stderr or \
            "layers.0.weight" not in p.stderr or "hint: --init-from takes weights of the same" \
            not in p.stderr or os.path.exists(rd):
        fail(f"an MLP's weights for a GPT (init.strict {strict}):\n{p.stderr}")
print("init_from: all checks passed")
