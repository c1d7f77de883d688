#!/usr/bin/env python3
"""A PyTorch GPT-2 with Hugging Face's structure and parameter names (transformers'
GPT2LMHeadModel: transformer.{wte, wpe, h.N.{ln_1, attn.{c_attn, c_proj}, ln_2, mlp.{c_fc,
c_proj}}, ln_f}, lm_head; Conv1D weights [in, out]), written out here because the transformers
package cannot be installed on this machine. It checks an `ampctl export --format hf` folder:

  python3 scripts/dev/hf_gpt2.py --hf DIR --safetensors FILE --text FILE [--windows 4]

  1. loads DIR/model.safetensors into the module with load_state_dict(strict=True) (a tied head
     is filled from transformer.wte.weight first, as from_pretrained ties it);
  2. runs it on --windows windows of block_size characters of --text, encoded with
     DIR/vocab.json, in fp32;
  3. runs the same windows through nanoGPT's layout (nn.Linear weights [out, in]) loaded from
     the plain `ampctl export --format safetensors` FILE of the same checkpoint (ampctl's own
     names: the layout ampctl's forward reads, checked against nanoGPT by scripts/golden/golden_gpt.py);
  4. compares the logits: the two differ only in the order of the fp32 sums of the matrix
     products (addmm of x and W[in, out] against x @ W[out, in]^T), so every logit must agree
     within a bound derived from fp32's unit roundoff u = 2^-24: per matrix product of depth K
     the standard bound K u sum_k |x_k w_k|, propagated through the layers; we use
     4 * (n_layer + 1) * K_max * u * max|logit| + 1e-6, where K_max = 4 n_embd is the deepest
     product, and report the worst logit and how much of the bound it used.
  5. with --ampctl BIN --checkpoint RUN: ampctl's own forward. Each window (block_size + 1
     characters) is written to a file of exactly that length, so the evaluation has one window
     to draw, and `ampctl eval --checkpoint RUN --set precision=fp32 --set data.eval=...` gives
     its mean next-token loss; the module's cross-entropy on the same window must agree within
     2 x the logit bound (the loss moves by at most 2 max|d logit|) + 1e-6 (its log-sum-exp).
Exit 0 when every logit and loss is within its bound, 1 otherwise; 77 (skip) without torch.

  python3 scripts/dev/hf_gpt2.py --write DIR --vocab V [--n-layer 1 --n-head 2 --n-embd 16
                                 --positions 32 --seed 0]

writes what a Hugging Face GPT-2 checkpoint folder holds for this module, with random values:
DIR/model.safetensors in GPT2Model's own names as the published gpt2 checkpoints store them
(`wte.weight`, `h.N.attn.c_attn.weight` [in, out], ..., `ln_f.bias`; no `transformer.` prefix,
no lm_head: the head is tied), each block's `attn.bias` causal mask included (F32 [1, 1, P, P],
a buffer a loader ignores), and DIR/config.json. Weights N(0, 0.02) as GPT-2 initialises them;
the biases and LayerNorm parameters random too, so that a loader that drops or mixes one is seen.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIPPED: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)


def load_safetensors(path):
    """safetensors without the safetensors package: {name: tensor}, metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I32": torch.int32}
    out = {}
    base = 8 + n
    for name, v in header.items():
        b, e = v["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + b:base + e]), dtype=dtypes[v["dtype"]])
        out[name] = t.reshape(v["shape"]).clone()
    return out, meta


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        shape = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(shape)


class GPT2Attention(nn.Module):
    def __init__(self, c, heads, positions):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(3 * c, c)
        self.c_proj = Conv1D(c, c)
        mask = torch.tril(torch.ones(positions, positions, dtype=torch.bool))
        self.register_buffer("bias", mask.view(1, 1, positions, positions), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        hs = c // self.heads
        q, k, v = (z.view(b, t, self.heads, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~self.bias[:, :, :t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(4 * c, c)
        self.c_proj = Conv1D(c, 4 * c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # gelu_new


class GPT2Block(nn.Module):
    def __init__(self, c, heads, positions, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=eps)
        self.attn = GPT2Attention(c, heads, positions)
        self.ln_2 = nn.LayerNorm(c, eps=eps)
        self.mlp = GPT2MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
        self.wte = nn.Embedding(cfg["vocab_size"], c)
        self.wpe = nn.Embedding(cfg["n_positions"], c)
        self.h = nn.ModuleList(GPT2Block(c, cfg["n_head"], cfg["n_positions"], eps)
                               for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(c, eps=eps)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", True):
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


def nanogpt_logits(state, cfg, idx):
    """The forward in nanoGPT's layout (Linear weights [out, in]), from ampctl's names."""
    c, heads, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    zero = lambda n: torch.zeros(n)
    get = lambda name, n: state.get(name, zero(n))  # model.bias: false -> no bias
    b, t = idx.shape
    x = state["transformer.wte.weight"][idx] + state["transformer.wpe.weight"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (c,), state[p + "ln_1.weight"], get(p + "ln_1.bias", c), eps)
        qkv = F.linear(h, state[p + "attn.c_attn.weight"], get(p + "attn.c_attn.bias", 3 * c))
        q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in qkv.split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // heads)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + F.linear(y, state[p + "attn.c_proj.weight"], get(p + "attn.c_proj.bias", c))
        h = F.layer_norm(x, (c,), state[p + "ln_2.weight"], get(p + "ln_2.bias", c), eps)
        h = F.gelu(F.linear(h, state[p + "mlp.c_fc.weight"], get(p + "mlp.c_fc.bias", 4 * c)),
                   approximate="tanh")
        x = x + F.linear(h, state[p + "mlp.c_proj.weight"], get(p + "mlp.c_proj.bias", c))
    x = F.layer_norm(x, (c,), state["transformer.ln_f.weight"],
                     get("transformer.ln_f.bias", c), eps)
    head = state.get("lm_head.weight", state["transformer.wte.weight"])
    return F.linear(x, head)


def save_safetensors(path, tensors, meta):
    """safetensors without the safetensors package: little-endian data in header order."""
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int32: "I32"}
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        blob = t.detach().contiguous().view(torch.uint8).numpy().tobytes() if t.dim() else \
            t.detach().reshape(1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_gpt2(args):
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
           "vocab_size": args.vocab, "n_positions": args.positions, "n_ctx": args.positions,
           "n_embd": args.n_embd, "n_layer": args.n_layer, "n_head": args.n_head,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "tie_word_embeddings": True, "torch_dtype": "float32"}
    torch.manual_seed(args.seed)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.transformer.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.normal_(0.0, 0.02)
            elif "ln" in name and name.endswith("weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.uniform_(-0.1, 0.1)
    state = dict(model.transformer.state_dict())  # GPT2Model's names; the tied head is wte
    p = args.positions
    for i in range(args.n_layer):  # the published checkpoints hold the masks
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(p, p)).view(1, 1, p, p)
    os.makedirs(args.write, exist_ok=True)
    save_safetensors(os.path.join(args.write, "model.safetensors"), state, {"format": "pt"})
    with open(os.path.join(args.write, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"wrote {args.write}/model.safetensors ({len(state)} tensors) and config.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", metavar="DIR", help="write a random GPT-2 folder (see above)")
    ap.add_argument("--vocab", type=int, help="--write: vocabulary size")
    ap.add_argument("--n-layer", type=int, default=1)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=16)
    ap.add_argument("--positions", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hf", help="an `ampctl export --format hf` directory")
    ap.add_argument("--safetensors",
                    help="`ampctl export --format safetensors` of the same checkpoint")
    ap.add_argument("--text", help="text to cut the windows from")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--ampctl", help="the ampctl binary (with --checkpoint: compare losses)")
    ap.add_argument("--checkpoint", help="the run (or checkpoint) the folder was exported from")
    args = ap.parse_args()
    if args.write:
        if not args.vocab:
            ap.error("--write needs --vocab")
        write_gpt2(args)
        return
    if not (args.hf and args.safetensors and args.text):
        ap.error("checking an export needs --hf, --safetensors and --text")

    cfg = json.load(open(os.path.join(args.hf, "config.json")))
    model = GPT2LMHeadModel(cfg).eval()
    state, _ = load_safetensors(os.path.join(args.hf, "model.safetensors"))
    if cfg.get("tie_word_embeddings", True) and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=True)  # raises on any missing or unexpected key

    vocab = json.load(open(os.path.join(args.hf, "vocab.json")))
    text = open(args.text, encoding="utf-8").read()
    ids = [vocab[ch] for ch in text if ch in vocab]
    t = cfg["n_positions"]
    if len(ids) < args.windows * t:
        sys.exit(f"{args.text}: fewer than {args.windows} windows of {t} known characters")
    step = (len(ids) - t - 1) // max(1, args.windows - 1)
    windows = [ids[w * step:w * step + t + 1] for w in range(args.windows)]
    idx = torch.tensor([w[:t] for w in windows])

    ref_state, _ = load_safetensors(args.safetensors)
    with torch.no_grad():
        hf_logits = model(idx)
        ref_logits = nanogpt_logits(ref_state, cfg, idx)
    u = 2.0 ** -24
    bound = 4 * (cfg["n_layer"] + 1) * 4 * cfg["n_embd"] * u * ref_logits.abs().max().item() + 1e-6
    diff = (hf_logits - ref_logits).abs()
    worst = diff.argmax().item()
    print(f"{args.windows} windows x {t} positions x {cfg['vocab_size']} logits: worst "
          f"|diff| {diff.max().item():.3g} (hf {hf_logits.flatten()[worst].item():.7g}, "
          f"nanoGPT layout {ref_logits.flatten()[worst].item():.7g}), bound {bound:.3g} "
          f"({100 * diff.max().item() / bound:.1f}% used)")
    ok = diff.max().item() <= bound
    if args.ampctl and args.checkpoint:
        inverse = {i: ch for ch, i in vocab.items()}
        targets = torch.tensor([w[1:] for w in windows])
        with tempfile.TemporaryDirectory() as tmp:
            for w, window in enumerate(windows):
                path = os.path.join(tmp, f"window{w}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write("".join(inverse[i] for i in window))
                out = subprocess.run(
                    [args.ampctl, "eval", "--checkpoint", args.checkpoint, "--json",
                     "--set", "precision=fp32", "--set", "data.batch_size=1",
                     "--set", "training.eval_batches=1",
                     "--set", "data.eval={source: text, path: '" + path + "'}"],
                    capture_output=True, text=True, check=True)
                theirs = json.loads(out.stdout)["loss"]
                ours = F.cross_entropy(hf_logits[w], targets[w]).item()
                loss_bound = 2 * bound + 1e-6
                print(f"window {w}: ampctl eval loss {theirs:.7g}, hf module {ours:.7g}, "
                      f"|diff| {abs(theirs - ours):.3g} (bound {loss_bound:.3g})")
                ok = ok and abs(theirs - ours) <= loss_bound
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
