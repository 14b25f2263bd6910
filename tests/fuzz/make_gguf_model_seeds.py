"""Seeds of fuzz_gguf_model: tiny Llama GGUF files written with the gguf Python package (an
independent writer), each a few KB, plus broken variants the loader must refuse by name.

Run: .venv/bin/python tests/fuzz/make_gguf_model_seeds.py tests/fuzz/corpus/gguf_model
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

# a byte-level BPE vocabulary: a few bytes (GPT-2's byte-to-unicode spelling: space = "Ġ"),
# merges, and one control token
TOKENS = ["<|endoftext|>", "H", "e", "l", "o", "Ġ", "w", "r", "d", "!", "ll", "He", "llo", "Ġw", "1", "8"]
MERGES = ["l l", "H e", "ll o", "Ġ w"]
TYPES = [3] + [1] * (len(TOKENS) - 1)


def write(path, C=4, H=2, G=1, L=1, F=8, ctx=16, qtype="F32", tied=True, kv=None, drop=(), tok=None,
          arch="llama", vocab_rows=None, eps=1e-5, seed=0):
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, arch)
    d = C // H
    w.add_name("fuzz-tiny")
    w.add_block_count(L)
    w.add_context_length(ctx)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_dimension_count(d)
    t = dict(model="gpt2", pre="smollm", tokens=TOKENS, merges=MERGES, types=TYPES)
    t.update(tok or {})
    if t["model"] is not None:
        w.add_tokenizer_model(t["model"])
    if t["pre"] is not None:
        w.add_tokenizer_pre(t["pre"])
    if t["tokens"] is not None:
        w.add_token_list(t["tokens"])
    if t["merges"] is not None:
        w.add_token_merges(t["merges"])
    if t["types"] is not None:
        w.add_token_types(t["types"])
    for k, (fn, v) in (kv or {}).items():
        getattr(w, fn)(k, v)
    V = vocab_rows or len(TOKENS)

    def add(name, shape, qt):
        if name in drop:
            return
        x = rng.standard_normal(shape).astype(np.float32) * 0.5
        if name.endswith("norm.weight"):
            x = 1 + 0.1 * x
        if len(shape) == 1 or qt == "F32":
            w.add_tensor(name, x)
        elif qt == "F16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            q = getattr(GGMLQuantizationType, qt)
            w.add_tensor(name, quantize(x, q), raw_dtype=q)

    add("token_embd.weight", (V, C), qtype)
    for l in range(L):
        p = "blk.%d." % l
        add(p + "attn_norm.weight", (C,), "F32")
        add(p + "attn_q.weight", (H * d, C), qtype)
        add(p + "attn_k.weight", (G * d, C), qtype)
        add(p + "attn_v.weight", (G * d, C), qtype)
        add(p + "attn_output.weight", (C, H * d), qtype)
        add(p + "ffn_norm.weight", (C,), "F32")
        add(p + "ffn_gate.weight", (F, C), qtype)
        add(p + "ffn_up.weight", (F, C), qtype)
        add(p + "ffn_down.weight", (C, F), qtype)
    add("output_norm.weight", (C,), "F32")
    if not tied:
        add("output.weight", (V, C), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out):
    os.makedirs(out, exist_ok=True)
    p = lambda n: os.path.join(out, n)
    write(p("tiny_f32.gguf"))
    write(p("tiny_f16_untied_llama3.gguf"), qtype="F16", tied=False, H=1, G=1,
          tok=dict(pre="llama-bpe"))
    write(p("tiny_q8_0_gqa.gguf"), C=32, H=4, G=2, F=32, qtype="Q8_0", tok=dict(pre=None, types=None))
    write(p("tiny_2layers_linear_rope.gguf"), L=2, ctx=2,
          kv={"llama.rope.scaling.type": ("add_string", "linear"),
              "llama.rope.scaling.factor": ("add_float32", 4.0)})
    # broken: the loader refuses each, naming the file
    write(p("bad_vocab_rows.gguf"), vocab_rows=len(TOKENS) + 1)
    write(p("bad_tokenizer_model.gguf"), tok=dict(model="llama"))
    write(p("bad_pre.gguf"), tok=dict(pre="falcon"))
    write(p("bad_token_types.gguf"), tok=dict(types=[1, 1, 1]))
    write(p("bad_no_merges.gguf"), tok=dict(merges=None))
    write(p("bad_head_count_kv.gguf"), H=2, G=3)
    write(p("bad_missing_ffn_up.gguf"), drop=("blk.0.ffn_up.weight",))
    write(p("bad_arch.gguf"), arch="falcon")
    write(p("bad_eps.gguf"), eps=2.0)


if __name__ == "__main__":
    main(sys.argv[1])
