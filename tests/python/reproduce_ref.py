"""Independent numpy fp64 reference of the experiments of `attnlim reproduce`.

Written from docs/METHOD.md (sections 2-6), not from the C code: straightforward loops over
rows, numpy for the per-row algebra, scipy.stats.ks_2samp for the KS test. Inputs are the
per-head arrays that `attnlim capture` writes (weights, logits, v, k, q of one window), so
that the comparison isolates the algorithms from the forward pass.

Used by tests/python/test_reproduce.py (correctness) and bench/bench_reproduce.sh (speed of
the same algorithms in numpy).
"""
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
from scipy import stats


# ---- METHOD section 3 and 5: one row ---------------------------------------------------------

def top_n(alpha, N):
    """Indices of the N largest weights; ties: lower index first (a stable sort of -alpha)."""
    return list(np.argsort(-alpha, kind="stable")[:N])


def distance_row(alpha, x, N):
    """dtilde, dmax, E of one row: alpha[n], x[n, d] (METHOD section 3)."""
    n = len(alpha)
    sel = top_n(alpha, N)
    mask = np.zeros(n, bool)
    mask[sel] = True
    ax = alpha[:, None] * x                                   # [n, d]
    s = ax[mask].sum(axis=0)
    abar = alpha[mask].sum()
    dtilde = np.linalg.norm(ax[~mask] - s, axis=1).sum()
    b = alpha[~mask].sum()
    d1 = np.linalg.norm(x[~mask][:, None, :] - x[mask][None, :, :], axis=2).max()
    m = np.linalg.norm(x[mask], axis=1).max()
    dmax = b * d1 + ((n - N) * abar - b) * m
    total = ax.sum(axis=0)
    E = (n - N) / n * np.linalg.norm(ax - (N / (n - 1)) * (total[None, :] - ax), axis=1).sum()
    return dtilde, dmax, E


def separability_row(alpha, x, N):
    """N_s/N, lower, upper of one row on unit vectors (METHOD section 5)."""
    n = len(alpha)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    sel = np.array(top_n(alpha, N))
    mask = np.zeros(n, bool)
    mask[sel] = True
    s = (alpha[sel, None] * u[sel]).sum(axis=0)
    r = np.linalg.norm(s - alpha[~mask, None] * u[~mask], axis=1).min()
    if r == 0:
        return 0.0, 0.0, 0.0
    ns = int((np.linalg.norm(s - alpha[sel, None] * u[sel], axis=1) < r).sum())
    if N == 1:
        xi = np.zeros(1)
    else:
        dist = np.linalg.norm(u[sel][:, None, :] - u[sel][None, :, :], axis=2)
        delta = dist[np.triu_indices(N, 1)].min()
        a = alpha[sel]
        xi = np.zeros(N)
        for c in range(N):                      # the sums of METHOD 5 over I_N without i
            others = np.delete(a, c)
            sq = (others ** 2).sum()
            cross = others.sum() ** 2 - sq      # sum over j != k of a_j a_k
            xi[c] = math.sqrt(max(sq + (1 - delta ** 2 / 2) * cross, 0.0))
    lower = max(0.0, 1 - xi.sum() / (r * N))
    upper = min(1.0, np.exp(-np.maximum(xi - r, 0.0) ** 2 / 2).sum() / N)
    return ns / N, lower, upper


# ---- per head ---------------------------------------------------------------------------------

def head_rows(L, causal):
    return [(t, t + 1 if causal else L) for t in range(L)]


def head_distance(w, x, Ns, causal=True):
    """{N: (dtilde, dmax, E)} means over rows with n > N. w[L, L], x[L, d]."""
    L = w.shape[0]
    out = {}
    for N in Ns:
        acc = []
        for t, n in head_rows(L, causal):
            if n > N:
                acc.append(distance_row(w[t, :n], x[:n], N))
        out[N] = tuple(np.mean([a[k] for a in acc]) for k in range(3)) if acc else (np.nan,) * 3
    return out


def head_separability(w, x, Ns, causal=True):
    L = w.shape[0]
    out = {}
    for N in Ns:
        acc = []
        for t, n in head_rows(L, causal):
            if n > N:
                acc.append(separability_row(w[t, :n], x[:n], N))
        out[N] = tuple(np.mean([a[k] for a in acc]) for k in range(3)) if acc else (np.nan,) * 3
    return out


def head_vanishing(w, q, k, causal=True):
    """Per row: max weight, entropy, D (METHOD section 2)."""
    L, dh = q.shape
    mx, ent, D = np.zeros(L), np.zeros(L), np.zeros(L)
    for t, n in head_rows(L, causal):
        a = w[t, :n]
        mx[t] = a.max()
        pos = a[a > 0]
        ent[t] = -(pos * np.log(pos)).sum()
        D[t] = np.linalg.norm(q[t]) * np.linalg.norm(k[:n], axis=1).max() / math.sqrt(dh)
    return mx, ent, D


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def head_spectral(z, Ts, causal=True):
    """Mean over rows with n >= 2 of the spectral norm of (diag(a) - a a^T)/T, a = softmax(z/T)."""
    L = z.shape[0]
    out = []
    for T in Ts:
        vals = []
        for t, n in head_rows(L, causal):
            if n < 2:
                continue
            a = softmax(z[t, :n] / T)
            J = (np.diag(a) - np.outer(a, a)) / T
            vals.append(np.linalg.svd(J, compute_uv=False)[0])
        out.append(np.mean(vals))
    return np.array(out)


def head_fd_row_bound(z, Ts, causal=True):
    """Per T: mean over rows of the max singular value (>= any ||J v|| for a unit v)."""
    return head_spectral(z, Ts, causal)


# ---- normalizers for --normalizer (METHOD section 7) --------------------------------------------

def sparsemax(z):
    zs = np.sort(z)[::-1]
    cs = np.cumsum(zs)
    k = np.arange(1, len(z) + 1)
    support = zs - (cs - 1) / k > 0
    kz = k[support][-1]
    tau = (cs[kz - 1] - 1) / kz
    return np.maximum(z - tau, 0)


def renormalise(z, causal, fn):
    L = z.shape[0]
    w = np.zeros_like(z)
    for t, n in head_rows(L, causal):
        w[t, :n] = fn(z[t, :n])
    return w


# ---- Algorithm 3 ---------------------------------------------------------------------------------

def critical_n(Ns, dt, E, level):
    """dt, E: [len(Ns), heads]. Smallest N with KS p >= level (-1 if none), and the p-values."""
    ps = [stats.ks_2samp(dt[i], E[i]).pvalue for i in range(len(Ns))]
    for N, p in zip(Ns, ps):
        if p >= level:
            return N, ps
    return -1, ps


def slope_origin(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float((x * y).sum() / (x * x).sum())


# ---- driving `attnlim capture` --------------------------------------------------------------------

def capture(bin_path, model, corpus, window, L, out_dir, what="weights,logits,v,q,k"):
    subprocess.run([bin_path, "capture", "--model", model, "--corpus", corpus, "--window", str(window),
                    "--length", str(L), "--what", what, "--out", out_dir], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    man = json.load(open(os.path.join(out_dir, "manifest.json")))
    return man


def load_layer(dir_, layer, what):
    return np.load(os.path.join(dir_, f"layer{layer}.{what}.npy")).astype(np.float64)


# ---- speed: python reproduce_ref.py bench BIN MODEL OUTDIR [rows] ----------------------------------

def crit_grid():
    return list(range(1, 17)) + list(range(18, 33, 2)) + list(range(36, 65, 4)) + list(range(72, 129, 8)) + \
        list(range(144, 257, 16))


def bench_estimate(bin_path, model, work, sample_rows=8, heads_total=None):
    """Estimates the CPU time (process CPU seconds, all threads: insensitive to other load on
    the machine) of the reference over every algorithm of the default grids (one window per
    L) from `sample_rows` evenly spaced rows of head 0 of layer 0 at each L, scaled to all
    rows and all heads (the per-row cost depends on n and N, not on the head). The forward
    pass is not included. Returns a dict of CPU seconds."""
    Ls, longL = [32, 64, 128, 256, 512, 1024], 1024
    N2, N4 = [1, 5, 10, 20, 100], [1, 2, 4, 8, 16, 32, 64, 128]
    Ts = list(np.logspace(-3, 1, 25))
    eps = [1e-3, 1e-1, 10.0]
    est = {"distance": 0.0, "separability": 0.0, "sensitivity": 0.0, "vanishing": 0.0}
    for L in Ls:
        cap = os.path.join(work, f"cap{L}")
        if not os.path.exists(os.path.join(cap, "manifest.json")):
            subprocess.run([bin_path, "capture", "--model", model, "--corpus", "war-and-peace", "--length", str(L),
                            "--layers", "0", "--heads", "0", "--what", "weights,logits,v,q,k", "--out", cap],
                           check=True, stdout=subprocess.DEVNULL)
        w, z, v = (load_layer(cap, 0, s)[0] for s in ("weights", "logits", "v"))
        q, k = load_layer(cap, 0, "q")[0], load_layer(cap, 0, "k")[0]
        Nd = sorted({n for n in crit_grid() if n < L} | {5} | ({n for n in N2 if n < L} if L == longL else set()))
        rows = np.unique(np.linspace(0, L - 1, sample_rows).astype(int))
        scale = L / len(rows)
        for t in rows:
            n = t + 1
            t0 = time.process_time()
            for N in Nd:
                if n > N:
                    distance_row(w[t, :n], v[:n], N)
            est["distance"] += (time.process_time() - t0) * scale
            if L != longL:
                continue
            t0 = time.process_time()
            for N in N4:
                if n > N:
                    separability_row(w[t, :n], v[:n], N)
            est["separability"] += (time.process_time() - t0) * scale
            t0 = time.process_time()
            if n >= 2:
                rng = np.random.default_rng(t)
                d = rng.standard_normal(n)
                d /= np.linalg.norm(d)
                for T in Ts:
                    a = softmax(z[t, :n] / T)
                    J = (np.diag(a) - np.outer(a, a)) / T
                    np.linalg.eigvalsh(J)[-1]      # symmetric: eigvalsh, cheaper than an SVD
                    for e in eps:
                        np.linalg.norm(softmax((z[t, :n] + e * d) / T) - a) / e
            est["sensitivity"] += (time.process_time() - t0) * scale
            t0 = time.process_time()
            a = w[t, :n]
            a.max(), -(a[a > 0] * np.log(a[a > 0])).sum()
            np.linalg.norm(q[t]) * np.linalg.norm(k[:n], axis=1).max()
            est["vanishing"] += (time.process_time() - t0) * scale
    H = heads_total if heads_total else 1
    out = {key: val * H for key, val in est.items()}
    out["total"] = sum(out.values())
    out["heads"] = H
    out["sample_rows_per_L"] = sample_rows
    return out


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "bench":
        rows = int(sys.argv[5]) if len(sys.argv) > 5 else 8
        heads = int(sys.argv[6]) if len(sys.argv) > 6 else 144
        print(json.dumps(bench_estimate(sys.argv[2], sys.argv[3], sys.argv[4], rows, heads)))
    else:
        print(__doc__)
