#!/usr/bin/env python3
"""The PyTorch side of scripts/bench/bench_gpt_cpu.sh: the training step time of nanoGPT's model
(scripts/bench/bench_gpt_fortunes.py's GPT, the same code) on the CPU, in fp32 or under
torch.autocast("cpu", dtype=torch.bfloat16), with ampctl's recipe (AdamW, weight decay on
matrices, gradient clipping at 1.0).

Timed: the step only, as ampctl's phase_ms minus its data phase — forward, loss, zero_grad,
backward, clip_grad_norm_ and opt.step; the batch is drawn before the clock starts. `--warmup`
steps run untimed first (allocator, oneDNN primitive caches), then `--steps` timed ones.

Prints one JSON object: the median and mean step in ms, the thread count, torch's version.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt_fortunes import GPT  # noqa: E402  (nanoGPT's model, one copy in scripts/)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    with open(a.corpus, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    gen = torch.Generator().manual_seed(a.seed)

    def batch():
        ix = torch.randint(len(data) - a.block_size, (a.batch,), generator=gen)
        x = torch.stack([data[i:i + a.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.block_size] for i in ix])
        return x, y

    model = GPT(len(chars), a.n_layer, a.n_head, a.n_embd, a.block_size, False)
    params = [q for q in model.parameters() if q.requires_grad]
    groups = [{"params": [q for q in params if q.dim() >= 2], "weight_decay": 0.1},
              {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    bf16 = a.precision == "bf16"

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times = []
    for i in range(a.warmup + a.steps):
        x, y = batch()
        t0 = time.perf_counter()
        step(x, y)
        dt = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(dt * 1e3)
    print(json.dumps({"median_ms": statistics.median(times), "mean_ms": statistics.mean(times),
                      "steps": a.steps, "threads": a.threads, "precision": a.precision,
                      "vocab": len(chars), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
