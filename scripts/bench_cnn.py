#!/usr/bin/python3
"""PyTorch side of scripts/bench_cnn.sh: the model and recipe of configs/fashion_mnist_cnn.yaml
(docs/reference.md, "The CNN": conv [[32, 3], [64, 3]], BatchNorm, max pool 2, hidden [128],
AdamW lr 2e-3 wd 0.01, OneCycleLR, batch 128) in float32 on the CPU (Debian's python3-torch
1.13, oneDNN convolutions), on Fashion-MNIST normalised as ampctl does (x / 255, then each pixel
standardised with the training set's mean and population std).

  --mode time --steps N   times N training steps after a warm-up; prints {"step_ms": median}
  --mode train            trains --max-steps steps and evaluates on the test set; prints
                          {"accuracy": ..., "wall_s": ...}
"""
import argparse
import collections
import gzip
import json
import os
import statistics
import time

import numpy as np
import torch
from torch import nn

DIR = "/usr/share/datasets/fashion-mnist"


def load(split):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(DIR, f"{prefix}-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float64)
    with gzip.open(os.path.join(DIR, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x / 255.0, y


def model(batch_norm=True):
    feats, c, hw = [], 1, 28
    for ch, k in [[32, 3], [64, 3]]:
        feats.append(nn.Conv2d(c, ch, k, padding=k // 2, bias=not batch_norm))
        if batch_norm:
            feats.append(nn.BatchNorm2d(ch))
        feats += [nn.ReLU(), nn.MaxPool2d(2)]
        c, hw = ch, hw // 2
    head = [nn.Flatten(), nn.Linear(c * hw * hw, 128), nn.ReLU(), nn.Linear(128, 10)]
    return nn.Sequential(collections.OrderedDict(features=nn.Sequential(*feats),
                                                 classifier=nn.Sequential(*head)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["time", "train"], required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=1870)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    xtr, ytr = load("train")
    mean, std = xtr.mean(0), xtr.std(0)
    std[std < 1e-6] = 1.0
    norm = lambda x: torch.from_numpy(((x - mean) / std).astype(np.float32)).view(-1, 1, 28, 28)
    xt, yt = norm(xtr), torch.from_numpy(ytr)
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.01)
    total = a.max_steps if a.mode == "train" else a.steps + a.warmup
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=total)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    perm, pos = torch.randperm(len(yt), generator=g), 0
    times = []
    start = time.perf_counter()
    m.train()
    for step in range(total):
        if pos + a.batch > len(yt):
            perm, pos = torch.randperm(len(yt), generator=g), 0
        idx = perm[pos:pos + a.batch]
        pos += a.batch
        t0 = time.perf_counter()
        xb, yb = xt[idx], yt[idx]
        opt.zero_grad(set_to_none=True)
        loss_fn(m(xb), yb).backward()
        opt.step()
        sched.step()
        times.append(time.perf_counter() - t0)
    if a.mode == "time":
        print(json.dumps({"step_ms": 1e3 * statistics.median(times[a.warmup:])}))
        return
    xte, yte = load("test")
    m.eval()
    correct = 0
    with torch.no_grad():
        xe = norm(xte)
        for i in range(0, len(yte), 1000):
            correct += int((m(xe[i:i + 1000]).argmax(1).numpy() == yte[i:i + 1000]).sum())
    print(json.dumps({"accuracy": correct / len(yte), "wall_s": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
