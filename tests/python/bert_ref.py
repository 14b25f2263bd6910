"""bert_ref.py: independent references for the BERT family of attnlim.

- bert_forward(): a float64 numpy BERT encoder written from the architecture (post-LayerNorm
  blocks, GELU erf, word + position + token-type embeddings), loading model.safetensors with
  numpy only. Returns every layer's attention weights and the last hidden state.
- unicode_tables_c(): the Unicode tables of src/text/wordpiece.c, generated from Python's
  unicodedata (run `python tests/python/bert_ref.py --tables` and paste the output between
  the BEGIN/END TABLES markers of src/text/wordpiece.c; test_bert.py checks they agree).
"""
import json
import math
import os
import string
import struct
import sys
import unicodedata

import numpy as np

# ---- safetensors with numpy only ---------------------------------------------------------

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def load_safetensors(path):
    """{name: np.ndarray} from a .safetensors file (BF16 widened to float32)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        raw = blob[base + a : base + b]
        if meta["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(_ST_DTYPES[meta["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(meta["shape"])
    return out


# ---- the float64 BERT encoder --------------------------------------------------------------


def _layernorm(x, g, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _gelu_erf(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def bert_forward(model_dir, ids, inputs=None):
    """ids [T] -> (hidden [T, C] last layer output, weights [n_layer, n_head, T, T],
    logits [n_layer, n_head, T, T]) in float64. inputs, if a list, receives each layer's
    input [T, C] (layer 0: the normalised embedding)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    W = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    pre = "bert." if any(k.startswith("bert.") for k in W) else ""

    def w(name):
        return W[pre + name].astype(np.float64)

    eps = float(cfg.get("layer_norm_eps", 1e-12))
    C = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    D = C // H
    ids = np.asarray(ids, dtype=np.int64)
    T = len(ids)
    x = w("embeddings.word_embeddings.weight")[ids]
    x = x + w("embeddings.position_embeddings.weight")[:T]
    x = x + w("embeddings.token_type_embeddings.weight")[0]
    x = _layernorm(x, w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"), eps)
    all_w, all_z = [], []
    for l in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        if inputs is not None:
            inputs.append(x)

        def lin(v, name):
            return v @ w(p + name + ".weight").T + w(p + name + ".bias")

        q = lin(x, "attention.self.query").reshape(T, H, D).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(T, H, D).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(T, H, D).transpose(1, 0, 2)
        z = q @ k.transpose(0, 2, 1) / math.sqrt(D)  # [H, T, T], no mask (bidirectional)
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        a = e / e.sum(axis=-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(T, C)
        o = lin(o, "attention.output.dense")
        x = _layernorm(
            x + o, w(p + "attention.output.LayerNorm.weight"), w(p + "attention.output.LayerNorm.bias"), eps
        )
        h = _gelu_erf(lin(x, "intermediate.dense"))
        h = lin(h, "output.dense")
        x = _layernorm(x + h, w(p + "output.LayerNorm.weight"), w(p + "output.LayerNorm.bias"), eps)
        all_w.append(a)
        all_z.append(z)
    return x, np.stack(all_w), np.stack(all_z)


def mean_pool_normalised(hidden):
    """sentence-transformers all-MiniLM-L6-v2 pooling: mean over tokens, then L2 norm."""
    m = hidden.mean(axis=0)
    return m / np.linalg.norm(m)


# ---- Unicode tables for src/text/wordpiece.c -------------------------------------------------------

# Rust's char::is_whitespace (the White_Space property), which HF tokenizers uses.
WHITE_SPACE = [9, 10, 11, 12, 13, 0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) + [
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000]

CLASS_SPACE, CLASS_DROP, CLASS_PUNCT, CLASS_MN = 1, 2, 3, 4


def char_class(cp):
    """The class of a code point for the BERT basic tokenizer (0: an ordinary character)."""
    if 0xD800 <= cp <= 0xDFFF:
        return 0
    cat = unicodedata.category(chr(cp))
    if cp in (9, 10, 13):
        return CLASS_SPACE
    if cp == 0 or cp == 0xFFFD or cat in ("Cc", "Cf", "Co"):
        return CLASS_DROP
    if cp in WHITE_SPACE:
        return CLASS_SPACE
    if cat.startswith("P") or (cp < 128 and chr(cp) in string.punctuation):
        return CLASS_PUNCT
    if cat == "Mn":
        return CLASS_MN
    return 0


def unicode_tables_c():
    """C source of the tables (see src/text/wordpiece.c)."""
    out = [f"/* Generated by tests/python/bert_ref.py --tables from Unicode {unicodedata.unidata_version}. */"]
    out.append(f'#define WP_UNICODE_VERSION "{unicodedata.unidata_version}"')
    # class runs
    classes = [char_class(cp) for cp in range(0x110000)]
    runs = []
    for cp, c in enumerate(classes):
        if c and runs and runs[-1][2] == c and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        elif c:
            runs.append([cp, cp, c])
    out.append("static const wp_range wp_classes[] = {")
    out += _wrap([f"{{0x{a:X},0x{b:X},{c}}}" for a, b, c in runs])
    out.append("};")
    # canonical decomposition with nonspacing marks removed (Hangul is algorithmic); only
    # characters with a canonical decomposition mapping can change under NFD
    single, multi = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or 0xAC00 <= cp <= 0xD7A3 or classes[cp] == CLASS_MN:
            continue
        dm = unicodedata.decomposition(chr(cp))
        if not dm or dm.startswith("<"):
            continue
        s = "".join(ch for ch in unicodedata.normalize("NFD", chr(cp)) if unicodedata.category(ch) != "Mn")
        if s == chr(cp):
            continue
        assert 1 <= len(s) <= 3, hex(cp)
        if len(s) == 1:
            single.append((cp, ord(s)))
        else:
            multi.append((cp, [ord(ch) for ch in s] + [0] * (3 - len(s))))
    out.append("static const wp_map1 wp_strip1[] = {")
    out += _wrap([f"{{0x{a:X},0x{b:X}}}" for a, b in single])
    out.append("};")
    out.append("static const wp_map3 wp_strip3[] = {")
    out += _wrap([f"{{0x{a:X},{{0x{b[0]:X},0x{b[1]:X},0x{b[2]:X}}}}}" for a, b in multi])
    out.append("};")
    # lower-case runs: cp in [lo, hi] stepping by stride (1 or 2) maps to cp + delta
    lr = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        low = chr(cp).lower()
        if low == chr(cp) or len(low) != 1:
            continue
        d = ord(low) - cp
        if lr and lr[-1][3] == d and (
            (lr[-1][2] == 0 and cp - lr[-1][1] in (1, 2)) or (lr[-1][2] and cp - lr[-1][1] == lr[-1][2])
        ):
            if lr[-1][2] == 0:
                lr[-1][2] = cp - lr[-1][1]
            lr[-1][1] = cp
        else:
            lr.append([cp, cp, 0, d])
    out.append("static const wp_lower wp_lowers[] = {")
    out += _wrap([f"{{0x{a:X},0x{b:X},{max(s, 1)},{d}}}" for a, b, s, d in lr])
    out.append("};")
    return "\n".join(out) + "\n"


def _wrap(items, width=100):
    lines, cur = [], "    "
    for it in items:
        if len(cur) + len(it) + 1 > width:
            lines.append(cur.rstrip())
            cur = "    "
        cur += it + ","
    if cur.strip():
        lines.append(cur)
    return lines


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--tables":
        sys.stdout.write(unicode_tables_c())
    else:
        print(__doc__)
