"""NPY reading and writing against numpy's own implementation (np.lib.format); how the CLI
tells .npy from text (the name, the first byte, non-text bytes) and what it says about files
that are neither; empty arrays; ranks up to numpy's limit; text numbers against numpy."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import attnlim


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 3, 4), (1, 2, 1, 3, 2)])
def test_read_numpy_written(tmp_path, version, dtype, shape):
    rng = np.random.default_rng(hash((version, shape)) & 0xffff)
    x = rng.standard_normal(shape).astype(dtype)
    p = tmp_path / "x.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array(f, x, version=version)
    y = attnlim.npy_read(p)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 3, 4)])
def test_numpy_reads_ours(tmp_path, dtype, shape):
    x = np.asarray((np.arange(int(np.prod(shape))).reshape(shape) * 0.25 - 1).astype(dtype))
    p = tmp_path / "y.npy"
    attnlim.npy_write(p, x)
    y = np.load(p)
    assert y.dtype == x.dtype and y.shape == x.shape and np.array_equal(x, y)
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_large_header_written_by_numpy_v2(tmp_path):
    # numpy switches to a v2 header when the dict exceeds 65535 bytes: not possible with
    # <= 64 dims, so write v2 explicitly with a long shape tuple that still parses
    x = np.zeros((1,) * 8, dtype=np.float64)
    p = tmp_path / "z.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))
    assert attnlim.npy_read(p).shape == (1,) * 8


@pytest.mark.parametrize("ndim", [9, 16, 32])
def test_high_rank_written_by_numpy(tmp_path, ndim):
    """Ranks past the old cap of 8, up to numpy 1's limit of 32 (numpy 2: 64, the library's cap)."""
    shape = tuple(2 if i % 5 == 0 else 1 for i in range(ndim))
    x = np.random.default_rng(ndim).standard_normal(shape)
    p = tmp_path / "r.npy"
    np.save(p, x)
    y = attnlim.npy_read(p)
    assert y.shape == x.shape and np.array_equal(x, y)
    q = tmp_path / "back.npy"
    attnlim.npy_write(q, y)
    z = np.load(q)
    assert z.shape == x.shape and np.array_equal(x, z)


def _npy_bytes(shape_text, payload=b""):
    d = ("{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % shape_text).encode()
    pad = (64 - (10 + len(d) + 1) % 64) % 64
    h = d + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + payload


def test_rank_64_read_65_refused(tmp_path):
    """numpy 2 writes up to 64 dimensions (the header as its format writer emits it; numpy 1
    here cannot make such an array): the CLI reads one and refuses it only for its rank as
    logits; 65 dimensions are refused by the reader, by name."""
    p = tmp_path / "r64.npy"
    p.write_bytes(_npy_bytes("(" + "1, " * 63 + "3)", np.arange(3.0).tobytes()))
    _fails(_cli("normalize", "--input", p), "%s: expected a 1-D row or 2-D rows of logits, got 64 dimensions" % p)
    p = tmp_path / "r65.npy"
    p.write_bytes(_npy_bytes("(" + "1, " * 64 + "3)", np.arange(3.0).tobytes()))
    _fails(_cli("normalize", "--input", p), "%s: .npy array has more than 64 dimensions" % p)
    with pytest.raises(attnlim.AttnlimError, match="more than 64 dimensions"):
        attnlim.npy_read(p)




def test_rejects_unsupported_numpy_files(tmp_path):
    cases = {
        "int.npy": np.arange(4, dtype=np.int32),
        "big.npy": np.arange(4, dtype=">f8"),
        "fortran.npy": np.asfortranarray(np.ones((3, 2))),
        "half.npy": np.ones(3, dtype=np.float16),
        "complex.npy": np.ones(3, dtype=np.complex128),
    }
    for name, arr in cases.items():
        p = tmp_path / name
        np.save(p, arr)
        with pytest.raises(attnlim.AttnlimError) as e:
            attnlim.npy_read(p)
        assert name in str(e.value)


def test_parse_numbers_matches_numpy():
    text = "1, 2.5 -3e-2\n4 5 6\n"
    assert np.array_equal(attnlim.parse_numbers(text), np.loadtxt(text.replace(",", " ").splitlines()))
    with pytest.raises(attnlim.AttnlimError):
        attnlim.parse_numbers("1 2 nan")


def test_parse_numbers_refusals_name_line_and_field():
    cases = [("1 2\n3 0x10", "line 2, field 2: '0x10' is hexadecimal"),
             ("1,,2", "line 1, field 2: empty field"),
             (",1,2", "line 1, field 1: empty field"),
             ("1,2,", "line 1, field 3: empty field"),
             ("5 inf", "line 1, field 2: inf is not finite"),
             ("nan", "line 1, field 1: nan is not finite"),
             ("1 2e", "line 1, field 2: '2e' is not a number")]
    for text, msg in cases:
        with pytest.raises(attnlim.AttnlimError, match=msg.replace("(", r"\(")) as e:
            attnlim.parse_numbers(text, name="t.txt")
        assert "t.txt" in str(e.value)
    # what it reads, numpy reads the same way (comma or space separated decimals)
    text = "+1, .5 ,5. -2.5e+2\n1E-2,-0 3 1e-400\n"
    assert np.array_equal(attnlim.parse_numbers(text),
                          np.loadtxt(text.replace(",", " ").splitlines()))


# ---- the CLI: .npy or text ----------------------------------------------------------------

def _cli(*args, stdin=None):
    b = os.environ.get("ATTNLIM_BIN")
    if not b or not os.path.exists(b):
        pytest.fail("ATTNLIM_BIN is not set to an existing file (run through ctest)")
    return subprocess.run([b] + [str(a) for a in args], input=stdin, capture_output=True, timeout=60)


def _fails(r, *needles):
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err)
    assert r.stdout == b"", r.stdout
    for n in needles:
        assert str(n) in err, (n, err)


def test_cli_not_npy_files_named_by_magic(tmp_path):
    """A file that is neither .npy nor text (by its name ending in .npy, or by NUL/control bytes)
    is 'not a .npy file (bad magic)', with the bytes found; an empty file is 'empty file'."""
    good = tmp_path / "good.npy"
    np.save(good, np.array([1.0, 2.0, 3.0]))
    raw = good.read_bytes()
    npz = tmp_path / "a.npz"
    np.savez(npz, x=np.ones(3))
    cases = {
        "renamed.npy": (npz.read_bytes(), "it starts with 'PK\\x03\\x04"),
        "x.npy": (b"X" + raw[1:], "it starts with 'XNUMPY'"),
        "text.npy": (b"1 2 3\n", "it starts with '1 2 3\\x0a'"),
        "elf.bin": (b"\x7fELF\x02\x01\x01" + bytes(100), "it starts with '\\x7fELF\\x02\\x01'"),
        "data.dat": (b"1 2" + bytes(16), "it starts with '1 2\\x00\\x00\\x00'"),
    }
    elf = shutil.which("true")
    if elf:
        with open(elf, "rb") as f:
            head = f.read(4096)
        if head[:4] == b"\x7fELF":
            cases["true_copy"] = (head, "it starts with '\\x7fELF")
    for name, (data, words) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        for cmd in (["normalize", "--input", p], ["jacobian", "--input", p], ["ks", p, good]):
            _fails(_cli(*cmd), "%s: not a .npy file (bad magic)" % p, words)
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    _fails(_cli("normalize", "--input", empty), "%s: empty file" % empty)
    _fails(_cli("normalize", stdin=b""), "<stdin>: empty input")
    _fails(_cli("normalize", stdin=b" \n\n"), "<stdin>: no numbers in the input")
    # text is still text, also with a UTF-8 byte-order mark, and .npy by magic whatever the name
    r = _cli("normalize", "--json", stdin=b"\xef\xbb\xbf1 2\n")
    assert r.returncode == 0, r.stderr
    renamed = tmp_path / "logits.bin"
    renamed.write_bytes(raw)
    r = _cli("normalize", "--json", "--input", renamed)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3), (0, 0), (3, 0, 2)])
def test_cli_empty_arrays_are_errors_naming_the_file(tmp_path, shape):
    p = tmp_path / ("e%s.npy" % "x".join(map(str, shape)))
    np.save(p, np.zeros(shape))
    shown = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    for cmd in (["normalize", "--input", p], ["jacobian", "--input", p], ["ks", p, p]):
        _fails(_cli(*cmd), "%s: empty array (shape %s)" % (p, shown))


def test_cli_row_errors_name_the_file(tmp_path):
    """A failure on one row of the logits names the input file (and the row, for 2-D input)."""
    p = tmp_path / "rows.npy"
    np.save(p, np.array([[0.0, 1.0], [1e300, 1.0]]))
    _fails(_cli("normalize", "--method", "sa-softmax", "--temperature", "1e-300", "--input", p),
           "%s: row 1: sa-softmax: logit 0" % p)
    _fails(_cli("jacobian", "--method", "sa-softmax", "--temperature", "1e-300", stdin=b"1e300 1"),
           "<stdin>: sa-softmax: logit 0")


def test_cli_number_and_option_messages(tmp_path):
    _fails(_cli("normalize", stdin=b"0x10 1"), "<stdin>: line 1, field 1: '0x10' is hexadecimal")
    _fails(_cli("normalize", stdin=b"1 2\n1,,2"), "<stdin>: line 2, field 2: empty field")
    _fails(_cli("normalize", stdin=b",1,2"), "<stdin>: line 1, field 1: empty field")
    r = _cli("normalize", "--temperature", "0x10", stdin=b"1 2")
    assert r.returncode == 2 and b"'0x10' is hexadecimal" in r.stderr
    r = _cli("normalize", "--temperature", "nan", stdin=b"1 2")
    assert r.returncode == 2 and b"'nan' is not finite" in r.stderr
    w, x = tmp_path / "w.npy", tmp_path / "x.npy"
    np.save(w, np.array([0.5, 0.5]))
    np.save(x, np.ones((2, 3)))
    for lst, words in [("1-100000000", "--top-n: the list expands to more than 1000000 entries"),
                       ("1-600000,1-600000", "more than 1000000 entries (item 2"),
                       ("1,,2", "--top-n: item 2 is empty"), (",1", "--top-n: item 1 is empty"),
                       ("1,2,", "--top-n: item 3 is empty"), ("5-3", "the range 5-3 runs backwards"),
                       ("1,x", "--top-n: item 2, 'x', is not an integer"),
                       ("99999999999", "--top-n: item 1 is outside the int range")]:
        r = _cli("metrics", "--weights", w, "--vectors", x, "--top-n", lst)
        assert r.returncode == 2 and words.encode() in r.stderr, (lst, r.stderr)
    # the cap is on the total: ranges and items below it are accepted
    r = _cli("metrics", "--weights", w, "--vectors", x, "--top-n", "1-300,2,1-3", "--json")
    assert r.returncode == 0, r.stderr
