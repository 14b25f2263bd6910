"""The layers of src/ (docs/design.md) as a test:
- every `#include "..."` of src/ and tools/ points down or sideways within its own layer, never up;
  families (src/model/<family>/) include the model interface, never another family's headers,
  and the model interface never includes a family's;
- no cycle between layers (includes) nor between modules (object files, through the symbols
  each one defines and uses: nm of the build's objects);
- the CLI (tools/) uses the library through the public API (include/attnlim.h, `al_` names):
  the internal headers it includes and the `al__` functions its objects call are listed below
  as what is left to move behind the public API; that list may only shrink (a new internal use
  fails, and so does an entry that is no longer used: delete it)."""
import collections
import os
import re
import subprocess

import pytest

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("ATTNLIM_BUILD_DIR")

# rank of each layer: a file may include headers of its own layer or of a lower rank. report
# (figures, reports: the only cairo user), dist (the only MPI user) and fetch (pip, curl) know
# nothing above base; experiments is their client.
RANK = {"base": 0, "math": 1, "text": 1, "formats": 1, "report": 1, "dist": 1, "fetch": 1,
        "model": 2, "experiments": 3, "train": 3, "tools": 4}
FAMILIES = ("gpt2", "llama", "bert", "dump")

# What the CLI still reaches below the public API (shrink only; docs/design.md "The CLI"):
# nothing; the CLI is a client of include/attnlim.h alone.
TOOLS_INTERNAL_HEADERS: dict = {}
TOOLS_INTERNAL_CALLS: set = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel):
    """'src/model/gpt2/gpt2.c' -> 'model/gpt2'; 'src/base/npy.c' -> 'base'; tools -> 'tools'."""
    parts = rel.split("/")
    if parts[0] == "tools":
        return "tools"
    if parts[0] == "include":
        return "public"
    assert parts[0] == "src", rel
    if parts[1] == "model" and len(parts) > 3:
        return "model/" + parts[2]
    return parts[1]


def rank(layer):
    return RANK[layer.split("/")[0]]


def sources():
    out = []
    for top in ("src", "tools"):
        for d, _, files in os.walk(os.path.join(SRC, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(d, f), SRC))
    return sorted(out)


@pytest.fixture(scope="module")
def headers():
    """header name -> its path (headers are found by name: each name is unique)."""
    by_name = collections.defaultdict(list)
    for rel in sources() + ["include/attnlim.h"]:
        if rel.endswith(".h"):
            by_name[os.path.basename(rel)].append(rel)
    dup = {n: p for n, p in by_name.items() if len(p) > 1}
    assert not dup, f"two headers of one name (they are found by name): {dup}"
    return {n: p[0] for n, p in by_name.items()}


def includes(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def test_every_layer_is_known():
    layers = {layer_of(r) for r in sources()}
    unknown = {l for l in layers if l.split("/")[0] not in RANK}
    assert not unknown, f"folders of src/ with no layer in this test (add them to RANK): {unknown}"
    assert {"model/" + f for f in FAMILIES} <= layers


def test_readme_layout_names_every_folder():
    """README's "Layout" lists the real folders of src/ (and of src/model/: the families)."""
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        text = f.read()
    layout = text[text.index("## Layout"):]
    layout = layout[:layout.index("\n## ", 4)]
    named = set(re.findall(r"`([a-z0-9_]+)/`", layout))
    top = {d for d in os.listdir(os.path.join(SRC, "src")) if os.path.isdir(os.path.join(SRC, "src", d))}
    fam = {d for d in os.listdir(os.path.join(SRC, "src", "model"))
           if os.path.isdir(os.path.join(SRC, "src", "model", d))}
    missing = sorted((top | fam) - named)
    assert not missing, f"README's Layout does not name these folders of src/: {missing}"
    stale = sorted(named - top - fam - {"src", "tools", "tests", "bad", "fuzz", "bench", "python", "docs"})
    assert not stale, f"README's Layout names folders that src/ does not have: {stale}"


def test_includes_point_down(headers):
    bad = []
    for rel in sources():
        me = layer_of(rel)
        for name in includes(rel):
            if name not in headers:
                if os.path.exists(os.path.join(SRC, os.path.dirname(rel), name)):
                    continue  # a header beside the file (tests' helpers etc.)
                bad.append(f"{rel}: includes {name}, which is nowhere in src/, tools/, include/")
                continue
            other = layer_of(headers[name])
            if other == "public" or other == me:
                continue
            if me == "tools":
                continue  # the CLI: checked against the public API below
            if other == "tools":
                bad.append(f"{rel} ({me}) includes the CLI's {name}")
            elif me.startswith("model/") and other.startswith("model/"):
                bad.append(f"{rel} (family {me}) includes {name} of another family ({other})")
            elif me == "model" and other.startswith("model/"):
                bad.append(f"{rel}: the model interface includes the family header {name} ({other})")
            elif rank(other) > rank(me) or (rank(other) == rank(me) and
                                            other.split("/")[0] != me.split("/")[0]):
                bad.append(f"{rel} ({me}) includes {name} of {other}: up or sideways")
    assert not bad, "\n".join(bad)


def test_no_cycle_between_layers(headers):
    g = collections.defaultdict(set)
    for rel in sources():
        me = layer_of(rel)
        for name in includes(rel):
            if name in headers and layer_of(headers[name]) not in ("public", me):
                g[me].add(layer_of(headers[name]))
    cycles = find_cycles(g)
    assert not cycles, f"cycles between layers (includes): {cycles}"


def find_cycles(g):
    """The strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(g) | {w for ws in g.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def nm(obj, undefined):
    r = subprocess.run(["nm", "-u" if undefined else "--defined-only", obj],
                       capture_output=True, text=True, check=True)
    syms = set()
    for line in r.stdout.splitlines():
        p = line.split()
        if undefined and p:
            syms.add(p[-1])
        elif len(p) == 3 and p[1] in "TDBRC":
            syms.add(p[2])
    return syms


def objects(target):
    root = os.path.join(BUILD, "CMakeFiles", target + ".dir")
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".c.o"):
                rel = os.path.relpath(os.path.join(d, f), root)[:-4]
                if os.path.exists(os.path.join(SRC, rel + ".c")):  # not a moved file's stale object
                    out[rel] = os.path.join(d, f)
    return out


@pytest.fixture(scope="module")
def lib_objects():
    if not BUILD:
        pytest.fail("ATTNLIM_BUILD_DIR is not set (run through ctest)")
    objs = objects("attnlim_obj")
    assert len(objs) >= 30, f"too few library objects under {BUILD}: {sorted(objs)}"
    return objs


def test_no_cycle_between_modules(lib_objects):
    defined = {}
    for mod, o in lib_objects.items():
        for s in nm(o, False):
            defined[s] = mod
    g = collections.defaultdict(set)
    why = {}
    for mod, o in lib_objects.items():
        for s in nm(o, True):
            if s in defined and defined[s] != mod:
                g[mod].add(defined[s])
                why.setdefault((mod, defined[s]), s)
    cycles = find_cycles(g)
    detail = [f"{a} -> {b} ({why[(a, b)]})" for c in cycles for a in c for b in g[a] if b in c]
    assert not cycles, f"cycles between modules (symbols): {cycles}\n" + "\n".join(detail)
    # the symbol graph follows the layers too
    up = [f"{a} -> {b} ({why[(a, b)]})" for (a, b) in why
          if rank(layer_of(a)) < rank(layer_of(b))]
    assert not up, "calls up the layers:\n" + "\n".join(sorted(up))


def test_cli_internal_headers_only_shrink(headers):
    found = {}
    for rel in sources():
        if layer_of(rel) != "tools":
            continue
        internal = {n for n in includes(rel) if n in headers and layer_of(headers[n]) not in ("public", "tools")}
        if internal:
            found[rel] = internal
    new = {f: sorted(h - TOOLS_INTERNAL_HEADERS.get(f, set())) for f, h in found.items()
           if h - TOOLS_INTERNAL_HEADERS.get(f, set())}
    assert not new, f"the CLI includes new internal headers (use include/attnlim.h): {new}"
    gone = {f: sorted(h - found.get(f, set())) for f, h in TOOLS_INTERNAL_HEADERS.items()
            if h - found.get(f, set())}
    assert not gone, f"no longer included: delete them from TOOLS_INTERNAL_HEADERS: {gone}"


def test_cli_internal_calls_only_shrink(lib_objects):
    tools = objects("attnlim")
    assert tools, f"no CLI objects under {BUILD}"
    used = set()
    for o in tools.values():
        used |= {s for s in nm(o, True) if s.startswith("al__")}
    new = sorted(used - TOOLS_INTERNAL_CALLS)
    assert not new, f"the CLI calls new internal functions (add a public al_ one): {new}"
    gone = sorted(TOOLS_INTERNAL_CALLS - used)
    assert not gone, f"no longer called: delete them from TOOLS_INTERNAL_CALLS: {gone}"
