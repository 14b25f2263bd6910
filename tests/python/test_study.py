"""attnlim study on a tiny budget: every output is there and consistent, the softmax run's
diagnostics equal an independent computation on HF transformers' attention weights of the same
checkpoint and windows (max weight and H / log n against n, the softmax Jacobian's spectral norm
by numpy's eigvalsh), a second invocation resumes without retraining, bad options are errors.
"""
import csv
import json
import os
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("ATTNLIM_BIN must be set (run through ctest)")

T, WINDOWS, VAL_FRAC = 32, 2, 0.1
NORMS = "softmax,sparsemax,entmax:1.3,ssmax,sa-softmax"


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"attnlim {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    d = tmp_path_factory.mktemp("study")
    rng = np.random.default_rng(8)
    words = ["the", "prince", "said", "and", "Natasha", "war", "of", "peace", "Moscow", "a"]
    (d / "corpus.txt").write_text(" ".join(rng.choice(words, 2000)) + "\n")
    args = ["study", "--out", str(d / "s"), "--corpus", str(d / "corpus.txt"), "--layers", "2",
            "--heads", "2", "--embd", "16", "--ctx", str(T), "--batch", "2", "--steps", "8",
            "--warmup", "2", "--eval-every", "4", "--windows", str(WINDOWS), "--crit-L", "16,32",
            "--normalizers", NORMS, "--threads", "2", "--quiet"]
    run(*args)
    return d, args


def test_outputs(study):
    d, _ = study
    s = d / "s"
    j = json.loads((s / "study.json").read_text())
    assert j["schema"] == "attnlim.study/1"
    names = NORMS.split(",")
    assert [r["normalizer"] for r in j["runs"]] == names
    assert [p["normalizer"] for p in j["predictions"]] == names
    for r in j["runs"]:
        assert r["steps"] == 8 and r["T"] == T and r["windows"] == WINDOWS
        v = r["vanishing"]
        assert v["n"] == [1, 2, 4, 8, 16, 32]
        if r["normalizer"] != "sa-softmax":
            assert abs(v["max_weight"][0] - 1) < 1e-6  # the first row has one key
            assert all(1 / n - 1e-6 <= w <= 1 + 1e-6 for n, w in zip(v["n"], v["max_weight"]))
        assert r["separability"]["N"] == [1, 2, 4, 8, 16]
        assert all(0 <= x <= 1 for x in r["separability"]["ns_ratio"])
        assert r["critical_n"]["L"] == [16, 32] and r["critical_n"]["heads"] == 4
        assert len(r["jacobian"]["spectral_heads"]) == 4
    assert len(j["runs"][3]["ssmax_s"]) == 4  # ssmax: s per (layer, head), learnt
    rows = list(csv.DictReader(open(s / "study.csv")))
    assert [r["normalizer"] for r in rows] == names
    for r, jr in zip(rows, j["runs"]):
        assert abs(float(r["val_loss"]) - jr["val_loss"]) < 1e-3 * jr["val_loss"]
    for f in ("val_loss", "grad_norm", "vanishing", "critical_n", "separability", "jacobian"):
        svg = (s / "figures" / f"{f}.svg").read_text()
        assert "attnlim-plot" in svg and (s / "figures" / f"{f}.png").stat().st_size > 1000
        assert f"figures/{f}.svg" in (s / "report.html").read_text()
    for n in names:
        log = (s / "runs" / n / "log.jsonl").read_text().splitlines()
        assert sum('"loss"' in x for x in log) == 8
        cfg = json.loads((s / "runs" / n / "config.json").read_text())
        assert cfg["attnlim_normalizer"]["name"] == n.split(":")[0]


def test_softmax_diagnostics_against_transformers(study):
    transformers = pytest.importorskip("transformers")
    import torch
    d, _ = study
    j = json.loads((d / "s" / "study.json").read_text())
    r = j["runs"][0]
    model = transformers.GPT2LMHeadModel.from_pretrained(str(d / "s" / "runs" / "softmax"),
                                                         attn_implementation="eager")
    model.eval()
    ids = np.frombuffer((d / "corpus.txt").read_bytes(), dtype=np.uint8).astype(np.int64)
    n_train = len(ids) - int(len(ids) * VAL_FRAC)
    span = len(ids) - n_train - T - 1
    maxw, ent, jac = np.zeros(T), np.zeros(T), []
    for k in range(WINDOWS):
        o = n_train + span * k // (WINDOWS - 1)
        with torch.no_grad():
            att = model(torch.tensor(ids[o:o + T][None]), output_attentions=True).attentions
        for a in att:
            for p in a[0].double().numpy():  # [T, T] per head
                for t in range(T):
                    row = p[t, :t + 1]
                    maxw[t] += row.max()
                    if t:
                        ent[t] += -(row[row > 0] * np.log(row[row > 0])).sum() / np.log(t + 1)
                spec = [np.linalg.eigvalsh(np.diag(p[t, :t + 1]) - np.outer(p[t, :t + 1],
                                                                            p[t, :t + 1]))[-1]
                        for t in range(1, T)]
                jac.append(np.mean(spec))
    heads = 4 * WINDOWS
    n = np.array(r["vanishing"]["n"])
    assert np.allclose(r["vanishing"]["max_weight"], maxw[n - 1] / heads, rtol=0, atol=1e-5)
    assert np.allclose(r["vanishing"]["entropy_norm"][1:], ent[n[1:] - 1] / heads, atol=1e-5)
    assert abs(r["jacobian"]["spectral_mean"] - np.mean(jac)) < 1e-5


def test_resume_does_not_retrain(study):
    d, args = study
    before = {n: (d / "s" / "runs" / n / "state.bin").read_bytes() for n in NORMS.split(",")}
    log = (d / "s" / "runs" / "softmax" / "log.jsonl").read_text()
    run(*args)
    for n, b in before.items():
        assert (d / "s" / "runs" / n / "state.bin").read_bytes() == b
    assert (d / "s" / "runs" / "softmax" / "log.jsonl").read_text() == log


def test_errors(study, tmp_path):
    d, args = study
    base = args[:2] + [str(tmp_path / "x")] + args[3:]
    i = base.index("--normalizers")
    for bad, why in (("softmax,bogus", "bogus"), ("softmax,softmax", "twice"),
                     ("sparsemax:2", "only entmax"), ("entmax:0.5", "alpha")):
        p = run(*base[:i + 1], bad, *base[i + 2:], check=False)
        assert p.returncode == 2 and why in p.stderr, (bad, p.stderr)
    p = run(*base, "--crit-L", "1", check=False)
    assert p.returncode == 1 and "critical-N" in p.stderr


def test_library_reproduce_and_diagnose_on_each_checkpoint(study):
    """study runs the library's reproduce --readings all and diagnose on every checkpoint, which
    loads with its own normalizer (manifests say so; sa-softmax: weights that do not sum to 1, no
    flags); its verdicts and flag counts are in study.json and report.html; the softmax run's
    diagnose max weight per head against HF transformers on the same window (tokens 0..T-1)."""
    d, _ = study
    s = d / "s"
    j = json.loads((s / "study.json").read_text())
    html = (s / "report.html").read_text()
    assert "attnlim reproduce --readings all and attnlim diagnose" in html
    for r in j["runs"]:
        name = r["normalizer"]
        res = json.loads((s / "runs" / name / "reproduce" / "results.json").read_text())
        att = res["manifest"]["model"]["attention"]
        if name == "softmax":
            assert not att["modified"]
        else:
            assert att["trained"] and att["normalizer"].split(":")[0] == name.split(":")[0], att
        if name == "ssmax":  # a learnt s per head, as trained
            assert np.allclose(att["ssmax_s_per_head"], r["ssmax_s"], rtol=1e-6)
        assert res["manifest"]["options"]["weights_sum_to_one"] == (name != "sa-softmax")
        assert set(res["readings"]) and res["verdicts"]
        assert [(v["key"], v["verdict"]) for v in r["reproduce"]["verdicts"]] == \
               [(v["key"], v["verdict"]) for v in res["verdicts"]]
        dg = json.loads((s / "runs" / name / "diagnose" / "diagnose.json").read_text())
        assert dg["summary"] == r["diagnose"]["summary"] and dg["L"] == T
        if name == "sa-softmax":
            assert all(not h["flags"] for h in dg["heads"])
        if name == "softmax":
            import torch
            transformers = pytest.importorskip("transformers")
            model = transformers.GPT2LMHeadModel.from_pretrained(str(s / "runs" / "softmax"),
                                                                 attn_implementation="eager")
            ids = np.frombuffer((d / "corpus.txt").read_bytes()[:T], dtype=np.uint8)
            with torch.no_grad():
                a = model(torch.tensor(ids.astype(np.int64)[None]), output_attentions=True).attentions
            for h in dg["heads"]:
                p = a[h["layer"]][0, h["head"]].double().numpy()
                assert abs(h["mean_max_weight"] - p.max(-1).mean()) < 1e-5
        assert f"<td>{name}</td>" in html
