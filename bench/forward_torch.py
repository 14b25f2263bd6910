#!/usr/bin/python3
"""forward_torch.py: the PyTorch CPU side of bench_forward: a GPT-2 forward built from plain
torch modules (transformers is not installed), returning every layer's attention weights
(as GPT2Model(output_attentions=True) does: explicit softmax, no fused kernel), with a
consumer that touches every weight. Random weights at the given shape (timing only).

Run with Debian's torch: /usr/bin/python3 bench/forward_torch.py --threads 2 --T 1024
Prints one JSON object: {"seconds": [...], "median": s, "threads": n, ...}.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=1)
        q, k, v = (t.view(T, H, D).transpose(0, 1) for t in (q, k, v))  # [H, T, D]
        z = (q @ k.transpose(1, 2)) / math.sqrt(D)
        z = z.masked_fill(mask, float("-inf"))
        w = torch.softmax(z, dim=-1)  # [H, T, T]
        y = (w @ v).transpose(0, 1).reshape(T, C)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x, w


class GPT2(nn.Module):
    def __init__(self, L, H, C, n_ctx, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(n_ctx, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, consume):
        T = idx.shape[0]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        for blk in self.h:
            x, w = blk(x, mask)
            consume(w)
        return self.ln_f(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT2(a.layers, a.heads, a.embd, max(a.T, 1024), a.vocab).eval()
    idx = torch.randint(0, a.vocab, (a.T,))
    acc = [0.0]

    def consume(w):  # touches every weight of every head, as the C consumer does
        acc[0] += float(w.sum())

    times, cpu = [], []
    with torch.no_grad():
        model(idx, consume)  # warm-up
        for _ in range(a.reps):
            t0, c0 = time.perf_counter(), time.process_time()
            model(idx, consume)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)  # all threads: less disturbed by other load
    times.sort()
    cpu.sort()
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "threads": a.threads,
                      "T": a.T, "seconds": times, "median": times[len(times) // 2],
                      "min": times[0], "cpu_seconds": cpu, "cpu_min": cpu[0],
                      "checksum": acc[0]}))


if __name__ == "__main__":
    main()
