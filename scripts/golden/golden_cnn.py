#!/usr/bin/python3
"""Writes tests/data/golden/cnn_batchnorm.json: a tiny CNN with BatchNorm laid out as ampctl's
model.type: cnn (docs/reference.md, "The CNN": features / classifier nn.Sequential) run by
PyTorch itself (Debian's python3-torch 1.13, CPU, float32) from ampctl's initial weights: for
one fixed batch the logits, the loss and every parameter's gradient, then BatchNorm's running
statistics after 3 SGD steps (lr 0.1) on that batch. tests/unit/nn/test_cnn.cpp rebuilds the
same initialisation in ampctl from the seed and compares (no torch needed there).

The initial weights come from ampctl, as for scripts/golden/golden_gpt.py: the golden test, run with
AMPCTL_GOLDEN_CNN_INIT set, writes them as the safetensors file `ampctl export` writes (the
parameters, then the BatchNorm buffers, num_batches_tracked as an I32 scalar), which this
script loads with load_state_dict(strict=True), so the names are checked too. Regenerate with:

  AMPCTL_GOLDEN_CNN_INIT=/tmp/cnn_init.safetensors build/tests/ampctl_test_nn \\
      --gtest_filter='Cnn.MatchesPyTorch*'
  /usr/bin/python3 scripts/golden/golden_cnn.py /tmp/cnn_init.safetensors \
      tests/data/golden/cnn_batchnorm.json
"""
import collections
import json
import struct
import sys

import numpy as np
import torch
from torch import nn

# model: {type: cnn, conv: [[3, 3]], pool: 2, batch_norm: true, hidden: [5]} on 2 x 6 x 6 images
# with 4 classes; batch of 4 (keep in step with test_cnn.cpp).
C, H, W, CLASSES, BATCH = 2, 6, 6, 4, 4
SEED = 1234  # the batch
SGD_LR, SGD_STEPS = 0.1, 3


def make_model():
    features = nn.Sequential(nn.Conv2d(C, 3, 3, padding=1, bias=False), nn.BatchNorm2d(3),
                             nn.ReLU(), nn.MaxPool2d(2))
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(3 * 3 * 3, 5), nn.ReLU(),
                               nn.Linear(5, CLASSES))
    return nn.Sequential(collections.OrderedDict(features=features, classifier=classifier))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    dtypes = {"F32": "<f4", "I32": "<i4"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype=dtypes[info["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def floats(t):
    # float32 values, printed so that they parse back to the same float (9 significant digits).
    return [float("%.9g" % v) for v in t.detach().reshape(-1).tolist()]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: golden_cnn.py INIT.safetensors OUT.json")
    torch.set_num_threads(1)
    model = make_model()
    state = read_safetensors(sys.argv[1])
    model.load_state_dict(state, strict=True)
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(BATCH, C, H, W, generator=g) * 2.0 + 0.5
    labels = torch.tensor([0, 3, 1, 2])
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    model.train()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()
    out = {
        "torch": torch.__version__,
        "image": [C, H, W], "classes": CLASSES,
        "x": floats(x), "labels": labels.tolist(),
        # ampctl's initial weights as loaded: the test checks its seeded init equals them.
        "params": {k: floats(v) for k, v in params.items()},
        "logits": floats(logits), "loss": float("%.9g" % loss.item()),
        "grads": {k: floats(v.grad) for k, v in model.named_parameters()},
    }
    opt = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    opt.step()
    for _ in range(SGD_STEPS - 1):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), labels).backward()
        opt.step()
    bn = model.features[1]
    out["after_steps"] = SGD_STEPS
    out["running_mean"] = floats(bn.running_mean)
    out["running_var"] = floats(bn.running_var)
    out["num_batches_tracked"] = int(bn.num_batches_tracked)
    # The names an ampctl export must hold to load with strict=True.
    out["state_dict_keys"] = list(model.state_dict().keys())
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
