#!/usr/bin/env python3
"""The reference side of scripts/bench/bench_gpt_fortunes.sh: configs/gpt_fortunes.yaml's model and
recipe in PyTorch fp32 on the CPU (Debian's python3-torch), written as nanoGPT's model.py and
train.py write them.

The same as ampctl's run, step for step:
  * data: the corpus file read as UTF-8; vocabulary sorted(set(text)); the first
    int(n * (1 - split_fraction)) characters train, the rest validate (nanoGPT's 90/10 split,
    ampctl's data.train.split_fraction);
  * model: GPT-2 as nanoGPT's GPT (token + position embeddings, pre-LN blocks with one fused
    c_attn, causal softmax attention, GELU(approximate='tanh') MLP, ln_f, lm_head tied to wte),
    init N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)), zero biases;
  * batches: batch_size windows of block_size + 1 tokens at uniform random starts
    (nanoGPT's get_batch; torch's generator, so not ampctl's Philox windows: the comparison is
    of the recipe, not of the bits);
  * AdamW (betas, eps 1e-8, weight decay on tensors of >= 2 dims only: nanoGPT's groups), global
    gradient norm clipped to grad_clip; the learning rate of ampctl's cosine schedule with
    linear warm-up: lr * t / warmup for t < warmup, then min_lr + (lr - min_lr) * (1 +
    cos(pi * (t - warmup) / (steps - warmup))) / 2, for iteration t = 0, 1, ...;
  * evaluation after the last step: the mean loss of eval_batches validation batches.

Prints one JSON object: final validation loss, the last training loss, wall time, steps.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's: PyTorch 1.13's has no bias=False)."""

    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, n_layer, n_head, n_embd, block_size, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(t, a):
    if t < a.warmup:
        return a.lr * t / a.warmup
    progress = (t - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * (1.0 + math.cos(math.pi * progress)) / 2.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--split-fraction", type=float, default=0.1)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--bias", type=int, default=0)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-batches", type=int, default=50)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    with open(a.corpus, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_train = int(len(data) * (1 - a.split_fraction))
    train, val = data[:n_train], data[n_train:]

    def batch(part, gen):
        ix = torch.randint(len(part) - a.block_size, (a.batch,), generator=gen)
        x = torch.stack([part[i:i + a.block_size] for i in ix])
        y = torch.stack([part[i + 1:i + 1 + a.block_size] for i in ix])
        return x, y

    model = GPT(len(chars), a.n_layer, a.n_head, a.n_embd, a.block_size, bool(a.bias))
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    loss = None
    for t in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(t, a)
        x, y = batch(train, gen)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
    train_s = time.time() - t0
    model.eval()
    eval_gen = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        losses = [model(*batch(val, eval_gen)).item() for _ in range(a.eval_batches)]
    print(json.dumps({"val_loss": sum(losses) / len(losses), "last_train_loss": loss.item(),
                      "train_s": train_s, "wall_s": time.time() - t0, "steps": a.steps,
                      "vocab": len(chars), "train_tokens": len(train), "val_tokens": len(val),
                      "torch": torch.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
