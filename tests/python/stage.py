"""Which stage of scripts/test.sh a test runs in, and what the sanitizer stage shortens.

Stage 2 runs the whole suite again on the ASan + UBSan build (CMake preloads the sanitizer
runtimes into the Python tests: LD_PRELOAD holds libasan), where our C code runs several times
slower. The comparisons of our tokenizers with HF `tokenizers` on all of War and Peace are the
longest tests there; in stage 2 they run on the book's first BOOK_SANITIZED characters (cut at a
line end), which still reach every code path the whole book does (the sanitizers look for memory
and UB faults, not for rare merges). Stage 1 (the release build) always runs them on the whole
book, with the same assertions.

HF reference artefacts that several tests rebuild identically (tokenizers trained from the same
text) are kept in the build directory for the rest of the run: cached(key, make) below."""
import hashlib
import os
import tempfile

SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")
BOOK_SANITIZED = 400000  # characters of War and Peace compared in stage 2 (the book: 3.2 M)


def book(text):
    """The text a whole-book comparison runs on: all of it (stage 1), or its first
    BOOK_SANITIZED characters up to a line end (stage 2)."""
    if not SANITIZED or len(text) <= BOOK_SANITIZED:
        return text
    nl = "\n" if isinstance(text, str) else b"\n"
    return text[: text.rfind(nl, 0, BOOK_SANITIZED) + 1]


def at_least(n, text, full_length):
    """A lower bound n stated for the whole book, scaled to the part of it that runs."""
    return n if len(text) >= full_length else n * len(text) // full_length


def cache_dir():
    d = os.path.join(os.environ.get("ATTNLIM_BUILD_DIR") or tempfile.gettempdir(), "test-cache")
    os.makedirs(d, exist_ok=True)
    return d


def cached(parts, make):
    """The bytes make() returns, kept in the build directory under the SHA-256 of parts (every
    input that decides them, as strings or bytes): made once per build directory, then read.
    Written atomically, so tests running in parallel never read half a file."""
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        h.update(hashlib.sha256(b).digest())
    path = os.path.join(cache_dir(), h.hexdigest())
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    data = make()
    fd, tmp = tempfile.mkstemp(dir=cache_dir())
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data
