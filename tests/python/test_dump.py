"""Attention dumps (docs/dumps.md) as a model: `attnlim reproduce` / `attnlim diagnose --model DUMP`.

1. An independent producer: gpt2_ref.py (float64 numpy GPT-2) computes q, k, v of a War and Peace
   window of a random checkpoint, written with attnlim.write_dump WITHOUT token ids and WITHOUT
   logits/weights (attnlim derives them) in float64. diagnose and reproduce --quick on the dump
   agree (a) with the same commands on the checkpoint (the C forward in float32) and (b) with
   reproduce_ref.py's numpy metrics on gpt2_ref's arrays.
2. `attnlim capture` output is a dump as it is: bit-identical per-head results to the model run at
   L = T; a prefix L' < T is served exactly (bit-identical to a dump of the top-left block) and
   agrees with the model run at L' to the model's own float32 rounding.
3. A bidirectional dump: L = T only, against the numpy reference with causal=False.
4. Faults of write_dump and of the commands on dumps (the malformed dump files are in tests/bad).
"""
import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import attnlim
import gpt2_ref as G
import reproduce_ref as ref

BIN = os.environ.get("ATTNLIM_BIN")
T = 64  # --quick's longest L: L in {16, 32, 64}, long L = 64
# gpt2_ref (float64) against the C forward (float32): q, k, v of the 2-layer model carry the
# float32 rounding of every matmul, layernorm and GELU before them (~1e-7 relative), which moves
# the logits by ~1e-6 absolute. Measured on this checkpoint: every per-head statistic within
# 2.2e-6 relative (N_s counts identical), but Algorithm 5 at temperature T, which sees z / T:
# its error grows as ~1e-6 / T (1.9e-3 relative at T = 1e-3). The tolerances: 1e-4 (45x the
# measured, for other BLAS kernels), and 1e-4 + 4e-6 / T for Algorithm 5; discrete counts (N_s of
# Theorem 2) could flip on a near tie and get an absolute slack of one row in 32.
RTOL_F32 = 1e-4
# the dump against numpy on gpt2_ref's own float64 arrays: the only difference is the single
# rounding of q, k, v to float32 in the capture layout (2^-24 relative) and of the derived logits
# and weights (computed in double from them), so metrics agree to ~1e-6 relative; Algorithm 5 at
# temperature T sees the float32 logits (|z| < 30: 2e-6 absolute) divided by T, hence + 1e-6 / T.
RTOL_REF = 2e-5


def run(*args, check=True):
    # one thread count for every command: the float32 forward's rounding depends on it, and the
    # bit-identity of a capture with the model's own run needs the same rounding
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"attnlim {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
    return r


def close(got, want, rtol, what, atol=1e-12):
    got, want = np.asarray(got, float), np.asarray(want, float)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    ok = np.isclose(got, want, rtol=rtol, atol=atol) | (np.isnan(got) & np.isnan(want))
    rel = np.nanmax(np.abs(got - want) / np.maximum(np.abs(want), 1e-300)) if got.size else 0
    assert ok.all(), f"{what}: max rel diff {rel:.3g} > {rtol:g}"
    return rel


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    assert BIN and os.path.exists(BIN), "ATTNLIM_BIN must point to the attnlim CLI (run through ctest)"
    d = tmp_path_factory.mktemp("dump")
    params, cfg = G.random_gpt2(2, 2, 32, T, 50257, seed=11)
    ckpt = d / "ckpt"
    ckpt.mkdir()
    G.save_hf(ckpt, params, cfg)
    # the model's window 0 of War and Peace: capture it (every array, float32) and take its tokens
    cap = d / "cap"
    run("capture", "--model", ckpt, "--corpus", "war-and-peace", "--length", T,
        "--what", "q,k,v,logits,weights", "--out", cap)
    ids = json.load(open(cap / "manifest.json"))["token_ids"]
    # the independent producer: gpt2_ref's float64 forward on the same tokens
    layers = {r["layer"]: r for r in G.forward_layers(params, cfg, ids) if "layer" in r}
    dump = d / "ref_dump"
    attnlim.write_dump(dump, {l: {"q": r["q"], "k": r["k"], "v": r["v"]} for l, r in layers.items()},
                       causal=True, model={"name": "gpt2_ref-random", "source": "tests/python/gpt2_ref.py",
                                           "n_layer": 2, "n_head": 2, "d_head": 16, "d_model": 32})
    return {"dir": d, "ckpt": str(ckpt), "cap": str(cap), "dump": str(dump), "ids": ids,
            "ref": layers, "nl": 2, "nh": 2}


@pytest.fixture(scope="module")
def model_run(world, tmp_path_factory):
    """reproduce --quick on the checkpoint itself (War and Peace, window 0)."""
    return reproduce(world["ckpt"], tmp_path_factory.mktemp("model_run") / "out")


def diagnose(model, *extra):
    return json.loads(run("diagnose", "--model", model, "--json", *extra).stdout)


def reproduce(model, out, *extra):
    run("reproduce", "--model", model, "--out", out, "--quick", "--quiet", "--threads", "2", *extra)
    res = json.load(open(os.path.join(out, "results.json")))
    arrays = {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".npy")}
    return res, arrays


HEAD_FIELDS = ("mean_max_weight", "mean_entropy_over_log_n", "mean_weight_on_token0", "jacobian_spectral_T1")


def ref_diagnose_head(w, z, v, Ns, causal=True):
    """diagnose's per-head numbers (include/attnlim.h al_diagnose) from reproduce_ref."""
    L = w.shape[0]
    mx, ent, _ = ref.head_vanishing(w, np.zeros((L, 1)), np.zeros((L, 1)), causal)
    n = np.arange(1, L + 1) if causal else np.full(L, L)
    keep = n >= 2
    sep = ref.head_separability(w, v, Ns, causal)
    return {"mean_max_weight": mx.mean(), "mean_entropy_over_log_n": (ent[keep] / np.log(n[keep])).mean(),
            "mean_weight_on_token0": w[:, 0].mean(),
            "jacobian_spectral_T1": ref.head_spectral(np.where(np.isfinite(z), z, 0.0), [1.0], causal)[0],
            "ns_ratio": [sep[N][0] for N in Ns]}


# ---- 1. an independent producer -------------------------------------------------------------------

def test_reference_dump_is_described(world):
    info = json.loads(run("info", "--model", world["dump"], "--json").stdout)
    assert info["family"] == "dump" and info["name"] == "gpt2_ref-random" and info["dtype"] == "f64"
    assert info["dump"]["token_ids"] is False and info["dump"]["arrays"] == ["q", "k", "v"]
    assert (info["n_layer"], info["n_head"], info["d_head"], info["n_ctx"], info["causal"]) == (2, 2, 16, T, True)
    # the identity: sha256sum of the manifest and every array, sorted by name (computed here)
    names = sorted(os.listdir(world["dump"]))
    lines = "".join("%s  %s\n" % (hashlib.sha256(open(os.path.join(world["dump"], n), "rb").read()).hexdigest(), n)
                    for n in names)
    assert info["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert sorted(f["name"] for f in info["files"]) == names


def test_diagnose_reference_dump(world):
    got = diagnose(world["dump"])
    assert got["L"] == T and got["model"]["family"] == "dump"
    assert got["model"]["dump"]["model"]["source"] == "tests/python/gpt2_ref.py"
    assert "no token ids" in got["corpus"]
    model = diagnose(world["ckpt"], "--length", str(T))
    Ns = got["separability_N"]
    assert Ns == model["separability_N"] == [4, 16]  # N = 1: N_s/N = 1 by construction
    worst = {"model": 0.0, "ref": 0.0}
    for a, b in zip(got["heads"], model["heads"]):
        l, h = a["layer"], a["head"]
        r = world["ref"][l]
        want = ref_diagnose_head(r["w"][h], r["z"][h], r["v"][h], Ns)
        for f in HEAD_FIELDS:
            worst["model"] = max(worst["model"], close(a[f], b[f], RTOL_F32, f"(a) {f} layer {l} head {h}"))
            worst["ref"] = max(worst["ref"], close(a[f], want[f], RTOL_REF, f"(b) {f} layer {l} head {h}"))
        close(a["ns_ratio"], b["ns_ratio"], 0, f"(a) N_s/N layer {l} head {h}", atol=1.0 / 32)
        close(a["ns_ratio"], want["ns_ratio"], RTOL_REF, f"(b) N_s/N layer {l} head {h}")
        assert a["flags"] == b["flags"]
    print("diagnose: max rel diff to the float32 model %.3g, to numpy on gpt2_ref %.3g" % (worst["model"], worst["ref"]))


def test_reproduce_reference_dump(world, model_run, tmp_path):
    res, got = reproduce(world["dump"], tmp_path / "dump")
    model = model_run[1]
    man = res["manifest"]
    assert man["model"]["family"] == "dump" and man["model"]["dump"]["path"] == os.path.realpath(world["dump"])
    assert man["windows"]["count"] == 1 and "dump" in man["windows"]["rule"]
    opts = man["options"]
    Ls, longL, N2, N4, Ts = opts["lengths"], opts["long_length"], opts["top_n"], opts["separability_n"], opts["temperatures"]
    assert Ls == [16, 32, 64] and longL == T
    # (a) every per-head array against the checkpoint's run
    worst = 0.0
    for name, a in got.items():
        if name.startswith("alg4_ratio"):
            close(a, model[name], 0, name, atol=1.0 / 32)  # a mean of counts: see RTOL_F32
        elif name.startswith("alg5_"):  # [layer, head, T(, eps)]: the error scales as 1 / T
            for i, temp in enumerate(Ts):
                close(a[:, :, i], model[name][:, :, i], RTOL_F32 + 4e-6 / temp, f"(a) {name} T={temp:g}")
        else:
            worst = max(worst, close(a, model[name], RTOL_F32, f"(a) {name}", atol=1e-9))
    # (b) numpy on gpt2_ref's float64 arrays (the top-left block for L < T)
    worstb = 0.0
    nl, nh = world["nl"], world["nh"]
    for li, L in enumerate(Ls):
        for l in range(nl):
            r = world["ref"][l]
            for h in range(nh):
                d = ref.head_distance(r["w"][h][:L, :L], r["v"][h][:L], [5])[5]
                for k, s in enumerate(("dtilde", "dmax", "E")):
                    worstb = max(worstb, close(got["alg1_" + s][li, l, h], d[k], RTOL_REF, f"(b) alg1 {s} L={L}"))
    for l in range(nl):
        r = world["ref"][l]
        for h in range(nh):
            dist = ref.head_distance(r["w"][h], r["v"][h], N2)
            sep = ref.head_separability(r["w"][h], r["v"][h], N4)
            for i, N in enumerate(N2):
                for k, s in enumerate(("dtilde", "dmax", "E")):
                    worstb = max(worstb, close(got["alg2_" + s][i, l, h], dist[N][k], RTOL_REF, f"(b) alg2 {s} N={N}"))
            for i, N in enumerate(N4):
                for k, s in enumerate(("ratio", "lower", "upper")):
                    worstb = max(worstb, close(got["alg4_" + s][i, l, h], sep[N][k], RTOL_REF, f"(b) alg4 {s} N={N}"))
            mx, ent, D = ref.head_vanishing(r["w"][h], r["q"][h], r["k"][h])
            for s, want in (("max_weight", mx), ("entropy", ent), ("D", D)):
                worstb = max(worstb, close(got["vanishing_" + s][l, h], want, RTOL_REF, f"(b) vanishing {s}",
                                           atol=1e-9))
            spec = ref.head_spectral(np.where(np.isfinite(r["z"][h]), r["z"][h], 0.0), Ts)
            for i, temp in enumerate(Ts):  # the float32 logits (1e-6 absolute) seen as z / T
                close(got["alg5_spectral"][l, h, i], spec[i], RTOL_REF + 1e-6 / temp, f"(b) alg5 T={temp:g}")
    print("reproduce: max rel diff to the float32 model %.3g, to numpy on gpt2_ref %.3g" % (worst, worstb))


def test_forward_derives_logits_and_weights(world):
    # what the dump's forward hands the observer: q, k, v as stored (rounded once to float32),
    # logits = q.k/sqrt(d_head) and weights = softmax rows derived in double, then rounded
    with attnlim.Model(world["dump"]) as m:
        r = m.forward(np.zeros(40, np.int32) + 7, capture=("q", "k", "v", "logits", "weights"))
        assert r.logits is None and r.hidden is None
        for l in range(2):
            c, g = r.captures[l], world["ref"][l]
            assert np.array_equal(c["q"], g["q"][:, :40].astype(np.float32))
            assert np.array_equal(c["v"], g["v"][:, :40].astype(np.float32))
            z = g["z"][:, :40, :40]
            upper = np.triu(np.ones((40, 40), bool), 1)
            assert np.all(c["logits"][:, upper] == -np.inf) and np.all(c["weights"][:, upper] == 0)
            # one float32 rounding of values computed in double: at most 1 ulp from numpy's
            close(c["logits"][:, ~upper], z[:, ~upper].astype(np.float32), 2.0 ** -23, "derived logits", atol=1e-30)
            close(c["weights"][:, ~upper], g["w"][:, :40, :40][:, ~upper].astype(np.float32), 2.0 ** -22,
                  "derived weights", atol=1e-30)


# ---- 2. capture output is a dump ------------------------------------------------------------------

def test_capture_is_a_dump(world, model_run, tmp_path):
    cap, ckpt = world["cap"], world["ckpt"]
    # diagnose at L = T: bit-identical (the observer sees the very arrays the model gave)
    a, b = diagnose(cap), diagnose(ckpt, "--length", str(T))
    assert a["heads"] == b["heads"]
    assert a["model"]["dump"]["model"]["sha256"] == b["model"]["sha256"]  # the capture's source model
    # reproduce: every array of the long window (vanishing, Alg. 2, 4, 5) and the L = T rows of
    # Algorithms 1 and 3 bit-identical
    res, got = reproduce(cap, tmp_path / "cap")
    model = model_run[1]
    Ls = res["manifest"]["options"]["lengths"]
    for name, arr in got.items():
        if name.startswith(("alg1_", "alg3_")):
            last = Ls.index(T)
            assert np.array_equal(arr[last], model[name][last], equal_nan=True), name
            # prefixes: the model's own forward at L' is not the top-left block of its forward at
            # T bit for bit (GEMM blocking depends on T); they agree to its float32 rounding
            close(arr[:last], model[name][:last], 1e-5, name + " (prefixes)", atol=1e-9)
        else:
            assert np.array_equal(arr, model[name], equal_nan=True), name
    assert res["manifest"]["corpus"]["n_tokens"] == T and "token_ids" in res["manifest"]["corpus"]["name"]


def test_prefix_is_exact(world, tmp_path):
    # a causal dump at L' < T is the top-left block, exactly: the same report as a dump made of
    # that block (write_dump of the capture's float32 arrays cut to L')
    cap, Lp = world["cap"], 24
    arrs = {l: {k: np.load(os.path.join(cap, f"layer{l}.{k}.npy")) for k in ("q", "k", "v", "logits", "weights")}
            for l in range(2)}
    block = {l: {k: (a[:, :Lp, :Lp] if k in ("logits", "weights") else a[:, :Lp]) for k, a in d.items()}
             for l, d in arrs.items()}
    bd = tmp_path / "block"
    attnlim.write_dump(bd, block, token_ids=world["ids"][:Lp], model={"n_layer": 2, "n_head": 2, "d_head": 16})
    a, b = diagnose(cap, "--length", str(Lp)), diagnose(str(bd))
    assert a["heads"] == b["heads"] and a["L"] == b["L"] == Lp
    # and the model's own run at L' agrees to float32 rounding
    m = diagnose(world["ckpt"], "--length", str(Lp))
    for x, y in zip(a["heads"], m["heads"]):
        for f in HEAD_FIELDS:
            close(x[f], y[f], 1e-5, f)


# ---- 3. a bidirectional dump ----------------------------------------------------------------------

def test_bidirectional_dump(tmp_path):
    rng = np.random.default_rng(3)
    Tb, nl, nh, dh = 24, 2, 2, 8
    qkv = {l: {k: rng.standard_normal((nh, Tb, dh)) * (1.5 if k != "v" else 1.0) for k in "qkv"} for l in range(nl)}
    d = tmp_path / "bidir"
    attnlim.write_dump(d, qkv, causal=False, model={"name": "encoder-like", "n_layer": nl, "n_head": nh, "d_head": dh})
    z = {l: qkv[l]["q"] @ qkv[l]["k"].transpose(0, 2, 1) / np.sqrt(dh) for l in range(nl)}
    w = {l: np.exp(z[l] - z[l].max(-1, keepdims=True)) for l in range(nl)}
    for l in w:
        w[l] /= w[l].sum(-1, keepdims=True)
    got = diagnose(str(d))
    assert got["L"] == Tb
    for item in got["heads"]:
        l, h = item["layer"], item["head"]
        want = ref_diagnose_head(w[l][h], z[l][h], qkv[l]["v"][h], got["separability_N"], causal=False)
        for f in HEAD_FIELDS + ("ns_ratio",):
            close(item[f], want[f], RTOL_REF, f"bidirectional {f} layer {l} head {h}")
    res, arrs = reproduce(str(d), tmp_path / "out")
    opts = res["manifest"]["options"]
    assert opts["lengths"] == [Tb] and opts["long_length"] == Tb
    for l in range(nl):
        for h in range(nh):
            dist = ref.head_distance(w[l][h], qkv[l]["v"][h], opts["top_n"], causal=False)
            for i, N in enumerate(opts["top_n"]):
                close(arrs["alg2_dtilde"][i, l, h], dist[N][0], RTOL_REF, f"bidirectional alg2 N={N}")
    # only L = T
    r = run("diagnose", "--model", d, "--length", "16", check=False)
    assert r.returncode != 0 and "bidirectional" in r.stderr and str(d) in r.stderr
    out = tmp_path / "o"
    r = run("reproduce", "--model", d, "--out", out, "--lengths", "16,24", check=False)
    assert r.returncode != 0 and "L = T only" in r.stderr and str(d) in r.stderr
    assert not out.exists() or not os.listdir(out)


# ---- 4. faults ------------------------------------------------------------------------------------

def test_command_faults(world, tmp_path):
    dump = world["dump"]
    cases = [
        (("reproduce", "--model", dump, "--windows", "2", "--quick"), "--windows 2"),
        (("reproduce", "--model", dump, "--corpus", "war-and-peace", "--quick"), "no --corpus"),
        (("reproduce", "--model", dump, "--lengths", "16,128", "--quick"), "--lengths: 128"),
        (("reproduce", "--model", dump, "--quick", "--vectors", "hidden"), "layer0.hidden.npy: missing"),
        (("diagnose", "--model", dump, "--window", "1"), "--window 1"),
        (("diagnose", "--model", dump, "--length", "65"), "T = 64"),
        (("perplexity", "--model", dump, "--tokens", "/dev/null", "--length", "4"), "holds attention, not a model"),
    ]
    for i, (args, needle) in enumerate(cases):
        out = tmp_path / f"out{i}"
        extra = ("--out", str(out)) if args[0] in ("reproduce", "diagnose") else ()
        r = run(*args, *extra, check=False)
        assert r.returncode not in (0, 134, 139) and r.returncode > 0, (args, r.stderr)
        line = [ln for ln in r.stderr.splitlines() if needle in ln]
        assert line and dump in line[0], (needle, r.stderr)
        if args[0] == "reproduce":  # refused before anything is written
            assert not out.exists() or not os.listdir(out), os.listdir(out)
        if "missing" in needle:
            assert "attnlim capture --what" in line[0]
    # the dump's tokens are checked against a request's (a dump with token ids)
    with attnlim.Model(world["cap"]) as m:
        with pytest.raises(attnlim.AttnlimError, match="other tokens: position 0"):
            m.forward(np.zeros(8, np.int32), capture=("weights",))
        with pytest.raises(attnlim.AttnlimError, match="holds attention over T = 64"):
            m.forward(np.zeros(65, np.int32), capture=("weights",))


def test_write_dump_faults(tmp_path):
    q = np.zeros((2, 4, 3))
    good = {0: {"q": q, "k": q, "v": q}}
    with pytest.raises(ValueError, match=r"layers\[0\]\['k'\]: d_head 2"):
        attnlim.write_dump(tmp_path / "a", {0: {"q": q, "k": np.zeros((2, 4, 2)), "v": q}})
    bad = q.copy()
    bad[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"NaN/Inf at \(1, 2, 0\)"):
        attnlim.write_dump(tmp_path / "a", {0: {"q": q, "k": q, "v": bad}})
    with pytest.raises(ValueError, match="every layer holds the same arrays"):
        attnlim.write_dump(tmp_path / "a", {0: {"q": q, "k": q, "v": q}, 1: {"q": q}})
    with pytest.raises(TypeError, match="not a float type"):
        attnlim.write_dump(tmp_path / "a", {0: {"q": q.astype(np.int32)}})
    with pytest.raises(ValueError, match="token_ids: 4 integer ids"):
        attnlim.write_dump(tmp_path / "a", good, token_ids=[1, 2, 3])
    assert not (tmp_path / "a").exists() and not [f for f in os.listdir(tmp_path) if f.startswith(".")]
    # masked entries are written as capture writes them, whatever they held
    z = np.ones((2, 4, 4))
    man = attnlim.write_dump(tmp_path / "m", {0: {"logits": z, "v": q}}, model={"d_head": 3})
    zl = np.load(tmp_path / "m" / "layer0.logits.npy")
    assert np.isneginf(zl[:, 0, 1:]).all() and (zl[:, 1, :2] == 1).all() and man["arrays"] == ["v", "logits"]
    # an existing directory: refused unless force (then replaced whole)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match="notes.txt"):
        attnlim.write_dump(tmp_path / "busy", good, force=True)
    attnlim.write_dump(tmp_path / "d", good)
    with pytest.raises(FileExistsError, match="force=True"):
        attnlim.write_dump(tmp_path / "d", good)
    attnlim.write_dump(tmp_path / "d", {0: {"q": q + 1, "k": q, "v": q}}, force=True)
    assert np.load(tmp_path / "d" / "layer0.q.npy")[0, 0, 0] == 1
    assert sorted(os.listdir(tmp_path / "d")) == ["layer0.k.npy", "layer0.q.npy", "layer0.v.npy", "manifest.json"]
    # check=True: libattnlim opens the temporary dump before it is published
    man_text = json.load(open(tmp_path / "d" / "manifest.json"))
    assert man_text["schema"] == "attnlim.dump/1" and "token_ids" not in man_text
    shutil.rmtree(tmp_path / "d")


def test_masked_entries_are_ignored(tmp_path):
    # a hand-written causal dump (np.save, no write_dump) whose masked logits hold junk
    # (torch.finfo.min-style values): read as capture writes them, so the report is the clean
    # one's; masked weights must be 0 (issue 12, class 8): junk there is refused
    rng = np.random.default_rng(5)
    Tm = 12
    q, k, v = (rng.standard_normal((2, Tm, 4)) for _ in range(3))
    z = q @ k.transpose(0, 2, 1) / 2.0
    upper = np.triu(np.ones((Tm, Tm), bool), 1)
    w = np.exp(np.where(upper, -np.inf, z) - np.where(upper, -np.inf, z).max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    man = {"schema": "attnlim.dump/1", "T": Tm,
           "model": {"n_layer": 1, "n_head": 2, "d_head": 4, "causal": True}}
    reports = []
    for name, junk_z, junk_w in (("clean", -np.inf, 0.0), ("junk", -3.4e38, -0.0)):
        d = tmp_path / name
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps(man))
        np.save(d / "layer0.v.npy", v)
        np.save(d / "layer0.logits.npy", np.where(upper, junk_z, z).astype(np.float32))
        np.save(d / "layer0.weights.npy", np.where(upper, junk_w, w))
        reports.append(diagnose(str(d)))
        with attnlim.Model(str(d)) as m:
            c = m.forward(np.arange(Tm), capture=("logits", "weights")).captures[0]
            assert np.isneginf(c["logits"][:, upper]).all() and (c["weights"][:, upper] == 0).all()
    assert reports[0]["heads"] == reports[1]["heads"]
    # a masked weight that is not 0 (NaN, or a value of a normalizer that ignored the mask)
    for junk in (np.nan, 1e-3):
        np.save(tmp_path / "junk" / "layer0.weights.npy", np.where(upper, junk, w))
        r = run("diagnose", "--model", tmp_path / "junk", check=False)
        assert r.returncode == 1 and ("layer0.weights.npy: layer 0, head 0, row 0: masked weight at column 1 "
                                      "(above the diagonal of a causal dump) is %g, not 0" % junk) in r.stderr
    # below the diagonal a NaN is refused, naming the file and the position
    bad = w.copy()
    bad[1, 5, 2] = np.nan
    np.save(tmp_path / "junk" / "layer0.weights.npy", bad)
    r = run("diagnose", "--model", tmp_path / "junk", check=False)
    assert r.returncode == 1 and "layer0.weights.npy: 1 NaN/Inf values (first at head 1 (index 1), row 5, column 2" in r.stderr
