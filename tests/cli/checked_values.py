#!/usr/bin/env python3
"""Issue 47, classes 4, 5, 6, 7, 10 and 13: values that are checked for what they are, end to end
through the real binary. One case per invocation (tests/CMakeLists.txt registers each):

  nonfinite_checkpoints  divergence_patience: 0 and parameters gone NaN: the run ends diverged
                         (exit 1) at the checkpoint that found them, keeps the good checkpoints
                         (latest still loads), and summary.json's final_loss is null
  nonfinite_init         --init-from a safetensors file (ampctl's and a Hugging Face folder) with
                         a NaN / inf weight: exit 2 naming the file and the tensor, no run left
  config_float32         a float key whose float32 value breaks its rule: exit 2 naming the
                         file, line, key and both values, before any run directory exists
  resume_resolved        resume refuses a change of scaler.init_scale however the --set spells
                         it; a --set that changes nothing the checkpoint holds is accepted
  init_structure         a GPT's weights with n_head 2 into n_head 4 (same shapes): eval --set,
                         --init-from a checkpoint, an export and an hf folder, each exit 2
                         naming both values
  retry_floor            on_overflow: retry at the floor min_scale retries nothing; max_scale
                         counts the scales of failed attempts
  messages               a --set that breaks a rule with the file's key is blamed on the --set;
                         an empty evaluation text says eval; an empty option value is exit 2;
                         scaler keys with scaler.enabled: false are exit 2, with the scaler off
                         by precision a warning names them; debug.inject_rank beyond the ranks
                         is exit 2

Usage: checked_values.py AMPCTL CONFIGS WORKDIR CASE   (AMPCTL_TEST_DEVICE=cuda: on the GPU)
"""
import json
import math
import os
import shutil
import struct
import sys

from cli_harness import FAILURES, check, run_ampctl, summary, train_lines

AMPCTL, CONFIGS, WORK, CASE = sys.argv[1:5]
DEVICE = os.environ.get("AMPCTL_TEST_DEVICE", "cpu")
WORK = os.path.join(WORK, "checked-values-" + CASE)
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def run(args, expect=0):
    return run_ampctl(AMPCTL, args, expect)


def path(*parts):
    return os.path.join(WORK, *parts)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def refused(args, *needles, code=2, no_dir=None):
    """Runs a command that must exit `code` with every needle in its stderr."""
    p = run(args, expect=None)
    check(p.returncode == code, f"{' '.join(args)}: exit {p.returncode}, expected {code}: "
          f"{p.stderr[-600:]}")
    for n in needles:
        check(n in p.stderr, f"{' '.join(args)}: stderr lacks {n!r}: {p.stderr[-600:]}")
    if no_dir:
        check(not os.path.exists(no_dir), f"{' '.join(args)}: left {no_dir}")
    return p


MLP = write("mlp.yaml", """name: mlp
seed: 3
device: """ + DEVICE + """
precision: fp16
model: {type: mlp, hidden: [16], activation: relu}
data:
  train: {source: synthetic, task: classification, samples: 256, features: 8, classes: 4}
  batch_size: 32
optimizer: {type: adamw, lr: 0.01}
scheduler: {type: cosine, min_lr: 0.001}
scaler: {init_scale: 1024.0, growth_interval: 1000}
training: {max_steps: 6, eval_every: 0}
checkpoint: {every_steps: 2, keep_last: 10}
logging: {every_steps: 2}
""")

TEXT = write("tiny.txt", "the cat sat on the mat; a dog ate the hat.\n" * 40)
GPT = ["--config", os.path.join(CONFIGS, "gpt_fortunes.yaml"), "--set", "device=" + DEVICE,
       "--set", "data.train.path=" + TEXT, "--set", "model.n_layer=1",
       "--set", "model.n_head=2", "--set", "model.n_embd=16", "--set", "model.block_size=16",
       "--set", "data.batch_size=4", "--set", "scheduler.warmup_steps=2",
       "--set", "training.eval_every=0", "--set", "training.eval_batches=2",
       "--set", "checkpoint.every_steps=0", "--set", "training.max_steps=3"]


def read_st(file):
    with open(file, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return raw, n, header


def poison_st(src, dst, tensor, value):
    """A copy of safetensors file `src` whose F32 `tensor` has `value` as its element 0."""
    raw, n, header = read_st(src)
    start = 8 + n + header[tensor]["data_offsets"][0]
    assert header[tensor]["dtype"] == "F32"
    out = bytearray(raw)
    out[start:start + 4] = struct.pack("<f", value)
    with open(dst, "wb") as f:
        f.write(bytes(out))


def case_nonfinite_checkpoints():
    # fp32 (no scaler): a NaN in the gradients at step 3 reaches the parameters; patience 0 never
    # stops on the loss. Before: checkpoints 4 and 6 were written with NaN weights, the good ones
    # pruned (keep_last 1), status ok, exit 0, and every checkpoint left was refused.
    d = path("run")
    p = run(["train", "--config", MLP, "--run-dir", d, "--set", "precision=fp32",
             "--set", "debug.inject_nonfinite_at=[3]", "--set", "debug.inject_value=nan",
             "--set", "training.divergence_patience=0", "--set", "checkpoint.keep_last=1"],
            expect=None)
    check(p.returncode == 1, f"exit {p.returncode}, expected 1: {p.stderr[-800:]}")
    check("training diverged at step 4" in p.stderr, p.stderr[-800:])
    s = summary(d)
    check(s["status"] == "diverged", f"status {s['status']}")
    check(s["divergence"]["reason"] == "nonfinite_parameters", str(s["divergence"]))
    check(s["divergence"]["checkpoint_step"] == 2, str(s["divergence"]))
    # The last loss is NaN (steps 4..): final_loss is null, not the last finite loss.
    lines = train_lines(d)
    check(lines[-1]["loss"] is None, f"last train line loss {lines[-1]['loss']}")
    check(s["final_loss"] is None, f"final_loss {s['final_loss']} after a NaN loss")
    ckpts = sorted(os.listdir(os.path.join(d, "checkpoints")))
    check(ckpts == ["latest", "step-00000002.json"], f"checkpoints {ckpts}")
    q = run(["inspect", d], expect=None)
    check(q.returncode == 0, f"inspect of the kept checkpoint: exit {q.returncode}: {q.stderr}")
    # The same with a stop at the end (max_steps 3, no periodic checkpoint due after the NaN):
    # the final checkpoint is the one refused.
    d2 = path("run_end")
    p = run(["train", "--config", MLP, "--run-dir", d2, "--set", "precision=fp32",
             "--set", "debug.inject_nonfinite_at=[3]", "--set", "debug.inject_value=nan",
             "--set", "training.divergence_patience=0", "--set", "training.max_steps=3"],
            expect=None)
    check(p.returncode == 1, f"end: exit {p.returncode}, expected 1: {p.stderr[-800:]}")
    check(summary(d2)["status"] == "diverged", "end: status not diverged")
    check(sorted(os.listdir(os.path.join(d2, "checkpoints"))) == ["latest", "step-00000002.json"],
          "end: checkpoints " + str(sorted(os.listdir(os.path.join(d2, "checkpoints")))))


def case_nonfinite_init():
    src = path("src")
    run(["train", *GPT, "--run-dir", src])
    st = path("src.safetensors")
    run(["export", "--checkpoint", src, "--format", "safetensors", "--out", st])
    for value, word in [(float("nan"), "nan"), (float("inf"), "inf")]:
        bad = path(f"bad_{word}.safetensors")
        poison_st(st, bad, "transformer.h.0.mlp.c_fc.weight", value)
        d = path("from_" + word)
        refused(["train", *GPT, "--init-from", bad, "--run-dir", d], bad,
                "transformer.h.0.mlp.c_fc.weight", "element 0 is " + word, no_dir=d)
        refused(["eval", *GPT[:2], *GPT[2:], "--init-from", bad], bad,
                "transformer.h.0.mlp.c_fc.weight")
    # Finite fp32 masters of 1e30 (adamw's first step at lr 1e30) are inf in the fp16 copy:
    # sample's logits are NaN, which is exit 1 naming them, never tokens with exit 0.
    huge = path("huge")
    run(["train", *GPT, "--run-dir", huge, "--set", "precision=fp16", "--set", "optimizer.lr=1e30",
         "--set", "scheduler.warmup_steps=0", "--set", "training.max_steps=1",
         "--set", "optimizer.weight_decay=0", "--set", "training.divergence_patience=0"])
    refused(["sample", "--checkpoint", huge, "--tokens", "3"], "logits are not finite", code=1)
    hf = path("hf")
    run(["export", "--checkpoint", src, "--format", "hf", "--out", hf])
    poison_st(os.path.join(hf, "model.safetensors"), os.path.join(hf, "model.safetensors"),
              "transformer.wte.weight", float("nan"))
    d = path("from_hf")
    refused(["train", *GPT, "--init-from", hf, "--run-dir", d], "model.safetensors",
            "transformer.wte.weight", "not", no_dir=d)


def case_config_float32():
    bad = write("collapse.yaml", open(MLP).read().replace(
        "scaler: {init_scale: 1024.0, growth_interval: 1000}",
        "scaler:\n  init_scale: 1024.0\n  backoff_factor: 0.99999999"))
    d = path("run")
    # Before: every step skipped at an unchanged scale, status ok, exit 0.
    refused(["train", "--config", bad, "--run-dir", d], bad + ":13:",
            "scaler.backoff_factor", "0.99999999, which is 1.0 in float32", no_dir=d)
    refused(["validate", "--config", bad], "scaler.backoff_factor")
    refused(["train", "--config", MLP, "--run-dir", d, "--set", "scaler.growth_factor=1.00000001"],
            "--set scaler.growth_factor=1.00000001", "1.00000001, which is 1.0 in float32",
            no_dir=d)
    refused(["train", "--config", MLP, "--run-dir", d, "--set", "optimizer.lr=1e39"],
            "optimizer.lr", "which is .inf in float32", no_dir=d)


def case_resume_resolved():
    d = path("run")
    run(["train", "--config", MLP, "--run-dir", d])
    with open(os.path.join(d, "config.yaml")) as f:
        before = f.read()
    for spelled in ["scaler.init_scale=5", "scaler={init_scale: 5.0}",
                    "scaler={growth_interval: 500}"]:
        # The last one resets init_scale (1024) to its default 65536: a change too.
        refused(["resume", "--checkpoint", d, "--set", "training.max_steps=8", "--set", spelled],
                "--set " + spelled, "scaler.init_scale cannot be changed when resuming")
        with open(os.path.join(d, "config.yaml")) as f:
            check(f.read() == before, f"--set {spelled}: config.yaml was rewritten")
    refused(["resume", "--checkpoint", d, "--set", "model={hidden: [32]}"],
            "--set model={hidden: [32]}", "model.hidden cannot be changed")
    # What changes nothing the checkpoint holds is accepted: the same widths, the same scale in
    # another spelling, a resumable key inside a section value.
    run(["resume", "--checkpoint", d, "--set", "training.max_steps=8", "--set",
         "model.hidden=[16]", "--set", "scaler={init_scale: 1024.0, growth_interval: 500}"])
    lines = train_lines(d)
    check(lines[-1]["step"] == 8, f"last step {lines[-1]['step']}")
    with open(os.path.join(d, "config.yaml")) as f:
        check("growth_interval: 500" in f.read(), "config.yaml lacks the new growth_interval")


def case_init_structure():
    src = path("src")
    run(["train", *GPT, "--run-dir", src])  # n_head 2
    st = path("src.safetensors")
    run(["export", "--checkpoint", src, "--format", "safetensors", "--out", st])
    hf = path("hf")
    run(["export", "--checkpoint", src, "--format", "hf", "--out", hf])
    four = ["--set", "model.n_head=4"]
    refused(["eval", "--checkpoint", src, *four], "model.n_head: 2", "model.n_head: 4")
    for name, source in [("ckpt", src), ("st", st), ("hf", hf)]:
        d = path("into4_" + name)
        refused(["train", *GPT, *four, "--init-from", source, "--run-dir", d],
                "model.n_head: 2", "model.n_head: 4", no_dir=d)
        refused(["eval", *GPT, *four, "--init-from", source], "model.n_head: 2")
        # The same structure loads.
        run(["eval", *GPT, "--init-from", source])
    # An hf folder whose config.json says another LayerNorm epsilon or GELU.
    cfg_file = os.path.join(hf, "config.json")
    cfg = json.load(open(cfg_file))
    for key, value in [("layer_norm_epsilon", 1e-6), ("activation_function", "gelu")]:
        bad = dict(cfg, **{key: value})
        with open(cfg_file, "w") as f:
            json.dump(bad, f)
        refused(["eval", *GPT, "--init-from", hf], "config.json", key)
    # An MLP's activation (relu -> gelu: the same shapes).
    d = path("mlp")
    run(["train", "--config", MLP, "--run-dir", d])
    refused(["train", "--config", MLP, "--run-dir", path("mlp2"), "--init-from", d,
             "--set", "model.activation=gelu"], 'model.activation: "relu"',
            'model.activation: "gelu"', no_dir=path("mlp2"))


def case_retry_floor():
    # Every gradient overflows fp16 at 1e30, and the floor is that scale: before, each step ran
    # 1 + max_retries identical attempts before on_min_scale: stop acted.
    floor = ["--set", "scaler.init_scale=1.0e30", "--set", "scaler.min_scale=1.0e30",
             "--set", "scaler.on_overflow=retry", "--set", "scaler.max_retries=3",
             "--set", "training.divergence_patience=0"]
    d = path("stop")
    p = run(["train", "--config", MLP, "--run-dir", d, *floor,
             "--set", "scaler.on_min_scale=stop"], expect=1)
    s = summary(d)
    check(s["divergence"]["reason"] == "overflow_at_min_scale", str(s.get("divergence")))
    check(s["divergence"]["step"] == 1, str(s.get("divergence")))
    check(s["retries"] == 0, f"retries {s['retries']} at the floor")
    d = path("continue")
    run(["train", "--config", MLP, "--run-dir", d, *floor, "--set", "logging.grad_amax=true"])
    check(summary(d)["retries"] == 0, f"continue: retries {summary(d)['retries']}")
    check(summary(d)["skipped_steps"] == 6, f"continue: skipped {summary(d)['skipped_steps']}")
    check(all("retries" not in l for l in train_lines(d)), "continue: a line has retries")
    # replay models the same rule: its row for the run's own settings has no retries either.
    rows = json.loads(run(["replay", d, "--json"]).stdout)
    check(rows[0]["retries"] == 0 and rows[0]["skipped"] == 6, f"replay row {rows[0]}")
    # Above the floor retries still happen; max_scale is the first attempt's scale.
    d = path("maxscale")
    run(["train", "--config", MLP, "--run-dir", d, "--set", "scaler.init_scale=1.0e30",
         "--set", "scaler.on_overflow=retry", "--set", "scaler.max_retries=2"])
    s = summary(d)
    f32 = struct.unpack("<f", struct.pack("<f", 1.0e30))[0]
    check(s["retries"] >= 2, f"maxscale: retries {s['retries']}")
    check(s["max_scale"] == f32, f"max_scale {s['max_scale']}, the first attempt ran at {f32}")
    first = train_lines(d)[0]
    check(first["scale"] < f32, f"step 1 kept scale {first['scale']}")


def case_messages():
    # A --set that breaks scheduler.min_lr <= optimizer.lr with the file's min_lr (0.001): the
    # problem is the --set's, not the file's line.
    d = path("run")
    p = refused(["train", "--config", MLP, "--run-dir", d, "--set", "optimizer.lr=0.0001"],
                "--set optimizer.lr=0.0001: scheduler.min_lr", no_dir=d)
    check(MLP + ":" not in p.stderr, "blamed on the file: " + p.stderr)
    run(["train", "--config", MLP, "--run-dir", d])
    p = refused(["resume", "--checkpoint", d, "--set", "optimizer.lr=0.0001"],
                "--set optimizer.lr=0.0001: scheduler.min_lr")
    check("checkpoints/" not in p.stderr.split("\n")[0], "blamed on the checkpoint: " + p.stderr)
    # An empty evaluation text.
    empty = write("empty.txt", "")
    refused(["train", *GPT, "--run-dir", path("g"), "--set",
             "data.eval={source: text, path: " + empty + "}"], "data.eval.path",
            "no text to evaluate on", no_dir=path("g"))
    refused(["train", *GPT, "--run-dir", path("g"), "--set", "data.train.path=" + empty],
            "data.train.path", "no text to train on", no_dir=path("g"))
    # Empty option values.
    refused(["export", "--checkpoint", d, "--format", "safetensors", "--out", ""],
            "--out: an empty value")
    refused(["train", "--config", MLP, "--run-dir", ""], "--run-dir: an empty value")
    refused(["report", d, "--out", ""], "--out: an empty value")
    refused(["inspect", ""], "an empty value")
    refused(["train", "--config", ""], "--config: an empty value")
    # Scaler keys with the scaler off: with scaler.enabled: false refused, as keys of another
    # choice; with auto in bf16 (the file's fp16 settings) named in a warning.
    e = path("off")
    refused(["train", "--config", MLP, "--run-dir", e, "--set", "scaler.enabled=false"],
            "scaler.init_scale: only used with loss scaling", "default (65536.0)", no_dir=e)
    run(["train", "--config", MLP, "--run-dir", e, "--set", "scaler={enabled: false}"])
    p = run(["train", "--config", MLP, "--run-dir", path("bf16"), "--set", "precision=bf16"])
    out = p.stdout + p.stderr  # spdlog's console
    check("scaler.init_scale: 1024.0, scaler.growth_interval: 1000 are not used" in out,
          "bf16: no warning naming the unused scaler keys: " + out[-800:])
    p = run(["validate", "--config", MLP, "--set", "precision=fp32"])
    check("# not used: scaler.init_scale: 1024.0 (the scaler is off: precision fp32" in p.stdout,
          "validate: no note of the unused scaler keys: " + p.stdout[-600:])
    p = run(["train", "--config", MLP, "--run-dir", path("fp16"), "--set", "training.max_steps=1"])
    check("not used" not in p.stdout + p.stderr, "fp16: a warning about scaler keys")
    # debug.inject_rank beyond the ranks.
    f = path("inject")
    refused(["train", "--config", MLP, "--run-dir", f, "--set", "debug.inject_nonfinite_at=[2]",
             "--set", "debug.inject_rank=1"], "debug.inject_rank: 1", "1 rank", no_dir=f)


{"nonfinite_checkpoints": case_nonfinite_checkpoints, "nonfinite_init": case_nonfinite_init,
 "config_float32": case_config_float32, "resume_resolved": case_resume_resolved,
 "init_structure": case_init_structure, "retry_floor": case_retry_floor,
 "messages": case_messages}[CASE]()
if FAILURES:
    sys.exit(1)
print(f"{CASE}: ok")
