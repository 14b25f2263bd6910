/* test_npy.c: .npy reading and writing, and every malformed header we can think of. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

#include "attnlim.h"

/* Builds a v1 .npy in buf from a header dict and raw data; returns the length. */
static size_t make_npy(unsigned char *buf, size_t cap, int major, const char *dict,
                       const void *data, size_t data_len) {
    size_t dl = strlen(dict);
    size_t pre = major == 1 ? 10 : 12;
    size_t hlen = dl + 1;
    size_t total = pre + hlen + data_len;
    assert_true(total <= cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (unsigned char)(hlen & 0xff);
        buf[9] = (unsigned char)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    }
    memcpy(buf + pre, dict, dl);
    buf[pre + dl] = '\n';
    if (data_len) memcpy(buf + pre + hlen, data, data_len);
    return total;
}

static void expect_error(const unsigned char *buf, size_t len, al_code code, const char *needle) {
    al_array a;
    al_error err = {0};
    int rc = al_npy_parse(buf, len, "bad.npy", &a, &err);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err.msg, "bad.npy"));
    if (needle && !strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_parse_valid(void **state) {
    (void)state;
    unsigned char buf[512];
    double d[6] = {1, 2, 3, 4, 5, 6};
    size_t n = make_npy(buf, sizeof buf, 1,
                        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", d, sizeof d);
    al_array a;
    al_error err = {0};
    assert_int_equal(al_npy_parse(buf, n, "ok.npy", &a, &err), 0);
    assert_int_equal(a.dtype, AL_F64);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_memory_equal(a.data, d, sizeof d);
    al_array_free(&a);
    /* v2 header, float32, 1-D, keys in another order, scalar */
    float f[3] = {1.5f, -2.f, 0.25f};
    n = make_npy(buf, sizeof buf, 2, "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}", f,
                 sizeof f);
    assert_int_equal(al_npy_parse(buf, n, "ok.npy", &a, &err), 0);
    assert_int_equal(a.dtype, AL_F32);
    assert_int_equal(a.ndim, 1);
    assert_memory_equal(a.data, f, sizeof f);
    al_array_free(&a);
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", d,
                 8);
    assert_int_equal(al_npy_parse(buf, n, "ok.npy", &a, &err), 0);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(al_array_numel(&a), 1);
    al_array_free(&a);
    /* empty array (0 rows) is valid */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4), }",
                 NULL, 0);
    assert_int_equal(al_npy_parse(buf, n, "ok.npy", &a, &err), 0);
    assert_int_equal(al_array_numel(&a), 0);
    al_array_free(&a);
}

static void test_malformed(void **state) {
    (void)state;
    unsigned char buf[1024];
    double d[6] = {0};
    size_t n;
    /* wrong magic */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", d,
                 sizeof d);
    buf[1] = 'X';
    expect_error(buf, n, AL_E_FORMAT, "magic");
    /* unsupported version */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", d,
                 sizeof d);
    buf[6] = 9;
    expect_error(buf, n, AL_E_UNSUPPORTED, "version");
    /* header length past the end */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", d,
                 sizeof d);
    buf[8] = 0xff;
    buf[9] = 0x7f;
    expect_error(buf, n, AL_E_FORMAT, "header");
    /* v2 header length absurd */
    n = make_npy(buf, sizeof buf, 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", d,
                 sizeof d);
    buf[11] = 0x7f;
    expect_error(buf, n, AL_E_FORMAT, "header length");
    /* lying shapes */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (7,), }", d,
                 sizeof d);
    expect_error(buf, n, AL_E_FORMAT, "truncated");
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", d,
                 sizeof d);
    expect_error(buf, n, AL_E_FORMAT, "trailing");
    /* overflow: the product of dims exceeds size_t */
    n = make_npy(buf, sizeof buf, 1,
                 "{'descr': '<f8', 'fortran_order': False, 'shape': (1125899906842624, "
                 "1125899906842624, 64), }",
                 d, sizeof d);
    expect_error(buf, n, AL_E_FORMAT, "overflow");
    /* a single absurd dimension */
    n = make_npy(buf, sizeof buf, 1,
                 "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", d,
                 sizeof d);
    expect_error(buf, n, AL_E_FORMAT, "large");
    /* ranks: 9, 32 and AL_MAX_DIMS = 64 (numpy 2's limit) are read; 65 is refused by name */
    for (int nd = 9; nd <= AL_MAX_DIMS + 1; nd++) {
        char dict[600];
        int k = snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (");
        for (int i = 0; i < nd - 1; i++) k += snprintf(dict + k, sizeof dict - (size_t)k, "1, ");
        snprintf(dict + k, sizeof dict - (size_t)k, "6), }");
        n = make_npy(buf, sizeof buf, 1, dict, d, sizeof d);
        if (nd > AL_MAX_DIMS) {
            expect_error(buf, n, AL_E_UNSUPPORTED, "more than 64 dimensions");
            continue;
        }
        al_array a;
        al_error err = {0};
        assert_int_equal(al_npy_parse(buf, n, "ok.npy", &a, &err), 0);
        assert_int_equal(a.ndim, nd);
        assert_int_equal(a.shape[nd - 1], 6);
        assert_int_equal(al_array_numel(&a), 6);
        al_array_free(&a);
    }
    /* a bad magic names the bytes found; an empty buffer is "empty" */
    memcpy(buf, "PK\x03\x04\x14\x00", 6);
    expect_error(buf, 64, AL_E_FORMAT, "(bad magic): it starts with 'PK\\x03\\x04\\x14\\x00'");
    expect_error(buf, 0, AL_E_FORMAT, "empty file");
    /* Fortran order */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }",
                 d, sizeof d);
    expect_error(buf, n, AL_E_UNSUPPORTED, "Fortran");
    /* dtypes: int, big-endian, complex, object */
    const char *dts[] = {"<i4", ">f8", "<c16", "|O", "<f2"};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (6,), }",
                 dts[i]);
        n = make_npy(buf, sizeof buf, 1, dict, d, sizeof d);
        expect_error(buf, n, AL_E_UNSUPPORTED, dts[i]);
    }
    /* missing keys, unknown keys, syntax */
    const char *bad_dicts[] = {
        "{'descr': '<f8', 'shape': (6,), }",
        "{'descr': '<f8', 'fortran_order': False, }",
        "{'fortran_order': False, 'shape': (6,), }",
        "{'descr': '<f8', 'fortran_order': Maybe, 'shape': (6,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), 'extra': 1}",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (6,x), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': [6], }",
        "['descr', '<f8']",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), ",
        "",
    };
    for (size_t i = 0; i < sizeof bad_dicts / sizeof bad_dicts[0]; i++) {
        n = make_npy(buf, sizeof buf, 1, bad_dicts[i], d, sizeof d);
        expect_error(buf, n, AL_E_FORMAT, ".npy");
    }
}

static void test_every_truncation(void **state) {
    (void)state;
    unsigned char buf[512];
    double d[6] = {1, 2, 3, 4, 5, 6};
    size_t n = make_npy(buf, sizeof buf, 1,
                        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", d, sizeof d);
    for (size_t k = 0; k < n; k++) {
        al_array a;
        al_error err = {0};
        unsigned char *copy = malloc(k ? k : 1); /* exact size, so ASan catches an over-read */
        memcpy(copy, buf, k);
        int rc = al_npy_parse(copy, k, "cut.npy", &a, &err);
        free(copy);
        assert_int_not_equal(rc, 0);
        assert_non_null(strstr(err.msg, "cut.npy"));
    }
}

static void test_write_read_roundtrip(void **state) {
    (void)state;
    char path[] = "/tmp/al_test_npy_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (int ndim = 0; ndim <= 4; ndim++) {
        for (int dt = 0; dt < 2; dt++) {
            int64_t shape[4] = {3, 1, 4, 2};
            al_array a, b;
            al_error err = {0};
            assert_int_equal(al_array_alloc(&a, dt ? AL_F64 : AL_F32, ndim, shape, &err), 0);
            int64_t n = al_array_numel(&a);
            for (int64_t i = 0; i < n; i++) {
                if (dt)
                    ((double *)a.data)[i] = (double)i * 0.1 - 1;
                else
                    ((float *)a.data)[i] = (float)i * 0.5f;
            }
            assert_int_equal(al_npy_write(path, &a, &err), 0);
            assert_int_equal(al_npy_read(path, &b, &err), 0);
            assert_int_equal(b.ndim, ndim);
            assert_int_equal(b.dtype, a.dtype);
            for (int k = 0; k < ndim; k++) assert_int_equal(b.shape[k], shape[k]);
            assert_memory_equal(a.data, b.data, (size_t)n * al_dtype_size(a.dtype));
            /* the header is padded so the data starts on a 64-byte boundary */
            FILE *f = fopen(path, "rb");
            unsigned char pre[10];
            assert_int_equal(fread(pre, 1, 10, f), 10);
            fclose(f);
            assert_int_equal((10 + (pre[8] | pre[9] << 8)) % 64, 0);
            al_array_free(&a);
            al_array_free(&b);
        }
    }
    /* the largest rank, with dimensions of 16 digits (numel 0): the header still fits */
    int64_t shape[AL_MAX_DIMS];
    for (int i = 0; i < AL_MAX_DIMS; i++) shape[i] = i == 0 ? 0 : 1000000000000000LL;
    al_array a, b;
    al_error err = {0};
    a.dtype = AL_F64;
    a.ndim = AL_MAX_DIMS;
    memcpy(a.shape, shape, sizeof shape);
    a.data = NULL;
    assert_int_equal(al_npy_write(path, &a, &err), 0);
    assert_int_equal(al_npy_read(path, &b, &err), 0);
    assert_int_equal(b.ndim, AL_MAX_DIMS);
    for (int i = 0; i < AL_MAX_DIMS; i++) assert_int_equal(b.shape[i], shape[i]);
    al_array_free(&b);
    unlink(path);
}

static void test_write_errors(void **state) {
    (void)state;
    al_array a;
    al_error err = {0};
    int64_t shape[1] = {4};
    assert_int_equal(al_array_alloc(&a, AL_F64, 1, shape, &err), 0);
    memset(a.data, 0, 32);
    int rc = al_npy_write("/nonexistent-dir/x.npy", &a, &err);
    assert_int_equal(rc, AL_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.npy"));
    /* a full disk, simulated by a file-size limit: the write fails, the error names the file,
       and neither the final file nor the temp file is left behind */
    {
        char dir[] = "/tmp/al_test_full_XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[256];
        snprintf(path, sizeof path, "%s/big.npy", dir);
        al_array big;
        int64_t s2[1] = {1 << 20};
        assert_int_equal(al_array_alloc(&big, AL_F64, 1, s2, &err), 0);
        memset(big.data, 0, (size_t)8 << 20);
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 65536;
        signal(SIGXFSZ, SIG_IGN);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        rc = al_npy_write(path, &big, &err);
        setrlimit(RLIMIT_FSIZE, &old);
        assert_int_equal(rc, AL_E_IO);
        assert_non_null(strstr(err.msg, path));
        DIR *dh = opendir(dir);
        struct dirent *de;
        int entries = 0;
        while ((de = readdir(dh)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) entries++;
        closedir(dh);
        assert_int_equal(entries, 0);
        rmdir(dir);
        al_array_free(&big);
    }
    al_array_free(&a);
    assert_int_equal(al_npy_read("/nonexistent-file.npy", &a, &err), AL_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-file.npy"));
}

static void test_numbers(void **state) {
    (void)state;
    al_array a;
    al_error err = {0};
    const char *t = "1, 2 3\n4 5e-1 -6\n\n";
    assert_int_equal(al_parse_numbers(t, strlen(t), "in", &a, &err), 0);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    double want[6] = {1, 2, 3, 4, 0.5, -6};
    assert_memory_equal(a.data, want, sizeof want);
    al_array_free(&a);
    t = "0.1 0.2";
    assert_int_equal(al_parse_numbers(t, strlen(t), "in", &a, &err), 0);
    assert_int_equal(a.ndim, 1);
    al_array_free(&a);
    const char *bad[] = {"1 2\n3", "1 nan 2", "inf", "1 x", "", "   \n ", "1e999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = al_parse_numbers(bad[i], strlen(bad[i]), "in", &a, &err);
        if (rc == 0) fail_msg("'%s' parsed", bad[i]);
        assert_non_null(strstr(err.msg, "in"));
    }
    /* refused, with the code and the words of the message (line and field named) */
    static const struct {
        const char *text;
        al_code code;
        const char *msg;
    } cases[] = {
        {"0x10 1", AL_E_FORMAT, "in: line 1, field 1: '0x10' is hexadecimal"},
        {"1 -0X1p4", AL_E_FORMAT, "line 1, field 2: '-0X1p4' is hexadecimal"},
        {"1\n2 Infinity", AL_E_RANGE, "line 2, field 2: Infinity is not finite"},
        {"-inf", AL_E_RANGE, "line 1, field 1: -inf is not finite"},
        {"NaN(123) 1", AL_E_RANGE, "line 1, field 1: NaN(123) is not finite"},
        {"1,,2", AL_E_FORMAT, "line 1, field 2: empty field (two commas in a row)"},
        {",1,2", AL_E_FORMAT, "line 1, field 1: empty field (the line starts with a comma)"},
        {"1 2\n3,4,", AL_E_FORMAT, "line 2, field 3: empty field (the line ends with a comma)"},
        {"1 , , 2", AL_E_FORMAT, "line 1, field 2: empty field (two commas in a row)"},
        {"1 2e", AL_E_FORMAT, "line 1, field 2: '2e' is not a number"},
        {"1 .", AL_E_FORMAT, "'.' is not a number"},
        {"1 +-2", AL_E_FORMAT, "'+-2' is not a number"},
        {"1 1e+", AL_E_FORMAT, "'1e+' is not a number"},
        {"\x7f"
         "ELF",
         AL_E_FORMAT, "line 1, field 1: '\\x7fELF' is not a number"},
        {"-1e309", AL_E_RANGE, "line 1, field 1: -1e309 is beyond the double range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = al_parse_numbers(cases[i].text, strlen(cases[i].text), "in", &a, &err);
        if (rc != (int)cases[i].code || !strstr(err.msg, cases[i].msg))
            fail_msg("'%s': rc %d, '%s' (wanted %d, '%s')", cases[i].text, rc, err.msg,
                     cases[i].code, cases[i].msg);
        assert_null(a.data);
    }
    /* a NUL inside a value is not a number (the value does not end at it) */
    memset(&err, 0, sizeof err);
    assert_int_equal(al_parse_numbers("1 2\0003", 5, "in", &a, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "field 2: '2\\x003' is not a number"));
    /* accepted: every decimal form, commas with spaces, long digit strings (1 + 1e-65 rounds
     * to 1), underflow to 0, CRLF line ends */
    t = "+1, .5 ,5. -2.5e+2\r\n1E-2,-0 "
        "1.00000000000000000000000000000000000000000000000000000000000000001 1e-400\r\n";
    assert_int_equal(al_parse_numbers(t, strlen(t), "in", &a, &err), 0);
    assert_int_equal(a.ndim, 2);
    double want2[8] = {1, 0.5, 5, -250, 0.01, -0.0, 1, 0};
    assert_memory_equal(a.data, want2, sizeof want2);
    al_array_free(&a);
    /* a value of 1024 characters is refused by name, 1023 are read */
    char *big = malloc(1100);
    memset(big, '0', 1024);
    big[0] = '1';
    big[1] = '.';
    assert_int_equal(al_parse_numbers(big, 1023, "in", &a, &err), 0);
    assert_true(((double *)a.data)[0] == 1.0);
    al_array_free(&a);
    assert_int_equal(al_parse_numbers(big, 1024, "in", &a, &err), AL_E_FORMAT);
    assert_non_null(strstr(err.msg, "line 1, field 1: a value longer than 1023 characters"));
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),      cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_every_truncation), cmocka_unit_test(test_write_read_roundtrip),
        cmocka_unit_test(test_write_errors),     cmocka_unit_test(test_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
