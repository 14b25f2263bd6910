"""test_bert.py: the BERT family (src/bert.c, src/text/wordpiece.c, attnlim embed) against
independent references:
  - WordPiece ids vs HF `tokenizers` (Tokenizer.from_file on the model's own tokenizer.json) on
    the whole War and Peace body and on a Unicode torture text;
  - the forward (hidden states, every head's attention weights) vs a float64 numpy BERT written
    from the architecture (bert_ref.py), on the real all-MiniLM-L6-v2 and on tiny random BERTs;
  - sentence embeddings (paraphrases closer than unrelated sentences) vs the numpy reference;
  - bad input: missing/misshapen tensors, bad vocab.txt, windows past 512 tokens.
The real model is `--model minilm` (fetched into the cache on first use, hash-pinned)."""
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import scipy.special

import bert_ref
import internals

BIN = os.environ.get("ATTNLIM_BIN")
LIB = os.environ.get("ATTNLIM_LIB")
SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "scripts"))
import gen_wordpiece_tables  # noqa: E402  (scripts/: the generator of wordpiece_tables.h)

if not BIN or not LIB:
    pytest.fail("ATTNLIM_BIN and ATTNLIM_LIB must be set (run through ctest)", pytrace=False)

# ---- ctypes view of the public API -------------------------------------------------------------


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Info(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_char * 16), ("name", ctypes.c_char * 128), ("path", ctypes.c_char * 1024),
        ("sha256", ctypes.c_char * 65), ("dtype", ctypes.c_char * 16),
        ("n_layer", ctypes.c_int), ("n_head", ctypes.c_int), ("n_kv_head", ctypes.c_int),
        ("d_model", ctypes.c_int), ("d_head", ctypes.c_int), ("d_ff", ctypes.c_int),
        ("n_ctx", ctypes.c_int), ("vocab_size", ctypes.c_int), ("causal", ctypes.c_int),
        ("n_params", ctypes.c_int64),
    ]


FP = ctypes.POINTER(ctypes.c_float)


class Capture(ctypes.Structure):
    _fields_ = [
        ("layer", ctypes.c_int), ("T", ctypes.c_int), ("n_head", ctypes.c_int), ("n_kv_head", ctypes.c_int),
        ("d_head", ctypes.c_int), ("d_model", ctypes.c_int), ("causal", ctypes.c_int), ("n_sel", ctypes.c_int),
        ("heads", ctypes.POINTER(ctypes.c_int)), ("kv_head", ctypes.POINTER(ctypes.c_int)),
        ("q", FP), ("k", FP), ("v", FP), ("logits", FP), ("weights", FP), ("hidden", FP), ("embed", FP),
        ("residual", FP),
    ]


OBSERVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Capture), ctypes.POINTER(Err))


class Request(ctypes.Structure):
    _fields_ = [
        ("what", ctypes.c_uint), ("layers", ctypes.c_void_p), ("heads", ctypes.c_void_p),
        ("fn", OBSERVER), ("user", ctypes.c_void_p),
    ]


CAP_WEIGHTS, CAP_HIDDEN, CAP_EMBED = 1 << 4, 1 << 5, 1 << 6

lib = internals.attach(ctypes.CDLL(LIB), "al__model_resolve_name")
lib.al_model_get_info.restype = ctypes.POINTER(Info)
lib.free.argtypes = [ctypes.c_void_p]


class Model:
    def __init__(self, path):
        self.m = ctypes.c_void_p()
        e = Err()
        rc = lib.al_model_open(path.encode(), ctypes.byref(self.m), ctypes.byref(e))
        if rc:
            raise RuntimeError(e.msg.decode())
        self.info = lib.al_model_get_info(self.m).contents
        self.tk = ctypes.c_void_p()
        rc = lib.al_model_tokenizer(self.m, ctypes.byref(self.tk), ctypes.byref(e))
        if rc:
            raise RuntimeError(e.msg.decode())

    def tokenize(self, data):
        p = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        e = Err()
        rc = lib.al_tokenize(self.tk, data, len(data), 0, ctypes.byref(p), ctypes.byref(n), ctypes.byref(e))
        if rc:
            raise RuntimeError(e.msg.decode())
        out = np.ctypeslib.as_array(p, shape=(n.value,)).copy() if n.value else np.zeros(0, np.int32)
        lib.free(p)
        return out.tolist()

    def forward(self, ids, what=CAP_WEIGHTS):
        """(final_hidden [T, C], {layer: weights [H, T, T]}, {layer: embed}) or raises."""
        T = len(ids)
        C = self.info.d_model
        toks = (ctypes.c_int32 * T)(*ids)
        hidden = np.zeros((T, C), np.float32)
        weights, embeds = {}, {}
        self.hidden_in = {}
        self.residual_in = {}

        def obs(user, cap, err):
            c = cap.contents
            if c.residual:
                self.residual_in[c.layer] = np.ctypeslib.as_array(c.residual, shape=(c.T, c.d_model)).copy()
            if c.hidden:
                self.hidden_in[c.layer] = np.ctypeslib.as_array(c.hidden, shape=(c.T, c.d_model)).copy()
            if c.weights:
                weights[c.layer] = np.ctypeslib.as_array(c.weights, shape=(c.n_sel, c.T, c.T)).copy()
            if c.embed:
                embeds[c.layer] = np.ctypeslib.as_array(c.embed, shape=(c.T, c.d_model)).copy()
            return 0

        cb = OBSERVER(obs)
        req = Request(what, None, None, cb, None)
        e = Err()
        rc = lib.al_model_forward(self.m, toks, T, ctypes.byref(req), None,
                                  hidden.ctypes.data_as(FP), ctypes.byref(e))
        if rc:
            raise RuntimeError(e.msg.decode())
        return hidden, weights, embeds

    def close(self):
        lib.al_tokenizer_free(self.tk)
        lib.al_model_free(self.m)


def resolve(name):
    buf = ctypes.create_string_buffer(4096)
    e = Err()
    rc = lib.al__model_resolve_name(name.encode(), buf, 4096, ctypes.byref(e))
    if rc:
        pytest.fail(f"cannot resolve --model {name}: {e.msg.decode()}", pytrace=False)
    return buf.value.decode()


@pytest.fixture(scope="module")
def minilm_dir():
    d = resolve("minilm")
    assert os.path.isdir(d), d
    return d


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    m = Model(minilm_dir)
    yield m
    m.close()


@pytest.fixture(scope="module")
def hf(minilm_dir):
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tk.no_truncation()
    tk.no_padding()
    return tk


def war_and_peace_body():
    """METHOD section 1, written here independently of src/corpus.c."""
    buf = ctypes.create_string_buffer(4096)
    e = Err()
    rc = lib.al_data_find(b"war_and_peace/pg2600.txt", None, buf, 4096, ctypes.byref(e))
    if rc:
        pytest.fail(f"War and Peace not found: {e.msg.decode()}", pytrace=False)
    text = open(buf.value.decode(), "rb").read().decode("utf-8").replace("\r\n", "\n")
    start = re.search(r"^BOOK ONE: 1805$", text, re.M).start()
    end = re.search(r"^\*\*\* END OF THE PROJECT GUTENBERG EBOOK", text, re.M).start()
    return text[start:end]


# ---- WordPiece vs HF tokenizers ------------------------------------------------------------------

TORTURE = [
    "Héllo, Wörld! Ça va? Ñandú, façade, naïve, coöperate, Æsir, Øresund, Straße, ŁÓDŹ",
    "ÀÁÂÃÄÅ àáâãäå ÈÉÊË èéêë ÌÍÎÏ ÒÓÔÕÖ ÙÚÛÜ Ýÿ Çç Ğğ Şş İı Ǆǅǆ ǈ Ǳ",
    "e\u0301 a\u0300\u0323 o\u0308\u0304 n\u0303 Z\u0327\u030c combining: q\u0335\u0336\u0337 x\u20dd",
    "中文分词测试：我爱北京天安门。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
    "𠀀𠀁 𪜀 𫝀 𫠠 丽 兀 CJK compat: 豈 更 車 — ext: 𬺰 𮯠",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ☕ 🧠 🥲 ✔︎ © ® ™ € £ ¥ ₽ ₹",
    "RTL: שָׁלוֹם עוֹלָם, مرحبا بالعالم! السَّلَامُ عَلَيْكُمْ؟ ‏mark‎ ‪embed‬ ‮override‬",
    "Control:\x01\x02\x7f\x1b[0m tab\there\vvt\fff\u0085nel\u00a0nbsp\u2028ls\u2029ps\u200bzw\u200d\ufeffbom",
    "Replacement \ufffd char, NUL-free, private use \ue000\uf8ff, tags \U000e0041",
    "Punctuation: ¡¿«»‹›„“”‘’‚ — – ‐ ‑ … · • ‰ ′ ″ § ¶ † ‡ ※ ⁂ 、。「」『』【】〈〉《》 ・ ！？ ؟ ، ؛ ۔ ।॥ ።፣ ។ ៕ ၊။ ༄༅ ־ ׃",
    "ASCII: !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ and a_b a-b a.b a'b $5.00 100% #tag @user",
    "Long: " + "a" * 100 + " " + "b" * 101 + " " + "é" * 101 + " " + "supercalifragilisticexpialidocious" * 3,
    "Greek ΣΊΣΥΦΟΣ ὀδυσσεύς Ἀθῆναι; Cyrillic Война и мир, ЁЖИК; Armenian Հայերեն; Georgian ქართული",
    "Devanagari नमस्ते दुनिया; Tamil வணக்கம்; Thai สวัสดีชาวโลก; Tibetan བཀྲ་ཤིས་; Ethiopic ሰላም",
    "Fullwidth ＡＢＣ１２３ ｶﾀｶﾅ; ligatures ﬁ ﬂ ﬀ; superscripts x² H₂O ½ Ⅻ ⓐ; math 𝐀𝐁𝐂 ∑∫√∞≠≤",
    "   leading and trailing spaces   ", "", "\n\n\t  \n",
    "Mixed: don't can't won't it's I'm we're they've y'all o'clock 1,000,000.50 3.14159 1e-10",
    "Hangul jamo 각, compat ㄱㅏ, syllables 가각갂 힣",
]


def encode_lines(model, lines):
    return [model.tokenize(line.encode("utf-8")) for line in lines]


def test_wordpiece_war_and_peace(minilm, hf):
    """The whole body in one call of ours against HF on its paragraphs (a split at blank lines
    is a split at whitespace, so the body's ids are [CLS] + the paragraphs' + [SEP]); and our
    per-paragraph ids for the first 2000 paragraphs."""
    body = war_and_peace_body()
    paras = body.split("\n\n")
    ref = [e.ids for e in hf.encode_batch(paras)]
    for r in ref:
        assert r[0] == 101 and r[-1] == 102
    ref_body = [101] + [i for r in ref for i in r[1:-1]] + [102]
    ours = minilm.tokenize(body.encode("utf-8"))
    assert len(ours) == len(ref_body), (len(ours), len(ref_body))
    first = next((i for i in range(len(ours)) if ours[i] != ref_body[i]), None)
    assert first is None, f"first difference at token {first}"
    assert len(ours) > 700000, len(ours)
    for p, r in zip(paras[:2000], ref[:2000]):
        assert minilm.tokenize(p.encode("utf-8")) == r, p


def test_wordpiece_torture(minilm, hf):
    for line in TORTURE:
        ref = hf.encode(line).ids
        ours = minilm.tokenize(line.encode("utf-8"))
        assert ours == ref, f"{line!r}: {hf.encode(line).tokens} vs {[hf.id_to_token(i) for i in ours]}"
    whole = "\n".join(TORTURE)
    assert minilm.tokenize(whole.encode("utf-8")) == hf.encode(whole).ids


def test_wordpiece_invalid_utf8(minilm, hf):
    # invalid bytes become U+FFFD, which BERT's clean-up drops (as decoding with errors="replace")
    for raw in [b"ab\xffcd", b"x\xc3(y", b"\xed\xa0\x80sur\xf4\x90\x80\x80", b"tr\xe2\x82", b"\x80\x80hi"]:
        assert minilm.tokenize(raw) == hf.encode(raw.decode("utf-8", "replace")).ids, raw


# Code points whose Unicode 14 category differs from the older tables of the Rust crate that
# HF tokenizers uses (unicode_categories), beyond characters those tables do not have at all:
# U+166D (Po -> So in Unicode 12), U+1734 (Mn -> Mc in 14), U+111C9 (Po -> Mn in 12).
CATEGORY_CHANGED = {0x166D, 0x1734, 0x111C9}


def sweep_code_points():
    """Planes 0-3 and 14 whole, and the first 4096 code points of the private-use planes."""
    cps = [c for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF]
    cps += list(range(0xE0000, 0xE1000)) + list(range(0xF0000, 0xF1000)) + list(range(0x100000, 0x101000))
    return cps


def test_wordpiece_code_points(minilm, hf):
    """Every code point (of the planes above) between two letters, 256 per text; a text that
    differs is checked code point by code point. Our tables are Unicode 14 (Python's
    unicodedata, also what HF's Python BertTokenizer uses); HF tokenizers' Rust category
    tables are older, so a character added to Mn/P*/Cf since then is an ordinary letter for
    it: that, and the three category changes above, are the only differences allowed."""
    cps = sweep_code_points()
    chunks = [cps[i : i + 256] for i in range(0, len(cps), 256)]
    texts = [" ".join("x" + chr(c) + "x" for c in ch) for ch in chunks]
    ref = [e.ids for e in hf.encode_batch(texts)]
    suspects = [c for ch, t, r in zip(chunks, texts, ref) if minilm.tokenize(t.encode("utf-8")) != r for c in ch]
    one = [e.ids for e in hf.encode_batch(["x" + chr(c) + "x" for c in suspects])]
    diffs = {c: r for c, r in zip(suspects, one) if minilm.tokenize(("x" + chr(c) + "x").encode("utf-8")) != r}
    for c, r in diffs.items():
        if c in CATEGORY_CHANGED:
            continue
        cat = unicodedata.category(chr(c))
        assert cat == "Mn" or cat == "Cf" or cat.startswith("P"), (hex(c), cat)
        # HF read it as an ordinary letter: the word x?x is one unknown word
        assert r == [101, 100, 102], hex(c)
    assert len(diffs) < 520, len(diffs)
    print(f"{len(diffs)} of {len(cps)} code points differ (Unicode version of HF's category tables)")


def test_unicode_tables_match_unicodedata():
    src = open(os.path.join(SRC, "src", "text", "wordpiece_tables.h"), encoding="utf-8").read()
    m = re.search(r"/\* ---- BEGIN TABLES[^\n]*\n(.*?)/\* ---- END TABLES", src, re.S)
    assert m, "no table markers in src/text/wordpiece_tables.h"
    if f'"{unicodedata.unidata_version}"' not in m.group(1):
        pytest.fail(f"tables not of this Python's Unicode {unicodedata.unidata_version}", pytrace=False)
    assert m.group(1).replace(" ", "").replace("\n", "") == gen_wordpiece_tables.unicode_tables_c().replace(
        " ", "").replace("\n", "")


# ---- forward vs the float64 numpy BERT -----------------------------------------------------------


def gelu_fast(x):
    return 0.5 * x * (1.0 + scipy.special.erf(x / np.sqrt(2.0)))


@pytest.fixture(autouse=True)
def fast_gelu(monkeypatch):
    # the reference's GELU via scipy's erf (same function as math.erf, vectorised)
    monkeypatch.setattr(bert_ref, "_gelu_erf", gelu_fast)


def compare_forward(model, model_dir, ids):
    hidden, weights, _ = model.forward(ids)
    ref_h, ref_w, _ = bert_ref.bert_forward(model_dir, ids)
    rel = np.max(np.abs(hidden - ref_h)) / np.max(np.abs(ref_h))
    assert rel < 1e-3, f"hidden states: max relative error {rel:.3g}"
    assert np.allclose(hidden, ref_h, rtol=1e-3, atol=1e-3 * np.max(np.abs(ref_h)))
    assert sorted(weights) == list(range(len(ref_w)))
    for l in range(len(ref_w)):
        err = np.max(np.abs(weights[l] - ref_w[l]))
        assert err < 1e-4, f"layer {l}: attention weights max error {err:.3g}"
    return rel, max(np.max(np.abs(weights[l] - ref_w[l])) for l in weights)


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Prince Andrew looked at the sky of Austerlitz.",
    "Héllo, wörld! 中文 and emoji 😀 in one sentence.",
]


def test_forward_sentences_match_numpy(minilm, minilm_dir):
    for s in SENTENCES:
        ids = minilm.tokenize(s.encode("utf-8"))
        compare_forward(minilm, minilm_dir, ids)


def test_forward_512_window_matches_numpy(minilm, minilm_dir):
    ids = minilm.tokenize(war_and_peace_body().encode("utf-8"))[:512]  # window 0, L = 512
    rel, werr = compare_forward(minilm, minilm_dir, ids)
    print(f"512-token window: hidden rel {rel:.3g}, weights abs {werr:.3g}")


def test_model_info(minilm):
    i = minilm.info
    assert i.family == b"bert" and i.causal == 0 and i.n_ctx == 512
    assert (i.n_layer, i.n_head, i.d_model, i.d_head, i.d_ff, i.vocab_size) == (6, 12, 384, 32, 1536, 30522)
    assert i.path.endswith(b"model.safetensors")


def test_window_past_512_and_logits_refused(minilm):
    with pytest.raises(RuntimeError, match="513"):
        minilm.forward([101] * 513)
    e = Err()
    toks = (ctypes.c_int32 * 4)(101, 7592, 999, 102)
    logits = (ctypes.c_float * (4 * 30522))()
    rc = lib.al_model_forward(minilm.m, toks, 4, None, logits, None, ctypes.byref(e))
    assert rc == 6 and b"perplexity" in e.msg  # AL_E_UNSUPPORTED


# ---- embeddings --------------------------------------------------------------------------------------

PARA = ["A man is eating food.", "A man is eating a piece of bread.",
        "The new movie is awesome.", "The stock market fell sharply this morning."]


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        pytest.fail(f"attnlim {' '.join(args)} failed: {p.stderr}", pytrace=False)
    return p


def test_embed_paraphrases(minilm_dir):
    args = ["embed", "--model", "minilm", "--json", "--cosine"]
    for s in PARA:
        args += ["--text", s]
    out = json.loads(run(*args).stdout)
    emb = np.array(out["embeddings"])
    cos = np.array(out["cosine"])
    assert emb.shape == (4, 384)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)
    # the reference: tokens from HF tokenizers, hidden states from the numpy BERT
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tk.no_truncation()
    tk.no_padding()
    ref = np.array([bert_ref.mean_pool_normalised(bert_ref.bert_forward(minilm_dir, tk.encode(s).ids)[0])
                    for s in PARA])
    assert np.max(np.abs(emb - ref)) < 1e-4
    ref_cos = ref @ ref.T
    assert np.max(np.abs(cos - ref_cos)) < 1e-4
    # paraphrases closer than unrelated sentences
    assert cos[0, 1] > cos[0, 2] and cos[0, 1] > cos[0, 3] and cos[0, 1] > cos[2, 3]
    assert cos[0, 1] > 0.6 and cos[0, 3] < 0.3, cos


def test_embed_file_and_text_output(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("first sentence\n\nsecond one\r\n")
    out = run("embed", "--model", "minilm", "--file", str(f)).stdout.strip().split("\n")
    assert len(out) == 2 and len(out[0].split()) == 384
    cos = run("embed", "--model", "minilm", "--cosine", "--file", str(f)).stdout.strip().split("\n")
    assert [len(r.split()) for r in cos] == [2, 2] and abs(float(cos[0].split()[0]) - 1) < 1e-5
    assert run("embed", "--help").stdout.startswith("usage")


def test_embed_too_long_sentence():
    p = run("embed", "--model", "minilm", "--text", "word " * 600, check=False)
    assert p.returncode == 1 and "602 tokens" in p.stderr and "512" in p.stderr


# ---- tiny random BERTs: name prefixes, dtypes, and bad input ---------------------------------------


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype=np.float16 if dtype == "F16" else np.float32)
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", ",", "!", "a", "b"]


def tiny_bert(d, prefix="", dtype="F32", drop=None, reshape=None, seed=0, layers=2, C=16, H=4, F=32, P=24):
    rng = np.random.default_rng(seed)
    V = len(VOCAB)
    cfg = {"model_type": "bert", "hidden_size": C, "num_attention_heads": H, "num_hidden_layers": layers,
           "intermediate_size": F, "max_position_embeddings": P, "vocab_size": V, "type_vocab_size": 2,
           "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    t = {"embeddings.word_embeddings.weight": rng.normal(0, 1, (V, C)),
         "embeddings.position_embeddings.weight": rng.normal(0, 1, (P, C)),
         "embeddings.token_type_embeddings.weight": rng.normal(0, 1, (2, C)),
         "embeddings.LayerNorm.weight": 1 + 0.1 * rng.normal(0, 1, C),
         "embeddings.LayerNorm.bias": 0.1 * rng.normal(0, 1, C)}
    for l in range(layers):
        p = f"encoder.layer.{l}."
        for n in ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"]:
            t[p + n + ".weight"] = rng.normal(0, 0.3, (C, C))
            t[p + n + ".bias"] = 0.1 * rng.normal(0, 1, C)
        t[p + "intermediate.dense.weight"] = rng.normal(0, 0.3, (F, C))
        t[p + "intermediate.dense.bias"] = 0.1 * rng.normal(0, 1, F)
        t[p + "output.dense.weight"] = rng.normal(0, 0.3, (C, F))
        t[p + "output.dense.bias"] = 0.1 * rng.normal(0, 1, C)
        for n in ["attention.output.LayerNorm", "output.LayerNorm"]:
            t[p + n + ".weight"] = 1 + 0.1 * rng.normal(0, 1, C)
            t[p + n + ".bias"] = 0.1 * rng.normal(0, 1, C)
    t["pooler.dense.weight"] = rng.normal(0, 0.3, (C, C))
    if drop:
        del t[drop]
    if reshape:
        t[reshape] = t[reshape][:-1]
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), {prefix + k: v for k, v in t.items()}, dtype)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    open(os.path.join(d, "vocab.txt"), "w").write("\n".join(VOCAB) + "\n")
    return d


@pytest.mark.parametrize("prefix,dtype", [("", "F32"), ("bert.", "F32"), ("bert.", "F16")])
def test_tiny_random_bert_matches_numpy(tmp_path, prefix, dtype):
    d = tiny_bert(str(tmp_path / "m"), prefix=prefix, dtype=dtype, seed=len(prefix) + len(dtype))
    m = Model(d)
    try:
        for ids in ([2, 5, 7, 8, 6, 9, 3], list(np.random.default_rng(1).integers(0, len(VOCAB), 24))):
            hidden, weights, _ = m.forward(ids)
            ref_h, ref_w, _ = bert_ref.bert_forward(d, ids)
            assert np.max(np.abs(hidden - ref_h)) / np.max(np.abs(ref_h)) < 1e-4
            for l in range(2):
                assert np.max(np.abs(weights[l] - ref_w[l])) < 1e-5
        assert m.tokenize(b"Hello worlds, a!") == [2, 5, 6, 7, 8, 10, 9, 3]
        # capture of "hidden" (each layer's input) and "embed" (the normalised embedding)
        ids = [2, 5, 6, 7, 3]
        _, _, embeds = m.forward(ids, CAP_HIDDEN | CAP_EMBED | 128)  # 128: AL_CAP_RESIDUAL
        inputs = []
        bert_ref.bert_forward(d, ids, inputs)
        for l in range(2):
            assert np.max(np.abs(m.hidden_in[l] - inputs[l])) < 1e-4 * np.max(np.abs(inputs[l]))
            # post-norm: the residual stream (the layer input) is the hidden capture
            assert np.array_equal(m.residual_in[l], m.hidden_in[l])
            assert np.max(np.abs(embeds[l] - inputs[0])) < 1e-4 * np.max(np.abs(inputs[0]))
        assert m.info.dtype == (b"f16" if dtype == "F16" else b"f32")
    finally:
        m.close()
    # a .safetensors path with config.json beside it opens the same model
    m2 = Model(os.path.join(d, "model.safetensors"))
    assert m2.info.n_layer == 2
    m2.close()


def open_error(d):
    with pytest.raises(RuntimeError) as e:
        Model(d)
    return str(e.value)


def test_bad_checkpoints(tmp_path):
    msg = open_error(tiny_bert(str(tmp_path / "a"), drop="encoder.layer.1.output.dense.bias"))
    assert "encoder.layer.1.output.dense.bias" in msg and "missing" in msg and "model.safetensors" in msg
    msg = open_error(tiny_bert(str(tmp_path / "b"), prefix="bert.", reshape="encoder.layer.0.attention.self.key.weight"))
    assert "bert.encoder.layer.0.attention.self.key.weight" in msg and "model.safetensors" in msg
    d = tiny_bert(str(tmp_path / "c"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["hidden_size"] = 15
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert "not a multiple" in open_error(d)
    cfg["hidden_size"] = 16
    cfg["hidden_act"] = "relu"
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert "relu" in open_error(d)
    del cfg["hidden_act"], cfg["num_hidden_layers"]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert "num_hidden_layers" in open_error(d)
    d = tiny_bert(str(tmp_path / "d"), layers=3)
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["num_hidden_layers"] = 2
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    msg = open_error(d)
    assert "encoder.layer.2." in msg and "num_hidden_layers = 2" in msg, msg
    # through the CLI: non-zero exit, the message names the tensor
    d = tiny_bert(str(tmp_path / "e"), drop="embeddings.LayerNorm.weight")
    p = run("embed", "--model", d, "--text", "hello", check=False)
    assert p.returncode == 1 and "embeddings.LayerNorm.weight" in p.stderr


@pytest.mark.parametrize("content,needle", [("", "empty"), ("[CLS]\n[SEP]\nhello\n", "[UNK]"),
                                            ("[UNK]\n[SEP]\n", "[CLS]"), ("[UNK]\n[CLS]\n", "[SEP]")])
def test_bad_vocab(tmp_path, content, needle):
    d = tiny_bert(str(tmp_path / "v"))
    open(os.path.join(d, "vocab.txt"), "w").write(content)
    p = run("embed", "--model", d, "--text", "hello", check=False)
    assert p.returncode == 1 and needle in p.stderr and "vocab.txt" in p.stderr, p.stderr
    os.remove(os.path.join(d, "vocab.txt"))
    p = run("embed", "--model", d, "--text", "hello", check=False)
    assert p.returncode == 1 and "vocab.txt" in p.stderr, p.stderr


def test_tiny_window_past_context(tmp_path):
    d = tiny_bert(str(tmp_path / "w"))
    p = run("embed", "--model", d, "--text", "a " * 30, check=False)
    assert p.returncode == 1 and "32 tokens" in p.stderr and "24" in p.stderr
