"""Seeds of fuzz_gguf_tokenizer: GGUF files holding tokenizer metadata only, written with the gguf
Python package (an independent writer), one per tokenizer model and pre-tokenizer name, plus
variants the reader must refuse by name.

Run: .venv/bin/python tests/fuzz/make_gguf_tokenizer_seeds.py tests/fuzz/corpus/gguf_tokenizer
"""
import os
import sys

from gguf import GGUFWriter

BL_TOKENS = ["<|endoftext|>", "H", "e", "l", "o", "Ġ", "w", "r", "d", "!", "ll", "He", "llo", "Ġw", "1", "8", "<x>"]
BL_MERGES = ["l l", "H e", "ll o", "Ġ w"]
BL_TYPES = [3] + [1] * (len(BL_TOKENS) - 2) + [4]
SP_TOKENS = ["<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", "▁", "H", "e", "l", "o", "▁H", "ll", "llo", "▁Hello"]
SP_TYPES = [2, 3, 3, 6, 6, 6] + [1] * (len(SP_TOKENS) - 6)
SP_SCORES = [0.0] * 6 + [-float(i) for i in range(len(SP_TOKENS) - 6)]


def write(path, model="gpt2", pre="gpt-2", tokens=None, merges=None, types=None, scores=None, ids=(), flags=()):
    w = GGUFWriter(path, "llama")
    if model is not None:
        w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    sp = model == "llama"
    w.add_token_list(tokens or (SP_TOKENS if sp else BL_TOKENS))
    t = types if types is not None else (SP_TYPES if sp else BL_TYPES)
    if t:
        w.add_token_types(t)
    s = scores if scores is not None else (SP_SCORES if sp else None)
    if s:
        w.add_token_scores(s)
    m = merges if merges is not None else (None if sp else BL_MERGES)
    if m:
        w.add_token_merges(m)
    for name, v in ids:
        getattr(w, "add_%s_token_id" % name)(v)
    for name, v in flags:
        getattr(w, "add_%s" % name)(v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out):
    os.makedirs(out, exist_ok=True)
    p = lambda n: os.path.join(out, n)
    for pre in ("gpt-2", "llama-bpe", "qwen2", "smollm", "olmo", "default"):
        write(p("bl_%s.gguf" % pre), pre=pre, ids=[("bos", 0)], flags=[("add_bos_token", pre == "llama-bpe")])
    write(p("sp_prefix.gguf"), model="llama", pre=None, ids=[("bos", 1), ("eos", 2), ("unk", 0)],
          flags=[("add_bos_token", True), ("add_eos_token", True)])
    write(p("sp_noprefix.gguf"), model="llama", pre=None, ids=[("unk", 0)], flags=[("add_space_prefix", False)])
    write(p("bad_model.gguf"), model="t5")
    write(p("bad_pre.gguf"), pre="falcon")
    write(p("bad_types.gguf"), types=[1, 1])
    write(p("bad_scores.gguf"), model="llama", pre=None, scores=[0.0, 1.0])
    write(p("bad_merge.gguf"), merges=["l x"])
    write(p("bad_bos.gguf"), ids=[("bos", 99)])
    write(p("bad_add_bos.gguf"), flags=[("add_bos_token", True)])


if __name__ == "__main__":
    main(sys.argv[1])
