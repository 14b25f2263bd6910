/* metrics.h: the math layer's internals shared by metrics.c and readings.c, and sensitivity.c's
 * for the tests. */
#ifndef AL_METRICS_H
#define AL_METRICS_H

#include "internal.h"
#include "mathx.h"

/* metrics.c: sel[K] = the indices of the K largest a[n] (1 <= K <= n), larger weight first,
 * ties to the lower index (METHOD section 3's I_N); kvs: scratch of 32 n bytes, tmp[n]. */
void al__top_k(const double *a, int64_t n, int64_t K, int64_t *sel, void *kvs, double *tmp);

/* rank[t L + q] (q < n_t) = row t's keys of w[L, L] (its n_t keys from lo_t: causal, window as
 * al_metrics_opts) in al__top_k's order (larger weight first, ties to the lower index), as
 * offsets from lo_t: any top-K of the row is its first K, bit for bit (metrics.c). Finite weights,
 * L <= 65536; kvs: scratch of 32 L bytes. Computed once per head, it serves every call of
 * al__head_metrics_gram and al__head_reading_rank on those weights. */
void al__head_rank(const double *w, int64_t L, int causal, int window, uint16_t *rank, void *kvs);

/* G[L, L] = X X^T of x[L, d] (single-threaded OpenBLAS: the bits al_head_metrics' own GEMM
 * gives), for al__head_metrics_gram. */
void al__head_gram(const double *x, int64_t L, int64_t d, double *G);
/* al_head_metrics (attnlim.h) with that Gram matrix given (NULL: computed inside) and the
 * rows' ranking given (al__head_rank of w; NULL: each row selects its own): the same numbers, bit
 * for bit; callers evaluating several grids or heads of one x share the GEMM, several readings of
 * one w the ranking.
 * bound_n >= 0: dmax (and its d1) only at the N <= bound_n of the grid, NaN at the others, and
 * past it the distance may take x_i . s from the vectors instead of the Gram rows (cheaper where
 * the grid's steps are wide: metrics.c, list_cheaper), which changes dtilde and E in the last
 * bits against bound_n < 0 (every N: al_head_metrics itself). */
int al__head_metrics_gram(const double *w, const double *x, const double *G, const uint16_t *rank,
                          int bound_n, int64_t L, int64_t d, const al_metrics_opts *o,
                          al_topn_stats *out, double *row_max, double *row_entropy, al_error *err);
/* al_head_reading (attnlim.h) with the rows' ranking of w given (al__head_rank; NULL: each row
 * selects its own): the same numbers, bit for bit. */
int al__head_reading_rank(const double *w, const double *x, int64_t L, int64_t d,
                          const al_reading_opts *o, const uint16_t *rank, al_reading_stats *out,
                          al_error *err);
/* al__head_reading_rank under o (a vector reading: norm-of-sum or sum-vector) and under the other
 * vector reading kind2 into out2, in one pass (their S and s are the same): the bits of two calls.
 */
int al__head_reading_pair(const double *w, const double *x, int64_t L, int64_t d,
                          const al_reading_opts *o, const uint16_t *rank, al_reading_stats *out,
                          al_distance_kind kind2, al_reading_stats *out2, al_error *err);

/* s[d] += sum_{q in [k0, k1)} a[j] x[j] (x rows of d) with j = idx[q] (idx NULL: j = q), four
 * keys a pass: one load and store of s per four keys instead of a chain of store-to-load
 * forwards per key; the four are added in order (the same bits as one key at a time). Inline:
 * each instruction-set copy of metrics.c and readings.c vectorises its own. */
static inline void al__axpy_keys(const double *a, const double *x, int64_t d, const int64_t *idx,
                                 int64_t k0, int64_t k1, double *restrict s) {
    int64_t q = k0;
    for (; q + 4 <= k1; q += 4) {
        int64_t j0 = idx ? idx[q] : q, j1 = idx ? idx[q + 1] : q + 1;
        int64_t j2 = idx ? idx[q + 2] : q + 2, j3 = idx ? idx[q + 3] : q + 3;
        const double *x0 = x + j0 * d, *x1 = x + j1 * d, *x2 = x + j2 * d, *x3 = x + j3 * d;
        double a0 = a[j0], a1 = a[j1], a2 = a[j2], a3 = a[j3];
#pragma omp simd
        for (int64_t k = 0; k < d; k++)
            s[k] = FMA(a3, x3[k], FMA(a2, x2[k], FMA(a1, x1[k], FMA(a0, x0[k], s[k]))));
    }
    for (; q < k1; q++) {
        int64_t j = idx ? idx[q] : q;
        const double *xj = x + j * d;
        double aj = a[j];
#pragma omp simd
        for (int64_t k = 0; k < d; k++) s[k] = FMA(aj, xj[k], s[k]);
    }
}

/* sensitivity.c: each of Algorithm 5's fresh directions is drawn by AL__DIR_LANES generators in
 * vector lanes (al_sensitivity_direction_fresh). For the tests, in the copy of the CPU level in
 * use: al__fresh_direction: v[n] the fresh direction of the generator seed h (the public one's
 * is fresh_hash of its indices); al__fresh_normals: x[n] its normals before the normalisation. */
enum { AL__DIR_LANES = 8 };
int al__fresh_direction(uint64_t h, int64_t n, double *v);
int al__fresh_normals(uint64_t h, int64_t n, double *x);
/* al_head_sensitivity_ex (so->fresh: fd_mean's directions) with, in the same pass over the
 * rows, fd_other[n_t, n_eps] (NULL: none) the finite differences under the other directions
 * (fresh for shared, shared for fresh): the row's maxima, p0, the support of e0 and the spectral
 * norms computed once per row and T for both; spec_mean NULL: the spectral norms not computed
 * (a reading whose norms are another plan's). fd_mean, spec_mean and fd_other each the bits of
 * al_head_sensitivity_ex with their directions alone. */
int al__head_sensitivity_pair(const double *z, int64_t L, int causal, const al_norm *nm,
                              const double *temps, int n_t, const double *eps, int n_eps,
                              uint64_t seed, int layer, int head, const al_sens_opts *so,
                              double *fd_mean, double *spec_mean, double *fd_other, al_error *err);

#endif
