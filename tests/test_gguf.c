/* test_gguf.c: the GGUF reader on files built here byte by byte (valid and malformed), and
 * the dequantisation of hand-computed blocks and quantise/dequantise round trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"

/* ---- a tiny GGUF writer ------------------------------------------------------------------ */

typedef struct buf {
    unsigned char *p; /* [n] */
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(b, x, 4);
}
static void put_u64(buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_f32(buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}
static void pad_to(buf *b, size_t align) {
    unsigned char z = 0;
    while (b->n % align) put(b, &z, 1);
}

/* A valid v3 file: metadata of several types, a 2x4 F32 tensor and a 32-element Q8_0 one.
 * Offsets of interesting fields are returned for the malformed variants. */
typedef struct layout {
    size_t version, n_tensors, n_kv, str_len, vtype, tensor_ndims, tensor_type, tensor_offset, data;
} layout;

static buf valid_file(layout *lo) {
    buf b = {0};
    put(&b, "GGUF", 4);
    lo->version = b.n;
    put_u32(&b, 3);
    lo->n_tensors = b.n;
    put_u64(&b, 2);
    lo->n_kv = b.n;
    put_u64(&b, 5);
    put_str(&b, "general.architecture");
    lo->vtype = b.n;
    put_u32(&b, AL_GGUF_STRING);
    lo->str_len = b.n;
    put_str(&b, "llama");
    put_str(&b, "llama.block_count");
    put_u32(&b, AL_GGUF_U32);
    put_u32(&b, 30);
    put_str(&b, "llama.rope.freq_base");
    put_u32(&b, AL_GGUF_F32);
    put_f32(&b, 100000.0f);
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, AL_GGUF_ARRAY);
    put_u32(&b, AL_GGUF_STRING);
    put_u64(&b, 3);
    put_str(&b, "a");
    put_str(&b, "bc");
    put_str(&b, "");
    put_str(&b, "tokenizer.ggml.token_type");
    put_u32(&b, AL_GGUF_ARRAY);
    put_u32(&b, AL_GGUF_I32);
    put_u64(&b, 3);
    put_u32(&b, 1);
    put_u32(&b, (uint32_t)-1);
    put_u32(&b, 3);
    /* tensor infos */
    put_str(&b, "w");
    lo->tensor_ndims = b.n;
    put_u32(&b, 2);
    put_u64(&b, 4);
    put_u64(&b, 2);
    lo->tensor_type = b.n;
    put_u32(&b, AL_GGML_F32);
    lo->tensor_offset = b.n;
    put_u64(&b, 0);
    put_str(&b, "q");
    put_u32(&b, 1);
    put_u64(&b, 32);
    put_u32(&b, AL_GGML_Q8_0);
    put_u64(&b, 32); /* after the 32 bytes of w */
    pad_to(&b, 32);
    lo->data = b.n;
    for (int i = 0; i < 8; i++) put_f32(&b, (float)i - 3.5f);
    unsigned char q8[34];
    q8[0] = 0x00;
    q8[1] = 0x34; /* f16 0x3400 = 0.25 */
    for (int j = 0; j < 32; j++) q8[2 + j] = (unsigned char)(int8_t)(j - 16);
    put(&b, q8, sizeof q8);
    return b;
}

static void test_valid(void **state) {
    (void)state;
    layout lo;
    buf b = valid_file(&lo);
    al_error err = {0};
    al__gguf *g = NULL;
    assert_int_equal(al__gguf_parse(b.p, b.n, "mem.gguf", &g, &err), 0);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->n_kv, 5);
    assert_int_equal(g->n_tensors, 2);
    char s[32];
    assert_int_equal(al__gguf_get_str(g, "general.architecture", s, sizeof s, &err), 0);
    assert_string_equal(s, "llama");
    int64_t v;
    assert_int_equal(al__gguf_get_int(g, "llama.block_count", 0, 100, &v, &err), 0);
    assert_int_equal(v, 30);
    assert_int_not_equal(al__gguf_get_int(g, "llama.block_count", 0, 10, &v, &err), 0);
    double f;
    assert_int_equal(al__gguf_get_float(g, "llama.rope.freq_base", &f, &err), 0);
    assert_true(f == 100000.0);
    char **strs;
    int64_t n;
    assert_int_equal(al__gguf_get_str_array(g, "tokenizer.ggml.tokens", &strs, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(strs[0], "a");
    assert_string_equal(strs[1], "bc");
    assert_string_equal(strs[2], "");
    free(strs);
    int32_t *iv;
    assert_int_equal(al__gguf_get_i32_array(g, "tokenizer.ggml.token_type", &iv, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(iv[0], 1);
    assert_int_equal(iv[1], -1);
    assert_int_equal(iv[2], 3);
    free(iv);
    assert_int_equal(al__gguf_get_str(g, "missing.key", s, sizeof s, &err), AL_E_NOTFOUND);
    assert_non_null(strstr(err.msg, "missing.key"));
    float w[8];
    int64_t ne[2] = {4, 2};
    assert_int_equal(al__gguf_load_f32(g, "w", 2, ne, w, &err), 0);
    for (int i = 0; i < 8; i++) assert_true(w[i] == (float)i - 3.5f);
    int64_t bad[2] = {2, 4};
    assert_int_equal(al__gguf_load_f32(g, "w", 2, bad, w, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "'w'"));
    float q[32];
    int64_t ne1 = 32;
    assert_int_equal(al__gguf_load_f32(g, "q", 1, &ne1, q, &err), 0);
    for (int j = 0; j < 32; j++) assert_true(q[j] == 0.25f * (float)(j - 16));
    al__gguf_close(g);
    free(b.p);
}

/* Parses a copy of b with bytes [at, at+n) replaced; returns the code, message in err. */
static int parse_patched(const buf *b, size_t at, const void *bytes, size_t n, al_error *err) {
    unsigned char *c = malloc(b->n);
    memcpy(c, b->p, b->n);
    memcpy(c + at, bytes, n);
    al__gguf *g = NULL;
    int rc = al__gguf_parse(c, b->n, "bad.gguf", &g, err);
    al__gguf_close(g);
    free(c);
    return rc;
}

static void expect_bad(const buf *b, size_t at, uint64_t value, size_t width, const char *needle) {
    unsigned char x[8];
    for (size_t i = 0; i < 8; i++) x[i] = (unsigned char)(value >> (8 * i));
    al_error err = {0};
    int rc = parse_patched(b, at, x, width, &err);
    if (rc == 0 || !strstr(err.msg, needle) || !strstr(err.msg, "bad.gguf"))
        fail_msg("patch at %zu: rc %d, message '%s' (wanted '%s')", at, rc, err.msg, needle);
}

static void test_malformed(void **state) {
    (void)state;
    layout lo;
    buf b = valid_file(&lo);
    expect_bad(&b, 0, 0x46554748u, 4, "bad magic");
    expect_bad(&b, lo.version, 1, 4, "version 1");
    expect_bad(&b, lo.version, 4, 4, "version 4");
    expect_bad(&b, lo.n_tensors, 1ull << 40, 8, "tensor count");
    expect_bad(&b, lo.n_kv, 1ull << 40, 8, "metadata count");
    expect_bad(&b, lo.n_kv, 7, 8, "metadata key");        /* claims more pairs than there are */
    expect_bad(&b, lo.str_len, 1ull << 62, 8, "length");  /* string longer than any limit */
    expect_bad(&b, lo.str_len, 1u << 20, 8, "truncated"); /* string running past the end */
    expect_bad(&b, lo.vtype, 13, 4, "unknown value type");
    expect_bad(&b, lo.tensor_ndims, 5, 4, "dimensions");
    expect_bad(&b, lo.tensor_ndims, 0, 4, "dimensions");
    expect_bad(&b, lo.tensor_ndims + 4, 0, 8, "bad dimension");          /* ne[0] = 0 */
    expect_bad(&b, lo.tensor_ndims + 4, 1ull << 62, 8, "bad dimension"); /* product overflows */
    expect_bad(&b, lo.tensor_ndims + 4, 1ull << 40, 8, "outside");       /* bigger than the file */
    expect_bad(&b, lo.tensor_type, 99, 4, "unknown GGML type 99");
    expect_bad(&b, lo.tensor_type, AL_GGML_Q4_0, 4, "not a multiple of its block"); /* rows of 4 */
    expect_bad(&b, lo.tensor_offset, 8, 8, "not aligned");
    expect_bad(&b, lo.tensor_offset, 1ull << 40, 8, "outside");
    expect_bad(&b, lo.tensor_offset, 64, 8, "outside");             /* w at 64 runs past the end */
    expect_bad(&b, lo.tensor_offset, 32, 8, "'w' and 'q' overlap"); /* w on q's bytes */
    /* every truncation is an error, never a crash */
    for (size_t n = 0; n < b.n; n++) {
        al_error err = {0};
        al__gguf *g = NULL;
        unsigned char *c = malloc(n ? n : 1);
        memcpy(c, b.p, n);
        int rc = al__gguf_parse(c, n, "cut.gguf", &g, &err);
        if (rc == 0) fail_msg("truncated to %zu of %zu bytes but parsed", n, b.n);
        assert_non_null(strstr(err.msg, "cut.gguf"));
        free(c);
    }
    free(b.p);
}

static void test_duplicate_and_alignment(void **state) {
    (void)state;
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 2);
    put_u64(&b, 0);
    put_u64(&b, 2);
    put_str(&b, "general.alignment");
    put_u32(&b, AL_GGUF_U32);
    put_u32(&b, 24); /* not a power of two */
    put_str(&b, "k");
    put_u32(&b, AL_GGUF_BOOL);
    unsigned char one = 1;
    put(&b, &one, 1);
    al_error err = {0};
    al__gguf *g = NULL;
    assert_int_not_equal(al__gguf_parse(b.p, b.n, "align.gguf", &g, &err), 0);
    assert_non_null(strstr(err.msg, "general.alignment"));
    b.p[4 + 4 + 8 + 8 + 8 + 17 + 4] = 64; /* alignment 64: valid (v2, no tensors) */
    assert_int_equal(al__gguf_parse(b.p, b.n, "align.gguf", &g, &err), 0);
    assert_int_equal(g->alignment, 64);
    al__gguf_close(g);
    /* the same key twice */
    buf d = {0};
    put(&d, "GGUF", 4);
    put_u32(&d, 3);
    put_u64(&d, 0);
    put_u64(&d, 2);
    for (int i = 0; i < 2; i++) {
        put_str(&d, "dup");
        put_u32(&d, AL_GGUF_U8);
        put(&d, &one, 1);
    }
    assert_int_not_equal(al__gguf_parse(d.p, d.n, "dup.gguf", &g, &err), 0);
    assert_non_null(strstr(err.msg, "twice"));
    free(b.p);
    free(d.p);
}

/* Regression: duplicate metadata keys were once found by comparing every pair (quadratic: a
 * file of 1e5 keys took minutes). 1e5 distinct keys, and the same with the last key equal to
 * the first (the worst case for a pairwise scan), must each be parsed / rejected well within
 * 2 s (an O(n log n) check takes tens of milliseconds). */
static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_many_keys_fast(void **state) {
    (void)state;
    enum { N_KEYS = 100000 };
    for (int dup = 0; dup < 2; dup++) {
        buf b = {0};
        put(&b, "GGUF", 4);
        put_u32(&b, 3);
        put_u64(&b, 0);
        put_u64(&b, N_KEYS);
        for (int i = 0; i < N_KEYS; i++) {
            char key[32];
            snprintf(key, sizeof key, "meta.key.%06d", dup && i == N_KEYS - 1 ? 0 : i);
            put_str(&b, key);
            put_u32(&b, AL_GGUF_U32);
            put_u32(&b, (uint32_t)i);
        }
        al_error err = {0};
        al__gguf *g = NULL;
        double t0 = seconds_now();
        int rc = al__gguf_parse(b.p, b.n, "many.gguf", &g, &err);
        double dt = seconds_now() - t0;
        print_message("%d metadata keys%s: parsed in %.3f s\n", N_KEYS,
                      dup ? " (one duplicate)" : "", dt);
        if (dup) {
            assert_int_equal(rc, AL_E_FORMAT);
            assert_non_null(strstr(err.msg, "many.gguf"));
            assert_non_null(strstr(err.msg, "'meta.key.000000' appears twice"));
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(g->n_kv, N_KEYS);
            int64_t v;
            assert_int_equal(al__gguf_get_int(g, "meta.key.077777", 0, N_KEYS, &v, &err), 0);
            assert_int_equal(v, 77777);
        }
        assert_true(dt < 2.0);
        al__gguf_close(g);
        free(b.p);
    }
}

/* ---- dequantisation: hand-computed blocks ---------------------------------------------------- */

static void f16(unsigned char *p, uint16_t h) {
    p[0] = (unsigned char)h;
    p[1] = (unsigned char)(h >> 8);
}

static void test_f16_bf16(void **state) {
    (void)state;
    uint16_t h[6] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3555};
    float want[6] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f, INFINITY, 0.333251953125f};
    unsigned char src[12];
    for (int i = 0; i < 6; i++) f16(src + 2 * i, h[i]);
    float y[6];
    al_error err = {0};
    assert_int_equal(al__ggml_dequant(AL_GGML_F16, src, 12, 6, y, &err), 0);
    for (int i = 0; i < 6; i++) assert_true(y[i] == want[i]);
    uint16_t bh[3] = {0x3F80, 0xC0A0, 0x4049}; /* 1, -5, 3.140625 */
    float bwant[3] = {1.0f, -5.0f, 3.140625f};
    for (int i = 0; i < 3; i++) f16(src + 2 * i, bh[i]);
    assert_int_equal(al__ggml_dequant(AL_GGML_BF16, src, 6, 3, y, &err), 0);
    for (int i = 0; i < 3; i++) assert_true(y[i] == bwant[i]);
}

static void test_q4_q5_blocks(void **state) {
    (void)state;
    al_error err = {0};
    unsigned char b[24];
    float y[32];
    /* Q4_0: d = 2, qs[j] = j | (15-j) << 4  ->  x[j] = 2(j-8), x[j+16] = 2(7-j) */
    f16(b, 0x4000);
    for (int j = 0; j < 16; j++) b[2 + j] = (unsigned char)(j | ((15 - j) << 4));
    assert_int_equal(al__ggml_dequant(AL_GGML_Q4_0, b, 18, 32, y, &err), 0);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 2.0f * (j - 8));
        assert_true(y[j + 16] == 2.0f * (7 - j));
    }
    /* Q4_1: d = 0.5, m = -1  ->  x[j] = 0.5 j - 1, x[j+16] = 0.5 (15-j) - 1 */
    f16(b, 0x3800);
    f16(b + 2, 0xBC00);
    for (int j = 0; j < 16; j++) b[4 + j] = (unsigned char)(j | ((15 - j) << 4));
    assert_int_equal(al__ggml_dequant(AL_GGML_Q4_1, b, 20, 32, y, &err), 0);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * j - 1.0f);
        assert_true(y[j + 16] == 0.5f * (15 - j) - 1.0f);
    }
    /* Q5_0: d = 1, all nibbles 15, qh = bits of even elements set:
     * element i has q = 15 + 16*(i even) -> x = q - 16 */
    f16(b, 0x3C00);
    uint32_t qh = 0x55555555u;
    memcpy(b + 2, &qh, 4); /* little-endian host */
    memset(b + 6, 0xFF, 16);
    assert_int_equal(al__ggml_dequant(AL_GGML_Q5_0, b, 22, 32, y, &err), 0);
    for (int i = 0; i < 32; i++) assert_true(y[i] == (float)(15 + (i % 2 == 0 ? 16 : 0) - 16));
    /* Q5_1: d = 0.5, m = 3, nibbles j / 15-j, qh = only bit 31 (element 31) */
    f16(b, 0x3800);
    f16(b + 2, 0x4200);
    qh = 0x80000000u;
    memcpy(b + 4, &qh, 4);
    for (int j = 0; j < 16; j++) b[8 + j] = (unsigned char)(j | ((15 - j) << 4));
    assert_int_equal(al__ggml_dequant(AL_GGML_Q5_1, b, 24, 32, y, &err), 0);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * j + 3.0f);
        assert_true(y[j + 16] == 0.5f * ((15 - j) + (j == 15 ? 16 : 0)) + 3.0f);
    }
    /* wrong byte counts are errors */
    assert_int_not_equal(al__ggml_dequant(AL_GGML_Q4_1, b, 19, 32, y, &err), 0);
    assert_int_not_equal(al__ggml_dequant(AL_GGML_Q4_1, b, 20, 31, y, &err), 0);
    assert_int_equal(al__ggml_dequant(AL_GGML_Q2_K, b, 84, 256, y, &err), AL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "Q2_K"));
}

static void test_k_blocks(void **state) {
    (void)state;
    al_error err = {0};
    float *y = malloc(256 * sizeof *y);
    /* Q6_K: d = 0.5; scales[s] = s - 8 (sub-block s of 16 elements); element e has the 6-bit
     * q = e % 64. Layout: element e = 128*h + 32*r + l (h half, r = 0..3, l < 32):
     * low 4 bits in ql[64h + l + 32*(r&1)] (nibble r>>1), high 2 bits in qh[32h + l] bits 2r. */
    unsigned char b6[210] = {0};
    for (int e = 0; e < 256; e++) {
        int h = e / 128, r = (e % 128) / 32, l = e % 32, q = e % 64;
        b6[64 * h + l + 32 * (r & 1)] |= (unsigned char)((q & 15) << (4 * (r >> 1)));
        b6[128 + 32 * h + l] |= (unsigned char)((q >> 4) << (2 * r));
    }
    for (int s = 0; s < 16; s++) b6[192 + s] = (unsigned char)(int8_t)(s - 8);
    f16(b6 + 208, 0x3800);
    assert_int_equal(al__ggml_dequant(AL_GGML_Q6_K, b6, 210, 256, y, &err), 0);
    for (int e = 0; e < 256; e++)
        assert_true(y[e] == 0.5f * (float)(e / 16 - 8) * (float)(e % 64 - 32));
    /* Q4_K: d = 1, dmin = 0.5; sub-block s (32 elements) has scale s+1 and min 2s (6 bits,
     * packed: s < 4 in the low 6 bits of bytes s / s+4; s >= 4 split over nibbles of byte s+4
     * and the top 2 bits of bytes s-4 / s); element nibble q = e % 16. x = (s+1) q - 0.5 * 2s */
    unsigned char b4[144] = {0};
    f16(b4, 0x3C00);
    f16(b4 + 2, 0x3800);
    for (int s = 0; s < 8; s++) {
        int sc = s + 1, mn = 2 * s;
        if (s < 4) {
            b4[4 + s] |= (unsigned char)sc;
            b4[4 + s + 4] |= (unsigned char)mn;
        } else {
            b4[4 + s + 4] |= (unsigned char)((sc & 15) | ((mn & 15) << 4));
            b4[4 + s - 4] |= (unsigned char)((sc >> 4) << 6);
            b4[4 + s] |= (unsigned char)((mn >> 4) << 6);
        }
    }
    for (int e = 0; e < 256; e++) { /* 64-element chunk c: bytes 32c..32c+31, low nibble first */
        int c = e / 64, hi = (e % 64) / 32, l = e % 32;
        b4[16 + 32 * c + l] |= (unsigned char)((e % 16) << (4 * hi));
    }
    assert_int_equal(al__ggml_dequant(AL_GGML_Q4_K, b4, 144, 256, y, &err), 0);
    for (int e = 0; e < 256; e++) {
        int s = e / 32;
        assert_true(y[e] == (float)(s + 1) * (float)(e % 16) - 0.5f * (float)(2 * s));
    }
    /* Q5_K: the same scales, nibbles, plus a fifth bit for elements with e % 3 == 0 */
    unsigned char b5[176] = {0};
    memcpy(b5, b4, 16);
    memcpy(b5 + 48, b4 + 16, 128);
    for (int e = 0; e < 256; e++) {
        int c = e / 64, hi = (e % 64) / 32, l = e % 32;
        if (e % 3 == 0) b5[16 + l] |= (unsigned char)(1u << (2 * c + hi));
    }
    assert_int_equal(al__ggml_dequant(AL_GGML_Q5_K, b5, 176, 256, y, &err), 0);
    for (int e = 0; e < 256; e++) {
        int s = e / 32, q = e % 16 + (e % 3 == 0 ? 16 : 0);
        assert_true(y[e] == (float)(s + 1) * (float)q - 0.5f * (float)(2 * s));
    }
    free(y);
}

/* ---- round trips: quantise with the format's definition, dequantise, bound the error ----------
 */

static uint16_t to_f16(float f) { /* round to nearest for normal halves (enough here) */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int exp = (int)((u >> 23) & 255) - 127 + 15;
    uint32_t man = u & 0x7FFFFFu;
    if (exp <= 0) return (uint16_t)sign;
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
    if (man & 0x1000u) h++;
    return (uint16_t)h;
}

static void test_round_trips(void **state) {
    (void)state;
    al_error err = {0};
    al__rng r;
    al__rng_seed(&r, 7);
    enum { N = 32 * 64 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    unsigned char *q = malloc(N / 32 * 34);
    for (int i = 0; i < N; i++) x[i] = (float)al__rng_normal(&r);
    /* Q8_0: d = max|x| / 127, q = round(x / d): |x - y| <= d/2 (+ the rounding of d to f16) */
    for (int bl = 0; bl < N / 32; bl++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * bl + j]));
        uint16_t dh = to_f16(amax / 127.0f);
        unsigned char *b = q + 34 * bl;
        f16(b, dh);
        float d;
        al__ggml_dequant(AL_GGML_F16, b, 2, 1, &d, &err);
        for (int j = 0; j < 32; j++) {
            long v = lrintf(x[32 * bl + j] / d);
            b[2 + j] = (unsigned char)(int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
    }
    assert_int_equal(al__ggml_dequant(AL_GGML_Q8_0, q, N / 32 * 34, N, y, &err), 0);
    for (int i = 0; i < N; i++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[i / 32 * 32 + j]));
        assert_true(fabsf(x[i] - y[i]) <= amax / 127.0f * 0.51f + 1e-6f);
    }
    /* Q4_1: m = min, d = (max - min) / 15, q = round((x - m) / d): |x - y| <= d/2 + f16 error */
    for (int bl = 0; bl < N / 32; bl++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            mn = fminf(mn, x[32 * bl + j]);
            mx = fmaxf(mx, x[32 * bl + j]);
        }
        unsigned char *b = q + 20 * bl;
        f16(b, to_f16((mx - mn) / 15.0f));
        f16(b + 2, to_f16(mn));
        float dm[2];
        al__ggml_dequant(AL_GGML_F16, b, 4, 2, dm, &err);
        for (int j = 0; j < 16; j++) {
            long lo = lrintf((x[32 * bl + j] - dm[1]) / dm[0]),
                 hi = lrintf((x[32 * bl + 16 + j] - dm[1]) / dm[0]);
            lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
            hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
            b[4 + j] = (unsigned char)(lo | (hi << 4));
        }
    }
    assert_int_equal(al__ggml_dequant(AL_GGML_Q4_1, q, N / 32 * 20, N, y, &err), 0);
    for (int i = 0; i < N; i++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            mn = fminf(mn, x[i / 32 * 32 + j]);
            mx = fmaxf(mx, x[i / 32 * 32 + j]);
        }
        assert_true(fabsf(x[i] - y[i]) <=
                    (mx - mn) / 15.0f * 0.5f + 0.01f * (fabsf(mn) + (mx - mn)));
    }
    free(x);
    free(y);
    free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_duplicate_and_alignment),
        cmocka_unit_test(test_many_keys_fast),
        cmocka_unit_test(test_f16_bf16),
        cmocka_unit_test(test_q4_q5_blocks),
        cmocka_unit_test(test_k_blocks),
        cmocka_unit_test(test_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
