/* test_robust.c: every public function of attnlim.h that takes numeric arrays, fed NaN, +Inf,
 * -Inf, +1e30 and -1e30 (at position 2 of a valid input, in each array argument in turn), a
 * zero-length and a single-element input. The table below holds, for each (function, argument,
 * input), the result attnlim.h documents: an error (its code and words of its message, which
 * name the position where there is one), or success, whose values each adapter then checks
 * against closed forms or independent references (LAPACK for eigenvalues, long double sums,
 * a rank-equivalent input for rank statistics). */
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

extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info, size_t l1, size_t l2);

/* ---- inputs ---------------------------------------------------------------------------- */

typedef enum { IN_NAN, IN_PINF, IN_NINF, IN_BIG, IN_NBIG, IN_EMPTY, IN_ONE, N_IN } in_kind;
static const char *const in_names[N_IN] = {"NaN",   "+Inf",  "-Inf", "+1e30",
                                           "-1e30", "n = 0", "n = 1"};
#define POS 2 /* where the special value goes */
#define NB  5 /* length of the base inputs */

static double special(in_kind k) {
    switch (k) {
    case IN_NAN:
        return NAN;
    case IN_PINF:
        return INFINITY;
    case IN_NINF:
        return -INFINITY;
    case IN_BIG:
        return 1e30;
    case IN_NBIG:
        return -1e30;
    default:
        return 0;
    }
}
static int is_value(in_kind k) {
    return k < IN_EMPTY;
}

/* dst[rows * width] from base: the special value at row POS (column 0) for the value kinds; n
 * (rows) is NB, 0 or 1. Returns the number of rows. */
static int64_t fill(double *dst, const double *base, int64_t width, in_kind k, int inject) {
    memcpy(dst, base, (size_t)(NB * width) * sizeof(double));
    if (inject && is_value(k)) dst[POS * width] = special(k);
    return k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
}

/* What an adapter saw: a failed documented-value check sets why. */
typedef struct run {
    char why[512];
} run;

static void bad(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(run *r, const char *fmt, ...) {
    if (r->why[0]) return; /* the first failure is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
}

static int close_to(double a, double b, double rel) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-300;
}

/* ---- normalizers --------------------------------------------------------------------------- */

static const al_norm_kind kinds[] = {AL_NORM_SOFTMAX,        AL_NORM_SPARSEMAX, AL_NORM_ENTMAX15,
                                     AL_NORM_ENTMAX,         AL_NORM_SSMAX,     AL_NORM_SA_SOFTMAX,
                                     AL_NORM_SA_SOFTMAX_NORM};
#define N_KINDS 7
static const double Z[NB] = {0.5, -1.0, 2.0, 0.25, 1.0};
static const double V[NB] = {0.3, -0.2, 0.5, 0.1, -0.7};

/* Every kind gives the same documented code and message; the values differ by kind. The
 * adapters run each kind and return the first kind's rc after checking that all agree. */
typedef int (*kind_fn)(const al_norm *nm, int arg, in_kind k, run *r, al_error *err);

static int all_kinds(kind_fn f, int arg, in_kind k, run *r, al_error *err) {
    int rc0 = -1;
    char msg0[sizeof err->msg] = "";
    for (int i = 0; i < N_KINDS; i++) {
        al_norm nm = al_norm_default(kinds[i]);
        al_error e = {0};
        int rc = f(&nm, arg, k, r, &e);
        if (r->why[0] && !strstr(r->why, "[")) {
            char w[sizeof r->why];
            snprintf(w, sizeof w, "[%s] %s", al_norm_name(kinds[i]), r->why);
            memcpy(r->why, w, sizeof w);
        }
        if (i == 0) {
            rc0 = rc;
            memcpy(msg0, e.msg, sizeof msg0);
            *err = e;
        } else if (rc != rc0) {
            bad(r, "[%s] rc %d, but %d for softmax (%s)", al_norm_name(kinds[i]), rc, rc0, e.msg);
        } else if (rc && !strstr(e.msg, al_norm_name(kinds[i]))) {
            bad(r, "[%s] the message '%s' does not name the normalizer", al_norm_name(kinds[i]),
                e.msg);
        }
    }
    return rc0;
}

/* the closed forms at a one-hot row (z_POS = +1e30: every sum-to-one kind gives e_POS, J = 0;
 * sa-softmax: p_POS = 1e30 (x s with s = e_POS), J = c e_POS e_POS^T (d(x s)/dx at s = e_POS);
 * sa-softmax-norm: p = e_POS (w = 1 at the max) and J = 0 (the max row of the w-part is zero,
 * s (1 - s) = 0)) and at n = 1 (z = 0.5: p = 1, J = 0; sa-softmax p = z, J = 1; sa-softmax-norm
 * w = 1: p = 1, J = 0). */
static double onehot_p(al_norm_kind kd, int i) {
    if (i != POS) return 0;
    return kd == AL_NORM_SA_SOFTMAX ? 1e30 : 1;
}
static double onehot_J(al_norm_kind kd, int i, int j) {
    return kd == AL_NORM_SA_SOFTMAX && i == POS && j == POS ? 1 : 0;
}
static double one_p(al_norm_kind kd) {
    return kd == AL_NORM_SA_SOFTMAX ? Z[0] : 1;
}
static double one_J(al_norm_kind kd) {
    return kd == AL_NORM_SA_SOFTMAX ? 1 : 0;
}

static int k_forward(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    double z[NB], p[NB];
    int64_t n = fill(z, Z, 1, k, 1);
    int rc = al_norm_forward(nm, z, n, p, err);
    if (rc) return rc;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) bad(r, "p[%lld] = %g", (long long)i, p[i]);
    if (k == IN_BIG)
        for (int i = 0; i < NB; i++)
            if (p[i] != onehot_p(nm->kind, i))
                bad(r, "p[%d] = %g, the one-hot form says %g", i, p[i], onehot_p(nm->kind, i));
    if (k == IN_NBIG) {
        if (p[POS] != 0) bad(r, "p[POS] = %g, not 0", p[POS]);
        if (nm->kind == AL_NORM_SOFTMAX) { /* the other four, as if POS were absent */
            double s = 0;
            for (int i = 0; i < NB; i++) s += i == POS ? 0 : exp(Z[i]);
            for (int i = 0; i < NB; i++)
                if (i != POS && !close_to(p[i], exp(Z[i]) / s, 1e-14))
                    bad(r, "p[%d] = %.17g", i, p[i]);
        }
    }
    if (k == IN_ONE && p[0] != one_p(nm->kind)) bad(r, "p[0] = %g, want %g", p[0], one_p(nm->kind));
    return 0;
}

/* dense J through al_norm_jacobian (checked against finite differences in test_normalize.c) */
static int dense(const al_norm *nm, const double *z, int64_t n, double *J) {
    al_error e;
    return al_norm_jacobian(nm, z, n, J, &e);
}

static int k_product(const al_norm *nm, int arg, in_kind k, run *r, al_error *err, int transpose) {
    double z[NB], v[NB], out[NB], J[NB * NB];
    int64_t n = fill(z, Z, 1, k, arg == 0);
    fill(v, V, 1, k, arg == 1);
    int rc = transpose ? al_norm_vjp(nm, z, n, v, out, err) : al_norm_jvp(nm, z, n, v, out, err);
    if (rc) return rc;
    if (dense(nm, z, n, J)) {
        bad(r, "the dense Jacobian failed where the product did not");
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        long double s = 0, mag = 0;
        for (int64_t j = 0; j < n; j++) {
            double a = transpose ? J[j * n + i] : J[i * n + j];
            s += (long double)a * v[j];
            mag += fabsl((long double)a * v[j]);
        }
        if (!isfinite(out[i]) || fabsl(out[i] - s) > 1e-13L * mag + 1e-300L)
            bad(r, "out[%lld] = %.17g, J%s v = %.17Lg", (long long)i, out[i], transpose ? "^T" : "",
                s);
    }
    return 0;
}
static int k_jvp(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    return k_product(nm, arg, k, r, err, 0);
}
static int k_vjp(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    return k_product(nm, arg, k, r, err, 1);
}

static int k_jacobian(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    double z[NB], J[NB * NB];
    int64_t n = fill(z, Z, 1, k, 1);
    int rc = al_norm_jacobian(nm, z, n, J, err);
    if (rc) return rc;
    for (int64_t i = 0; i < n * n; i++)
        if (!isfinite(J[i])) bad(r, "J[%lld] = %g", (long long)i, J[i]);
    if (k == IN_BIG)
        for (int i = 0; i < NB; i++)
            for (int j = 0; j < NB; j++)
                if (J[i * NB + j] != onehot_J(nm->kind, i, j))
                    bad(r, "J[%d][%d] = %g", i, j, J[i * NB + j]);
    if (k == IN_NBIG && al_norm_sums_to_one(nm))
        for (int i = 0; i < NB; i++)
            if (J[POS * NB + i] != 0 || J[i * NB + POS] != 0)
                bad(r, "row/column POS not zero at %d", i);
    if (k == IN_ONE && J[0] != one_J(nm->kind)) bad(r, "J = %g, want %g", J[0], one_J(nm->kind));
    return 0;
}

/* the largest singular value of J [n, n] by LAPACK (sqrt of lambda_max(J^T J)) */
static double svd_max(const double *J, int n) {
    if (n == 0) return 0;
    double A[NB * NB], w[NB], work[64];
    int lwork = 64, info = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int q = 0; q < n; q++) s += J[q * n + i] * J[q * n + j];
            A[i * n + j] = s;
        }
    dsyev_("N", "U", &n, A, &n, w, work, &lwork, &info, 1, 1);
    return info ? NAN : sqrt(fmax(w[n - 1], 0));
}

static int k_norms(const al_norm *nm, int arg, in_kind k, run *r, al_error *err, int which) {
    (void)arg;
    double z[NB], J[NB * NB], s = 0, p[NB];
    int64_t n = fill(z, Z, 1, k, 1);
    int rc = which == 0   ? al_norm_spectral_norm(nm, z, n, &s, err)
             : which == 1 ? al_norm_frobenius_norm(nm, z, n, &s, err)
                          : al_norm_forward_spectral(nm, z, n, p, &s, err);
    if (rc) return rc;
    if (dense(nm, z, n, J)) {
        bad(r, "the dense Jacobian failed where the norm did not");
        return 0;
    }
    double ref = 0;
    if (which == 1) {
        for (int64_t i = 0; i < n * n; i++) ref += J[i] * J[i];
        ref = sqrt(ref);
    } else
        ref = svd_max(J, (int)n);
    double tol = al_norm_sums_to_one(nm) ? 1e-12 : 1e-6; /* the documented accuracies */
    if (!isfinite(s) || !(fabs(s - ref) <= tol * ref + 1e-14))
        bad(r, "norm %.17g, reference %.17g", s, ref);
    if (which == 2) {
        double q[NB];
        al_error e;
        if (al_norm_forward(nm, z, n, q, &e) || memcmp(p, q, (size_t)n * sizeof(double)))
            bad(r, "forward_spectral's p differs from al_norm_forward's");
    }
    return 0;
}
static int k_spectral(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    return k_norms(nm, arg, k, r, err, 0);
}
static int k_frobenius(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    return k_norms(nm, arg, k, r, err, 1);
}
static int k_fwd_spectral(const al_norm *nm, int arg, in_kind k, run *r, al_error *err) {
    return k_norms(nm, arg, k, r, err, 2);
}

#define KIND_ADAPTER(name, f)                                                                      \
    static int name(int arg, in_kind k, run *r, al_error *err) {                                   \
        return all_kinds(f, arg, k, r, err);                                                       \
    }
KIND_ADAPTER(a_forward, k_forward)
KIND_ADAPTER(a_jvp, k_jvp)
KIND_ADAPTER(a_vjp, k_vjp)
KIND_ADAPTER(a_jacobian, k_jacobian)
KIND_ADAPTER(a_spectral, k_spectral)
KIND_ADAPTER(a_frobenius, k_frobenius)
KIND_ADAPTER(a_fwd_spectral, k_fwd_spectral)

/* al_norm_rank1_spectral: no error channel; NaN outside its domain (g >= 0 finite), 0 for
 * n < 2; else lambda_max of diag(g) - g g^T / sum g by LAPACK. */
static int a_rank1(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    (void)err;
    static const double G[NB] = {0.5, 0.2, 0.3, 0.1, 0.2};
    double g[NB];
    int64_t n = fill(g, G, 1, k, 1);
    double got = al_norm_rank1_spectral(g, n);
    if (k == IN_NAN || k == IN_PINF || k == IN_NINF || k == IN_NBIG) {
        if (!isnan(got)) bad(r, "%g, documented NaN", got);
    } else if (n < 2) {
        if (got != 0) bad(r, "%g, documented 0 for n < 2", got);
    } else { /* +1e30: the matrix is finite (the top row is g_t rest / s, -g_j g_t / s -> -g_j) */
        double s = 0, rest = 0, A[NB * NB], w[NB], work[64];
        for (int i = 0; i < NB; i++) s += g[i];
        for (int i = 0; i < NB; i++) rest += i == POS ? 0 : g[i];
        for (int i = 0; i < NB; i++)
            for (int j = 0; j < NB; j++)
                A[i * NB + j] =
                    i == j ? g[i] * (i == POS ? rest : s - g[i]) / s : -g[i] * (g[j] / s);
        int nn = NB, lwork = 64, info = 0;
        dsyev_("N", "U", &nn, A, &nn, w, work, &lwork, &info, 1, 1);
        if (info || !close_to(got, w[NB - 1], 1e-12)) bad(r, "%.17g, LAPACK %.17g", got, w[NB - 1]);
    }
    return 0;
}

/* al_norm_bounds: T special (arg 0) or n = 0 / 1 (ssmax's scale s log n is 0 there). */
static int a_bounds(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    (void)err;
    for (int ss = 0; ss < 2; ss++) {
        al_norm nm = al_norm_default(ss ? AL_NORM_SSMAX : AL_NORM_SOFTMAX);
        int64_t n = k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
        if (is_value(k)) nm.temperature = special(k);
        double sup, paper;
        al_norm_bounds(&nm, n, &sup, &paper);
        double c = 1 / nm.temperature;
        if (ss) c *= 0.43 * log((double)(n > 1 ? n : 1));
        if (!(nm.temperature > 0) || !isfinite(nm.temperature)) {
            if (!isnan(sup) || !isnan(paper))
                bad(r, "%s: %g %g, documented NaN", al_norm_name(nm.kind), sup, paper);
        } else if (!close_to(sup, 0.5 * c, 1e-15) ||
                   !close_to(paper, fmin(0.25 * c, sqrt(2.0)), 1e-15)) {
            bad(r, "%s: %g %g", al_norm_name(nm.kind), sup, paper);
        }
    }
    return 0;
}

/* ---- metrics (METHOD sections 2-6) -------------------------------------------------------- */

static const double ALPHA[NB] = {0.1, 0.3, 0.25, 0.15, 0.2};
static const double X3[NB * 3] = {1,   0, 0.5, -0.2, 1,   0.3, 0.7, -0.4,
                                  0.1, 0, 0.2, -1,   0.6, 0.6, 0.6};
static const int TOPN[2] = {1, 2};

static al_metrics_opts mopts(void) {
    al_metrics_opts o;
    memset(&o, 0, sizeof o);
    o.top_n = TOPN;
    o.n_top = 2;
    o.distance = 1;
    o.separability = 1;
    return o;
}

/* out is finite for N < n and has rows = 0 (NaN means) for N >= n */
static void check_stats(run *r, const al_topn_stats *out, int64_t n) {
    for (int i = 0; i < 2; i++) {
        const al_topn_stats *s = &out[i];
        double v[] = {s->dtilde, s->dmax, s->E, s->ns_ratio, s->ns_lower, s->ns_upper};
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
            if (TOPN[i] < n && (!isfinite(v[j]) || s->rows != 1))
                bad(r, "N = %d: value %zu is %g (rows %lld)", TOPN[i], j, v[j], (long long)s->rows);
            if (TOPN[i] >= n && (!isnan(v[j]) || s->rows != 0))
                bad(r, "N = %d >= n: value %zu is %g, documented NaN (rows %lld)", TOPN[i], j, v[j],
                    (long long)s->rows);
        }
    }
}

static int a_row_metrics(int arg, in_kind k, run *r, al_error *err) {
    double alpha[NB], x[NB * 3];
    int64_t n = fill(alpha, ALPHA, 1, k, arg == 0);
    fill(x, X3, 3, k, arg == 1);
    al_metrics_opts o = mopts();
    al_topn_stats out[2];
    int rc = al_row_metrics(alpha, x, n, 3, &o, out, err);
    if (rc == 0) check_stats(r, out, n);
    return rc;
}

/* a head of L = n rows: w [n, n] (row t: the weights ALPHA[0..t] renormalised, causal), x [n, 3];
 * the special value at row POS, column 0 (w) or at x[POS][0] */
static int a_head_metrics(int arg, in_kind k, run *r, al_error *err) {
    double w[NB * NB], x[NB * 3], rmax[NB], rent[NB];
    int64_t L = k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
    for (int t = 0; t < NB; t++) {
        double s = 0;
        for (int j = 0; j <= t; j++) s += ALPHA[j];
        for (int j = 0; j < NB; j++) w[t * NB + j] = j <= t ? ALPHA[j] / s : 0;
    }
    if (L == 1) w[0] = 1;
    if (arg == 0 && is_value(k)) w[POS * NB] = special(k);
    memcpy(x, X3, sizeof x);
    if (arg == 1 && is_value(k)) x[POS * 3] = special(k);
    al_metrics_opts o = mopts();
    o.causal = 1;
    al_topn_stats out[2];
    double wl[NB * NB]; /* [L, L] with L = 1 or NB */
    for (int64_t t = 0; t < L; t++)
        for (int64_t j = 0; j < L; j++) wl[t * L + j] = w[t * NB + j];
    int rc = al_head_metrics(wl, x, L, 3, &o, out, rmax, rent, err);
    if (rc) return rc;
    for (int i = 0; i < 2; i++) /* rows with n_t = t + 1 > N: L - N of them */
        if (out[i].rows != (L > TOPN[i] ? L - TOPN[i] : 0))
            bad(r, "N = %d: rows %lld", TOPN[i], (long long)out[i].rows);
    for (int64_t t = 0; t < L; t++)
        if (!isfinite(rmax[t]) || !isfinite(rent[t]))
            bad(r, "row %lld: max %g entropy %g", (long long)t, rmax[t], rent[t]);
    return 0;
}

static int a_row_vanishing(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    double alpha[NB], mx, H, Hn;
    int64_t n = fill(alpha, ALPHA, 1, k, 1);
    int rc = al_row_vanishing(alpha, n, &mx, &H, &Hn, err);
    if (rc) return rc;
    long double m = alpha[0], h = 0; /* the definitions (terms with alpha <= 0 give 0) */
    for (int64_t j = 0; j < n; j++) {
        if (alpha[j] > m) m = alpha[j];
        if (alpha[j] > 0) h -= (long double)alpha[j] * logl(alpha[j]);
    }
    if (!close_to(mx, (double)m, 0) || !close_to(H, (double)h, 1e-14))
        bad(r, "max %.17g H %.17g, want %.17Lg %.17Lg", mx, H, m, h);
    if (n == 1 ? !isnan(Hn) : !close_to(Hn, (double)(h / logl((long double)n)), 1e-14))
        bad(r, "H / log n = %.17g%s", Hn, n == 1 ? " (documented NaN for n = 1)" : "");
    return 0;
}

static int a_vanishing_D(int arg, in_kind k, run *r, al_error *err) {
    static const double Q[NB * 2] = {1, 2, -0.5, 0.3, 0.8, 0.8, 0, 1, 2, -1};
    static const double K[NB * 2] = {0.2, 0.1, 1, -1, 0.4, 0.4, 3, 0, -0.1, 0.5};
    double q[NB * 2], kk[NB * 2], D[NB];
    int64_t L = fill(q, Q, 2, k, arg == 0);
    fill(kk, K, 2, k, arg == 1);
    int rc = al_head_vanishing_D(q, kk, L, 2, 1, D, err);
    if (rc) return rc;
    long double run_max = 0; /* the definition, in long double */
    for (int64_t t = 0; t < L; t++) {
        long double nk =
            sqrtl((long double)kk[2 * t] * kk[2 * t] + (long double)kk[2 * t + 1] * kk[2 * t + 1]);
        if (nk > run_max) run_max = nk;
        long double nq =
            sqrtl((long double)q[2 * t] * q[2 * t] + (long double)q[2 * t + 1] * q[2 * t + 1]);
        double want = (double)(nq * run_max / sqrtl(2.0L));
        if (!close_to(D[t], want, 1e-14))
            bad(r, "D[%lld] = %.17g, want %.17g", (long long)t, D[t], want);
    }
    return 0;
}

/* logits z [n, n] (causal); the special value at z[POS][0] (arg 0), in temps (arg 1) or eps
 * (arg 2) */
static int a_sensitivity(int arg, in_kind k, run *r, al_error *err) {
    double z[NB * NB];
    int64_t L = k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
    for (int i = 0; i < NB * NB; i++) z[i] = sin(1.0 + i);
    if (arg == 0 && is_value(k)) z[POS * NB] = special(k);
    double temps[2] = {1.0, 0.5}, eps[2] = {1e-4, 1e-6};
    if (arg == 1 && is_value(k)) temps[1] = special(k);
    if (arg == 2 && is_value(k)) eps[1] = special(k);
    if (arg == 0 && L == 1) z[0] = 0.3;
    al_norm nm = al_norm_default(AL_NORM_SOFTMAX);
    double fd[4], spec[2];
    int rc = al_head_sensitivity(z, L, 1, &nm, temps, 2, eps, 2, 7, 0, 0, fd, spec, err);
    if (rc) return rc;
    for (int i = 0; i < 2; i++) {
        int none = L < 2; /* rows with n_t >= 2 enter: none for L <= 1 */
        if (none ? !isnan(spec[i]) : !(isfinite(spec[i]) && spec[i] >= 0))
            bad(r, "spec_mean[%d] = %g%s", i, spec[i], none ? " (no rows: documented NaN)" : "");
        for (int j = 0; j < 2; j++)
            if (none ? !isnan(fd[i * 2 + j]) : !isfinite(fd[i * 2 + j]))
                bad(r, "fd_mean[%d][%d] = %g", i, j, fd[i * 2 + j]);
    }
    return 0;
}

/* one row z [n] in direction v [n]; the special value in z (arg 0), v (1), temps (2), eps (3).
 * Checked: spec against al_norm_spectral_norm at z / T, fd against its definition in long
 * double through al_norm_forward. */
static int a_row_sensitivity(int arg, in_kind k, run *r, al_error *err) {
    double z[NB], v[NB], temps[2] = {1.0, 0.5}, eps[2] = {1e-4, 1e-6}, fd[4], spec[2];
    int64_t n = fill(z, Z, 1, k, arg == 0);
    fill(v, V, 1, k, arg == 1);
    if (arg == 2 && is_value(k)) temps[1] = special(k);
    if (arg == 3 && is_value(k)) eps[1] = special(k);
    al_norm nm = al_norm_default(AL_NORM_SOFTMAX);
    int rc = al_row_sensitivity(z, n, &nm, temps, 2, eps, 2, v, fd, spec, err);
    if (rc) return rc;
    for (int i = 0; i < 2; i++) {
        al_norm t = nm;
        t.temperature = temps[i];
        double s = 0, p0[NB], p1[NB], zz[NB];
        al_error e;
        if (al_norm_spectral_norm(&t, z, n, &s, &e) || !close_to(spec[i], s, 1e-12))
            bad(r, "spec[%d] = %.17g, al_norm_spectral_norm %.17g", i, spec[i], s);
        for (int j = 0; j < 2; j++) {
            for (int64_t q = 0; q < n; q++) zz[q] = z[q] + eps[j] * v[q];
            if (al_norm_forward(&t, z, n, p0, &e) || al_norm_forward(&t, zz, n, p1, &e)) {
                bad(r, "forward failed");
                continue;
            }
            long double d2 = 0;
            for (int64_t q = 0; q < n; q++)
                d2 += ((long double)p1[q] - p0[q]) * ((long double)p1[q] - p0[q]);
            double want = (double)(sqrtl(d2) / eps[j]);
            if (!(fabs(fd[i * 2 + j] - want) <= 1e-9 * want + 1e-12))
                bad(r, "fd[%d][%d] = %.17g, the definition %.17g", i, j, fd[i * 2 + j], want);
        }
    }
    return 0;
}

/* ---- statistics ------------------------------------------------------------------------ */

static const double SA[NB] = {0.1, 0.4, 0.35, 0.8, 0.9};
static const double SB[NB] = {0.2, 0.5, 0.6, 0.7, 0.05};

static int a_ks(int arg, in_kind k, run *r, al_error *err) {
    double a[NB], b[NB], st, p;
    int64_t n = fill(a, SA, 1, k, arg == 0);
    fill(b, SB, 1, k, arg == 1);
    int64_t na = arg == 0 ? n : NB, nb = arg == 1 ? n : NB;
    int rc = al_ks_2samp(a, (size_t)na, b, (size_t)nb, &st, &p, err);
    if (rc) return rc;
    if (k ==
        IN_ONE) { /* one value (0.1 or 0.2) among 5, at rank 1 of 6: D = 0.8, Pr(D >= 0.8) = 4/6 */
        if (!close_to(st, 0.8, 1e-15) || !close_to(p, 4.0 / 6.0, 1e-14))
            bad(r, "D %.17g p %.17g", st, p);
        return 0;
    }
    /* the statistic and p depend on ranks only: +-1e30 is the same as 10 / -10 */
    double a2[NB], b2[NB], st2, p2;
    al_error e;
    memcpy(a2, a, sizeof a2);
    memcpy(b2, b, sizeof b2);
    double *t = arg == 0 ? a2 : b2;
    t[POS] = k == IN_BIG ? 10 : -10;
    if (al_ks_2samp(a2, NB, b2, NB, &st2, &p2, &e) || st != st2 || p != p2)
        bad(r, "D %g p %g, rank-equivalent input D %g p %g", st, p, st2, p2);
    return 0;
}

static int a_critical_n(int arg, in_kind k, run *r, al_error *err) {
    static const int N[2] = {1, 4};
    /* [2, 4] per-head means; equal rows at N = 4 (p = 1), disjoint at N = 1 */
    static const double DT[8] = {1, 2, 3, 4, 0.5, 0.6, 0.7, 0.8};
    static const double EE[8] = {5, 6, 7, 8, 0.5, 0.6, 0.7, 0.8};
    double dt[8], ee[8], pv[2] = {-1, -1};
    memcpy(dt, DT, sizeof dt);
    memcpy(ee, EE, sizeof ee);
    int nN = k == IN_EMPTY ? 0 : 2, heads = k == IN_ONE ? 1 : 4;
    if (k == IN_ONE) { /* one head: [2, 1] */
        dt[1] = DT[4];
        ee[1] = EE[4];
    }
    if (is_value(k)) (arg == 0 ? dt : ee)[POS] = special(k);
    int crit = -7;
    int rc = al_critical_n(N, nN, dt, ee, heads, 0.05, pv, &crit, err);
    if (rc) return rc;
    if (k == IN_EMPTY) {
        if (crit != -1) bad(r, "crit %d, documented -1 for nN = 0", crit);
    } else if (k == IN_ONE) { /* one value each: D = 1 when they differ (p = 1), 0 when equal */
        if (pv[0] != 1 || pv[1] != 1 || crit != 1) bad(r, "p %g %g crit %d", pv[0], pv[1], crit);
    } else { /* +-1e30 at POS (N = 1): ranks unchanged at +1e30 for dtilde (3 < 5..8) only if
              * not above; compare with the rank-equivalent +-100 */
        double d2[8], e2[8], q[2];
        int c2;
        al_error e;
        memcpy(d2, dt, sizeof d2);
        memcpy(e2, ee, sizeof e2);
        (arg == 0 ? d2 : e2)[POS] = k == IN_BIG ? 100 : -100;
        if (al_critical_n(N, 2, d2, e2, 4, 0.05, q, &c2, &e) || q[0] != pv[0] || q[1] != pv[1] ||
            c2 != crit)
            bad(r, "p %g %g crit %d; rank-equivalent %g %g %d", pv[0], pv[1], crit, q[0], q[1], c2);
    }
    return 0;
}

static int a_slope(int arg, in_kind k, run *r, al_error *err) {
    (void)err;
    static const double XS[NB] = {1, 2, 3, 4, 5}, YS[NB] = {2.5, 4, 5.5, 8, 10};
    double x[NB], y[NB];
    int64_t n = fill(x, XS, 1, k, arg == 0);
    fill(y, YS, 1, k, arg == 1);
    double s = al_slope_origin(x, y, (size_t)n);
    if (k == IN_NAN || (k == IN_PINF && arg == 0) || (k == IN_NINF && arg == 0)) {
        if (!isnan(s)) bad(r, "%g, documented NaN", s); /* NaN, or Inf / Inf */
    } else if (k == IN_PINF || k == IN_NINF) {
        if (s != special(k)) bad(r, "%g, documented %g", s, special(k)); /* y_i = +-Inf */
    } else if (n == 0) {
        if (!isnan(s)) bad(r, "%g, documented NaN for sum x^2 = 0", s);
    } else {
        long double sxy = 0, sxx = 0;
        for (int64_t i = 0; i < n; i++) {
            sxy += (long double)x[i] * y[i];
            sxx += (long double)x[i] * x[i];
        }
        if (!close_to(s, (double)(sxy / sxx), 1e-14)) bad(r, "%.17g, want %.17Lg", s, sxy / sxx);
    }
    return 0;
}

static int a_five(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    static const double X[NB] = {3, -1, 2, 7, 0.5};
    double x[NB];
    int64_t n = fill(x, X, 1, k, 1);
    al_five f;
    int rc = al_five_number(x, (size_t)n, &f, err);
    if (rc) return rc;
    /* sorted: the closed forms of numpy's linear percentiles at 25/50/75 for n = 5 are the
     * 2nd, 3rd and 4th order statistics */
    double s[NB];
    memcpy(s, x, sizeof s);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (s[j] < s[i]) {
                double t = s[i];
                s[i] = s[j];
                s[j] = t;
            }
    long double sum = 0;
    for (int i = 0; i < n; i++) sum += x[i];
    double want[6] = {s[0],     n == 1 ? s[0] : s[1], n == 1 ? s[0] : s[2], n == 1 ? s[0] : s[3],
                      s[n - 1], (double)(sum / n)};
    double got[6] = {f.min, f.q1, f.median, f.q3, f.max, f.mean};
    for (int i = 0; i < 6; i++)
        if (!close_to(got[i], want[i], 1e-15))
            bad(r, "field %d = %.17g, want %.17g", i, got[i], want[i]);
    return 0;
}

static int a_percentile(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    (void)err;
    static const double S[NB] = {-1, 0.5, 2, 3, 7};
    int64_t n = k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
    double p = is_value(k) ? special(k) : 30;
    double got = al_percentile_sorted(S, (size_t)n, p);
    if (is_value(k) || n == 0) {
        if (!isnan(got)) bad(r, "%g, documented NaN (p = %g, n = %lld)", got, p, (long long)n);
    } else if (got != S[0]) {
        bad(r, "%g: one value is every percentile", got);
    }
    return 0;
}

/* ---- arrays, NPY, numbers ---------------------------------------------------------------- */

/* al_array_alloc / numel / to_f64 / free on a float32 array holding the value (or of shape (0,)
 * and (1,)): values are converted as they are (NaN stays NaN; +-1e30 are exact in float32's
 * range up to rounding to float) */
static int a_arrays(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    int64_t n = k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
    al_array a, d;
    int rc = al_array_alloc(&a, AL_F32, 1, &n, err);
    if (rc) return rc;
    if (al_array_numel(&a) != n) bad(r, "numel %lld", (long long)al_array_numel(&a));
    for (int64_t i = 0; i < n; i++)
        ((float *)a.data)[i] = (float)(i == POS && is_value(k) ? special(k) : Z[i]);
    if ((rc = al_array_to_f64(&a, &d, err))) {
        al_array_free(&a);
        return rc;
    }
    for (int64_t i = 0; i < n; i++) {
        double want = (double)((float *)a.data)[i], got = ((double *)d.data)[i];
        if (!(got == want || (isnan(got) && isnan(want))))
            bad(r, "element %lld: %g, want %g", (long long)i, got, want);
    }
    al_array_free(&a);
    al_array_free(&d);
    al_array_free(&a); /* freeing twice is harmless (data is NULL after the first) */
    return 0;
}

static int a_npy_parse(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    int64_t n = k == IN_EMPTY ? 0 : k == IN_ONE ? 1 : NB;
    unsigned char buf[128 + NB * 8];
    char dict[128];
    int dl = snprintf(dict, sizeof dict,
                      "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld,), }", (long long)n);
    size_t hl = 128 - 10; /* the header padded to 128 bytes */
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hl;
    buf[9] = 0;
    memset(buf + 10, ' ', hl);
    memcpy(buf + 10, dict, (size_t)dl);
    buf[10 + hl - 1] = '\n';
    double v[NB];
    fill(v, Z, 1, k, 1);
    memcpy(buf + 128, v, (size_t)n * 8);
    al_array a;
    int rc = al_npy_parse(buf, 128 + (size_t)n * 8, "x.npy", &a, err);
    if (rc) return rc;
    if (a.ndim != 1 || a.shape[0] != n || a.dtype != AL_F64)
        bad(r, "shape or dtype");
    else if (memcmp(a.data, v, (size_t)n * 8))
        bad(r, "values differ from the file's");
    al_array_free(&a);
    return 0;
}

static int a_npy_empty_buffer(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    (void)r;
    al_array a;
    unsigned char one = 0x93;
    return al_npy_parse(&one, k == IN_EMPTY ? 0 : 1, "y.npy", &a, err);
}

static int a_numbers(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    static const char *const texts[N_IN] = {"0.5 -1 nan 0.25 1",
                                            "0.5 -1 inf 0.25 1",
                                            "0.5 -1 -inf 0.25 1",
                                            "0.5 -1 1e30 0.25 1",
                                            "0.5 -1 -1e30 0.25 1",
                                            "",
                                            "0.5"};
    al_array a;
    int rc = al_parse_numbers(texts[k], strlen(texts[k]), "t.txt", &a, err);
    if (rc) return rc;
    int64_t n = k == IN_ONE ? 1 : NB;
    double v[NB];
    fill(v, Z, 1, k, 1);
    if (a.ndim != 1 || a.shape[0] != n || memcmp(a.data, v, (size_t)n * 8)) bad(r, "values");
    al_array_free(&a);
    return 0;
}

static int a_direction(int arg, in_kind k, run *r, al_error *err) {
    (void)arg;
    (void)err;
    double v[NB];
    int64_t n = k == IN_EMPTY ? 0 : 1;
    int rc = al_sensitivity_direction(1, 0, 0, 0, n, v);
    if (rc == 0 && fabs(v[0]) != 1) bad(r, "v[0] = %g, documented a unit vector", v[0]);
    return rc;
}

/* ---- the table ------------------------------------------------------------------------------ */

typedef int (*adapter)(int arg, in_kind k, run *r, al_error *err);

typedef struct expect {
    int rc;          /* 0 or the documented al_code */
    const char *msg; /* words the message must hold (NULL when rc == 0) */
} expect;

typedef struct row {
    const char *fn, *arg_name;
    adapter run;
    int arg;
    expect e[N_IN]; /* NaN, +Inf, -Inf, +1e30, -1e30, n = 0, n = 1 */
} row;

#define OK                                                                                         \
    { 0, NULL }
#define NORM_Z(what)                                                                               \
    {                                                                                              \
        {AL_E_RANGE, "logit 2 (0-based) is NaN"}, {AL_E_RANGE, "logit 2 (0-based) is +Inf"},       \
            {AL_E_RANGE, "logit 2 (0-based) is -Inf"}, OK, OK,                                     \
            {AL_E_INVALID, "empty input (n = 0)"}, OK                                              \
    }
#define VEC(name)                                                                                  \
    {                                                                                              \
        {AL_E_RANGE, name " element 2 (0-based) is NaN"},                                          \
            {AL_E_RANGE, name " element 2 (0-based) is +Inf"},                                     \
            {AL_E_RANGE, name " element 2 (0-based) is -Inf"}, OK, OK,                             \
            {AL_E_INVALID, "empty input (n = 0)"}, OK                                              \
    }
#define ALL_OK                                                                                     \
    { OK, OK, OK, OK, OK, OK, OK }
#define SENS(what)                                                                                 \
    {                                                                                              \
        {AL_E_RANGE, what " nan at position 2"}, {AL_E_RANGE, what " inf at position 2"},          \
            {AL_E_RANGE, what " -inf at position 2"}, OK, OK,                                      \
            {AL_E_INVALID, "bad row length n = 0"}, OK                                             \
    }
#define POSITIVE(what)                                                                             \
    {                                                                                              \
        {AL_E_INVALID, what " nan at position 1 is not a positive number"},                        \
            {AL_E_INVALID, what " inf at position 1 is not a positive number"},                    \
            {AL_E_INVALID, what " -inf at position 1 is not a positive number"}, OK,               \
            {AL_E_INVALID, what " -1e+30 at position 1 is not a positive number"},                 \
            {AL_E_INVALID, "bad row length n = 0"}, OK                                             \
    }

static const row table[] = {
    {"al_norm_forward", "z", a_forward, 0, NORM_Z()},
    {"al_norm_jvp", "z", a_jvp, 0, NORM_Z()},
    {"al_norm_jvp", "v", a_jvp, 1, VEC("jvp: v")},
    {"al_norm_vjp", "z", a_vjp, 0, NORM_Z()},
    {"al_norm_vjp", "u", a_vjp, 1, VEC("vjp: u")},
    {"al_norm_jacobian", "z", a_jacobian, 0, NORM_Z()},
    {"al_norm_spectral_norm", "z", a_spectral, 0, NORM_Z()},
    {"al_norm_frobenius_norm", "z", a_frobenius, 0, NORM_Z()},
    {"al_norm_forward_spectral", "z", a_fwd_spectral, 0, NORM_Z()},
    {"al_norm_rank1_spectral", "g", a_rank1, 0, ALL_OK},
    {"al_norm_bounds", "T, n", a_bounds, 0, ALL_OK},
    {"al_row_metrics",
     "alpha",
     a_row_metrics,
     0,
     {{AL_E_RANGE, "weights: non-finite value nan at position 2"},
      {AL_E_RANGE, "weights: non-finite value inf at position 2"},
      {AL_E_RANGE, "weights: non-finite value -inf at position 2"},
      OK,
      OK,
      {AL_E_INVALID, "empty row (n = 0)"},
      OK}},
    {"al_row_metrics",
     "x",
     a_row_metrics,
     1,
     {{AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      OK,
      OK,
      {AL_E_INVALID, "empty row (n = 0)"},
      OK}},
    {"al_head_metrics",
     "w",
     a_head_metrics,
     0,
     {{AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      OK,
      OK,
      {AL_E_INVALID, "L = 0"},
      OK}},
    {"al_head_metrics",
     "x",
     a_head_metrics,
     1,
     {{AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      OK,
      OK,
      {AL_E_INVALID, "L = 0"},
      OK}},
    {"al_row_vanishing",
     "alpha",
     a_row_vanishing,
     0,
     {{AL_E_RANGE, "weights: non-finite value nan at position 2"},
      {AL_E_RANGE, "weights: non-finite value inf at position 2"},
      {AL_E_RANGE, "weights: non-finite value -inf at position 2"},
      OK,
      OK,
      {AL_E_INVALID, "empty row (n = 0)"},
      OK}},
    {"al_head_vanishing_D",
     "q",
     a_vanishing_D,
     0,
     {{AL_E_RANGE, "q: non-finite value at row 2, column 0"},
      {AL_E_RANGE, "q: non-finite value at row 2, column 0"},
      {AL_E_RANGE, "q: non-finite value at row 2, column 0"},
      OK,
      OK,
      {AL_E_INVALID, "bad shape (L 0"},
      OK}},
    {"al_head_vanishing_D",
     "k",
     a_vanishing_D,
     1,
     {{AL_E_RANGE, "k: non-finite value at row 2, column 0"},
      {AL_E_RANGE, "k: non-finite value at row 2, column 0"},
      {AL_E_RANGE, "k: non-finite value at row 2, column 0"},
      OK,
      OK,
      {AL_E_INVALID, "bad shape (L 0"},
      OK}},
    {"al_head_sensitivity",
     "z",
     a_sensitivity,
     0,
     {{AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      {AL_E_RANGE, "row 2, column 0"},
      OK,
      OK,
      {AL_E_INVALID, "bad sizes (L 0"},
      OK}},
    {"al_head_sensitivity",
     "temps",
     a_sensitivity,
     1,
     {{AL_E_INVALID, "temperature nan at position 1 is not a positive number"},
      {AL_E_INVALID, "temperature inf at position 1 is not a positive number"},
      {AL_E_INVALID, "temperature -inf at position 1 is not a positive number"},
      OK,
      {AL_E_INVALID, "temperature -1e+30 at position 1 is not a positive number"},
      {AL_E_INVALID, "bad sizes (L 0"},
      OK}},
    {"al_head_sensitivity",
     "eps",
     a_sensitivity,
     2,
     {{AL_E_INVALID, "eps nan at position 1 is not a positive number"},
      {AL_E_INVALID, "eps inf at position 1 is not a positive number"},
      {AL_E_INVALID, "eps -inf at position 1 is not a positive number"},
      OK,
      {AL_E_INVALID, "eps -1e+30 at position 1 is not a positive number"},
      {AL_E_INVALID, "bad sizes (L 0"},
      OK}},
    {"al_row_sensitivity", "z", a_row_sensitivity, 0, SENS("logits: non-finite value")},
    {"al_row_sensitivity", "v", a_row_sensitivity, 1, SENS("direction: non-finite value")},
    {"al_row_sensitivity", "temps", a_row_sensitivity, 2, POSITIVE("temperature")},
    {"al_row_sensitivity", "eps", a_row_sensitivity, 3, POSITIVE("eps")},
    {"al_ks_2samp",
     "a",
     a_ks,
     0,
     {{AL_E_RANGE, "first sample: non-finite value nan at position 2"},
      {AL_E_RANGE, "first sample: non-finite value inf at position 2"},
      {AL_E_RANGE, "first sample: non-finite value -inf at position 2"},
      OK,
      OK,
      {AL_E_INVALID, "empty sample (sizes 0 and 5)"},
      OK}},
    {"al_ks_2samp",
     "b",
     a_ks,
     1,
     {{AL_E_RANGE, "second sample: non-finite value nan at position 2"},
      {AL_E_RANGE, "second sample: non-finite value inf at position 2"},
      {AL_E_RANGE, "second sample: non-finite value -inf at position 2"},
      OK,
      OK,
      {AL_E_INVALID, "empty sample (sizes 5 and 0)"},
      OK}},
    {"al_critical_n",
     "dtilde",
     a_critical_n,
     0,
     {{AL_E_RANGE, "N = 1: ks_2samp: first sample: non-finite value nan at position 2"},
      {AL_E_RANGE, "N = 1: ks_2samp: first sample: non-finite value inf at position 2"},
      {AL_E_RANGE, "N = 1: ks_2samp: first sample: non-finite value -inf at position 2"},
      OK,
      OK,
      OK,
      OK}},
    {"al_critical_n",
     "E",
     a_critical_n,
     1,
     {{AL_E_RANGE, "N = 1: ks_2samp: second sample: non-finite value nan at position 2"},
      {AL_E_RANGE, "N = 1: ks_2samp: second sample: non-finite value inf at position 2"},
      {AL_E_RANGE, "N = 1: ks_2samp: second sample: non-finite value -inf at position 2"},
      OK,
      OK,
      OK,
      OK}},
    {"al_slope_origin", "x", a_slope, 0, ALL_OK},
    {"al_slope_origin", "y", a_slope, 1, ALL_OK},
    {"al_five_number",
     "x",
     a_five,
     0,
     {{AL_E_RANGE, "five_number: non-finite value nan at position 2"},
      {AL_E_RANGE, "five_number: non-finite value inf at position 2"},
      {AL_E_RANGE, "five_number: non-finite value -inf at position 2"},
      OK,
      OK,
      {AL_E_INVALID, "five_number: empty input"},
      OK}},
    {"al_percentile_sorted", "p, n", a_percentile, 0, ALL_OK},
    {"al_array_alloc/numel/to_f64/free", "data", a_arrays, 0, ALL_OK},
    {"al_npy_parse", "data", a_npy_parse, 0, ALL_OK},
    {"al_npy_parse",
     "buffer",
     a_npy_empty_buffer,
     0,
     {{AL_E_FORMAT, "truncated .npy header (1 bytes)"},
      {AL_E_FORMAT, "truncated .npy header (1 bytes)"},
      {AL_E_FORMAT, "truncated .npy header (1 bytes)"},
      {AL_E_FORMAT, "truncated .npy header (1 bytes)"},
      {AL_E_FORMAT, "truncated .npy header (1 bytes)"},
      {AL_E_FORMAT, "y.npy: empty file"},
      {AL_E_FORMAT, "truncated .npy header (1 bytes)"}}},
    {"al_parse_numbers",
     "text",
     a_numbers,
     0,
     {{AL_E_RANGE, "t.txt: line 1, field 3: nan is not finite"},
      {AL_E_RANGE, "t.txt: line 1, field 3: inf is not finite"},
      {AL_E_RANGE, "t.txt: line 1, field 3: -inf is not finite"},
      OK,
      OK,
      {AL_E_INVALID, "t.txt: no numbers in the input"},
      OK}},
    {"al_sensitivity_direction",
     "n",
     a_direction,
     0,
     {OK, OK, OK, OK, OK, {AL_E_INVALID, NULL}, OK}},
};

static void test_table(void **state) {
    (void)state;
    int failures = 0;
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++)
        for (int k = 0; k < N_IN; k++) {
            const row *w = &table[t];
            run r = {{0}};
            al_error err = {0};
            int rc = w->run(w->arg, (in_kind)k, &r, &err);
            const expect *e = &w->e[k];
            char got[1200];
            snprintf(got, sizeof got, "rc %d '%s'", rc, err.msg);
            const char *fault = NULL;
            if (rc != e->rc)
                fault = "wrong code";
            else if (rc && e->msg && !strstr(err.msg, e->msg))
                fault = "message lacks the documented words";
            else if (rc == 0 && r.why[0])
                fault = r.why;
            if (fault) {
                failures++;
                print_message("FAIL %s(%s = %s): %s: %s (documented: rc %d%s%s)\n", w->fn,
                              w->arg_name, in_names[k], fault, got, e->rc, e->msg ? ", " : "",
                              e->msg ? e->msg : "");
            }
        }
    assert_int_equal(failures, 0);
}

/* Beyond the table: the documented non-results at the edge of the double range. */
static void test_double_range(void **state) {
    (void)state;
    al_error err;
    /* five_number: the mean of DBL_MAX values overflows to +Inf (as numpy.mean), rc 0; the
     * order statistics are exact */
    double x[3] = {DBL_MAX, DBL_MAX, 1};
    al_five f;
    assert_int_equal(al_five_number(x, 3, &f, &err), 0);
    assert_true(f.max == DBL_MAX && f.median == DBL_MAX && f.min == 1 && f.mean == INFINITY);
    /* slope_origin: sums of squares beyond DBL_MAX give a non-finite slope (no error channel) */
    double big[2] = {1e200, 2e200};
    assert_false(isfinite(al_slope_origin(big, big, 2)));
    /* critical_n: an empty grid tests nothing and reaches nothing */
    int crit = 5;
    double pv[1];
    assert_int_equal(al_critical_n((const int[]){1}, 0, x, x, 1, 0.05, pv, &crit, &err), 0);
    assert_int_equal(crit, -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_table),
                                       cmocka_unit_test(test_double_range)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
