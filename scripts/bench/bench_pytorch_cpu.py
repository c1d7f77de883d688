#!/usr/bin/env python3
"""PyTorch's training step on the CPU, the anchor of ampctl's CPU benchmark (scripts/bench/bench_cpu.sh).

The same MLP ampctl trains (Linear/ReLU, cross-entropy, Adam with PyTorch's defaults, lr 1e-3),
tuned as well as PyTorch allows on this machine:
  * threads = cores (torch.set_num_threads; OpenBLAS and oneDNN follow ATen's OpenMP pool);
  * zero_grad(set_to_none=True), no anomaly mode, no profiler; the loss is never read back in the
    timed steps (no .item());
  * Adam's implementation (single-tensor or foreach) picked by timing both during the warm-up,
    and the faster one used (PyTorch 1.13 defaults to single-tensor on the CPU);
  * a fresh batch each step: a contiguous slice of a resident data set, cycling through it
    (no copy at all, which only favours PyTorch: ampctl gathers its batch by a permutation).
Precisions: fp32, and bf16 autocast (torch.autocast("cpu", dtype=torch.bfloat16): oneDNN's bf16
matmul, fp32 master weights and fp32 loss), as PyTorch's CPU AMP recipe; no GradScaler (bf16
needs none).

  python3 scripts/bench/bench_pytorch_cpu.py --features 784 --hidden 1024,1024 --classes 10 \\
      --batch 256 --precision fp32 --steps 200 --warmup 30

Prints one JSON object: median step time in ms (each step timed alone), the 25th/75th
percentiles, the Adam variant used, thread count and torch version.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch


def build(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", type=int, required=True)
    ap.add_argument("--hidden", type=str, required=True)
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=0, help="0: one per core")
    ap.add_argument("--adam", choices=["auto", "single", "foreach"], default="auto")
    a = ap.parse_args()

    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(False)
    widths = [a.features] + [int(h) for h in a.hidden.split(",")] + [a.classes]
    n = max(a.samples, a.batch)
    xs = torch.randn(n, a.features)
    ys = torch.randint(0, a.classes, (n,))
    loss_fn = torch.nn.CrossEntropyLoss()
    bf16 = a.precision == "bf16"

    def make(foreach):
        torch.manual_seed(0)
        model = build(widths)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
        return model, opt

    def runner(model, opt):
        state = {"i": 0}

        def step():
            i = state["i"]
            state["i"] += 1
            lo = (i * a.batch) % (n - a.batch + 1)
            x = xs[lo:lo + a.batch]
            y = ys[lo:lo + a.batch]
            opt.zero_grad(set_to_none=True)
            if bf16:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = model(x)
                loss = loss_fn(out.float(), y)
            else:
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()

        return step

    def timed(step, count):
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return times

    variants = {"single": False, "foreach": True}
    if a.adam == "auto":
        # Pick the faster Adam by timing both, interleaved, after a short warm-up of each.
        steps = {k: runner(*make(v)) for k, v in variants.items()}
        for s in steps.values():
            timed(s, max(5, a.warmup // 3))
        trial = {k: [] for k in steps}
        for _ in range(3):
            for k, s in steps.items():
                trial[k] += timed(s, 10)
        adam = min(trial, key=lambda k: statistics.median(trial[k]))
    else:
        adam = a.adam
    step = runner(*make(variants[adam]))
    timed(step, a.warmup)
    times = timed(step, a.steps)
    q = statistics.quantiles(times, n=4)
    print(json.dumps({
        "torch": torch.__version__, "precision": a.precision, "threads": threads,
        "adam": adam, "step_ms": statistics.median(times) * 1e3,
        "p25_ms": q[0] * 1e3, "p75_ms": q[2] * 1e3,
        "samples_per_s": a.batch / statistics.median(times)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
