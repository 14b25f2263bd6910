/* test_experiments.c: the aggregation and the verdicts of `attnlim reproduce` (src/experiments)
 * on hand-built inputs, against values derived by hand in the comments:
 *  - Algorithm 1: window means per head skip a NaN window; the five-number summary over heads
 *    (numpy's linear quartiles); the per-window mean over heads;
 *  - Algorithm 3: per-head samples fully separated at N = 1, 2 (KS p = 2 / binom(2H, H)) and
 *    equal at N = 3 (p = 1): critical N = 3 at both levels, slope through the origin of
 *    (L, 3) for L = 8, 16 is 72 / 320;
 *  - Algorithm 5: g = max over heads of the window means; the count above 1/(4T);
 *  - vanishing: rows inside / outside the band exp(-+2D)/n, the band of the median D;
 *  - each verdict (holds / does not hold / not testable) on summaries built for it, and the
 *    caveat a random or non-paper model puts before every "why". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "experiments.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-12

static void near(double got, double want) {
    if (!(fabs(got - want) <= TOL * (1 + fabs(want)))) {
        print_error("got %.17g, want %.17g\n", got, want);
        fail();
    }
}

/* A plan over a model of n_layer x n_head heads (context 64), the given options. */
static void make_plan(plan *p, al_repro_opts *o, int n_layer, int n_head, int causal) {
    al_model_info mi;
    memset(&mi, 0, sizeof mi);
    snprintf(mi.path, sizeof mi.path, "hand-built");
    mi.n_layer = n_layer, mi.n_head = n_head, mi.n_ctx = 64, mi.causal = causal;
    al_error e = {0};
    assert_int_equal(al__ex_build_plan(p, o, &mi, 0, &e), 0);
}

static job *job_of(plan *p, int w, int L) {
    for (int i = 0; i < p->n_jobs; i++)
        if (p->jobs[i].window == w && p->jobs[i].L == L) return &p->jobs[i];
    fail_msg("no job (w %d, L %d)", w, L);
    return NULL;
}

static void test_alg1_means_and_summaries(void **state) {
    (void)state;
    static const int Ls[] = {8, 16};
    al_repro_opts o;
    al_repro_defaults(&o);
    o.experiments = AL_EXP_ALG1, o.windows = 2, o.lengths = Ls, o.n_lengths = 2;
    plan p;
    make_plan(&p, &o, 1, 4, 1);
    assert_int_equal(p.n_jobs, 4);
    /* dtilde at N = 5 (the only N: Nd = {5}): L = 8, window 0: 1 2 3 4; window 1: NaN 4 5 6.
     * L = 16: twice those. E: window 0 all 2, window 1 all 4. */
    const double d0[4] = {1, 2, 3, 4}, d1[4] = {NAN, 4, 5, 6};
    for (int li = 0; li < 2; li++)
        for (int w = 0; w < 2; w++) {
            job *j = job_of(&p, w, Ls[li]);
            assert_int_equal(j->nd, 1);
            assert_int_equal(j->Nd[0], ALG1_N);
            for (int h = 0; h < 4; h++) {
                j->dtilde[h] = (li + 1) * (w ? d1[h] : d0[h]);
                j->E[h] = w ? 4 : 2;
                j->dmax[h] = 10;
                j->E_mc[h] = 3;
            }
        }
    agg a;
    memset(&a, 0, sizeof a);
    al_error e = {0};
    assert_int_equal(al__ex_aggregate(&p, &a, &e), 0);
    /* head means at L = 8: 1, (2+4)/2 = 3, 4, 5 (the NaN window left out) */
    const double means[4] = {1, 3, 4, 5};
    for (int h = 0; h < 4; h++) {
        near(a.a1[0][h], means[h]);
        near(a.a1[0][4 + h], 2 * means[h]);
        near(a.a1[2][h], 3);
        near(a.a1[1][h], 10);
        near(a.a1_mc[h], 3);
    }
    /* over heads of {1, 3, 4, 5}: mean 13/4; q1 at position 0.75: 1 + 0.75 (3 - 1) = 2.5;
     * median (3 + 4) / 2; q3 at position 2.25: 4 + 0.25 = 4.25 */
    al_five f = a.s.a1_dtilde[0];
    near(f.mean, 3.25), near(f.min, 1), near(f.q1, 2.5), near(f.median, 3.5), near(f.q3, 4.25);
    near(f.max, 5);
    near(a.s.a1_dtilde[1].median, 7);
    near(a.s.a1_E[0].mean, 3);
    /* per window, mean over the finite heads: w0 (1+2+3+4)/4 = 2.5, w1 (4+5+6)/3 = 5 */
    near(a.win_a1[0 * 2 + 0], 2.5);
    near(a.win_a1[1 * 2 + 0], 5);
    near(a.win_a1[1 * 2 + 1], 10);
    al__ex_free_agg(&a);
    al__ex_free_plan(&p);
}

static double binom(int n, int k) {
    double r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

static void test_alg3_critical_n(void **state) {
    (void)state;
    static const int Ls[] = {8, 16}, N3[] = {1, 2, 3};
    al_repro_opts o;
    al_repro_defaults(&o);
    o.experiments = AL_EXP_ALG3, o.lengths = Ls, o.n_lengths = 2;
    o.critical_n = N3, o.n_critical_n = 3;
    plan p;
    make_plan(&p, &o, 2, 4, 1); /* H = 8 */
    for (int li = 0; li < 2; li++) {
        job *j = job_of(&p, 0, Ls[li]);
        assert_int_equal(j->nd, 3); /* {1, 2, 3} (5 only comes with Algorithm 1) */
        for (int h = 0; h < 8; h++)
            for (int k = 0; k < 3; k++) {
                j->E[h * 3 + k] = h;
                j->dtilde[h * 3 + k] = k < 2 ? 100 + h : h; /* separated, then equal */
            }
    }
    agg a;
    memset(&a, 0, sizeof a);
    al_error e = {0};
    assert_int_equal(al__ex_aggregate(&p, &a, &e), 0);
    double p_sep = 2 / binom(16, 8);
    for (int li = 0; li < 2; li++) {
        near(a.s.a3_p[li * 3 + 0], p_sep);
        near(a.s.a3_p[li * 3 + 1], p_sep);
        near(a.s.a3_p[li * 3 + 2], 1);
        near(a.s.a3_dt_mean[li * 3 + 0], 103.5); /* mean of 100..107 */
        near(a.s.a3_E_mean[li * 3 + 2], 3.5);
        assert_int_equal(a.s.a3_crit[0][li], 3);
        assert_int_equal(a.s.a3_crit[1][li], 3);
    }
    near(a.s.a3_slope[0], 72.0 / 320.0); /* (8*3 + 16*3) / (8^2 + 16^2) */
    near(a.s.a3_slope[1], 72.0 / 320.0);
    al__ex_free_agg(&a);
    al__ex_free_plan(&p);
}

static void test_alg5_g_and_flags(void **state) {
    (void)state;
    static const double T[] = {0.1, 1}, eps[] = {0.01};
    al_repro_opts o;
    al_repro_defaults(&o);
    o.experiments = AL_EXP_ALG5, o.long_length = 8, o.windows = 2;
    o.temperatures = T, o.n_temperatures = 2, o.eps = eps, o.n_eps = 1;
    plan p;
    make_plan(&p, &o, 1, 3, 1);
    assert_int_equal(p.n_jobs, 2);
    /* fd[h, t] and spec[h, t]: window 0 h + t, window 1 h + t + 2: means h + t + 1.
     * g(T = 0.1) = max_h = 3 > 1/(0.4) = 2.5: flagged; g(T = 1) = 4 > 0.25: flagged.
     * spec: the same values times 0.5: 1.5 (not above 2.5), 2 (above 0.25): 3 flags. */
    for (int w = 0; w < 2; w++) {
        job *j = job_of(&p, w, 8);
        for (int h = 0; h < 3; h++)
            for (int t = 0; t < 2; t++) {
                j->fd[h * 2 + t] = h + t + 2 * w;
                j->spec[h * 2 + t] = 0.5 * (h + t + 2 * w);
            }
    }
    agg a;
    memset(&a, 0, sizeof a);
    al_error e = {0};
    assert_int_equal(al__ex_aggregate(&p, &a, &e), 0);
    near(a.s.g[0], 3), near(a.s.g[1], 4);
    near(a.s.spec[0], 1.5), near(a.s.spec[1], 2);
    near(a.fd[1 * 2 + 1], 3); /* head 1, T = 1: 1 + 1 + 1 */
    assert_int_equal(a.s.n_flagged, 3);
    al__ex_free_agg(&a);
    al__ex_free_plan(&p);
}

static void test_vanishing_band(void **state) {
    (void)state;
    al_repro_opts o;
    al_repro_defaults(&o);
    o.experiments = AL_EXP_VANISHING, o.long_length = 4;
    plan p;
    make_plan(&p, &o, 1, 2, 1);
    job *j = job_of(&p, 0, 4);
    assert_true(j->want_van);
    /* causal: row t has n = t + 1 keys. D = 0: the band is exactly 1/n. Head 0 uniform
     * (inside on every row), head 1 max weight 1 (outside for n >= 2, inside at n = 1; its
     * last row has D = 0.1: band up to exp(0.2) / 4 < 1): 5 of 8 rows inside. Entropies: head 0 log
     * n, head 1 0. */
    for (int t = 0; t < 4; t++) {
        double n = t + 1;
        j->vmax[t] = 1 / n, j->vent[t] = log(n), j->vD[t] = 0;
        j->vmax[4 + t] = 1, j->vent[4 + t] = 0, j->vD[4 + t] = t == 3 ? 0.1 : 0;
    }
    agg a;
    memset(&a, 0, sizeof a);
    al_error e = {0};
    assert_int_equal(al__ex_aggregate(&p, &a, &e), 0);
    near(a.s.v_inside, 5.0 / 8.0);
    assert_true(a.s.band_applies);
    for (int t = 0; t < 4; t++) near(a.s.v_n[t], t + 1);
    /* median over 2 heads of H / log n at n = 4: (1 + 0) / 2; of max weight (1/4 + 1) / 2 */
    near(a.s.v_ent_med[3], 0.5);
    near(a.s.v_max_med[3], 0.625);
    assert_true(isnan(a.s.v_ent_med[0])); /* n = 1: log n = 0, no entropy ratio */
    /* band at n = 4 from the median D (0 + 0.1) / 2: exp(-+0.1) / 4 */
    near(a.s.v_band_lo[3], exp(-0.1) / 4), near(a.s.v_band_hi[3], exp(0.1) / 4);
    al__ex_free_agg(&a);
    al__ex_free_plan(&p);
}

/* ---- verdicts on hand-built summaries */

static void paper_model(al__summary *s) {
    memset(s, 0, sizeof *s);
    snprintf(s->family, sizeof s->family, "gpt2");
    snprintf(s->model_name, sizeof s->model_name, "gpt2");
    s->n_layer = 12, s->n_head = 12;
}

static const al__verdict *find(const al__summary *s, const char *key) {
    for (int i = 0; i < s->n_verdicts; i++)
        if (!strcmp(s->verdicts[i].key, key)) return &s->verdicts[i];
    fail_msg("no verdict %s", key);
    return NULL;
}

static void expect(const al__summary *s, const char *key, const char *verdict) {
    const al__verdict *v = find(s, key);
    if (strcmp(v->verdict, verdict))
        fail_msg("%s: '%s', want '%s' (%s)", key, v->verdict, verdict, v->why);
}

static void test_verdicts_not_run(void **state) {
    (void)state;
    al__summary s;
    paper_model(&s);
    s.experiments = 0;
    al__ex_verdicts(&s);
    assert_int_equal(s.n_verdicts, 5);
    static const char *const keys[5] = {"critical_n", "separability", "sensitivity",
                                        "distance_linear", "convergence"};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(s.verdicts[i].key, keys[i]);
        assert_string_equal(s.verdicts[i].verdict,
                            "not run" /* issue 15: an experiment left out reads "not run" */);
        assert_string_equal(s.verdicts[i].measured, "not run");
        assert_non_null(s.verdicts[i].reading);
    }
    assert_string_equal(s.verdicts[0].why, "Algorithm 3 was not run."); /* no caveat */
}

static void test_verdict_critical_n(void **state) {
    (void)state;
    static const int Ls[] = {128, 256, 512}, N3[] = {4, 8, 16, 32};
    int c01[3] = {8, 16, 32}, c05[3] = {8, 16, -1};
    al__summary s;
    paper_model(&s);
    s.experiments = AL_EXP_ALG3;
    s.nL = 3, s.Ls = Ls, s.nN3 = 4, s.N3 = N3;
    s.a3_crit[0] = c01, s.a3_crit[1] = c05;
    s.a3_slope[0] = 0.0625, s.a3_slope[1] = 0.05;
    al__ex_verdicts(&s);
    expect(&s, "critical_n", "holds");
    assert_non_null(strstr(find(&s, "critical_n")->measured, "L=512: 32"));
    assert_non_null(strstr(find(&s, "critical_n")->measured, "L=512: 32 (0.062 L)"));
    s.a3_slope[0] = 0.2; /* the slope is our summary: the verdict reads N_crit / L per L */
    al__ex_verdicts(&s);
    expect(&s, "critical_n", "holds");
    c01[1] = 32; /* N_crit / L = 0.125 > 0.12 at L = 256 */
    al__ex_verdicts(&s);
    expect(&s, "critical_n", "does not hold");
    c01[1] = 16;
    c01[1] = c01[2] = -1; /* not reached where the grid stops below L - 1: untestable there */
    al__ex_verdicts(&s);
    expect(&s, "critical_n", "not testable on this model");
    assert_non_null(strstr(find(&s, "critical_n")->measured, "L=256: not reached for N <= 32"));
    static const int N3b[] = {4, 8, 16, 32, 127, 255, 511}; /* the grid reaches L - 1 */
    s.nN3 = 7, s.N3 = N3b;
    al__ex_verdicts(&s);
    expect(&s, "critical_n", "does not hold"); /* p < 0.01 up to N = L - 1 */
    assert_non_null(strstr(find(&s, "critical_n")->measured, "not reached for N <= L - 1 = 255"));
    s.nN3 = 4, s.N3 = N3;
    c01[1] = c01[2] = 16;
    s.n_layer = 1, s.n_head = 4; /* 4 heads: the KS test has no power */
    snprintf(s.family, sizeof s.family, "llama");
    al__ex_verdicts(&s);
    expect(&s, "critical_n", "not testable on this model");
    const char *why = find(&s, "critical_n")->why;
    assert_non_null(strstr(why, "Only 4 heads"));
    assert_true(!strncmp(why, "Measured on gpt2 (llama family, 1 x 4 heads)", 44));
}

static void test_verdict_separability(void **state) {
    (void)state;
    static const int N4[] = {1, 4, 16, 64};
    al_five r[4];
    const double med[4] = {0.95, 0.9, 0.8, 0.75};
    for (int i = 0; i < 4; i++) r[i] = (al_five){0, 0, med[i], 0, 0, 0};
    al__summary s;
    paper_model(&s);
    s.experiments = AL_EXP_ALG4, s.nN4 = 4, s.N4 = N4, s.a4_ratio = r, s.long_L = 128;
    al__ex_verdicts(&s);
    expect(&s, "separability", "holds");
    assert_string_equal(find(&s, "separability")->measured,
                        "median over heads: N=1: 0.950, N=4: 0.900, N=16: 0.800, N=64: 0.750");
    r[3].median = 0.5; /* leaves the band after N = 16 */
    al__ex_verdicts(&s);
    expect(&s, "separability", "does not hold");
    s.nN4 = 3, s.N4 = (const int[]){1, 4, 16}; /* no N > 16 */
    al__ex_verdicts(&s);
    expect(&s, "separability", "not testable on this model");
}

static void test_verdict_sensitivity(void **state) {
    (void)state;
    static const double T[] = {0.001, 0.01, 0.1, 1, 10}, eps[] = {0.1, 0.001};
    double g[10];
    /* g = 0.2 / T at the smallest eps (index 1): slope -1 below 0.1, g(0.01)/g(1) = 100 */
    for (int t = 0; t < 5; t++) g[t * 2 + 0] = 7, g[t * 2 + 1] = 0.2 / T[t];
    al__summary s;
    paper_model(&s);
    s.synthetic = 1;
    s.experiments = AL_EXP_ALG5, s.nT = 5, s.T = T, s.nE = 2, s.eps = eps, s.g = g;
    al__ex_verdicts(&s);
    expect(&s, "sensitivity", "holds");
    const al__verdict *v = find(&s, "sensitivity");
    assert_non_null(
        strstr(v->measured, "slope of g below T = 0.1: -1.000 (eps = 0.001, 3 points)"));
    assert_non_null(strstr(v->measured, "g(T=0.01)/g(T=1) = 100"));
    assert_true(!strncmp(v->why, "Random weights (synthetic checkpoint)", 37));
    for (int t = 0; t < 5; t++) g[t * 2 + 1] = 1; /* flat: slope 0, no drop */
    al__ex_verdicts(&s);
    expect(&s, "sensitivity", "does not hold");
}

static void test_verdict_distance_and_convergence(void **state) {
    (void)state;
    static const int Ls[] = {8, 16, 32}, N2[] = {1, 10};
    al_five d1[3], d2[2], e2[2];
    for (int i = 0; i < 3; i++) d1[i] = (al_five){0, 0, 0, 0, 0, 2.0 * Ls[i]}; /* mean 2 L */
    d2[0] = (al_five){0, 0, 0, 0, 0, 2}, d2[1] = (al_five){0, 0, 0, 0, 0, 1.1};
    e2[0] = e2[1] = (al_five){0, 0, 0, 0, 0, 1};
    al__summary s;
    paper_model(&s);
    s.experiments = AL_EXP_ALG1 | AL_EXP_ALG2;
    s.nL = 3, s.Ls = Ls, s.a1_dtilde = d1;
    s.nN2 = 2, s.N2 = N2, s.a2_dtilde = d2, s.a2_E = e2, s.long_L = 64;
    al__ex_verdicts(&s);
    expect(&s, "distance_linear", "holds");
    assert_string_equal(
        find(&s, "distance_linear")->measured,
        "log-log slope of mean dtilde vs L: 1.000 (L = 8..32); dtilde from 16 to 64");
    /* gaps |2 - 1| / 1 = 1 at N = 1 and 0.1 at N = 10: below half */
    expect(&s, "convergence", "holds");
    assert_string_equal(find(&s, "convergence")->measured,
                        "|mean dtilde - mean E| / mean E: 1 at N = 1, 0.1 at N = 10 (L = 64)");
    for (int i = 0; i < 3; i++) d1[i].mean = 5; /* flat in L */
    d2[1].mean = 1.6;                           /* gap 0.6: not below 0.5 */
    al__ex_verdicts(&s);
    expect(&s, "distance_linear", "does not hold");
    expect(&s, "convergence", "does not hold");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alg1_means_and_summaries),
        cmocka_unit_test(test_alg3_critical_n),
        cmocka_unit_test(test_alg5_g_and_flags),
        cmocka_unit_test(test_vanishing_band),
        cmocka_unit_test(test_verdicts_not_run),
        cmocka_unit_test(test_verdict_critical_n),
        cmocka_unit_test(test_verdict_separability),
        cmocka_unit_test(test_verdict_sensitivity),
        cmocka_unit_test(test_verdict_distance_and_convergence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
