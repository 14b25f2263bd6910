/* test_stats.c: closed forms of the statistics (src/stats.c):
 *  - KS on fully separated samples: D = 1 and p = 2 / binom(m + n, n) (only the two extreme
 *    lattice paths leave the band), equal and unequal sizes; identical samples: D = 0, p = 1;
 *  - the one-sample KS distribution (al__kstwo_sf, al__smirnov_sf) where it has closed forms
 *    (derived in test_kstwo_closed_forms);
 *  - numpy's linear percentiles on small hand-computed cases, NaN for a bad p or n == 0;
 *    the slope of y = c x;
 *  - errors: empty input, NaN with its position, a non-increasing N grid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double binom(int n, int k) {
    double r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

static void test_ks_separated(void **state) {
    (void)state;
    int sizes[][2] = {{1, 1}, {5, 5}, {12, 12}, {3, 7}, {10, 4}, {30, 45}, {144, 144}};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int m = sizes[c][0], n = sizes[c][1];
        double *a = malloc(sizeof(double) * m), *b = malloc(sizeof(double) * n);
        for (int i = 0; i < m; i++) a[i] = i;
        for (int i = 0; i < n; i++) b[i] = 1000 + i;
        double D, p;
        assert_int_equal(al_ks_2samp(a, m, b, n, &D, &p, NULL), 0);
        assert_float_equal(D, 1.0, 0);
        double want = 2.0 / binom(m + n, n);
        if (want > 1) want = 1;
        assert_true(fabs(p - want) <= 1e-12 * want);
        assert_int_equal(al_ks_2samp(a, m, a, m, &D, &p, NULL), 0);
        assert_true(D == 0 && p == 1);
        free(a);
        free(b);
    }
}

static void test_ks_errors(void **state) {
    (void)state;
    double a[3] = {1, 2, 3}, b[2] = {1, NAN}, D, p;
    al_error err = {0};
    assert_int_not_equal(al_ks_2samp(a, 0, a, 3, &D, &p, &err), 0);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_not_equal(al_ks_2samp(a, 3, b, 2, &D, &p, &err), 0);
    assert_non_null(strstr(err.msg, "position 1"));
}

/* Pr(D_n >= x) and Pr(D_n^+ >= x) for n uniform values, D_n = sup |F_n - F|, by hand:
 *  - n = 1: D_1 = max(U, 1 - U), so Pr(D_1 >= x) = 1 for x <= 1/2, 2 (1 - x) above; and
 *    D_1^+ = 1 - U, Pr(D_1^+ >= x) = 1 - x.
 *  - n = 2, one-sided, x = 0.3: D_2^+ < x iff U_(1) > 1/2 - x = 0.2 and U_(2) > 1 - x = 0.7;
 *    the ordered pair has density 2 on u1 < u2, so Pr(D^+ < x) = 2 int_0.7^1 (u2 - 0.2) du2
 *    = 0.39 and Pr(D_2^+ >= 0.3) = 0.61.
 *  - lower end, 1/(2n) < x <= 1/n: D_n <= x iff every U_(i) lies in [i/n - x, (i-1)/n + x],
 *    n disjoint cells of width 2x - 1/n, so Pr(D_n <= x) = n! (2x - 1/n)^n; n = 3, x = 0.3:
 *    6 (0.6 - 1/3)^3 = 6 (4/15)^3 = 128/1125; for x <= 1/(2n), Pr(D_n >= x) = 1.
 *  - upper end, x >= 1 - 1/n: D_n >= x iff U_(1) >= x or U_(n) <= 1 - x (any other
 *    crossing needs a value beyond 1), disjoint as x > 1/2: Pr = 2 (1 - x)^n; n = 4, x = 0.8:
 *    2 (0.2)^4 = 0.0032.
 *  - n = 3, x = 0.4 (Durbin's matrix regime): D_3 <= x iff U_(1) in [0, 0.4], U_(2) in
 *    [4/15, 11/15], U_(3) in [0.6, 1]; integrating over u2 the lengths of u1 in [0, min(0.4,
 *    u2)] and u3 in [max(0.6, u2), 1] gives 4/225 + 4/125 + 4/225 = 15.2/225, times 3! =
 *    91.2/225; Pr(D_3 >= 0.4) = 133.8/225.
 *  - x >= 1/2: D^+ >= x and D^- >= x are disjoint, so Pr(D_n >= x) = 2 Pr(D_n^+ >= x). */
static void test_kstwo_closed_forms(void **state) {
    (void)state;
    for (double x = 0.05; x < 1; x += 0.05) {
        double want = x <= 0.5 ? 1.0 : 2 * (1 - x);
        assert_true(fabs(al__kstwo_sf(x, 1) - want) <= 1e-15);
        assert_true(fabs(al__smirnov_sf(1, x) - (1 - x)) <= 1e-15);
    }
    assert_true(fabs(al__smirnov_sf(2, 0.3) - 0.61) <= 1e-15);
    assert_true(fabs(al__kstwo_sf(0.3, 3) - (1 - 128.0 / 1125)) <= 1e-15);
    assert_true(al__kstwo_sf(0.16, 3) == 1.0 && al__kstwo_sf(1.0 / 6, 3) == 1.0);
    assert_true(fabs(al__kstwo_sf(0.8, 4) - 0.0032) <= 1e-16);
    assert_true(fabs(al__kstwo_sf(0.4, 3) - 133.8 / 225) <= 1e-14);
    assert_true(al__kstwo_sf(1.0, 5) == 0.0 && al__kstwo_sf(0.0, 5) == 1.0);
    for (int n = 2; n <= 400; n += 7)
        for (double x = 0.5; x < 0.99; x += 0.06) {
            double two = al__kstwo_sf(x, n), one = al__smirnov_sf(n, x);
            assert_true(fabs(two - 2 * one) <= 1e-13 * two || two < 1e-300);
        }
    assert_true(isnan(al__kstwo_sf(0.5, 0)) && isnan(al__kstwo_sf(NAN, 5)));
}

static void test_percentiles_and_slope(void **state) {
    (void)state;
    double x5[5] = {5, 1, 4, 2, 3}, x4[4] = {4, 1, 3, 2};
    al_five f;
    assert_int_equal(al_five_number(x5, 5, &f, NULL), 0);
    assert_true(f.min == 1 && f.q1 == 2 && f.median == 3 && f.q3 == 4 && f.max == 5 && f.mean == 3);
    assert_int_equal(al_five_number(x4, 4, &f, NULL), 0); /* index 0.75, 1.5, 2.25 */
    assert_float_equal(f.q1, 1.75, 1e-15);
    assert_float_equal(f.median, 2.5, 1e-15);
    assert_float_equal(f.q3, 3.25, 1e-15);
    double s4[4] = {1, 2, 3, 4};
    assert_true(isnan(al_percentile_sorted(s4, 4, NAN)) &&
                isnan(al_percentile_sorted(s4, 4, -1e-9)));
    assert_true(isnan(al_percentile_sorted(s4, 4, 100.5)) &&
                isnan(al_percentile_sorted(s4, 4, INFINITY)));
    assert_true(isnan(al_percentile_sorted(s4, 4, -INFINITY)) &&
                isnan(al_percentile_sorted(s4, 0, 50)));
    assert_true(al_percentile_sorted(s4, 4, 0) == 1 && al_percentile_sorted(s4, 4, 100) == 4);
    assert_float_equal(al_percentile_sorted(s4, 4, 50), 2.5, 1e-15);
    double one = 7;
    assert_int_equal(al_five_number(&one, 1, &f, NULL), 0);
    assert_true(f.min == 7 && f.q1 == 7 && f.median == 7 && f.q3 == 7 && f.max == 7);
    double xs[4] = {32, 64, 128, 256}, ys[4];
    for (int i = 0; i < 4; i++) ys[i] = 0.0625 * xs[i];
    assert_float_equal(al_slope_origin(xs, ys, 4), 0.0625, 1e-15);
    al_error err = {0};
    assert_int_not_equal(al_five_number(x5, 0, &f, &err), 0);
}

static void test_critical_n_grid(void **state) {
    (void)state;
    int N[3] = {1, 4, 2};
    double a[6] = {1, 2, 3, 4, 5, 6}, pv[3];
    int crit;
    al_error err = {0};
    assert_int_not_equal(al_critical_n(N, 3, a, a, 2, 0.01, pv, &crit, &err), 0);
    assert_non_null(strstr(err.msg, "increasing"));
    int N2[2] = {1, 2};
    double sep[4] = {0, 1, 100, 101}, same[4] = {0, 1, 0, 1}; /* [nN = 2, heads = 2] */
    assert_int_equal(al_critical_n(N2, 2, sep, same, 2, 0.5, pv, &crit, &err), 0);
    /* N = 1: identical samples (p = 1); reached at the first N */
    assert_true(pv[0] == 1 && crit == 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ks_separated),       cmocka_unit_test(test_ks_errors),
        cmocka_unit_test(test_kstwo_closed_forms), cmocka_unit_test(test_percentiles_and_slope),
        cmocka_unit_test(test_critical_n_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
