/* wordpiece.c: the BERT WordPiece tokenizer, exactly as HF BertTokenizer / tokenizers'
 * BertNormalizer + BertPreTokenizer + WordPiece do it:
 *   1. clean text: drop U+0000, U+FFFD and "other" characters (Cc, Cf, Co; not \t \n \r),
 *      map whitespace (Unicode White_Space) to a space;
 *   2. CJK ideographs (the CJK blocks of tokenizers' is_chinese_char) become words of their own;
 *   3. strip accents (canonical decomposition NFD, then drop nonspacing marks Mn), when asked;
 *   4. lower-case (Unicode full lower-case mapping, per character), when asked;
 *   5. split on whitespace, and isolate every punctuation character (Unicode P* or ASCII
 *      punctuation: the symbols !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ count as punctuation);
 *   6. each word: more than 100 characters -> [UNK]; else greedy longest-match-first word
 *      pieces, continuation pieces prefixed "##"; a word with an unmatched rest -> [UNK];
 *   7. [CLS] ... [SEP] around.
 * Invalid UTF-8 bytes become U+FFFD and are dropped by step 1 (as decoding with
 * errors="replace" before HF tokenizers does). The special tokens [PAD] [UNK] [CLS] [SEP]
 * [MASK] written in the text are recognised as such (as HF does with BERT's added tokens),
 * before any normalisation. Limit: NFD's canonical reordering is not applied to the few
 * spacing marks that have a combining class (they keep their order).
 * The Unicode tables (wordpiece_tables.h) are generated from Python's unicodedata by
 * scripts/gen_wordpiece_tables.py;
 * vocab.txt: one token per line, id = line number from 0, a trailing "\r" is ignored, and a
 * token repeated later takes the later id (as BertTokenizer's load_vocab). */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

typedef struct wp_range {
    uint32_t lo, hi; /* code points [lo, hi] */
    uint32_t cls;    /* WP_SPACE, WP_DROP, WP_PUNCT or WP_MN */
} wp_range;
typedef struct wp_map1 {
    uint32_t cp, to; /* NFD without Mn is one character */
} wp_map1;
typedef struct wp_map3 {
    uint32_t cp, to[3]; /* NFD without Mn is two or three characters (0-padded) */
} wp_map3;
typedef struct wp_lower {
    uint32_t lo, hi, stride; /* lo, lo + stride, ..., hi map to cp + delta */
    int32_t delta;
} wp_lower;

enum { WP_OTHER = 0, WP_SPACE = 1, WP_DROP = 2, WP_PUNCT = 3, WP_MN = 4 };

#include "wordpiece_tables.h" /* generated: scripts/gen_wordpiece_tables.py */

#define WP_MAX_CHARS  100 /* max_input_chars_per_word of BERT */
#define WP_WORD_BYTES ((WP_MAX_CHARS + 1) * 4 + 8)
#define WP_MAX_VOCAB  (1 << 22)
#define WP_MAX_FILE   ((size_t)256 << 20)

struct al__wordpiece {
    char *pool;        /* vocab.txt text, lines NUL-terminated in place */
    const char **tok;  /* [n_vocab] token strings (into pool) */
    uint32_t *tok_len; /* [n_vocab] their byte lengths */
    int n_vocab;
    int32_t *slots; /* [cap] open-addressing hash table: token id, or -1 */
    size_t cap;     /* power of two >= 2 n_vocab */
    size_t max_len; /* longest token in bytes */
    int unk, cls, sep;
    int lowercase, strip_accents;
    char path[512];
};

/* ---- Unicode properties ----------------------------------------------------------------- */

static uint32_t char_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof wp_classes / sizeof wp_classes[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < wp_classes[mid].lo)
            hi = mid;
        else if (cp > wp_classes[mid].hi)
            lo = mid + 1;
        else
            return wp_classes[mid].cls;
    }
    return WP_OTHER;
}

static int is_chinese(uint32_t c) { /* the ranges of HF tokenizers' BertNormalizer */
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* NFD of one character without its nonspacing marks: out[0..n) (n <= 3; 0 for a mark). */
static int strip_accents(uint32_t cp, uint32_t out[3]) {
    if (cp < 0xC0) {
        out[0] = cp;
        return 1;
    }
    if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllable: algorithmic decomposition */
        uint32_t s = cp - 0xAC00, t = s % 28;
        out[0] = 0x1100 + s / 588;
        out[1] = 0x1161 + (s % 588) / 28;
        if (t == 0) return 2;
        out[2] = 0x11A7 + t;
        return 3;
    }
    if (char_class(cp) == WP_MN) return 0;
    size_t lo = 0, hi = sizeof wp_strip1 / sizeof wp_strip1[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < wp_strip1[mid].cp)
            hi = mid;
        else if (cp > wp_strip1[mid].cp)
            lo = mid + 1;
        else {
            out[0] = wp_strip1[mid].to;
            return 1;
        }
    }
    for (size_t i = 0; i < sizeof wp_strip3 / sizeof wp_strip3[0]; i++)
        if (wp_strip3[i].cp == cp) {
            int n = 0;
            for (int j = 0; j < 3 && wp_strip3[i].to[j]; j++) out[n++] = wp_strip3[i].to[j];
            return n;
        }
    out[0] = cp;
    return 1;
}

/* Full lower-case mapping of one character: out[0..n) (n <= 2; U+0130 -> "i\u0307"). */
static int lower(uint32_t cp, uint32_t out[2]) {
    if (cp < 0x80) {
        out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        return 1;
    }
    if (cp == 0x130) {
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    size_t lo = 0, hi = sizeof wp_lowers / sizeof wp_lowers[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < wp_lowers[mid].lo)
            hi = mid;
        else if (cp > wp_lowers[mid].hi)
            lo = mid + 1;
        else {
            const wp_lower *r = &wp_lowers[mid];
            out[0] = ((cp - r->lo) % r->stride == 0) ? (uint32_t)((int64_t)cp + r->delta) : cp;
            return 1;
        }
    }
    out[0] = cp;
    return 1;
}

/* Decodes one UTF-8 character at s[0..n) (n >= 1) into *cp; returns the bytes used. Invalid
 * sequences (overlong, surrogates, > U+10FFFF, truncated) give U+FFFD for one byte. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, v = c & 0x07, min = 0x10000;
    else {
        *cp = 0xFFFD;
        return 1;
    }
    if (len > n) {
        *cp = 0xFFFD;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = v;
    return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- vocabulary ------------------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The id of token s[0..n), or -1. */
static int vocab_find(const al__wordpiece *w, const char *s, size_t n) {
    if (n > w->max_len) return -1;
    size_t i = (size_t)hash_bytes(s, n) & (w->cap - 1);
    for (;;) {
        int32_t id = w->slots[i];
        if (id < 0) return -1;
        if (w->tok_len[id] == n && memcmp(w->tok[id], s, n) == 0) return id;
        i = (i + 1) & (w->cap - 1);
    }
}

static void vocab_insert(al__wordpiece *w, int id) {
    const char *s = w->tok[id];
    size_t n = w->tok_len[id];
    size_t i = (size_t)hash_bytes(s, n) & (w->cap - 1);
    for (;;) {
        int32_t old = w->slots[i];
        if (old < 0 || (w->tok_len[old] == n && memcmp(w->tok[old], s, n) == 0)) {
            w->slots[i] = id; /* a repeated token takes the later id */
            return;
        }
        i = (i + 1) & (w->cap - 1);
    }
}

static int parse_vocab(al__wordpiece *w, char *text, size_t len, al_error *err) {
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (len > 0 && text[len - 1] != '\n') lines++;
    if (lines == 0) return al__err(err, AL_E_FORMAT, "%s: empty vocabulary (no lines)", w->path);
    if (lines > WP_MAX_VOCAB)
        return al__err(err, AL_E_FORMAT, "%s: %zu lines, more than the %d tokens allowed", w->path,
                       lines, WP_MAX_VOCAB);
    w->tok = al__malloc(lines * sizeof *w->tok, "vocabulary", err);
    w->tok_len = al__malloc(lines * sizeof *w->tok_len, "vocabulary", err);
    if (!w->tok || !w->tok_len) return AL_E_NOMEM;
    size_t pos = 0;
    int n = 0;
    while (pos < len) {
        char *line = text + pos;
        char *nl = memchr(line, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - line) : len - pos;
        pos += l + (nl ? 1 : 0);
        if (l > 0 && line[l - 1] == '\r') l--;
        if (memchr(line, 0, l))
            return al__err(err, AL_E_FORMAT, "%s: line %d holds a NUL byte", w->path, n + 1);
        line[l] = 0;
        w->tok[n] = line;
        w->tok_len[n] = (uint32_t)l;
        if (l > w->max_len) w->max_len = l;
        n++;
    }
    w->n_vocab = n;
    w->cap = 16;
    while (w->cap < 2 * (size_t)n) w->cap *= 2;
    w->slots = al__malloc(w->cap * sizeof *w->slots, "vocabulary hash table", err);
    if (!w->slots) return AL_E_NOMEM;
    for (size_t i = 0; i < w->cap; i++) w->slots[i] = -1;
    for (int i = 0; i < n; i++) vocab_insert(w, i);
    const char *need[3] = {"[UNK]", "[CLS]", "[SEP]"};
    int *ids[3] = {&w->unk, &w->cls, &w->sep};
    for (int i = 0; i < 3; i++) {
        *ids[i] = vocab_find(w, need[i], strlen(need[i]));
        if (*ids[i] < 0)
            return al__err(err, AL_E_FORMAT, "%s: the vocabulary has no %s token", w->path,
                           need[i]);
    }
    return 0;
}

int al__wordpiece_open(const char *vocab_txt, int lowercase, int strip_accents, al__wordpiece **out,
                       al_error *err) {
    *out = NULL;
    al__wordpiece *w = al__calloc(1, sizeof *w, "WordPiece tokenizer", err);
    if (!w) return AL_E_NOMEM;
    snprintf(w->path, sizeof w->path, "%s", vocab_txt);
    w->lowercase = lowercase != 0;
    w->strip_accents = strip_accents != 0;
    size_t len;
    int rc = al__read_file(vocab_txt, WP_MAX_FILE, &w->pool, &len, err);
    if (rc == 0) rc = parse_vocab(w, w->pool, len, err);
    if (rc) {
        al__wordpiece_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void al__wordpiece_free(al__wordpiece *w) {
    if (!w) return;
    free(w->pool);
    free(w->tok);
    free(w->tok_len);
    free(w->slots);
    free(w);
}

/* ---- encoding ------------------------------------------------------------------------------ */

typedef struct wp_ids {
    int32_t *v; /* [n] */
    size_t n, cap;
} wp_ids;

typedef struct wp_word {
    char buf[WP_WORD_BYTES]; /* the word's first WP_MAX_CHARS + 1 characters, UTF-8 */
    size_t len;              /* bytes in buf */
    size_t nchar;            /* characters in the word (may exceed what buf holds) */
} wp_word;

static int ids_push(wp_ids *ids, int32_t id, al_error *err) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 256;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return al__err(err, AL_E_NOMEM, "out of memory for %zu token ids", cap);
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

/* Greedy longest-match-first word pieces of one word (then empties it). */
static int flush_word(const al__wordpiece *w, wp_word *wd, wp_ids *ids, al_error *err) {
    if (wd->nchar == 0) return 0;
    size_t n_before = ids->n;
    int rc = 0;
    if (wd->nchar > WP_MAX_CHARS) {
        rc = ids_push(ids, w->unk, err);
    } else {
        char key[WP_WORD_BYTES + 2] = "##";
        size_t start = 0;
        while (start < wd->len) {
            size_t end = wd->len;
            int found = -1;
            while (end > start) {
                if (start == 0) {
                    found = vocab_find(w, wd->buf, end);
                } else {
                    memcpy(key + 2, wd->buf + start, end - start);
                    found = vocab_find(w, key, end - start + 2);
                }
                if (found >= 0) break;
                end--;
                while (end > start && ((unsigned char)wd->buf[end] & 0xC0) == 0x80) end--;
            }
            if (found < 0) { /* the whole word is unknown */
                ids->n = n_before;
                rc = ids_push(ids, w->unk, err);
                break;
            }
            if ((rc = ids_push(ids, found, err))) break;
            start = end;
        }
    }
    wd->len = 0;
    wd->nchar = 0;
    return rc;
}

static void word_add(wp_word *wd, uint32_t cp) {
    wd->nchar++;
    if (wd->nchar <= WP_MAX_CHARS + 1) wd->len += utf8_encode(cp, wd->buf + wd->len);
}

/* A normalised character: whitespace ends the word, punctuation is a word of its own. */
static int push_char(const al__wordpiece *w, wp_word *wd, wp_ids *ids, uint32_t c, al_error *err) {
    uint32_t cls = char_class(c);
    if (cls == WP_SPACE) return flush_word(w, wd, ids, err);
    if (cls == WP_PUNCT) {
        int rc = flush_word(w, wd, ids, err);
        if (rc) return rc;
        word_add(wd, c);
        return flush_word(w, wd, ids, err);
    }
    word_add(wd, c);
    return 0;
}

/* The id of the special token ([PAD] [UNK] [CLS] [SEP] [MASK], when in the vocabulary) that
 * text[0..len) starts with, or -1. Matched case-sensitively in the raw text, anywhere (HF's
 * added tokens of BERT: not normalised, not single-word). */
static int match_special(const al__wordpiece *w, const char *text, size_t len) {
    static const char *const names[5] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < 5; i++) {
        size_t n = strlen(names[i]);
        if (len >= n && memcmp(text, names[i], n) == 0) return vocab_find(w, names[i], n);
    }
    return -1;
}

int al__wordpiece_encode(const al__wordpiece *w, const char *text, size_t len, int32_t **out,
                         size_t *n, al_error *err) {
    *out = NULL;
    *n = 0;
    if (!text && len) return al__err(err, AL_E_INVALID, "WordPiece: NULL text");
    wp_ids ids = {0};
    wp_word *wd = al__calloc(1, sizeof *wd, "WordPiece word", err);
    if (!wd) return AL_E_NOMEM;
    int rc = ids_push(&ids, w->cls, err);
    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0;
    while (rc == 0 && pos < len) {
        int special = s[pos] == '[' ? match_special(w, text + pos, len - pos) : -1;
        if (special >= 0) { /* a special token written in the text, as HF's added tokens */
            if ((rc = flush_word(w, wd, &ids, err)) == 0) rc = ids_push(&ids, special, err);
            pos += w->tok_len[special];
            continue;
        }
        uint32_t cp;
        pos += utf8_decode(s + pos, len - pos, &cp);
        uint32_t cls = char_class(cp);
        if (cls == WP_DROP) continue; /* also U+0000 and U+FFFD */
        if (cls == WP_SPACE) {
            rc = flush_word(w, wd, &ids, err);
            continue;
        }
        int cjk = is_chinese(cp);
        if (cjk && (rc = flush_word(w, wd, &ids, err))) break;
        uint32_t dec[3], low[2];
        int nd = 1;
        dec[0] = cp;
        if (w->strip_accents) nd = strip_accents(cp, dec);
        for (int i = 0; i < nd && rc == 0; i++) {
            int nl = 1;
            low[0] = dec[i];
            if (w->lowercase) nl = lower(dec[i], low);
            for (int j = 0; j < nl && rc == 0; j++) rc = push_char(w, wd, &ids, low[j], err);
        }
        if (rc == 0 && cjk) rc = flush_word(w, wd, &ids, err);
    }
    if (rc == 0) rc = flush_word(w, wd, &ids, err);
    if (rc == 0) rc = ids_push(&ids, w->sep, err);
    free(wd);
    if (rc) {
        free(ids.v);
        return rc;
    }
    *out = ids.v;
    *n = ids.n;
    return 0;
}

/* The number of tokens (ids 0..n-1). */
int al__wordpiece_vocab_size(const al__wordpiece *w) {
    return w ? w->n_vocab : 0;
}

/* Tokens joined by spaces; "##" pieces glued to the previous token. */
int al__wordpiece_decode(const al__wordpiece *w, const int32_t *ids, size_t n, char **text,
                         size_t *len, al_error *err) {
    *text = NULL;
    *len = 0;
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->n_vocab)
            return al__err(err, AL_E_INVALID,
                           "token id %d at position %zu outside the vocabulary [0, %d)",
                           (int)ids[i], i, w->n_vocab);
        total += w->tok_len[ids[i]] + 1;
    }
    char *out = al__malloc(total, "decoded text", err);
    if (!out) return AL_E_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = w->tok[ids[i]];
        size_t l = w->tok_len[ids[i]];
        if (l >= 2 && t[0] == '#' && t[1] == '#' && o > 0) {
            t += 2;
            l -= 2;
        } else if (o > 0) {
            out[o++] = ' ';
        }
        memcpy(out + o, t, l);
        o += l;
    }
    out[o] = 0;
    *text = out;
    *len = o;
    return 0;
}

void al__wordpiece_cls_sep(const al__wordpiece *w, int32_t *cls, int32_t *sep) {
    *cls = w->cls, *sep = w->sep;
}
