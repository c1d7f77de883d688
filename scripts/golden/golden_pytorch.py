#!/usr/bin/python3
"""Writes tests/data/golden/pytorch_optim_sched.json: parameter trajectories of torch.optim's SGD,
Adam and AdamW (alone and driven by OneCycleLR, whose default cycle_momentum=True cycles SGD's
momentum or Adam's beta1) and the lr and momentum sequences of its schedulers, computed by
PyTorch itself (Debian's python3-torch 1.13 on the CPU, float32), for tests/unit/optim to
compare against.

Run with Debian's interpreter: /usr/bin/python3 scripts/golden/golden_pytorch.py
(apt-get install python3-torch first). The output is checked in; CI does not need PyTorch.
"""
import json
import math
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden",
                   "pytorch_optim_sched.json")


def group_momentum(group):
    """What OneCycleLR cycles: SGD's momentum or Adam's beta1."""
    return group["betas"][0] if "betas" in group else group["momentum"]


def trajectory(make_opt, steps=6, n=8, seed=0, make_sched=None):
    """Parameters after each step; with a scheduler (stepped after each optimizer step, as
    PyTorch's docs do) also the lr and momentum each step ran with."""
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(n, generator=g, dtype=torch.float32))
    grads = [torch.randn(n, generator=g, dtype=torch.float32) * 0.5 for _ in range(steps)]
    opt = make_opt([p])
    sched = make_sched(opt) if make_sched else None
    out = {"init": p.detach().tolist(), "grads": [x.tolist() for x in grads], "params": []}
    if sched:
        out["lrs"], out["momentums"] = [], []
    for x in grads:
        if sched:
            out["lrs"].append(opt.param_groups[0]["lr"])
            out["momentums"].append(group_momentum(opt.param_groups[0]))
        p.grad = x.clone()
        opt.step()
        out["params"].append(p.detach().tolist())
        if sched:
            sched.step()
    return out


def lrs(make_sched, total, base_lr=0.1, make_opt=None, momentum=False):
    """The lr (and with momentum=True the momentum, or Adam's beta1) of each iteration."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = make_opt([p]) if make_opt else torch.optim.SGD([p], lr=base_lr)
    sched = make_sched(opt)
    seq, moms = [], []
    for _ in range(total):
        seq.append(opt.param_groups[0]["lr"])
        moms.append(group_momentum(opt.param_groups[0]))
        opt.step()
        sched.step()
    return {"lrs": seq, "momentums": moms} if momentum else seq


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
            # OneCycleLR with its defaults (cycle_momentum=True, momentum 0.95 -> 0.85 -> 0.95).
            "sgd_momentum_onecycle": {
                "options": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0.0,
                            "weight_decay": 0.001, "nesterov": False},
                "schedule": {"type": "onecycle", "max_lr": 0.1, "pct_start": 0.3,
                             "div_factor": 25.0, "final_div_factor": 1e4,
                             "anneal_strategy": "cos", "three_phase": False,
                             "cycle_momentum": True, "base_momentum": 0.85,
                             "max_momentum": 0.95, "total": 12},
                **trajectory(lambda ps: O.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.001,
                                              foreach=False), steps=12, seed=4,
                             make_sched=lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=12))},
            # SGD without momentum: OneCycleLR writes group['momentum'], so momentum is on.
            "sgd_no_momentum_onecycle": {
                "options": {"type": "sgd", "lr": 0.1, "momentum": 0.0, "dampening": 0.1,
                            "weight_decay": 0.0, "nesterov": False},
                "schedule": {"type": "onecycle", "max_lr": 0.05, "pct_start": 0.4,
                             "div_factor": 10.0, "final_div_factor": 100.0,
                             "anneal_strategy": "linear", "three_phase": False,
                             "cycle_momentum": True, "base_momentum": 0.8,
                             "max_momentum": 0.9, "total": 10},
                **trajectory(lambda ps: O.SGD(ps, lr=0.1, dampening=0.1, foreach=False),
                             steps=10, seed=5,
                             make_sched=lambda o: S.OneCycleLR(
                                 o, max_lr=0.05, total_steps=10, pct_start=0.4, div_factor=10.0,
                                 final_div_factor=100.0, anneal_strategy="linear",
                                 base_momentum=0.8, max_momentum=0.9))},
            "adamw_onecycle": {
                "options": {"type": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "eps": 1e-8,
                            "weight_decay": 0.01},
                "schedule": {"type": "onecycle", "max_lr": 0.01, "pct_start": 0.3,
                             "div_factor": 25.0, "final_div_factor": 1e4,
                             "anneal_strategy": "cos", "three_phase": False,
                             "cycle_momentum": True, "base_momentum": 0.85,
                             "max_momentum": 0.95, "total": 12},
                **trajectory(lambda ps: O.AdamW(ps, lr=0.01, betas=(0.9, 0.99),
                                                weight_decay=0.01, foreach=False),
                             steps=12, seed=6,
                             make_sched=lambda o: S.OneCycleLR(o, max_lr=0.01, total_steps=12))},
            "adam_onecycle_three_phase": {
                "options": {"type": "adam", "lr": 0.02, "betas": [0.9, 0.999], "eps": 1e-8,
                            "weight_decay": 0.0},
                "schedule": {"type": "onecycle", "max_lr": 0.02, "pct_start": 0.25,
                             "div_factor": 25.0, "final_div_factor": 1e4,
                             "anneal_strategy": "linear", "three_phase": True,
                             "cycle_momentum": True, "base_momentum": 0.85,
                             "max_momentum": 0.95, "total": 12},
                **trajectory(lambda ps: O.Adam(ps, lr=0.02, foreach=False), steps=12, seed=7,
                             make_sched=lambda o: S.OneCycleLR(
                                 o, max_lr=0.02, total_steps=12, pct_start=0.25,
                                 anneal_strategy="linear", three_phase=True))},
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
            "onecycle_cos_momentum": {
                "config": {"type": "onecycle", "max_lr": 0.1, "pct_start": 0.3,
                           "div_factor": 25.0, "final_div_factor": 1e4,
                           "anneal_strategy": "cos", "three_phase": False,
                           "cycle_momentum": True, "base_momentum": 0.85, "max_momentum": 0.95},
                "total": 20,
                **lrs(lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=20), 20,
                      make_opt=lambda ps: O.SGD(ps, lr=0.1, momentum=0.9), momentum=True)},
            "onecycle_linear_three_phase_beta1": {
                "config": {"type": "onecycle", "max_lr": 0.2, "pct_start": 0.25,
                           "div_factor": 10.0, "final_div_factor": 100.0,
                           "anneal_strategy": "linear", "three_phase": True,
                           "cycle_momentum": True, "base_momentum": 0.7, "max_momentum": 0.9},
                "total": 17,
                **lrs(lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=17, pct_start=0.25,
                                             div_factor=10.0, final_div_factor=100.0,
                                             anneal_strategy="linear", three_phase=True,
                                             base_momentum=0.7, max_momentum=0.9), 17,
                      make_opt=lambda ps: O.Adam(ps, lr=0.2), momentum=True)},
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
