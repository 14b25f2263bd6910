"""The malformed-input corpus (tests/bad): every `fail` case exits non-zero (not by a signal)
with a message naming the input and the fault, and leaves nothing half-written behind; every
`ok` case exits 0 with a warning naming the input and the fault (tests/bad/cases.tsv)."""
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys

import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN", os.path.join(SRC, "build", "attnlim"))
BAD = os.path.join(SRC, "tests", "bad")
INPUTS = os.path.join(BAD, "inputs")
STATUSES = ("ok", "fail", "fail:fsize")


def read_cases():
    """[(name, command, status, needle, must_name)] of cases.tsv, each row checked."""
    rows = []
    with open(os.path.join(BAD, "cases.tsv")) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            assert len(cols) == 5, "cases.tsv line %d: %d columns, expected 5" % (n, len(cols))
            name, cmd, status, needle, must_name = cols
            assert status in STATUSES, "cases.tsv line %d: status %r" % (n, status)
            assert needle and must_name, "cases.tsv line %d: empty message or name" % n
            rows.append((name, cmd, status, needle, must_name))
    return rows


def load_cases():
    return [pytest.param(c, s, nd, mn, id=name) for name, c, s, nd, mn in read_cases()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "2", "--embd", "16", "--ctx", "64",
                    "--vocab", "50257", "--seed", "5", "--out", str(d)], check=True, capture_output=True)
    return str(d)


def input_files(root):
    return sorted(os.path.relpath(os.path.join(r, f), root) for r, _, fs in os.walk(root) for f in fs)


def test_corpus_is_large_enough():
    rows = read_cases()
    assert len(rows) >= 95
    assert len({r[0] for r in rows}) == len(rows), "case names repeat"
    assert len(input_files(INPUTS)) >= 100


def test_corpus_is_what_the_generator_writes(tmp_path):
    # the committed inputs are exactly what make_bad.py writes (so each is explained there),
    # no more and no fewer
    subprocess.run([sys.executable, os.path.join(BAD, "make_bad.py"), str(tmp_path)], check=True,
                   capture_output=True)
    assert input_files(tmp_path) == input_files(INPUTS)
    for rel in input_files(tmp_path):
        with open(os.path.join(tmp_path, rel), "rb") as a, open(os.path.join(INPUTS, rel), "rb") as b:
            assert a.read() == b.read(), rel


def test_every_input_has_a_case():
    # an input file is read by some case: named itself, or its directory (a model or vocabulary)
    cmds = " ".join(r[1] for r in read_cases())
    orphans = [rel for rel in input_files(INPUTS)
               if "{in}/" + rel not in cmds and "{in}/" + os.path.dirname(rel) + " " not in cmds + " "]
    assert not orphans, "inputs without a case: %s" % orphans


class Hostile:
    """The hostile file system a case names, built in tmp_path (FIFOs, links and directories
    cannot live in the committed corpus):
      {fifo:ROOT/DIR/FILE}  a copy of ROOT/DIR (ROOT: in or tiny) with FILE replaced by a FIFO;
                            stands for the copy of DIR (a reader that blocks on it hangs the case)
      {outlink}             a symbolic link to an empty directory (it must stay empty)
      {filelink}            a symbolic link to a file holding "precious" (it must keep it)
      {planted}             a directory holding notes.txt that no attnlim command writes (it
                            must be left exactly so)"""

    def __init__(self, tmp_path, tiny):
        self.tmp, self.tiny, self.made = tmp_path, tiny, {}

    def fifo(self, m):
        root, rel = m.group(1), m.group(2)
        src = os.path.join(INPUTS if root == "in" else self.tiny, os.path.dirname(rel))
        dst = self.tmp / ("fifo_" + str(len(self.made)))
        shutil.copytree(src, dst)
        target = dst / os.path.basename(rel)
        if target.exists():
            target.unlink()
        os.mkfifo(target)
        self.made[m.group(0)] = str(dst)
        return str(dst)

    def subst(self, text, base):
        for key, val in self.made.items():
            text = text.replace(key, val)
        text = re.sub(r"\{fifo:(in|tiny)/([^}]*)\}", self.fifo, text)
        for name in ("outlink", "filelink", "planted"):
            if "{" + name + "}" in text and name not in base:
                base[name] = getattr(self, "make_" + name)()
        return text.format(**base)

    def make_outlink(self):
        (self.tmp / "linked_dir").mkdir()
        os.symlink(self.tmp / "linked_dir", self.tmp / "outlink")
        return str(self.tmp / "outlink")

    def make_filelink(self):
        (self.tmp / "victim.txt").write_text("precious")
        os.symlink(self.tmp / "victim.txt", self.tmp / "filelink")
        return str(self.tmp / "filelink")

    def make_planted(self):
        (self.tmp / "planted").mkdir()
        (self.tmp / "planted" / "notes.txt").write_text("mine")
        return str(self.tmp / "planted")

    def check_untouched(self, base):
        if "outlink" in base:
            assert os.path.islink(base["outlink"]) and os.listdir(self.tmp / "linked_dir") == []
        if "filelink" in base:
            assert os.path.islink(base["filelink"])
            assert (self.tmp / "victim.txt").read_text() == "precious"
        if "planted" in base:
            assert os.listdir(base["planted"]) == ["notes.txt"]
            assert (self.tmp / "planted" / "notes.txt").read_text() == "mine"
        leftovers = [f for f in os.listdir(self.tmp) if f.startswith(".") and ".tmp" in f]
        assert not leftovers, "temporaries left: %s" % leftovers


@pytest.mark.parametrize("cmd,status,needle,must_name", load_cases())
def test_bad_input(cmd, status, needle, must_name, tiny, tmp_path):
    out = tmp_path / "out"
    subst = {"in": INPUTS, "tiny": tiny, "out": str(out)}
    hostile = Hostile(tmp_path, tiny)
    argv = [hostile.subst(a, subst) for a in shlex.split(cmd)]
    needle = hostile.subst(needle, subst)
    must_name = hostile.subst(must_name, subst)
    pre = None
    if status == "fail:fsize":
        limit = 10_000  # a full disk: files may grow to 10 kB only

        def pre():  # the signal disposition stays the default: attnlim must ignore SIGXFSZ
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    env = dict(os.environ, ATTNLIM_NO_DOWNLOAD="1")
    r = subprocess.run([BIN] + argv, capture_output=True, text=True, timeout=60, preexec_fn=pre,
                       cwd=str(tmp_path), env=env, errors="replace")
    if status == "ok":
        assert r.returncode == 0, "exit %d\n%s" % (r.returncode, r.stderr)
    else:
        assert r.returncode > 0, "exit %d (a signal?)\n%s" % (r.returncode, r.stderr)
        assert r.returncode not in (134, 139)
    # the message (or the warning of an ok case) names the fault and, on the same line, the
    # input file, the model, the corpus or the output it could not write
    lines = [ln for ln in r.stderr.splitlines() if needle in ln]
    assert lines, "no line of stderr has %r:\n%s" % (needle, r.stderr)
    assert any(must_name in ln for ln in lines), "the message does not name %r:\n%s" % (must_name, r.stderr)
    # a failure leaves nothing half-written: no output dir, or one without any file
    if status != "ok" and out.exists():
        left = [os.path.join(r_, f) for r_, _, fs in os.walk(out) for f in fs]
        assert not left, "left behind: %s" % left
    if status != "ok":
        hostile.check_untouched(subst)
