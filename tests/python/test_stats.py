"""Statistics (METHOD section 4) against scipy and numpy: the two-sample KS test against
scipy.stats.ks_2samp (method='auto') on many random pairs, equal and unequal sizes, with
ties; Algorithm 3's critical N; five-number summaries against numpy.percentile; the slope
through the origin against numpy.linalg.lstsq; the `attnlim ks` CLI."""
import ctypes
import json
import os
import subprocess
import warnings

import numpy as np
import pytest
import scipy
import scipy.stats

LIB_PATH = os.environ.get("ATTNLIM_LIB")
BIN = os.environ.get("ATTNLIM_BIN")


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Five(ctypes.Structure):
    _fields_ = [(k, ctypes.c_double) for k in ("min", "q1", "median", "q3", "max", "mean")]


dp = ctypes.POINTER(ctypes.c_double)


@pytest.fixture(scope="module")
def lib():
    assert LIB_PATH, "ATTNLIM_LIB is not set (run through ctest, or export it)"
    L = ctypes.CDLL(LIB_PATH)
    L.al_ks_2samp.argtypes = [dp, ctypes.c_size_t, dp, ctypes.c_size_t, dp, dp,
                              ctypes.POINTER(Err)]
    L.al_critical_n.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, dp, dp, ctypes.c_int,
                                ctypes.c_double, dp, ctypes.POINTER(ctypes.c_int),
                                ctypes.POINTER(Err)]
    L.al_slope_origin.argtypes = [dp, dp, ctypes.c_size_t]
    L.al_slope_origin.restype = ctypes.c_double
    L.al_five_number.argtypes = [dp, ctypes.c_size_t, ctypes.POINTER(Five), ctypes.POINTER(Err)]
    return L


def _p(a):
    return a.ctypes.data_as(dp)


def c_ks(lib, a, b):
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    s, p = ctypes.c_double(), ctypes.c_double()
    err = Err()
    rc = lib.al_ks_2samp(_p(a), len(a), _p(b), len(b), ctypes.byref(s), ctypes.byref(p),
                         ctypes.byref(err))
    if rc:
        raise ValueError(err.msg.decode())
    return s.value, p.value


def sp_ks(a, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = scipy.stats.ks_2samp(a, b)  # method='auto' (the default)
    return float(r.statistic), float(r.pvalue)


def test_scipy_version():
    # the rules matched are scipy 1.10's (exact up to 10000 values per sample)
    assert scipy.__version__.startswith("1.10"), scipy.__version__


def _check(lib, a, b, rtol=1e-10):
    s, p = c_ks(lib, a, b)
    rs, rp = sp_ks(a, b)
    assert s == pytest.approx(rs, rel=1e-12, abs=1e-15), (len(a), len(b), s, rs)
    assert p == pytest.approx(rp, rel=rtol, abs=1e-300), (len(a), len(b), p, rp)


def test_ks_many_random_pairs(lib):
    rng = np.random.default_rng(2024)
    for it in range(600):
        na = int(rng.integers(1, 160))
        nb = na if it % 3 == 0 else int(rng.integers(1, 160))
        shift = rng.choice([0.0, 0.1, 0.5, 2.0])
        a = rng.standard_normal(na)
        b = rng.standard_normal(nb) + shift
        if it % 4 == 1:  # ties within and across samples
            a = np.round(a * 2) / 2
            b = np.round(b * 2) / 2
        _check(lib, a, b)


def test_ks_paper_sizes(lib):
    """144 heads per sample (GPT-2 124M), as Algorithm 3 uses it, and the other grid sizes."""
    rng = np.random.default_rng(7)
    for n in (144, 12, 16, 72, 1000):
        for shift in (0.0, 0.05, 0.2, 0.5, 1.0, 3.0):
            _check(lib, rng.gamma(2, size=n), rng.gamma(2, size=n) + shift)


def test_ks_unequal_larger(lib):
    rng = np.random.default_rng(8)
    for na, nb in ((500, 700), (1000, 999), (3000, 200), (10000, 37), (2, 9000)):
        _check(lib, rng.standard_normal(na), rng.standard_normal(nb) * 1.1 + 0.05)


def test_ks_edge_cases(lib):
    _check(lib, [1.0], [2.0])
    _check(lib, [1.0], [1.0])
    _check(lib, [1.0, 1.0, 1.0], [1.0, 1.0])      # identical: D = 0, p = 1
    _check(lib, np.arange(10.0), np.arange(10.0) + 100)  # disjoint
    _check(lib, [0.0, 1.0], [0.5])
    with pytest.raises(ValueError, match="empty"):
        c_ks(lib, [], [1.0])
    with pytest.raises(ValueError, match="position 2"):
        c_ks(lib, [1.0, 2.0, np.nan], [1.0])
    with pytest.raises(ValueError, match="second sample.*position 0"):
        c_ks(lib, [1.0], [np.inf])


def test_ks_asymptotic_branch(lib):
    """Beyond 10000 values scipy switches to kstwo(round(en)); we use the Kolmogorov limit,
    which agrees to O(1/sqrt(en)): checked loosely here (documented difference)."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal(12000)
    b = rng.standard_normal(11000) + 0.03
    s, p = c_ks(lib, a, b)
    rs, rp = sp_ks(a, b)
    assert s == pytest.approx(rs, rel=1e-12)
    assert abs(p - rp) < 0.02 and abs(p - scipy.stats.kstwobign.sf(
        rs * np.sqrt(12000 * 11000 / 23000))) < 1e-10


def test_critical_n(lib):
    rng = np.random.default_rng(10)
    Ns = [1, 2, 4, 8, 16, 32]
    H = 144
    # the two samples converge as N grows
    dt = np.stack([rng.standard_normal(H) + 2.0 / N for N in Ns])
    E = np.stack([rng.standard_normal(H) for _ in Ns])
    pv = np.zeros(len(Ns))
    crit = ctypes.c_int()
    err = Err()
    NN = (ctypes.c_int * len(Ns))(*Ns)
    for level in (0.01, 0.05):
        assert lib.al_critical_n(NN, len(Ns), _p(np.ascontiguousarray(dt)), _p(np.ascontiguousarray(E)),
                                 H, level, _p(pv), ctypes.byref(crit), ctypes.byref(err)) == 0
        ref_p = [sp_ks(dt[i], E[i])[1] for i in range(len(Ns))]
        assert np.allclose(pv, ref_p, rtol=1e-10, atol=0)
        ref_crit = next((N for N, p in zip(Ns, ref_p) if p >= level), -1)
        assert crit.value == ref_crit
    # never reached
    dt2 = np.ascontiguousarray(E + 5.0)
    assert lib.al_critical_n(NN, len(Ns), _p(dt2), _p(np.ascontiguousarray(E)), H, 0.01, _p(pv),
                             ctypes.byref(crit), ctypes.byref(err)) == 0
    assert crit.value == -1
    bad = (ctypes.c_int * 3)(4, 2, 8)
    assert lib.al_critical_n(bad, 3, _p(dt2), _p(np.ascontiguousarray(E)), H, 0.01, _p(pv),
                             ctypes.byref(crit), ctypes.byref(err)) != 0
    assert b"increasing" in err.msg


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 10, 144, 1001])
def test_five_number(lib, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * 3 + 1
    if n > 5:
        x[:3] = x[3]  # ties
    f = Five()
    err = Err()
    assert lib.al_five_number(_p(x), n, ctypes.byref(f), ctypes.byref(err)) == 0
    q = np.percentile(x, [0, 25, 50, 75, 100])
    got = [f.min, f.q1, f.median, f.q3, f.max]
    assert np.allclose(got, q, rtol=1e-14, atol=1e-14), (got, q)
    assert f.mean == pytest.approx(np.mean(x), rel=1e-13, abs=1e-14)
    assert lib.al_five_number(_p(x), 0, ctypes.byref(f), ctypes.byref(err)) != 0
    x[0] = np.nan
    assert lib.al_five_number(_p(x), n, ctypes.byref(f), ctypes.byref(err)) != 0
    assert b"position 0" in err.msg


def test_slope_origin(lib):
    rng = np.random.default_rng(11)
    for n in (1, 2, 6, 50):
        x = rng.uniform(10, 1000, n)
        y = 0.06 * x + rng.standard_normal(n)
        c = lib.al_slope_origin(_p(x), _p(y), n)
        ref = np.linalg.lstsq(x[:, None], y, rcond=None)[0][0]
        assert c == pytest.approx(ref, rel=1e-12)
    z = np.zeros(3)
    assert np.isnan(lib.al_slope_origin(_p(z), _p(z), 3))


# ---- CLI --------------------------------------------------------------------------------------

def run_ks(*args, stdin=None):
    assert BIN, "ATTNLIM_BIN is not set (run through ctest, or export it)"
    return subprocess.run([BIN, "ks", *args], capture_output=True, text=True, timeout=60,
                          input=stdin)


def test_cli_ks(tmp_path):
    rng = np.random.default_rng(12)
    a = rng.standard_normal(40)
    b = rng.standard_normal(55) + 0.4
    np.save(tmp_path / "a.npy", a)
    (tmp_path / "b.txt").write_text("\n".join(", ".join(repr(v) for v in b[i:i + 5])
                                              for i in range(0, 55, 5)) + "\n")
    p = run_ks(str(tmp_path / "a.npy"), str(tmp_path / "b.txt"), "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    rs, rp = sp_ks(a, b)
    assert set(j) == {"statistic", "pvalue", "n1", "n2"}
    assert j["n1"] == 40 and j["n2"] == 55
    assert j["statistic"] == pytest.approx(rs, rel=1e-12)
    assert j["pvalue"] == pytest.approx(rp, rel=1e-10)
    p = run_ks(str(tmp_path / "a.npy"), "-", "--json", stdin=" ".join(repr(v) for v in b))
    assert p.returncode == 0 and json.loads(p.stdout)["pvalue"] == pytest.approx(rp, rel=1e-10)


def test_cli_ks_bad_input(tmp_path):
    (tmp_path / "bad.txt").write_text("1 2 x 4\n")
    (tmp_path / "ok.txt").write_text("1 2 3\n")
    (tmp_path / "nan.txt").write_text("1 nan 3\n")
    (tmp_path / "empty.txt").write_text("")
    for bad in ("bad.txt", "nan.txt", "empty.txt", "missing.txt"):
        p = run_ks(str(tmp_path / bad), str(tmp_path / "ok.txt"))
        assert p.returncode != 0 and bad in p.stderr, (bad, p.stderr)
    p = run_ks(str(tmp_path / "ok.txt"))
    assert p.returncode == 2
    p = run_ks("--help")
    assert p.returncode == 0 and "scipy" in p.stdout
