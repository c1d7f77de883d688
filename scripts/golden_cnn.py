#!/usr/bin/python3
"""Writes tests/data/golden/cnn_batchnorm.json: for a tiny CNN with BatchNorm laid out as
ampctl's model.type: cnn (docs/reference.md, "The CNN": features / classifier nn.Sequential),
one fixed batch: the logits, the loss and every parameter gradient, then BatchNorm's running
statistics after 3 SGD steps (lr 0.1) on that batch, computed by PyTorch (Debian's
python3-torch 1.13, CPU, float32). tests/unit/nn/test_cnn.cpp loads the same weights by name
into ampctl's Cnn and compares.

The weights are PyTorch's default initialisation (seeded) loaded into ampctl by name: the same
names load into this nn.Sequential with load_state_dict(strict=True), which is what an ampctl
export is checked against (the buffers included).

Run: /usr/bin/python3 scripts/golden_cnn.py   (the output is checked in; CI needs no torch)
"""
import collections
import json
import os

import torch
from torch import nn

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "golden",
                   "cnn_batchnorm.json")

# model: {type: cnn, conv: [[3, 3]], pool: 2, batch_norm: true, hidden: [5]} on 2 x 6 x 6 images
# with 4 classes; batch of 4.
C, H, W, CLASSES, BATCH = 2, 6, 6, 4, 4


def make_model():
    features = nn.Sequential(nn.Conv2d(C, 3, 3, padding=1, bias=False), nn.BatchNorm2d(3),
                             nn.ReLU(), nn.MaxPool2d(2))
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(3 * 3 * 3, 5), nn.ReLU(),
                               nn.Linear(5, CLASSES))
    return nn.Sequential(collections.OrderedDict(features=features, classifier=classifier))


def main():
    torch.manual_seed(1234)
    model = make_model()
    # Non-trivial BatchNorm affine parameters, so their gradients and use are exercised.
    with torch.no_grad():
        model.features[1].weight.uniform_(0.5, 1.5)
        model.features[1].bias.uniform_(-0.5, 0.5)
    x = torch.randn(BATCH, C, H, W) * 2.0 + 0.5
    labels = torch.tensor([0, 3, 1, 2])
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    model.train()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()
    out = {
        "image": [C, H, W], "classes": CLASSES,
        "x": x.flatten().tolist(), "labels": labels.tolist(),
        "params": {k: v.flatten().tolist() for k, v in params.items()},
        "logits": logits.detach().flatten().tolist(), "loss": loss.item(),
        "grads": {k: v.grad.flatten().tolist() for k, v in model.named_parameters()},
    }
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), labels).backward()
        opt.step()
    bn = model.features[1]
    out["after_steps"] = 3
    out["running_mean"] = bn.running_mean.tolist()
    out["running_var"] = bn.running_var.tolist()
    out["num_batches_tracked"] = int(bn.num_batches_tracked)
    # The names an ampctl export must hold to load with strict=True.
    out["state_dict_keys"] = list(model.state_dict().keys())
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
