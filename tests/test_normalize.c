/* test_normalize.c: the normalizers of METHOD section 7 against independent references:
 * closed forms (uniform rows, two equal logits, a two-logit row whose spectral norm is
 * 1/(T (1 + cosh(L/T)))), brute force (sparsemax and 1.5-entmax by enumerating every support
 * and checking the KKT conditions), finite differences for every Jacobian (JVP, VJP, dense),
 * LAPACK's dsyev eigenvalues of a Jacobian built here for the spectral norms, property tests on
 * >= 100,000 seeded rows, edge cases and errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnlim.h"

/* LAPACK (OpenBLAS): eigenvalues of a dense symmetric matrix, the independent reference. */
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info, size_t l1, size_t l2);

#define MAXN 256

/* ---- helpers ----------------------------------------------------------------------------- */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double rng_unif(rng_t *r) {
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}
static double rng_normal(rng_t *r) {
    double u1 = ((double)(rng_next(r) >> 11) + 0.5) * 0x1.0p-53, u2 = rng_unif(r);
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* a random row: Gaussian logits with a random scale, sometimes with ties and outliers */
static void random_row(rng_t *r, double *z, int n) {
    double sd = exp(rng_unif(r) * 6 - 3);
    for (int i = 0; i < n; i++) z[i] = sd * rng_normal(r);
    if (n >= 3 && rng_unif(r) < 0.2) z[1] = z[0];                /* a tie */
    if (n >= 3 && rng_unif(r) < 0.1) z[2] = z[0] + 20 * sd;      /* a dominant logit */
    if (n >= 4 && rng_unif(r) < 0.1) z[3] = round(z[3] * 4) / 4; /* coarse values */
}

static al_norm make(al_norm_kind k, double T) {
    al_norm nm = al_norm_default(k);
    nm.temperature = T;
    return nm;
}

static const al_norm_kind all_kinds[] = {
    AL_NORM_SOFTMAX, AL_NORM_SPARSEMAX,  AL_NORM_ENTMAX15,       AL_NORM_ENTMAX,
    AL_NORM_SSMAX,   AL_NORM_SA_SOFTMAX, AL_NORM_SA_SOFTMAX_NORM};
#define N_KINDS ((int)(sizeof all_kinds / sizeof all_kinds[0]))

static double eig_max_abs(double *A, int n) { /* A [n, n] symmetric, destroyed */
    double w[MAXN], work[MAXN * 8];
    int lwork = MAXN * 8, info = 0;
    dsyev_("N", "U", &n, A, &n, w, work, &lwork, &info, 1, 1);
    assert_int_equal(info, 0);
    return fmax(fabs(w[0]), fabs(w[n - 1]));
}

/* ---- closed forms ---------------------------------------------------------------------- */

static void test_uniform_rows(void **state) {
    (void)state;
    al_error err;
    const double Ts[] = {1e-6, 0.01, 1, 3.5, 1e6};
    for (int n = 1; n <= 40; n += 3)
        for (int t = 0; t < 5; t++) {
            double z[64], p[64], T = Ts[t];
            for (int i = 0; i < n; i++) z[i] = 0.75;
            for (int k = 0; k < N_KINDS; k++) {
                al_norm nm = make(all_kinds[k], T);
                if (!al_norm_sums_to_one(&nm)) continue;
                assert_int_equal(al_norm_forward(&nm, z, n, p, &err), 0);
                for (int i = 0; i < n; i++) assert_true(fabs(p[i] - 1.0 / n) <= 1e-15);
                /* spectral norm: the rank-one form has eigenvalue g (multiplicity n-1) */
                double g, s;
                switch (all_kinds[k]) {
                case AL_NORM_SOFTMAX:
                    g = 1.0 / n / T;
                    break;
                case AL_NORM_SSMAX:
                    g = 0.43 * log((double)n) / n / T;
                    break;
                case AL_NORM_SPARSEMAX:
                    g = 1.0 / T;
                    break;
                case AL_NORM_ENTMAX15:
                    g = sqrt(1.0 / n) / T;
                    break;
                default:
                    g = pow(1.0 / n, 0.5) / T;
                    break; /* entmax alpha = 1.5: p^(2-alpha) */
                }
                if (n == 1) g = 0;
                assert_int_equal(al_norm_spectral_norm(&nm, z, n, &s, &err), 0);
                assert_true(fabs(s - g) <= 1e-14 * g + 1e-300);
            }
        }
}

static void test_two_equal_logits(void **state) {
    (void)state;
    al_error err;
    /* n = 2, equal logits: p = (1/2, 1/2), ||J||_2 = 1/(2T) exactly; also with far-away others */
    for (int e = -6; e <= 6; e++) {
        double T = pow(10.0, e), s;
        al_norm nm = make(AL_NORM_SOFTMAX, T);
        double z2[2] = {1.25, 1.25};
        assert_int_equal(al_norm_spectral_norm(&nm, z2, 2, &s, &err), 0);
        assert_true(fabs(s - 0.5 / T) <= 1e-15 * (0.5 / T));
        double z5[5] = {3, -1e30, 3, -1e30, -1e30};
        assert_int_equal(al_norm_spectral_norm(&nm, z5, 5, &s, &err), 0);
        assert_true(fabs(s - 0.5 / T) <= 1e-15 * (0.5 / T));
        double bs, bp;
        al_norm_bounds(&nm, 5, &bs, &bp);
        assert_true(fabs(bs - 0.5 / T) <= 1e-15 * bs);
        assert_true(fabs(bp - fmin(0.25 / T, sqrt(2.0))) <= 1e-15 * bp);
    }
}

static void test_two_logits_closed_form(void **state) {
    (void)state;
    /* z = (L, 0): J = p1 p2 [[1, -1], [-1, 1]] / T, ||J||_2 = 2 p1 p2 / T = 1 / (T (1 + cosh(L/T)))
     */
    al_error err;
    rng_t r = {11};
    for (int it = 0; it < 2000; it++) {
        double T = exp(rng_unif(&r) * 10 - 5), L = (rng_unif(&r) - 0.5) * 60 * T;
        double z[2] = {L, 0}, s, f;
        al_norm nm = make(AL_NORM_SOFTMAX, T);
        assert_int_equal(al_norm_spectral_norm(&nm, z, 2, &s, &err), 0);
        double ref = 1.0 / (T * (1 + cosh(L / T)));
        assert_true(fabs(s - ref) <= 1e-13 * ref);
        /* Frobenius: 2 p1 p2 / T as well (the eigenvalues are 2 p1 p2 and 0) */
        assert_int_equal(al_norm_frobenius_norm(&nm, z, 2, &f, &err), 0);
        assert_true(fabs(f - ref) <= 1e-13 * ref);
    }
}

static void test_one_dominant_logit(void **state) {
    (void)state;
    al_error err;
    double z[6] = {1e30, 0, -3, 1, 2, -1e30}, p[6], s;
    for (int k = 0; k < N_KINDS; k++) {
        al_norm nm = make(all_kinds[k], 1.0);
        if (!al_norm_sums_to_one(&nm)) continue;
        assert_int_equal(al_norm_forward(&nm, z, 6, p, &err), 0);
        assert_true(p[0] == 1.0);
        for (int i = 1; i < 6; i++) assert_true(p[i] == 0.0);
        assert_int_equal(al_norm_spectral_norm(&nm, z, 6, &s, &err), 0);
        assert_true(s == 0.0);
    }
    /* softmax with a moderate gap: p = (1-e, e/(n-1), ...): ||J|| ~ p_1 (1 - p_1) (1 + small) */
    double z2[3] = {40, 0, 0};
    al_norm nm = make(AL_NORM_SOFTMAX, 1.0);
    assert_int_equal(al_norm_spectral_norm(&nm, z2, 3, &s, &err), 0);
    /* exact: for p = (a, b, b) the tie gives eigenvalue b (vector (0, 1, -1)); on the span of
     * e1 and f = (0, 1, 1)/sqrt2 the matrix is [a(1-a), -sqrt2 a b; -sqrt2 a b, b - 2 b^2] */
    double e = exp(-40.0), a = 1 / (1 + 2 * e), b = e / (1 + 2 * e);
    double m11 = a * (2 * b), m22 = b - 2 * b * b, m12 = -sqrt(2.0) * a * b; /* 1 - a = 2b */
    double tr = m11 + m22, det = m11 * m22 - m12 * m12;
    double lam = 0.5 * (tr + sqrt(tr * tr - 4 * det));
    double lmax = fmax(lam, b);
    assert_true(fabs(s - lmax) <= 1e-12 * lmax);
}

/* ---- brute force: every support ----------------------------------------------------------- */

/* Sparsemax (q = 1) or 1.5-entmax (q = 2) of x [n] (n <= 12) by enumerating supports S: tau from
 * sum_S (x - tau)^q = 1, accepted when x_i > tau on S and x_i <= tau off S (KKT). */
static int brute_sparse(const double *x, int n, int q, double *p) {
    int found = 0;
    for (unsigned mask = 1; mask < (1u << n); mask++) {
        double k = 0, s = 0;
        for (int i = 0; i < n; i++)
            if (mask >> i & 1) {
                k++;
                s += x[i];
            }
        double tau;
        if (q == 1)
            tau = (s - 1) / k;
        else {
            double mean = s / k, var = 0;
            for (int i = 0; i < n; i++)
                if (mask >> i & 1) var += (x[i] - mean) * (x[i] - mean);
            double d = 1.0 / k - var / k;
            if (d < 0) continue;
            tau = mean - sqrt(d);
        }
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            int in = mask >> i & 1;
            if (in && !(x[i] > tau - 1e-12)) ok = 0;
            if (!in && !(x[i] <= tau + 1e-12)) ok = 0;
        }
        if (!ok) continue;
        for (int i = 0; i < n; i++) {
            double d = x[i] - tau;
            p[i] = (mask >> i & 1) && d > 0 ? (q == 1 ? d : d * d) : 0;
        }
        found = 1;
        break;
    }
    return found;
}

static void test_sparse_brute_force(void **state) {
    (void)state;
    al_error err;
    rng_t r = {21};
    for (int it = 0; it < 6000; it++) {
        int n = 1 + (int)(rng_unif(&r) * 10);
        double z[12], x[12], p[12], ref[12], T = exp(rng_unif(&r) * 4 - 2);
        random_row(&r, z, n);
        for (int q = 1; q <= 2; q++) {
            al_norm nm = make(q == 1 ? AL_NORM_SPARSEMAX : AL_NORM_ENTMAX15, T);
            assert_int_equal(al_norm_forward(&nm, z, n, p, &err), 0);
            for (int i = 0; i < n; i++) x[i] = (q == 1 ? 1.0 : 0.5) * z[i] / T;
            assert_true(brute_sparse(x, n, q, ref));
            for (int i = 0; i < n; i++) assert_true(fabs(p[i] - ref[i]) <= 1e-10);
            /* general entmax at alpha = 2 is sparsemax, at 1.5 it is 1.5-entmax (bisection) */
            al_norm ge = make(AL_NORM_ENTMAX, T);
            ge.alpha = q == 1 ? 2.0 : 1.5;
            assert_int_equal(al_norm_forward(&ge, z, n, p, &err), 0);
            for (int i = 0; i < n; i++) assert_true(fabs(p[i] - ref[i]) <= 1e-9);
        }
    }
}

/* ---- finite differences -------------------------------------------------------------------- */

static void test_finite_differences(void **state) {
    (void)state;
    al_error err;
    rng_t r = {31};
    int checked = 0, skipped = 0;
    const int ns[] = {1, 2, 3, 5, 17, 64};
    for (int k = 0; k < N_KINDS; k++)
        for (int ni = 0; ni < 6; ni++)
            for (int it = 0; it < 30; it++) {
                int n = ns[ni];
                double z[64], v[64], u[64], zp[64], zm[64], pp[64], pm[64], jv[64], ju[64];
                static double J[64 * 64];
                double T = exp(rng_unif(&r) * 3 - 1.5);
                for (int i = 0; i < n; i++) {
                    z[i] = rng_normal(&r);
                    v[i] = rng_normal(&r);
                    u[i] = rng_normal(&r);
                }
                al_norm nm = make(all_kinds[k], T);
                if (all_kinds[k] == AL_NORM_ENTMAX) nm.alpha = 1.2 + 0.5 * rng_unif(&r);
                const double h = 1e-6;
                for (int i = 0; i < n; i++) {
                    zp[i] = z[i] + h * v[i];
                    zm[i] = z[i] - h * v[i];
                }
                assert_int_equal(al_norm_forward(&nm, zp, n, pp, &err), 0);
                assert_int_equal(al_norm_forward(&nm, zm, n, pm, &err), 0);
                /* a support change (sparse kinds) or a min/max change (sa-softmax-norm) between
                 * z - hv and z + hv makes the difference quotient meaningless: skip those */
                int kink = 0;
                for (int i = 0; i < n; i++) kink |= (pp[i] == 0) != (pm[i] == 0);
                if (all_kinds[k] == AL_NORM_SA_SOFTMAX_NORM) {
                    int ap = 0, am = 0, bp = 0, bm = 0;
                    for (int i = 1; i < n; i++) {
                        if (zp[i] < zp[ap]) ap = i;
                        if (zm[i] < zm[am]) am = i;
                        if (zp[i] > zp[bp]) bp = i;
                        if (zm[i] > zm[bm]) bm = i;
                    }
                    kink |= ap != am || bp != bm;
                }
                if (kink) {
                    skipped++;
                    continue;
                }
                assert_int_equal(al_norm_jvp(&nm, z, n, v, jv, &err), 0);
                assert_int_equal(al_norm_vjp(&nm, z, n, u, ju, &err), 0);
                assert_int_equal(al_norm_jacobian(&nm, z, n, J, &err), 0);
                double scale = 0;
                for (int i = 0; i < n; i++) scale = fmax(scale, fabs(jv[i]));
                for (int i = 0; i < n; i++) {
                    double fd = (pp[i] - pm[i]) / (2 * h);
                    assert_true(fabs(fd - jv[i]) <= 1e-6 * (1 + scale) / T);
                    double Jv = 0, Ju = 0;
                    for (int j = 0; j < n; j++) {
                        Jv += J[i * n + j] * v[j];
                        Ju += J[j * n + i] * u[j];
                    }
                    assert_true(fabs(Jv - jv[i]) <= 1e-12 * (1 + scale) / T);
                    assert_true(fabs(Ju - ju[i]) <= 1e-12 * (1 + fabs(ju[i])) / T);
                }
                /* the VJP by finite differences: u . (dp along v) = (J^T u) . v */
                double ufd = 0, vju = 0, su = 0;
                for (int i = 0; i < n; i++) {
                    ufd += u[i] * (pp[i] - pm[i]) / (2 * h);
                    vju += ju[i] * v[i];
                    su += fabs(u[i]) * (1 + scale);
                }
                assert_true(fabs(ufd - vju) <= 1e-6 * (1 + su) / T);
                checked++;
            }
    assert_true(checked > 10 * skipped);
}

/* ---- spectral norms against LAPACK -------------------------------------------------------- */

/* J_x = diag(g) - g g^T / sum(g) built here from p (the definitions of METHOD section 7), with
 * the diagonal of the largest entry as g (sum of the others) / sum (no cancellation). */
static double ref_spectral_rank1(const double *p, int n, al_norm_kind kind, double alpha) {
    static double A[MAXN * MAXN];
    double g[MAXN], s = 0;
    for (int i = 0; i < n; i++) {
        if (!(p[i] > 0))
            g[i] = 0;
        else if (kind == AL_NORM_SPARSEMAX)
            g[i] = 1;
        else if (kind == AL_NORM_ENTMAX15)
            g[i] = sqrt(p[i]);
        else if (kind == AL_NORM_ENTMAX)
            g[i] = pow(p[i], 2 - alpha);
        else
            g[i] = p[i];
        s += g[i];
    }
    for (int i = 0; i < n; i++) {
        double others = 0;
        for (int j = 0; j < n; j++) {
            A[i * n + j] = -g[i] * g[j] / s;
            if (j != i) others += g[j];
        }
        A[i * n + i] = g[i] * others / s;
    }
    return eig_max_abs(A, n);
}

static void test_spectral_vs_lapack(void **state) {
    (void)state;
    al_error err;
    rng_t r = {41};
    const al_norm_kind kinds[] = {AL_NORM_SOFTMAX, AL_NORM_SPARSEMAX, AL_NORM_ENTMAX15,
                                  AL_NORM_ENTMAX, AL_NORM_SSMAX};
    for (int it = 0; it < 1500; it++) {
        int n = 1 + (int)(pow(rng_unif(&r), 2) * 160);
        double z[MAXN], p[MAXN], s, T = exp(rng_unif(&r) * 8 - 4);
        random_row(&r, z, n);
        al_norm nm = make(kinds[it % 5], T);
        if (nm.kind == AL_NORM_ENTMAX) nm.alpha = 1.05 + 2 * rng_unif(&r);
        assert_int_equal(al_norm_forward(&nm, z, n, p, &err), 0);
        assert_int_equal(al_norm_spectral_norm(&nm, z, n, &s, &err), 0);
        double c = 1 / T;
        if (nm.kind == AL_NORM_SSMAX) c *= 0.43 * log((double)n);
        double ref = c * ref_spectral_rank1(p, n, nm.kind, nm.alpha);
        /* LAPACK's eigenvalues are accurate to eps * ||J|| = eps * ref (J is PSD) */
        assert_true(fabs(s - ref) <= 1e-11 * ref + 1e-300);
        /* and the one-call form agrees */
        double p2[MAXN], s2;
        assert_int_equal(al_norm_forward_spectral(&nm, z, n, p2, &s2, &err), 0);
        assert_true(s2 == s);
        for (int i = 0; i < n; i++) assert_true(p2[i] == p[i]);
    }
}

/* sa-softmax: J is not symmetric; its largest singular value is sqrt(lambda_max(J^T J)) */
static void test_spectral_sa_vs_lapack(void **state) {
    (void)state;
    al_error err;
    rng_t r = {51};
    static double J[MAXN * MAXN], A[MAXN * MAXN];
    for (int it = 0; it < 300; it++) {
        int n = 1 + (int)(pow(rng_unif(&r), 2) * 120);
        double z[MAXN], s, T = exp(rng_unif(&r) * 4 - 2);
        random_row(&r, z, n);
        al_norm nm = make(it % 2 ? AL_NORM_SA_SOFTMAX : AL_NORM_SA_SOFTMAX_NORM, T);
        assert_int_equal(al_norm_jacobian(&nm, z, n, J, &err), 0);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double a = 0;
                for (int k = 0; k < n; k++) a += J[k * n + i] * J[k * n + j];
                A[i * n + j] = a;
            }
        double ref = sqrt(eig_max_abs(A, n));
        assert_int_equal(al_norm_spectral_norm(&nm, z, n, &s, &err), 0);
        /* both are exact up to rounding at the scale of J's terms, c (1 + max |z/T|) */
        double zs = 0;
        for (int i = 0; i < n; i++) zs = fmax(zs, fabs(z[i] / T));
        assert_true(fabs(s - ref) <= 1e-7 * ref + 1e-14 * (1 + zs) / T);
    }
}

/* ---- property tests on >= 100,000 rows ------------------------------------------------------ */

static void test_properties(void **state) {
    (void)state;
    al_error err;
    rng_t r = {61};
    long rows = 0;
    for (int it = 0; it < 120000; it++) {
        int n = 1 + (int)(rng_unif(&r) * 48);
        double z[64], p[64], s, T = exp(rng_unif(&r) * 16 - 8);
        random_row(&r, z, n);
        /* softmax: ||J||_2 <= 1/(2T) and >= 0 */
        al_norm sm = make(AL_NORM_SOFTMAX, T);
        assert_int_equal(al_norm_forward_spectral(&sm, z, n, p, &s, &err), 0);
        assert_true(s >= 0 && s <= 0.5 / T * (1 + 1e-12));
        double sum = 0;
        for (int i = 0; i < n; i++) sum += p[i];
        assert_true(fabs(sum - 1) <= 1e-13);
        /* sparsemax / 1.5-entmax / alpha-entmax: on the simplex, with the KKT support:
         * p_i > 0  =>  (a-1) x_i - p_i^(a-1) = tau for one tau;  p_i = 0  =>  (a-1) x_i <= tau */
        for (int q = 0; q < 3; q++) {
            al_norm nm = make(q == 0   ? AL_NORM_SPARSEMAX
                              : q == 1 ? AL_NORM_ENTMAX15
                                       : AL_NORM_ENTMAX,
                              T);
            if (q == 2) nm.alpha = 1.1 + 1.8 * rng_unif(&r);
            double a = q == 0 ? 2.0 : q == 1 ? 1.5 : nm.alpha;
            assert_int_equal(al_norm_forward(&nm, z, n, p, &err), 0);
            double tau = NAN, xmax = -INFINITY, sum2 = 0;
            int support = 0;
            for (int i = 0; i < n; i++) {
                assert_true(p[i] >= 0);
                sum2 += p[i];
                double x = (a - 1) * z[i] / T;
                xmax = fmax(xmax, x);
                if (p[i] > 0 && isnan(tau)) tau = x - pow(p[i], a - 1);
                support += p[i] > 0;
            }
            assert_true(support >= 1);
            assert_true(fabs(sum2 - 1) <= 1e-12);
            double tol = 1e-9 * fmax(1.0, fabs(xmax));
            for (int i = 0; i < n; i++) {
                double x = (a - 1) * z[i] / T;
                if (p[i] > 0)
                    assert_true(fabs(x - pow(p[i], a - 1) - tau) <= tol);
                else
                    assert_true(x <= tau + tol);
            }
            /* the spectral norm lies between the two largest g / T (interlacing) */
            assert_int_equal(al_norm_spectral_norm(&nm, z, n, &s, &err), 0);
            assert_true(s >= 0 && isfinite(s));
            if (a <= 2) assert_true(s <= 1.0 / T * (1 + 1e-12)); /* g = p^(2-a) <= 1 */
        }
        rows++;
    }
    assert_true(rows >= 100000);
}

/* ---- edge cases and errors ----------------------------------------------------------------- */

static void test_n_equals_one(void **state) {
    (void)state;
    al_error err;
    const double vals[] = {-2.5, 0.0, 3.0, 1e30, -1e30};
    for (int v = 0; v < 5; v++)
        for (int k = 0; k < N_KINDS; k++) {
            al_norm nm = make(all_kinds[k], 2.0);
            double z = vals[v], p, s, f, J, jv, one = 1;
            assert_int_equal(al_norm_forward(&nm, &z, 1, &p, &err), 0);
            assert_int_equal(al_norm_spectral_norm(&nm, &z, 1, &s, &err), 0);
            assert_int_equal(al_norm_frobenius_norm(&nm, &z, 1, &f, &err), 0);
            assert_int_equal(al_norm_jacobian(&nm, &z, 1, &J, &err), 0);
            assert_int_equal(al_norm_jvp(&nm, &z, 1, &one, &jv, &err), 0);
            double x = z / 2.0;
            if (all_kinds[k] == AL_NORM_SA_SOFTMAX) { /* x * 1; d/dz = (1 + x - x) / T = 1/T */
                assert_true(p == x);
                assert_true(fabs(J - 0.5) <= 1e-15);
            } else if (all_kinds[k] == AL_NORM_SA_SOFTMAX_NORM) { /* (x - m)/(M - m) */
                assert_true(p == (x > 0 ? 1.0 : 0.0));
                assert_true(fabs(J) <= 1e-14); /* w is constant (1 or 0): J = 0 up to rounding */
            } else {
                assert_true(p == 1.0);
                assert_true(J == 0.0);
            }
            assert_true(fabs(s - fabs(J)) <= 1e-14 && fabs(f - fabs(J)) <= 1e-14);
            assert_true(fabs(jv - J) <= 1e-14);
        }
}

static void test_extreme_temperatures(void **state) {
    (void)state;
    al_error err;
    double z[5] = {0.3, -1.2, 0.31, 2.0, -0.5}, p[5], s;
    for (int k = 0; k < N_KINDS; k++) {
        /* T = 1e6: z/T ~ 1e-6, nearly uniform for the sum-to-one kinds */
        al_norm nm = make(all_kinds[k], 1e6);
        assert_int_equal(al_norm_forward(&nm, z, 5, p, &err), 0);
        for (int i = 0; i < 5; i++) assert_true(isfinite(p[i]));
        if (al_norm_sums_to_one(&nm))
            for (int i = 0; i < 5; i++) assert_true(fabs(p[i] - 0.2) < 1e-5);
        assert_int_equal(al_norm_spectral_norm(&nm, z, 5, &s, &err), 0);
        assert_true(isfinite(s) && s >= 0);
        /* T = 1e-6: one-hot on the max for the sum-to-one kinds */
        nm = make(all_kinds[k], 1e-6);
        assert_int_equal(al_norm_forward(&nm, z, 5, p, &err), 0);
        if (al_norm_sums_to_one(&nm)) {
            assert_true(p[3] == 1.0);
            assert_int_equal(al_norm_spectral_norm(&nm, z, 5, &s, &err), 0);
            assert_true(s == 0.0);
        }
        for (int i = 0; i < 5; i++) assert_true(isfinite(p[i]));
    }
    /* T = 1e6, softmax: ||J||_2 -> 1/(nT) as T grows (p -> uniform) */
    al_norm nm = make(AL_NORM_SOFTMAX, 1e6);
    assert_int_equal(al_norm_spectral_norm(&nm, z, 5, &s, &err), 0);
    assert_true(fabs(s - 0.2 / 1e6) <= 1e-5 * 0.2 / 1e6);
}

static void test_huge_logits(void **state) {
    (void)state;
    al_error err;
    double z[4] = {1e30, -1e30, 1e30, 0}, p[4], s;
    for (int k = 0; k < N_KINDS; k++) {
        al_norm nm = make(all_kinds[k], 1.0);
        assert_int_equal(al_norm_forward(&nm, z, 4, p, &err), 0);
        for (int i = 0; i < 4; i++) assert_true(isfinite(p[i]));
        if (al_norm_sums_to_one(&nm)) {
            assert_true(fabs(p[0] - 0.5) <= 1e-15 && fabs(p[2] - 0.5) <= 1e-15 && p[1] == 0 &&
                        p[3] == 0);
            assert_int_equal(al_norm_spectral_norm(&nm, z, 4, &s, &err), 0);
            assert_true(isfinite(s));
        }
    }
    /* -DBL_MAX and DBL_MAX: the difference overflows; still well defined */
    double w[3] = {DBL_MAX, -DBL_MAX, 0};
    al_norm nm = make(AL_NORM_SOFTMAX, 1.0);
    assert_int_equal(al_norm_forward(&nm, w, 3, p, &err), 0);
    assert_true(p[0] == 1.0 && p[1] == 0.0 && p[2] == 0.0);
    /* sa-softmax: z/T overflows -> an error naming the position */
    nm = make(AL_NORM_SA_SOFTMAX, 1e-300);
    assert_int_not_equal(al_norm_forward(&nm, w, 3, p, &err), 0);
    assert_non_null(strstr(err.msg, "logit 0"));
}

static void test_errors(void **state) {
    (void)state;
    al_error err;
    double z[5] = {1, 2, NAN, 4, 5}, p[5], s;
    for (int k = 0; k < N_KINDS; k++) {
        al_norm nm = make(all_kinds[k], 1.0);
        memset(&err, 0, sizeof err);
        z[2] = NAN;
        assert_int_equal(al_norm_forward(&nm, z, 5, p, &err), AL_E_RANGE);
        assert_non_null(strstr(err.msg, "logit 2"));
        assert_non_null(strstr(err.msg, "NaN"));
        z[2] = INFINITY;
        assert_int_equal(al_norm_spectral_norm(&nm, z, 5, &s, &err), AL_E_RANGE);
        assert_non_null(strstr(err.msg, "logit 2"));
        z[2] = 3;
        z[4] = -INFINITY;
        assert_int_equal(al_norm_jvp(&nm, z, 5, z, p, &err), AL_E_RANGE);
        assert_non_null(strstr(err.msg, "logit 4"));
        z[4] = 5;
        assert_int_not_equal(al_norm_forward(&nm, z, 0, p, &err), 0); /* empty input */
        assert_non_null(strstr(err.msg, "empty"));
        nm.temperature = 0;
        assert_int_equal(al_norm_forward(&nm, z, 5, p, &err), AL_E_RANGE);
        assert_non_null(strstr(err.msg, "temperature"));
        nm.temperature = NAN;
        assert_int_not_equal(al_norm_forward(&nm, z, 5, p, &err), 0);
    }
    al_norm nm = make(AL_NORM_ENTMAX, 1.0);
    nm.alpha = 1.0;
    assert_int_equal(al_norm_forward(&nm, z, 5, p, &err), AL_E_RANGE);
    assert_non_null(strstr(err.msg, "alpha"));
    nm = make(AL_NORM_SSMAX, 1.0);
    nm.ssmax_s = -1;
    assert_int_equal(al_norm_forward(&nm, z, 5, p, &err), AL_E_RANGE);
}

static void test_names(void **state) {
    (void)state;
    al_error err;
    const char *names[] = {"softmax", "sparsemax",  "entmax15",       "entmax",
                           "ssmax",   "sa-softmax", "sa-softmax-norm"};
    for (int k = 0; k < 7; k++) {
        al_norm nm;
        assert_int_equal(al_norm_parse(names[k], &nm, &err), 0);
        assert_int_equal((int)nm.kind, (int)all_kinds[k]);
        assert_string_equal(al_norm_name(nm.kind), names[k]);
        assert_true(nm.temperature == 1.0 && nm.alpha == 1.5 && nm.ssmax_s == 0.43);
        assert_int_equal(al_norm_sums_to_one(&nm), k < 5);
        double bs, bp;
        al_norm_bounds(&nm, 16, &bs, &bp);
        if (k == 0 || k == 4) {
            double c = k == 0 ? 1.0 : 0.43 * log(16.0);
            assert_true(fabs(bs - 0.5 * c) <= 1e-15 &&
                        fabs(bp - fmin(0.25 * c, sqrt(2.0))) <= 1e-15);
        } else
            assert_true(isnan(bs) && isnan(bp));
    }
    al_norm nm;
    assert_int_not_equal(al_norm_parse("softmaxx", &nm, &err), 0);
    assert_non_null(strstr(err.msg, "softmaxx"));
}

/* rows longer than the stack scratch (heap path): closed forms and the KKT support */
static void test_long_rows(void **state) {
    (void)state;
    al_error err;
    int n = 5000;
    double *z = malloc(sizeof(double) * n), *p = malloc(sizeof(double) * n),
           *v = malloc(sizeof(double) * n), *o = malloc(sizeof(double) * n);
    assert_non_null(z);
    assert_non_null(p);
    assert_non_null(v);
    assert_non_null(o);
    for (int k = 0; k < N_KINDS; k++) {
        al_norm nm = make(all_kinds[k], 0.5);
        if (!al_norm_sums_to_one(&nm)) continue;
        for (int i = 0; i < n; i++) z[i] = -1.5;
        double s;
        assert_int_equal(al_norm_forward_spectral(&nm, z, n, p, &s, &err), 0);
        for (int i = 0; i < n; i++) assert_true(fabs(p[i] - 1.0 / n) <= 1e-12 / n);
        double g = all_kinds[k] == AL_NORM_SOFTMAX     ? 1.0 / n
                   : all_kinds[k] == AL_NORM_SSMAX     ? 0.43 * log((double)n) / n
                   : all_kinds[k] == AL_NORM_SPARSEMAX ? 1.0
                                                       : sqrt(1.0 / n);
        assert_true(fabs(s - g / 0.5) <= 1e-13 * g / 0.5);
    }
    rng_t r = {71};
    for (int i = 0; i < n; i++) z[i] = 3 * rng_normal(&r);
    for (int q = 1; q <= 2; q++) {
        al_norm nm = make(q == 1 ? AL_NORM_SPARSEMAX : AL_NORM_ENTMAX15, 0.5);
        assert_int_equal(al_norm_forward(&nm, z, n, p, &err), 0);
        double tau = NAN, sum = 0;
        for (int i = 0; i < n; i++) {
            double x = (q == 1 ? 1.0 : 0.5) * z[i] / 0.5;
            sum += p[i];
            if (p[i] > 0 && isnan(tau)) tau = x - pow(p[i], 1.0 / q);
        }
        assert_true(fabs(sum - 1) <= 1e-12);
        for (int i = 0; i < n; i++) {
            double x = (q == 1 ? 1.0 : 0.5) * z[i] / 0.5;
            if (p[i] > 0)
                assert_true(fabs(x - pow(p[i], 1.0 / q) - tau) <= 1e-12 * (1 + fabs(x)));
            else
                assert_true(x <= tau + 1e-12);
        }
        for (int i = 0; i < n; i++) v[i] = rng_normal(&r);
        assert_int_equal(al_norm_jvp(&nm, z, n, v, o, &err), 0);
        double s;
        assert_int_equal(al_norm_spectral_norm(&nm, z, n, &s, &err), 0);
        assert_true(isfinite(s) && s <= 1 / 0.5 * (1 + 1e-12));
    }
    free(z);
    free(p);
    free(v);
    free(o);
}

/* rank-one spectral norm on given g: ties, zeros, adjacent doubles */
static void test_rank1_edge(void **state) {
    (void)state;
    double g1[4] = {0.5, 0.5, 0, 0};
    assert_true(al_norm_rank1_spectral(g1, 4) == 0.5);
    double g2[3] = {0, 0.7, 0};
    assert_true(al_norm_rank1_spectral(g2, 3) == 0.0);
    double g3[3] = {0.3, nextafter(0.3, 1), 0.4};
    static double A[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            A[i * 3 + j] = (i == j ? g3[i] : 0) - g3[i] * g3[j] / (0.3 + g3[1] + 0.4);
    double ref = eig_max_abs(A, 3);
    assert_true(fabs(al_norm_rank1_spectral(g3, 3) - ref) <= 1e-14 * ref);
    double g4[2] = {1e-300, 1e-300};
    assert_true(al_norm_rank1_spectral(g4, 2) == 1e-300);
    assert_true(al_norm_rank1_spectral(g4, 1) == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_rows),
        cmocka_unit_test(test_two_equal_logits),
        cmocka_unit_test(test_two_logits_closed_form),
        cmocka_unit_test(test_one_dominant_logit),
        cmocka_unit_test(test_sparse_brute_force),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_spectral_vs_lapack),
        cmocka_unit_test(test_spectral_sa_vs_lapack),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_n_equals_one),
        cmocka_unit_test(test_extreme_temperatures),
        cmocka_unit_test(test_huge_logits),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_rank1_edge),
        cmocka_unit_test(test_long_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
