/* test_explorer.c: the escaping of strings from model files and corpora into HTML and into the
 * explorer's script-embedded JSON (src/base/textsafe.c), and the explorer section itself
 * (src/report/explorer.c): hostile token strings cannot open or close an element, the data
 * parse back (cJSON) to the strings and numbers given. The explorer's behaviour in a browser is
 * tests/python/test_explorer_browser.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "textsafe.h"
#include "explorer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    return b;
}

static int count_ci(const char *hay, const char *needle) {
    int n = 0;
    size_t k = strlen(needle);
    for (const char *p = hay; *p; p++) n += !strncasecmp(p, needle, k);
    return n;
}

/* Runs one writer into a temp file and returns what it wrote. */
static char *written(int (*fn)(al__afile *, const char *, al_error *), const char *in) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/attnlim_test_explorer_%d.txt", (int)getpid());
    al__afile f;
    al_error err = {0};
    assert_int_equal(al__afile_open(&f, path, &err), 0);
    assert_int_equal(fn(&f, in, &err), 0);
    assert_int_equal(al__afile_commit(&f, &err), 0);
    char *b = slurp(path);
    unlink(path);
    return b;
}
static int json_whole(al__afile *f, const char *s, al_error *err) {
    return al__json_string_html(f, s, strlen(s), err);
}

static int utf8_len(const char *s, size_t n) { /* the decoder: 0 for an invalid sequence */
    uint32_t cp;
    size_t len = al__utf8_next((const unsigned char *)s, n, &cp);
    return cp == AL__BAD_UTF8 ? 0 : (int)len;
}

static void test_utf8_len(void **state) {
    (void)state;
    assert_int_equal(utf8_len("a", 1), 1);
    assert_int_equal(utf8_len("\xC3\xA9", 2), 2);
    assert_int_equal(utf8_len("\xE2\x82\xAC", 3), 3);
    assert_int_equal(utf8_len("\xF0\x9F\x98\x80", 4), 4);
    assert_int_equal(utf8_len("\xC3", 1), 0);         /* cut */
    assert_int_equal(utf8_len("\xC0\xAF", 2), 0);     /* overlong */
    assert_int_equal(utf8_len("\xE0\x80\xAF", 3), 0); /* overlong */
    assert_int_equal(utf8_len("\xED\xA0\x80", 3), 0); /* surrogate */
    assert_int_equal(utf8_len("\xF4\x90\x80\x80", 4), 0);
    assert_int_equal(utf8_len("\x80", 1), 0);
}

static void test_html_escape(void **state) {
    (void)state;
    char *b = written(al__html_escape, "<img src=x onerror=\"alert('1')\">&amp;\x01\xff\xC3\xA9\n");
    /* a control and an invalid byte each become U+FFFD (one escaper: textsafe.c) */
    assert_string_equal(b, "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;amp;"
                           "\xEF\xBF\xBD\xEF\xBF\xBD\xC3\xA9\n");
    free(b);
}

static void test_json_string(void **state) {
    (void)state;
    const char *in = "</script><!-- \"q\" \\ & \n\t\x7f \xE2\x80\xA8 \xC3\xA9";
    char *b = written(json_whole, in);
    assert_null(strchr(b, '<'));
    assert_null(strchr(b, '>'));
    assert_null(strchr(b, '&'));
    assert_null(strstr(b, "\xE2\x80\xA8"));
    cJSON *j = cJSON_Parse(b); /* an independent parser reads back the exact string */
    assert_non_null(j);
    assert_true(cJSON_IsString(j));
    assert_string_equal(j->valuestring, in);
    cJSON_Delete(j);
    free(b);
    b = written(json_whole, "a\xff"
                            "b\xC3");
    j = cJSON_Parse(b);
    assert_non_null(j);
    assert_string_equal(j->valuestring, "a\xEF\xBF\xBD"
                                        "b\xEF\xBF\xBD");
    cJSON_Delete(j);
    free(b);
}

static void test_head_flags(void **state) {
    (void)state;
    char f[64];
    assert_int_equal(al__head_flags(0.95, 0.5, 0.1, f, sizeof f), 1);
    assert_string_equal(f, "collapsed");
    assert_int_equal(al__head_flags(0.2, 0.05, 0.7, f, sizeof f), 2);
    assert_string_equal(f, "collapsed sink");
    assert_int_equal(al__head_flags(0.05, 0.99, NAN, f, sizeof f), 1);
    assert_string_equal(f, "vanishing");
    assert_int_equal(al__head_flags(0.9, 0.1, 0.5, f, sizeof f), 0); /* the thresholds: strict */
    assert_string_equal(f, "");
    assert_int_equal(al__head_flags(NAN, NAN, NAN, f, sizeof f), 0);
}

/* A page for 2 layers x 3 heads with hostile tokens: exactly the explorer's two scripts, and its
 * data parse back to what was given. */
static void test_page(void **state) {
    (void)state;
    enum { NL = 2, NHd = 3, H = NL * NHd, W = 3 };
    double m0[H], m1[H], cv[2 * H];
    for (int h = 0; h < H; h++) m0[h] = 0.1 * h, m1[h] = h == 4 ? NAN : 1.0 / (h + 1);
    for (int i = 0; i < 2 * H; i++) cv[i] = i;
    const char *tok[W] = {"</script><script>alert(1)</script>", " <b>bold</b> & \"q\"", "\xff\n"};
    const int ids[W] = {7, 8, 9};
    float w[H * W * W];
    for (int i = 0; i < H * W * W; i++) w[i] = (float)i / (H * W * W);
    const char *flags[H] = {"", "sink", "", "collapsed", "", "<i>x</i>"};
    const int xs[2] = {1, 4};
    al__explorer x = {.n_layer = NL,
                      .n_head = NHd,
                      .n_metrics = 2,
                      .metric_key = {"dtilde", "E <&>"},
                      .metric_label = {"dtilde per head", "E per head"},
                      .metric = {m0, m1},
                      .metric_map = {1, 0},
                      .flags = flags,
                      .flags_note = "note <b>",
                      .n_curves = 1,
                      .curve = {{.name = "N_s/N", .n = 2, .x = xs, .v = cv}},
                      .W = W,
                      .causal = 1,
                      .window_note = "window </p>",
                      .token = tok,
                      .token_id = ids,
                      .weights = w};
    char path[256];
    snprintf(path, sizeof path, "/tmp/attnlim_test_explorer_%d.html", (int)getpid());
    al_error err = {0};
    assert_int_equal(al__explorer_page(path, "t <x>", "intro & more", &x, &err), 0);
    char *b = slurp(path);
    unlink(path);
    assert_non_null(b);
    assert_int_equal(count_ci(b, "<script"), 2);
    assert_int_equal(count_ci(b, "</script"), 2);
    assert_int_equal(count_ci(b, "<b>"), 0);
    assert_int_equal(count_ci(b, "<i>"), 0);
    assert_non_null(strstr(b, "<title>t &lt;x&gt;</title>"));
    assert_non_null(strstr(b, "window &lt;/p&gt;"));
    const char *open = "<script type=\"application/json\" id=\"al-ex-data\">";
    char *d = strstr(b, open);
    assert_non_null(d);
    d += strlen(open);
    char *end = strstr(d, "</script>");
    assert_non_null(end);
    *end = 0;
    cJSON *j = cJSON_Parse(d);
    assert_non_null(j);
    assert_int_equal(cJSON_GetObjectItem(j, "layers")->valueint, NL);
    assert_int_equal(cJSON_GetObjectItem(j, "heads")->valueint, NHd);
    cJSON *ms = cJSON_GetObjectItem(j, "metrics");
    assert_int_equal(cJSON_GetArraySize(ms), 2);
    cJSON *m = cJSON_GetArrayItem(ms, 1);
    assert_string_equal(cJSON_GetObjectItem(m, "key")->valuestring, "E <&>");
    assert_int_equal(cJSON_GetObjectItem(m, "map")->valueint, 0);
    cJSON *v = cJSON_GetObjectItem(m, "v");
    for (int h = 0; h < H; h++) {
        cJSON *e = cJSON_GetArrayItem(v, h);
        if (h == 4)
            assert_true(cJSON_IsNull(e));
        else
            assert_true(fabs(e->valuedouble - m1[h]) <= 5e-6 * m1[h]);
    }
    cJSON *fl = cJSON_GetObjectItem(j, "flags");
    assert_string_equal(cJSON_GetArrayItem(fl, 5)->valuestring, "<i>x</i>");
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "curves"), 0);
    cJSON *cvh = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "v"), 2); /* head 2: [N=1, N=4] */
    assert_true(cJSON_GetArrayItem(cvh, 0)->valuedouble == 2);
    assert_true(cJSON_GetArrayItem(cvh, 1)->valuedouble == H + 2);
    cJSON *win = cJSON_GetObjectItem(j, "window");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(win, "causal")));
    cJSON *tk = cJSON_GetObjectItem(win, "tokens");
    assert_string_equal(cJSON_GetArrayItem(tk, 0)->valuestring, tok[0]);
    assert_string_equal(cJSON_GetArrayItem(tk, 1)->valuestring, tok[1]);
    assert_string_equal(cJSON_GetArrayItem(tk, 2)->valuestring, "\xEF\xBF\xBD\n");
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(win, "ids"), 2)->valueint, 9);
    cJSON *w5 = cJSON_GetArrayItem(cJSON_GetObjectItem(win, "w"), 5);
    assert_int_equal(cJSON_GetArraySize(w5), W * W);
    for (int i = 0; i < W * W; i++) {
        double want = w[5 * W * W + i];
        assert_true(fabs(cJSON_GetArrayItem(w5, i)->valuedouble - want) <= 5e-5 * want);
    }
    cJSON_Delete(j);
    free(b);
}

static void test_bad_shape(void **state) {
    (void)state;
    al__explorer x = {.n_layer = 0, .n_head = 3};
    al_error err = {0};
    char path[256];
    snprintf(path, sizeof path, "/tmp/attnlim_test_explorer_bad_%d.html", (int)getpid());
    assert_int_equal(al__explorer_page(path, "t", NULL, &x, &err), AL_E_INVALID);
    assert_int_equal(access(path, F_OK), -1); /* nothing half-written */
    assert_non_null(strstr(err.msg, "explorer"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_len),    cmocka_unit_test(test_html_escape),
        cmocka_unit_test(test_json_string), cmocka_unit_test(test_head_flags),
        cmocka_unit_test(test_page),        cmocka_unit_test(test_bad_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
