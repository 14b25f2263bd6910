"""attn_variant_ref.py: the attention variants (top-k key selection, alternative normalizers)
in float64 straight loops, for the tests; written from their definitions (include/attnlim.h,
docs/guidelines.md), not from src/model/attn_variant.c:

  a query row of n visible keys in a window of L keeps K = min(n, rule(n, L)) keys:
    topk:K -> K;  topk-frac:F -> ceil(F L);  topk-sqrt:C -> ceil(C sqrt n);
    topk-log:C -> ceil(C ln n), at least 1 (each ceil of x - 1e-9);
  the kept keys are the first K of the keys sorted by (-z_j, j) (ties: lower index first);
  the normalizer runs over the kept logits in index order, the others get weight 0.

Normalizers: softmax and ssmax (softmax(s ln(K) z)) by explicit loops; sparsemax, 1.5-entmax and
alpha-entmax by the `entmax` package (Peters, Niculae, Martins; torch float64), an
implementation independent of src/math/normalize.c.
"""
import math

import numpy as np


def kept_count(rule, param, n, L):
    if rule == "dense":
        k = n
    elif rule == "topk":
        k = int(param)
    else:
        x = {"topk-frac": param * L, "topk-sqrt": param * math.sqrt(n),
             "topk-log": param * math.log(n)}[rule]
        k = max(1, math.ceil(x - 1e-9))
    return max(1, min(n, k))


def parse_rule(spec):
    if spec == "dense":
        return "dense", 0.0
    name, val = spec.split(":")
    return name, float(val)


def _softmax(z, scale=1.0):
    m = max(z)
    e = [math.exp(scale * (x - m)) for x in z]
    s = sum(e)
    return [x / s for x in e]


def normalize(norm, z):
    """p over the list z (float64) for the normalizer spelling norm."""
    name, _, arg = norm.partition(":")
    if name == "softmax":
        return _softmax(z)
    if name == "ssmax":
        s = float(arg) if arg else 0.43
        return _softmax(z, s * math.log(len(z)))
    import torch
    import entmax
    t = torch.tensor([z], dtype=torch.float64)
    if name == "sparsemax":
        p = entmax.sparsemax(t, dim=-1)
    elif name == "entmax15":
        p = entmax.entmax15(t, dim=-1)
    elif name == "entmax":
        p = entmax.entmax_bisect(t, alpha=float(arg) if arg else 1.5, dim=-1, n_iter=100)
    else:
        raise ValueError(norm)
    return p[0].tolist()


class Variant:
    """The variant as a function (layer, z [H, T, T], -inf masked) -> weights [H, T, T].
    gaps: the smallest gap z_(K) - z_(K+1) seen at a row that drops keys (a gap within float32
    rounding would make the float32 forward's choice differ legitimately)."""

    def __init__(self, rule="dense", norm="softmax", layers=None, heads=None, causal=True):
        self.rule, self.param = parse_rule(rule)
        self.norm, self.layers, self.heads, self.causal = norm, layers, heads, causal
        self.min_gap = math.inf
        self.ties = 0  # rows where the K-th logit ties with a dropped one

    def row(self, z, L):
        n = len(z)
        K = kept_count(self.rule, self.param, n, L)
        order = sorted(range(n), key=lambda j: (-z[j], j))
        kept = sorted(order[:K])
        if K < n:
            gap = z[order[K - 1]] - z[order[K]]
            if gap == 0:
                self.ties += 1
            else:
                self.min_gap = min(self.min_gap, gap)
        p = normalize(self.norm, [z[j] for j in kept])
        w = [0.0] * n
        for j, pj in zip(kept, p):
            w[j] = pj
        return w

    def __call__(self, layer, z):
        H, T, _ = z.shape
        zz = np.asarray(z, dtype=np.float64)
        w = np.zeros((H, T, T))
        for h in range(H):
            for t in range(T):
                n = t + 1 if self.causal else T
                row = zz[h, t, :n].tolist()
                on = (self.layers is None or layer in self.layers) and (
                    self.heads is None or h in self.heads)
                if on:
                    w[h, t, :n] = self.row(row, T)
                else:
                    w[h, t, :n] = _softmax(row)
        return w
