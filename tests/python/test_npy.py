"""NPY reading and writing against numpy's own implementation (np.lib.format)."""
import os

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
    # <= 8 dims, so write v2 explicitly with a long shape tuple that still parses
    x = np.zeros((1,) * 8, dtype=np.float64)
    p = tmp_path / "z.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))
    assert attnlim.npy_read(p).shape == (1,) * 8




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
