"""The attnlim Python package (python/attnlim, ctypes over libattnlim.so) against independent
references: scipy (softmax, ks_2samp), numpy (Jacobians built here, SVD, percentiles),
brute-force metrics written here from METHOD.md's formulas on tiny inputs, tiktoken built
offline from the shared GPT-2 files, and the numpy float64 GPT-2 of gpt2_ref.py on a random
checkpoint written by `attnlim make-model`. Also: ctypes struct layouts (by round-tripping
values through the API), errors, close semantics, the system loader, and docs/python.md's examples."""
import ctypes
import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import scipy.special
import scipy.stats

import attnlim as A
import gpt2_ref as R

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN")
LIB = os.environ.get("ATTNLIM_LIB")
EOT = "<|endoftext|>"


def need_env():
    if not BIN or not LIB:
        pytest.fail("ATTNLIM_BIN and ATTNLIM_LIB must be set (run through ctest)")


def shared_data():
    for d in (os.environ.get("ATTNLIM_DATA"), os.path.join(SRC, "..", "shared", "data")):
        if d and os.path.isfile(os.path.join(d, "gpt2", "encoder.json")):
            return os.path.abspath(d)
    pytest.fail("the shared data (gpt2/encoder.json, gpt2/vocab.bpe, war_and_peace/pg2600.txt) "
                "is not found: set ATTNLIM_DATA")


# ---- struct layouts ------------------------------------------------------------------------------

def test_layouts_roundtrip():
    from attnlim import _api
    # sizes of include/attnlim.h's structs on LP64 (printed by a C program with sizeof)
    assert ctypes.sizeof(_api._Norm) == 32 and ctypes.sizeof(_api._MetricsOpts) == 40
    assert ctypes.sizeof(_api._TopN) == 80 and ctypes.sizeof(_api._Five) == 48
    assert ctypes.sizeof(_api._ModelInfo) == 1296 and ctypes.sizeof(_api._Capture) == 136
    assert ctypes.sizeof(_api._CaptureRequest) == 40 and ctypes.sizeof(A._Error) == 1028
    assert ctypes.sizeof(_api._ReproOpts) == 304 and ctypes.sizeof(_api._DiagOpts) == 144
    assert ctypes.sizeof(_api._AttnSpec) == 48 and ctypes.sizeof(_api._SensOpts) == 16
    # al_norm by value: the header's documented defaults come back in the right fields
    for kind in range(7):
        nm = A.lib.al_norm_default(kind)
        assert (nm.kind, nm.temperature, nm.alpha, nm.ssmax_s) == (kind, 1.0, 1.5, 0.43)
    # al_five: a distinct value per field, known in closed form
    f = A.five_number([0.0, 1.0, 2.0, 3.0, 4.0])
    assert f == {"min": 0.0, "q1": 1.0, "median": 2.0, "q3": 3.0, "max": 4.0, "mean": 2.0}
    # al_topn_stats / al_metrics_opts: N in the order asked, rows, causal vs not (below too)
    rng = np.random.default_rng(0)
    out = A.row_metrics(np.full(6, 1 / 6), rng.normal(size=(6, 2)), top_n=[5, 2, 9])
    assert [s["N"] for s in out] == [5, 2, 9] and [s["rows"] for s in out] == [1, 1, 0]
    assert np.isnan(out[2]["dtilde"]) and np.isnan(out[0]["E_mc"])


# ---- normalizers -----------------------------------------------------------------------------------

def ref_sparsemax(z):
    zs = np.sort(z)[::-1]
    cs = np.cumsum(zs)
    k = np.arange(1, len(z) + 1)
    kmax = k[1 + k * zs > cs].max()
    tau = (cs[kmax - 1] - 1) / kmax
    return np.maximum(z - tau, 0)


def ref_entmax(z, a):
    """alpha-entmax by bisection on tau: p = [(a-1) z - tau]_+^(1/(a-1)), sum p = 1."""
    y = (a - 1) * z
    lo, hi = y.max() - 1.0, y.max()
    for _ in range(200):
        tau = (lo + hi) / 2
        s = (np.maximum(y - tau, 0) ** (1 / (a - 1))).sum()
        lo, hi = (tau, hi) if s > 1 else (lo, tau)
    p = np.maximum(y - (lo + hi) / 2, 0) ** (1 / (a - 1))
    return p / p.sum()


def ref_forward(z, method, T=1.0, alpha=1.5, s=0.43):
    z = np.asarray(z, dtype=np.float64) / T
    if method == "softmax":
        return scipy.special.softmax(z)
    if method == "sparsemax":
        return ref_sparsemax(z)
    if method == "entmax15":
        return ref_entmax(z, 1.5)
    if method == "entmax":
        return ref_entmax(z, alpha)
    if method == "ssmax":
        return scipy.special.softmax(s * np.log(len(z)) * z)
    if method == "sa-softmax":
        return z * scipy.special.softmax(z)
    if method == "sa-softmax-norm":
        lo, hi = min(z.min(), 0.0), max(0.0, z.max())
        return (z - lo) / (hi - lo) * scipy.special.softmax(z)
    raise ValueError(method)


METHODS = ["softmax", "sparsemax", "entmax15", "entmax", "ssmax", "sa-softmax", "sa-softmax-norm"]


@pytest.mark.parametrize("method", METHODS)
def test_normalize_and_jacobian(method):
    rng = np.random.default_rng(1)
    kw = dict(temperature=0.7, alpha=1.8, ssmax_s=0.5)
    Z = rng.normal(size=(3, 9)) * 2
    P = A.normalize(Z, method=method, **kw)
    for z, p in zip(Z, P):
        ref = ref_forward(z, method, 0.7, 1.8, 0.5)
        np.testing.assert_allclose(p, ref, rtol=1e-9, atol=1e-10)
    z = Z[0]
    # the dense Jacobian: central finite differences of the reference forward
    h = 1e-6
    Jref = np.empty((9, 9))
    for j in range(9):
        e = np.zeros(9)
        e[j] = h
        Jref[:, j] = (ref_forward(z + e, method, 0.7, 1.8, 0.5) -
                      ref_forward(z - e, method, 0.7, 1.8, 0.5)) / (2 * h)
    jac = A.jacobian(z, method=method, full=True, **kw)
    np.testing.assert_allclose(jac["matrix"], Jref, atol=2e-6)
    sv = np.linalg.svd(Jref, compute_uv=False)
    assert abs(jac["spectral"] - sv[0]) < 1e-5 * max(1, sv[0])
    assert abs(jac["frobenius"] - np.linalg.norm(Jref)) < 1e-5 * max(1, sv[0])
    assert jac["sums_to_one"] == (not method.startswith("sa-"))
    v, u = rng.normal(size=9), rng.normal(size=9)
    np.testing.assert_allclose(A.jvp(z, v, method=method, **kw), Jref @ v, atol=1e-5)
    np.testing.assert_allclose(A.jvp(z, u, method=method, transpose=True, **kw), Jref.T @ u,
                               atol=1e-5)


def test_softmax_jacobian_closed_form_and_bounds():
    z = np.array([3.0, -1.0, 0.5, 2.0, 0.0])
    for T in (0.1, 1.0, 4.0):
        p = scipy.special.softmax(z / T)
        J = (np.diag(p) - np.outer(p, p)) / T
        jac = A.jacobian(z, temperature=T, full=True)
        np.testing.assert_allclose(jac["matrix"], J, atol=1e-14)
        assert abs(jac["spectral"] - np.linalg.svd(J, compute_uv=False)[0]) < 1e-12
        assert jac["bound_sup"] == pytest.approx(1 / (2 * T))
        assert jac["bound_paper"] == pytest.approx(min(1 / (4 * T), np.sqrt(2)))
        assert jac["spectral"] <= jac["bound_sup"]
    # -inf masks: softmax over the unmasked entries, zeros elsewhere
    zm = np.array([[1.0, -np.inf, 2.0], [0.5, 0.5, -np.inf]])
    P = A.normalize(zm)
    s2 = scipy.special.softmax([1.0, 2.0])
    np.testing.assert_allclose(P[0], [s2[0], 0.0, s2[1]])
    np.testing.assert_allclose(P[1], [0.5, 0.5, 0.0])


# ---- metrics: brute force from METHOD.md sections 2-6 -------------------------------------------------

def top_idx(alpha, N):
    return sorted(sorted(range(len(alpha)), key=lambda i: (-alpha[i], i))[:N])


def ref_dtilde(alpha, x, sel):
    s = sum(alpha[i] * x[i] for i in sel)
    return sum(np.linalg.norm(alpha[i] * x[i] - s) for i in range(len(alpha)) if i not in sel)


def ref_row(alpha, x, N):
    n = len(alpha)
    I = top_idx(alpha, N)
    rest = [i for i in range(n) if i not in I]
    dt = ref_dtilde(alpha, x, I)  # s = sum_{i in I_N} alpha_i x_i inside
    abar, b = sum(alpha[i] for i in I), sum(alpha[i] for i in rest)
    d1 = max(np.linalg.norm(x[i] - x[j]) for i in rest for j in I)
    m = max(np.linalg.norm(x[j]) for j in I)
    dmax = b * d1 + ((n - N) * abar - b) * m
    tot = sum(alpha[j] * x[j] for j in range(n))
    E = (n - N) / n * sum(np.linalg.norm(alpha[i] * x[i] - N / (n - 1) * (tot - alpha[i] * x[i]))
                          for i in range(n))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    su = sum(alpha[i] * u[i] for i in I)
    r = min(np.linalg.norm(su - alpha[j] * u[j]) for j in rest)
    ns = sum(np.linalg.norm(su - alpha[i] * u[i]) < r for i in I)
    if N == 1:
        xi = np.zeros(1)
    else:
        delta = min(np.linalg.norm(u[i] - u[j]) for i, j in itertools.combinations(I, 2))
        xi = []
        for i in I:
            o = [j for j in I if j != i]
            sq = sum(alpha[j] ** 2 for j in o)
            cross = sum(alpha[j] * alpha[k] for j in o for k in o if j != k)
            xi.append(np.sqrt(max(sq + (1 - delta ** 2 / 2) * cross, 0)))
        xi = np.array(xi)
    lower = max(0.0, 1 - xi.sum() / (r * N))
    upper = min(1.0, np.mean(np.exp(-np.maximum(xi - r, 0) ** 2 / 2)))
    return {"dtilde": dt, "dmax": dmax, "E": E, "ns_ratio": ns / N, "ns_lower": lower,
            "ns_upper": upper}


KEYS = ["dtilde", "dmax", "E", "ns_ratio", "ns_lower", "ns_upper"]


def test_row_metrics_brute_force():
    rng = np.random.default_rng(2)
    n, d = 7, 3
    alpha = scipy.special.softmax(rng.normal(size=n) * 2)
    x = rng.normal(size=(n, d))
    out = A.row_metrics(alpha, x, top_n=[3, 1, 5], mc=4000, seed=11)
    for s in out:
        ref = ref_row(alpha, x, s["N"])
        for k in KEYS:
            assert s[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12), (s["N"], k)
        assert s["dtilde"] <= s["dmax"] + 1e-12
        # Monte-Carlo E against the exact mean of dtilde over every N-subset
        exact = np.mean([ref_dtilde(alpha, x, list(c)) for c in itertools.combinations(range(n), s["N"])])
        assert abs(s["E_mc"] - exact) <= 5 * s["E_mc_se"] + 1e-12, (s["N"], s["E_mc"], exact)
        assert s["E_mc"] >= s["E"] - 5 * s["E_mc_se"]


@pytest.mark.parametrize("causal", [True, False])
def test_head_metrics_brute_force(causal):
    rng = np.random.default_rng(3)
    L, d = 9, 4
    z = rng.normal(size=(L, L)) * 2
    w = np.zeros((L, L))
    for t in range(L):
        n = t + 1 if causal else L
        w[t, :n] = scipy.special.softmax(z[t, :n])
    x = rng.normal(size=(L, d))
    res = A.head_metrics(w, x, top_n=[2, 4], causal=causal)
    for s in res["stats"]:
        N = s["N"]
        rows = [t for t in range(L) if (t + 1 if causal else L) > N]
        assert s["rows"] == len(rows)
        refs = [ref_row(w[t, :(t + 1 if causal else L)], x[:(t + 1 if causal else L)], N) for t in rows]
        for k in KEYS:
            assert s[k] == pytest.approx(np.mean([r[k] for r in refs]), rel=1e-9, abs=1e-12), (N, k)
    for t in range(L):
        a = w[t, :(t + 1 if causal else L)]
        assert res["row_max"][t] == pytest.approx(a.max(), rel=1e-14)
        assert res["row_entropy"][t] == pytest.approx(-(a * np.log(a)).sum(), rel=1e-12, abs=1e-15)


def test_vanishing_D_brute_force():
    rng = np.random.default_rng(4)
    q, k = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    nq, nk = np.linalg.norm(q, axis=1), np.linalg.norm(k, axis=1)
    np.testing.assert_allclose(A.vanishing_D(q, k, causal=True),
                               [nq[t] * nk[:t + 1].max() / np.sqrt(5) for t in range(6)], rtol=1e-13)
    np.testing.assert_allclose(A.vanishing_D(q, k, causal=False), nq * nk.max() / np.sqrt(5), rtol=1e-13)


def test_sensitivity_against_scipy_and_svd():
    rng = np.random.default_rng(5)
    L = 8
    z = rng.normal(size=(L, L)) * 3
    temps, eps = np.array([0.1, 1.0, 5.0]), np.array([1e-3, 1e-1, 10.0])
    fd, spec = A.sensitivity(z, temps, eps, causal=True, seed=7, layer=1, head=2)
    fd_ref, sp_ref = np.zeros((3, 3)), np.zeros(3)
    for t in range(1, L):  # rows with n >= 2
        zt = z[t, :t + 1]
        v = A.sensitivity_direction(7, 1, 2, t, t + 1)
        assert np.linalg.norm(v) == pytest.approx(1.0, rel=1e-12)
        for a, T in enumerate(temps):
            p = scipy.special.softmax(zt / T)
            sp_ref[a] += np.linalg.svd((np.diag(p) - np.outer(p, p)) / T, compute_uv=False)[0]
            for b, e in enumerate(eps):
                fd_ref[a, b] += np.linalg.norm(scipy.special.softmax((zt + e * v) / T) - p) / e
    np.testing.assert_allclose(fd, fd_ref / (L - 1), rtol=1e-7)
    np.testing.assert_allclose(spec, sp_ref / (L - 1), rtol=1e-9)


@pytest.mark.parametrize("window", [1, 3, 8, 20])
def test_sensitivity_window_against_scipy_and_svd(window):
    """window (Mistral / Gemma 2 sliding window): row t sees keys max(0, t - window + 1)..t only, its
    direction drawn for that n; window >= L is the plain causal reading, 1 leaves no row (NaN)."""
    rng = np.random.default_rng(15)
    L = 10
    z = rng.normal(size=(L, L)) * 3
    temps, eps = np.array([0.2, 1.0, 3.0]), np.array([1e-3, 1.0])
    fd, spec = A.sensitivity(z, temps, eps, seed=3, layer=0, head=1, window=window)
    fd_ref, sp_ref, rows = np.zeros((3, 2)), np.zeros(3), 0
    for t in range(L):
        lo = max(0, t - window + 1)
        zt = z[t, lo:t + 1]
        if len(zt) < 2:
            continue
        rows += 1
        v = A.sensitivity_direction(3, 0, 1, t, len(zt))
        for a, T in enumerate(temps):
            p = scipy.special.softmax(zt / T)
            sp_ref[a] += np.linalg.svd((np.diag(p) - np.outer(p, p)) / T, compute_uv=False)[0]
            for b, e in enumerate(eps):
                fd_ref[a, b] += np.linalg.norm(scipy.special.softmax((zt + e * v) / T) - p) / e
    if rows == 0:
        assert np.isnan(fd).all() and np.isnan(spec).all()
        return
    np.testing.assert_allclose(fd, fd_ref / rows, rtol=1e-7)
    np.testing.assert_allclose(spec, sp_ref / rows, rtol=1e-9)
    if window >= L:  # no key leaves any row's window: the unwindowed call, bit for bit
        fd0, sp0 = A.sensitivity(z, temps, eps, seed=3, layer=0, head=1)
        assert (fd0 == fd).all() and (sp0 == spec).all()


def test_sensitivity_window_negative_refused():
    with pytest.raises(A.AttnlimError, match="window -2 < 0"):
        A.sensitivity(np.zeros((4, 4)), [1.0], [1e-3], window=-2)


def test_row_vanishing_and_row_sensitivity_against_numpy():
    rng = np.random.default_rng(6)
    w = scipy.special.softmax(rng.normal(size=9) * 2)
    mx, H, Hn = A.row_vanishing(w)
    assert mx == w.max() and H == pytest.approx(-(w * np.log(w)).sum(), rel=1e-14)
    assert Hn == pytest.approx(H / np.log(9), rel=1e-14)
    assert A.row_vanishing([1.0])[:2] == (1.0, 0.0) and np.isnan(A.row_vanishing([1.0])[2])
    z, v = rng.normal(size=7) * 3, rng.normal(size=7)
    temps, eps = np.array([0.05, 1.0, 4.0]), np.array([1e-3, 1.0])
    fd, spec = A.row_sensitivity(z, temps, eps, v)
    for a, T in enumerate(temps):
        p = scipy.special.softmax(z / T)
        assert spec[a] == pytest.approx(np.linalg.svd((np.diag(p) - np.outer(p, p)) / T,
                                                      compute_uv=False)[0], rel=1e-10)
        for b, e in enumerate(eps):
            ref = np.linalg.norm(scipy.special.softmax((z + e * v) / T) - p) / e
            assert fd[a, b] == pytest.approx(ref, rel=1e-8)
    with pytest.raises(A.AttnlimError, match="position"):
        A.row_sensitivity(z, temps, eps, np.r_[v[:-1], np.nan])


# ---- statistics ------------------------------------------------------------------------------------

def test_statistics_against_scipy_numpy():
    rng = np.random.default_rng(6)
    cases = [(rng.normal(size=30), rng.normal(0.3, 1, size=45)),
             (rng.integers(0, 5, 40).astype(float), rng.integers(0, 6, 33).astype(float)),  # ties
             (rng.normal(size=3), rng.normal(size=4))]
    for a, b in cases:
        st, p = A.ks_2samp(a, b)
        ref = scipy.stats.ks_2samp(a, b)
        assert st == pytest.approx(ref.statistic, abs=1e-14)
        assert p == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-14)
    N = [1, 2, 4, 8]
    d = rng.random((4, 20)) + np.array([[1.0], [0.5], [0.0], [0.0]])
    E = rng.random((4, 20))
    pv, crit = A.critical_n(N, d, E, level=0.01)
    ref = [scipy.stats.ks_2samp(d[i], E[i]).pvalue for i in range(4)]
    np.testing.assert_allclose(pv, ref, rtol=1e-8)
    assert crit == next((n for n, p in zip(N, ref) if p >= 0.01), None)
    _, crit_none = A.critical_n([1], np.zeros((1, 10)) + 5, np.zeros((1, 10)), level=0.01)
    assert crit_none is None
    x, y = rng.random(10), rng.random(10)
    assert A.slope_origin(x, y) == pytest.approx(np.dot(x, y) / np.dot(x, x), rel=1e-13)
    assert np.isnan(A.slope_origin([0.0, 0.0], [1.0, 2.0]))
    s = rng.normal(size=37)
    f = A.five_number(s)
    for k, q in (("q1", 25), ("median", 50), ("q3", 75)):
        assert f[k] == pytest.approx(np.percentile(s, q), rel=1e-13)
    assert (f["min"], f["max"]) == (s.min(), s.max()) and f["mean"] == pytest.approx(s.mean())


# ---- tokenizer and corpus ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tt():
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    data = shared_data()
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(data, "gpt2", "vocab.bpe"),
                                            os.path.join(data, "gpt2", "encoder.json"))
    return tiktoken.Encoding("gpt2-local", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256}, explicit_n_vocab=50257)


def test_tokenizer_against_tiktoken(tt):
    data = shared_data()
    body = A.corpus("war-and-peace", data_path=data)
    with A.Tokenizer.gpt2(os.path.join(data, "gpt2")) as tok:
        assert tok.vocab_size == 50257
        for text in ["Hello world", "  spaces\tand\nnewlines  ", "héllo wörld 日本語 123456",
                     body[:5000], "a" + EOT + "b"]:
            ids = tok.encode(text)
            assert ids.dtype == np.int32
            assert ids.tolist() == tt.encode(text, disallowed_special=()), text[:40]
            assert tok.decode(ids) == text
        with_eot = tok.encode("a" + EOT + "b", allow_special=True)
        assert with_eot.tolist() == tt.encode("a" + EOT + "b", allowed_special={EOT})
        assert 50256 in with_eot.tolist()
        assert tok.encode("").tolist() == [] and tok.decode([]) == ""
        bad = b"ab\xff\xfecd"
        assert tok.decode_bytes(tok.encode(bad)) == bad
    with pytest.raises(ValueError):
        tok.encode("closed")


def test_corpus_body_from_raw_file(tmp_path):
    data = shared_data()
    raw = open(os.path.join(data, "war_and_peace", "pg2600.txt"), "rb").read().replace(b"\r\n", b"\n")
    lines = raw.split(b"\n")
    start = lines.index(b"BOOK ONE: 1805")
    end = next(i for i in range(start, len(lines))
               if lines[i].startswith(b"*** END OF THE PROJECT GUTENBERG EBOOK"))
    body = b"\n".join(lines[start:end]) + b"\n"
    assert A.corpus("war-and-peace", data_path=data, as_bytes=True) == body
    f = tmp_path / "c.txt"
    f.write_bytes(b"x\r\ny \xff")
    assert A.corpus(str(f), as_bytes=True) == b"x\r\ny \xff"


# ---- model forward against gpt2_ref -----------------------------------------------------------------

def read_safetensors(path):
    buf = open(path, "rb").read()
    (hl,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + hl])
    out = {}
    for name, m in hdr.items():
        if name == "__metadata__":
            continue
        assert m["dtype"] == "F32"
        a, b = m["data_offsets"]
        out[name.removeprefix("transformer.")] = np.frombuffer(
            buf[8 + hl + a:8 + hl + b], dtype="<f4").reshape(m["shape"])
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    need_env()
    d = tmp_path_factory.mktemp("tiny") / "gpt2"
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "2", "--embd", "32", "--ctx", "64",
                    "--vocab", "50257", "--seed", "1", "--out", str(d)], check=True,
                   capture_output=True, timeout=120)
    cfg = json.load(open(d / "config.json"))
    return str(d), read_safetensors(d / "model.safetensors"), cfg


def test_model_forward_against_numpy_reference(tiny):
    path, params, cfg = tiny
    tokens = np.random.default_rng(8).integers(0, 50257, size=20)
    ref = R.forward(params, cfg, tokens)
    with A.Model(path) as m:
        info = m.info
        assert (info["family"], info["n_layer"], info["n_head"], info["n_kv_head"], info["d_model"],
                info["d_head"], info["d_ff"], info["n_ctx"], info["vocab_size"], info["causal"]) == \
            ("gpt2", 2, 2, 2, 32, 16, 128, 64, 50257, 1)
        assert info["n_params"] == sum(v.size for v in params.values())
        assert info["path"].endswith("model.safetensors") and info["dtype"] == "f32"
        seen = []
        out = m.forward(tokens, capture=("q", "k", "v", "logits", "weights", "hidden", "embed"))
        for l in range(2):
            c = out.captures[l]
            assert c["heads"].tolist() == [0, 1]
            for ours, key in (("q", "q"), ("k", "k"), ("v", "v"), ("weights", "w")):
                np.testing.assert_allclose(c[ours], ref[key][l], atol=2e-4, rtol=1e-3)
            fin = np.isfinite(ref["z"][l])
            assert (np.isfinite(c["logits"]) == fin).all()
            np.testing.assert_allclose(c["logits"][fin], ref["z"][l][fin], atol=2e-4, rtol=1e-3)
            np.testing.assert_allclose(c["hidden"], ref["hidden"][l], atol=2e-4, rtol=1e-3)
            np.testing.assert_allclose(c["embed"], ref["embed"], atol=1e-5)
            seen.append(l)
        assert out.logits.dtype == np.float32 and out.logits.shape == (20, 50257)
        np.testing.assert_allclose(out.logits, ref["logits"], atol=2e-3, rtol=1e-3)
        np.testing.assert_allclose(out.hidden, ref["final"], atol=2e-4, rtol=1e-3)
        # streaming selection: only the layers, heads and arrays asked for are copied
        sel = m.forward(tokens[:7], capture="weights", layers=[1], heads=[1], logits=False)
        assert sel.logits is None and sel.hidden.shape == (7, 32)
        meta = {"heads", "kv_head", "window", "softcap", "scale"}  # per-layer facts, not arrays
        assert list(sel.captures) == [1] and set(sel.captures[1]) == meta | {"weights"}
        assert sel.captures[1]["window"] == 0 and sel.captures[1]["softcap"] == 0
        assert sel.captures[1]["kv_head"].tolist() == [0, 1]
        ref7 = R.forward(params, cfg, tokens[:7])
        np.testing.assert_allclose(sel.captures[1]["weights"], ref7["w"][1][1:2], atol=2e-4)
        none = m.forward(tokens[:3])
        assert none.captures == {}
        # the captured head through the metrics matches the brute force on the reference weights
        hm = A.head_metrics(out.captures[0]["weights"][0], out.captures[0]["v"][0], top_n=[2])
        w0, v0 = ref["w"][0][0], ref["v"][0][0]
        rows = [ref_row(w0[t, :t + 1], v0[:t + 1], 2)["dtilde"] for t in range(2, 20)]
        assert hm["stats"][0]["dtilde"] == pytest.approx(np.mean(rows), rel=1e-3)
        with pytest.raises(A.AttnlimError) as e:
            m.forward(np.zeros(65, dtype=np.int64))  # longer than n_ctx = 64
        assert "64" in str(e.value)
        with pytest.raises(ValueError, match="head index 5"):
            m.forward(tokens, capture="q", heads=[5])
        with pytest.raises(ValueError, match="unknown capture"):
            m.forward(tokens, capture="attn")
    with pytest.raises(ValueError, match="closed"):
        m.forward(tokens)
    m.close()  # twice is fine


def test_model_hash_tokenizer_and_observer_failure(tiny, monkeypatch):
    import hashlib
    path, _, _ = tiny
    with A.Model(path) as m:
        # the model identity: SHA-256 of the `sha256sum` lines of its files, sorted by name
        lines = "".join(f"{hashlib.sha256(open(os.path.join(path, f), 'rb').read()).hexdigest()}  {f}\n"
                        for f in sorted(["config.json", "model.safetensors"]))
        assert m.sha256() == hashlib.sha256(lines.encode()).hexdigest()
        with m.tokenizer() as tok:
            assert tok.encode("Hello world").tolist() == [15496, 995]  # GPT-2's published ids
        # an exception inside the Python observer stops the C forward and is re-raised as is
        calls = []

        def boom(*a, **k):
            calls.append(1)
            raise KeyError("observer failed")

        monkeypatch.setattr(np.ctypeslib, "as_array", boom)
        with pytest.raises(KeyError, match="observer failed"):
            m.forward([1, 2, 3], capture="q")
        assert len(calls) == 1  # stopped after the first layer
        monkeypatch.undo()
        assert m.forward([1, 2, 3], capture="q").captures[1]["q"].shape == (2, 3, 16)


# ---- experiments: diagnose and reproduce on the tiny model, against gpt2_ref ------------------------

def window_reference(tiny, tt, L):
    """gpt2_ref's per-layer weights and logits on window 0 of length L of the corpus body,
    tokenized by tiktoken (a prefix of the body gives the same first L tokens)."""
    _, params, cfg = tiny
    body = A.corpus("war-and-peace", data_path=shared_data())
    tokens = tt.encode(body[:4 * L + 200], disallowed_special=())[:L]
    assert len(tokens) == L
    return R.forward(params, cfg, tokens)


def ref_spectral(z_row, T):
    p = scipy.special.softmax(z_row / T)
    return np.linalg.svd((np.diag(p) - np.outer(p, p)) / T, compute_uv=False)[0]


def test_diagnose_against_reference(tiny, tt, monkeypatch):
    monkeypatch.setenv("ATTNLIM_DATA", shared_data())
    L = 32
    ref = window_reference(tiny, tt, L)
    d = A.diagnose(tiny[0], length=L)
    assert d["L"] == L and len(d["heads"]) == 4
    for h in d["heads"]:
        w, z = ref["w"][h["layer"]][h["head"]], ref["z"][h["layer"]][h["head"]]
        assert h["mean_max_weight"] == pytest.approx(w.max(1).mean(), rel=1e-4)
        assert h["mean_weight_on_token0"] == pytest.approx(w[:, 0].mean(), rel=1e-4)
        ent = [-(w[t, :t + 1] * np.log(w[t, :t + 1])).sum() / np.log(t + 1) for t in range(1, L)]
        assert h["mean_entropy_over_log_n"] == pytest.approx(np.mean(ent), rel=1e-4)
        spec = [ref_spectral(z[t, :t + 1], 1.0) for t in range(1, L)]
        assert h["jacobian_spectral_T1"] == pytest.approx(np.mean(spec), rel=1e-3)
    with pytest.raises(A.AttnlimError, match="no-model-here"):
        A.diagnose("no-model-here")


def test_reproduce_options_and_alg5_against_reference(tiny, tt, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLIM_DATA", shared_data())
    L, temps = 32, [0.5, 2.0]
    r = A.reproduce(str(tmp_path / "out"), model=tiny[0], quick=True, experiments=["vanishing", "alg5"],
                    long_length=L, temperatures=temps, eps=[1e-3], lengths=[16, 32], top_n=[1, 3],
                    critical_n=[1, 2], separability_n=[1, 2], vectors="key", seed=77, mc=5,
                    distance="sum-vector", exact_max=500, directions="fresh",
                    readings="directions=shared")
    # every option set here comes back in the manifest: al_repro_opts' layout round-trips
    o = r["manifest"]["options"]
    assert (o["long_length"], o["temperatures"], o["eps"], o["lengths"], o["top_n"]) == \
        (L, temps, [1e-3], [16, 32], [1, 3])
    assert (o["critical_n"], o["separability_n"], o["vectors"], o["seed"], o["mc_samples"]) == \
        ([1, 2], [1, 2], "key", 77, 5)
    assert o["experiments"] == ["vanishing", "alg5"] and o["quick"] is True
    assert (o["distance"], o["expectation"], o["exact_max"], o["temperature_scale"],
            o["directions"]) == ("sum-vector", "analytic", 500, "scaled", "fresh")
    rd = json.load(open(tmp_path / "out" / "readings.json"))
    assert [e["name"] for e in rd["readings"]] == ["the run", "directions=shared"]
    assert os.path.isfile(tmp_path / "out" / "report.md")
    ref = window_reference(tiny, tt, L)
    spec = np.array(r["alg5"]["per_head"]["spectral"])  # [layer * n_head + head, T]
    for lh in range(4):
        z = ref["z"][lh // 2][lh % 2]
        for i, T in enumerate(temps):
            want = np.mean([ref_spectral(z[t, :t + 1], T) for t in range(1, L)])
            assert spec[lh, i] == pytest.approx(want, rel=1e-3), (lh, T)
    with pytest.raises(ValueError, match="unknown experiment"):
        A.reproduce(str(tmp_path / "x"), experiments=["alg9"])
    with pytest.raises(A.AttnlimError, match="nosuchvectors"):
        A.reproduce(str(tmp_path / "x"), vectors="nosuchvectors")


# ---- errors ------------------------------------------------------------------------------------------

def test_errors_carry_the_c_message(tmp_path):
    with pytest.raises(A.AttnlimError) as e:
        A.normalize([0.0, 1.0, float("nan")])
    assert "2" in str(e.value) and "NaN" in str(e.value) and e.value.code == 5
    with pytest.raises(A.AttnlimError, match="temperature"):
        A.normalize([1.0, 2.0], temperature=0.0)
    with pytest.raises(A.AttnlimError, match="nosuchmax"):
        A.normalize([1.0], method="nosuchmax")
    with pytest.raises(A.AttnlimError) as e:
        A.ks_2samp([], [1.0])
    assert e.value.code == 1 and str(e.value)
    with pytest.raises(A.AttnlimError, match="no-such-model"):
        A.Model(str(tmp_path / "no-such-model.safetensors"))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10 ** 12) + b"{}")
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8, "n_positions": 8, "n_ctx": 8,
         "vocab_size": 10}))
    with pytest.raises(A.AttnlimError, match="bad.safetensors"):
        A.Model(str(bad))
    with pytest.raises(A.AttnlimError, match="nodir"):
        A.Tokenizer.gpt2(str(tmp_path / "nodir"))
    with pytest.raises(A.AttnlimError, match="missing.txt"):
        A.corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(A.AttnlimError, match="entirely masked"):
        A.normalize([-np.inf, -np.inf])
    with pytest.raises(A.AttnlimError, match="empty"):
        A.normalize(np.zeros((2, 0)))
    with pytest.raises(A.AttnlimError, match="60000"):
        with A.Tokenizer.gpt2(os.path.join(shared_data(), "gpt2")) as tok:
            tok.decode([15496, 60000])
    with pytest.raises(A.AttnlimError, match="N = 0"):
        A.row_metrics([0.5, 0.5], np.eye(2), top_n=[0])
    with pytest.raises(A.AttnlimError, match="not increasing"):
        A.critical_n([2, 1], np.ones((2, 3)), np.ones((2, 3)))


def test_model_bad_tokens(tiny):
    with A.Model(tiny[0]) as m:
        with pytest.raises(A.AttnlimError, match="empty window"):
            m.forward([])
        with pytest.raises(A.AttnlimError, match="60000"):
            m.forward([1, 60000])


# ---- packaging and docs ----------------------------------------------------------------------------

def test_version_and_system_loader(tmp_path):
    """The version is the C library's (CMakeLists.txt; pyproject.toml reads it from there), and
    a copy of the package with no library inside it (and none in a build tree beside it) falls
    back to the system loader. The installed package itself: test_package.py."""
    need_env()
    cm = open(os.path.join(SRC, "CMakeLists.txt")).read()
    cver = re.search(r"project\(attnlim VERSION ([0-9.]+)", cm).group(1)
    assert A.version() == cver
    assert 'input = "CMakeLists.txt"' in open(os.path.join(SRC, "pyproject.toml")).read()
    site = tmp_path / "a" / "b" / "site"
    shutil.copytree(os.path.join(SRC, "python", "attnlim"), site / "attnlim",
                    ignore=shutil.ignore_patterns("_native", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNLIM_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    env["LD_LIBRARY_PATH"] = os.path.dirname(LIB)  # as after `cmake --install` + ldconfig
    r = subprocess.run([sys.executable, "-c", "import attnlim, sys; "
                        "print(attnlim.__file__, attnlim.version(), attnlim.normalize([0.0, 0.0])[0], attnlim.lib._name)"],
                       env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    f, v, p, name = r.stdout.split()
    assert f.startswith(str(site)) and v == cver and float(p) == 0.5
    assert not os.path.isabs(name) or name.startswith(os.path.dirname(LIB)), name


def test_docs_examples_run(tmp_path, monkeypatch):
    need_env()
    doc = open(os.path.join(SRC, "docs", "python.md")).read()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNLIM_DATA", shared_data())
    for block in re.findall(r"```sh\n(.*?)```", doc, re.S):
        for line in block.splitlines():
            if line.startswith("attnlim make-model"):
                subprocess.run([BIN] + line.split()[1:], check=True, capture_output=True, timeout=120)
    assert os.path.isdir(tmp_path / "tiny-gpt2")
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert len(blocks) >= 5
    g = {}
    for b in blocks:
        exec(compile(b, "docs/python.md", "exec"), g)
    assert g["w1"].shape == (1, 64, 64) and g["info"]["n_layer"] == 2
