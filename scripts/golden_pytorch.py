#!/usr/bin/python3
"""Writes tests/data/golden/pytorch_optim_sched.json: parameter trajectories of torch.optim's SGD,
Adam and AdamW and lr sequences of its schedulers, computed by PyTorch itself (Debian's
python3-torch 1.13 on the CPU, float32), for tests/unit/optim to compare against.

Run with Debian's interpreter: /usr/bin/python3 scripts/golden_pytorch.py
(apt-get install python3-torch first). The output is checked in; CI does not need PyTorch.
"""
import json
import math
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "golden",
                   "pytorch_optim_sched.json")


def trajectory(make_opt, steps=6, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(n, generator=g, dtype=torch.float32))
    grads = [torch.randn(n, generator=g, dtype=torch.float32) * 0.5 for _ in range(steps)]
    opt = make_opt([p])
    out = {"init": p.detach().tolist(), "grads": [x.tolist() for x in grads], "params": []}
    for x in grads:
        p.grad = x.clone()
        opt.step()
        out["params"].append(p.detach().tolist())
    return out


def lrs(make_sched, total, base_lr=0.1):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make_sched(opt)
    seq = []
    for _ in range(total):
        seq.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seq


def main():
    O = torch.optim
    S = torch.optim.lr_scheduler
    gold = {
        "torch_version": torch.__version__,
        "optimizers": {
            "sgd_momentum_dampening_wd": {
                "options": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0.1,
                            "weight_decay": 0.01, "nesterov": False},
                **trajectory(lambda ps: O.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1,
                                              weight_decay=0.01, foreach=False))},
            "sgd_nesterov": {
                "options": {"type": "sgd", "lr": 0.05, "momentum": 0.8, "dampening": 0.0,
                            "weight_decay": 0.0, "nesterov": True},
                **trajectory(lambda ps: O.SGD(ps, lr=0.05, momentum=0.8, nesterov=True,
                                              foreach=False), seed=1)},
            "adam_wd": {
                "options": {"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
                            "weight_decay": 0.01},
                **trajectory(lambda ps: O.Adam(ps, lr=0.01, weight_decay=0.01, foreach=False),
                             seed=2)},
            "adamw": {
                "options": {"type": "adamw", "lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-6,
                            "weight_decay": 0.1},
                **trajectory(lambda ps: O.AdamW(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                                weight_decay=0.1, foreach=False), seed=3)},
        },
        "schedulers": {
            "onecycle_cos": {
                "config": {"type": "onecycle", "max_lr": 0.1, "pct_start": 0.3,
                           "div_factor": 25.0, "final_div_factor": 1e4,
                           "anneal_strategy": "cos", "three_phase": False},
                "total": 20,
                "lrs": lrs(lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=20,
                                                  cycle_momentum=False), 20)},
            "onecycle_linear_three_phase": {
                "config": {"type": "onecycle", "max_lr": 0.2, "pct_start": 0.25,
                           "div_factor": 10.0, "final_div_factor": 100.0,
                           "anneal_strategy": "linear", "three_phase": True},
                "total": 17,
                "lrs": lrs(lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=17, pct_start=0.25,
                                                  div_factor=10.0, final_div_factor=100.0,
                                                  anneal_strategy="linear", three_phase=True,
                                                  cycle_momentum=False), 17)},
            "step": {
                "config": {"type": "step", "step_size": 3, "gamma": 0.5, "warmup_steps": 0},
                "total": 10,
                "lrs": lrs(lambda o: S.StepLR(o, step_size=3, gamma=0.5), 10)},
            "cosine": {
                "config": {"type": "cosine", "min_lr": 0.001, "warmup_steps": 0},
                "total": 10,
                "lrs": lrs(lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001), 10)},
        },
    }
    with open(OUT, "w") as f:
        json.dump(gold, f, indent=1)
    print(f"wrote {os.path.normpath(OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
