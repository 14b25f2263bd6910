"""The installed tree: `cmake --install` into a temporary prefix, the prefix then moved elsewhere
(so nothing may point at the configure-time or the install-time prefix), and a tiny consumer
built and run against it through pkg-config (attnlim.pc) and through find_package(attnlim)
(attnlim::attnlim, attnlim::attnlim_shared, attnlim::attnlim_static). The consumer checks
softmax([0, log 3]) = [1/4, 3/4] and the version string."""
import os
import re
import shutil
import subprocess

import pytest

CONSUMER = r"""
#include <attnlim.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    al_norm nm = al_norm_default(AL_NORM_SOFTMAX);
    double z[2] = {0.0, log(3.0)}, p[2];
    al_error err;
    if (al_norm_forward(&nm, z, 2, p, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (fabs(p[0] - 0.25) > 1e-15 || fabs(p[1] - 0.75) > 1e-15) return 2;
    printf("attnlim %s ok\n", al_version());
    return 0;
}
"""


def _env(name):
    v = os.environ.get(name)
    if not v or not os.path.exists(v):
        pytest.fail("%s is not set to an existing path (run through ctest)" % name)
    return v


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
    return r


def _cache(build, key):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"%s:[A-Z]+=(.*)$" % re.escape(key), line.strip())
            if m:
                return m.group(1)
    return ""


@pytest.fixture(scope="module")
def moved_prefix(tmp_path_factory):
    build = _env("ATTNLIM_BUILD_DIR")
    base = tmp_path_factory.mktemp("install")
    first = base / "first"
    _run(["cmake", "--install", build, "--prefix", str(first)])
    moved = base / "elsewhere" / "moved"
    moved.parent.mkdir()
    os.rename(first, moved)  # the tree as a user would carry it: no path of `first` may remain
    return moved, build


def _libdir(prefix):
    for cand in ("lib", "lib64") + tuple(os.path.join("lib", d) for d in os.listdir(prefix / "lib")
                                         if (prefix / "lib" / d).is_dir()):
        if (prefix / cand / "pkgconfig" / "attnlim.pc").exists():
            return prefix / cand
    pytest.fail("no lib*/pkgconfig/attnlim.pc under %s" % prefix)


def _san_flags(build):
    return ["-fsanitize=address,undefined"] if _cache(build, "AL_SANITIZE").upper() in ("ON", "1", "TRUE") else []


def test_installed_files_do_not_name_the_install_prefix(moved_prefix):
    prefix, build = moved_prefix
    libdir = _libdir(prefix)
    pc = (libdir / "pkgconfig" / "attnlim.pc").read_text()
    assert "${pcfiledir}" in pc and str(prefix.parent.parent / "first") not in pc, pc
    assert _cache(build, "CMAKE_INSTALL_PREFIX") not in pc.split("Requires")[0], pc
    for f in (libdir / "cmake" / "attnlim").iterdir():
        assert str(prefix.parent.parent / "first") not in f.read_text(), f


def test_consumer_through_pkg_config(moved_prefix, tmp_path):
    prefix, build = moved_prefix
    libdir = _libdir(prefix)
    pkg = shutil.which("pkg-config") or shutil.which("pkgconf")
    assert pkg, "pkg-config is needed (the build itself uses it)"
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    flags = _run([pkg, "--cflags", "--libs", "attnlim"], env=env).stdout.split()
    assert [f for f in flags if f.startswith("-I") and os.path.normpath(f[2:]) == str(prefix / "include")], flags
    src = tmp_path / "consumer.c"
    src.write_text(CONSUMER)
    exe = tmp_path / "consumer"
    _run(["cc", "-std=c11", str(src), "-o", str(exe)] + flags + _san_flags(build)
         + ["-Wl,-rpath," + str(libdir), "-lm"], env=env)
    out = _run([str(exe)], env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).stdout
    assert out.startswith("attnlim ") and out.strip().endswith(" ok"), out


def test_consumer_through_find_package(moved_prefix, tmp_path):
    prefix, build = moved_prefix
    src = tmp_path / "src"
    src.mkdir()
    (src / "consumer.c").write_text(CONSUMER)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\n"
        "project(consumer LANGUAGES C)\n"
        "find_package(attnlim 0.1 REQUIRED)\n"
        "foreach(t attnlim attnlim_shared attnlim_static)\n"
        "  add_executable(use_${t} consumer.c)\n"
        "  target_link_libraries(use_${t} PRIVATE attnlim::${t} m)\n"
        "endforeach()\n")
    bld = tmp_path / "build"
    _run(["cmake", "-S", str(src), "-B", str(bld), "-DCMAKE_PREFIX_PATH=" + str(prefix),
          "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_C_COMPILER=" + (_cache(build, "CMAKE_C_COMPILER") or "cc")])
    _run(["cmake", "--build", str(bld), "-j2"])
    for t in ("attnlim", "attnlim_shared", "attnlim_static"):
        out = _run([str(bld / ("use_" + t))], env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).stdout
        assert out.strip().endswith(" ok"), (t, out)
