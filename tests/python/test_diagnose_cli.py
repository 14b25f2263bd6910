"""`attnlim diagnose` as a first-class command (docs/diagnose.md): the text output starts with
what was diagnosed and prints every flag with the value that raised it; --layers/--heads
diagnose a subset with the same numbers as the whole run; N = 1 (N_s/N = 1 by construction) is
not reported; flags on weights that do not sum to 1 are refused; --out writes diagnose.html (the
explorer) and diagnose_flags.svg whose markers are exactly the flagged heads."""
import json
import os
import re
import subprocess

import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))


def run(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    if check:
        assert r.returncode == 0, f"attnlim {' '.join(args)}: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("diag") / "model"
    run("make-model", "--layers", "3", "--heads", "4", "--embd", "64", "--ctx", "128", "--vocab", "50257",
        "--seed", "7", "--out", str(d))
    return str(d)


RULES = [("collapsed", "mean_max_weight", ">", 0.9), ("collapsed", "mean_entropy_over_log_n", "<", 0.1),
         ("vanishing", "mean_entropy_over_log_n", ">", 0.95), ("sink", "mean_weight_on_token0", ">", 0.5)]


def fired(h):
    return [(f, m) for f, m, op, t in RULES if (h[m] > t if op == ">" else h[m] < t)]


def test_text_names_the_run_and_every_flags_value(model):
    full = json.loads(run("diagnose", "--model", model, "--length", "32", "--json").stdout)
    txt = run("diagnose", "--model", model, "--length", "32").stdout.splitlines()
    assert txt[0].startswith("model ") and "corpus war-and-peace" in txt[0] and "window 0" in txt[0]
    assert "L = 32" in txt[0] and "3 layers x 4 heads" in txt[0]
    assert txt[0].endswith(", no BOS (the model's default)"), txt[0]  # GPT-2: none (issue 15)
    bos = run("diagnose", "--model", model, "--length", "32", "--bos").stdout.splitlines()[0]
    assert bos.endswith(", BOS first (--bos; the model's default: none)"), bos
    assert re.match(r"12 of 12 heads diagnosed: \d+ collapsed, \d+ vanishing, \d+ sink", txt[1])
    flagged = [h for h in full["heads"] if fired(h)]
    assert flagged, "the test model must have a flagged head"
    assert len(txt) == 2 + len(flagged)
    for line, h in zip(txt[2:], flagged):
        assert line.startswith(f"layer {h['layer']} head {h['head']}: ")
        for (f, m), w in zip(fired(h), h["why"]):
            assert w["flag"] == f and w["measure"] == m and w["value"] == h[m]
            assert f"{f} (" in line and f"= {h[m]:.3g}" in line
    assert full["separability_N"] == [4, 16]  # N = 1 left out (N_s/N = 1 by construction)
    assert full["schema"] == "attnlim.diagnose/2"


def test_sink_prints_its_weight_on_token0(model):
    # a long window of a random model: the sink rule is checked from what JSON and text say
    r = json.loads(run("diagnose", "--model", model, "--length", "128", "--json").stdout)
    txt = run("diagnose", "--model", model, "--length", "128").stdout
    for h in r["heads"]:
        if "sink" in h["flags"]:
            assert f"sink (mean weight on token 0 = {h['mean_weight_on_token0']:.3g} > 0.5)" in txt
    assert ("sink (" in txt) == any("sink" in h["flags"] for h in r["heads"])


def test_layers_heads_subset(model):
    full = json.loads(run("diagnose", "--model", model, "--length", "32", "--json").stdout)
    sub = json.loads(run("diagnose", "--model", model, "--length", "32", "--layers", "1-2", "--heads=0,3",
                         "--json").stdout)
    assert [(h["layer"], h["head"]) for h in sub["heads"]] == [(1, 0), (1, 3), (2, 0), (2, 3)]
    assert sub["summary"]["heads"] == 4 and sub["summary"]["heads_in_model"] == 12
    byk = {(h["layer"], h["head"]): h for h in full["heads"]}
    for h in sub["heads"]:
        assert h == byk[(h["layer"], h["head"])]
    r = run("diagnose", "--model", model, "--length", "32", "--heads", "4", check=False)
    assert r.returncode == 1 and "--heads: 4 is outside 0..3" in r.stderr


def test_weights_not_summing_to_one_get_no_flags(model):
    r = json.loads(run("diagnose", "--model", model, "--length", "32", "--normalizer", "sa-softmax",
                       "--json").stdout)
    assert "do not sum to 1" in r["flags_refused"]
    assert all(h["flags"] == [] and h["why"] == [] for h in r["heads"])
    txt = run("diagnose", "--model", model, "--length", "32", "--normalizer", "sa-softmax").stdout
    assert "no flags: the normalizer's weights do not sum to 1" in txt


def test_out_files(model, tmp_path):
    out = str(tmp_path / "o")
    d = json.loads(run("diagnose", "--model", model, "--length", "32", "--out", out, "--json").stdout)
    assert sorted(os.listdir(out)) == ["diagnose.html", "diagnose.json", "diagnose.md", "diagnose_flags.png",
                                       "diagnose_flags.svg"]
    svg = open(os.path.join(out, "diagnose_flags.svg"), encoding="utf-8").read()
    for flag in ("collapsed", "vanishing", "sink"):
        m = re.search(r'<al:series label="%s \((\d+) heads\)" style="([^"]*)" n="(\d+)" x="([^"]*)" y="([^"]*)"'
                      % flag, svg)
        assert m, flag
        want = [(h["head"], h["layer"]) for h in d["heads"] if flag in h["flags"]]
        got = list(zip(map(float, m.group(4).split()), map(float, m.group(5).split())))
        assert int(m.group(1)) == int(m.group(3)) == len(want) and got == [(float(a), float(b)) for a, b in want]
        assert "markers" in m.group(2)
    html = open(os.path.join(out, "diagnose.html"), encoding="utf-8").read()
    data = json.loads(re.search(r'<script type="application/json" id="al-ex-data">(.*?)</script>', html, re.S).group(1))
    assert data["layers"] == 3 and data["heads"] == 4 and data["window"]["tokens"]
    keys = [m["key"] for m in data["metrics"]]
    assert keys[:3] == ["max weight", "H / log n", "weight on token 0"] and "spectral norm" in keys
    for i, h in enumerate(d["heads"]):
        assert data["metrics"][0]["v"][i] == pytest.approx(h["mean_max_weight"], rel=1e-5)
        assert bool(data["flags"][i]) == bool(h["flags"])
