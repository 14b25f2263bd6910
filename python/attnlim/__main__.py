"""`python -m attnlim ARGS` and the console script `attnlim ARGS`: the attnlim CLI.

Runs the CLI binary installed inside the package (attnlim/_native/bin/attnlim, built with the
wheel), or, from a source checkout, build/attnlim; $ATTNLIM_BIN overrides both. The process is
replaced by the CLI (its exit status and signals are the CLI's)."""
import os
import sys
from typing import List, Optional

_HERE = os.path.dirname(os.path.abspath(__file__))


def cli_path() -> Optional[str]:
    """The path of the attnlim CLI binary, or None when there is none."""
    cands = [os.environ.get("ATTNLIM_BIN", ""), os.path.join(_HERE, "_native", "bin", "attnlim"),
             os.path.join(_HERE, "..", "..", "build", "attnlim")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Replaces this process with the CLI run with argv (default sys.argv[1:])."""
    args = sys.argv[1:] if argv is None else list(argv)
    exe = cli_path()
    if exe is None:
        sys.stderr.write("attnlim: the CLI binary is not installed with this package (reinstall it: "
                         "pip install .) and there is no build/attnlim beside it\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
