/* bpe.c: the byte-level BPE engine (GPT-2 and GGUF "gpt2"-model vocabularies).
 *
 * Encoding = special-token split (when allowed) -> pre-tokenization with a PCRE2 pattern
 * (UTF + UCP, JIT when available) -> byte-level BPE of every pre-token by merge rank.
 *
 * Token strings are in GPT-2's byte-to-unicode alphabet: every byte b is one code point
 * b2u[b] (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143), so a
 * token's bytes are recovered by mapping its code points back.
 *
 * Invalid UTF-8. PCRE2 (like Rust's regex) cannot split invalid UTF-8, and GPT-2's own
 * encoder.py only takes str. We follow tiktoken's CoreBPE._encode_bytes, the one reference
 * that takes bytes: the longest valid UTF-8 prefix of a segment is pre-tokenized and encoded
 * as usual; then the tokens of its last pre-token (extended backwards over tokens made only
 * of ' ', '\n', '\t') are removed, and their bytes plus all the remaining bytes of the segment
 * are encoded as one BPE piece. This is lossless (decode(encode(x)) == x for any bytes) and
 * gives ids identical to tiktoken's; note that after the first invalid byte of a segment the
 * words are no longer split by the pattern (tiktoken's rule, kept for exactness).
 *
 * Merges: a pair (left, right) of adjacent symbols is merged when "left right" is a merge,
 * lowest rank first, leftmost first among equal ranks (equivalent to GPT-2's encoder.py and
 * to HF tokenizers' BPE). Short pieces use an O(n^2) scan over a small array; long ones a
 * binary heap over a linked list (O(n log n)). Results of short pieces are cached per call
 * (no state is shared between calls: al_tokenize is re-entrant on one tokenizer).
 *
 * Bytes without a single-byte token (GPT-2 has all 256; SmolLM2 lacks 21, e.g. 0x04, 0xC0,
 * 0xFF) are dropped before merging, as HF tokenizers' BPE without an unknown token and
 * llama.cpp do: such vocabularies cannot round-trip those bytes. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN_BYTES 65536     /* one token's string */
#define MAX_TOKENS      (1 << 24) /* vocabulary size cap */
#define SMALL_PIECE     48        /* pieces up to this many bytes: array scan, cached */
#define MAX_SPECIALS    4096
#define MAX_CACHED      (1u << 20) /* distinct pieces cached per call */

/* White_Space (Unicode), spelled out: PCRE2's \s under UCP also matches U+180E, which Rust's
 * regex (tiktoken) and Oniguruma (HF tokenizers) do not treat as a space. */
/* clang-format off */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* clang-format on */

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static const char PAT_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                               "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static const char PAT_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* SmolLM (HF: Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]): every
 * \p{N} character is a piece of its own; the text between is split with the GPT-2 pattern. */
static const char PAT_DIGIT[] = "\\p{N}";

/* ---- hash tables ---------------------------------------------------------------------- */

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return al__hash64(h);
}

typedef struct {
    uint64_t key; /* (left << 32) | right, +1 so that 0 marks an empty slot */
    int32_t rank;
    int32_t id; /* the merged token */
} merge_slot;

typedef struct {
    char *text;
    size_t len;
    int32_t id;
} special_tok;

struct al__bpe {
    al__pretok pre;
    int n_tokens;
    int direct_lookup;    /* a piece that is a whole token is that token (llama3) */
    uint32_t b2u[256];    /* byte -> code point */
    int16_t u2b[324];     /* code point (< 324) -> byte, -1 outside the alphabet */
    int32_t byte_id[256]; /* token id of each single byte, -1 if the vocabulary lacks it */
    /* token bytes: pool[off[i] .. off[i+1]) for id i */
    unsigned char *pool; /* [off[n_tokens]] */
    size_t *off;         /* [n_tokens + 1] */
    uint8_t *is_special; /* [n_tokens] */
    /* bytes -> id (lowest id for duplicates); open addressing, -1 = empty */
    int32_t *tok_hash; /* [tok_cap] */
    size_t tok_cap;
    merge_slot *merge_hash; /* [merge_cap] */
    size_t merge_cap;
    special_tok *specials; /* [n_specials] */
    int n_specials;
    /* the pre-token patterns, applied in sequence (each splits the pieces of the one before,
     * keeping matches and the gaps between them: HF's Split "Isolated"); none = one piece */
    pcre2_code *re[AL__BPE_MAX_SPLITS];
    int n_re;
    /* SentencePiece-style vocabularies (al__bpe_opts) */
    int raw;               /* token strings are raw UTF-8: the initial symbols are characters */
    int byte_fallback;     /* a character without a token becomes its bytes' <0xXX> tokens */
    int32_t byte_tok[256]; /* the <0xXX> token of each byte (-1 none) */
    int32_t unk_id;        /* the unknown token (-1: unknown characters are dropped) */
    int fuse_unk;          /* consecutive unknowns become one */
};

static int32_t tok_lookup(const al__bpe *b, const unsigned char *p, size_t n) {
    size_t mask = b->tok_cap - 1;
    for (size_t i = hash_bytes(p, n) & mask;; i = (i + 1) & mask) {
        int32_t id = b->tok_hash[i];
        if (id < 0) return -1;
        size_t l = b->off[id + 1] - b->off[id];
        if (l == n && memcmp(b->pool + b->off[id], p, n) == 0) return id;
    }
}

static void tok_insert(al__bpe *b, int32_t id) {
    const unsigned char *p = b->pool + b->off[id];
    size_t n = b->off[id + 1] - b->off[id];
    size_t mask = b->tok_cap - 1;
    for (size_t i = hash_bytes(p, n) & mask;; i = (i + 1) & mask) {
        int32_t o = b->tok_hash[i];
        if (o < 0) {
            b->tok_hash[i] = id;
            return;
        }
        size_t l = b->off[o + 1] - b->off[o];
        if (l == n && memcmp(b->pool + b->off[o], p, n) == 0) return; /* keep the lower id */
    }
}

static inline uint64_t pair_key(int32_t l, int32_t r) {
    return (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
}

static inline const merge_slot *merge_lookup(const al__bpe *b, int32_t l, int32_t r) {
    uint64_t key = pair_key(l, r);
    size_t mask = b->merge_cap - 1;
    for (size_t i = al__hash64(key) & mask;; i = (i + 1) & mask) {
        const merge_slot *s = &b->merge_hash[i];
        if (s->key == key) return s;
        if (s->key == 0) return NULL;
    }
}

/* Returns 0 if inserted, 1 if the pair was already there (the lower rank is kept). */
static int merge_insert(al__bpe *b, int32_t l, int32_t r, int32_t rank, int32_t id) {
    uint64_t key = pair_key(l, r);
    size_t mask = b->merge_cap - 1;
    for (size_t i = al__hash64(key) & mask;; i = (i + 1) & mask) {
        merge_slot *s = &b->merge_hash[i];
        if (s->key == key) return 1;
        if (s->key == 0) {
            s->key = key;
            s->rank = rank;
            s->id = id;
            return 0;
        }
    }
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length of the longest valid UTF-8 prefix (the rules of Rust's str and of PCRE2: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
size_t al__utf8_valid_len(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return i;
        if (n - i <= need) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
        i += need + 1;
    }
    return n;
}

/* Decodes one code point of a valid-or-not UTF-8 string; returns its length (0 = invalid). */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t l = al__utf8_valid_len(s, n < 4 ? n : 4);
    if (l == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (c < 0xF0) {
        *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        return 3;
    }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

/* GPT-2's bytes_to_unicode: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to
 * themselves; the others, in increasing order, to 256, 257, ... */
static void build_byte_map(uint32_t b2u[256], int16_t u2b[324]) {
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    int extra = 0;
    for (int c = 0; c < 256; c++) {
        int keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        b2u[c] = keep ? (uint32_t)c : (uint32_t)(256 + extra++);
        u2b[b2u[c]] = (int16_t)c;
    }
}

/* Token string (byte-level alphabet, UTF-8) -> its bytes in out (capacity >= strlen(s)).
 * A string with code points outside the alphabet (e.g. an added token) keeps its own
 * UTF-8 bytes. Returns the byte count. */
static size_t token_to_bytes(const int16_t *u2b, const char *s, size_t slen, unsigned char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < slen) {
        uint32_t cp;
        size_t l = utf8_next(p + i, slen - i, &cp);
        if (l == 0 || cp >= 324 || u2b[cp] < 0) {
            memcpy(out, s, slen); /* not byte-level: raw text */
            return slen;
        }
        out[o++] = (unsigned char)u2b[cp];
        i += l;
    }
    return o;
}

/* ---- construction ------------------------------------------------------------------------ */

static int compile_pattern(const char *pat, pcre2_code **out, al_error *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return al__err(err, AL_E_UNSUPPORTED, "pre-tokenizer pattern: PCRE2 error at %zu: %s",
                       (size_t)eo, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    *out = re;
    return 0;
}

void al__bpe_free(al__bpe *b) {
    if (!b) return;
    free(b->pool);
    free(b->off);
    free(b->is_special);
    free(b->tok_hash);
    free(b->merge_hash);
    for (int i = 0; i < b->n_specials; i++) free(b->specials[i].text);
    free(b->specials);
    for (int i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    free(b);
}

static int build_tokens(al__bpe *b, const char *const *tokens, int n, al_error *err) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!tokens[i]) return al__err(err, AL_E_FORMAT, "token %d is missing", i);
        size_t l = strlen(tokens[i]);
        if (l > MAX_TOKEN_BYTES)
            return al__err(err, AL_E_FORMAT, "token %d is %zu bytes long (limit %d)", i, l,
                           MAX_TOKEN_BYTES);
        total += l;
    }
    b->pool = al__malloc(total + 1, "token bytes", err);
    b->off = al__malloc(((size_t)n + 1) * sizeof *b->off, "token offsets", err);
    b->is_special = al__calloc((size_t)n, 1, "token flags", err);
    b->tok_cap = pow2_at_least((size_t)n * 2);
    b->tok_hash = al__malloc(b->tok_cap * sizeof *b->tok_hash, "token table", err);
    if (!b->pool || !b->off || !b->is_special || !b->tok_hash) return AL_E_NOMEM;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        b->off[i] = o;
        size_t l = strlen(tokens[i]);
        if (b->raw)
            memcpy(b->pool + o, tokens[i], l), o += l;
        else
            o += token_to_bytes(b->u2b, tokens[i], l, b->pool + o);
    }
    b->off[n] = o;
    memset(b->tok_hash, 0xff, b->tok_cap * sizeof *b->tok_hash);
    for (int i = 0; i < n; i++) tok_insert(b, i);
    for (int c = 0; c < 256; c++) {
        unsigned char ch = (unsigned char)c;
        b->byte_id[c] = tok_lookup(b, &ch, 1);
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", c);
        b->byte_tok[c] = b->raw ? tok_lookup(b, (const unsigned char *)name, 6) : -1;
    }
    return 0;
}

/* Finds the token whose string is s[0..n) (byte-level alphabet); -1 if none. */
static int32_t lookup_string(const al__bpe *b, const char *s, size_t n, unsigned char *scratch) {
    if (b->raw) return tok_lookup(b, (const unsigned char *)s, n);
    size_t l = token_to_bytes(b->u2b, s, n, scratch);
    return tok_lookup(b, scratch, l);
}

static int build_merges(al__bpe *b, const char *const *merges, int n_merges, const int *lines,
                        const char *name, al_error *err) {
    b->merge_cap = pow2_at_least((size_t)n_merges * 2 + 2);
    b->merge_hash = al__calloc(b->merge_cap, sizeof *b->merge_hash, "merge table", err);
    unsigned char *scratch = al__malloc(2 * MAX_TOKEN_BYTES + 8, "merge scratch", err);
    if (!b->merge_hash || !scratch) {
        free(scratch);
        return AL_E_NOMEM;
    }
    int rc = 0;
    for (int r = 0; r < n_merges; r++) {
        const char *m = merges[r];
        char where[96];
        if (lines)
            snprintf(where, sizeof where, "line %d", lines[r]);
        else
            snprintf(where, sizeof where, "merge %d", r);
        const char *sp = m ? strchr(m, ' ') : NULL;
        size_t len = m ? strlen(m) : 0;
        if (!m || !sp || sp == m || sp[1] == 0 || strchr(sp + 1, ' ') ||
            len > 2 * MAX_TOKEN_BYTES) {
            rc = al__err(err, AL_E_FORMAT, "%s %s: expected 'left right' (two tokens, one space)",
                         name, where);
            break;
        }
        size_t ll = (size_t)(sp - m), rl = len - ll - 1;
        int32_t l = lookup_string(b, m, ll, scratch);
        int32_t rr = lookup_string(b, sp + 1, rl, scratch);
        /* the merged string: left bytes + right bytes */
        int32_t id = -1;
        if (l >= 0 && rr >= 0) {
            size_t lb = b->off[l + 1] - b->off[l], rb = b->off[rr + 1] - b->off[rr];
            memcpy(scratch, b->pool + b->off[l], lb);
            memcpy(scratch + lb, b->pool + b->off[rr], rb);
            id = tok_lookup(b, scratch, lb + rb);
        }
        if (l < 0 || rr < 0 || id < 0) {
            const char *what = l < 0    ? "its left token is"
                               : rr < 0 ? "its right token is"
                                        : "the merged token is";
            rc = al__err(err, AL_E_FORMAT, "%s %s: merge '%.200s': %s not in the vocabulary", name,
                         where, m, what);
            break;
        }
        merge_insert(b, l, rr, r, id); /* a repeated merge keeps its first rank */
    }
    free(scratch);
    return rc;
}

/* A candidate merge of build_merges_scored: the pair, the merged token, its place in the order. */
typedef struct scored_pair {
    float score, sl, sr; /* of the merged token, of the left and right tokens */
    int32_t l, r, id, seq;
} scored_pair;

/* transformers' order: the merged token's score, highest first; within a token, the left and
 * then the right token's score, highest first; ties in vocabulary, then split, order. */
static int cmp_scored(const void *a, const void *b) {
    const scored_pair *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->sl != y->sl) return x->sl > y->sl ? -1 : 1;
    if (x->sr != y->sr) return x->sr > y->sr ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* SentencePiece vocabularies (scores, no merges): every split of token t at a character
 * boundary into two tokens l + r is the merge (l, r) -> t, ranked as cmp_scored orders them. */
static int build_merges_scored(al__bpe *b, const float *scores, al_error *err) {
    size_t n = 0, cap = 1024;
    scored_pair *v = al__malloc(cap * sizeof *v, "merges from scores", err);
    if (!v) return AL_E_NOMEM;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        const unsigned char *p = b->pool + b->off[t];
        size_t len = b->off[t + 1] - b->off[t];
        if (!(scores[t] == scores[t]) || tok_lookup(b, p, len) != t) continue; /* NaN, duplicate */
        for (size_t k = 1; k < len; k++) {
            if ((p[k] & 0xC0) == 0x80) continue; /* inside a character */
            int32_t l = tok_lookup(b, p, k), r = tok_lookup(b, p + k, len - k);
            if (l < 0 || r < 0) continue;
            if (n == cap) {
                scored_pair *g = realloc(v, (cap *= 2) * sizeof *v);
                if (!g) {
                    free(v);
                    return al__err(err, AL_E_NOMEM, "out of memory building merges from scores");
                }
                v = g;
            }
            v[n] = (scored_pair){scores[t], scores[l], scores[r], l, r, t, (int32_t)n};
            n++;
        }
    }
    qsort(v, n, sizeof *v, cmp_scored);
    b->merge_cap = pow2_at_least(n * 2 + 2);
    b->merge_hash = al__calloc(b->merge_cap, sizeof *b->merge_hash, "merge table", err);
    for (size_t i = 0; b->merge_hash && i < n; i++)
        merge_insert(b, v[i].l, v[i].r, (int32_t)i, v[i].id);
    free(v);
    return b->merge_hash ? 0 : AL_E_NOMEM;
}

int al__bpe_create_opts(const char *const *tokens, int n_tokens, const char *const *merges,
                        int n_merges, const int *merge_lines, const char *merges_name,
                        const al__bpe_opts *o, al__bpe **out, al_error *err) {
    *out = NULL;
    if (!tokens || n_tokens <= 0 || n_tokens > MAX_TOKENS)
        return al__err(err, AL_E_FORMAT, "BPE vocabulary: %d tokens (expected 1..%d)", n_tokens,
                       MAX_TOKENS);
    if (n_merges < 0 || (n_merges > 0 && !merges))
        return al__err(err, AL_E_FORMAT, "BPE vocabulary: bad merge list");
    if (o->n_splits < 0 || o->n_splits > AL__BPE_MAX_SPLITS)
        return al__err(err, AL_E_UNSUPPORTED, "BPE: %d pre-tokenizer patterns (at most %d)",
                       o->n_splits, AL__BPE_MAX_SPLITS);
    if (o->unk_id < -1 || o->unk_id >= n_tokens)
        return al__err(err, AL_E_FORMAT, "BPE: unknown token id %d outside 0..%d", o->unk_id,
                       n_tokens - 1);
    al__bpe *b = al__calloc(1, sizeof *b, "BPE tokenizer", err);
    if (!b) return AL_E_NOMEM;
    b->pre = o->pre;
    b->n_tokens = n_tokens;
    b->direct_lookup = o->ignore_merges;
    b->raw = o->raw_tokens;
    b->byte_fallback = o->byte_fallback;
    b->unk_id = o->unk_id;
    b->fuse_unk = o->fuse_unk;
    build_byte_map(b->b2u, b->u2b);
    int rc = build_tokens(b, tokens, n_tokens, err);
    if (!rc)
        rc = o->scores && n_merges == 0 ? build_merges_scored(b, o->scores, err)
                                        : build_merges(b, merges, n_merges, merge_lines,
                                                       merges_name ? merges_name : "merges", err);
    for (int i = 0; !rc && i < o->n_splits; i++) {
        rc = compile_pattern(o->splits[i], &b->re[i], err);
        if (!rc) b->n_re++;
    }
    if (rc) {
        al__bpe_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

int al__bpe_create_lines(const char *const *tokens, int n_tokens, const char *const *merges,
                         int n_merges, const int *merge_lines, const char *merges_name,
                         al__pretok pre, al__bpe **out, al_error *err) {
    *out = NULL;
    if (pre != AL_PRE_GPT2 && pre != AL_PRE_LLAMA3 && pre != AL_PRE_SMOLLM)
        return al__err(err, AL_E_UNSUPPORTED, "BPE pre-tokenizer %d is not supported", (int)pre);
    /* a whole pre-token that is a token is taken as is only for Llama 3 (HF ignore_merges,
     * llama.cpp); GPT-2 and SmolLM merge (encoder.py, HF). Same ids for GPT-2's files, where
     * every token is reachable by its merges; not for vocabularies with unreachable tokens.
     * SmolLM: every \p{N} character is a piece of its own, the GPT-2 pattern between. */
    const char *smol[] = {PAT_DIGIT, PAT_GPT2}, *gpt2[] = {PAT_GPT2}, *l3[] = {PAT_LLAMA3};
    al__bpe_opts o = {.pre = pre, .unk_id = -1, .ignore_merges = pre == AL_PRE_LLAMA3};
    o.splits = pre == AL_PRE_SMOLLM ? smol : pre == AL_PRE_LLAMA3 ? l3 : gpt2;
    o.n_splits = pre == AL_PRE_SMOLLM ? 2 : 1;
    return al__bpe_create_opts(tokens, n_tokens, merges, n_merges, merge_lines, merges_name, &o,
                               out, err);
}

int al__bpe_create(const char *const *tokens, int n_tokens, const char *const *merges, int n_merges,
                   al__pretok pre, al__bpe **out, al_error *err) {
    return al__bpe_create_lines(tokens, n_tokens, merges, n_merges, NULL, NULL, pre, out, err);
}

int al__bpe_add_special(al__bpe *b, const char *text, int id, al_error *err) {
    if (!b || !text || !*text) return al__err(err, AL_E_INVALID, "special token: empty text");
    if (id < 0 || id >= b->n_tokens)
        return al__err(err, AL_E_INVALID, "special token '%.100s': id %d outside 0..%d", text, id,
                       b->n_tokens - 1);
    size_t len = strlen(text);
    if (len > MAX_TOKEN_BYTES || al__utf8_valid_len((const unsigned char *)text, len) != len)
        return al__err(err, AL_E_INVALID, "special token '%.100s': not valid UTF-8 or too long",
                       text);
    for (int i = 0; i < b->n_specials; i++)
        if (b->specials[i].len == len && memcmp(b->specials[i].text, text, len) == 0) {
            b->specials[i].id = id;
            b->is_special[id] = 1;
            return 0;
        }
    if (b->n_specials >= MAX_SPECIALS)
        return al__err(err, AL_E_INVALID, "more than %d special tokens", MAX_SPECIALS);
    special_tok *ns = realloc(b->specials, ((size_t)b->n_specials + 1) * sizeof *ns);
    if (!ns) return al__err(err, AL_E_NOMEM, "out of memory adding a special token");
    b->specials = ns;
    char *copy = al__malloc(len + 1, "special token", err);
    if (!copy) return AL_E_NOMEM;
    memcpy(copy, text, len + 1);
    b->specials[b->n_specials++] = (special_tok){copy, len, id};
    b->is_special[id] = 1;
    return 0;
}

int al__bpe_vocab_size(const al__bpe *b) {
    return b->n_tokens;
}

/* ---- encoding ------------------------------------------------------------------------------ */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;

static int ivec_reserve(ivec *a, size_t extra, al_error *err) {
    size_t need;
    if (!al__add_ok(a->n, extra, &need)) return al__err(err, AL_E_NOMEM, "token count overflow");
    if (need <= a->cap) return 0;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 8) return al__err(err, AL_E_NOMEM, "token count overflow");
        cap *= 2;
    }
    int32_t *nv = realloc(a->v, cap * sizeof *nv);
    if (!nv) return al__err(err, AL_E_NOMEM, "out of memory for %zu token ids", cap);
    a->v = nv;
    a->cap = cap;
    return 0;
}

/* Per-call cache of short pieces: (text offset, length) -> ids cache_ids[start .. start+n). */
typedef struct {
    const unsigned char *key; /* NULL = empty */
    uint32_t klen;
    uint32_t n;
    size_t start;
} cache_slot;

typedef struct {
    const al__bpe *b;
    ivec out;
    cache_slot *slots; /* [cap] */
    size_t cap, used;
    ivec cache_ids;
    /* scratch for the heap algorithm on long pieces */
    int32_t *sym;   /* [scap] symbol ids */
    int32_t *nxt;   /* [scap] next symbol (-1 end) */
    int32_t *prv;   /* [scap] previous symbol (-1 start) */
    uint64_t *heap; /* [2 * scap] (rank << 32 | position) */
    size_t scap;
    pcre2_match_data *md;
    al_error *err;
} enc_ctx;

static int cache_grow(enc_ctx *c) {
    size_t ncap = c->cap ? c->cap * 2 : 4096;
    cache_slot *ns = al__calloc(ncap, sizeof *ns, "BPE cache", c->err);
    if (!ns) return AL_E_NOMEM;
    for (size_t i = 0; i < c->cap; i++) {
        cache_slot *s = &c->slots[i];
        if (!s->key) continue;
        size_t j = hash_bytes(s->key, s->klen) & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    free(c->slots);
    c->slots = ns;
    c->cap = ncap;
    return 0;
}

static int scratch_reserve(enc_ctx *c, size_t n) {
    if (n <= c->scap) return 0;
    size_t cap = c->scap ? c->scap : 64;
    while (cap < n) cap *= 2;
    if (cap > (size_t)INT32_MAX)
        return al__err(c->err, AL_E_NOMEM, "BPE piece of %zu bytes is too long", n);
    free(c->sym);
    free(c->nxt);
    free(c->prv);
    free(c->heap);
    c->sym = malloc(cap * sizeof *c->sym);
    c->nxt = malloc(cap * sizeof *c->nxt);
    c->prv = malloc(cap * sizeof *c->prv);
    c->heap = malloc(2 * cap * sizeof *c->heap); /* [2 * scap]: <= n pairs + one per merge */
    c->scap = cap;
    if (!c->sym || !c->nxt || !c->prv || !c->heap) {
        c->scap = 0;
        return al__err(c->err, AL_E_NOMEM, "out of memory for a BPE piece of %zu bytes", n);
    }
    return 0;
}

/* The initial symbols of piece p[n] into sym (at most n of them; returns how many): one per
 * byte that has a token (byte-level), or one per character (raw vocabularies), a character
 * without a token becoming its bytes' <0xXX> tokens (byte fallback, when every byte has one)
 * or the unknown token (fused with a preceding one when fuse_unk), or nothing. */
static size_t init_symbols(const al__bpe *b, const unsigned char *p, size_t n, int32_t *sym) {
    size_t m = 0;
    if (!b->raw) {
        for (size_t i = 0; i < n; i++)
            if (b->byte_id[p[i]] >= 0) sym[m++] = b->byte_id[p[i]];
        return m;
    }
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = utf8_next(p + i, n - i, &cp);
        if (!l) l = 1;
        int32_t id = tok_lookup(b, p + i, l);
        if (id >= 0) {
            sym[m++] = id, last_unk = 0;
        } else {
            int all = b->byte_fallback;
            for (size_t k = 0; all && k < l; k++) all = b->byte_tok[p[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < l; k++) sym[m++] = b->byte_tok[p[i + k]];
                last_unk = 0;
            } else if (b->unk_id >= 0 && !(b->fuse_unk && last_unk)) {
                sym[m++] = b->unk_id, last_unk = 1;
            }
        }
        i += l;
    }
    return m;
}

/* Short piece: symbols in an array; rank[i] for the pair (i, i+1). Appends to out. */
static void bpe_small(const al__bpe *b, const unsigned char *p, size_t n, int32_t *sym,
                      size_t *n_out) {
    int32_t rank[SMALL_PIECE];
    int32_t mid[SMALL_PIECE];
    size_t m = init_symbols(b, p, n, sym);
    for (size_t i = 0; i + 1 < m; i++) {
        const merge_slot *s = merge_lookup(b, sym[i], sym[i + 1]);
        rank[i] = s ? s->rank : INT32_MAX;
        mid[i] = s ? s->id : -1;
    }
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        /* merge symbols best and best+1; pair i > best of the new list is old pair i+1 */
        sym[best] = mid[best];
        for (size_t i = best + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
        for (size_t i = best + 1; i + 2 < m; i++) {
            rank[i] = rank[i + 1];
            mid[i] = mid[i + 1];
        }
        m--;
        for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < m; i++) {
            const merge_slot *s = merge_lookup(b, sym[i], sym[i + 1]);
            rank[i] = s ? s->rank : INT32_MAX;
            mid[i] = s ? s->id : -1;
        }
    }
    *n_out = m;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* Long piece: linked list of symbols + min-heap of candidate pairs keyed by (rank, left
 * position); stale entries are skipped when popped. Appends the ids to c->out. */
static int bpe_large(enc_ctx *c, const unsigned char *p, size_t n) {
    const al__bpe *b = c->b;
    int rc = scratch_reserve(c, n);
    if (rc) return rc;
    int32_t *sym = c->sym, *nxt = c->nxt, *prv = c->prv;
    uint64_t *h = c->heap;
    size_t hn = 0;
    size_t m = init_symbols(b, p, n, sym); /* symbols: the bytes (characters) with a token */
    if (m == 0) return 0;
    n = m;
    for (size_t i = 0; i < n; i++) {
        nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prv[i] = (int32_t)i - 1;
    }
    /* heap entries: at most n - 1 at the start, then one pop and at most two pushes per
     * merge, at most n - 1 merges: < 2n */
    for (size_t i = 0; i + 1 < n; i++) {
        const merge_slot *s = merge_lookup(b, sym[i], sym[i + 1]);
        if (s) heap_push(h, &hn, ((uint64_t)(uint32_t)s->rank << 32) | i);
    }
    while (hn) {
        uint64_t top = heap_pop(h, &hn);
        int32_t rank = (int32_t)(top >> 32), i = (int32_t)(uint32_t)top;
        if (sym[i] < 0) continue; /* merged away */
        int32_t j = nxt[i];
        if (j < 0) continue;
        const merge_slot *s = merge_lookup(b, sym[i], sym[j]);
        if (!s || s->rank != rank) continue; /* stale */
        sym[i] = s->id;
        sym[j] = -1;
        nxt[i] = nxt[j];
        if (nxt[j] >= 0) prv[nxt[j]] = i;
        if (prv[i] >= 0) {
            const merge_slot *t = merge_lookup(b, sym[prv[i]], sym[i]);
            if (t) heap_push(h, &hn, ((uint64_t)(uint32_t)t->rank << 32) | (uint32_t)prv[i]);
        }
        if (nxt[i] >= 0) {
            const merge_slot *t = merge_lookup(b, sym[i], sym[nxt[i]]);
            if (t) heap_push(h, &hn, ((uint64_t)(uint32_t)t->rank << 32) | (uint32_t)i);
        }
    }
    size_t cnt = 0;
    for (int32_t i = 0; i >= 0; i = nxt[i]) cnt++;
    if ((rc = ivec_reserve(&c->out, cnt, c->err))) return rc;
    for (int32_t i = 0; i >= 0; i = nxt[i]) c->out.v[c->out.n++] = sym[i];
    return 0;
}

/* One piece -> ids appended to c->out. cacheable: p points into the caller's text for the
 * whole call (the cache keys on those bytes without copying). */
static int encode_piece(enc_ctx *c, const unsigned char *p, size_t n, int cacheable) {
    const al__bpe *b = c->b;
    int rc;
    if (n == 0) return 0;
    if (n == 1 && !b->raw && b->byte_id[p[0]] < 0) return 0; /* a byte without a token */
    if (b->direct_lookup || (n == 1 && !b->raw)) {
        int32_t id = n == 1 && !b->raw ? b->byte_id[p[0]] : tok_lookup(b, p, n);
        if (id >= 0 && !b->is_special[id]) {
            if ((rc = ivec_reserve(&c->out, 1, c->err))) return rc;
            c->out.v[c->out.n++] = id;
            return 0;
        }
    }
    if (n > SMALL_PIECE) return bpe_large(c, p, n);
    cache_slot *slot = NULL;
    if (cacheable) {
        if (c->used * 2 >= c->cap && c->used < MAX_CACHED && (rc = cache_grow(c))) return rc;
        size_t mask = c->cap - 1;
        size_t i = hash_bytes(p, n) & mask;
        while (c->slots[i].key) {
            cache_slot *s = &c->slots[i];
            if (s->klen == n && memcmp(s->key, p, n) == 0) {
                if ((rc = ivec_reserve(&c->out, s->n, c->err))) return rc;
                if (s->n) /* a piece of bytes without tokens caches zero ids */
                    memcpy(c->out.v + c->out.n, c->cache_ids.v + s->start, s->n * sizeof(int32_t));
                c->out.n += s->n;
                return 0;
            }
            i = (i + 1) & mask;
        }
        if (c->used < MAX_CACHED) slot = &c->slots[i]; /* bounded memory: then no more adds */
    }
    if ((rc = ivec_reserve(&c->out, n, c->err))) return rc;
    size_t m;
    bpe_small(b, p, n, c->out.v + c->out.n, &m);
    if (slot) {
        if ((rc = ivec_reserve(&c->cache_ids, m, c->err))) return rc;
        if (m) memcpy(c->cache_ids.v + c->cache_ids.n, c->out.v + c->out.n, m * sizeof(int32_t));
        *slot = (cache_slot){p, (uint32_t)n, (uint32_t)m, c->cache_ids.n};
        c->cache_ids.n += m;
        c->used++;
    }
    c->out.n += m;
    return 0;
}

static int split_level(enc_ctx *c, int k, const unsigned char *s, size_t n, size_t *last_len);

/* One piece of level k: split further by the next pattern, or encoded. */
static int piece_at(enc_ctx *c, int k, const unsigned char *s, size_t n, size_t *last_len) {
    if (k + 1 < c->b->n_re) return split_level(c, k + 1, s, n, last_len);
    size_t before = c->out.n;
    int rc = encode_piece(c, s, n, 1);
    *last_len = c->out.n - before;
    return rc;
}

/* Splits valid UTF-8 s[0..n) with pattern k; every match and every gap between matches is a
 * piece for the next level. *last_len: the number of tokens of the last piece. */
static int split_level(enc_ctx *c, int k, const unsigned char *s, size_t n, size_t *last_len) {
    const pcre2_code *re = c->b->re[k];
    size_t pos = 0;
    while (pos < n) {
        int r = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
        size_t ms, me;
        if (r == PCRE2_ERROR_NOMATCH) {
            ms = me = n;
        } else if (r < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(r, msg, sizeof msg);
            return al__err(c->err, AL_E_INVALID, "pre-tokenizer: PCRE2 match error at byte %zu: %s",
                           pos, (const char *)msg);
        } else {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
            ms = ov[0];
            me = ov[1];
        }
        int rc;
        if (ms > pos && (rc = piece_at(c, k, s + pos, ms - pos, last_len))) return rc; /* gap */
        if (me == ms) { /* empty match (never for ours): step over one character */
            if (ms >= n) break;
            uint32_t cp;
            size_t l = utf8_next(s + ms, n - ms, &cp);
            me = ms + (l ? l : 1);
        }
        if ((rc = piece_at(c, k, s + ms, me - ms, last_len))) return rc;
        pos = me;
    }
    return 0;
}

static int pretokenize(enc_ctx *c, const unsigned char *s, size_t n, size_t *last_len) {
    if (c->b->n_re == 0) { /* no pre-tokenizer: the segment is one piece */
        size_t before = c->out.n;
        int rc = encode_piece(c, s, n, 1);
        *last_len = c->out.n - before;
        return rc;
    }
    return split_level(c, 0, s, n, last_len);
}

static int token_is_all_space(const al__bpe *b, int32_t id) {
    for (size_t i = b->off[id]; i < b->off[id + 1]; i++) {
        unsigned char ch = b->pool[i];
        if (ch != ' ' && ch != '\n' && ch != '\t') return 0;
    }
    return 1;
}

/* A segment free of (allowed) special tokens. */
static int encode_segment(enc_ctx *c, const unsigned char *s, size_t n) {
    const al__bpe *b = c->b;
    size_t seg_start = c->out.n;
    size_t valid = al__utf8_valid_len(s, n);
    size_t last_len = 0;
    int rc = pretokenize(c, s, valid, &last_len);
    if (rc || valid == n) return rc;
    /* invalid UTF-8 at s[valid]: tiktoken's _encode_bytes rule (see the top of this file) */
    size_t have = c->out.n - seg_start;
    if (last_len > 0 && token_is_all_space(b, c->out.v[c->out.n - last_len]))
        while (last_len < have && token_is_all_space(b, c->out.v[c->out.n - last_len - 1]))
            last_len++;
    size_t nb = n - valid;
    for (size_t k = c->out.n - last_len; k < c->out.n; k++)
        nb += b->off[c->out.v[k] + 1] - b->off[c->out.v[k]];
    unsigned char *u = al__malloc(nb ? nb : 1, "BPE piece", c->err);
    if (!u) return AL_E_NOMEM;
    size_t o = 0;
    for (size_t k = c->out.n - last_len; k < c->out.n; k++) {
        int32_t id = c->out.v[k];
        memcpy(u + o, b->pool + b->off[id], b->off[id + 1] - b->off[id]);
        o += b->off[id + 1] - b->off[id];
    }
    memcpy(u + o, s + valid, n - valid);
    c->out.n -= last_len;
    rc = encode_piece(c, u, nb, 0);
    free(u);
    return rc;
}

/* The earliest special token at or after pos (longest at equal positions); -1 if none. */
static int next_special(const al__bpe *b, const unsigned char *s, size_t n, size_t pos,
                        size_t *cache, size_t *at) {
    int best = -1;
    size_t best_at = n;
    for (int k = 0; k < b->n_specials; k++) {
        if (cache[k] != SIZE_MAX && cache[k] < pos) {
            const void *f = memmem(s + pos, n - pos, b->specials[k].text, b->specials[k].len);
            cache[k] = f ? (size_t)((const unsigned char *)f - s) : n;
        }
        if (cache[k] < n && (cache[k] < best_at || (cache[k] == best_at && best >= 0 &&
                                                    b->specials[k].len > b->specials[best].len))) {
            best = k;
            best_at = cache[k];
        }
    }
    *at = best_at;
    return best;
}

int al__bpe_encode(const al__bpe *b, const char *text, size_t len, int allow_special, int32_t **ids,
                   size_t *n, al_error *err) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return al__err(err, AL_E_INVALID, "al_tokenize: NULL text");
    enc_ctx c = {.b = b, .err = err};
    size_t *scache = NULL;
    int rc = 0;
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) return al__err(err, AL_E_NOMEM, "out of memory (PCRE2 match data)");
    if ((rc = ivec_reserve(&c.out, len / 3 + 16, err))) goto done;
    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0;
    if (allow_special && b->n_specials > 0) {
        scache = al__malloc((size_t)b->n_specials * sizeof *scache, "special tokens", err);
        if (!scache) {
            rc = AL_E_NOMEM;
            goto done;
        }
        for (int k = 0; k < b->n_specials; k++) scache[k] = 0;
        for (int k = 0; k < b->n_specials; k++) {
            const void *f = memmem(s, len, b->specials[k].text, b->specials[k].len);
            scache[k] = f ? (size_t)((const unsigned char *)f - s) : len;
        }
        for (;;) {
            size_t at;
            int k = next_special(b, s, len, pos, scache, &at);
            if (k < 0) break;
            if ((rc = encode_segment(&c, s + pos, at - pos))) goto done;
            if ((rc = ivec_reserve(&c.out, 1, err))) goto done;
            c.out.v[c.out.n++] = b->specials[k].id;
            pos = at + b->specials[k].len;
        }
    }
    rc = encode_segment(&c, s + pos, len - pos);
done:
    free(scache);
    free(c.slots);
    free(c.cache_ids.v);
    free(c.sym);
    free(c.nxt);
    free(c.prv);
    free(c.heap);
    pcre2_match_data_free(c.md);
    if (rc) {
        free(c.out.v);
        return rc;
    }
    if (!c.out.v) c.out.v = malloc(sizeof(int32_t));
    *ids = c.out.v;
    *n = c.out.n;
    return 0;
}

/* ---- decoding -------------------------------------------------------------------------------- */

int al__bpe_decode(const al__bpe *b, const int32_t *ids, size_t n, char **text, size_t *len,
                   al_error *err) {
    *text = NULL;
    if (len) *len = 0;
    if (!ids && n) return al__err(err, AL_E_INVALID, "al_detokenize: NULL ids");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= b->n_tokens)
            return al__err(err, AL_E_RANGE, "token id %ld at position %zu is outside 0..%d",
                           (long)ids[i], i, b->n_tokens - 1);
        total += b->off[ids[i] + 1] - b->off[ids[i]];
    }
    char *out = al__malloc(total + 1, "decoded text", err);
    if (!out) return AL_E_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = b->off[ids[i] + 1] - b->off[ids[i]];
        memcpy(out + o, b->pool + b->off[ids[i]], l);
        o += l;
    }
    out[o] = 0;
    *text = out;
    if (len) *len = o;
    return 0;
}
