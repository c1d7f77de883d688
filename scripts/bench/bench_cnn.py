#!/usr/bin/python3
"""PyTorch side of scripts/bench/bench_cnn.sh: the model and recipe of a cnn config (default
configs/fashion_mnist_cnn.yaml; docs/reference.md, "The CNN": model.conv, pool, batch_norm,
hidden, dropout; AdamW with optimizer.lr and weight_decay; OneCycleLR with the scheduler's
pct_start, div_factor and final_div_factor; data.batch_size; training.max_steps) in float32 on
the CPU (Debian's python3-torch 1.13, oneDNN convolutions), on Fashion-MNIST normalised as ampctl
does (x / 255, then each pixel standardised with the training set's mean and population std),
reshuffled every epoch, the short last batch dropped.

  --mode time --steps N   times N training steps after a warm-up; prints {"step_ms": median}
  --mode train            trains max_steps steps and evaluates on the test set; prints
                          {"accuracy": ..., "wall_s": ..., "steps": ...}
"""
import argparse
import collections
import gzip
import json
import os
import statistics
import sys
import time

import yaml

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


def model(conv, pool, batch_norm, hidden, dropout):
    """docs/reference.md's ampctl_cnn for 1 x 28 x 28 images, 10 classes, ReLU."""
    feats, c, hw = [], 1, 28
    for ch, k in conv:
        feats.append(nn.Conv2d(c, ch, k, padding=k // 2, bias=not batch_norm))
        if batch_norm:
            feats.append(nn.BatchNorm2d(ch))
        feats.append(nn.ReLU())
        hw = hw + 2 * (k // 2) - k + 1
        if pool > 1:
            feats.append(nn.MaxPool2d(pool))
            hw //= pool
        c = ch
    head, width = [nn.Flatten()], c * hw * hw
    for n in hidden:
        head += [nn.Linear(width, n), nn.ReLU()]
        if dropout > 0:
            head.append(nn.Dropout(dropout))
        width = n
    head.append(nn.Linear(width, 10))
    return nn.Sequential(collections.OrderedDict(features=nn.Sequential(*feats),
                                                 classifier=nn.Sequential(*head)))


def recipe(path):
    """The keys of the config this script follows, with ampctl's defaults."""
    with open(path) as f:
        cfg = yaml.safe_load(f)
    m, o = cfg["model"], cfg["optimizer"]
    s, t = cfg.get("scheduler", {}), cfg["training"]
    if m.get("type") != "cnn" or o.get("type") != "adamw" or s.get("type") != "onecycle":
        raise SystemExit(f"bench_cnn.py: {path} is not a cnn with adamw and onecycle")
    if m.get("activation", "relu") != "relu":
        raise SystemExit(f"bench_cnn.py: {path}: only activation relu is mirrored")
    return dict(conv=m.get("conv", [[32, 3], [64, 3]]), pool=m.get("pool", 2),
                batch_norm=m.get("batch_norm", False), hidden=m.get("hidden", [128]),
                dropout=m.get("dropout", 0.0), lr=o["lr"], weight_decay=o.get("weight_decay", 0.01),
                max_lr=s.get("max_lr", o["lr"]), pct_start=s.get("pct_start", 0.3),
                div_factor=s.get("div_factor", 25.0),
                final_div_factor=s.get("final_div_factor", 1e4),
                batch=cfg["data"].get("batch_size", 128), max_steps=t["max_steps"],
                seed=cfg.get("seed", 0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["time", "train"], required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--config", default="configs/fashion_mnist_cnn.yaml")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    r = recipe(a.config)
    torch.set_num_threads(a.threads)
    torch.manual_seed(r["seed"])
    xtr, ytr = load("train")
    mean, std = xtr.mean(0), xtr.std(0)
    std[std < 1e-6] = 1.0
    norm = lambda x: torch.from_numpy(((x - mean) / std).astype(np.float32)).view(-1, 1, 28, 28)
    xt, yt = norm(xtr), torch.from_numpy(ytr)
    m = model(r["conv"], r["pool"], r["batch_norm"], r["hidden"], r["dropout"])
    opt = torch.optim.AdamW(m.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    total = r["max_steps"] if a.mode == "train" else a.steps + a.warmup
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=r["max_lr"], total_steps=total,
                                                pct_start=r["pct_start"],
                                                div_factor=r["div_factor"],
                                                final_div_factor=r["final_div_factor"])
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(r["seed"])
    perm, pos = torch.randperm(len(yt), generator=g), 0
    times = []
    start = time.perf_counter()
    m.train()
    for step in range(total):
        if pos + r["batch"] > len(yt):
            perm, pos = torch.randperm(len(yt), generator=g), 0
        idx = perm[pos:pos + r["batch"]]
        pos += r["batch"]
        t0 = time.perf_counter()
        xb, yb = xt[idx], yt[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(m(xb), yb)
        loss.backward()
        opt.step()
        sched.step()
        times.append(time.perf_counter() - t0)
        if a.mode == "train" and (step + 1) % 200 == 0:
            print(f"bench_cnn.py: step {step + 1}/{total}, loss {loss.item():.4f}, "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
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
    print(json.dumps({"accuracy": correct / len(yte), "wall_s": time.perf_counter() - start,
                      "steps": total}))


if __name__ == "__main__":
    main()
