"""test_checkpoints.py: GPT-2 checkpoints (HF safetensors, sharded, llm.c v3/v5), verify,
make-model and info, against independent references.

The references here are written from the format specs, not from our code:
  - a safetensors writer/reader (u64 LE header length, JSON header, data_offsets relative to
    the data start), an llm.c writer/reader (int32 header[256], llm.c parameter order,
    [out, in] matrices, vocabulary padded to a multiple of 128, bf16 = top 16 bits, rounded to
    nearest even), numpy conversions for f16/f64;
  - hashlib SHA-256 of every genuine tensor of the partial GPT-2 file against the pinned TSV.
Values read by our loader come back through the public API (ctypes on ATTNLIM_LIB:
al_model_open + al_gpt2_tensor), so every pointer the loader set is checked.
"""
import ctypes
import hashlib
import json
import os
import pathlib
import re
import struct
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("ATTNLIM_BIN")
LIB = os.environ.get("ATTNLIM_LIB")
SRC = os.environ.get("ATTNLIM_SOURCE_DIR")
if not (BIN and LIB and SRC):
    raise RuntimeError("run through ctest (ATTNLIM_BIN, ATTNLIM_LIB, ATTNLIM_SOURCE_DIR unset)")


def shared_data():
    for d in [os.environ.get("ATTNLIM_DATA"), os.path.join(SRC, "..", "shared", "data"), "/work/shared/data"]:
        if d and os.path.exists(os.path.join(d, "gpt2", "gpt2-124M-partial.safetensors")):
            return d
    raise RuntimeError("shared data with gpt2/gpt2-124M-partial.safetensors not found (set ATTNLIM_DATA)")


DATA = shared_data()
PARTIAL = os.path.join(DATA, "gpt2", "gpt2-124M-partial.safetensors")
SHARED_TSV = os.path.join(DATA, "gpt2", "gpt2_124M_tensor_sha256.tsv")
SHIPPED_TSV = os.path.join(SRC, "data", "gpt2_124M_tensor_sha256.tsv")

# ---- independent format code -------------------------------------------------------------------

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (NaN not expected here)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(x, dtype):
    if dtype == "BF16":
        return bf16_bits(x).astype("<u2").tobytes()
    return np.ascontiguousarray(x, dtype=np.dtype(ST_DTYPES[dtype]).newbyteorder("<")).tobytes()


def as_loaded(x, dtype):
    """The float32 values a correct loader must produce from x stored as dtype."""
    if dtype == "BF16":
        return bf16_to_f32(bf16_bits(x))
    return np.asarray(x, dtype=ST_DTYPES[dtype]).astype(np.float32)


def write_safetensors(path, tensors, metadata=None, pad=True):
    """tensors: list of (name, array, dtype) or (name, raw_bytes, dtype, shape)."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for t in tensors:
        if len(t) == 3:
            name, arr, dt = t
            b, shape = encode(arr, dt), list(np.shape(arr))
        else:
            name, b, dt, shape = t
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """Returns (header dict, {name: (dtype, shape, raw bytes)}, header length)."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], data[b:e])
    return header, out, n


LAYER = [  # HF suffix, shape as a function of C (HF Conv1D layout [in, out])
    ("ln_1.weight", lambda C: (C,)),
    ("ln_1.bias", lambda C: (C,)),
    ("attn.c_attn.weight", lambda C: (C, 3 * C)),
    ("attn.c_attn.bias", lambda C: (3 * C,)),
    ("attn.c_proj.weight", lambda C: (C, C)),
    ("attn.c_proj.bias", lambda C: (C,)),
    ("ln_2.weight", lambda C: (C,)),
    ("ln_2.bias", lambda C: (C,)),
    ("mlp.c_fc.weight", lambda C: (C, 4 * C)),
    ("mlp.c_fc.bias", lambda C: (4 * C,)),
    ("mlp.c_proj.weight", lambda C: (4 * C, C)),
    ("mlp.c_proj.bias", lambda C: (C,)),
]


def gpt2_shapes(L, C, T, V):
    """HF parameter names (no prefix) -> shapes, in llm.c's order (group-major)."""
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C)}
    for suffix, f in LAYER:
        for l in range(L):
            shapes[f"h.{l}.{suffix}"] = f(C)
    shapes["ln_f.weight"] = (C,)
    shapes["ln_f.bias"] = (C,)
    return shapes


def random_gpt2(L, C, T, V, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, 0.5, size=s).astype(np.float32) for k, s in gpt2_shapes(L, C, T, V).items()}


def config(L, H, C, T, V, **extra):
    c = dict(model_type="gpt2", n_layer=L, n_head=H, n_embd=C, n_positions=T, vocab_size=V,
             layer_norm_epsilon=1e-5, activation_function="gelu_new")
    c.update(extra)
    return c


def write_hf_dir(d, params, cfg, prefix="", dtype="F32", extra=()):
    d = pathlib.Path(d)
    d.mkdir(parents=True, exist_ok=True)
    write_safetensors(d / "model.safetensors", [(prefix + k, v, dtype) for k, v in params.items()] + list(extra),
                      metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg))
    return d


LLMC_MATRICES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def write_llmc(path, params, L, H, C, T, V, version):
    Vp = -(-V // 128) * 128
    hdr = np.zeros(256, dtype="<i4")
    hdr[:8] = [20240326, version, T, V, L, H, C, Vp]
    parts = [hdr.tobytes()]
    for k in gpt2_shapes(L, C, T, V):
        x = params[k]
        if k == "wte.weight":
            x = np.concatenate([x, np.zeros((Vp - V, C), np.float32)])
        elif k.endswith(LLMC_MATRICES):
            x = np.ascontiguousarray(x.T)  # HF [in, out] -> llm.c [out, in]
        parts.append(encode(x, "F32" if version == 3 else "BF16"))
    pathlib.Path(path).write_bytes(b"".join(parts))


def read_llmc(path):
    raw = pathlib.Path(path).read_bytes()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    magic, version, T, V, L, H, C, Vp = (int(x) for x in h[:8])
    el = 4 if version == 3 else 2
    shapes = gpt2_shapes(L, C, T, V)
    shapes["wte.weight"] = (Vp, C)
    out, off = {}, 1024
    for k, s in shapes.items():
        stored = (s[1], s[0]) if k.endswith(LLMC_MATRICES) else s
        n = int(np.prod(stored))
        b = raw[off : off + n * el]
        off += n * el
        x = np.frombuffer(b, "<f4") if el == 4 else bf16_to_f32(np.frombuffer(b, "<u2"))
        x = x.reshape(stored)
        out[k] = np.ascontiguousarray(x.T) if k.endswith(LLMC_MATRICES) else x
    return dict(magic=magic, version=version, T=T, V=V, L=L, H=H, C=C, Vp=Vp, end=off, size=len(raw)), out


# ---- our library through its public API ---------------------------------------------------------


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


# al_array's shape has AL_MAX_DIMS entries: read from the header, so the layout follows it
AL_MAX_DIMS = int(re.search(r"#define AL_MAX_DIMS (\d+)", pathlib.Path(SRC, "include", "attnlim.h").read_text())[1])


class Arr(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * AL_MAX_DIMS),
                ("data", ctypes.c_void_p)]


lib = ctypes.CDLL(LIB)
lib.al_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Err)]
lib.al_model_free.argtypes = [ctypes.c_void_p]
lib.al_gpt2_tensor.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Arr), ctypes.POINTER(Err)]
lib.al_array_free.argtypes = [ctypes.POINTER(Arr)]


class Model:
    def __init__(self, path):
        self.h, e = ctypes.c_void_p(), Err()
        rc = lib.al_model_open(str(path).encode(), ctypes.byref(self.h), ctypes.byref(e))
        assert rc == 0, e.msg.decode()

    def tensor(self, name):
        a, e = Arr(), Err()
        rc = lib.al_gpt2_tensor(self.h, name.encode(), ctypes.byref(a), ctypes.byref(e))
        assert rc == 0, e.msg.decode()
        shape = tuple(a.shape[: a.ndim])
        x = np.ctypeslib.as_array(ctypes.cast(a.data, ctypes.POINTER(ctypes.c_float)), shape=shape).copy()
        lib.al_array_free(ctypes.byref(a))
        return x

    def close(self):
        lib.al_model_free(self.h)


def run(*args, check=None):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode >= 0, f"crashed with signal {-p.returncode}: {args}\n{p.stderr}"
    if check is not None:
        assert p.returncode == check, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def info(path):
    return json.loads(run("info", "--model", path, "--json", check=0).stdout)


def file_sha(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def identity(d, names):
    """The model identity from the files themselves: SHA-256 of the sorted sha256sum lines."""
    lines = "".join(f"{file_sha(pathlib.Path(d) / n)}  {n}\n" for n in sorted(names, key=str.encode))
    return hashlib.sha256(lines.encode()).hexdigest()


def n_params(L, C, T, V):
    return sum(int(np.prod(s)) for s in gpt2_shapes(L, C, T, V).values())


# ---- loading -------------------------------------------------------------------------------------

SHAPE = dict(L=2, H=4, C=16, T=24, V=70)


@pytest.mark.parametrize("prefix", ["", "transformer."])
@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16", "F64"])
def test_safetensors_values(tmp_path, prefix, dtype):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=1)
    # old HF checkpoints carry attention buffers: they must be ignored
    buf = [(f"{prefix}h.{l}.attn.bias", np.tril(np.ones((1, 1, T, T), np.float32)), "F32") for l in range(L)]
    buf += [(f"{prefix}h.{l}.attn.masked_bias", np.array(-1e4, np.float32), "F32") for l in range(L)]
    d = write_hf_dir(tmp_path / "m", p, config(L, H, C, T, V), prefix, dtype, extra=buf)
    m = Model(d)
    try:
        for k, v in p.items():
            got = m.tensor(k)
            assert got.shape == v.shape, k
            assert np.array_equal(got, as_loaded(v, dtype)), k
    finally:
        m.close()
    meta = info(d)
    assert meta["family"] == "gpt2" and meta["causal"] is True
    assert (meta["n_layer"], meta["n_head"], meta["d_model"], meta["n_ctx"], meta["vocab_size"]) == (L, H, C, T, V)
    assert meta["n_kv_head"] == H and meta["d_head"] == C // H and meta["d_ff"] == 4 * C
    assert meta["n_params"] == n_params(L, C, T, V)
    assert meta["dtype"] == dtype.lower()
    assert meta["sha256"] == identity(d, ["config.json", "model.safetensors"])


def test_lm_head_tied_and_bare_file(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=2)
    d = write_hf_dir(tmp_path / "m", p, config(L, H, C, T, V), "transformer.",
                     extra=[("lm_head.weight", p["wte.weight"], "F32")])
    m = Model(d / "model.safetensors")  # the file itself, config.json beside it
    assert np.array_equal(m.tensor("transformer.wte.weight"), p["wte.weight"])
    m.close()
    # both naming styles mixed in one file
    mixed = [(("transformer." if i % 2 else "") + k, v, "F32") for i, (k, v) in enumerate(p.items())]
    d2 = tmp_path / "mixed"
    d2.mkdir()
    write_safetensors(d2 / "model.safetensors", mixed)
    (d2 / "config.json").write_text(json.dumps(config(L, H, C, T, V)))
    m = Model(d2)
    for k, v in p.items():
        assert np.array_equal(m.tensor(k), v), k
    m.close()
    # the same tensor under both names is ambiguous
    write_safetensors(d2 / "model.safetensors", mixed + [("transformer.wte.weight", p["wte.weight"], "F32")])
    expect_fail(d2, "wte.weight", "both with and without")


def test_sharded(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=3)
    names = list(p)
    shards = {f"model-{i + 1:05d}-of-00003.safetensors": names[i::3] for i in range(3)}
    wm = {}
    for fn, ns in shards.items():
        write_safetensors(tmp_path / fn, [("transformer." + k, p[k], "F32") for k in ns])
        wm.update({"transformer." + k: fn for k in ns})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (tmp_path / "config.json").write_text(json.dumps(config(L, H, C, T, V)))
    m = Model(tmp_path)
    for k, v in p.items():
        assert np.array_equal(m.tensor(k), v), k
    m.close()
    # the index itself (no config needed for verify): every tensor resolved in its shard
    tsv = tmp_path / "t.tsv"
    tsv.write_text("".join(f"transformer.{k}\t{v.nbytes}\t{hashlib.sha256(v.tobytes()).hexdigest()}\n"
                           for k, v in p.items()))
    js = json.loads(run("verify", "--model", tmp_path / "model.safetensors.index.json", "--table", tsv, "--json",
                        check=0).stdout)
    assert js["matched"] == len(p) and js["complete"] is True


@pytest.mark.parametrize("version", [3, 5])
def test_llmc_values(tmp_path, version):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=4)
    f = tmp_path / "gpt2_test.bin"
    write_llmc(f, p, L, H, C, T, V, version)
    m = Model(f)
    for k, v in p.items():
        want = v if version == 3 else as_loaded(v, "BF16")
        assert np.array_equal(m.tensor(k), want), k
    m.close()
    meta = info(f)
    assert meta["dtype"] == ("f32" if version == 3 else "bf16")
    assert meta["padded_vocab"] == 128 and meta["llmc_version"] == version
    assert meta["n_params"] == n_params(L, C, T, V)


# ---- make-model ----------------------------------------------------------------------------------

MM = ["--layers", 2, "--heads", 4, "--embd", 32, "--ctx", 20, "--vocab", 300]


def test_make_model_safetensors(tmp_path):
    L, H, C, T, V = 2, 4, 32, 20, 300
    out = tmp_path / "m"
    js = json.loads(run("make-model", *MM, "--seed", 7, "--out", out, "--json", check=0).stdout)
    assert js["n_params"] == n_params(L, C, T, V)
    header, tensors, hlen = read_safetensors(out / "model.safetensors")
    assert hlen % 8 == 0
    assert header["__metadata__"] == {"format": "pt"}
    shapes = gpt2_shapes(L, C, T, V)
    assert set(tensors) == set(shapes)
    spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert 8 + hlen + spans[-1][1] == (out / "model.safetensors").stat().st_size
    vals = {}
    for k, (dt, shape, raw) in tensors.items():
        assert dt == "F32" and tuple(shape) == shapes[k], k
        vals[k] = np.frombuffer(raw, "<f4").reshape(shape)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["layer_norm_epsilon"] == 1e-5
    assert (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"], cfg["vocab_size"]) == (L, H, C, T, V)
    # scales (see al_gpt2_make_model): attention logits at unit scale, LayerNorm near 1
    qkv = np.concatenate([vals[f"h.{l}.attn.c_attn.weight"].ravel() for l in range(L)])
    assert abs(qkv.std() * np.sqrt(C) - 1) < 0.1
    assert abs(vals["wte.weight"].std() - 0.02) < 0.002
    lnw = np.concatenate([vals[f"h.{l}.ln_1.weight"] for l in range(L)])
    assert abs(lnw.mean() - 1) < 0.05 and 0.05 < lnw.std() < 0.15
    assert np.all(np.isfinite(qkv))
    # deterministic: same seed -> same bytes; another seed -> other weights
    run("make-model", *MM, "--seed", 7, "--out", tmp_path / "again", check=0)
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    run("make-model", *MM, "--seed", 8, "--out", tmp_path / "other", check=0)
    assert (tmp_path / "other" / "model.safetensors").read_bytes() != (out / "model.safetensors").read_bytes()
    # it loads
    m = Model(out)
    assert np.array_equal(m.tensor("h.1.mlp.c_proj.weight"), vals["h.1.mlp.c_proj.weight"])
    m.close()


def test_make_model_llmc_matches_safetensors(tmp_path):
    L, H, C, T, V = 2, 4, 32, 20, 300
    run("make-model", *MM, "--seed", 9, "--out", tmp_path / "st", check=0)
    _, tensors, _ = read_safetensors(tmp_path / "st" / "model.safetensors")
    ref = {k: np.frombuffer(raw, "<f4").reshape(shape) for k, (dt, shape, raw) in tensors.items()}
    for version in (3, 5):
        f = tmp_path / f"v{version}.bin"
        run("make-model", *MM, "--seed", 9, "--format", "llmc", "--llmc-version", version, "--out", f, check=0)
        h, vals = read_llmc(f)
        assert (h["magic"], h["version"], h["T"], h["V"], h["L"], h["H"], h["C"]) == (20240326, version, T, V, L, H, C)
        assert h["Vp"] == 384 and h["end"] == h["size"]
        assert np.all(vals["wte.weight"][V:] == 0)
        for k, v in ref.items():
            got = vals[k][:V] if k == "wte.weight" else vals[k]
            want = v if version == 3 else as_loaded(v, "BF16")
            assert np.array_equal(got, want), (version, k)


def test_make_model_padding_rule(tmp_path):
    # llm.c pads 50257 to 50304 (next multiple of 128)
    f = tmp_path / "v.bin"
    run("make-model", "--layers", 1, "--heads", 1, "--embd", 4, "--ctx", 4, "--vocab", 50257, "--format", "llmc",
        "--out", f, check=0)
    h, _ = read_llmc(f)
    assert h["Vp"] == 50304 and h["end"] == h["size"]


def read_tsv(path):
    rows = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line and not line.startswith("#"):
            name, nbytes, sha = line.split("\t")
            rows[name] = (int(nbytes), sha)
    return rows


# The 124M layout (every tensor's byte size against the pinned table) is checked in
# tests/test_safetensors.c (test_124M_layout) without writing 500 MB here.


# ---- verify --------------------------------------------------------------------------------------


def genuine():
    """The partial file's tensors, and which of them match the pinned hashes (hashlib)."""
    _, tensors, _ = read_safetensors(PARTIAL)
    table = read_tsv(SHARED_TSV)
    matched = {"transformer." + k for k, (dt, shape, raw) in tensors.items()
               if dt == "F32" and table.get("transformer." + k) == (len(raw), hashlib.sha256(raw).hexdigest())}
    return tensors, table, matched


def test_shipped_table_is_the_shared_one():
    assert pathlib.Path(SHIPPED_TSV).read_bytes() == pathlib.Path(SHARED_TSV).read_bytes()


def test_verify_partial_genuine():
    tensors, table, matched = genuine()
    assert len(matched) == 99 == len(tensors)
    p = run("verify", "--model", PARTIAL, "--json", check=0)
    js = json.loads(p.stdout)
    by = {t["name"]: t for t in js["tensors"]}
    assert {k for k, t in by.items() if t["status"] == "matched"} == matched
    optional = {k for k in table if k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias"))}
    missing = set(table) - matched - optional
    assert {k for k, t in by.items() if t["status"] == "missing"} == missing
    assert (js["matched"], js["missing"], js["mismatched"], js["unexpected"]) == (99, len(missing), 0, 0)
    assert len(missing) == 49 and js["complete"] is False and js["ok"] is True
    for k in matched:
        assert by[k]["sha256"] == table[k][1]
    text = run("verify", "--model", PARTIAL, check=0).stdout
    assert "99 matched" in text and "INCOMPLETE" in text


def test_verify_synthetic_match_mismatch(tmp_path):
    tensors, table, matched = genuine()
    items, corrupt = [], "h.3.ln_1.weight"
    for i, (k, (dt, shape, raw)) in enumerate(sorted(tensors.items())):
        if k == corrupt:
            b = bytearray(raw)
            b[100] ^= 0x01
            raw = bytes(b)
        name = ("transformer." + k) if i % 2 else k  # both naming styles
        items.append((name, raw, dt, shape))
    items.append(("foo.weight", np.zeros(4, np.float32).tobytes(), "F32", [4]))
    f = tmp_path / "mixed.safetensors"
    write_safetensors(f, items)
    p = run("verify", "--model", f, "--json", check=1)
    js = json.loads(p.stdout)
    by = {t["name"]: t["status"] for t in js["tensors"]}
    assert by["transformer." + corrupt] == "mismatched"
    assert by["transformer.foo.weight"] == "unexpected"
    assert (js["matched"], js["mismatched"], js["unexpected"]) == (98, 1, 1)
    # a bf16 copy of a genuine tensor cannot match; the report says why
    k = "wpe.weight"
    dt, shape, raw = tensors[k]
    x = np.frombuffer(raw, "<f4").reshape(shape)
    f2 = tmp_path / "bf16.safetensors"
    write_safetensors(f2, [(k, x, "BF16")])
    js = json.loads(run("verify", "--model", f2, "--json", check=1).stdout)
    t = [t for t in js["tensors"] if t["name"] == "transformer." + k][0]
    assert t["status"] == "mismatched" and "BF16" in t["note"]


def test_verify_custom_table_all_formats(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=5)
    tsv = tmp_path / "t.tsv"
    lines = ["# name\tbytes\tsha256"] + [
        f"transformer.{k}\t{v.nbytes}\t{hashlib.sha256(v.astype('<f4').tobytes()).hexdigest()}" for k, v in p.items()]
    tsv.write_text("\n".join(lines) + "\n")
    d = write_hf_dir(tmp_path / "m", p, config(L, H, C, T, V))
    write_llmc(tmp_path / "v3.bin", p, L, H, C, T, V, 3)
    write_llmc(tmp_path / "v5.bin", p, L, H, C, T, V, 5)
    for path in [d, d / "model.safetensors", tmp_path / "v3.bin"]:
        js = json.loads(run("verify", "--model", path, "--table", tsv, "--json", check=0).stdout)
        assert js["matched"] == len(p) and js["complete"] is True, path
    js = json.loads(run("verify", "--model", tmp_path / "v5.bin", "--table", tsv, "--json", check=1).stdout)
    assert js["mismatched"] > 0 and any("bf16" in t.get("note", "") for t in js["tensors"])
    # a malformed table is an error naming it and the line
    bad = tmp_path / "bad.tsv"
    bad.write_text("transformer.wte.weight\t12\tnothex\n")
    r = run("verify", "--model", d, "--table", bad, check=1)
    assert "bad.tsv" in r.stderr and "line 1" in r.stderr


def test_verify_warns_nonfinite_tensors(tmp_path):
    """verify hashes NaN/Inf weights as they are (the table decides) and warns naming the file,
    the tensor, the count and the first flat index (HF layout), in every format."""
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=7)
    p["h.0.mlp.c_fc.weight"] = p["h.0.mlp.c_fc.weight"].copy()
    p["h.0.mlp.c_fc.weight"].flat[[3, 9]] = [np.nan, np.inf]
    p["ln_f.bias"] = p["ln_f.bias"].copy()
    p["ln_f.bias"][1] = -np.inf
    tsv = tmp_path / "t.tsv"
    tsv.write_text("".join(f"transformer.{k}\t{v.nbytes}\t{hashlib.sha256(v.astype('<f4').tobytes()).hexdigest()}\n"
                           for k, v in p.items()))
    d = write_hf_dir(tmp_path / "m", p, config(L, H, C, T, V))
    write_llmc(tmp_path / "v3.bin", p, L, H, C, T, V, 3)
    for path, shown in [(d, d / "model.safetensors"), (tmp_path / "v3.bin", tmp_path / "v3.bin")]:
        r = run("verify", "--model", path, "--table", tsv, "--json", check=0)
        assert json.loads(r.stdout)["matched"] == len(p)  # NaN/Inf bits hash like any others
        for tensor, count, first in [("h.0.mlp.c_fc.weight", 2, 3), ("ln_f.bias", 1, 1)]:
            want = f"{shown}: tensor {tensor} has {count} NaN/Inf values (first at flat index {first})"
            assert any(l.endswith(want) for l in r.stderr.splitlines()), (want, r.stderr)
    r = run("verify", "--model", d, "--table", tsv, check=0)  # clean tensors: no warning for them
    assert "wte.weight has" not in r.stderr


# ---- bad input ------------------------------------------------------------------------------------


def good_dir(tmp_path, **cfg_extra):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=6)
    return write_hf_dir(tmp_path / "good", p, config(L, H, C, T, V, **cfg_extra)), p


def expect_fail(path, *words, cmd="info"):
    args = [cmd, "--model", path] + (["--no-hash"] if cmd == "info" else [])
    r = run(*args)
    assert r.returncode == 1, f"{path}: exit {r.returncode}\n{r.stdout}{r.stderr}"
    for w in words:
        assert w in r.stderr, f"'{w}' not in: {r.stderr}"
    return r


def test_truncated_at_every_boundary(tmp_path):
    d, _ = good_dir(tmp_path)
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    for cut in [0, 4, 8, 8 + n // 2, 8 + n, 8 + n + 1, len(raw) // 2 + 3, len(raw) - 1]:
        t = tmp_path / f"cut{cut}"
        t.mkdir()
        (t / "config.json").write_text((d / "config.json").read_text())
        (t / "model.safetensors").write_bytes(raw[:cut])
        r = expect_fail(t, "model.safetensors")
        assert any(w in r.stderr for w in ("truncated", "too short", "outside the data", "exceeds", "JSON")), r.stderr
        expect_fail(t / "model.safetensors", "model.safetensors", cmd="verify")


def rewrite_header(d, fn):
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    fn(header)
    h = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + raw[8 + n :])


def test_lying_headers(tmp_path):
    d, _ = good_dir(tmp_path)
    raw = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw[8:])  # length lies
    expect_fail(d, "model.safetensors", "header length")
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + raw[8:])
    expect_fail(d, "model.safetensors", "limit")
    cases = {
        "past the end": (lambda h: h["wpe.weight"].update(data_offsets=[10**9, 10**9 + 24 * 16 * 4]), "outside"),
        "overlap": (lambda h: h["wpe.weight"].update(data_offsets=h["wte.weight"]["data_offsets"][:1] + [
            h["wte.weight"]["data_offsets"][0] + 24 * 16 * 4]), "overlap"),
        "overflow": (lambda h: h["wpe.weight"].update(shape=[2**32, 2**32, 2**10]), "overflow"),
        "dtype": (lambda h: h["wpe.weight"].update(dtype="F33"), "unknown dtype"),
        "int dtype": (lambda h: h["ln_f.bias"].update(dtype="I32"), "not a float type"),
    }
    for name, (fn, word) in cases.items():
        d2, _ = good_dir(tmp_path / name.replace(" ", "_"))
        rewrite_header(d2, fn)
        expect_fail(d2, word)


def test_missing_wrong_extra_tensors(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=7)
    q = dict(p)
    del q["h.1.mlp.c_fc.bias"]
    expect_fail(write_hf_dir(tmp_path / "miss", q, config(L, H, C, T, V)), "h.1.mlp.c_fc.bias", "missing")
    q = dict(p)
    q["h.0.attn.c_attn.weight"] = q["h.0.attn.c_attn.weight"].T.copy()
    expect_fail(write_hf_dir(tmp_path / "shape", q, config(L, H, C, T, V)),
                "h.0.attn.c_attn.weight: expected [16, 48], file has [48, 16]", "model.safetensors")
    expect_fail(write_hf_dir(tmp_path / "cfg", p, config(L + 1, H, C, T, V)), "h.2.ln_1.weight", "missing")
    expect_fail(write_hf_dir(tmp_path / "cfg2", p, config(L, H, C, T + 1, V)), "wpe.weight: expected [25, 16]")
    q = dict(p)
    q["h.0.attn.q_norm.weight"] = np.ones(C, np.float32)
    expect_fail(write_hf_dir(tmp_path / "extra", q, config(L, H, C, T, V)), "h.0.attn.q_norm.weight")
    expect_fail(write_hf_dir(tmp_path / "untied", p, config(L, H, C, T, V),
                             extra=[("lm_head.weight", p["wte.weight"] + 1, "F32")]), "lm_head.weight")
    expect_fail(write_hf_dir(tmp_path / "eps", p, config(L, H, C, T, V, layer_norm_epsilon=1e-6)),
                "layer_norm_epsilon")
    d = write_hf_dir(tmp_path / "nocfg", p, config(L, H, C, T, V))
    (d / "config.json").unlink()
    expect_fail(d, "config.json")


def test_nan_weights_warn(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=8)
    p["h.1.attn.c_proj.weight"][3, 5] = np.nan
    p["ln_f.bias"][0] = np.inf
    d = write_hf_dir(tmp_path / "nan", p, config(L, H, C, T, V))
    r = run("info", "--model", d, "--no-hash", check=0)
    assert "h.1.attn.c_proj.weight" in r.stderr and "NaN/Inf" in r.stderr
    assert "ln_f.bias" in r.stderr
    write_llmc(tmp_path / "nan.bin", p, L, H, C, T, V, 3)
    r = run("info", "--model", tmp_path / "nan.bin", "--no-hash", check=0)
    assert "h.1.attn.c_proj.weight" in r.stderr and "NaN/Inf" in r.stderr


def test_bad_llmc(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=9)
    f = tmp_path / "ok.bin"
    write_llmc(f, p, L, H, C, T, V, 3)
    raw = f.read_bytes()
    cases = {
        "magic.bin": (struct.pack("<i", 20240325) + raw[4:], "bad magic"),
        "version.bin": (raw[:4] + struct.pack("<i", 4) + raw[8:], "version 4"),
        "short.bin": (raw[:-1], "truncated"),
        "long.bin": (raw + b"\0", "extra bytes"),
        "header.bin": (raw[:1000], "1024-byte"),
        "heads.bin": (raw[:20] + struct.pack("<i", 5) + raw[24:], "n_head 5"),
        "empty.bin": (b"", "1024-byte"),
    }
    for name, (b, word) in cases.items():
        (tmp_path / name).write_bytes(b)
        expect_fail(tmp_path / name, name, word)
        expect_fail(tmp_path / name, name, cmd="verify")


def test_sharded_missing_shard(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=10)
    write_safetensors(tmp_path / "a.safetensors", [(k, v, "F32") for k, v in p.items()])
    wm = {k: "a.safetensors" for k in p}
    wm["ln_f.bias"] = "b.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    (tmp_path / "config.json").write_text(json.dumps(config(L, H, C, T, V)))
    expect_fail(tmp_path, "b.safetensors", "missing")
    expect_fail(tmp_path, "b.safetensors", cmd="verify")


def test_cli_usage(tmp_path):
    for cmd in ("verify", "info", "make-model"):
        assert "usage: attnlim " + cmd in run(cmd, "--help", check=0).stdout
    assert "--model" in run("verify", check=2).stderr
    assert "--out" in run("make-model", "--preset", "124M", check=2).stderr
    assert "safetensors or llmc" in run("make-model", "--preset", "124M", "--format", "gguf", "--out", tmp_path / "x",
                                        check=2).stderr
    r = run("make-model", "--layers", 2, "--heads", 3, "--embd", 8, "--ctx", 4, "--vocab", 10, "--out", tmp_path / "x",
            check=1)
    assert "n_head 3 does not divide n_embd 8" in r.stderr and not (tmp_path / "x").exists()
    assert "/nonexistent" in run("verify", "--model", "/nonexistent", check=1).stderr


# ---- model identity, and what capture / perplexity / info say about their outputs ----------------
# (expected values from the files themselves with hashlib, numpy and ctypes on the runtime
# libraries; never from our own output)


def capture(*args, check=0, cwd=None):
    p = subprocess.run([BIN, "capture", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert p.returncode >= 0, f"crashed with signal {-p.returncode}\n{p.stderr}"
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def files_of(d, names, roles):
    return [{"name": n, "role": roles[n], "bytes": (pathlib.Path(d) / n).stat().st_size,
             "sha256": file_sha(pathlib.Path(d) / n)} for n in sorted(names, key=str.encode)]


def strip_paths(files):
    return [{k: v for k, v in f.items() if k != "path"} for f in files]


def write_ids(path, ids):
    pathlib.Path(path).write_text(" ".join(map(str, ids)) + "\n")
    return path


def test_identity_covers_config_index_and_every_shard(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=11)
    d = write_hf_dir(tmp_path / "one", p, config(L, H, C, T, V))
    js = info(d)
    assert js["sha256"] == identity(d, ["config.json", "model.safetensors"])
    assert strip_paths(js["files"]) == files_of(d, ["config.json", "model.safetensors"],
                                   {"config.json": "config", "model.safetensors": "weights"})
    assert all(os.path.samefile(f["path"], d / f["name"]) for f in js["files"])  # absolute paths
    assert info(d / "model.safetensors")["sha256"] == js["sha256"]  # the bare file: config beside it
    # config.json is part of the identity: a change there is a different model
    cfg = config(L, H, C, T, V, _name_or_path="renamed")
    (d / "config.json").write_text(json.dumps(cfg))
    js2 = info(d)
    assert js2["sha256"] == identity(d, ["config.json", "model.safetensors"]) != js["sha256"]

    # sharded: config, index and all three shards
    s = tmp_path / "sharded"
    s.mkdir()
    names, wm = list(p), {}
    shards = {f"model-{i + 1:05d}-of-00003.safetensors": names[i::3] for i in range(3)}
    for fn, ns in shards.items():
        write_safetensors(s / fn, [(k, p[k], "F32") for k in ns])
        wm.update({k: fn for k in ns})
    (s / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (s / "config.json").write_text(json.dumps(config(L, H, C, T, V)))
    all_files = ["config.json", "model.safetensors.index.json", *shards]
    roles = {"config.json": "config", "model.safetensors.index.json": "index", **{fn: "weights" for fn in shards}}
    js = info(s)
    assert js["sha256"] == identity(s, all_files)
    assert strip_paths(js["files"]) == files_of(s, all_files, roles)
    # a weight changed in the last shard, index untouched: another identity (the old hash of the
    # index alone could not see it)
    last = list(shards)[-1]
    q = {k: p[k].copy() for k in shards[last]}
    q[shards[last][0]].flat[0] += 1.0
    write_safetensors(s / last, [(k, q[k], "F32") for k in shards[last]])
    js3 = info(s)
    assert js3["sha256"] == identity(s, all_files) != js["sha256"]
    assert {f["name"]: f["sha256"] for f in js3["files"]}[last] == file_sha(s / last)

    # llm.c: the one file (its header is the config)
    write_llmc(tmp_path / "m.bin", p, L, H, C, T, V, 3)
    js = info(tmp_path / "m.bin")
    assert js["sha256"] == identity(tmp_path, ["m.bin"])
    assert strip_paths(js["files"]) == files_of(tmp_path, ["m.bin"], {"m.bin": "weights"})

    # capture's manifest: the same identity and files, the path absolute and as given
    ids = write_ids(tmp_path / "ids.txt", np.random.default_rng(1).integers(0, V, 40))
    capture("--model", "sharded", "--tokens", ids, "--length", 8, "--out", tmp_path / "cap", cwd=tmp_path)
    man = json.loads((tmp_path / "cap" / "manifest.json").read_text())["model"]
    assert man["sha256"] == identity(s, all_files)
    assert strip_paths(man["files"]) == files_of(s, all_files, roles)
    assert [f["path"] for f in man["files"]] == [str(s.resolve() / f) for f in sorted(all_files, key=str.encode)]
    assert man["path_given"] == "sharded"
    assert man["path"] == str((s / "model.safetensors.index.json").resolve())


def runtime_versions():
    import ctypes.util
    out = {}
    cj = ctypes.CDLL(ctypes.util.find_library("cjson"))
    cj.cJSON_Version.restype = ctypes.c_char_p
    out["cjson"] = cj.cJSON_Version().decode()
    ca = ctypes.CDLL(ctypes.util.find_library("cairo"))
    ca.cairo_version_string.restype = ctypes.c_char_p
    out["cairo"] = ca.cairo_version_string().decode()
    cr = ctypes.CDLL(ctypes.util.find_library("crypto"))
    cr.OpenSSL_version.restype = ctypes.c_char_p
    cr.OpenSSL_version.argtypes = [ctypes.c_int]
    out["openssl"] = cr.OpenSSL_version(0).decode()  # OPENSSL_VERSION
    pc = ctypes.CDLL(ctypes.util.find_library("pcre2-8"))
    buf = ctypes.create_string_buffer(64)
    assert pc.pcre2_config_8(11, buf) > 0  # PCRE2_CONFIG_VERSION
    out["pcre2"] = buf.value.decode()
    return out


def test_capture_manifest_describes_itself(tmp_path):
    model = tmp_path / "m"
    run("make-model", "--layers", 2, "--heads", 2, "--embd", 16, "--ctx", 64, "--vocab", 50257, "--seed", 3,
        "--out", model, check=0)
    out = tmp_path / "cap"
    capture("--model", model, "--corpus", "war-and-peace", "--length", 24, "--what", "logits,weights", "--out", out)
    man = json.loads((out / "manifest.json").read_text())
    v = man["versions"]
    for k, want in runtime_versions().items():
        assert v[k] == want, k
    assert v["openblas"].startswith("OpenBLAS") and v["compiler"].split()[0] in ("gcc", "clang")
    git = subprocess.run(["git", "-C", SRC, "rev-parse", "--git-dir"], capture_output=True)
    if git.returncode == 0 and v["git_commit"] != "unknown":
        assert len(v["git_commit"]) == 40
        assert subprocess.run(["git", "-C", SRC, "cat-file", "-e", v["git_commit"] + "^{commit}"]).returncode == 0
    else:
        assert v["git_commit"] == "unknown"
    # the tokenizer files: each hashed as it is, and against the shared data's pinned list
    pinned = dict(reversed(line.split()) for line in open(os.path.join(DATA, "SHA256SUMS")) if line.strip())
    tz = man["tokens"]["tokenizer"]
    assert [f["name"] for f in tz["files"]] == ["encoder.json", "vocab.bpe"]
    for f in tz["files"]:
        assert f["sha256"] == file_sha(f["path"]) == pinned["gpt2/" + f["name"]]
        assert f["bytes"] == os.path.getsize(f["path"]) and os.path.isabs(f["path"])
    lines = "".join(f"{f['sha256']}  {f['name']}\n" for f in tz["files"])
    assert tz["sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert man["tokens"]["invalid_utf8_at"] is None
    # the model: absolute path and as given, identity, no load warnings
    assert man["model"]["path"] == str((model / "model.safetensors").resolve())
    assert man["model"]["path_given"] == str(model)
    assert man["model"]["sha256"] == identity(model, ["config.json", "model.safetensors"])
    assert man["model"]["load_warnings"] == [] and man["nonfinite_values"] == 0
    # the masked-entry convention it states is the one the arrays follow
    conv = man["conventions"]["masked_entries"]
    assert "-inf" in conv and "weights 0" in conv
    T = 24
    above = np.triu(np.ones((T, T), bool), 1)
    for l in range(2):
        z, w = np.load(out / f"layer{l}.logits.npy"), np.load(out / f"layer{l}.weights.npy")
        assert np.all(z[:, above] == -np.inf) and np.all(np.isfinite(z[:, ~above]))
        assert np.all(w[:, above] == 0) and np.all(np.isfinite(w))


def test_nonfinite_outputs_fail_unless_allowed(tmp_path):
    L, H, C, T, V = SHAPE.values()
    p = random_gpt2(L, C, T, V, seed=12)
    p["h.0.attn.c_attn.weight"][3, 5] = np.nan  # column 5: q of head 1 (d_head 4)
    d = write_hf_dir(tmp_path / "nan", p, config(L, H, C, T, V))
    ids = write_ids(tmp_path / "ids.txt", np.random.default_rng(2).integers(0, V, 40))
    # info (and verify against a table of these very tensors) only warn: exit 0
    r = run("info", "--model", d, "--json", check=0)
    assert "h.0.attn.c_attn.weight" in r.stderr and "NaN/Inf" in r.stderr
    lw = json.loads(r.stdout)["load_warnings"]
    assert [(w["tensor"], w["nonfinite"], w["first_index"]) for w in lw] == [("h.0.attn.c_attn.weight", 1, 3 * 3 * C + 5)]
    tsv = tmp_path / "t.tsv"
    tsv.write_text("".join(f"transformer.{k}\t{v.nbytes}\t{hashlib.sha256(v.astype('<f4').tobytes()).hexdigest()}\n"
                           for k, v in p.items()))
    run("verify", "--model", d, "--table", tsv, check=0)  # verify compares bytes: no new failure
    # capture: an error naming the layer, the array, the head, the model file and the tensor
    out = tmp_path / "cap"
    r = capture("--model", d, "--tokens", ids, "--length", 10, "--what", "weights", "--out", out, check=1)
    for needle in ("layer 0 weights", "NaN/Inf", "head 1", str(d / "model.safetensors"), "h.0.attn.c_attn.weight",
                   "--allow-nonfinite"):
        assert needle in r.stderr, (needle, r.stderr)
    assert not out.exists() and not [f for f in os.listdir(tmp_path) if f.startswith(".capture-")]
    # --allow-nonfinite: written, counted per file, the load warning recorded
    capture("--model", d, "--tokens", ids, "--length", 10, "--what", "logits,weights", "--out", out,
            "--allow-nonfinite")
    man = json.loads((out / "manifest.json").read_text())
    assert [w["tensor"] for w in man["model"]["load_warnings"]] == ["h.0.attn.c_attn.weight"]
    assert man["model"]["load_warnings"][0]["file"] == str(d / "model.safetensors")
    above = np.triu(np.ones((10, 10), bool), 1)
    total = 0
    for f in man["files"]:
        a = np.load(out / f["file"])
        bad = ~np.isfinite(a)
        if f["what"] == "logits":
            bad &= ~(above[None] & (a == -np.inf))  # the masked entries are -inf by convention
        assert f.get("nonfinite", 0) == int(bad.sum()), f
        total += int(bad.sum())
    assert total > 0 and man["nonfinite_values"] == total
    # perplexity: a NaN NLL is an error naming the window and the tensor
    r = run("perplexity", "--model", d, "--tokens", ids, "--length", 10, check=1)
    assert "window 0" in r.stderr and "NaN" in r.stderr and "h.0.attn.c_attn.weight" in r.stderr
    r = run("perplexity", "--model", d, "--tokens", ids, "--length", 10, "--allow-nonfinite", "--json", check=0)
    assert json.loads(r.stdout)["nll"] is None and "warning" in r.stderr

    # a NaN that reaches no captured array (the final LayerNorm): capture succeeds, says so
    p = random_gpt2(L, C, T, V, seed=12)
    p["ln_f.bias"][2] = np.inf
    d2 = write_hf_dir(tmp_path / "inf", p, config(L, H, C, T, V))
    out2 = tmp_path / "cap2"
    r = capture("--model", d2, "--tokens", ids, "--length", 10, "--what", "weights", "--out", out2)
    assert "ln_f.bias" in r.stderr
    man = json.loads((out2 / "manifest.json").read_text())
    assert [(w["tensor"], w["nonfinite"]) for w in man["model"]["load_warnings"]] == [("ln_f.bias", 1)]
    assert man["nonfinite_values"] == 0
    r = run("perplexity", "--model", d2, "--tokens", ids, "--length", 10, check=1)
    assert "ln_f.bias" in r.stderr and "window 0" in r.stderr


def test_invalid_utf8_same_warning_everywhere(tmp_path):
    model = tmp_path / "m"
    run("make-model", "--layers", 1, "--heads", 2, "--embd", 16, "--ctx", 64, "--vocab", 50257, "--seed", 4,
        "--out", model, check=0)
    text = b"It was in July, 1805, and the speaker was the well-known Anna Pavlovna. \xff\xfe" + b"And then " * 20
    f = tmp_path / "bad.txt"
    f.write_bytes(text)
    try:
        text.decode("utf-8")
        raise AssertionError("the text must be invalid")
    except UnicodeDecodeError as e:
        at = e.start
    want = f"warning: {f} is not valid UTF-8 at byte {at} (0x{text[at]:02x});"
    lines = {}
    for cmd, args in (("tokenize", [f]),
                      ("capture", ["--model", model, "--corpus", f, "--length", 16, "--out", tmp_path / "cap"]),
                      ("perplexity", ["--model", model, "--corpus", f, "--length", 16])):
        r = run(cmd, *args, check=0)
        got = [ln for ln in r.stderr.splitlines() if "UTF-8" in ln]
        assert len(got) == 1 and got[0].startswith(f"attnlim {cmd}: {want}"), (cmd, r.stderr)
        lines[cmd] = got[0][len(f"attnlim {cmd}: "):]
    assert len(set(lines.values())) == 1  # the same words after the command's name
    man = json.loads((tmp_path / "cap" / "manifest.json").read_text())
    assert man["tokens"]["invalid_utf8_at"] == at


def test_perplexity_window_spread(tmp_path):
    L, H, C, T, V = SHAPE.values()
    d = write_hf_dir(tmp_path / "m", random_gpt2(L, C, T, V, seed=13), config(L, H, C, T, V))
    ids = write_ids(tmp_path / "ids.txt", np.random.default_rng(3).integers(0, V, 7 * 12))
    names = ["min", "median", "max", "p2_5", "p97_5"]
    pct = [0, 50, 100, 2.5, 97.5]
    js = json.loads(run("perplexity", "--model", d, "--tokens", ids, "--length", 12, "--windows", 7, "--json",
                        check=0).stdout)
    per = np.array(js["per_window_nll"])
    assert per.shape == (7,) and len(set(per.tolist())) == 7
    assert abs(js["nll"] - per.mean()) <= 1e-12 * abs(per.mean())
    for spread, vals in (("nll_spread", per), ("perplexity_spread", np.exp(per))):
        want = np.percentile(vals, pct)  # numpy's default (linear)
        got = [js[spread][n] for n in names]
        assert np.allclose(got, want, rtol=1e-12, atol=0), (spread, got, want)
    text = run("perplexity", "--model", d, "--tokens", ids, "--length", 12, "--windows", 7, check=0).stdout
    assert "95% interval" in text and f"min {per.min():.6f}" in text
    # one window: the spread is the value itself
    js = json.loads(run("perplexity", "--model", d, "--tokens", ids, "--length", 12, "--json", check=0).stdout)
    assert all(js["nll_spread"][n] == js["nll"] for n in names)
    # the help names the keys the output has
    help_text = run("perplexity", "--help", check=0).stdout
    for key in ("per_window_nll", "nll_spread", "perplexity_spread"):
        assert f'"{key}"' in help_text and key in js
    assert all(f'"{n}"' in help_text for n in names)
    assert '"per_window"' not in help_text


def test_model_name_from_dot_and_list_items(tmp_path):
    L, H, C, T, V = SHAPE.values()
    d = write_hf_dir(tmp_path / "my-model", random_gpt2(L, C, T, V, seed=14), config(L, H, C, T, V))
    for spelling in (".", "./", "../my-model/"):
        r = subprocess.run([BIN, "info", "--model", spelling, "--json", "--no-hash"], capture_output=True,
                           text=True, cwd=d, check=True)
        assert json.loads(r.stdout)["name"] == "my-model", spelling
    ids = write_ids(tmp_path / "ids.txt", range(20))
    for what in ("weights,", ",weights", "weights,,q"):
        r = capture("--model", d, "--tokens", ids, "--length", 4, "--what", what, "--out", tmp_path / "x", check=2)
        assert "empty item" in r.stderr
    assert not (tmp_path / "x").exists()
