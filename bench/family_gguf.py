"""Converts an HF model directory written by bench/family_shapes.py to GGUF with llama.cpp's own
convert_hf_to_gguf.py (from the llama-cpp-python sdist's vendored source; its tensor and
metadata conversion unchanged). The random models have no tokenizer files, so the vocabulary is
replaced by a placeholder SentencePiece-style one of the config's size (the 3 control tokens, the
256 byte tokens, then "\u2581w<i>"): prompt processing benchmarks feed token ids, never text.

usage: python bench/family_gguf.py LLAMA_CPP_SRC HF_DIR OUT.gguf [OUTTYPE=f16]"""
import sys

src, hf, out = sys.argv[1], sys.argv[2], sys.argv[3]
outtype = sys.argv[4] if len(sys.argv) > 4 else "f16"
sys.path.insert(0, src)
import torch  # noqa: E402

for name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"):
    if not hasattr(torch, name):  # older torch (Debian's 1.13): dtypes the random models never use
        setattr(torch, name, type(name, (), {})())
import convert_hf_to_gguf as conv  # noqa: E402


def placeholder_vocab(self):
    n = self.hparams["vocab_size"]
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    toks += ["<0x%02X>" % b for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    for i in range(n - len(toks)):
        toks.append("\u2581w%d" % i)
        scores.append(-float(i))
        types.append(1)
    w = self.gguf_writer
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


orig = conv.get_model_class


def get_model_class(*a, **k):
    cls = orig(*a, **k)
    return type(cls.__name__, (cls,), {"set_vocab": placeholder_vocab, "model_arch": cls.model_arch})


conv.get_model_class = get_model_class
sys.argv = ["convert_hf_to_gguf.py", hf, "--outfile", out, "--outtype", outtype]
conv.main()
