#!/usr/bin/env python3
"""PyTorch AMP's training step on the same MLPs ampctl's GPU benchmark trains, for a side-by-side
ratio in one gpu-check run. PyTorch's documented recipe: autocast(float16) + GradScaler + AdamW
(fused=True), cross-entropy, zero_grad(set_to_none=True); each step copies a fresh batch from
pinned host memory (non_blocking), as a DataLoader with pin_memory does, so both sides move the
same bytes.

  python3 scripts/bench/bench_pytorch.py --features 784 --hidden 1024,1024 --classes 10 --batch 256 \
      --steps 300 --warmup 30
Prints one JSON object: the median step time (over chunks of 20 steps), samples/s, TFLOP/s.
"""
import argparse
import json
import statistics
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", type=int, required=True)
    ap.add_argument("--hidden", type=str, required=True)
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--samples", type=int, default=8192)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_pytorch: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    dev = torch.device("cuda")
    widths = [a.features] + [int(h) for h in a.hidden.split(",")] + [a.classes]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    n = max(a.samples, a.batch)
    xs = torch.randn(n, a.features).pin_memory()
    ys = torch.randint(0, a.classes, (n,)).pin_memory()

    def step(i):
        lo = (i * a.batch) % (n - a.batch + 1)
        x = xs[lo:lo + a.batch].to(dev, non_blocking=True)
        y = ys[lo:lo + a.batch].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    chunk = 20
    times = []
    for c in range(max(1, a.steps // chunk)):
        t0 = time.perf_counter()
        for i in range(chunk):
            step(a.warmup + c * chunk + i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / chunk)
    t = statistics.median(times)
    params = sum(widths[i] * widths[i + 1] for i in range(len(widths) - 1))
    print(json.dumps({"torch": torch.__version__, "step_ms": t * 1e3,
                      "samples_per_s": a.batch / t,
                      "tflops": 6.0 * params * a.batch / t / 1e12}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
