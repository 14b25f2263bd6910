"""`attnlim reproduce` against an independent numpy fp64 reference (reproduce_ref.py) on a
small random GPT-2, --quick grids and two windows; plus a golden end-to-end check of every
output file (JSON, CSV, NPY, SVG structure, PNG), --resume, --normalizer, and bad input."""
import csv
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from scipy import stats

from jsoncmp import close_json as _close_json

import reproduce_ref as ref

BIN = os.environ.get("ATTNLIM_BIN")
RTOL = 1e-6


def run(*args, check=True, **kw):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"attnlim {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    assert BIN and os.path.exists(BIN), "ATTNLIM_BIN must point to the attnlim CLI (run through ctest)"
    d = tmp_path_factory.mktemp("repro")
    model = str(d / "model")
    run("make-model", "--layers", "3", "--heads", "4", "--embd", "64", "--ctx", "128", "--vocab", "50257",
        "--seed", "7", "--format", "safetensors", "--out", model)
    out = str(d / "out")
    r = run("reproduce", "--model", model, "--quick", "--windows", "2", "--out", out, "--threads", "2",
            "--temperatures", "0.001,0.01,0.1,1,10", "--json")
    summary = json.loads(r.stdout)
    return {"dir": d, "model": model, "out": out, "summary": summary,
            "res": json.load(open(os.path.join(out, "results.json")))}


def close(a, b, what):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    ok = np.isclose(a, b, rtol=RTOL, atol=1e-12) | (np.isnan(a) & np.isnan(b))
    assert ok.all(), f"{what}: max rel diff {np.nanmax(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))}"


@pytest.fixture(scope="module")
def reference(work):
    """The reference over both windows of every L, from `attnlim capture` arrays."""
    res = work["res"]
    opts = res["manifest"]["options"]
    Ls, longL = opts["lengths"], opts["long_length"]
    N2, N3, N4, Ts = opts["top_n"], opts["critical_n"], opts["separability_n"], opts["temperatures"]
    nl, nh = res["manifest"]["model"]["n_layer"], res["manifest"]["model"]["n_head"]
    W = res["manifest"]["windows"]["count"]
    cap = str(work["dir"] / "cap")
    out = {}
    for L in sorted(set(Ls) | {longL}):
        Nd = sorted({n for n in N3 if n < L} | {5} | (set(n for n in N2 if n < L) if L == longL else set()))
        acc = {}
        for w in range(W):
            shutil.rmtree(cap, ignore_errors=True)
            ref.capture(BIN, work["model"], "war-and-peace", w, L, cap)
            for l in range(nl):
                wts, z, v = (ref.load_layer(cap, l, s) for s in ("weights", "logits", "v"))
                q, k = ref.load_layer(cap, l, "q"), ref.load_layer(cap, l, "k")
                for h in range(nh):
                    dist = ref.head_distance(wts[h], v[h], Nd)
                    for N, vals in dist.items():
                        acc.setdefault(("dist", N, l, h), []).append(vals)
                    if L == longL:
                        for N, vals in ref.head_separability(wts[h], v[h], N4).items():
                            acc.setdefault(("sep", N, l, h), []).append(vals)
                        mx, ent, D = ref.head_vanishing(wts[h], q[h], k[h])
                        acc.setdefault(("van", l, h), []).append((mx, ent, D))
                        zz = np.where(np.isfinite(z[h]), z[h], 0.0)
                        acc.setdefault(("spec", l, h), []).append(ref.head_spectral(zz, Ts))
        out[L] = {key: np.mean(np.array(v, dtype=float), axis=0) for key, v in acc.items()}
    return {"by_L": out, "Ls": Ls, "longL": longL, "N2": N2, "N3": N3, "N4": N4, "T": Ts, "nl": nl, "nh": nh}


def test_alg1_alg2_per_head(work, reference):
    out, R = work["out"], reference
    a1 = [np.load(os.path.join(out, f"alg1_{s}.npy")) for s in ("dtilde", "dmax", "E")]
    for li, L in enumerate(R["Ls"]):
        for l in range(R["nl"]):
            for h in range(R["nh"]):
                exp = R["by_L"][L][("dist", 5, l, h)]
                for k in range(3):
                    close(a1[k][li, l, h], exp[k], f"alg1 L={L} layer {l} head {h} stat {k}")
    a2 = [np.load(os.path.join(out, f"alg2_{s}.npy")) for s in ("dtilde", "dmax", "E")]
    for i, N in enumerate(R["N2"]):
        for l in range(R["nl"]):
            for h in range(R["nh"]):
                exp = R["by_L"][R["longL"]][("dist", N, l, h)]
                for k in range(3):
                    close(a2[k][i, l, h], exp[k], f"alg2 N={N} layer {l} head {h} stat {k}")
    # dtilde <= dmax everywhere (softmax weights are non-negative)
    assert (a1[0] <= a1[1] * (1 + 1e-12)).all() and (a2[0] <= a2[1] * (1 + 1e-12)).all()
    # the aggregated summaries in results.json are numpy's over heads
    j = work["res"]["alg1"]
    for li in range(len(R["Ls"])):
        col = a1[0][li].ravel()
        close(j["dtilde"]["mean"][li], col.mean(), "alg1 mean")
        close(j["dtilde"]["median"][li], np.percentile(col, 50), "alg1 median")
        close(j["dtilde"]["q1"][li], np.percentile(col, 25), "alg1 q1")


def test_alg3_critical_n(work, reference):
    R, res = reference, work["res"]
    dt, E = np.load(os.path.join(work["out"], "alg3_dtilde.npy")), np.load(os.path.join(work["out"], "alg3_E.npy"))
    crit = {0.01: [], 0.05: []}
    for li, L in enumerate(R["Ls"]):
        Ns = [n for n in R["N3"] if n < L]
        rdt = np.array([[R["by_L"][L][("dist", N, l, h)][0] for l in range(R["nl"]) for h in range(R["nh"])] for N in Ns])
        rE = np.array([[R["by_L"][L][("dist", N, l, h)][2] for l in range(R["nl"]) for h in range(R["nh"])] for N in Ns])
        close(dt[li, :len(Ns)].reshape(len(Ns), -1), rdt, f"alg3 dtilde L={L}")
        close(E[li, :len(Ns)].reshape(len(Ns), -1), rE, f"alg3 E L={L}")
        assert np.isnan(dt[li, len(Ns):]).all()
        for level in (0.01, 0.05):
            c, ps = ref.critical_n(Ns, rdt, rE, level)
            crit[level].append(c)
            if level == 0.01:
                close(res["alg3"]["pvalues"][li][:len(Ns)], ps, f"alg3 p-values L={L}")
    for level, key in ((0.01, "0.01"), (0.05, "0.05")):
        got = [(-1 if v is None else v) for v in res["alg3"]["critical_n"][key]]
        assert got == crit[level], f"critical N at {key}: {got} vs reference {crit[level]}"
        pts = [(L, c) for L, c in zip(R["Ls"], crit[level]) if c > 0]
        if pts:
            close(res["alg3"]["slope"][key], ref.slope_origin(*zip(*pts)), f"slope at {key}")
        else:
            assert res["alg3"]["slope"][key] is None


def test_alg4_separability(work, reference):
    R = reference
    a4 = [np.load(os.path.join(work["out"], f"alg4_{s}.npy")) for s in ("ratio", "lower", "upper")]
    for i, N in enumerate(R["N4"]):
        for l in range(R["nl"]):
            for h in range(R["nh"]):
                exp = R["by_L"][R["longL"]][("sep", N, l, h)]
                for k in range(3):
                    close(a4[k][i, l, h], exp[k], f"alg4 N={N} layer {l} head {h} stat {k}")
    for k in range(3):  # ratios and the reconstructed bounds are fractions
        assert ((a4[k] >= 0) & (a4[k] <= 1)).all()


def test_vanishing(work, reference):
    R = reference
    names = ("max_weight", "entropy", "D")
    arrs = [np.load(os.path.join(work["out"], f"vanishing_{s}.npy")) for s in names]
    for l in range(R["nl"]):
        for h in range(R["nh"]):
            exp = R["by_L"][R["longL"]][("van", l, h)]
            for k in range(3):
                close(arrs[k][l, h], exp[k], f"vanishing {names[k]} layer {l} head {h}")
    v = work["res"]["vanishing"]
    assert v["band"]["applies"] and v["band"]["inside_fraction"] == 1.0


def test_alg5_spectral_and_fd(work, reference):
    R, res = reference, work["res"]
    spec = np.load(os.path.join(work["out"], "alg5_spectral.npy"))
    fd = np.load(os.path.join(work["out"], "alg5_fd.npy"))
    for l in range(R["nl"]):
        for h in range(R["nh"]):
            close(spec[l, h], R["by_L"][R["longL"]][("spec", l, h)], f"alg5 spectral layer {l} head {h}")
    close(res["alg5"]["spectral"], spec.reshape(-1, spec.shape[-1]).max(axis=0), "alg5 max over heads")
    close(np.array(res["alg5"]["g"]), fd.reshape(-1, *fd.shape[-2:]).max(axis=0), "alg5 g = max over heads")
    # a unit direction cannot beat the spectral norm (to first order, eps = 1e-3); 1/(2T) is the supremum
    T = np.array(R["T"])
    assert (fd[..., 0] <= spec * (1 + 1e-2) + 1e-9).all()
    assert (spec <= 1 / (2 * T) * (1 + 1e-9)).all()
    flagged = res["alg5"]["above_1_over_4T"]
    want = sum(int(g > 1 / (4 * t)) for t, row in zip(T, res["alg5"]["g"]) for g in row) + \
        sum(int(s > 1 / (4 * t)) for t, s in zip(T, res["alg5"]["spectral"]))
    assert len(flagged) == want


def _svg_meta(path):
    root = ET.parse(path).getroot()
    meta = [e for e in root.iter() if e.tag.endswith("metadata")]
    assert meta, f"{path}: no metadata"
    plot = [e for e in meta[0].iter() if e.tag.endswith("plot")][0]
    axes = [e for e in plot if e.tag.endswith("axis")]
    series = [e for e in plot if e.tag.endswith("series")]
    boxes = [e for e in plot if e.tag.endswith("box")]
    hm = [e for e in plot if e.tag.endswith("heatmap")]
    paths = [e for e in root.iter() if e.tag.endswith("path")]
    return plot, axes, series, boxes, hm, paths


def _png_size(path):
    b = open(path, "rb").read(32)
    assert b[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    assert b[12:16] == b"IHDR"
    return struct.unpack(">II", b[16:24])


def test_golden_files(work):
    out, res = work["out"], work["res"]
    for key in ("manifest", "vanishing", "alg1", "alg2", "alg3", "alg4", "alg5", "verdicts"):
        assert key in res, key
    assert set(res["alg3"]["critical_n"]) == {"0.01", "0.05"} and set(res["alg3"]["slope"]) == {"0.01", "0.05"}
    man = res["manifest"]
    assert man["model"]["random_weights"] is True and len(man["model"]["sha256"]) == 64
    assert man["options"]["vectors"] == "value" and man["windows"]["count"] == 2
    assert all(k in man["timings"] for k in ("forward_cpu_s", "jobs_wall_s", "total_s"))
    nl, nh = man["model"]["n_layer"], man["model"]["n_head"]
    # CSVs: tidy, one row per (layer, head, L, N ...)
    expect_rows = {"alg1.csv": nl * nh * len(man["options"]["lengths"]),
                   "alg2.csv": nl * nh * len(man["options"]["top_n"]),
                   "alg4.csv": nl * nh * len(man["options"]["separability_n"]),
                   "alg5.csv": nl * nh * len(man["options"]["temperatures"]) * (len(man["options"]["eps"]) + 1),
                   "vanishing.csv": nl * nh * man["options"]["long_length"]}
    for name, n in expect_rows.items():
        rows = list(csv.DictReader(open(os.path.join(out, name))))
        assert len(rows) == n, f"{name}: {len(rows)} rows, expected {n}"
        assert "layer" in rows[0] and "head" in rows[0]
    rows = list(csv.DictReader(open(os.path.join(out, "alg3.csv"))))
    assert len(rows) == sum(1 for L in man["options"]["lengths"] for N in man["options"]["critical_n"] if N < L)
    # figures
    figs = ["fig2a", "fig2b", "fig2c", "fig3", "fig4", "vanishing", "vanishing_entropy", "heatmap_dtilde",
            "heatmap_E", "heatmap_ns_ratio", "heatmap_spectral", "heatmap_max_weight", "heatmap_entropy"]
    html = open(os.path.join(out, "report.html")).read()
    md = open(os.path.join(out, "report.md")).read()
    for f in figs:
        plot, axes, series, boxes, hm, paths = _svg_meta(os.path.join(out, f + ".svg"))
        assert len(axes) == 2 and all(a.get("label") for a in axes), f"{f}: axes"
        assert all(len(a.get("ticks").split()) >= 2 for a in axes), f"{f}: ticks"
        assert series or boxes or hm, f"{f}: no data"
        assert len(paths) > 10, f"{f}: nothing drawn"
        assert _png_size(os.path.join(out, f + ".png")) == (1230, 810)
        assert f"({f}.svg)" in md
    assert html.count("data:image/png;base64,") == len(figs)
    # log axes where the paper has them
    def scales(f):
        return [a.get("scale") for a in _svg_meta(os.path.join(out, f + ".svg"))[1]]
    assert scales("fig4") == ["log", "log"] and scales("fig2c") == ["linear", "linear"]
    assert scales("fig2a")[0] == "log" and scales("fig2b")[0] == "log" and scales("fig3")[0] == "log"
    # the figures show the data of results.json
    _, _, series, _, _, _ = _svg_meta(os.path.join(out, "fig2a.svg"))
    y = [float(v) for v in series[0].get("y").split()]
    close(y, res["alg1"]["dtilde"]["mean"], "fig2a series = alg1 mean dtilde")
    _, _, _, boxes, _, _ = _svg_meta(os.path.join(out, "fig3.svg"))
    close([float(b.get("median")) for b in boxes], res["alg4"]["ratio"]["median"], "fig3 medians")
    _, _, _, _, hm, _ = _svg_meta(os.path.join(out, "heatmap_dtilde.svg"))
    assert hm[0].get("rows") == str(nl) and hm[0].get("cols") == str(nh)
    # the paper-vs-measured table: 5 claims, each with a verdict; random weights said
    assert len(res["verdicts"]) == 5
    for v in res["verdicts"]:
        assert v["verdict"] == "smoke test (--quick: no verdict)"  # --quick: no verdicts
        assert "Random weights" in v["why"]
    assert "RANDOM WEIGHTS" in md and "[reading]" in md and "| paper's claim |" in md
    assert work["summary"]["verdicts"] == res["verdicts"]


# the options of the module's run (the `work` fixture), for the resume tests
RUN_OPTS = ("--quick", "--windows", "2", "--threads", "2", "--temperatures", "0.001,0.01,0.1,1,10")
JOBS = [f"w{w}_L{L}" for w in range(2) for L in (16, 32, 64)]  # --quick, two windows
FINAL = {"results.json", "report.md", "report.html"}


def _files(d):
    """{relative path: (inode, mtime_ns, sha256)} of every file under d but the lock (whose
    content is the pid of its last owner)."""
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            if n == ".attnlim-reproduce.lock":
                continue
            f = os.path.join(root, n)
            st = os.stat(f)
            out[os.path.relpath(f, d)] = (st.st_ino, st.st_mtime_ns, hashlib.sha256(open(f, "rb").read()).hexdigest())
    return out


def _temps(d):
    return sorted(k for k in _files(d) if re.search(r"\.tmp\.\d+$", k))


def _default_signals():
    # a suite started from a non-interactive background shell inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _check_partial(part, nh):
    """Every file under a final name in partial/ is complete; a job with done.json has every
    array, none newer than its marker."""
    for job in os.listdir(part):
        d = os.path.join(part, job)
        if not os.path.isdir(d):
            assert job == "run.json" or re.search(r"\.tmp\.\d+$", job), job
            if job == "run.json":
                json.load(open(d))
            continue
        names = [n for n in os.listdir(d) if not re.search(r"\.tmp\.\d+$", n)]
        for n in names:
            f = os.path.join(d, n)
            if n == "done.json":
                assert json.load(open(f))["key"]
                continue
            a = np.load(f)  # a truncated file fails here
            assert n.endswith(".npy") and a.dtype == np.float64 and a.ndim == 2 and a.shape[0] == nh, f
            with open(f, "rb") as fh:  # header + data, nothing more
                np.lib.format.read_magic(fh)
                np.lib.format.read_array_header_1_0(fh)
                assert fh.tell() + a.nbytes == os.path.getsize(f), f
        if "done.json" in names:
            want = {"dtilde", "dmax", "E", "E_mc", "E_mc_se", "ns_ratio", "ns_lower", "ns_upper"}
            if job.endswith("_L64"):
                want |= {"van_max", "van_entropy", "van_D", "alg5_fd", "alg5_spec"}
            assert {n[:-4] for n in names if n.endswith(".npy")} == want, job
            t_done = os.stat(os.path.join(d, "done.json")).st_mtime_ns
            assert all(os.stat(os.path.join(d, n)).st_mtime_ns <= t_done for n in names), job


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_kill_and_resume(work, tmp_path, sig):
    out = str(tmp_path / "out")
    part = os.path.join(out, "partial")
    args = [BIN, "reproduce", "--model", work["model"], *RUN_OPTS, "--out", out, "--quiet"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_default_signals)
    deadline = time.monotonic() + 300
    while not any(os.path.exists(os.path.join(part, j, "done.json")) for j in JOBS):
        assert proc.poll() is None, f"reproduce ended ({proc.returncode}) before a job was done"
        assert time.monotonic() < deadline, "no job done in 300 s"
        time.sleep(0.001)
    assert proc.poll() is None, "reproduce finished before it could be interrupted"
    proc.send_signal(sig)
    rc = proc.wait(timeout=120)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    # interrupted for real: by the signal (or a non-zero exit), some jobs done, not all
    assert rc == -sig or (sig != signal.SIGKILL and rc > 0), f"exit {rc}: {err}"
    assert err == "", err  # --quiet
    done = [j for j in JOBS if os.path.exists(os.path.join(part, j, "done.json"))]
    assert 1 <= len(done) < len(JOBS), done
    # no output under a final name; partial/ holds only complete files (and temp files)
    top = {n for n in os.listdir(out) if not re.search(r"\.tmp\.\d+$", n)}
    assert top <= {"partial", ".attnlim-reproduce.lock"}, top
    assert not FINAL & top
    nh = work["res"]["manifest"]["model"]["n_layer"] * work["res"]["manifest"]["model"]["n_head"]
    _check_partial(part, nh)
    # temp files of dead runs (one left where an output would go, one beside a finished job)
    for f in (os.path.join(out, "results.json.tmp.999999999"), os.path.join(part, done[0], "dtilde.npy.tmp.4")):
        open(f, "wb").write(b"half")
    temps = _temps(out)
    kept = {k: v for k, v in _files(out).items() if k.split(os.sep)[1:2] and k.split(os.sep)[1] in done
            and k not in temps}
    t0 = time.time_ns()
    r = run("reproduce", "--model", work["model"], *RUN_OPTS, "--out", out, "--resume")
    res = json.load(open(os.path.join(out, "results.json")))
    n = len(done)
    assert res["manifest"]["resume"] == {"requested": True, "jobs": 6, "reused": n, "computed": 6 - n, "stale": 0,
                                         "temp_files_removed": len(temps)}
    assert f"reused {n} and computed {6 - n} of 6 (window, L) jobs" in r.stderr, r.stderr
    assert f"removed {len(temps)} temporary file(s)" in r.stderr, r.stderr
    after = _files(out)
    for k, v in kept.items():  # the finished jobs: same inode, mtime, content
        assert after.get(k) == v, f"{k} was touched by --resume"
    for j in JOBS:
        if j not in done:
            assert os.stat(os.path.join(part, j, "done.json")).st_mtime_ns >= t0, f"{j} not computed"
    assert _temps(out) == []
    _check_partial(part, nh)
    _close_json(res, work["res"])


def test_resume_other_options(work, tmp_path):
    out = str(tmp_path / "out")
    shutil.copytree(work["out"], out)
    # options that change every job: refused, naming what differs, nothing touched
    other = str(tmp_path / "model2")
    run("make-model", "--layers", "3", "--heads", "4", "--embd", "64", "--ctx", "128", "--vocab", "50257",
        "--seed", "8", "--format", "safetensors", "--out", other)
    before = _files(out)
    cases = [(("--model", other), ["model", "model2"]),
             (("--normalizer", "sparsemax"), ["normalizer", "-> \"sparsemax\""]),
             (("--vectors", "key"), ["vectors \"value\" -> \"key\""]),
             (("--seed", "99"), ["seed 1234 -> 99"]),
             (("--temperatures", "1,10"), ["temperatures [0.001,0.01,0.1,1,10] -> [1,10]"])]
    for extra, said in cases:
        a = ["reproduce", "--model", work["model"], *RUN_OPTS, "--out", out, "--resume", *extra]
        r = run(*a, check=False)
        assert r.returncode == 1 and "other options" in r.stderr and "without --resume" in r.stderr, r.stderr
        for s in said:
            assert s in r.stderr, (extra, r.stderr)
        assert _files(out) == before, f"{extra}: the refused resume changed {out}"
    # two options at once: both named
    r = run("reproduce", "--model", work["model"], *RUN_OPTS, "--out", out, "--resume", "--normalizer",
            "entmax15", "--vectors", "hidden", check=False)
    assert r.returncode == 1 and "normalizer" in r.stderr and "vectors" in r.stderr
    # another grid: only the jobs it changes are recomputed (N = 9 of Algorithm 2 is in no other
    # grid: the long L only); a grid whose N are all computed already (--top-n 1,3) reuses all
    keep = {k: v for k, v in before.items() if "_L64" not in k and k.startswith("partial")
            and not k.endswith("run.json")}
    r = run("reproduce", "--model", work["model"], *RUN_OPTS, "--out", out, "--resume", "--top-n", "1,9")
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["manifest"]["resume"] == {"requested": True, "jobs": 6, "reused": 4, "computed": 2, "stale": 2,
                                         "temp_files_removed": 0}
    assert "2 recomputed: saved with other grids or options, unreadable, of another shape, not finite where they must be, or not matching their checksum: w0_L64, w1_L64" in r.stderr, r.stderr
    after = _files(out)
    assert all(after[k] == v for k, v in keep.items())
    for key in ("vanishing", "alg1", "alg3", "alg4", "alg5"):
        _close_json(res[key], work["res"][key], key)
    assert res["manifest"]["options"]["top_n"] == [1, 9]
    for stat in ("mean", "median", "max"):  # N = 1 of Algorithm 2 recomputed, the same numbers
        _close_json(res["alg2"]["dtilde"][stat][0], work["res"]["alg2"]["dtilde"][stat][0], "alg2 N=1")
    # one run per output directory: a second one is refused while the first holds the lock
    with open(os.path.join(out, ".attnlim-reproduce.lock"), "a+") as f:  # removed at exit: anew
        fcntl.flock(f, fcntl.LOCK_EX)
        f.truncate(0)
        f.write(f"{os.getpid()}\n")
        f.flush()
        before = _files(out)
        r = run("reproduce", "--model", work["model"], *RUN_OPTS, "--out", out, "--resume", check=False)
        assert r.returncode == 1 and "another `attnlim reproduce`" in r.stderr and f"pid {os.getpid()}" in r.stderr
        assert _files(out) == before


def test_normalizer_sparsemax(work):
    out = str(work["dir"] / "sparse")
    run("reproduce", "--model", work["model"], "--quick", "--out", out, "--normalizer", "sparsemax",
        "--experiments", "alg1", "--lengths", "32", "--quiet")
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["manifest"]["options"]["normalizer"] == "sparsemax"
    cap = str(work["dir"] / "cap_sp")
    ref.capture(BIN, work["model"], "war-and-peace", 0, 32, cap, what="logits,v")
    got = np.load(os.path.join(out, "alg1_dtilde.npy"))
    for l in range(3):
        z, v = ref.load_layer(cap, l, "logits"), ref.load_layer(cap, l, "v")
        for h in range(4):
            zz = np.where(np.isfinite(z[h]), z[h], 0.0)
            w = ref.renormalise(zz, True, ref.sparsemax)
            close(got[0, l, h], ref.head_distance(w, v[h], [5])[5][0], f"sparsemax dtilde layer {l} head {h}")
    out2 = str(work["dir"] / "sa")
    run("reproduce", "--model", work["model"], "--quick", "--out", out2, "--normalizer", "sa-softmax",
        "--experiments", "alg1", "--lengths", "32", "--quiet")
    res2 = json.load(open(os.path.join(out2, "results.json")))
    assert res2["manifest"]["options"]["weights_sum_to_one"] is False
    assert "do NOT sum to 1" in open(os.path.join(out2, "report.md")).read()


def test_bad_input(work, tmp_path):
    r = run("reproduce", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "nope" in r.stderr
    r = run("reproduce", "--model", work["model"], "--lengths", "32,4096", "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "4096" in r.stderr
    small = tmp_path / "small.txt"
    small.write_text("a few words only")
    r = run("reproduce", "--model", work["model"], "--quick", "--corpus", str(small), "--out", str(tmp_path / "o"),
            check=False)
    assert r.returncode != 0 and "tokens" in r.stderr and "small.txt" in r.stderr
    r = run("reproduce", "--vectors", "bogus", check=False)
    assert r.returncode == 2 and "bogus" in r.stderr
    r = run("reproduce", "--normalizer", "bogus", "--model", work["model"], "--out", str(tmp_path / "o"), check=False)
    assert r.returncode != 0 and "bogus" in r.stderr
    assert not (tmp_path / "o" / "results.json").exists()


def test_diagnose(work, tmp_path):
    out = str(tmp_path / "diag")
    r = run("diagnose", "--model", work["model"], "--length", "64", "--window", "1", "--out", out, "--json")
    d = json.loads(r.stdout)
    assert json.load(open(os.path.join(out, "diagnose.json"))) == d
    md = open(os.path.join(out, "diagnose.md")).read()
    assert md.count("\n| ") == 1 + 12  # header + one row per head
    cap = str(tmp_path / "cap")
    ref.capture(BIN, work["model"], "war-and-peace", 1, 64, cap, what="weights,logits,v,q,k")
    Ns = d["separability_N"]
    assert Ns == [4, 16]  # N = 1 is left out: N_s/N = 1 by construction
    for item in d["heads"]:
        l, h = item["layer"], item["head"]
        w, z, v = (ref.load_layer(cap, l, s)[h] for s in ("weights", "logits", "v"))
        mx, ent, _ = ref.head_vanishing(w, ref.load_layer(cap, l, "q")[h], ref.load_layer(cap, l, "k")[h])
        n = np.arange(1, 65)
        close(item["mean_max_weight"], mx.mean(), "diagnose max weight")
        close(item["mean_entropy_over_log_n"], (ent[1:] / np.log(n[1:])).mean(), "diagnose entropy")
        close(item["mean_weight_on_token0"], w[:, 0].mean(), "diagnose sink")
        sep = ref.head_separability(w, v, Ns)
        close(item["ns_ratio"], [sep[N][0] for N in Ns], "diagnose N_s/N")
        close(item["jacobian_spectral_T1"], ref.head_spectral(np.where(np.isfinite(z), z, 0.0), [1.0])[0],
              "diagnose spectral")
        want = set()
        if item["mean_max_weight"] > 0.9 or item["mean_entropy_over_log_n"] < 0.1:
            want.add("collapsed")
        if item["mean_entropy_over_log_n"] > 0.95:
            want.add("vanishing")
        if item["mean_weight_on_token0"] > 0.5:
            want.add("sink")
        assert set(item["flags"]) == want
    r = run("diagnose", "--model", work["model"], "--length", "4096", check=False)
    assert r.returncode != 0 and "4096" in r.stderr


def _gpt2_ids(text):
    """HF tokenizers' GPT-2 BPE ids of text (the shared encoder.json and vocab.bpe)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    data = os.path.join(os.environ["ATTNLIM_SOURCE_DIR"], "..", "shared", "data", "gpt2")
    tk = Tokenizer(models.BPE.from_file(os.path.join(data, "encoder.json"),
                                        os.path.join(data, "vocab.bpe")))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tk.encode(text).ids


def test_windows_all_is_every_window_of_the_corpus(work, tmp_path):
    """--windows all: K = floor(tokens / longest L) windows, the tokens counted by HF tokenizers;
    the same run as --windows K; a corpus without one window is refused by name."""
    text = ("Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. "
            "But I warn you, if you don't tell me that this means war, if you still try to "
            "defend the infamies and horrors perpetrated by that Antichrist, I really believe "
            "he is Antichrist, I will have nothing more to do with you. ") * 3
    corpus = tmp_path / "c.txt"
    corpus.write_text(text, encoding="utf-8")
    K = len(_gpt2_ids(text)) // 64  # --quick: L = 16, 32, 64
    assert K >= 2
    out = tmp_path / "all"
    r = run("reproduce", "--model", work["model"], "--quick", "--windows", "all", "--corpus",
            str(corpus), "--out", str(out), "--threads", "2", "--experiments", "vanishing")
    res = json.load(open(out / "results.json"))
    assert res["manifest"]["windows"]["count"] == K, (res["manifest"]["windows"], r.stderr)
    outk = tmp_path / "k"
    run("reproduce", "--model", work["model"], "--quick", "--windows", str(K), "--corpus",
        str(corpus), "--out", str(outk), "--threads", "2", "--experiments", "vanishing")
    resk = json.load(open(outk / "results.json"))
    assert res["vanishing"] == resk["vanishing"]
    short = tmp_path / "short.txt"
    short.write_text("Too short for a window.", encoding="utf-8")
    r = run("reproduce", "--model", work["model"], "--quick", "--windows", "all", "--corpus",
            str(short), "--out", str(tmp_path / "s"), "--threads", "2", check=False)
    assert r.returncode != 0 and "--windows all" in r.stderr and "short.txt" in r.stderr, r.stderr
    assert not (tmp_path / "s").exists()


def test_distance_figures_show_the_spread_over_windows(work):
    """With several windows, Fig. 2a and 2b draw dtilde's mean over heads as the median and IQR
    band over the windows (beside the IQR over heads)."""
    for fig in ("fig2a.svg", "fig2b.svg"):
        svg = open(os.path.join(work["out"], fig), encoding="utf-8").read()
        assert "dtilde, mean over heads: median, IQR over 2 windows" in svg, fig
