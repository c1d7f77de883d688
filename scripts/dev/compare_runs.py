#!/usr/bin/env python3
"""Compares two ampctl runs' metrics.jsonl (standard library only).

  compare_runs.py RUN_A RUN_B --mode backends   identical found_inf/skipped/scale decisions on
                                                every step, losses within --loss-tol (relative)
  compare_runs.py RUN_A RUN_B --mode bitwise    every metrics line equal except time fields
Exit 0 when the property holds; prints the first difference otherwise.
"""
import argparse
import json
import sys


def lines(run):
    with open(f"{run}/metrics.jsonl") as f:
        out = []
        for line in f:
            j = json.loads(line)
            j.pop("time_s", None)
            out.append(j)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--mode", choices=["backends", "bitwise"], required=True)
    ap.add_argument("--loss-tol", type=float, default=0.05)
    args = ap.parse_args()
    la, lb = lines(args.a), lines(args.b)
    if len(la) != len(lb):
        print(f"different line counts: {len(la)} vs {len(lb)}")
        return 1
    worst = 0.0
    for x, y in zip(la, lb):
        if args.mode == "bitwise":
            if x != y:
                print(f"differ:\n  {x}\n  {y}")
                return 1
            continue
        if x.get("kind") != y.get("kind") or x.get("step") != y.get("step"):
            print(f"misaligned lines:\n  {x}\n  {y}")
            return 1
        if x["kind"] == "train":
            for key in ("found_inf", "skipped", "scale", "growth_tracker"):
                if x[key] != y[key]:
                    print(f"step {x['step']}: {key} differs: {x[key]} vs {y[key]}")
                    return 1
        if x.get("loss") is not None and y.get("loss") is not None:
            rel = abs(x["loss"] - y["loss"]) / max(abs(x["loss"]), 1e-6)
            worst = max(worst, rel)
    if args.mode == "backends" and worst > args.loss_tol:
        print(f"losses differ by {worst:.4f} relative (tolerance {args.loss_tol})")
        return 1
    print(f"{len(la)} lines agree ({args.mode}); worst relative loss difference {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
