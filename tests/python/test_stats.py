"""Statistics (METHOD section 4) against scipy and numpy: the two-sample KS test against
scipy.stats.ks_2samp (method='auto') on many random pairs, equal and unequal sizes, with
ties, exact (<= 10000 values) and asymptotic (beyond, and where the exact sum fails); the
one-sample distribution behind the asymptotic p-value against scipy.stats.kstwo.sf on a grid
of (n, D) crossing every one of its methods, and the one-sided one against
scipy.special.smirnov; Algorithm 3's critical N; five-number summaries against
numpy.percentile; the slope through the origin against numpy.linalg.lstsq; the `attnlim ks`
CLI."""
import ctypes
import json
import os
import subprocess
import warnings

import numpy as np
import pytest
import scipy
import scipy.stats

import internals

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
    L = internals.attach(ctypes.CDLL(LIB_PATH), "al__kstwo_sf", "al__smirnov_sf")
    L.al_ks_2samp.argtypes = [dp, ctypes.c_size_t, dp, ctypes.c_size_t, dp, dp,
                              ctypes.POINTER(Err)]
    L.al_critical_n.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, dp, dp, ctypes.c_int,
                                ctypes.c_double, dp, ctypes.POINTER(ctypes.c_int),
                                ctypes.POINTER(Err)]
    L.al_slope_origin.argtypes = [dp, dp, ctypes.c_size_t]
    L.al_slope_origin.restype = ctypes.c_double
    L.al_five_number.argtypes = [dp, ctypes.c_size_t, ctypes.POINTER(Five), ctypes.POINTER(Err)]
    L.al__kstwo_sf.argtypes = [ctypes.c_double, ctypes.c_int64]
    L.al__kstwo_sf.restype = ctypes.c_double
    L.al__smirnov_sf.argtypes = [ctypes.c_int64, ctypes.c_double]
    L.al__smirnov_sf.restype = ctypes.c_double
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


# ---- the one-sample distribution (scipy.stats.kstwo) behind the asymptotic p-value ----------

def _kstwo_method(n, x):
    """The method scipy 1.10 uses for kstwo.sf(x, n) (scipy/stats/_ksstats.py), for reporting."""
    t = n * x
    if x <= 0.5 / n or x >= 1 or t <= 1 or t >= n - 1:
        return "ends"
    if x >= 0.5:
        return "smirnov"
    if n <= 140:
        return "durbin" if t * x <= 0.754693 else ("pomeranz" if t * x <= 4 else "miller")
    if t * x >= 370:
        return "zero"
    if t * x >= 2.2:
        return "smirnov"
    return "durbin" if n <= 100000 and n * x ** 1.5 <= 1.4 else "pelz-good"


def _kstwo_grid(ns, per_n, seed, skip_slow=True):
    rng = np.random.default_rng(seed)
    for n in ns:
        xs = {0.5 / n, 0.5 / n * (1 + 1e-12), 0.75 / n, 1.0 / n, 1.0 / n * (1 + 1e-12), 0.5,
              0.5 - 1e-9, 1 - 1.0 / n, 1 - 1.5 / n, 0.999, 1.0}
        xs.update(np.sqrt(np.array([0.3, 0.754693, 0.755, 1.0, 2.19, 2.2, 2.21, 3.99, 4.0, 4.01,
                                    10.0, 100.0, 369.0, 371.0]) / n))
        if n > 140:
            xb = (1.4 / n) ** (2 / 3)
            xs.update([xb * 0.999, xb * 1.001, xb * 0.7])
        xs.update(np.exp(rng.uniform(np.log(0.5 / n), 0, per_n if n <= 1000 else per_n // 4)))
        for x in sorted(float(v) for v in xs if 0 < v <= 1):
            # scipy's smirnov adds all n terms, slowly: seconds a point for n of 1e5 and more
            if skip_slow and n > 5000 and _kstwo_method(n, x) == "smirnov" and 2 * n * x * x < 700:
                continue
            yield n, x


def test_kstwo_sf_grid(lib):
    """kstwo.sf(x, n) for n = 1 .. 1e6 and x = 1/(2n) .. 1, every method's region and its
    borders: agreement to 1e-10 relative (1e-300 absolute for underflowed tails). Where scipy
    uses an exact method so do we (the two then differ by rounding: 1.4e-12 at most, in the
    Pomeranz region where 1 - cdf cancels down to 6e-4); where it uses Pelz-Good or Miller's
    approximation we evaluate the same formula."""
    ns = list(range(1, 30)) + [37, 50, 64, 99, 100, 139, 140, 141, 142, 200, 333, 500, 1000, 2047,
                               3999, 4000, 4001, 7777, 10000, 12345, 30000, 50000, 99999, 100000,
                               100001, 250000, 1000000]
    seen = set()
    for n, x in _kstwo_grid(ns, 16, 31):
        got, ref = lib.al__kstwo_sf(x, n), float(scipy.stats.kstwo.sf(x, n))
        seen.add(_kstwo_method(n, x))
        assert got == pytest.approx(ref, rel=1e-10, abs=1e-300), (n, x, _kstwo_method(n, x), got,
                                                                  ref)
    assert seen == {"ends", "smirnov", "durbin", "pomeranz", "miller", "zero", "pelz-good"}, seen


def test_kstwo_sf_smirnov_large_n(lib):
    """The one-sided exact sum for n beyond 4000, where we add every (n/2000)-th term (the
    terms are smooth on a scale of n/500): a few points against scipy (which takes about a
    second per point at n = 1e5), and the one-sided function itself."""
    for n, c in ((4001, 2.5), (20011, 3.0), (60000, 9.0), (60000, 150.0)):
        x = float(np.sqrt(c / n))
        assert lib.al__kstwo_sf(x, n) == pytest.approx(float(scipy.stats.kstwo.sf(x, n)), rel=1e-10)
    rng = np.random.default_rng(32)
    for n in (1, 2, 3, 10, 140, 141, 999, 3999, 4000, 8000):
        for x in np.exp(rng.uniform(np.log(0.1 / n), 0, 12)):
            got, ref = lib.al__smirnov_sf(n, float(x)), float(scipy.special.smirnov(n, x))
            assert got == pytest.approx(ref, rel=1e-10, abs=1e-300), (n, x, got, ref)


def test_ks_asymptotic_branch(lib):
    """Beyond 10000 values per sample scipy uses kstwo.sf(D, round(n1 n2 / (n1 + n2))): random
    pairs with max(n1, n2) in 10001..200000, equal and unequal sizes, with ties, shifted so
    that p spans 1 .. 1e-300 and every method of kstwo is reached."""
    rng = np.random.default_rng(9)
    cases = [(12000, 11000, 0.03, False), (10001, 10001, 0.0, False), (10001, 10001, 0.06, True),
             (20000, 20000, 0.02, False), (15000, 3, 0.0, False), (10500, 17, 1.0, False),
             (30000, 140, 0.1, True), (40000, 141, 0.3, False), (200000, 300, 0.05, False),
             (200000, 150000, 0.0, False), (200000, 150000, 0.004, True), (123456, 654, 0.0, True),
             (50000, 60000, 0.2, False), (11000, 10999, 0.5, True), (10001, 9, 2.0, False),
             (25000, 2500, 0.09, False)]
    for it in range(10):
        n1 = int(rng.integers(10001, 200001))
        n2 = n1 if it % 3 == 0 else int(rng.integers(2, 200001))
        cases.append((n1, n2, float(rng.choice([0.0, 0.0, 0.003, 0.01])), it % 2 == 1))
    for n1, n2, shift, ties in cases:
        a = rng.standard_normal(n1)
        b = rng.standard_normal(n2) + shift
        if ties:
            a, b = np.round(a * 20) / 20, np.round(b * 20) / 20
        m, n = max(n1, n2), min(n1, n2)
        en = round(m * n / (m + n))
        d = c_ks(lib, a, b)[0]
        if en > 30000 and _kstwo_method(en, d) == "smirnov" and 2 * en * d * d < 700:
            b = b + 0.5  # keep scipy's side fast: p below 1e-300 (scipy: seconds per point)
        _check(lib, a, b)


def test_ks_exact_fallback(lib):
    """Below 10000 values scipy falls back to kstwo when its exact sum leaves [0, 1] (equal
    sizes, D of a few steps: 1 + 2e-16), with a RuntimeWarning; so do we, on the same cases."""
    for n, h in ((5, 1), (7, 1), (30, 1), (116, 2), (213, 3), (317, 3), (347, 4), (401, 5)):
        a = np.arange(n, dtype=float)
        b = a + h - 0.5  # D = h / n
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = scipy.stats.ks_2samp(a, b)
        assert any("Exact calculation unsuccessful" in str(x.message) for x in w), (n, h)
        assert r.statistic == pytest.approx(h / n, rel=1e-15)
        s, p = c_ks(lib, a, b)
        assert s == pytest.approx(r.statistic, rel=1e-15)
        assert p == pytest.approx(r.pvalue, rel=1e-10), (n, h, p, r.pvalue)


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


def test_cli_ks_ragged_text(tmp_path):
    """A sample is a flat list: text lines may hold different counts of numbers."""
    rng = np.random.default_rng(13)
    a = rng.standard_normal(23)
    b = rng.standard_normal(31) + 0.3
    cuts = [0, 1, 4, 4, 9, 17, 23]  # lines of 1, 3, 0, 5, 8 and 6 numbers
    (tmp_path / "a.txt").write_text("\n".join(" ".join(repr(v) for v in a[i:j])
                                              for i, j in zip(cuts, cuts[1:])) + "\n")
    (tmp_path / "b.txt").write_text(", ".join(repr(v) for v in b[:20]) + "\n"
                                    + "\t".join(repr(v) for v in b[20:]))  # no final newline
    rs, rp = sp_ks(a, b)
    p = run_ks(str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["n1"] == 23 and j["n2"] == 31
    assert j["statistic"] == pytest.approx(rs, rel=1e-12)
    assert j["pvalue"] == pytest.approx(rp, rel=1e-10)
    p = run_ks("-", str(tmp_path / "b.txt"), "--json", stdin=(tmp_path / "a.txt").read_text())
    assert p.returncode == 0 and json.loads(p.stdout)["pvalue"] == pytest.approx(rp, rel=1e-10)
    # a bad value in a ragged file is still named by its line
    (tmp_path / "bad.txt").write_text("1 2 3\n4 5\n\n6 7 x 9\n10\n")
    p = run_ks(str(tmp_path / "bad.txt"), str(tmp_path / "b.txt"))
    assert p.returncode != 0, p.stderr
    assert "bad.txt" in p.stderr and "line 4" in p.stderr and "'x'" in p.stderr, p.stderr
    (tmp_path / "inf.txt").write_text("1 2 3\n4 5\n6 inf\n")
    p = run_ks(str(tmp_path / "a.txt"), str(tmp_path / "inf.txt"))
    assert p.returncode != 0 and "inf.txt" in p.stderr and "line 3" in p.stderr, p.stderr
    # empty fields are judged per line, as for every other command (a line ending in a comma)
    (tmp_path / "comma.txt").write_text("1 2 3\n4, 5,\n6\n")
    p = run_ks(str(tmp_path / "comma.txt"), str(tmp_path / "b.txt"))
    assert p.returncode != 0 and "line 2" in p.stderr and "empty field" in p.stderr, p.stderr


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
