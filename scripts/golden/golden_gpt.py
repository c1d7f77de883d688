#!/usr/bin/python3
"""Writes tests/data/golden/gpt_tiny.json: nanoGPT's GPT (model.py, written out below) run by
PyTorch itself (Debian's python3-torch 1.13 on the CPU, float32) from ampctl's initial weights,
as llm.c's test_gpt2 does: the logits, the loss and every parameter's gradient of one fixed
batch, then the losses of 10 AdamW steps on that batch with nanoGPT's optimizer groups (weight
decay on the tensors of >= 2 dims only). tests/unit/nn/test_gpt_golden.cpp compares ampctl's
fp32 model against it (no torch needed there).

The initial weights come from ampctl: the golden test, run with AMPCTL_GOLDEN_GPT_INIT set,
writes them as the safetensors file `ampctl export` writes (nanoGPT's state_dict keys; a tied
head as both transformer.wte.weight and lm_head.weight), which this script loads with
GPT.load_state_dict. Regenerate with:

  AMPCTL_GOLDEN_GPT_INIT=/tmp/gpt_init.safetensors build/tests/ampctl_test_nn \\
      --gtest_filter='GptGolden.*'
  /usr/bin/python3 scripts/golden/golden_gpt.py /tmp/gpt_init.safetensors tests/data/golden/gpt_tiny.json

The model class follows nanoGPT's model.py (https://github.com/karpathy/nanoGPT, MIT licence,
Copyright (c) 2022 Andrej Karpathy): the same module tree, parameter names, and forward. torch
1.13 has no scaled_dot_product_attention, so the manual attention path (with its registered
causal-mask buffer `attn.bias`, not a parameter and not in the export: load_state_dict runs with
strict=False and the script checks that only those buffers are missing).
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

# The tiny model of the golden test (keep in step with test_gpt_golden.cpp).
CONFIG = dict(n_layer=2, n_head=2, n_embd=8, block_size=8, vocab_size=11, dropout=0.0, bias=True)
BATCH = 2
SEED = 1234  # the batch's tokens
ADAMW = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, eps=1e-8, steps=10)


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        assert c["n_embd"] % c["n_head"] == 0
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head = c["n_head"]
        self.n_embd = c["n_embd"]
        n = c["block_size"]
        self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], bias=c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["n_embd"], bias=c["bias"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=LayerNorm(c["n_embd"], bias=c["bias"]),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, eps):
        # nanoGPT's groups: decay on every parameter of >= 2 dims, none on the others.
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for n, p in params.items() if p.dim() >= 2]
        nodecay = [p for n, p in params.items() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def floats(t):
    # float32 values, printed so that they parse back to the same float (9 significant digits).
    return [float("%.9g" % v) for v in t.detach().reshape(-1).tolist()]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: golden_gpt.py INIT.safetensors OUT.json")
    torch.set_num_threads(1)
    model = GPT(CONFIG)
    state = read_safetensors(sys.argv[1])
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k.endswith(".attn.bias") for k in missing), missing
    assert torch.equal(model.lm_head.weight, state["transformer.wte.weight"])

    g = torch.Generator().manual_seed(SEED)
    T = CONFIG["block_size"]
    data = torch.randint(0, CONFIG["vocab_size"], (BATCH, T + 1), generator=g)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    logits, loss = model(idx, targets)
    model.zero_grad()
    loss.backward()
    out = {
        "torch": torch.__version__,
        "config": CONFIG,
        "batch": BATCH,
        "tokens": idx.reshape(-1).tolist(),
        "targets": targets.reshape(-1).tolist(),
        "logits": floats(logits),
        "loss": float("%.9g" % loss.item()),
        "grads": {n: floats(p.grad) for n, p in model.named_parameters()},
        "adamw": {k: v for k, v in ADAMW.items()},
    }
    opt = model.configure_optimizers(ADAMW["weight_decay"], ADAMW["lr"], ADAMW["betas"],
                                     ADAMW["eps"])
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad(set_to_none=True)
        _, l = model(idx, targets)
        losses.append(float("%.9g" % l.item()))
        l.backward()
        opt.step()
    out["adamw"]["losses"] = losses
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
