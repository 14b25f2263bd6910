"""Ctrl-C stops a long call promptly (include/attnlim.h al_set_progress; docs/python.md).

A Python process runs attnlim.reproduce (or a loop of Model.forward with capture); once the run
is provably in the middle (its first (window, L) job saved in OUT/partial, more to go), SIGINT
goes to the process. KeyboardInterrupt must arrive within 1 s (the child stamps it with
CLOCK_MONOTONIC, the clock the parent read when it sent the signal), and OUT must hold nothing
final (no results.json, report, CSV, NPY or figure; only partial/, complete, for --resume). The
CLI: `attnlim reproduce` prints "interrupted; rerun with --resume to continue", exits 130, and the
rerun with --resume reuses the saved jobs and finishes."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("run through ctest (ATTNLIM_BIN unset)")

CHILD = r"""
import sys, time
import numpy as np
import attnlim
what, out, model = sys.argv[1:4]
print("ready", flush=True)
try:
    if what == "reproduce":
        attnlim.reproduce(out, model=model, quick=True, long_length=256, windows=3, threads=2)
    elif what == "forward":
        with attnlim.Model(model) as m:
            ids = np.arange(256) % 1000
            open(out, "w").close()  # the parent waits for this file
            for _ in range(1000):
                m.forward(ids, capture=("weights", "q"))
    else:
        rng = np.random.default_rng(0)
        L = 1500
        w = np.tril(rng.random((L, L)))
        w /= w.sum(1, keepdims=True)
        x = rng.normal(size=(L, 32))
        open(out, "w").close()
        for _ in range(1000):
            attnlim.head_metrics(w, x, top_n=[1, 4, 16], causal=True, mc=8)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt %.6f" % time.monotonic(), flush=True)
except BaseException as e:
    print("other %s %s" % (type(e).__name__, e), flush=True)
"""


def run(*args, check=0):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == check, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def default_signals():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("cancel") / "model"
    run("make-model", "--layers", 12, "--heads", 12, "--embd", 192, "--ctx", 256, "--vocab", 50257,
        "--seed", 3, "--out", d)
    return d


def finals(out):
    """What OUT holds besides partial/ and dot files (a run's lock)."""
    return sorted(f for f in os.listdir(out) if not f.startswith(".") and f != "partial")


def wait_for(path, proc, what, limit=300):
    t0 = time.monotonic()
    while not os.path.exists(path):
        assert proc.poll() is None, "the child ended before %s: %s" % (what, proc.stdout.read())
        assert time.monotonic() - t0 < limit, "no %s after %d s" % (what, limit)
        time.sleep(0.005)


def interrupt(proc):
    """SIGINT now; returns the child's delay (s) to KeyboardInterrupt, and its output."""
    assert proc.poll() is None
    t_sig = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    lines = out.split("\n")
    got = [line for line in lines if line.startswith("KeyboardInterrupt ")]
    assert got, "no KeyboardInterrupt; the child said: %s" % out
    return float(got[0].split()[1]) - t_sig, out


def child(what, out, model):
    env = dict(os.environ, ATTNLIM_DATA=os.environ.get("ATTNLIM_DATA", os.path.join(
        os.environ.get("ATTNLIM_SOURCE_DIR", "."), "..", "shared", "data")))
    return subprocess.Popen([sys.executable, "-c", CHILD, what, str(out), str(model)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=default_signals, env=env)


def test_sigint_mid_reproduce(model, tmp_path):
    out = tmp_path / "out"
    p = child("reproduce", out, model)
    wait_for(out / "partial" / "w0_L256", p, "a saved job")  # the first of 3 long jobs, then 12 more
    delay, said = interrupt(p)
    print("%s: KeyboardInterrupt %.3f s after SIGINT" % (getattr(p, "args", [""])[-3], delay))
    assert delay < 1.0, "KeyboardInterrupt %.3f s after SIGINT" % delay
    assert p.returncode == 0 and "finished" not in said
    assert finals(out) == [], "an interrupted run left %s" % finals(out)
    saved = os.listdir(out / "partial")
    assert "w0_L256" in saved and not [f for f in saved if ".tmp" in f], saved


@pytest.mark.parametrize("what", ["forward", "head_metrics"])
def test_sigint_mid_forward_and_metrics(model, tmp_path, what):
    flag = tmp_path / "started"
    p = child(what, flag, model)
    wait_for(flag, p, "the loop")
    time.sleep(0.3)  # inside a call (every call is a small part of the loop)
    delay, said = interrupt(p)
    print("%s: KeyboardInterrupt %.3f s after SIGINT" % (getattr(p, "args", [""])[-3], delay))
    assert delay < 1.0, "KeyboardInterrupt %.3f s after SIGINT" % delay


def test_cli_reproduce_interrupted_then_resumed(model, tmp_path):
    out = tmp_path / "out"
    args = [BIN, "reproduce", "--model", str(model), "--quick", "--long-length", "256", "--windows", "3",
            "--threads", "2", "--out", str(out)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=default_signals)
    wait_for(out / "partial" / "w0_L256", p, "a saved job")
    t_sig = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert time.monotonic() - t_sig < 1.5  # stopped (the process ended, not just the call)
    assert p.returncode == 130, (p.returncode, err)
    # "interrupted; rerun with --resume to continue" before any job is saved, else
    # "interrupted: k of n jobs saved in OUT/partial; rerun with --resume"
    assert re.search(r"attnlim reproduce: interrupted(; |: \d+ of \d+ jobs saved in .*; )"
                     r"rerun with --resume", err), err
    assert finals(out) == []
    r = run(*args[1:], "--resume")
    assert "results.json" in finals(out) and "report.md" in finals(out)

    m = re.search(r"--resume: reused (\d+) and computed (\d+) of (\d+)", r.stderr)
    assert m and int(m.group(1)) >= 1 and int(m.group(1)) + int(m.group(2)) == int(m.group(3)), r.stderr
