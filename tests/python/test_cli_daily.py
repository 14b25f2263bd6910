"""Everyday use of the command line: `--name=value` is the same as `--name value` for every
command (tools/cli.c splits it before the command sees it), and a mistyped option, command or
corpus name is answered with the nearest valid one."""
import json
import os
import re
import subprocess

import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))


def run(*args, check=True, **kw):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, **kw)
    if check:
        assert r.returncode == 0, f"attnlim {' '.join(args)}: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("daily") / "model"
    run("make-model", "--layers", "2", "--heads", "2", "--embd", "16", "--ctx", "64", "--vocab", "50257",
        "--seed", "5", "--out", str(d))
    return str(d)


def test_equals_form_is_the_spaced_form(tmp_path, tiny):
    logits = tmp_path / "z.txt"
    logits.write_text("1 2 3 0.5\n")
    a = run("normalize", "--method", "sparsemax", "--temperature", "0.5", "--input", str(logits), "--json")
    b = run("normalize", "--method=sparsemax", "--temperature=0.5", f"--input={logits}", "--json")
    assert json.loads(a.stdout) == json.loads(b.stdout)
    a = run("diagnose", "--model", tiny, "--length", "16", "--json")
    b = run("diagnose", f"--model={tiny}", "--length=16", "--json")
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja["L"] == jb["L"] == 16 and ja["heads"] == jb["heads"]
    # a value may itself hold '=' and start with dashes: only the first '=' splits
    c = run("tokenize", "--encode=--a=b", check=False)
    d = run("tokenize", "--encode", "--a=b", check=False)
    assert (c.returncode, c.stdout) == (d.returncode, d.stdout)


@pytest.mark.parametrize("args, want", [
    (["diagnose", "--lenght", "16"], "did you mean '--length'?"),
    (["diagnose", "--len", "16"], "did you mean '--length'?"),
    (["reproduce", "--windws", "2"], "did you mean '--windows'?"),
    (["capture", "--heds", "0"], "did you mean '--heads'?"),
    (["metrics", "--casual"], "did you mean '--causal'?"),
    (["normalize", "--tempreature", "2"], "did you mean '--temperature'?"),
    (["diagnoze"], "did you mean 'diagnose'?"),
])
def test_suggestions(args, want):
    r = run(*args, check=False)
    assert r.returncode == 2 and want in r.stderr, r.stderr


def test_no_suggestion_when_nothing_is_near():
    r = run("diagnose", "--zzzzzzzz", "1", check=False)
    assert r.returncode == 2 and "unknown option '--zzzzzzzz'" in r.stderr and "did you mean" not in r.stderr


def test_corpus_name_suggested(tiny, tmp_path):
    r = run("diagnose", "--model", tiny, "--corpus", "War-and-Peace.txt", "--length", "16", check=False,
            cwd=tmp_path)
    assert r.returncode == 1 and "did you mean 'war-and-peace'?" in r.stderr, r.stderr
    (tmp_path / "novel").write_text("a file of that name is read as a file " * 40)
    r = run("diagnose", "--model", tiny, "--corpus", "novel", "--length", "16", "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["corpus"] == "novel"


PROMPT = "It was in July, 1805, and the speaker was Anna Pavlovna Scherer."


def ids_of(text, *extra):
    r = run("tokenize", "--text", text, *extra)
    return [int(v) for v in r.stdout.split()]


def test_prompts_from_the_command_line(tiny, tmp_path):
    ids = ids_of(PROMPT)
    assert ids == ids_of(PROMPT, "--model", tiny)  # a GPT-2 model: the GPT-2 tokenizer
    f = tmp_path / "p.txt"
    f.write_text(PROMPT)
    assert ids == [int(v) for v in run("tokenize", str(f)).stdout.split()]
    # capture: --length defaults to the prompt's tokens; the manifest has the strings by the ids
    out = tmp_path / "cap"
    run("capture", "--model", tiny, "--text", PROMPT, "--out", str(out))
    man = json.load(open(out / "manifest.json"))
    assert man["length"] == len(ids) and man["token_ids"] == ids
    dec = [run("tokenize", "--decode", "-", input=str(i)).stdout for i in ids]
    assert man["token_strings"] == dec and "".join(man["token_strings"]) == PROMPT
    # --tokens: the same default
    tf = tmp_path / "ids.txt"
    tf.write_text(" ".join(map(str, ids[:7])))
    out2 = tmp_path / "cap2"
    run("capture", "--model", tiny, "--tokens", str(tf), "--out", str(out2))
    assert json.load(open(out2 / "manifest.json"))["length"] == 7
    # diagnose: L = the prompt's tokens
    d = json.loads(run("diagnose", "--model", tiny, "--text", PROMPT, "--json").stdout)
    assert d["L"] == len(ids) and d["corpus"] == "text:" + PROMPT
    # perplexity over the whole prompt
    p = json.loads(run("perplexity", "--model", tiny, "--text", PROMPT, "--json").stdout)
    assert p["length"] == len(ids) and p["windows"] == 1
    # --corpus still needs --length
    r = run("capture", "--model", tiny, "--corpus", "war-and-peace", "--out", str(tmp_path / "c3"), check=False)
    assert r.returncode == 2 and "--length L is required with --corpus" in r.stderr


def test_tokenize_model_refuses_what_does_not_apply(tiny):
    for opt in (["--vocab", "x"], ["--pre", "llama3"]):
        r = run("tokenize", "--model", tiny, *opt, "--text", "hi", check=False)
        assert r.returncode == 2 and "does not apply" in r.stderr and opt[0] in r.stderr
    r = run("tokenize", "--text", "", check=False)
    assert r.returncode != 0 and "empty" in r.stderr


def test_metrics_head_of_a_capture_and_the_causal_warning(tiny, tmp_path):
    import numpy as np
    out = tmp_path / "cap"
    run("capture", "--model", tiny, "--text", PROMPT * 2, "--what", "weights,v", "--layers", "1", "--out", str(out))
    W, V = out / "layer1.weights.npy", out / "layer1.v.npy"
    w, v = np.load(W), np.load(V)
    assert w.ndim == 3
    for h in range(w.shape[0]):  # the same as the head sliced out by numpy
        np.save(tmp_path / "w.npy", w[h].astype(np.float64))
        np.save(tmp_path / "v.npy", v[h].astype(np.float64))
        a = json.loads(run("metrics", "--weights", str(W), "--vectors", str(V), "--head", str(h), "--top-n", "1,3",
                           "--causal", "--json").stdout)
        b = json.loads(run("metrics", "--weights", str(tmp_path / "w.npy"), "--vectors", str(tmp_path / "v.npy"),
                           "--top-n", "1,3", "--causal", "--json").stdout)
        assert a == b
    r = run("metrics", "--weights", str(W), "--vectors", str(V), "--head", "0", "--top-n", "1")
    assert "warning: " in r.stderr and "above the diagonal is 0" in r.stderr and "--causal" in r.stderr
    r = run("metrics", "--weights", str(W), "--vectors", str(V), "--head", "0", "--top-n", "1", "--causal")
    assert "warning" not in r.stderr
    r = run("metrics", "--weights", str(W), "--vectors", str(V), "--top-n", "1", check=False)
    assert r.returncode == 1 and "pick one head with --head H" in r.stderr
    r = run("metrics", "--weights", str(W), "--vectors", str(V), "--top-n", "1", "--head", "7", check=False)
    assert r.returncode == 1 and "--head 7, but the weights hold 2 heads" in r.stderr


def test_capture_says_its_size_first_and_dry_run_only_that(tiny, tmp_path):
    out = tmp_path / "cap"
    r = run("capture", "--model", tiny, "--text", PROMPT, "--what", "weights,v,hidden", "--out", str(out),
            "--dry-run")
    assert not out.exists() and r.stderr == ""
    line = r.stdout.strip()
    assert line.startswith("about ") and line.endswith(f"to {out}") and "\n" not in line
    r = run("capture", "--model", tiny, "--text", PROMPT, "--what", "weights,v,hidden", "--out", str(out))
    assert r.stderr.splitlines()[0] == "attnlim capture: " + line
    value, unit = line.split()[1:3]
    est = float(value) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
    got = sum(f.stat().st_size for f in out.glob("*.npy"))
    assert abs(est - got) <= 0.01 * got, (est, got)


def test_openmp_waits_passively_unless_the_user_chose():
    """On a shared machine, threads spinning at a barrier take the core of a descheduled
    partner: the CLI makes libgomp wait passively unless the user chose a policy. libgomp's own
    report of its settings (OMP_DISPLAY_ENV=verbose) is the witness, and its spin count is what
    matters: libgomp 12 also prints 'PASSIVE' for an unset policy while it spins 300000 times, so
    the process that runs the command (the last report: the CLI executes itself again once to set
    the policy) must spin 0 times. A policy the user set is kept, and then nothing re-executes."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_DISPLAY_ENV"] = "verbose"
    spins = lambda err: re.findall(r"GOMP_SPINCOUNT = '(\d+)'", err)
    r = run("--version", env=env)
    assert r.returncode == 0 and spins(r.stderr)[-1:] == ["0"], r.stderr
    r = run("--version", env={**env, "OMP_WAIT_POLICY": "active"})
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in r.stderr, r.stderr
    assert len(spins(r.stderr)) == 1 and int(spins(r.stderr)[0]) > 0, r.stderr
