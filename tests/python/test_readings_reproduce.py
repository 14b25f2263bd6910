"""`attnlim reproduce` under the readings of METHOD section 9 (--distance, --expectation,
--vectors residual, --temperature-scale, --directions) on a small random GPT-2: the per-head
numbers against the float64 numpy references of test_readings.py (straight loops, every subset
enumerated) on `attnlim capture` arrays; the raw temperature scale against the identity
softmax((z sqrt d + eps v)/T) = softmax((z + (eps/sqrt d) v)/(T/sqrt d)); what each output
records; --resume refusing other readings."""
import csv
import json
import os
import subprocess

import numpy as np
import pytest

import reproduce_ref as ref
from test_readings import ref_analytic, ref_dist, ref_exact, ref_topn

BIN = os.environ.get("ATTNLIM_BIN")
NL, NH, EMBD = 2, 4, 32  # d_head = 8
L = 10
NS = list(range(1, L))


def run(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"attnlim {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    assert BIN and os.path.exists(BIN), "ATTNLIM_BIN must point to the attnlim CLI"
    d = tmp_path_factory.mktemp("readings")
    model = str(d / "model")
    run("make-model", "--layers", str(NL), "--heads", str(NH), "--embd", str(EMBD), "--ctx", "64",
        "--vocab", "50257", "--seed", "3", "--format", "safetensors", "--out", model)
    cap = str(d / "cap")
    ref.capture(BIN, model, "war-and-peace", 0, L, cap, what="weights,v")
    heads = [(l, h) for l in range(NL) for h in range(NH)]
    w = {l: ref.load_layer(cap, l, "weights") for l in range(NL)}
    v = {l: ref.load_layer(cap, l, "v") for l in range(NL)}
    return {"dir": d, "model": model, "heads": heads, "w": w, "v": v}


def alg3_run(work, name, *opts):
    out = str(work["dir"] / name)
    run("reproduce", "--model", work["model"], "--experiments", "alg3", "--lengths", str(L),
        "--critical-n", ",".join(map(str, NS)), "--out", out, "--threads", "2", "--quiet", *opts)
    res = json.load(open(os.path.join(out, "results.json")))
    dt = np.load(os.path.join(out, "alg3_dtilde.npy"))[0]  # [nN, n_layer, n_head]
    E = np.load(os.path.join(out, "alg3_E.npy"))[0]
    return out, res, dt, E


def head_ref(work, l, h, N, kind, what):
    """The per-head mean over the causal rows with n > N of dist / analytic / exact."""
    W, X = work["w"][l][h].astype(np.float64), work["v"][l][h].astype(np.float64)
    vals = []
    for t in range(N, L):
        a, x = W[t, :t + 1], X[:t + 1]
        if what == "dist":
            vals.append(ref_dist(kind, a, x, ref_topn(a, N)))
        elif what == "analytic":
            vals.append(ref_analytic(kind, a, x, N))
        else:
            vals.append(ref_exact(kind, a, x, N))
    return float(np.mean(vals))


@pytest.mark.parametrize("kind", ["norm-of-sum", "sum-vector", "sum-of-norms"])
def test_distance_and_exact_expectation(work, kind):
    out, res, dt, E = alg3_run(work, "exact_" + kind, "--distance", kind, "--expectation", "exact")
    op = res["manifest"]["options"]
    assert (op["distance"], op["expectation"], op["vectors"]) == (kind, "exact", "value")
    assert kind in res["readings"]["dtilde"] and "exact" in res["readings"]["E"]
    for i, N in enumerate(NS):
        for (l, h) in work["heads"]:
            want = head_ref(work, l, h, N, kind, "dist")
            assert abs(dt[i, l, h] - want) <= 1e-9 * max(abs(want), 1e-12), (N, l, h)
            want = head_ref(work, l, h, N, kind, "exact")
            assert abs(E[i, l, h] - want) <= 1e-9 * max(abs(want), 1e-12), (N, l, h)
    # the KS test ran against the chosen E: its p-values from the same samples
    for i, N in enumerate(NS[:3]):
        from scipy import stats
        p = stats.ks_2samp(dt[i].ravel(), E[i].ravel()).pvalue
        assert abs(res["alg3"]["pvalues"][0][i] - p) <= 1e-9 * max(p, 1e-300)
    rows = list(csv.DictReader(open(os.path.join(out, "alg3_heads.csv"))))
    assert rows[0]["readings"] == f"vectors=value;distance={kind};expectation=exact"


@pytest.mark.parametrize("kind", ["norm-of-sum", "sum-vector"])
def test_analytic_and_mc(work, kind):
    _, _, dt, Ea = alg3_run(work, "an_" + kind, "--distance", kind)
    _, _, _, Ee = alg3_run(work, "ex2_" + kind, "--distance", kind, "--expectation", "exact")
    out, res, dt2, Em = alg3_run(work, "mc_" + kind, "--distance", kind, "--expectation", "mc",
                                 "--mc", "400")
    assert np.array_equal(dt, dt2)  # the true distance does not depend on --expectation
    for i, N in enumerate(NS):
        for (l, h) in work["heads"]:
            want = head_ref(work, l, h, N, kind, "analytic")
            assert abs(Ea[i, l, h] - want) <= 1e-9 * abs(want) + 1e-12
            assert Ea[i, l, h] <= Ee[i, l, h] + 1e-12  # Jensen
    # Monte-Carlo: each head mean within 4 of its standard errors (OUT/partial keeps them,
    # [H, nN]) of the exact one; seeded: the same run twice gives the same numbers
    se = np.load(os.path.join(out, "partial", f"w0_L{L}", "E_mc_se.npy")).T.reshape(Em.shape)
    mc = np.load(os.path.join(out, "partial", f"w0_L{L}", "E_mc.npy")).T.reshape(Em.shape)
    assert np.array_equal(mc, Em) and (se > 0).all()
    assert (np.abs(Em - Ee) <= 4 * se).all(), np.max(np.abs(Em - Ee) / se)
    _, _, _, Em2 = alg3_run(work, "mc2_" + kind, "--distance", kind, "--expectation", "mc",
                            "--mc", "400")
    assert np.array_equal(Em, Em2)


def test_residual_vectors(work):
    """Layer 0's residual stream is the embedding: the same numbers there, others differ."""
    _, res, dr, _ = alg3_run(work, "res", "--vectors", "residual")
    _, _, de, _ = alg3_run(work, "emb", "--vectors", "embedding")
    assert res["manifest"]["options"]["vectors"] == "residual"
    assert np.array_equal(dr[:, 0], de[:, 0])
    assert not np.allclose(dr[:, 1], de[:, 1])


def test_temperature_scale_and_directions(work):
    sd = np.sqrt(EMBD // NH)
    base = ["reproduce", "--model", work["model"], "--experiments", "alg5", "--long-length", "16",
            "--threads", "2", "--quiet"]
    Traw, eps_raw = [0.05, 0.4, 4.0], [0.08, 0.8]
    o_raw, o_sc, o_fr = (str(work["dir"] / n) for n in ("raw", "scaled", "fresh"))
    run(*base, "--out", o_raw, "--temperature-scale", "raw", "--temperatures",
        ",".join(map(str, Traw)), "--eps", ",".join(map(str, eps_raw)))
    run(*base, "--out", o_sc, "--temperatures", ",".join(str(t / sd) for t in Traw), "--eps",
        ",".join(str(e / sd) for e in eps_raw))
    run(*base, "--out", o_fr, "--temperature-scale", "raw", "--directions", "fresh",
        "--temperatures", ",".join(map(str, Traw)), "--eps", ",".join(map(str, eps_raw)))
    sp_raw, sp_sc = (np.load(os.path.join(o, "alg5_spectral.npy")) for o in (o_raw, o_sc))
    fd_raw, fd_sc, fd_fr = (np.load(os.path.join(o, "alg5_fd.npy")) for o in (o_raw, o_sc, o_fr))
    # d softmax(z_raw/T)/d z_raw = (d/dz_scaled) / sqrt(d); the same weights at T_raw = T sqrt(d)
    np.testing.assert_allclose(sp_raw, sp_sc / sd, rtol=1e-9)
    np.testing.assert_allclose(fd_raw, fd_sc / sd, rtol=1e-7)
    assert np.array_equal(np.load(os.path.join(o_fr, "alg5_spectral.npy")), sp_raw)
    assert not np.allclose(fd_fr, fd_raw)
    res = json.load(open(os.path.join(o_fr, "results.json")))
    op = res["manifest"]["options"]
    assert (op["temperature_scale"], op["directions"]) == ("raw", "fresh")
    rows = list(csv.DictReader(open(os.path.join(o_fr, "alg5_g.csv"))))
    assert rows[0]["readings"] == "temperature_scale=raw;directions=fresh"
    md = open(os.path.join(o_fr, "report.md")).read()
    assert "raw" in md and "fresh" in md


def test_resume_refuses_other_readings(work):
    out = str(work["dir"] / "resume")
    base = ["reproduce", "--model", work["model"], "--experiments", "alg3", "--lengths", str(L),
            "--critical-n", "1,2,3", "--out", out, "--quiet"]
    run(*base)
    r = run(*base, "--resume", "--distance", "norm-of-sum", check=False)
    assert r.returncode != 0 and "distance" in r.stderr and "norm-of-sum" in r.stderr
    r = run(*base, "--resume")  # the same readings: reused
    assert r.returncode == 0


def test_critical_grid_reaches_l_minus_1(work):
    res = json.load(open(os.path.join(str(work["dir"] / "an_norm-of-sum"), "results.json")))
    assert res["alg3"]["largest_n_tested"] == [L - 1]
    out = str(work["dir"] / "defgrid")
    run("reproduce", "--model", work["model"], "--experiments", "alg3", "--lengths", "40,64",
        "--out", out, "--quiet", "--threads", "2")
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["alg3"]["largest_n_tested"] == [39, 63]
    assert {39, 63} <= set(res["manifest"]["options"]["critical_n"])
    c = res["alg3"]["critical_n"]["0.01"]
    ratio = res["alg3"]["critical_ratio"]["0.01"]
    for Li, ci, ri in zip([40, 64], c, ratio):
        assert (ri is None) if ci is None else abs(ri - ci / Li) < 1e-15


# ---- --readings: one run, every reading, the same numbers as separate runs -----------------------

VARIANTS = {  # the reading's directory -> (the separate run's options, its experiments)
    "vectors-key": (["--vectors", "key"], "alg1,alg2,alg3,alg4"),
    # the d_model-wide vectors: one Gram matrix per layer, shared by its heads and readings
    "vectors-hidden": (["--vectors", "hidden"], "alg1,alg2,alg3,alg4"),
    "vectors-embedding": (["--vectors", "embedding"], "alg1,alg2,alg3,alg4"),
    "vectors-residual": (["--vectors", "residual"], "alg1,alg2,alg3,alg4"),
    "distance-norm-of-sum": (["--distance", "norm-of-sum"], "alg1,alg2,alg3"),
    # computed in one pass with norm-of-sum (jobs.c, dist_partner): its own bits all the same
    "distance-sum-vector": (["--distance", "sum-vector"], "alg1,alg2,alg3"),
    "expectation-mc": (["--expectation", "mc"], "alg1,alg2,alg3"),
    "temperature-scale-raw": (["--temperature-scale", "raw"], "alg5"),
    "directions-fresh": (["--directions", "fresh"], "alg5"),
    "vectors-hidden+distance-sum-vector+expectation-analytic":
        (["--vectors", "hidden", "--distance", "sum-vector"], "alg3"),
}


@pytest.fixture(scope="module")
def all_run(work):
    out = str(work["dir"] / "all")
    base = ["reproduce", "--model", work["model"], "--quick", "--threads", "2", "--mc", "3",
            "--quiet"]
    run(*base, "--out", out, "--readings", "all")
    return {"out": out, "base": base}


def npys(d):
    return {f: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_readings_equal_separate_runs(work, all_run, name):
    opts, exps = VARIANTS[name]
    sep = str(work["dir"] / ("sep_" + name))
    run(*all_run["base"], "--out", sep, "--experiments", exps, *opts)
    got = npys(os.path.join(all_run["out"], "readings", name))
    want = {f: v for f, v in npys(sep).items() if f != "explorer_weights.npy"}  # not a reading's
    assert got.keys() == want.keys() and got
    for f in want:  # bit for bit: the shared forward changes nothing
        assert np.array_equal(got[f], want[f], equal_nan=True), f
    a = json.load(open(os.path.join(all_run["out"], "readings", name, "results.json")))
    b = json.load(open(os.path.join(sep, "results.json")))
    assert [(v["key"], v["verdict"], v["measured"]) for v in a["verdicts"]] == \
           [(v["key"], v["verdict"], v["measured"]) for v in b["verdicts"]]


def test_readings_outputs(work, all_run):
    out = all_run["out"]
    rd = json.load(open(os.path.join(out, "readings.json")))
    names = [e["name"] for e in rd["readings"]]
    assert names[0] == "the run" and "distance=sum-vector" in names and "vectors=residual" in names
    assert any(e["kind"] == "cross product" for e in rd["readings"])
    claims = {"critical_n", "separability", "sensitivity", "distance_linear", "convergence"}
    assert set(rd["robust"]) | set(rd["reading_dependent"]) == claims
    assert not set(rd["robust"]) & set(rd["reading_dependent"])
    for key, d in rd["reading_dependent"].items():  # every reading is listed once per claim
        listed = d["holds_under"] + d["does_not_hold_under"] + d["not_testable_under"]
        assert sorted(listed) == sorted(e["name"] for e in rd["readings"]
                                        if key in e["verdicts"])
    left = {x["reading"]: x["why"] for x in rd["not_evaluated"]}  # a list: nothing cut short
    assert "expectation=exact" in left and left["expectation=exact"]  # C(16, 7) over the cap
    e = next(e for e in rd["readings"] if e["name"] == "distance=norm-of-sum")
    crit = e["critical_n"]
    assert len(crit["ratio"]) == len(crit["L"]) == 3
    for ra in e["ratio_dtilde_over_E"]:
        assert len(ra["N_over_L"]) == len(ra["median"]) and max(ra["N_over_L"]) == \
            (ra["L"] - 1) / ra["L"]
    # the ratio of the run at the largest L from its own NPYs
    dt = np.load(os.path.join(out, "alg3_dtilde.npy"))[-1]
    E = np.load(os.path.join(out, "alg3_E.npy"))[-1]
    r0 = next(e for e in rd["readings"] if e["name"] == "the run")["ratio_dtilde_over_E"][-1]
    n = len(r0["median"])
    med = np.median((dt[:n] / E[:n]).reshape(n, -1), axis=1)
    np.testing.assert_allclose(r0["median"], med, rtol=1e-12)
    rows = list(csv.DictReader(open(os.path.join(out, "readings.csv"))))
    assert {r["claim"] for r in rows} == claims
    md = open(os.path.join(out, "report.md")).read()
    assert "## Verdicts under every reading" in md and "fig_readings_crit.png" in md
    # the numbers behind the matrix: N_crit / L per L, and dtilde / E at the largest L, as
    # readings.json has them (the run's row)
    run0 = next(e for e in rd["readings"] if e["name"] == "the run")
    lines = md.splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith("N_crit / L per L (KS at 0.01"))
    row = next(l for l in lines[i:] if l.startswith("| the run |"))
    want = ["%.3f" % r if r is not None else "none" for r in run0["critical_n"]["ratio"]]
    assert [c.strip() for c in row.strip("|").split("|")[1:]] == want, (row, want)
    j = next(k for k, l in enumerate(lines) if l.startswith("Why it lands there"))
    row = next(l for l in lines[j:] if l.startswith("| the run |"))
    ra = run0["ratio_dtilde_over_E"][-1]
    last = row.strip("|").split("|")[-1].strip()  # N / L ~ 1: the grid's largest, (L - 1) / L
    assert last == "%.3g (%.3f)" % (ra["median"][-1], ra["N_over_L"][-1]), (last, ra)
    assert "Verdicts under every reading" in open(os.path.join(out, "report.html")).read()
    assert os.path.exists(os.path.join(out, "fig_readings_ratio.svg"))


def test_readings_resume(work, all_run):
    out = str(work["dir"] / "all_resume")
    args = [*all_run["base"], "--out", out, "--readings", "distance=norm-of-sum;vectors=key"]
    run(*args)
    first = npys(os.path.join(out, "readings", "vectors-key"))
    r = subprocess.run([BIN, *[a for a in args if a != "--quiet"], "--resume"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "reused 3 and computed 0" in r.stderr, r.stderr
    again = npys(os.path.join(out, "readings", "vectors-key"))
    assert all(np.array_equal(first[f], again[f], equal_nan=True) for f in first)


@pytest.mark.parametrize("bad,msg", [
    ("colour=red", "unknown axis 'colour'"),
    ("distance", "is not AXIS=VALUE"),
    ("distance=far", "allowed: sum-of-norms, norm-of-sum, sum-vector"),
    ("distance=sum-of-norms", "the run's own reading"),
    ("expectation=exact", "exceeds the cap"),
])
def test_readings_refused_before_work(work, tmp_path, bad, msg):
    out = tmp_path / "o"
    r = run("reproduce", "--model", work["model"], "--quick", "--quiet", "--out", str(out),
            "--readings", bad, check=False)
    assert r.returncode != 0 and msg in r.stderr, r.stderr
    assert not out.exists() or not [f for _, _, fs in os.walk(out) for f in fs]
