"""gpt2_ref.py: an independent float64 GPT-2 in numpy, and checkpoint writers, for the tests.

Written from the GPT-2 architecture (Radford et al. 2019; HF GPT2Model naming), not from
attnlim's C code:
    x = wte[tokens] + wpe[:T]
    per block:  x += c_proj(attn(ln_1(x)));  x += mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))
    final = ln_f(x);  logits = final @ wte[:V].T
HF Conv1D weights are [in, out]; llm.c stores every matrix transposed, [out, in].
"""
import json
import struct

import numpy as np


# ---- random checkpoints ------------------------------------------------------------------------

def random_gpt2(n_layer, n_head, n_embd, n_ctx, vocab, seed, attn_scale=None):
    """HF-named float32 parameters of a random GPT-2, scaled so that attention is far from
    uniform (the interesting case for the tests): c_attn's std defaults to 0.2 sqrt(64 / C),
    which puts the largest logits around 10-25 at every width. (Larger logits amplify the
    float32 rounding of the residual stream that any fp32 GPT-2 has.)"""
    rng = np.random.default_rng(seed)
    C = n_embd
    if attn_scale is None:
        attn_scale = 0.2 * np.sqrt(64.0 / C)

    def n(*shape, s=1.0):
        return (s * rng.standard_normal(shape)).astype(np.float32)

    p = {"wte.weight": n(vocab, C, s=0.5), "wpe.weight": n(n_ctx, C, s=0.3)}
    for l in range(n_layer):
        h = f"h.{l}."
        p[h + "ln_1.weight"] = 1.0 + n(C, s=0.1)
        p[h + "ln_1.bias"] = n(C, s=0.1)
        p[h + "attn.c_attn.weight"] = n(C, 3 * C, s=attn_scale)
        p[h + "attn.c_attn.bias"] = n(3 * C, s=0.1)
        p[h + "attn.c_proj.weight"] = n(C, C, s=0.1)
        p[h + "attn.c_proj.bias"] = n(C, s=0.05)
        p[h + "ln_2.weight"] = 1.0 + n(C, s=0.1)
        p[h + "ln_2.bias"] = n(C, s=0.1)
        p[h + "mlp.c_fc.weight"] = n(C, 4 * C, s=0.1)
        p[h + "mlp.c_fc.bias"] = n(4 * C, s=0.1)
        p[h + "mlp.c_proj.weight"] = n(4 * C, C, s=0.05)
        p[h + "mlp.c_proj.bias"] = n(C, s=0.05)
    p["ln_f.weight"] = 1.0 + n(C, s=0.1)
    p["ln_f.bias"] = n(C, s=0.1)
    cfg = {"model_type": "gpt2", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
           "n_positions": n_ctx, "n_ctx": n_ctx, "vocab_size": vocab,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    return p, cfg


def write_safetensors(path, tensors, prefix=""):
    """The safetensors format: u64 LE header length, JSON header, then the raw data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[prefix + name] = {"dtype": "F32", "shape": list(a.shape),
                                 "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def save_hf(dirpath, params, cfg, prefix=""):
    write_safetensors(f"{dirpath}/model.safetensors", params, prefix)
    with open(f"{dirpath}/config.json", "w") as f:
        json.dump(cfg, f)
    return str(dirpath)


def to_bf16(a):
    """float32 -> bfloat16 bits (uint16), rounding to nearest even."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def bf16_round(params):
    """The parameters as a bf16 checkpoint stores them (rounded, back in float32)."""
    return {k: (to_bf16(v).astype("<u4") << 16).view("<f4").reshape(v.shape)
            for k, v in params.items()}


def save_llmc(path, params, cfg, padded_vocab=None, version=3):
    """llm.c gpt2 checkpoint, version 3 (fp32) or 5 (bf16): 256 int32 header, then the
    parameters in llm.c's order, each group for all layers, matrices transposed to [out, in],
    wte padded."""
    L, C, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]
    Vp = padded_vocab or V
    hdr = np.zeros(256, dtype="<i4")
    hdr[:8] = [20240326, version, cfg["n_ctx"], V, L, cfg["n_head"], C, Vp]
    wte = np.zeros((Vp, C), dtype=np.float32)
    wte[:V] = params["wte.weight"]
    parts = [wte, params["wpe.weight"]]
    groups = [("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True),
              ("attn.c_attn.bias", False), ("attn.c_proj.weight", True), ("attn.c_proj.bias", False),
              ("ln_2.weight", False), ("ln_2.bias", False), ("mlp.c_fc.weight", True),
              ("mlp.c_fc.bias", False), ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]
    for name, is_matrix in groups:
        for l in range(L):
            a = params[f"h.{l}.{name}"]
            parts.append(a.T if is_matrix else a)
    parts += [params["ln_f.weight"], params["ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        for a in parts:
            a = np.ascontiguousarray(a, dtype="<f4")
            f.write((to_bf16(a) if version == 5 else a).tobytes())
    return str(path)


# ---- the float64 forward -----------------------------------------------------------------------

def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(params, cfg, tokens, capture=True):
    """Returns dict(final [T, C], logits [T, V], embed [T, C], and per layer lists of
    q, k, v [H, T, D], logits z [H, T, T] (-inf masked), weights [H, T, T] (0 masked),
    hidden [T, C] (ln_1 output))."""
    P = {k: v.astype(np.float64) for k, v in params.items()}
    tokens = np.asarray(tokens)
    T, C, H = len(tokens), cfg["n_embd"], cfg["n_head"]
    D = C // H
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T]
    out = {"embed": x.copy(), "q": [], "k": [], "v": [], "z": [], "w": [], "hidden": []}
    masked = np.triu(np.ones((T, T), dtype=bool), k=1)  # key j > query t
    for l in range(cfg["n_layer"]):
        p = lambda name: P[f"h.{l}.{name}"]
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, H, D).transpose(1, 0, 2) for i in range(3))
        z = q @ k.transpose(0, 2, 1) / np.sqrt(D)
        z[:, masked] = -np.inf
        e = np.exp(z - z.max(-1, keepdims=True))
        w = e / e.sum(-1, keepdims=True)
        o = (w @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + o @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h2 = layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        m = gelu_tanh(h2 @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
        if capture:
            for key, val in (("q", q), ("k", k), ("v", v), ("z", z), ("w", w), ("hidden", h)):
                out[key].append(val)
    final = layernorm(x, P["ln_f.weight"], P["ln_f.bias"])
    out["final"] = final
    out["logits"] = final @ P["wte.weight"][: cfg["vocab_size"]].T
    return out


def nll(logits, tokens):
    """Mean negative log-likelihood of tokens[1:] under logits[:-1] (float64)."""
    lg = np.asarray(logits, dtype=np.float64)[:-1]
    m = lg.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(lg - m).sum(-1, keepdims=True)))[:, 0]
    tgt = np.asarray(tokens)[1:]
    return float(np.mean(lse - lg[np.arange(len(tgt)), tgt]))
