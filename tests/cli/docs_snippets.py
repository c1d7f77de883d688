#!/usr/bin/env python3
"""Runs docs/reference.md's Python snippets that load an export, exactly as written, on a real
export: an MLP trained with data.normalize on CSV features of very different offsets and scales
(so the statistics matter), exported to model.safetensors; the snippet loads it (keys
layers.N.*), and its predict() on the raw evaluation features must reproduce `ampctl eval`'s
accuracy within 0.001 (both fp32). Without the statistics the same weights score far lower,
which is checked too (the statistics are what makes the snippet right).

Then Fashion-MNIST (the dataset-fashion-mnist package; skipped, saying so, without it): a short
MLP and a short CNN train with data.normalize, are exported, and PyTorch (fp32) scores the
exports on the whole 10,000-image test set with the statistics applied as the docs say (the MLP
as an nn.Sequential under `layers`, the CNN through the docs' `ampctl_cnn` snippet, loaded with
strict=True): each must reproduce `ampctl eval`'s accuracy within 0.001. Last, every other
```python snippet of the document runs: the AMP recipe of "Coming from PyTorch" as one step on a
small model (its names supplied; the step must change the weights). A snippet the test does not
know fails it, so a new one must be added here.

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

all_snippets = re.findall(r"```python\n(.*?)```", doc, re.S)
cnn_snippets = [s for s in all_snippets if "def ampctl_cnn" in s]
amp_snippets = [s for s in all_snippets if "scaler.scale(loss).backward()" in s]
unknown = [s for s in all_snippets if s not in snippets + cnn_snippets + amp_snippets]
if len(cnn_snippets) != 1 or len(amp_snippets) != 1 or unknown:
    print(f"FAIL: {DOC}: expected one CNN and one AMP-recipe snippet besides the MLP's, found "
          f"{len(cnn_snippets)} and {len(amp_snippets)}, and {len(unknown)} this test does not run")
    sys.exit(1)

# The AMP recipe, one optimizer step of a small model, with the names it uses supplied. torch 1.x
# refuses autocast(float16) on the CPU (bf16 only) and this machine has no GPU, so `torch` is
# torch itself but for autocast, a no-op here (the step runs in fp32).
import contextlib
import types
torch_here = types.SimpleNamespace(**{k: getattr(torch, k) for k in ("float16", "nn")})
torch_here.autocast = lambda device, dtype=None: contextlib.nullcontext()
torch.manual_seed(0)
amp_model = torch.nn.Linear(8, 3)
before = amp_model.weight.detach().clone()
optimizer = torch.optim.SGD(amp_model.parameters(), lr=0.1)
amp_ns = {"torch": torch_here, "device": "cpu", "model": amp_model, "optimizer": optimizer,
          "loss_fn": torch.nn.functional.cross_entropy, "x": torch.randn(16, 8),
          "y": torch.randint(0, 3, (16,)), "grad_accum_steps": 2, "max_norm": 1.0,
          "scaler": torch.cuda.amp.GradScaler(enabled=False),
          "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1)}
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    exec(compile(amp_snippets[0], DOC + " (the AMP recipe)", "exec"), amp_ns)
if torch.equal(before, amp_model.weight.detach()):
    print("FAIL: the AMP recipe snippet did not change the weights")
    sys.exit(1)
print("the AMP recipe snippet ran one step")

FM = "/usr/share/datasets/fashion-mnist"
if not os.path.exists(os.path.join(FM, "t10k-images-idx3-ubyte.gz")):
    print(f"SKIPPED (part): no {FM} (apt-get install dataset-fashion-mnist): the Fashion-MNIST "
          "exports were not checked")
    print("docs_snippets: passed")
    sys.exit(0)

import gzip
def idx(name):
    raw = gzip.open(os.path.join(FM, name)).read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)
images = idx("t10k-images-idx3-ubyte.gz").float()  # raw 0..255, [10000, 28, 28]
labels = idx("t10k-labels-idx1-ubyte.gz").long()

def load_export(path):
    state = ns["load_file"](path)
    with ns["safe_open"](path, "pt") as f:
        stats = json.loads(f.metadata()["input"])
    return state, state.pop("input.mean"), state.pop("input.std"), stats

def check(kind, config, sets, module_of):
    r = os.path.join(d, "fmnist-" + kind)
    subprocess.run([AMPCTL, "train", "--config", os.path.join(CONFIGS, config), "--run-dir", r,
                    "--set", "device=cpu", "--set", "data.normalize=true",
                    "--set", "training.eval_every=0", *sets], check=True, capture_output=True)
    path = os.path.join(d, kind + ".safetensors")
    subprocess.run([AMPCTL, "export", "--checkpoint", r, "--format", "safetensors", "--out",
                    path], check=True, capture_output=True)
    theirs = json.loads(subprocess.run([AMPCTL, "eval", "--checkpoint", r, "--json"], check=True,
                                       capture_output=True, text=True).stdout)["accuracy"]
    state, mean, std, stats = load_export(path)
    model = module_of()
    model.load_state_dict(state, strict=True)
    model.eval()
    with torch.no_grad():
        ours = (model(images, mean, std, stats["pixel_scale"]).argmax(dim=1) == labels)
    ours = ours.double().mean().item()
    print(f"Fashion-MNIST {kind}: ampctl eval accuracy {theirs:.4f}, the export in PyTorch "
          f"{ours:.4f} (10000 test images)")
    if abs(ours - theirs) > 0.001:
        print(f"FAIL: the {kind} export does not reproduce ampctl's accuracy within 0.001")
        sys.exit(1)

class FlatMLP(torch.nn.Module):  # a config's MLP: nn.Sequential under `layers`, on flat pixels
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(),
                                          torch.nn.Linear(64, 10))
    def forward(self, x, mean, std, pixel_scale):
        return self.layers((x.reshape(len(x), -1) / pixel_scale - mean) / std)

class Images(torch.nn.Module):  # the docs' CNN on images normalised as the docs say
    def __init__(self):
        super().__init__()
        self.net = cnn_ns["ampctl_cnn"](1, 28, 28, 10, conv=[[8, 3], [16, 3]], batch_norm=True,
                                       hidden=[32], dropout=0.25)  # the config's dropout
    def forward(self, x, mean, std, pixel_scale):
        x = x.reshape(len(x), 1, 28, 28)
        return self.net((x / pixel_scale - mean.view(1, 1, 28, 28)) / std.view(1, 1, 28, 28))
    def load_state_dict(self, state, strict):
        return self.net.load_state_dict(state, strict=strict)

cnn_ns = {}
exec(compile(cnn_snippets[0], DOC + " (the CNN snippet)", "exec"), cnn_ns)
check("mlp", "fashion_mnist_mlp.yaml",
      ["--set", "model.hidden=[64]", "--set", "training.max_steps=60",
       "--set", "scheduler.warmup_steps=10"], FlatMLP)
check("cnn", "fashion_mnist_cnn.yaml",
      ["--set", "model.conv=[[8, 3], [16, 3]]", "--set", "model.hidden=[32]",
       "--set", "training.max_steps=50"], Images)
print("docs_snippets: passed")
