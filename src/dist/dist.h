/* dist.h: the internal interface of src/dist.c, the one module that speaks MPI. Every function
 * takes the group (al_dist, NULL = this process alone) and works the same without MPI (a group
 * of one), so the callers have no #ifdefs.
 *
 * Every function marked "collective" must be called by every rank of the group, in the same
 * order; each returns the same code on every rank (an error on one rank is every rank's error),
 * so a caller that stops on a non-zero return stops everywhere at the same point and never
 * leaves a rank waiting in a collective the others skipped. */
#ifndef AL_DIST_H
#define AL_DIST_H

#include "internal.h"

#include <stdint.h>

/* This process's rank (0 .. size-1) and the group's size; NULL: 0 and 1. */
int al__dist_rank(const al_dist *d);
int al__dist_size(const al_dist *d);
/* The rank that computes per-head item h (a static round robin over heads). */
static inline int al__dist_owner(const al_dist *d, int64_t h) {
    return (int)(h % al__dist_size(d));
}
/* This host's name (for manifests and messages). */
const char *al__dist_host(const al_dist *d);

/* Collective: rc is this rank's status. 0 when every rank passed 0; else the first failing
 * rank's (lowest rank) code, and err receives its message on every rank ("rank R (HOST): "
 * prefixed when R is not 0). Also a barrier. */
int al__dist_agree(al_dist *d, int rc, al_error *err);
/* Collective: rank 0's bytes [0, n) of buf to every rank. */
int al__dist_bcast(al_dist *d, void *buf, size_t n, al_error *err);
/* Collective: rank r's n bytes of mine go to all + r * n on rank 0 (all: size * n bytes there;
 * unused elsewhere, may be NULL). */
int al__dist_gather(al_dist *d, const void *mine, size_t n, void *all, al_error *err);
/* Collective: v[n] on rank 0 becomes the sum (max: the maximum) over ranks of every rank's v;
 * elsewhere v is unchanged. */
int al__dist_reduce(al_dist *d, double *v, int n, int max, al_error *err);
/* Collective: merges per-head arrays onto rank 0. arr[a] is [H, cols[a]] doubles (n_arr arrays),
 * head h = layer * n_head + head; head h is computed by rank al__dist_owner(d, h) alone, and
 * done[h] is 1 where this rank computed head h, else 0. On rank 0 every row h of every array then
 * holds the owner's values (other ranks' arrays are unchanged), and the merge fails, naming the
 * head, unless every head was computed exactly once, by its owner (also without MPI: a head the
 * observer did not reach is an error, never a NaN in the results). */
int al__dist_merge_heads(al_dist *d, int64_t H, int n_head, int n_arr, double *const *arr,
                         const int64_t *cols, const uint8_t *done, al_error *err);

#endif
