"""An independent float64 Llama forward in numpy, for the tests of src/llama.c.

Weights come from a GGUF file read and dequantised by the `gguf` PyPI package (gguf-py), not
by attnlim. The model follows HF transformers' LlamaForCausalLM: RMSNorm, rotate_half RoPE
on HF-layout q/k, grouped-query attention, SwiGLU, tied or untied LM head.

llama.cpp's HF -> GGUF converter permutes the rows of each head of q_proj/k_proj
(reshape(n_head, 2, d/2, C).swapaxes(1, 2)) so that llama.cpp can rotate adjacent pairs;
`load()` undoes it (hf_layout=True) to get HF's layout back.
"""
import numpy as np
import gguf


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def dequant(t):
    """A ReaderTensor as float64 in numpy order (shape = reversed GGUF ne)."""
    x = gguf.quants.dequantize(t.data, t.tensor_type)
    shape = tuple(int(v) for v in reversed(t.shape))
    return np.asarray(x, dtype=np.float64).reshape(shape)


def unpermute(w, n_head):
    """GGUF q/k rows -> HF rows: inverse of reshape(H, 2, d/2, C).swapaxes(1, 2)."""
    rows, cols = w.shape
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


class Model:
    pass


def load(path, hf_layout=True):
    r = gguf.GGUFReader(path)
    m = Model()
    arch = _field(r, "general.architecture")
    assert arch == "llama", arch
    m.n_layer = int(_field(r, "llama.block_count"))
    m.C = int(_field(r, "llama.embedding_length"))
    m.H = int(_field(r, "llama.attention.head_count"))
    m.G = int(_field(r, "llama.attention.head_count_kv", m.H))
    m.d = m.C // m.H
    m.eps = float(_field(r, "llama.attention.layer_norm_rms_epsilon", 1e-5))
    m.base = float(_field(r, "llama.rope.freq_base", 10000.0))
    stype = _field(r, "llama.rope.scaling.type", "none")
    assert stype in ("none", "linear"), stype
    m.rope_scale = float(_field(r, "llama.rope.scaling.factor", 1.0)) if stype == "linear" else 1.0
    t = {x.name: x for x in r.tensors}
    m.embd = dequant(t["token_embd.weight"])  # [V, C]
    m.out = dequant(t["output.weight"]) if "output.weight" in t else m.embd
    m.out_norm = dequant(t["output_norm.weight"])
    m.layers = []
    for l in range(m.n_layer):
        g = lambda n: dequant(t["blk.%d.%s.weight" % (l, n)])
        ly = dict(attn_norm=g("attn_norm"), wq=g("attn_q"), wk=g("attn_k"), wv=g("attn_v"),
                  wo=g("attn_output"), ffn_norm=g("ffn_norm"), gate=g("ffn_gate"), up=g("ffn_up"),
                  down=g("ffn_down"))
        if hf_layout:
            ly["wq"] = unpermute(ly["wq"], m.H)
            ly["wk"] = unpermute(ly["wk"], m.G)
        m.layers.append(ly)
    return m


def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, base, scale=1.0):
    """x [n, T, d] rotated HF-style (rotate_half: pairs (i, i + d/2)); linear scaling divides
    the positions by scale."""
    n, T, d = x.shape
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
    ang = (np.arange(T, dtype=np.float64) / scale)[:, None] * inv[None, :]  # [T, d/2]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * cos + rot * sin


def forward(m, tokens, layers_wanted=None, stop_after=None, attn=None):
    """Returns dict: hidden (list of [T, C] residual after each layer), q/k/v per layer
    [H, T, d] (k/v repeated to query heads), weights [H, T, T], final [T, C], logits [T, V].
    attn: a function (layer, z [H, T, T] with -inf masked) -> weights [H, T, T] replacing
    softmax (the attention variants, attn_variant_ref.py)."""
    T = len(tokens)
    x = m.embd[np.asarray(tokens)]  # [T, C]
    out = dict(hidden=[], q={}, k={}, v={}, weights={}, normed={}, residual={})
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    rep = m.H // m.G
    last = m.n_layer if stop_after is None else stop_after + 1
    for l in range(last):
        ly = m.layers[l]
        h = rmsnorm(x, ly["attn_norm"], m.eps)
        q = (h @ ly["wq"].T).reshape(T, m.H, m.d).transpose(1, 0, 2)  # [H, T, d]
        k = (h @ ly["wk"].T).reshape(T, m.G, m.d).transpose(1, 0, 2)  # [G, T, d]
        v = (h @ ly["wv"].T).reshape(T, m.G, m.d).transpose(1, 0, 2)
        q, k = rope(q, m.base, m.rope_scale), rope(k, m.base, m.rope_scale)
        k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)  # [H, T, d]
        z = q @ k.transpose(0, 2, 1) / np.sqrt(m.d)
        z[:, mask] = -np.inf
        if attn is not None:
            w = attn(l, z)
        else:
            z -= z.max(axis=-1, keepdims=True)
            w = np.exp(z)
            w /= w.sum(axis=-1, keepdims=True)
        o = (w @ v).transpose(1, 0, 2).reshape(T, m.C)
        if layers_wanted is None or l in layers_wanted:
            out["q"][l], out["k"][l], out["v"][l], out["weights"][l] = q, k, v, w
            out["normed"][l] = h
            out["residual"][l] = x  # the layer input, before attn_norm
        x = x + o @ ly["wo"].T
        h = rmsnorm(x, ly["ffn_norm"], m.eps)
        gt = h @ ly["gate"].T
        x = x + ((gt / (1 + np.exp(-gt))) * (h @ ly["up"].T)) @ ly["down"].T
        out["hidden"].append(x)
    if stop_after is None:
        out["final"] = rmsnorm(x, m.out_norm, m.eps)
        out["logits"] = out["final"] @ m.out.T
    return out


def nll(logits, tokens):
    """Mean negative log-likelihood of tokens[1:] under logits[:-1]."""
    z = logits[:-1] - logits[:-1].max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1))
    return float(np.mean(lse - z[np.arange(len(tokens) - 1), np.asarray(tokens[1:])]))
