"""METHOD's per-head functions on rows of a causal sliding window (Mistral, Gemma 2): row t sees
keys lo..t, lo = max(0, t - window + 1), n = min(t + 1, window). Against numpy float64 straight
loops written here from METHOD's formulas over each row's own keys (test_metrics.ref_row, the
brute-force row reference, applied to w[t, lo:t+1] and x[lo:t+1]); the entries outside the window
are NaN in the inputs, so the functions must never read them."""
import ctypes

import numpy as np
import pytest

from test_metrics import (KEYS, LIB_PATH, Err, Norm, Stats, close, direction, lib, ref_row,  # noqa: F401
                          ref_row_sensitivity,
                          softmax, sparsemax_ref)

dp = ctypes.POINTER(ctypes.c_double)


class WOpts(ctypes.Structure):  # al_metrics_opts with its window
    _fields_ = [("top_n", ctypes.POINTER(ctypes.c_int)), ("n_top", ctypes.c_int),
                ("distance", ctypes.c_int), ("separability", ctypes.c_int),
                ("mc_samples", ctypes.c_int), ("mc_seed", ctypes.c_uint64),
                ("causal", ctypes.c_int), ("window", ctypes.c_int)]


class SensOpts(ctypes.Structure):  # al_sens_opts
    _fields_ = [("logit_scale", ctypes.c_double), ("fresh", ctypes.c_int), ("window", ctypes.c_int)]


def _p(a):
    return a.ctypes.data_as(dp)


def lo_of(t, W):
    return max(0, t - W + 1) if W else 0


def windowed(L, W, rng, fill=np.nan):
    """Softmax rows over each row's window; NaN (never read) elsewhere."""
    z = rng.standard_normal((L, L)) * 1.5
    w = np.full((L, L), fill)
    for t in range(L):
        lo = lo_of(t, W)
        w[t, lo:t + 1] = softmax(z[t, lo:t + 1])
    return z, w


def c_head(lib, w, x, Ns, W):
    lib.al_head_metrics.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(WOpts),
                                    ctypes.POINTER(Stats), dp, dp, ctypes.POINTER(Err)]
    arr = (ctypes.c_int * len(Ns))(*Ns)
    o = WOpts(arr, len(Ns), 1, 1, 0, 0, 1, W)
    out = (Stats * len(Ns))()
    L = w.shape[0]
    rmax, rent = np.zeros(L), np.zeros(L)
    err = Err()
    w = np.ascontiguousarray(w)
    x = np.ascontiguousarray(x)
    rc = lib.al_head_metrics(_p(w), _p(x), L, x.shape[1], ctypes.byref(o), out, _p(rmax), _p(rent),
                             ctypes.byref(err))
    assert rc == 0, err.msg.decode()
    return out, rmax, rent


@pytest.mark.parametrize("L,W", [(24, 5), (30, 8), (20, 1), (16, 16), (12, 40)])
def test_head_metrics_windowed(lib, L, W):
    rng = np.random.default_rng(L * 100 + W)
    _, w = windowed(L, W, rng)
    x = rng.standard_normal((L, 6))
    Ns = [1, 2, 4]
    out, rmax, rent = c_head(lib, w, x, Ns, W)
    for k, N in enumerate(Ns):
        rows = []
        for t in range(L):
            lo = lo_of(t, W)
            if t + 1 - lo > N:
                rows.append(ref_row(w[t, lo:t + 1], x[lo:t + 1], N))
        assert out[k].rows == len(rows)
        for key in KEYS:
            ref = np.mean([r[key] for r in rows]) if rows else np.nan
            got = getattr(out[k], key)
            assert (np.isnan(ref) and np.isnan(got)) or close(got, ref), (N, key, got, ref)
    for t in range(L):
        a = w[t, lo_of(t, W):t + 1]
        assert close(rmax[t], a.max())
        assert close(rent[t], -np.sum(a * np.log(a)))


def test_head_metrics_window_zero_and_long_are_causal(lib):
    """window 0 and window >= L: the causal head exactly (the same numbers, bit for bit)."""
    rng = np.random.default_rng(3)
    L = 20
    _, w = windowed(L, 0, rng, fill=0.0)
    x = rng.standard_normal((L, 4))
    a, _, _ = c_head(lib, w, x, [1, 3], 0)
    b, _, _ = c_head(lib, w, x, [1, 3], L)
    for k in range(2):
        for key in KEYS:
            assert getattr(a[k], key) == getattr(b[k], key)


def test_vanishing_D_window(lib):
    lib.al_head_vanishing_D_window.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                               ctypes.c_int, dp, ctypes.POINTER(Err)]
    rng = np.random.default_rng(9)
    L, dh = 15, 8
    q = rng.standard_normal((L, dh))
    k = rng.standard_normal((L, dh)) * np.linspace(3, 0.1, L)[:, None]  # early keys largest
    for W in (0, 1, 4, 15, 30):
        D = np.zeros(L)
        err = Err()
        assert lib.al_head_vanishing_D_window(_p(q), _p(k), L, dh, 1, W, _p(D), ctypes.byref(err)) == 0
        for t in range(L):
            km = max(np.linalg.norm(k[j]) for j in range(lo_of(t, W), t + 1))
            assert close(D[t], np.linalg.norm(q[t]) * km / np.sqrt(dh)), (W, t)
    err = Err()
    assert lib.al_head_vanishing_D_window(_p(q), _p(k), L, dh, 1, -1, _p(D), ctypes.byref(err)) != 0
    assert b"window -1" in err.msg


@pytest.mark.parametrize("kind", [0, 1])  # softmax (fast path), sparsemax (generic path)
def test_sensitivity_windowed(lib, kind):
    lib.al_head_sensitivity_ex.argtypes = [
        dp, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(Norm), dp, ctypes.c_int, dp, ctypes.c_int,
        ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.POINTER(SensOpts), dp, dp, ctypes.POINTER(Err)]
    lib.al_sensitivity_direction.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                             ctypes.c_int64, ctypes.c_int64, dp]
    rng = np.random.default_rng(70 + kind)
    L, W = 22, 6
    z = rng.standard_normal((L, L)) * 2
    for t in range(L):  # outside the window: never read
        z[t, :lo_of(t, W)] = np.nan
        z[t, t + 1:] = np.nan
    temps = np.logspace(-2, 1, 5)
    eps = np.array([1e-3, 0.1, 10.0])
    fd = np.zeros(len(temps) * len(eps))
    spec = np.zeros(len(temps))
    nm = Norm(kind, 1.0, 1.5, 0.43)
    so = SensOpts(1.0, 0, W)
    err = Err()
    rc = lib.al_head_sensitivity_ex(_p(z), L, 1, ctypes.byref(nm), _p(temps), len(temps), _p(eps), len(eps),
                                    5, 2, 3, ctypes.byref(so), _p(fd), _p(spec), ctypes.byref(err))
    assert rc == 0, err.msg.decode()
    f = softmax if kind == 0 else sparsemax_ref
    rfd = np.zeros((len(temps), len(eps)))
    rspec = np.zeros(len(temps))
    rows = 0
    for t in range(1, L):
        zt = z[t, lo_of(t, W):t + 1]
        v = direction(lib, 5, 2, 3, t, len(zt))
        rows += 1
        ref_row_sensitivity(zt, v, f, kind, temps, eps, rspec, rfd)
    rfd /= rows
    rspec /= rows
    assert np.all(np.abs(spec - rspec) <= 1e-10 * rspec + 1e-12 / temps), (spec, rspec)
    assert np.all(np.abs(fd.reshape(rfd.shape) - rfd) <= 1e-8 * rfd + 1e-12 / temps[:, None])


def test_head_reading_windowed(lib):
    """al_head_reading's vector readings (norm-of-sum: || r - s ||) over each row's window."""
    class ROpts(ctypes.Structure):
        _fields_ = [("distance", ctypes.c_int), ("top_n", ctypes.POINTER(ctypes.c_int)), ("n_top", ctypes.c_int),
                    ("mc_samples", ctypes.c_int), ("mc_seed", ctypes.c_uint64), ("exact", ctypes.c_int),
                    ("exact_max", ctypes.c_int64), ("causal", ctypes.c_int), ("window", ctypes.c_int)]

    class RStats(ctypes.Structure):
        _fields_ = [("N", ctypes.c_int), ("rows", ctypes.c_int64)] + [
            (k, ctypes.c_double) for k in ("dist", "analytic", "mc", "mc_se", "exact")]

    lib.al_head_reading.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ROpts),
                                    ctypes.POINTER(RStats), ctypes.POINTER(Err)]
    rng = np.random.default_rng(5)
    L, W = 18, 5
    _, w = windowed(L, W, rng)
    x = rng.standard_normal((L, 3))
    Ns = [1, 2]
    arr = (ctypes.c_int * 2)(*Ns)
    o = ROpts(1, arr, 2, 0, 0, 1, 0, 1, W)
    out = (RStats * 2)()
    err = Err()
    assert lib.al_head_reading(_p(w), _p(x), L, 3, ctypes.byref(o), out, ctypes.byref(err)) == 0, err.msg
    import itertools
    for k, N in enumerate(Ns):
        dist, ex = [], []
        for t in range(L):
            lo = lo_of(t, W)
            a, xs = w[t, lo:t + 1], x[lo:t + 1]
            n = len(a)
            if n <= N:
                continue
            I = sorted(range(n), key=lambda i: (-a[i], i))[:N]
            s = sum(a[i] * xs[i] for i in I)
            r = sum(a[i] * xs[i] for i in range(n) if i not in I)
            dist.append(np.linalg.norm(r - s))
            subs = list(itertools.combinations(range(n), N))
            tot = 0.0
            for S in subs:
                ss = sum(a[i] * xs[i] for i in S)
                rr = sum(a[i] * xs[i] for i in range(n) if i not in S)
                tot += np.linalg.norm(rr - ss)
            ex.append(tot / len(subs))
        assert out[k].rows == len(dist)
        assert close(out[k].dist, np.mean(dist)) and close(out[k].exact, np.mean(ex))
