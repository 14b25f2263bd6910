"""Row and head metrics (METHOD sections 2, 3, 5) against a brute-force numpy fp64 reference
written here straight from METHOD's formulas (full sort for top-N, explicit sums and loops);
degenerate rows (identical and near-duplicate vectors, ties) against exact rational
arithmetic (fractions) and 60-digit decimals; the one-row API (al_row_vanishing,
al_row_sensitivity) against numpy and the head functions; plus the CLI (`attnlim metrics`):
JSON keys, values and bad input."""
import ctypes
import decimal
import itertools
import json
import math
import os
import subprocess
from fractions import Fraction

import numpy as np
import pytest

LIB_PATH = os.environ.get("ATTNLIM_LIB")
BIN = os.environ.get("ATTNLIM_BIN")


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Opts(ctypes.Structure):
    _fields_ = [("top_n", ctypes.POINTER(ctypes.c_int)), ("n_top", ctypes.c_int),
                ("distance", ctypes.c_int), ("separability", ctypes.c_int),
                ("mc_samples", ctypes.c_int), ("mc_seed", ctypes.c_uint64),
                ("causal", ctypes.c_int)]


class Stats(ctypes.Structure):
    _fields_ = [("N", ctypes.c_int), ("rows", ctypes.c_int64)] + [
        (k, ctypes.c_double) for k in
        ("dtilde", "dmax", "E", "E_mc", "E_mc_se", "ns_ratio", "ns_lower", "ns_upper")]


KEYS = ("dtilde", "dmax", "E", "ns_ratio", "ns_lower", "ns_upper")


@pytest.fixture(scope="module")
def lib():
    assert LIB_PATH, "ATTNLIM_LIB is not set (run through ctest, or export it)"
    L = ctypes.CDLL(LIB_PATH)
    dp = ctypes.POINTER(ctypes.c_double)
    L.al_row_metrics.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(Opts),
                                 ctypes.POINTER(Stats), ctypes.POINTER(Err)]
    L.al_head_metrics.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(Opts),
                                  ctypes.POINTER(Stats), dp, dp, ctypes.POINTER(Err)]
    L.al_head_vanishing_D.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, dp,
                                      ctypes.POINTER(Err)]
    return L


def _dp(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


def _opts(Ns, causal=0, mc=0, seed=0, distance=1, separability=1):
    arr = (ctypes.c_int * len(Ns))(*Ns)
    o = Opts(arr, len(Ns), distance, separability, mc, seed, causal)
    o._keep = arr
    return o


def _stats_dict(s):
    return {k: getattr(s, k) for k in ("N", "rows") + KEYS + ("E_mc", "E_mc_se")}


def c_row(lib, alpha, x, Ns, **kw):
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    o = _opts(Ns, **kw)
    out = (Stats * len(Ns))()
    err = Err()
    rc = lib.al_row_metrics(_dp(alpha), _dp(x), len(alpha), x.shape[1], ctypes.byref(o), out,
                            ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return [_stats_dict(s) for s in out]


def c_head(lib, w, x, Ns, causal, **kw):
    w = np.ascontiguousarray(w, dtype=np.float64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    L = w.shape[0]
    o = _opts(Ns, causal=causal, **kw)
    out = (Stats * len(Ns))()
    rmax = np.zeros(L)
    rent = np.zeros(L)
    err = Err()
    rc = lib.al_head_metrics(_dp(w), _dp(x), L, x.shape[1], ctypes.byref(o), out, _dp(rmax),
                             _dp(rent), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return [_stats_dict(s) for s in out], rmax, rent


# ---- the reference: METHOD sections 3 and 5, literally ---------------------------------------

def ref_row(alpha, x, N):
    """Every metric of one row at one N (n > N), by brute force."""
    alpha = np.asarray(alpha, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    n = len(alpha)
    order = sorted(range(n), key=lambda i: (-alpha[i], i))  # ties: lower index first
    I = order[:N]
    notI = [i for i in range(n) if i not in set(I)]
    s = sum(alpha[i] * x[i] for i in I)
    abar = sum(alpha[i] for i in I)
    dtilde = sum(np.linalg.norm(alpha[i] * x[i] - s) for i in notI)
    b = sum(alpha[i] for i in notI)
    d1 = max(np.linalg.norm(x[i] - x[j]) for i in notI for j in I)
    m = max(np.linalg.norm(x[j]) for j in I)
    dmax = b * d1 + ((n - N) * abar - b) * m
    E = (n - N) / n * sum(
        np.linalg.norm(alpha[i] * x[i] - N / (n - 1) * sum(alpha[j] * x[j] for j in range(n) if j != i))
        for i in range(n))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    su = sum(alpha[i] * u[i] for i in I)
    r = min(np.linalg.norm(su - alpha[j] * u[j]) for j in notI)
    if r == 0:
        ns = lo = up = 0.0
    else:
        ns = sum(1 for i in I if np.linalg.norm(su - alpha[i] * u[i]) < r) / N
        if N == 1:
            xi = [0.0]
        else:
            delta = min(np.linalg.norm(u[i] - u[j]) for i in I for j in I if i < j)
            xi = []
            for i in I:
                rest = [j for j in I if j != i]
                sq = sum(alpha[j] ** 2 for j in rest)
                cross = sum(alpha[j] * alpha[k] for j in rest for k in rest if j != k)
                xi.append(np.sqrt(max(sq + (1 - delta ** 2 / 2) * cross, 0.0)))
        lo = max(0.0, 1 - sum(xi) / (r * N))
        up = min(1.0, sum(np.exp(-max(v - r, 0.0) ** 2 / 2) for v in xi) / N)
    return dict(dtilde=dtilde, dmax=dmax, E=E, ns_ratio=ns, ns_lower=lo, ns_upper=up)


def ref_head(w, x, Ns, causal):
    L = w.shape[0]
    res = []
    for N in Ns:
        rows = []
        for t in range(L):
            n = t + 1 if causal else L
            if n > N:
                rows.append(ref_row(w[t, :n], x[:n], N))
        mean = {k: (np.mean([r[k] for r in rows]) if rows else np.nan) for k in KEYS}
        mean["rows"] = len(rows)
        res.append(mean)
    return res


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def close(a, b, rtol=1e-9, atol=1e-12):
    return abs(a - b) <= atol + rtol * abs(b)


# ---- rows -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_row_against_reference(lib, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30))
    d = int(rng.integers(1, 9))
    x = rng.standard_normal((n, d)) * rng.uniform(0.2, 3)
    alpha = softmax(rng.standard_normal(n) * rng.uniform(0.1, 4))
    Ns = sorted(set(int(v) for v in rng.integers(1, n, size=4))) + [n - 1]
    got = c_row(lib, alpha, x, Ns)
    for N, g in zip(Ns, got):
        ref = ref_row(alpha, x, N)
        assert g["N"] == N and g["rows"] == 1
        for k in KEYS:
            assert close(g[k], ref[k]), (seed, N, k, g[k], ref[k])


@pytest.mark.parametrize("seed", range(6))
def test_row_ties_and_odd_weights(lib, seed):
    """Tied weights (lower index first), sparsemax-like zeros, negative weights and sums != 1."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(4, 20))
    d = int(rng.integers(2, 6))
    x = rng.standard_normal((n, d))
    kind = seed % 3
    if kind == 0:   # ties: few distinct levels
        alpha = rng.integers(0, 4, size=n).astype(float)
        alpha /= alpha.sum() if alpha.sum() > 0 else 1
    elif kind == 1:  # zeros (sparsemax-like)
        alpha = np.maximum(rng.standard_normal(n), 0)
        alpha[0] = 0.5
    else:  # sa-softmax-like: negative weights, sum != 1
        z = rng.standard_normal(n)
        alpha = z * softmax(z)
    Ns = list(range(1, n))
    got = c_row(lib, alpha, x, Ns)
    for N, g in zip(Ns, got):
        ref = ref_row(alpha, x, N)
        for k in KEYS:
            assert close(g[k], ref[k], rtol=1e-8, atol=1e-10), (seed, N, k, g[k], ref[k])


def test_row_all_equal_weights(lib):
    rng = np.random.default_rng(7)
    n, d = 9, 4
    x = rng.standard_normal((n, d))
    alpha = np.full(n, 1 / n)
    got = c_row(lib, alpha, x, [1, 3, 8])
    for N, g in zip([1, 3, 8], got):
        ref = ref_row(alpha, x, N)  # I_N = 0..N-1 by the tie rule
        for k in KEYS:
            assert close(g[k], ref[k]), (N, k)


def test_row_n_le_N_and_n1(lib):
    x = np.ones((1, 3))
    got = c_row(lib, [1.0], x, [1, 2])
    assert all(g["rows"] == 0 and np.isnan(g["dtilde"]) and np.isnan(g["ns_ratio"]) for g in got)
    got = c_row(lib, [0.5, 0.5], np.eye(2), [2, 1])
    assert got[0]["rows"] == 0 and got[1]["rows"] == 1


def test_row_separability_r_zero(lib):
    # N = 1 with a tie and identical vectors: s = alpha_1 u_1 = alpha_0 u_0 -> r = 0
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    alpha = np.array([0.4, 0.4, 0.2])
    g = c_row(lib, alpha, x, [1])[0]
    ref = ref_row(alpha, x, 1)
    assert ref["ns_ratio"] == 0 and ref["ns_lower"] == 0 and ref["ns_upper"] == 0
    assert g["ns_ratio"] == 0 and g["ns_lower"] == 0 and g["ns_upper"] == 0


def test_row_bad_input(lib):
    x = np.zeros((3, 2))
    with pytest.raises(ValueError, match="position 1"):
        c_row(lib, [0.1, np.nan, 0.2], x, [1])
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match="row 2, column 1"):
        c_row(lib, [0.1, 0.3, 0.2], x, [1])
    with pytest.raises(ValueError, match="< 1"):
        c_row(lib, [0.1, 0.3, 0.2], np.zeros((3, 2)), [0])
    with pytest.raises(ValueError, match="empty"):
        c_row(lib, np.zeros(0), np.zeros((0, 2)), [1])


def test_row_monte_carlo_against_exact_expectation(lib):
    """E_mc is unbiased for the exact expectation over all N-subsets (enumerated here) and
    lies above the analytic E (Jensen) within 4 standard errors."""
    rng = np.random.default_rng(3)
    n, d = 9, 3
    x = rng.standard_normal((n, d))
    alpha = softmax(rng.standard_normal(n))
    for N in (1, 3, 5):
        vals = []
        for I in itertools.combinations(range(n), N):
            s = sum(alpha[i] * x[i] for i in I)
            vals.append(sum(np.linalg.norm(alpha[i] * x[i] - s) for i in range(n) if i not in I))
        exact = np.mean(vals)
        g = c_row(lib, alpha, x, [N], mc=4000, seed=11)[0]
        assert g["E_mc_se"] > 0
        assert abs(g["E_mc"] - exact) <= 4.5 * g["E_mc_se"], (N, g["E_mc"], exact, g["E_mc_se"])
        assert g["E_mc"] >= g["E"] - 4 * g["E_mc_se"]
        assert exact >= ref_row(alpha, x, N)["E"] - 1e-12  # Jensen, in the reference itself
        again = c_row(lib, alpha, x, [N], mc=4000, seed=11)[0]
        assert again["E_mc"] == g["E_mc"]  # seeded


# ---- degenerate rows: exact references -------------------------------------------------------

U53 = 2.0 ** -53


def exact_row(alpha, x, N):
    """dtilde, d1, E of one row in exact rational arithmetic (the inputs' doubles are exact
    rationals); each norm rounded once at the end (sqrt of the exact square, ~1 ulp)."""
    n, d = x.shape
    A = [Fraction(float(v)) for v in alpha]
    X = [[Fraction(float(v)) for v in r] for r in x]
    order = sorted(range(n), key=lambda i: (-alpha[i], i))
    I = order[:N]
    notI = [i for i in range(n) if i not in set(I)]
    s = [sum(A[j] * X[j][k] for j in I) for k in range(d)]
    dt = sum(math.sqrt(sum((A[i] * X[i][k] - s[k]) ** 2 for k in range(d))) for i in notI)
    d1 = math.sqrt(max(sum((X[i][k] - X[j][k]) ** 2 for k in range(d)) for i in notI for j in I))
    S = [sum(A[j] * X[j][k] for j in range(n)) for k in range(d)]
    cc = Fraction(N, n - 1)
    E = (n - N) / n * sum(
        math.sqrt(sum((A[i] * X[i][k] - cc * (S[k] - A[i] * X[i][k])) ** 2 for k in range(d)))
        for i in range(n))
    # the size of the numbers each metric is computed from (its rounding scale)
    nx = [math.sqrt(float(sum(v * v for v in r))) for r in X]
    Q = sum(abs(alpha[j]) * nx[j] for j in I)
    R = sum(abs(alpha[j]) * nx[j] for j in range(n))
    return dict(dtilde=dt, d1=d1, E=E, scale_dt=sum(abs(alpha[i]) * nx[i] + Q for i in notI),
                scale_d1=2 * max(nx), scale_E=2 * n * R)


def degenerate_x(rng, n, d, scale, gap):
    """n copies of one random vector at `scale`, each moved by `gap` (relative) noise."""
    x0 = rng.standard_normal(d) * scale
    return x0 + gap * scale * rng.standard_normal((n, d)) if gap else np.tile(x0, (n, 1))


def d1_of(g, alpha, x, N):
    """d1 back out of dmax = b d1 + ((n-N) abar - b) m (the reference's b, abar, m)."""
    n = len(alpha)
    order = sorted(range(n), key=lambda i: (-alpha[i], i))
    I, notI = order[:N], order[N:]
    b = sum(alpha[i] for i in notI)
    cf = sum(alpha[I].sum() - alpha[i] for i in notI)
    m = max(np.linalg.norm(x[j]) for j in I)
    return (g["dmax"] - cf * m) / b


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3, 1e6])
@pytest.mark.parametrize("gap", [0.0, 1e-12, 1e-8, 1e-4, 1e-2])
def test_degenerate_rows_exact(lib, scale, gap):
    """Identical and near-duplicate vectors (relative gaps 1e-12..1e-2) with equal, tied and
    random weights: dtilde, d1 and E within 1e-10 relative of the exact values (attnlim.h's
    accuracy; the Gram expansion alone was off by sqrt(eps) ~ 1e-8 of the norms: the audit's
    scale 1e3, gap 1e-4 gave 0.35%), exact zeros where the exact value is 0, and
    dtilde <= dmax + 1e-10 dtilde + 8 ulps of the scale of dtilde's terms."""
    rng = np.random.default_rng(int(scale * 7 + gap * 1e13) % 2**32)
    worst = 0.0
    for it in range(6):
        n = int(rng.integers(2, 8))
        d = int(rng.integers(1, 5))
        x = degenerate_x(rng, n, d, scale, gap)
        kind = it % 3
        if kind == 0:
            alpha = np.full(n, 1.0 / n)
        elif kind == 1:
            alpha = rng.integers(1, 4, n).astype(float)
            alpha[-1] = alpha[0] = 4.0  # a tie at the top
            alpha /= alpha.sum()
        else:
            alpha = softmax(rng.standard_normal(n))
        Ns = list(range(1, n))
        got = c_row(lib, alpha, x, Ns, separability=0)
        for N, g in zip(Ns, got):
            ref = exact_row(alpha, x, N)
            for key, sc in (("dtilde", "scale_dt"), ("E", "scale_E")):
                err = abs(g[key] - ref[key])
                assert err <= 1e-10 * ref[key] + 8 * U53 * ref[sc], (n, d, N, key, g[key], ref)
                if ref[key] == 0:
                    assert g[key] <= 8 * U53 * ref[sc]
                    if key == "dtilde":
                        assert g[key] == 0, (n, d, N, g[key])
                elif ref[key] > 1e3 * U53 * ref[sc]:
                    worst = max(worst, err / ref[key])
            if sum(alpha[sorted(range(n), key=lambda i: (-alpha[i], i))[N:]]) > 0:  # b > 0
                d1 = d1_of(g, alpha, x, N)
                assert abs(d1 - ref["d1"]) <= 1e-10 * ref["d1"] + 64 * U53 * ref["scale_d1"], \
                    (n, d, N, d1, ref["d1"])
            assert g["dtilde"] <= g["dmax"] + 1e-10 * g["dtilde"] + 8 * U53 * ref["scale_dt"]
    assert worst <= 1e-10


def test_audit_cases(lib):
    """The audit's cases, exactly: ones(5)/5 on identical vectors at N = 1 (was dtilde 1.46e-8
    > dmax = 0, E 1.97e-8), and near-duplicates at scale 1e3 with gap 1e-4 (was 0.35% off)."""
    x = np.tile([1.0, -2.0, 2.0], (5, 1))
    g = c_row(lib, np.ones(5) / 5, x, [1])[0]
    assert g["dtilde"] == 0 and g["dmax"] == 0 and g["E"] <= 4 * U53 * 3
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal(6) * 1e3
    x = x0 + 1e-4 * rng.standard_normal((5, 6))
    for alpha in (np.ones(5) / 5, softmax(rng.standard_normal(5))):
        for N, g in zip(range(1, 5), c_row(lib, alpha, x, list(range(1, 5)), separability=0)):
            ref = exact_row(alpha, x, N)
            assert abs(g["dtilde"] - ref["dtilde"]) <= 1e-12 * ref["dtilde"], (N, g, ref)
            assert abs(g["E"] - ref["E"]) <= 1e-12 * ref["E"] + 8 * U53 * ref["scale_E"]


def test_degenerate_property(lib):
    """600 seeded rows, vectors identical / near-duplicate / two near-duplicate clusters at
    random scales and gaps, weights random / tied / equal: against the exact references."""
    rng = np.random.default_rng(2024)
    checked = 0
    for it in range(600):
        n = int(rng.integers(2, 7))
        d = int(rng.integers(1, 4))
        scale = 10.0 ** rng.uniform(-4, 7)
        gap = 0.0 if it % 4 == 0 else 10.0 ** rng.uniform(-13, -1)
        x = degenerate_x(rng, n, d, scale, gap)
        if it % 4 == 3 and n >= 3:  # two clusters
            x[1::2] = degenerate_x(rng, len(x[1::2]), d, scale, gap)
        w = it % 3
        alpha = (np.full(n, 1.0 / n) if w == 0 else
                 rng.integers(1, 3, n) / 2.0 if w == 1 else rng.random(n))
        Ns = list(range(1, n))
        for N, g in zip(Ns, c_row(lib, alpha, x, Ns, separability=0)):
            ref = exact_row(alpha, x, N)
            for key, sc in (("dtilde", "scale_dt"), ("E", "scale_E")):
                assert abs(g[key] - ref[key]) <= 1e-10 * ref[key] + 8 * U53 * ref[sc], \
                    (it, n, d, N, key, g[key], ref)
            assert g["dtilde"] <= g["dmax"] + 1e-10 * g["dtilde"] + 8 * U53 * ref["scale_dt"]
            checked += 1
    assert checked > 1500


@pytest.mark.parametrize("gap", [0.0, 1e-9, 1e-5])
@pytest.mark.parametrize("causal", [1, 0])
def test_degenerate_head_exact(lib, gap, causal):
    """A head of near-duplicate vectors (scale 1e3): its means against the means of the exact
    row values; d1 there comes from the head's Gram matrix centred on x_0 (one GEMM), not from
    the vectors row by row."""
    rng = np.random.default_rng(90 + causal)
    L, d = 14, 5
    x = degenerate_x(rng, L, d, 1e3, gap)
    for weights in ("uniform", "ties", "softmax"):
        z = (np.zeros((L, L)) if weights == "uniform" else
             np.round(rng.standard_normal((L, L))) if weights == "ties" else
             rng.standard_normal((L, L)))
        if causal:
            z = np.where(np.tril(np.ones((L, L))) > 0, z, -np.inf)
        w = softmax(z)
        Ns = [1, 3, 6]
        got, _, _ = c_head(lib, w, x, Ns, causal, separability=0)
        for g, N in zip(got, Ns):
            rows = []
            for t in range(L):
                n = t + 1 if causal else L
                if n <= N:
                    continue
                a = w[t, :n]
                ref = exact_row(a, x[:n], N)
                order = sorted(range(n), key=lambda i: (-a[i], i))
                I, notI = order[:N], order[N:]
                b = sum(a[i] for i in notI)
                cf = sum(a[I].sum() - a[i] for i in notI)
                m = max(np.linalg.norm(x[j]) for j in I)
                ref["dmax"] = b * ref["d1"] + cf * m
                ref["scale_dmax"] = (b * ref["scale_d1"] + abs(cf) * m)
                rows.append(ref)
            assert g["rows"] == len(rows)
            for key, sc in (("dtilde", "scale_dt"), ("E", "scale_E"), ("dmax", "scale_dmax")):
                want = np.mean([r[key] for r in rows])
                tol = 1e-10 * want + 8 * U53 * np.mean([r[sc] for r in rows])
                assert abs(g[key] - want) <= tol, (weights, N, key, g[key], want)


def decimal_separability(alpha, x, N):
    """N_s / N of METHOD 5 with the unit vectors and distances in 60-digit decimals, and the
    tie rule of attnlim.h (distances closer than tol = (d + 8) u (sum_I |alpha| + max |alpha|)
    are equal; r <= tol is r = 0). None where a distance is within the band where the library's
    double-precision unit vectors cannot decide (tol/2..2 tol of a tie or of 0). Returns
    (N_s / N, whether r = 0)."""
    ctx = decimal.Context(prec=60)
    n, d = x.shape
    A = [decimal.Decimal(float(v)) for v in alpha]
    U = []
    for r in x:
        xs = [decimal.Decimal(float(v)) for v in r]
        nr = ctx.sqrt(sum(ctx.multiply(v, v) for v in xs))
        U.append([ctx.divide(v, nr) if nr else decimal.Decimal(0) for v in xs])
    order = sorted(range(n), key=lambda i: (-alpha[i], i))
    I = order[:N]
    s = [sum(A[j] * U[j][k] for j in I) for k in range(d)]
    dist = [float(ctx.sqrt(sum((s[k] - A[i] * U[i][k]) ** 2 for k in range(d))))
            for i in range(n)]
    tol = (d + 8) * U53 * (sum(abs(alpha[j]) for j in I) + np.abs(alpha).max())
    r = min(dist[j] for j in range(n) if j not in I)
    if r <= tol / 2:
        return 0.0, True
    if r <= 2 * tol:
        return None, None
    cnt = 0
    for i in I:
        gap = r - dist[i]
        if gap > 4 * tol:
            cnt += 1
        elif gap > 0:
            return None, None
    return cnt / N, False


def test_degenerate_separability(lib):
    """N_s / N on parallel, near-duplicate and random vectors with tied weights against the
    decimal reference (the Gram expansion alone misjudged r ~ 1e-9 as 0 and near-ties)."""
    rng = np.random.default_rng(77)
    checked = zeros = 0
    for it in range(600):
        n = int(rng.integers(2, 10))
        d = int(rng.integers(1, 5))
        x0 = rng.standard_normal(d) * 10.0 ** rng.uniform(-3, 6)
        kind = it % 3
        if kind == 0:  # one direction, several lengths
            x = np.tile(x0, (n, 1)) * rng.uniform(0.5, 2, (n, 1))
        elif kind == 1:
            x = x0 + np.linalg.norm(x0) * 10.0 ** rng.uniform(-12, -2) * \
                rng.standard_normal((n, d))
        else:
            x = rng.standard_normal((n, d))
        alpha = rng.integers(1, 4, n).astype(float) if it % 2 else rng.random(n)
        alpha /= alpha.sum()
        Ns = list(range(1, n))
        for N, g in zip(Ns, c_row(lib, alpha, x, Ns, distance=0)):
            want, rzero = decimal_separability(alpha, x, N)
            if want is None:
                continue
            assert g["ns_ratio"] == want, (it, n, d, N, g["ns_ratio"], want)
            if rzero:  # r = 0: both bounds 0
                assert g["ns_lower"] == 0 and g["ns_upper"] == 0
                zeros += 1
            checked += 1
    assert checked > 2500 and zeros > 100


# ---- one row: al_row_vanishing, al_row_sensitivity ---------------------------------------------

def _row_api(lib):
    dp = ctypes.POINTER(ctypes.c_double)
    lib.al_row_vanishing.argtypes = [dp, ctypes.c_int64, dp, dp, dp, ctypes.POINTER(Err)]
    lib.al_row_sensitivity.argtypes = [dp, ctypes.c_int64, ctypes.POINTER(Norm), dp, ctypes.c_int,
                                       dp, ctypes.c_int, dp, dp, dp, ctypes.POINTER(Err)]
    return _sens_lib(lib)


def c_row_vanishing(lib, a):
    a = np.ascontiguousarray(a, dtype=np.float64)
    out = np.zeros(3)
    err = Err()
    rc = lib.al_row_vanishing(_dp(a), len(a), _dp(out[0:]), _dp(out[1:]), _dp(out[2:]),
                              ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return out


def c_row_sensitivity(lib, z, kind, temps, eps, v):
    z, v = (np.ascontiguousarray(a, dtype=np.float64) for a in (z, v))
    temps = np.ascontiguousarray(temps, dtype=np.float64)
    eps = np.ascontiguousarray(eps, dtype=np.float64)
    fd = np.zeros(len(temps) * max(len(eps), 1))
    spec = np.zeros(len(temps))
    nm = Norm(kind, 3.0, 1.5, 0.43)  # temperature ignored
    err = Err()
    rc = lib.al_row_sensitivity(_dp(z), len(z), ctypes.byref(nm), _dp(temps), len(temps),
                                _dp(eps), len(eps), _dp(v), _dp(fd), _dp(spec), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return fd[:len(temps) * len(eps)].reshape(len(temps), len(eps)), spec


def test_row_vanishing(lib):
    _row_api(lib)
    rng = np.random.default_rng(12)
    for n in (1, 2, 5, 100):
        a = softmax(rng.standard_normal(n) * 3)
        a[0] = 0.0 if n > 2 else a[0]  # a zero term contributes 0
        mx, H, Hn = c_row_vanishing(lib, a)
        pos = a[a > 0]
        assert mx == a.max()
        assert close(H, -np.sum(pos * np.log(pos)), rtol=1e-13, atol=1e-15)
        if n == 1:
            assert np.isnan(Hn)
        else:
            assert close(Hn, H / np.log(n), rtol=1e-15)
    assert close(c_row_vanishing(lib, np.full(8, 1 / 8))[2], 1.0, rtol=1e-14)  # uniform: H = log n
    with pytest.raises(ValueError, match="position 3"):
        c_row_vanishing(lib, [0.1, 0.2, 0.3, np.inf])
    with pytest.raises(ValueError, match="empty"):
        c_row_vanishing(lib, np.zeros(0))


def test_row_vanishing_equals_head_rows(lib):
    _row_api(lib)
    rng = np.random.default_rng(13)
    L = 17
    w = softmax(np.where(np.tril(np.ones((L, L))) > 0, rng.standard_normal((L, L)), -np.inf))
    _, rmax, rent = c_head(lib, w, rng.standard_normal((L, 3)), [1], 1)
    for t in range(L):
        mx, H, _ = c_row_vanishing(lib, w[t, :t + 1])
        assert mx == rmax[t] and H == rent[t]


@pytest.mark.parametrize("kind", [0, 1])  # softmax (fast path), sparsemax (generic path)
def test_row_sensitivity_reference(lib, kind):
    """One row against numpy: the spectral norm of J from eigvalsh, the finite difference from
    numpy's softmax / the sorting sparsemax, in the given (not necessarily unit) direction."""
    _row_api(lib)
    rng = np.random.default_rng(60 + kind)
    temps = np.logspace(-2, 1, 5)
    eps = np.array([1e-3, 0.1, 10.0])
    f = softmax if kind == 0 else sparsemax_ref
    for n in (2, 7, 40):
        z = rng.standard_normal(n) * 2
        v = rng.standard_normal(n) * 0.7
        fd, spec = c_row_sensitivity(lib, z, kind, temps, eps, v)
        for a, T in enumerate(temps):
            p0 = f(z / T)
            if kind == 0:
                J = (np.diag(p0) - np.outer(p0, p0)) / T
            else:
                g = (p0 > 0).astype(float)
                J = (np.diag(g) - np.outer(g, g) / g.sum()) / T
            assert abs(spec[a] - np.abs(np.linalg.eigvalsh(J)).max()) <= 1e-10 * spec[a] + 1e-12 / T
            for e, ep in enumerate(eps):
                want = np.linalg.norm(f((z + ep * v) / T) - p0) / ep
                assert abs(fd[a, e] - want) <= 1e-8 * want + 1e-12 / T, (n, T, ep, fd[a, e], want)


def test_row_sensitivity_ill_conditioned(lib):
    """Softmax finite differences far below float64's rounding of the weights (wide logit gaps,
    small T: one weight ~1, the difference carried by tiny ones) against mpmath at 400 digits:
    every cell to 1e-9 relative or 1e-150 absolute (below, the squares of the norm underflow).
    The difference of two float64 softmaxes loses these cells (the library before session 23
    was 29% off at the first cell it fails); the library computes p0_i (g_i - G) / (1 + G), g = expm1 of
    eps (v - v_top) / T, and the top weight's difference as a sum of small terms."""
    import mpmath  # Debian python3-mpmath (scripts/setup.sh)
    mpmath.mp.dps = 400  # the differences reach 1e-300 of weights ~1
    _row_api(lib)
    rng = np.random.default_rng(64)
    temps = np.array([1e-3, 5e-3, 0.05, 0.5])
    eps = np.array([1e-3, 0.1, 10.0])
    for n, scale in ((5, 8.0), (60, 8.0), (200, 20.0)):
        z = rng.standard_normal(n) * 2.25 * scale
        v = rng.standard_normal(n)
        v /= np.linalg.norm(v)
        fd, _ = c_row_sensitivity(lib, z, 0, temps, eps, v)
        for a, T in enumerate(temps):
            for e, ep in enumerate(eps):
                def sm(x):
                    m = max(x)
                    ex = [mpmath.exp((xi - m) / mpmath.mpf(T)) for xi in x]
                    s = mpmath.fsum(ex)
                    return [q / s for q in ex]
                zz = [mpmath.mpf(float(q)) for q in z]
                zp = [zz[i] + mpmath.mpf(float(ep)) * mpmath.mpf(float(v[i])) for i in range(n)]
                p0, p1 = sm(zz), sm(zp)
                want = float(mpmath.sqrt(mpmath.fsum((p1[i] - p0[i]) ** 2 for i in range(n)))
                             / mpmath.mpf(float(ep)))
                assert abs(fd[a, e] - want) <= 1e-9 * want + 1e-150, (n, T, ep, fd[a, e], want)


@pytest.mark.parametrize("causal", [1, 0])
def test_row_sensitivity_equals_head(lib, causal):
    """al_head_sensitivity's means are the sequential means of al_row_sensitivity over the rows
    with n >= 2, each in its al_sensitivity_direction: bit for bit."""
    _row_api(lib)
    rng = np.random.default_rng(70 + causal)
    L = 15
    z = rng.standard_normal((L, L)) * 2
    temps = np.array([0.05, 1.0, 4.0])
    eps = np.array([1e-3, 1.0])
    for kind in (0, 1):
        fd, spec = c_sensitivity(lib, z, causal, kind, temps, eps, 3, 4, 5)
        sfd, sspec, rows = np.zeros((3, 2)), np.zeros(3), 0
        for t in range(L):
            n = t + 1 if causal else L
            if n < 2:
                continue
            rfd, rspec = c_row_sensitivity(lib, z[t, :n], kind, temps, eps,
                                           direction(lib, 3, 4, 5, t, n))
            sfd += rfd
            sspec += rspec
            rows += 1
        assert np.array_equal(fd, sfd / rows) and np.array_equal(spec, sspec / rows)


def test_row_sensitivity_bad_input(lib):
    _row_api(lib)
    v = np.ones(3) / np.sqrt(3)
    with pytest.raises(ValueError, match="logits.*position 1"):
        c_row_sensitivity(lib, [0.0, np.nan, 1.0], 0, [1.0], [0.1], v)
    with pytest.raises(ValueError, match="direction.*position 2"):
        c_row_sensitivity(lib, [0.0, 1.0, 1.0], 0, [1.0], [0.1], [1.0, 0.0, np.inf])
    with pytest.raises(ValueError, match="temperature"):
        c_row_sensitivity(lib, [0.0, 1.0, 1.0], 0, [0.0], [0.1], v)
    with pytest.raises(ValueError, match="eps"):
        c_row_sensitivity(lib, [0.0, 1.0, 1.0], 0, [1.0], [-1.0], v)
    with pytest.raises(ValueError, match="row length"):
        c_row_sensitivity(lib, np.zeros(0), 0, [1.0], [0.1], np.zeros(0))


def test_row_metrics_equal_head_rows(lib):
    """al_head_metrics' means equal the means of al_row_metrics over the head's rows (n > N)."""
    rng = np.random.default_rng(14)
    L, d = 20, 4
    x = rng.standard_normal((L, d))
    for causal in (1, 0):
        z = rng.standard_normal((L, L)) * 2
        if causal:
            z = np.where(np.tril(np.ones((L, L))) > 0, z, -np.inf)
        w = softmax(z)
        Ns = [1, 3, 7]
        got, _, _ = c_head(lib, w, x, Ns, causal)
        for k, N in enumerate(Ns):
            rows = [c_row(lib, w[t, :(t + 1 if causal else L)], x[:(t + 1 if causal else L)], [N])[0]
                    for t in range(L) if (t + 1 if causal else L) > N]
            assert got[k]["rows"] == len(rows)
            for key in KEYS:
                assert close(got[k][key], np.mean([r[key] for r in rows]), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["random", "alternating"])
def test_wide_head_blocks_equal_rows(lib, kind):
    """Wide heads of L = 400 (d > L / 3 causal, L / 2 not): x_i . S_t by blocks of 288 rows from
    the Gram matrix or (second block: where S_t cancelled in the first, "alternating", or where
    n > 2d, d = 140) from S = W X, the triangles shifted to the block's first row, against
    al_row_metrics (S_t from the vectors, tested against the fp64 reference above), row by row."""
    rng = np.random.default_rng(15)
    L = 400
    for causal, d in ((1, 210), (1, 140), (0, 210)):
        w, x = wide_case(kind, L, d, rng)
        if causal:
            w = np.tril(w)
        w /= w.sum(1, keepdims=True)
        Ns = [1, 5, 40]
        got, _, _ = c_head(lib, w, x, Ns, causal, separability=0)
        for k, N in enumerate(Ns):
            n_of = [t + 1 if causal else L for t in range(L)]
            rows = [c_row(lib, w[t, :n_of[t]], x[:n_of[t]], [N], separability=0)[0]
                    for t in range(L) if n_of[t] > N]
            assert got[k]["rows"] == len(rows)
            for key in ("dtilde", "dmax", "E"):
                assert close(got[k][key], np.mean([r[key] for r in rows]), rtol=1e-12, atol=1e-14)


# ---- heads ----------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [1, 0])
@pytest.mark.parametrize("seed", range(3))
def test_head_against_reference(lib, causal, seed):
    rng = np.random.default_rng(1000 + seed)
    L, d = 24, int(rng.integers(2, 7))
    x = rng.standard_normal((L, d))
    z = rng.standard_normal((L, L)) * 2
    if seed == 2:
        z = np.round(z)  # many ties
    if causal:
        z = np.where(np.tril(np.ones((L, L))) > 0, z, -np.inf)
    w = softmax(z)
    if causal:  # garbage above the diagonal must never be read
        w = w + np.triu(np.full((L, L), 7.0), 1)
    Ns = [5, 1, 2, 3, 8, 16, 23, 24, 40]
    got, rmax, rent = c_head(lib, w, x, Ns, causal)
    ref = ref_head(w, x, Ns, causal)
    for N, g, r in zip(Ns, got, ref):
        assert g["rows"] == r["rows"], (N, g["rows"], r["rows"])
        for k in KEYS:
            if r["rows"] == 0:
                assert np.isnan(g[k])
            else:
                assert close(g[k], r[k], rtol=1e-9, atol=1e-11), (N, k, g[k], r[k])
    for t in range(L):
        n = t + 1 if causal else L
        a = w[t, :n]
        assert close(rmax[t], a.max())
        assert close(rent[t], -np.sum(a[a > 0] * np.log(a[a > 0])), atol=1e-12)


def wide_case(kind, L, d, rng):
    """Weights w [L, L] and vectors x [L, d] of one head for test_head_wide_vectors."""
    v = rng.standard_normal(d)
    if kind == "random":
        x = rng.standard_normal((L, d)) + 0.3 * v  # a shared direction, as in hidden states
        return softmax(rng.standard_normal((L, L)) * 2), x
    sign = np.where(np.arange(L) % 2 == 0, 1.0, -1.0)[:, None]
    if kind == "alternating":  # x_j = +-v, equal weights: S_t is (nearly) 0, sum |w| |x| is not
        return np.ones((L, L)), sign * v + 1e-9 * rng.standard_normal((L, d))
    # "sink": keys 0 and 1 (+v, -v) hold the weight, S_t = (e0 + e1) / 2 is 1e-7 of them (w G
    # w^T gives |S_t|^2 only to ~1e-2 here); the others have weight 0 and E terms cc |S_t|
    x = rng.standard_normal((L, d))
    x[:2] = sign[:2] * v + 1e-7 * rng.standard_normal((2, d))
    w = np.zeros((L, L))
    w[:, :2] = 0.5
    return w, x


@pytest.mark.parametrize("causal", [1, 0])
@pytest.mark.parametrize("kind", ["random", "alternating", "sink"])
def test_head_wide_vectors(lib, causal, kind):
    """d > L / 3 (causal; L / 2 not): x_i . S_t and |S_t|^2 from the Gram matrix (tril(W) G),
    whose absolute error ~ gamma (sum_j |w_tj| |x_j|)^2 is no longer relative to |S_t|^2: rows
    where S_t cancels ("alternating": the rows of even n; "sink": every row past the first) take
    S_t from the vectors. Against the fp64 reference."""
    rng = np.random.default_rng({"random": 7, "alternating": 8, "sink": 9}[kind] + 10 * causal)
    L, d = 24, 16
    w, x = wide_case(kind, L, d, rng)
    if causal:
        w = np.tril(w)
        w /= w.sum(1, keepdims=True)
        w = w + np.triu(np.full((L, L), 7.0), 1)  # never read
    else:
        w /= w.sum(1, keepdims=True)
    Ns = [1, 2, 3, 5, 8, 16, 23]
    # +-v's unit vectors tie to 1e-9 in the separability (test_degenerate_separability's exact
    # references cover those): the distance alone there
    sep = kind == "random"
    got, _, _ = c_head(lib, w, x, Ns, causal, separability=int(sep))
    ref = ref_head(w, x, Ns, causal)
    for N, g, r in zip(Ns, got, ref):
        assert g["rows"] == r["rows"], (N, g["rows"], r["rows"])
        for k in KEYS if sep else ("dtilde", "dmax", "E"):
            assert close(g[k], r[k], rtol=1e-9, atol=1e-11), (N, k, g[k], r[k])


@pytest.mark.parametrize("d", [3, 12])  # N < d: Monte-Carlo via Gram rows; N >= d: directly
def test_head_monte_carlo_against_exact_expectation(lib, d):
    rng = np.random.default_rng(50 + d)
    L, N = 9, 4
    x = rng.standard_normal((L, d))
    z = np.where(np.tril(np.ones((L, L))) > 0, rng.standard_normal((L, L)), -np.inf)
    w = softmax(z)
    exact = []
    for t in range(N, L):  # rows with n = t + 1 > N
        n = t + 1
        a = w[t, :n]
        vals = []
        for I in itertools.combinations(range(n), N):
            s = sum(a[i] * x[i] for i in I)
            vals.append(sum(np.linalg.norm(a[i] * x[i] - s) for i in range(n) if i not in I))
        exact.append(np.mean(vals))
    got, _, _ = c_head(lib, w, x, [N], 1, mc=3000, seed=5, separability=0)
    g = got[0]
    assert g["rows"] == L - N
    assert abs(g["E_mc"] - np.mean(exact)) <= 4.5 * g["E_mc_se"], (g["E_mc"], np.mean(exact))
    assert g["E_mc"] >= g["E"] - 4 * g["E_mc_se"]


def test_head_flags_and_nan(lib):
    rng = np.random.default_rng(5)
    L, d = 10, 3
    x = rng.standard_normal((L, d))
    w = softmax(rng.standard_normal((L, L)))
    only_d, _, _ = c_head(lib, w, x, [2], 0, separability=0)
    only_s, _, _ = c_head(lib, w, x, [2], 0, distance=0)
    both, _, _ = c_head(lib, w, x, [2], 0)
    assert np.isnan(only_d[0]["ns_ratio"]) and np.isnan(only_s[0]["dtilde"])
    assert only_d[0]["dtilde"] == both[0]["dtilde"] and only_s[0]["ns_ratio"] == both[0]["ns_ratio"]
    w[4, 7] = np.nan
    with pytest.raises(ValueError, match="row 4, column 7"):
        c_head(lib, w, x, [2], 0)
    # causal: the NaN above the diagonal is never read
    c_head(lib, w, x, [2], 1)


def test_vanishing_D(lib):
    rng = np.random.default_rng(9)
    L, dh = 12, 8
    q = rng.standard_normal((L, dh))
    k = rng.standard_normal((L, dh)) * np.linspace(0.1, 3, L)[:, None]
    for causal in (1, 0):
        D = np.zeros(L)
        err = Err()
        assert lib.al_head_vanishing_D(_dp(q), _dp(k), L, dh, causal, _dp(D), ctypes.byref(err)) == 0
        kn = np.linalg.norm(k, axis=1)
        for t in range(L):
            km = kn[:t + 1].max() if causal else kn.max()
            assert close(D[t], np.linalg.norm(q[t]) * km / np.sqrt(dh))


# ---- CLI --------------------------------------------------------------------------------------

def run_cli(*args):
    assert BIN, "ATTNLIM_BIN is not set (run through ctest, or export it)"
    return subprocess.run([BIN, "metrics", *args], capture_output=True, text=True, timeout=60)


def test_cli_head_json(tmp_path):
    rng = np.random.default_rng(21)
    L, d = 16, 4
    x = rng.standard_normal((L, d))
    z = np.where(np.tril(np.ones((L, L))) > 0, rng.standard_normal((L, L)), -np.inf)
    w = softmax(z)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    p = run_cli("--weights", str(tmp_path / "w.npy"), "--vectors", str(tmp_path / "x.npy"),
                "--top-n", "1,4,8", "--causal", "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    x32 = x.astype(np.float32).astype(np.float64)
    ref = ref_head(w, x32, [1, 4, 8], True)
    assert [e["N"] for e in j["results"]] == [1, 4, 8]
    for e, r in zip(j["results"], ref):
        assert set(e) >= {"N", "dtilde", "dmax", "E", "E_mc", "ns_ratio", "ns_lower", "ns_upper"}
        for k in KEYS:
            assert close(e[k], r[k], rtol=1e-9), (k, e[k], r[k])
    rows = range(L)
    assert close(j["max_weight"], np.mean([w[t, :t + 1].max() for t in rows]))
    ent = [-np.sum(w[t, :t + 1] * np.log(w[t, :t + 1])) for t in rows]
    assert close(j["entropy"], np.mean(ent))
    assert close(j["normalized_entropy"], np.mean([ent[t] / np.log(t + 1) for t in range(1, L)]))
    p = run_cli("--weights", str(tmp_path / "w.npy"), "--vectors", str(tmp_path / "x.npy"),
                "--top-n", "2", "--causal", "--per-row", "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert len(j["rows"]) == L
    r5 = ref_row(w[5, :6], x32[:6], 2)
    e5 = j["rows"][5]["results"][0]
    assert close(e5["dtilde"], r5["dtilde"]) and close(j["rows"][5]["max_weight"], w[5, :6].max())
    assert j["rows"][1]["results"][0]["dtilde"] is None  # n = 2 <= N


def test_cli_row_and_mc(tmp_path):
    rng = np.random.default_rng(22)
    n, d = 12, 3
    a = softmax(rng.standard_normal(n))
    x = rng.standard_normal((n, d))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "x.npy", x)
    p = run_cli("--weights", str(tmp_path / "a.npy"), "--vectors", str(tmp_path / "x.npy"),
                "--top-n", "3", "--mc", "200", "--seed", "4", "--json")
    assert p.returncode == 0, p.stderr
    e = json.loads(p.stdout)["results"][0]
    r = ref_row(a, x, 3)
    assert close(e["dtilde"], r["dtilde"]) and e["E_mc"] is not None
    assert e["E_mc"] >= e["E"] - 4 * e["E_mc_se"]


def test_cli_bad_input(tmp_path):
    np.save(tmp_path / "w.npy", np.ones((4, 4)) / 4)
    np.save(tmp_path / "x3.npy", np.ones((3, 2)))
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    w, x3, bad = (str(tmp_path / f) for f in ("w.npy", "x3.npy", "bad.npy"))
    p = run_cli("--weights", w, "--vectors", x3, "--top-n", "1")
    assert p.returncode != 0 and "x3.npy" in p.stderr
    p = run_cli("--weights", bad, "--vectors", x3, "--top-n", "1")
    assert p.returncode != 0 and "bad.npy" in p.stderr
    p = run_cli("--weights", w, "--vectors", x3)
    assert p.returncode == 2 and "--top-n" in p.stderr
    p = run_cli("--weights", w, "--vectors", x3, "--top-n", "0")
    assert p.returncode != 0
    p = run_cli("--help")
    assert p.returncode == 0 and "--top-n" in p.stdout
    np.save(tmp_path / "x4.npy", np.array([[1.0, np.nan]] * 4))
    p = run_cli("--weights", w, "--vectors", str(tmp_path / "x4.npy"), "--top-n", "1")
    # the reader or the metrics reject it, naming the file and the position
    assert p.returncode != 0 and "x4.npy" in p.stderr
    assert "row 0, column 1" in p.stderr or "element 1" in p.stderr, p.stderr


# ---- Algorithm 5 (METHOD section 6) -----------------------------------------------------------

class Norm(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("temperature", ctypes.c_double),
                ("alpha", ctypes.c_double), ("ssmax_s", ctypes.c_double)]


def _sens_lib(lib):
    lib.al_head_sensitivity.argtypes = [
        dp_, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(Norm), dp_, ctypes.c_int, dp_,
        ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, dp_, dp_, ctypes.POINTER(Err)]
    lib.al_sensitivity_direction.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                             ctypes.c_int64, ctypes.c_int64, dp_]
    return lib


dp_ = ctypes.POINTER(ctypes.c_double)


def c_sensitivity(lib, z, causal, kind, temps, eps, seed, layer, head):
    z = np.ascontiguousarray(z, dtype=np.float64)
    temps = np.ascontiguousarray(temps, dtype=np.float64)
    eps = np.ascontiguousarray(eps, dtype=np.float64)
    fd = np.zeros(len(temps) * len(eps))
    spec = np.zeros(len(temps))
    nm = Norm(kind, 1.0, 1.5, 0.43)
    err = Err()
    rc = lib.al_head_sensitivity(_dp(z), z.shape[0], causal, ctypes.byref(nm), _dp(temps),
                                 len(temps), _dp(eps), len(eps), seed, layer, head, _dp(fd),
                                 _dp(spec), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return fd.reshape(len(temps), len(eps)), spec


def direction(lib, seed, layer, head, row, n):
    v = np.zeros(n)
    assert lib.al_sensitivity_direction(seed, layer, head, row, n, _dp(v)) == 0
    return v


def sparsemax_ref(z):
    """Euclidean projection onto the simplex by sorting (Held et al. / Michelot)."""
    u = np.sort(z)[::-1]
    css = np.cumsum(u)
    k = np.arange(1, len(z) + 1)
    rho = k[u - (css - 1) / k > 0][-1]
    tau = (css[rho - 1] - 1) / rho
    return np.maximum(z - tau, 0)


def ref_row_sensitivity(zt, v, f, kind, temps, eps, spec, fd):
    """Adds one row's |J|_2 (the exact Jacobian of softmax / sparsemax at T) to spec[a] and its
    finite-difference quotients along v to fd[a, e]."""
    for a, T in enumerate(temps):
        p0 = f(zt / T)
        if kind == 0:
            J = (np.diag(p0) - np.outer(p0, p0)) / T
        else:
            g = (p0 > 0).astype(float)
            J = (np.diag(g) - np.outer(g, g) / g.sum()) / T
        spec[a] += np.abs(np.linalg.eigvalsh(J)).max()
        for e, ep in enumerate(eps):
            fd[a, e] += np.linalg.norm(f((zt + ep * v) / T) - p0) / ep


def ref_sensitivity(lib, z, causal, kind, temps, eps, seed, layer, head):
    L = z.shape[0]
    fd = np.zeros((len(temps), len(eps)))
    spec = np.zeros(len(temps))
    rows = 0
    for t in range(L):
        n = t + 1 if causal else L
        if n < 2:
            continue
        rows += 1
        zt = z[t, :n]
        v = direction(lib, seed, layer, head, t, n)
        f = softmax if kind == 0 else sparsemax_ref
        ref_row_sensitivity(zt, v, f, kind, temps, eps, spec, fd)
    return fd / rows, spec / rows


@pytest.mark.parametrize("causal", [1, 0])
@pytest.mark.parametrize("kind", [0, 1])  # softmax (fast path), sparsemax (generic path)
def test_sensitivity_against_reference(lib, causal, kind):
    _sens_lib(lib)
    rng = np.random.default_rng(40 + causal + 2 * kind)
    L = 20
    z = rng.standard_normal((L, L)) * 2
    if causal:
        z = np.where(np.tril(np.ones((L, L))) > 0, z, np.inf)  # never read
    temps = np.logspace(-3, 1, 7)
    eps = np.array([1e-3, 1e-1, 10.0])
    fd, spec = c_sensitivity(lib, z, causal, kind, temps, eps, 5, 3, 7)
    rfd, rspec = ref_sensitivity(lib, z, causal, kind, temps, eps, 5, 3, 7)
    # J's natural scale is 1/T; the dense reference forms p_i - p_i^2 with cancellation, so
    # values far below 1/T (nearly one-hot rows at small T) are compared to 1e-12/T
    assert np.allclose(spec, rspec, rtol=1e-10, atol=0) or \
        np.all(np.abs(spec - rspec) <= 1e-10 * rspec + 1e-12 / temps), (spec, rspec)
    assert np.all(np.abs(fd - rfd) <= 1e-8 * rfd + 1e-12 / temps[:, None]), (fd, rfd)


def test_sensitivity_directions(lib):
    _sens_lib(lib)
    v = direction(lib, 1, 2, 3, 4, 50)
    assert abs(np.linalg.norm(v) - 1) < 1e-14
    assert not np.allclose(v, direction(lib, 1, 2, 3, 5, 50))  # another row
    assert not np.allclose(v, direction(lib, 1, 2, 4, 4, 50))  # another head
    assert np.array_equal(v, direction(lib, 1, 2, 3, 4, 50))  # seeded
    # uniform on the sphere: E[v_i^2] = 1/n, E[v_i] = 0 (over many rows)
    vs = np.stack([direction(lib, 9, 0, 0, r, 8) for r in range(4000)])
    assert abs(np.mean(vs[:, 0] ** 2) - 1 / 8) < 0.01 and abs(np.mean(vs[:, 3])) < 0.02
