"""reproduce --resume reuses a saved (window, L) job only when its arrays are the ones saved
(issue 12, class 10): an array poisoned with NaN in place, or cut to another shape, is
recomputed, the message says which, and the results equal a fresh run's."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("run through ctest (ATTNLIM_BIN unset)")


def run(*args, check=0):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == check, "%s: exit %d\n%s" % (args, p.returncode, p.stderr)
    return p


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    run("make-model", "--layers", 2, "--heads", 2, "--embd", 16, "--ctx", 64, "--vocab", 50257,
        "--seed", 4, "--out", d / "m")
    run("reproduce", "--model", d / "m", "--quick", "--quiet", "--experiments", "alg1,alg2",
        "--out", d / "ref")
    return d


def results(out):
    r = json.load(open(os.path.join(out, "results.json")))
    r.pop("manifest", None)
    return r


@pytest.mark.parametrize("damage", ["nan_in_place", "other_shape"])
def test_damaged_partial_is_recomputed(fresh, tmp_path, damage):
    out = tmp_path / "out"
    shutil.copytree(fresh / "ref", out)
    jobs = sorted(os.listdir(out / "partial"))
    job = next(j for j in jobs if j.startswith("w0_L"))
    arr = sorted(f for f in os.listdir(out / "partial" / job) if f.endswith(".npy"))[0]
    path = out / "partial" / job / arr
    a = np.load(path)
    if damage == "nan_in_place":
        a.flat[0] = np.nan
    else:
        a = a[:, :-1] if a.shape[1] > 1 else a[:-1]
    np.save(path, a)
    r = run("reproduce", "--model", fresh / "m", "--quick", "--experiments", "alg1,alg2", "--resume",
            "--out", out)
    assert "not matching their checksum" in r.stderr and job in r.stderr, r.stderr
    assert "computed 1 of" in r.stderr, r.stderr
    assert results(out) == results(fresh / "ref")


def test_seed_recorded_exactly(fresh, tmp_path):
    """issue 12, class 9: a seed past 2^53 is written as the integer given, not a rounded double
    (and --seed -1 / 2^64 are refused: tests/bad seed_negative, seed_past_2_64)."""
    out = tmp_path / "s"
    run("reproduce", "--model", fresh / "m", "--quick", "--quiet", "--experiments", "alg1",
        "--lengths", "16", "--seed", "18446744073709551615", "--out", out)
    res = json.load(open(out / "results.json"))
    assert res["manifest"]["options"]["seed"] == 18446744073709551615
    # and in partial/run.json (what --resume compares), as the exact decimal string
    assert json.load(open(out / "partial" / "run.json"))["seed"] == "18446744073709551615"


ORDER = ["dtilde", "dmax", "E", "E_mc", "E_mc_se", "ns_ratio", "ns_lower", "ns_upper", "van_max",
         "van_entropy", "van_D", "alg5_fd", "alg5_spec"]  # al__ex_job_arrays (partial.c)


def plant(jd, array, index, value):
    """Writes value at index of the saved array in job directory jd and forges done.json's
    checksum to match (computed here with hashlib, independently of partial.c)."""
    import hashlib
    a = np.load(jd / (array + ".npy"))
    a[index] = value
    np.save(jd / (array + ".npy"), a)
    present = [n for n in ORDER if os.path.exists(jd / (n + ".npy"))]
    cat = "".join(hashlib.sha256(np.ascontiguousarray(np.load(jd / (n + ".npy")), "<f8").tobytes()).hexdigest()
                  for n in present)
    done = json.load(open(jd / "done.json"))
    done["arrays_sha256"] = hashlib.sha256(cat.encode()).hexdigest()
    (jd / "done.json").write_text(json.dumps(done))


def first_job(out, array):
    return next(j for j in sorted(os.listdir(out / "partial"))
                if j.startswith("w0_L") and os.path.exists(out / "partial" / j / (array + ".npy")))


# Inf anywhere; NaN in an entry the plan computes (NaN is also the "not computed" marker)
@pytest.mark.parametrize("array,value", [("E", np.inf), ("dtilde", -np.inf), ("dtilde", np.nan),
                                         ("E", np.nan)])
def test_nonfinite_partial_with_forged_checksum_is_recomputed(fresh, tmp_path, array, value):
    """issue 12, class 10: a saved array that is not finite where it must be is recomputed even
    when done.json's checksum was rewritten to match it (the checksum proves only that nothing
    changed since it was written). The checksum is recomputed here independently (hashlib)."""
    out = tmp_path / "out"
    shutil.copytree(fresh / "ref", out)
    job = first_job(out, array)
    plant(out / "partial" / job, array, (1, 0), value)  # head 1, the first N of the grid
    r = run("reproduce", "--model", fresh / "m", "--quick", "--experiments", "alg1,alg2", "--resume",
            "--out", out)
    assert "not finite where they must be" in r.stderr and job in r.stderr, r.stderr
    assert "computed 1 of" in r.stderr, r.stderr
    assert results(out) == results(fresh / "ref")


def test_nan_only_where_the_plan_computes_nothing(fresh, tmp_path):
    """issue 12, class 10: under --layers 1 the heads of layer 0 are not computed (NaN, the
    marker): a NaN there is reused, a NaN planted in a computed head of layer 1 is recomputed."""
    opts = ["--quick", "--quiet", "--experiments", "alg1,alg3", "--layers", "1"]
    ref = tmp_path / "ref"
    run("reproduce", "--model", fresh / "m", *opts, "--out", ref)
    job = first_job(ref, "dtilde")
    d = np.load(ref / "partial" / job / "dtilde.npy")  # [H = 2 layers x 2 heads, N grid]
    assert np.isnan(d[:2]).all() and np.isfinite(d[2:]).all(), d
    for head, recomputed in ((0, False), (3, True)):
        out = tmp_path / ("h%d" % head)
        shutil.copytree(ref, out)
        plant(out / "partial" / job, "E", (head, d.shape[1] - 1), np.nan)
        r = run("reproduce", "--model", fresh / "m", *opts[:1], *opts[2:], "--resume", "--out", out)
        assert ("not finite where they must be" in r.stderr) == recomputed, r.stderr
        assert (job in r.stderr) == recomputed, r.stderr
        assert results(out) == results(ref)


@pytest.fixture(scope="module")
def van_sens(fresh):
    """A run of the vanishing readings and Algorithm 5 (sensitivity) at one short length."""
    out = fresh / "vs"
    opts = ["--quick", "--experiments", "vanishing,alg5", "--lengths", "16", "--long-length", "16"]
    run("reproduce", "--model", fresh / "m", *opts, "--quiet", "--out", out)
    return out, opts


@pytest.mark.parametrize("array", ["van_max", "van_entropy", "van_D", "alg5_fd", "alg5_spec"])
def test_vanishing_and_sensitivity_must_be_finite(fresh, van_sens, tmp_path, array):
    """issue 12, class 10: the vanishing readings and Algorithm 5's arrays are computed for every
    analysed head: a NaN in one, with the checksum forged, is recomputed."""
    ref, opts = van_sens
    out = tmp_path / "out"
    shutil.copytree(ref, out)
    job = first_job(out, array)
    assert np.isfinite(np.load(out / "partial" / job / (array + ".npy"))).all()
    plant(out / "partial" / job, array, (0, 0), np.nan)
    r = run("reproduce", "--model", fresh / "m", *opts, "--resume", "--out", out)
    assert "not finite where they must be" in r.stderr and job in r.stderr, r.stderr
    assert results(out) == results(ref)


def test_dropped_grid_values_are_reported(fresh, tmp_path):
    """issue 12, class 9: given grid values that apply to no L are named on stderr and listed in
    results.json (options.grid_values_dropped), the rest run; an experiment of the default set
    with nothing to compute at the lengths is named too (options.experiments_empty)."""
    out = tmp_path / "g"
    r = run("reproduce", "--model", fresh / "m", "--quick", "--quiet", "--experiments", "alg2,alg4",
            "--lengths", "16,32", "--long-length", "32", "--top-n", "4,8,40,64", "--separability-n", "2,100",
            "--out", out)
    assert "--top-n: 2 values dropped (40, 64): N must be below L = 32" in r.stderr, r.stderr
    assert "--separability-n: 1 value dropped (100)" in r.stderr, r.stderr
    op = json.load(open(out / "results.json"))["manifest"]["options"]
    assert op["grid_values_dropped"] == {"top_n": [40, 64], "separability_n": [100]}
    assert op["top_n"] == [4, 8] and op["separability_n"] == [2] and op["experiments_empty"] == []
    out2 = tmp_path / "e"
    r = run("reproduce", "--model", fresh / "m", "--quick", "--quiet", "--lengths", "4", "--long-length", "4",
            "--out", out2)
    assert "experiment alg1 has nothing to compute at these lengths (the longest L = 4" in r.stderr, r.stderr
    op = json.load(open(out2 / "results.json"))["manifest"]["options"]
    assert op["experiments_empty"] == ["alg1"] and op["grid_values_dropped"] == {}
