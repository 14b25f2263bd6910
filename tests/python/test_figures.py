"""The figures say what they show (docs/results-schema.md: every SVG's <metadata> lists its
series with their style and points). Fig. 4 draws the bounds of the normalizer that was used
(softmax: the paper's min{1/(4T), sqrt 2} and the supremum 1/(2T); sparsemax: 1/T, exact on any
support of two or more) and rings exactly the measured values above the paper's curve as drawn;
Fig. 2c shows both KS levels even where they coincide; the vanishing figure holds Corollary 1's
band or prints its values; --quick reads "smoke test" and experiments left out "not run"."""
import json
import os
import re
import subprocess

import numpy as np
import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))


def run(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    assert r.returncode == 0, f"attnlim {' '.join(args)}: {r.stderr}"
    return r


def series(svg):
    """{label: (style set, x array, y array)} from a figure's metadata."""
    text = open(svg, encoding="utf-8").read()
    out = {}
    for m in re.finditer(r"<al:series ([^>]*)/>", text):
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        lab = attrs["label"].replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&")
        nums = lambda s: np.array([float(v) for v in s.split()]) if s.strip() else np.zeros(0)
        out[lab] = (set(attrs.get("style", "").split()), nums(attrs["x"]), nums(attrs["y"]))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("figs")
    model = str(d / "model")
    run("make-model", "--layers", "2", "--heads", "2", "--embd", "32", "--ctx", "128", "--vocab", "50257",
        "--seed", "3", "--out", model)
    out = {}
    for name, extra in [("softmax", []), ("sparsemax", ["--normalizer", "sparsemax"]),
                        ("part", ["--experiments", "alg5,vanishing"])]:
        o = str(d / name)
        run("reproduce", "--model", model, "--quick", "--quiet", "--threads", "2", "--out", o, *extra)
        out[name] = o
    return out


def check_rings(s, paper):
    """The rings are exactly the measured values (every eps, the spectral norm) above `paper`."""
    _, T, pb = s[paper]
    want = []
    for lab, (st, x, y) in s.items():
        if lab.startswith("finite difference") or lab.startswith("exact spectral norm"):
            for t, v in zip(x, y):
                i = int(np.argmin(np.abs(T - t)))
                if v > pb[i]:
                    want.append((t, v))
    ring = [v for k, v in s.items() if "ring" in v[0]]
    got = list(zip(ring[0][1], ring[0][2])) if ring else []
    assert len(got) == len(want), (got, want)
    if want:
        np.testing.assert_allclose(np.array(sorted(got)), np.array(sorted(want)), rtol=1e-8)
    return len(want)


def test_fig4_softmax(runs):
    s = series(os.path.join(runs["softmax"], "fig4.svg"))
    _, T, pb = s["paper: min{1/(4T), sqrt 2}"]
    np.testing.assert_allclose(pb, np.minimum(1 / (4 * T), np.sqrt(2)), rtol=1e-8)
    st, T2, sup = s["softmax supremum 1/(2T)"]
    assert "dashed" in st
    np.testing.assert_allclose(sup, 1 / (2 * T2), rtol=1e-8)
    assert not any(k.startswith("sparsemax") for k in s)
    n = check_rings(s, "paper: min{1/(4T), sqrt 2}")
    assert n > 0  # random weights at small T: the spectral norm exceeds the paper's curve
    sub = re.search(r'<al:plot [^>]*subtitle="([^"]*)"', open(os.path.join(runs["softmax"], "fig4.svg")).read())
    assert f"{n} measured values above the paper's curve" in sub.group(1)


def test_fig4_sparsemax(runs):
    s = series(os.path.join(runs["sparsemax"], "fig4.svg"))
    st, T, b = s["sparsemax: exactly 1/T on any support of >= 2 tokens"]
    np.testing.assert_allclose(b, 1 / T, rtol=1e-8)
    assert "paper (about softmax): min{1/(4T), sqrt 2}" in s
    assert not any("1/(2T)" in k for k in s)
    check_rings(s, "paper (about softmax): min{1/(4T), sqrt 2}")
    # the measured spectral norm (max over heads) never exceeds sparsemax's 1/T
    _, Ts, spec = s["exact spectral norm (max over heads)"]
    assert (spec <= 1 / Ts * (1 + 1e-9)).all()


def test_fig2c_both_levels(runs):
    s = series(os.path.join(runs["softmax"], "fig2c.svg"))
    k01 = [k for k in s if k.startswith("critical N (KS p >= 0.01")][0]
    k05 = [k for k in s if k.startswith("critical N (KS p >= 0.05")][0]
    assert "markers" in s[k01][0] and "ring" not in s[k01][0]
    assert "ring" in s[k05][0]  # a ring around the dot: both visible where they coincide
    fits = [v for k, v in s.items() if k.startswith("fit N = c L")]
    assert len(fits) == 2 and fits[0][0] != fits[1][0]  # the two fit lines are drawn differently


def test_vanishing_band_visible_or_printed(runs):
    svg = open(os.path.join(runs["softmax"], "vanishing.svg"), encoding="utf-8").read()
    ymin, ymax = [float(v) for v in re.search(r'<al:axis name="y"[^>]* min="([^"]+)" max="([^"]+)"', svg).groups()]
    s = series(os.path.join(runs["softmax"], "vanishing.svg"))
    for key in ("e^(2D)/n", "e^(-2D)/n"):
        lab = [k for k in s if key in k][0]
        y = s[lab][2]
        inside = ((y >= ymin) & (y <= ymax)).all()
        assert inside or re.search(r"leaves the chart (above|below), [0-9.e+-]+ at n = ", lab), lab


def test_quick_is_a_smoke_test_and_left_out_is_not_run(runs):
    md = open(os.path.join(runs["softmax"], "report.md"), encoding="utf-8").read()
    table = md[md.index("## Paper vs. measured"):]
    table = table[:table.index("\n## ", 5)]
    rows = [r for r in table.splitlines() if r.startswith("| ") and "paper's claim" not in r]
    assert rows and all("smoke test" in r for r in rows)
    assert " holds " not in table and "does not hold" not in table
    part = open(os.path.join(runs["part"], "report.md"), encoding="utf-8").read()
    t2 = part[part.index("## Paper vs. measured"):]
    assert "| not run |" in t2 and "not testable" not in t2.split("\n## ")[0]
