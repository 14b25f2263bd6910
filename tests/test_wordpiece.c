/* test_wordpiece.c: the BERT WordPiece tokenizer on a small hand-made vocabulary, where every
 * expected id sequence follows by hand from BERT's algorithm (basic tokenizer + greedy
 * longest-match-first word pieces), and bad vocab.txt files. The comparison with HF tokenizers
 * on real text is tests/python/test_bert.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"

/* ids: 0 [PAD] 1 [UNK] 2 [CLS] 3 [SEP] 4 un 5 ##aff 6 ##able 7 hello 8 , 9 ! 10 a 11 ##a
 * 12 cafe 13 中 14 国 15 x 16 ##x 17 ##y 18 . 19 ᄒ 20 ##ᅡ 21 ##ᆫ 22 is 23 ##tan 24 i 25 ##stan
 * 26 « 27 ¿ 28 ##b 29 b */
static const char *VOCAB =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\nun\n##aff\n##able\nhello\n,\n!\na\n##a\ncafe\n"
    "中\n国\nx\n##x\n##y\n.\nᄒ\n##ᅡ\n##ᆫ\nis\n##tan\ni\n##stan\n«\n¿\n##b\nb\n";

static char *write_tmp(const char *content, size_t len) {
    char *path = strdup("/tmp/test_wordpiece_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    close(fd);
    return path;
}

static al__wordpiece *open_vocab(int lower, int strip) {
    char *path = write_tmp(VOCAB, strlen(VOCAB));
    al__wordpiece *w = NULL;
    al_error err = {0};
    int rc = al__wordpiece_open(path, lower, strip, &w, &err);
    unlink(path);
    free(path);
    if (rc) fail_msg("open: %s", err.msg);
    return w;
}

/* Encodes text (len bytes) and compares with the expected ids (terminated by -1). */
static void expect_ids(al__wordpiece *w, const char *text, size_t len, const int *want) {
    int32_t *ids = NULL;
    size_t n = 0;
    al_error err = {0};
    if (al__wordpiece_encode(w, text, len, &ids, &n, &err)) fail_msg("encode: %s", err.msg);
    size_t nw = 0;
    while (want[nw] >= 0) nw++;
    int same = n == nw;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    if (!same) {
        char got[1024] = "";
        for (size_t i = 0; i < n && strlen(got) < 1000; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", (int)ids[i]);
        fail_msg("text '%.*s': got ids %s", (int)len, text, got);
    }
    free(ids);
}
#define EXPECT(w, text, ...)                                                                       \
    do {                                                                                           \
        const int want_[] = {__VA_ARGS__, -1};                                                     \
        expect_ids(w, text, strlen(text), want_);                                                  \
    } while (0)

static void test_word_pieces(void **state) {
    (void)state;
    al__wordpiece *w = open_vocab(1, 1);
    EXPECT(w, "unaffable", 2, 4, 5, 6, 3); /* un ##aff ##able */
    EXPECT(w, "", 2, 3);                   /* [CLS] [SEP] only */
    EXPECT(w, "  \t\n ", 2, 3);            /* whitespace only */
    EXPECT(w, "unaffablez", 2, 1, 3);      /* unmatched rest: the whole word is [UNK] */
    EXPECT(w, "aaa", 2, 10, 11, 11, 3);    /* a ##a ##a */
    EXPECT(w, "xxy", 2, 15, 16, 17, 3);    /* x ##x ##y */
    EXPECT(w, "istan", 2, 22, 23, 3);      /* longest first: is ##tan, not i ##stan */
    EXPECT(w, "Hello, hello!", 2, 7, 8, 7, 9, 3);
    EXPECT(w, "hello.hello", 2, 7, 18, 7, 3); /* punctuation splits inside a word */
    EXPECT(w, "x$x", 2, 15, 1, 15, 3);        /* ASCII symbol '$' is punctuation for BERT */
    EXPECT(w, "«x»", 2, 26, 15, 1, 3);        /* Unicode Pi/Pf are punctuation */
    EXPECT(w, "¿x", 2, 27, 15, 3);
    EXPECT(w, "x[SEP]x [CLS]", 2, 15, 3, 15, 2, 3); /* special tokens in the raw text */
    EXPECT(w, "[MASK]", 2, 1, 1, 1, 3); /* not in this vocabulary: "[", "mask", "]" unknown */
    al__wordpiece_free(w);
}

static void test_normalisation(void **state) {
    (void)state;
    al__wordpiece *w = open_vocab(1, 1);
    EXPECT(w, "CAFÉ", 2, 12, 3);         /* lower-case + accent stripped (precomposed) */
    EXPECT(w, "cafe\xcc\x81", 2, 12, 3); /* combining acute U+0301 dropped */
    EXPECT(w, "中国", 2, 13, 14, 3);     /* CJK: one word per ideograph */
    EXPECT(w, "x中x", 2, 15, 13, 15, 3);
    EXPECT(w, "한", 2, 19, 20, 21, 3);         /* Hangul syllable -> jamo (NFD) */
    EXPECT(w, "x\x01x", 2, 15, 16, 3);         /* control character dropped: "xx" */
    EXPECT(w, "x\xe2\x80\x8bx", 2, 15, 16, 3); /* U+200B (Cf) dropped */
    EXPECT(w, "x\xc2\xa0x", 2, 15, 15, 3);     /* U+00A0 no-break space is whitespace */
    EXPECT(w, "x\xe3\x80\x80x", 2, 15, 15, 3); /* U+3000 ideographic space */
    EXPECT(w, "x\xffx", 2, 15, 16, 3);         /* invalid UTF-8 -> U+FFFD -> dropped */
    EXPECT(w, "x\xef\xbf\xbdx", 2, 15, 16, 3); /* U+FFFD itself dropped */
    EXPECT(w, "\xc4\xb0s", 2, 22, 3);          /* U+0130 -> I + U+0307 -> i, "is" */
    {
        const int want[] = {2, 15, 16, 3, -1};
        expect_ids(w, "x\0x", 3, want); /* U+0000 dropped */
    }
    al__wordpiece_free(w);

    w = open_vocab(0, 0); /* cased, accents kept */
    EXPECT(w, "CAFE", 2, 1, 3);
    EXPECT(w, "café", 2, 1, 3);
    EXPECT(w, "cafe", 2, 12, 3);
    al__wordpiece_free(w);

    w = open_vocab(1, 0); /* lower-case without accent stripping: U+0130 -> "i\u0307" */
    EXPECT(w, "\xc4\xb0", 2, 1, 3);
    al__wordpiece_free(w);
}

static void test_long_words(void **state) {
    (void)state;
    al__wordpiece *w = open_vocab(1, 1);
    char text[512];
    memset(text, 'a', 100);
    text[100] = 0; /* 100 characters: a + 99 x ##a */
    int32_t *ids;
    size_t n;
    al_error err;
    assert_int_equal(al__wordpiece_encode(w, text, 100, &ids, &n, &err), 0);
    assert_int_equal(n, 102);
    assert_int_equal(ids[1], 10);
    assert_int_equal(ids[100], 11);
    free(ids);
    memset(text, 'a', 101); /* 101 characters: [UNK] */
    text[101] = 0;
    EXPECT(w, text, 2, 1, 3);
    /* 101 two-byte characters (accents stripped to 'a' only after counting the NFD result:
     * 101 characters all the same) */
    for (int i = 0; i < 101; i++) memcpy(text + 2 * i, "\xc3\xa1", 2);
    text[202] = 0;
    EXPECT(w, text, 2, 1, 3);
    al__wordpiece_free(w);
}

static void test_decode(void **state) {
    (void)state;
    al__wordpiece *w = open_vocab(1, 1);
    const int32_t ids[] = {2, 4, 5, 6, 8, 7, 3};
    char *text;
    size_t len;
    al_error err;
    assert_int_equal(al__wordpiece_decode(w, ids, 7, &text, &len, &err), 0);
    assert_string_equal(text, "[CLS] unaffable , hello [SEP]");
    assert_int_equal(len, strlen(text));
    free(text);
    const int32_t bad[] = {2, 30};
    assert_int_equal(al__wordpiece_decode(w, bad, 2, &text, &len, &err), AL_E_INVALID);
    assert_non_null(strstr(err.msg, "30"));
    al__wordpiece_free(w);
}

static void expect_bad_vocab(const char *content, size_t len, const char *needle) {
    char *path = write_tmp(content, len);
    al__wordpiece *w = NULL;
    al_error err = {0};
    int rc = al__wordpiece_open(path, 1, 1, &w, &err);
    assert_int_not_equal(rc, 0);
    assert_null(w);
    if (!strstr(err.msg, path)) fail_msg("message '%s' does not name the file", err.msg);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    unlink(path);
    free(path);
}

static void test_bad_vocab(void **state) {
    (void)state;
    expect_bad_vocab("", 0, "empty");
    expect_bad_vocab("[CLS]\n[SEP]\nhello\n", 18, "[UNK]");
    expect_bad_vocab("[UNK]\n[SEP]\n", 12, "[CLS]");
    expect_bad_vocab("[UNK]\n[CLS]\n", 12, "[SEP]");
    expect_bad_vocab("[UNK]\n[CLS]\n[SEP]\na\0b\n", 21, "NUL");
    al__wordpiece *w = NULL;
    al_error err = {0};
    assert_int_equal(al__wordpiece_open("/nonexistent/vocab.txt", 1, 1, &w, &err), AL_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/vocab.txt"));
    /* CRLF lines and no final newline are accepted */
    char *path = write_tmp("[UNK]\r\n[CLS]\r\n[SEP]\r\nab", 23);
    assert_int_equal(al__wordpiece_open(path, 1, 1, &w, &err), 0);
    EXPECT(w, "AB", 1, 3, 2);
    al__wordpiece_free(w);
    unlink(path);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_word_pieces), cmocka_unit_test(test_normalisation),
        cmocka_unit_test(test_long_words),  cmocka_unit_test(test_decode),
        cmocka_unit_test(test_bad_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
