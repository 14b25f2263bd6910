"""Normalizers (METHOD section 7) against numpy/scipy references written here: forward values,
dense Jacobians, spectral norms against numpy's dense SVD (n up to 256, every kind), Frobenius
norms, and the CLI (normalize, jacobian, demo): --help, JSON keys, values, bad input.

The library is reached through ctypes ($ATTNLIM_LIB), the CLI through $ATTNLIM_BIN."""
import ctypes
import json
import os
import resource
import subprocess
import tempfile

import numpy as np
import pytest
import scipy.special

KINDS = ["softmax", "sparsemax", "entmax15", "entmax", "ssmax", "sa-softmax", "sa-softmax-norm"]


def _env(name):
    v = os.environ.get(name)
    if not v or not os.path.exists(v):
        pytest.fail("%s is not set to an existing file (run through ctest, or set it by hand)" % name)
    return v


class _Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class _Norm(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("temperature", ctypes.c_double),
                ("alpha", ctypes.c_double), ("ssmax_s", ctypes.c_double)]


_D = ctypes.POINTER(ctypes.c_double)


@pytest.fixture(scope="module")
def lib():
    lb = ctypes.CDLL(_env("ATTNLIM_LIB"))
    for fn in ("al_norm_forward", "al_norm_jacobian", "al_norm_jvp", "al_norm_vjp"):
        getattr(lb, fn).restype = ctypes.c_int
    lb.al_norm_spectral_norm.restype = ctypes.c_int
    lb.al_norm_frobenius_norm.restype = ctypes.c_int
    return lb


def _nm(kind, T=1.0, alpha=1.5, s=0.43):
    return _Norm(KINDS.index(kind), T, alpha, s)


def _arr(a):
    a = np.ascontiguousarray(a, dtype=np.float64)
    return a, a.ctypes.data_as(_D)


def forward(lib, kind, z, **kw):
    z, zp = _arr(z)
    out = np.zeros(len(z))
    err = _Err()
    rc = lib.al_norm_forward(ctypes.byref(_nm(kind, **kw)), zp, ctypes.c_int64(len(z)),
                             out.ctypes.data_as(_D), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return out


def jacobian(lib, kind, z, **kw):
    z, zp = _arr(z)
    n = len(z)
    J = np.zeros((n, n))
    err = _Err()
    rc = lib.al_norm_jacobian(ctypes.byref(_nm(kind, **kw)), zp, ctypes.c_int64(n),
                              J.ctypes.data_as(_D), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return J


def product(lib, fn, kind, z, v, **kw):
    z, zp = _arr(z)
    v, vp = _arr(v)
    out = np.zeros(len(z))
    err = _Err()
    rc = getattr(lib, fn)(ctypes.byref(_nm(kind, **kw)), zp, ctypes.c_int64(len(z)), vp,
                          out.ctypes.data_as(_D), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return out


def norm(lib, fn, kind, z, **kw):
    z, zp = _arr(z)
    out = ctypes.c_double()
    err = _Err()
    rc = getattr(lib, fn)(ctypes.byref(_nm(kind, **kw)), zp, ctypes.c_int64(len(z)),
                          ctypes.byref(out), ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return out.value


# ---- references (numpy/scipy, written from METHOD section 7) -------------------------------

def ref_threshold(y, power):
    """tau with sum max(y - tau, 0)^power = 1, by plain bisection (a different algorithm
    from the library's exact sort-free threshold)."""
    lo, hi = y.max() - 1.0, y.max()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid == lo or mid == hi:
            break
        if (np.maximum(y - mid, 0) ** power).sum() >= 1:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def ref_forward(kind, z, T=1.0, alpha=1.5, s=0.43):
    z = np.asarray(z, dtype=np.float64)
    n = len(z)
    x = z / T
    if kind == "softmax":
        return scipy.special.softmax(x)
    if kind == "ssmax":
        return scipy.special.softmax(s * np.log(n) * x)
    if kind == "sparsemax":
        return np.maximum(x - ref_threshold(x, 1.0), 0)
    if kind in ("entmax15", "entmax"):
        a = 1.5 if kind == "entmax15" else alpha
        y = (a - 1) * x
        y = y - y.max()
        p = np.maximum(y - ref_threshold(y, 1 / (a - 1)), 0) ** (1 / (a - 1))
        return p / p.sum()
    sm = scipy.special.softmax(x)
    if kind == "sa-softmax":
        return x * sm
    m, M = min(x.min(), 0.0), max(0.0, x.max())
    return ((x - m) / (M - m) if M > m else np.zeros(n)) * sm


def ref_jacobian(kind, z, T=1.0, alpha=1.5, s=0.43):
    """dp/dz from the formulas of METHOD section 7, built in numpy."""
    z = np.asarray(z, dtype=np.float64)
    n = len(z)
    p = ref_forward(kind, z, T, alpha, s)
    c = 1.0 / T
    if kind in ("softmax", "ssmax", "sparsemax", "entmax15", "entmax"):
        if kind == "ssmax":
            c *= s * np.log(n)
        if kind in ("softmax", "ssmax"):
            g = p.copy()
        elif kind == "sparsemax":
            g = (p > 0).astype(float)
        else:
            a = 1.5 if kind == "entmax15" else alpha
            g = np.zeros(n)
            g[p > 0] = p[p > 0] ** (2 - a)
        sg = g.sum()
        J = -np.outer(g, g) / sg
        others = sg - g  # diagonal g_i (sum_{j != i} g_j) / sum g, the largest without cancellation
        t = int(np.argmax(g))
        others[t] = np.delete(g, t).sum()
        J[np.diag_indices(n)] = g * others / sg
        return c * J
    x = c * z
    sm = scipy.special.softmax(x)
    dsm = np.diag(sm) - np.outer(sm, sm)  # d softmax / dx
    if kind == "sa-softmax":
        return c * (np.diag(sm) + x[:, None] * dsm)
    m, M = min(x.min(), 0.0), max(0.0, x.max())
    if not M > m:
        return np.zeros((n, n))
    w = (x - m) / (M - m)
    dm = np.zeros(n)
    dM = np.zeros(n)
    if x.min() < 0:
        dm[int(np.argmin(x))] = 1
    if x.max() > 0:
        dM[int(np.argmax(x))] = 1
    dw = (np.eye(n) - dm[None, :] - w[:, None] * (dM - dm)[None, :]) / (M - m)
    return c * (sm[:, None] * dw + w[:, None] * dsm)


def rows(seed, count, nmax):
    rng = np.random.default_rng(seed)
    for i in range(count):
        n = int(rng.integers(1, nmax + 1)) if i % 4 else int(rng.choice([1, 2, 3, nmax]))
        sd = float(np.exp(rng.uniform(-2, 2)))
        z = rng.normal(size=n) * sd
        if n >= 3 and i % 5 == 0:
            z[1] = z[0]  # a tie
        T = float(np.exp(rng.uniform(-2, 2)))
        yield z, T, float(rng.uniform(1.1, 2.6))


# ---- forward ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_forward_matches_reference(lib, kind):
    worst = 0.0
    for z, T, alpha in rows(1, 200, 300):
        p = forward(lib, kind, z, T=T, alpha=alpha)
        ref = ref_forward(kind, z, T=T, alpha=alpha)
        scale = 1.0 if kind not in ("sa-softmax", "sa-softmax-norm") else 1 + np.abs(z / T).max()
        worst = max(worst, np.abs(p - ref).max() / scale)
    assert worst <= 1e-12, worst


def test_sparsemax_is_the_simplex_projection(lib):
    """sparsemax(x) = argmin ||p - x|| over the simplex: checked by the KKT conditions and by
    scipy's SLSQP on small rows."""
    from scipy.optimize import minimize
    rng = np.random.default_rng(2)
    for _ in range(40):
        n = int(rng.integers(2, 8))
        x = rng.normal(size=n)
        p = forward(lib, "sparsemax", x)
        res = minimize(lambda q: ((q - x) ** 2).sum(), np.full(n, 1.0 / n), jac=lambda q: 2 * (q - x),
                       bounds=[(0, 1)] * n, constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}],
                       method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
        assert res.success
        np.testing.assert_allclose(p, res.x, atol=1e-6)


# ---- Jacobians --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_jacobian_and_products(lib, kind):
    for z, T, alpha in rows(3, 60, 64):
        n = len(z)
        J = jacobian(lib, kind, z, T=T, alpha=alpha)
        R = ref_jacobian(kind, z, T=T, alpha=alpha)
        scale = (1 + np.abs(z / T).max()) / T
        np.testing.assert_allclose(J, R, rtol=0, atol=1e-11 * scale)
        v = np.random.default_rng(n).normal(size=n)
        np.testing.assert_allclose(product(lib, "al_norm_jvp", kind, z, v, T=T, alpha=alpha), R @ v,
                                   rtol=0, atol=1e-11 * scale * (1 + np.abs(v).sum()))
        np.testing.assert_allclose(product(lib, "al_norm_vjp", kind, z, v, T=T, alpha=alpha), R.T @ v,
                                   rtol=0, atol=1e-11 * scale * (1 + np.abs(v).sum()))


@pytest.mark.parametrize("kind", KINDS)
def test_jacobian_finite_differences(lib, kind):
    rng = np.random.default_rng(4)
    checked = 0
    for _ in range(40):
        n = int(rng.integers(1, 40))
        z = rng.normal(size=n)
        v = rng.normal(size=n)
        h = 1e-6
        pp = forward(lib, kind, z + h * v, alpha=1.4)
        pm = forward(lib, kind, z - h * v, alpha=1.4)
        if np.any((pp == 0) != (pm == 0)):
            continue  # the support changes inside the step
        if kind == "sa-softmax-norm" and (np.argmax(z + h * v) != np.argmax(z - h * v)
                                          or np.argmin(z + h * v) != np.argmin(z - h * v)):
            continue
        fd = (pp - pm) / (2 * h)
        jv = product(lib, "al_norm_jvp", kind, z, v, alpha=1.4)
        np.testing.assert_allclose(jv, fd, rtol=0, atol=1e-6 * (1 + np.abs(jv).max()))
        checked += 1
    assert checked >= 30


# ---- spectral and Frobenius norms against numpy's dense SVD --------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_spectral_norm_vs_svd(lib, kind):
    exact = kind not in ("sa-softmax", "sa-softmax-norm")
    count = 120 if exact else 60
    for z, T, alpha in rows(5, count, 256):
        R = ref_jacobian(kind, z, T=T, alpha=alpha)
        sv = np.linalg.svd(R, compute_uv=False)[0]
        s = norm(lib, "al_norm_spectral_norm", kind, z, T=T, alpha=alpha)
        f = norm(lib, "al_norm_frobenius_norm", kind, z, T=T, alpha=alpha)
        # the SVD is accurate to n eps ||J||; J's terms are of size c (1 + max|z/T|)
        floor = 1e-14 * len(z) * (1 + (0 if exact else np.abs(z / T).max())) / T
        assert abs(s - sv) <= (1e-9 if exact else 1e-8) * sv + floor, (kind, len(z), T, s, sv)
        assert abs(f - np.linalg.norm(R)) <= 1e-9 * np.linalg.norm(R) + floor


def test_softmax_bound_property(lib):
    rng = np.random.default_rng(6)
    for _ in range(500):
        n = int(rng.integers(2, 100))
        T = float(np.exp(rng.uniform(-6, 6)))
        z = rng.normal(size=n) * float(np.exp(rng.uniform(-3, 3)))
        s = norm(lib, "al_norm_spectral_norm", "softmax", z, T=T)
        assert s <= 0.5 / T * (1 + 1e-12)


def test_two_equal_logits_exactly_half_over_T(lib):
    for T in [1e-6, 1e-3, 0.37, 1.0, 10.0, 1e6]:
        s = norm(lib, "al_norm_spectral_norm", "softmax", [0.2, 0.2], T=T)
        assert abs(s - 0.5 / T) <= 1e-15 * 0.5 / T


def test_errors_name_the_position(lib):
    for kind in KINDS:
        with pytest.raises(ValueError, match="logit 3"):
            forward(lib, kind, [0.0, 1.0, 2.0, np.nan, 4.0])
        with pytest.raises(ValueError, match="logit 0"):
            norm(lib, "al_norm_spectral_norm", kind, [np.inf, 1.0])
        with pytest.raises(ValueError, match="empty"):
            forward(lib, kind, np.zeros(0))


# ---- CLI --------------------------------------------------------------------------------

def run(args, stdin=None):
    return subprocess.run([_env("ATTNLIM_BIN")] + args, input=stdin, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("cmd", ["normalize", "jacobian", "demo"])
def test_cli_help(cmd):
    r = run([cmd, "--help"])
    assert r.returncode == 0
    assert "usage: attnlim " + cmd in r.stdout


def test_cli_normalize_json_stdin():
    z = [0.5, -1.0, 2.0, 2.0, 0.25]
    for kind in KINDS:
        r = run(["normalize", "--method", kind, "--temperature", "0.7", "--json"], " ".join(map(str, z)))
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert set(out) == {"method", "weights"}
        assert out["method"] == kind
        np.testing.assert_allclose(out["weights"], ref_forward(kind, z, T=0.7), rtol=0, atol=1e-12)


def test_cli_normalize_npy_rows_and_options():
    rng = np.random.default_rng(7)
    Z = rng.normal(size=(4, 9))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "z.npy")
        np.save(path, Z.astype(np.float32))
        r = run(["normalize", "--method=entmax", "--alpha", "1.7", "--input", path, "--json"])
        assert r.returncode == 0, r.stderr
        W = np.array(json.loads(r.stdout)["weights"])
        assert W.shape == (4, 9)
        for i in range(4):
            np.testing.assert_allclose(W[i], ref_forward("entmax", Z.astype(np.float32)[i], alpha=1.7),
                                       atol=1e-12)
        r = run(["normalize", "--method", "ssmax", "--ssmax-s", "0.9", "--input", path, "--json"])
        W = np.array(json.loads(r.stdout)["weights"])
        np.testing.assert_allclose(W[2], ref_forward("ssmax", Z.astype(np.float32)[2], s=0.9), atol=1e-12)
        r = run(["normalize", "--input", path])  # readable form: one row per line
        assert r.returncode == 0
        assert len([ln for ln in r.stdout.splitlines() if ln and not ln.startswith("#")]) == 4


def test_cli_jacobian_json():
    z = [0.1, 0.1, -2.0, 0.3]
    r = run(["jacobian", "--method", "softmax", "--temperature", "0.5", "--json"], " ".join(map(str, z)))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"spectral_norm", "frobenius_norm", "bound_sup", "bound_paper"}
    R = ref_jacobian("softmax", z, T=0.5)
    assert abs(out["spectral_norm"] - np.linalg.svd(R, compute_uv=False)[0]) <= 1e-12
    assert abs(out["frobenius_norm"] - np.linalg.norm(R)) <= 1e-12
    assert out["bound_sup"] == 1.0 and out["bound_paper"] == 0.5
    r = run(["jacobian", "--method", "sparsemax", "--full", "--json"], " ".join(map(str, z)))
    out = json.loads(r.stdout)
    assert set(out) == {"spectral_norm", "frobenius_norm", "bound_sup", "bound_paper", "jacobian"}
    assert out["bound_sup"] is None and out["bound_paper"] is None
    np.testing.assert_allclose(np.array(out["jacobian"]), ref_jacobian("sparsemax", z), atol=1e-14)
    r = run(["jacobian", "--method", "ssmax", "--json"], " ".join(map(str, z)))
    out = json.loads(r.stdout)
    c = 0.43 * np.log(4)
    assert abs(out["bound_sup"] - c / 2) <= 1e-15 and abs(out["bound_paper"] - c / 4) <= 1e-15
    r = run(["jacobian", "--method", "softmax"], " ".join(map(str, z)))
    assert r.returncode == 0 and "spectral norm" in r.stdout


def test_cli_bad_input():
    r = run(["normalize", "--json"], "1 2 nan 4")
    assert r.returncode != 0 and ("not finite" in r.stderr or "NaN" in r.stderr)
    r = run(["normalize", "--json"], "")
    assert r.returncode != 0 and "<stdin>: empty input" in r.stderr
    r = run(["normalize", "--json"], " \n")
    assert r.returncode != 0 and "no numbers" in r.stderr
    r = run(["normalize", "--input", "/nonexistent/z.npy"])
    assert r.returncode != 0 and "/nonexistent/z.npy" in r.stderr
    r = run(["normalize", "--method", "softermax"], "1 2")
    assert r.returncode == 2 and "softermax" in r.stderr
    r = run(["jacobian", "--temperature", "0"], "1 2")
    assert r.returncode == 2 and "temperature" in r.stderr
    r = run(["jacobian", "--temperature"], "1 2")
    assert r.returncode == 2
    r = run(["normalize", "--bogus"], "1 2")
    assert r.returncode == 2 and "--bogus" in r.stderr
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "z3.npy")
        np.save(path, np.zeros((2, 2, 2)))
        r = run(["normalize", "--input", path])
        assert r.returncode != 0 and "dimensions" in r.stderr
        path = os.path.join(d, "trunc.npy")
        np.save(path, np.zeros(10))
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-8])
        r = run(["jacobian", "--input", path])
        assert r.returncode != 0 and "trunc.npy" in r.stderr
    r = run(["normalize", "--method", "sa-softmax", "--temperature", "1e-300"], "1e300 1")
    assert r.returncode != 0 and "logit 0" in r.stderr


def test_cli_demo_runs_fast():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run(["demo"])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 1.0
    for word in ["softmax", "sparsemax", "entmax15", "ssmax", "sa-softmax", "1/(2T)"]:
        assert word in r.stdout
    r = run(["demo", "--json"])
    out = json.loads(r.stdout)
    for row in out["temperature_sweep"]:
        assert row["spectral_norm"] <= row["bound_sup"] * (1 + 1e-12)
        assert abs(row["spectral_norm_two_equal"] - 0.5 / row["T"]) <= 1e-12 * 0.5 / row["T"]


def test_entmax_limits(lib):
    """alpha-entmax: alpha = 2 is sparsemax, alpha -> 1 tends to softmax, alpha = 1.5 is entmax15."""
    rng = np.random.default_rng(8)
    for _ in range(50):
        z = rng.normal(size=int(rng.integers(1, 50))) * 2
        np.testing.assert_allclose(forward(lib, "entmax", z, alpha=2.0), ref_forward("sparsemax", z), atol=1e-12)
        np.testing.assert_allclose(forward(lib, "entmax", z, alpha=1.5), forward(lib, "entmax15", z), atol=1e-12)
        np.testing.assert_allclose(forward(lib, "entmax", z, alpha=1 + 1e-7), scipy.special.softmax(z),
                                   atol=1e-5)


def _lambda_max_decimal(g):
    """lambda_max of diag(g) - g g^T / sum(g) by bisection on the secular equation
    sum_i g_i / (g_i - lambda) = 0 in 80-digit decimal arithmetic (stdlib), with equal entries
    grouped; the repeated-largest and single-entry cases are the closed forms."""
    import decimal
    from collections import Counter
    ctx = decimal.Context(prec=80)
    cnt = Counter(float(x) for x in g if x > 0)
    vals = sorted(cnt, reverse=True)
    if not vals or (len(vals) == 1 and cnt[vals[0]] == 1):
        return 0.0
    if cnt[vals[0]] >= 2:
        return vals[0]
    terms = [(decimal.Decimal(v), cnt[v]) for v in vals]
    lo, hi = terms[1][0], terms[0][0]
    for _ in range(250):  # geometric bisection: relative width (hi/lo)^(2^-250), far below 1e-17
        mid = ctx.sqrt(ctx.multiply(lo, hi))
        F = sum((ctx.divide(ctx.multiply(v, c), ctx.subtract(v, mid)) for v, c in terms), decimal.Decimal(0))
        if F > 0:
            hi = mid
        else:
            lo = mid
    return float(ctx.sqrt(ctx.multiply(lo, hi)))


def test_rank1_spectral_vs_high_precision(lib):
    """The secular-equation solver on adversarial vectors (near-ties at the top, entries spanning
    300 decades, a dominant entry with many tiny ones) against an 80-digit reference."""
    lib.al_norm_rank1_spectral.restype = ctypes.c_double
    rng = np.random.default_rng(9)
    cases = [[1, 1 - 1e-15, 1 - 2e-15, 0.3], [1, 1e-300, 1e-300], [0.5, 0.49999999999] + [1e-20] * 50,
             [1.0] + [1e-12] * 1000, list(np.exp(-rng.uniform(0, 700, size=60))),
             [0.7, 0.7 * (1 + 2 ** -52), 0.1], [0.25, 0.25, 0.5], [0.0, 0.0, 0.3], [2.0, 1.0]]
    for _ in range(25):
        z = rng.normal(size=int(rng.integers(2, 40))) * float(rng.choice([0.01, 1, 10, 100]))
        p = scipy.special.softmax(z)
        cases += [list(p), list(np.sqrt(p))]
    for g in cases:
        g = np.ascontiguousarray(g, dtype=np.float64)
        got = lib.al_norm_rank1_spectral(g.ctypes.data_as(_D), ctypes.c_int64(len(g)))
        ref = _lambda_max_decimal(g)
        assert abs(got - ref) <= 1e-13 * ref + (0 if ref > 0 else 1e-300), (list(g[:4]), got, ref)


@pytest.mark.parametrize("kind", ["sa-softmax", "sa-softmax-norm"])
def test_sa_spectral_clustered_spectrum(lib, kind):
    """Near-uniform rows give a tightly clustered spectrum (the hard case for Lanczos, which the
    inertia bisection replaced)."""
    rng = np.random.default_rng(10)
    for n, sd in [(256, 1e-3), (256, 0.05), (200, 0.1), (64, 1e-6)]:
        z = rng.normal(size=n) * sd
        sv = np.linalg.svd(ref_jacobian(kind, z), compute_uv=False)[0]
        s = norm(lib, "al_norm_spectral_norm", kind, z)
        assert abs(s - sv) <= 1e-8 * sv + 1e-14 * n, (kind, n, sd, s, sv)


def _sa_operator(kind, z, T=1.0):
    """J of the sa forms as a scipy LinearOperator from METHOD 7 (numpy, O(n) per product):
    sa-softmax J = c (diag(s + q) - q s^T), q = x s; sa-softmax-norm J = c (diag(s) dw/dx +
    diag(w) (diag(s) - s s^T)), w = (x - m) / (M - m)."""
    import scipy.sparse.linalg as sla
    c = 1.0 / T
    x = c * np.asarray(z, float)
    s = scipy.special.softmax(x)
    n = len(x)
    if kind == "sa-softmax":
        q = x * s
        mv = lambda v: c * ((s + q) * v - q * (s @ v))
        rmv = lambda u: c * ((s + q) * u - s * (q @ u))
    else:
        m, M = min(x.min(), 0.0), max(0.0, x.max())
        R, w = M - m, (x - m) / (M - m)
        im = int(np.argmin(x)) if x.min() < 0 else None
        iM = int(np.argmax(x)) if x.max() > 0 else None

        def mv(v):
            vm = v[im] if im is not None else 0.0
            vM = v[iM] if iM is not None else 0.0
            return c * (s * (v - vm - w * (vM - vm)) / R + w * (s * v - s * (s @ v)))

        def rmv(u):
            su, wu = s * u, w * u
            out = su / R
            if im is not None:
                out[im] -= np.sum(su * (1 - w)) / R
            if iM is not None:
                out[iM] -= np.sum(su * w) / R
            return c * (out + s * wu - s * (s @ wu))
    flat = lambda f: (lambda v: f(np.ravel(v)))
    return sla.LinearOperator((n, n), matvec=flat(mv), rmatvec=flat(rmv), dtype=np.float64)


@pytest.mark.parametrize("kind", ["sa-softmax", "sa-softmax-norm"])
def test_sa_spectral_long_rows_vs_arpack(lib, kind):
    """issue 12, class 11: rows far above the old limit (65536, where Lanczos took ~n^2.6) get
    their norm (O(n): inertia bisection), equal to ARPACK's on an independent numpy operator."""
    import scipy.sparse.linalg as sla
    rng = np.random.default_rng(3)
    for n, sd, T in [(1 << 18, 2.0, 1.0), (100000, 0.3, 0.7)]:
        z = rng.normal(size=n) * sd
        ref = sla.svds(_sa_operator(kind, z, T), k=1, tol=1e-12, return_singular_vectors=False)[0]
        s = norm(lib, "al_norm_spectral_norm", kind, z, T=T)
        assert abs(s - ref) <= 1e-10 * ref, (kind, n, s, ref)
    # the operator itself against the dense reference at a small n
    z = rng.normal(size=50)
    R = ref_jacobian(kind, z, T=0.8)
    v = rng.normal(size=50)
    np.testing.assert_allclose(_sa_operator(kind, z, 0.8) @ v, R @ v, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(_sa_operator(kind, z, 0.8).rmatvec(v), R.T @ v, rtol=1e-12, atol=1e-15)


# ---- sa forms at extreme scales -------------------------------------------------------------

def _sa_jacobian_decimal(kind, z, T):
    """dp/dz of the sa forms by central differences of their definitions (METHOD 7) in decimal
    arithmetic (stdlib), with the precision and exponent range the scale needs: an independent
    reference at scales where float64 cannot even hold J^T J. Returns (J as Decimals, ctx)."""
    import decimal
    D = decimal.Decimal
    zd = [D(v) for v in z]  # exact
    wide = decimal.Context(prec=60, Emax=10 ** 6, Emin=-10 ** 6)
    zmax = max(abs(v) for v in zd) or D(1)
    zs = sorted(zd)
    # the step: far below T (the scale of softmax) and below the smallest gap between logits
    gaps = [wide.subtract(b, a) for a, b in zip(zs, zs[1:]) if b > a]
    h = wide.multiply(D("1e-40"), min([D(T), zmax] + gaps))
    # digits: those of the values (|z|, |z/T|, and 1 for the sa-softmax-norm outputs) over h
    top = max(zmax, wide.divide(zmax, D(T)), D(1))
    prec = 120 + int(wide.divide(top, h).adjusted())
    ctx = decimal.Context(prec=prec, Emax=10 ** 6, Emin=-10 ** 6)
    Tm = D(T)

    def f(zd):
        x = [ctx.divide(v, Tm) for v in zd]
        mx = max(x)
        e = [ctx.exp(ctx.subtract(v, mx)) for v in x]
        S = D(0)
        for v in e:  # ctx.add: the built-in sum would round to the default 28 digits
            S = ctx.add(S, v)
        s = [ctx.divide(v, S) for v in e]
        if kind == "sa-softmax":
            return [ctx.multiply(a, b) for a, b in zip(x, s)]
        m, M = min(min(x), D(0)), max(max(x), D(0))
        return [ctx.multiply(ctx.divide(ctx.subtract(a, m), ctx.subtract(M, m)), b) for a, b in zip(x, s)]

    n = len(z)
    J = [[D(0)] * n for _ in range(n)]
    for j in range(n):
        zp, zm = list(zd), list(zd)
        zp[j] = ctx.add(zp[j], h)
        zm[j] = ctx.subtract(zm[j], h)
        fp, fm = f(zp), f(zm)
        for i in range(n):
            J[i][j] = ctx.divide(ctx.subtract(fp[i], fm[i]), ctx.multiply(2, h))
    return J, ctx


def _decimal_norms(J, ctx):
    """(spectral, Frobenius, largest entry) of a Decimal matrix as Decimals: the matrix is scaled
    by its largest entry to float64 for numpy's SVD (accurate to 1e-15 of the largest singular
    value), and the scale is put back in decimal."""
    import decimal
    big = max(abs(v) for row in J for v in row)
    if big == 0:
        return decimal.Decimal(0), decimal.Decimal(0), big
    A = np.array([[float(ctx.divide(v, big)) for v in row] for row in J])
    sv = np.linalg.svd(A, compute_uv=False)[0]
    fro = np.sqrt((A * A).sum())
    return ctx.multiply(big, decimal.Decimal(float(sv))), ctx.multiply(big, decimal.Decimal(float(fro))), big


SA_EXTREME = [
    ("sa-softmax", [1e300, -1e300, 0.0], 1e-6),        # the CLI report: spectral was 0
    ("sa-softmax", [1e200, 1e200, 0.0], 1.0),          # ||J||^2 ~ 1e400
    ("sa-softmax", [1.0, 1.0, -0.3], 1e-150),          # ||J|| ~ 1e299
    ("sa-softmax", [1.0, 0.5, -0.3], 1e-305),          # c = 1e305
    ("sa-softmax", [1.0, 1.0 - 3e-6, 0.2, -0.5], 1e-6),  # x_top (1 - s_top) ~ 5e4
    ("sa-softmax", [1e-300, -2e-300, 3e-300], 1.0),
    ("sa-softmax", [1e-300, -2e-300, 3e-300], 1e300),  # c z underflows to 0
    ("sa-softmax", [1e300, 1e300, -1e300], 1e-6),      # entries ~ 1e311: a range error
    ("sa-softmax", [1.0, 1.0, -0.3], 1e-300),          # entries ~ 1e599: a range error
    ("sa-softmax-norm", [1e-200, -1e-200, 0.5e-200], 1.0),  # 1/range ~ 5e199
    ("sa-softmax-norm", [1e-300, -1e-300], 1.0),        # n = 2: the 1/range part is exactly 0
    ("sa-softmax-norm", [1e-300, -1e-300, 0.3e-300, -0.7e-300], 1e-10),
    ("sa-softmax-norm", [1.0, 0.999999, -1.0, 0.5], 1e-8),
    ("sa-softmax-norm", [1.0, -1.0, 0.25], 1e-305),     # c = 1e305 (J = 0 in double)
    ("sa-softmax-norm", [1e300, -1e300, 0.5e300], 1e-8),
    ("sa-softmax-norm", [3e-320, -2e-320, 1e-320], 1.0),  # 1/range ~ 1e319: a range error
]


@pytest.mark.parametrize("kind,z,T", SA_EXTREME)
def test_sa_extreme_scales_vs_decimal_svd(lib, kind, z, T):
    """Spectral and Frobenius norms and the dense Jacobian of the sa forms at scales where J^T J
    (or J itself) leaves the double range, against central differences in decimal arithmetic and
    a scaled SVD: the norms agree to 1e-6 (spectral) and 1e-12
    (Frobenius); where the true Jacobian has entries beyond DBL_MAX, every call is a range error."""
    import sys
    J, ctx = _sa_jacobian_decimal(kind, z, T)
    ref_s, ref_f, big = _decimal_norms(J, ctx)
    if big > sys.float_info.max:
        for fn in ("al_norm_spectral_norm", "al_norm_frobenius_norm"):
            with pytest.raises(ValueError, match="double range"):
                norm(lib, fn, kind, z, T=T)
        return
    s = norm(lib, "al_norm_spectral_norm", kind, z, T=T)
    fr = norm(lib, "al_norm_frobenius_norm", kind, z, T=T)
    rs, rf = float(ref_s), float(ref_f)
    tiny = 1e-300 * float(big) if big > 0 else 0.0
    assert abs(s - rs) <= 1e-6 * rs + tiny, (kind, z, T, s, rs)
    assert abs(fr - rf) <= 1e-12 * rf + tiny, (kind, z, T, fr, rf)
    Jd = jacobian(lib, kind, z, T=T)
    Jr = np.array([[float(v) for v in row] for row in J])
    assert np.all(np.abs(Jd - Jr) <= 1e-10 * float(big) + tiny), (kind, z, T, Jd, Jr)
    # the products agree with the dense matrix (both scaled the same way)
    v = np.linspace(-1, 1, len(z))
    np.testing.assert_allclose(product(lib, "al_norm_jvp", kind, z, v, T=T), Jr @ v,
                               rtol=0, atol=1e-10 * float(big) * len(z) + tiny)
    np.testing.assert_allclose(product(lib, "al_norm_vjp", kind, z, v, T=T), Jr.T @ v,
                               rtol=0, atol=1e-10 * float(big) * len(z) + tiny)


def test_cli_jacobian_sa_extreme():
    """The reported case through the CLI: spectral norm 1e6 (it was 0 beside a Frobenius 1e6)."""
    r = run(["jacobian", "--method", "sa-softmax", "--temperature", "1e-6", "--json"], stdin="1e300 -1e300 0\n")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert abs(d["spectral_norm"] - 1e6) <= 1e-9 * 1e6 and abs(d["frobenius_norm"] - 1e6) <= 1e-9 * 1e6
    r = run(["jacobian", "--method", "sa-softmax", "--temperature", "1e-6"], stdin="1e300 1e300 -1e300\n")
    assert r.returncode != 0 and "double range" in r.stderr, r.stderr
