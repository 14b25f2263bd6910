"""test_interrupt.py: `attnlim capture` publishes its results with one rename, and a killed or
interrupted run leaves nothing under a final name.

Every signal is sent while the run is provably in its forward pass: the test waits until the
run's temporary directory (PARENT/.capture-PID.tmp) holds its first array, with many layers
still to go, and checks the process was still running when the signal went out. The child
starts with SIGINT/SIGTERM at their default action (a background job of a non-interactive
shell inherits SIGINT ignored, which would make SIGINT a no-op)."""
import os
import pathlib
import signal
import subprocess
import threading
import time

import pytest

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("run through ctest (ATTNLIM_BIN unset)")

N_LAYER = 12
LENGTH = 256


def run(*args, check=None, env=None):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode >= 0, f"crashed with signal {-p.returncode}: {args}\n{p.stderr}"
    if check is not None:
        assert p.returncode == check, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("interrupt")
    model = d / "model"
    run("make-model", "--layers", N_LAYER, "--heads", 4, "--embd", 64, "--ctx", LENGTH, "--vocab", 1000,
        "--seed", 9, "--out", model, check=0)
    ids = d / "ids.txt"
    ids.write_text(" ".join(str((i * 7919) % 1000) for i in range(LENGTH)))
    return {"model": model, "ids": ids}


def capture_args(work, out, length=LENGTH, what="weights", extra=()):
    return [BIN, "capture", "--model", str(work["model"]), "--tokens", str(work["ids"]), "--length",
            str(length), "--what", what, "--threads", "1", "--out", str(out), *extra]


def temp_dirs(parent):
    return sorted(f for f in os.listdir(parent) if f.startswith(".capture-"))


def default_signals():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start_and_wait_for_forward(args, parent, preexec=default_signals):
    """Starts the capture and returns once its temporary directory holds an array (the forward
    is running, N_LAYER - 1 layers to go)."""
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=preexec)
    tmp = pathlib.Path(parent) / f".capture-{p.pid}.tmp"
    t0 = time.monotonic()
    while not (tmp.is_dir() and any(f.startswith("layer") for f in os.listdir(tmp))):
        assert p.poll() is None, "the run ended before its forward was seen: %s" % p.stderr.read()
        assert time.monotonic() - t0 < 60, "no array appeared in %s" % tmp
        time.sleep(0.002)
    return p, tmp


def final_names(out):
    return [f for f in os.listdir(out) if not f.startswith(".")] if out.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_signal_mid_forward(work, tmp_path, sig):
    parent = tmp_path / "runs"
    parent.mkdir()
    out = parent / "cap"
    p, tmp = start_and_wait_for_forward(capture_args(work, out), parent)
    assert p.poll() is None  # still running when the signal goes out
    p.send_signal(sig)
    p.wait(timeout=60)
    err = p.stderr.read().decode(errors="replace")
    assert p.returncode == -sig, f"exit {p.returncode}, not ended by {sig.name}\n{err}"
    assert not out.exists(), "a killed run published %s" % final_names(out)
    if sig == signal.SIGKILL:  # nothing could clean up: the directory and its (now free) lock
        assert temp_dirs(parent) == sorted([tmp.name, tmp.name[:-4] + ".lock"])
    else:
        assert temp_dirs(parent) == [], "the handler left %s" % temp_dirs(parent)
        assert sig.name in err and "nothing was written" in err, err
    # the next run succeeds, sweeps the dead run's temporary directory, publishes everything
    run(*capture_args(work, out)[1:], check=0)
    assert temp_dirs(parent) == []
    assert sorted(final_names(out)) == sorted([f"layer{l}.weights.npy" for l in range(N_LAYER)] +
                                              ["manifest.json"])


def test_signal_mid_forced_replace_keeps_the_earlier_capture(work, tmp_path):
    out = tmp_path / "cap"
    run(*capture_args(work, out, length=32, what="q")[1:], check=0)
    before = {f: (out / f).read_bytes() for f in os.listdir(out)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        p, _ = start_and_wait_for_forward(capture_args(work, out, extra=["--force"]), tmp_path)
        p.send_signal(sig)
        p.wait(timeout=60)
        assert p.returncode == -sig
        assert {f: (out / f).read_bytes() for f in os.listdir(out)} == before  # untouched, no mix
    run(*capture_args(work, out, length=32)[1:], "--force", check=0)
    assert temp_dirs(tmp_path) == []


def test_ignored_sigint_stays_ignored(work, tmp_path):
    """SIGINT inherited as ignored (what a non-interactive shell gives a background job) is not
    caught: the run goes on and finishes."""

    def ignore_int():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    out = tmp_path / "cap"
    p, _ = start_and_wait_for_forward(capture_args(work, out), tmp_path, preexec=ignore_int)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)
    assert p.returncode == 0, p.stderr.read()
    assert len(final_names(out)) == N_LAYER + 1 and temp_dirs(tmp_path) == []


# ---- publication: one rename --------------------------------------------------------------------


def listing_watcher(out, stop):
    """Lists `out` as fast as it can until stop is set; returns the distinct listings seen."""
    seen = set()

    def loop():
        while not stop.is_set():
            try:
                seen.add(frozenset(os.listdir(out)))
            except FileNotFoundError:
                seen.add(None)

    t = threading.Thread(target=loop)
    t.start()
    return t, seen


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename-aside"])
def test_force_replaces_atomically(work, tmp_path, exchange):
    out = tmp_path / "cap"
    run(*capture_args(work, out, length=16, what="weights,logits")[1:], check=0)
    old = frozenset(os.listdir(out))
    assert len(old) == 2 * N_LAYER + 1
    env = dict(os.environ)
    if not exchange:
        env["ATTNLIM_TEST_NO_RENAME_EXCHANGE"] = "1"
    stop = threading.Event()
    t, seen = listing_watcher(out, stop)
    try:
        r = run(*capture_args(work, out, length=16, what="q", extra=["--layers", "0-3", "--force"])[1:],
                check=0, env=env)
    finally:
        stop.set()
        t.join()
    new = frozenset(["manifest.json"] + [f"layer{l}.q.npy" for l in range(4)])
    assert frozenset(os.listdir(out)) == new  # the earlier run's arrays are gone, not mixed in
    # Never a mix: every listing is the new set, or part of the old one. A listing that opened
    # the old directory just before the swap reads it while its files are removed, so it may
    # see any subset of the old set (that is the old directory being deleted, not DIR holding
    # a mix). rename-aside: DIR is briefly absent.
    def ok(s):
        return s == new or (s is not None and s <= old) or (s is None and not exchange)
    bad = [s for s in seen if not ok(s)]
    assert not bad, "DIR was seen holding %s" % [sorted(s) if s else s for s in bad]
    assert new in seen or old in seen  # the watcher did list DIR
    assert temp_dirs(tmp_path) == []
    assert [ln for ln in r.stderr.splitlines() if not ln.startswith("attnlim capture: about ")] == []  # the size only


def test_existing_dir_rules(work, tmp_path):
    out = tmp_path / "cap"
    # an empty directory is replaced
    out.mkdir()
    run(*capture_args(work, out, length=8, what="q", extra=["--layers", "0"])[1:], check=0)
    assert sorted(os.listdir(out)) == ["layer0.q.npy", "manifest.json"]
    # a non-empty one is refused, untouched, and the message says what to do
    before = {f: (out / f).read_bytes() for f in os.listdir(out)}
    r = run(*capture_args(work, out, length=8, what="k", extra=["--layers", "0"])[1:], check=1)
    assert str(out) in r.stderr and "--force" in r.stderr and "already holds files" in r.stderr
    assert {f: (out / f).read_bytes() for f in os.listdir(out)} == before
    assert temp_dirs(tmp_path) == []
    # --force replaces only an earlier capture: a file capture does not write stops it
    (out / "notes.txt").write_text("mine")
    r = run(*capture_args(work, out, length=8, what="k", extra=["--layers", "0", "--force"])[1:], check=1)
    assert "notes.txt" in r.stderr and (out / "notes.txt").read_text() == "mine"
    assert sorted(os.listdir(out)) == ["layer0.q.npy", "manifest.json", "notes.txt"]
    # --out naming a file
    f = tmp_path / "file"
    f.write_text("x")
    r = run(*capture_args(work, f, length=8)[1:], check=1)
    assert "not a directory" in r.stderr and f.read_text() == "x"


def test_failure_leaves_no_directory(work, tmp_path):
    """A run that fails after creating the output's parents leaves none of them (nor DIR)."""
    out = tmp_path / "a" / "b" / "cap"
    r = run(*capture_args(work, out, length=8)[1:], "--window", "999", check=1)
    assert "window 999" in r.stderr
    assert not (tmp_path / "a").exists()
    bad_model = tmp_path / "nomodel"
    r = run("capture", "--model", bad_model, "--tokens", work["ids"], "--length", 8, "--out", out, check=1)
    assert str(bad_model) in r.stderr and not (tmp_path / "a").exists()
    assert os.listdir(tmp_path) == []


def test_stale_temp_dirs_are_swept(work, tmp_path):
    """A temporary is removed only when its lock can be taken (its owner is gone, whatever its
    pid means here); a live owner's is kept even when its pid is dead in this namespace."""
    import fcntl
    parent = tmp_path
    dead = subprocess.Popen(["true"])
    dead.wait()

    def planted(stem, lock="free"):
        d = parent / f"{stem}.tmp"
        d.mkdir()
        (d / "layer0.weights.npy").write_bytes(b"partial")
        if lock is None:
            return d, None
        f = open(parent / f"{stem}.lock", "w")
        if lock == "held":
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return d, f

    stale, f1 = planted(f".capture-{dead.pid}")  # killed: its lock is free
    f1.close()
    stale_old = parent / f".capture-{dead.pid}.old"
    stale_old.mkdir()
    live, f2 = planted(f".capture-{os.getpid()}", lock="held")
    # a live run whose pid does not exist here (another PID namespace or host): kill(pid, 0)
    # would call it dead; its held lock says otherwise
    foreign_live, f3 = planted(f".capture-{dead.pid}-1", lock="held")
    lockless, _ = planted(f".capture-{dead.pid}-2", lock=None)  # no proof either way: kept
    unrelated = parent / ".capture-notes.tmp"
    unrelated.mkdir()
    run(*capture_args(work, parent / "cap", length=8, what="q", extra=["--layers", "0"])[1:], check=0)
    assert not stale.exists() and not stale_old.exists()
    assert not (parent / f".capture-{dead.pid}.lock").exists()
    for d in (live, foreign_live, lockless):
        assert (d / "layer0.weights.npy").read_bytes() == b"partial", d
    assert unrelated.exists()
    assert (parent / f".capture-{dead.pid}-1.lock").exists()
    f2.close()
    f3.close()
    # their owners gone now: the next run sweeps them (the lock-less one stays)
    run(*capture_args(work, parent / "cap2", length=8, what="q", extra=["--layers", "0"])[1:], check=0)
    assert not live.exists() and not foreign_live.exists() and lockless.exists()


def test_live_run_in_another_pid_namespace_is_not_swept(work, tmp_path):
    """A capture running (stopped mid-forward) in this PID namespace, and a second capture into
    the same parent started in a new PID namespace (unshare --pid), where the first one's pid
    does not exist: the first one's temporary survives and it then completes."""
    if os.geteuid() != 0:
        pytest.skip("unshare --pid needs root: not run here (the lock test above covers the logic)")
    probe = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unshare --pid is not available here: %s" % probe.stderr.decode(errors="replace"))
    parent = tmp_path
    out = parent / "cap"
    p, tmp = start_and_wait_for_forward(capture_args(work, out), parent)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        args = capture_args(work, parent / "other", length=8, what="q", extra=["--layers", "0"])
        other = subprocess.run(["unshare", "--pid", "--fork", *map(str, args)],
                               capture_output=True, text=True, timeout=300)
        assert other.returncode == 0, other.stderr
        assert tmp.is_dir() and any(f.startswith("layer") for f in os.listdir(tmp)), \
            "the second run removed a live run's temporary directory"
    finally:
        os.kill(p.pid, signal.SIGCONT)
    p.wait(timeout=300)
    assert p.returncode == 0, p.stderr.read()
    assert len(final_names(out)) == N_LAYER + 1
    assert [f for f in temp_dirs(parent)] == []


def test_out_planted_symlink_is_refused(work, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "cap"
    link.symlink_to(target)
    r = run(*capture_args(work, link, length=8, what="q", extra=["--layers", "0"])[1:], check=1)
    assert str(link) in r.stderr and "symbolic link" in r.stderr
    assert os.listdir(target) == [] and link.is_symlink()
    assert temp_dirs(tmp_path) == []
