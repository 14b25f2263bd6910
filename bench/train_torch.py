#!/usr/bin/python3
"""train_torch.py: the PyTorch CPU side of bench_train.sh: training steps (forward, backward,
global-norm clip, AdamW) of the GPT-2 that `attnlim train` trains (pre-LayerNorm, tanh GELU,
learned positions, tied head), eager float32, on random tokens. Normalizers: softmax, ssmax,
sa-softmax in plain torch; sparsemax, entmax15, entmax (bisection) from the `entmax` package.

Prints one JSON object: {"tokens_per_s", "seconds_per_step": [...], "peak_rss_mb", ...}.
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def normalize(z, kind, mask):
    if kind in ("softmax", "ssmax", "sa-softmax"):
        x = z
        if kind == "ssmax":
            T = z.shape[-1]
            x = z * 0.43 * torch.log(torch.arange(1, T + 1, dtype=z.dtype)).view(1, 1, T, 1)
        w = torch.softmax(x.masked_fill(mask, float("-inf")), dim=-1)
        return w if kind != "sa-softmax" else torch.where(mask, torch.zeros_like(z), z * w)
    import entmax
    x = z.masked_fill(mask, -1e4)
    if kind == "sparsemax":
        return entmax.sparsemax(x, dim=-1)
    if kind == "entmax15":
        return entmax.entmax15(x, dim=-1)
    return entmax.entmax_bisect(x, alpha=1.5, dim=-1)


class Block(nn.Module):
    def __init__(self, C, H, kind):
        super().__init__()
        self.H, self.kind = H, kind
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        w = normalize(q @ k.transpose(-1, -2) / math.sqrt(D), self.kind, mask)
        x = x + self.c_proj((w @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, H, C, T, V, kind):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, kind) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", ~torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, tok, tgt):
        x = self.wte(tok) + self.wpe.weight[: tok.shape[1]]
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("layers", 4), ("heads", 4), ("embd", 128), ("T", 256), ("batch", 8),
                 ("vocab", 256), ("steps", 5), ("threads", 2)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--normalizer", default="softmax")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = GPT2(a.layers, a.heads, a.embd, a.T, a.vocab, a.normalizer)
    decay = [p for p in m.parameters() if p.dim() == 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95))
    tok = torch.randint(0, a.vocab, (a.batch, a.T))
    tgt = torch.randint(0, a.vocab, (a.batch, a.T))
    times = []
    for s in range(a.steps + 1):  # the first step warms up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = m(tok, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if s:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"tokens_per_s": a.batch * a.T / med, "seconds_per_step": times,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "normalizer": a.normalizer, "threads": a.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
