/* test_attn_variant.c: the attention variants (src/model/attn_variant.c) against brute force:
 * the kept set by a full sort of (-z_j, j) (the METHOD tie rule by construction), softmax in
 * double, sparsemax by its sorted closed form, and al__attention with a variant against a
 * double straight loop over heads, rows and keys. Logits drawn from a few integers make ties
 * at the K-th logit the common case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* ---- brute force ------------------------------------------------------------------------------
 */

typedef struct {
    double z;
    int j;
} zj;

static int cmp_desc(const void *a, const void *b) {
    const zj *x = a, *y = b;
    if (x->z != y->z) return x->z > y->z ? -1 : 1;
    return x->j - y->j; /* ties: the lower index first */
}

/* kept[n] = 1 for the k largest of z (ties toward the lower index), by a full sort */
static void brute_kept(const float *z, int n, int k, int *kept) {
    zj *s = malloc((size_t)n * sizeof *s);
    assert_non_null(s);
    for (int j = 0; j < n; j++) s[j].z = z[j], s[j].j = j, kept[j] = 0;
    qsort(s, (size_t)n, sizeof *s, cmp_desc);
    for (int i = 0; i < k; i++) kept[s[i].j] = 1;
    free(s);
}

/* p[n] = softmax over the kept entries (double), 0 elsewhere */
static void brute_softmax(const float *z, const int *kept, int n, double *p) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < n; j++)
        if (kept[j] && z[j] > mx) mx = z[j];
    for (int j = 0; j < n; j++) s += p[j] = kept[j] ? exp(z[j] - mx) : 0.0;
    for (int j = 0; j < n; j++) p[j] /= s;
}

/* p[n] = sparsemax over the kept entries: tau from the sorted kept values (Martins and Astudillo
 * 2016: the largest r with 1 + r z_(r) > sum_{i <= r} z_(i)) */
static void brute_sparsemax(const float *z, const int *kept, int n, double *p) {
    double *s = malloc((size_t)n * sizeof *s);
    assert_non_null(s);
    int m = 0;
    for (int j = 0; j < n; j++)
        if (kept[j]) s[m++] = z[j];
    for (int a = 0; a < m; a++) /* insertion sort, descending */
        for (int b = a; b > 0 && s[b] > s[b - 1]; b--) {
            double t = s[b];
            s[b] = s[b - 1], s[b - 1] = t;
        }
    double cum = 0, tau = 0;
    for (int r = 1; r <= m; r++) {
        cum += s[r - 1];
        if (1 + r * s[r - 1] > cum) tau = (cum - 1) / r;
    }
    for (int j = 0; j < n; j++) p[j] = kept[j] && z[j] > tau ? z[j] - tau : 0.0;
    free(s);
}

static void check_row(const al_attn_variant *v, const float *z, int n, int L) {
    float *w = malloc((size_t)n * sizeof *w), *scr = malloc(AL__VSCR_PER_KEY * (size_t)n * 4);
    int *kept = malloc((size_t)n * sizeof *kept);
    double *p = malloc((size_t)n * sizeof *p);
    assert_true(w && scr && kept && p);
    al__attn_variant_row(v, w, z, n, L, (float *)scr);
    int k = al_attn_kept(v, n, L);
    brute_kept(z, n, k, kept);
    if (v->norm.kind == AL_NORM_SPARSEMAX)
        brute_sparsemax(z, kept, n, p);
    else
        brute_softmax(z, kept, n, p);
    for (int j = 0; j < n; j++) {
        if (!kept[j] && w[j] != 0.0f)
            fail_msg("n %d k %d: key %d not kept but w %g", n, k, j, w[j]);
        if (fabs(w[j] - p[j]) > 2e-6)
            fail_msg("n %d k %d key %d: w %.9g, want %.9g", n, k, j, w[j], p[j]);
    }
    free(w), free(scr), free(kept), free(p);
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void test_kept_counts(void **state) {
    (void)state;
    al_attn_variant v = {.rule = AL_ATTN_TOPK, .param = 5};
    assert_int_equal(al_attn_kept(&v, 3, 100), 3);
    assert_int_equal(al_attn_kept(&v, 9, 100), 5);
    v.rule = AL_ATTN_TOPK_FRAC, v.param = 0.25; /* ceil(0.25 * 64) = 16 exactly, not 17 */
    assert_int_equal(al_attn_kept(&v, 64, 64), 16);
    assert_int_equal(al_attn_kept(&v, 10, 64), 10);
    v.param = 0.1; /* 0.1 * 1000 = 100.00000000000001 in double: still 100 */
    assert_int_equal(al_attn_kept(&v, 1000, 1000), 100);
    v.rule = AL_ATTN_TOPK_SQRT, v.param = 2; /* ceil(2 sqrt 50) = ceil(14.14) = 15 */
    assert_int_equal(al_attn_kept(&v, 50, 1000), 15);
    assert_int_equal(al_attn_kept(&v, 100, 1000), 20);
    v.rule = AL_ATTN_TOPK_LOG, v.param = 1; /* ln 1 = 0: at least one key */
    assert_int_equal(al_attn_kept(&v, 1, 10), 1);
    assert_int_equal(al_attn_kept(&v, 100, 100), 5); /* ceil(4.605) */
    v.rule = AL_ATTN_DENSE;
    assert_int_equal(al_attn_kept(&v, 77, 100), 77);
}

static void test_parse(void **state) {
    (void)state;
    al_attn_variant v = {0};
    al_error err = {0};
    assert_int_equal(al_attn_rule_parse("topk-sqrt:1.5", &v, &err), 0);
    assert_int_equal(v.rule, AL_ATTN_TOPK_SQRT);
    assert_true(v.param == 1.5);
    const char *bad[] = {"topk",        "topk:",         "topk:0",      "topk:2.5",
                         "topk-frac:0", "topk-frac:1.5", "topk-log:-1", "topk-sqrt:nan",
                         "top:3",       "dense:1",       "topk:3x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_not_equal(al_attn_rule_parse(bad[i], &v, &err), 0);
    al_norm nm;
    assert_int_equal(al_attn_norm_parse("entmax:1.3", &nm, &err), 0);
    assert_true(nm.kind == AL_NORM_ENTMAX && nm.alpha == 1.3);
    assert_int_equal(al_attn_norm_parse("ssmax", &nm, &err), 0);
    assert_true(nm.kind == AL_NORM_SSMAX && nm.ssmax_s == 0.43);
    const char *badn[] = {"entmax:1", "ssmax:0", "sparsemax:2", "sa-softmax", "soft", "entmax:"};
    for (size_t i = 0; i < sizeof badn / sizeof badn[0]; i++)
        assert_int_not_equal(al_attn_norm_parse(badn[i], &nm, &err), 0);
    char buf[64];
    al_attn_rule_name(&(al_attn_variant){.rule = AL_ATTN_TOPK_FRAC, .param = 0.0625}, buf,
                      sizeof buf);
    assert_string_equal(buf, "topk-frac:0.0625");
}

/* rows of few distinct values (ties everywhere), of random values, of one value */
static void test_rows_vs_brute_force(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 16);
    const al_norm kinds[2] = {al_norm_default(AL_NORM_SOFTMAX), al_norm_default(AL_NORM_SPARSEMAX)};
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + (int)(al__rng_next(&r) % 300);
        float *z = malloc((size_t)n * sizeof *z);
        assert_non_null(z);
        int mode = trial % 3;
        for (int j = 0; j < n; j++)
            z[j] = mode == 0   ? (float)(al__rng_next(&r) % 4)
                   : mode == 1 ? (float)(3 * al__rng_normal(&r))
                               : 1.25f;
        al_attn_variant v = {.norm = kinds[trial % 2]};
        static const al_attn_rule rules[] = {AL_ATTN_TOPK, AL_ATTN_TOPK_FRAC, AL_ATTN_TOPK_SQRT,
                                             AL_ATTN_TOPK_LOG};
        v.rule = rules[trial % 4];
        v.param = v.rule == AL_ATTN_TOPK        ? 1 + (double)(al__rng_next(&r) % 40)
                  : v.rule == AL_ATTN_TOPK_FRAC ? 0.01 + 0.99 * al__rng_uniform(&r)
                                                : 0.2 + 3 * al__rng_uniform(&r);
        check_row(&v, z, n, n + (int)(al__rng_next(&r) % 50));
        free(z);
    }
}

/* all equal: the first K keys, each 1/K exactly; K = n with softmax is the dense routine */
static void test_ties_and_identity(void **state) {
    (void)state;
    float z[40], w[40], d[40], scr[AL__VSCR_PER_KEY * 40];
    for (int j = 0; j < 40; j++) z[j] = -0.5f;
    al_attn_variant v = {
        .rule = AL_ATTN_TOPK, .param = 7, .norm = al_norm_default(AL_NORM_SOFTMAX)};
    al__attn_variant_row(&v, w, z, 40, 40, scr);
    for (int j = 0; j < 40; j++) assert_true(w[j] == (j < 7 ? (float)(1.0 / 7) : 0.0f));
    for (int j = 0; j < 40; j++) z[j] = (float)sin(j * 0.7);
    v.param = 40;
    al__attn_variant_row(&v, w, z, 40, 40, scr);
    al__softmax_row(d, z, 40);
    assert_memory_equal(w, d, sizeof w);
    /* in place (w == z), and a NaN logit makes the row NaN */
    memcpy(w, z, sizeof z);
    v.param = 3;
    al__attn_variant_row(&v, w, w, 40, 40, scr);
    al__attn_variant_row(&v, d, z, 40, 40, scr);
    assert_memory_equal(w, d, sizeof w);
    z[5] = NAN;
    al__attn_variant_row(&v, w, z, 40, 40, scr);
    for (int j = 0; j < 40; j++) assert_true(isnan(w[j]));
}

/* al__attention with a variant on two of three heads of layer 1: GQA, causal, T not a multiple
 * of the block; the other heads and layer 0 are the dense softmax. */
static void test_attention_with_variant(void **state) {
    (void)state;
    const int T = 150, H = 4, G = 2, D = 16;
    al__rng r;
    al__rng_seed(&r, 7);
    float *q = malloc(sizeof(float) * T * H * D), *k = malloc(sizeof(float) * T * G * D);
    float *vv = malloc(sizeof(float) * T * G * D), *out = malloc(sizeof(float) * T * H * D);
    assert_true(q && k && vv && out);
    for (int i = 0; i < T * H * D; i++) q[i] = (float)al__rng_normal(&r);
    for (int i = 0; i < T * G * D; i++) k[i] = (float)al__rng_normal(&r);
    for (int i = 0; i < T * G * D; i++) vv[i] = (float)al__rng_normal(&r);
    uint8_t heads[4] = {1, 0, 1, 0}, layers[2] = {0, 1};
    al_attn_variant var = {.rule = AL_ATTN_TOPK_SQRT,
                           .param = 1.5,
                           .norm = al_norm_default(AL_NORM_SOFTMAX),
                           .layers = layers,
                           .heads = heads};
    for (int layer = 0; layer < 2; layer++) {
        al__attn a = {.layer = layer,
                      .T = T,
                      .n_head = H,
                      .n_kv_head = G,
                      .d_head = D,
                      .d_model = H * D,
                      .causal = 1,
                      .q = q,
                      .q_stride = (size_t)H * D,
                      .k = k,
                      .k_stride = (size_t)G * D,
                      .v = vv,
                      .v_stride = (size_t)G * D,
                      .out = out,
                      .mod = &var};
        assert_int_equal(al__attention(&a, NULL), 0);
        float z[150];
        int kept[150];
        double p[150];
        for (int h = 0; h < H; h++) {
            int g = h / (H / G), mod = layer == 1 && heads[h];
            for (int t = 0; t < T; t++) {
                int n = t + 1;
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += (double)q[t * H * D + h * D + d] * k[j * G * D + g * D + d];
                    z[j] = (float)(s / sqrt((double)D));
                }
                int kk = mod ? al_attn_kept(&var, n, T) : n;
                brute_kept(z, n, kk, kept);
                brute_softmax(z, kept, n, p);
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += p[j] * vv[j * G * D + g * D + d];
                    float got = out[t * H * D + h * D + d];
                    if (fabs(got - o) > 1e-4)
                        fail_msg("layer %d head %d row %d dim %d: %.7g vs %.7g", layer, h, t, d,
                                 got, o);
                }
            }
        }
    }
    free(q), free(k), free(vv), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_counts),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_rows_vs_brute_force),
        cmocka_unit_test(test_ties_and_identity),
        cmocka_unit_test(test_attention_with_variant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
