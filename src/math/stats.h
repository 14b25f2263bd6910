/* stats.h: the math layer's internals of stats.c (the public statistics are in attnlim.h). */
#ifndef AL_STATS_H
#define AL_STATS_H

#include "internal.h"

/* stats.c: scipy.stats.kstwo.sf(x, n) (the one-sample two-sided KS distribution, scipy 1.10's
 * choice of method) and scipy.special.smirnov(n, x) (one-sided, exact); NaN when out of memory
 * or n < 1. Exported for the tests. */
double al__kstwo_sf(double x, int64_t n);
double al__smirnov_sf(int64_t n, double x);

#endif
