"""The readings of METHOD section 9 (al_row_reading, al_head_reading, al_exact_check,
al_critical_grid, al_head_sensitivity_ex) against float64 numpy straight loops written here from
METHOD's formulas: full sort for the top-N, explicit sums, every N-subset enumerated with
itertools for the exact expectation; constructed rows with closed forms (N = n - 1, uniform
weights, one dominant weight, identical vectors); Jensen (analytic <= exact) and the Monte-Carlo
estimate within 4 standard errors of the exact expectation."""
import ctypes
import itertools
import math
import os

import numpy as np
import pytest

LIB_PATH = os.environ.get("ATTNLIM_LIB")
KINDS = {"sum-of-norms": 0, "norm-of-sum": 1, "sum-vector": 2}


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class ROpts(ctypes.Structure):
    _fields_ = [("distance", ctypes.c_int), ("top_n", ctypes.POINTER(ctypes.c_int)),
                ("n_top", ctypes.c_int), ("mc_samples", ctypes.c_int),
                ("mc_seed", ctypes.c_uint64), ("exact", ctypes.c_int),
                ("exact_max", ctypes.c_int64), ("causal", ctypes.c_int)]


class RStats(ctypes.Structure):
    _fields_ = [("N", ctypes.c_int), ("rows", ctypes.c_int64)] + [
        (k, ctypes.c_double) for k in ("dist", "analytic", "mc", "mc_se", "exact")]


class Norm(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("temperature", ctypes.c_double),
                ("alpha", ctypes.c_double), ("ssmax_s", ctypes.c_double)]


class SOpts(ctypes.Structure):
    _fields_ = [("logit_scale", ctypes.c_double), ("fresh", ctypes.c_int)]


dp = ctypes.POINTER(ctypes.c_double)


@pytest.fixture(scope="module")
def lib():
    assert LIB_PATH, "ATTNLIM_LIB is not set (run through ctest, or export it)"
    L = ctypes.CDLL(LIB_PATH)
    for f in ("al_row_reading", "al_head_reading"):
        getattr(L, f).argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ROpts),
                                  ctypes.POINTER(RStats), ctypes.POINTER(Err)]
    L.al_exact_check.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                 ctypes.c_int64, ctypes.POINTER(Err)]
    L.al_binomial.argtypes = [ctypes.c_int64, ctypes.c_int64]
    L.al_binomial.restype = ctypes.c_double
    L.al_critical_grid.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    L.al_distance_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                    ctypes.POINTER(Err)]
    L.al_expect_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                  ctypes.POINTER(Err)]
    L.al_sensitivity_direction.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int64, ctypes.c_int64, dp]
    L.al_sensitivity_direction_fresh.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                                 ctypes.c_int64, ctypes.c_int, ctypes.c_int,
                                                 ctypes.c_int64, dp]
    hs = [dp, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(Norm), dp, ctypes.c_int, dp,
          ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
    L.al_head_sensitivity.argtypes = hs + [dp, dp, ctypes.POINTER(Err)]
    L.al_head_sensitivity_ex.argtypes = hs + [ctypes.POINTER(SOpts), dp, dp, ctypes.POINTER(Err)]
    return L


def _p(a):
    return a.ctypes.data_as(dp)


def c_reading(lib, w, x, Ns, kind, head=False, causal=0, mc=0, seed=7, exact=0, exact_max=0):
    w = np.ascontiguousarray(w, dtype=np.float64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    arr = (ctypes.c_int * len(Ns))(*Ns)
    o = ROpts(KINDS[kind], arr, len(Ns), mc, seed, exact, exact_max, causal)
    out = (RStats * len(Ns))()
    err = Err()
    f = lib.al_head_reading if head else lib.al_row_reading
    rc = f(_p(w), _p(x), x.shape[0], x.shape[1], ctypes.byref(o), out, ctypes.byref(err))
    if rc:
        raise RuntimeError(err.msg.decode())
    return [{k: getattr(s, k) for k in ("N", "rows", "dist", "analytic", "mc", "mc_se", "exact")}
            for s in out]


# ---- the float64 references (straight loops from METHOD) ------------------------------------

def ref_topn(a, N):
    order = sorted(range(len(a)), key=lambda i: (-a[i], i))
    return set(order[:N])


def ref_dist(kind, a, x, I):
    n, d = x.shape
    s = np.zeros(d)
    for j in I:
        s += a[j] * x[j]
    out = [i for i in range(n) if i not in I]
    if kind == "sum-of-norms":
        return sum(np.linalg.norm(a[i] * x[i] - s) for i in out)
    if kind == "norm-of-sum":
        r = np.zeros(d)
        for i in out:
            r += a[i] * x[i]
        return np.linalg.norm(r - s)
    v = np.zeros(d)
    for i in out:
        v += a[i] * x[i] - s
    return np.linalg.norm(v)


def ref_vec(kind, a, x, I):
    """The vector whose norm is the distance (vector readings only)."""
    n, d = x.shape
    s = sum((a[j] * x[j] for j in I), np.zeros(d))
    out = [i for i in range(n) if i not in I]
    if kind == "norm-of-sum":
        return sum((a[i] * x[i] for i in out), np.zeros(d)) - s
    return sum((a[i] * x[i] - s for i in out), np.zeros(d))


def ref_exact(kind, a, x, N):
    n = len(a)
    vals = [ref_dist(kind, a, x, set(I)) for I in itertools.combinations(range(n), N)]
    return float(np.mean(vals))


def ref_analytic(kind, a, x, N):
    n, d = x.shape
    if kind == "sum-of-norms":  # METHOD section 3's main term, as a straight loop
        tot = 0.0
        for i in range(n):
            o = sum((a[j] * x[j] for j in range(n) if j != i), np.zeros(d))
            tot += np.linalg.norm(a[i] * x[i] - (N / (n - 1)) * o)
        return (n - N) / n * tot
    # the norm of the exact mean vector over every subset (linear in the indicators)
    vs = [ref_vec(kind, a, x, set(I)) for I in itertools.combinations(range(n), N)]
    return float(np.linalg.norm(np.mean(vs, axis=0)))


def _close(a, b, scale, rel=1e-11):
    assert abs(a - b) <= rel * max(scale, 1e-300), (a, b)


def _scale(a, x):
    return float(np.sum(np.abs(a) * np.linalg.norm(x, axis=1))) * len(a)


# ---- random rows: every quantity against the references --------------------------------------

@pytest.mark.parametrize("kind", list(KINDS))
def test_random_rows(lib, kind):
    rng = np.random.default_rng(11)
    for trial in range(6):
        n, d = int(rng.integers(3, 9)), int(rng.integers(1, 6))
        z = rng.normal(size=n) * 2
        a = np.exp(z) / np.exp(z).sum()
        if trial == 5:  # sa-softmax-like weights: negative and not summing to 1
            a = z * a
        x = rng.normal(size=(n, d))
        Ns = list(range(1, n))
        got = c_reading(lib, a, x, Ns, kind, exact=1)
        sc = _scale(a, x)
        for g in got:
            N = g["N"]
            assert g["rows"] == 1
            _close(g["dist"], ref_dist(kind, a, x, ref_topn(a, N)), sc)
            _close(g["analytic"], ref_analytic(kind, a, x, N), sc)
            ex = ref_exact(kind, a, x, N)
            _close(g["exact"], ex, sc)
            assert g["analytic"] <= ex + 1e-12 * sc  # Jensen
            assert math.isnan(g["mc"]) and math.isnan(g["mc_se"])


@pytest.mark.parametrize("kind", list(KINDS))
def test_mc_within_4_se_of_exact(lib, kind):
    rng = np.random.default_rng(5)
    n, d = 9, 4
    a = rng.dirichlet(np.ones(n) * 0.7)
    x = rng.normal(size=(n, d))
    Ns = [1, 2, 4, 6, 8]
    got = c_reading(lib, a, x, Ns, kind, mc=4000, seed=3, exact=1)
    for g in got:
        ex = ref_exact(kind, a, x, g["N"])
        _close(g["exact"], ex, _scale(a, x))
        assert g["mc_se"] > 0
        assert abs(g["mc"] - ex) <= 4 * g["mc_se"], (g, ex)
        assert g["analytic"] <= ex + 1e-12
    again = c_reading(lib, a, x, Ns, kind, mc=4000, seed=3)
    assert [g["mc"] for g in again] == [g["mc"] for g in got]  # seeded
    other = c_reading(lib, a, x, Ns, kind, mc=4000, seed=4)
    assert [g["mc"] for g in other] != [g["mc"] for g in got]


# ---- constructed rows with closed forms ------------------------------------------------------

@pytest.mark.parametrize("kind", list(KINDS))
def test_n_minus_one_all_readings_agree(lib, kind):
    """N = n - 1: one token k left out; every reading is ||alpha_k x_k - s||."""
    rng = np.random.default_rng(2)
    n, d = 7, 3
    a = rng.dirichlet(np.ones(n))
    x = rng.normal(size=(n, d))
    k = sorted(range(n), key=lambda i: (-a[i], i))[-1]
    s = sum(a[j] * x[j] for j in range(n) if j != k)
    want = np.linalg.norm(a[k] * x[k] - s)
    g = c_reading(lib, a, x, [n - 1], kind)[0]
    _close(g["dist"], want, _scale(a, x))


def test_uniform_identical_closed_forms(lib):
    """alpha = 1/n, x_j = x: every subset gives the same value, so dist = analytic = exact = mc
    and the closed forms |1 - 2N/n| |x| and (n-N)(N-1)/n |x| (both vector readings and
    sum-of-norms)."""
    n, d = 8, 3
    xv = np.array([0.3, -1.2, 2.0])
    x = np.tile(xv, (n, 1))
    a = np.full(n, 1.0 / n)
    nx = np.linalg.norm(xv)
    for kind in KINDS:
        got = c_reading(lib, a, x, list(range(1, n)), kind, mc=50, exact=1)
        for g in got:
            N = g["N"]
            want = abs(1 - 2 * N / n) * nx if kind == "norm-of-sum" else (n - N) * (N - 1) / n * nx
            for key in ("dist", "analytic", "exact", "mc"):
                assert abs(g[key] - want) <= 1e-13 * nx * n, (kind, N, key, g[key], want)


def test_identical_vectors_any_weights(lib):
    rng = np.random.default_rng(9)
    n = 6
    xv = rng.normal(size=4)
    x = np.tile(xv, (n, 1))
    a = rng.dirichlet(np.ones(n))
    for N in range(1, n):
        I = ref_topn(a, N)
        ab = sum(a[j] for j in I)
        g = c_reading(lib, a, x, [N], "norm-of-sum")[0]
        assert abs(g["dist"] - abs(1 - 2 * ab) * np.linalg.norm(xv)) <= 1e-14 * n
        g = c_reading(lib, a, x, [N], "sum-vector")[0]
        assert abs(g["dist"] - abs(1 - (n - N + 1) * ab) * np.linalg.norm(xv)) <= 1e-13 * n


def test_one_dominant_weight(lib):
    """alpha = e_0: s = x_0 when 0 is selected (always, for the top-N), S = x_0."""
    rng = np.random.default_rng(4)
    n, d = 7, 3
    x = rng.normal(size=(n, d))
    a = np.zeros(n)
    a[0] = 1.0
    n0 = np.linalg.norm(x[0])
    for N in range(1, n):
        m = n - N
        g = c_reading(lib, a, x, [N], "norm-of-sum", exact=1)[0]
        assert abs(g["dist"] - n0) <= 1e-14 * n0
        assert abs(g["exact"] - n0) <= 1e-14 * n0  # |x0 - 2 x0| or |x0 - 0|
        assert abs(g["analytic"] - abs(n - 2 * N) / n * n0) <= 1e-14 * n0
        g = c_reading(lib, a, x, [N], "sum-vector", exact=1)[0]
        assert abs(g["dist"] - m * n0) <= 1e-13 * n0
        assert abs(g["exact"] - (N / n * m * n0 + (1 - N / n) * n0)) <= 1e-13 * n0
        g = c_reading(lib, a, x, [N], "sum-of-norms", exact=1)[0]
        assert abs(g["dist"] - m * n0) <= 1e-13 * n0


# ---- heads ---------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("kind", list(KINDS))
def test_head_means(lib, kind, causal):
    rng = np.random.default_rng(17 + causal)
    L, d = 9, 3
    z = rng.normal(size=(L, L)) * 1.5
    w = np.zeros((L, L))
    for t in range(L):
        n = t + 1 if causal else L
        e = np.exp(z[t, :n] - z[t, :n].max())
        w[t, :n] = e / e.sum()
        if causal:
            w[t, n:] = 123.0  # never read
    x = rng.normal(size=(L, d))
    Ns = [5, 1, 3, 8]
    got = c_reading(lib, w, x, Ns, kind, head=True, causal=causal, exact=1, mc=20)
    for g in got:
        N = g["N"]
        rows = [t for t in range(L) if (t + 1 if causal else L) > N]
        assert g["rows"] == len(rows)
        dist = np.mean([ref_dist(kind, w[t, :(t + 1 if causal else L)], x[:(t + 1 if causal
                        else L)], ref_topn(w[t, :(t + 1 if causal else L)], N)) for t in rows])
        ex = np.mean([ref_exact(kind, w[t, :(t + 1 if causal else L)], x[:(t + 1 if causal
                      else L)], N) for t in rows])
        _close(g["dist"], dist, 10 * L)
        _close(g["exact"], ex, 10 * L)
        assert g["analytic"] <= g["exact"] + 1e-12
        # the head's Monte-Carlo mean is the mean of the rows' (same seeds, row index t)
        assert abs(g["mc"] - g["exact"]) <= 4 * g["mc_se"] + 1e-12


class MOpts(ctypes.Structure):
    _fields_ = [("top_n", ctypes.POINTER(ctypes.c_int)), ("n_top", ctypes.c_int),
                ("distance", ctypes.c_int), ("separability", ctypes.c_int),
                ("mc_samples", ctypes.c_int), ("mc_seed", ctypes.c_uint64),
                ("causal", ctypes.c_int)]


class MStats(ctypes.Structure):
    _fields_ = [("N", ctypes.c_int), ("rows", ctypes.c_int64)] + [
        (k, ctypes.c_double) for k in
        ("dtilde", "dmax", "E", "E_mc", "E_mc_se", "ns_ratio", "ns_lower", "ns_upper")]


def test_sum_of_norms_equals_metrics_module(lib):
    """sum-of-norms is al_head_metrics' dtilde, E and E_mc (the default reading unchanged)."""
    rng = np.random.default_rng(3)
    L, d = 12, 4
    w = np.ascontiguousarray(rng.dirichlet(np.ones(L), size=L))
    x = rng.normal(size=(L, d))
    Ns = [1, 2, 5]
    got = c_reading(lib, w, x, Ns, "sum-of-norms", head=True, mc=10, seed=5)
    arr = (ctypes.c_int * 3)(*Ns)
    o = MOpts(arr, 3, 1, 1, 10, 5, 0)
    out = (MStats * 3)()
    err = Err()
    lib.al_head_metrics.argtypes = [dp, dp, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.POINTER(MOpts), ctypes.POINTER(MStats), dp, dp,
                                    ctypes.POINTER(Err)]
    assert lib.al_head_metrics(_p(w), _p(x), L, d, ctypes.byref(o), out, None, None,
                               ctypes.byref(err)) == 0
    for g, r in zip(got, out):
        assert g["dist"] == r.dtilde and g["analytic"] == r.E and g["mc"] == r.E_mc
        assert g["mc_se"] == r.E_mc_se
        _close(g["dist"], ref_dist_mean(w, x, r.N), 10.0)


def ref_dist_mean(w, x, N):
    L = w.shape[0]
    return np.mean([ref_dist("sum-of-norms", w[t], x, ref_topn(w[t], N)) for t in range(L)])


# ---- the exact cap and the names -----------------------------------------------------------

def test_exact_cap_refused(lib):
    assert lib.al_binomial(32, 5) == 201376
    assert lib.al_binomial(1000, 500) > 1e299 or math.isinf(lib.al_binomial(1000, 500))
    err = Err()
    Ns = (ctypes.c_int * 3)(1, 3, 5)
    assert lib.al_exact_check(32, Ns, 3, 0, ctypes.byref(err)) == 1
    msg = err.msg.decode()
    assert "C(n = 32, N = 5)" in msg and "10000" in msg and "--expectation" in msg
    assert lib.al_exact_check(32, Ns, 2, 0, ctypes.byref(err)) == 0
    assert lib.al_exact_check(32, Ns, 3, 300000, ctypes.byref(err)) == 0
    with pytest.raises(RuntimeError, match="exceeds the cap"):
        c_reading(lib, np.full(32, 1 / 32), np.ones((32, 2)), [5], "norm-of-sum", exact=1)


def test_names(lib):
    v, err = ctypes.c_int(), Err()
    for name, k in KINDS.items():
        assert lib.al_distance_parse(name.encode(), ctypes.byref(v), ctypes.byref(err)) == 0
        assert v.value == k
    assert lib.al_distance_parse(b"norm", ctypes.byref(v), ctypes.byref(err)) == 1
    assert "sum-of-norms, norm-of-sum, sum-vector" in err.msg.decode()
    for name, k in {"analytic": 0, "mc": 1, "exact": 2}.items():
        assert lib.al_expect_parse(name.encode(), ctypes.byref(v), ctypes.byref(err)) == 0
        assert v.value == k
    assert lib.al_expect_parse(b"MC", ctypes.byref(v), ctypes.byref(err)) == 1


# ---- the critical-N grid (METHOD section 4) -------------------------------------------------

def ref_grid(L):
    g = set()
    for lo, hi, st in ((1, 16, 1), (18, 32, 2), (36, 64, 4), (72, 128, 8), (144, 256, 16)):
        g.update(v for v in range(lo, hi + 1, st) if v < L)
    step = max(L // 32, 1)
    g.update(range(256 + step, L, step))
    g.add(L - 1)
    return sorted(v for v in g if 1 <= v < L)


@pytest.mark.parametrize("L", [2, 3, 17, 32, 64, 128, 256, 512, 1024, 2048, 300])
def test_critical_grid(lib, L):
    n = lib.al_critical_grid(L, None, 0)
    buf = (ctypes.c_int * n)()
    assert lib.al_critical_grid(L, buf, n) == n
    got = list(buf)
    assert got == ref_grid(L)
    assert got[-1] == L - 1
    if L > 256:
        assert max(b - a for a, b in zip(got, got[1:])) <= max(L // 32, 16)


# ---- Algorithm 5 readings --------------------------------------------------------------------

def ref_sens(z, temps, eps, dirs, scale, causal=1):
    L = z.shape[0]
    fd = np.zeros((len(temps), len(eps)))
    sp = np.zeros(len(temps))
    rows = 0
    for t in range(L):
        n = t + 1 if causal else L
        if n < 2:
            continue
        zt = z[t, :n] * scale
        rows += 1
        for a, T in enumerate(temps):
            p0 = np.exp((zt - zt.max()) / T)
            p0 /= p0.sum()
            J = (np.diag(p0) - np.outer(p0, p0)) / T
            sp[a] += np.linalg.svd(J, compute_uv=False)[0]
            for e, ep in enumerate(eps):
                v = dirs(t, n, a, e)
                z1 = zt + ep * v
                p1 = np.exp((z1 - z1.max()) / T)
                p1 /= p1.sum()
                fd[a, e] += np.linalg.norm(p1 - p0) / ep
    return fd / rows, sp / rows


@pytest.mark.parametrize("fresh", [0, 1])
@pytest.mark.parametrize("scale", [1.0, 8.0])
def test_sensitivity_readings(lib, fresh, scale):
    rng = np.random.default_rng(6)
    L = 10
    z = rng.normal(size=(L, L))
    temps = np.array([0.05, 0.5, 2.0])
    eps = np.array([1e-3, 0.1, 10.0])
    seed, layer, head = 9, 2, 3

    def dirs(t, n, a, e):
        v = np.zeros(n)
        if fresh:
            lib.al_sensitivity_direction_fresh(seed, layer, head, t, a, e, n, _p(v))
        else:
            lib.al_sensitivity_direction(seed, layer, head, t, n, _p(v))
        return v

    fd_ref, sp_ref = ref_sens(z, temps, eps, dirs, scale)
    nm = Norm(0, 1.0, 1.5, 0.43)
    fd = np.zeros((3, 3))
    sp = np.zeros(3)
    err = Err()
    so = SOpts(scale, fresh)
    rc = lib.al_head_sensitivity_ex(_p(z), L, 1, ctypes.byref(nm), _p(temps), 3, _p(eps), 3, seed,
                                    layer, head, ctypes.byref(so), _p(fd), _p(sp),
                                    ctypes.byref(err))
    assert rc == 0, err.msg
    np.testing.assert_allclose(fd, fd_ref, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(sp, sp_ref, rtol=1e-9, atol=1e-14)
    if scale == 1.0 and not fresh:  # the default reading: al_head_sensitivity bit for bit
        fd0, sp0 = np.zeros((3, 3)), np.zeros(3)
        lib.al_head_sensitivity(_p(z), L, 1, ctypes.byref(nm), _p(temps), 3, _p(eps), 3, seed,
                                layer, head, _p(fd0), _p(sp0), ctypes.byref(err))
        assert (fd0 == fd).all() and (sp0 == sp).all()
    if fresh:  # fresh directions differ from the shared one and from each other
        v1, v2 = dirs(5, 6, 0, 0), dirs(5, 6, 0, 1)
        assert not np.array_equal(v1, v2)
        assert abs(np.linalg.norm(v1) - 1) < 1e-15


def test_fresh_head_equals_rows(lib):
    """Fresh directions: al_head_sensitivity_ex's means are, bit for bit, the sequential means of
    al_row_sensitivity at each (T, eps) in the public al_sensitivity_direction_fresh (the head
    draws its directions in its own instruction-set copy: run under each ATTNLIM_CPU)."""
    lib.al_row_sensitivity.argtypes = [dp, ctypes.c_int64, ctypes.POINTER(Norm), dp, ctypes.c_int,
                                       dp, ctypes.c_int, dp, dp, dp, ctypes.POINTER(Err)]
    rng = np.random.default_rng(61)
    L, seed, layer, head = 40, 4, 1, 2
    z = rng.normal(size=(L, L)) * 3
    temps, eps = np.array([0.01, 0.3, 5.0]), np.array([1e-3, 0.1, 10.0])
    nm, err = Norm(0, 1.0, 1.5, 0.43), Err()
    fd, sp = np.zeros((3, 3)), np.zeros(3)
    assert lib.al_head_sensitivity_ex(_p(z), L, 1, ctypes.byref(nm), _p(temps), 3, _p(eps), 3,
                                      seed, layer, head, ctypes.byref(SOpts(1.0, 1)), _p(fd),
                                      _p(sp), ctypes.byref(err)) == 0, err.msg
    sfd, ssp = np.zeros((3, 3)), np.zeros(3)
    for t in range(1, L):
        zt = np.ascontiguousarray(z[t, :t + 1])
        for a in range(3):
            for e in range(3):
                v, f1, s1 = np.zeros(t + 1), np.zeros(1), np.zeros(1)
                lib.al_sensitivity_direction_fresh(seed, layer, head, t, a, e, t + 1, _p(v))
                assert lib.al_row_sensitivity(_p(zt), t + 1, ctypes.byref(nm), _p(temps[a:]), 1,
                                              _p(eps[e:]), 1, _p(v), _p(f1), _p(s1),
                                              ctypes.byref(err)) == 0, err.msg
                sfd[a, e] += f1[0]
                if e == 0:
                    ssp[a] += s1[0]
    assert np.array_equal(fd, sfd / (L - 1)) and np.array_equal(sp, ssp / (L - 1))


def test_raw_scale_is_rescaled_temperature(lib):
    """Raw logits z sqrt(d) at T: the spectral norm is the scaled one at T / sqrt(d), over
    sqrt(d) (J_raw = J_scaled / sqrt(d) at the same weights)."""
    rng = np.random.default_rng(8)
    L, sd = 12, 8.0
    z = rng.normal(size=(L, L))
    temps = np.array([0.01, 0.3, 4.0])
    nm = Norm(0, 1.0, 1.5, 0.43)
    err = Err()
    fd, sp_raw, sp_s = np.zeros(0), np.zeros(3), np.zeros(3)
    lib.al_head_sensitivity_ex(_p(z), L, 1, ctypes.byref(nm), _p(temps), 3, _p(fd), 0, 1, 0, 0,
                               ctypes.byref(SOpts(sd, 0)), _p(fd), _p(sp_raw), ctypes.byref(err))
    t2 = temps / sd
    lib.al_head_sensitivity_ex(_p(z), L, 1, ctypes.byref(nm), _p(t2), 3, _p(fd), 0, 1, 0, 0,
                               None, _p(fd), _p(sp_s), ctypes.byref(err))
    np.testing.assert_allclose(sp_raw, sp_s / sd, rtol=1e-12)
    assert lib.al_head_sensitivity_ex(_p(z), L, 1, ctypes.byref(nm), _p(temps), 3, _p(fd), 0, 1,
                                      0, 0, ctypes.byref(SOpts(0.0, 0)), _p(fd), _p(sp_raw),
                                      ctypes.byref(err)) == 1
    assert "logit scale" in err.msg.decode()


# ---- the fresh directions' generator (al_sensitivity_direction_fresh) -------------------------

def _fresh_normals(h, n):
    """al__fresh_normals: the normals of the fresh direction of generator seed h, before the
    normalisation"""
    import internals
    from types import SimpleNamespace
    L = internals.attach(SimpleNamespace(), "al__fresh_normals")
    L.al__fresh_normals.argtypes = [ctypes.c_uint64, ctypes.c_int64, dp]
    x = np.zeros(n)
    assert L.al__fresh_normals(h, n, _p(x)) == 0
    return x


def test_fresh_normals_are_normal():
    """The fresh directions' normals (al__fresh_normals: single-precision Box-Muller, before the
    normalisation; one direction of n = 2e6: the cosines, then the sines) against scipy's
    standard normal: Kolmogorov-Smirnov on all of them, on the cosines and the sines apart, and
    the squared radii c^2 + s^2 against chi2(2);
    mean, variance, skewness and excess kurtosis within 5 standard errors; cosine and sine
    uncorrelated; the mass beyond 3 and 4 within 5 binomial standard errors; |x| below
    sqrt(62 ln 2) (the smallest u1 is 2^-31)."""
    from scipy import stats
    n = 2_000_000
    x = _fresh_normals(2026, n)
    assert stats.kstest(x, "norm").pvalue > 1e-3
    c, s = x[: n // 2], x[n // 2:]
    assert stats.kstest(c, "norm").pvalue > 1e-3 and stats.kstest(s, "norm").pvalue > 1e-3
    assert stats.kstest(c * c + s * s, stats.chi2(2).cdf).pvalue > 1e-3
    se = 1 / math.sqrt(n)
    assert abs(x.mean()) < 5 * se
    assert abs(x.var() - 1) < 5 * math.sqrt(2) * se
    assert abs(stats.skew(x)) < 5 * math.sqrt(6) * se
    assert abs(stats.kurtosis(x)) < 5 * math.sqrt(24) * se
    assert abs(np.corrcoef(c, s)[0, 1]) < 5 / math.sqrt(n / 2)
    for a in (3.0, 4.0):
        p = 2 * stats.norm.sf(a)
        assert abs(np.mean(np.abs(x) > a) - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert np.abs(x).max() <= math.sqrt(62 * math.log(2))
    # another seed draws other numbers; the same seed the same pairs (n = 101: 51 cosines)
    assert not np.array_equal(x[:50], _fresh_normals(2027, 100)[:50])
    assert np.array_equal(x[:51], _fresh_normals(2026, 101)[:51])


@pytest.mark.parametrize("n", [3, 7, 8])
def test_fresh_directions_uniform_on_sphere(lib, n):
    """al_sensitivity_direction_fresh over 24000 (row, T index, eps index): unit length, and
    uniform on the sphere: every coordinate's square ~ Beta(1/2, (n - 1)/2) (Kolmogorov-Smirnov
    against scipy; for n = 3 each coordinate ~ Uniform(-1, 1), Archimedes), the mean 0 and the
    second moment I / n within 5 standard errors. n = 7: the odd n drops a sine."""
    from scipy import stats
    vs = np.zeros((24000, n))
    q = 0
    for row in range(400):
        for ti in range(20):
            for ei in range(3):
                assert lib.al_sensitivity_direction_fresh(11, 2, 5, row, ti, ei, n, _p(vs[q])) == 0
                q += 1
    assert np.allclose(np.linalg.norm(vs, axis=1), 1, rtol=0, atol=1e-15)
    m = len(vs)
    for i in range(n):
        assert stats.kstest(vs[:, i] ** 2, stats.beta(0.5, (n - 1) / 2).cdf).pvalue > 1e-3
        if n == 3:
            assert stats.kstest(vs[:, i], stats.uniform(-1, 2).cdf).pvalue > 1e-3
    assert np.all(np.abs(vs.mean(axis=0)) < 5 / math.sqrt(n * m))
    C = vs.T @ vs / m  # E v v^T = I / n; Var v_i^2 = 2 (n - 1) / (n^2 (n + 2))
    sd2 = math.sqrt(2 * (n - 1) / (n * n * (n + 2)) / m)
    assert np.all(np.abs(np.diag(C) - 1 / n) < 5 * sd2)
    off = C[~np.eye(n, dtype=bool)]
    assert np.all(np.abs(off) < 5 * math.sqrt(1 / (n * (n + 2)) / m))
