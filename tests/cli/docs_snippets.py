#!/usr/bin/env python3
"""Runs docs/reference.md's Python snippets that load an export, exactly as written, on a real
export: an MLP trained with data.normalize on CSV features of very different offsets and scales
(so the statistics matter), exported to model.safetensors; the snippet loads it (keys
layers.N.*), and its predict() on the raw evaluation features must reproduce `ampctl eval`'s
accuracy within 0.001 (both fp32). Without the statistics the same weights score far lower,
which is checked too (the statistics are what makes the snippet right).

  docs_snippets.py AMPCTL CONFIGS REFERENCE_MD WORK
Skipped (exit 77) without torch. Without the safetensors package a stand-in with its two
functions the snippet uses (safe_open(...).metadata(), safetensors.torch.load_file), reading the
format with struct, is put on the path.
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys

try:
    import torch
except ImportError:
    # Debian's python3-torch is in the system python, which a pyenv or venv python3 hides.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                           capture_output=True).returncode == 0:
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    print("SKIPPED: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

AMPCTL, CONFIGS, DOC, WORK = sys.argv[1:5]
d = os.path.join(WORK, "docs-snippets-test")
shutil.rmtree(d, ignore_errors=True)
os.makedirs(d)

try:
    import safetensors  # noqa: F401
except ImportError:
    shim = os.path.join(d, "shim", "safetensors")
    os.makedirs(shim)
    with open(os.path.join(shim, "__init__.py"), "w") as f:
        # (torch as _torch: the package's own submodule safetensors.torch takes the name torch)
        f.write('''import json, struct
import torch as _torch
_DT = {"F32": _torch.float32, "F16": _torch.float16, "BF16": _torch.bfloat16, "I32": _torch.int32}
def _read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {k: _torch.frombuffer(bytearray(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                               dtype=_DT[v["dtype"]]).reshape(v["shape"]).clone()
           for k, v in header.items()}
    return out, meta
class safe_open:
    def __init__(self, path, framework):
        self._tensors, self._meta = _read(path)
    def __enter__(self):
        return self
    def __exit__(self, *a):
        return False
    def metadata(self):
        return self._meta
''')
    with open(os.path.join(shim, "torch.py"), "w") as f:
        f.write("from safetensors import _read\ndef load_file(path):\n    return _read(path)[0]\n")
    sys.path.insert(0, os.path.dirname(shim))
    print("(safetensors is not installed: using a stand-in for load_file and safe_open)")

# Features with offsets up to 3000 and scales from 0.01 to 300: unnormalised, they swamp the
# first layer; labels from a fixed linear rule on the standardised features.
rng = random.Random(7)
scale = [0.01 * (1.25 ** j) for j in range(32)]
offset = [100.0 * j for j in range(32)]
w = [[rng.gauss(0, 1) for _ in range(32)] for _ in range(10)]
def rows(n):
    out = []
    for _ in range(n):
        z = [rng.gauss(0, 1) for _ in range(32)]
        label = max(range(10), key=lambda c: sum(wi * zi for wi, zi in zip(w[c], z)))
        out.append(([zi * s + o for zi, s, o in zip(z, scale, offset)], label))
    return out
train, evalset = rows(3000), rows(2000)
for name, data in [("train.csv", train), ("eval.csv", evalset)]:
    with open(os.path.join(d, name), "w") as f:
        for x, y in data:
            f.write(",".join(repr(v) for v in x) + f",{y}\n")

run = os.path.join(d, "run")
common = ["--set", "device=cpu", "--set", "precision=fp32", "--set", "data.normalize=true",
          "--set", "data.train={source: csv, path: '" + os.path.join(d, "train.csv") + "'}",
          "--set", "data.eval={source: csv, path: '" + os.path.join(d, "eval.csv") + "'}"]
subprocess.run([AMPCTL, "train", "--config", os.path.join(CONFIGS, "quickstart.yaml"),
                "--run-dir", run, "--set", "training.max_steps=300", *common],
               check=True, capture_output=True)
subprocess.run([AMPCTL, "export", "--checkpoint", run, "--format", "safetensors", "--out",
                os.path.join(d, "model.safetensors")], check=True, capture_output=True)
ev = json.loads(subprocess.run([AMPCTL, "eval", "--checkpoint", run, "--json"], check=True,
                               capture_output=True, text=True).stdout)

doc = open(DOC, encoding="utf-8").read()
snippets = [s for s in re.findall(r"```python\n(.*?)```", doc, re.S) if "class MLP" in s]
if len(snippets) != 1:
    print(f"FAIL: expected one MLP loading snippet in {DOC}, found {len(snippets)}")
    sys.exit(1)
os.chdir(d)
ns = {}
exec(compile(snippets[0], DOC + " (the MLP snippet)", "exec"), ns)  # exactly as written

x = torch.tensor([r[0] for r in evalset], dtype=torch.float32)
y = torch.tensor([r[1] for r in evalset])
with torch.no_grad():
    acc = (ns["predict"](x) == y).double().mean().item()
    raw = (ns["model"](x).argmax(dim=1) == y).double().mean().item()
print(f"ampctl eval accuracy {ev['accuracy']:.4f}; the snippet's predict() {acc:.4f}; "
      f"the same weights on raw features {raw:.4f}")
if abs(acc - ev["accuracy"]) > 0.001:
    print("FAIL: the documented snippet does not reproduce ampctl's accuracy within 0.001")
    sys.exit(1)
if not raw < ev["accuracy"] - 0.2:
    print("FAIL: the statistics made no difference (the test would not catch their absence)")
    sys.exit(1)
print("docs_snippets: passed")
