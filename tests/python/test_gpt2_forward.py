"""The GPT-2 forward, capture and perplexity against an independent float64 numpy GPT-2
(gpt2_ref.py), on random checkpoints of several shapes written here with numpy, in both
checkpoint formats (HF safetensors, llm.c .bin), over several windows.

HF transformers' GPT2Model is not used as a second reference: transformers is not installed
(Debian's torch is 1.13, older than current transformers wants); the numpy reference is
written from the architecture alone.
"""
import ctypes
import json
import os
import subprocess

import numpy as np
import pytest

import gpt2_ref as R

BIN = os.environ.get("ATTNLIM_BIN")
LIB = os.environ.get("ATTNLIM_LIB")
if not BIN or not LIB:
    raise RuntimeError("ATTNLIM_BIN and ATTNLIM_LIB must be set (run through ctest)")

# (n_layer, n_head, n_embd, n_ctx, vocab, seed)
SHAPES = [(2, 2, 64, 64, 100, 1), (3, 4, 128, 256, 300, 2), (1, 3, 48, 96, 77, 3)]


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Info(ctypes.Structure):
    _fields_ = [("family", ctypes.c_char * 16), ("name", ctypes.c_char * 128),
                ("path", ctypes.c_char * 1024), ("sha256", ctypes.c_char * 65),
                ("dtype", ctypes.c_char * 16)] + [
        (n, ctypes.c_int) for n in ("n_layer", "n_head", "n_kv_head", "d_model", "d_head",
                                    "d_ff", "n_ctx", "vocab_size", "causal")] + [
        ("n_params", ctypes.c_int64)]


def _lib():
    lib = ctypes.CDLL(LIB)
    lib.al_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.POINTER(Err)]
    lib.al_model_free.argtypes = [ctypes.c_void_p]
    lib.al_model_get_info.argtypes = [ctypes.c_void_p]
    lib.al_model_get_info.restype = ctypes.POINTER(Info)
    fp = ctypes.POINTER(ctypes.c_float)
    lib.al_model_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                     ctypes.c_void_p, fp, fp, ctypes.POINTER(Err)]
    lib.al_model_forward.restype = ctypes.c_int
    return lib


LIBC = _lib()


class CModel:
    """An al_model opened through the C API; forward() returns (final_hidden, logits)."""

    def __init__(self, path):
        self.m, err = ctypes.c_void_p(), Err()
        rc = LIBC.al_model_open(str(path).encode(), ctypes.byref(self.m), ctypes.byref(err))
        assert rc == 0, err.msg.decode()
        self.info = LIBC.al_model_get_info(self.m).contents

    def forward(self, tokens):
        err, T = Err(), len(tokens)
        ids = np.ascontiguousarray(tokens, dtype=np.int32)
        hid = np.zeros((T, self.info.d_model), np.float32)
        lg = np.zeros((T, self.info.vocab_size), np.float32)
        fp = ctypes.POINTER(ctypes.c_float)
        rc = LIBC.al_model_forward(self.m, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), T,
                                   None, lg.ctypes.data_as(fp), hid.ctypes.data_as(fp),
                                   ctypes.byref(err))
        assert rc == 0, err.msg.decode()
        return hid, lg

    def close(self):
        LIBC.al_model_free(self.m)


def c_forward(path, tokens):
    """(final_hidden [T, C], logits [T, V]) from al_model_forward on a freshly opened model."""
    m = CModel(path)
    try:
        return m.forward(tokens)
    finally:
        m.close()


def run(*args, ok=True):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=120)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def make(tmp_path, shape, fmt, prefix=""):
    L, H, C, ctx, V, seed = shape
    params, cfg = R.random_gpt2(L, H, C, ctx, V, seed)
    if fmt == "safetensors":
        d = tmp_path / f"st{seed}{prefix[:1]}"
        d.mkdir()
        path = R.save_hf(d, params, cfg, prefix)
    else:
        path = R.save_llmc(tmp_path / f"gpt2_{seed}.bin", params, cfg,
                           padded_vocab=(V + 63) // 64 * 64)
    return path, params, cfg


def corpus_ids(n, V, seed=0):
    return np.random.default_rng(seed).integers(0, V, n)


def write_ids(path, ids):
    path.write_text("\n".join(" ".join(map(str, ids[i:i + 17])) for i in range(0, len(ids), 17)))
    return path


# ---- the forward -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", ["safetensors", "llmc"])
def test_forward_matches_reference(tmp_path, shape, fmt):
    path, params, cfg = make(tmp_path, shape, fmt)
    ids = corpus_ids(4 * shape[3], shape[4], seed=shape[5])
    ctx = shape[3]
    m = CModel(path)  # one model, forwards of several lengths in turn (buffers reused)
    try:
        for T, k in ((ctx, 0), (ctx // 2 + 3, 1), (1, 5), (ctx, 3)):  # several windows
            win = ids[k * T:(k + 1) * T]
            ref = R.forward(params, cfg, win, capture=False)
            hid, lg = m.forward(win)
            assert np.abs(hid - ref["final"]).max() <= 1e-4
            scale = max(1.0, np.abs(ref["logits"]).max())
            assert np.abs(lg - ref["logits"]).max() <= 1e-4 * scale
    finally:
        m.close()


def test_llmc_bf16(tmp_path):
    """llm.c version 5 (bf16 weights): the reference runs on the bf16-rounded weights."""
    L, H, C, ctx, V, seed = SHAPES[1]
    params, cfg = R.random_gpt2(L, H, C, ctx, V, seed)
    path = R.save_llmc(tmp_path / "gpt2_bf16.bin", params, cfg, padded_vocab=384, version=5)
    rounded = R.bf16_round(params)
    assert any(np.any(rounded[k] != params[k]) for k in params)  # rounding did something
    win = corpus_ids(ctx, V, 5)
    hid, lg = c_forward(path, win)
    ref = R.forward(rounded, cfg, win, capture=False)
    assert np.abs(hid - ref["final"]).max() <= 1e-4
    assert np.abs(lg - ref["logits"]).max() <= 1e-4 * max(1.0, np.abs(ref["logits"]).max())


OBSERVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(Err))


class CaptureRequest(ctypes.Structure):
    _fields_ = [("what", ctypes.c_uint), ("layers", ctypes.c_void_p), ("heads", ctypes.c_void_p),
                ("fn", OBSERVER), ("user", ctypes.c_void_p)]


def test_observer_stops_forward(tmp_path):
    """An observer returning non-zero stops the forward: its error comes back, nothing runs
    after that layer, and the model still works afterwards."""
    path, params, cfg = make(tmp_path, SHAPES[1], "safetensors")
    layers_seen = []

    def stop_at_1(user, cap, err):
        layer = ctypes.cast(cap, ctypes.POINTER(ctypes.c_int))[0]  # al_capture.layer
        layers_seen.append(layer)
        if layer == 1:
            err[0].code = 8
            err[0].msg = b"stopped by the test at layer 1"
            return 8
        return 0

    fn = OBSERVER(stop_at_1)
    req = CaptureRequest(what=1 << 4, layers=None, heads=None, fn=fn, user=None)
    m = CModel(path)
    try:
        win = corpus_ids(30, cfg["vocab_size"])
        ids = np.ascontiguousarray(win, dtype=np.int32)
        err = Err()
        rc = LIBC.al_model_forward(m.m, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), 30,
                                   ctypes.byref(req), None, None, ctypes.byref(err))
        assert rc == 8 and b"stopped by the test at layer 1" in err.msg
        assert layers_seen == [0, 1]
        hid, _ = m.forward(win)
        assert np.abs(hid - R.forward(params, cfg, win, capture=False)["final"]).max() <= 1e-4
    finally:
        m.close()


def test_transformer_prefix_names(tmp_path):
    path, params, cfg = make(tmp_path, SHAPES[0], "safetensors", prefix="transformer.")
    win = corpus_ids(40, cfg["vocab_size"])
    hid, _ = c_forward(path, win)
    assert np.abs(hid - R.forward(params, cfg, win, capture=False)["final"]).max() <= 1e-4


# ---- capture -----------------------------------------------------------------------------------

ALL = "q,k,v,logits,weights,hidden,embed"


@pytest.mark.parametrize("shape,fmt", [(SHAPES[0], "safetensors"), (SHAPES[1], "llmc"),
                                       (SHAPES[2], "safetensors")])
def test_capture_matches_reference(tmp_path, shape, fmt):
    path, params, cfg = make(tmp_path, shape, fmt)
    L, H, C, ctx, V, seed = shape
    ids = corpus_ids(3 * ctx + 5, V, seed)
    tok = write_ids(tmp_path / "ids.txt", ids)
    D = C // H
    for T, k in ((ctx, 2), (ctx // 3 + 1, 1)):
        out = tmp_path / f"cap{T}_{k}"
        run("capture", "--model", path, "--tokens", tok, "--window", k, "--length", T,
            "--what", ALL, "--out", out, "--threads", 2)
        win = ids[k * T:(k + 1) * T]
        ref = R.forward(params, cfg, win)
        masked = np.triu(np.ones((T, T), bool), 1)
        for l in range(L):
            for name, key, shp in (("q", "q", (H, T, D)), ("k", "k", (H, T, D)),
                                   ("v", "v", (H, T, D)), ("hidden", "hidden", (T, C)),
                                   ("embed", "embed", (T, C))):
                a = np.load(out / f"layer{l}.{name}.npy")
                want = ref[key][l] if key != "embed" else ref["embed"]
                assert a.dtype == np.float32 and a.shape == shp, name
                assert np.abs(a - want).max() <= 1e-4 * max(1.0, np.abs(want).max()), name
            z = np.load(out / f"layer{l}.logits.npy")
            w = np.load(out / f"layer{l}.weights.npy")
            assert z.shape == w.shape == (H, T, T)
            assert np.all(np.isneginf(z[:, masked])) and np.all(w[:, masked] == 0.0)
            zr = ref["z"][l]
            assert np.abs(z[:, ~masked] - zr[:, ~masked]).max() <= 1e-4 * max(1, np.abs(zr[:, ~masked]).max())
            assert np.abs(w - ref["w"][l]).max() <= 1e-5
            assert np.allclose(w.sum(-1), 1.0, atol=1e-5)
            # the test data is not trivial: attention is far from uniform
            assert ref["w"][l][:, T // 2:].max(-1).mean() > 10.0 / T
        man = json.loads((out / "manifest.json").read_text())
        assert man["window"] == k and man["length"] == T
        assert man["token_ids"] == [int(x) for x in win]
        assert len(man["model"]["sha256"]) == 64
        assert man["options"]["what"] == ALL.split(",")
        assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temporary left


def test_capture_selection(tmp_path):
    path, params, cfg = make(tmp_path, SHAPES[1], "safetensors")
    ids = corpus_ids(100, cfg["vocab_size"])
    tok = write_ids(tmp_path / "ids.txt", ids)
    out = tmp_path / "sel"
    run("capture", "--model", path, "--tokens", tok, "--length", 50, "--layers", "0,2",
        "--heads", "1,3", "--what", "k,weights", "--out", out)
    files = sorted(p for p in os.listdir(out))
    assert files == ["layer0.k.npy", "layer0.weights.npy", "layer2.k.npy", "layer2.weights.npy",
                     "manifest.json"]
    ref = R.forward(params, cfg, ids[:50])
    for l in (0, 2):
        assert np.abs(np.load(out / f"layer{l}.weights.npy") - ref["w"][l][[1, 3]]).max() <= 1e-5
        k = np.load(out / f"layer{l}.k.npy")
        assert k.shape == (2, 50, 32)
        assert np.abs(k - ref["k"][l][[1, 3]]).max() <= 1e-4 * np.abs(ref["k"][l]).max()
    man = json.loads((out / "manifest.json").read_text())
    assert man["options"]["layers"] == [0, 2] and man["options"]["heads"] == [1, 3]
    assert man["options"]["kv_head_of_heads"] == [1, 3]


# ---- perplexity --------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["safetensors", "llmc"])
def test_perplexity_matches_reference(tmp_path, fmt):
    path, params, cfg = make(tmp_path, SHAPES[0], fmt)
    ids = corpus_ids(200, cfg["vocab_size"], 9)
    tok = write_ids(tmp_path / "ids.txt", ids)
    T, K = 40, 3
    p = run("perplexity", "--model", path, "--tokens", tok, "--length", T, "--windows", K, "--json")
    got = json.loads(p.stdout)
    nll = [R.nll(R.forward(params, cfg, ids[k * T:(k + 1) * T], capture=False)["logits"],
                 ids[k * T:(k + 1) * T]) for k in range(K)]
    assert np.allclose(got["per_window_nll"], nll, rtol=1e-5, atol=1e-5)
    assert abs(got["perplexity"] - np.exp(np.mean(nll))) <= 1e-4 * np.exp(np.mean(nll))
    p = run("perplexity", "--model", path, "--tokens", tok, "--length", T, "--windows", K)
    assert p.stdout.startswith("perplexity: ")
    assert abs(float(p.stdout.split()[1]) - np.exp(np.mean(nll))) <= 1e-4 * np.exp(np.mean(nll))


# ---- bad input ---------------------------------------------------------------------------------

def test_bad_input(tmp_path):
    path, _, cfg = make(tmp_path, SHAPES[0], "safetensors")
    tok = write_ids(tmp_path / "ids.txt", corpus_ids(150, cfg["vocab_size"]))
    out = tmp_path / "out"

    def fails(args, *needles, cmd="capture"):
        extra = ["--out", out] if cmd == "capture" else []
        p = run(cmd, "--model", path, *args, *extra, ok=False)
        assert p.returncode != 0
        assert p.stdout == ""
        for n in needles:
            assert n in p.stderr, p.stderr
        assert not out.exists() or os.listdir(out) == []  # nothing partial
        return p

    fails(["--tokens", tok, "--length", 65], "exceeds the context", "64")
    fails(["--tokens", tok, "--length", 50, "--window", 3], "window 3", "150 tokens")
    fails(["--tokens", tok, "--length", 0], "--length")
    fails(["--tokens", tok, "--length", 10, "--what", "weights,bogus"], "bogus")
    fails(["--tokens", tok, "--length", 10, "--layers", "2"], "--layers", "0..1")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    fails(["--tokens", empty, "--length", 10], str(empty), "no token ids")
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 x3 4")
    fails(["--tokens", bad, "--length", 2], str(bad), "x3")
    big = tmp_path / "big.txt"
    big.write_text("1 2 100 4")
    fails(["--tokens", big, "--length", 2], str(big), "100", "vocabulary")
    neg = tmp_path / "neg.txt"
    neg.write_text("1 -2 3")
    fails(["--tokens", neg, "--length", 2], str(neg), "-2")
    fails(["--tokens", tmp_path / "missing.txt", "--length", 2], "missing.txt")
    # an --out that cannot be a directory (under a regular file)
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    p = run("capture", "--model", path, "--tokens", tok, "--length", 10, "--out",
            blocker / "sub", ok=False)
    assert p.returncode != 0 and "blocker" in p.stderr
    assert blocker.read_text() == "x"
    # perplexity: the same checks
    fails(["--tokens", tok, "--length", 65], "exceeds the context", cmd="perplexity")
    fails(["--tokens", tok, "--length", 50, "--windows", 4], "window 3", cmd="perplexity")
    fails(["--tokens", empty, "--length", 10], "no token ids", cmd="perplexity")
    fails(["--tokens", tok, "--length", 1], "--length", cmd="perplexity")


# ---- the War and Peace corpus through the model's tokenizer ------------------------------------

def _war_and_peace_body():
    src = os.environ["ATTNLIM_SOURCE_DIR"]
    path = os.path.join(src, "..", "shared", "data", "war_and_peace", "pg2600.txt")
    raw = open(path, "rb").read().replace(b"\r\n", b"\n")
    start = raw.index(b"\nBOOK ONE: 1805\n") + 1
    return raw[start:start + 20000].decode("utf-8"), os.path.dirname(os.path.dirname(path))


def test_capture_corpus_window(tmp_path):
    """--corpus war-and-peace: the window's ids are those HF tokenizers gives for the body
    (METHOD section 1; a prefix of the body is enough for the first windows)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    text, data = _war_and_peace_body()
    bpe = models.BPE.from_file(os.path.join(data, "gpt2", "encoder.json"),
                               os.path.join(data, "gpt2", "vocab.bpe"))
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    want = tk.encode(text).ids[:200]
    path, params, cfg = make(tmp_path, (1, 2, 32, 64, 50257, 4), "safetensors")
    out = tmp_path / "wp"
    run("capture", "--model", path, "--corpus", "war-and-peace", "--window", 3, "--length", 32,
        "--what", "weights", "--out", out)
    man = json.loads((out / "manifest.json").read_text())
    assert man["token_ids"] == want[96:128]
    assert man["tokens"]["corpus"] == "war-and-peace" and man["first_token"] == 96
    ref = R.forward(params, cfg, want[96:128])
    assert np.abs(np.load(out / "layer0.weights.npy") - ref["w"][0]).max() <= 1e-5
