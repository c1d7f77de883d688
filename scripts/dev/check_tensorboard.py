#!/usr/bin/env python3
"""Reads a run's TensorBoard event file with TensorBoard's own EventAccumulator and checks every
scalar against metrics.jsonl (docs/reference.md, "TensorBoard").

    check_tensorboard.py RUN_DIR

Exit 0 when the file loads, holds the tags of every train (and eval / numerics) line, and each
value equals the metrics line's value rounded to float32; 1 otherwise; 2 without tensorboard.
"""
import glob
import json
import math
import os
import struct
import sys


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    run = sys.argv[1]
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("check_tensorboard: the tensorboard package is not installed")
        return 2
    files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
    if len(files) != 1:
        print(f"check_tensorboard: expected one event file in {run}, found {len(files)}")
        return 1
    acc = event_accumulator.EventAccumulator(files[0], size_guidance={"scalars": 0})
    acc.Reload()
    tb = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            tb[(tag, e.step)] = e.value
    expected = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            step = m["step"]
            if m["kind"] == "train":
                expected += [("train/loss", step, m["loss"]), ("train/lr", step, m["lr"]),
                             ("amp/scale", step, m["scale"]),
                             ("amp/skipped", step, 1.0 if m["skipped"] else 0.0),
                             ("amp/growth_tracker", step, m["growth_tracker"])]
                if m.get("grad_norm") is not None:
                    expected.append(("train/grad_norm", step, m["grad_norm"]))
                # grad_amax when recorded (finite); amp/retries at every step of a run with
                # scaler.on_overflow: retry (the file has the tag), 0 where the line has none.
                if m.get("grad_amax") is not None:
                    expected.append(("amp/grad_amax", step, m["grad_amax"]))
                if "retries" in m or any(t == "amp/retries" for t, _ in tb):
                    expected.append(("amp/retries", step, m.get("retries", 0)))
            elif m["kind"] == "eval":
                expected.append(("eval/loss", step, m["loss"]))
                if "accuracy" in m:
                    expected.append(("eval/accuracy", step, m["accuracy"]))
            elif m["kind"] == "numerics":
                expected.append(("amp/underflow_frac", step, m["underflow_frac"]))
                for name, t in m["tensors"].items():
                    if t["headroom_log2"] is not None:
                        expected.append((f"amp/headroom_log2/{name}", step, t["headroom_log2"]))
    bad = 0
    for tag, step, want in expected:
        got = tb.get((tag, step))
        if got is None:
            print(f"missing: {tag} at step {step}")
            bad += 1
        elif want is None:
            if math.isfinite(got):
                print(f"{tag} at step {step}: {got}, metrics say non-finite")
                bad += 1
        elif got != f32(want):
            print(f"{tag} at step {step}: {got} != {f32(want)}")
            bad += 1
    print(f"check_tensorboard: {len(expected)} scalars compared, {bad} wrong, "
          f"{len(tb)} in the file")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
