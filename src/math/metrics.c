/* metrics.c: the row and head metrics of METHOD sections 2, 3 and 5 for a whole grid of N
 * in one pass.
 *
 * How one head is done (w [L, L] weights, x [L, d] vectors):
 *   G  = X X^T            [L, L]  one GEMM; every row shares it (row t reads G[:n, :n]);
 *   S  = W X              [L, d]  attention outputs (triangular multiply when causal);
 *   XS = S X^T            [XB, L] XS[t, i] = x_i . S_t  (for the analytic E), XB rows at a
 *                                 time, so the block stays in cache beside the Gram rows;
 *                                 wide vectors (d > L / 3 causal, L / 2 not: the d_model-wide
 *                                 readings) skip S: XS = tril(W) G by blocks of XG rows (L^3 / 3
 *                                 multiply-adds instead of L^2 d) and |S_t|^2 = sum_i w_ti XS_ti,
 *                                 whose errors are absolute (below; wide_block).
 * Then per row: the top K = min(max N, n - 1) weights are selected once (quickselect and a
 * sort; ties to the lower index), and N walks up the grid adding the selected indices j
 * between two grid points as one batch (up to 8 Gram rows per pass over i):
 *   c_i   += alpha_j G[j, i]                  c_i = x_i . s
 *   D_i    = max(D_i, |x_i|^2 + |x_j|^2 - 2 G[j, i])       max_{j in I} |x_i - x_j|^2
 *   cu_i  += (alpha_j / |x_j|) G[j, i]         u_i . s_u = cu_i / |x_i|
 * and delta^2 (minimum pairwise distance of the selected unit vectors) by a running minimum
 * over the new pairs. At each N of the grid every metric is an O(n) masked reduction:
 *   ||alpha_i x_i - s||^2 = alpha_i^2 |x_i|^2 - 2 alpha_i c_i + |s|^2   (clamped at 0),
 * |s|^2 = sum_{j in I} alpha_j c_j. So a row costs O(n K) for the whole grid instead of
 * O(n N d) per N. Zero vectors have u = 0 (|u|^2 = 0) in the separability metrics.
 * With the distance alone, the sums at an N whose next N is reached by Gram passes are taken in
 * the first of those passes, on each key's c and D before its update (evalq: c at N kept for the
 * exact fallback and the list mode's dtilde): one pass over the row state less per N, the same
 * operations in the same order (the same bits).
 *
 * Accuracy near cancellation. A squared distance from the expansion, t2 = |A|^2 - 2 A.B + |B|^2,
 * carries an absolute error below gamma_k (|A| + |B|)^2 <= 2 gamma_k (|A|^2 + |B|^2), where
 * gamma_k = k u (u = 2^-53) and k counts the roundings on the longest path: the Gram dot
 * products (d), the running sums over the selected keys (N), a few more (the bound uses the
 * sums of norms |A| <= |alpha_i| |x_i|, |B| <= sum_{j in I} |alpha_j| |x_j|, not |A.B|). So
 * sqrt(t2) has a relative error below err / (2 t2) <= RHO = 1e-10 whenever
 * t2 >= gamma_k (|A|^2 + |B|^2) / RHO. The evaluation loops take, branch-free, the minimum of
 * t2 - tau (|A|^2 + |B|^2) (tau = 2 gamma_k / RHO: one safety factor 2); where it is negative
 * (rare: a distance below ~1% of the norms it is computed from) those elements alone are
 * recomputed from the vectors in d-space, with s, S and s_u summed in double-double (built
 * lazily, once per row or as N walks up), so a distance that is exactly 0 comes out 0 and a
 * near-duplicate to the rounding of its own components. The same test covers d1 (on its
 * maximum; recomputed from the head's Gram matrix of y_i = x_i - x_0, built by one GEMM the
 * first time it is needed, where |y_i|^2 + |y_j|^2 <= 8 d1^2 since x_0 is a key of every row;
 * from the vectors for a lone row), E (whose S has, besides, an error
 * cc |dS| <= cc gamma_n sum_j |alpha_j| |x_j| that is absolute, not amplified; also tested;
 * from the Gram matrix, x_i . S and |S|^2 carry gamma R |x_i| and gamma R^2, R = sum_j |alpha_j|
 * |x_j|, with no vector S behind them: the test adds cc^2 R^2 to cc^2 |S|^2 with k = d + 4 + gk,
 * and the rows where that wider test would flag a term (always where |S|^2 << R^2) take S
 * from the vectors instead (rowctx.gk, wide_block)),
 * the separability radius r, the distances compared with r for N_s, the xi_i (A1 - alpha_i,
 * A2 - alpha_i^2 recomputed as sums over the others) and the Monte-Carlo samples. delta enters
 * only as delta^2 (absolute error ~gamma_d): no cancellation to repair.
 */
#include "cpu.h"
#include "gemm.h"
#include "hooks.h"
#include "metrics.h"
#include "mathx.h"
#include "mv.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(AL_MV_ISA) || defined(AL_MV_DISPATCH)
#define AL_METRICS_PROTOS(f)                                                                       \
    int f(al_row_vanishing)(const double *, int64_t, double *, double *, double *, al_error *);    \
    int f(al_row_metrics)(const double *, const double *, int64_t, int64_t,                        \
                          const al_metrics_opts *, al_topn_stats *, al_error *);                   \
    int f(al_head_metrics)(const double *, const double *, int64_t, int64_t,                       \
                           const al_metrics_opts *, al_topn_stats *, double *, double *,           \
                           al_error *);                                                            \
    int f(al_head_vanishing_D)(const double *, const double *, int64_t, int64_t, int, double *,    \
                               al_error *);                                                        \
    int f(al__head_metrics_gram)(const double *, const double *, const double *, const uint16_t *, \
                                 int, int64_t, int64_t, const al_metrics_opts *, al_topn_stats *,  \
                                 double *, double *, al_error *);                                  \
    int f(al_head_vanishing_D_window)(const double *, const double *, int64_t, int64_t, int, int,  \
                                      double *, al_error *);
#pragma GCC visibility push(hidden) /* the copies: internal, never exported */
AL_MV_FOR_EACH(AL_METRICS_PROTOS)
#pragma GCC visibility pop
#endif

/* ---- per-call state -------------------------------------------------------------------- */

typedef struct grid {
    int n_top;
    int *ord;    /* [n_top] indices into top_n, sorted by N ascending */
    int n_max;   /* largest N */
    int bound_n; /* dmax only at the N <= bound_n (NaN beyond; INT_MAX: every N) */
} grid;

/* Running sums over rows, one per grid entry (indexed like top_n). */
typedef struct accum {
    int64_t rows;
    double dtilde, dmax, E, E_mc, E_mc_var, ns, lo, up;
} accum;

/* The sort key of a weight (desc_key) and its index (top-K selection). */
typedef struct kv {
    uint64_t k;
    int64_t i;
} kv;

/* Scratch for one row of up to cap keys; shared by every row of a head. */
typedef struct rowws {
    int64_t cap;
    double *c;     /* [cap] x_i . s */
    double *D;     /* [cap] max_{j in I} |x_i - x_j|^2 */
    double *cu;    /* [cap] sum_{j in I} alpha_j G_ij / |x_j| */
    double *sinv;  /* [cap] 1/|x_j| in selection order */
    double *sun;   /* [cap] |u_j|^2 in selection order */
    double *asel;  /* [cap] alpha_j in selection order */
    double *nsel;  /* [cap] 1 if i not selected, 0 if selected */
    double *cprev; /* [cap] c at a deferred N (evalq) */
    int64_t *sel;  /* [cap] selected indices, best first */
    kv *kv;        /* [2 cap] top-K scratch */
    double *xi;    /* [cap] separability scratch */
    double *pa;    /* [cap] alpha_i^2 |x_i|^2 (distance) */
    double *axs;   /* [cap] alpha_i x_i . S (distance) */
    double *ua2;   /* [cap] alpha_i^2 |u_i|^2, 1e300 once i is selected (separability) */
    double *m2ai;  /* [cap] -2 alpha_i / |x_i| (separability) */
    int64_t *perm; /* [cap] Monte-Carlo permutation */
    int64_t *mark; /* [cap] Monte-Carlo selection stamp */
    double *mcc;   /* [cap] Monte-Carlo x_i . s */
    double *mns;   /* [cap] Monte-Carlo 1 if i not in the sample, else 0 */
    double *sv;    /* [d] Monte-Carlo s */
    double *sl;    /* [d] s of the list mode (row_pass: x_i . s from the vectors) */
    /* exact fallbacks (near cancellation), filled lazily */
    double *sdd;  /* [2 d] s = sum_{q < s_cnt} alpha_sel[q] x_sel[q], double-double (hi, lo) */
    double *Sdd;  /* [2 d] S = sum_{j < n} alpha_j x_j, double-double (when S_ok) */
    double *sudd; /* [2 d] s_u = sum_{q < su_cnt} alpha_sel[q] u_sel[q], double-double */
    double *mdd;  /* [2 d] Monte-Carlo s of one sample, double-double */
    double *Dx;   /* [cap] max_{q < dx_cnt} |x_i - x_sel[q]|^2 computed in d-space */
    int64_t s_cnt, su_cnt, dx_cnt;
    int S_ok;
    int dx_mode; /* Dx from: 0 not yet, 1 the centred Gram matrix, 2 the vectors */
} rowws;

/* A head's vectors centred on x_0, y_i = x_i - x_0 (each component to one rounding of itself),
 * and their Gram matrix: built the first time a row's d1 cancels (every key of the row close to
 * every selected key, relative to their norms), it expands |x_i - x_j|^2 = |y_i|^2 + |y_j|^2 -
 * 2 y_i . y_j with errors relative to the head's spread around x_0 instead of to |x|^2. */
typedef struct centred {
    const double *x; /* [L, d] */
    int64_t L, d;
    double *Gy;  /* [L, L] Y Y^T */
    double *gyd; /* [L] |y_i|^2 */
    int state;   /* 0: not built; 1: built; -1: no memory (the rows use the direct path) */
} centred;

/* What one row needs besides its weights. */
typedef struct rowctx {
    const double *x; /* [n, d] vectors (rows of the head's x) */
    int64_t d;
    const double *G; /* Gram rows: G[j * ldg + i] = x_j . x_i */
    int64_t ldg;
    const double *const *grow; /* or, when not NULL: grow[j] = the Gram row of x_j (selected j) */
    const double *gd;          /* [n] |x_i|^2 */
    const double *inv;         /* [n] 1/|x_i| (0 for a zero vector) */
    const double *un;          /* [n] 1 if x_i != 0 else 0 (|u_i|^2) */
    const double *xs;          /* [n] x_i . S for this row (distance only) */
    double SS;                 /* |S|^2 for this row */
    double gk;   /* 0: xs and SS from S (S's error is E's eS); else from the head's Gram matrix
                  * (wide_block), with |dxs_i| <= gamma_gk R |x_i|, |dSS| <= gamma_gk R^2 */
    int64_t row; /* row index (Monte-Carlo seeding) */
    centred *cg; /* the head's centred Gram matrix (NULL: one row) */
    int64_t off; /* the row's first key in cg (a sliding window's lo; else 0) */
} rowctx;

static inline const double *gram_row(const rowctx *rc, int64_t j) {
    return rc->grow ? rc->grow[j] : rc->G + j * rc->ldg;
}

static void free_rowws(rowws *w) {
    free(w->c);
    free(w->D);
    free(w->cu);
    free(w->sinv);
    free(w->sun);
    free(w->asel);
    free(w->nsel);
    free(w->cprev);
    free(w->sel);
    free(w->kv);
    free(w->xi);
    free(w->pa);
    free(w->axs);
    free(w->ua2);
    free(w->m2ai);
    free(w->perm);
    free(w->mark);
    free(w->mcc);
    free(w->mns);
    free(w->sv);
    free(w->sl);
    free(w->sdd);
    free(w->Sdd);
    free(w->sudd);
    free(w->mdd);
    free(w->Dx);
    memset(w, 0, sizeof *w);
}

static int build_rowws(rowws *w, int64_t cap, int64_t d, al_error *err) {
    memset(w, 0, sizeof *w);
    w->cap = cap;
    size_t nd = (size_t)cap * sizeof(double), ni = (size_t)cap * sizeof(int64_t);
    w->c = al__malloc(nd, "metrics row scratch", err);
    w->D = al__malloc(nd, "metrics row scratch", err);
    w->cu = al__malloc(nd, "metrics row scratch", err);
    w->sinv = al__malloc(nd, "metrics row scratch", err);
    w->sun = al__malloc(nd, "metrics row scratch", err);
    w->asel = al__malloc(nd, "metrics row scratch", err);
    w->nsel = al__malloc(nd, "metrics row scratch", err);
    w->cprev = al__malloc(nd, "metrics row scratch", err);
    w->sel = al__malloc(ni, "metrics row scratch", err);
    w->kv = al__malloc(2 * (size_t)cap * sizeof(kv), "metrics row scratch", err);
    w->xi = al__malloc(nd, "metrics row scratch", err);
    w->pa = al__malloc(nd, "metrics row scratch", err);
    w->axs = al__malloc(nd, "metrics row scratch", err);
    w->ua2 = al__malloc(nd, "metrics row scratch", err);
    w->m2ai = al__malloc(nd, "metrics row scratch", err);
    w->perm = al__malloc(ni, "metrics row scratch", err);
    w->mark = al__calloc((size_t)cap, sizeof(int64_t), "metrics row scratch", err);
    w->mcc = al__malloc(nd, "metrics row scratch", err);
    w->mns = al__malloc(nd, "metrics row scratch", err);
    w->sv = al__malloc((size_t)d * sizeof(double), "metrics row scratch", err);
    w->sl = al__malloc((size_t)d * sizeof(double), "metrics row scratch", err);
    size_t d2 = 2 * (size_t)d * sizeof(double);
    w->sdd = al__malloc(d2, "metrics row scratch", err);
    w->Sdd = al__malloc(d2, "metrics row scratch", err);
    w->sudd = al__malloc(d2, "metrics row scratch", err);
    w->mdd = al__malloc(d2, "metrics row scratch", err);
    w->Dx = al__malloc(nd, "metrics row scratch", err);
    if (!w->c || !w->D || !w->cu || !w->sinv || !w->sun || !w->asel || !w->nsel || !w->cprev ||
        !w->sel || !w->kv || !w->xi || !w->pa || !w->axs || !w->ua2 || !w->m2ai || !w->perm ||
        !w->mark || !w->mcc || !w->mns || !w->sv || !w->sl || !w->sdd || !w->Sdd || !w->sudd ||
        !w->mdd || !w->Dx) {
        free_rowws(w);
        return AL_E_NOMEM;
    }
    return 0;
}

static void free_grid(grid *g) {
    free(g->ord);
    g->ord = NULL;
}

static int build_grid(grid *g, const al_metrics_opts *o, al_error *err) {
    memset(g, 0, sizeof *g);
    if (o->n_top < 0 || (o->n_top > 0 && !o->top_n))
        return al__err(err, AL_E_INVALID, "metrics: bad N grid (n_top %d)", o->n_top);
    g->n_top = o->n_top;
    g->bound_n = INT_MAX;
    g->ord = al__malloc((size_t)(o->n_top > 0 ? o->n_top : 1) * sizeof(int), "N grid", err);
    if (!g->ord) return AL_E_NOMEM;
    for (int k = 0; k < o->n_top; k++) {
        if (o->top_n[k] < 1) {
            free_grid(g);
            return al__err(err, AL_E_INVALID, "metrics: N = %d at position %d of the grid is < 1",
                           o->top_n[k], k);
        }
        /* insertion sort by N (grids are short) */
        int p = k;
        while (p > 0 && o->top_n[g->ord[p - 1]] > o->top_n[k]) {
            g->ord[p] = g->ord[p - 1];
            p--;
        }
        g->ord[p] = k;
        if (o->top_n[k] > g->n_max) g->n_max = o->top_n[k];
    }
    return 0;
}

/* ---- top-K selection: quickselect of the K-th value, then a radix sort of the K ------------- */

/* The K-th largest of t[0..n-1] (1 <= K <= n), reordering t: quickselect on the values alone
 * (Hoare partition around the median of three, 8-byte moves). */
static double kth_largest(double *t, int64_t n, int64_t K) {
    int64_t lo = 0, hi = n - 1, k = K - 1;
    while (lo < hi) {
        double x = t[lo], y = t[lo + (hi - lo) / 2], z = t[hi], p;
        if (x < y)
            p = y < z ? y : (x < z ? z : x); /* median of x, y, z */
        else
            p = x < z ? x : (y < z ? z : y);
        int64_t i = lo, j = hi;
        do {
            while (t[i] > p) i++;
            while (p > t[j]) j--;
            if (i <= j) {
                double e = t[i];
                t[i] = t[j];
                t[j] = e;
                i++;
                j--;
            }
        } while (i <= j);
        /* t[lo..j] >= p, t[j+1..i-1] == p, t[i..hi] <= p */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return p;
    }
    return t[k];
}

/* Sort key of a weight: smaller key = larger weight (-0 and +0 alike), as unsigned integers. */
static inline uint64_t desc_key(double v) {
    double z = v + 0.0; /* -0 -> +0 */
    uint64_t b;
    memcpy(&b, &z, sizeof b);
    uint64_t u = (b >> 63) ? ~b : (b | (1ull << 63)); /* increasing with v */
    return ~u;
}

/* s[0..K-1] stably sorted by the bytes b0..b1-1 of the key (LSD radix sort, 8 bits a pass; the
 * digit histograms in one pass over the keys, the passes where every key has the same digit
 * skipped); tmp[K]. */
static void kv_radix_bytes(kv *s, kv *tmp, int64_t K, int b0, int b1) {
    uint32_t cnt[4][256];
    memset(cnt, 0, sizeof cnt);
    for (int64_t q = 0; q < K; q++) {
        uint64_t k = s[q].k;
        for (int b = b0; b < b1; b++) cnt[b - b0][(k >> (8 * b)) & 255]++;
    }
    kv *src = s, *dst = tmp;
    for (int b = b0; b < b1; b++) {
        uint32_t *c = cnt[b - b0];
        int sh = 8 * b;
        if (c[(src[0].k >> sh) & 255] == (uint32_t)K) continue;
        uint32_t pos = 0;
        for (int v = 0; v < 256; v++) {
            uint32_t t = c[v];
            c[v] = pos;
            pos += t;
        }
        for (int64_t q = 0; q < K; q++) dst[c[(src[q].k >> sh) & 255]++] = src[q];
        kv *t = src;
        src = dst;
        dst = t;
    }
    if (src != s) memcpy(s, src, (size_t)K * sizeof(kv));
}

/* s[0..K-1] sorted by key (smaller first = larger weight), keeping the order of equal keys;
 * tmp[K]. By the high 32 bits of the key first (4 passes, not 8: the low bits rarely decide),
 * then each run of equal high bits by the low 32 bits where they are out of order (an exact
 * tie is in order already): the order of (key, position), as one sort of the 64 bits. */
static void kv_radix_desc(kv *s, kv *tmp, int64_t K) {
    kv_radix_bytes(s, tmp, K, 4, 8);
    for (int64_t r0 = 0, r1; r0 < K; r0 = r1) {
        uint64_t hi = s[r0].k >> 32;
        int sorted = 1;
        for (r1 = r0 + 1; r1 < K && s[r1].k >> 32 == hi; r1++)
            sorted &= (uint32_t)s[r1 - 1].k <= (uint32_t)s[r1].k;
        if (!sorted) kv_radix_bytes(s + r0, tmp, r1 - r0, 0, 4);
    }
}

/* s[0..n-1] = every key of a[n], larger weight first, ties to the lower index (the stable sort
 * of the keys in index order); s[2 n]. */
static void rank_all(const double *a, int64_t n, kv *s) {
    for (int64_t i = 0; i < n; i++) s[i] = (kv){desc_key(a[i]), i};
    kv_radix_desc(s, s + n, n);
}

/* sel[0..K-1] = indices of the K largest a[0..n-1], best first (1 <= K <= n); s[2 n], tmp[n]
 * scratch. The K-th largest value v is found first; the K are those > v and the first (lowest
 * index) of those == v, then sorted (larger weight first, ties to the lower index). */
static void top_k(const double *a, int64_t n, int64_t K, int64_t *sel, kv *s, double *tmp) {
    int64_t q = 0;
    if (K == n) { /* every key (the list mode ranks them all): no K-th value to find */
        rank_all(a, n, s);
        for (q = 0; q < n; q++) sel[q] = s[q].i;
        return;
    }
    memcpy(tmp, a, (size_t)n * sizeof(double));
    double v = kth_largest(tmp, n, K);
    for (int64_t i = 0; i < n; i++) { /* branch-free: s has room for n */
        s[q] = (kv){desc_key(a[i]), i};
        q += a[i] > v;
    }
    for (int64_t i = 0; i < n && q < K; i++)
        if (a[i] == v) s[q++] = (kv){desc_key(a[i]), i};
    kv_radix_desc(s, s + n, K); /* stable: equal weights stay in index order */
    for (q = 0; q < K; q++) sel[q] = s[q].i;
}

/* Exported for the readings module (readings.c): the same selection, scratch kvs[32 n bytes]
 * (2 n key/index pairs) and tmp[n]. In the baseline copy only (mv.h: one definition). */
#ifndef AL_MV_ISA
void al__top_k(const double *a, int64_t n, int64_t K, int64_t *sel, void *kvs, double *tmp) {
    top_k(a, n, K, sel, (kv *)kvs, tmp);
}

/* Every row ranked once (rank_all), for the calls that share a head's weights. top_k's K < n
 * selection is the prefix of that order: with v its K-th largest value, it takes every key > v
 * and the lowest-index keys == v up to K (finite weights: the head entry points reject the
 * others), then sorts them by desc_key stably from index order, which is the order of the
 * first K of the full ranking (desc_key orders as the values, -0 as +0, as > and == do). */
void al__head_rank(const double *w, int64_t L, int causal, int window, uint16_t *rank, void *kvs) {
    kv *s = kvs;
    for (int64_t t = 0; t < L; t++) {
        int64_t lo = al__row_lo(t, causal, window), n = al__row_n(t, L, causal, window);
        rank_all(w + t * L + lo, n, s);
        uint16_t *r = rank + t * L;
        for (int64_t q = 0; q < n; q++) r[q] = (uint16_t)s[q].i;
    }
}
#endif

/* ---- the incremental updates and the sums at an N (vectorised by the compiler) -------------- */

/* Selected indices are added in batches (those between two N of the grid), up to eight Gram
 * rows per pass, so that c, D, cu are loaded and stored once per pass. */
typedef struct batch {
    const double *g[8]; /* Gram rows G[j, 0..n-1] of the selected j */
    double a[8];        /* alpha_j */
    double gjj[8];      /* |x_j|^2 */
    double inv[8];      /* 1 / |x_j| (0 for a zero vector) */
    double un[8];       /* |u_j|^2 */
} batch;

/* The distance's sums at one N (from c, D, nsel as they are at N): dtilde over the unselected
 * (mask nsel) or not at all, E's norms over every key, the minima of their cancellation tests
 * (< 0 and < CE flagged), with bnd b = sum_{i not in I} alpha_i and d1 = max_{i not in I} D_i.
 * They are taken alone or, deferred, in the first pass of the next batch (which reads c and D
 * anyway: then c at N is kept in cN for the exact fallback and the list mode's dtilde). */
enum { EV_NONE, EV_FULL, EV_BND, EV_E };
typedef struct evalq {
    const double *a, *pa, *ns, *axs; /* [n] */
    double ss, tdt, tQ2, f2, fc2, cc2SS, f2tE;
    double *cN;                    /* [n] c at N (written by a fused pass) */
    double dt, mdt, es, mE, b, d1; /* the sums and minima */
    double CE, A1, m, gmax;        /* what finishing the N needs */
    int64_t N;
    int kind, bound, list;
} evalq;

/* One pass over B rows (B a constant at every call, so the row loop unrolls and the i loop
 * vectorises), first (on the values before the pass) the sums ev of e, then:
 * dist: c += sum_q a_q g_q; bound: D = max(D, |x_i|^2 + max_q (gjj_q - 2 g_q));
 * sep: cu += sum_q (a_q / |x_q|) g_q. B = 0: the sums alone. */
static inline __attribute__((always_inline)) void
pass_rows(double *restrict c, double *restrict D, double *restrict cu, const double *restrict gd,
          const batch *bt, int B, int dist, int bound, int sep, int ev, evalq *e, int64_t n) {
    const double *g[8];
    double a[8], gjj[8], ai[8];
    for (int q = 0; q < B; q++) {
        g[q] = bt->g[q];
        a[q] = bt->a[q];
        gjj[q] = bt->gjj[q];
        ai[q] = bt->a[q] * bt->inv[q];
    }
    const double *restrict al = ev ? e->a : NULL, *restrict pa = ev ? e->pa : NULL;
    const double *restrict ns = ev ? e->ns : NULL, *restrict axs = ev ? e->axs : NULL;
    double *restrict cN = ev && B > 0 ? e->cN : NULL;
    double ss = 0, tdt = 0, tQ2 = 0, f2 = 0, fc2 = 0, cc2SS = 0, f2tE = 0;
    if (ev)
        ss = e->ss, tdt = e->tdt, tQ2 = e->tQ2, f2 = e->f2, fc2 = e->fc2, cc2SS = e->cc2SS,
        f2tE = e->f2tE;
    double dt = 0, b = 0, d1 = 0, es = 0, mdt = 0, mE = INFINITY;
#pragma omp simd reduction(+ : dt, b, es) reduction(max : d1) reduction(min : mdt, mE)
    for (int64_t i = 0; i < n; i++) {
        double ci = dist || ev ? c[i] : 0, Di = bound || ev == EV_BND ? D[i] : 0;
        if (ev == EV_FULL || ev == EV_BND) {
            double aa = al[i], p = pa[i];
            double t2 = FMA(-2.0 * aa, ci, p + ss);
            t2 = t2 > 0 ? t2 : 0;
            dt = FMA(ns[i], sqrt(t2), dt);
            double ft = FMA(-ns[i], FMA(tdt, p, tQ2), t2); /* < 0: flagged */
            mdt = mdt < ft ? mdt : ft;
            if (ev == EV_BND) {
                b = FMA(ns[i], aa, b);
                double dd = ns[i] * Di;
                d1 = d1 > dd ? d1 : dd;
            }
        }
        if (ev) {
            double p = pa[i], e2 = FMA(f2, p, FMA(-fc2, axs[i], cc2SS));
            e2 = e2 > 0 ? e2 : 0;
            es += sqrt(e2);
            double fe = FMA(-f2tE, p, e2); /* < CE: flagged */
            mE = mE < fe ? mE : fe;
        }
        if (B == 0) continue;
        double v = g[0][i];
        double sc = a[0] * v, mx = FMA(-2.0, v, gjj[0]), su = ai[0] * v;
#pragma GCC unroll 8
        for (int q = 1; q < B; q++) {
            v = g[q][i];
            if (dist) sc = FMA(a[q], v, sc);
            if (bound) {
                double h = FMA(-2.0, v, gjj[q]);
                mx = mx > h ? mx : h;
            }
            if (sep) su = FMA(ai[q], v, su);
        }
        if (ev) cN[i] = ci;
        if (dist) c[i] = ci + sc;
        if (bound) {
            double dd = gd[i] + mx;
            D[i] = Di > dd ? Di : dd;
        }
        if (sep) cu[i] += su;
    }
    if (ev) e->dt = dt, e->mdt = mdt, e->es = es, e->mE = mE, e->b = b, e->d1 = d1;
}

/* The kinds of pass: c, D and cu (both), c and D (dist), c alone (past the last N whose bound
 * is wanted), c and cu, cu alone (sep); the distance's with the sums at the previous N fused
 * (_e1 full, _e2 with the bound's, _e3 E's alone). */
typedef void (*update_fn)(double *, double *, double *, const double *, const batch *, evalq *,
                          int64_t);
#define AL_UPDATE_ONE(name, B, dist, bound, sep, ev)                                               \
    static void name(double *c, double *D, double *cu, const double *gd, const batch *b, evalq *e, \
                     int64_t n) {                                                                  \
        pass_rows(c, D, cu, gd, b, B, dist, bound, sep, ev, e, n);                                 \
    }
#define AL_UPDATE_VARIANTS(B)                                                                      \
    AL_UPDATE_ONE(update_both##B, B, 1, 1, 1, EV_NONE)                                             \
    AL_UPDATE_ONE(update_dist##B, B, 1, 1, 0, EV_NONE)                                             \
    AL_UPDATE_ONE(update_c##B, B, 1, 0, 0, EV_NONE)                                                \
    AL_UPDATE_ONE(update_csep##B, B, 1, 0, 1, EV_NONE)                                             \
    AL_UPDATE_ONE(update_sep##B, B, 0, 0, 1, EV_NONE)                                              \
    AL_UPDATE_ONE(update_dist##B##_e2, B, 1, 1, 0, EV_BND)                                         \
    AL_UPDATE_ONE(update_c##B##_e1, B, 1, 0, 0, EV_FULL)                                           \
    AL_UPDATE_ONE(update_c##B##_e2, B, 1, 0, 0, EV_BND)                                            \
    AL_UPDATE_ONE(update_c##B##_e3, B, 1, 0, 0, EV_E)
AL_UPDATE_VARIANTS(1)
AL_UPDATE_VARIANTS(2)
AL_UPDATE_VARIANTS(4)
AL_UPDATE_VARIANTS(8)
AL_UPDATE_ONE(sums_full, 0, 0, 0, 0, EV_FULL)
AL_UPDATE_ONE(sums_bnd, 0, 0, 0, 0, EV_BND)
AL_UPDATE_ONE(sums_E, 0, 0, 0, 0, EV_E)
#undef AL_UPDATE_VARIANTS
#undef AL_UPDATE_ONE

/* Adds the selected sel[k0..k1-1] to the running state (D too when bound: a later N of the grid
 * still wants d1); with e (distance alone), e's sums at the previous N in the first pass. */
static void add_batch(const double *a, int64_t n, const rowctx *rc, const al_metrics_opts *o,
                      rowws *w, int64_t k0, int64_t k1, int bound, evalq *e) {
    static const update_fn tabs[9][4] = {
        {update_both1, update_both2, update_both4, update_both8},
        {update_dist1, update_dist2, update_dist4, update_dist8},
        {update_c1, update_c2, update_c4, update_c8},
        {update_csep1, update_csep2, update_csep4, update_csep8},
        {update_sep1, update_sep2, update_sep4, update_sep8},
        {update_dist1_e2, update_dist2_e2, update_dist4_e2, update_dist8_e2},
        {update_c1_e1, update_c2_e1, update_c4_e1, update_c8_e1},
        {update_c1_e2, update_c2_e2, update_c4_e2, update_c8_e2},
        {update_c1_e3, update_c2_e3, update_c4_e3, update_c8_e3}};
    int kind = o->distance && o->separability ? (bound ? 0 : 3) : o->distance ? (bound ? 1 : 2) : 4;
    for (int64_t k = k0; k < k1;) {
        int64_t left = k1 - k;
        int lg = left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0, B = 1 << lg;
        batch b;
        for (int q = 0; q < B; q++) {
            int64_t j = w->sel[k + q];
            b.g[q] = gram_row(rc, j);
            b.a[q] = a[j];
            b.gjj[q] = rc->gd[j];
            b.inv[q] = rc->inv[j];
            b.un[q] = rc->un[j];
        }
        /* fused: D updated only when the N before wanted its bound too (EV_BND) */
        int t = !e ? kind : kind == 1 ? 5 : 5 + e->kind;
        tabs[t][lg](w->c, w->D, w->cu, rc->gd, &b, e, n);
        e = NULL;
        k += B;
    }
}

/* ---- past the grid's dense part: x_i . s from the vectors -------------------------------- */

/* c[idx[q]] = x_{idx[q]} . s for q < m (x rows of d), four rows at a time: once the grid's steps
 * are wide and few keys are left unselected, m d products at an N cost less than streaming
 * (N - N_prev) Gram rows of n. */
static void dots_rows(const double *x, int64_t d, const int64_t *idx, int64_t m,
                      const double *restrict s, double *c) {
    int64_t q = 0;
    for (; q + 4 <= m; q += 4) {
        const double *x0 = x + idx[q] * d, *x1 = x + idx[q + 1] * d;
        const double *x2 = x + idx[q + 2] * d, *x3 = x + idx[q + 3] * d;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
        for (int64_t k = 0; k < d; k++) {
            a0 = FMA(x0[k], s[k], a0);
            a1 = FMA(x1[k], s[k], a1);
            a2 = FMA(x2[k], s[k], a2);
            a3 = FMA(x3[k], s[k], a3);
        }
        c[idx[q]] = a0;
        c[idx[q + 1]] = a1;
        c[idx[q + 2]] = a2;
        c[idx[q + 3]] = a3;
    }
    for (; q < m; q++) {
        const double *x0 = x + idx[q] * d;
        double a0 = 0;
#pragma omp simd reduction(+ : a0)
        for (int64_t k = 0; k < d; k++) a0 = FMA(x0[k], s[k], a0);
        c[idx[q]] = a0;
    }
}

/* s[d] += sum_{q in [k0, k1)} alpha_sel[q] x_sel[q] (metrics.h). */
static void s_extend(const double *a, const rowctx *rc, const int64_t *sel, int64_t k0, int64_t k1,
                     double *restrict s) {
    al__axpy_keys(a, rc->x, rc->d, sel, k0, k1, s);
}

/* Is it cheaper to take x_i . s from the vectors from N on (the first of h remaining N of the
 * grid, the last N_last; k keys selected so far) than to stream the Gram rows sel[k..N_last)?
 * Streaming costs (N_last - k) n updates, each a load from the Gram matrix (L^2 doubles: from the
 * outer cache at long L); the vectors s in d-space from scratch and up to N_last (N_last d) and
 * at most h (n - N) products of d. AL_LIST_RATIO weighs a product's FMA against an update:
 * `bench_metrics 1024 64 3 4` (one core, AVX-512) gave 1 and 2 alike, 4 to 16 slower. */
#ifndef AL_LIST_RATIO
#define AL_LIST_RATIO 1.0
#endif
static int list_cheaper(int64_t k, int64_t N, int64_t N_last, int h, int64_t n, int64_t d) {
    double vec = (double)d * ((double)N_last + (double)h * (double)(n - N));
    return vec * AL_LIST_RATIO <= (double)(N_last - k) * (double)n;
}

/* ---- exact fallbacks near cancellation (see the header comment) ----------------------------- */

#define AL_U   1.1102230246251565e-16 /* unit roundoff 2^-53 */
#define AL_RHO 1e-10                  /* relative accuracy kept by the expansion */

/* The threshold factor for a chain of k roundings: 2 gamma_k / RHO. */
/* the fallbacks: out of line, out of the hot loops' way */
#define AL_COLD __attribute__((noinline, cold))

static inline double cancel_tau(double k) {
    return 2.0 * k * AL_U / AL_RHO;
}

/* p + e = a b exactly (error-free product). */
static inline void two_prod(double a, double b, double *p, double *e) {
    *p = a * b;
#ifdef __FMA__
    *e = fma(a, b, -*p);
#else /* Dekker's product on Veltkamp halves (finite |a|, |b| < 2^995 here) */
    double ca = 134217729.0 * a, cb = 134217729.0 * b;
    double ah = ca - (ca - a), al = a - ah, bh = cb - (cb - b), bl = b - bh;
    *e = ((ah * bh - *p) + ah * bl + al * bh) + al * bl;
#endif
}

/* s + e = a + b exactly (Knuth's two-sum). */
static inline void two_sum(double a, double b, double *s, double *e) {
    *s = a + b;
    double bb = *s - a;
    *e = (a - (*s - bb)) + (b - bb);
}

/* (hi, lo)[d] += a * fl(x[k] * sc) in double-double (sc = 1 adds a x exactly; sc = 1/|x| the
 * unit vector as fl(x_k / |x|)). */
static void dd_axpy(double a, const double *restrict x, double sc, int64_t d, double *restrict hi,
                    double *restrict lo) {
#pragma omp simd
    for (int64_t k = 0; k < d; k++) {
        double p, pe, s, se;
        two_prod(a, x[k] * sc, &p, &pe);
        two_sum(hi[k], p, &s, &se);
        se += lo[k] + pe;
        hi[k] = s + se;
        lo[k] = se - (hi[k] - s);
    }
}

/* || a fl(x sc) - (hi + lo) ||^2: each component a x_k - s_k to one rounding of itself. */
static double dd_dist2(double a, const double *x, double sc, const double *hi, const double *lo,
                       int64_t d) {
    double t = 0;
#pragma omp simd reduction(+ : t)
    for (int64_t k = 0; k < d; k++) {
        double p, pe, s, se;
        two_prod(a, x[k] * sc, &p, &pe);
        two_sum(p, -hi[k], &s, &se);
        double v = s + (se + (pe - lo[k]));
        t += v * v;
    }
    return t;
}

/* || m1 a x - m2 (hi + lo) ||^2 for small integers m1, m2 (E: m1 = n - 1 + N, m2 = N). */
static double dd_dist2_int(double m1, double a, const double *x, double m2, const double *hi,
                           const double *lo, int64_t d) {
    double t = 0;
#pragma omp simd reduction(+ : t)
    for (int64_t k = 0; k < d; k++) {
        double p, pe, q, qe, r, re, s, se;
        two_prod(a, x[k], &p, &pe);
        two_prod(m1, p, &q, &qe);
        qe += m1 * pe;
        two_prod(m2, hi[k], &r, &re);
        re += m2 * lo[k];
        two_sum(q, -r, &s, &se);
        double v = s + (se + (qe - re));
        t += v * v;
    }
    return t;
}

/* dd[2 d] (hi, lo) = sum_{q < N} alpha_sel[q] x_sel[q] (sc = NULL) or alpha_sel[q] u_sel[q]
 * (sc = 1/|x|), extended from the first *cnt terms already in it. */
AL_COLD static void dd_extend(const double *a, const rowctx *rc, const int64_t *sel,
                              const double *sc, int64_t N, double *dd, int64_t *cnt) {
    int64_t d = rc->d;
    if (*cnt == 0) memset(dd, 0, 2 * (size_t)d * sizeof(double));
    for (int64_t q = *cnt; q < N; q++) {
        int64_t j = sel[q];
        dd_axpy(a[j], rc->x + j * d, sc ? sc[j] : 1.0, d, dd, dd + d);
    }
    *cnt = N;
}

/* w->Dx[i] = max_{q < N} |x_i - x_sel[q]|^2 in d-space for the i < n not selected at N
 * (extended from the first dx_cnt selected; a selected i never leaves I again): each
 * difference x_ik - x_jk has one rounding of itself. */
AL_COLD static void dx_extend(int64_t n, const rowctx *rc, rowws *w, int64_t N) {
    int64_t d = rc->d;
    if (w->dx_cnt == 0)
        for (int64_t i = 0; i < n; i++) w->Dx[i] = 0;
    for (int64_t i = 0; i < n; i++) {
        if (w->nsel[i] == 0) continue;
        const double *xi = rc->x + i * d;
        double mx = w->Dx[i];
        for (int64_t q = w->dx_cnt; q < N; q++) {
            const double *xj = rc->x + w->sel[q] * d;
            double t = 0;
#pragma omp simd reduction(+ : t)
            for (int64_t k = 0; k < d; k++) {
                double e = xi[k] - xj[k];
                t = FMA(e, e, t);
            }
            mx = mx > t ? mx : t;
        }
        w->Dx[i] = mx;
    }
    w->dx_cnt = N;
}

/* Builds cg (Y, then Gy = Y Y^T by one GEMM); returns 1 if built. */
AL_COLD static int centred_build(centred *cg) {
    if (cg->state) return cg->state > 0;
    int64_t L = cg->L, d = cg->d;
    size_t LL = (size_t)L * (size_t)L;
    double *Y = malloc((size_t)L * (size_t)d * sizeof(double));
    cg->Gy = malloc(LL * sizeof(double));
    cg->gyd = malloc((size_t)L * sizeof(double));
    if (!Y || !cg->Gy || !cg->gyd) {
        free(Y);
        free(cg->Gy);
        free(cg->gyd);
        cg->Gy = cg->gyd = NULL;
        cg->state = -1;
        return 0;
    }
    for (int64_t i = 0; i < L; i++) {
        double t = 0;
        for (int64_t k = 0; k < d; k++) {
            double e = cg->x[i * d + k] - cg->x[k];
            Y[i * d + k] = e;
            t += e * e;
        }
        cg->gyd[i] = t;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)L, (int)L, (int)d, 1.0, Y, (int)d, Y,
                (int)d, 0.0, cg->Gy, (int)L);
    free(Y);
    cg->state = 1;
    return 1;
}

/* The exact d1^2 at N, for a row whose expansion from G cancelled: from the head's centred Gram
 * matrix (n K per row), unless that cancels too (the row's keys close together relative to
 * their distance from x_0), then from the vectors (n K d). Dx is extended as N walks up. */
AL_COLD static double d1_exact(int64_t n, const rowctx *rc, rowws *w, int64_t N) {
    const double *ns = w->nsel;
    if (w->dx_mode == 0) w->dx_mode = rc->cg && centred_build(rc->cg) ? 1 : 2;
    if (w->dx_mode == 1) {
        const centred *cg = rc->cg;
        const double *gyd = cg->gyd + rc->off;
        if (w->dx_cnt == 0)
            for (int64_t i = 0; i < n; i++) w->Dx[i] = 0;
        for (int64_t q = w->dx_cnt; q < N; q++) { /* as update_rows' D, on Y */
            int64_t j = w->sel[q];
            const double *gj = cg->Gy + (rc->off + j) * cg->L + rc->off;
            double gjj = gyd[j];
            double *Dx = w->Dx;
#pragma omp simd
            for (int64_t i = 0; i < n; i++) {
                double v = gyd[i] + FMA(-2.0, gj[i], gjj);
                Dx[i] = Dx[i] > v ? Dx[i] : v;
            }
        }
        w->dx_cnt = N;
        double d1 = 0, gmax = 0, my2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = ns[i] * w->Dx[i];
            d1 = d1 > v ? d1 : v;
            gmax = gmax > gyd[i] ? gmax : gyd[i];
        }
        for (int64_t q = 0; q < N; q++) my2 = my2 > gyd[w->sel[q]] ? my2 : gyd[w->sel[q]];
        if (d1 >= cancel_tau((double)rc->d + 4.0) * (gmax + my2)) return d1;
        w->dx_mode = 2; /* cancels on Y too: from the vectors, from the start */
        w->dx_cnt = 0;
    }
    dx_extend(n, rc, w, N);
    double d1 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ns[i] * w->Dx[i];
        d1 = d1 > v ? d1 : v;
    }
    return d1;
}

/* ---- one row ------------------------------------------------------------------------------ */

/* Monte-Carlo dtilde over uniform random N-subsets: mean and sample variance of S draws. */
static void mc_row(const double *a, int64_t n, int N, const rowctx *rc, rowws *w, int S,
                   uint64_t seed, double *mean, double *var) {
    al__rng rng;
    al__rng_seed(&rng, al__hash64(seed ^ al__hash64((uint64_t)rc->row * 0x9E3779B97F4A7C15ull +
                                                    (uint64_t)N)));
    int64_t d = rc->d;
    for (int64_t i = 0; i < n; i++) w->perm[i] = i;
    double m = 0, m2 = 0;
    for (int s = 0; s < S; s++) {
        for (int64_t k = 0; k < N; k++) { /* partial Fisher-Yates */
            int64_t j = k + (int64_t)(al__rng_uniform(&rng) * (double)(n - k));
            if (j >= n) j = n - 1;
            int64_t t = w->perm[k];
            w->perm[k] = w->perm[j];
            w->perm[j] = t;
        }
        int64_t stamp = (int64_t)s + 1 + (int64_t)N * 1000003;
        for (int64_t k = 0; k < N; k++) w->mark[w->perm[k]] = stamp;
        double tot = 0;
        if (rc->G && N < d) {
            /* via the Gram rows: c_i = x_i . s in N n, |s|^2 = sum_{j in I} alpha_j c_j */
            double *cc = w->mcc, *ns = w->mns, ss = 0;
            for (int64_t i = 0; i < n; i++) {
                cc[i] = 0;
                ns[i] = w->mark[i] == stamp ? 0.0 : 1.0;
            }
            for (int64_t k = 0; k < N; k++) {
                int64_t j = w->perm[k];
                const double *gj = rc->G + j * rc->ldg;
                double aj = a[j];
#pragma omp simd
                for (int64_t i = 0; i < n; i++) cc[i] = FMA(aj, gj[i], cc[i]);
            }
            double Q = 0; /* sum_{j in I} |alpha_j| |x_j| (the error scale) */
            for (int64_t k = 0; k < N; k++) {
                int64_t j = w->perm[k];
                ss += a[j] * cc[j];
                Q += fabs(a[j]) * rc->gd[j] * rc->inv[j];
            }
            const double *gd = rc->gd;
            double tau = cancel_tau(2.0 * (double)N + (double)d + 3.0), tQ2 = tau * Q * Q, mn = 0;
#pragma omp simd reduction(+ : tot) reduction(min : mn)
            for (int64_t i = 0; i < n; i++) {
                double p = a[i] * a[i] * gd[i];
                double t2 = FMA(-2.0 * a[i], cc[i], FMA(a[i] * a[i], gd[i], ss));
                t2 = t2 > 0 ? t2 : 0;
                tot = FMA(ns[i], sqrt(t2), tot);
                double v = FMA(-ns[i], FMA(tau, p, tQ2), t2);
                mn = mn < v ? mn : v;
            }
            if (mn < 0) { /* cancellation: those terms from the vectors (s in double-double) */
                int64_t cnt = 0;
                dd_extend(a, rc, w->perm, NULL, N, w->mdd, &cnt);
                tot = 0;
                for (int64_t i = 0; i < n; i++) {
                    if (ns[i] == 0) continue;
                    double p = a[i] * a[i] * gd[i];
                    double t2 = FMA(-2.0 * a[i], cc[i], FMA(a[i] * a[i], gd[i], ss));
                    t2 = t2 > 0 ? t2 : 0;
                    if (t2 < FMA(tau, p, tQ2))
                        t2 = dd_dist2(a[i], rc->x + i * d, 1.0, w->mdd, w->mdd + d, d);
                    tot += sqrt(t2);
                }
            }
        } else {
            /* directly: s in d-space, then |alpha_i x_i - s| in (n - N) d */
            for (int64_t k = 0; k < d; k++) w->sv[k] = 0;
            for (int64_t k = 0; k < N; k++) {
                int64_t j = w->perm[k];
                const double *xj = rc->x + j * d;
                for (int64_t q = 0; q < d; q++) w->sv[q] += a[j] * xj[q];
            }
            for (int64_t i = 0; i < n; i++) {
                if (w->mark[i] == stamp) continue;
                const double *xi = rc->x + i * d;
                double t2 = 0;
                for (int64_t q = 0; q < d; q++) {
                    double e = a[i] * xi[q] - w->sv[q];
                    t2 += e * e;
                }
                tot += sqrt(t2);
            }
        }
        double dlt = tot - m; /* Welford */
        m += dlt / (double)(s + 1);
        m2 += dlt * (tot - m);
    }
    for (int64_t i = 0; i < n; i++) w->mark[i] = 0;
    *mean = m;
    *var = S > 1 ? m2 / (double)(S - 1) : NAN;
}

/* The exact dtilde at N: the flagged terms (t2 < tau (|alpha_i x_i|^2 + Q^2)) from the vectors
 * (s in double-double), the others as the vectorised loop had them. */
AL_COLD static double dtilde_exact(const double *a, int64_t n, const rowctx *rc, rowws *w,
                                   const double *c, int64_t N, double ss, double tdt, double tQ2) {
    int64_t d = rc->d;
    dd_extend(a, rc, w->sel, NULL, N, w->sdd, &w->s_cnt);
    double dt = 0;
    for (int64_t i = 0; i < n; i++) {
        if (w->nsel[i] == 0) continue;
        double p = w->pa[i], t2 = FMA(-2.0 * a[i], c[i], p + ss);
        t2 = t2 > 0 ? t2 : 0;
        if (t2 < FMA(tdt, p, tQ2)) t2 = dd_dist2(a[i], rc->x + i * d, 1.0, w->sdd, w->sdd + d, d);
        dt += sqrt(t2);
    }
    return dt;
}

/* The exact sum of E's norms at N: flagged terms as ||(n-1+N) alpha_i x_i - N S|| / (n-1) from
 * the vectors (S in double-double, once per row). */
AL_COLD static double E_exact(const double *a, int64_t n, const rowctx *rc, rowws *w, int64_t N,
                              double f2, double fc2, double cc2SS, double f2tE, double CE) {
    int64_t d = rc->d;
    if (!w->S_ok) {
        memset(w->Sdd, 0, 2 * (size_t)d * sizeof(double));
        for (int64_t j = 0; j < n; j++) dd_axpy(a[j], rc->x + j * d, 1.0, d, w->Sdd, w->Sdd + d);
        w->S_ok = 1;
    }
    double es = 0, m1 = (double)(n - 1 + N), m2 = (double)N, nm1 = (double)(n - 1);
    for (int64_t i = 0; i < n; i++) {
        double p = w->pa[i], e2 = FMA(f2, p, FMA(-fc2, w->axs[i], cc2SS));
        e2 = e2 > 0 ? e2 : 0;
        if (FMA(-f2tE, p, e2) < CE)
            es += sqrt(dd_dist2_int(m1, a[i], rc->x + i * d, m2, w->Sdd, w->Sdd + d, d)) / nm1;
        else
            es += sqrt(e2);
    }
    return es;
}

/* The exact r^2 at N: the minimum over the non-selected j whose expansion value is <= thr
 * (every j that can hold the minimum) of ||s_u - alpha_j u_j||^2 from the vectors (u_j as
 * fl(x_j / |x_j|), s_u in double-double). */
AL_COLD static double radius_exact(const double *a, int64_t n, const rowctx *rc, rowws *w,
                                   int64_t N, double ssu, double thr) {
    int64_t d = rc->d;
    dd_extend(a, rc, w->sel, rc->inv, N, w->sudd, &w->su_cnt);
    double r2 = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (w->nsel[i] == 0) continue;
        double v = FMA(w->m2ai[i], w->cu[i], w->ua2[i] + ssu);
        if (v > thr) continue;
        double vx = dd_dist2(a[i], rc->x + i * d, rc->inv[i], w->sudd, w->sudd + d, d);
        r2 = vx < r2 ? vx : r2;
    }
    return r2;
}

/* xi_i^2 with sum_{j in I, j != i} alpha_j^2 and alpha_j summed over the others directly
 * (no A2 - alpha_i^2, A1 - alpha_i cancellation). */
AL_COLD static double xi2_direct(const double *a, const int64_t *sel, int64_t N, int64_t q,
                                 double kf) {
    double sq = 0, lin = 0;
    for (int64_t p = 0; p < N; p++) {
        if (p == q) continue;
        double v = a[sel[p]];
        sq += v * v;
        lin += v;
    }
    return sq + kf * (lin * lin - sq);
}

/* The list mode's dtilde at N over the unselected sel[N..n) alone (c at N), with the minimum of
 * its cancellation test (< 0 flagged). */
static void list_dt(const double *a, int64_t n, int64_t N, const int64_t *sel, const double *c,
                    const double *pa, double ss, double tdt, double tQ2, double *dt_out,
                    double *mdt_out) {
    double dt = 0, mdt = 0;
#pragma omp simd reduction(+ : dt) reduction(min : mdt)
    for (int64_t q = N; q < n; q++) {
        int64_t i = sel[q];
        double p = pa[i], t2 = FMA(-2.0 * a[i], c[i], p + ss);
        t2 = t2 > 0 ? t2 : 0;
        dt += sqrt(t2);
        double ft = t2 - FMA(tdt, p, tQ2);
        mdt = mdt < ft ? mdt : ft;
    }
    *dt_out = dt, *mdt_out = mdt;
}

/* The scalars of the distance's sums at N (cancellation thresholds, header comment: dtilde's
 * terms against |alpha_i x_i|^2 + Q^2 (k = 2N + d + 3); E's against (1+cc)^2 |alpha_i x_i|^2 +
 * cc^2 |S|^2 (k = d + 4) plus the absolute error cc gamma_n R of S itself), and what finishing
 * the N needs. list: dtilde over sel[N..n) (list_dt), the pass takes E's sums alone. */
static void dist_setup(evalq *e, const double *a, int64_t n, int64_t N, const rowctx *rc, rowws *w,
                       double ss, double Q, double R, double A1, double m, double gmax, int bound,
                       int list) {
    double d = (double)rc->d, cc = (double)N / (double)(n - 1), f = 1.0 + cc;
    e->a = a, e->pa = w->pa, e->ns = w->nsel, e->axs = w->axs, e->cN = w->c;
    e->ss = ss, e->f2 = f * f, e->fc2 = 2.0 * f * cc, e->cc2SS = cc * cc * rc->SS;
    e->tdt = cancel_tau(2.0 * N + d + 3.0), e->tQ2 = e->tdt * Q * Q;
    /* E's test: xs and SS from the Gram matrix (gk > 0) add cc^2 R^2 to cc^2 |S|^2 and gk
     * roundings (metrics.c's header comment, wide_block) */
    double tE = cancel_tau(d + 4.0 + rc->gk), eS = 2.0 * cc * (double)n * AL_U * R / AL_RHO;
    e->f2tE = tE * e->f2;
    e->CE = FMA(tE, rc->gk > 0 ? FMA(cc * cc, R * R, e->cc2SS) : e->cc2SS, eS * eS);
    e->N = N, e->A1 = A1, e->m = m, e->gmax = gmax, e->bound = bound, e->list = list;
    e->kind = list ? EV_E : bound ? EV_BND : EV_FULL;
}

/* The distance's metrics at e->N into r, from e's sums (a pass took them), the exact fallbacks
 * where they are flagged. */
static void dist_finish(evalq *e, const double *a, int64_t n, const rowctx *rc, rowws *w,
                        const al_metrics_opts *o, accum *r) {
    int64_t N = e->N, d = rc->d;
    double dt = e->dt, mdt = e->mdt, es = e->es, b = e->b, d1 = e->d1;
    if (e->list) list_dt(a, n, N, w->sel, e->cN, w->pa, e->ss, e->tdt, e->tQ2, &dt, &mdt);
    if (mdt < 0) dt = dtilde_exact(a, n, rc, w, e->cN, N, e->ss, e->tdt, e->tQ2);
    if (e->mE < e->CE) es = E_exact(a, n, rc, w, N, e->f2, e->fc2, e->cc2SS, e->f2tE, e->CE);
    r->dmax = NAN; /* past bound_n: D is no longer kept */
    if (e->bound) {
        double m = e->m, A1 = e->A1;
        if (b != 0 && d1 < cancel_tau((double)d + 3.0) * (e->gmax + m * m))
            d1 = d1_exact(n, rc, w, N);
        /* (n-N) abar - b = sum_{i not in I} (abar - alpha_i); summed so where the
         * difference cancels (weights near abar: it can be exactly 0) */
        double cf = (double)(n - N) * A1 - b;
        if (!(fabs(cf) > 0.5 * (double)(n - N) * fabs(A1))) {
            cf = 0;
            for (int64_t i = 0; i < n; i++) cf = FMA(w->nsel[i], A1 - a[i], cf);
        }
        r->dmax = b * sqrt(d1) + cf * m;
    }
    r->dtilde = dt;
    r->E = (double)(n - N) / (double)n * es;
    if (o->mc_samples > 0)
        mc_row(a, n, (int)N, rc, w, o->mc_samples, o->mc_seed, &r->E_mc, &r->E_mc_var);
}

/* Adds a row's metrics r at one N to its grid entries ord[p0..p1) (duplicates allowed). */
static void add_accum(accum *acc, const grid *g, const al_metrics_opts *o, int p0, int p1,
                      const accum *r) {
    for (int p = p0; p < p1; p++) {
        accum *t = &acc[g->ord[p]];
        t->rows++;
        t->dtilde += r->dtilde;
        t->dmax += r->dmax;
        t->E += r->E;
        t->E_mc += r->E_mc;
        t->E_mc_var += r->E_mc_var / (double)(o->mc_samples > 0 ? o->mc_samples : 1);
        t->ns += r->ns;
        t->lo += r->lo;
        t->up += r->up;
    }
}

/* sel[0..m-1] = the m best keys of a[n] (top_k), from the row's ranking rk[n] when given
 * (al__head_rank: the same indices). */
static void select_keys(const double *a, int64_t n, int64_t m, const uint16_t *rk, rowws *w) {
    if (!rk) {
        top_k(a, n, m, w->sel, w->kv, w->xi);
        return;
    }
    for (int64_t q = 0; q < m; q++) w->sel[q] = rk[q];
}

/* Walks N = 1..K for one row of weights a[n] (ranked rk[n], or NULL) and adds the grid's
 * metrics to acc[].
 * Long on purpose (over 150 lines): the hot loop of the metrics, one pass in which every
 * statistic's running sums (distance, bounds, separability, their error scales) advance together
 * per N; split, they would pass a dozen accumulators through each helper on every step. */
static void row_pass(const double *a, int64_t n, const uint16_t *rk, const rowctx *rc,
                     const al_metrics_opts *o, const grid *g, rowws *w, accum *acc) {
    if (n < 2 || g->n_top == 0) return;
    int64_t K = g->n_max < n - 1 ? g->n_max : n - 1, d = rc->d;
    int gp = 0; /* next grid entry (in ord) */
    const int *Ns = o->top_n;
    while (gp < g->n_top && Ns[g->ord[gp]] < 1) gp++;
    /* the list mode (list_cheaper) reads the unselected keys as sel[N..n): then every key is
     * ranked (the first K as before: the order is total) */
    int list_ok = o->distance && !o->separability && K == n - 1, listm = 0;
    int n_dist = 0, di = 0; /* the distinct N <= K of the grid; the current one's index */
    int64_t N_last = 0;
    for (int p = gp; p < g->n_top && Ns[g->ord[p]] <= K; p++) {
        n_dist += Ns[g->ord[p]] != N_last;
        N_last = Ns[g->ord[p]];
    }
    select_keys(a, n, list_ok ? n : K, rk, w);
    for (int64_t q = 0; q < K; q++) {
        w->sinv[q] = rc->inv[w->sel[q]];
        w->sun[q] = rc->un[w->sel[q]];
        w->asel[q] = a[w->sel[q]];
    }
    for (int64_t i = 0; i < n; i++) {
        w->c[i] = 0;
        w->D[i] = 0;
        w->cu[i] = 0;
        w->nsel[i] = 1.0;
    }
    w->s_cnt = w->su_cnt = w->dx_cnt = 0;
    w->S_ok = w->dx_mode = 0;
    double A1 = 0, A2 = 0, m = 0, delta2 = INFINITY, amax2 = 0;
    /* error scales: Q = sum_{j in I} |alpha_j| |x_j|, B1 = sum_{j in I} |alpha_j|,
     * R = sum_{j < n} |alpha_j| |x_j|, gmax = max_{j < n} |x_j|^2 (|x| as |x|^2 / |x|) */
    double Q = 0, B1 = 0, R = 0, gmax = 0;
#pragma omp simd reduction(max : amax2)
    for (int64_t i = 0; i < n; i++) amax2 = amax2 > a[i] * a[i] ? amax2 : a[i] * a[i];
    if (o->separability) /* the N-independent parts of the separability radius */
        for (int64_t i = 0; i < n; i++) {
            w->ua2[i] = a[i] * a[i] * rc->un[i];
            w->m2ai[i] = -2.0 * a[i] * rc->inv[i];
        }
    if (o->distance) { /* the N-independent parts of the distance sums */
        const double *gd = rc->gd, *inv = rc->inv;
        for (int64_t i = 0; i < n; i++) {
            w->pa[i] = a[i] * a[i] * gd[i];
            w->axs[i] = a[i] * rc->xs[i];
        }
#pragma omp simd reduction(+ : R) reduction(max : gmax)
        for (int64_t i = 0; i < n; i++) {
            R += fabs(a[i]) * gd[i] * inv[i];
            gmax = gmax > gd[i] ? gmax : gd[i];
        }
    }
    int64_t k = 0; /* selected so far: sel[0..k-1] */
    /* the distance's sums at the last N, deferred into the next N's first pass (distance
     * alone, Gram mode); its grid entries ord[pg0..pg1), its metrics pr */
    evalq ev, *pend = NULL;
    int pg0 = 0, pg1 = 0;
    accum pr = {0};
    while (gp < g->n_top && Ns[g->ord[gp]] <= K) {
        int N = Ns[g->ord[gp]], bound = N <= g->bound_n;
        if (!listm && list_ok && !bound && list_cheaper(k, N, N_last, n_dist - di, n, d)) {
            listm = 1; /* from here on x_i . s from the vectors; s from the k selected */
            memset(w->sl, 0, (size_t)d * sizeof(double));
            s_extend(a, rc, w->sel, 0, k, w->sl);
        }
        di++;
        if (listm)
            s_extend(a, rc, w->sel, k, N, w->sl);
        else
            add_batch(a, n, rc, o, w, k, N, bound, pend);
        if (pend) { /* the last N's sums came with the first pass */
            dist_finish(pend, a, n, rc, w, o, &pr);
            add_accum(acc, g, o, pg0, pg1, &pr);
            pend = NULL;
        }
        /* delta^2: the new sel[k..N-1] against every earlier selected (their Gram rows were
         * just streamed by add_batch, so the gathers hit the cache) */
        if (o->separability)
            for (int64_t q = (k > 1 ? k : 1); q < N; q++) {
                int64_t j = w->sel[q];
                const double *gj = gram_row(rc, j);
                double unj = rc->un[j], m2ij = -2.0 * rc->inv[j], dmin = INFINITY;
                const int64_t *sel = w->sel;
                const double *sinv = w->sinv, *sun = w->sun;
#pragma omp simd reduction(min : dmin)
                for (int64_t p = 0; p < q; p++) {
                    double dd = FMA(m2ij * sinv[p], gj[sel[p]], sun[p] + unj);
                    dmin = dmin < dd ? dmin : dd;
                }
                delta2 = dmin < delta2 ? dmin : delta2;
            }
        for (; k < N; k++) {
            int64_t j = w->sel[k];
            w->nsel[j] = 0.0;
            w->ua2[j] = 1e300; /* selected: out of the minimum of the radius */
            A1 += a[j];
            A2 += a[j] * a[j];
            double nj = sqrt(rc->gd[j]);
            if (nj > m) m = nj;
            Q += fabs(a[j]) * nj;
            B1 += fabs(a[j]);
        }
        /* |s|^2 = sum_{j in I} alpha_j x_j . s, |s_u|^2 = sum_{j in I} alpha_j u_j . s_u */
        double ss = 0, ssu = 0;
        const int64_t *sel = w->sel;
        const double *cj = w->c, *cuj = w->cu, *invj = rc->inv;
        if (listm) { /* |s|^2 from s; c_i for the unselected sel[N..n) only */
            const double *sl = w->sl;
#pragma omp simd reduction(+ : ss)
            for (int64_t q = 0; q < d; q++) ss += sl[q] * sl[q];
            dots_rows(rc->x, d, sel + N, n - N, sl, w->c);
        } else if (o->separability) {
#pragma omp simd reduction(+ : ss, ssu)
            for (int64_t q = 0; q < N; q++) {
                int64_t j = sel[q];
                ss += a[j] * cj[j];
                ssu += a[j] * invj[j] * cuj[j];
            }
        } else { /* ss alone: the same sum in the same order (alpha in selection order) */
            const double *asel = w->asel;
#pragma omp simd reduction(+ : ss)
            for (int64_t q = 0; q < N; q++) ss += asel[q] * cj[sel[q]];
        }

        /* ---- evaluate the metrics at this N ---- */
        accum r = {0};
        r.rows = 1;
        int g0 = gp; /* this N's grid entries: ord[g0..gp) */
        while (gp < g->n_top && Ns[g->ord[gp]] == N) gp++;
        if (o->distance) {
            /* past the bound and the middle of the row, dtilde over the unselected sel[N..n)
             * alone (c is kept for every key in either mode): fewer square roots */
            int list = listm || (list_ok && !bound && 2 * (n - N) < n);
            dist_setup(&ev, a, n, N, rc, w, ss, Q, R, A1, m, gmax, bound, list);
            /* the next N's Gram pass reads c and D anyway: the sums come with it */
            int N2 = gp < g->n_top ? Ns[g->ord[gp]] : INT_MAX, b2 = N2 <= g->bound_n;
            if (!o->separability && N2 <= K && !listm &&
                !(list_ok && !b2 && list_cheaper(N, N2, N_last, n_dist - di, n, d))) {
                ev.cN = w->cprev;
                pend = &ev;
                pr = r;
                pg0 = g0, pg1 = gp;
                continue;
            }
            update_fn sums = list ? sums_E : bound ? sums_bnd : sums_full;
            sums(w->c, w->D, NULL, NULL, NULL, &ev, n);
            dist_finish(&ev, a, n, rc, w, o, &r);
        }
        if (o->separability) {
            const double *cu = w->cu, *inv = rc->inv, *un = rc->un;
            const double *ua2 = w->ua2, *m2ai = w->m2ai;
            double r2 = INFINITY;
#pragma omp simd reduction(min : r2)
            for (int64_t i = 0; i < n; i++) {
                double v = FMA(m2ai[i], cu[i], ua2[i] + ssu);
                r2 = r2 < v ? r2 : v;
            }
            /* Every ||s_u - alpha_j u_j||^2 of the expansion is within 2 gamma_k scr of its
             * value for the unit vectors fl(x / |x|) (k = 2N + d + 6: 1/|x| adds d/2 + 3), and
             * those are within tol0 (a distance) of the values for the exact x / |x|
             * (|fl(x / |x|) - x / |x|| <= (d/2 + 4) u, doubled): two distances closer than
             * 2 tol0 are equal as far as double precision can tell. win: the window (in
             * squared distance) where a comparison of the expansion's values is in doubt. */
            double amax = sqrt(amax2), scr = amax2 + B1 * B1;
            double tol0 = 2.0 * (0.5 * (double)d + 4.0) * AL_U * (B1 + amax);
            double win = 4.0 * (2.0 * N + (double)d + 6.0) * AL_U * scr;
            win = win > 8.0 * tol0 * (B1 + amax) ? win : 8.0 * tol0 * (B1 + amax);
            int rex = 0; /* r2 from the vectors */
            if (r2 <= cancel_tau(2.0 * N + (double)d + 6.0) * scr) {
                r2 = radius_exact(a, n, rc, w, N, ssu, r2 + win);
                rex = 1;
            }
            if (rex && r2 <= tol0 * tol0) { /* r == 0 */
                r.ns = r.lo = r.up = 0;
            } else {
                int64_t cnt = 0;
                double sxi = 0, sexp = 0, mamb = 0, r2c = r2;
                double kf = 1.0 - (delta2 > 0 ? delta2 : 0) / 2.0;
                double *ex = w->xi;
                for (int64_t q = 0; q < N; q++) {
                    int64_t i = w->sel[q];
                    double ai = a[i];
                    double v = FMA(-2.0 * ai * inv[i], cu[i], FMA(ai * ai, un[i], ssu));
                    cnt += (v > 0 ? v : 0) < r2;
                    double amb = fabs(v - r2c) - win; /* < 0: the comparison is in doubt */
                    mamb = mamb < amb ? mamb : amb;
                    ex[q] = ai;
                }
                if (mamb < 0) { /* those comparisons from the vectors; "<" by more than
                                 * 2 tol0 (closer is a tie, as r == 0 above) */
                    if (!rex) r2 = radius_exact(a, n, rc, w, N, ssu, r2 + win);
                    dd_extend(a, rc, w->sel, rc->inv, N, w->sudd, &w->su_cnt);
                    double rlim = sqrt(r2) - 2.0 * tol0;
                    cnt = 0;
                    for (int64_t q = 0; q < N; q++) {
                        int64_t i = w->sel[q];
                        double ai = a[i];
                        double v = FMA(-2.0 * ai * inv[i], cu[i], FMA(ai * ai, un[i], ssu));
                        if (fabs(v - r2c) - win < 0)
                            cnt += sqrt(dd_dist2(ai, rc->x + i * d, inv[i], w->sudd, w->sudd + d,
                                                 d)) < rlim;
                        else
                            cnt += (v > 0 ? v : 0) < r2;
                    }
                }
                double rr = sqrt(r2);
                if (N >= 2) {
                    /* xi_i^2 from A2 - alpha_i^2 and A1 - alpha_i: error <= 6 gamma_k B1^2
                     * (k = N + d + 4) */
                    double lxi = cancel_tau(3.0 * (N + (double)d + 4.0)) * B1 * B1, mxi = 0;
#pragma omp simd reduction(+ : sxi) reduction(min : mxi)
                    for (int64_t q = 0; q < N; q++) {
                        double ai = ex[q], sq = A2 - ai * ai, lin = A1 - ai;
                        double xi2 = sq + kf * (lin * lin - sq);
                        double fx = xi2 - lxi; /* < 0: flagged */
                        mxi = mxi < fx ? mxi : fx;
                        /* max(v, 0) = (v + |v|) / 2 exactly (|v| is far below DBL_MAX
                         * here): selects the compiler keeps vectorised */
                        double xi = sqrt(0.5 * (xi2 + fabs(xi2)));
                        sxi += xi;
                        double e = 0.5 * ((xi - rr) + fabs(xi - rr));
                        ex[q] = -0.5 * e * e;
                    }
                    if (mxi < 0) { /* flagged xi_i from sums over the others */
                        sxi = 0;
                        for (int64_t q = 0; q < N; q++) {
                            double ai = a[w->sel[q]], sq = A2 - ai * ai, lin = A1 - ai;
                            double xi2 = sq + kf * (lin * lin - sq);
                            if (xi2 - lxi < 0) xi2 = xi2_direct(a, w->sel, N, q, kf);
                            double xi = sqrt(xi2 > 0 ? xi2 : 0);
                            sxi += xi;
                            double e = xi > rr ? xi - rr : 0;
                            ex[q] = -0.5 * e * e;
                        }
                    }
#pragma omp simd
                    for (int64_t q = 0; q < N; q++) ex[q] = al__exp_neg(ex[q]);
#pragma omp simd reduction(+ : sexp)
                    for (int64_t q = 0; q < N; q++) sexp += ex[q];
                } else {
                    sexp = 1.0; /* N = 1: xi = 0 */
                }
                r.ns = (double)cnt / (double)N;
                double lo = 1.0 - sxi / (rr * (double)N), up = sexp / (double)N;
                r.lo = lo > 0 ? lo : 0;
                r.up = up < 1 ? up : 1;
            }
        }
        add_accum(acc, g, o, g0, gp, &r);
    }
}

/* ---- shared checks and results -------------------------------------------------------------- */

static int check_opts(const al_metrics_opts *o, int64_t d, al_error *err) {
    if (!o) return al__err(err, AL_E_INVALID, "metrics: NULL options");
    if (d < 1)
        return al__err(err, AL_E_INVALID, "metrics: vector dimension d = %lld < 1", (long long)d);
    if (o->mc_samples < 0)
        return al__err(err, AL_E_INVALID, "metrics: Monte-Carlo samples %d < 0", o->mc_samples);
    if (o->window < 0) return al__err(err, AL_E_INVALID, "metrics: window %d < 0", o->window);
    return 0;
}

/* Are v[0..n) all finite? (v * 0 is 0, or NaN for an infinity or a NaN: a vectorised sum) */
static int all_finite(const double *v, int64_t n) {
    double z = 0;
#pragma omp simd reduction(+ : z)
    for (int64_t i = 0; i < n; i++) z += v[i] * 0.0;
    return z == 0;
}

static int check_x(const double *x, int64_t rows, int64_t d, al_error *err) {
    if (all_finite(x, rows * d)) return 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < d; k++)
            if (!isfinite(x[i * d + k]))
                return al__err(err, AL_E_RANGE,
                               "metrics: vectors: non-finite value %g at row %lld, column %lld",
                               x[i * d + k], (long long)i, (long long)k);
    return 0;
}

static void finish(const al_metrics_opts *o, const accum *acc, al_topn_stats *out) {
    for (int k = 0; k < o->n_top; k++) {
        const accum *t = &acc[k];
        al_topn_stats *s = &out[k];
        s->N = o->top_n[k];
        s->rows = t->rows;
        double r = t->rows > 0 ? (double)t->rows : NAN;
        s->dtilde = s->dmax = s->E = s->E_mc = s->E_mc_se = NAN;
        s->ns_ratio = s->ns_lower = s->ns_upper = NAN;
        if (t->rows == 0) continue;
        if (o->distance) {
            s->dtilde = t->dtilde / r;
            s->dmax = t->dmax / r;
            s->E = t->E / r;
            if (o->mc_samples > 0) {
                s->E_mc = t->E_mc / r;
                s->E_mc_se = sqrt(t->E_mc_var) / r;
            }
        }
        if (o->separability) {
            s->ns_ratio = t->ns / r;
            s->ns_lower = t->lo / r;
            s->ns_upper = t->up / r;
        }
    }
}

/* gd[n] = |x_i|^2 computed directly (a vectorised sum: one FMA chain per lane, not one per
 * vector, 0.5 ms a head at d = 576), inv[n] = 1/|x_i| (0 for x_i = 0), un[n] = |u_i|^2. */
static void vector_norms(const double *x, int64_t n, int64_t d, double *gd, double *inv,
                         double *un) {
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < d; k++) s += x[i * d + k] * x[i * d + k];
        gd[i] = s;
        inv[i] = s > 0 ? 1.0 / sqrt(s) : 0.0;
        un[i] = s > 0 ? 1.0 : 0.0;
    }
}

static void blas_single(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* ---- public: one row ------------------------------------------------------------------------ */

/* max_j a_j and H = -sum a log a (terms with a <= 0 contribute 0) of a[n], n >= 1. */
static void vanishing(const double *a, int64_t n, double *mx, double *H) {
    double m = -INFINITY, h = 0;
    for (int64_t j = 0; j < n; j++) {
        if (a[j] > m) m = a[j];
        if (a[j] > 0) h -= a[j] * log(a[j]);
    }
    *mx = m;
    *H = h;
}

int AL_MV(al_row_vanishing)(const double *alpha, int64_t n, double *max_weight, double *entropy,
                            double *entropy_norm, al_error *err) {
    if (!alpha) return al__err(err, AL_E_INVALID, "vanishing: NULL weights");
    if (n < 1) return al__err(err, AL_E_INVALID, "vanishing: empty row (n = %lld)", (long long)n);
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(alpha[j]))
            return al__err(err, AL_E_RANGE,
                           "vanishing: weights: non-finite value %g at position %lld", alpha[j],
                           (long long)j);
    double mx, H;
    vanishing(alpha, n, &mx, &H);
    if (max_weight) *max_weight = mx;
    if (entropy) *entropy = H;
    if (entropy_norm) *entropy_norm = n >= 2 ? H / log((double)n) : NAN;
    return 0;
}

int AL_MV(al_row_metrics)(const double *alpha, const double *x, int64_t n, int64_t d,
                          const al_metrics_opts *o, al_topn_stats *out, al_error *err) {
    int rc = check_opts(o, d, err);
    if (rc) return rc;
    if (n < 1) return al__err(err, AL_E_INVALID, "metrics: empty row (n = %lld)", (long long)n);
    if (!alpha || !x || (o->n_top > 0 && !out))
        return al__err(err, AL_E_INVALID, "metrics: NULL argument");
    if (n > (int64_t)1 << 20 || d > (int64_t)1 << 24)
        return al__err(err, AL_E_INVALID, "metrics: row too large (n %lld, d %lld)", (long long)n,
                       (long long)d);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(alpha[i]))
            return al__err(err, AL_E_RANGE,
                           "metrics: weights: non-finite value %g at position %lld", alpha[i],
                           (long long)i);
    if ((rc = check_x(x, n, d, err))) return rc;

    /* Only the Gram rows of the selected keys are needed: Gs[k, :] = x_{sel[k]} . X^T for the
     * K = min(max N, n - 1) largest weights (memory K n instead of n^2). */
    grid g;
    if ((rc = build_grid(&g, o, err))) return rc;
    int64_t K = g.n_max < n - 1 ? g.n_max : n - 1;
    if (K < 1) K = 1;
    rowws w;
    accum *acc = al__calloc((size_t)(o->n_top > 0 ? o->n_top : 1), sizeof(accum), "metrics", err);
    double *Gs = al__malloc((size_t)K * (size_t)n * sizeof(double), "metrics Gram rows", err);
    double *Xs = al__malloc((size_t)K * (size_t)d * sizeof(double), "metrics vectors", err);
    const double **grow = al__calloc((size_t)n, sizeof(double *), "metrics Gram rows", err);
    double *vec = al__malloc((size_t)n * 4 * sizeof(double), "metrics norms", err); /* [4, n] */
    double *S = al__malloc((size_t)d * sizeof(double), "metrics output", err);      /* [d] */
    if (!acc || !Gs || !Xs || !grow || !vec || !S || build_rowws(&w, n, d, err)) {
        free(acc);
        free(Gs);
        free(Xs);
        free(grow);
        free(vec);
        free(S);
        free_grid(&g);
        return AL_E_NOMEM;
    }
    double *gd = vec, *inv = vec + n, *un = vec + 2 * n, *xs = vec + 3 * n;
    vector_norms(x, n, d, gd, inv, un);
    if (n >= 2) {
        top_k(alpha, n, K, w.sel, w.kv, w.xi); /* the same selection row_pass makes */
        for (int64_t k = 0; k < K; k++) {
            memcpy(Xs + k * d, x + w.sel[k] * d, (size_t)d * sizeof(double));
            grow[w.sel[k]] = Gs + k * n;
        }
        blas_single();
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)K, (int)n, (int)d, 1.0, Xs,
                    (int)d, x, (int)d, 0.0, Gs, (int)n);
    }
    for (int64_t k = 0; k < d; k++) S[k] = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < d; k++) S[k] += alpha[j] * x[j * d + k];
    double SS = 0;
    for (int64_t k = 0; k < d; k++) SS += S[k] * S[k];
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t k = 0; k < d; k++) s += x[i * d + k] * S[k];
        xs[i] = s;
    }
    rowctx ctx = {
        .x = x, .d = d, .grow = grow, .gd = gd, .inv = inv, .un = un, .xs = xs, .SS = SS, .row = 0};
    row_pass(alpha, n, NULL, &ctx, o, &g, &w, acc);
    finish(o, acc, out);
    free_rowws(&w);
    free(acc);
    free(Gs);
    free(Xs);
    free(grow);
    free(vec);
    free(S);
    free_grid(&g);
    return 0;
}

/* ---- public: one head ----------------------------------------------------------------------- */

typedef struct headws {
    double *G;   /* [L, L] X X^T */
    double *XS;  /* [XB, L] XS[t - t0, i] = x_i . S_t for one block of rows (distance only);
                  * from the Gram matrix (xs_from_gram): [XG, L] */
    double *S;   /* [L, d] attention outputs (distance only); wide vectors: [XG, d] */
    double *vec; /* [5, L] gd, inv, un, SS, gk (rowctx.gk) */
    double *Wb;  /* [XG, L] wide vectors: wide_block's scratch */
} headws;

static void free_headws(headws *h) {
    free(h->G);
    free(h->XS);
    free(h->S);
    free(h->Wb);
    free(h->vec);
    memset(h, 0, sizeof *h);
}

/* rows of XS per block: from S; from the Gram matrix (a multiple of gemm.c's MR = 6; each block
 * packs G's first columns again: bench_gemm --double, L = 1024: 7.2-7.5 ms by 288, 7.7 by 144) */
#define XB 32
#define XG 288

static int build_headws(headws *h, int64_t L, int64_t d, int need_dist, int need_gram, int xsg,
                        al_error *err) {
    memset(h, 0, sizeof *h);
    size_t LL;
    if (!al__mul_ok((size_t)L, (size_t)L, &LL) || !al__mul_ok(LL, sizeof(double), &LL))
        return al__err(err, AL_E_NOMEM, "metrics: L = %lld too large", (long long)L);
    h->vec = al__malloc((size_t)L * 5 * sizeof(double), "metrics norms", err);
    if (!h->vec) return AL_E_NOMEM;
    if (need_gram && !(h->G = al__malloc_huge(LL, "metrics Gram matrix [L, L]", err))) goto fail;
    if (need_dist && xsg) { /* XS and S by blocks of XG rows (wide_block) */
        if (!(h->XS =
                  al__malloc((size_t)XG * (size_t)L * sizeof(double), "metrics x.S [XG, L]", err)))
            goto fail;
        if (!(h->S = al__malloc((size_t)XG * (size_t)d * sizeof(double), "metrics S", err)) ||
            !(h->Wb = al__malloc((size_t)XG * (size_t)L * sizeof(double), "metrics W rows", err)))
            goto fail;
    } else if (need_dist) {
        if (!(h->XS =
                  al__malloc((size_t)XB * (size_t)L * sizeof(double), "metrics x.S [XB, L]", err)))
            goto fail;
        if (!(h->S = al__malloc((size_t)L * (size_t)d * sizeof(double), "metrics S", err)))
            goto fail;
    }
    return 0;
fail:
    free_headws(h);
    return AL_E_NOMEM;
}

/* The head's products: our DGEMM (gemm.h) from AVX-512 on, else single-threaded OpenBLAS (the
 * caller has called blas_single); the choice is al__cpu_level()'s, the same in every copy. */

/* G [L, L] = X X^T of x [L, d]: the lower block triangle, then mirrored in 8 x 8 blocks, each
 * upper row written in order (0.2 ms at L = 1024, against 2.7 ms for 32 x 32 blocks in lower-row
 * order); the same bits as the whole product (gemm.h), or all of it by OpenBLAS */
static void gram(const double *x, int64_t L, int64_t d, double *G) {
    int iL = (int)L, id = (int)d;
    if (al__dgemm(G, iL, x, id, x, id, 1, iL, iL, id, 0, AL__GEMM_TRIL_C, 0)) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iL, iL, id, 1.0, x, id, x, id, 0.0, G,
                    iL);
        return;
    }
    for (int64_t j0 = 0; j0 < L; j0 += 8)
        for (int64_t i0 = j0; i0 < L; i0 += 8)
            for (int64_t j = j0; j < j0 + 8 && j < L; j++)
                for (int64_t i = i0 > j ? i0 : j + 1; i < i0 + 8 && i < L; i++)
                    G[j * L + i] = G[i * L + j];
}

/* S [L, d] = W X of w [L, L], x [L, d]; causal: tril(W) X (W's upper triangle never read) */
static void attn_out(const double *w, const double *x, int64_t L, int64_t d, int causal,
                     double *S) {
    int iL = (int)L, id = (int)d;
    if (!al__dgemm(S, id, w, iL, x, id, 0, iL, id, iL, 0, causal ? AL__GEMM_TRIL_A : 0, 0)) return;
    if (!causal) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iL, id, iL, 1.0, w, iL, x, id, 0.0,
                    S, id);
        return;
    }
    memcpy(S, x, (size_t)L * (size_t)d * sizeof(double));
    cblas_dtrmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, iL, id, 1.0, w,
                iL, S, id);
}

/* XS [nb, L] (rows ldxs = L apart) = St X[0..nc)^T, of St [nb, d] (rows t..t+nb of S), x [L, d];
 * causal: only row r's columns <= t + r are wanted (ours leaves some beyond unwritten) */
static void x_dot_s(const double *St, const double *x, int64_t L, int64_t d, int64_t t, int64_t nb,
                    int64_t nc, int causal, double *XS) {
    int id = (int)d;
    if (!al__dgemm(XS, (int)L, St, id, x, id, 1, (int)nb, (int)nc, id, 0,
                   causal ? AL__GEMM_TRIL_C : 0, (int)t))
        return;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)nc, id, 1.0, St, id, x, id,
                0.0, XS, (int)L);
}

/* |v|^2 of v [d] */
static double sq_norm(const double *v, int64_t d) {
    double s = 0;
    for (int64_t k = 0; k < d; k++) s += v[k] * v[k];
    return s;
}

/* Wide vectors (d > L / 3 causal, L / 2 not): x_i . S_t by blocks of XG rows, each from the Gram
 * matrix, XS = W G (a row of n keys: n^2 multiply-adds), or from S = W X and XS = S X^T (2 n d),
 * whichever is cheaper (wide_block; L^3 / 3 against L^2 d for a whole causal head). Our DGEMM only
 * (AVX-512: OpenBLAS has no triangle of C), no sliding window (its rows read W's band). */
static int xs_from_gram(int64_t L, int64_t d, int causal, int win) {
    if (al__cpu_level() < AL__CPU_AVX512 || (causal && win > 0 && win < L)) return 0;
    return causal ? L < 3 * d : L < 2 * d;
}

/* XS [nb, L] (rows L apart) = rows t..t+nb of W G, of w [L, L] and G [L, L] = X X^T; causal:
 * tril(W) G, only the columns <= the row's t wanted (W's upper triangle never read) */
static void xs_gram(const double *w, const double *G, int64_t L, int64_t t, int64_t nb, int causal,
                    double *XS) {
    int iL = (int)L, nc = causal ? (int)(t + nb) : iL;
    if (!al__dgemm(XS, iL, w + t * L, iL, G, iL, 0, (int)nb, nc, nc, 0,
                   causal ? AL__GEMM_TRIL_A | AL__GEMM_TRIL_C : 0, (int)t))
        return;
    for (int64_t r = 0; r < nb; r++) { /* no memory for ours: row by row (G is symmetric) */
        int n = causal ? (int)(t + r + 1) : iL;
        cblas_dgemv(CblasRowMajor, CblasNoTrans, n, n, 1.0, G, iL, w + (t + r) * L, 1, 0.0,
                    XS + r * L, 1);
    }
}

/* S [nb, d] = rows t..t+nb of W X, of w [L, L], x [L, d]; causal: tril(W) X (row t + r reads
 * columns <= t + r) */
static void s_rows(const double *w, const double *x, int64_t L, int64_t d, int64_t t, int64_t nb,
                   int causal, double *S) {
    int id = (int)d, nc = causal ? (int)(t + nb) : (int)L;
    if (!al__dgemm(S, id, w + t * L, (int)L, x, id, 0, (int)nb, id, nc, 0,
                   causal ? AL__GEMM_TRIL_A : 0, (int)t))
        return;
    for (int64_t r = 0; r < nb; r++) /* no memory for ours: row by row */
        cblas_dgemv(CblasRowMajor, CblasTrans, causal ? (int)(t + r + 1) : (int)L, id, 1.0, x, id,
                    w + (t + r) * L, 1, 0.0, S + r * d, 1);
}

/* Would row_pass's E test flag a term of this row (a [n], xs [n], gd [n]; SS, R) at some N, c =
 * N / (n - 1) in (0, ch], with the Gram matrix's errors (tau tE, cc^2 R^2 added; eS^2 = c^2 E0)?
 * Per key, t2 minus the test's threshold is A c^2 + B c + C (f = 1 + c): its minimum over the
 * interval. For the cost only (row_pass's own test decides what is recomputed): a flagged term
 * makes row_pass build S in double-double (O(n d)), dearer than S_t in double (wide_block). */
static int e_flagged(const double *a, const double *xs, const double *gd, int64_t n, double SS,
                     double R, double tE, double E0, double ch) {
    double mn = 0, k2 = SS * (1.0 - tE) - tE * R * R - E0;
#pragma omp simd reduction(min : mn)
    for (int64_t i = 0; i < n; i++) {
        double p = (1.0 - tE) * a[i] * a[i] * gd[i], q = a[i] * xs[i];
        double C = p, B = 2.0 * (p - q), A = p - 2.0 * q + k2;
        double v = FMA(FMA(A, ch, B), ch, C), cs = -B / (2.0 * A), vv = C - B * B / (4.0 * A);
        v = A > 0 && cs > 0 && cs < ch && vv < v ? vv : v;
        mn = mn < v ? mn : v;
    }
    return mn < 0;
}

/* S_t and x_i . S_t of the rows t + idx[q] (q < m; idx ascending) from the vectors, as one GEMM
 * each: their weights gathered into Wb [m, L] (zeros past each row's keys: a chain's zeros add
 * nothing), S [m, d] = Wb X, then Wb's rows = S X^T, copied to XS [.., L] (row idx[q]) */
static void s_gathered(const double *w, const double *x, int64_t L, int64_t d, int causal,
                       int64_t t, const int64_t *idx, int64_t m, double *Wb, double *S,
                       double *XS) {
    int64_t nc = causal ? t + idx[m - 1] + 1 : L;
    int id = (int)d, iL = (int)L, im = (int)m, inc = (int)nc;
    for (int64_t q = 0; q < m; q++) {
        int64_t n = causal ? t + idx[q] + 1 : L;
        memcpy(Wb + q * L, w + (t + idx[q]) * L, (size_t)n * sizeof(double));
        memset(Wb + q * L + n, 0, (size_t)(nc - n) * sizeof(double));
    }
    if (al__dgemm(S, id, Wb, iL, x, id, 0, im, id, inc, 0, 0, 0) ||
        al__dgemm(Wb, iL, S, id, x, id, 1, im, inc, id, 0, 0, 0)) { /* no memory for ours */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, id, inc, 1.0, Wb, iL, x, id, 0.0,
                    S, id);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, inc, id, 1.0, S, id, x, id, 0.0,
                    Wb, iL);
    }
    for (int64_t q = 0; q < m; q++)
        memcpy(XS + idx[q] * L, Wb + q * L, (size_t)(causal ? t + idx[q] + 1 : L) * sizeof(double));
}

/* Rows t..t+nb of a wide head (xs_from_gram; gd, inv as vector_norms): XS [nb, L] = x_i . S_t,
 * SS [nb] = |S_t|^2 and gk [nb] (rowctx.gk), from the Gram matrix (use_g) or from S [nb, d] = W X
 * (gk 0, row_pass's test of S's own error, eS); returns how many rows want S from the vectors.
 * From the Gram matrix, per row, SS = sum_i w_ti XS_ti. Errors: G's entries carry
 * gamma_d |x_j| |x_i|, so xs_i (a chain over n keys) gamma_(n+d+1) R |x_i| and SS
 * gamma_(2n+d+2) R^2 (R = sum_j |w_tj| |x_j|), absolute where S's own were relative to |S_t|^2.
 * In E's t2 = f^2 pa_i - 2 f cc a_i xs_i + cc^2 SS they add at most cc^2 gamma_(2n+d+2) R^2 +
 * 2 f cc |a_i| gamma_(n+d+1) R |x_i| <= 2 gamma_(2n+d+2) (f^2 pa_i + cc^2 R^2): row_pass's test
 * with cc^2 R^2 added and k = d + 4 + gk, gk = 2n + d + 8, keeps its safety factor 2. Rows where
 * that wider test would flag a term (e_flagged; always where |S_t|^2 < 8 tau R^2: S_t cancels)
 * take S_t from the vectors instead (s_gathered, Wb [nb, L] its scratch), O(n d). ch: the
 * largest N of the grid over n - 1 (the test's c). */
static int64_t wide_block(const double *w, const double *x, const double *G, const double *gd,
                          const double *inv, int64_t L, int64_t d, int causal, int64_t t,
                          int64_t nb, int use_g, int n_max, double *XS, double *S, double *Wb,
                          double *SS, double *gk) {
    int64_t nc = causal ? t + nb : L, m = 0, idx[XG];
    if (!use_g) {
        s_rows(w, x, L, d, t, nb, causal, S);
        x_dot_s(S, x, L, d, t, nb, nc, causal, XS);
    } else {
        xs_gram(w, G, L, t, nb, causal, XS);
    }
    for (int64_t r = 0; r < nb; r++) {
        int64_t n = causal ? t + r + 1 : L;
        const double *a = w + (t + r) * L, *xs = XS + r * L;
        double ss = 0, R = 0;
#pragma omp simd reduction(+ : ss, R)
        for (int64_t i = 0; i < n; i++) {
            ss += a[i] * xs[i];
            R += fabs(a[i]) * gd[i] * inv[i];
        }
        gk[r] = 2.0 * (double)n + (double)d + 8.0;
        double tE = cancel_tau((double)d + 4.0 + gk[r]), eS = 2.0 * (double)n * AL_U * R / AL_RHO;
        double ch = n > 1 ? (double)(n_max < n - 1 ? n_max : n - 1) / (double)(n - 1) : 0.0;
        if (!use_g) ss = sq_norm(S + r * d, d);
        int want_s = ss < 8.0 * tE * R * R || e_flagged(a, xs, gd, n, ss, R, tE, eS * eS, ch);
        SS[r] = ss;
        if (!use_g || want_s) gk[r] = 0;
        if (want_s) idx[m++] = r;
    }
    if (use_g && m > 0) {
        s_gathered(w, x, L, d, causal, t, idx, m, Wb, S, XS);
        for (int64_t q = 0; q < m; q++) SS[idx[q]] = sq_norm(S + q * d, d);
    }
    return m;
}

#ifndef AL_MV_ISA /* once: in the baseline (or only) copy */
/* X X^T [L, L] of x[L, d]: the one GEMM every head's metrics start from, the same call as
 * inside al_head_metrics (so the same bits). */
void al__head_gram(const double *x, int64_t L, int64_t d, double *G) {
    int blas = al__blas_save();
    blas_single();
    gram(x, L, d, G);
    al__blas_restore(blas);
}
#endif

/* al_head_metrics with the Gram matrix G[L, L] = X X^T of x given (al__head_gram), or NULL
 * (computed here), and the rows' ranking rank[L, L] of w given (al__head_rank), or NULL (each
 * row selects its own): callers that evaluate several heads or grids on the same vectors share
 * the Gram matrix, several calls on the same weights the ranking. */
int AL_MV(al__head_metrics_gram)(const double *w, const double *x, const double *Gin,
                                 const uint16_t *rank, int bound_n, int64_t L, int64_t d,
                                 const al_metrics_opts *o, al_topn_stats *out, double *row_max,
                                 double *row_entropy, al_error *err) {
    int rc = check_opts(o, d, err);
    if (rc) return rc;
    if (L < 1) return al__err(err, AL_E_INVALID, "metrics: empty head (L = %lld)", (long long)L);
    if (!w || !x || (o->n_top > 0 && !out))
        return al__err(err, AL_E_INVALID, "metrics: NULL argument");
    if (L > (int64_t)1 << 16 || d > (int64_t)1 << 20)
        return al__err(err, AL_E_INVALID, "metrics: head too large (L %lld, d %lld)", (long long)L,
                       (long long)d);
    int causal = o->causal != 0, win = o->window;
    for (int64_t t = 0; t < L; t++) {
        int64_t lo = al__row_lo(t, causal, win), n = al__row_n(t, L, causal, win);
        if (all_finite(w + t * L + lo, n)) continue;
        for (int64_t j = lo; j < lo + n; j++)
            if (!isfinite(w[t * L + j]))
                return al__err(err, AL_E_RANGE,
                               "metrics: weights: non-finite value %g at row %lld, column %lld",
                               w[t * L + j], (long long)t, (long long)j);
    }
    if ((rc = check_x(x, L, d, err))) return rc;

    /* vanishing-attention statistics of every row */
    for (int64_t t = 0; t < L && (row_max || row_entropy); t++) {
        double mx, H;
        vanishing(w + t * L + al__row_lo(t, causal, win), al__row_n(t, L, causal, win), &mx, &H);
        if (row_max) row_max[t] = mx;
        if (row_entropy) row_entropy[t] = H;
    }
    if (o->n_top == 0 || (!o->distance && !o->separability)) {
        for (int k = 0; k < o->n_top; k++) {
            memset(&out[k], 0, sizeof out[k]);
            out[k].N = o->top_n[k];
            out[k].dtilde = out[k].dmax = out[k].E = out[k].E_mc = out[k].E_mc_se = NAN;
            out[k].ns_ratio = out[k].ns_lower = out[k].ns_upper = NAN;
        }
        return 0;
    }

    grid g;
    if ((rc = build_grid(&g, o, err))) return rc;
    if (bound_n >= 0) g.bound_n = bound_n;
    headws h;
    rowws rw;
    accum *acc = al__calloc((size_t)o->n_top, sizeof(accum), "metrics", err);
    int xsg = o->distance && xs_from_gram(L, d, causal, win);
    if (!acc || build_headws(&h, L, d, o->distance, Gin == NULL, xsg, err)) {
        free(acc);
        free_grid(&g);
        return AL_E_NOMEM;
    }
    if (build_rowws(&rw, L, d, err)) {
        free(acc);
        free_headws(&h);
        free_grid(&g);
        return AL_E_NOMEM;
    }
    double *gd = h.vec, *inv = h.vec + L, *un = h.vec + 2 * L, *SS = h.vec + 3 * L;
    double *gk = h.vec + 4 * L;
    int64_t cancels = 0; /* wide vectors: rows of the last block where S_t cancels */
    centred cg = {.x = x, .L = L, .d = d}; /* built only if a row's d1 cancels */
    vector_norms(x, L, d, gd, inv, un);
    int blas = al__blas_save(); /* OpenBLAS single-threaded while we run, then as it was */
    blas_single();
    int id = (int)d;
    if (Gin)
        h.G = (double *)Gin; /* borrowed: not freed below */
    else
        gram(x, L, d, h.G);
    if (o->distance && !xsg) {
        if (causal && win > 0 && win < L) { /* S_t = W[t, lo..t] X[lo..t]: the row's keys only */
            for (int64_t t = 0; t < L; t++) {
                int64_t lo = al__row_lo(t, 1, win);
                cblas_dgemv(CblasRowMajor, CblasTrans, (int)(t + 1 - lo), id, 1.0, x + lo * d, id,
                            w + t * L + lo, 1, 0.0, h.S + t * d, 1);
            }
        } else { /* causal: S = tril(W) X, reading only columns 0..t of row t */
            attn_out(w, x, L, d, causal, h.S);
        }
        for (int64_t t = 0; t < L; t++) SS[t] = sq_norm(h.S + t * d, d);
    }
    for (int64_t t = 0; t < L; t++) {
        int64_t lo = al__row_lo(t, causal, win), n = al__row_n(t, L, causal, win);
        if (t % 64 == 0 && (rc = al__poll("head metrics", t, L, err))) break; /* caller may stop */
        double *xs = NULL; /* the row's x_i . S_t, its |S_t|^2 in SS[t] */
        if (xsg) { /* by the Gram matrix where cheaper (nc < 2d) unless more than one row in 8
                    * of the last block wanted S from the vectors (then S for this one) */
            if (t % XG == 0) {
                int64_t nb = L - t < XG ? L - t : XG, nc = causal ? t + nb : L;
                int use_g = nc < 2 * d && 8 * cancels <= XG;
                cancels = wide_block(w, x, h.G, gd, inv, L, d, causal, t, nb, use_g, g.n_max, h.XS,
                                     h.S, h.Wb, SS + t, gk + t);
            }
            xs = h.XS + (t % XG) * L + lo;
        } else if (o->distance) {
            if (t % XB == 0) { /* XS for rows t..t+XB-1 (columns < their n) */
                int64_t nb = L - t < XB ? L - t : XB, nc = causal ? t + nb : L;
                x_dot_s(h.S + t * d, x, L, d, t, nb, nc, causal, h.XS);
            }
            xs = h.XS + (t % XB) * L + lo;
        }
        /* a windowed row's keys lo..t: every per-key array from lo */
        rowctx ctx = {.x = x + lo * d,
                      .d = d,
                      .cg = &cg,
                      .off = lo,
                      .G = h.G + lo * L + lo,
                      .ldg = L,
                      .gd = gd + lo,
                      .inv = inv + lo,
                      .un = un + lo,
                      .xs = xs,
                      .SS = o->distance ? SS[t] : 0,
                      .gk = xsg ? gk[t] : 0,
                      .row = t};
        row_pass(w + t * L + lo, n, rank ? rank + t * L : NULL, &ctx, o, &g, &rw, acc);
    }
    if (!rc) finish(o, acc, out);
    free(cg.Gy);
    free(cg.gyd);
    free_rowws(&rw);
    if (Gin) h.G = NULL;
    free_headws(&h);
    free(acc);
    free_grid(&g);
    al__blas_restore(blas);
    return rc;
}

int AL_MV(al_head_metrics)(const double *w, const double *x, int64_t L, int64_t d,
                           const al_metrics_opts *o, al_topn_stats *out, double *row_max,
                           double *row_entropy, al_error *err) {
    return AL_MV(al__head_metrics_gram)(w, x, NULL, NULL, -1, L, d, o, out, row_max, row_entropy,
                                        err);
}

/* ---- public: Corollary 1 ----------------------------------------------------------------- */

int AL_MV(al_head_vanishing_D_window)(const double *q, const double *k, int64_t L, int64_t d_head,
                                      int causal, int window, double *D, al_error *err) {
    if (window < 0) return al__err(err, AL_E_INVALID, "vanishing_D: window %d < 0", window);
    if (!q || !k || !D) return al__err(err, AL_E_INVALID, "vanishing_D: NULL argument");
    if (L < 1 || d_head < 1)
        return al__err(err, AL_E_INVALID, "vanishing_D: bad shape (L %lld, d_head %lld)",
                       (long long)L, (long long)d_head);
    for (int64_t i = 0; i < L * d_head; i++) {
        if (!isfinite(q[i]))
            return al__err(err, AL_E_RANGE,
                           "vanishing_D: q: non-finite value at row %lld, "
                           "column %lld",
                           (long long)(i / d_head), (long long)(i % d_head));
        if (!isfinite(k[i]))
            return al__err(err, AL_E_RANGE,
                           "vanishing_D: k: non-finite value at row %lld, "
                           "column %lld",
                           (long long)(i / d_head), (long long)(i % d_head));
    }
    double kmax_all = 0;
    for (int64_t j = 0; j < L; j++) {
        double s = 0;
        for (int64_t c = 0; c < d_head; c++) s += k[j * d_head + c] * k[j * d_head + c];
        if (s > kmax_all) kmax_all = s;
    }
    double run = 0, scale = 1.0 / sqrt((double)d_head);
    for (int64_t t = 0; t < L; t++) {
        double sq = 0, sk = 0;
        for (int64_t c = 0; c < d_head; c++) {
            sq += q[t * d_head + c] * q[t * d_head + c];
            sk += k[t * d_head + c] * k[t * d_head + c];
        }
        if (sk > run) run = sk;
        double km = causal ? run : kmax_all;
        if (causal && window > 0 && t >= window) { /* the max over the window's keys only */
            km = 0;
            for (int64_t j = t - window + 1; j <= t; j++) {
                double s = 0;
                for (int64_t c = 0; c < d_head; c++) s += k[j * d_head + c] * k[j * d_head + c];
                km = s > km ? s : km;
            }
        }
        D[t] = sqrt(sq) * sqrt(km) * scale;
    }
    return 0;
}

int AL_MV(al_head_vanishing_D)(const double *q, const double *k, int64_t L, int64_t d_head,
                               int causal, double *D, al_error *err) {
    return AL_MV(al_head_vanishing_D_window)(q, k, L, d_head, causal, 0, D, err);
}

/* ---- one copy of this file per instruction set (mv.h) --------------------------------------- */

#ifdef AL_MV_DISPATCH
int al_row_vanishing(const double *alpha, int64_t n, double *max_weight, double *entropy,
                     double *entropy_norm, al_error *err) {
    return AL_MV_PICK(al_row_vanishing)(alpha, n, max_weight, entropy, entropy_norm, err);
}

int al_row_metrics(const double *alpha, const double *x, int64_t n, int64_t d,
                   const al_metrics_opts *o, al_topn_stats *out, al_error *err) {
    return AL_MV_PICK(al_row_metrics)(alpha, x, n, d, o, out, err);
}

int al_head_metrics(const double *w, const double *x, int64_t L, int64_t d,
                    const al_metrics_opts *o, al_topn_stats *out, double *row_max,
                    double *row_entropy, al_error *err) {
    return AL_MV_PICK(al_head_metrics)(w, x, L, d, o, out, row_max, row_entropy, err);
}

int al_head_vanishing_D(const double *q, const double *k, int64_t L, int64_t d_head, int causal,
                        double *D, al_error *err) {
    return AL_MV_PICK(al_head_vanishing_D)(q, k, L, d_head, causal, D, err);
}

int al__head_metrics_gram(const double *w, const double *x, const double *G, const uint16_t *rank,
                          int bound_n, int64_t L, int64_t d, const al_metrics_opts *o,
                          al_topn_stats *out, double *row_max, double *row_entropy, al_error *err) {
    return AL_MV_PICK(al__head_metrics_gram)(w, x, G, rank, bound_n, L, d, o, out, row_max,
                                             row_entropy, err);
}

int al_head_vanishing_D_window(const double *q, const double *k, int64_t L, int64_t d_head,
                               int causal, int window, double *D, al_error *err) {
    return AL_MV_PICK(al_head_vanishing_D_window)(q, k, L, d_head, causal, window, D, err);
}
#endif
