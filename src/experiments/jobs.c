/* jobs.c: one job of `attnlim reproduce`: the forward with its observer, which computes every head
 * of a layer in parallel, then the merge of the ranks' heads. */
#include "hooks.h"
#include "experiments.h"
#include "metrics.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the observer: every head of one layer ----------------------------------------------------
 */

typedef struct obs_ctx {
    const plan *p;
    job *j;
    int L, dx, d_head, n_threads;
    scratch *sc;   /* [n_threads] */
    float *embed;  /* [L, d_model] copy of the model input (given with layer 0) */
    uint8_t *done; /* [H] times this rank computed head h (once for its own heads, else 0) */
    al__progress *pg;
    int layers_done;
    double units_per_layer;
    char status[96];
    /* --readings: the variants' contexts (their plan, their job of this (window, L), or NULL),
     * computed in the same observer call on the same capture */
    struct obs_ctx *var;
    int n_var;
    struct layer_gram *lg; /* the Gram matrices of the d_model-wide vectors (shared) */
} obs_ctx;

/* The d_model-wide vectors (hidden, residual, embedding) are the same for every head of a layer
 * (the embedding: of every layer): their Gram matrix X X^T [L, L] is computed once per layer
 * (once per job for the embedding) and shared by every head and every reading that reads them,
 * instead of once per head and per call. The head-wide ones (value, key) share theirs between
 * the calls of one head (scratch.G). */
typedef struct layer_gram {
    double *G[5];  /* [L, L] per al_vectors kind (NULL: not used by this job) */
    int layer[5];  /* the layer each holds (-1: none; the embedding: 0 once built) */
    double *xd[5]; /* [L, d_model] per kind: the vectors in double */
} layer_gram;

void al__ex_to_double(const float *src, double *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

static int wide_vectors(al_vectors v);

static int same_norm(const al_norm *a, const al_norm *b) {
    return a->kind == b->kind && a->temperature == b->temperature && a->alpha == b->alpha &&
           a->ssmax_s == b->ssmax_s;
}

/* Prepares head i of the capture in scratch sc: z (logits, masked entries 0) when need_z, and
 * when need_w the weights w and the vectors x. A row sees keys lo..t (a sliding window's lo, else
 * 0): the rest is 0. Each array is kept for the next call on the same thread that wants the same
 * one (another part or reading of the head: the same bits), keyed within the job (one window, one
 * L) by layer, head, normalizer and kind of vectors (the d_model-wide ones: any head). */
static int prepare_head(obs_ctx *c, const al_capture *cap, int i, scratch *sc, int need_w,
                        int need_z, al_error *err) {
    const plan *p = c->p;
    int64_t L = cap->T;
    size_t LL = (size_t)L * L;
    need_z |= need_w && p->have_nm; /* the re-normalised weights come from the logits */
    if (need_z && (sc->z_layer != cap->layer || sc->z_head != i)) {
        const float *z = cap->logits + (size_t)i * LL;
        for (int64_t t = 0; t < L; t++) {
            int64_t lo = al__row_lo(t, cap->causal, cap->window);
            int64_t hi = lo + al__row_n(t, L, cap->causal, cap->window);
            double *zr = sc->z + (size_t)t * L;
            for (int64_t u = 0; u < L; u++) zr[u] = u >= lo && u < hi ? z[(size_t)t * L + u] : 0;
        }
        sc->z_layer = cap->layer, sc->z_head = i;
    }
    if (!need_w) return 0;
    if (sc->w_layer != cap->layer || sc->w_head != i || sc->w_have_nm != p->have_nm ||
        (p->have_nm && !same_norm(&sc->w_nm, &p->nm))) {
        sc->w_layer = -1; /* until complete */
        if (p->have_nm) {
            for (int64_t t = 0; t < L; t++) {
                int64_t lo = al__row_lo(t, cap->causal, cap->window);
                int64_t n = al__row_n(t, L, cap->causal, cap->window);
                double *wr = sc->w + (size_t)t * L;
                for (int64_t u = 0; u < lo; u++) wr[u] = 0;
                int rc = al_norm_forward(&p->nm, sc->z + (size_t)t * L + lo, n, wr + lo, err);
                if (rc)
                    return al__err_prefix(err, rc, "layer %d head %d row %lld", cap->layer,
                                          cap->heads[i], (long long)t);
                for (int64_t u = lo + n; u < L; u++) wr[u] = 0;
            }
        } else {
            al__ex_to_double(cap->weights + (size_t)i * LL, sc->w, LL);
        }
        sc->w_layer = cap->layer, sc->w_head = i, sc->w_have_nm = p->have_nm, sc->w_nm = p->nm;
    }
    al_vectors v = p->o.vectors;
    int wide = wide_vectors(v), xl = v == AL_VEC_EMBED ? 0 : cap->layer, xh = wide ? -2 : i;
    if (sc->x_layer == xl && sc->x_head == xh && sc->x_vec == (int)v) return 0;
    const float *src = v == AL_VEC_VALUE    ? cap->v + (size_t)i * L * cap->d_head
                       : v == AL_VEC_KEY    ? cap->k + (size_t)i * L * cap->d_head
                       : v == AL_VEC_HIDDEN ? cap->hidden
                       : v == AL_VEC_EMBED  ? (cap->embed ? cap->embed : c->embed)
                                            : cap->residual;
    al__ex_to_double(src, sc->x, (size_t)L * (wide ? cap->d_model : cap->d_head));
    sc->x_layer = xl, sc->x_head = xh, sc->x_vec = (int)v;
    return 0;
}

static int wide_vectors(al_vectors v) {
    return v == AL_VEC_HIDDEN || v == AL_VEC_EMBED || v == AL_VEC_RESIDUAL;
}

/* Does context c call the metrics module (which starts from a Gram matrix) in its job? */
static int uses_gram(const obs_ctx *c) {
    const job *j = c->j;
    return j && ((j->nd > 0 && c->p->o.distance == AL_DIST_SUM_OF_NORMS) || j->ns > 0);
}

/* The layer's Gram matrices of the d_model-wide vectors some context of this job reads (the
 * embedding's once per job), from the arrays prepare_head converts: the same bits. */
static int build_layer_grams(obs_ctx *c, const al_capture *cap, al_error *err) {
    layer_gram *lg = c->lg;
    int64_t L = cap->T;
    al_vectors todo[5];
    const float *from[5];
    int nk = 0;
    for (int v = -1; v < c->n_var; v++) {
        const obs_ctx *x = v < 0 ? c : &c->var[v];
        al_vectors k = x->p->o.vectors;
        if (!wide_vectors(k) || !uses_gram(x)) continue;
        int want = k == AL_VEC_EMBED ? 0 : cap->layer, dup = 0;
        for (int q = 0; q < nk; q++) dup |= todo[q] == k;
        if (dup || (lg->G[k] && lg->layer[k] == want)) continue;
        if (!lg->G[k] && !(lg->G[k] = al__malloc_huge((size_t)L * L * sizeof(double),
                                                      "layer Gram matrix [L, L]", err)))
            return AL_E_NOMEM;
        if (!lg->xd[k] && !(lg->xd[k] = al__malloc_huge((size_t)L * cap->d_model * sizeof(double),
                                                        "layer vectors", err)))
            return AL_E_NOMEM;
        from[nk] = k == AL_VEC_HIDDEN     ? cap->hidden
                   : k == AL_VEC_RESIDUAL ? cap->residual
                   : cap->embed           ? cap->embed
                                          : x->embed;
        lg->layer[k] = want;
        todo[nk++] = k;
    }
    if (nk == 0) return 0;
#pragma omp parallel for num_threads(nk < c->n_threads ? nk : c->n_threads) schedule(dynamic, 1)
    for (int q = 0; q < nk; q++) { /* one kind a thread, each GEMM single-threaded */
        al_vectors k = todo[q];
        al__ex_to_double(from[q], lg->xd[k], (size_t)L * cap->d_model);
        al__head_gram(lg->xd[k], L, cap->d_model, lg->G[k]);
    }
    return 0;
}

/* The Gram matrix of the vectors prepare_head put in sc->x for head i: the layer's (wide
 * vectors) or the head's, computed on first use and kept for the next call on the same head and
 * vectors (the separability after the distance, another reading's). */
static const double *head_gram(const obs_ctx *c, const al_capture *cap, int i, scratch *sc) {
    al_vectors v = c->p->o.vectors;
    if (wide_vectors(v) && c->lg->G[v]) return c->lg->G[v];
    if (sc->g_layer != cap->layer || sc->g_head != i || sc->g_vec != (int)v) {
        al__head_gram(sc->x, cap->T, c->dx, sc->G);
        sc->g_layer = cap->layer, sc->g_head = i, sc->g_vec = (int)v;
    }
    return sc->G;
}

/* The ranking of every row of the weights prepare_head put in sc->w for head i (al__head_rank),
 * computed on first use and kept for the next call on the same weights: the distance, the
 * separability and every reading's. prepare_head rebuilds w per reading, to the same bits when
 * the source is the same (the captured weights, or the logits under the same normalizer): so the
 * key is (layer, head, L, normalizer) within one job's forward (the scratch lives for one job:
 * one window). NULL (each call ranks its rows) past uint16's range. */
static const uint16_t *head_rank(const obs_ctx *c, const al_capture *cap, int i, scratch *sc) {
    const plan *p = c->p;
    if (cap->T > 65536) return NULL;
    if (sc->r_layer != cap->layer || sc->r_head != i || sc->r_L != cap->T ||
        sc->r_have_nm != p->have_nm || (p->have_nm && !same_norm(&sc->r_nm, &p->nm))) {
        al__head_rank(sc->w, cap->T, cap->causal, cap->window, sc->rank, sc->kvs);
        sc->r_layer = cap->layer, sc->r_head = i, sc->r_L = cap->T;
        sc->r_have_nm = p->have_nm, sc->r_nm = p->nm;
    }
    return sc->rank;
}

/* Max weight and entropy of every row of w[L, L] (row t over its n_t keys lo..: a sliding window
 * of `window` keys, 0 = none): rmax[L], rent[L]. */
int al__ex_row_stats(const double *w, int64_t L, int causal, int window, double *rmax, double *rent,
                     al_error *err) {
    for (int64_t t = 0; t < L; t++) {
        int rc = al_row_vanishing(w + (size_t)t * L + al__row_lo(t, causal, window),
                                  al__row_n(t, L, causal, window), &rmax[t], &rent[t], NULL, err);
        if (rc) return al__err_prefix(err, rc, "row %lld", (long long)t);
    }
    return 0;
}

/* CPU seconds of the calling thread / of the process: meaningful on a busy machine, where wall
 * time measures the other processes too. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
double al__ex_process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Two contexts whose distances are the two vector readings (norm-of-sum, sum-vector) of the same
 * vectors, grid, expectation and seed: one al__head_reading_pair computes both. */
static int same_dist_point(const obs_ctx *a, const obs_ctx *b) {
    const plan *p = a->p, *q = b->p;
    const job *x = a->j, *y = b->j;
    return x && y && x->nd > 0 && x->nd == y->nd &&
           !memcmp(x->Nd, y->Nd, (size_t)x->nd * sizeof(int)) && p->o.vectors == q->o.vectors &&
           p->o.distance != AL_DIST_SUM_OF_NORMS && q->o.distance != AL_DIST_SUM_OF_NORMS &&
           p->o.distance != q->o.distance && p->o.expectation == q->o.expectation &&
           p->o.mc_samples == q->o.mc_samples && p->o.exact_max == q->o.exact_max &&
           p->o.seed == q->o.seed && p->have_nm == q->have_nm &&
           (!p->have_nm || same_norm(&p->nm, &q->nm));
}

/* c's partner among the contexts of the run root (same_dist_point; NULL: none) and whether c
 * leads (comes first: its call computes both; the time is counted as the leader's). */
static const obs_ctx *dist_partner(const obs_ctx *root, const obs_ctx *c, int *lead) {
    int me = c == root ? -1 : (int)(c - root->var);
    for (int v = -1; v < root->n_var; v++) {
        const obs_ctx *x = v < 0 ? root : &root->var[v];
        if (x != c && same_dist_point(c, x)) {
            *lead = me < v;
            return x;
        }
    }
    return NULL;
}

/* The reading's per-N stats rd[nd] of head hidx into job j (sum_norms: E alone; dtilde, dmax and
 * E_mc come from al_head_metrics). */
static void store_reading(const plan *p, job *j, int hidx, const al_reading_stats *rd,
                          int sum_norms) {
    for (int k = 0; k < j->nd; k++) {
        size_t o = (size_t)hidx * j->nd + k;
        const al_reading_stats *r = &rd[k];
        j->E[o] = p->o.expectation == AL_EXPECT_EXACT ? r->exact
                  : p->o.expectation == AL_EXPECT_MC  ? r->mc
                                                      : r->analytic;
        if (sum_norms) continue;
        j->dtilde[o] = r->dist;
        j->dmax[o] = NAN;
        j->E_mc[o] = r->mc;
        j->E_mc_se[o] = r->mc_se;
    }
}

/* Algorithms 1-3 for head i (index hidx) under the readings --distance and --expectation:
 * dtilde[nd] the true distance, E[nd] its random-selection counterpart (the analytic main term,
 * the Monte-Carlo mean or the exact mean), E_mc/E_mc_se the Monte-Carlo estimate (with --mc),
 * dmax the bound of sum-of-norms (NaN under the other distances, which it does not bound). The
 * default readings take al_head_metrics alone (as before); the others al_head_reading. */
static int distance_head(obs_ctx *c, const obs_ctx *root, const al_capture *cap, int i, scratch *sc,
                         int hidx, al_error *err) {
    const plan *p = c->p;
    job *j = c->j;
    int L = cap->T, rc;
    uint64_t seed = al__hash64(p->o.seed ^ al__hash64((uint64_t)hidx * 7919u + (uint64_t)L));
    int sum_norms = p->o.distance == AL_DIST_SUM_OF_NORMS;
    if (sum_norms) {
        al_metrics_opts mo = {.top_n = j->Nd,
                              .n_top = j->nd,
                              .distance = 1,
                              .separability = 0,
                              .mc_samples = p->o.mc_samples,
                              .mc_seed = seed,
                              .causal = cap->causal,
                              .window = cap->window};
        rc = al__head_metrics_gram(sc->w, sc->x, head_gram(c, cap, i, sc), head_rank(c, cap, i, sc),
                                   al__ex_bound_n(p, j), L, c->dx, &mo, sc->st, NULL, NULL, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
        for (int k = 0; k < j->nd; k++) {
            size_t o = (size_t)hidx * j->nd + k;
            j->dtilde[o] = sc->st[k].dtilde;
            j->dmax[o] = sc->st[k].dmax;
            j->E[o] = sc->st[k].E;
            j->E_mc[o] = sc->st[k].E_mc;
            j->E_mc_se[o] = sc->st[k].E_mc_se;
        }
        if (p->o.expectation == AL_EXPECT_ANALYTIC) return 0;
        if (p->o.expectation == AL_EXPECT_MC) {
            for (int k = 0; k < j->nd; k++) {
                size_t o = (size_t)hidx * j->nd + k;
                j->E[o] = j->E_mc[o];
            }
            return 0;
        }
    }
    /* the other readings, and the exact expectation of sum-of-norms */
    al_reading_opts ro = {.distance = p->o.distance,
                          .top_n = j->Nd,
                          .n_top = j->nd,
                          .mc_samples = sum_norms ? 0 : p->o.mc_samples,
                          .mc_seed = seed,
                          .exact = p->o.expectation == AL_EXPECT_EXACT,
                          .exact_max = p->o.exact_max,
                          .causal = cap->causal,
                          .window = cap->window};
    int lead = 0;
    const obs_ctx *pt = sum_norms ? NULL : dist_partner(root, c, &lead);
    if (pt && !lead) return 0; /* the partner's call computed this context's too */
    size_t nst = (size_t)j->nd + 1;
    rc = al__head_reading_pair(sc->w, sc->x, L, c->dx, &ro, head_rank(c, cap, i, sc), sc->rd,
                               pt ? pt->p->o.distance : p->o.distance, pt ? sc->rd + nst : NULL,
                               err);
    if (rc)
        return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i], L);
    store_reading(p, j, hidx, sc->rd, sum_norms);
    if (pt) store_reading(pt->p, pt->j, hidx, sc->rd + nst, 0);
    return 0;
}

/* Does plan b's Algorithm 5 read the same logits as plan a's under the same normalizer,
 * temperatures and logit scale (a reading changing only the directions)? Then the spectral
 * norms, p0 and everything else that does not depend on the directions are the same. */
static int same_sens_point(const plan *a, const plan *b) {
    return a->have_nm == b->have_nm && same_norm(&a->nm, &b->nm) && a->nT == b->nT &&
           memcmp(a->T, b->T, (size_t)a->nT * sizeof(double)) == 0 &&
           a->o.temperature_raw == b->o.temperature_raw && a->n_head == b->n_head;
}

/* The reading of the run c whose Algorithm 5 differs from the run's only in its directions
 * (shared against fresh; the same eps grid and seed): the run computes its finite differences in
 * its own pass over the head (al__head_sensitivity_pair: the row maxima, p0, the support and the
 * spectral norms once per row and T for both). NULL if none. */
static const obs_ctx *sens_partner(const obs_ctx *c) {
    const plan *a = c->p;
    for (int v = 0; c->j && c->j->want_sens && v < c->n_var; v++) {
        const plan *b = c->var[v].p;
        if (c->var[v].j && c->var[v].j->want_sens && same_sens_point(a, b) &&
            a->o.fresh_directions != b->o.fresh_directions && a->o.seed == b->o.seed &&
            a->nE == b->nE && memcmp(a->eps, b->eps, (size_t)a->nE * sizeof(double)) == 0)
            return &c->var[v];
    }
    return NULL;
}

/* Algorithm 5 for head i (index hidx) under the readings of METHOD 6 (T on scaled or raw logits,
 * shared or fresh directions). base: the run's context when c is a reading's (NULL for the run's
 * own): a reading the run computed alongside its own (sens_partner) has nothing left to do. (A
 * reading changes one axis: the only one with the run's logits, T and eps is that partner.) */
static int sens_head(obs_ctx *c, const obs_ctx *base, const al_capture *cap, int i, scratch *sc,
                     int hidx, al_error *err) {
    const plan *p = c->p;
    job *j = c->j;
    if (base && sens_partner(base) == c) return 0;
    const obs_ctx *pc = base ? NULL : sens_partner(c);
    al_sens_opts so = {.logit_scale = p->o.temperature_raw ? sqrt((double)cap->d_head) : 1.0,
                       .fresh = p->o.fresh_directions,
                       .window = cap->window};
    size_t of = (size_t)hidx * p->nT * p->nE;
    double *spec = j->spec + (size_t)hidx * p->nT;
    int rc = al__head_sensitivity_pair(sc->z, cap->T, cap->causal, &p->nm, p->T, p->nT, p->eps,
                                       p->nE, p->o.seed, cap->layer, cap->heads[i], &so, j->fd + of,
                                       spec, pc ? pc->j->fd + of : NULL, err);
    if (!rc && pc) memcpy(pc->j->spec + (size_t)hidx * p->nT, spec, (size_t)p->nT * sizeof(double));
    if (rc)
        return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                              cap->T);
    return 0;
}

/* Part `part` of head i of c's job (0: the metrics on the weights: Algorithms 1-4 and the
 * vanishing study; 1: Algorithm 5 on the logits); base: the run's context when c is a reading's
 * (NULL for the run's own). Adds its CPU seconds to tsec[4] (distance, separability, Algorithm 5,
 * vanishing). */
static int head_part(obs_ctx *c, const obs_ctx *base, const al_capture *cap, int i, int part,
                     scratch *sc, double tsec[4], al_error *err) {
    const plan *p = c->p;
    job *j = c->j;
    int L = cap->T, hidx = cap->layer * p->n_head + cap->heads[i];
    int rc = prepare_head(c, cap, i, sc, part == 0, part == 1, err);
    if (rc) return rc;
    if (part == 1) {
        double t0 = thread_cpu();
        rc = sens_head(c, base, cap, i, sc, hidx, err);
        tsec[2] += thread_cpu() - t0;
        return rc;
    }
    double t0 = thread_cpu();
    if (j->nd > 0 && (rc = distance_head(c, base ? base : c, cap, i, sc, hidx, err))) return rc;
    double t1 = thread_cpu();
    if (j->ns > 0) {
        al_metrics_opts mo = {.top_n = j->Ns,
                              .n_top = j->ns,
                              .distance = 0,
                              .separability = 1,
                              .causal = cap->causal,
                              .window = cap->window};
        rc = al__head_metrics_gram(sc->w, sc->x, head_gram(c, cap, i, sc), head_rank(c, cap, i, sc),
                                   -1, L, c->dx, &mo, sc->st, NULL, NULL, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
        for (int k = 0; k < j->ns; k++) {
            size_t o = (size_t)hidx * j->ns + k;
            j->ns_ratio[o] = sc->st[k].ns_ratio;
            j->ns_lower[o] = sc->st[k].ns_lower;
            j->ns_upper[o] = sc->st[k].ns_upper;
        }
    }
    double t2 = thread_cpu();
    if (j->want_van) {
        rc = al__ex_row_stats(sc->w, L, cap->causal, cap->window, j->vmax + (size_t)hidx * L,
                              j->vent + (size_t)hidx * L, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
        al__ex_to_double(cap->q + (size_t)i * L * cap->d_head, sc->q, (size_t)L * cap->d_head);
        al__ex_to_double(cap->k + (size_t)i * L * cap->d_head, sc->k, (size_t)L * cap->d_head);
        rc = al_head_vanishing_D_window(sc->q, sc->k, L, cap->d_head, cap->causal, cap->window,
                                        j->vD + (size_t)hidx * L, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
    }
    double t3 = thread_cpu();
    tsec[0] += t1 - t0;
    tsec[1] += t2 - t1;
    tsec[3] += t3 - t2;
    return 0;
}

/* Does this rank compute head i of the capture (dist.h)? */
static int owned(const al__ex_heads *hs, int i) {
    const al_capture *cap = hs->cap;
    return al__dist_owner(hs->dist, cap->layer * hs->n_head + cap->heads[i]) == hs->rank;
}

/* The next unit for thread tid: the front of its own segment seg[2 tid .. 2 tid + 1), else the
 * back of the segment with the most left (-1: none left). */
static int take_unit(int *seg, int nt, int tid) {
    int u = -1;
#pragma omp critical(al_ex_take)
    {
        if (seg[2 * tid] < seg[2 * tid + 1]) {
            u = seg[2 * tid]++;
        } else {
            int best = -1, left = 0;
            for (int s = 0; s < nt; s++)
                if (seg[2 * s + 1] - seg[2 * s] > left)
                    best = s, left = seg[2 * s + 1] - seg[2 * s];
            if (best >= 0) u = --seg[2 * best + 1];
        }
    }
    return u;
}

int al__ex_each_unit(const al__ex_heads *hs, const al__ex_unit *units, int n_units,
                     al__ex_unit_fn fn, void *ctx, double tsec[4], al_error *err) {
    const al_capture *cap = hs->cap;
    int nt = hs->n_threads > 0 ? hs->n_threads : 1, failed = 0;
    al_error first = {0};
    int *seg = al__malloc(2 * (size_t)nt * sizeof(int), "work units", err);
    if (!seg) return AL_E_NOMEM;
    for (int t = 0; t <= nt; t++) { /* contiguous shares: a thread's units mostly its own heads' */
        int b = (int)((int64_t)n_units * t / nt);
        if (t < nt) seg[2 * t] = b;
        if (t > 0) seg[2 * t - 1] = b;
    }
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num();
        double mysec[4] = {0, 0, 0, 0};
        al_error e = {0};
        for (int u; (u = take_unit(seg, nt, tid)) >= 0;) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) break;
            int h = cap->layer * hs->n_head + cap->heads[units[u].i], bad;
            /* the caller's thread (0) asks its progress callback before each unit; a signal
             * stops the work between two units, on any thread */
            if (tid == 0 && al__poll("heads", h, (int64_t)hs->n_head * (cap->layer + 1), &e))
                bad = 1;
            else if (al__cancelled())
                bad = al__err(&e, AL_E_CANCELLED, "interrupted");
            else
                bad = fn(ctx, cap, &units[u], &hs->sc[tid], mysec, &e);
            if (bad) {
#pragma omp critical(al_ex_head_err)
                {
                    if (!failed) first = e;
                    failed = 1;
                }
            }
        }
#pragma omp critical(al_ex_head_time)
        for (int k = 0; k < 4; k++) tsec[k] += mysec[k];
    }
    free(seg);
    if (failed) {
        if (err) *err = first;
        return first.code ? (int)first.code : AL_E_INVALID;
    }
    for (int i = 0; i < cap->n_sel; i++) /* every head of this rank, whatever its units */
        if (owned(hs, i)) hs->done[cap->layer * hs->n_head + cap->heads[i]]++;
    return 0;
}

int al__ex_head_units(const al__ex_heads *hs, al__ex_unit **out, al_error *err) {
    *out = al__malloc(((size_t)hs->cap->n_sel + 1) * sizeof(al__ex_unit), "work units", err);
    if (!*out) return -1;
    int n = 0;
    for (int i = 0; i < hs->cap->n_sel; i++)
        if (owned(hs, i)) (*out)[n++] = (al__ex_unit){i, -1, 0};
    return n;
}

/* A unit of the run's or a reading's work (part of head_part) */
static int observe_unit(void *ctx, const al_capture *cap, const al__ex_unit *u, scratch *sc,
                        double tsec[4], al_error *err) {
    obs_ctx *c = ctx;
    if (u->k < 0) return head_part(c, NULL, cap, u->i, u->part, sc, tsec, err);
    double vt[4] = {0, 0, 0, 0};
    int rc = head_part(&c->var[u->k], c, cap, u->i, u->part, sc, vt, err);
    for (int k = 0; k < 4; k++) tsec[k] += vt[k], sc->vsec[u->k][k] += vt[k];
    return rc;
}

/* The units of this layer (heads of this rank, head by head): the run's and each reading's
 * metrics (part 0) and Algorithm 5 (part 1, unless the run computes the reading's alongside its
 * own: sens_partner). Returns their count, -1 out of memory. */
static int observe_units(obs_ctx *c, const al__ex_heads *hs, al__ex_unit **out, al_error *err) {
    size_t most = (size_t)hs->cap->n_sel * 2 * ((size_t)c->n_var + 1) + 1;
    al__ex_unit *u = *out = al__malloc(most * sizeof(al__ex_unit), "work units", err);
    if (!u) return -1;
    const obs_ctx *partner = sens_partner(c);
    int n = 0;
    for (int i = 0; i < hs->cap->n_sel; i++) {
        if (!owned(hs, i)) continue; /* another rank's head */
        for (int k = -1; k < c->n_var; k++) {
            const obs_ctx *x = k < 0 ? c : &c->var[k];
            const job *j = x->j;
            if (!j) continue;
            if (j->nd > 0 || j->ns > 0 || j->want_van) u[n++] = (al__ex_unit){i, k, 0};
            if (j->want_sens && x != partner) u[n++] = (al__ex_unit){i, k, 1};
        }
    }
    return n;
}

/* The checks of the vectors a context reads (the embedding copied once, at layer 0). */
static int check_vectors(obs_ctx *c, const al_capture *cap, al_error *err) {
    if (cap->embed && !c->embed && c->p->o.vectors == AL_VEC_EMBED) {
        size_t n = (size_t)cap->T * cap->d_model;
        c->embed = al__malloc(n * sizeof(float), "embedding copy", err);
        if (!c->embed) return AL_E_NOMEM;
        memcpy(c->embed, cap->embed, n * sizeof(float));
    }
    if (c->p->o.vectors == AL_VEC_EMBED && !cap->embed && !c->embed)
        return al__err(err, AL_E_UNSUPPORTED, "the model gave no embedding capture for layer %d",
                       cap->layer);
    if (c->p->o.vectors == AL_VEC_RESIDUAL && !cap->residual)
        return al__err(err, AL_E_UNSUPPORTED,
                       "--vectors residual: the model gave no residual-stream capture for layer %d",
                       cap->layer);
    return 0;
}

static int observe(void *user, const al_capture *cap, al_error *err) {
    if (al__cancelled()) return al__err(err, AL_E_CANCELLED, "interrupted");
    obs_ctx *c = user;
    if (cap->T != c->L)
        return al__err(err, AL_E_INVALID, "capture of %d tokens, expected %d", cap->T, c->L);
    int rc0 = check_vectors(c, cap, err);
    for (int v = 0; v < c->n_var && !rc0; v++)
        if (c->var[v].j) rc0 = check_vectors(&c->var[v], cap, err);
    if (!rc0) {
        double g0 = al__ex_process_cpu();
        rc0 = build_layer_grams(c, cap, err);
        c->j->t_dist += al__ex_process_cpu() - g0; /* the metrics' own work, done ahead */
    }
    if (rc0) return rc0;
    double tsec[4] = {0, 0, 0, 0};
    al__ex_heads hs = {.cap = cap,
                       .n_head = c->p->n_head,
                       .dist = c->p->dist,
                       .rank = c->p->rank,
                       .n_threads = c->n_threads,
                       .sc = c->sc,
                       .done = c->done};
    al__ex_unit *units = NULL;
    int nu = observe_units(c, &hs, &units, err);
    int rc = nu < 0 ? AL_E_NOMEM : al__ex_each_unit(&hs, units, nu, observe_unit, c, tsec, err);
    free(units);
    c->j->t_dist += tsec[0];
    c->j->t_sep += tsec[1];
    c->j->t_sens += tsec[2];
    c->j->t_van += tsec[3];
    /* each reading's results.json counts its own heads' CPU time (the run's counts all of it) */
    for (int v = 0; v < c->n_var; v++)
        for (int t = 0; t < c->n_threads; t++) {
            double *s = c->sc[t].vsec[v];
            if (c->var[v].j)
                c->var[v].j->t_dist += s[0], c->var[v].j->t_sep += s[1],
                    c->var[v].j->t_sens += s[2], c->var[v].j->t_van += s[3];
            s[0] = s[1] = s[2] = s[3] = 0;
        }
    if (rc) return rc;
    c->layers_done++;
    snprintf(c->status, sizeof c->status, "window %d, L = %d: layer %d/%d", c->j->window, c->L,
             c->layers_done, c->p->n_sel_layers);
    al__progress_add(c->pg, c->units_per_layer, c->status);
    return 0;
}

void al__ex_free_scratch(scratch *sc, int n) {
    if (!sc) return;
    for (int i = 0; i < n; i++) {
        free(sc[i].w);
        free(sc[i].z);
        free(sc[i].x);
        free(sc[i].q);
        free(sc[i].k);
        free(sc[i].st);
        free(sc[i].rd);
        free(sc[i].G);
        free(sc[i].rank);
        free(sc[i].kvs);
    }
    free(sc);
}

/* The arrays a job's forward captures: weights (or logits to re-normalise), logits for
 * Algorithm 5, the vectors option's array, and q, k for the vanishing band. */
unsigned al__ex_job_what(const plan *p, const job *j) {
    unsigned what = 0;
    if (p->have_nm || j->want_sens) what |= AL_CAP_LOGITS;
    if (!p->have_nm) what |= AL_CAP_WEIGHTS;
    switch (p->o.vectors) {
    case AL_VEC_VALUE:
        what |= AL_CAP_V;
        break;
    case AL_VEC_KEY:
        what |= AL_CAP_K;
        break;
    case AL_VEC_HIDDEN:
        what |= AL_CAP_HIDDEN;
        break;
    case AL_VEC_EMBED:
        what |= AL_CAP_EMBED;
        break;
    case AL_VEC_RESIDUAL:
        what |= AL_CAP_RESIDUAL;
        break;
    }
    if (j->want_van) what |= AL_CAP_Q | AL_CAP_K;
    return what;
}

double al__ex_job_units(const job *j) {
    return (double)j->L * j->L * (1.0 + (j->is_long ? 3.0 : 0.0));
}

/* Collective: the job's per-head arrays onto rank 0 (each head from the rank that owns it; every
 * head computed exactly once), and its times: CPU seconds summed over the ranks, the wall time
 * of the slowest. */
static int merge_job(const plan *p, job *j, const uint8_t *done, al_error *err) {
    named_arr a[16];
    double *arr[16];
    int64_t cols[16];
    int n = al__ex_job_arrays(p, j, a);
    for (int i = 0; i < n; i++) arr[i] = a[i].data, cols[i] = a[i].shape[1];
    int rc = al__dist_merge_heads(p->dist, p->H, p->n_head, n, arr, cols, done, err);
    double t[5] = {j->t_forward, j->t_dist, j->t_sep, j->t_sens, j->t_van};
    if (!rc) rc = al__dist_reduce(p->dist, t, 5, 0, err);
    if (!rc) rc = al__dist_reduce(p->dist, &j->t_wall, 1, 1, err);
    if (rc) return al__err_prefix(err, rc, "window %d, L = %d", j->window, j->L);
    j->t_forward = t[0], j->t_dist = t[1], j->t_sep = t[2], j->t_sens = t[3], j->t_van = t[4];
    return 0;
}

/* Collective (dist.h): every rank runs the job's forward and computes its own heads; then the
 * heads of every rank are merged onto rank 0. Returns the same code on every rank. */
int al__ex_run_job(const plan *p, al_model *m, const int32_t *tokens, job *j, const plan *const *vp,
                   job *const *vj, int nv, al__progress *pg, al_error *err) {
    const al_model_info *mi = al_model_get_info(m);
    obs_ctx c = {.p = p, .j = j, .L = j->L, .d_head = mi->d_head, .pg = pg};
    c.dx = (p->o.vectors == AL_VEC_VALUE || p->o.vectors == AL_VEC_KEY) ? mi->d_head : mi->d_model;
    obs_ctx var[64];
    if (nv > 64) return al__err(err, AL_E_INVALID, "--readings: %d readings (at most 64)", nv);
    unsigned what = al__ex_job_what(p, j);
    int dxm = c.dx, nd = j->nd > j->ns ? j->nd : j->ns;
    for (int v = 0; v < nv; v++) {
        var[v] = c;
        var[v].p = vp[v];
        var[v].j = vj[v];
        var[v].dx = (vp[v]->o.vectors == AL_VEC_VALUE || vp[v]->o.vectors == AL_VEC_KEY)
                        ? mi->d_head
                        : mi->d_model;
        if (!vj[v]) continue;
        what |= al__ex_job_what(vp[v], vj[v]);
        dxm = var[v].dx > dxm ? var[v].dx : dxm;
        nd = vj[v]->nd > nd ? vj[v]->nd : nd;
        nd = vj[v]->ns > nd ? vj[v]->ns : nd;
    }
    c.var = var;
    c.n_var = nv;
    c.n_threads = p->o.threads > 0 ? p->o.threads : omp_get_max_threads();
    int with = 1; /* the progress counts each reading's heads of this job as the run's */
    for (int v = 0; v < nv; v++) with += vj[v] != NULL;
    c.units_per_layer = al__ex_job_units(j) * with / p->n_sel_layers;
    int rc = 0;
    size_t LL = (size_t)j->L * j->L, nst = (size_t)nd + 1;
    c.done = al__calloc((size_t)p->H, 1, "heads done", err);
    c.sc = c.done ? al__calloc((size_t)c.n_threads, sizeof(scratch), "scratch", err) : NULL;
    if (!c.sc) rc = AL_E_NOMEM;
    for (int t = 0; t < c.n_threads && !rc; t++) {
        scratch *s = &c.sc[t];
        if (!(s->w = al__malloc(LL * sizeof(double), "head weights", err)) ||
            !(s->z = al__malloc(LL * sizeof(double), "head logits", err)) ||
            !(s->x = al__malloc_huge((size_t)j->L * dxm * sizeof(double), "head vectors", err)) ||
            !(s->q = al__malloc((size_t)j->L * mi->d_head * sizeof(double), "head q", err)) ||
            !(s->k = al__malloc((size_t)j->L * mi->d_head * sizeof(double), "head k", err)) ||
            !(s->st = al__malloc(nst * sizeof(al_topn_stats), "stats", err)) ||
            !(s->rd = al__malloc(2 * nst * sizeof(al_reading_stats), "stats", err)) ||
            !(s->G = al__malloc_huge(LL * sizeof(double), "head Gram matrix", err)) ||
            !(s->rank = al__malloc_huge(LL * sizeof(uint16_t), "head ranking", err)) ||
            !(s->kvs = al__malloc(32 * (size_t)j->L, "head ranking scratch", err)))
            rc = AL_E_NOMEM;
        else
            s->g_layer = s->r_layer = s->w_layer = s->z_layer = s->x_layer = -1;
    }
    layer_gram lg = {.layer = {-1, -1, -1, -1, -1}};
    c.lg = &lg;
    for (int v = 0; v < nv; v++) var[v].sc = c.sc, var[v].done = NULL, var[v].lg = &lg;
    /* --layers / --heads: only those are captured; the others, done by their owner, stay NaN */
    al_capture_request req = {
        .what = what, .layers = p->lmask, .heads = p->hmask, .fn = observe, .user = &c};
    for (int h = 0; c.done && h < p->H; h++)
        if (!al__ex_head_selected(p, h) && al__dist_owner(p->dist, h) == p->rank) c.done[h] = 1;
    /* the window: ids [kL, (k+1)L), or an encoder's [CLS] + L - 2 of them + [SEP] */
    const int32_t *win = tokens + (size_t)j->window * j->L;
    int32_t *framed = NULL;
    if (!rc && al_framing_body(&p->fr, j->L) != j->L) {
        if (!(framed = al__malloc(sizeof(int32_t) * (size_t)j->L, "window", err)))
            rc = AL_E_NOMEM;
        else
            al_framing_window(&p->fr, tokens, j->window, j->L, framed), win = framed;
    }
    double t0 = al__now(), c0 = al__ex_process_cpu();
    if (!rc)
        rc = al_model_forward_opts(m, win, j->L, &req, &(al_forward_opts){AL_LOGITS_NONE, -1}, NULL,
                                   NULL, err);
    free(framed);
    double t1 = al__now(), c1 = al__ex_process_cpu();
    double metric_cpu = j->t_dist + j->t_sep + j->t_sens + j->t_van;
    j->t_wall = t1 - t0;
    j->t_forward = (c1 - c0) - metric_cpu > 0 ? (c1 - c0) - metric_cpu : 0;
    if (!rc && c.layers_done != p->n_sel_layers)
        rc = al__err(err, AL_E_INVALID, "the forward reported %d of %d layers", c.layers_done,
                     p->n_sel_layers);
    free(c.embed);
    for (int v = 0; v < nv; v++) free(var[v].embed);
    for (int k = 0; k < 5; k++) free(lg.G[k]), free(lg.xd[k]);
    al__ex_free_scratch(c.sc, c.n_threads);
    if (rc) al__err_prefix(err, rc, "window %d, L = %d", j->window, j->L);
    rc = al__dist_agree(p->dist, rc, err); /* an error on any rank stops every rank here */
    if (!rc) rc = merge_job(p, j, c.done, err);
    for (int v = 0; v < nv && !rc; v++) {
        if (!vj[v]) continue;
        vj[v]->t_wall = j->t_wall; /* the shared forward (the run's CPU time includes theirs) */
        rc = merge_job(vp[v], vj[v], c.done, err);
    }
    free(c.done);
    return rc;
}
