"""Attention variants inside the forward (top-k key selection, alternative normalizers) against
independent references, on random checkpoints of each causal family:
  - GPT-2 from `attnlim make-model` and from gpt2_ref.random_gpt2, against gpt2_ref's float64
    forward with attn_variant_ref's straight-loop variant in every layer;
  - Llama-family GGUF tiny models (test_llama.tiny_model: GQA), against llama_ref likewise;
  - GPT-2 against HF transformers' GPT2LMHeadModel (eager attention) whose _attn is replaced
    by a top-k one written with torch ops (a stable sort: ties toward the lower index).
Hidden states (each layer's first-norm output, the final hidden state) within 1e-4, attention
weights within 1e-5 (absolute). K >= n reproduces the dense model bit for bit; ties at the K-th
logit (exact: zero key weights make every logit of a layer equal) keep the lower indices.
A comparison is only meaningful where the K-th and (K+1)-th logits are not within float32
rounding of each other: the reference records the smallest such gap and the tests assert it.
"""
import ctypes
import json
import os
import subprocess

import numpy as np
import pytest

import attn_variant_ref as AV
import bert_ref
import gpt2_ref
import llama_ref
from test_llama import CModel, Error, tiny_model

BIN = os.environ.get("ATTNLIM_BIN")
TOL_H, TOL_W = 1e-4, 1e-5
MIN_GAP = 1e-5  # float32 logits are within ~1e-6 of the float64 ones at these scales


class Norm(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("temperature", ctypes.c_double),
                ("alpha", ctypes.c_double), ("ssmax_s", ctypes.c_double)]


class Variant(ctypes.Structure):
    _fields_ = [("rule", ctypes.c_int), ("param", ctypes.c_double), ("norm", Norm),
                ("layers", ctypes.POINTER(ctypes.c_uint8)), ("heads", ctypes.POINTER(ctypes.c_uint8))]


def set_attention(m, rule="dense", norm="softmax", layers=None, heads=None):
    L, err, v = m.L, Error(), Variant()
    for fn in ("al_attn_rule_parse", "al_attn_norm_parse", "al_model_set_attention"):
        getattr(L, fn).restype = ctypes.c_int
    assert L.al_attn_rule_parse(rule.encode(), ctypes.byref(v), ctypes.byref(err)) == 0, err.msg
    assert L.al_attn_norm_parse(norm.encode(), ctypes.byref(v.norm), ctypes.byref(err)) == 0, err.msg
    keep = []
    if layers is not None:
        a = (ctypes.c_uint8 * m.info.n_layer)(*[int(l in layers) for l in range(m.info.n_layer)])
        v.layers, _ = ctypes.cast(a, ctypes.POINTER(ctypes.c_uint8)), keep.append(a)
    if heads is not None:
        a = (ctypes.c_uint8 * m.info.n_head)(*[int(h in heads) for h in range(m.info.n_head)])
        v.heads, _ = ctypes.cast(a, ctypes.POINTER(ctypes.c_uint8)), keep.append(a)
    L.al_model_set_attention.argtypes = [ctypes.c_void_p, ctypes.POINTER(Variant), ctypes.POINTER(Error)]
    rc = L.al_model_set_attention(m.m, ctypes.byref(v), ctypes.byref(err))
    return rc, err.msg.decode()


# (rule, normalizer, layers, heads)
VARIANTS = [("topk:5", "softmax", None, None), ("topk-frac:0.1", "softmax", None, None),
            ("topk-sqrt:1.5", "softmax", None, None), ("topk-log:2", "softmax", None, None),
            ("dense", "sparsemax", None, None), ("dense", "entmax15", None, None),
            ("dense", "entmax:1.3", None, None), ("dense", "ssmax", None, None),
            ("topk:8", "ssmax:1", None, None), ("topk-sqrt:2", "sparsemax", None, None),
            ("topk:3", "softmax", [1], [0, 2])]


def check(ours, ref, n_layer, var, label):
    worst = {}
    for l in range(n_layer):
        worst["w"] = max(worst.get("w", 0), np.abs(ours["weights"][l] - ref["w"][l]).max())
        worst["h"] = max(worst.get("h", 0), np.abs(ours["hidden"][l] - ref["hidden"][l]).max())
    worst["final"] = np.abs(ours["final"] - ref["final"]).max()
    print(label, {k: f"{v:.2e}" for k, v in worst.items()}, "min gap", var.min_gap)
    assert var.min_gap > MIN_GAP, (label, var.min_gap)
    assert worst["w"] < TOL_W and worst["h"] < TOL_H and worst["final"] < TOL_H, (label, worst)


@pytest.fixture(scope="module")
def gpt2_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("g") / "m"
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "4", "--embd", "64", "--ctx",
                    "128", "--vocab", "300", "--seed", "5", "--out", str(d)], check=True,
                   capture_output=True)
    params = bert_ref.load_safetensors(str(d / "model.safetensors"))
    params = {k.removeprefix("transformer."): v for k, v in params.items()}
    cfg = json.load(open(d / "config.json"))
    cfg.setdefault("n_embd", 64)
    return d, params, cfg


def gpt2_ours(m, tokens):
    return m.forward(tokens, what=("weights", "hidden"), logits=True, final=True)


@pytest.mark.parametrize("rule,norm,layers,heads", VARIANTS)
def test_gpt2_variants_vs_numpy(gpt2_model, rule, norm, layers, heads):
    d, params, cfg = gpt2_model
    tokens = np.random.default_rng(11).integers(0, 300, size=90).tolist()
    m = CModel(d)
    try:
        assert set_attention(m, rule, norm, layers, heads)[0] == 0
        ours = gpt2_ours(m, tokens)
    finally:
        m.close()
    var = AV.Variant(rule, norm, layers, heads)
    ref = gpt2_ref.forward(params, cfg, tokens, attn=var)
    check(ours, ref, cfg["n_layer"], var, f"gpt2 {rule} {norm}")
    # the rows really changed, and a modified layer changes the later layers' input
    dense = gpt2_ref.forward(params, cfg, tokens)
    assert np.abs(ref["final"] - dense["final"]).max() > 1e-3
    if layers is None:
        assert np.abs(ref["hidden"][1] - dense["hidden"][1]).max() > 1e-4
    assert abs(gpt2_ref.nll(ours["logits"], tokens) - gpt2_ref.nll(ref["logits"], tokens)) < 1e-4


def test_gpt2_k_equal_n_is_dense_bit_for_bit(gpt2_model):
    d, _, _ = gpt2_model
    tokens = np.random.default_rng(3).integers(0, 300, size=128).tolist()
    m = CModel(d)
    try:
        dense = gpt2_ours(m, tokens)
        for rule in ("topk:128", "topk:100000", "topk-frac:1", "topk-sqrt:100"):
            assert set_attention(m, rule)[0] == 0
            got = gpt2_ours(m, tokens)
            for l in range(2):
                assert np.array_equal(got["weights"][l], dense["weights"][l]), rule
            assert np.array_equal(got["final"], dense["final"]) and np.array_equal(
                got["logits"], dense["logits"]), rule
        assert set_attention(m, "dense", "softmax")[0] == 0  # back to the model's own
        assert np.array_equal(gpt2_ours(m, tokens)["logits"], dense["logits"])
    finally:
        m.close()


def test_gpt2_ties_keep_lower_index(tmp_path):
    """Layer 0's key weights and bias zero: every logit of layer 0 is exactly q . 0 = 0, so
    topk:K keeps keys 0..K-1 with weight 1/K each (METHOD's tie rule); the whole forward
    against the reference, whose stable sort breaks ties the same way by construction."""
    cfg_shape = dict(n_layer=2, n_head=2, n_embd=32, n_ctx=64, vocab=50)
    params, cfg = gpt2_ref.random_gpt2(**cfg_shape, seed=9)
    C = 32
    params["h.0.attn.c_attn.weight"][:, C:2 * C] = 0
    params["h.0.attn.c_attn.bias"][C:2 * C] = 0
    gpt2_ref.save_hf(tmp_path, params, cfg)
    tokens = np.random.default_rng(4).integers(0, 50, size=40).tolist()
    m = CModel(tmp_path)
    try:
        assert set_attention(m, "topk:6", layers=[0])[0] == 0
        ours = gpt2_ours(m, tokens)
    finally:
        m.close()
    w0 = ours["weights"][0]
    for t in range(40):
        K = min(6, t + 1)
        want = np.zeros(40, dtype=np.float32)
        want[:K] = np.float32(1.0 / K)
        assert np.array_equal(w0[:, t], np.broadcast_to(want, (2, 40))), t
    var = AV.Variant("topk:6", "softmax", [0], None)
    ref = gpt2_ref.forward(params, cfg, tokens, attn=var)
    assert var.ties > 0
    for l in range(2):
        assert np.abs(ours["weights"][l] - ref["w"][l]).max() < TOL_W
    assert np.abs(ours["final"] - ref["final"]).max() < TOL_H


# ---- Llama family ----------------------------------------------------------------------------

LLAMA = dict(C=64, H=4, G=2, n_layer=2, F=96, V=200, qtype="F32", tied=True)


@pytest.fixture(scope="module")
def llama_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("l") / "tiny.gguf"
    tiny_model(path, **LLAMA, seed=21)
    return path, llama_ref.load(str(path))


def llama_check(path, R, tokens, rule, norm, layers=None, heads=None):
    m = CModel(path)
    try:
        assert set_attention(m, rule, norm, layers, heads)[0] == 0
        ours = m.forward(tokens, what=("weights", "hidden"), logits=True, final=True)
    finally:
        m.close()
    var = AV.Variant(rule, norm, layers, heads)
    ref = llama_ref.forward(R, tokens, attn=var)
    ref["w"] = [ref["weights"][l] for l in range(LLAMA["n_layer"])]
    ref["hidden"] = [ref["normed"][l] for l in range(LLAMA["n_layer"])]
    check(ours, ref, LLAMA["n_layer"], var, f"llama {rule} {norm}")
    return ours, ref


@pytest.mark.parametrize("rule,norm,layers,heads", VARIANTS[:4] + VARIANTS[4:8:2] + VARIANTS[-2:])
def test_llama_variants_vs_numpy(llama_model, rule, norm, layers, heads):
    path, R = llama_model
    tokens = np.random.default_rng(12).integers(0, LLAMA["V"], size=80).tolist()
    llama_check(path, R, tokens, rule, norm, layers, heads)


def test_llama_k_equal_n_and_ties(llama_model, tmp_path):
    path, R = llama_model
    tokens = np.random.default_rng(5).integers(0, LLAMA["V"], size=70).tolist()
    m = CModel(path)
    try:
        dense = m.forward(tokens, what=("weights",), logits=True, final=True)
        assert set_attention(m, "topk:70")[0] == 0
        got = m.forward(tokens, what=("weights",), logits=True, final=True)
        assert np.array_equal(got["logits"], dense["logits"])
        assert all(np.array_equal(got["weights"][l], dense["weights"][l]) for l in range(2))
    finally:
        m.close()
    # zero key weights in layer 1: all its logits 0 (RoPE of 0 is 0): ties in every row
    import gguf
    tied = tmp_path / "ties.gguf"
    tiny_model(tied, **LLAMA, seed=21)
    r = gguf.GGUFReader(str(tied))
    t = next(x for x in r.tensors if x.name == "blk.1.attn_k.weight")
    off, nbytes = int(t.data_offset), int(t.n_bytes)
    del r
    with open(tied, "r+b") as f:
        f.seek(off)
        f.write(b"\0" * nbytes)
    ours, ref = llama_check(tied, llama_ref.load(str(tied)), tokens, "topk:4", "softmax", [1])
    w1 = ours["weights"][1]
    assert np.array_equal(w1[:, 10, :4], np.full((4, 4), 0.25, np.float32))
    assert not w1[:, 10, 4:].any()


# ---- against HF transformers ------------------------------------------------------------------


def test_gpt2_topk_vs_hf_transformers(tmp_path):
    import torch  # installed by scripts/setup.sh: a missing reference fails, never skips
    import transformers  # installed by scripts/setup.sh: a missing reference fails, never skips
    from transformers.models.gpt2 import modeling_gpt2 as mg
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=128, vocab_size=300,
                                  attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
                                  initializer_range=0.2, attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    hf.save_pretrained(tmp_path, safe_serialization=True)
    K, T = 6, 100

    def topk_attn(self, query, key, value, attention_mask=None, head_mask=None):
        s = torch.matmul(query, key.transpose(-1, -2)) / value.size(-1) ** 0.5
        n = s.size(-1)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        s = s.masked_fill(~causal, float("-inf"))
        order = torch.sort(-s, dim=-1, stable=True).indices  # ties: the lower index first
        rank = torch.empty_like(order)
        rank.scatter_(-1, order, torch.arange(n).expand_as(order).contiguous())
        keep = (rank < K) & causal
        w = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)
        return torch.matmul(w, value), w

    tokens = np.random.default_rng(8).integers(0, 300, size=T).tolist()
    orig = mg.GPT2Attention._attn
    mg.GPT2Attention._attn = topk_attn
    try:
        with torch.no_grad():
            out = hf.double()(torch.tensor([tokens]), output_attentions=True,
                              output_hidden_states=True)
    finally:
        mg.GPT2Attention._attn = orig
    m = CModel(tmp_path)
    try:
        assert set_attention(m, f"topk:{K}")[0] == 0
        ours = m.forward(tokens, what=("weights",), logits=True, final=True)
    finally:
        m.close()
    worst_w = max(np.abs(ours["weights"][l] - out.attentions[l][0].numpy()).max() for l in range(2))
    worst_f = np.abs(ours["final"] - out.hidden_states[-1][0].numpy()).max()
    print("HF top-k: weights", worst_w, "final hidden", worst_f)
    assert worst_w < 1e-5 and worst_f < 1e-4


def test_variant_option_errors(tmp_path):
    """Bad --attention / --attention-normalizer values are usage errors naming the value; the
    plain --normalizer (reproduce's and diagnose's re-normalisation of captured logits) is refused
    by the commands where it is not that, naming --attention-normalizer."""
    subprocess.run([BIN, "make-model", "--layers", "1", "--heads", "2", "--embd", "32", "--ctx",
                    "32", "--vocab", "50", "--out", str(tmp_path / "g")], check=True,
                   capture_output=True)
    r = subprocess.run([BIN, "perplexity", "--model", str(tmp_path / "g"), "--tokens", "/dev/null",
                        "--length", "4", "--attention", "topk:0"], capture_output=True, text=True)
    assert r.returncode == 2 and "K must be an integer >= 1" in r.stderr
    r = subprocess.run([BIN, "perplexity", "--model", str(tmp_path / "g"), "--tokens", "/dev/null",
                        "--length", "4", "--attention-normalizer", "sa-softmax"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "sa-softmax" in r.stderr
    g = str(tmp_path / "g")
    for cmd in (["perplexity", "--model", g, "--tokens", "/dev/null", "--length", "4"],
                ["capture", "--model", g, "--tokens", "/dev/null", "--out", str(tmp_path / "c")],
                ["train", "--out", str(tmp_path / "t")]):
        r = subprocess.run([BIN, *cmd, "--normalizer", "sparsemax"], capture_output=True, text=True)
        assert r.returncode == 2, (cmd, r.stderr)
        assert "--attention-normalizer" in r.stderr and "re-normalisation" in r.stderr, r.stderr
        assert not (tmp_path / "c").exists() and not (tmp_path / "t").exists()


def test_variant_in_capture_reproduce_diagnose_manifests(tmp_path):
    """capture's manifest, diagnose's report and reproduce's results.json carry model.attention;
    the captured weights are the variant's (K keys per row); diagnose's per-head statistics move;
    reproduce --resume refuses partial results of another variant."""
    d = tmp_path / "m"  # the GPT-2 vocabulary: these commands read War and Peace
    subprocess.run([BIN, "make-model", "--layers", "2", "--heads", "2", "--embd", "32", "--ctx",
                    "128", "--vocab", "50257", "--seed", "6", "--out", str(d)], check=True,
                   capture_output=True)
    r = subprocess.run([BIN, "capture", "--model", str(d), "--corpus", "war-and-peace", "--length",
                        "40", "--what", "weights", "--out", str(tmp_path / "cap"), "--attention",
                        "topk:3", "--attention-heads", "1", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    man = json.loads(r.stdout)
    assert man["model"]["attention"]["rule"] == "topk:3" and man["model"]["attention"]["heads"] == [1]
    w = np.load(tmp_path / "cap" / "layer1.weights.npy")
    kept = (w > 0).sum(-1)
    assert (kept[1] == np.minimum(3, np.arange(1, 41))).all() and (kept[0] == np.arange(1, 41)).all()

    def diag(*extra):
        r = subprocess.run([BIN, "diagnose", "--model", str(d), "--length", "64", "--json", *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    dense, topk = diag(), diag("--attention", "topk:2", "--attention-normalizer", "softmax")
    assert dense["model"]["attention"]["modified"] is False and topk["model"]["attention"]["modified"]
    mw = lambda j: [h["mean_max_weight"] for h in j["heads"]]
    assert max(abs(a - b) for a, b in zip(mw(dense), mw(topk))) > 1e-3
    out = tmp_path / "rep"
    base = [BIN, "reproduce", "--model", str(d), "--quick", "--experiments", "alg1", "--out", str(out),
            "--quiet"]
    r = subprocess.run(base + ["--attention", "topk-sqrt:1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    res = json.load(open(out / "results.json"))
    assert res["manifest"]["model"]["attention"]["rule"] == "topk-sqrt:1"
    r = subprocess.run(base + ["--resume"], capture_output=True, text=True)
    assert r.returncode != 0 and "other options" in r.stderr
