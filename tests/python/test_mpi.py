"""`attnlim reproduce` and `attnlim diagnose` over several processes (mpirun, src/dist.c) against
the same commands run as one plain process (no launcher) of the same binary: results.json equal
to 1e-12 but for the timings and the per-rank facts, every partial/ job array bit for bit, with
-np 2 and -np 3 (14 heads: 5, 5, 4 per rank; 7 per layer: never a whole layer per rank); --resume
under MPI; an error that only a non-zero rank meets (a head of NaN queries it owns) and a rank
that opened another model stop every rank with that rank's message and a non-zero exit, within a
timeout; usage errors printed once. A build without MPI fails here: MPI is part of the build
(scripts/setup.sh installs libopenmpi-dev and openmpi-bin)."""
import ctypes
import glob
import json
import os
import re
import shutil
import socket
import struct
import subprocess

import numpy as np
import pytest

from jsoncmp import RUN_KEYS
from jsoncmp import close_json as _close_json

BIN = os.environ.get("ATTNLIM_BIN")
LIB = os.environ.get("ATTNLIM_LIB")
BUILD = os.environ.get("ATTNLIM_BUILD_DIR", "")
SRC = os.environ.get("ATTNLIM_SOURCE_DIR", "")
TIMEOUT = 300  # a hang fails the test instead of the suite
OPTS = ["--quick", "--windows", "2", "--temperatures", "0.001,0.1,10", "--threads", "1", "--quiet"]


def _sanitized():
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return any(re.match(r"AL_SANITIZE:BOOL=(ON|1|TRUE)$", line.strip(), re.I) for line in f)
    except OSError:
        return False


@pytest.fixture(scope="module")
def mpirun():
    assert BIN and os.path.exists(BIN), "ATTNLIM_BIN must point to the attnlim CLI (run through ctest)"
    assert LIB and os.path.exists(LIB), "ATTNLIM_LIB must point to libattnlim (run through ctest)"
    lib = ctypes.CDLL(LIB)
    if not lib.al_dist_has_mpi():
        pytest.fail("this attnlim was built without MPI (AL_MPI=OFF, or CMake found none): install libopenmpi-dev and "
                    "openmpi-bin (scripts/setup.sh does) and reconfigure, or -DAL_MPI=ON to require it")
    exe = shutil.which("mpirun")
    if not exe:
        pytest.fail("mpirun is missing: install openmpi-bin (scripts/setup.sh does)")
    return exe


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # OpenMPI refuses root unless told; CI runs as root
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # the ctest environment of the Python tests preloads the sanitizer runtimes for ctypes: mpirun
    # itself is not ours, so without them; the ranks get them back below
    env.pop("LD_PRELOAD", None)
    return env


def launch(mpirun, n, *args, check=True, ranks=None):
    """mpirun -np n attnlim ARGS (or, with ranks, one app context per argument list)."""
    cmd = [mpirun, "--oversubscribe", "-x", "OMP_NUM_THREADS"]
    if _sanitized():
        # leak checking on in the ranks, OpenMPI's process-lifetime allocations suppressed (whole
        # stacks, the plugins kept loaded: see tests/sanitizer/lsan.supp)
        supp = os.path.join(SRC, "tests", "sanitizer", "lsan.supp")
        cmd += ["-x", "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:abort_on_error=0",
                "-x", "LSAN_OPTIONS=suppressions=%s:print_suppressions=0" % supp,
                "-x", "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1",
                "-x", "OMPI_MCA_mca_base_component_disable_dlclose=1"]
    if ranks:
        for i, a in enumerate(ranks):
            cmd += ([":"] if i else []) + ["-np", "1", BIN, *a]
    else:
        cmd += ["-np", str(n), BIN, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
                       stdin=subprocess.DEVNULL)  # mpirun forwards stdin to rank 0: none here
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def run(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=TIMEOUT,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check and r.returncode != 0:
        raise AssertionError(f"attnlim {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


@pytest.fixture(scope="module")
def work(tmp_path_factory, mpirun):
    d = tmp_path_factory.mktemp("mpi")
    model = str(d / "model")
    run("make-model", "--layers", "2", "--heads", "7", "--embd", "56", "--ctx", "128", "--vocab", "50257",
        "--seed", "11", "--format", "safetensors", "--out", model)
    one = str(d / "one")
    run("reproduce", "--model", model, *OPTS, "--out", one)  # a plain process: no launcher
    return {"dir": d, "model": model, "one": one, "res": json.load(open(os.path.join(one, "results.json")))}


def close_json(a, b):
    """Equal to 1e-12, except the run-specific keys and the parallel layout."""
    _close_json(a, b, skip=RUN_KEYS + ("manifest.parallel",))


def same_partial(a, b):
    """Every job of partial/ in a and b: the same arrays, bit for bit, and the same key."""
    ja = sorted(os.path.relpath(f, a) for f in glob.glob(os.path.join(a, "partial", "*", "*")))
    jb = sorted(os.path.relpath(f, b) for f in glob.glob(os.path.join(b, "partial", "*", "*")))
    assert ja == jb and len([f for f in ja if f.endswith("done.json")]) == 6, (ja, jb)
    for f in ja:
        if f.endswith(".npy"):
            x, y = np.load(os.path.join(a, f)), np.load(os.path.join(b, f))
            assert x.shape == y.shape and x.tobytes() == y.tobytes(), f
        else:
            assert json.load(open(os.path.join(a, f)))["key"] == json.load(open(os.path.join(b, f)))["key"], f


def check_parallel(res, n):
    pa = res["manifest"]["parallel"]
    assert pa["ranks"] == n and pa["mpi"] is (n > 1)
    assert [r["rank"] for r in pa["per_rank"]] == list(range(n))
    host = socket.gethostname()[:63]
    for r in pa["per_rank"]:
        assert r["host"] == host and r["threads"] == 1, r
    cpu = res["manifest"]["timings"]["per_rank_cpu_s"]
    assert len(cpu) == n and all(c > 0 for c in cpu), cpu


@pytest.mark.parametrize("n", [2, 3])
def test_reproduce_equals_one_process(work, mpirun, n):
    out = str(work["dir"] / f"np{n}")
    r = launch(mpirun, n, "reproduce", "--model", work["model"], *[o for o in OPTS if o != "--quiet"],
               "--out", out)
    # rank 0 alone speaks: one closing line, no other rank's
    assert r.stderr.count("wrote %s/report.html" % out) == 1, r.stderr
    res = json.load(open(os.path.join(out, "results.json")))
    close_json(res, work["res"])
    same_partial(out, work["one"])
    check_parallel(res, n)
    check_parallel(work["res"], 1)
    # the metric CPU seconds are each head's once, whichever rank: about the one process's
    t, t1 = res["manifest"]["timings"], work["res"]["manifest"]["timings"]
    assert t["forward_cpu_s"] > 0 and t["distance_alg1_alg2_alg3_cpu_s"] > 0
    assert set(t) == set(t1)
    # the same outputs, all written by rank 0 (no temp files of another rank left beside them)
    assert sorted(os.listdir(out)) == sorted(os.listdir(work["one"]))


def test_resume_under_mpi(work, mpirun):
    out = str(work["dir"] / "resume")
    shutil.copytree(work["one"], out)
    part = os.path.join(out, "partial")
    gone = ["w0_L64", "w1_L16"]
    for j in gone:
        shutil.rmtree(os.path.join(part, j))
    kept = {f: (os.stat(f).st_ino, os.stat(f).st_mtime_ns) for f in glob.glob(os.path.join(part, "*", "*"))}
    r = launch(mpirun, 3, "reproduce", "--model", work["model"], *[o for o in OPTS if o != "--quiet"],
               "--out", out, "--resume")
    assert r.stderr.count("reused 4 and computed 2 of 6 (window, L) jobs") == 1, r.stderr
    res = json.load(open(os.path.join(out, "results.json")))
    assert res["manifest"]["resume"] == {"requested": True, "jobs": 6, "reused": 4, "computed": 2, "stale": 0,
                                         "temp_files_removed": 0}
    close_json(res, work["res"])
    same_partial(out, work["one"])
    for f, v in kept.items():  # the reused jobs were not touched
        assert (os.stat(f).st_ino, os.stat(f).st_mtime_ns) == v, f
    # options that differ from the saved ones: refused by rank 0, every rank stops
    r = launch(mpirun, 2, "reproduce", "--model", work["model"], *OPTS, "--out", out, "--resume", "--seed", "9",
               check=False)
    assert r.returncode != 0 and r.stderr.count("other options") == 1 and "seed 1234 -> 9" in r.stderr, r.stderr


def _nan_queries(src, dst, layer, head, d_head):
    """A copy of the safetensors model src with the query weights of one head all NaN."""
    shutil.copytree(src, dst)
    f = os.path.join(dst, "model.safetensors")
    b = bytearray(open(f, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    t = hdr[next(k for k in hdr if k.endswith(f"h.{layer}.attn.c_attn.weight"))]
    assert t["dtype"] == "F32"
    a, e = t["data_offsets"]
    w = np.frombuffer(bytes(b[8 + n + a:8 + n + e]), dtype="<f4").reshape(t["shape"]).copy()
    w[:, head * d_head:(head + 1) * d_head] = np.nan  # q of that head: [d_model, 3 d_model] = q | k | v
    b[8 + n + a:8 + n + e] = w.tobytes()
    open(f, "wb").write(b)


def test_error_on_another_rank_stops_all(work, mpirun, tmp_path):
    # the last layer's head 2: head index 7 + 2 = 9, rank 1's of 2; only its logits are NaN (the
    # last layer's output feeds nothing that reproduce reads), so rank 0 meets no error at all
    bad = str(tmp_path / "nan")
    _nan_queries(work["model"], bad, 1, 2, 8)
    out = str(tmp_path / "out")
    r = launch(mpirun, 2, "reproduce", "--model", bad, *OPTS, "--out", out, check=False)
    assert r.returncode != 0
    msg = re.findall(r"^attnlim reproduce: .*$", r.stderr, re.M)
    assert len(msg) == 1, r.stderr
    assert re.match(r"attnlim reproduce: rank 1 \(.+\): window 0, L = 64: layer 1 head 2 \(L = 64\): .*nan",
                    msg[0]), msg
    assert not os.path.exists(os.path.join(out, "results.json"))
    assert not glob.glob(os.path.join(out, "partial", "*", "done.json"))  # no job half-merged
    # one process meets the same error, without a rank
    one = run("reproduce", "--model", bad, *OPTS, "--out", str(tmp_path / "one"), check=False)
    assert one.returncode == 1 and msg[0].replace(re.match(r".*?: rank 1 \(.+?\): ", msg[0])[0],
                                                  "attnlim reproduce: ") in one.stderr, one.stderr
    # diagnose too
    r = launch(mpirun, 2, "diagnose", "--model", bad, "--length", "32", "--threads", "1", check=False)
    assert r.returncode != 0 and re.search(r"^attnlim diagnose: rank 1 \(.+\): .*nan", r.stderr, re.M), r.stderr


def test_other_model_on_a_rank(work, mpirun, tmp_path):
    other = str(tmp_path / "other")
    run("make-model", "--layers", "2", "--heads", "7", "--embd", "56", "--ctx", "128", "--vocab", "50257",
        "--seed", "12", "--format", "safetensors", "--out", other)
    out = str(tmp_path / "out")
    r = launch(mpirun, 0, ranks=[["reproduce", "--model", work["model"], *OPTS, "--out", out],
                                 ["reproduce", "--model", other, *OPTS, "--out", out]], check=False)
    assert r.returncode != 0
    assert re.search(r"^attnlim reproduce: rank 1 \(.+\): .*other/model\.safetensors: this model \(identity "
                     r"[0-9a-f]{16}\.\.\.\) is not rank 0's", r.stderr, re.M), r.stderr
    assert not os.path.exists(os.path.join(out, "results.json"))


def test_usage_error_once(work, mpirun):
    r = launch(mpirun, 2, "reproduce", "--bogus", check=False)
    assert r.returncode == 2 and r.stderr.count("unknown option '--bogus'") == 1, r.stderr
    r = launch(mpirun, 2, "reproduce", "--help")
    assert r.stdout.count("usage: attnlim reproduce") == 1 and "mpirun -np N" in r.stdout


def test_diagnose_equals_one_process(work, mpirun, tmp_path):
    args = ["diagnose", "--model", work["model"], "--length", "64", "--window", "1", "--threads", "1", "--json"]
    one = json.loads(run(*args, "--out", str(tmp_path / "one")).stdout)
    for n in (2, 3):
        r = launch(mpirun, n, *args, "--out", str(tmp_path / f"np{n}"))
        assert json.loads(r.stdout) == one  # one JSON document: rank 0's
        assert open(tmp_path / f"np{n}" / "diagnose.md").read() == open(tmp_path / "one" / "diagnose.md").read()


# --readings over the processes: each rank computes its own heads under every reading on the same
# forward (the d_model-wide vectors' Gram matrix per layer on every rank), rank 0 merges them
READINGS = "distance=norm-of-sum;vectors=hidden;vectors=key,distance=sum-vector;temperature-scale=raw"


def _strip_paths(x, root):
    """readings.json without the run's own directory in the paths of each reading's results."""
    if isinstance(x, dict):
        return {k: _strip_paths(v, root) for k, v in x.items()}
    if isinstance(x, list):
        return [_strip_paths(v, root) for v in x]
    return x.replace(root, "OUT") if isinstance(x, str) else x


@pytest.mark.parametrize("n", [2])
def test_readings_equal_one_process(work, mpirun, n, tmp_path):
    args = ["reproduce", "--model", work["model"], "--quick", "--temperatures", "0.001,0.1,10",
            "--threads", "1", "--quiet", "--readings", READINGS]
    one, many = str(tmp_path / "one"), str(tmp_path / f"np{n}")
    run(*args, "--out", one)
    launch(mpirun, n, *args, "--out", many)
    files = sorted(os.path.relpath(f, one) for f in glob.glob(os.path.join(one, "**", "*"), recursive=True))
    assert files == sorted(os.path.relpath(f, many)
                           for f in glob.glob(os.path.join(many, "**", "*"), recursive=True))
    names = [f for f in files if f.startswith("readings" + os.sep) and f.endswith(".npy")]
    assert len({f.split(os.sep)[1] for f in names}) == 4, names  # every reading wrote its arrays
    for f in (f for f in files if f.endswith(".npy")):  # every reading's arrays, bit for bit
        x, y = np.load(os.path.join(one, f)), np.load(os.path.join(many, f))
        assert x.shape == y.shape and x.tobytes() == y.tobytes(), f
    for f in (f for f in files if f.endswith("results.json")):
        close_json(json.load(open(os.path.join(many, f))), json.load(open(os.path.join(one, f))))
    ra = _strip_paths(json.load(open(os.path.join(many, "readings.json"))), many)
    rb = _strip_paths(json.load(open(os.path.join(one, "readings.json"))), one)
    assert ra == rb
    assert open(os.path.join(many, "readings.csv")).read() == open(os.path.join(one, "readings.csv")).read()
    assert json.load(open(os.path.join(many, "results.json")))["manifest"]["parallel"]["ranks"] == n


def test_windows_all_under_mpi(work, mpirun, tmp_path):
    """--windows all: rank 0 counts the windows and sends the count; -np 2 gives the plain
    process's results (the count itself is checked against HF tokenizers in test_reproduce)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("Well, Prince, so Genoa and Lucca are now just family estates. " * 40,
                      encoding="utf-8")
    opts = ["--quick", "--windows", "all", "--corpus", str(corpus), "--temperatures", "0.1",
            "--threads", "1", "--quiet", "--experiments", "vanishing,alg2"]
    run("reproduce", "--model", work["model"], *opts, "--out", str(tmp_path / "one"))
    launch(mpirun, 2, "reproduce", "--model", work["model"], *opts, "--out", str(tmp_path / "np2"))
    one = json.load(open(tmp_path / "one" / "results.json"))
    two = json.load(open(tmp_path / "np2" / "results.json"))
    assert one["manifest"]["windows"]["count"] >= 2
    assert two["manifest"]["windows"]["count"] == one["manifest"]["windows"]["count"]
    close_json(two, one)


GL_OPTS = ["--lengths", "32,64", "--windows", "3", "--k", "2,8", "--rules", "topk-log:2",
           "--normalizers", "sparsemax", "--monitor-n", "4", "--threads", "1", "--quiet"]


@pytest.mark.parametrize("n", [2, 3])
def test_guidelines_equals_one_process(work, mpirun, n, tmp_path):
    """`attnlim guidelines` over n ranks (each L's 15 (variant, window) forwards and its
    monitoring forwards round robin, uneven at 2 and 3 ranks) against one plain process: guidelines.json equal to 1e-12
    but for timings / resume counts, the CSVs and every partial result the same bytes; then
    --resume under MPI reuses every (L, variant)."""
    one = work["dir"] / "gl_one"
    if not one.exists():
        run("guidelines", "--model", work["model"], *GL_OPTS, "--out", str(one))
    out = tmp_path / f"gl{n}"
    launch(mpirun, n, "guidelines", "--model", work["model"], *GL_OPTS, "--out", str(out))
    a, b = json.load(open(out / "guidelines.json")), json.load(open(one / "guidelines.json"))
    _close_json(a, b, skip=RUN_KEYS + ("manifest.timings_s", "manifest.parallel"))
    per = a["manifest"]["parallel"]["forwards_per_rank"]  # every rank did its share
    assert len(per) == n and sum(per) == b["manifest"]["parallel"]["forwards_per_rank"][0], per
    assert max(per) - min(per) <= 2 and min(per) > 0, per
    assert a["monitoring"]["lengths"] == [32, 64] and len(a["monitoring"]["variants"]) >= 4
    for f in ("guidelines.csv", "monitoring.csv"):
        assert (out / f).read_bytes() == (one / f).read_bytes(), f
    pa = sorted(p.relative_to(out) for p in out.glob("partial/*/*.json"))
    assert pa == sorted(p.relative_to(one) for p in one.glob("partial/*/*.json")) and len(pa) == 10
    for p in pa:
        assert (out / p).read_bytes() == (one / p).read_bytes(), p
    r = launch(mpirun, n, "guidelines", "--model", work["model"], *GL_OPTS, "--out", str(out),
               "--resume")
    again = json.load(open(out / "guidelines.json"))
    assert again["manifest"]["resume"] == {"requested": True, "reused": 10, "computed": 0}, r.stderr
    for res in (again, b):  # each variant's "reused" flag differs by design
        for e in res["lengths"]:
            for v in e["variants"]:
                v.pop("reused")
    _close_json(again, b, skip=RUN_KEYS + ("manifest.timings_s", "manifest.parallel"))
