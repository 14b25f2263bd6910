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

def random_gpt2(n_layer, n_head, n_embd, n_ctx, vocab, seed, attn_scale=None, init="sharp"):
    """HF-named float32 parameters of a random GPT-2, and its config.json.

    init="sharp" (the small test shapes): scaled so that attention is far from uniform (the
    interesting case for the tests): c_attn's std defaults to 0.2 sqrt(64 / C), which puts
    the largest logits around 10-25 at every width, over a residual stream of order 1.
    init="gpt2": the scales of GPT-2's initialisation (Radford et al. 2019), as make-model
    writes them: matrices and wte N(0, 0.02), wpe N(0, 0.01), residual projections
    N(0, 0.02 / sqrt(2 n_layer)), biases N(0, 0.02) (not 0, so that they are exercised),
    LayerNorm weights 1 + N(0, 0.1); c_attn N(0, 1 / sqrt(C)) so that attention logits have
    unit scale (at 0.02 they would be ~0.3 and attention nearly uniform)."""
    if init not in ("sharp", "gpt2"):
        raise ValueError(f"init: {init!r} is not 'sharp' or 'gpt2'")
    rng = np.random.default_rng(seed)
    C, L = n_embd, n_layer
    # std of each kind of parameter: (sharp, gpt2)
    k = 0 if init == "sharp" else 1
    S = {"wte": (0.5, 0.02), "wpe": (0.3, 0.01), "ln_b": (0.1, 0.02),
         "attn": (0.2 * np.sqrt(64.0 / C), 1.0 / np.sqrt(C)), "attn_b": (0.1, 0.02),
         "proj": (0.1, 0.02 / np.sqrt(2.0 * L)), "proj_b": (0.05, 0.02),
         "fc": (0.1, 0.02), "fc_b": (0.1, 0.02), "fcproj": (0.05, 0.02 / np.sqrt(2.0 * L)),
         "fcproj_b": (0.05, 0.02)}
    S = {key: v[k] for key, v in S.items()}
    if attn_scale is not None:
        S["attn"] = attn_scale

    def n(*shape, s, mean=0.0):
        a = rng.standard_normal(shape, dtype=np.float32)
        a *= np.float32(s)
        if mean:
            a += np.float32(mean)
        return a

    p = {"wte.weight": n(vocab, C, s=S["wte"]), "wpe.weight": n(n_ctx, C, s=S["wpe"])}
    for l in range(L):
        h = f"h.{l}."
        p[h + "ln_1.weight"] = n(C, s=0.1, mean=1.0)
        p[h + "ln_1.bias"] = n(C, s=S["ln_b"])
        p[h + "attn.c_attn.weight"] = n(C, 3 * C, s=S["attn"])
        p[h + "attn.c_attn.bias"] = n(3 * C, s=S["attn_b"])
        p[h + "attn.c_proj.weight"] = n(C, C, s=S["proj"])
        p[h + "attn.c_proj.bias"] = n(C, s=S["proj_b"])
        p[h + "ln_2.weight"] = n(C, s=0.1, mean=1.0)
        p[h + "ln_2.bias"] = n(C, s=S["ln_b"])
        p[h + "mlp.c_fc.weight"] = n(C, 4 * C, s=S["fc"])
        p[h + "mlp.c_fc.bias"] = n(4 * C, s=S["fc_b"])
        p[h + "mlp.c_proj.weight"] = n(4 * C, C, s=S["fcproj"])
        p[h + "mlp.c_proj.bias"] = n(C, s=S["fcproj_b"])
    p["ln_f.weight"] = n(C, s=0.1, mean=1.0)
    p["ln_f.bias"] = n(C, s=S["ln_b"])
    cfg = {"model_type": "gpt2", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
           "n_positions": n_ctx, "n_ctx": n_ctx, "vocab_size": vocab,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    return p, cfg


def write_safetensors(path, tensors, prefix=""):
    """The safetensors format: u64 LE header length, JSON header, then the raw data."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a, dtype="<f4", order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        header[prefix + name] = {"dtype": "F32", "shape": list(a.shape),
                                 "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.reshape(-1).data)  # no copy
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def save_hf(dirpath, params, cfg, prefix="", buffers=False):
    """model.safetensors + config.json in dirpath. buffers: also the HF attention buffers
    h.N.attn.bias ([1, 1, n_ctx, n_ctx] lower triangle of ones) and h.N.attn.masked_bias
    (-1e4), which openai-community/gpt2's own file carries (they are not parameters)."""
    if buffers:
        params = dict(params)
        n = cfg["n_ctx"]
        tril = np.tril(np.ones((n, n), dtype=np.float32))[None, None]
        for l in range(cfg["n_layer"]):
            params[f"h.{l}.attn.bias"] = tril
            params[f"h.{l}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    write_safetensors(f"{dirpath}/model.safetensors", params, prefix)
    with open(f"{dirpath}/config.json", "w") as f:
        json.dump(cfg, f)
    return str(dirpath)


def _bf16_rounded_bits(a):
    """float32 bits rounded to nearest even at bfloat16 precision, low 16 bits 0 (finite a;
    uint32 arithmetic, which cannot overflow below the NaN range)."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    r = (u >> 16) & 1
    r += u
    r += 0x7FFF
    r &= 0xFFFF0000
    return r


def to_bf16(a):
    """float32 -> bfloat16 bits (uint16), rounding to nearest even."""
    return (_bf16_rounded_bits(a) >> 16).astype("<u2")


def bf16_round(params):
    """The parameters as a bf16 checkpoint stores them (rounded, back in float32)."""
    return {k: _bf16_rounded_bits(v).view("<f4").reshape(v.shape) for k, v in params.items()}


def save_llmc(path, params, cfg, padded_vocab=None, version=3, pad_noise=True):
    """llm.c gpt2 checkpoint, version 3 (fp32) or 5 (bf16): 256 int32 header, then the
    parameters in llm.c's order, each group for all layers, matrices transposed to [out, in],
    wte padded to padded_vocab rows. pad_noise: the padding rows hold large random values
    (llm.c writes zeros) so that a reader that used them would be caught."""
    L, C, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]
    Vp = padded_vocab or V
    hdr = np.zeros(256, dtype="<i4")
    hdr[:8] = [20240326, version, cfg["n_ctx"], V, L, cfg["n_head"], C, Vp]
    wte = np.zeros((Vp, C), dtype=np.float32)
    wte[:V] = params["wte.weight"]
    if pad_noise:
        wte[V:] = 30.0 * np.random.default_rng(Vp).standard_normal((Vp - V, C))
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
            f.write((to_bf16(a) if version == 5 else a).reshape(-1).data)
    return str(path)


# ---- the float64 forward -----------------------------------------------------------------------

def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in place of a copy."""
    y = x * x
    y *= 0.044715
    y += 1.0
    y *= x
    y *= np.sqrt(2.0 / np.pi)
    np.tanh(y, out=y)
    y += 1.0
    y *= x
    y *= 0.5
    return y


def forward_layers(params, cfg, tokens, logit_rows=None, attn=None):
    """The float64 forward, one layer at a time (the parameters are converted to float64 as
    they are used, and nothing of a layer is kept after it is yielded). Yields, per layer l,
    dict(layer=l, q, k, v [H, T, D], z [H, T, T] (-inf masked), w [H, T, T] (0 masked),
    hidden [T, C] (ln_1 output), embed [T, C], residual [T, C] (the layer input, before ln_1)),
    then dict(final [T, C], logits [T, V]);
    logit_rows: only those rows of the logits (final[logit_rows] @ wte.T). attn: a function
    (layer, z [H, T, T] with -inf masked) -> weights [H, T, T] replacing softmax (the attention
    variants, attn_variant_ref.py)."""
    f64 = lambda name: np.asarray(params[name], dtype=np.float64)
    tokens = np.asarray(tokens)
    T, C, H = len(tokens), cfg["n_embd"], cfg["n_head"]
    D = C // H
    wte = params["wte.weight"][: cfg["vocab_size"]]  # float32; converted by blocks below
    x = wte[tokens].astype(np.float64) + f64("wpe.weight")[:T]
    embed = x.copy()
    mask = np.triu(np.full((T, T), -np.inf), k=1)  # -inf where key j > query t, else 0
    for l in range(cfg["n_layer"]):
        p = lambda name: f64(f"h.{l}.{name}")
        x_in = x  # x is rebound below, never written in place
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (np.ascontiguousarray(qkv[:, i * C:(i + 1) * C].reshape(T, H, D)
                                        .transpose(1, 0, 2)) for i in range(3))
        z = q @ k.transpose(0, 2, 1)
        z *= 1.0 / np.sqrt(D)
        z += mask
        if attn is not None:
            w = attn(l, z)
        else:
            w = z - z.max(-1, keepdims=True)
            np.exp(w, out=w)
            w /= w.sum(-1, keepdims=True)
        o = (w @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + o @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h2 = layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        m = gelu_tanh(h2 @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
        yield {"layer": l, "q": q, "k": k, "v": v, "z": z, "w": w, "hidden": h, "embed": embed,
               "residual": x_in}
        del q, k, v, z, w, qkv, m
    final = layernorm(x, f64("ln_f.weight"), f64("ln_f.bias"))
    rows = final if logit_rows is None else final[logit_rows]
    logits = np.empty((len(rows), len(wte)))
    for i in range(0, len(wte), 4096):  # float64 copies of 4096 rows of wte at a time
        logits[:, i:i + 4096] = rows @ np.asarray(wte[i:i + 4096], dtype=np.float64).T
    yield {"final": final, "logits": logits}


def forward(params, cfg, tokens, capture=True, attn=None):
    """Returns dict(final [T, C], logits [T, V], embed [T, C], and per layer lists of
    q, k, v [H, T, D], logits z [H, T, T] (-inf masked), weights [H, T, T] (0 masked),
    hidden [T, C] (ln_1 output))."""
    out = {"q": [], "k": [], "v": [], "z": [], "w": [], "hidden": []}
    for r in forward_layers(params, cfg, tokens, attn=attn):
        if "final" in r:
            out.update(r)
        else:
            out["embed"] = r["embed"]
            if capture:
                for key in ("q", "k", "v", "z", "w", "hidden"):
                    out[key].append(r[key])
    return out


def nll(logits, tokens):
    """Mean negative log-likelihood of tokens[1:] under logits[:-1] (float64)."""
    lg = np.asarray(logits, dtype=np.float64)[:-1]
    m = lg.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(lg - m).sum(-1, keepdims=True)))[:, 0]
    tgt = np.asarray(tokens)[1:]
    return float(np.mean(lse - lg[np.arange(len(tgt)), tgt]))
