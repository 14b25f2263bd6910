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

# ---- tokenizer files and text ----------------------------------------------------------------
w("vocab/bad_json/encoder.json", '{"a": 0, "b": ')
w("vocab/bad_json/vocab.bpe", "#version: 0.2\na b\n")
w("vocab/bad_merges/encoder.json", json.dumps({"a": 0, "b": 1, "ab": 2}))
w("vocab/bad_merges/vocab.bpe", "#version: 0.2\na b\nthis-line-has-no-space\n")
w("vocab/bad_ids/encoder.json", json.dumps({"a": -5, "b": 1}))
w("vocab/bad_ids/vocab.bpe", "#version: 0.2\n")
w("text/empty.txt", "")
w("text/ids_out_of_range.txt", "15 31 99999999\n")
w("wordpiece/empty/vocab.txt", "")
w("wordpiece/no_unk/vocab.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n")
print("wrote", OUT)
