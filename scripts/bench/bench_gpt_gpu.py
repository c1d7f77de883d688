#!/usr/bin/env python3
"""GPT-2 small on one GPU: ampctl fp16 against PyTorch AMP, eager and torch.compile'd, in one run.

What it measures (issue "GPT performance", the GPU half), each side in its own process so that
its peak memory is its own:
  * the cuBLAS fp16 GEMM rate of this GPU (torch.matmul, 8192^3, fp32 accumulation), the
    practical ceiling every side's matrix products run on;
  * GPT-2 small (configs/gpt2_small.yaml's model: 12 layers, 12 heads, 768 wide, block 1024,
    vocabulary 50304, biases, tied head, dropout 0) at a fixed batch of --batch windows (8 by
    default: it fits every side on an H200 with room to spare, and it is the config's own
    micro-batch), on synthetic token files written here (uniform ids below 50257, nanoGPT's raw
    uint16 .bin), AdamW (lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on matrices), fp16 with
    dynamic loss scaling, no clipping, no accumulation:
      - ampctl train (precision fp16, the GradScaler equivalent on) for warmup + steps steps,
        once with its fused attention (kernels/transformer_attention.cu) and once with the materialised
        one (AMPCTL_ATTENTION=materialised), the row "attention unfused", and once with the
        MLP's c_fc + GELU composed instead of cuBLASLt's GELU epilogues (AMPCTL_GELU=composed),
        the row "GELU unfused", and once more with logging.profile for the line "by phase"
        (summary.json's phase_ms: forward, backward, unscale, optimizer, ...; it waits for the
        device at each phase boundary, so only its split is read, not its total);
        its summary.json's steady_step_ms is the MEAN over the steps after the first logging
        interval (logging.every_steps = warmup): ampctl never waits for the device inside a
        step, so a per-step time does not exist without changing what is timed;
      - PyTorch (nanoGPT's model as scripts/bench/bench_gpt_fortunes.py writes it, on the GPU):
        autocast(float16) + GradScaler + AdamW(fused=True), eager with nanoGPT's materialised
        attention (the same ops as ampctl's "attention unfused" row), eager with
        F.scaled_dot_product_attention (the row "with SDPA": PyTorch's fused attention, the
        counterpart of ampctl's default) and torch.compile'd; the MEDIAN of per-step CUDA-event
        times over the timed steps (events: no sync in a step);
  * tokens/s = batch * T / step time; MFU = (6 N + 12 L T C) flop/token * tokens/s / peak,
    N the parameter count without the position embedding (nanoGPT's estimate_mfu), against
    the H200's dense fp16 tensor-core peak (989.5 TFLOP/s, --peak-tflops) and against the
    cuBLAS rate measured above;
  * peak memory: every side by the same yardstick, the most GPU memory in use during the
    process (nvidia-smi memory.used, polled every 50 ms, minus what was in use before it
    started: CUDA context, cuBLAS workspaces and allocator caches included); PyTorch's own
    torch.cuda.max_memory_allocated beside it (tensors only: its caching allocator's reserve
    and the context are not in it);
  * the scaling table: ms/step for T in 256, 512, 1024 x n_embd in 384, 768, 1024 (heads of
    64; 12 layers, same vocabulary and batch), ampctl beside PyTorch eager, fewer steps.

Prints one table, and writes every number as JSON to --json when given.

  python3 scripts/bench/bench_gpt_gpu.py --ampctl build-cuda/apps/ampctl/ampctl
Needs: a CUDA GPU, PyTorch >= 2.0 with CUDA, nvidia-smi (for the memory column; without it the
column says "?"). Expected time on an H200: about 4 minutes (torch.compile's compilation takes
most of it); --no-compile and --no-scaling make it shorter.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

H200_DENSE_FP16_TFLOPS = 989.5
VOCAB = 50304
REAL_VOCAB = 50257  # GPT-2's ids; the rest is padding, as nanoGPT and llm.c pad it


# ---- shared helpers ----

def gpt_params(n_layer, n_embd, block, vocab=VOCAB, bias=True):
    """Parameter count of nanoGPT's GPT (tied head) and the same without wpe (estimate_mfu)."""
    C = n_embd
    per_layer = 12 * C * C + (9 * C if bias else 0) + 2 * C * (2 if bias else 1)
    total = vocab * C + block * C + n_layer * per_layer + C * (2 if bias else 1)
    return total, total - block * C


def flops_per_token(n_layer, n_embd, T):
    _, n = gpt_params(n_layer, n_embd, T)
    return 6 * n + 12 * n_layer * T * n_embd


class GpuMemoryPoller:
    """The most memory.used (MiB) of GPU 0 while a child runs, minus the reading before it."""

    def __init__(self):
        self.ok = shutil.which("nvidia-smi") is not None
        self.base = self._read() if self.ok else None
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = None

    @staticmethod
    def _read():
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                 "-i", os.environ.get("BENCH_GPU_INDEX", "0")],
                capture_output=True, text=True, timeout=10).stdout.strip()
            return int(out.splitlines()[0])
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return None

    def __enter__(self):
        if self.ok and self.base is not None:
            def loop():
                while not self._stop.is_set():
                    v = self._read()
                    if v is not None and (self.peak is None or v > self.peak):
                        self.peak = v
                    self._stop.wait(0.05)
            self._thread = threading.Thread(target=loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join()

    def used_mib(self):
        if self.base is None or self.peak is None:
            return None
        return self.peak - self.base


def run_child(cmd, timeout, log, env=None):
    """Runs cmd under the memory poller; returns (rc, stdout, peak MiB or None)."""
    with GpuMemoryPoller() as mem:
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               env={**os.environ, **(env or {})})
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = 124, e.stdout or "", e.stderr or ""
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
    log.write(f"$ {' '.join(cmd)}  ({time.time() - t0:.1f}s, rc {rc})\n{out}\n{err}\n")
    log.flush()
    if rc != 0:
        sys.stderr.write(f"bench_gpt_gpu: {' '.join(cmd[:3])} ... failed (rc {rc}):\n"
                         f"{(err or out)[-2000:]}\n")
    return rc, out, mem.used_mib()


# ---- the PyTorch side (runs in a child: --worker) ----

def torch_model(n_layer, n_head, n_embd, block, vocab):
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("mask", torch.tril(torch.ones(block, block))
                                 .view(1, 1, block, block))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            # nanoGPT's slow path (its model.py without flash): the same materialised attention
            # ampctl's ops define; --sdpa switches PyTorch to its fused kernel instead.
            if SDPA:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # tied
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                    nn.init.normal_(p, mean=0.0, std=std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            B, T = idx.size()
            pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return GPT()


SDPA = False


def torch_train(cfg, compile_model, warmup, steps, batch):
    """One configuration; returns its numbers (median ms/step over the timed steps)."""
    import torch
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    dev = torch.device("cuda")
    model = torch_model(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["T"], VOCAB).to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    fwd = torch.compile(model) if compile_model else model
    T = cfg["T"]
    gen = torch.Generator(device="cpu").manual_seed(0)
    # Batches drawn up front and kept on the device: the step itself moves no host data.
    n_batches = 4
    xs = torch.randint(0, REAL_VOCAB, (n_batches, batch, T + 1), generator=gen).to(dev)

    def step(i):
        xy = xs[i % n_batches]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = fwd(xy[:, :T], xy[:, 1:])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    t0 = time.time()
    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    for i in range(steps):
        starts[i].record()
        loss = step(warmup + i)
        ends[i].record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return {"step_ms": statistics.median(ms), "mean_ms": statistics.mean(ms),
            "max_memory_allocated_mib": torch.cuda.max_memory_allocated() / 2**20,
            "max_memory_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
            "params": sum(p.numel() for p in params), "loss": float(loss.item()),
            "warmup_s": warm_s, "torch": torch.__version__}


def worker(a):
    import torch
    global SDPA
    SDPA = a.sdpa or a.worker == "eager_sdpa"
    if not torch.cuda.is_available():
        print("bench_gpt_gpu: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    if a.worker == "gemm":
        n = 8192
        x = torch.randn(n, n, device="cuda", dtype=torch.float16)
        y = torch.randn(n, n, device="cuda", dtype=torch.float16)
        for _ in range(3):
            torch.matmul(x, y)
        torch.cuda.synchronize()
        reps = 20
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            torch.matmul(x, y)
        e.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(e) / reps
        print(json.dumps({"gemm_ms": ms, "tflops": 2 * n**3 / ms / 1e9,
                          "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}))
        return 0
    for cfg in json.loads(a.configs):
        r = torch_train(cfg, a.worker == "compile", a.warmup, a.steps, a.batch)
        r.update(cfg)
        print(json.dumps(r), flush=True)
        torch.cuda.empty_cache()
    return 0


# ---- the ampctl side ----

def write_tokens(path, n_tokens, seed=0):
    import random
    rng = random.Random(seed)
    import array
    buf = array.array("H", (rng.randrange(REAL_VOCAB) for _ in range(n_tokens)))
    if sys.byteorder != "little":
        buf.byteswap()
    with open(path, "wb") as f:
        buf.tofile(f)


def ampctl_config(path, cfg, tokens, batch, warmup, steps):
    with open(path, "w") as f:
        f.write(f"""name: bench_gpt_{cfg['n_embd']}_{cfg['T']}
seed: 1337
device: cuda
precision: fp16
model: {{type: gpt, n_layer: {cfg['n_layer']}, n_head: {cfg['n_head']}, n_embd: {cfg['n_embd']},
        block_size: {cfg['T']}, dropout: 0.0, bias: true, tie_embeddings: true}}
data:
  train: {{source: tokens, path: {tokens}, vocab_size: {VOCAB}}}
  batch_size: {batch}
optimizer: {{type: adamw, lr: 6.0e-4, betas: [0.9, 0.95], weight_decay: 0.1, decay_on: matrices}}
training: {{max_steps: {warmup + steps}, eval_every: 0, eval_batches: 1}}
logging: {{every_steps: {warmup}}}
""")


def ampctl_train(a, cfg, work, tokens, warmup, steps, log, attention="fused", gelu="fused",
                 profile=False):
    tag = f"{cfg['n_embd']}_{cfg['T']}_{attention}_{gelu}" + ("_profile" if profile else "")
    conf = os.path.join(work, f"gpt_{tag}.yaml")
    ampctl_config(conf, cfg, tokens, a.batch, warmup, steps)
    run_dir = os.path.join(work, f"run_{tag}")
    env = {"AMPCTL_ATTENTION": "materialised"} if attention == "materialised" else {}
    if gelu == "composed":
        env["AMPCTL_GELU"] = "composed"
    extra = ["--set", "logging.profile=true"] if profile else []
    rc, _, mib = run_child([a.ampctl, "train", "--config", conf, "--run-dir", run_dir] + extra,
                           a.child_timeout, log, env)
    out = {"rc": rc, "peak_used_mib": mib}
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
        out.update({"step_ms": s.get("steady_step_ms"), "skipped": s.get("skipped_steps"),
                    "loss": s.get("final_loss"), "backend": s.get("backend"),
                    "phase_ms": s.get("phase_ms")})
    except (OSError, ValueError):
        out["step_ms"] = None
    shutil.rmtree(run_dir, ignore_errors=True)  # its checkpoint is 1.5 GB for GPT-2 small
    return out


def torch_side(a, mode, cfgs, warmup, steps, log):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--configs",
           json.dumps(cfgs), "--warmup", str(warmup), "--steps", str(steps),
           "--batch", str(a.batch)] + (["--sdpa"] if a.sdpa else [])
    rc, out, mib = run_child(cmd, a.child_timeout * max(1, len(cfgs)), log)
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    for r in rows:
        r["peak_used_mib"] = mib if len(rows) == 1 else None
    return rc, rows


def fmt(v, spec):
    return "?" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ampctl", help="the ampctl binary (CUDA build)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--scaling-warmup", type=int, default=3)
    ap.add_argument("--scaling-steps", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-scaling", action="store_true", help="skip the T x n_embd table")
    ap.add_argument("--no-torch", action="store_true", help="ampctl only")
    ap.add_argument("--sdpa", action="store_true",
                    help="PyTorch attention by F.scaled_dot_product_attention (flash) instead of "
                         "nanoGPT's materialised softmax")
    ap.add_argument("--peak-tflops", type=float, default=H200_DENSE_FP16_TFLOPS)
    ap.add_argument("--child-timeout", type=int, default=240)
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--log", help="children's output (default: in the work folder, deleted)")
    # internal: the PyTorch child
    ap.add_argument("--worker", choices=["gemm", "eager", "eager_sdpa", "compile"])
    ap.add_argument("--configs", default="[]")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if not a.ampctl or not os.access(a.ampctl, os.X_OK):
        ap.error("--ampctl must name the ampctl binary")

    t_start = time.time()
    work = tempfile.mkdtemp(prefix="bench_gpt_gpu.")
    log = open(a.log or os.path.join(work, "children.log"), "w")
    tokens = os.path.join(work, "train.bin")
    write_tokens(tokens, 1 << 21)
    main_cfg = {"n_layer": 12, "n_head": 12, "n_embd": 768, "T": 1024}
    res = {"batch": a.batch, "peak_tflops": a.peak_tflops, "warmup": a.warmup,
           "steps": a.steps, "sdpa": a.sdpa}
    failed = False

    if not a.no_torch:
        rc, rows = torch_side(a, "gemm", [], 0, 0, log)
        res["cublas"] = rows[0] if rows else None
        failed |= rc != 0

    res["ampctl"] = ampctl_train(a, main_cfg, work, tokens, a.warmup, a.steps, log)
    failed |= res["ampctl"]["rc"] != 0 or res["ampctl"]["step_ms"] is None
    res["ampctl_materialised"] = ampctl_train(a, main_cfg, work, tokens, a.warmup, a.steps, log,
                                              attention="materialised")
    failed |= res["ampctl_materialised"]["rc"] != 0
    res["ampctl_gelu_composed"] = ampctl_train(a, main_cfg, work, tokens, a.warmup, a.steps, log,
                                               gelu="composed")
    failed |= res["ampctl_gelu_composed"]["rc"] != 0
    # Where the step goes: logging.profile's phases (it waits for the device at each phase
    # boundary, so its total exceeds the plain step; the split is what it is for).
    res["ampctl_profile"] = ampctl_train(a, main_cfg, work, tokens, a.warmup, a.steps, log,
                                         profile=True)
    failed |= res["ampctl_profile"]["rc"] != 0
    # eager_sdpa: PyTorch eager with its fused attention (F.scaled_dot_product_attention), the
    # eager counterpart of ampctl's fused attention; eager and compile keep --sdpa's choice.
    modes = [] if a.no_torch else ["eager"] + ([] if a.sdpa else ["eager_sdpa"]) + \
        ([] if a.no_compile else ["compile"])
    for mode in modes:
        rc, rows = torch_side(a, mode, [main_cfg], a.warmup, a.steps, log)
        res["torch_" + mode] = rows[0] if rows else None
        failed |= rc != 0 or not rows

    scaling = []
    if not a.no_scaling:
        cfgs = [{"n_layer": 12, "n_head": c // 64, "n_embd": c, "T": t}
                for c in (384, 768, 1024) for t in (256, 512, 1024)]
        torch_rows = {}
        if not a.no_torch:
            rc, rows = torch_side(a, "eager", cfgs, a.scaling_warmup, a.scaling_steps, log)
            torch_rows = {(r["n_embd"], r["T"]): r for r in rows}
            failed |= rc != 0
        for cfg in cfgs:
            r = ampctl_train(a, cfg, work, tokens, a.scaling_warmup, a.scaling_steps, log)
            failed |= r["rc"] != 0
            t = torch_rows.get((cfg["n_embd"], cfg["T"]), {})
            scaling.append({**cfg, "ampctl_ms": r.get("step_ms"),
                            "torch_eager_ms": t.get("step_ms")})
    res["scaling"] = scaling
    log.close()

    # ---- the table ----
    T, L, C = main_cfg["T"], main_cfg["n_layer"], main_cfg["n_embd"]
    fpt = flops_per_token(L, C, T)
    cublas = (res.get("cublas") or {}).get("tflops")
    lines = [f"GPT-2 small (12 x 768, T {T}, vocab {VOCAB}), batch {a.batch} "
             f"({a.batch * T} tokens/step), fp16 mixed precision + dynamic loss scaling, AdamW",
             f"MFU: {fpt / 1e6:.1f} MFLOP/token (6 N + 12 L T C, N = "
             f"{gpt_params(L, C, T)[1] / 1e6:.2f} M without wpe) x tokens/s, against "
             f"{a.peak_tflops} TFLOP/s (H200 dense fp16) and against cuBLAS "
             f"{fmt(cublas, '.1f')} TFLOP/s (torch.matmul fp16 8192^3, this run)",
             f"{'side':<22} {'ms/step':>9} {'tokens/s':>10} {'MFU':>6} {'of cuBLAS':>9} "
             f"{'peak MiB':>9} {'torch alloc MiB':>15} {'vs ampctl':>9}"]
    a_ms = res["ampctl"].get("step_ms")
    for key, label in (("ampctl", "ampctl fp16 (mean)"),
                       ("ampctl_materialised", "  attention unfused"),
                       ("ampctl_gelu_composed", "  GELU unfused"),
                       ("torch_eager", "torch AMP eager"),
                       ("torch_eager_sdpa", "  with SDPA"),
                       ("torch_compile", "torch AMP compile")):
        r = res.get(key)
        if r is None:
            if key.startswith("torch_") and (a.no_torch or (key == "torch_compile" and a.no_compile)
                                             or (key == "torch_eager_sdpa" and a.sdpa)):
                continue
            lines.append(f"{label:<22} {'failed':>9}")
            continue
        ms = r.get("step_ms")
        tps = a.batch * T / (ms / 1e3) if ms else None
        mfu = fpt * tps / (a.peak_tflops * 1e12) if tps else None
        of_cublas = fpt * tps / (cublas * 1e12) if tps and cublas else None
        r.update({"tokens_per_s": tps, "mfu": mfu, "mfu_of_cublas": of_cublas})
        ratio = (ms / a_ms) if ms and a_ms and key != "ampctl" else None
        lines.append(f"{label:<22} {fmt(ms, '.2f'):>9} {fmt(tps, ',.0f'):>10} "
                     f"{fmt(mfu and 100 * mfu, '.1f'):>5}% {fmt(of_cublas and 100 * of_cublas, '.1f'):>8}% "
                     f"{fmt(r.get('peak_used_mib'), 'd'):>9} "
                     f"{fmt(r.get('max_memory_allocated_mib'), '.0f'):>15} "
                     f"{fmt(ratio, '.2f') + 'x' if ratio else '':>9}")
    phases = res["ampctl_profile"].get("phase_ms") or {}
    if phases:
        order = ("data", "forward", "backward", "unscale", "optimizer", "update", "metrics")
        lines.append("ampctl fp16 by phase (logging.profile, a device wait at each boundary), ms: " +
                     ", ".join(f"{k} {phases[k]:.2f}" for k in order if k in phases) +
                     f"; total {phases.get('total', 0):.2f}")
    lines.append("  (ms/step: ampctl the mean of its steady steps, torch the median of CUDA-event "
                 "step times; peak MiB: nvidia-smi memory.used during the process minus before; "
                 "vs ampctl: torch ms / ampctl ms, > 1 = ampctl faster)")
    if scaling:
        lines.append("")
        lines.append(f"ms/step by T and n_embd (12 layers, heads of 64, batch {a.batch}), "
                     f"{a.scaling_steps} timed steps: ampctl / torch eager (ratio)")
        lines.append(f"{'n_embd':>7} " + " ".join(f"{'T ' + str(t):>24}" for t in (256, 512, 1024)))
        for c in (384, 768, 1024):
            cells = []
            for t in (256, 512, 1024):
                s = next(x for x in scaling if x["n_embd"] == c and x["T"] == t)
                am, tm = s["ampctl_ms"], s["torch_eager_ms"]
                ratio = f"({tm / am:.2f}x)" if am and tm else ""
                cells.append(f"{fmt(am, '.2f')} / {fmt(tm, '.2f')} {ratio}")
            lines.append(f"{c:>7} " + " ".join(f"{x:>24}" for x in cells))
    lines.append(f"bench_gpt_gpu: {time.time() - t_start:.0f}s"
                 + (", some side failed (see above)" if failed else ""))
    print("\n".join(lines))
    res["table"] = lines
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
