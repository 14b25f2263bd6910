"""The tokenizer.json reader (src/text/hf_tokenizer.c over the BPE engine of bpe.c) against HF
`tokenizers` (pinned in tests/requirements.txt): for a tokenizer of each pipeline the Llama,
Mistral, Qwen2, Gemma and GPT-NeoX families use, trained here with the `tokenizers` library on
War and Peace, identical ids on the whole War and Peace body and on a Unicode torture text;
BOS/EOS from the post-processor and tokenizer_config.json, and the override."""
import ctypes
import inspect
import json
import os

import pytest
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

import stage
import test_llama
from test_tokenizer import TORTURE as TORTURE_A
from test_llama import TORTURE as TORTURE_B

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTES = ["<0x%02X>" % i for i in range(256)]


@pytest.fixture(scope="module")
def book():
    return test_llama.corpus().decode("utf-8")


def byte_level(pre, normalizer=None, ignore_merges=False):
    tk = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tk.normalizer = normalizer
    tk.pre_tokenizer = pre
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1200, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=["<|begin_of_text|>", "<|end_of_text|>"], show_progress=False)
    return tk, tr


def sentencepiece(normalizer=None, pre=None):
    tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.normalizer = normalizer
    tk.pre_tokenizer = pre
    tr = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"] + BYTES,
                             show_progress=False)
    return tk, tr


PIPELINES = {
    "llama3": lambda: byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=True),
    "qwen2": lambda: byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), normalizers.NFC()),
    "gpt_neox": lambda: byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                                   normalizers.NFC()),
    "smollm": lambda: byte_level(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])),
    "llama2": lambda: sentencepiece(normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                          normalizers.Replace(" ", "\u2581")])),
    "gemma": lambda: sentencepiece(normalizers.Replace(" ", "\u2581")),
    "metaspace_first": lambda: sentencepiece(
        pre=pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)),
    "metaspace_split": lambda: sentencepiece(
        pre=pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)),
}


def train(name, book, path):
    """tokenizer.json of pipeline name trained by HF `tokenizers` on the book's first 400000
    characters, written to path; trained once per build directory and run (stage.cached: keyed
    by this file, the text and the tokenizers version), since many tests train the same one."""
    def make():
        tk, tr = PIPELINES[name]()
        lines = book[:400000].split("\n")
        tk.train_from_iterator(lines, trainer=tr)
        bos = tk.token_to_id("<s>" if "<s>" in tk.get_vocab() else "<|begin_of_text|>")
        tk.post_processor = processors.TemplateProcessing(
            single=("<s>" if tk.token_to_id("<s>") is not None else "<|begin_of_text|>") + " $A",
            special_tokens=[(tk.id_to_token(bos), bos)])
        j = json.loads(tk.to_str())
        # the byte tokens of SentencePiece vocabularies are plain vocabulary entries (as Llama 2's)
        j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in BYTES]
        return json.dumps(j, ensure_ascii=False).encode()
    # the key: this file (the pipelines' helpers) and the file defining the pipeline itself
    src = [open(f, "rb").read() for f in (__file__, inspect.getsourcefile(PIPELINES[name]))]
    data = stage.cached(("hf-tokenizer", name, *src, book[:400000], tokenizers.__version__), make)
    path.mkdir(exist_ok=True)
    (path / "tokenizer.json").write_bytes(data)
    return Tokenizer.from_file(str(path / "tokenizer.json"))


class COurs:
    def __init__(self, d):
        # al__hf_tokenizer_open is internal: everything from the test-only library with every symbol
        L = self.L = ctypes.CDLL(os.environ["ATTNLIM_INTERNAL_LIB"])
        L.al_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.POINTER(test_llama.Error)]
        L.al_tokenizer_free.argtypes = [ctypes.c_void_p]
        L.al__hf_tokenizer_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.POINTER(test_llama.Error)]
        L.al_tokenizer_set_bos_eos.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        L.al_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t),
                                    ctypes.POINTER(test_llama.Error)]
        self.tk, err = ctypes.c_void_p(), test_llama.Error()
        if L.al__hf_tokenizer_open(str(d).encode(), ctypes.byref(self.tk), ctypes.byref(err)):
            raise RuntimeError(err.msg.decode())

    def bos(self, add_bos, add_eos=-1):
        self.L.al_tokenizer_set_bos_eos(self.tk, add_bos, add_eos)

    def encode(self, text):
        data = text.encode("utf-8")
        ids, n, err = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t(), test_llama.Error()
        if self.L.al_tokenize(self.tk, data, len(data), 1, ctypes.byref(ids), ctypes.byref(n), ctypes.byref(err)):
            raise RuntimeError(err.msg.decode())
        out = [ids[i] for i in range(n.value)]
        test_llama.libc.free(ids)
        return out

    def close(self):
        self.L.al_tokenizer_free(self.tk)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_ids_equal_hf(tmp_path, book, name):
    hf = train(name, book, tmp_path)
    ours = COurs(tmp_path)
    try:
        ours.bos(0, 0)
        for text in [TORTURE_A, TORTURE_B, "", " ", "  x  ", "a<s>b</s> <|begin_of_text|>x", "\u2581 \u2581\u2581a"]:
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
        text = stage.book(book)  # all of it, but in the sanitizer stage
        ref = hf.encode(text, add_special_tokens=False).ids
        got = ours.encode(text)
        assert len(got) == len(ref) and got == ref
        assert len(ref) > stage.at_least(300000, text, len(book))
        # BOS from the post-processor's template, as HF adds it
        ours.bos(-1, -1)
        ours2 = COurs(tmp_path)
        assert ours2.encode("Hello world") == hf.encode("Hello world").ids
        ours2.close()
    finally:
        ours.close()


def test_bos_eos_tokenizer_config(tmp_path, book):
    hf = train("llama2", book, tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": False, "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>"}))
    ours = COurs(tmp_path)
    try:
        ids = hf.encode("Hello", add_special_tokens=False).ids
        assert ours.encode("Hello") == ids + [hf.token_to_id("</s>")]
        ours.bos(1, 0)  # the override
        assert ours.encode("Hello") == [hf.token_to_id("<s>")] + ids
    finally:
        ours.close()


def test_unsupported_named(tmp_path, book):
    hf = train("llama3", book, tmp_path)
    j = json.loads((tmp_path / "tokenizer.json").read_text())
    for edit, msg in [
        (lambda j: j["model"].update(type="Unigram"), "tokenizer model 'Unigram'"),
        (lambda j: j.update(normalizer={"type": "Lowercase"}), "normalizer 'Lowercase'"),
        (lambda j: j["pre_tokenizer"]["pretokenizers"][0].update(behavior="Removed"), "Split behavior 'Removed'"),
        (lambda j: j.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer 'Whitespace'"),
        (lambda j: j["model"]["vocab"].pop("a"), "no token has id"),
    ]:
        k = json.loads(json.dumps(j))
        edit(k)
        (tmp_path / "tokenizer.json").write_text(json.dumps(k))
        with pytest.raises(RuntimeError) as e:
            COurs(tmp_path)
        assert msg in str(e.value) and "tokenizer.json" in str(e.value), str(e.value)
