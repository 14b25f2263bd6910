/* test_bpe.c: the BPE engine on small hand-made vocabularies (expected ids derived by hand
 * and by a naive reference written here: GPT-2 encoder.py's loop over strings), the corpus
 * body rules on synthetic files, UTF-8 validation, and bad vocabulary files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tokenizer.h"

/* ---- a vocabulary: the 256 byte tokens (GPT-2's byte-to-unicode, written out here) plus
 * the merged tokens ---------------------------------------------------------------------- */

typedef struct {
    char *tok[4096]; /* token strings, id = index */
    int n;
    char *merge[4096];
    int n_merge;
} vocab;

static void put_utf8(char **p, unsigned cp) {
    unsigned char *o = (unsigned char *)*p;
    if (cp < 0x80)
        *o++ = (unsigned char)cp;
    else {
        *o++ = (unsigned char)(0xC0 | (cp >> 6));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *p = (char *)o;
}

/* byte b -> its code point: printable '!'..'~', 0xA1..0xAC, 0xAE..0xFF stay; the others
 * take 256, 257, ... in increasing byte order (GPT-2's bytes_to_unicode). */
static unsigned byte_cp(int b) {
    unsigned extra = 0;
    for (int c = 0; c < 256; c++) {
        int keep = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174);
        if (c == b) return keep ? (unsigned)c : 256 + extra;
        if (!keep) extra++;
    }
    return 0;
}

static char *bytes_to_token(const char *s, size_t n) {
    char *t = malloc(2 * n + 1), *p = t;
    for (size_t i = 0; i < n; i++) put_utf8(&p, byte_cp((unsigned char)s[i]));
    *p = 0;
    return t;
}

static void vocab_init(vocab *v, int skip_byte) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        if (b == skip_byte) continue;
        char c = (char)b;
        v->tok[v->n++] = bytes_to_token(&c, 1);
    }
}

static int vocab_id(const vocab *v, const char *s) {
    char *t = bytes_to_token(s, strlen(s));
    int id = -1;
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->tok[i], t) == 0) id = i;
    free(t);
    return id;
}

/* adds the merge "l r" (plain ASCII strings) and the token l+r */
static void vocab_merge(vocab *v, const char *l, const char *r) {
    char both[256];
    snprintf(both, sizeof both, "%s%s", l, r);
    char *tl = bytes_to_token(l, strlen(l)), *tr = bytes_to_token(r, strlen(r));
    char *m = malloc(strlen(tl) + strlen(tr) + 2);
    sprintf(m, "%s %s", tl, tr);
    free(tl);
    free(tr);
    v->merge[v->n_merge++] = m;
    if (vocab_id(v, both) < 0) v->tok[v->n++] = bytes_to_token(both, strlen(both));
}

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->n_merge; i++) free(v->merge[i]);
}

static al_tokenizer *make(const vocab *v, al__pretok pre) {
    al__bpe *b = NULL;
    al_error err = {0};
    int rc = al__bpe_create((const char *const *)v->tok, v->n, (const char *const *)v->merge,
                            v->n_merge, pre, &b, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    al_tokenizer *tk = NULL;
    assert_int_equal(al__tokenizer_from_bpe(b, &tk, &err), 0);
    return tk;
}

static void encode(const al_tokenizer *tk, const char *s, size_t n, int special, int32_t **ids,
                   size_t *cnt) {
    al_error err = {0};
    int rc = al_tokenize(tk, s, n, special, ids, cnt, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
}

/* ---- naive reference: GPT-2's encoder.py bpe() on one word, over plain strings ------------ */

/* word: symbols as strings; repeatedly the lowest-rank adjacent pair, all its occurrences
 * merged left to right. Returns the number of symbols (written to out as strings). */
static int naive_bpe(const vocab *v, char syms[][256], int n) {
    for (;;) {
        int best = -1, best_rank = 1 << 30;
        for (int i = 0; i + 1 < n; i++) {
            char pair[600];
            char *tl = bytes_to_token(syms[i], strlen(syms[i]));
            char *tr = bytes_to_token(syms[i + 1], strlen(syms[i + 1]));
            snprintf(pair, sizeof pair, "%s %s", tl, tr);
            free(tl);
            free(tr);
            for (int r = 0; r < v->n_merge && r < best_rank; r++)
                if (strcmp(v->merge[r], pair) == 0) {
                    best_rank = r;
                    best = i;
                }
        }
        if (best < 0) return n;
        char first[256], second[256];
        strcpy(first, syms[best]);
        strcpy(second, syms[best + 1]);
        int o = 0;
        for (int i = 0; i < n;) {
            if (i + 1 < n && strcmp(syms[i], first) == 0 && strcmp(syms[i + 1], second) == 0) {
                char m[256];
                snprintf(m, sizeof m, "%s%s", first, second);
                strcpy(syms[o++], m);
                i += 2;
            } else {
                if (o != i)
                    memmove(syms[o], syms[i], strlen(syms[i]) + 1); /* o < i: distinct rows */
                o++;
                i++;
            }
        }
        n = o;
    }
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_utf8_valid_len(void **state) {
    (void)state;
    assert_int_equal(al_utf8_valid_len("abc", 3), 3);
    assert_int_equal(al_utf8_valid_len("\xc3\xa9x", 3), 3);            /* é */
    assert_int_equal(al_utf8_valid_len("a\xc3", 2), 1);                /* truncated */
    assert_int_equal(al_utf8_valid_len("a\xc0\xaf", 3), 1);            /* overlong '/' */
    assert_int_equal(al_utf8_valid_len("ab\xed\xa0\x80", 5), 2);       /* surrogate D800 */
    assert_int_equal(al_utf8_valid_len("\xed\x9f\xbf", 3), 3);         /* U+D7FF */
    assert_int_equal(al_utf8_valid_len("\xf4\x8f\xbf\xbf", 4), 4);     /* U+10FFFF */
    assert_int_equal(al_utf8_valid_len("\xf4\x90\x80\x80", 4), 0);     /* > U+10FFFF */
    assert_int_equal(al_utf8_valid_len("\xe0\x9f\xbf", 3), 0);         /* overlong 3-byte */
    assert_int_equal(al_utf8_valid_len("\xf0\x8f\xbf\xbf", 4), 0);     /* overlong 4-byte */
    assert_int_equal(al_utf8_valid_len("\xf0\x9f\x98\x80!", 5), 5);    /* emoji */
    assert_int_equal(al_utf8_valid_len("x\x80", 2), 1);                /* lone continuation */
    assert_int_equal(al_utf8_valid_len("\xf8\x88\x80\x80\x80", 5), 0); /* 5-byte form */
}

/* merges: "b c" (rank 0), "a b" (1), "ab c" (2), "bc bc" (3). By hand:
 *  "abc"  : (b,c) r0 first -> a|bc; (a,bc) is no merge           -> [a, bc]
 *  "ab"   : (a,b) r1                                            -> [ab]
 *  "abab" : (a,b) at 0 and 2, (b,a) none                        -> [ab, ab]
 *  "bcbc" : (b,c) twice -> bc|bc, then (bc,bc) r3               -> [bcbc] */
static void test_merge_order_by_hand(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    vocab_merge(&v, "b", "c");
    vocab_merge(&v, "a", "b");
    vocab_merge(&v, "ab", "c");
    vocab_merge(&v, "bc", "bc");
    al_tokenizer *tk = make(&v, AL_PRE_GPT2);
    int32_t *ids;
    size_t n;
    encode(tk, "abc", 3, 0, &ids, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], vocab_id(&v, "a"));
    assert_int_equal(ids[1], vocab_id(&v, "bc"));
    free(ids);
    encode(tk, "abab", 4, 0, &ids, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], vocab_id(&v, "ab"));
    assert_int_equal(ids[1], vocab_id(&v, "ab"));
    free(ids);
    encode(tk, "bcbc", 4, 0, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], vocab_id(&v, "bcbc"));
    free(ids);
    /* pre-tokens: " abc" is one piece (' ?\p{L}+'); the space has no merge with 'a' */
    encode(tk, "ab abc", 6, 0, &ids, &n);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], vocab_id(&v, "ab"));
    assert_int_equal(ids[1], vocab_id(&v, " "));
    assert_int_equal(ids[2], vocab_id(&v, "a"));
    assert_int_equal(ids[3], vocab_id(&v, "bc"));
    free(ids);
    /* a long piece (heap path): "abc" x 100 -> [a, bc] x 100 */
    char longw[301];
    for (int i = 0; i < 100; i++) memcpy(longw + 3 * i, "abc", 3);
    encode(tk, longw, 300, 0, &ids, &n);
    assert_int_equal(n, 200);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(ids[2 * i], vocab_id(&v, "a"));
        assert_int_equal(ids[2 * i + 1], vocab_id(&v, "bc"));
    }
    free(ids);
    al_tokenizer_free(tk);
    vocab_free(&v);
}

/* Random merges over {a,b,c,d}; random words of 1..200 letters (short: array path, long: heap
 * path) against the naive reference. */
static void test_random_vs_naive(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    al__rng rng;
    al__rng_seed(&rng, 42);
    /* the token pool to draw merge sides from */
    char pool[300][64];
    int np = 4;
    strcpy(pool[0], "a"), strcpy(pool[1], "b"), strcpy(pool[2], "c"), strcpy(pool[3], "d");
    while (v.n_merge < 120) {
        const char *l = pool[al__rng_next(&rng) % (uint64_t)np];
        const char *r = pool[al__rng_next(&rng) % (uint64_t)np];
        if (strlen(l) + strlen(r) > 12) continue;
        char both[64];
        snprintf(both, sizeof both, "%s%s", l, r);
        int dup = 0;
        for (int i = 0; i < np; i++) dup |= strcmp(pool[i], both) == 0;
        if (dup) continue; /* one merge per token, as in GPT-2's files */
        vocab_merge(&v, l, r);
        strcpy(pool[np++], both);
    }
    al_tokenizer *tk = make(&v, AL_PRE_GPT2);
    static char syms[256][256];
    for (int trial = 0; trial < 300; trial++) {
        int len = 1 + (int)(al__rng_next(&rng) % (trial % 3 == 0 ? 200 : 40));
        char w[256];
        for (int i = 0; i < len; i++) w[i] = (char)('a' + al__rng_next(&rng) % 4);
        for (int i = 0; i < len; i++) syms[i][0] = w[i], syms[i][1] = 0;
        int m = naive_bpe(&v, syms, len);
        int32_t *ids;
        size_t n;
        encode(tk, w, (size_t)len, 0, &ids, &n);
        assert_int_equal(n, m);
        for (int i = 0; i < m; i++) assert_int_equal(ids[i], vocab_id(&v, syms[i]));
        free(ids);
    }
    al_tokenizer_free(tk);
    vocab_free(&v);
}

static void test_special_and_missing_bytes(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, 'z'); /* no token for 'z' */
    vocab_merge(&v, "a", "b");
    int sp = v.n;
    v.tok[v.n++] = strdup("<|x|>");
    al__bpe *b = NULL;
    al_error err = {0};
    assert_int_equal(al__bpe_create((const char *const *)v.tok, v.n, (const char *const *)v.merge,
                                    v.n_merge, AL_PRE_GPT2, &b, &err),
                     0);
    assert_int_equal(al__bpe_add_special(b, "<|x|>", sp, &err), 0);
    assert_int_not_equal(al__bpe_add_special(b, "<|y|>", 100000, &err), 0);
    al_tokenizer *tk = NULL;
    assert_int_equal(al__tokenizer_from_bpe(b, &tk, &err), 0);
    assert_int_equal(al_tokenizer_vocab_size(tk), v.n);
    int32_t *ids;
    size_t n;
    encode(tk, "ab<|x|>ab", 9, 1, &ids, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], vocab_id(&v, "ab"));
    assert_int_equal(ids[1], sp);
    assert_int_equal(ids[2], vocab_id(&v, "ab"));
    free(ids);
    encode(tk, "<|x|>", 5, 0, &ids, &n); /* not allowed: text "<|", "x", "|>" */
    assert_true(n >= 3);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], sp);
    free(ids);
    /* 'z' has no token: dropped before merging, so "azb" -> [ab] */
    encode(tk, "azb", 3, 0, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], vocab_id(&v, "ab"));
    free(ids);
    /* a piece made only of such bytes gives no ids, also when it comes again (cached) */
    encode(tk, "zz.zz", 5, 0, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], vocab_id(&v, "."));
    free(ids);
    /* decode */
    int32_t good[2] = {vocab_id(&v, "ab"), sp};
    char *text;
    size_t len;
    assert_int_equal(al_detokenize(tk, good, 2, &text, &len, &err), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(text, "ab<|x|>", 7);
    free(text);
    int32_t bad[2] = {0, v.n};
    assert_int_equal(al_detokenize(tk, bad, 2, &text, &len, &err), AL_E_RANGE);
    assert_non_null(strstr(err.msg, "position 1"));
    al_tokenizer_free(tk);
    vocab_free(&v);
}

static void test_bad_merges(void **state) {
    (void)state;
    vocab v;
    vocab_init(&v, -1);
    vocab_merge(&v, "a", "b");
    al__bpe *b = NULL;
    al_error err = {0};
    const char *m1[] = {"a"};
    assert_int_equal(al__bpe_create((const char *const *)v.tok, v.n, m1, 1, AL_PRE_GPT2, &b, &err),
                     AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "merge 0"));
    const char *m2[] = {"a b", "ab q"}; /* "abq" is not a token */
    assert_int_equal(al__bpe_create((const char *const *)v.tok, v.n, m2, 2, AL_PRE_GPT2, &b, &err),
                     AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "merge 1"));
    assert_int_equal(al__bpe_create((const char *const *)v.tok, 0, m2, 0, AL_PRE_GPT2, &b, &err),
                     AL_E_FORMAT);
    assert_null(b);
    vocab_free(&v);
}

/* ---- files -------------------------------------------------------------------------------------
 */

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(s, 1, strlen(s), f);
    fclose(f);
}

static void test_corpus_body_rules(void **state) {
    (void)state;
    char dir[] = "/tmp/al_test_bpe_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[256], path[256];
    snprintf(sub, sizeof sub, "%s/war_and_peace", dir);
    mkdir(sub, 0700);
    snprintf(path, sizeof path, "%s/pg2600.txt", sub);
    setenv("ATTNLIM_NO_VERIFY", "1", 1); /* a synthetic file, not the pinned one */
    write_file(path, "header\r\n    BOOK ONE: 1805\r\nBOOK ONE: 18050\r\nBOOK ONE: 1805\r\n"
                     "Line one.\r\nlone\rCR\r\n\r\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\r\n"
                     "licence\r\n");
    char *text;
    size_t len;
    al_error err = {0};
    assert_int_equal(al_corpus_load("war-and-peace", dir, &text, &len, &err), 0);
    const char *want = "BOOK ONE: 1805\nLine one.\nlone\rCR\n\n";
    assert_int_equal(len, strlen(want));
    assert_memory_equal(text, want, len);
    free(text);
    write_file(path, "BOOK ONE: 1805\r\nno end\r\n");
    assert_int_equal(al_corpus_load("war-and-peace", dir, &text, &len, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "pg2600.txt"));
    assert_non_null(strstr(err.msg, "END"));
    write_file(path, " BOOK ONE: 1805\r\n*** END OF THE PROJECT GUTENBERG EBOOK\r\n");
    assert_int_equal(al_corpus_load("war-and-peace", dir, &text, &len, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "BOOK ONE"));
    /* a plain path is read as bytes */
    assert_int_equal(al_corpus_load(path, NULL, &text, &len, &err), 0);
    assert_int_equal(len, strlen(" BOOK ONE: 1805\r\n*** END OF THE PROJECT GUTENBERG EBOOK\r\n"));
    free(text);
    unsetenv("ATTNLIM_NO_VERIFY");
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

static void test_vocab_files(void **state) {
    (void)state;
    char dir[] = "/tmp/al_test_bpe_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char enc[256], bpe[256];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    /* a complete byte vocabulary + "ab" as JSON */
    vocab v;
    vocab_init(&v, -1);
    vocab_merge(&v, "a", "b");
    size_t cap = 1 << 16, o = 0;
    char *js = malloc(cap);
    o += (size_t)snprintf(js + o, cap - o, "{");
    for (int i = 0; i < v.n; i++) {
        const char *t = v.tok[i];
        o += (size_t)snprintf(js + o, cap - o, "%s\"", i ? ",\n" : "");
        for (const char *p = t; *p; p++) {
            if (*p == '"' || *p == '\\') js[o++] = '\\';
            js[o++] = *p;
        }
        o += (size_t)snprintf(js + o, cap - o, "\": %d", i);
    }
    o += (size_t)snprintf(js + o, cap - o, "}\n");
    write_file(enc, js);
    write_file(bpe, "#version: 0.2\r\na b\r\n");
    al_tokenizer *tk = NULL;
    al_error err = {0};
    assert_int_equal(al_tokenizer_open_gpt2(dir, &tk, &err), 0);
    int32_t *ids;
    size_t n;
    encode(tk, "ab", 2, 0, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 256);
    free(ids);
    al_tokenizer_free(tk);
    /* a merge naming an unknown token, on line 3 */
    write_file(bpe, "#version: 0.2\na b\nab q\n");
    assert_int_equal(al_tokenizer_open_gpt2(dir, &tk, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "vocab.bpe line 3"));
    /* malformed JSON on line 4 */
    write_file(bpe, "#version: 0.2\na b\n");
    write_file(enc, "{\n\"a\": 0,\n\"b\": 1,\n\"c\" 2\n}");
    assert_int_equal(al_tokenizer_open_gpt2(dir, &tk, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "encoder.json line 4"));
    /* ids not 0..V-1 */
    write_file(enc, "{\"a\": 0, \"b\": 5}");
    assert_int_equal(al_tokenizer_open_gpt2(dir, &tk, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "encoder.json"));
    assert_non_null(strstr(err.msg, "'b'"));
    /* trailing garbage after the object */
    write_file(enc, "{\"a\": 0} x");
    assert_int_equal(al_tokenizer_open_gpt2(dir, &tk, &err), AL_E_FORMAT);
    free(js);
    vocab_free(&v);
    unlink(enc);
    unlink(bpe);
    assert_int_not_equal(al_tokenizer_open_gpt2(dir, &tk, &err), 0);
    assert_non_null(strstr(err.msg, dir));
    rmdir(dir);
}

/* The real GPT-2 files: "Hello world" is [15496, 995] (OpenAI's published encoding). */
static void test_real_gpt2(void **state) {
    (void)state;
    al_tokenizer *tk = NULL;
    al_error err = {0};
    int rc = al_tokenizer_open_gpt2(NULL, &tk, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(al_tokenizer_vocab_size(tk), 50257);
    int32_t *ids;
    size_t n;
    encode(tk, "Hello world", 11, 0, &ids, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 15496);
    assert_int_equal(ids[1], 995);
    free(ids);
    encode(tk, "<|endoftext|>", 13, 1, &ids, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 50256);
    free(ids);
    encode(tk, "", 0, 0, &ids, &n);
    assert_int_equal(n, 0);
    free(ids);
    al_tokenizer_free(tk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_valid_len),  cmocka_unit_test(test_merge_order_by_hand),
        cmocka_unit_test(test_random_vs_naive), cmocka_unit_test(test_special_and_missing_bytes),
        cmocka_unit_test(test_bad_merges),      cmocka_unit_test(test_corpus_body_rules),
        cmocka_unit_test(test_vocab_files),     cmocka_unit_test(test_real_gpt2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
