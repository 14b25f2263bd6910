"""Where data files are found: flag, $ATTNLIM_DATA, cache, ../shared/data, pinned download."""
import hashlib
import os
import shutil
import stat
import subprocess
import sys

import pytest

import attnlim

SHARED = os.path.join(os.environ.get("ATTNLIM_SOURCE_DIR", "."), "..", "shared", "data")
REL = "gpt2/vocab.bpe"


def sums():
    out = {}
    with open(os.path.join(SHARED, "SHA256SUMS")) as f:
        for line in f:
            h, p = line.split()
            out[p] = h
    return out


def run_find(env, explicit=None):
    code = ("import attnlim,sys\n"
            "try:\n print(attnlim.data_find(%r, %r))\n"
            "except attnlim.AttnlimError as e:\n print('ERR', e); sys.exit(3)\n") % (REL, explicit)
    full = dict(os.environ)
    for k in ("ATTNLIM_DATA", "ATTNLIM_CACHE", "ATTNLIM_SHARED_DIR", "ATTNLIM_NO_DOWNLOAD", "XDG_CACHE_HOME"):
        full.pop(k, None)
    full.update(env)
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)
    return r.returncode, r.stdout.strip()


@pytest.fixture
def dirs(tmp_path):
    d = {k: tmp_path / k for k in ("flag", "env", "cache", "shared", "empty", "bin")}
    for p in d.values():
        p.mkdir()
    for k in ("flag", "env", "shared"):
        (d[k] / "gpt2").mkdir()
        shutil.copy(os.path.join(SHARED, REL), d[k] / REL)
    (d["cache"] / "data" / "gpt2").mkdir(parents=True)
    shutil.copy(os.path.join(SHARED, REL), d["cache"] / "data" / REL)
    return d


def test_pinned_hash_matches_shared_sums():
    want = sums()[REL]
    assert hashlib.sha256(open(os.path.join(SHARED, REL), "rb").read()).hexdigest() == want


def test_order(dirs):
    base = {"ATTNLIM_CACHE": str(dirs["cache"]), "ATTNLIM_SHARED_DIR": str(dirs["shared"]),
            "ATTNLIM_NO_DOWNLOAD": "1"}
    rc, out = run_find(dict(base, ATTNLIM_DATA=str(dirs["env"])), explicit=str(dirs["flag"]))
    assert rc == 0 and out == str(dirs["flag"] / REL)
    rc, out = run_find(dict(base, ATTNLIM_DATA=str(dirs["env"])))
    assert rc == 0 and out == str(dirs["env"] / REL)
    rc, out = run_find(base)
    assert rc == 0 and out == str(dirs["cache"] / "data" / REL)
    rc, out = run_find(dict(base, ATTNLIM_CACHE=str(dirs["empty"])))
    assert rc == 0 and out == str(dirs["shared"] / REL)
    rc, out = run_find(dict(base, ATTNLIM_CACHE=str(dirs["empty"]), ATTNLIM_SHARED_DIR=str(dirs["empty"])))
    assert rc == 3 and REL in out and "not found" in out


def test_wrong_hash_is_named(dirs):
    p = dirs["flag"] / REL
    os.chmod(p, stat.S_IWUSR | stat.S_IRUSR)
    with open(p, "ab") as f:
        f.write(b"x")
    rc, out = run_find({"ATTNLIM_NO_DOWNLOAD": "1"}, explicit=str(p))
    assert rc == 3 and str(p) in out and "SHA-256" in out


def test_download_checks_the_pin(dirs):
    # A stand-in curl on PATH serves the file; the download lands in the cache only when its
    # hash matches the pin, and a corrupted download is refused.
    fake = dirs["bin"] / "curl"
    fake.write_text("#!/bin/sh\nwhile [ $# -gt 1 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
                    "cp \"$SERVE\" \"$out\"\n")
    fake.chmod(0o755)
    env = {"ATTNLIM_CACHE": str(dirs["empty"]), "ATTNLIM_SHARED_DIR": str(dirs["empty"] / "none"),
           "PATH": str(dirs["bin"]) + os.pathsep + os.environ["PATH"], "SERVE": os.path.join(SHARED, REL)}
    rc, out = run_find(env)
    assert rc == 0 and out == str(dirs["empty"] / "data" / REL)
    assert hashlib.sha256(open(out, "rb").read()).hexdigest() == sums()[REL]
    bad = dirs["bin"] / "bad.bpe"
    bad.write_bytes(b"#version: 0.2\nnot the real file\n")
    env2 = dict(env, ATTNLIM_CACHE=str(dirs["cache"] / "fresh"), SERVE=str(bad))
    rc, out = run_find(env2)
    assert rc == 3 and "SHA-256" in out
    assert not os.path.exists(dirs["cache"] / "fresh" / "data" / REL)
