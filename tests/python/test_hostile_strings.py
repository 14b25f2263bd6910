"""A model name full of <script>, Markdown, ANSI escape sequences, a C1 CSI and invalid UTF-8
(from config.json's _name_or_path) driven through every output that shows it (issue 12, class 6):
every JSON file and --json print loads with Python's json module, the HTML has no live tag,
the Markdown no raw HTML, link or table break, SVG metadata parses as XML, and no byte of a
control sequence reaches stdout or stderr."""
import glob
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET

import pytest

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("run through ctest (ATTNLIM_BIN unset)")

# raw bytes as they sit in config.json: ESC as the JSON escape \u001b (the JSON itself stays
# parseable), CSI U+009B and the invalid bytes 0xff 0xfe raw
HOSTILE = (b'<script>alert(1)</script> **bold** [x](javascript:alert(1)) | cell | '
           b'`code` # \\u001b[31mRED\\u001b[0m \\u001b]0;title\\u0007 \xc2\x9b2J \xff\xfe end')
CONTROL_BYTES = [b"\x1b", b"\x07", b"\xc2\x9b", b"\xff", b"\xfe"]


def run(*args, check=0):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, timeout=600,
                       env=dict(os.environ, ATTNLIM_NO_DOWNLOAD="1"))
    assert p.returncode == check, "%s: exit %d\n%s" % (args, p.returncode, p.stderr.decode(errors="replace"))
    for stream in (p.stdout, p.stderr):
        for b in CONTROL_BYTES:
            assert b not in stream, "%r reached the terminal in %s:\n%r" % (b, args[0], stream[:2000])
    return p


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile") / "model"
    run("make-model", "--layers", 2, "--heads", 2, "--embd", 16, "--ctx", 64, "--vocab", 50257,
        "--seed", 3, "--out", d)
    cfg = (d / "config.json").read_bytes()
    assert cfg.rstrip().endswith(b"}")
    cfg = cfg.rstrip()[:-1].rstrip() + b',\n  "_name_or_path": "' + HOSTILE + b'"\n}\n'
    (d / "config.json").write_bytes(cfg)
    return d


def check_json_file(path):
    with open(path, encoding="utf-8") as f:  # strict UTF-8, as Python reads JSON
        return json.load(f)


def check_html(text):
    # the page may hold its own scripts (the explorer); the model's never runs
    assert "<script>alert(1)" not in text and "alert(1)</script>" not in text
    assert 'href="javascript' not in text
    assert "&lt;script&gt;" in text
    assert "\x1b" not in text and "\ufffd" in text


def check_md(text):
    assert not re.search(r"(?<!\\)<script", text) and not re.search(r"(?<!\\)\]\(javascript", text)
    assert "\\<script\\>" in text and "\\| cell \\|" in text
    assert "\x1b" not in text


def test_info(model):
    p = run("info", "--no-hash", "--model", model)
    assert b"script" in p.stdout  # the name is shown, made inert
    j = json.loads(run("info", "--no-hash", "--json", "--model", model).stdout.decode("utf-8"))
    assert "<script>" in json.dumps(j, ensure_ascii=False)


def test_capture_manifest(model, tmp_path):
    p = run("capture", "--model", model, "--corpus", "war-and-peace", "--length", 16, "--json",
            "--out", tmp_path / "cap")
    json.loads(p.stdout.decode("utf-8"))
    man = check_json_file(tmp_path / "cap" / "manifest.json")
    assert "<script>alert(1)</script>" in json.dumps(man, ensure_ascii=False)


def test_reproduce_outputs(model, tmp_path):
    out = tmp_path / "rep"
    run("reproduce", "--model", model, "--quick", "--quiet", "--out", out)
    names = [os.path.relpath(f, out) for f in glob.glob(str(out / "**" / "*"), recursive=True)]
    jsons = [f for f in names if f.endswith(".json")]
    assert "results.json" in jsons
    for f in jsons:
        check_json_file(out / f)
    res = check_json_file(out / "results.json")
    assert "<script>" in json.dumps(res, ensure_ascii=False)
    check_html((out / "report.html").read_text(encoding="utf-8"))
    check_md((out / "report.md").read_text(encoding="utf-8"))
    for svg in glob.glob(str(out / "*.svg")):
        ET.parse(svg)  # well-formed XML, labels escaped
    assert glob.glob(str(out / "*.png"))


def test_diagnose_outputs(model, tmp_path):
    out = tmp_path / "diag"
    p = run("diagnose", "--model", model, "--length", 16, "--out", out)
    for f in glob.glob(str(out / "*.json")):
        check_json_file(f)
    md = (out / "diagnose.md").read_text(encoding="utf-8")
    check_md(md)


def test_error_messages_are_inert(model, tmp_path):
    bad = tmp_path / ("x\x1b[2J\x9b" + "y")
    p = run("normalize", "--method", "softmax", "--input", bad, check=1)
    assert b"\\x1b[2J" in p.stderr
