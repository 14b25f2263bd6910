"""Runs that cannot surprise: nothing is created before the inputs are read (a mistyped corpus
leaves no empty output directory); when stderr is not a TTY, progress comes as plain periodic
lines (no carriage return, no escape code); Ctrl-C stops at the next layer and says how many
jobs are saved and that --resume goes on from them."""
import json
import os
import signal
import subprocess
import time

import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))
OPTS = ("--quick", "--windows", "2", "--threads", "2")
JOBS = [f"w{w}_L{L}" for w in range(2) for L in (16, 32, 64)]


def run(*args, check=True, env=None):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    if check:
        assert r.returncode == 0, f"attnlim {' '.join(args)}: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs") / "model"
    run("make-model", "--layers", "8", "--heads", "4", "--embd", "128", "--ctx", "128", "--vocab", "50257",
        "--seed", "2", "--out", str(d))
    return str(d)


def test_no_directory_before_the_inputs_are_read(model, tmp_path):
    out = tmp_path / "new" / "out"
    r = run("reproduce", "--model", model, "--corpus", "war_and_peace", *OPTS, "--out", str(out), check=False)
    assert r.returncode == 1 and "did you mean 'war-and-peace'?" in r.stderr
    assert not out.exists() and not out.parent.exists()
    r = run("reproduce", "--model", str(tmp_path / "nope"), *OPTS, "--out", str(out), check=False)
    assert r.returncode == 1 and not out.exists()


def test_plain_progress_lines_when_not_a_tty(model, tmp_path):
    env = dict(os.environ, ATTNLIM_PROGRESS_INTERVAL="0")
    r = run("reproduce", "--model", model, *OPTS, "--out", str(tmp_path / "o"), env=env)
    assert "\r" not in r.stderr and "\x1b" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("progress: ")]
    assert len(lines) >= 6, r.stderr  # at least one per job
    pct = [float(ln.split()[1].rstrip("%")) for ln in lines]
    assert pct == sorted(pct) and pct[-1] == 100
    assert all(" elapsed, ETA " in ln for ln in lines)
    # the default interval (10 s): one line per 10 s of the run at most, plus the first and the
    # final one (a loaded machine stretches the run, so the bound follows its measured length)
    t0 = time.monotonic()
    r = run("reproduce", "--model", model, *OPTS, "--out", str(tmp_path / "o2"))
    elapsed = time.monotonic() - t0
    n = len([ln for ln in r.stderr.splitlines() if ln.startswith("progress: ")])
    assert 1 <= n <= 2 + int(elapsed // 10), (n, elapsed, r.stderr)
    # --quiet: nothing
    r = run("reproduce", "--model", model, *OPTS, "--out", str(tmp_path / "o3"), "--quiet")
    assert r.stderr == ""


def _default_signals():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_what_is_saved(model, tmp_path):
    out = tmp_path / "out"
    part = out / "partial"
    proc = subprocess.Popen([BIN, "reproduce", "--model", model, *OPTS, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_default_signals)
    deadline = time.monotonic() + 120
    while not any((part / j / "done.json").exists() for j in JOBS):
        assert proc.poll() is None, "reproduce ended before a job was done"
        assert time.monotonic() < deadline
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    err = proc.stderr.read().decode()
    done = [j for j in JOBS if (part / j / "done.json").exists()]
    if rc == 0:
        pytest.skip("the run finished before the signal reached a layer boundary")
    assert rc in (1, 128 + signal.SIGINT), (rc, err)  # 130: the signal, as the other commands
    assert f"interrupted: {len(done)} of {len(JOBS)} jobs saved in {out}/partial; rerun with --resume" in err, err
    assert not (out / "results.json").exists()
    r = run("reproduce", "--model", model, *OPTS, "--out", str(out), "--resume")
    res = json.load(open(out / "results.json"))
    assert res["manifest"]["resume"]["reused"] == len(done)
