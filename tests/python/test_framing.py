"""test_framing.py: how a corpus becomes windows (docs/reproduce.md "Windows: BOS and [CLS] ...
[SEP]"), reproduce --layers/--heads, token strings beside the ids, plain progress lines when
stderr is not a TTY and Ctrl-C in perplexity. References are independent of our tokenizers and
forward: HF `tokenizers` on MiniLM's own tokenizer.json, tiktoken for GPT-2, the float64 numpy
BERT (bert_ref.py) for the attention of a wrapped window."""
import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest

import attnlim
import bert_ref
import test_bert
from test_guidelines import gpt2_tiktoken

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    pytest.fail("run through ctest (ATTNLIM_BIN unset)", pytrace=False)


def run(*args, check=0, env=None):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode >= 0, f"crashed with signal {-p.returncode}: {args}\n{p.stderr}"
    if check is not None:
        assert p.returncode == check, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def diag(*args):
    return json.loads(run("diagnose", *args, "--json").stdout)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("g") / "m"
    run("make-model", "--layers", 2, "--heads", 2, "--embd", 32, "--ctx", 128, "--vocab", 50257, "--seed", 3,
        "--out", d)
    return str(d)


@pytest.fixture(scope="module")
def body_ids_gpt2():
    return gpt2_tiktoken().encode_ordinary(test_bert.war_and_peace_body()[:20000])


@pytest.fixture(scope="module")
def minilm_dir():
    return test_bert.resolve("minilm")


@pytest.fixture(scope="module")
def hf_body(minilm_dir):
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tk.no_truncation()
    tk.no_padding()
    return tk.encode(test_bert.war_and_peace_body()[:20000], add_special_tokens=False).ids


# ---- encoders: [CLS] + L - 2 corpus tokens + [SEP] -------------------------------------------------

def test_encoder_windows_wrapped_by_default(minilm_dir, hf_body, tmp_path):
    """diagnose and capture: window k is [CLS] + body[k(L-2), (k+1)(L-2)) + [SEP] by default
    (HF tokenizers' ids), bare body[kL, (k+1)L) with --no-wrap / --wrap off; the manifest says
    so, and the attention captured over the wrapped window is the numpy BERT's on those ids."""
    L = 16
    for k in (0, 2):
        r = diag("--model", "minilm", "--length", L, "--window", k)
        want = [101] + hf_body[k * (L - 2):(k + 1) * (L - 2)] + [102]
        assert r["window_tokens"]["token_ids"] == want
        assert r["window_tokens"]["tokens"][0] == "[CLS]" and r["window_tokens"]["tokens"][-1] == "[SEP]"
        fr = r["framing"]
        assert fr["encoder"] and fr["wrap"] and not fr["bos"]["used"] and "L counts the two" in fr["L_counts"]
        for off in (["--no-wrap"], ["--wrap", "off"], ["--wrap=off"]):
            b = diag("--model", "minilm", "--length", L, "--window", k, *off)
            assert b["window_tokens"]["token_ids"] == hf_body[k * L:(k + 1) * L] and not b["framing"]["wrap"]
    # capture: the same window, its manifest, and the weights against the float64 numpy BERT
    out = tmp_path / "cap"
    run("capture", "--model", "minilm", "--corpus", "war-and-peace", "--length", L, "--window", 1,
        "--what", "weights", "--layers", "0,5", "--out", out)
    man = json.load(open(out / "manifest.json"))
    ids = [101] + hf_body[L - 2:2 * (L - 2)] + [102]
    assert man["token_ids"] == ids and man["first_token"] == L - 2
    assert man["token_strings"][0] == "[CLS]" and man["framing"]["wrap"] is True
    _, ref_w, _ = bert_ref.bert_forward(minilm_dir, ids)
    for layer in (0, 5):
        w = np.load(out / f"layer{layer}.weights.npy")
        assert np.abs(w - ref_w[layer]).max() < 1e-5
    # a prompt without --length: L = its tokens + 2
    r = diag("--model", "minilm", "--text", "the cat sat on the mat")
    assert r["L"] == 8 and r["window_tokens"]["token_ids"] == [101, 1996, 4937, 2938, 2006, 1996, 13523, 102]
    # --bos is refused for an encoder, naming the model
    p = run("diagnose", "--model", "minilm", "--bos", check=1)
    assert "has no BOS token" in p.stderr and "minilm" in p.stderr


def test_encoder_reproduce_wraps_every_window(tmp_path):
    """reproduce on a tiny random BERT: the explorer's window is [CLS] ... [SEP], its weights are
    the numpy BERT's on those ids, the manifest records the framing and what L counts; --no-wrap
    is a different fingerprint (--resume refuses it)."""
    d = test_bert.tiny_bert(str(tmp_path / "bert"), P=64, seed=4)
    out = tmp_path / "r"
    run("reproduce", "--model", d, "--quick", "--experiments", "alg1,alg4", "--out", out, "--quiet")
    res = json.load(open(out / "results.json"))
    man = res["manifest"]
    assert man["framing"]["encoder"] and man["framing"]["wrap"]
    assert "[CLS]" in man["windows"]["rule"] and "L counts" in man["windows"]["rule"]
    ex = res["explorer"]
    ids = ex["token_ids"]
    assert ids[0] == 2 and ids[-1] == 3 and ex["tokens"][0] == "[CLS]" and ex["tokens"][-1] == "[SEP]"
    assert 2 not in ids[1:-1] and 3 not in ids[1:-1]
    w = np.load(out / "explorer_weights.npy")  # [n_layer, n_head, W, W]
    _, ref_w, _ = bert_ref.bert_forward(d, ids)
    for layer in range(2):
        assert np.abs(w[layer] - ref_w[layer]).max() < 1e-5
    assert "window framing" in open(out / "report.md").read()
    p = run("reproduce", "--model", d, "--quick", "--experiments", "alg1,alg4", "--out", out, "--quiet",
            "--resume", "--no-wrap", check=1)
    assert "framing" in p.stderr, p.stderr


# ---- decoders: BOS --------------------------------------------------------------------------------

def test_gpt2_bos_switch(gpt2, body_ids_gpt2, tmp_path):
    """GPT-2 adds no BOS by default (recorded as the family's); --bos / --bos on / --bos=on put
    <|endoftext|> first; --no-bos / --bos off are the default. Ids against tiktoken."""
    L = 16
    r = diag("--model", gpt2, "--length", L)
    assert r["window_tokens"]["token_ids"] == body_ids_gpt2[:L]
    b = r["framing"]["bos"]
    assert b == {"used": False, "default": False, "default_from": b["default_from"], "id": 50256,
                 "token": "<|endoftext|>"} and "GPT-2" in b["default_from"]
    for on in (["--bos"], ["--bos", "on"], ["--bos=on"]):
        r = diag("--model", gpt2, "--length", L, *on)
        assert r["window_tokens"]["token_ids"] == [50256] + body_ids_gpt2[:L - 1]
        assert r["window_tokens"]["tokens"][0] == "<|endoftext|>" and r["framing"]["bos"]["used"] is True
        assert r["framing"]["bos"]["default"] is False
    for off in (["--no-bos"], ["--bos", "off"]):
        assert diag("--model", gpt2, "--length", L, *off)["window_tokens"]["token_ids"] == body_ids_gpt2[:L]
    # reproduce: recorded in results.json and the report; window 0 starts with BOS
    out = tmp_path / "r"
    run("reproduce", "--model", gpt2, "--quick", "--experiments", "alg1", "--bos", "--out", out, "--quiet")
    res = json.load(open(out / "results.json"))
    assert res["manifest"]["framing"]["bos"]["used"] is True
    assert res["explorer"]["token_ids"][:4] == [50256] + body_ids_gpt2[:3]
    assert "BOS first in the text" in open(out / "report.md").read()
    # perplexity --json: the framing and window 0's ids with their strings
    p = json.loads(run("perplexity", "--model", gpt2, "--corpus", "war-and-peace", "--length", 8, "--bos",
                       "--json").stdout)
    assert p["framing"]["bos"]["used"] and p["window_0"]["token_ids"] == [50256] + body_ids_gpt2[:7]
    assert p["window_0"]["tokens"][0] == "<|endoftext|>"


# ---- reproduce --layers / --heads -------------------------------------------------------------------

def test_reproduce_layers_heads(gpt2, tmp_path):
    """Only the chosen heads are computed (the others null); each equals the full run's value for
    that head; results.json and the report say which; --resume refuses another selection."""
    base = ["reproduce", "--model", gpt2, "--quick", "--experiments", "vanishing,alg1,alg2,alg4", "--quiet"]
    full, sub = tmp_path / "full", tmp_path / "sub"
    run(*base, "--out", full)
    run(*base, "--layers", "1", "--heads", "0", "--out", sub)
    f, s = json.load(open(full / "results.json")), json.load(open(sub / "results.json"))
    op = s["manifest"]["options"]
    assert op["layers"] == [1] and op["heads"] == [0] and op["heads_analysed"] == 1
    assert full_opts_all(f)
    kept = 1 * 2 + 0  # layer * n_head + head
    for exp, key in (("alg2", "dtilde"), ("alg4", "ratio"), ("alg1", "dtilde")):
        for row_f, row_s in zip(f[exp]["per_head"][key], s[exp]["per_head"][key]):
            assert [i for i, v in enumerate(row_s) if v is not None] == [kept]
            assert row_s[kept] == pytest.approx(row_f[kept], rel=1e-12)
    v = s["vanishing"]["per_head"]["mean_max_weight"]
    assert [i for i, x in enumerate(v) if x is not None] == [kept]
    assert "heads analysed" in open(sub / "report.md").read()
    assert "1 of 4 heads" in open(sub / "report.html").read()
    p = run(*base, "--layers", "0", "--out", sub, "--resume", check=1)
    assert "heads" in p.stderr and "other options" in p.stderr, p.stderr
    # the Python package's reproduce(layers=, heads=): the CLI's subset run, value for value
    py = attnlim.reproduce(tmp_path / "py", model=gpt2, quick=True, layers=[1], heads=[0],
                           experiments=["vanishing", "alg1", "alg2", "alg4"])
    assert py["manifest"]["options"]["heads_analysed"] == 1
    for exp, key in (("alg2", "dtilde"), ("alg4", "ratio"), ("alg1", "dtilde")):
        assert py[exp]["per_head"][key] == s[exp]["per_head"][key]


def full_opts_all(res):
    op = res["manifest"]["options"]
    return op["layers"] == "all" and op["heads"] == "all" and op["heads_analysed"] == 4


def test_python_diagnose_layers_heads(gpt2):
    """attnlim.diagnose(layers=, heads=): only those heads, with the CLI's full run's values."""
    full = diag("--model", gpt2, "--length", 32)
    sub = attnlim.diagnose(gpt2, length=32, layers=[1], heads=[1], bos=False)
    assert [(h["layer"], h["head"]) for h in sub["heads"]] == [(1, 1)]
    assert sub["summary"]["heads"] == 1 and sub["summary"]["heads_in_model"] == 4
    ref = next(h for h in full["heads"] if (h["layer"], h["head"]) == (1, 1))
    for k, v in sub["heads"][0].items():
        if isinstance(v, float):
            assert v == pytest.approx(ref[k], rel=1e-9, abs=1e-12), k
    assert attnlim.diagnose(gpt2, length=8, heads=[0], bos=True)["framing"]["bos"]["used"] is True
    with pytest.raises(ValueError):
        attnlim.diagnose(gpt2, length=8, layers=[])


# ---- stderr not a TTY: plain progress lines; Ctrl-C in perplexity ----------------------------------

def plain_lines(err):
    assert "\r" not in err and "\x1b" not in err, repr(err[:300])
    return [ln for ln in err.splitlines() if ln.startswith("progress: ")]


def test_progress_lines_without_tty(gpt2, tmp_path):
    env = dict(os.environ, ATTNLIM_PROGRESS_INTERVAL="0")
    p = run("capture", "--model", gpt2, "--corpus", "war-and-peace", "--length", 32, "--what", "weights",
            "--out", tmp_path / "c", env=env)
    lines = plain_lines(p.stderr)
    assert len(lines) >= 2 and re.match(r"progress: +\d+% done, \S+ elapsed, ETA \S+ \|", lines[0]), p.stderr
    assert "100% done" in lines[-1]
    p = run("perplexity", "--model", gpt2, "--corpus", "war-and-peace", "--length", 16, "--windows", 3, env=env)
    lines = plain_lines(p.stderr)
    assert len(lines) >= 3 and "window 2" in p.stderr and "100% done" in lines[-1], p.stderr
    # the default interval (10 s): a run shorter than that prints no progress line at all
    env.pop("ATTNLIM_PROGRESS_INTERVAL")
    p = run("perplexity", "--model", gpt2, "--corpus", "war-and-peace", "--length", 16, env=env)
    assert plain_lines(p.stderr) == [] and p.stderr == "", p.stderr


def test_perplexity_sigint(gpt2):
    """SIGINT mid-run: the message says how many windows were done and that nothing was printed;
    the exit status is 128 + SIGINT; stdout stays empty."""
    env = dict(os.environ, ATTNLIM_PROGRESS_INTERVAL="0")
    p = subprocess.Popen([BIN, "perplexity", "--model", gpt2, "--corpus", "war-and-peace", "--length", "128",
                          "--windows", "4000", "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t0 = time.monotonic()
    line = p.stderr.readline()
    while not line.startswith("progress: ") or "window 2," not in line:
        assert p.poll() is None and time.monotonic() - t0 < 120, line
        line = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGINT, (p.returncode, err)
    m = re.search(r"attnlim perplexity: interrupted: (\d+) of 4000 windows done; nothing was printed", err)
    assert m and 3 <= int(m.group(1)) < 4000, err
    assert out == ""


# ---- nothing is created before the inputs are validated ---------------------------------------------

@pytest.mark.parametrize("args", [
    ("reproduce", "--text", "hi there"),                       # too few tokens for the grids
    ("reproduce", "--quick", "--corpus", "/nonexistent/text"),
    ("reproduce", "--quick", "--wrap"),                         # a decoder
    ("reproduce", "--quick", "--layers", "5"),
    ("diagnose", "--length", "100000"),
    ("diagnose", "--length", "16", "--window", "999999"),
    ("capture", "--corpus", "war-and-peace", "--length", "16", "--window", "999999", "--what", "weights"),
    ("capture", "--corpus", "war-and-peace", "--length", "16", "--what", "weights", "--wrap"),
])
def test_refusal_leaves_no_directory(gpt2, tmp_path, args):
    out = tmp_path / "a" / "out"
    p = run(args[0], "--model", gpt2, *args[1:], "--out", out, check=None)
    assert 0 < p.returncode < 128, p.stderr
    assert not (tmp_path / "a").exists(), (args, sorted(os.listdir(tmp_path / "a")))  # not even its parent
