/* test_metrics.c: properties and closed forms of the metrics (src/metrics.c) and of Algorithm 5
 * (src/sensitivity.c):
 *  - dtilde <= dmax on 100,000 seeded random rows with non-negative weights (every N < n);
 *  - the Monte-Carlo E lies above the analytic E within 4 standard errors (Jensen);
 *  - closed forms: equal weights on equal vectors (dtilde = dmax = E = (n-N)(N-1)/n |x|, and
 *    N_s = 0), r = 0, two equal logits (spectral norm 1/(2T)), uniform logits (1/(nT)),
 *    sparsemax on a two-element support (1/T);
 *  - every softmax spectral norm <= 1/(2T), the finite difference <= the spectral norm;
 *  - edge cases: n = 1, N >= n, NaN/Inf (the error names the position), empty input, extreme
 *    temperatures and logits of +-1e30;
 *  - heads computed in parallel threads equal the same heads computed one by one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static al_metrics_opts opts_all(const int *Ns, int nN) {
    al_metrics_opts o = {.top_n = Ns, .n_top = nN, .distance = 1, .separability = 1};
    return o;
}

/* a random row of n non-negative weights of one of several kinds */
static void random_weights(al__rng *r, double *a, int n) {
    int kind = (int)(al__rng_uniform(r) * 5);
    double s = 0, scale = 0.1 + 6 * al__rng_uniform(r);
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0:
            a[i] = exp(scale * al__rng_normal(r));
            break; /* softmax-like */
        case 1:
            a[i] = al__rng_uniform(r);
            break; /* uniform */
        case 2:
            a[i] = fmax(0.0, al__rng_normal(r));
            break; /* sparse zeros */
        case 3:
            a[i] = (double)(int)(al__rng_uniform(r) * 3);
            break; /* ties, zeros */
        default:
            a[i] = 5 * al__rng_uniform(r) * al__rng_uniform(r);
            break; /* sum != 1 */
        }
        s += a[i];
    }
    if (kind <= 2 && s > 0)
        for (int i = 0; i < n; i++) a[i] /= s;
}

static void random_vectors(al__rng *r, double *x, int n, int d) {
    double scale = exp(2 * al__rng_normal(r));
    for (int i = 0; i < n * d; i++) x[i] = scale * al__rng_normal(r);
    if (n > 2 && al__rng_uniform(r) < 0.2) /* a duplicated vector */
        memcpy(x + d, x, sizeof(double) * (size_t)d);
}

/* ---- dtilde <= dmax ---------------------------------------------------------------------- */

static void test_dtilde_le_dmax(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 20250829);
    int Ns[24];
    for (int k = 0; k < 24; k++) Ns[k] = k + 1;
    double a[25], x[25 * 6];
    al_topn_stats st[24];
    al_error err = {0};
    long checked = 0, instances = 0;
    for (int it = 0; it < 100000; it++) {
        int n = 2 + (int)(al__rng_uniform(&r) * 24), d = 1 + (int)(al__rng_uniform(&r) * 6);
        random_weights(&r, a, n);
        random_vectors(&r, x, n, d);
        al_metrics_opts o = opts_all(Ns, n - 1);
        o.separability = 0;
        assert_int_equal(al_row_metrics(a, x, n, d, &o, st, &err), 0);
        for (int k = 0; k < n - 1; k++) {
            assert_int_equal(st[k].rows, 1);
            double tol = 1e-12 * (fabs(st[k].dmax) + fabs(st[k].dtilde)) + 1e-300;
            if (!(st[k].dtilde <= st[k].dmax + tol))
                fail_msg("instance %d (n %d, d %d, N %d): dtilde %.17g > dmax %.17g", it, n, d,
                         k + 1, st[k].dtilde, st[k].dmax);
            checked++;
        }
        instances++;
    }
    assert_true(instances >= 100000);
    printf("dtilde <= dmax: %ld instances, %ld (row, N) pairs\n", instances, checked);
}

/* ---- Monte-Carlo E above the analytic E -------------------------------------------------- */

static void test_mc_above_E(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 77);
    int Ns[] = {1, 2, 3, 5, 8};
    double a[20], x[20 * 4];
    al_topn_stats st[5];
    al_error err = {0};
    int checked = 0;
    for (int it = 0; it < 300; it++) {
        int n = 10 + (int)(al__rng_uniform(&r) * 10), d = 1 + (int)(al__rng_uniform(&r) * 4);
        random_weights(&r, a, n);
        random_vectors(&r, x, n, d);
        al_metrics_opts o = opts_all(Ns, 5);
        o.separability = 0;
        o.mc_samples = 2000; /* enough that the mean is near-normal even for N = 1 */
        o.mc_seed = (uint64_t)it;
        assert_int_equal(al_row_metrics(a, x, n, d, &o, st, &err), 0);
        for (int k = 0; k < 5; k++) {
            assert_true(isfinite(st[k].E_mc_se) && st[k].E_mc_se >= 0);
            if (!(st[k].E_mc >= st[k].E - 4 * st[k].E_mc_se - 1e-12 * fabs(st[k].E)))
                fail_msg("instance %d N %d: E_mc %.17g < E %.17g - 4 se %.3g", it, Ns[k],
                         st[k].E_mc, st[k].E, st[k].E_mc_se);
            checked++;
        }
    }
    printf("E_mc >= E - 4 s.e.: %d checks\n", checked);
}

/* ---- closed forms ------------------------------------------------------------------------- */

static void test_equal_weights_equal_vectors(void **state) {
    (void)state;
    enum { n = 9, d = 3 };
    double a[n], x[n * d], xv[d] = {1.0, -2.0, 2.0}; /* |x| = 3 */
    for (int i = 0; i < n; i++) {
        a[i] = 1.0 / n;
        memcpy(x + i * d, xv, sizeof xv);
    }
    int Ns[] = {2, 4, 8};
    al_topn_stats st[3];
    al_metrics_opts o = opts_all(Ns, 3);
    assert_int_equal(al_row_metrics(a, x, n, d, &o, st, NULL), 0);
    for (int k = 0; k < 3; k++) {
        double N = Ns[k], want = (n - N) * (N - 1) / n * 3.0;
        assert_float_equal(st[k].dtilde, want, 1e-12);
        assert_float_equal(st[k].dmax, want, 1e-12); /* tight: d1 = 0 */
        assert_float_equal(st[k].E, want, 1e-12);
        assert_float_equal(st[k].ns_ratio, 0.0, 0); /* every distance equals r: strict < fails */
    }
}

static void test_separability_r_zero_and_N1(void **state) {
    (void)state;
    /* N = 1 with tied weights on identical directions: s = a_1 u_1 = a_0 u_0, r = 0 */
    double a[3] = {0.4, 0.4, 0.2}, x[6] = {2, 0, 1, 0, 0, 1};
    int Ns[] = {1};
    al_topn_stats st;
    al_metrics_opts o = opts_all(Ns, 1);
    assert_int_equal(al_row_metrics(a, x, 3, 2, &o, &st, NULL), 0);
    assert_true(st.ns_ratio == 0 && st.ns_lower == 0 && st.ns_upper == 0);
    /* N = 1 with r > 0: N_s = 1 and both bounds 1 (every xi_i = 0) */
    double b[3] = {0.5, 0.3, 0.2};
    assert_int_equal(al_row_metrics(b, x, 3, 2, &o, &st, NULL), 0);
    assert_true(st.ns_ratio == 1 && st.ns_lower == 1 && st.ns_upper == 1);
}

static void test_row_edges(void **state) {
    (void)state;
    int Ns[] = {1, 2, 5};
    al_topn_stats st[3];
    al_metrics_opts o = opts_all(Ns, 3);
    al_error err = {0};
    double one = 1, x1[2] = {1, 2};
    assert_int_equal(al_row_metrics(&one, x1, 1, 2, &o, st, &err), 0); /* n = 1: no N < n */
    for (int k = 0; k < 3; k++) assert_true(st[k].rows == 0 && isnan(st[k].dtilde));
    double a[3] = {0.2, 0.5, 0.3}, x[6] = {1, 0, 0, 1, 1, 1};
    assert_int_equal(al_row_metrics(a, x, 3, 2, &o, st, &err), 0); /* N = n - 1 = 2 works */
    assert_true(st[0].rows == 1 && st[1].rows == 1 && st[2].rows == 0);
    /* N = n - 1: one non-selected index (0, the smallest weight) */
    double s0 = 0.5 * 0 + 0.3 * 1, s1 = 0.5 * 1 + 0.3 * 1; /* s = 0.5 x_1 + 0.3 x_2 */
    assert_float_equal(st[1].dtilde, hypot(0.2 - s0, 0 - s1), 1e-14);
    a[1] = NAN;
    assert_int_not_equal(al_row_metrics(a, x, 3, 2, &o, st, &err), 0);
    assert_non_null(strstr(err.msg, "position 1"));
    a[1] = 0.5;
    x[5] = INFINITY;
    assert_int_not_equal(al_row_metrics(a, x, 3, 2, &o, st, &err), 0);
    assert_non_null(strstr(err.msg, "row 2, column 1"));
    assert_int_not_equal(al_row_metrics(a, x, 0, 2, &o, st, &err), 0);
    assert_non_null(strstr(err.msg, "empty"));
    int bad[] = {0};
    x[5] = 1;
    al_metrics_opts ob = opts_all(bad, 1);
    assert_int_not_equal(al_row_metrics(a, x, 3, 2, &ob, st, &err), 0);
}

/* ---- heads: thread safety ----------------------------------------------------------------- */

static void test_heads_parallel_equal_sequential(void **state) {
    (void)state;
    enum { H = 4, L = 96, d = 8 };
    double *w = malloc(sizeof(double) * H * L * L), *x = malloc(sizeof(double) * H * L * d);
    al__rng r;
    al__rng_seed(&r, 5);
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < L; t++) {
            double s = 0, *row = w + ((size_t)h * L + t) * L;
            for (int j = 0; j < L; j++) s += row[j] = j <= t ? exp(2 * al__rng_normal(&r)) : 0;
            for (int j = 0; j <= t; j++) row[j] /= s;
        }
        for (int i = 0; i < L * d; i++) x[(size_t)h * L * d + i] = al__rng_normal(&r);
    }
    int Ns[] = {1, 3, 16, 64};
    al_metrics_opts o = opts_all(Ns, 4);
    o.causal = 1;
    al_topn_stats seq[H][4], par[H][4];
    memset(seq, 0, sizeof seq); /* padding included, for the byte comparison */
    memset(par, 0, sizeof par);
    for (int h = 0; h < H; h++)
        assert_int_equal(al_head_metrics(w + (size_t)h * L * L, x + (size_t)h * L * d, L, d, &o,
                                         seq[h], NULL, NULL, NULL),
                         0);
    int fails = 0;
#pragma omp parallel for num_threads(2) reduction(+ : fails)
    for (int h = 0; h < H; h++)
        fails += al_head_metrics(w + (size_t)h * L * L, x + (size_t)h * L * d, L, d, &o, par[h],
                                 NULL, NULL, NULL) != 0;
    assert_int_equal(fails, 0);
    assert_memory_equal(seq, par, sizeof seq);
    for (int k = 0; k < 4; k++) assert_int_equal(seq[0][k].rows, L - Ns[k]);
    free(w);
    free(x);
}

/* ---- Algorithm 5 -------------------------------------------------------------------------- */

static al_norm softmax_norm(void) {
    al_norm nm = {.kind = AL_NORM_SOFTMAX, .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
    return nm;
}

static void test_sensitivity_two_equal_logits(void **state) {
    (void)state;
    /* L = 2 causal: only row 1 (n = 2) enters; z = (c, c) gives p = (1/2, 1/2) */
    double z[4] = {0.7, -INFINITY, 0.3, 0.3};
    double T[3] = {1e-3, 0.5, 10}, eps[1] = {1e-7}, fd[3], spec[3];
    al_norm nm = softmax_norm();
    nm.temperature = 123; /* ignored */
    assert_int_equal(al_head_sensitivity(z, 2, 1, &nm, T, 3, eps, 1, 9, 2, 3, fd, spec, NULL), 0);
    double v[2];
    assert_int_equal(al_sensitivity_direction(9, 2, 3, 1, 2, v), 0);
    assert_float_equal(v[0] * v[0] + v[1] * v[1], 1.0, 1e-15);
    for (int a = 0; a < 3; a++) {
        assert_float_equal(spec[a] * 2 * T[a], 1.0, 1e-12); /* exactly 1/(2T) */
        /* J v = (v0 - v1)/(4T) (1, -1): |J v| = |v0 - v1| / (2 sqrt 2 T) */
        double want = fabs(v[0] - v[1]) / (2 * sqrt(2.0) * T[a]);
        if (T[a] > 0.1) assert_float_equal(fd[a] / want, 1.0, 1e-5);
    }
}

static void test_sensitivity_uniform_and_bounds(void **state) {
    (void)state;
    enum { L = 40 };
    double *z = malloc(sizeof(double) * L * L);
    for (int i = 0; i < L * L; i++) z[i] = 2.5; /* every row uniform */
    double T[2] = {0.25, 4}, eps[2] = {1e-6, 1e-1}, fd[4], spec[2];
    al_norm nm = softmax_norm();
    assert_int_equal(al_head_sensitivity(z, L, 0, &nm, T, 2, eps, 2, 1, 0, 0, fd, spec, NULL), 0);
    for (int a = 0; a < 2; a++) assert_float_equal(spec[a] * L * T[a], 1.0, 1e-12); /* 1/(nT) */
    /* random logits: every norm <= 1/(2T), finite differences <= the norm (up to O(eps)) */
    al__rng r;
    al__rng_seed(&r, 3);
    for (int i = 0; i < L * L; i++) z[i] = 3 * al__rng_normal(&r);
    double Ts[5] = {1e-3, 1e-2, 0.1, 1, 10}, fd5[10], spec5[5];
    assert_int_equal(al_head_sensitivity(z, L, 1, &nm, Ts, 5, eps, 2, 1, 0, 0, fd5, spec5, NULL),
                     0);
    for (int a = 0; a < 5; a++) {
        assert_true(spec5[a] <= 1 / (2 * Ts[a]) * (1 + 1e-12));
        assert_true(fd5[a * 2] <= spec5[a] * (1 + 1e-3) + 1e-9);
    }
    free(z);
}

static void test_sensitivity_other_normalizer_and_edges(void **state) {
    (void)state;
    /* sparsemax on (1, 1, -10): support of two, J = (diag(g) - g g^T / 2)/T, norm 1/T */
    double z[9] = {1, 1, -10, 1, 1, -10, 1, 1, -10};
    double T[2] = {1, 0.5}, eps[1] = {1e-4}, fd[2], spec[2];
    al_norm nm = softmax_norm();
    nm.kind = AL_NORM_SPARSEMAX;
    assert_int_equal(al_head_sensitivity(z, 3, 0, &nm, T, 2, eps, 1, 1, 0, 0, fd, spec, NULL), 0);
    assert_float_equal(spec[0], 1.0, 1e-12);
    assert_float_equal(spec[1], 2.0, 1e-12);
    /* extreme temperatures and logits: finite, within the bound */
    double zz[9] = {1e30, -1e30, 0, -1e30, 1e30, 5, 3, 3, -1e30};
    double Te[2] = {1e-6, 1e6}, fde[2], spe[2];
    nm.kind = AL_NORM_SOFTMAX;
    assert_int_equal(al_head_sensitivity(zz, 3, 0, &nm, Te, 2, eps, 1, 1, 0, 0, fde, spe, NULL), 0);
    for (int a = 0; a < 2; a++) {
        assert_true(isfinite(fde[a]) && isfinite(spe[a]));
        assert_true(spe[a] <= 1 / (2 * Te[a]) * (1 + 1e-12));
    }
    /* errors */
    al_error err = {0};
    zz[5] = NAN;
    assert_int_not_equal(al_head_sensitivity(zz, 3, 0, &nm, Te, 2, eps, 1, 1, 0, 0, fde, spe, &err),
                         0);
    assert_non_null(strstr(err.msg, "row 1, column 2"));
    double Tbad[1] = {0};
    assert_int_not_equal(
        al_head_sensitivity(z, 3, 0, &nm, Tbad, 1, eps, 1, 1, 0, 0, fde, spe, &err), 0);
    /* L = 1 causal: no row with n >= 2 -> NaN */
    double z1[1] = {0};
    assert_int_equal(al_head_sensitivity(z1, 1, 1, &nm, T, 1, eps, 1, 1, 0, 0, fd, spec, NULL), 0);
    assert_true(isnan(spec[0]) && isnan(fd[0]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtilde_le_dmax),
        cmocka_unit_test(test_mc_above_E),
        cmocka_unit_test(test_equal_weights_equal_vectors),
        cmocka_unit_test(test_separability_r_zero_and_N1),
        cmocka_unit_test(test_row_edges),
        cmocka_unit_test(test_heads_parallel_equal_sequential),
        cmocka_unit_test(test_sensitivity_two_equal_logits),
        cmocka_unit_test(test_sensitivity_uniform_and_bounds),
        cmocka_unit_test(test_sensitivity_other_normalizer_and_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
