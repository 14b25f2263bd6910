"""close_json: two results.json trees equal, numbers to 1e-12, some keys skipped (shared by the
reproduce and MPI tests, which compare a run against another run of the same job)."""

RUN_KEYS = ("manifest.timings", "manifest.started", "manifest.finished", "manifest.resume")


def close_json(a, b, path="results.json", skip=RUN_KEYS):
    """a == b, numbers to 1e-12 (relative or absolute), except the keys in skip (paths below
    results.json, dotted)."""
    if path.split("results.json.", 1)[-1] in skip:
        return
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            close_json(a[k], b[k], f"{path}.{k}", skip)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths"
        for i, (x, y) in enumerate(zip(a, b)):
            close_json(x, y, f"{path}[{i}]", skip)
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        assert isinstance(b, (int, float)) and not isinstance(b, bool), f"{path}: {a!r} vs {b!r}"
        assert abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b)), f"{path}: {a!r} vs {b!r}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"
