/* metrics.h: the math layer's internals shared by metrics.c and readings.c. */
#ifndef AL_METRICS_H
#define AL_METRICS_H

#include "internal.h"

/* metrics.c: sel[K] = the indices of the K largest a[n] (1 <= K <= n), larger weight first,
 * ties to the lower index (METHOD section 3's I_N); kvs: scratch of 32 n bytes, tmp[n]. */
void al__top_k(const double *a, int64_t n, int64_t K, int64_t *sel, void *kvs, double *tmp);

/* G[L, L] = X X^T of x[L, d] (single-threaded OpenBLAS: the bits al_head_metrics' own GEMM
 * gives), for al__head_metrics_gram. */
void al__head_gram(const double *x, int64_t L, int64_t d, double *G);
/* al_head_metrics (attnlim.h) with that Gram matrix given (NULL: computed inside): the same
 * numbers, bit for bit; callers evaluating several grids or heads of one x share the GEMM.
 * bound_n >= 0: dmax (and its d1) only at the N <= bound_n of the grid, NaN at the others, and
 * past it the distance may take x_i . s from the vectors instead of the Gram rows (cheaper where
 * the grid's steps are wide: metrics.c, list_cheaper), which changes dtilde and E in the last
 * bits against bound_n < 0 (every N: al_head_metrics itself). */
int al__head_metrics_gram(const double *w, const double *x, const double *G, int bound_n, int64_t L,
                          int64_t d, const al_metrics_opts *o, al_topn_stats *out, double *row_max,
                          double *row_entropy, al_error *err);

#endif
