"""GPT-2 byte-level BPE (src/bpe.c, src/tokenizer.c), the corpus body (src/corpus.c) and
`attnlim tokenize`, against independent references built offline from the same local files:
tiktoken (an Encoding from encoder.json + vocab.bpe with tiktoken's own r50k pattern) and HF
tokenizers (a ByteLevel BPE from the same vocabulary and merges)."""
import ctypes
import hashlib
import json
import os
import random
import struct
import subprocess

import pytest

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

SRC = os.environ.get("ATTNLIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ATTNLIM_BIN")
LIB = os.environ.get("ATTNLIM_LIB")
EOT = "<|endoftext|>"


def shared_data():
    for d in (os.environ.get("ATTNLIM_DATA"), os.path.join(SRC, "..", "shared", "data")):
        if d and os.path.isfile(os.path.join(d, "gpt2", "encoder.json")):
            return os.path.abspath(d)
    pytest.fail("the shared data (gpt2/encoder.json, gpt2/vocab.bpe, war_and_peace/pg2600.txt) "
                "is not found: set ATTNLIM_DATA")


DATA = shared_data()
ENCODER = os.path.join(DATA, "gpt2", "encoder.json")
VOCAB_BPE = os.path.join(DATA, "gpt2", "vocab.bpe")
PG2600 = os.path.join(DATA, "war_and_peace", "pg2600.txt")


# ---- references -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tt():
    ranks = data_gym_to_mergeable_bpe_ranks(VOCAB_BPE, ENCODER)  # local files: no network
    return tiktoken.Encoding("gpt2-local", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256}, explicit_n_vocab=50257)


def hf_bpe(vocab, merges, pre, special=False, ignore_merges=False):
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre
    if special:
        tk.add_special_tokens([EOT])
    return tk


def read_merges(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    return [tuple(l.split(" ")) for l in lines if l and not l.startswith("#version")]


@pytest.fixture(scope="module")
def gpt2_files():
    return json.load(open(ENCODER, encoding="utf-8")), read_merges(VOCAB_BPE)


@pytest.fixture(scope="module")
def hf(gpt2_files):
    v, m = gpt2_files
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return hf_bpe(v, m, pre), hf_bpe(v, m, pre, special=True)


# ---- ours, through the shared library ---------------------------------------------------------

class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


@pytest.fixture(scope="module")
def lib():
    assert LIB and os.path.isfile(LIB), "ATTNLIM_LIB is not set (run through ctest)"
    L = ctypes.CDLL(LIB, mode=os.RTLD_LAZY)  # other modules may be mid-way; we need ours
    L.al_tokenizer_open_gpt2.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(Err)]
    L.al_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(Err)]
    L.al_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                                ctypes.POINTER(Err)]
    L.al_corpus_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(Err)]
    L.al_tokenizer_free.argtypes = [ctypes.c_void_p]
    return L


LIBC = ctypes.CDLL(None)
LIBC.free.argtypes = [ctypes.c_void_p]


class Ours:
    def __init__(self, L, vocab=None):
        self.L = L
        self.tk = ctypes.c_void_p()
        e = Err()
        rc = L.al_tokenizer_open_gpt2(vocab.encode() if vocab else None, ctypes.byref(self.tk),
                                      ctypes.byref(e))
        assert rc == 0, e.msg.decode()

    def encode(self, b, special=False):
        ids, n, e = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t(), Err()
        rc = self.L.al_tokenize(self.tk, b, len(b), int(special), ctypes.byref(ids),
                                ctypes.byref(n), ctypes.byref(e))
        assert rc == 0, e.msg.decode()
        out = ids[:n.value]
        LIBC.free(ctypes.cast(ids, ctypes.c_void_p))
        return out

    def decode(self, ids):
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        p, n, e = ctypes.c_void_p(), ctypes.c_size_t(), Err()
        rc = self.L.al_detokenize(self.tk, arr, len(ids), ctypes.byref(p), ctypes.byref(n),
                                  ctypes.byref(e))
        if rc:
            return rc, e.msg.decode()
        out = ctypes.string_at(p, n.value)
        LIBC.free(p)
        return 0, out


@pytest.fixture(scope="module")
def ours(lib):
    o = Ours(lib)
    yield o
    lib.al_tokenizer_free(o.tk)


def run(*args, stdin=None, env_extra=None):
    assert BIN and os.path.isfile(BIN), "ATTNLIM_BIN is not set (run through ctest)"
    env = dict(os.environ, ATTNLIM_NO_DOWNLOAD="1", ATTNLIM_DATA=DATA)
    env.update(env_extra or {})
    return subprocess.run([BIN, "tokenize", *args], input=stdin, capture_output=True, env=env,
                          timeout=120)


# ---- the corpus body (METHOD section 1), computed here from the raw file ----------------------

def expected_body():
    raw = open(PG2600, "rb").read()
    lines = raw.split(b"\n")
    start = next(i for i, l in enumerate(lines) if l.rstrip(b"\r") == b"BOOK ONE: 1805")
    end = next(i for i in range(start + 1, len(lines))
               if lines[i].startswith(b"*** END OF THE PROJECT GUTENBERG EBOOK"))
    return (b"\n".join(lines[start:end]) + b"\n").replace(b"\r\n", b"\n")


@pytest.fixture(scope="module")
def body():
    return expected_body()


def test_corpus_body_exact(lib, body):
    p, n, e = ctypes.c_void_p(), ctypes.c_size_t(), Err()
    assert lib.al_corpus_load(b"war-and-peace", DATA.encode(), ctypes.byref(p), ctypes.byref(n),
                              ctypes.byref(e)) == 0, e.msg.decode()
    got = ctypes.string_at(p, n.value)
    LIBC.free(p)
    # start and end bytes, read from the raw file by hand: the body opens with the heading
    # and the first chapter, and closes with the Second Epilogue's last sentence and the
    # blank lines before the END line
    assert got.startswith(b"BOOK ONE: 1805\n\n\n\n\n\nCHAPTER I\n\n\xe2\x80\x9cWell, Prince")
    assert got.endswith(b"a dependence of which we are not\nconscious.\n\n\n\n\n")
    assert b"\r\n" not in got
    assert not got.endswith(b"***")
    # the body ends with the blank lines before the END line, whose text is absent
    assert b"END OF THE PROJECT GUTENBERG" not in got
    assert got.endswith(b"\n")
    assert len(got) == len(body)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest()
    # the table of contents line "    BOOK ONE: 1805" (indented) is not the start
    assert body.count(b"BOOK ONE: 1805") == 1


def test_corpus_file_path_is_bytes(lib, tmp_path):
    f = tmp_path / "x.txt"
    f.write_bytes(b"a\r\nb\xff")
    p, n, e = ctypes.c_void_p(), ctypes.c_size_t(), Err()
    assert lib.al_corpus_load(str(f).encode(), None, ctypes.byref(p), ctypes.byref(n),
                              ctypes.byref(e)) == 0
    assert ctypes.string_at(p, n.value) == b"a\r\nb\xff"
    LIBC.free(p)


# ---- War and Peace: identical ids -------------------------------------------------------------

def test_war_and_peace_ids(body, tt, hf):
    r = run("--corpus", "war-and-peace")
    assert r.returncode == 0, r.stderr.decode()
    ids = [int(x) for x in r.stdout.split()]
    text = body.decode("utf-8")
    ref_tt = tt.encode_ordinary(text)
    assert ids == ref_tt
    ref_hf = hf[0].encode(text).ids
    assert ids == ref_hf
    assert len(ids) > 800000


# ---- the Unicode torture text -----------------------------------------------------------------

TORTURE_LINES = [
    # emoji: ZWJ families, skin tones, flags, keycaps, variation selectors
    "Family: \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 and "
    "\U0001F3F3\uFE0F\u200D\U0001F308, \U0001F44D\U0001F3FD\U0001F44D\U0001F3FF!",
    "Flags \U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5 keycap 1\uFE0F\u20E3 #\uFE0F\u20E3 \u2764\uFE0F\u2764",
    # CJK, kana, hangul, fullwidth
    "中文字符：你好，世界！日本語のテキスト、カタカナ・ひらがな。한국어 문장입니다。ＡＢＣ１２３",
    # combining marks, Zalgo, decomposed accents, Devanagari with virama, Thai
    "e\u0301te\u0301 cafe\u0301 Z\u0351\u0313a\u0352\u0354l\u0327g\u0303o\u0336 नमस्ते क्षत्रिय ภาษาไทย",
    # RTL: Hebrew with niqqud, Arabic, marks, mixed digits
    "שָׁלוֹם עוֹלָם \u200Fمرحبا بالعالم\u200E (٣ كتب) و ۱۲۳ and English 42",
    # contractions in all cases
    "it's IT'S It'S don't DON'T we're WE'RE We'Re we've WE'VE I'm I'M we'll WE'LL We'Ll "
    "he'd HE'D 'S 'T 'RE 'VE 'M 'LL 'D 's't're've'm'll'd ''s rock'n'roll it\u2019s",
    # white space runs: tabs, newlines, CRLF, NBSP, Unicode spaces, separators, NEL
    "a\t\tb\n\n\nc\r\n\r\nd  e   f    \n    g\u00A0\u00A0h\u2000\u2001\u2002\u2003i\u3000j"
    "\u205Fk\u1680l\u180Em\u0085n\u2028o\u2029p\x0Bq\x0Cr\u200Bs\uFEFFt \t \n x",
    "   leading and trailing   ",
    "\n\n\n",
    "\t",
    # digits of many scripts, numerals, fractions, superscripts
    "0123456789 ٠١٢٣٤٥٦٧٨٩ ۰۱۲۳ ०१२३४ ০১২ ๐๑๒ ０１２３ Ⅻ ⅻ ² ³ ½ ① 1,234.56 3.14e-10 1/2",
    # punctuation runs and symbols
    "Hello!!! ??? ... --- *** ### $$$ @user #tag <html> {json: [1,2]} ™ © ∑ ∞ → ≠ 𝔘𝔫𝔦",
    # the special token, as text and next to text
    "end<|endoftext|>start <|endoftext|><|endoftext|> <|endoftext| |endoftext|> <|ENDOFTEXT|>",
    # astral letters, math, rare scripts (assigned before Unicode 14)
    "𐍈𐌰𐌹 𝐀𝐁𝐂 𝒜 ꦗꦮ ᚠᚢᚦ ⴰⵣⵓⵍ ܐܪܡܝܐ ᠮᠣᠩᠭᠣᠯ",
    "",
]
TORTURE = "\n".join(TORTURE_LINES)

INVALID = [b"\x80", b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80",
           b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xc3", b"\xa0\xa0"]


def test_torture_valid_text(ours, tt, hf):
    for t in TORTURE_LINES + [TORTURE]:
        b = t.encode("utf-8")
        got = ours.encode(b)
        assert got == tt.encode_ordinary(t), repr(t)
        assert got == hf[0].encode(t).ids, repr(t)
        assert ours.decode(got) == (0, b)


def test_special_token(ours, tt, hf):
    for t in [TORTURE, EOT, EOT + EOT, "a" + EOT + "b", " " + EOT + " ", "<|endoftext|"]:
        b = t.encode()
        plain, special = ours.encode(b), ours.encode(b, special=True)
        assert plain == tt.encode_ordinary(t) == hf[0].encode(t).ids
        assert special == tt.encode(t, allowed_special={EOT}) == hf[1].encode(t).ids
        assert ours.decode(plain) == (0, b) and ours.decode(special) == (0, b)
    assert 50256 not in ours.encode(TORTURE.encode())
    assert ours.encode(b"<|endoftext|>", special=True) == [50256]


def test_invalid_utf8_matches_tiktoken_encode_bytes(ours, tt):
    rng = random.Random(2600)
    cases = []
    for t in TORTURE_LINES:
        b = t.encode()
        for bad in INVALID:
            for pos in {0, len(b) // 2, len(b)}:
                cases.append(b[:pos] + bad + b[pos:])
    cases.append(TORTURE.encode() + b"\xff")
    cases.append(b"\xff" + TORTURE.encode())
    for _ in range(40):
        b = bytearray(TORTURE.encode())
        for _ in range(rng.randint(1, 5)):
            b.insert(rng.randrange(len(b) + 1), rng.choice([0x80, 0xff, 0xc3, 0xed, 0xf4]))
        cases.append(bytes(b))
    for b in cases:
        got = ours.encode(b)
        assert got == tt._encode_bytes(b), repr(b)
        assert ours.decode(got) == (0, b)


def test_invalid_utf8_with_special(ours, tt):
    # segments between allowed special tokens are encoded as _encode_bytes does
    b = b"x\xff y" + EOT.encode() + b"\xe2\x82 z" + EOT.encode() + b"ok"
    ref = []
    for i, seg in enumerate(b.split(EOT.encode())):
        if i:
            ref.append(50256)
        ref += tt._encode_bytes(seg)
    assert ours.encode(b, special=True) == ref
    assert ours.encode(b) == tt._encode_bytes(b)


def test_random_bytes_round_trip_and_tiktoken(ours, tt):
    rng = random.Random(7)
    alphabet = list(b" \t\n\r'sdmtlvreSDMTLVRE019.,!<|>") + [0xc3, 0xa9, 0xe2, 0x80, 0x99, 0xf0,
                                                              0x9f, 0x98, 0x80, 0xff, 0xed, 0xa0]
    for i in range(1500):
        n = rng.randint(0, 60)
        if i % 3 == 0:
            b = bytes(rng.randrange(256) for _ in range(n))
        else:
            b = bytes(rng.choice(alphabet) for _ in range(n))
        got = ours.encode(b)
        assert ours.decode(got) == (0, b), repr(b)
        assert got == tt._encode_bytes(b), repr(b)
        sp = ours.encode(b, special=True)
        assert ours.decode(sp) == (0, b)
    # long pieces (the heap path): a long word, a long invalid run, long white space
    for b in [b"a" * 5000, b"ab" * 3000, b"\xff" * 3000, b" " * 4000 + b"x", b"\n" * 3000,
              "ÿé".encode() * 2000, b"x\xff" + b"hello world " * 500]:
        got = ours.encode(b)
        assert got == tt._encode_bytes(b)
        assert ours.decode(got) == (0, b)


def test_decode_out_of_range(ours):
    rc, msg = ours.decode([0, 50257])
    assert rc != 0 and "50257" in msg and "position 1" in msg
    rc, msg = ours.decode([-1])
    assert rc != 0 and "-1" in msg


# ---- other vocabulary layouts and pre-tokenizers -------------------------------------------

def test_hf_file_names(lib, tmp_path, tt):
    os.symlink(ENCODER, tmp_path / "vocab.json")
    os.symlink(VOCAB_BPE, tmp_path / "merges.txt")
    o = Ours(lib, str(tmp_path))
    t = TORTURE_LINES[5] + TORTURE_LINES[6]
    assert o.encode(t.encode()) == tt.encode_ordinary(t)
    lib.al_tokenizer_free(o.tk)
    r = run("--vocab", str(tmp_path), "-", stdin=b"Hello world")
    assert r.returncode == 0 and r.stdout.split() == [b"15496", b"995"]


LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def cli_ids(args, text):
    r = run(*args, "-", stdin=text.encode())
    assert r.returncode == 0, r.stderr.decode()
    return [int(x) for x in r.stdout.split()]


def test_llama3_pretokenizer(gpt2_files, tmp_path):
    """Our llama3 pattern vs HF's Split(Regex) + ByteLevel(use_regex=False), as in Llama 3's
    tokenizer.json, over the GPT-2 vocabulary."""
    v, m = gpt2_files
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    ref = hf_bpe(v, m, pre, ignore_merges=True)
    text = TORTURE + "\nDigits 1234567 12 1 and IT'S WE'LL\r\n\r\n  x\n \n"
    got = cli_ids(["--vocab", os.path.join(DATA, "gpt2"), "--pre", "llama3"], text)
    assert got == ref.encode(text).ids


def gguf_strings(path, keys):
    """A minimal GGUF v2/v3 metadata reader (string arrays and strings) for the test."""
    out = {}
    with open(path, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF" and version in (2, 3)

        def rstr():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n)

        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def rval(t):
            if t == 8:
                return rstr()
            if t == 9:
                (et,) = struct.unpack("<I", f.read(4))
                (n,) = struct.unpack("<Q", f.read(8))
                if et == 8:
                    return [rstr() for _ in range(n)]
                if et in sizes:
                    f.seek(sizes[et] * n, 1)
                    return None
                return [rval(et) for _ in range(n)]
            f.seek(sizes[t], 1)
            return None

        for _ in range(n_kv):
            k = rstr().decode()
            (t,) = struct.unpack("<I", f.read(4))
            v = rval(t)
            if k in keys:
                out[k] = v
    return out


def find_smollm2():
    """The SmolLM2 GGUF: $ATTNLIM_SMOLLM2_GGUF, else what `attnlim fetch smollm2` resolves
    (the cache, or a pinned download into it on a fresh machine), so this test does not
    depend on another test having fetched it first."""
    path = os.environ.get("ATTNLIM_SMOLLM2_GGUF")
    if path and os.path.isfile(path):
        return path
    assert BIN and os.path.isfile(BIN), "ATTNLIM_BIN is not set (run through ctest)"
    r = subprocess.run([BIN, "fetch", "smollm2", "--json"], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, "attnlim fetch smollm2 failed: " + r.stderr
    path = json.loads(r.stdout)["path"]
    assert os.path.isfile(path), path
    return path


def test_smollm2_vocab_from_gguf(tmp_path):
    """SmolLM2's vocabulary and merges (GGUF metadata, tokenizer.ggml.pre = smollm) through our
    engine with the smollm pre-tokenizer vs HF: Sequence[Digits(individual), ByteLevel]."""
    g = gguf_strings(find_smollm2(), {"tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                                      "tokenizer.ggml.pre", "tokenizer.ggml.model"})
    assert g["tokenizer.ggml.model"] == b"gpt2" and g["tokenizer.ggml.pre"] == b"smollm"
    tokens = [t.decode("utf-8") for t in g["tokenizer.ggml.tokens"]]
    merges = [m.decode("utf-8") for m in g["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                         encoding="utf-8")
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                            use_regex=True)])
    ref = hf_bpe(vocab, [tuple(x.split(" ")) for x in merges], pre)
    text = TORTURE + "\nYear 1805, 12345 men;  x  \n\n 42"
    got = cli_ids(["--vocab", str(tmp_path), "--pre", "smollm"], text)
    assert got == ref.encode(text).ids
    wp = expected_body()[:200000].decode()
    assert cli_ids(["--vocab", str(tmp_path), "--pre", "smollm"], wp) == ref.encode(wp).ids


# ---- the CLI and bad input ----------------------------------------------------------------------

def test_cli_json_and_decode_round_trip(tmp_path):
    f = tmp_path / "t.txt"
    data = TORTURE.encode() + b"\xff\xfe tail"
    f.write_bytes(data)
    r = run(str(f), "--json")
    assert r.returncode == 0
    assert b"not valid UTF-8 at byte" in r.stderr
    j = json.loads(r.stdout)
    assert j["count"] == len(j["ids"]) > 0
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(map(str, j["ids"])))
    r = run("--decode", str(ids))
    assert r.returncode == 0 and r.stdout == data
    r = run("--decode", "-", stdin=b"15496\n995\n")
    assert r.returncode == 0 and r.stdout == b"Hello world"
    r = run("--decode", "--json", "-", stdin=b"15496, 995")
    assert r.returncode == 0 and json.loads(r.stdout)["text"] == "Hello world"
    r = run("--allow-special", "-", stdin=b"a<|endoftext|>b")
    assert r.returncode == 0 and r.stdout.split() == [b"64", b"50256", b"65"]
    r = run("--help")
    assert r.returncode == 0 and b"usage" in r.stdout


def fails(r, *needles):
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "Traceback" not in err and "Segmentation" not in err
    for n in needles:
        assert n in err, err
    return err


def test_cli_bad_input(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    fails(run(str(empty)), "empty.txt", "empty")
    fails(run("--decode", "-", stdin=b"15496 99999"), "99999", "outside")
    fails(run("--decode", "-", stdin=b"15496 abc"), "abc", "line 1")
    fails(run("--decode", "-", stdin=b"  \n"), "no token ids")
    fails(run(str(tmp_path / "missing.txt")), "missing.txt")
    fails(run("--vocab", str(tmp_path / "nodir"), "-", stdin=b"x"), "nodir")
    fails(run("--bogus"), "--bogus")
    fails(run("-", "--pre", "nope", stdin=b"x"), "nope")
    fails(run(), "exactly one input")


def vocab_dir(tmp_path, name, enc_text, bpe_text):
    d = tmp_path / name
    d.mkdir()
    (d / "encoder.json").write_bytes(enc_text)
    (d / "vocab.bpe").write_bytes(bpe_text)
    return d


def test_bad_vocab_files(tmp_path):
    enc = open(ENCODER, "rb").read()
    bpe = open(VOCAB_BPE, "rb").read()
    # encoder.json: truncated JSON (line reported), not an object, bad ids, duplicate id
    d = vocab_dir(tmp_path, "trunc", enc[: len(enc) // 2], bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json line 1", "malformed JSON")
    d = vocab_dir(tmp_path, "multiline", b'{\n"a": 0,\n"b": ,\n}', bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json line 3")
    d = vocab_dir(tmp_path, "array", b"[1, 2]", bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json", "object")
    j = json.loads(enc)
    j["hello"] = 99999999
    d = vocab_dir(tmp_path, "range", json.dumps(j).encode(), bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json", "hello")
    d = vocab_dir(tmp_path, "range2", b'{"a": 0,\n"b": 1e300,\n"c": 1}', bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json line 2", "'b'", "out of range")
    j = json.loads(enc)
    j["Ġthe"] = 0
    j["!"] = 1
    d = vocab_dir(tmp_path, "dup", json.dumps(j).encode(), bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json", "id")
    d = vocab_dir(tmp_path, "str", json.dumps({"a": "x"}).encode(), bpe)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json", "not a number")
    # vocab.bpe: a malformed line and an unknown token, each named with its line
    lines = bpe.split(b"\n")
    bad = b"\n".join(lines[:10] + [b"nospace"] + lines[10:])
    d = vocab_dir(tmp_path, "merge1", enc, bad)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "vocab.bpe line 11", "left right")
    bad = b"\n".join(lines[:5] + [b"\xc4\xa0 zzzzunknown"] + lines[5:])
    d = vocab_dir(tmp_path, "merge2", enc, bad)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "vocab.bpe line 6", "zzzzunknown")
    d = vocab_dir(tmp_path, "emptybpe", enc, b"#version: 0.2\n")
    fails(run("--vocab", str(d), "-", stdin=b"x"), "vocab.bpe", "no merges")
    # a directory with only one of the two files
    d = tmp_path / "half"
    d.mkdir()
    (d / "encoder.json").write_bytes(enc)
    fails(run("--vocab", str(d), "-", stdin=b"x"), "vocab.bpe", "missing")
    d = tmp_path / "none"
    d.mkdir()
    fails(run("--vocab", str(d), "-", stdin=b"x"), "encoder.json")
