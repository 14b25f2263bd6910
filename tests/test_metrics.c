/* test_metrics.c: properties and closed forms of the metrics (src/metrics.c) and of Algorithm 5
 * (src/sensitivity.c):
 *  - dtilde <= dmax on 100,000 seeded random rows with non-negative weights (every N < n),
 *    among them identical, near-duplicate (gaps 1e-12..1e-2 relative) and clustered vector
 *    sets and tied weights, within a stated rounding slack;
 *  - E against the exact expectation over all N-subsets (enumerated) on 100,000 rows:
 *    E_exact >= E (Jensen) always, and the Monte-Carlo E_mc against E_exact (Hoeffding per
 *    row, one z-test over all rows, and its reported standard errors);
 *  - closed forms: equal weights on equal vectors (dtilde = dmax = E = (n-N)(N-1)/n |x|, N = 1
 *    included: exactly 0, and N_s = 0), the audit's degenerate heads and rows (exact zeros),
 *    identical vectors with tied weights (dtilde = |x| sum (abar - alpha_i)), r = 0, two equal
 *    logits (spectral norm 1/(2T)), uniform logits (1/(nT)), sparsemax on a two-element
 *    support (1/T);
 *  - every softmax spectral norm <= 1/(2T), the finite difference <= the spectral norm;
 *  - one row (al_row_vanishing, al_row_sensitivity) equals the head's row;
 *  - edge cases: n = 1, N >= n, NaN/Inf (the error names the position), empty input, extreme
 *    temperatures and logits of +-1e30;
 *  - heads computed in parallel threads equal the same heads computed one by one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "cpu.h"
#include "internal.h"
#include "metrics.h"

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
    int kind = (int)(al__rng_uniform(r) * 6);
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
            break; /* ties (at the top too), zeros */
        case 4:
            a[i] = 1.0;
            break; /* all equal */
        default:
            a[i] = 5 * al__rng_uniform(r) * al__rng_uniform(r);
            break; /* sum != 1 */
        }
        s += a[i];
    }
    if (kind <= 4 && s > 0)
        for (int i = 0; i < n; i++) a[i] /= s;
}

/* n vectors in R^d at a random scale, of one of several kinds: Gaussian; with one duplicated
 * pair; all identical; near-duplicates of one vector (relative gap 1e-12..1e-2); two clusters
 * of near-duplicates. Returns the kind. */
static int random_vectors(al__rng *r, double *x, int n, int d) {
    double scale = exp(2 * al__rng_normal(r));
    int kind = (int)(al__rng_uniform(r) * 5);
    double gap = scale * pow(10.0, -12 + 10 * al__rng_uniform(r));
    for (int i = 0; i < n * d; i++) x[i] = scale * al__rng_normal(r);
    for (int i = 1; i < n; i++) {
        const double *c = x + (kind == 4 ? (i % 2) * d : 0); /* cluster centre: x_0 or x_1 */
        if (i < 2 && kind == 4) continue;
        for (int k = 0; k < d; k++) {
            if (kind == 1 && i == 1) x[i * d + k] = x[k];
            if (kind == 2) x[i * d + k] = x[k];
            if (kind == 3 || kind == 4) x[i * d + k] = c[k] + gap * al__rng_normal(r);
        }
    }
    return kind;
}

/* I_N of METHOD 3 by a plain sort of the indices (larger weight first, ties: lower index) */
static void ref_select(const double *a, int n, int *ord) {
    for (int i = 0; i < n; i++) {
        int p = i;
        while (p > 0 && (a[ord[p - 1]] < a[i])) {
            ord[p] = ord[p - 1];
            p--;
        }
        ord[p] = i;
    }
}

static double norm_d(const double *v, int d) {
    double s = 0;
    for (int k = 0; k < d; k++) s += v[k] * v[k];
    return sqrt(s);
}

/* ---- dtilde <= dmax ---------------------------------------------------------------------- */

/* The bound's rounding slack: dtilde <= dmax + RHO dtilde + BOUND_ULPS u scale (u = 2^-53),
 * scale = sum_{i not in I} (|alpha_i| |x_i| + sum_{j in I} |alpha_j| |x_j|), the triangle bound
 * of dtilde (the size of what its terms are computed from). The bound is tight (equal) on
 * identical vectors, where both sides carry their roundings: RHO = 1e-10 is the accuracy
 * attnlim.h states for every term of dtilde (a term just above src/metrics.c's cancellation
 * threshold carries up to that: the expansion's rounding times (|alpha_i x_i| + |s|)^2 / t_i^2,
 * seen up to ~80 ulps of scale here), BOUND_ULPS the roundings of dmax and of the sums. The
 * audit's failures were ~1e-8 relative, 0 > 1e-8 absolute on exact zeros. */
#define RHO        1e-10
#define BOUND_ULPS 8.0
#define U53        1.1102230246251565e-16

/* the scale above for I = ord[0..N-1] */
static double bound_scale(const double *a, const double *x, int n, int d, const int *ord, int N) {
    double Q = 0, s = 0;
    for (int q = 0; q < N; q++) Q += fabs(a[ord[q]]) * norm_d(x + ord[q] * d, d);
    for (int q = N; q < n; q++) s += fabs(a[ord[q]]) * norm_d(x + ord[q] * d, d) + Q;
    return s;
}

static void test_dtilde_le_dmax(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 20250829);
    int Ns[24], ord[25], kinds[5] = {0};
    for (int k = 0; k < 24; k++) Ns[k] = k + 1;
    double a[25], x[25 * 6], worst = 0, worst_rel = 0;
    al_topn_stats st[24];
    al_error err = {0};
    long checked = 0, instances = 0, tight = 0;
    for (int it = 0; it < 100000; it++) {
        int n = 2 + (int)(al__rng_uniform(&r) * 24), d = 1 + (int)(al__rng_uniform(&r) * 6);
        random_weights(&r, a, n);
        kinds[random_vectors(&r, x, n, d)]++;
        ref_select(a, n, ord);
        al_metrics_opts o = opts_all(Ns, n - 1);
        o.separability = 0;
        assert_int_equal(al_row_metrics(a, x, n, d, &o, st, &err), 0);
        for (int k = 0; k < n - 1; k++) {
            assert_int_equal(st[k].rows, 1);
            double sc = bound_scale(a, x, n, d, ord, k + 1);
            double excess = (st[k].dtilde - st[k].dmax) / (U53 * sc);
            if (!(st[k].dtilde <= st[k].dmax + RHO * st[k].dtilde + BOUND_ULPS * U53 * sc))
                fail_msg("instance %d (n %d, d %d, N %d): dtilde %.17g > dmax %.17g by %.3g ulps "
                         "of scale %.3g",
                         it, n, d, k + 1, st[k].dtilde, st[k].dmax, excess, sc);
            if (excess > worst) worst = excess;
            double rel = (st[k].dtilde - st[k].dmax) / st[k].dtilde;
            if (rel > worst_rel) worst_rel = rel;
            tight += excess > 0;
            checked++;
        }
        instances++;
    }
    assert_true(instances >= 100000);
    for (int k = 0; k < 5; k++) assert_true(kinds[k] > 15000); /* every kind of vector set */
    printf("dtilde <= dmax: %ld instances (vectors: %ld Gaussian, %ld with a duplicate, %ld "
           "identical, %ld near-duplicates, %ld two clusters), %ld (row, N) pairs; dtilde > dmax "
           "by rounding in %ld, at most %.3g ulps of scale, %.3g relative\n",
           instances, (long)kinds[0], (long)kinds[1], (long)kinds[2], (long)kinds[3],
           (long)kinds[4], checked, tight, worst, worst_rel);
}

/* ---- E against the exact expectation over all N-subsets ------------------------------------ */

/* Over every N-subset I of 0..n-1 (n <= 12, d <= 6), directly: the mean, the (population)
 * variance, the minimum and the maximum of dtilde(I) = sum_{i not in I} ||alpha_i x_i - s_I||,
 * s_I = sum_{j in I} alpha_j x_j. */
static void subsets_exact(const double *a, const double *x, int n, int d, int N, double *mean,
                          double *var, double *lo, double *hi) {
    int idx[12];
    for (int q = 0; q < N; q++) idx[q] = q;
    double m = 0, m2 = 0, mn = INFINITY, mx = -INFINITY;
    long cnt = 0;
    for (;;) {
        double s[6] = {0};
        unsigned in = 0;
        for (int q = 0; q < N; q++) {
            in |= 1u << idx[q];
            for (int k = 0; k < d; k++) s[k] += a[idx[q]] * x[idx[q] * d + k];
        }
        double t = 0;
        for (int i = 0; i < n; i++) {
            if (in >> i & 1u) continue;
            double e2 = 0;
            for (int k = 0; k < d; k++) {
                double e = a[i] * x[i * d + k] - s[k];
                e2 += e * e;
            }
            t += sqrt(e2);
        }
        cnt++;
        double dl = t - m; /* Welford */
        m += dl / (double)cnt;
        m2 += dl * (t - m);
        mn = t < mn ? t : mn;
        mx = t > mx ? t : mx;
        int q = N - 1; /* next subset in lexicographic order */
        while (q >= 0 && idx[q] == n - N + q) q--;
        if (q < 0) break;
        idx[q]++;
        for (int p = q + 1; p < N; p++) idx[p] = idx[p - 1] + 1;
    }
    *mean = m;
    *var = m2 / (double)cnt;
    *lo = mn;
    *hi = mx;
}

/* METHOD 3: E is a lower bound of the exact expectation of dtilde over uniform random N-subsets
 * (Jensen), and the Monte-Carlo E_mc estimates that expectation. On 100,000 seeded rows
 * (n <= 10, so every N-subset is enumerated):
 *  - E <= E_exact, always (up to rounding: equality holds at N = n - 1 and on degenerate rows);
 *  - |E_mc - E_exact| <= Hoeffding's bound for S samples in [min, max] of dtilde at
 *    delta = 1e-12 per row: a false failure has probability < 1e-7 over all rows, whatever
 *    the distribution of dtilde;
 *  - z = sum_rows (E_mc - E_exact) / sqrt(var / S), normalised by sqrt(rows), is N(0, 1) by the
 *    CLT over ~1e5 independent bounded terms: |z| < 6 (false failure ~2e-9), which detects a
 *    bias of 0.02 standard errors per row;
 *  - the reported E_mc_se^2 S averages to the exact variance (within 10%).
 * Why not E_mc >= E - k s.e. row by row: at 4 s.e. a one-sided false failure has p ~ 3e-5,
 * ~3 expected in 1e5 rows; and whatever k, with few samples the sample s.e. of a skewed
 * dtilde (one rare subset with a large value, missed by every sample: (1 - 1/12)^64 ~ 0.4%)
 * understates the error, so the normal tail does not apply. The exact expectation makes the
 * statement both stronger and sound. */
static void test_E_exact_expectation(void **state) {
    (void)state;
    enum { S = 64 };
    al__rng r;
    al__rng_seed(&r, 77);
    double a[12], x[12 * 6];
    al_topn_stats st;
    al_error err = {0};
    const double hoeff = sqrt(log(2.0 / 1e-12) / (2.0 * S));
    double zsum = 0, ratio = 0;
    long instances = 0, nz = 0;
    for (int it = 0; it < 100000; it++) {
        int n = 2 + (int)(al__rng_uniform(&r) * 9), d = 1 + (int)(al__rng_uniform(&r) * 4);
        int N = 1 + (int)(al__rng_uniform(&r) * (n - 1));
        random_weights(&r, a, n);
        random_vectors(&r, x, n, d);
        al_metrics_opts o = opts_all(&N, 1);
        o.separability = 0;
        o.mc_samples = S;
        o.mc_seed = (uint64_t)it;
        assert_int_equal(al_row_metrics(a, x, n, d, &o, &st, &err), 0);
        double mu, var, lo, hi, sc = 0;
        subsets_exact(a, x, n, d, N, &mu, &var, &lo, &hi);
        for (int i = 0; i < n; i++) sc += fabs(a[i]) * norm_d(x + i * d, d);
        sc *= (double)n; /* every term of E and of dtilde is <= sum_i |alpha_i| |x_i| */
        double tol = 1e-11 * fabs(mu) + 64 * U53 * sc;
        if (!(st.E <= mu + tol))
            fail_msg("instance %d (n %d, d %d, N %d): E %.17g > exact expectation %.17g", it, n, d,
                     N, st.E, mu);
        if (!(fabs(st.E_mc - mu) <= hoeff * (hi - lo) + tol))
            fail_msg("instance %d (n %d, d %d, N %d): E_mc %.17g, exact %.17g, range [%.17g, "
                     "%.17g]: outside Hoeffding's bound",
                     it, n, d, N, st.E_mc, mu, lo, hi);
        assert_true(isfinite(st.E_mc_se) && st.E_mc_se >= 0);
        if (var > 1e-12 * hi * hi) { /* a spread well above rounding */
            zsum += (st.E_mc - mu) / sqrt(var / S);
            ratio += st.E_mc_se * st.E_mc_se * S / var;
            nz++;
        }
        instances++;
    }
    assert_true(instances >= 100000 && nz > 50000);
    double z = zsum / sqrt((double)nz);
    ratio /= (double)nz;
    printf("E <= E_exact, E_mc within Hoeffding's bound of E_exact: %ld instances; z over %ld "
           "rows %.3f; mean se^2 S / var %.4f\n",
           instances, nz, z, ratio);
    assert_true(fabs(z) < 6);
    assert_true(fabs(ratio - 1) < 0.1);
}

/* ---- closed forms ------------------------------------------------------------------------- */

/* Equal weights 1/n on identical vectors, every N (N = 1 included): dtilde = dmax = E =
 * (n-N)(N-1)/n |x| (the audit had dtilde 1.46e-8 > dmax = 0 and E 1.97e-8 at N = 1, n = 5),
 * exact zeros at N = 1; N_s = 0 (every distance equals r). */
static void test_equal_weights_equal_vectors(void **state) {
    (void)state;
    enum { d = 3 };
    double a[9], x[9 * d], xv[d] = {1.0, -2.0, 2.0}; /* |x| = 3 */
    int Ns[] = {1, 2, 4, 8};
    al_topn_stats st[4];
    al_metrics_opts o = opts_all(Ns, 4);
    for (int n = 2; n <= 9; n++) {
        for (int i = 0; i < n; i++) {
            a[i] = 1.0 / n;
            memcpy(x + i * d, xv, sizeof xv);
        }
        assert_int_equal(al_row_metrics(a, x, n, d, &o, st, NULL), 0);
        for (int k = 0; k < 4 && Ns[k] < n; k++) {
            double N = Ns[k], want = (n - N) * (N - 1) / n * 3.0;
            /* rounding slack: 8 ulps of the scale 3 (n - N) (the norms' sum) */
            double tol = 8 * U53 * 3.0 * (n - N);
            assert_float_equal(st[k].dtilde, want, tol);
            assert_float_equal(st[k].dmax, want, tol); /* tight: d1 = 0 */
            assert_float_equal(st[k].E, want, tol);
            assert_true(st[k].dtilde <= st[k].dmax + tol);
            if (Ns[k] == 1) /* exact: a_i x_i - s = 0 for every i, d1 = 0, sum (abar - a_i) = 0 */
                assert_true(st[k].dtilde == 0 && st[k].dmax == 0 && st[k].E <= tol);
            assert_float_equal(st[k].ns_ratio, 0.0, 0);
        }
    }
}

/* The audit's causal [6, 6] head of uniform rows (row t: 1/(t+1)) on identical vectors: per row
 * dtilde = dmax = E = (n-N)(N-1)/n |x|; the means over rows n > N; N = 1 exactly 0. */
static void test_causal_uniform_identical_head(void **state) {
    (void)state;
    enum { L = 6, d = 4 };
    double w[L * L], x[L * d], xv[d] = {0.3, 1.7, -2.2, 0.9};
    for (int t = 0; t < L; t++)
        for (int j = 0; j < L; j++) w[t * L + j] = j <= t ? 1.0 / (t + 1) : 0.0;
    for (int i = 0; i < L; i++) memcpy(x + i * d, xv, sizeof xv);
    double nx = norm_d(xv, d);
    int Ns[] = {1, 2, 3, 4, 5};
    al_topn_stats st[5];
    al_metrics_opts o = opts_all(Ns, 5);
    o.causal = 1;
    assert_int_equal(al_head_metrics(w, x, L, d, &o, st, NULL, NULL, NULL), 0);
    for (int k = 0; k < 5; k++) {
        int N = Ns[k], rows = 0;
        double want = 0;
        for (int n = N + 1; n <= L; n++, rows++) want += (double)(n - N) * (N - 1) / n * nx;
        want /= rows;
        double tol = 8 * U53 * nx * L;
        assert_int_equal(st[k].rows, rows);
        assert_float_equal(st[k].dtilde, want, tol);
        assert_float_equal(st[k].dmax, want, tol);
        assert_float_equal(st[k].E, want, tol);
        assert_true(st[k].dtilde <= st[k].dmax + tol);
        if (N == 1) assert_true(st[k].dtilde == 0 && st[k].dmax == 0 && st[k].E <= tol);
    }
}

/* Identical vectors, weights from a few levels with ties at the top (the audit: dtilde <= dmax
 * failed in 87 of 400 (row, N) cases by ~1e-8 relative): dtilde = dmax = |x| sum_{i not in I}
 * (abar - alpha_i) exactly; here within k ulps of scale = sum_{i not in I} (alpha_i + abar)|x|
 * (both sides and the reference), and the bound with the same slack, k = 2N + d + 8: the
 * roundings of the expansion (gamma_k, k = 2N + d + 3, src/metrics.c) and of the sums. */
static void test_identical_vectors_tied_weights(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 400);
    int Ns[24], ord[25];
    for (int k = 0; k < 24; k++) Ns[k] = k + 1;
    double a[25], x[25 * 5];
    al_topn_stats st[24];
    int cases = 0, exact0 = 0;
    while (cases < 400) {
        int n = 2 + (int)(al__rng_uniform(&r) * 24), d = 1 + (int)(al__rng_uniform(&r) * 5);
        double sc = exp(3 * al__rng_normal(&r)), s = 0;
        for (int k = 0; k < d; k++) x[k] = sc * al__rng_normal(&r);
        for (int i = 1; i < n; i++) memcpy(x + i * d, x, sizeof(double) * (size_t)d);
        for (int i = 0; i < n; i++) a[i] = (double)(1 + (int)(al__rng_uniform(&r) * 3));
        a[n - 1] = a[0] = 4; /* a tie at the top */
        for (int i = 0; i < n; i++) s += a[i];
        for (int i = 0; i < n; i++) a[i] /= s; /* levels {1, 2, 3, 4} / sum */
        ref_select(a, n, ord);
        double nx = norm_d(x, d);
        al_metrics_opts o = opts_all(Ns, n - 1);
        o.separability = 0;
        assert_int_equal(al_row_metrics(a, x, n, d, &o, st, NULL), 0);
        for (int k = 0; k < n - 1 && cases < 400; k++, cases++) {
            int N = k + 1;
            double abar = 0, want = 0, scale = 0;
            for (int q = 0; q < N; q++) abar += a[ord[q]];
            for (int q = N; q < n; q++) {
                want += abar - a[ord[q]];
                scale += a[ord[q]] + abar;
            }
            want *= nx;
            scale *= nx;
            double tol = (2.0 * N + d + 8) * U53 * scale;
            if (!(fabs(st[k].dtilde - want) <= tol && fabs(st[k].dmax - want) <= tol &&
                  st[k].dtilde <= st[k].dmax + tol))
                fail_msg("n %d d %d N %d: dtilde %.17g dmax %.17g want %.17g (tol %.3g)", n, d, N,
                         st[k].dtilde, st[k].dmax, want, tol);
            exact0 += want == 0 && st[k].dtilde == 0;
        }
    }
    assert_true(exact0 > 0); /* N = 1 with the tie: an exact 0 */
}

/* Near-duplicates at scale 1e3 with exact gaps (the audit: dtilde 2.8185e-5 against 2.8284e-5):
 * x_i = x_0 + 2^-13 i e_(i mod 3) (differences exact in double), equal weights a, N = 1:
 * dtilde = sum_{i >= 1} a 2^-13 i, E = (n-1)/n sum_i ||(1+cc) a x_i - cc S|| with cc = 1/(n-1),
 * = (n-1)/n sum_i a ||x_i - mean x|| (n/(n-1)) from the same exact differences. */
static void test_near_duplicates_exact_gaps(void **state) {
    (void)state;
    enum { n = 5, d = 3 };
    double x0[d] = {1000.0, -1000.0, 500.0}, x[n * d], a[n];
    for (int i = 0; i < n; i++) {
        a[i] = 1.0 / n;
        for (int k = 0; k < d; k++) x[i * d + k] = x0[k] + (k == i % 3 ? ldexp(i, -13) : 0);
    }
    int Ns[] = {1};
    al_topn_stats st;
    al_metrics_opts o = opts_all(Ns, 1);
    o.separability = 0;
    assert_int_equal(al_row_metrics(a, x, n, d, &o, &st, NULL), 0);
    double want = 0;
    for (int i = 1; i < n; i++) want += a[0] * ldexp(i, -13);
    assert_float_equal(st.dtilde / want, 1.0, 1e-13);
    /* E: (1+cc) a x_i - cc S = a n/(n-1) (x_i - mean x), the mean of the exact offsets */
    double mean[d] = {0}, wantE = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < d; k++) mean[k] += (k == i % 3 ? ldexp(i, -13) : 0) / n;
    for (int i = 0; i < n; i++) {
        double e2 = 0;
        for (int k = 0; k < d; k++) {
            double e = (k == i % 3 ? ldexp(i, -13) : 0) - mean[k];
            e2 += e * e;
        }
        wantE += a[0] * (double)n / (n - 1) * sqrt(e2);
    }
    wantE *= (double)(n - 1) / n;
    assert_float_equal(st.E / wantE, 1.0, 1e-13);
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

/* A Gram matrix given from outside (al__head_gram, shared by the heads of a layer and the
 * readings in reproduce) gives al_head_metrics' own numbers bit for bit: d_head-wide and
 * d_model-wide vectors (d = 300: two K blocks of our DGEMM), causal and bidirectional, the grid
 * to L - 1, at every ISA level. */
static void test_given_gram_bit_equal(void **state) {
    (void)state;
    enum { L = 70, NN = 10 };
    int Ns[NN] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 69};
    al__rng r;
    al__rng_seed(&r, 41);
    double *w = malloc(sizeof(double) * L * L), *x = malloc(sizeof(double) * L * 300);
    double *G = malloc(sizeof(double) * L * L);
    for (int t = 0; t < L; t++) {
        double s = 0, *row = w + (size_t)t * L;
        for (int j = 0; j < L; j++) s += row[j] = exp(2 * al__rng_normal(&r));
        for (int j = 0; j < L; j++) row[j] /= s;
    }
    for (int i = 0; i < L * 300; i++) x[i] = al__rng_normal(&r);
    al_topn_stats a[NN], b[NN];
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int d = 8; d <= 300; d = d == 8 ? 48 : d == 48 ? 300 : 301)
            for (int causal = 0; causal < 2; causal++) {
                al_metrics_opts o = opts_all(Ns, NN);
                o.causal = causal;
                o.mc_samples = 3;
                o.mc_seed = 7;
                memset(a, 0, sizeof a); /* padding included, for the byte comparison */
                memset(b, 0, sizeof b);
                assert_int_equal(al_head_metrics(w, x, L, d, &o, a, NULL, NULL, NULL), 0);
                al__head_gram(x, L, d, G);
                assert_int_equal(
                    al__head_metrics_gram(w, x, G, NULL, -1, L, d, &o, b, NULL, NULL, NULL), 0);
                assert_memory_equal(a, b, sizeof a);
            }
    }
    al__cpu_force((al__cpu_isa)-1);
    free(w), free(x), free(G);
}

/* al__head_gram (the Gram matrix every head's metrics start from: our DGEMM's lower triangle,
 * mirrored, from avx512 on; OpenBLAS below) against a long-double loop, |err| <= 2 (d + 1) u
 * sum_k |x_ik x_jk|, and symmetric bit for bit; L and d across the DGEMM's tiles and blocks,
 * every ISA level. */
static void test_head_gram_reference(void **state) {
    (void)state;
    enum { L = 150 };
    al__rng r;
    al__rng_seed(&r, 47);
    double *x = malloc(sizeof(double) * L * 300), *G = malloc(sizeof(double) * L * L);
    for (int i = 0; i < L * 300; i++) x[i] = al__rng_normal(&r);
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int d = 7; d <= 300; d = d == 7 ? 300 : 301) {
            al__head_gram(x, L, d, G);
            for (int i = 0; i < L; i++)
                for (int j = 0; j < L; j++) {
                    long double s = 0, mag = 0;
                    for (int k = 0; k < d; k++) {
                        long double p = (long double)x[i * d + k] * x[j * d + k];
                        s += p, mag += fabsl(p);
                    }
                    double g = G[(size_t)i * L + j];
                    if (!(fabsl(g - s) <= 2.0L * (d + 1) * 0x1p-53L * mag))
                        fail_msg("%s d %d: G[%d, %d] = %.17g, want %.17Lg",
                                 al__cpu_name((al__cpu_isa)isa), d, i, j, g, s);
                    if (isa == AL__CPU_AVX512) /* ours: symmetric bits (OpenBLAS's need not be) */
                        assert_memory_equal(&G[(size_t)i * L + j], &G[(size_t)j * L + i],
                                            sizeof *G);
                }
        }
    }
    al__cpu_force((al__cpu_isa)-1);
    free(x), free(G);
}

/* bound_n (the reproduce jobs' call): dmax only up to bound_n, NaN beyond; dtilde, E (and
 * E_mc) the same numbers as al_head_metrics', bit for bit up to bound_n and to 1e-12 relative
 * beyond, where x_i . s may come from the vectors instead of the Gram rows (metrics.c,
 * list_cheaper: the grid's wide steps near L - 1, taken here at d = 4 and 16, not at 48); causal
 * and bidirectional, every ISA level. */
static void test_bound_n_list_mode(void **state) {
    (void)state;
    enum { L = 90, NN = 12 };
    int Ns[NN] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 70, 85, 89};
    al__rng r;
    al__rng_seed(&r, 43);
    double *w = malloc(sizeof(double) * L * L), *x = malloc(sizeof(double) * L * 48);
    for (int t = 0; t < L; t++) {
        double s = 0, *row = w + (size_t)t * L;
        for (int j = 0; j < L; j++) s += row[j] = exp(2 * al__rng_normal(&r));
        for (int j = 0; j < L; j++) row[j] /= s;
    }
    for (int i = 0; i < L * 48; i++) x[i] = al__rng_normal(&r);
    for (int i = 0; i < 48; i++) x[7 * 48 + i] = x[3 * 48 + i]; /* a duplicate key (cancels) */
    al_topn_stats a[NN], b[NN];
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int d = 4; d <= 48; d = d == 4 ? 16 : d == 16 ? 48 : 49)
            for (int causal = 0; causal < 2; causal++) {
                al_metrics_opts o = opts_all(Ns, NN);
                o.separability = 0;
                o.causal = causal;
                o.mc_samples = 3;
                o.mc_seed = 7;
                assert_int_equal(al_head_metrics(w, x, L, d, &o, a, NULL, NULL, NULL), 0);
                assert_int_equal(
                    al__head_metrics_gram(w, x, NULL, NULL, 8, L, d, &o, b, NULL, NULL, NULL), 0);
                for (int k = 0; k < NN; k++) {
                    assert_int_equal(a[k].rows, b[k].rows);
                    if (Ns[k] <= 8) {
                        assert_true(a[k].dmax == b[k].dmax && a[k].dtilde == b[k].dtilde);
                        assert_true(a[k].E == b[k].E);
                    } else {
                        assert_true(isnan(b[k].dmax) && !isnan(a[k].dmax));
                        assert_true(fabs(a[k].dtilde - b[k].dtilde) <= 1e-12 * a[k].dtilde);
                        assert_true(fabs(a[k].E - b[k].E) <= 1e-12 * a[k].E);
                    }
                    assert_true(a[k].E_mc == b[k].E_mc); /* the draws do not move */
                }
            }
    }
    al__cpu_force((al__cpu_isa)-1);
    free(w), free(x);
}

/* The ranking of a head's rows (al__head_rank, computed once in reproduce and shared by the
 * distance, the separability and every reading) against a plain insertion sort (ref_select),
 * and every top-K selection (al__top_k: quickselect then a sort of K, the K < n path included)
 * as its prefix: rows with ties at and around the K-th value, zeros, -0 beside +0, negative
 * weights; causal rows with and without a sliding window. */
static void test_rank_is_top_k_order(void **state) {
    (void)state;
    enum { L = 61 };
    al__rng r;
    al__rng_seed(&r, 47);
    double *w = malloc(sizeof(double) * L * L), *tmp = malloc(sizeof(double) * L);
    uint16_t *rank = malloc(sizeof(uint16_t) * L * L);
    void *kvs = malloc(32 * (size_t)L);
    int64_t sel[L];
    int ord[L];
    for (int rep = 0; rep < 40; rep++) {
        for (int t = 0; t < L; t++) {
            random_weights(&r, w + (size_t)t * L, L);
            for (int j = 0; j < L; j++) {
                double u = al__rng_uniform(&r), *v = &w[(size_t)t * L + j];
                if (rep % 4 == 1 && u < 0.2) *v = -*v; /* negative weights, -0 from +0 */
                if (rep % 4 == 2 && u < 0.3) *v = u < 0.15 ? -0.0 : 0.0;
            }
        }
        int causal = rep % 3 != 0, win = rep % 3 == 2 ? 1 + rep % 17 : 0;
        al__head_rank(w, L, causal, win, rank, kvs);
        for (int t = 0; t < L; t++) {
            int64_t lo = al__row_lo(t, causal, win), n = al__row_n(t, L, causal, win);
            const double *a = w + (size_t)t * L + lo;
            const uint16_t *rk = rank + (size_t)t * L;
            ref_select(a, (int)n, ord);
            for (int64_t q = 0; q < n; q++) assert_int_equal(rk[q], ord[q]);
            for (int64_t K = 1; K <= n; K++) {
                al__top_k(a, n, K, sel, kvs, tmp);
                for (int64_t q = 0; q < K; q++) assert_int_equal(sel[q], rk[q]);
            }
        }
    }
    free(w), free(tmp), free(rank), free(kvs);
}

/* The ranking given (al__head_rank) gives the numbers of the rows' own selections bit for bit:
 * al__head_metrics_gram (distance with dmax to bound_n and the list mode past it, Monte-Carlo,
 * separability) and al__head_reading_rank (the three distances, Monte-Carlo, the exact
 * expectation), on weights with ties; causal, bidirectional and a sliding window; every ISA. */
static void test_given_rank_bit_equal(void **state) {
    (void)state;
    enum { L = 72, NN = 9, D = 16 };
    int Ns[NN] = {1, 2, 3, 5, 8, 21, 55, 64, 71}, Ne[3] = {1, 2, 3};
    al__rng r;
    al__rng_seed(&r, 53);
    double *w = malloc(sizeof(double) * L * L), *x = malloc(sizeof(double) * L * D);
    uint16_t *rank = malloc(sizeof(uint16_t) * L * L);
    void *kvs = malloc(32 * (size_t)L);
    for (int t = 0; t < L; t++) random_weights(&r, w + (size_t)t * L, L);
    for (int i = 0; i < L * D; i++) x[i] = al__rng_normal(&r);
    al_topn_stats a[NN], b[NN];
    al_reading_stats ra[NN], rb[NN];
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int m = 0; m < 3; m++) {
            int causal = m > 0, win = m == 2 ? 9 : 0;
            al__head_rank(w, L, causal, win, rank, kvs);
            for (int sep = 0; sep < 2; sep++)
                for (int bound = -1; bound <= 8; bound += 9) {
                    al_metrics_opts o = opts_all(Ns, NN);
                    o.separability = sep, o.causal = causal, o.window = win;
                    o.mc_samples = 3, o.mc_seed = 7;
                    memset(a, 0, sizeof a); /* padding included, for the byte comparison */
                    memset(b, 0, sizeof b);
                    assert_int_equal(al__head_metrics_gram(w, x, NULL, NULL, bound, L, D, &o, a,
                                                           NULL, NULL, NULL),
                                     0);
                    assert_int_equal(al__head_metrics_gram(w, x, NULL, rank, bound, L, D, &o, b,
                                                           NULL, NULL, NULL),
                                     0);
                    assert_memory_equal(a, b, sizeof a);
                }
            for (int kind = 0; kind < 3; kind++)
                for (int ex = 0; ex < 2; ex++) {
                    al_reading_opts o = {.distance = (al_distance_kind)kind,
                                         .top_n = ex ? Ne : Ns,
                                         .n_top = ex ? 3 : NN,
                                         .mc_samples = 3,
                                         .mc_seed = 11,
                                         .exact = ex,
                                         .causal = causal,
                                         .window = win};
                    int64_t Lr = ex ? 24 : L; /* C(24, 3) subsets a row */
                    memset(ra, 0, sizeof ra);
                    memset(rb, 0, sizeof rb);
                    if (ex) al__head_rank(w, Lr, causal, win, rank, kvs); /* row stride Lr */
                    assert_int_equal(al_head_reading(w, x, Lr, D, &o, ra, NULL), 0);
                    assert_int_equal(al__head_reading_rank(w, x, Lr, D, &o, rank, rb, NULL), 0);
                    assert_memory_equal(ra, rb, sizeof ra);
                    if (ex) al__head_rank(w, L, causal, win, rank, kvs);
                }
        }
    }
    al__cpu_force((al__cpu_isa)-1);
    free(w), free(x), free(rank), free(kvs);
}

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

/* ---- one row (al_row_vanishing, al_row_sensitivity) against the head's rows ------------- */

static void test_row_api_equals_head_rows(void **state) {
    (void)state;
    enum { L = 24, d = 3 };
    double z[L * L], w[L * L], x[L * d], rmax[L], rent[L];
    al__rng r;
    al__rng_seed(&r, 24);
    for (int t = 0; t < L; t++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < L; j++) {
            z[t * L + j] = 2 * al__rng_normal(&r);
            if (j <= t && z[t * L + j] > mx) mx = z[t * L + j];
        }
        for (int j = 0; j <= t; j++) s += exp(z[t * L + j] - mx);
        for (int j = 0; j < L; j++) w[t * L + j] = j <= t ? exp(z[t * L + j] - mx) / s : 0;
    }
    for (int i = 0; i < L * d; i++) x[i] = al__rng_normal(&r);
    int Ns[] = {2};
    al_topn_stats st;
    al_metrics_opts o = opts_all(Ns, 1);
    o.causal = 1;
    assert_int_equal(al_head_metrics(w, x, L, d, &o, &st, rmax, rent, NULL), 0);
    for (int t = 0; t < L; t++) {
        double mx, H, Hn;
        assert_int_equal(al_row_vanishing(w + t * L, t + 1, &mx, &H, &Hn, NULL), 0);
        assert_true(mx == rmax[t] && H == rent[t]); /* the same code */
        if (t == 0)
            assert_true(isnan(Hn) && mx == 1 && H == 0);
        else
            assert_float_equal(Hn, H / log(t + 1.0), 1e-15);
    }
    /* Algorithm 5: the head's means are the means of the rows in their directions */
    double T[3] = {0.01, 1, 7}, eps[2] = {1e-3, 1}, fd[6], spec[3], v[L], rfd[6], rspec[3];
    al_norm_kind kinds[] = {AL_NORM_SOFTMAX, AL_NORM_SPARSEMAX};
    for (int c = 0; c < 2; c++) {
        al_norm nm = {.kind = kinds[c], .temperature = 5, .alpha = 1.5, .ssmax_s = 0.43};
        assert_int_equal(al_head_sensitivity(z, L, 1, &nm, T, 3, eps, 2, 8, 1, 2, fd, spec, NULL),
                         0);
        double sfd[6] = {0}, sspec[3] = {0};
        for (int t = 1; t < L; t++) {
            assert_int_equal(al_sensitivity_direction(8, 1, 2, t, t + 1, v), 0);
            assert_int_equal(
                al_row_sensitivity(z + t * L, t + 1, &nm, T, 3, eps, 2, v, rfd, rspec, NULL), 0);
            for (int q = 0; q < 6; q++) sfd[q] += rfd[q];
            for (int q = 0; q < 3; q++) sspec[q] += rspec[q];
        }
        for (int q = 0; q < 6; q++) assert_true(fd[q] == sfd[q] / (L - 1));
        for (int q = 0; q < 3; q++) assert_true(spec[q] == sspec[q] / (L - 1));
    }
    /* two equal logits: spectral norm 1/(2T); n = 1: J = 0 */
    al_norm sm = {.kind = AL_NORM_SOFTMAX, .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
    double z2[2] = {0.4, 0.4}, v2[2] = {0.6, -0.8}, one = 1;
    assert_int_equal(al_row_sensitivity(z2, 2, &sm, T, 3, eps, 2, v2, rfd, rspec, NULL), 0);
    for (int a = 0; a < 3; a++) assert_float_equal(rspec[a] * 2 * T[a], 1.0, 1e-12);
    assert_int_equal(al_row_sensitivity(z2, 1, &sm, T, 1, eps, 1, &one, rfd, rspec, NULL), 0);
    assert_true(rspec[0] == 0 && rfd[0] == 0);
    /* errors name the position */
    al_error err = {0};
    double bad[4] = {0.1, 0.2, NAN, 0.3};
    assert_int_equal(al_row_vanishing(bad, 4, NULL, NULL, NULL, &err), AL_E_RANGE);
    assert_non_null(strstr(err.msg, "position 2"));
    assert_int_not_equal(al_row_vanishing(bad, 0, NULL, NULL, NULL, &err), 0);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_equal(al_row_sensitivity(bad, 4, &sm, T, 1, eps, 1, v, rfd, rspec, &err),
                     AL_E_RANGE);
    assert_non_null(strstr(err.msg, "logits") && strstr(err.msg, "position 2"));
    double vb[2] = {1, INFINITY};
    assert_int_equal(al_row_sensitivity(z2, 2, &sm, T, 1, eps, 1, vb, rfd, rspec, &err),
                     AL_E_RANGE);
    assert_non_null(strstr(err.msg, "direction") && strstr(err.msg, "position 1"));
    double Tb[1] = {-1};
    assert_int_not_equal(al_row_sensitivity(z2, 2, &sm, Tb, 1, eps, 1, v2, rfd, rspec, &err), 0);
    assert_non_null(strstr(err.msg, "temperature"));
    assert_int_not_equal(al_row_sensitivity(z2, 2, &sm, T, 1, eps, 1, NULL, rfd, rspec, &err), 0);
}

/* ---- Algorithm 5's directions, AL__DIR_LANES at a time ----------------------------------------
 */

/* The fresh directions' definition (al_sensitivity_direction_fresh), one draw at a time: eight
 * generators, generator j seeded with SplitMix64's outputs 4j .. 4j + 3 of h; pair p from
 * generator p mod 8, u1 = ((b >> 33) | 1) 2^-31 and u2 = (bits 8..31 of b) 2^-24 in float,
 * Box-Muller in float (mathx.h's kernels), each normal widened to double; the cosines, then the
 * sines (an odd n without the last); divided by the root of the sum of squares taken as eight
 * sums over i mod 8, ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)). */
static void ref_direction(uint64_t h, int64_t n, double *v) {
    al__rng g[8];
    for (int j = 0; j < 8; j++)
        for (int c = 0; c < 4; c++)
            g[j].s[c] = al__hash64(h + (uint64_t)(4 * j + c) * 0x9e3779b97f4a7c15ull);
    int64_t np = (n + 1) / 2;
    for (int64_t p = 0; p < np; p++) {
        uint64_t b = al__rng_next(&g[p % 8]);
        float u1 = (float)(int32_t)((b >> 33) | 1) * 0x1p-31f;
        float u2 = (float)(int32_t)((b >> 8) & 0xFFFFFF) * 0x1p-24f, sn, cs;
        float rad = sqrtf(-2.0f * al__logf_pos(u1));
        al__sincosf_turn(u2, &sn, &cs);
        v[p] = (double)rad * cs;
        if (np + p < n) v[np + p] = (double)rad * sn;
    }
    double a[8] = {0};
    for (int64_t i = 0; i < n; i++) a[i % 8] += v[i] * v[i];
    double is = 1.0 / sqrt(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
    for (int64_t i = 0; i < n; i++) v[i] *= is;
}

/* The single-precision kernels of the fresh normals against libm in double: al__logf_pos on
 * u1 = k 2^-31 (k odd, every binade and random k) within 2.5e-7 relative (and 1.2e-7 absolute
 * near u1 = 1), al__sincosf_turn on u2 = k 2^-24 (every quadrant's edges and random k) within
 * 2e-7 absolute, and the normal sqrt(-2 log u1) (cos, sin)(2 pi u2) within 1e-6 of the exact
 * transform of the same float uniforms (relative to the radius). */
static void test_fresh_kernels_accuracy(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 5);
    double elog = 0, esc = 0, ex = 0;
    for (int q = 0; q < 2000000; q++) {
        uint64_t b = al__rng_next(&r);
        int32_t k1 = (int32_t)((b >> 33) | 1), k2 = (int32_t)((b >> 8) & 0xFFFFFF);
        if (q < 31) k1 = (int32_t)((1u << q) | 1u);              /* every binade */
        if (q < 64) k2 = (q / 2) * (1 << 19) - (q > 1 && q % 2); /* octant edges and below */
        float u1 = (float)k1 * 0x1p-31f, u2 = (float)k2 * 0x1p-24f, sn, cs;
        double l = log((double)u1), lf = al__logf_pos(u1);
        double e = fabs(lf - l) / fmax(fabs(l), 0.5);
        elog = e > elog ? e : elog;
        al__sincosf_turn(u2, &sn, &cs);
        double ang = 6.283185307179586 * (double)u2;
        e = fmax(fabs(sn - sin(ang)), fabs(cs - cos(ang)));
        esc = e > esc ? e : esc;
        double rad = sqrt(-2.0 * l), radf = sqrtf(-2.0f * (float)lf);
        e = fmax(fabs((double)radf * cs - rad * cos(ang)),
                 fabs((double)radf * sn - rad * sin(ang)));
        e /= fmax(rad, 1e-3);
        ex = e > ex ? e : ex;
    }
    printf("fresh kernels: log %.3g, sincos %.3g, normal %.3g\n", elog, esc, ex);
    assert_true(elog < 2.5e-7);
    assert_true(esc < 2e-7);
    assert_true(ex < 1e-6);
}

/* al_sensitivity_direction_fresh's generator seed (the hash chain of sensitivity.c) */
static uint64_t ref_fresh_hash(uint64_t seed, int layer, int head, int64_t row, int ti, int ei) {
    uint64_t h = al__hash64(seed);
    h = al__hash64(h ^ (uint64_t)(int64_t)layer);
    h = al__hash64(h ^ (uint64_t)(int64_t)head);
    h = al__hash64(h ^ (uint64_t)row);
    return al__hash64(h ^ (0xF5E5ull << 40) ^ ((uint64_t)(uint32_t)ti << 20) ^
                      (uint64_t)(uint32_t)ei);
}

/* The fresh directions drawn in vector lanes (al__fresh_direction, the copy of each CPU level)
 * and the public al_sensitivity_direction_fresh are the definition's bits, for n = 1 .. 17
 * (the lanes' and the sums' edges), 63 .. 66 and 127 .. 129 (chunks of 32 pairs: the last one
 * whole or not, with or without the odd n's cosine), 511, 512, 513 and 1023, several seeds. */
static void test_directions_lanes_bit_equal(void **state) {
    (void)state;
    enum { NMAX = 1023 };
    static const int64_t edges[] = {63, 64, 65, 66, 127, 128, 129, 511, 512, 513, 1023};
    double *v = malloc(sizeof(double) * NMAX), *ref = malloc(sizeof(double) * NMAX);
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int k = 0; k < 17 + (int)(sizeof edges / sizeof *edges); k++)
            for (uint64_t seed = 0; seed < 3; seed++) {
                int64_t n = k < 17 ? k + 1 : edges[k - 17];
                uint64_t h = ref_fresh_hash(seed, 1, 2, n, (int)seed, 3);
                ref_direction(h, n, ref);
                assert_int_equal(al__fresh_direction(h, n, v), 0);
                assert_memory_equal(v, ref, sizeof(double) * n);
                memset(v, 0, sizeof(double) * n);
                assert_int_equal(al_sensitivity_direction_fresh(seed, 1, 2, n, (int)seed, 3, n, v),
                                 0);
                assert_memory_equal(v, ref, sizeof(double) * n);
            }
        assert_int_not_equal(al__fresh_direction(1, 0, v), 0);
        assert_int_not_equal(al__fresh_direction(1, 4, NULL), 0);
    }
    al__cpu_force((al__cpu_isa)-1);
    free(v), free(ref);
}

/* Fresh directions: al_head_sensitivity_ex's means are, bit for bit, the sequential means of
 * al_row_sensitivity at each (T, eps) in al_sensitivity_direction_fresh, at every CPU level;
 * 5 x 3 and 2 x 4 directions a row (batches of 8 with a tail, and exactly one batch). */
static void test_fresh_head_equals_rows(void **state) {
    (void)state;
    enum { L = 23 };
    double z[L * L], v[L], T[5] = {0.01, 0.1, 0.5, 2, 9}, eps[4] = {1e-4, 1e-2, 1, 30};
    al__rng r;
    al__rng_seed(&r, 77);
    for (int i = 0; i < L * L; i++) z[i] = 3 * al__rng_normal(&r);
    al_norm nm = softmax_norm();
    al_sens_opts so = {.logit_scale = 1.0, .fresh = 1};
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int shape = 0; shape < 2; shape++) {
            int n_t = shape ? 2 : 5, n_eps = shape ? 4 : 3;
            double fd[20], spec[5], sfd[20] = {0}, sspec[5] = {0}, f1, s1;
            assert_int_equal(al_head_sensitivity_ex(z, L, 1, &nm, T, n_t, eps, n_eps, 6, 1, 4, &so,
                                                    fd, spec, NULL),
                             0);
            for (int t = 1; t < L; t++)
                for (int a = 0; a < n_t; a++)
                    for (int e = 0; e < n_eps; e++) {
                        al_sensitivity_direction_fresh(6, 1, 4, t, a, e, t + 1, v);
                        assert_int_equal(al_row_sensitivity(z + t * L, t + 1, &nm, T + a, 1,
                                                            eps + e, 1, v, &f1, &s1, NULL),
                                         0);
                        sfd[a * n_eps + e] += f1;
                        if (e == 0) sspec[a] += s1;
                    }
            for (int q = 0; q < n_t * n_eps; q++) assert_true(fd[q] == sfd[q] / (L - 1));
            for (int a = 0; a < n_t; a++) assert_true(spec[a] == sspec[a] / (L - 1));
        }
    }
    al__cpu_force((al__cpu_isa)-1);
}

/* al__head_sensitivity_pair (a reading's finite differences computed in the run's pass: the
 * other directions alongside, or the spectral norms left out) gives al_head_sensitivity_ex's
 * numbers bit for bit, each set as a call with its directions alone: every normalizer (softmax's
 * fast path and al_norm_forward for the others, where the full call uses
 * al_norm_forward_spectral), shared and fresh directions as the main set, scaled logits, a
 * sliding window, every CPU level. */
static void test_fd_pair_bit_equal(void **state) {
    (void)state;
    enum { L = 19 };
    double z[L * L], T[3] = {0.05, 0.7, 6}, eps[2] = {1e-3, 3};
    double fd[6], spec[3], fdo[6], fd2[6], spec2[3], fdo2[6], fd3[6];
    al__rng r;
    al__rng_seed(&r, 91);
    for (int i = 0; i < L * L; i++) z[i] = 2 * al__rng_normal(&r);
    for (int isa = 0; isa <= (int)al__cpu_detect(); isa++) {
        al__cpu_force((al__cpu_isa)isa);
        for (int kind = AL_NORM_SOFTMAX; kind <= AL_NORM_SA_SOFTMAX_NORM; kind++)
            for (int c = 0; c < 4; c++) {
                int fresh = c & 1;
                al_norm nm = {
                    .kind = (al_norm_kind)kind, .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
                al_sens_opts so = {.logit_scale = fresh ? 1.0 : 2.5,
                                   .fresh = fresh,
                                   .window = c & 2 ? 5 : 0},
                             sx = so;
                sx.fresh = !fresh;
                assert_int_equal(al_head_sensitivity_ex(z, L, 1, &nm, T, 3, eps, 2, 4, 0, 1, &so,
                                                        fd, spec, NULL),
                                 0);
                assert_int_equal(al_head_sensitivity_ex(z, L, 1, &nm, T, 3, eps, 2, 4, 0, 1, &sx,
                                                        fdo, spec2, NULL),
                                 0);
                assert_true(fd[1] != fdo[1]); /* the other directions: other numbers */
                memset(fd2, 0, sizeof fd2);
                memset(spec2, 0, sizeof spec2);
                memset(fd3, 0, sizeof fd3);
                assert_int_equal(al__head_sensitivity_pair(z, L, 1, &nm, T, 3, eps, 2, 4, 0, 1, &so,
                                                           fd2, spec2, fdo2, NULL),
                                 0);
                assert_memory_equal(fd, fd2, sizeof fd);
                assert_memory_equal(spec, spec2, sizeof spec);
                assert_memory_equal(fdo, fdo2, sizeof fdo);
                assert_int_equal(al__head_sensitivity_pair(z, L, 1, &nm, T, 3, eps, 2, 4, 0, 1, &so,
                                                           fd3, NULL, NULL, NULL),
                                 0);
                assert_memory_equal(fd, fd3, sizeof fd);
            }
    }
    al__cpu_force((al__cpu_isa)-1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtilde_le_dmax),
        cmocka_unit_test(test_E_exact_expectation),
        cmocka_unit_test(test_equal_weights_equal_vectors),
        cmocka_unit_test(test_causal_uniform_identical_head),
        cmocka_unit_test(test_identical_vectors_tied_weights),
        cmocka_unit_test(test_near_duplicates_exact_gaps),
        cmocka_unit_test(test_separability_r_zero_and_N1),
        cmocka_unit_test(test_row_edges),
        cmocka_unit_test(test_heads_parallel_equal_sequential),
        cmocka_unit_test(test_given_gram_bit_equal),
        cmocka_unit_test(test_head_gram_reference),
        cmocka_unit_test(test_bound_n_list_mode),
        cmocka_unit_test(test_rank_is_top_k_order),
        cmocka_unit_test(test_given_rank_bit_equal),
        cmocka_unit_test(test_sensitivity_two_equal_logits),
        cmocka_unit_test(test_sensitivity_uniform_and_bounds),
        cmocka_unit_test(test_sensitivity_other_normalizer_and_edges),
        cmocka_unit_test(test_row_api_equals_head_rows),
        cmocka_unit_test(test_directions_lanes_bit_equal),
        cmocka_unit_test(test_fresh_kernels_accuracy),
        cmocka_unit_test(test_fresh_head_equals_rows),
        cmocka_unit_test(test_fd_pair_bit_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
