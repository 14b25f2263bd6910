"""The malformed-input corpus (tests/bad): every case exits non-zero (not by a signal) with a
message naming the input and the fault, and leaves nothing half-written behind."""
import os
import resource
import shlex
import signal
import subprocess
import time

import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))
BAD = os.path.join(SRC, "tests", "bad")
INPUTS = os.path.join(BAD, "inputs")


def load_cases():
    cases = []
    with open(os.path.join(BAD, "cases.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, cmd, status, needle = line.rstrip("\n").split("\t")
            cases.append(pytest.param(cmd, status, needle, id=name))
    return cases


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "2", "--embd", "16", "--ctx", "64",
                    "--vocab", "50257", "--seed", "5", "--out", str(d)], check=True, capture_output=True)
    return str(d)


def test_corpus_is_large_enough():
    assert len(load_cases()) >= 40
    files = [os.path.join(r, f) for r, _, fs in os.walk(INPUTS) for f in fs]
    assert len(files) >= 40


def test_corpus_is_what_the_generator_writes(tmp_path):
    # the committed inputs are exactly what make_bad.py writes (so each is explained there)
    import sys
    subprocess.run([sys.executable, os.path.join(BAD, "make_bad.py"), str(tmp_path)], check=True,
                   capture_output=True)
    for r, _, fs in os.walk(tmp_path):
        for f in fs:
            p = os.path.join(r, f)
            rel = os.path.relpath(p, tmp_path)
            with open(p, "rb") as a, open(os.path.join(INPUTS, rel), "rb") as b:
                assert a.read() == b.read(), rel


@pytest.mark.parametrize("cmd,status,needle", load_cases())
def test_bad_input(cmd, status, needle, tiny, tmp_path):
    out = tmp_path / "out"
    argv = [a.format(**{"in": INPUTS, "tiny": tiny, "out": str(out)}) for a in shlex.split(cmd)]
    needle = needle.format(**{"in": INPUTS, "tiny": tiny, "out": str(out)})
    limit = None
    if status == "fail:fsize":
        limit = 10_000  # a full disk: files may grow to 10 kB only

        def pre():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    else:
        pre = None
    env = dict(os.environ, ATTNLIM_NO_DOWNLOAD="1")
    r = subprocess.run([BIN] + argv, capture_output=True, text=True, timeout=120, preexec_fn=pre,
                       cwd=str(tmp_path), env=env, errors="replace")
    if status == "ok":
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode > 0, "exit %d (a signal?)\n%s" % (r.returncode, r.stderr)
        assert r.returncode != 139
    assert needle in r.stderr, r.stderr
    # the message names the input file (or the output it could not write)
    inputs = [a for a in argv if a.startswith(INPUTS) or a.startswith("/proc/")]
    if status == "fail:fsize":
        inputs.append(str(out))
    if status != "ok" and inputs:
        named = any(os.path.relpath(a, INPUTS).split(os.sep)[-1] in r.stderr or a in r.stderr for a in inputs)
        named = named or any(os.path.basename(a.rstrip("/")) in r.stderr for a in inputs)
        assert named, "the message names none of %s:\n%s" % (inputs, r.stderr)
    # nothing half-written: no output dir, or one without temp files or partial outputs
    if out.exists():
        left = [os.path.join(r_, f) for r_, _, fs in os.walk(out) for f in fs]
        assert not left, "left behind: %s" % left


def test_killed_capture_leaves_no_partial_files(tmp_path):
    model = tmp_path / "m"
    subprocess.run([BIN, "make-model", "--layers", "6", "--heads", "4", "--embd", "128", "--ctx", "512",
                    "--vocab", "50257", "--seed", "9", "--out", str(model)], check=True, capture_output=True)
    for sig, delay in ((signal.SIGKILL, 0.3), (signal.SIGTERM, 0.6), (signal.SIGINT, 0.9), (signal.SIGKILL, 1.5)):
        out = tmp_path / ("out%d_%s" % (sig, delay))
        p = subprocess.Popen([BIN, "capture", "--model", str(model), "--corpus", "war-and-peace", "--window", "0",
                              "--length", "512", "--what", "weights,logits,q,k,v", "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(sig)
        p.wait(timeout=60)
        if out.exists() and (out / "manifest.json").exists():
            continue  # it finished before the signal: a complete output is fine
        if out.exists():
            # final names live at the top of DIR; a killed run may leave its hidden temp
            # directory (.capture-PID.tmp), never a file under a final name
            finals = [f for f in os.listdir(out) if not f.startswith(".")]
            assert not finals, "a killed run left final-named files: %s" % finals
            for f in os.listdir(out):
                assert f.startswith(".capture-") and f.endswith(".tmp"), f
