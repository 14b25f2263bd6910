/* readings.c: the readings of the distance of METHOD sections 3 and 9 and their random-selection
 * counterparts (analytic main term, Monte-Carlo estimate, exact enumeration).
 *
 * With s = sum_{i in I} alpha_i x_i, r = sum_{i not in I} alpha_i x_i, S = r + s, m = n - N:
 *   sum-of-norms  sum_{i not in I} ||alpha_i x_i - s||     (al_head_metrics computes it)
 *   norm-of-sum   ||r - s||                = ||S - 2 s||
 *   sum-vector    ||sum_{i not in I} (alpha_i x_i - s)|| = ||r - m s|| = ||S - (m + 1) s||
 * The two vector readings are ||S - c s|| with c = 2 or m + 1, so a row needs S (O(n d)) and s,
 * which grows by one alpha_j x_j as N walks up the grid: O(d) per N. The subtraction S - c s is
 * done per component (no Gram expansion), so there is no cancellation beyond that of the
 * components themselves.
 *
 * Random selection (I uniform among the C(n, N) subsets; docs/readings.md derives the terms):
 * E[s] = (N/n) S, so E[S - c s] = (1 - c N/n) S and the main term is ||E[v]|| = |1 - cN/n| ||S||:
 * |n - 2N|/n ||S|| (norm-of-sum) and (n-N)(N-1)/n ||S|| (sum-vector). ||.|| being convex, it is
 * a lower bound of the exact expectation E||v|| (Jensen), as the section 3 term E is for
 * sum-of-norms. The Monte-Carlo draws use the same generator and seeding as al_head_metrics'
 * (per row and N). The exact expectation enumerates the subsets in lexicographic order with
 * prefix sums of s (O(d) per subset amortised for the vector readings, O(n d) for
 * sum-of-norms).
 */
#include "metrics.h"
#include "mathx.h"
#include "mv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Compiled once per instruction set (mv.h): the per-row loops over d (S, s, ||S - c s||, the
 * sum-of-norms terms) vectorise with the ISA's width and FMA; al_row_reading and al_head_reading
 * pick their copy at run time. The names, parsers and binomials are in the baseline copy only. */
#if defined(AL_MV_ISA) || defined(AL_MV_DISPATCH)
#define AL_READINGS_PROTOS(f)                                                                      \
    int f(al_row_reading)(const double *, const double *, int64_t, int64_t,                        \
                          const al_reading_opts *, al_reading_stats *, al_error *);                \
    int f(al_head_reading)(const double *, const double *, int64_t, int64_t,                       \
                           const al_reading_opts *, al_reading_stats *, al_error *);               \
    int f(al__head_reading_rank)(const double *, const double *, int64_t, int64_t,                 \
                                 const al_reading_opts *, const uint16_t *, al_reading_stats *,    \
                                 al_error *);                                                      \
    int f(al__head_reading_pair)(const double *, const double *, int64_t, int64_t,                 \
                                 const al_reading_opts *, const uint16_t *, al_reading_stats *,    \
                                 al_distance_kind, al_reading_stats *, al_error *);
#pragma GCC visibility push(hidden) /* the copies: internal, never exported */
AL_MV_FOR_EACH(AL_READINGS_PROTOS)
#pragma GCC visibility pop
#endif

#ifndef AL_MV_ISA

/* ---- names -------------------------------------------------------------------------------- */

const char *al_distance_name(al_distance_kind k) {
    switch (k) {
    case AL_DIST_SUM_OF_NORMS:
        return "sum-of-norms";
    case AL_DIST_NORM_OF_SUM:
        return "norm-of-sum";
    case AL_DIST_SUM_VECTOR:
        return "sum-vector";
    }
    return "?";
}

int al_distance_parse(const char *s, al_distance_kind *out, al_error *err) {
    for (int k = 0; k <= AL_DIST_SUM_VECTOR; k++)
        if (s && !strcmp(s, al_distance_name((al_distance_kind)k))) {
            *out = (al_distance_kind)k;
            return 0;
        }
    return al__err(err, AL_E_INVALID,
                   "--distance: unknown reading '%s' (allowed: sum-of-norms, norm-of-sum, "
                   "sum-vector)",
                   s ? s : "(null)");
}

const char *al_expect_name(al_expect_kind k) {
    switch (k) {
    case AL_EXPECT_ANALYTIC:
        return "analytic";
    case AL_EXPECT_MC:
        return "mc";
    case AL_EXPECT_EXACT:
        return "exact";
    }
    return "?";
}

int al_expect_parse(const char *s, al_expect_kind *out, al_error *err) {
    for (int k = 0; k <= AL_EXPECT_EXACT; k++)
        if (s && !strcmp(s, al_expect_name((al_expect_kind)k))) {
            *out = (al_expect_kind)k;
            return 0;
        }
    return al__err(err, AL_E_INVALID,
                   "--expectation: unknown reading '%s' (allowed: analytic, mc, exact)",
                   s ? s : "(null)");
}

/* ---- binomials and the exact cap ------------------------------------------------------------ */

double al_binomial(int64_t n, int64_t k) {
    if (k < 0 || n < 0 || k > n) return 0;
    if (k > n - k) k = n - k;
    double c = 1;
    for (int64_t i = 1; i <= k; i++) {
        c = c * (double)(n - k + i) / (double)i; /* exact while c (n - k + i) < 2^53 */
        if (!isfinite(c)) return INFINITY;
    }
    return nearbyint(c);
}

int al_exact_check(int64_t n_max, const int *top_n, int n_top, int64_t cap, al_error *err) {
    if (cap > AL_EXACT_MAX_LIMIT)
        return al__err(err, AL_E_INVALID,
                       "exact expectation: cap %lld on C(n, N) above the limit %d", (long long)cap,
                       AL_EXACT_MAX_LIMIT);
    if (cap <= 0) cap = AL_EXACT_MAX_DEFAULT;
    for (int k = 0; k < n_top; k++) {
        int N = top_n[k];
        if (N < 1 || N >= n_max) continue;
        double c = al_binomial(n_max, N);
        if (c > (double)cap)
            return al__err(err, AL_E_INVALID,
                           "--expectation exact: C(n = %lld, N = %d) = %.4g subsets exceeds the "
                           "cap of %lld per row (allowed: every N of the grid with C(L, N) <= "
                           "%lld; use --expectation mc or analytic)",
                           (long long)n_max, N, c, (long long)cap, (long long)cap);
    }
    return 0;
}

#endif /* !AL_MV_ISA */

/* ---- per-call state ------------------------------------------------------------------------- */

typedef struct acc {
    int64_t rows;
    double dist, an, mc, mc_var, ex;
} acc;

typedef struct rws {
    int64_t cap, d;
    int64_t *sel, *perm, *comb;
    unsigned char *mark;
    double *tmp, *S, *s, *v, *P; /* tmp[n], S[d], s[d], v[d], P[(N_max + 1) d] prefix sums */
    void *kvs;                   /* [32 cap bytes] top-K scratch */
    int *ord;                    /* [n_top] grid order by N */
} rws;

static void rws_free(rws *w) {
    free(w->sel);
    free(w->perm);
    free(w->comb);
    free(w->mark);
    free(w->tmp);
    free(w->S);
    free(w->kvs);
    free(w->ord);
    memset(w, 0, sizeof *w);
}

static int rws_build(rws *w, int64_t cap, int64_t d, int nmax, const al_reading_opts *o,
                     al_error *err) {
    memset(w, 0, sizeof *w);
    w->cap = cap;
    w->d = d;
    size_t ni = (size_t)cap * sizeof(int64_t);
    int64_t kp = (nmax < cap ? nmax : cap) + 1;
    w->sel = al__malloc(ni, "readings scratch", err);
    w->perm = al__malloc(ni, "readings scratch", err);
    w->comb = al__malloc(ni, "readings scratch", err);
    w->mark = al__calloc((size_t)cap, 1, "readings scratch", err);
    w->tmp = al__malloc((size_t)cap * sizeof(double), "readings scratch", err);
    w->S = al__malloc((size_t)(3 + kp) * (size_t)d * sizeof(double), "readings scratch", err);
    w->kvs = al__malloc(32 * (size_t)cap, "readings scratch", err);
    w->ord = al__malloc((size_t)(o->n_top > 0 ? o->n_top : 1) * sizeof(int), "N grid", err);
    if (!w->sel || !w->perm || !w->comb || !w->mark || !w->tmp || !w->S || !w->kvs || !w->ord) {
        rws_free(w);
        return AL_E_NOMEM;
    }
    w->s = w->S + d;
    w->v = w->s + d;
    w->P = w->v + d;
    for (int k = 0; k < o->n_top; k++) { /* insertion sort by N */
        int p = k;
        while (p > 0 && o->top_n[w->ord[p - 1]] > o->top_n[k]) {
            w->ord[p] = w->ord[p - 1];
            p--;
        }
        w->ord[p] = k;
    }
    return 0;
}

/* ---- the quantities of one selection -------------------------------------------------------- */

/* ||S - c s||, component by component. */
static double norm_diff(const double *S, double c, const double *s, int64_t d) {
    double t = 0;
#pragma omp simd reduction(+ : t)
    for (int64_t k = 0; k < d; k++) {
        double e = FMA(-c, s[k], S[k]);
        t = FMA(e, e, t);
    }
    return sqrt(t);
}

/* The factor c of the vector readings at (n, N). */
static double vec_factor(al_distance_kind kind, int64_t n, int64_t N) {
    return kind == AL_DIST_NORM_OF_SUM ? 2.0 : (double)(n - N + 1);
}

/* The distance of the selection marked in mark[n] (1 = selected) whose s is given. */
static double distance_of(al_distance_kind kind, const double *a, const double *x, int64_t n,
                          int64_t d, int64_t N, const unsigned char *mark, const double *S,
                          const double *s) {
    if (kind != AL_DIST_SUM_OF_NORMS) return norm_diff(S, vec_factor(kind, n, N), s, d);
    double tot = 0;
    for (int64_t i = 0; i < n; i++) {
        if (mark[i]) continue;
        const double *xi = x + i * d;
        double t2 = 0;
#pragma omp simd reduction(+ : t2)
        for (int64_t k = 0; k < d; k++) {
            double e = FMA(a[i], xi[k], -s[k]);
            t2 = FMA(e, e, t2);
        }
        tot += sqrt(t2);
    }
    return tot;
}

/* Monte-Carlo over S_ samples of uniform N-subsets: mean and sample variance. The draws are
 * al_head_metrics' (same seed mixing, partial Fisher-Yates). */
static void mc_row(al_distance_kind kind, const double *a, const double *x, int64_t n, int64_t d,
                   int64_t N, int S_, uint64_t seed, int64_t row, rws *w, double *mean,
                   double *var) {
    al__rng rng;
    al__rng_seed(
        &rng, al__hash64(seed ^ al__hash64((uint64_t)row * 0x9E3779B97F4A7C15ull + (uint64_t)N)));
    for (int64_t i = 0; i < n; i++) w->perm[i] = i;
    double m = 0, m2 = 0;
    for (int q = 0; q < S_; q++) {
        for (int64_t k = 0; k < N; k++) {
            int64_t j = k + (int64_t)(al__rng_uniform(&rng) * (double)(n - k));
            if (j >= n) j = n - 1;
            int64_t t = w->perm[k];
            w->perm[k] = w->perm[j];
            w->perm[j] = t;
        }
        memset(w->s, 0, (size_t)d * sizeof(double));
        for (int64_t k = 0; k < N; k++) {
            int64_t j = w->perm[k];
            w->mark[j] = 1;
            for (int64_t c = 0; c < d; c++) w->s[c] = FMA(a[j], x[j * d + c], w->s[c]);
        }
        double v = distance_of(kind, a, x, n, d, N, w->mark, w->S, w->s);
        for (int64_t k = 0; k < N; k++) w->mark[w->perm[k]] = 0;
        double dl = v - m; /* Welford */
        m += dl / (double)(q + 1);
        m2 += dl * (v - m);
    }
    *mean = m;
    *var = S_ > 1 ? m2 / (double)(S_ - 1) : NAN;
}

/* The exact expectation: the mean of the distance over every N-subset of n (lexicographic
 * order; P[k] = sum of the first k selected alpha_j x_j, recomputed from the changed position
 * on). */
static double exact_row(al_distance_kind kind, const double *a, const double *x, int64_t n,
                        int64_t d, int64_t N, rws *w) {
    int64_t *c = w->comb;
    for (int64_t k = 0; k < N; k++) c[k] = k;
    memset(w->P, 0, (size_t)d * sizeof(double));
    int64_t from = 0;
    double tot = 0, cnt = 0;
    for (;;) {
        for (int64_t k = from; k < N; k++) {
            const double *pk = w->P + k * d, *xj = x + c[k] * d;
            double *pn = w->P + (k + 1) * d;
            for (int64_t q = 0; q < d; q++) pn[q] = FMA(a[c[k]], xj[q], pk[q]);
        }
        const double *s = w->P + N * d;
        if (kind == AL_DIST_SUM_OF_NORMS)
            for (int64_t k = 0; k < N; k++) w->mark[c[k]] = 1;
        tot += distance_of(kind, a, x, n, d, N, w->mark, w->S, s);
        if (kind == AL_DIST_SUM_OF_NORMS)
            for (int64_t k = 0; k < N; k++) w->mark[c[k]] = 0;
        cnt += 1;
        int64_t k = N - 1; /* the next combination */
        while (k >= 0 && c[k] == n - N + k) k--;
        if (k < 0) break;
        c[k]++;
        for (int64_t q = k + 1; q < N; q++) c[q] = c[q - 1] + 1;
        from = k;
    }
    return tot / cnt;
}

/* One row of the vector readings (and the exact term of every reading) into acc[n_top]; rk[n]
 * the row's ranking (al__head_rank) or NULL. ac2 (NULL: none): the same into ac2[n_top] under the
 * other vector reading kind2, from the same S and s (each the bits of its own call). */
static void vec_row(const al_reading_opts *o, const double *a, const double *x, int64_t n,
                    int64_t d, int64_t row, const uint16_t *rk, rws *w, acc *ac, int vec,
                    al_distance_kind kind2, acc *ac2) {
    memset(w->S, 0, (size_t)d * sizeof(double));
    al__axpy_keys(a, x, d, NULL, 0, n, w->S);
    double nS = 0;
    for (int64_t q = 0; q < d; q++) nS = FMA(w->S[q], w->S[q], nS);
    nS = sqrt(nS);
    int64_t K = 0;
    for (int k = 0; k < o->n_top; k++)
        if (o->top_n[k] < n && o->top_n[k] > K) K = o->top_n[k];
    if (K == 0) return;
    if (vec && rk)
        for (int64_t q = 0; q < K; q++) w->sel[q] = rk[q]; /* al__top_k's K: the prefix */
    else if (vec)
        al__top_k(a, n, K, w->sel, w->kvs, w->tmp);
    int64_t have = 0;
    memset(w->v, 0, (size_t)d * sizeof(double)); /* s of the first `have` selected */
    al_distance_kind kinds[2] = {o->distance, kind2};
    acc *acs[2] = {ac, ac2};
    for (int g = 0; g < o->n_top; g++) {
        int k = w->ord[g];
        int64_t N = o->top_n[k];
        if (N >= n) continue;
        if (vec) {
            al__axpy_keys(a, x, d, w->sel, have, N, w->v);
            have = have > N ? have : N;
        }
        for (int r = 0; r < 2 && acs[r]; r++) {
            acc *t = &acs[r][k];
            al_distance_kind kind = kinds[r];
            t->rows++;
            if (vec) {
                t->dist += norm_diff(w->S, vec_factor(kind, n, N), w->v, d);
                double f = kind == AL_DIST_NORM_OF_SUM
                               ? fabs((double)(n - 2 * N)) / (double)n
                               : (double)(n - N) * (double)(N - 1) / (double)n;
                t->an += f * nS;
                if (o->mc_samples > 0) {
                    double m, var;
                    mc_row(kind, a, x, n, d, N, o->mc_samples, o->mc_seed, row, w, &m, &var);
                    t->mc += m;
                    t->mc_var += var / (double)o->mc_samples;
                }
            }
            if (o->exact) t->ex += exact_row(kind, a, x, n, d, N, w);
        }
    }
}

/* ---- checks and the public functions ------------------------------------------------------- */

static int check_opts(const al_reading_opts *o, int64_t n_max, int64_t d, al_error *err) {
    if (!o) return al__err(err, AL_E_INVALID, "readings: NULL options");
    if (o->distance < AL_DIST_SUM_OF_NORMS || o->distance > AL_DIST_SUM_VECTOR)
        return al__err(err, AL_E_INVALID, "readings: unknown distance %d", (int)o->distance);
    if (d < 1 || d > ((int64_t)1 << 20))
        return al__err(err, AL_E_INVALID, "readings: vector dimension d = %lld", (long long)d);
    if (o->n_top < 0 || (o->n_top > 0 && !o->top_n))
        return al__err(err, AL_E_INVALID, "readings: bad N grid (n_top %d)", o->n_top);
    for (int k = 0; k < o->n_top; k++)
        if (o->top_n[k] < 1)
            return al__err(err, AL_E_INVALID, "readings: N = %d at position %d of the grid is < 1",
                           o->top_n[k], k);
    if (o->mc_samples < 0)
        return al__err(err, AL_E_INVALID, "readings: Monte-Carlo samples %d < 0", o->mc_samples);
    if (o->window < 0) return al__err(err, AL_E_INVALID, "readings: window %d < 0", o->window);
    if (o->window > 0 && o->window < n_max) n_max = o->window; /* the longest row's keys */
    if (o->exact) return al_exact_check(n_max, o->top_n, o->n_top, o->exact_max, err);
    return 0;
}

static int check_finite(const double *v, int64_t rows, int64_t cols, int64_t ld, int causal,
                        int win, const char *what, al_error *err) {
    for (int64_t i = 0; i < rows; i++) {
        int64_t lo = al__row_lo(i, causal, win), n = al__row_n(i, cols, causal, win);
        for (int64_t k = lo; k < lo + n; k++)
            if (!isfinite(v[i * ld + k]))
                return al__err(err, AL_E_RANGE,
                               "readings: %s: non-finite value %g at row %lld, column %lld", what,
                               v[i * ld + k], (long long)i, (long long)k);
    }
    return 0;
}

static void finish(const al_reading_opts *o, const acc *ac, const al_topn_stats *sn,
                   al_reading_stats *out) {
    for (int k = 0; k < o->n_top; k++) {
        al_reading_stats *r = &out[k];
        const acc *t = &ac[k];
        r->N = o->top_n[k];
        r->rows = t->rows;
        double q = t->rows > 0 ? (double)t->rows : NAN;
        if (sn) {
            r->dist = sn[k].dtilde;
            r->analytic = sn[k].E;
            r->mc = sn[k].E_mc;
            r->mc_se = sn[k].E_mc_se;
        } else {
            r->dist = t->dist / q;
            r->analytic = t->an / q;
            r->mc = o->mc_samples > 0 ? t->mc / q : NAN;
            r->mc_se = o->mc_samples > 0 ? sqrt(t->mc_var) / q : NAN;
        }
        r->exact = o->exact ? t->ex / q : NAN;
    }
}

/* Both entry points: rows of w (row t at w + t ldw, n_t keys; ranked rank + t ldw, or NULL). */
static int run(const double *w, int64_t ldw, const double *x, int64_t L, int64_t d, int causal,
               const al_reading_opts *o, const uint16_t *rank, al_reading_stats *out,
               al_distance_kind kind2, al_reading_stats *out2, al_error *err) {
    int win = ldw == 0 ? 0 : o->window;
    int vec = o->distance != AL_DIST_SUM_OF_NORMS;
    al_topn_stats *sn = NULL;
    int rc = 0;
    if (!vec) { /* the true distance, E and the Monte-Carlo E of the metrics module */
        al_metrics_opts mo = {.top_n = o->top_n,
                              .n_top = o->n_top,
                              .distance = 1,
                              .mc_samples = o->mc_samples,
                              .mc_seed = o->mc_seed,
                              .causal = causal,
                              .window = win};
        sn = al__calloc((size_t)(o->n_top > 0 ? o->n_top : 1), sizeof *sn, "readings", err);
        if (!sn) return AL_E_NOMEM;
        rc = ldw == 0 ? al_row_metrics(w, x, L, d, &mo, sn, err)
                      : al__head_metrics_gram(w, x, NULL, rank, -1, L, d, &mo, sn, NULL, NULL, err);
        if (rc) {
            free(sn);
            return rc;
        }
    }
    int nmax = 0;
    for (int k = 0; k < o->n_top; k++) nmax = o->top_n[k] > nmax ? o->top_n[k] : nmax;
    rws ws;
    size_t na = (size_t)(o->n_top > 0 ? o->n_top : 1);
    acc *ac = al__calloc(out2 ? 2 * na : na, sizeof *ac, "readings", err),
        *ac2 = out2 ? ac + na : NULL;
    if (!ac || rws_build(&ws, L, d, nmax, o, err)) {
        free(ac);
        free(sn);
        return AL_E_NOMEM;
    }
    int64_t rows = ldw == 0 ? 1 : L;
    for (int64_t t = 0; t < rows && (vec || o->exact); t++) {
        int64_t lo = al__row_lo(t, causal, win), n = ldw == 0 ? L : al__row_n(t, L, causal, win);
        vec_row(o, w + t * ldw + lo, x + lo * d, n, d, t, rank ? rank + t * ldw : NULL, &ws, ac,
                vec, kind2, ac2);
    }
    finish(o, ac, sn, out);
    if (out2) finish(o, ac2, NULL, out2);
    rws_free(&ws);
    free(ac);
    free(sn);
    return 0;
}

int AL_MV(al_row_reading)(const double *alpha, const double *x, int64_t n, int64_t d,
                          const al_reading_opts *o, al_reading_stats *out, al_error *err) {
    int rc = check_opts(o, n, d, err);
    if (rc) return rc;
    if (n < 1 || n > ((int64_t)1 << 24))
        return al__err(err, AL_E_INVALID, "readings: bad row length n = %lld", (long long)n);
    if (!alpha || !x || (o->n_top > 0 && !out))
        return al__err(err, AL_E_INVALID, "readings: NULL argument");
    if ((rc = check_finite(alpha, 1, n, n, 0, 0, "weights", err))) return rc;
    if ((rc = check_finite(x, n, d, d, 0, 0, "vectors", err))) return rc;
    return run(alpha, 0, x, n, d, 0, o, NULL, out, o->distance, NULL, err);
}

/* al__head_reading_rank under o and, when out2, under the other vector reading kind2 (o's
 * distance a vector reading too) into out2, in one pass: the same bits as two calls. */
int AL_MV(al__head_reading_pair)(const double *w, const double *x, int64_t L, int64_t d,
                                 const al_reading_opts *o, const uint16_t *rank,
                                 al_reading_stats *out, al_distance_kind kind2,
                                 al_reading_stats *out2, al_error *err) {
    int rc = check_opts(o, L, d, err);
    if (rc) return rc;
    if (L < 1 || L > ((int64_t)1 << 16))
        return al__err(err, AL_E_INVALID, "readings: bad head length L = %lld", (long long)L);
    if (!w || !x ||
        (o->n_top > 0 && (!out || (out2 && (o->distance == AL_DIST_SUM_OF_NORMS ||
                                            kind2 == AL_DIST_SUM_OF_NORMS)))))
        return al__err(err, AL_E_INVALID, "readings: NULL argument or no pair");
    if ((rc = check_finite(w, L, L, L, o->causal != 0, o->window, "weights", err))) return rc;
    if ((rc = check_finite(x, L, d, d, 0, 0, "vectors", err))) return rc;
    return run(w, L, x, L, d, o->causal != 0, o, rank, out, kind2, out2, err);
}

int AL_MV(al__head_reading_rank)(const double *w, const double *x, int64_t L, int64_t d,
                                 const al_reading_opts *o, const uint16_t *rank,
                                 al_reading_stats *out, al_error *err) {
    return AL_MV(al__head_reading_pair)(w, x, L, d, o, rank, out, o->distance, NULL, err);
}

int AL_MV(al_head_reading)(const double *w, const double *x, int64_t L, int64_t d,
                           const al_reading_opts *o, al_reading_stats *out, al_error *err) {
    return AL_MV(al__head_reading_rank)(w, x, L, d, o, NULL, out, err);
}

/* ---- one copy of this file per instruction set (mv.h) --------------------------------------- */

#ifdef AL_MV_DISPATCH
int al_row_reading(const double *alpha, const double *x, int64_t n, int64_t d,
                   const al_reading_opts *o, al_reading_stats *out, al_error *err) {
    return AL_MV_PICK(al_row_reading)(alpha, x, n, d, o, out, err);
}

int al_head_reading(const double *w, const double *x, int64_t L, int64_t d,
                    const al_reading_opts *o, al_reading_stats *out, al_error *err) {
    return AL_MV_PICK(al_head_reading)(w, x, L, d, o, out, err);
}

int al__head_reading_rank(const double *w, const double *x, int64_t L, int64_t d,
                          const al_reading_opts *o, const uint16_t *rank, al_reading_stats *out,
                          al_error *err) {
    return AL_MV_PICK(al__head_reading_rank)(w, x, L, d, o, rank, out, err);
}
int al__head_reading_pair(const double *w, const double *x, int64_t L, int64_t d,
                          const al_reading_opts *o, const uint16_t *rank, al_reading_stats *out,
                          al_distance_kind kind2, al_reading_stats *out2, al_error *err) {
    return AL_MV_PICK(al__head_reading_pair)(w, x, L, d, o, rank, out, kind2, out2, err);
}
#endif
