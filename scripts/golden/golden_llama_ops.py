#!/usr/bin/python3
"""Writes tests/data/golden/llama_ops.json: Hugging Face's Llama / Qwen block formulas run by
PyTorch itself (Debian's python3-torch 1.13, CPU, float32; `transformers` is not installed, so
the few functions are written here as modeling_llama.py and modeling_rope_utils.py write them):

  * rope: `_compute_default_rope_parameters` and `_compute_llama3_parameters`' inv_freq for the
    Llama 3.1 / 3.2, Qwen and a small configuration, and LlamaRotaryEmbedding's cos and sin for
    positions 0 .. 63 of one of them;
  * LlamaRMSNorm, LlamaMLP's act_fn(gate) * up (SiLU) and apply_rotary_pos_emb (rotate_half),
    each forward and backward by autograd on fixed random inputs;
  * causal attention with grouped-query heads (repeat_kv, then softmax(q k^T / sqrt(hs)) v) and
    its gradients, as LlamaAttention's eager path computes it.

Every tensor is written with its values (float32 widened exactly to the JSON's doubles).
tests/unit/backend/test_llama_ops_golden.cpp runs ampctl's ops on the same inputs and compares.
Regenerate with:

  /usr/bin/python3 scripts/golden/golden_llama_ops.py tests/data/golden/llama_ops.json
"""
import json
import math
import sys

import torch
import torch.nn.functional as F


def values(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def llama3_inv_freq(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    inv_freq = default_inv_freq(base, dim)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def cos_sin(inv_freq, positions):
    # LlamaRotaryEmbedding.forward (attention_scaling 1.0).
    inv_freq_expanded = inv_freq[None, :, None].float()
    position_ids_expanded = positions[None, None, :].float()
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[0], emb.sin()[0]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rms_norm(x, weight, eps):
    input_dtype = x.dtype
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def main(out_path):
    torch.manual_seed(1234)
    doc = {"rope": [], "rope_tables": None}
    configs = [
        {"name": "llama3.2", "head_dim": 64, "theta": 500000.0, "llama3": [32.0, 1.0, 4.0, 8192]},
        {"name": "llama3.1", "head_dim": 128, "theta": 500000.0, "llama3": [8.0, 1.0, 4.0, 8192]},
        {"name": "small-llama3", "head_dim": 16, "theta": 10000.0, "llama3": [4.0, 1.0, 4.0, 64]},
        {"name": "qwen", "head_dim": 64, "theta": 1000000.0, "llama3": None},
        {"name": "default", "head_dim": 16, "theta": 10000.0, "llama3": None},
    ]
    for c in configs:
        if c["llama3"]:
            inv = llama3_inv_freq(c["theta"], c["head_dim"], *c["llama3"])
        else:
            inv = default_inv_freq(c["theta"], c["head_dim"])
        doc["rope"].append(dict(c, inv_freq=values(inv)))
    inv = llama3_inv_freq(10000.0, 16, 4.0, 1.0, 4.0, 64)
    cos, sin = cos_sin(inv, torch.arange(64))
    doc["rope_tables"] = {"config": "small-llama3", "positions": 64, "cos": values(cos[:, :8]),
                          "sin": values(sin[:, :8])}

    # RMSNorm [R, C].
    R, C, eps = 6, 48, 1e-6
    x = (torch.randn(R, C) * torch.linspace(0.1, 3.0, R)[:, None]).requires_grad_()
    w = (1.0 + 0.3 * torch.randn(C)).requires_grad_()
    dy = torch.randn(R, C)
    y = rms_norm(x, w, eps)
    y.backward(dy)
    doc["rms_norm"] = {"rows": R, "cols": C, "eps": eps, "x": values(x), "weight": values(w),
                       "dy": values(dy), "y": values(y), "dx": values(x.grad), "dweight": values(w.grad)}

    # SwiGLU: act_fn(gate) * up.
    R, I = 5, 24
    g = (3.0 * torch.randn(R, I)).requires_grad_()
    u = torch.randn(R, I).requires_grad_()
    dy = torch.randn(R, I)
    y = F.silu(g) * u
    y.backward(dy)
    doc["swiglu"] = {"rows": R, "width": I, "gate": values(g), "up": values(u), "dy": values(dy),
                     "y": values(y), "dgate": values(g.grad), "dup": values(u.grad)}

    # apply_rotary_pos_emb on q [B, H, T, hs], positions pos0 .. pos0 + T - 1 of the table above.
    B, H, T, hs, pos0 = 2, 3, 10, 16, 7
    q = torch.randn(B, H, T, hs).requires_grad_()
    cos_t, sin_t = cos_sin(inv, torch.arange(pos0, pos0 + T))
    y = q * cos_t[None, None] + rotate_half(q) * sin_t[None, None]
    dy = torch.randn(B, H, T, hs)
    y.backward(dy)
    doc["rope_apply"] = {"n": B * H, "t": T, "hs": hs, "pos0": pos0, "x": values(q), "dy": values(dy),
                         "y": values(y), "dx": values(q.grad)}

    # Grouped-query causal attention: H query heads, Hkv kv heads.
    B, H, Hkv, T, hs = 2, 6, 2, 12, 8
    q = torch.randn(B, H, T, hs).requires_grad_()
    k = torch.randn(B, Hkv, T, hs).requires_grad_()
    v = torch.randn(B, Hkv, T, hs).requires_grad_()
    ks, vs = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)
    att = (q @ ks.transpose(2, 3)) * (1.0 / math.sqrt(hs))
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    att = att.masked_fill(mask, float("-inf"))
    p = F.softmax(att, dim=-1, dtype=torch.float32)
    y = p @ vs
    dy = torch.randn(B, H, T, hs)
    y.backward(dy)
    doc["gqa"] = {"batch": B, "heads": H, "kv_heads": Hkv, "t": T, "hs": hs, "q": values(q),
                  "k": values(k), "v": values(v), "dy": values(dy), "y": values(y),
                  "dq": values(q.grad), "dk": values(k.grad), "dv": values(v.grad)}

    with open(out_path, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
