/* test_safetensors.c: the in-memory safetensors and llm.c parsers on valid and malformed
 * buffers (every prefix of a valid file, lying lengths and offsets, overlaps, overflow),
 * half-precision conversions against closed forms, and the sharded index on disk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "safetensors.h"

/* A safetensors image from a JSON header and data: [u64 len][json][data]. */
static size_t make_st(unsigned char *buf, size_t cap, const char *json, const void *data,
                      size_t data_len) {
    size_t n = strlen(json);
    assert_true(8 + n + data_len <= cap);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    if (data_len) memcpy(buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

static const char *VALID = "{\"__metadata__\":{\"format\":\"pt\"},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
                           "\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}";

static void valid_data(unsigned char *d) {
    const uint16_t bf[4] = {0x3f80, 0xc000, 0x0000, 0x7f80}; /* 1, -2, 0, +Inf */
    for (int i = 0; i < 4; i++)
        d[2 * i] = (unsigned char)(bf[i] & 0xff), d[2 * i + 1] = (unsigned char)(bf[i] >> 8);
    for (int i = 0; i < 6; i++) {
        float f = (float)i + 0.5f;
        memcpy(d + 8 + 4 * i, &f, 4);
    }
}

static void test_valid(void **state) {
    (void)state;
    unsigned char buf[1024], data[32];
    valid_data(data);
    size_t len = make_st(buf, sizeof buf, VALID, data, sizeof data);
    al__st_tensor *t;
    int n;
    al_error err = {0};
    assert_int_equal(al__st_parse_buffer(buf, len, "mem", &t, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].name, "a"); /* sorted by name */
    assert_int_equal(t[0].dtype, AL_ST_BF16);
    assert_int_equal(t[1].ndim, 2);
    assert_int_equal(t[1].shape[0], 2);
    assert_int_equal(t[1].shape[1], 3);
    assert_ptr_equal(t[1].data, buf + len - 24);
    float a[4], b[6];
    assert_int_equal(al__st_to_f32(&t[0], a, &err), 0);
    assert_true(a[0] == 1.0f && a[1] == -2.0f && a[2] == 0.0f && isinf(a[3]));
    assert_int_equal(al__st_to_f32(&t[1], b, &err), 0);
    for (int i = 0; i < 6; i++) assert_true(b[i] == (float)i + 0.5f);
    free(t);
}

/* Every strict prefix of a valid file is an error, never a crash (ASan/UBSan builds check). */
static void test_every_prefix(void **state) {
    (void)state;
    unsigned char buf[1024], data[32];
    valid_data(data);
    size_t len = make_st(buf, sizeof buf, VALID, data, sizeof data);
    for (size_t k = 0; k < len; k++) {
        unsigned char *copy = malloc(k ? k : 1); /* exact size: ASan sees any overread */
        memcpy(copy, buf, k);
        al__st_tensor *t = NULL;
        int n = 0;
        al_error err = {0};
        int rc = al__st_parse_buffer(copy, k, "cut.safetensors", &t, &n, &err);
        assert_int_not_equal(rc, 0);
        assert_non_null(strstr(err.msg, "cut.safetensors"));
        assert_null(t);
        free(copy);
    }
}

/* A header that must be rejected, with a word expected in the message. */
static void expect_bad(const char *json, size_t data_len, const char *word) {
    unsigned char buf[2048], data[64] = {0};
    size_t len = make_st(buf, sizeof buf, json, data, data_len);
    al__st_tensor *t = NULL;
    int n = 0;
    al_error err = {0};
    int rc = al__st_parse_buffer(buf, len, "bad.safetensors", &t, &n, &err);
    if (rc == 0) fail_msg("accepted: %s", json);
    if (!strstr(err.msg, word))
        fail_msg("message '%s' lacks '%s' (header %s)", err.msg, word, json);
    assert_non_null(strstr(err.msg, "bad.safetensors"));
    assert_null(t);
}

static void test_bad_headers(void **state) {
    (void)state;
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8,
               "outside the data");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
               "outside the data");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12");
    expect_bad("{\"x\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "unknown dtype");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               16, "overlap");
    expect_bad(
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}",
        8, "overflow");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
    expect_bad("{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               8, "rank");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, "twice");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__");
    expect_bad("{\"x\":3}", 0, "not a JSON object");
    expect_bad("[1,2]", 0, "'{'");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}garbage", 8,
               "after the header");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8, "JSON");
}

static void test_header_length_lies(void **state) {
    (void)state;
    unsigned char buf[256];
    size_t len = make_st(buf, sizeof buf, "{}", NULL, 0);
    al__st_tensor *t;
    int n;
    al_error err = {0};
    buf[0] = 200; /* longer than the file */
    assert_int_equal(al__st_parse_buffer(buf, len, "lie", &t, &n, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "exceeds"));
    memset(buf, 0xff, 8); /* 2^64 - 1 */
    assert_int_equal(al__st_parse_buffer(buf, len, "lie", &t, &n, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "limit"));
    len = make_st(buf, sizeof buf, "{}", NULL, 0);
    assert_int_equal(al__st_parse_buffer(buf, len, "empty", &t, &n, &err),
                     0); /* no tensors: valid */
    assert_int_equal(n, 0);
    free(t);
}

/* Gaps between tensors, zero-size tensors, any order: accepted (documented in safetensors.h). */
static void test_gaps_and_empty(void **state) {
    (void)state;
    unsigned char buf[512], data[32] = {0};
    size_t len = make_st(buf, sizeof buf,
                         "{\"z\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
                         "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
                         "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}  ",
                         data, sizeof data);
    al__st_tensor *t;
    int n;
    al_error err = {0};
    assert_int_equal(al__st_parse_buffer(buf, len, "gaps", &t, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(al__st_numel(&t[1]), 1); /* "s", a scalar */
    free(t);
}

static void test_half_conversions(void **state) {
    (void)state;
    /* f16: closed forms of IEEE binary16 */
    assert_true(al__f16_to_f32(0x3c00) == 1.0f);
    assert_true(al__f16_to_f32(0xc000) == -2.0f);
    assert_true(al__f16_to_f32(0x7bff) == 65504.0f);
    assert_true(al__f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(al__f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    assert_true(al__f16_to_f32(0x0400) == ldexpf(1.0f, -14)); /* smallest normal */
    assert_true(isinf(al__f16_to_f32(0xfc00)) && al__f16_to_f32(0xfc00) < 0);
    assert_true(isnan(al__f16_to_f32(0x7e00)));
    assert_true(signbit(al__f16_to_f32(0x8000)));
    /* bf16: the top 16 bits of a float32; rounding to nearest even */
    assert_true(al__bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(al__f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);     /* tie -> even (down) */
    assert_int_equal(al__f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3f82); /* tie -> even (up) */
    assert_int_equal(al__f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20)), 0x3f81);
    assert_true(isnan(al__bf16_to_f32(al__f32_to_bf16(NAN))));
}

/* ---- llm.c ---------------------------------------------------------------------------------- */

static unsigned char *make_llmc(int version, int maxT, int V, int L, int NH, int C, int Vp,
                                long extra, size_t *len) {
    size_t Cz = (size_t)C,
           n = (size_t)Vp * Cz + (size_t)maxT * Cz + (size_t)L * (12 * Cz * Cz + 13 * Cz) + 2 * Cz;
    size_t el = version == 3 ? 4 : 2;
    *len = (size_t)((long)(1024 + n * el) + extra);
    unsigned char *b = calloc(1, *len + 16);
    int32_t h[8] = {AL_LLMC_MAGIC, version, maxT, V, L, NH, C, Vp};
    memcpy(b, h, sizeof h);
    return b;
}

static void test_llmc(void **state) {
    (void)state;
    size_t len;
    al__llmc_hdr h;
    al_error err = {0};
    unsigned char *b = make_llmc(3, 16, 50, 2, 2, 8, 128, 0, &len);
    assert_int_equal(al__llmc_parse_buffer(b, len, "ok.bin", &h, &err), 0);
    assert_int_equal(h.Vp, 128);
    size_t numel;
    /* offsets in llm.c order: wte [Vp, C], wpe [maxT, C], ln_1.weight of layer 0, ... */
    assert_int_equal(al__llmc_offset(&h, 0, &numel), 1024);
    assert_int_equal(numel, 128 * 8);
    assert_int_equal(al__llmc_offset(&h, 1, &numel), 1024 + 4 * 128 * 8);
    assert_int_equal(al__llmc_offset(&h, 2, &numel), 1024 + 4 * (128 * 8 + 16 * 8));
    assert_int_equal(al__llmc_offset(&h, 4 + 12 * 2 - 1, &numel), len - 4 * 8); /* ln_f.bias last */
    for (size_t k = 0; k < len;
         k += (k < 1040 ? 1 : 97)) /* every prefix of the header, then sparser */
        assert_int_not_equal(al__llmc_parse_buffer(b, k, "cut.bin", &h, &err), 0);
    b[0] ^= 1;
    assert_int_equal(al__llmc_parse_buffer(b, len, "m.bin", &h, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "magic"));
    free(b);
    b = make_llmc(4, 16, 50, 2, 2, 8, 128, 0, &len);
    assert_int_equal(al__llmc_parse_buffer(b, len, "v.bin", &h, &err), AL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "version 4"));
    free(b);
    b = make_llmc(5, 16, 50, 2, 2, 8, 128, 1, &len);
    assert_int_equal(al__llmc_parse_buffer(b, len, "x.bin", &h, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "extra bytes"));
    free(b);
    b = make_llmc(3, 16, 50, 2, 3, 8, 128, 0, &len); /* 3 heads do not divide 8 */
    assert_int_equal(al__llmc_parse_buffer(b, len, "h.bin", &h, &err), AL_E_FORMAT);
    free(b);
    b = make_llmc(3, 16, 50, 2, 2, 8, 40, 0, &len); /* Vp < V */
    assert_int_equal(al__llmc_parse_buffer(b, len, "p.bin", &h, &err), AL_E_FORMAT);
    free(b);
    int32_t huge[8] = {AL_LLMC_MAGIC, 3, 1 << 20, 1 << 24, 4096, 1, 65536, 1 << 24};
    unsigned char hb[1024] = {0};
    memcpy(hb, huge, sizeof huge);
    assert_int_equal(al__llmc_parse_buffer(hb, sizeof hb, "huge.bin", &h, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "truncated"));
}

/* ---- sharded index on disk ------------------------------------------------------------------- */

static void write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void test_sharded(void **state) {
    (void)state;
    char dir[] = "/tmp/al_test_st_XXXXXX", p[256];
    assert_non_null(mkdtemp(dir));
    unsigned char buf[512];
    float v[2] = {1.5f, -3.0f};
    size_t n = make_st(buf, sizeof buf,
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8);
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    write_file(p, buf, n);
    n = make_st(buf, sizeof buf, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                v, 4);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    write_file(p, buf, n);
    const char *idx =
        "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_file(p, idx, strlen(idx));
    al__safetensors *st;
    al_error err = {0};
    assert_int_equal(al__st_open(dir, &st, &err), 0);
    assert_int_equal(al__st_count(st), 2);
    float got[2];
    int64_t shape[1] = {2};
    assert_int_equal(al__st_load_f32(st, "a", 1, shape, got, &err), 0);
    assert_true(got[0] == 1.5f && got[1] == -3.0f);
    shape[0] = 3;
    assert_int_equal(al__st_load_f32(st, "a", 1, shape, got, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "a: expected [3], file has [2]"));
    assert_non_null(strstr(al__st_find(st, "b")->file, "s2.safetensors"));
    al__st_close(st);
    /* the index names a shard that is not there */
    idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"gone.safetensors\"}}";
    write_file(p, idx, strlen(idx));
    assert_int_equal(al__st_open(dir, &st, &err), AL_E_NOTFOUND);
    assert_non_null(strstr(err.msg, "gone.safetensors"));
    /* a shard outside the directory */
    idx = "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}";
    write_file(p, idx, strlen(idx));
    assert_int_equal(al__st_open(dir, &st, &err), AL_E_FORMAT);
    /* the index puts a tensor in the wrong shard */
    idx = "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s2.safetensors\"}}";
    write_file(p, idx, strlen(idx));
    assert_int_equal(al__st_open(dir, &st, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "does not hold it"));
    const char *names[] = {"s1.safetensors", "s2.safetensors", "model.safetensors.index.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* The GPT-2 124M layout (names with the transformer. prefix, byte sizes) equals the pinned
 * table's: every parameter is listed there with our size, and the table has nothing else but
 * the HF buffers and the tied lm_head. */
static void test_124M_layout(void **state) {
    (void)state;
    const char *src = getenv("ATTNLIM_SOURCE_DIR");
    assert_non_null(src);
    char path[4096];
    snprintf(path, sizeof path, "%s/data/gpt2_124M_tensor_sha256.tsv", src);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    al__gpt2_cfg c = {12, 12, 768, 1024, 50257};
    int seen[4 + 12 * 12] = {0}, params = 0, others = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char name[200];
        long long bytes;
        assert_int_equal(sscanf(line, "%199s %lld", name, &bytes), 2);
        const char *shortname = strncmp(name, "transformer.", 12) ? name : name + 12;
        int i = al__gpt2_spec_find(&c, shortname);
        if (i < 0) {
            assert_true(al__gpt2_is_buffer(shortname));
            others++;
            continue;
        }
        al__gpt2_spec s;
        al__gpt2_spec_at(&c, i, &s);
        assert_string_equal(s.name, shortname);
        assert_int_equal(4 * s.shape[0] * (s.ndim == 2 ? s.shape[1] : 1), bytes);
        seen[i]++;
        params++;
    }
    fclose(f);
    assert_int_equal(params, 148);
    assert_int_equal(others, 25);
    for (int i = 0; i < 148; i++) assert_int_equal(seen[i], 1);
    assert_int_equal(al__gpt2_n_params(&c), 124439808); /* GPT-2 small, without the tied head */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),          cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_bad_headers),    cmocka_unit_test(test_header_length_lies),
        cmocka_unit_test(test_gaps_and_empty), cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_llmc),           cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_124M_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
