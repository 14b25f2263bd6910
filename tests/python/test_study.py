"""attnlim study on a tiny budget: every output is there and consistent, the report's numbers
are those of the library's reproduce --readings all and diagnose on each checkpoint over the
held-out tail, the softmax run's equal an independent computation on HF transformers' attention
weights of the same checkpoint and windows (max weight and H / log n against n, the softmax
Jacobian's spectral norm by numpy's eigvalsh), a second invocation resumes without retraining,
progress lines when stderr is not a TTY, bad options are errors.
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


def heldout_ids(d):
    ids = np.frombuffer((d / "corpus.txt").read_bytes(), dtype=np.uint8).astype(np.int64)
    return ids[len(ids) - int(len(ids) * VAL_FRAC):]


def hf_attentions(d, name, ids):
    import transformers  # installed by scripts/setup.sh: a missing reference fails, never skips
    import torch
    model = transformers.GPT2LMHeadModel.from_pretrained(str(d / "s" / "runs" / name),
                                                         attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        att = model(torch.tensor(ids[None]), output_attentions=True).attentions
    return np.stack([a[0].double().numpy() for a in att])  # [L, H, T, T]


def test_softmax_diagnostics_against_transformers(study):
    """The report's numbers are reproduce's and diagnose's on the held-out tail (heldout.txt is
    exactly the corpus's last VAL_FRAC bytes): the vanishing curve (median over heads of each
    head's mean over the windows of the row's max weight and H / log n) and the Jacobian norm
    (diagnose, window 0: per head the mean over rows n >= 2 of the largest eigenvalue of
    diag(p) - p p^T, by numpy's eigvalsh) against HF transformers' attention weights."""
    d, _ = study
    r = json.loads((d / "s" / "study.json").read_text())["runs"][0]
    tail = heldout_ids(d)
    assert (d / "s" / "heldout.txt").read_bytes() == tail.astype(np.uint8).tobytes()
    mx, en = [], []
    for k in range(WINDOWS):  # reproduce's window k: tokens [kT, (k+1)T) of the text
        p = hf_attentions(d, "softmax", tail[k * T:(k + 1) * T]).reshape(-1, T, T)
        mx.append(p.max(-1))
        with np.errstate(divide="ignore", invalid="ignore"):
            h = -np.where(p > 0, p * np.log(p), 0).sum(-1) / np.log(np.arange(1, T + 1))
        en.append(h)
    mx, en = np.mean(mx, 0), np.mean(en, 0)  # [heads, T]: window means
    n = np.array(r["vanishing"]["n"])
    assert list(n) == [1, 2, 4, 8, 16, 32]
    assert np.allclose(r["vanishing"]["max_weight"], np.median(mx, 0)[n - 1], rtol=0, atol=1e-5)
    assert np.allclose(r["vanishing"]["entropy_norm"][1:], np.median(en, 0)[n[1:] - 1],
                       atol=1e-5)
    p = hf_attentions(d, "softmax", tail[:T]).reshape(-1, T, T)
    spec = [np.mean([np.linalg.eigvalsh(np.diag(q[t, :t + 1]) - np.outer(q[t, :t + 1],
                                                                         q[t, :t + 1]))[-1]
                     for t in range(1, T)]) for q in p]
    assert np.allclose(r["jacobian"]["spectral_heads"], spec, rtol=0, atol=1e-5), \
        (r["jacobian"]["spectral_heads"], spec)
    assert abs(r["jacobian"]["spectral_mean"] - np.mean(spec)) < 1e-5


def test_resume_does_not_retrain(study):
    d, args = study
    before = {n: (d / "s" / "runs" / n / "state.bin").read_bytes() for n in NORMS.split(",")}
    log = (d / "s" / "runs" / "softmax" / "log.jsonl").read_text()
    # without --quiet, stderr a pipe: plain lines (what is running, reproduce's progress), never
    # a carriage return or an escape code
    env = dict(os.environ, ATTNLIM_PROGRESS_INTERVAL="0")
    p = subprocess.run([BIN, *[a for a in args if a != "--quiet"]], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    for k, n in enumerate(NORMS.split(",")):
        assert f"study: training {n} ({k + 1} of 5)" in p.stderr, p.stderr
        assert f"study: reproduce --readings all and diagnose on {n}" in p.stderr, p.stderr
    assert "progress:" in p.stderr and "\r" not in p.stderr and "\x1b" not in p.stderr
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
            import transformers  # installed by scripts/setup.sh: a missing reference fails, never skips
            model = transformers.GPT2LMHeadModel.from_pretrained(str(s / "runs" / "softmax"),
                                                                 attn_implementation="eager")
            ids = heldout_ids(d)[:T]  # diagnose's window 0 of the held-out text
            with torch.no_grad():
                a = model(torch.tensor(ids[None]), output_attentions=True).attentions
            for h in dg["heads"]:
                p = a[h["layer"]][0, h["head"]].double().numpy()
                assert abs(h["mean_max_weight"] - p.max(-1).mean()) < 1e-5
        assert f"<td>{name}</td>" in html
        # the report's numbers are the library's (the same files, no computation of its own)
        rd = json.loads((s / "runs" / name / "reproduce" / "readings.json").read_text())
        assert r["critical_n"]["n_crit_over_L"] == res["alg3"]["critical_ratio"]["0.01"]
        assert [x["n_crit_over_L"] for x in r["critical_n"]["readings"]] == \
               [x.get("critical_n", {}).get("ratio") for x in rd["readings"]]
        assert len(rd["readings"]) > 1
        assert r["separability"]["ns_ratio"] == res["alg4"]["ratio"]["median"]
        assert res["manifest"]["corpus"]["n_tokens"] == len(heldout_ids(d))
        pred = next(p for p in j["predictions"] if p["normalizer"] == name)
        assert pred["critical_n"]["reproduce"]["readings"] == \
            sum("critical_n" in x for x in rd["readings"])  # the readings that move N_crit
