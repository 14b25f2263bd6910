"""The explorer of report.html in a real browser (headless Chromium from Debian, driven by
selenium through chromedriver): the page loads from disk with no network and no script error;
hostile text in the corpus stays text; clicking a head shows that head's metrics, curves and
attention pattern, checked against results.json and explorer_weights.npy; the arrow keys move
the choice; hovering over the pattern reads out the weight. A screenshot is kept in
$ATTNLIM_BUILD_DIR/test-artifacts/explorer.png. Skipped, with the reason printed, only where
Chromium, chromedriver or selenium are not installed (scripts/setup.sh installs them)."""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))
ART = os.path.join(os.environ.get("ATTNLIM_BUILD_DIR", os.path.join(SRC, "build")), "test-artifacts")
CHROME = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

MISSING = [n for n, ok in [("chromium", CHROME), ("chromedriver", DRIVER), ("selenium", HAVE_SELENIUM)] if not ok]
if MISSING:
    msg = f"SKIPPED: the browser test of the explorer needs {', '.join(MISSING)} (scripts/setup.sh installs them)"
    print(msg, file=sys.stderr)
    if os.environ.get("CI"):  # the README's test command installs all three: a skip there is a fault
        raise RuntimeError(msg)
    pytestmark = pytest.mark.skip(reason=msg)

HOSTILE = "</script><img src=x onerror=\"window.__pwned=1\"><b>bold</b> & \"quotes\" "


def vis(s):
    return s.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("explorer")
    model, out = str(d / "model"), str(d / "out")
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "3", "--embd", "48", "--ctx", "128",
                    "--vocab", "50257", "--seed", "11", "--out", model], check=True, capture_output=True)
    corpus = d / "corpus.txt"
    corpus.write_text(HOSTILE + "It was in July, 1805, and the speaker was the well-known Anna Pavlovna. " * 30)
    r = subprocess.run([BIN, "reproduce", "--model", model, "--corpus", str(corpus), "--quick", "--quiet",
                        "--threads", "2", "--out", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    res = json.load(open(os.path.join(out, "results.json"), encoding="utf-8"))
    w = np.load(os.path.join(out, "explorer_weights.npy"))
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,3000",
              "--disable-dev-shm-usage", "--proxy-server=http://127.0.0.1:9"):  # no network
        opts.add_argument(a)
    opts.binary_location = CHROME
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the browser is not ours: under the sanitizer stage the interpreter runs with the ASan and
    # UBSan runtimes preloaded (CMake's AL_PY_ENV), which chromedriver must not inherit
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}
    drv = webdriver.Chrome(service=Service(DRIVER, env=env), options=opts)
    drv.get("file://" + os.path.join(out, "report.html"))
    yield {"drv": drv, "res": res, "w": w, "out": out}
    drv.quit()


def close(text, want, what):
    got = float(text)
    assert math.isclose(got, want, rel_tol=6e-4, abs_tol=1e-9), f"{what}: shown {text}, results.json {want}"


def head_metrics(res, h):
    """What the explorer must show for head h, from results.json (the heatmaps' choices)."""
    a1, a4, a5, v = res["alg1"], res["alg4"], res["alg5"], res["vanishing"]["per_head"]
    k = int(np.argmin(np.abs(np.array(a4["N"]) - 16)))
    t = int(np.argmin(np.abs(np.array(a5["T"]) - 1.0)))
    return {"dtilde": a1["per_head"]["dtilde"][-1][h], "E": a1["per_head"]["E"][-1][h],
            "N_s / N": a4["per_head"]["ratio"][k][h], "spectral norm": a5["per_head"]["spectral"][h][t],
            "max weight": v["mean_max_weight"][h], "H / log n": v["mean_entropy_over_log_n"][h]}


def test_loads_cleanly_and_hostile_text_stays_text(page):
    drv = page["drv"]
    errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert drv.execute_script("return window.__pwned === undefined")
    assert not drv.find_elements(By.CSS_SELECTOR, "img[src='x'], b")
    assert len(drv.find_elements(By.TAG_NAME, "script")) == 2
    # no resource from the network: every img is a data URI
    srcs = [i.get_attribute("src") for i in drv.find_elements(By.TAG_NAME, "img")]
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    links = drv.execute_script("return Array.from(document.querySelectorAll('[src],[href],link,iframe'))"
                               ".map(function(e){return e.getAttribute('src')||e.getAttribute('href')||''})")
    assert all(u.startswith("data:") for u in links), links
    tokens = page["res"]["explorer"]["tokens"]
    assert "</" in "".join(tokens)  # the hostile bytes made it into the window


def test_click_shows_the_heads_metrics(page):
    drv, res = page["drv"], page["res"]
    grids = drv.find_elements(By.CSS_SELECTOR, "#al-ex-grids .al-grid")
    assert len(grids) == 6
    n_head = res["manifest"]["model"]["n_head"] if "n_head" in res["manifest"].get("model", {}) else 3
    for h in (4, 1):
        cell = grids[2].find_elements(By.CSS_SELECTOR, ".al-cell")[h]
        cell.click()
        assert drv.find_element(By.ID, "al-ex-title").text == f"layer {h // n_head} head {h % n_head}"
        assert cell.get_attribute("aria-selected") == "true"
        sel = drv.find_elements(By.CSS_SELECTOR, ".al-cell.sel")
        assert len(sel) == 6 and all(c.get_attribute("data-head") == str(h) for c in sel)
        want = head_metrics(res, h)
        for key, value in want.items():
            td = drv.find_element(By.CSS_SELECTOR, f"#al-ex-metrics td[data-metric='{key}']")
            close(td.text, value, f"head {h} {key}")
        # the sparklines: N_s/N and dtilde against N, point by point
        dots = drv.find_elements(By.CSS_SELECTOR, "#al-ex-sparks figure")
        assert len(dots) == 2
        ns = [float(c.get_attribute("data-v")) for c in dots[1].find_elements(By.CSS_SELECTOR, "circle")]
        want_ns = [row[h] for row in res["alg4"]["per_head"]["ratio"]]
        assert np.allclose(ns, want_ns, rtol=5e-5), (ns, want_ns)  # 5 significant digits
        dt = [float(c.get_attribute("data-v")) for c in dots[0].find_elements(By.CSS_SELECTOR, "circle")]
        assert np.allclose(dt, [row[h] for row in res["alg2"]["per_head"]["dtilde"]], rtol=5e-5)


def test_pattern_and_hover(page):
    drv, res, w = page["drv"], page["res"], page["w"]
    n_head = w.shape[1]
    h = 4
    drv.find_elements(By.CSS_SELECTOR, "#al-ex-grids .al-grid")[0].find_elements(By.CSS_SELECTOR, ".al-cell")[h].click()
    W = res["explorer"]["W"]
    tokens = res["explorer"]["tokens"]
    cells = drv.find_elements(By.CSS_SELECTOR, "#al-ex-pattern .al-pc")
    assert len(cells) == W * W
    rows = [e.get_attribute("textContent") for e in drv.find_elements(By.CSS_SELECTOR, "#al-ex-pattern .al-rk")]
    cols = [e.get_attribute("textContent") for e in drv.find_elements(By.CSS_SELECTOR, "#al-ex-pattern .al-ck")]
    assert rows == cols == [vis(t) for t in tokens]
    masked = drv.find_elements(By.CSS_SELECTOR, "#al-ex-pattern .al-mask")
    assert len(masked) == W * (W - 1) // 2  # causal: the upper triangle
    for t, j in ((5, 2), (W - 1, 0), (3, 3)):
        c = drv.find_element(By.CSS_SELECTOR, f"#al-ex-pattern .al-pc[data-t='{t}'][data-j='{j}']")
        ActionChains(drv).move_to_element(c).perform()
        txt = drv.find_element(By.ID, "al-ex-weight").text
        assert txt.startswith(f"query {t} ") and f" key {j} " in txt, txt
        close(txt.rsplit("weight ", 1)[1], float(w[h // n_head, h % n_head, t, j]), f"weight ({t}, {j})")
    # every row of the shown head sums to 1 (softmax), from the page's own data
    sums = drv.execute_script(
        "var D=JSON.parse(document.getElementById('al-ex-data').textContent);var W=D.window.tokens.length;"
        "var w=D.window.w[arguments[0]],s=[];for(var t=0;t<W;t++){var a=0;for(var j=0;j<W;j++)a+=w[t*W+j];s.push(a);}return s;", h)
    assert np.allclose(sums, 1, atol=1e-3)


def test_keyboard(page):
    drv = page["drv"]
    grid = drv.find_elements(By.CSS_SELECTOR, "#al-ex-grids .al-grid")[1]
    first = grid.find_elements(By.CSS_SELECTOR, ".al-cell")[0]
    first.click()
    assert drv.find_element(By.ID, "al-ex-title").text == "layer 0 head 0"
    first.send_keys(Keys.ARROW_RIGHT)
    assert drv.find_element(By.ID, "al-ex-title").text == "layer 0 head 1"
    drv.switch_to.active_element.send_keys(Keys.ARROW_DOWN)
    assert drv.find_element(By.ID, "al-ex-title").text == "layer 1 head 1"
    assert drv.switch_to.active_element.get_attribute("data-head") == "4"
    # one tab stop per heatmap (roving tabindex), on the chosen head
    stops = [c.get_attribute("data-head") for c in drv.find_elements(By.CSS_SELECTOR, ".al-cell[tabindex='0']")]
    assert stops == ["4"] * 6
    # the pattern answers the arrow keys too
    pat = drv.find_element(By.CSS_SELECTOR, "#al-ex-pattern .al-pat")
    pat.send_keys(Keys.HOME)  # not an arrow: nothing moves, the pattern has the focus
    before = int(drv.find_element(By.ID, "al-ex-weight").text.split()[1])
    pat.send_keys(Keys.ARROW_UP if before > 0 else Keys.ARROW_DOWN)
    after = int(drv.find_element(By.ID, "al-ex-weight").text.split()[1])
    assert after == (before - 1 if before > 0 else 1)


def test_screenshot(page):
    drv = page["drv"]
    os.makedirs(ART, exist_ok=True)
    el = drv.find_element(By.ID, "al-ex")
    drv.execute_script("arguments[0].scrollIntoView(true)", el)  # the section starts in view
    path = os.path.join(ART, "explorer.png")
    assert el.screenshot(path)
    assert os.path.getsize(path) > 5000
    print(f"screenshot: {path}", file=sys.stderr)


def test_diagnose_html(page, tmp_path):
    """The same explorer in diagnose.html: a subset of heads, the first shown is a diagnosed one,
    and its row matches diagnose.json."""
    drv = page["drv"]
    model = os.path.join(os.path.dirname(page["out"]), "model")
    out = str(tmp_path / "diag")
    r = subprocess.run([BIN, "diagnose", "--model", model, "--length", "32", "--layers", "1", "--heads", "1,2",
                        "--out", out, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    drv.get("file://" + os.path.join(out, "diagnose.html"))
    assert not [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    first = d["heads"][0]
    want = next((h for h in d["heads"] if h["flags"]), first)
    assert drv.find_element(By.ID, "al-ex-title").text == f"layer {want['layer']} head {want['head']}"
    other = d["heads"][-1]
    h = other["layer"] * 3 + other["head"]
    drv.find_elements(By.CSS_SELECTOR, "#al-ex-grids .al-grid")[0].find_elements(By.CSS_SELECTOR, ".al-cell")[h].click()
    td = drv.find_element(By.CSS_SELECTOR, "#al-ex-metrics td[data-metric='weight on token 0']")
    close(td.text, other["mean_weight_on_token0"], "weight on token 0")
    fl = drv.find_element(By.CSS_SELECTOR, "#al-ex-metrics td[data-metric='flags']").text
    assert (fl == "none") == (not other["flags"])
