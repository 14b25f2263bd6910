"""The Python package as a user installs it: the sdist that `python -m build` makes from this
checkout is installed with pip into a fresh venv (Debian's python with its numpy, nothing of
the build tree, no ATTNLIM_* variable, no PYTHONPATH), which compiles libattnlim and the CLI
with the project's CMake (scikit-build-core) into the wheel. Then, from another directory:
`import attnlim` loads the library inside the package, the version is the C library's
(CMakeLists.txt), the console script `attnlim` and `python -m attnlim` run the bundled CLI,
every code block of docs/python.md runs against the installed package, and the bundled
libattnlim.so exports only the public `al_` API (nm -D --defined-only).

The build dependencies come from tests/requirements.txt's pins: `build` and scikit-build-core
are in the test venv (scripts/setup.sh); the fresh venv gets scikit-build-core from PyPI (pip's
cache) and builds with --no-build-isolation --no-index, so only that one pinned package is
fetched."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

SRC = os.path.abspath(os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))

# variables of the test environment that must not reach the fresh venv (they would point the
# package at the build tree, or preload the sanitizers into pip, cmake and the compiler)
_SCRUB = ("ATTNLIM_LIB", "ATTNLIM_BIN", "ATTNLIM_SOURCE_DIR", "ATTNLIM_BUILD_DIR", "PYTHONPATH",
          "LD_PRELOAD", "LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS",
          "VIRTUAL_ENV", "PYTHONHOME")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(extra)
    return env


def run(cmd, timeout=600, **kw):
    kw.setdefault("env", clean_env())
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, "%s: exit %d\n%s\n%s" % (cmd, r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    return r


def pin(name):
    for line in open(os.path.join(SRC, "tests", "requirements.txt")):
        m = re.match(r"\s*%s\s*==\s*([^\s#]+)" % re.escape(name), line)
        if m:
            return "%s==%s" % (name, m.group(1))
    pytest.fail("tests/requirements.txt pins no %s" % name)


def shared_data():
    for d in (os.environ.get("ATTNLIM_DATA"), os.path.join(SRC, "..", "shared", "data")):
        if d and os.path.isfile(os.path.join(d, "gpt2", "encoder.json")):
            return os.path.abspath(d)
    pytest.fail("the shared data (gpt2/, war_and_peace/) is not found: set ATTNLIM_DATA")


def c_version():
    cm = open(os.path.join(SRC, "CMakeLists.txt")).read()
    return re.search(r"project\(attnlim\s+VERSION\s+([0-9.]+)", cm).group(1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, site-packages/attnlim, pip's log of the build)."""
    base = tmp_path_factory.mktemp("package")
    dist = base / "dist"
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", dist, SRC], cwd=base)
    sdists = sorted(dist.glob("attnlim-*.tar.gz"))
    assert len(sdists) == 1, sdists
    listing = run(["tar", "tzf", sdists[0]]).stdout.split()
    top = "attnlim-%s/" % c_version()
    for need in ("CMakeLists.txt", "pyproject.toml", "include/attnlim.h", "src/base/", "tools/attnlim.c",
                 "cmake/attnlim.pc.in", "data/gpt2_124M_tensor_sha256.tsv", "python/attnlim/__init__.py",
                 "python/attnlim/py.typed", "docs/python.md"):
        assert any(f.startswith(top + need) for f in listing), "the sdist lacks %s" % need
    assert not [f for f in listing if "/build/" in f or f.endswith((".o", ".so", ".pyc"))]
    venv = base / "venv"
    # Debian's python (what the test venv is made from) and its numpy
    run([os.path.join(sys.base_prefix, "bin", "python3"), "-m", "venv", "--system-site-packages", venv])
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    run(pip + ["install", "-q", pin("scikit-build-core")], timeout=300)
    build = base / "wheel-build"  # kept (build-dir) to show how the wheel was configured
    run(pip + ["install", "-q", "--no-build-isolation", "--no-index", "--config-settings=build-dir=%s" % build,
               sdists[0]], cwd=base, timeout=900)
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"]).stdout.strip()
    return py, os.path.join(site, "attnlim"), build


def test_import_from_elsewhere_loads_the_bundled_library(installed, tmp_path):
    py, pkg, _ = installed
    r = run([py, "-c", "import attnlim, importlib.metadata as m, json; print(json.dumps([attnlim.__file__, "
             "attnlim.lib._name, attnlim.version(), m.version('attnlim'), list(attnlim.normalize([0.0, 0.0]))]))"],
            cwd=tmp_path)
    f, libpath, v, dist_v, p = json.loads(r.stdout)
    assert os.path.dirname(f) == pkg
    assert libpath == os.path.join(pkg, "_native", "lib", "libattnlim.so")
    assert v == dist_v == c_version()
    assert p == [0.5, 0.5]
    for f in ("py.typed", "_native/bin/attnlim", "_native/share/attnlim/gpt2_124M_tensor_sha256.tsv"):
        assert os.path.isfile(os.path.join(pkg, f)), f


def test_the_wheel_is_portable(installed):
    """Configured with the backend's defines: no -march=native, no tests, no benchmarks."""
    _, _, build = installed
    cache = (build / "CMakeCache.txt").read_text()
    for define in ("AL_NATIVE", "AL_BUILD_TESTS", "AL_BUILD_BENCH", "AL_MPI"):
        assert re.search(r"^%s:[A-Z]+=OFF$" % define, cache, re.M), define
    flags = [p for p in build.rglob("flags.make")] + [p for p in build.rglob("build.ninja")]
    assert flags, "no compile flags found under %s" % build
    assert not [p for p in flags if "-march" in p.read_text()]


def test_cli_entry_points(installed, tmp_path):
    py, pkg, _ = installed
    script = os.path.join(os.path.dirname(py), "attnlim")
    for cmd in ([script], [py, "-m", "attnlim"]):
        r = subprocess.run(cmd + ["ks"], capture_output=True, text=True, cwd=tmp_path, env=clean_env(),
                           timeout=60)
        assert r.returncode == 2 and "attnlim ks: expected two samples" in r.stderr, r.stderr  # the CLI's
        r = run(cmd + ["normalize", "--method", "softmax", "--json"], input="0 0 0 0\n", cwd=tmp_path)
        assert json.loads(r.stdout) == {"method": "softmax", "weights": [0.25] * 4}
        r = run(cmd + ["--help"], cwd=tmp_path)
        assert ("attnlim %s" % c_version()) in r.stdout


DOC_RUNNER = textwrap.dedent("""
    import re, subprocess, sys
    doc = open(sys.argv[1]).read()
    for block in re.findall(r"```sh\\n(.*?)```", doc, re.S):
        for line in block.splitlines():
            if line.startswith("attnlim make-model"):
                subprocess.run([sys.argv[2]] + line.split()[1:], check=True)
    blocks = re.findall(r"```python\\n(.*?)```", doc, re.S)
    assert len(blocks) >= 5, len(blocks)
    g = {}
    for b in blocks:
        exec(compile(b, "docs/python.md", "exec"), g)
    import attnlim
    print("RAN", len(blocks), g["w1"].shape, g["info"]["n_layer"], attnlim.__file__)
""")


def test_docs_python_md_against_the_installed_package(installed, tmp_path):
    py, pkg, _ = installed
    runner = tmp_path / "run_docs.py"
    runner.write_text(DOC_RUNNER)
    work = tmp_path / "work"
    work.mkdir()
    script = os.path.join(os.path.dirname(py), "attnlim")
    r = run([py, runner, os.path.join(SRC, "docs", "python.md"), script], cwd=work,
            env=clean_env(ATTNLIM_DATA=shared_data()), timeout=600)
    last = r.stdout.strip().splitlines()[-1].split()
    assert last[0] == "RAN" and int(last[1]) >= 5, r.stdout
    assert "(1, 64, 64)" in r.stdout and last[-1] == os.path.join(pkg, "__init__.py")


def test_the_bundled_library_exports_only_the_public_api(installed):
    _, pkg, _ = installed
    lib = os.path.join(pkg, "_native", "lib", "libattnlim.so")
    out = run(["nm", "-D", "--defined-only", lib]).stdout.split("\n")
    names = [line.split()[-1] for line in out if line.strip()]
    assert len(names) > 50, names
    bad = [n for n in names if not re.match(r"al_[a-z0-9]", n)]
    assert not bad, "exported beyond the public API: %s" % bad[:20]
    header = open(os.path.join(SRC, "include", "attnlim.h")).read()
    undeclared = [n for n in names if not re.search(r"\b%s\s*\(" % re.escape(n), header)]
    assert not undeclared, "exported but not declared in attnlim.h: %s" % undeclared
