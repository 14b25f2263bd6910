"""al_model_forward_opts: a forward does only the work its consumer needs (include/attnlim.h).
AL_LOGITS_LAST computes the last token's final hidden state and logits only (the top layer's
attention rows, output projection and MLP for that row, the LM head for that row); the result is
the last row of AL_LOGITS_ALL's to float32 rounding (a 1-row product goes through another BLAS
kernel than a T-row one: up to ~1e-5 relative, not bit for bit), and within the usual tolerance
of the float64 references (llama_ref: Llama GGUF; transformers' float64 eager forward: Qwen2, Gemma 2, GPT-NeoX;
gpt2_ref: GPT-2). AL_LOGITS_NONE with a last layer runs no layer above it: the captures are those
of the full forward, bit for bit. Bad options are errors, never a partial forward."""
import ctypes

import numpy as np
import pytest
from transformers import (Gemma2Config, Gemma2ForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

import gpt2_ref
import hf_ref
import llama_ref
import test_llama
from test_gguf_families import convert, convert_neox
from test_gpt2_forward import make as make_gpt2
from test_llama_hf import tokens as hf_tokens

ALL, LAST, NONE = 0, 1, 2


class Opts(ctypes.Structure):  # al_forward_opts
    _fields_ = [("logits", ctypes.c_int), ("last_layer", ctypes.c_int)]


def lib():
    L = test_llama.lib()
    L.al_model_forward_opts.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                        ctypes.c_void_p, ctypes.POINTER(Opts), test_llama.FP, test_llama.FP,
                                        ctypes.POINTER(test_llama.Error)]
    L.al_model_forward_opts.restype = ctypes.c_int
    return L


def run(m, tokens, mode, last_layer=-1, what=(), layers=None, logits=True, final=True):
    """(rc, error message, logits, final, captured weights {layer: [n_sel, T, T]})."""
    L, info, T = lib(), m.info, len(tokens)
    rows = {LAST: 1, NONE: 0}.get(mode, T)
    toks = (ctypes.c_int32 * T)(*[int(t) for t in tokens])
    got = {}

    def cb(user, capp, errp):
        c = capp.contents
        got[c.layer] = np.ctypeslib.as_array(c.weights, shape=(c.n_sel, c.T, c.T)).copy()
        return 0

    fn = test_llama.OBSERVER(cb)
    req = test_llama.Request(what=sum(test_llama.CAP[w] for w in what), fn=fn)
    if layers is not None:
        req.layers = (ctypes.c_uint8 * info.n_layer)(*[1 if l in layers else 0 for l in range(info.n_layer)])
    lg = np.full((max(rows, 1), info.vocab_size), np.nan, np.float32) if logits else None
    fh = np.full((max(rows, 1), info.d_model), np.nan, np.float32) if final else None
    err, o = test_llama.Error(), Opts(mode, last_layer)
    rc = L.al_model_forward_opts(m.m, toks, T, ctypes.byref(req) if what else None, ctypes.byref(o),
                                 lg.ctypes.data_as(test_llama.FP) if lg is not None else None,
                                 fh.ctypes.data_as(test_llama.FP) if fh is not None else None, ctypes.byref(err))
    return rc, err.msg.decode(), lg, fh, got


def check_last(m, tokens, ref_logits, ref_final, tol=1e-3):
    """LAST = ALL's last row to float32 rounding, and near the float64 reference's last row."""
    rc, msg, lg_all, fh_all, _ = run(m, tokens, ALL)
    assert rc == 0, msg
    rc, msg, lg, fh, _ = run(m, tokens, LAST)
    assert rc == 0, msg
    np.testing.assert_allclose(lg, lg_all[-1:], rtol=0, atol=1e-5 * np.abs(lg_all[-1]).max())
    np.testing.assert_allclose(fh, fh_all[-1:], rtol=0, atol=1e-5 * np.abs(fh_all[-1]).max())
    rl = np.asarray(ref_logits, np.float64)[-1]
    assert np.abs(lg[0] - rl).max() / np.abs(rl).max() < tol
    if ref_final is not None:
        rf = np.asarray(ref_final, np.float64)[-1]
        assert np.abs(fh[0] - rf).max() < tol * max(1.0, np.abs(rf).max())
    # the last token's logits only, without the final hidden state (and the reverse)
    rc, msg, lg1, _, _ = run(m, tokens, LAST, final=False)
    assert rc == 0, msg
    np.testing.assert_array_equal(lg1, lg)


def check_stop(m, tokens, layer):
    """NONE, layers above `layer` not run: the capture of `layer` = the full forward's."""
    rc, msg, _, _, full = run(m, tokens, ALL, what=("weights",), layers=[layer])
    assert rc == 0, msg
    for last in (layer, -1):  # explicit, and derived from the capture
        rc, msg, _, _, got = run(m, tokens, NONE, last, what=("weights",), layers=[layer], logits=False,
                                 final=False)
        assert rc == 0, msg
        assert sorted(got) == [layer]
        np.testing.assert_array_equal(got[layer], full[layer])


def check_errors(m, tokens):
    n = m.info.n_layer
    bad = [dict(mode=NONE),                                         # an output buffer with none
           dict(mode=ALL, last_layer=0),                            # a last layer needs mode none
           dict(mode=7),                                            # no such mode
           dict(mode=NONE, last_layer=n, logits=False, final=False),  # outside the model
           dict(mode=NONE, last_layer=-2, logits=False, final=False)]
    if n > 1:  # a capture above the last layer run
        bad.append(dict(mode=NONE, last_layer=0, what=("weights",), layers=[n - 1], logits=False, final=False))
    for b in bad:
        mode = b.pop("mode")
        rc, msg, _, _, _ = run(m, tokens, mode, **b)
        assert rc != 0 and msg, (mode, b)


@pytest.mark.parametrize("shape", test_llama.SHAPES[:3])
def test_llama_gguf(tmp_path, shape):
    path = tmp_path / "tiny.gguf"
    test_llama.tiny_model(path, **shape, seed=len(shape) + shape["C"])
    R_model = llama_ref.load(str(path))
    m = test_llama.CModel(path)
    try:
        for T, seed in ((1, 1), (37, 2), (100, 3)):  # 100: the last row in a block past the first
            tokens = np.random.default_rng(seed).integers(0, shape["V"], size=T).tolist()
            R = llama_ref.forward(R_model, tokens)
            check_last(m, tokens, R["logits"], R["final"])
        check_stop(m, tokens, 0)
        check_errors(m, tokens)
    finally:
        m.close()


def hf_family(tmp_path, arch):
    if arch == "qwen2":
        cls, cfg = Qwen2ForCausalLM, Qwen2Config(
            vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128)
    elif arch == "gemma2":
        cls, cfg = Gemma2ForCausalLM, Gemma2Config(
            vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=128, sliding_window=8,
            query_pre_attn_scalar=16, attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    else:
        cls, cfg = GPTNeoXForCausalLM, GPTNeoXConfig(
            vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, rotary_pct=0.5, use_parallel_residual=arch == "gptneox")
    d = tmp_path / "hf"
    hf_ref.build(cls, cfg, d)
    g = tmp_path / "tiny.gguf"
    if arch in ("qwen2", "gemma2"):
        convert(d, cfg, arch, g)
    else:
        convert_neox(d, cfg, g)
    return cls, cfg, d, g


@pytest.mark.parametrize("arch", ["qwen2", "gemma2", "gptneox", "gptneox-sequential"])
def test_hf_families(tmp_path, arch):
    cls, cfg, d, g = hf_family(tmp_path, arch)
    ids = hf_tokens(90, cfg.vocab_size)
    ref, out = hf_ref.reference(d, cls, ids)
    m = test_llama.CModel(g)
    try:
        check_last(m, ids, out.logits[0].numpy(), out.hidden_states[-1][0].numpy())
        check_stop(m, ids, 0)
        check_errors(m, ids)
    finally:
        m.close()


def test_gpt2(tmp_path):
    path, params, cfg = make_gpt2(tmp_path, (3, 4, 128, 256, 300, 2), "safetensors")
    ids = np.random.default_rng(5).integers(0, 300, 130).tolist()
    R = gpt2_ref.forward(params, cfg, ids, capture=False)
    m = test_llama.CModel(path)
    try:
        check_last(m, ids, R["logits"], R["final"])
        check_stop(m, ids, 1)  # GPT-2 ran every layer whatever the capture before
        check_errors(m, ids)
    finally:
        m.close()


def test_python_package_rows(tmp_path):
    """attnlim.Model.forward(rows="last"): the last token's logits and hidden state, [1, ...]."""
    import attnlim as A
    shape = test_llama.SHAPES[0]
    path = tmp_path / "tiny.gguf"
    test_llama.tiny_model(path, **shape, seed=3)
    R = llama_ref.forward(llama_ref.load(str(path)), list(range(50)))
    with A.Model(str(path)) as m:
        full = m.forward(list(range(50)))
        last = m.forward(list(range(50)), rows="last")
        assert last.logits.shape == (1, shape["V"]) and last.hidden.shape == (1, shape["C"])
        np.testing.assert_allclose(last.logits, full.logits[-1:], rtol=0, atol=1e-5 * np.abs(full.logits).max())
        rl = np.asarray(R["logits"])[-1]
        assert np.abs(last.logits[0] - rl).max() / np.abs(rl).max() < 1e-3
        cap = m.forward(list(range(50)), capture="weights", layers=[0], logits=False, hidden=False)
        np.testing.assert_array_equal(cap.captures[0]["weights"],
                                      m.forward(list(range(50)), capture="weights", layers=[0]).captures[0]["weights"])
        with pytest.raises(ValueError):
            m.forward([1, 2], rows="first")


@pytest.mark.parametrize("arch", ["qwen2", "gemma2", "gptneox"])
@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0"])
def test_quantised_families(tmp_path, monkeypatch, arch, qtype):
    """Every architecture reads Q4_1 and Q8_0 (the types llama-quantize writes for the benchmark):
    a GGUF whose matrices gguf-py quantised runs the same forward, bit for bit, as an F32 GGUF of
    gguf-py's own dequantisation of them (the independent reference of the weights)."""
    import gguf
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    cls, cfg, d, _ = hf_family(tmp_path, arch)
    orig = gguf.GGUFWriter.add_tensor
    outs = {}
    for kind in ("q", "deq"):
        def add(self, name, t, *a, _kind=kind, **k):
            if t.ndim == 2 and t.shape[-1] % 32 == 0 and not a and not k:
                q = gguf.quants.quantize(np.ascontiguousarray(t, np.float32), qt)
                if _kind == "q":
                    return orig(self, name, q, raw_dtype=qt)
                return orig(self, name, gguf.quants.dequantize(q, qt).astype(np.float32))
            return orig(self, name, t, *a, **k)
        monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", add)
        g = tmp_path / ("%s.gguf" % kind)
        if arch == "gptneox":
            convert_neox(d, cfg, g)
        else:
            convert(d, cfg, arch, g)
        monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", orig)
        m = test_llama.CModel(g)
        try:
            assert m.info.dtype.decode().lower() == (qtype.lower() if kind == "q" else "f32")
            rc, msg, lg, fh, w = run(m, hf_tokens(40, cfg.vocab_size), ALL, what=("weights",))
            assert rc == 0, msg
            outs[kind] = (lg, fh, w)
        finally:
            m.close()
    for a, b in zip(outs["q"][:2], outs["deq"][:2]):
        np.testing.assert_array_equal(a, b)
    for l in outs["deq"][2]:
        np.testing.assert_array_equal(outs["q"][2][l], outs["deq"][2][l])
