"""The internals (al__*) that some reference tests call: libattnlim.so exports only the public
API, so they come from the test-only libattnlim_internal.so ($ATTNLIM_INTERNAL_LIB, the same
objects with every symbol; CMakeLists.txt)."""
import ctypes
import os

_LIB = None


def attach(L, *names):
    """Sets L.<name> to the internal library's function of that name, for each name; returns L."""
    global _LIB
    if _LIB is None:
        path = os.environ.get("ATTNLIM_INTERNAL_LIB")
        assert path and os.path.exists(path), "ATTNLIM_INTERNAL_LIB is not set (run through ctest)"
        _LIB = ctypes.CDLL(path)
    for n in names:
        setattr(L, n, getattr(_LIB, n))
    return L
