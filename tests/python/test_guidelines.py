"""`attnlim guidelines` on a random GPT-2 (make-model) and a small text corpus: every NLL of
guidelines.json against gpt2_ref's float64 forward with attn_variant_ref's variants (tokens from
tiktoken's GPT-2 encoding, independent of our tokenizer), the smallest sufficient k and the fits
recomputed from those numbers, --resume reusing every result bit for bit, the KS critical N read
from a reproduce results.json of the same model (and one of another model refused), the CSVs and
figures present."""
import csv
import json
import math
import os
import subprocess

import numpy as np
import pytest

import attn_variant_ref as AV
import bert_ref
import gpt2_ref

BIN = os.environ.get("ATTNLIM_BIN")
L_GRID, K_GRID, WINDOWS = (32, 64), (1, 4, 16), 2
RULES, NORMS = ("topk-sqrt:1", "topk-log:2"), ("sparsemax", "ssmax")


def gpt2_tiktoken():
    """tiktoken's GPT-2 encoding built from the shared encoder.json / vocab.bpe (offline)."""
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    src = os.environ.get("ATTNLIM_SOURCE_DIR", ".")
    for d in (os.environ.get("ATTNLIM_DATA"), os.path.join(src, "..", "shared", "data")):
        if d and os.path.isfile(os.path.join(d, "gpt2", "encoder.json")):
            break
    else:
        pytest.fail("the shared data (gpt2/encoder.json, vocab.bpe) is not found: set ATTNLIM_DATA")
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(d, "gpt2", "vocab.bpe"),
                                            os.path.join(d, "gpt2", "encoder.json"))
    return tiktoken.Encoding("gpt2-local", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("gl")
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "2", "--embd", "32", "--ctx",
                    "128", "--vocab", "50257", "--seed", "4", "--out", str(d / "m")], check=True,
                   capture_output=True)
    rng = np.random.default_rng(0)
    words = ["the", "prince", "said", "and", "war", "peace", "Moscow", "of", "to", "a", "was", "he"]
    text = " ".join(rng.choice(words) for _ in range(400)) + "\n"
    (d / "corpus.txt").write_text(text)
    return d


def run(setup, out, *extra):
    args = [BIN, "guidelines", "--model", str(setup / "m"), "--corpus", str(setup / "corpus.txt"),
            "--out", str(out), "--lengths", ",".join(map(str, L_GRID)), "--windows", str(WINDOWS),
            "--k", ",".join(map(str, K_GRID)), "--rules", ",".join(RULES), "--normalizers",
            ",".join(NORMS), "--monitor-length", "64", "--monitor-n", "4", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def test_guidelines_against_numpy(setup):
    out = setup / "g1"
    r = run(setup, out)
    assert r.returncode == 0, r.stderr
    res = json.load(open(out / "guidelines.json"))
    params = bert_ref.load_safetensors(str(setup / "m" / "model.safetensors"))
    params = {k.removeprefix("transformer."): v for k, v in params.items()}
    cfg = json.load(open(setup / "m" / "config.json"))
    toks = gpt2_tiktoken().encode_ordinary((setup / "corpus.txt").read_text())
    assert res["manifest"]["corpus"]["n_tokens"] == len(toks)
    worst = 0.0
    for entry in res["lengths"]:
        L = entry["L"]
        names = [v["name"] for v in entry["variants"]]
        assert names == ["dense"] + [f"topk:{k}" for k in K_GRID if k < L] + list(RULES) + list(NORMS)
        for v in entry["variants"]:
            rule = "dense" if v["kind"] in ("dense", "normalizer") else v["name"]
            norm = v["name"] if v["kind"] == "normalizer" else "softmax"
            var = AV.Variant(rule, norm)
            for w in range(WINDOWS):
                win = toks[w * L:(w + 1) * L]
                ref = gpt2_ref.forward(params, cfg, win, capture=False,
                                       attn=None if rule == "dense" and norm == "softmax" else var)
                want = gpt2_ref.nll(ref["logits"], win)
                worst = max(worst, abs(v["per_window_nll"][w] - want))
            assert var.min_gap > 1e-5, (L, v["name"], var.min_gap)
            assert abs(v["nll"] - np.mean(v["per_window_nll"])) < 1e-12
            assert v["k_at_L"] == AV.kept_count(*AV.parse_rule(rule), L, L)
        # the smallest sufficient k from the listed numbers
        dense = entry["variants"][0]["nll"]
        for lvl, frac in (("1%", 0.01), ("5%", 0.05)):
            ok = [int(v["name"].split(":")[1]) for v in entry["variants"]
                  if v["kind"] == "topk" and v["nll"] <= dense * (1 + frac)]
            want = min(ok) if ok else None
            assert entry["smallest_sufficient_k"][lvl]["k"] == want
    print("worst NLL difference vs float64 numpy:", worst)
    assert worst < 1e-4
    # fits through the origin of the 1% points
    pts = [(e["L"], e["smallest_sufficient_k"]["1%"]["k"]) for e in res["lengths"]
           if e["smallest_sufficient_k"]["1%"]["k"]]
    for name, f in (("linear", lambda x: x), ("sqrt", math.sqrt), ("log", math.log)):
        c = sum(f(L) * k for L, k in pts) / sum(f(L) ** 2 for L, _ in pts)
        assert abs(res["fits"]["1%"][name]["c"] - c) < 1e-9 * max(1, c)
    # CSV rows mirror the JSON; monitoring per layer; figures with their metadata
    rows = list(csv.DictReader(open(out / "guidelines.csv")))
    assert len(rows) == sum(len(e["variants"]) for e in res["lengths"])
    mon = list(csv.DictReader(open(out / "monitoring.csv")))
    assert {m["variant"] for m in mon} >= {"dense", "sparsemax", "ssmax"}
    assert all(0 <= float(m["entropy_over_log_n"]) <= 1 and 0 <= float(m["ns_ratio_N4"]) <= 1 for m in mon)
    for fig in ("guidelines_delta_nll", "guidelines_sufficient_k", "guidelines_monitoring_entropy",
                "guidelines_monitoring_ns"):
        svg = (out / f"{fig}.svg").read_text()
        assert "attnlim-plot" in svg and (out / f"{fig}.png").stat().st_size > 1000
    assert "Guidelines tested in the loss" in (out / "guidelines.md").read_text()
    assert res["manifest"]["model"]["attention"]["modified"] is False

    # --resume: every (L, variant) reused, the same numbers
    r = run(setup, out, "--resume")
    assert r.returncode == 0, r.stderr
    again = json.load(open(out / "guidelines.json"))
    assert again["manifest"]["resume"]["computed"] == 0
    assert again["manifest"]["resume"]["reused"] == sum(len(e["variants"]) for e in res["lengths"])
    assert again["lengths"] == res["lengths"] or all(
        a["variants"][i]["per_window_nll"] == b["variants"][i]["per_window_nll"]
        for a, b in zip(again["lengths"], res["lengths"]) for i in range(len(a["variants"])))


def test_guidelines_reads_critical_n(setup):
    out = setup / "g2"
    info = json.loads(subprocess.run([BIN, "info", "--model", str(setup / "m"), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    sha = info.get("sha256") or info["model"]["sha256"]
    rep = setup / "rep"
    rep.mkdir()
    fake = {"manifest": {"model": {"sha256": sha}},
            "alg3": {"L": [32, 64], "critical_n": {"0.01": [3, None], "0.05": [2, 5]}}}
    (rep / "results.json").write_text(json.dumps(fake))
    r = run(setup, out, "--reproduce", str(rep), "--monitor-length", "-1")
    assert r.returncode == 0, r.stderr
    res = json.load(open(out / "guidelines.json"))
    c = {e["L"]: e["ks_critical_n"] for e in res["lengths"]}
    assert c[32]["0.01"]["N"] == 3 and c[64]["0.01"]["N"] is None and c[64]["0.05"]["N"] == 5
    fake["manifest"]["model"]["sha256"] = "0" * 64
    (rep / "results.json").write_text(json.dumps(fake))
    r = run(setup, setup / "g3", "--reproduce", str(rep))
    assert r.returncode != 0 and "another model" in r.stderr


def test_guidelines_bad_options(setup):
    r = run(setup, setup / "g4", "--rules", "topk:0")
    assert r.returncode == 2 and "K must be" in r.stderr
    r = subprocess.run([BIN, "guidelines", "--model", str(setup / "m"), "--lengths", "4096"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "outside" in r.stderr


def test_monitoring_at_every_length(setup):
    """Without --monitor-length the per-layer monitoring runs at every L of the grid (issue 16:
    the paper's monitoring advice along L); each (L, variant, layer)'s mean H / ln n and max weight
    against the float64 reference forward with that variant (window 0)."""
    out = setup / "g4"
    r = run(setup, out, "--monitor-length", "0")
    assert r.returncode == 0, r.stderr
    res = json.load(open(out / "guidelines.json"))
    mon = res["monitoring"]
    assert mon["lengths"] == list(L_GRID) and mon["L"] == max(L_GRID)
    rows = list(csv.DictReader(open(out / "monitoring.csv")))
    assert {int(m["L"]) for m in rows} == set(L_GRID)
    params = bert_ref.load_safetensors(str(setup / "m" / "model.safetensors"))
    params = {k.removeprefix("transformer."): v for k, v in params.items()}
    cfg = json.load(open(setup / "m" / "config.json"))
    toks = gpt2_tiktoken().encode_ordinary((setup / "corpus.txt").read_text())
    checked = 0
    for v in mon["variants"]:
        L, name = v["L"], v["name"]
        if name != "dense" and name not in NORMS and not name.startswith("topk:"):
            continue
        rule = name if name.startswith("topk:") else "dense"
        norm = name if name in NORMS else "softmax"
        attn = None if name == "dense" else AV.Variant(rule, norm)
        ref = gpt2_ref.forward(params, cfg, toks[:L], attn=attn)
        for l, w in enumerate(ref["w"]):  # [H, L, L]
            t = np.arange(1, L)
            rows_w = w[:, 1:, :]
            mx = rows_w.max(-1).mean(-1).mean()
            with np.errstate(divide="ignore", invalid="ignore"):
                ent = -np.where(rows_w > 0, rows_w * np.log(rows_w), 0).sum(-1) / np.log(t + 1)
            assert abs(v["max_weight"][l] - mx) < 1e-5, (L, name, l)
            assert abs(v["entropy_over_log_n"][l] - ent.mean()) < 1e-5, (L, name, l)
            assert 0 <= v["ns_ratio"][l] <= 1
            checked += 1
    assert checked >= 2 * len(L_GRID) * 2  # dense and the normalizers at both L, both layers


def test_bos_switch(setup):
    """--bos: the model's BOS (GPT-2: <|endoftext|>, 50256) first in the text, once; the dense
    NLL of every window against the float64 numpy forward on [50256] + tiktoken's ids, and the
    framing (used, the model's default: none) in the manifest; --wrap refused for a decoder."""
    out = setup / "gbos"
    args = [BIN, "guidelines", "--model", str(setup / "m"), "--corpus", str(setup / "corpus.txt"),
            "--out", str(out), "--lengths", "32", "--windows", "2", "--k", "4,40", "--rules",
            "topk-log:2", "--normalizers", "sparsemax", "--monitor-length", "-1", "--bos"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.load(open(out / "guidelines.json"))
    assert res["manifest"]["k_left_out"] == [{"k": 40, "at_L": [32]}]  # as stderr said
    assert "--k 40: left out at L = 32" in r.stderr
    fr = res["manifest"]["framing"]["bos"]
    assert fr["used"] is True and fr["default"] is False and fr["id"] == 50256
    params = bert_ref.load_safetensors(str(setup / "m" / "model.safetensors"))
    params = {k.removeprefix("transformer."): v for k, v in params.items()}
    cfg = json.load(open(setup / "m" / "config.json"))
    toks = [50256] + gpt2_tiktoken().encode_ordinary((setup / "corpus.txt").read_text())
    dense = res["lengths"][0]["variants"][0]
    for w in range(2):
        win = toks[w * 32:(w + 1) * 32]
        want = gpt2_ref.nll(gpt2_ref.forward(params, cfg, win, capture=False)["logits"], win)
        assert abs(dense["per_window_nll"][w] - want) < 1e-4
    r = subprocess.run(args[:-1] + ["--wrap"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "--wrap" in r.stderr and "encoders" in r.stderr


@pytest.mark.parametrize("damage", ["1e999", "null", "short"])
def test_resume_recomputes_a_nonfinite_partial(setup, damage):
    """issue 12, class 10: guidelines --resume reuses a saved (L, variant) only when its NLL of
    every window is a finite number: an infinite one (1e999), a missing one (null: what a NaN
    becomes in JSON) or a list of the wrong length is recomputed, the warning names the file,
    and the results equal the first run's."""
    out = setup / ("gr_" + damage)
    args = [BIN, "guidelines", "--model", str(setup / "m"), "--corpus", str(setup / "corpus.txt"),
            "--out", str(out), "--lengths", "32", "--windows", "2", "--k", "1", "--rules", "topk-sqrt:1",
            "--normalizers", "sparsemax", "--monitor-length", "-1"]
    r = subprocess.run(args + ["--quiet"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    nlls = lambda res: [[v["per_window_nll"] for v in e["variants"]] for e in res["lengths"]]
    first = nlls(json.load(open(out / "guidelines.json")))
    path = out / "partial" / "L32" / "dense.json"
    j = json.loads(path.read_text())
    assert len(j["nll"]) == 2 and all(math.isfinite(x) for x in j["nll"])
    text = json.dumps(j)
    old = json.dumps(j["nll"])
    new = {"1e999": "[%r, 1e999]" % j["nll"][0], "null": "[%r, null]" % j["nll"][0],
           "short": "[%r]" % j["nll"][0]}[damage]
    path.write_text(text.replace(old, new))
    r = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "--resume: %s recomputed" % path in r.stderr, r.stderr
    again = json.load(open(out / "guidelines.json"))
    assert again["manifest"]["resume"]["computed"] == 1, again["manifest"]["resume"]
    assert nlls(again) == first


def test_layer_head_subset(setup):
    """--attention-layers / --attention-heads: every variant modifies only layer 1's head 0; each
    NLL against the float64 reference forward with that subset (attn_variant_ref); the subset in
    the manifest; --resume with another subset refused naming the partial result, nothing
    reused; an index outside the model refused (exit 2 or 1, naming the option)."""
    out = setup / "gsub"
    args = [BIN, "guidelines", "--model", str(setup / "m"), "--corpus", str(setup / "corpus.txt"),
            "--out", str(out), "--lengths", "32", "--windows", "2", "--k", "2", "--rules",
            "topk-log:2", "--normalizers", "sparsemax", "--monitor-length", "-1",
            "--attention-layers", "1", "--attention-heads", "0"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.load(open(out / "guidelines.json"))
    sub = res["manifest"]["attention_subset"]
    assert sub["layers"] == [1] and sub["heads"] == [0], sub
    params = bert_ref.load_safetensors(str(setup / "m" / "model.safetensors"))
    params = {k.removeprefix("transformer."): v for k, v in params.items()}
    cfg = json.load(open(setup / "m" / "config.json"))
    toks = gpt2_tiktoken().encode_ordinary((setup / "corpus.txt").read_text())
    dense = res["lengths"][0]["variants"][0]["per_window_nll"]
    for v in res["lengths"][0]["variants"][1:]:
        rule = "dense" if v["kind"] == "normalizer" else v["name"]
        norm = v["name"] if v["kind"] == "normalizer" else "softmax"
        var = AV.Variant(rule, norm, layers=[1], heads=[0])
        for w in range(2):
            win = toks[w * 32:(w + 1) * 32]
            want = gpt2_ref.nll(gpt2_ref.forward(params, cfg, win, capture=False, attn=var)["logits"], win)
            assert abs(v["per_window_nll"][w] - want) < 1e-4, (v["name"], w)
            full = gpt2_ref.nll(gpt2_ref.forward(params, cfg, win, capture=False,
                                                 attn=AV.Variant(rule, norm))["logits"], win)
            assert abs(want - full) > 1e-4 or abs(want - dense[w]) < 1e-4  # the subset mattered
    # another subset on --resume: refused, naming the partial and both subsets
    r = subprocess.run(args[:-1] + ["1", "--resume"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "refuses a change" in r.stderr and "heads 0" in r.stderr, r.stderr
    assert json.load(open(out / "guidelines.json")) == res  # nothing rewritten
    r = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.load(open(out / "guidelines.json"))["manifest"]["resume"]["computed"] == 0
    r = subprocess.run(args[:-4] + ["--attention-layers", "7"], capture_output=True, text=True)
    assert r.returncode != 0 and "--attention-layers: 7 is outside 0..1" in r.stderr, r.stderr
