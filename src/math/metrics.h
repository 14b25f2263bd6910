/* metrics.h: the math layer's internals shared by metrics.c and readings.c. */
#ifndef AL_METRICS_H
#define AL_METRICS_H

#include "internal.h"

/* metrics.c: sel[K] = the indices of the K largest a[n] (1 <= K <= n), larger weight first,
 * ties to the lower index (METHOD section 3's I_N); kvs: scratch of 32 n bytes, tmp[n]. */
void al__top_k(const double *a, int64_t n, int64_t K, int64_t *sel, void *kvs, double *tmp);

#endif
