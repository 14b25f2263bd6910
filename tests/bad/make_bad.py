#!/usr/bin/env python3
"""Writes the malformed-input corpus of tests/bad/inputs (deterministic; numpy only).

Each input is named in tests/bad/cases.tsv with the command that reads it and the message it
must produce. Run from anywhere: python3 tests/bad/make_bad.py [OUTDIR]."""
import io
import json
import os
import struct
import sys

import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs")


def w(name, data):
    path = os.path.join(OUT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def npy(arr, version=(1, 0)):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def npy_raw(dict_text, data=b""):
    h = dict_text.encode() + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


# ---- NPY ----------------------------------------------------------------------------------
good = npy(np.arange(6.0).reshape(2, 3))
w("npy/bad_magic.npy", b"\x93NUMPX" + good[6:])
w("npy/truncated_header.npy", good[:30])
w("npy/header_length_lies.npy", good[:8] + struct.pack("<H", 60000) + good[10:])
w("npy/truncated_data.npy", good[:-8])
w("npy/trailing_bytes.npy", good + b"\0" * 8)
w("npy/overflow_dims.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1125899906842624, 1125899906842624, 64), }", b"\0" * 8))
w("npy/fortran.npy", npy(np.asfortranarray(np.ones((2, 3)))))
w("npy/int32.npy", npy(np.arange(3, dtype=np.int32)))
w("npy/big_endian.npy", npy(np.arange(3, dtype=">f8")))
w("npy/nine_dims.npy", npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", b"\0" * 8))
w("npy/nan.npy", npy(np.array([0.5, np.nan, 1.0])))
w("npy/empty.npy", b"")
# cut inside each part before the data: magic (6 bytes), version (2), header length (2)
# (truncated_header cuts inside the header dict, truncated_data inside the data)
w("npy/cut_in_magic.npy", good[:3])
w("npy/cut_in_version.npy", good[:7])
w("npy/cut_in_header_length.npy", good[:9])

# ---- numbers as text ------------------------------------------------------------------------
w("text/not_a_number.txt", "1 2 x3\n")
w("text/ragged.txt", "1 2 3\n4 5\n")
w("text/inf.txt", "1 inf 2\n")

# ---- GPT-2 safetensors (a tiny 1-layer model, C = 8, vocab 16) -----------------------------
C, V, P, L = 8, 16, 8, 1
cfg = {"model_type": "gpt2", "n_layer": L, "n_head": 2, "n_embd": C, "n_positions": P, "n_ctx": P,
       "vocab_size": V, "layer_norm_epsilon": 1e-5}
rng = np.random.default_rng(7)


def gpt2_tensors(c=C):
    t = {"wte.weight": (V, c), "wpe.weight": (P, c), "ln_f.weight": (c,), "ln_f.bias": (c,)}
    for i in range(L):
        p = "h.%d." % i
        t.update({p + "ln_1.weight": (c,), p + "ln_1.bias": (c,), p + "attn.c_attn.weight": (c, 3 * c),
                  p + "attn.c_attn.bias": (3 * c,), p + "attn.c_proj.weight": (c, c), p + "attn.c_proj.bias": (c,),
                  p + "ln_2.weight": (c,), p + "ln_2.bias": (c,), p + "mlp.c_fc.weight": (c, 4 * c),
                  p + "mlp.c_fc.bias": (4 * c,), p + "mlp.c_proj.weight": (4 * c, c), p + "mlp.c_proj.bias": (c,)})
    return {k: (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in t.items()}


def safetensors(tensors, dtype_override=None, offset_fix=None, header_fix=None):
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        b = a.tobytes()
        header[k] = {"dtype": (dtype_override or {}).get(k, "F32"), "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if offset_fix:
        offset_fix(header)
    h = json.dumps(header).encode()
    if header_fix:
        h = header_fix(h)
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def model_dir(name, blob, config=cfg):
    w("st/%s/model.safetensors" % name, blob)
    if config is not None:
        w("st/%s/config.json" % name, config if isinstance(config, str) else json.dumps(config))


T = gpt2_tensors()
full = safetensors(T)
hlen = struct.unpack("<Q", full[:8])[0]
model_dir("cut_in_length", full[:5])
model_dir("cut_after_length", full[:8])
model_dir("truncated_in_header", full[: 8 + hlen // 2])
model_dir("truncated_in_data", full[:-100])
model_dir("header_length_lies", struct.pack("<Q", len(full) * 4) + full[8:])
model_dir("header_not_json", struct.pack("<Q", 16) + b"{not json here!}" + full[8 + hlen:])
model_dir("offsets_past_end", safetensors(T, offset_fix=lambda h: h["ln_f.bias"].update(data_offsets=[10 ** 9, 10 ** 9 + 32])))
model_dir("shape_overflow", safetensors(T, offset_fix=lambda h: h["ln_f.bias"].update(shape=[2 ** 40, 2 ** 40, 2 ** 40])))
model_dir("wrong_dtype", safetensors(T, dtype_override={"h.0.attn.c_attn.weight": "I32"}))
T2 = dict(T)
del T2["h.0.mlp.c_fc.bias"]
model_dir("missing_tensor", safetensors(T2))
T3 = dict(T)
T3["h.0.attn.c_proj.weight"] = np.zeros((C, C + 1), np.float32)
model_dir("wrong_shape", safetensors(T3))
T4 = {k: v.copy() for k, v in T.items()}
T4["h.0.mlp.c_fc.weight"][1, 2] = np.nan
model_dir("nan_weights", safetensors(T4))
model_dir("no_config", full, config=None)
model_dir("config_not_json", full, config="{\"model_type\": \"gpt2\", ")
model_dir("config_unknown_family", full, config=dict(cfg, model_type="t5"))
model_dir("config_lies_layers", full, config=dict(cfg, n_layer=3))
# a duplicate key (issue 12, class 7): n_layer 1 first (what the weights hold), 3 last (what
# Python and HF read)
model_dir("config_duplicate_key", full, config=json.dumps(cfg)[:-1] + ', "n_layer": 3}')
w("st/missing_shard/model.safetensors.index.json",
  json.dumps({"metadata": {}, "weight_map": {k: "model-00001-of-00002.safetensors" for k in T}}))
w("st/missing_shard/config.json", json.dumps(cfg))

# ---- llm.c .bin ------------------------------------------------------------------------------
def llmc(magic=20240326, version=3, maxT=P, V_=V, L_=L, NH=2, C_=C, Vp=V, nparams=None):
    hdr = np.zeros(256, np.int32)
    hdr[:8] = [magic, version, maxT, V_, L_, NH, C_, Vp]
    n = nparams if nparams is not None else sum(a.size for a in T.values())
    return hdr.tobytes() + np.zeros(n, np.float32).tobytes()


w("llmc/bad_magic.bin", llmc(magic=1234))
w("llmc/bad_version.bin", llmc(version=7))
w("llmc/truncated.bin", llmc()[:-64])
w("llmc/absurd_dims.bin", llmc(C_=2 ** 30, V_=2 ** 30, Vp=2 ** 30, nparams=16))
# cut at every structural boundary: no header, the magic only, one byte short of the 1024-byte
# header, the header without parameters, inside the parameters (fp32 above, bf16 here)
good_llmc = llmc()
w("llmc/empty.bin", b"")
w("llmc/cut_after_magic.bin", good_llmc[:4])
w("llmc/cut_in_header.bin", good_llmc[:1023])
w("llmc/header_only.bin", good_llmc[:1024])
n_llmc = sum(a.size for a in T.values())


def llmc_v5(params_f32):
    """version 5: parameters as bfloat16 (the top 16 bits of each float32; exact for 0, NaN, Inf)."""
    hdr = np.zeros(256, np.int32)
    hdr[:8] = [20240326, 5, P, V, L, 2, C, V]
    return hdr.tobytes() + (params_f32.view(np.uint32) >> 16).astype("<u2").tobytes()


w("llmc/truncated_bf16.bin", llmc_v5(np.zeros(n_llmc, np.float32))[:-10])
# NaN / Inf: llm.c order starts wte [Vp, C] (flat 0..127), then wpe [maxT, C]
nan_at_wte = np.zeros(n_llmc, np.float32)
nan_at_wte[0] = np.nan
inf_at_wpe = np.zeros(n_llmc, np.float32)
inf_at_wpe[V * C + 1] = np.inf
hdr3 = good_llmc[:1024]
w("llmc/nan_fp32.bin", hdr3 + nan_at_wte.tobytes())
w("llmc/inf_fp32.bin", hdr3 + inf_at_wpe.tobytes())
w("llmc/nan_bf16.bin", llmc_v5(nan_at_wte))
w("llmc/inf_bf16.bin", llmc_v5(inf_at_wpe))

# ---- GGUF ------------------------------------------------------------------------------------
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(version=3, n_tensors=0, kvs=b"", n_kv=None, tensors=b"", data=b""):
    n_kv = n_kv if n_kv is not None else kvs.count(b"\x00general")
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs + tensors + data


arch = gstr("general.architecture") + struct.pack("<I", 8) + gstr("llama")
w("gguf/bad_magic.gguf", b"GGUX" + gguf()[4:])
w("gguf/bad_version.gguf", gguf(version=99))
w("gguf/huge_tensor_count.gguf", gguf(n_tensors=2 ** 60))
w("gguf/string_past_end.gguf", gguf(kvs=struct.pack("<Q", 2 ** 40) + b"general.arch", n_kv=1))
w("gguf/unknown_value_type.gguf", gguf(kvs=gstr("general.architecture") + struct.pack("<I", 77) + b"\0" * 8, n_kv=1))
tinfo = gstr("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 8, 4) + struct.pack("<I", 0) + struct.pack("<Q", 10 ** 12)
w("gguf/tensor_offset_past_end.gguf", gguf(n_tensors=1, kvs=arch, n_kv=1, tensors=tinfo) + b"\0" * 64)
w("gguf/truncated.gguf", gguf(kvs=arch, n_kv=1)[:-3])
w("gguf/not_llama.gguf", gguf(kvs=gstr("general.architecture") + struct.pack("<I", 8) + gstr("mamba"), n_kv=1))


# A complete tiny Llama (float32 throughout: C 8, 2 heads, 1 layer, FFN 16, vocab 16), written
# section by section so that each can be cut or altered.
def gkv(key, value):
    if isinstance(value, str):
        return gstr(key) + struct.pack("<I", 8) + gstr(value)
    if isinstance(value, float):
        return gstr(key) + struct.pack("<I", 6) + struct.pack("<f", value)
    return gstr(key) + struct.pack("<I", 4) + struct.pack("<I", value)


def gguf_model(kv, shapes, edit=None, kv_raw=(), seed=11):
    """(file bytes, {section: (start, end)}): metadata kv [(key, value)], float32 tensors
    [(name, numpy shape)] drawn from default_rng(seed); edit(name, array) may change one."""
    g = np.random.default_rng(seed)
    kvs = b"".join(gkv(k, v) for k, v in kv) + b"".join(kv_raw)
    infos, blobs, off = b"", b"", 0
    for name, shape in shapes:
        a = (g.standard_normal(shape) * 0.3).astype("<f4")
        if edit:
            edit(name, a)
        raw = a.tobytes() + b"\0" * (-a.nbytes % 32)
        infos += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", n) for n in reversed(shape))
        infos += struct.pack("<IQ", 0, off)
        blobs += raw
        off += len(raw)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(kv) + len(kv_raw))
    pre = head + kvs + infos
    pad = b"\0" * (-len(pre) % 32)
    s1 = len(head)
    s2 = s1 + len(kvs)
    s3 = s2 + len(infos)
    s4 = s3 + len(pad)
    return pre + pad + blobs, {"header": (0, s1), "kv": (s1, s2), "tensor_info": (s2, s3),
                               "padding": (s3, s4), "data": (s4, s4 + len(blobs))}


def llama_gguf(edit=None, kv_extra=(), tensor_extra=(), kv_raw=(), kv_override=None, arch="llama"):
    """(file bytes, {section: (start, end)}); edit(name, array) may change a tensor's values;
    kv_raw: encoded metadata entries (garr) appended to the rest; kv_override {key: value}
    replaces metadata values in place (keys as written for llama); arch: the architecture
    (qwen2, gemma2: the same keys under its prefix)."""
    kv = [("general.architecture", "llama"), ("general.name", "tiny-bad"), ("llama.block_count", 1),
          ("llama.context_length", 16), ("llama.embedding_length", 8), ("llama.feed_forward_length", 16),
          ("llama.attention.head_count", 2), ("llama.attention.head_count_kv", 2),
          ("llama.rope.freq_base", 10000.0), ("llama.attention.layer_norm_rms_epsilon", 1e-5),
          ("llama.rope.dimension_count", 4)] + list(kv_extra)
    kv = [(k, (kv_override or {}).get(k, v)) for k, v in kv]
    if arch != "llama":
        kv = [(arch + k[5:] if k.startswith("llama.") else k, arch if k == "general.architecture" else v)
              for k, v in kv]
    shapes = [("token_embd.weight", (16, 8)), ("blk.0.attn_norm.weight", (8,)), ("blk.0.attn_q.weight", (8, 8)),
              ("blk.0.attn_k.weight", (8, 8)), ("blk.0.attn_v.weight", (8, 8)),
              ("blk.0.attn_output.weight", (8, 8)), ("blk.0.ffn_norm.weight", (8,)),
              ("blk.0.ffn_gate.weight", (16, 8)), ("blk.0.ffn_up.weight", (16, 8)),
              ("blk.0.ffn_down.weight", (8, 16)), ("output_norm.weight", (8,))] + list(tensor_extra)
    return gguf_model(kv, shapes, edit, kv_raw)


def llama_gguf_kv(*overrides):
    """The tiny Llama GGUF with some metadata values replaced (same keys, same order)."""
    return llama_gguf(kv_override=dict(overrides))[0]


good_gguf, sec = llama_gguf()
assert sec["padding"][1] - sec["padding"][0] >= 2, "the layout must have alignment padding to cut inside"
for part in ("header", "tensor_info", "padding", "data"):
    a, b = sec[part]
    w("gguf/cut_in_%s.gguf" % part, good_gguf[: (a + b) // 2])
# inside the last metadata value (cut earlier, the counts are already impossible for the size)
w("gguf/cut_in_kv.gguf", good_gguf[: sec["kv"][1] - 2])
w("gguf/duplicate_key.gguf", llama_gguf(kv_extra=[("general.name", "again")])[0])
w("gguf/duplicate_tensor.gguf", llama_gguf(tensor_extra=[("blk.0.ffn_norm.weight", (8,))])[0])


def put(tensor, index, value):
    def edit(name, a):
        if name == tensor:
            a.flat[index] = value
    return edit


w("gguf/nan_f32.gguf", llama_gguf(edit=put("token_embd.weight", 9, np.nan))[0])
w("gguf/inf_f32.gguf", llama_gguf(edit=put("blk.0.attn_norm.weight", 2, -np.inf))[0])



# GGUF tokenizer metadata and RoPE scaling faults (src/model/gguf_tokenizer.c, llama.c)
def garr(key, values, kind):
    """An encoded array entry: kind 'str', 'i32' or 'f32'."""
    code = {"str": 8, "i32": 5, "f32": 6}[kind]
    body = b"".join(gstr(v) if kind == "str" else struct.pack("<i" if kind == "i32" else "<f", v) for v in values)
    return gstr(key) + struct.pack("<IIQ", 9, code, len(values)) + body


def tok_gguf(name, model="gpt2", pre=None, n_tok=16, n_types=16, n_scores=None):
    kvs = [("tokenizer.ggml.model", model)] + ([("tokenizer.ggml.pre", pre)] if pre else [])
    raw = [garr("tokenizer.ggml.tokens", [chr(97 + i) for i in range(n_tok)], "str"),
           garr("tokenizer.ggml.token_type", [1] * n_types, "i32")]
    if n_scores is not None:
        raw.append(garr("tokenizer.ggml.scores", [-float(i) for i in range(n_scores)], "f32"))
    w("gguf/%s.gguf" % name, llama_gguf(kv_extra=kvs, kv_raw=raw)[0])


tok_gguf("tokenizer_unknown_model", model="t5")
tok_gguf("tokenizer_unknown_pre", pre="deepseek-coder")
tok_gguf("tokenizer_types_length", n_types=15)
tok_gguf("tokenizer_scores_length", model="llama", n_scores=3)
tok_gguf("tokenizer_tokens_vs_vocab", model="llama", n_tok=12, n_types=12, n_scores=12)
w("gguf/rope_freqs_shape.gguf", llama_gguf(tensor_extra=[("rope_freqs.weight", (3,))])[0])
w("gguf/rope_unknown_scaling.gguf", llama_gguf(kv_extra=[("llama.rope.scaling.type", "longrope")])[0])
w("gguf/rope_yarn_no_factor.gguf", llama_gguf(kv_extra=[("llama.rope.scaling.type", "yarn")])[0])

# ---- tokenizer files and text ----------------------------------------------------------------
w("vocab/bad_json/encoder.json", '{"a": 0, "b": ')
w("vocab/bad_json/vocab.bpe", "#version: 0.2\na b\n")
w("vocab/bad_merges/encoder.json", json.dumps({"a": 0, "b": 1, "ab": 2}))
w("vocab/bad_merges/vocab.bpe", "#version: 0.2\na b\nthis-line-has-no-space\n")
w("vocab/bad_ids/encoder.json", json.dumps({"a": -5, "b": 1}))
w("vocab/bad_ids/vocab.bpe", "#version: 0.2\n")
w("vocab/duplicate_key/encoder.json", '{"a": 0, "b": 1, "a": 2}')
w("vocab/duplicate_key/vocab.bpe", "#version: 0.2\n")
w("text/empty.txt", "")
w("text/ids_out_of_range.txt", "15 31 99999999\n")
w("text/not_utf8.txt", b"The quick brown fox \xff jumps over the lazy dog, twice over.\n")
w("text/ids_small.txt", "0 1 2 3 4 5 6 7\n")
# hostile sizes (issue 12, class 11): a row longer than the sa-softmax spectral norm takes, and one
# whose dense Jacobian (--full) would need 1.15 GB
w("text/row_12000.txt", " ".join(["0"] * 12000) + "\n")

# ---- duplicated names --------------------------------------------------------------------------
# safetensors: the header's JSON object names ln_f.bias twice (a duplicate key, same entry)
model_dir("duplicate_key", safetensors(T, header_fix=lambda h: h.replace(
    b'"ln_f.bias": ', b'"ln_f.bias": ' + json.dumps(json.loads(h)["ln_f.bias"]).encode() + b', "ln_f.bias": ')))
# sharded: two good shards (each tensor in one of them) ...
names = list(T)
shard_a = {k: T[k] for k in names[: len(names) // 2]}
shard_b = {k: T[k] for k in names[len(names) // 2:]}
A, B = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def sharded(name, a, b, weight_map_text):
    w("st/%s/%s" % (name, A), safetensors(a))
    w("st/%s/%s" % (name, B), safetensors(b))
    w("st/%s/model.safetensors.index.json" % name, '{"metadata": {}, "weight_map": {%s}}' % weight_map_text)
    w("st/%s/config.json" % name, json.dumps(cfg))


def wm(pairs):
    return ", ".join('"%s": "%s"' % kv for kv in pairs)


# ... whose index lists ln_f.bias (in shard A) a second time, in shard B (a duplicate JSON key)
sharded("index_lists_twice", shard_a, shard_b,
        wm([(k, A) for k in shard_a] + [(k, B) for k in shard_b] + [("ln_f.bias", B)]))
# ... and two shards that both hold wte.weight (the index lists it once)
sharded("shards_overlap", shard_a, dict(shard_b, **{"wte.weight": T["wte.weight"]}),
        wm([(k, A) for k in shard_a] + [(k, B) for k in shard_b]))

# ---- non-finite weights ------------------------------------------------------------------------
# in an attention weight, so that layer 0's captured attention is non-finite too
T5 = {k: v.copy() for k, v in T.items()}
T5["h.0.attn.c_attn.weight"][3, 5] = np.inf
model_dir("inf_weights", safetensors(T5))
T6 = {k: v.copy() for k, v in T.items()}
T6["h.0.attn.c_attn.weight"][0, 0] = np.nan
model_dir("nan_attn_weights", safetensors(T6))

# ---- WordPiece vocabularies, each in a tiny valid BERT directory (read by `attnlim embed`) ----


def tiny_bert(d, vocab_text, tokenizer_config=None, nan_tensor=None, cfg_update=None):
    g = np.random.default_rng(13)
    Cb, Fb, Pb, Vb = 4, 8, 8, 8
    bcfg = {"model_type": "bert", "hidden_size": Cb, "num_attention_heads": 1, "num_hidden_layers": 1,
            "intermediate_size": Fb, "max_position_embeddings": Pb, "vocab_size": Vb, "type_vocab_size": 1,
            "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    bcfg.update(cfg_update or {})
    shapes = {"embeddings.word_embeddings.weight": (Vb, Cb), "embeddings.position_embeddings.weight": (Pb, Cb),
              "embeddings.token_type_embeddings.weight": (1, Cb), "embeddings.LayerNorm.weight": (Cb,),
              "embeddings.LayerNorm.bias": (Cb,)}
    p = "encoder.layer.0."
    for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
        shapes.update({p + n + ".weight": (Cb, Cb), p + n + ".bias": (Cb,)})
    shapes.update({p + "intermediate.dense.weight": (Fb, Cb), p + "intermediate.dense.bias": (Fb,),
                   p + "output.dense.weight": (Cb, Fb), p + "output.dense.bias": (Cb,)})
    for n in ("attention.output.LayerNorm", "output.LayerNorm"):
        shapes.update({p + n + ".weight": (Cb,), p + n + ".bias": (Cb,)})
    tensors = {k: (g.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}
    if nan_tensor:
        tensors[nan_tensor].flat[0] = np.nan
    w(d + "/model.safetensors", safetensors(tensors))
    w(d + "/config.json", json.dumps(bcfg))
    w(d + "/vocab.txt", vocab_text)
    if tokenizer_config is not None:
        w(d + "/tokenizer_config.json", tokenizer_config)


tiny_bert("wordpiece/empty", "")
tiny_bert("wordpiece/no_unk", "[PAD]\n[CLS]\n[SEP]\nhello\n")
tiny_bert("wordpiece/no_cls", "[PAD]\n[UNK]\n[SEP]\nhello\n")
tiny_bert("wordpiece/nul_byte", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhel\0lo\n")
GOOD_VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n"
# NaN weights in a BERT: the one load policy of every family (a warning naming the tensor); the
# NaN that reaches the embedding fails `embed`, naming that tensor
tiny_bert("bert/nan_query", GOOD_VOCAB, nan_tensor="encoder.layer.0.attention.self.query.weight")
tiny_bert("wordpiece/tokenizer_config_not_json", GOOD_VOCAB, '{"do_lower_case": true,')
tiny_bert("wordpiece/tokenizer_config_lower_not_bool", GOOD_VOCAB, '{"do_lower_case": "yes"}')
# a config that claims far more than the file holds (issue 12, class 5): 512 layers of 16384
# channels would be terabytes of weights; the tensors are checked before anything is allocated
tiny_bert("wordpiece/config_claims_terabytes", GOOD_VOCAB,
          cfg_update={"hidden_size": 16384, "num_attention_heads": 128, "num_hidden_layers": 512,
                      "intermediate_size": 131072, "max_position_embeddings": 65536})
# a duplicate key (issue 12, class 7): cJSON would take the first, Python and HF the last
tiny_bert("wordpiece/tokenizer_config_duplicate_key", GOOD_VOCAB,
          '{"do_lower_case": true, "do_lower_case": false}')

# ---- attention dumps (docs/dumps.md): T = 4 tokens, 1 layer, 1 head, d_head 2, causal -------


def dump_dir(d, manifest, arrays):
    """manifest: a dict (written as JSON) or text; arrays: {file name: numpy array or bytes}."""
    w(d + "/manifest.json", manifest if isinstance(manifest, str) else json.dumps(manifest))
    for name, a in arrays.items():
        w(d + "/" + name, a if isinstance(a, bytes) else npy(a))


DT = 4
gd = np.random.default_rng(17)
dq, dk, dv = (gd.standard_normal((1, DT, 2)) for _ in range(3))
dz = dq @ dk.transpose(0, 2, 1) / np.sqrt(2)
dz[:, np.triu(np.ones((DT, DT), bool), 1)] = -np.inf
dw = np.exp(dz - dz.max(-1, keepdims=True))
dw /= dw.sum(-1, keepdims=True)
DM = {"schema": "attnlim.dump/1", "model": {"name": "tiny-dump", "n_layer": 1, "n_head": 1, "d_head": 2,
                                            "causal": True}, "T": DT}
DA = {"layer0.q.npy": dq, "layer0.k.npy": dk, "layer0.v.npy": dv, "layer0.logits.npy": dz,
      "layer0.weights.npy": dw}


def dman(**kw):
    m = json.loads(json.dumps(DM))
    for k, v in kw.items():
        if k == "model":
            m["model"].update(v)
        else:
            m[k] = v
    return m


dump_dir("dump/ok", DM, DA)
dump_dir("dump/missing_manifest", DM, DA)
os.remove(os.path.join(OUT, "dump/missing_manifest/manifest.json"))
dump_dir("dump/bad_json", '{"schema": "attnlim.dump/1", "model": {', DA)
dump_dir("dump/wrong_schema", dman(schema="attnlim.dump/9"), DA)
dump_dir("dump/no_schema", {"model": DM["model"], "T": DT}, DA)
dump_dir("dump/shape_mismatch", DM, dict(DA, **{"layer0.q.npy": gd.standard_normal((1, DT, 3))}))
dump_dir("dump/wrong_dtype", DM, dict(DA, **{"layer0.v.npy": np.arange(8, dtype=np.int32).reshape(1, DT, 2)}))
dump_dir("dump/missing_array", dman(arrays=["q", "k", "v"]), {"layer0.q.npy": dq, "layer0.k.npy": dk})
dump_dir("dump/needs_v", DM, {"layer0.q.npy": dq, "layer0.k.npy": dk})
nanw = dw.copy()
nanw[0, 2, 1] = np.nan
dump_dir("dump/nan", DM, dict(DA, **{"layer0.weights.npy": nanw}))
dump_dir("dump/token_mismatch", dman(token_ids=[5, 6, 7, 8]), DA)
dump_dir("dump/ids_wrong_length", dman(token_ids=[5, 6, 7]), DA)
dump_dir("dump/dotdot", dman(files=[{"file": "../layer0.q.npy", "layer": 0, "what": "q"}]), DA)
dump_dir("dump/bad_layers", dman(layers=[0, 0]), DA)
dump_dir("dump/bad_heads", dman(heads=[3]), DA)
dump_dir("dump/kv_not_divisor", dman(model={"n_head": 3, "n_kv_head": 2}), DA)
bz = dq @ dk.transpose(0, 2, 1) / np.sqrt(2)
dump_dir("dump/bidirectional", dman(model={"causal": False}), {"layer0.q.npy": dq, "layer0.k.npy": dk,
                                                              "layer0.v.npy": dv, "layer0.logits.npy": bz})
# stored weights that are not rows of a distribution (issue 12, class 8)
dump_dir("dump/weights_not_normalized", DM, dict(DA, **{"layer0.weights.npy": dw * 0.5}))
negw = dw.copy()
negw[0, 3, 0] -= 0.25
negw[0, 3, 1] += 0.25
dump_dir("dump/weights_negative", DM, dict(DA, **{"layer0.weights.npy": negw}))
# masked entries (above the diagonal of a causal dump) must be 0, whatever the normalizer
mkw = dw.copy()
mkw[0, 1, 3] = 0.125
dump_dir("dump/weights_masked_nonzero", DM, dict(DA, **{"layer0.weights.npy": mkw}))
mkn = dw.copy()
mkn[0, 2, 3] = np.nan
dump_dir("dump/weights_masked_nan", dict(DM, weights_sum_to_one=False), dict(DA, **{"layer0.weights.npy": mkn}))
# "sliding_window" (issue 14): negative, past the largest T, one per layer, causal only, and
# inconsistent with the stored weights (a window of 2 over full causal rows). A window wider than
# T is no fault (a Mistral's 4096 over a dump of 32 tokens: every row sees its whole prefix).
dump_dir("dump/window_negative", dman(sliding_window={"of_layer": [-1]}), DA)
dump_dir("dump/window_past_max", dman(sliding_window={"of_layer": [1 << 21]}), DA)
dump_dir("dump/window_count", dman(sliding_window={"of_layer": [2, 2]}), DA)
dump_dir("dump/window_bidirectional", dman(model={"causal": False}, sliding_window={"of_layer": [2]}),
         {"layer0.q.npy": dq, "layer0.k.npy": dk, "layer0.v.npy": dv, "layer0.logits.npy": bz})
dump_dir("dump/window_weights_inconsistent", dman(sliding_window={"of_layer": [2]}), DA)

# ---- Llama-family HF directories (config.json faults; a tiny valid model for the tokenizer) ---
LC = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8,
      "intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
      "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
      "tie_word_embeddings": True}


def llama_dir(name, config, tensors=None, tokenizer=None):
    w("hf/%s/config.json" % name, json.dumps(config))
    if tensors is not None:
        w("hf/%s/model.safetensors" % name, safetensors(tensors))
    if tokenizer is not None:
        w("hf/%s/tokenizer.json" % name, tokenizer)


def llama_tensors():
    t = {"model.embed_tokens.weight": (16, 8), "model.norm.weight": (8,),
         "model.layers.0.input_layernorm.weight": (8,), "model.layers.0.post_attention_layernorm.weight": (8,),
         "model.layers.0.self_attn.q_proj.weight": (8, 8), "model.layers.0.self_attn.k_proj.weight": (4, 8),
         "model.layers.0.self_attn.v_proj.weight": (4, 8), "model.layers.0.self_attn.o_proj.weight": (8, 8),
         "model.layers.0.mlp.gate_proj.weight": (12, 8), "model.layers.0.mlp.up_proj.weight": (12, 8),
         "model.layers.0.mlp.down_proj.weight": (8, 12)}
    return {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in t.items()}


llama_dir("unknown_arch", dict(LC, model_type="falcon"))
llama_dir("unknown_rope", dict(LC, rope_scaling={"rope_type": "longrope", "factor": 2.0}))
llama_dir("bad_heads", dict(LC, num_key_value_heads=3, num_attention_heads=2))
llama_dir("window_too_large", dict(LC, model_type="mistral", sliding_window=64))
llama_dir("qwen2_layer_types", dict(LC, model_type="qwen2", use_sliding_window=True, sliding_window=8,
                                    max_window_layers=1, layer_types=["sliding_attention"]))
llama_dir("bad_act", dict(LC, hidden_act="gelu"))
llama_dir("neox_odd_rotary", {"model_type": "gpt_neox", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 12,
                              "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16,
                              "rotary_pct": 0.75})
llama_dir("zero_softcap", dict(LC, model_type="gemma2", head_dim=4, sliding_window=8, query_pre_attn_scalar=4,
                               attn_logit_softcapping=0.0, hidden_activation="gelu_pytorch_tanh"))
TOK = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None, "post_processor": None,
       "decoder": None, "model": {"type": "BPE", "vocab": {chr(97 + i): i for i in range(16)}, "merges": []}}
llama_dir("tokenizer_unigram", LC, llama_tensors(), json.dumps(dict(TOK, model={"type": "Unigram", "vocab": []})))
llama_dir("tokenizer_bad_json", LC, llama_tensors(), '{"model": {"type": "BPE", ')
llama_dir("tokenizer_id_gap", LC, llama_tensors(),
          json.dumps(dict(TOK, model=dict(TOK["model"], vocab={chr(97 + i): 2 * i for i in range(16)}))))

# ---- class 5 (issue 12): configs claiming more than the file holds get the tensor mismatch,
# never an attempt at hundreds of GB (hidden 65536, intermediate 2^20: ~800 GB of float32)
HUGE = dict(hidden_size=65536, num_attention_heads=512, intermediate_size=1 << 20,
            max_position_embeddings=1 << 20)
llama_dir("llama_claims_terabytes", dict(LC, **HUGE), llama_tensors())
qt = llama_tensors()
qt.update({"model.layers.0.self_attn.q_proj.bias": np.zeros(8, np.float32),
           "model.layers.0.self_attn.k_proj.bias": np.zeros(4, np.float32),
           "model.layers.0.self_attn.v_proj.bias": np.zeros(4, np.float32)})
llama_dir("qwen2_claims_terabytes", dict(LC, model_type="qwen2", architectures=["Qwen2ForCausalLM"], **HUGE), qt)
NX = {"model_type": "gpt_neox", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
      "num_attention_heads": 2, "max_position_embeddings": 16, "rotary_pct": 0.5, "layer_norm_eps": 1e-5,
      "use_parallel_residual": True, "tie_word_embeddings": False}
nt = {"gpt_neox.embed_in.weight": (16, 8), "gpt_neox.final_layer_norm.weight": (8,),
      "gpt_neox.final_layer_norm.bias": (8,), "embed_out.weight": (16, 8)}
for sfx, shp in (("input_layernorm.weight", (8,)), ("input_layernorm.bias", (8,)),
                 ("post_attention_layernorm.weight", (8,)), ("post_attention_layernorm.bias", (8,)),
                 ("attention.query_key_value.weight", (24, 8)), ("attention.query_key_value.bias", (24,)),
                 ("attention.dense.weight", (8, 8)), ("attention.dense.bias", (8,)),
                 ("mlp.dense_h_to_4h.weight", (12, 8)), ("mlp.dense_h_to_4h.bias", (12,)),
                 ("mlp.dense_4h_to_h.weight", (8, 12)), ("mlp.dense_4h_to_h.bias", (8,))):
    nt["gpt_neox.layers.0." + sfx] = shp
nt = {k: (rng.standard_normal(v) * 0.3).astype(np.float32) for k, v in nt.items()}
llama_dir("neox_claims_terabytes", dict(NX, **HUGE), nt)
w("gguf/claims_huge_ffn.gguf", llama_gguf_kv(("llama.feed_forward_length", 1 << 20),
                                            ("llama.embedding_length", 65536),
                                            ("llama.attention.head_count", 512),
                                            ("llama.attention.head_count_kv", 512),
                                            ("llama.rope.dimension_count", 128)))
dump_dir("dump/claims_huge_T", dict(DM, T=1 << 20), DA)
w("text/letters.txt", "abcdefghijklmnop " * 8)

# ---- class 5 for the other GGUF families: a tiny GPT-NeoX (C 8, 2 heads, FFN 12, vocab 16, biases,
# untied output), and qwen2 / gemma2 under the Llama layout, each claiming more than it holds
# (the tensor mismatch names the tensor, before any weight is allocated), or inconsistent heads.
def neox_gguf(*overrides):
    kv = [("general.architecture", "gptneox"), ("general.name", "tiny-neox-bad"), ("gptneox.block_count", 1),
          ("gptneox.context_length", 16), ("gptneox.embedding_length", 8), ("gptneox.feed_forward_length", 12),
          ("gptneox.attention.head_count", 2), ("gptneox.rope.dimension_count", 2),
          ("gptneox.attention.layer_norm_epsilon", 1e-5)]
    kv = [(k, dict(overrides).get(k, v)) for k, v in kv]
    shapes = [("token_embd.weight", (16, 8)), ("output_norm.weight", (8,)), ("output_norm.bias", (8,)),
              ("output.weight", (16, 8))]
    for sfx, shp in (("attn_norm.weight", (8,)), ("attn_norm.bias", (8,)), ("ffn_norm.weight", (8,)),
                     ("ffn_norm.bias", (8,)), ("attn_qkv.weight", (24, 8)), ("attn_qkv.bias", (24,)),
                     ("attn_output.weight", (8, 8)), ("attn_output.bias", (8,)), ("ffn_up.weight", (12, 8)),
                     ("ffn_up.bias", (12,)), ("ffn_down.weight", (8, 12)), ("ffn_down.bias", (8,))):
        shapes.append(("blk.0." + sfx, shp))
    return gguf_model(kv, shapes, seed=12)[0]


w("gguf/neox_claims_huge_ffn.gguf", neox_gguf(("gptneox.feed_forward_length", 1 << 20)))
w("gguf/neox_claims_layers.gguf", neox_gguf(("gptneox.block_count", 1024)))
w("gguf/neox_claims_huge_embd.gguf", neox_gguf(("gptneox.embedding_length", 65536),
                                                ("gptneox.attention.head_count", 512)))
w("gguf/neox_bad_heads.gguf", neox_gguf(("gptneox.attention.head_count", 3)))
QB = [("blk.0.attn_q.bias", (8,)), ("blk.0.attn_k.bias", (8,)), ("blk.0.attn_v.bias", (8,))]
GN = [("blk.0.post_attention_norm.weight", (8,)), ("blk.0.post_ffw_norm.weight", (8,))]
w("gguf/qwen2_claims_huge_ffn.gguf", llama_gguf(arch="qwen2", tensor_extra=QB,
                                                kv_override={"llama.feed_forward_length": 1 << 20})[0])
w("gguf/gemma2_claims_huge_ffn.gguf", llama_gguf(arch="gemma2", tensor_extra=GN,
                                                 kv_override={"llama.feed_forward_length": 1 << 20})[0])
w("gguf/qwen2_claims_layers.gguf", llama_gguf(arch="qwen2", tensor_extra=QB,
                                              kv_override={"llama.block_count": 1024})[0])
w("gguf/llama_bad_kv_heads.gguf", llama_gguf_kv(("llama.attention.head_count_kv", 3)))
gt = llama_tensors()
gt.update({"model.layers.0.pre_feedforward_layernorm.weight": np.zeros(8, np.float32),
           "model.layers.0.post_feedforward_layernorm.weight": np.zeros(8, np.float32)})
llama_dir("gemma2_claims_terabytes", dict(LC, model_type="gemma2", architectures=["Gemma2ForCausalLM"], head_dim=128,
                                          sliding_window=8, query_pre_attn_scalar=128,
                                          hidden_activation="gelu_pytorch_tanh", **HUGE), gt)
llama_dir("mistral_claims_terabytes", dict(LC, model_type="mistral", architectures=["MistralForCausalLM"],
                                           sliding_window=8, **HUGE), llama_tensors())
llama_dir("neox_bad_heads", dict(NX, num_attention_heads=3), nt)
print("wrote", OUT)
