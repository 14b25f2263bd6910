/* reproduce.c: `attnlim reproduce`, the paper's experiments end to end (METHOD sections 2-6).
 *
 * Top-down:
 *   al_reproduce
 *     build_plan          grids and the (window, L) jobs: one forward per job
 *     lock_out_dir, check_run_options, sweep_dir   one run per OUT (flock); --resume only over
 *                         the same options (partial/run.json); temp files of killed runs removed
 *     run_job             forward with a capture request; observe() computes, for every head of
 *                         the layer in parallel, everything that job's L needs; results saved
 *                         atomically to OUT/partial/w{k}_L{L}/ (skipped on --resume)
 *     aggregate           window means per head, summaries over heads, KS / critical N, verdicts
 *     write_json/csv/npy  results.json, alg*.csv, *.npy
 *     al__report_figures / al__report_write (report.c)
 * Memory: one layer's capture at a time; per thread, one head's [L, L] weights and logits. */
#include "dist.h"
#include "internal.h"
#include "model.h"
#include "plot.h"
#include "progress.h"
#include "report.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- options and grids ---------------------------------------------------------------------- */

static const int def_lengths[] = {32, 64, 128, 256, 512, 1024};
static const int def_top_n[] = {1, 5, 10, 20, 100};
static const int def_sep_n[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const double def_eps[] = {1e-3, 1e-1, 10};
static const int quick_lengths[] = {16, 32, 64};
static const int quick_top_n[] = {1, 2, 5, 10};
static const int quick_crit_n[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48};
static const int quick_sep_n[] = {1, 2, 4, 8, 16};
#define ALG1_N 5

const char *al_vectors_name(al_vectors v) {
    switch (v) {
    case AL_VEC_VALUE:
        return "value";
    case AL_VEC_KEY:
        return "key";
    case AL_VEC_HIDDEN:
        return "hidden";
    case AL_VEC_EMBED:
        return "embedding";
    }
    return "?";
}

int al_vectors_parse(const char *s, al_vectors *out, al_error *err) {
    if (!s) return al__err(err, AL_E_INVALID, "--vectors: missing value");
    if (!strcmp(s, "value") || !strcmp(s, "v"))
        *out = AL_VEC_VALUE;
    else if (!strcmp(s, "key") || !strcmp(s, "k"))
        *out = AL_VEC_KEY;
    else if (!strcmp(s, "hidden"))
        *out = AL_VEC_HIDDEN;
    else if (!strcmp(s, "embedding") || !strcmp(s, "embed"))
        *out = AL_VEC_EMBED;
    else
        return al__err(err, AL_E_INVALID,
                       "--vectors: '%s' is not one of value, key, hidden, embedding", s);
    return 0;
}

void al_repro_defaults(al_repro_opts *o) {
    memset(o, 0, sizeof *o);
    o->corpus = NULL; /* war-and-peace; a model with its own tokens (a dump) takes none */
    o->out_dir = "attnlim-results";
    o->windows = 1;
    o->vectors = AL_VEC_VALUE;
    o->seed = 1234;
    o->synthetic = -1;
}

int al_repro_pick_model(char *name, size_t size, al_error *err) {
    static const char *const names[] = {"gpt2", "smollm2"};
    char why[2][1024];
    for (int i = 0; i < 2; i++) {
        al_model *m = NULL;
        al_error e = {0};
        if (al_model_open(names[i], &m, &e) == 0) {
            al_model_free(m);
            snprintf(name, size, "%s", names[i]);
            return 0;
        }
        snprintf(why[i], sizeof why[i], "%s", e.msg);
    }
    return al__err(
        err, AL_E_NOTFOUND,
        "no model available. GPT-2 124M: %s. SmolLM2: %s. Provide one with --model PATH "
        "(an HF GPT-2 directory with model.safetensors + config.json, an llm.c .bin, or a "
        ".gguf), or run `attnlim fetch smollm2`",
        why[0], why[1]);
}

/* The critical-N grid of METHOD section 4. out has room for 64. */
static int crit_grid(int *out) {
    int n = 0;
    for (int v = 1; v <= 16; v++) out[n++] = v;
    for (int v = 18; v <= 32; v += 2) out[n++] = v;
    for (int v = 36; v <= 64; v += 4) out[n++] = v;
    for (int v = 72; v <= 128; v += 8) out[n++] = v;
    for (int v = 144; v <= 256; v += 16) out[n++] = v;
    return n;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorted unique copy of v[n] keeping lo <= v <= hi. */
static int *uniq_ints(const int *v, int n, int lo, int hi, int *nout, al_error *err) {
    int *o = al__malloc(sizeof(int) * (size_t)(n > 0 ? n : 1), "grid", err);
    if (!o) return NULL;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] >= lo && v[i] <= hi) o[k++] = v[i];
    qsort(o, (size_t)k, sizeof(int), cmp_int);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || o[u - 1] != o[i]) o[u++] = o[i];
    *nout = u;
    return o;
}

/* ---- the plan: grids and jobs ------------------------------------------------------------------
 */

typedef struct job {
    int window, L;
    int in_lengths; /* Algorithms 1 and 3 use this L */
    int is_long;    /* vanishing, Algorithms 2, 4, 5 */
    int nd, ns;
    int *Nd; /* [nd] distance grid (Algorithms 1-3) */
    int *Ns; /* [ns] separability grid (Algorithm 4) */
    int want_van, want_sens;
    /* results, H = n_layer * n_head */
    double *dtilde, *dmax, *E, *E_mc, *E_mc_se; /* [H, nd] */
    double *ns_ratio, *ns_lower, *ns_upper;     /* [H, ns] */
    double *vmax, *vent, *vD;                   /* [H, L] */
    double *fd;                                 /* [H, nT * nE] */
    double *spec;                               /* [H, nT] */
    double t_wall;                              /* wall seconds of the forward with its observer */
    double t_forward, t_dist, t_sep, t_sens, t_van; /* CPU seconds (all threads) */
    int loaded;                                     /* from --resume */
} job;

/* One process of the run, for the manifest (gathered on rank 0 after the jobs). */
typedef struct rank_info {
    char host[64];
    double cpu_s; /* CPU seconds of the process (all threads) up to the end of the jobs */
    int threads;
} rank_info;

typedef struct plan {
    al_repro_opts o;
    unsigned exp;
    int H, n_layer, n_head, causal;
    int long_L;
    int nL, nN2, nN3, nN4, nT, nE;
    int *Ls, *N2, *N3, *N4; /* [nL], [nN2], [nN3], [nN4] */
    double *T, *eps;        /* [nT], [nE] */
    int n_jobs;
    job *jobs; /* [windows * distinct L] */
    al_norm nm;
    int have_nm;          /* re-normalise logits with nm */
    char fingerprint[65]; /* of everything that changes a job's numbers (but window and L) */
    /* what --resume did: jobs reused / computed, of which saved but not matching, and the temp
     * files of interrupted runs removed at the start */
    int n_reused, n_recomputed, n_stale, n_swept;
    /* the processes (dist.h): every rank computes the heads it owns; rank 0 merges, writes */
    al_dist *dist;
    int rank, size;
    rank_info *ranks; /* [size] on rank 0 */
} plan;

static void free_job(job *j) {
    free(j->Nd);
    free(j->Ns);
    free(j->dtilde);
    free(j->dmax);
    free(j->E);
    free(j->E_mc);
    free(j->E_mc_se);
    free(j->ns_ratio);
    free(j->ns_lower);
    free(j->ns_upper);
    free(j->vmax);
    free(j->vent);
    free(j->vD);
    free(j->fd);
    free(j->spec);
}

static void free_plan(plan *p) {
    for (int i = 0; i < p->n_jobs; i++) free_job(&p->jobs[i]);
    free(p->jobs);
    free(p->Ls);
    free(p->N2);
    free(p->N3);
    free(p->N4);
    free(p->T);
    free(p->eps);
    free(p->ranks);
}

static double *alloc_nan(size_t n, al_error *err) {
    double *v = al__malloc(sizeof(double) * (n ? n : 1), "results", err);
    if (v)
        for (size_t i = 0; i < n; i++) v[i] = NAN;
    return v;
}

static int build_job_grids(plan *p, job *j, al_error *err) {
    int tmp[256], k = 0;
    if (j->in_lengths && (p->exp & AL_EXP_ALG1) && ALG1_N < j->L) tmp[k++] = ALG1_N;
    if (j->in_lengths && (p->exp & AL_EXP_ALG3))
        for (int i = 0; i < p->nN3 && k < 200; i++)
            if (p->N3[i] < j->L) tmp[k++] = p->N3[i];
    if (j->is_long && (p->exp & AL_EXP_ALG2))
        for (int i = 0; i < p->nN2 && k < 250; i++)
            if (p->N2[i] < j->L) tmp[k++] = p->N2[i];
    j->Nd = uniq_ints(tmp, k, 1, j->L - 1, &j->nd, err);
    if (!j->Nd) return AL_E_NOMEM;
    k = 0;
    if (j->is_long && (p->exp & AL_EXP_ALG4))
        for (int i = 0; i < p->nN4 && k < 250; i++) tmp[k++] = p->N4[i];
    j->Ns = uniq_ints(tmp, k, 1, j->L - 1, &j->ns, err);
    if (!j->Ns) return AL_E_NOMEM;
    j->want_van = j->is_long && (p->exp & AL_EXP_VANISHING);
    j->want_sens = j->is_long && (p->exp & AL_EXP_ALG5);
    size_t H = (size_t)p->H;
    if (!(j->dtilde = alloc_nan(H * j->nd, err)) || !(j->dmax = alloc_nan(H * j->nd, err)) ||
        !(j->E = alloc_nan(H * j->nd, err)) || !(j->E_mc = alloc_nan(H * j->nd, err)) ||
        !(j->E_mc_se = alloc_nan(H * j->nd, err)) || !(j->ns_ratio = alloc_nan(H * j->ns, err)) ||
        !(j->ns_lower = alloc_nan(H * j->ns, err)) || !(j->ns_upper = alloc_nan(H * j->ns, err)))
        return AL_E_NOMEM;
    size_t nv = j->want_van ? H * (size_t)j->L : 0;
    size_t nf = j->want_sens ? H * (size_t)p->nT * p->nE : 0,
           nsp = j->want_sens ? H * (size_t)p->nT : 0;
    if (!(j->vmax = alloc_nan(nv, err)) || !(j->vent = alloc_nan(nv, err)) ||
        !(j->vD = alloc_nan(nv, err)) || !(j->fd = alloc_nan(nf, err)) ||
        !(j->spec = alloc_nan(nsp, err)))
        return AL_E_NOMEM;
    return 0;
}

static int build_plan(plan *p, const al_repro_opts *o, const al_model_info *mi, al_error *err) {
    memset(p, 0, sizeof *p);
    p->o = *o;
    p->exp = o->experiments ? (o->experiments & AL_EXP_ALL) : AL_EXP_ALL;
    p->n_layer = mi->n_layer;
    p->n_head = mi->n_head;
    p->H = mi->n_layer * mi->n_head;
    p->causal = mi->causal;
    if (p->H <= 0) return al__err(err, AL_E_FORMAT, "%s: model has no attention heads", mi->path);
    int ctx = mi->n_ctx;
    int rc;
    /* long L */
    int want_long = o->long_length > 0 ? o->long_length : (o->quick ? 64 : 1024);
    if (o->long_length > ctx)
        return al__err(err, AL_E_INVALID,
                       "--long-length %d is above the model's context of %d tokens", o->long_length,
                       ctx);
    p->long_L = want_long < ctx ? want_long : ctx;
    if (p->long_L < 2)
        return al__err(err, AL_E_INVALID, "the model's context (%d) is too short", ctx);
    /* grids */
    const int *g;
    int n;
    if (o->lengths)
        g = o->lengths, n = o->n_lengths;
    else if (o->quick)
        g = quick_lengths, n = (int)(sizeof quick_lengths / sizeof *quick_lengths);
    else
        g = def_lengths, n = (int)(sizeof def_lengths / sizeof *def_lengths);
    for (int i = 0; i < n; i++)
        if (o->lengths && (g[i] < 2 || g[i] > ctx))
            return al__err(err, AL_E_INVALID,
                           "--lengths: %d is outside 2..%d (the model's context)", g[i], ctx);
    if (!(p->Ls = uniq_ints(g, n, 2, ctx, &p->nL, err))) return AL_E_NOMEM;
    if (o->top_n)
        g = o->top_n, n = o->n_top_n;
    else if (o->quick)
        g = quick_top_n, n = (int)(sizeof quick_top_n / sizeof *quick_top_n);
    else
        g = def_top_n, n = (int)(sizeof def_top_n / sizeof *def_top_n);
    if (!(p->N2 = uniq_ints(g, n, 1, p->long_L - 1, &p->nN2, err))) return AL_E_NOMEM;
    int cg[64];
    if (o->critical_n)
        g = o->critical_n, n = o->n_critical_n;
    else if (o->quick)
        g = quick_crit_n, n = (int)(sizeof quick_crit_n / sizeof *quick_crit_n);
    else
        g = cg, n = crit_grid(cg);
    if (!(p->N3 = uniq_ints(g, n, 1, 1 << 30, &p->nN3, err))) return AL_E_NOMEM;
    if (o->separability_n)
        g = o->separability_n, n = o->n_separability_n;
    else if (o->quick)
        g = quick_sep_n, n = (int)(sizeof quick_sep_n / sizeof *quick_sep_n);
    else
        g = def_sep_n, n = (int)(sizeof def_sep_n / sizeof *def_sep_n);
    if (!(p->N4 = uniq_ints(g, n, 1, p->long_L - 1, &p->nN4, err))) return AL_E_NOMEM;
    /* temperatures: 25 (quick: 9) log-spaced over [1e-3, 1e1] */
    p->nT = o->temperatures ? o->n_temperatures : (o->quick ? 9 : 25);
    p->nE = o->eps ? o->n_eps : 3;
    if (p->nT < 1 || p->nE < 1)
        return al__err(err, AL_E_INVALID, "--temperatures and --eps need values");
    if (!(p->T = al__malloc(sizeof(double) * p->nT, "temperatures", err))) return AL_E_NOMEM;
    if (!(p->eps = al__malloc(sizeof(double) * p->nE, "eps", err))) return AL_E_NOMEM;
    for (int i = 0; i < p->nT; i++)
        p->T[i] = o->temperatures ? o->temperatures[i] : pow(10.0, -3.0 + 4.0 * i / (p->nT - 1));
    for (int i = 0; i < p->nE; i++) p->eps[i] = o->eps ? o->eps[i] : def_eps[i];
    for (int i = 0; i < p->nT; i++)
        if (!(p->T[i] > 0) || !isfinite(p->T[i]))
            return al__err(err, AL_E_INVALID, "--temperatures: %g is not a positive number",
                           p->T[i]);
    for (int i = 0; i < p->nE; i++)
        if (!(p->eps[i] > 0) || !isfinite(p->eps[i]))
            return al__err(err, AL_E_INVALID, "--eps: %g is not a positive number", p->eps[i]);
    qsort(p->T, (size_t)p->nT, sizeof(double), cmp_dbl);
    /* normalizer */
    if (o->normalizer) {
        if ((rc = al_norm_parse(o->normalizer, &p->nm, err))) return rc;
        p->have_nm = 1;
    } else {
        p->nm = al_norm_default(AL_NORM_SOFTMAX);
    }
    /* jobs: every window x every distinct L */
    if (o->windows < 1) return al__err(err, AL_E_INVALID, "--windows must be >= 1");
    int Lset[64], nLs = 0;
    if (p->exp & (AL_EXP_ALG1 | AL_EXP_ALG3))
        for (int i = 0; i < p->nL && nLs < 63; i++) Lset[nLs++] = p->Ls[i];
    if (p->exp & (AL_EXP_VANISHING | AL_EXP_ALG2 | AL_EXP_ALG4 | AL_EXP_ALG5))
        Lset[nLs++] = p->long_L;
    int nu;
    int *Lu = uniq_ints(Lset, nLs, 2, ctx, &nu, err);
    if (!Lu) return AL_E_NOMEM;
    p->n_jobs = nu * o->windows;
    p->jobs = al__calloc((size_t)(p->n_jobs ? p->n_jobs : 1), sizeof(job), "jobs", err);
    if (!p->jobs) {
        free(Lu);
        return AL_E_NOMEM;
    }
    rc = 0;
    for (int w = 0, k = 0; w < o->windows && !rc; w++)
        for (int i = 0; i < nu && !rc; i++, k++) {
            job *j = &p->jobs[k];
            j->window = w;
            j->L = Lu[i];
            j->is_long = Lu[i] == p->long_L &&
                         (p->exp & (AL_EXP_VANISHING | AL_EXP_ALG2 | AL_EXP_ALG4 | AL_EXP_ALG5));
            j->in_lengths = 0;
            if (p->exp & (AL_EXP_ALG1 | AL_EXP_ALG3))
                for (int t = 0; t < p->nL; t++) j->in_lengths |= p->Ls[t] == Lu[i];
            rc = build_job_grids(p, j, err);
        }
    free(Lu);
    return rc;
}

/* ---- the observer: every head of one layer ----------------------------------------------------
 */

typedef struct scratch {
    double *w, *z;     /* [L, L] */
    double *x;         /* [L, dx] */
    double *q, *k;     /* [L, d_head] */
    al_topn_stats *st; /* [max(nd, ns)] */
} scratch;

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
} obs_ctx;

static al_five *alloc_five(int n, al_error *err) {
    al_five *f = al__malloc(sizeof(al_five) * (size_t)(n > 0 ? n : 1), "summaries", err);
    if (f)
        for (int i = 0; i < n; i++) f[i] = (al_five){NAN, NAN, NAN, NAN, NAN, NAN};
    return f;
}

static void to_double(const float *src, double *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* Prepares head i of the capture in scratch sc: z (logits, masked entries 0), w (weights),
 * x (vectors). */
static int prepare_head(obs_ctx *c, const al_capture *cap, int i, scratch *sc, int need_z,
                        al_error *err) {
    const plan *p = c->p;
    int64_t L = cap->T;
    size_t LL = (size_t)L * L;
    if (need_z) {
        const float *z = cap->logits + (size_t)i * LL;
        for (int64_t t = 0; t < L; t++) {
            int64_t n = cap->causal ? t + 1 : L;
            double *zr = sc->z + (size_t)t * L;
            for (int64_t u = 0; u < n; u++) zr[u] = z[(size_t)t * L + u];
            for (int64_t u = n; u < L; u++) zr[u] = 0;
        }
    }
    if (p->have_nm) {
        for (int64_t t = 0; t < L; t++) {
            int64_t n = cap->causal ? t + 1 : L;
            double *wr = sc->w + (size_t)t * L;
            int rc = al_norm_forward(&p->nm, sc->z + (size_t)t * L, n, wr, err);
            if (rc)
                return al__err_prefix(err, rc, "layer %d head %d row %lld", cap->layer,
                                      cap->heads[i], (long long)t);
            for (int64_t u = n; u < L; u++) wr[u] = 0;
        }
    } else {
        to_double(cap->weights + (size_t)i * LL, sc->w, LL);
    }
    switch (p->o.vectors) {
    case AL_VEC_VALUE:
        to_double(cap->v + (size_t)i * L * cap->d_head, sc->x, (size_t)L * cap->d_head);
        break;
    case AL_VEC_KEY:
        to_double(cap->k + (size_t)i * L * cap->d_head, sc->x, (size_t)L * cap->d_head);
        break;
    case AL_VEC_HIDDEN:
        to_double(cap->hidden, sc->x, (size_t)L * cap->d_model);
        break;
    case AL_VEC_EMBED:
        to_double(cap->embed ? cap->embed : c->embed, sc->x, (size_t)L * cap->d_model);
        break;
    }
    return 0;
}

/* Max weight and entropy of every row of w[L, L] (row t over its n_t keys): rmax[L], rent[L]. */
static int row_stats(const double *w, int64_t L, int causal, double *rmax, double *rent,
                     al_error *err) {
    for (int64_t t = 0; t < L; t++) {
        int rc =
            al_row_vanishing(w + (size_t)t * L, causal ? t + 1 : L, &rmax[t], &rent[t], NULL, err);
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
static double process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int head_work(obs_ctx *c, const al_capture *cap, int i, scratch *sc, double tsec[4],
                     al_error *err) {
    const plan *p = c->p;
    job *j = c->j;
    int L = cap->T, hidx = cap->layer * p->n_head + cap->heads[i];
    int need_z = p->have_nm || j->want_sens;
    int rc = prepare_head(c, cap, i, sc, need_z, err);
    if (rc) return rc;
    double t0 = thread_cpu();
    if (j->nd > 0) {
        al_metrics_opts mo = {
            .top_n = j->Nd,
            .n_top = j->nd,
            .distance = 1,
            .separability = 0,
            .mc_samples = p->o.mc_samples,
            .mc_seed = al__hash64(p->o.seed ^ al__hash64((uint64_t)hidx * 7919u + (uint64_t)L)),
            .causal = cap->causal};
        rc = al_head_metrics(sc->w, sc->x, L, c->dx, &mo, sc->st, NULL, NULL, err);
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
    }
    double t1 = thread_cpu();
    if (j->ns > 0) {
        al_metrics_opts mo = {.top_n = j->Ns,
                              .n_top = j->ns,
                              .distance = 0,
                              .separability = 1,
                              .causal = cap->causal};
        rc = al_head_metrics(sc->w, sc->x, L, c->dx, &mo, sc->st, NULL, NULL, err);
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
    if (j->want_sens) {
        rc = al_head_sensitivity(sc->z, L, cap->causal, &p->nm, p->T, p->nT, p->eps, p->nE,
                                 p->o.seed, cap->layer, cap->heads[i],
                                 j->fd + (size_t)hidx * p->nT * p->nE,
                                 j->spec + (size_t)hidx * p->nT, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
    }
    double t3 = thread_cpu();
    if (j->want_van) {
        rc = row_stats(sc->w, L, cap->causal, j->vmax + (size_t)hidx * L,
                       j->vent + (size_t)hidx * L, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
        to_double(cap->q + (size_t)i * L * cap->d_head, sc->q, (size_t)L * cap->d_head);
        to_double(cap->k + (size_t)i * L * cap->d_head, sc->k, (size_t)L * cap->d_head);
        rc = al_head_vanishing_D(sc->q, sc->k, L, cap->d_head, cap->causal,
                                 j->vD + (size_t)hidx * L, err);
        if (rc)
            return al__err_prefix(err, rc, "layer %d head %d (L = %d)", cap->layer, cap->heads[i],
                                  L);
    }
    double t4 = thread_cpu();
    tsec[0] += t1 - t0;
    tsec[1] += t2 - t1;
    tsec[2] += t3 - t2;
    tsec[3] += t4 - t3;
    return 0;
}

static int observe(void *user, const al_capture *cap, al_error *err) {
    obs_ctx *c = user;
    if (cap->T != c->L)
        return al__err(err, AL_E_INVALID, "capture of %d tokens, expected %d", cap->T, c->L);
    if (cap->embed && !c->embed && c->p->o.vectors == AL_VEC_EMBED) {
        size_t n = (size_t)cap->T * cap->d_model;
        c->embed = al__malloc(n * sizeof(float), "embedding copy", err);
        if (!c->embed) return AL_E_NOMEM;
        memcpy(c->embed, cap->embed, n * sizeof(float));
    }
    if (c->p->o.vectors == AL_VEC_EMBED && !cap->embed && !c->embed)
        return al__err(err, AL_E_UNSUPPORTED, "the model gave no embedding capture for layer %d",
                       cap->layer);
    int failed = 0;
    al_error first = {0};
    double tsec[4] = {0, 0, 0, 0};
#pragma omp parallel num_threads(c->n_threads)
    {
        int tid = omp_get_thread_num();
        double mysec[4] = {0, 0, 0, 0};
        al_error e = {0};
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < cap->n_sel; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            int h = cap->layer * c->p->n_head + cap->heads[i];
            if (al__dist_owner(c->p->dist, h) != c->p->rank) continue; /* another rank's head */
            if (head_work(c, cap, i, &c->sc[tid], mysec, &e)) {
#pragma omp critical(repro_err)
                {
                    if (!failed) first = e;
                    failed = 1;
                }
            } else {
                c->done[h]++; /* distinct i: distinct h, no two threads write one byte */
            }
        }
#pragma omp critical(repro_time)
        for (int k = 0; k < 4; k++) tsec[k] += mysec[k];
    }
    c->j->t_dist += tsec[0];
    c->j->t_sep += tsec[1];
    c->j->t_sens += tsec[2];
    c->j->t_van += tsec[3];
    if (failed) {
        if (err) *err = first;
        return first.code ? (int)first.code : AL_E_INVALID;
    }
    c->layers_done++;
    snprintf(c->status, sizeof c->status, "window %d, L = %d: layer %d/%d", c->j->window, c->L,
             c->layers_done, c->p->n_layer);
    al__progress_add(c->pg, c->units_per_layer, c->status);
    return 0;
}

static void free_scratch(scratch *sc, int n) {
    if (!sc) return;
    for (int i = 0; i < n; i++) {
        free(sc[i].w);
        free(sc[i].z);
        free(sc[i].x);
        free(sc[i].q);
        free(sc[i].k);
        free(sc[i].st);
    }
    free(sc);
}

/* The arrays a job's forward captures: weights (or logits to re-normalise), logits for
 * Algorithm 5, the vectors option's array, and q, k for the vanishing band. */
static unsigned job_what(const plan *p, const job *j) {
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
    }
    if (j->want_van) what |= AL_CAP_Q | AL_CAP_K;
    return what;
}

static double job_units(const job *j) {
    return (double)j->L * j->L * (1.0 + (j->is_long ? 3.0 : 0.0));
}

static int merge_job(const plan *p, job *j, const uint8_t *done, al_error *err);

/* Collective (dist.h): every rank runs the job's forward and computes its own heads; then the
 * heads of every rank are merged onto rank 0. Returns the same code on every rank. */
static int run_job(const plan *p, al_model *m, const int32_t *tokens, job *j, al__progress *pg,
                   al_error *err) {
    const al_model_info *mi = al_model_get_info(m);
    obs_ctx c = {.p = p, .j = j, .L = j->L, .d_head = mi->d_head, .pg = pg};
    c.dx = (p->o.vectors == AL_VEC_VALUE || p->o.vectors == AL_VEC_KEY) ? mi->d_head : mi->d_model;
    c.n_threads = p->o.threads > 0 ? p->o.threads : omp_get_max_threads();
    c.units_per_layer = job_units(j) / mi->n_layer;
    int rc = 0;
    size_t LL = (size_t)j->L * j->L, nst = (size_t)(j->nd > j->ns ? j->nd : j->ns) + 1;
    c.done = al__calloc((size_t)p->H, 1, "heads done", err);
    c.sc = c.done ? al__calloc((size_t)c.n_threads, sizeof(scratch), "scratch", err) : NULL;
    if (!c.sc) rc = AL_E_NOMEM;
    for (int t = 0; t < c.n_threads && !rc; t++) {
        scratch *s = &c.sc[t];
        if (!(s->w = al__malloc(LL * sizeof(double), "head weights", err)) ||
            !(s->z = al__malloc(LL * sizeof(double), "head logits", err)) ||
            !(s->x = al__malloc((size_t)j->L * c.dx * sizeof(double), "head vectors", err)) ||
            !(s->q = al__malloc((size_t)j->L * mi->d_head * sizeof(double), "head q", err)) ||
            !(s->k = al__malloc((size_t)j->L * mi->d_head * sizeof(double), "head k", err)) ||
            !(s->st = al__malloc(nst * sizeof(al_topn_stats), "stats", err)))
            rc = AL_E_NOMEM;
    }
    al_capture_request req = {.what = job_what(p, j), .fn = observe, .user = &c};
    double t0 = al__now(), c0 = process_cpu();
    if (!rc)
        rc = al_model_forward(m, tokens + (size_t)j->window * j->L, j->L, &req, NULL, NULL, err);
    double t1 = al__now(), c1 = process_cpu();
    double metric_cpu = j->t_dist + j->t_sep + j->t_sens + j->t_van;
    j->t_wall = t1 - t0;
    j->t_forward = (c1 - c0) - metric_cpu > 0 ? (c1 - c0) - metric_cpu : 0;
    if (!rc && c.layers_done != mi->n_layer)
        rc = al__err(err, AL_E_INVALID, "the forward reported %d of %d layers", c.layers_done,
                     mi->n_layer);
    free(c.embed);
    free_scratch(c.sc, c.n_threads);
    if (rc) al__err_prefix(err, rc, "window %d, L = %d", j->window, j->L);
    rc = al__dist_agree(p->dist, rc, err); /* an error on any rank stops every rank here */
    if (!rc) rc = merge_job(p, j, c.done, err);
    free(c.done);
    return rc;
}

/* ---- partial results: save atomically, load on --resume
 * ------------------------------------------ */

typedef struct named_arr {
    const char *name;
    double *data;
    int ndim;
    int64_t shape[2];
} named_arr;

static int job_arrays(const plan *p, job *j, named_arr *a) {
    int n = 0;
    int64_t H = p->H;
    a[n++] = (named_arr){"dtilde", j->dtilde, 2, {H, j->nd}};
    a[n++] = (named_arr){"dmax", j->dmax, 2, {H, j->nd}};
    a[n++] = (named_arr){"E", j->E, 2, {H, j->nd}};
    a[n++] = (named_arr){"E_mc", j->E_mc, 2, {H, j->nd}};
    a[n++] = (named_arr){"E_mc_se", j->E_mc_se, 2, {H, j->nd}};
    a[n++] = (named_arr){"ns_ratio", j->ns_ratio, 2, {H, j->ns}};
    a[n++] = (named_arr){"ns_lower", j->ns_lower, 2, {H, j->ns}};
    a[n++] = (named_arr){"ns_upper", j->ns_upper, 2, {H, j->ns}};
    if (j->want_van) {
        a[n++] = (named_arr){"van_max", j->vmax, 2, {H, j->L}};
        a[n++] = (named_arr){"van_entropy", j->vent, 2, {H, j->L}};
        a[n++] = (named_arr){"van_D", j->vD, 2, {H, j->L}};
    }
    if (j->want_sens) {
        a[n++] = (named_arr){"alg5_fd", j->fd, 2, {H, (int64_t)p->nT * p->nE}};
        a[n++] = (named_arr){"alg5_spec", j->spec, 2, {H, p->nT}};
    }
    return n;
}

/* Collective: the job's per-head arrays onto rank 0 (each head from the rank that owns it; every
 * head computed exactly once), and its times: CPU seconds summed over the ranks, the wall time
 * of the slowest. */
static int merge_job(const plan *p, job *j, const uint8_t *done, al_error *err) {
    named_arr a[16];
    double *arr[16];
    int64_t cols[16];
    int n = job_arrays(p, j, a);
    for (int i = 0; i < n; i++) arr[i] = a[i].data, cols[i] = a[i].shape[1];
    int rc = al__dist_merge_heads(p->dist, p->H, p->n_head, n, arr, cols, done, err);
    double t[5] = {j->t_forward, j->t_dist, j->t_sep, j->t_sens, j->t_van};
    if (!rc) rc = al__dist_reduce(p->dist, t, 5, 0, err);
    if (!rc) rc = al__dist_reduce(p->dist, &j->t_wall, 1, 1, err);
    if (rc) return al__err_prefix(err, rc, "window %d, L = %d", j->window, j->L);
    j->t_forward = t[0], j->t_dist = t[1], j->t_sep = t[2], j->t_sens = t[3], j->t_van = t[4];
    return 0;
}

static void job_dir(const plan *p, const job *j, char *out, size_t size) {
    snprintf(out, size, "%s/partial/w%d_L%d", p->o.out_dir, j->window, j->L);
}

static void job_key(const plan *p, const job *j, char hex[65]) {
    char buf[8192];
    int k = snprintf(buf, sizeof buf, "%s|w%d|L%d|nd", p->fingerprint, j->window, j->L);
    for (int i = 0; i < j->nd && k < (int)sizeof buf - 16; i++)
        k += snprintf(buf + k, sizeof buf - k, ",%d", j->Nd[i]);
    k += snprintf(buf + k, sizeof buf - k, "|ns");
    for (int i = 0; i < j->ns && k < (int)sizeof buf - 16; i++)
        k += snprintf(buf + k, sizeof buf - k, ",%d", j->Ns[i]);
    k += snprintf(buf + k, sizeof buf - k, "|v%d|s%d", j->want_van, j->want_sens);
    al_sha256_buf(buf, strlen(buf), hex);
}

static int save_job(const plan *p, const job *j, al_error *err) {
    char dir[4096], path[4200], key[65];
    job_dir(p, j, dir, sizeof dir);
    int rc = al__mkdirs(dir, err);
    if (rc) return rc;
    /* an older marker goes first: arrays being replaced must never sit next to a done.json
     * (whose key a later --resume could match) */
    snprintf(path, sizeof path, "%s/done.json", dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return al__err(err, AL_E_IO, "%s: cannot remove the old marker: %s", path, strerror(errno));
    named_arr a[16];
    int n = job_arrays(p, (job *)j, a);
    for (int i = 0; i < n; i++) {
        al_array arr = {.dtype = AL_F64, .ndim = a[i].ndim, .data = a[i].data};
        arr.shape[0] = a[i].shape[0];
        arr.shape[1] = a[i].shape[1];
        snprintf(path, sizeof path, "%s/%s.npy", dir, a[i].name);
        if ((rc = al_npy_write(path, &arr, err))) return rc;
    }
    job_key(p, j, key);
    /* the marker goes last: a job counts as done only when every array is on disk */
    snprintf(path, sizeof path, "%s/done.json", dir);
    char buf[1024];
    int len = snprintf(buf, sizeof buf,
                       "{\"key\": \"%s\", \"window\": %d, \"L\": %d, \"t_wall\": %.6f, "
                       "\"t_forward\": %.6f, \"t_dist\": %.6f, "
                       "\"t_sep\": %.6f, \"t_sens\": %.6f, \"t_van\": %.6f}\n",
                       key, j->window, j->L, j->t_wall, j->t_forward, j->t_dist, j->t_sep,
                       j->t_sens, j->t_van);
    return al__write_file_atomic(path, buf, (size_t)len, err);
}

/* 1: loaded; 0: not there; -1: saved but stale (another key, or unreadable arrays): recompute.
 * Errors in the files only make it stale. */
static int load_job(const plan *p, job *j) {
    char dir[4096], path[4200], key[65];
    job_dir(p, j, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/done.json", dir);
    char *txt = NULL;
    size_t len;
    al_error e = {0};
    if (access(path, F_OK) != 0) return 0;
    if (al__read_file(path, 1 << 16, &txt, &len, &e)) return -1;
    cJSON *js = cJSON_Parse(txt);
    free(txt);
    if (!js) return -1;
    job_key(p, j, key);
    cJSON *k = cJSON_GetObjectItemCaseSensitive(js, "key");
    int ok = cJSON_IsString(k) && !strcmp(k->valuestring, key);
    if (ok) {
        const char *names[6] = {"t_forward", "t_dist", "t_sep", "t_sens", "t_van", "t_wall"};
        double *dst[6] = {&j->t_forward, &j->t_dist, &j->t_sep, &j->t_sens, &j->t_van, &j->t_wall};
        for (int i = 0; i < 6; i++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(js, names[i]);
            *dst[i] = cJSON_IsNumber(v) ? v->valuedouble : 0;
        }
    }
    cJSON_Delete(js);
    if (!ok) return -1;
    named_arr a[16];
    int n = job_arrays(p, j, a);
    for (int i = 0; i < n && ok; i++) {
        al_array arr = {0};
        snprintf(path, sizeof path, "%s/%s.npy", dir, a[i].name);
        if (al_npy_read(path, &arr, &e) || arr.dtype != AL_F64 || arr.ndim != 2 ||
            arr.shape[0] != a[i].shape[0] || arr.shape[1] != a[i].shape[1])
            ok = 0;
        else
            memcpy(a[i].data, arr.data, sizeof(double) * (size_t)(a[i].shape[0] * a[i].shape[1]));
        al_array_free(&arr);
    }
    return ok ? 1 : -1;
}

/* One run per output directory: an exclusive flock on OUT/.attnlim-reproduce.lock, held until
 * the run returns (the kernel drops it when the process ends, however it ends). The file holds
 * the owner's pid, for the message. *fd receives the lock (close it to release). */
static int lock_out_dir(const char *dir, int *fd, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.attnlim-reproduce.lock", dir);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f < 0)
        return al__err(err, AL_E_IO, "%s: cannot create the lock file: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[32] = {0};
        ssize_t n = pread(f, who, sizeof who - 1, 0);
        long pid = n > 0 ? strtol(who, NULL, 10) : 0;
        close(f);
        if (e == EWOULDBLOCK)
            return al__err(err, AL_E_IO,
                           "%s: another `attnlim reproduce` (pid %ld) is writing this directory "
                           "(it holds %s); wait for it to finish or use another --out",
                           dir, pid, path);
        return al__err(err, AL_E_IO, "%s: cannot lock: %s", path, strerror(e));
    }
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, buf, (size_t)len, 0) != len) {
        int e = errno;
        close(f);
        return al__err(err, AL_E_IO, "%s: cannot write: %s", path, strerror(e));
    }
    *fd = f;
    return 0;
}

/* "NAME.tmp.PID": the temp name of al__afile_open. */
static int is_temp_name(const char *s) {
    const char *t = NULL;
    for (const char *q = strstr(s, ".tmp."); q; q = strstr(q + 1, ".tmp.")) t = q;
    if (!t || t == s || !t[5]) return 0;
    for (t += 5; *t; t++)
        if (*t < '0' || *t > '9') return 0;
    return 1;
}

/* Removes the temp files that killed runs left in dir (and, with depth 1, in its
 * subdirectories). Only called with the lock held: no other run is writing them. */
static int sweep_dir(const char *dir, int depth, int *removed, al_error *err) {
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0
                               : al__err(err, AL_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    char path[4400];
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0) rc = sweep_dir(path, depth - 1, removed, err);
        } else if (S_ISREG(st.st_mode) && is_temp_name(e->d_name)) {
            if (unlink(path) != 0 && errno != ENOENT)
                rc = al__err(err, AL_E_IO,
                             "%s: cannot remove this temp file of an interrupted "
                             "run: %s",
                             path, strerror(errno));
            else
                (*removed)++;
        }
    }
    closedir(d);
    return rc;
}

/* OUT/partial/run.json: the options that change every saved job's numbers (the grids are per
 * job, in each job's key). --resume refuses a directory saved with others. */
static cJSON *run_options(const plan *p, const al_model_info *mi, const char *corpus_sha) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "fingerprint", p->fingerprint);
    cJSON_AddStringToObject(r, "attnlim", al_version());
    cJSON *mo = cJSON_AddObjectToObject(r, "model");
    cJSON_AddStringToObject(mo, "path", mi->path);
    cJSON_AddStringToObject(mo, "sha256", mi->sha256);
    cJSON *co = cJSON_AddObjectToObject(r, "corpus");
    cJSON_AddStringToObject(co, "name", p->o.corpus);
    cJSON_AddStringToObject(co, "sha256", corpus_sha);
    cJSON_AddStringToObject(r, "vectors", al_vectors_name(p->o.vectors));
    if (p->o.normalizer)
        cJSON_AddStringToObject(r, "normalizer", p->o.normalizer);
    else
        cJSON_AddStringToObject(r, "normalizer", "none (the model's own softmax weights)");
    cJSON_AddNumberToObject(r, "seed", (double)p->o.seed);
    cJSON_AddNumberToObject(r, "mc_samples", p->o.mc_samples);
    cJSON_AddItemToObject(r, "temperatures", cJSON_CreateDoubleArray(p->T, p->nT));
    cJSON_AddItemToObject(r, "eps", cJSON_CreateDoubleArray(p->eps, p->nE));
    return r;
}

/* One saved option for the message; sub: an object {path|name, sha256} shown by name and hash. */
static void describe(const cJSON *v, const char *sub, char *out, size_t size) {
    if (!v) {
        snprintf(out, size, "(not saved)");
    } else if (sub) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "path");
        if (!nm) nm = cJSON_GetObjectItemCaseSensitive(v, "name");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(v, sub);
        snprintf(out, size, "%.160s (%s %.12s...)", cJSON_IsString(nm) ? nm->valuestring : "?", sub,
                 cJSON_IsString(h) ? h->valuestring : "?");
    } else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(out, size, "%.160s", t ? t : "?");
        free(t);
    }
}

/* Appends "name old -> new" to msg when option name differs between saved and now; sub: the
 * member compared in an object. */
static void note_diff(char *msg, size_t size, const cJSON *saved, const cJSON *now,
                      const char *name, const char *sub) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, name);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, name);
    const cJSON *ka = sub ? cJSON_GetObjectItemCaseSensitive(a, sub) : a;
    const cJSON *kb = sub ? cJSON_GetObjectItemCaseSensitive(b, sub) : b;
    if (ka && kb && cJSON_Compare(ka, kb, 1)) return;
    char da[200], db[200];
    describe(a, sub, da, sizeof da);
    describe(b, sub, db, sizeof db);
    size_t k = strlen(msg);
    if (k + 1 < size) snprintf(msg + k, size - k, "%s%s %s -> %s", k ? "; " : "", name, da, db);
}

/* --resume: 0 when OUT/partial/run.json is absent or was saved with the same options; else an
 * error naming every option that differs. Without --resume (or after the check) run.json is
 * written anew. */
static int check_run_options(const plan *p, const cJSON *now, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/partial/run.json", p->o.out_dir);
    if (access(path, F_OK) != 0) return 0;
    char *txt = NULL;
    size_t len;
    al_error e = {0};
    cJSON *saved = NULL;
    if (!al__read_file(path, 1 << 20, &txt, &len, &e)) saved = cJSON_Parse(txt);
    free(txt);
    if (!saved)
        return al__err(err, AL_E_FORMAT,
                       "%s: unreadable, so --resume cannot tell how the saved results were "
                       "computed; run without --resume to recompute them",
                       path);
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(saved, "fingerprint");
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(now, "fingerprint");
    int same = fa && fb && cJSON_Compare(fa, fb, 1);
    char diff[900] = "";
    if (!same) {
        note_diff(diff, sizeof diff, saved, now, "model", "sha256");
        note_diff(diff, sizeof diff, saved, now, "corpus", "sha256");
        static const char *const flat[] = {"vectors",      "normalizer", "seed",   "mc_samples",
                                           "temperatures", "eps",        "attnlim"};
        for (size_t i = 0; i < sizeof flat / sizeof *flat; i++)
            note_diff(diff, sizeof diff, saved, now, flat[i], NULL);
        if (!diff[0]) snprintf(diff, sizeof diff, "the fingerprint of the options");
    }
    cJSON_Delete(saved);
    if (same) return 0;
    return al__err(err, AL_E_INVALID,
                   "--resume: %s/partial holds results computed with other options: %s. Run "
                   "without --resume to recompute them, or use another --out",
                   p->o.out_dir, diff);
}

/* ---- aggregation
 * ------------------------------------------------------------------------------------ */

static job *find_job(const plan *p, int window, int L) {
    for (int i = 0; i < p->n_jobs; i++)
        if (p->jobs[i].window == window && p->jobs[i].L == L) return &p->jobs[i];
    return NULL;
}
static int idx_of(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return i;
    return -1;
}

/* The per-head values a job holds, and one accessor: value f of head h at index k (of the
 * job's Nd for distance fields, its Ns for separability, T x eps or T for Algorithm 5). */
typedef enum { F_DTILDE, F_DMAX, F_E, F_EMC, F_RATIO, F_LOWER, F_UPPER, F_FD, F_SPEC } head_field;
static double job_value(const job *j, head_field f, int h, int k, const plan *p) {
    size_t d = (size_t)h * j->nd + k, s = (size_t)h * j->ns + k;
    switch (f) {
    case F_DTILDE:
        return j->dtilde[d];
    case F_DMAX:
        return j->dmax[d];
    case F_E:
        return j->E[d];
    case F_EMC:
        return j->E_mc[d];
    case F_RATIO:
        return j->ns_ratio[s];
    case F_LOWER:
        return j->ns_lower[s];
    case F_UPPER:
        return j->ns_upper[s];
    case F_FD:
        return j->fd[(size_t)h * p->nT * p->nE + k];
    case F_SPEC:
        return j->spec[(size_t)h * p->nT + k];
    }
    return NAN;
}

/* out[H] = window mean of field f at (L, N) where N indexes the job's Nd (sep: Ns; -1: k given) */
static void head_means(const plan *p, int L, int N, int sep, int kfixed, head_field f,
                       double *out) {
    for (int h = 0; h < p->H; h++) {
        double s = 0;
        int c = 0;
        for (int w = 0; w < p->o.windows; w++) {
            const job *j = find_job(p, w, L);
            if (!j) continue;
            int k = kfixed >= 0 ? kfixed : sep ? idx_of(j->Ns, j->ns, N) : idx_of(j->Nd, j->nd, N);
            if (k < 0) continue;
            double v = job_value(j, f, h, k, p);
            if (isfinite(v)) {
                s += v;
                c++;
            }
        }
        out[h] = c ? s / c : NAN;
    }
}

static al_five five_of(const double *x, int n) {
    double *f = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    al_five r = {NAN, NAN, NAN, NAN, NAN, NAN};
    if (!f) return r;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) f[k++] = x[i];
    if (k > 0 && al_five_number(f, (size_t)k, &r, NULL) != 0)
        r = (al_five){NAN, NAN, NAN, NAN, NAN, NAN};
    free(f);
    return r;
}

/* Everything aggregated, kept for the writers. */
typedef struct agg {
    double *a1[3];            /* [nL, H] dtilde, dmax, E at N = 5 */
    double *a1_mc;            /* [nL, H] */
    double *a2[4];            /* [nN2, H] dtilde, dmax, E, E_mc */
    double *a3_dt, *a3_E;     /* [nL, nN3, H] NaN where N >= L */
    double *a3_win_crit;      /* [windows, 2, nL] per-window critical N (-1 not reached) */
    double *a4[3];            /* [nN4, H] ratio, lower, upper */
    double *fd;               /* [H, nT, nE] */
    double *spec;             /* [H, nT] */
    double *vmax, *vent, *vD; /* [H, vL] window means */
    double *win_a1;           /* [windows, nL] mean over heads of dtilde at N = 5 */
    double *win_a2;           /* [windows, nN2] mean over heads of dtilde */
    al__summary s;
} agg;

static void free_agg(agg *a) {
    cJSON_Delete(a->s.model_json);
    for (int i = 0; i < 3; i++) free(a->a1[i]);
    free(a->a1_mc);
    for (int i = 0; i < 4; i++) free(a->a2[i]);
    free(a->a3_dt);
    free(a->a3_E);
    free(a->a3_win_crit);
    for (int i = 0; i < 3; i++) free(a->a4[i]);
    free(a->fd);
    free(a->spec);
    free(a->vmax);
    free(a->vent);
    free(a->vD);
    free(a->win_a1);
    free(a->win_a2);
    al__summary *s = &a->s;
    free(s->a1_dtilde);
    free(s->a1_E);
    free(s->a1_dmax);
    free(s->a2_dtilde);
    free(s->a2_E);
    free(s->a2_dmax);
    free(s->a3_p);
    free(s->a3_dt_mean);
    free(s->a3_E_mean);
    free(s->a3_crit[0]);
    free(s->a3_crit[1]);
    free(s->a4_ratio);
    free(s->a4_lower);
    free(s->a4_upper);
    free(s->g);
    free(s->spec);
    free(s->v_n);
    free(s->v_max_med);
    free(s->v_max_q1);
    free(s->v_max_q3);
    free(s->v_ent_med);
    free(s->v_ent_q1);
    free(s->v_ent_q3);
    free(s->v_band_lo);
    free(s->v_band_hi);
    for (int i = 0; i < s->n_heatmaps; i++) free(s->hm[i]);
}

static double mean_finite(const double *x, int n) {
    double s = 0;
    int c = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) {
            s += x[i];
            c++;
        }
    return c ? s / c : NAN;
}

/* KS over heads for one L (window-averaged head means or one window's). crit[2]. */
static int critical_for(const plan *p, int li, const double *dt, const double *E, double *pvals,
                        int crit[2], al_error *err) {
    int L = p->Ls[li], n = 0;
    while (n < p->nN3 && p->N3[n] < L) n++;
    crit[0] = crit[1] = -1;
    if (n == 0) return 0;
    /* heads with a non-finite value (no rows) are left out of both samples */
    double *a = malloc(sizeof(double) * (size_t)n * p->H),
           *b = malloc(sizeof(double) * (size_t)n * p->H);
    if (!a || !b) {
        free(a);
        free(b);
        return al__err(err, AL_E_NOMEM, "out of memory in Algorithm 3");
    }
    int hk = 0;
    for (int h = 0; h < p->H; h++) {
        int ok = 1;
        for (int i = 0; i < n; i++)
            ok &= isfinite(dt[(size_t)i * p->H + h]) && isfinite(E[(size_t)i * p->H + h]);
        if (!ok) continue;
        hk++;
    }
    int rc = 0;
    if (hk == 0) {
        for (int i = 0; i < n; i++) pvals[i] = NAN;
    } else {
        for (int i = 0; i < n; i++) {
            int c = 0;
            for (int h = 0; h < p->H; h++) {
                int ok = 1;
                for (int q = 0; q < n; q++)
                    ok &= isfinite(dt[(size_t)q * p->H + h]) && isfinite(E[(size_t)q * p->H + h]);
                if (!ok) continue;
                a[(size_t)i * hk + c] = dt[(size_t)i * p->H + h];
                b[(size_t)i * hk + c] = E[(size_t)i * p->H + h];
                c++;
            }
        }
        static const double levels[2] = {0.01, 0.05};
        for (int l = 0; l < 2 && !rc; l++)
            rc = al_critical_n(p->N3, n, a, b, hk, levels[l], pvals, &crit[l], err);
    }
    free(a);
    free(b);
    return rc;
}

static int aggregate(plan *p, agg *a, al_error *err) {
    int H = p->H, nL = p->nL, W = p->o.windows;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
#define ALLOC(ptr, count)                                                                          \
    do {                                                                                           \
        if (!((ptr) = alloc_nan((size_t)(count), err))) return AL_E_NOMEM;                         \
    } while (0)
    /* Algorithm 1 */
    if (p->exp & AL_EXP_ALG1) {
        for (int i = 0; i < 3; i++) ALLOC(a->a1[i], nL * nh);
        ALLOC(a->a1_mc, nL * nh);
        ALLOC(a->win_a1, (size_t)W * nL);
        if (!(s->a1_dtilde = alloc_five(nL, err))) return AL_E_NOMEM;
        if (!(s->a1_E = alloc_five(nL, err))) return AL_E_NOMEM;
        if (!(s->a1_dmax = alloc_five(nL, err))) return AL_E_NOMEM;
        for (int li = 0; li < nL; li++) {
            int L = p->Ls[li];
            head_means(p, L, ALG1_N, 0, -1, F_DTILDE, a->a1[0] + li * nh);
            head_means(p, L, ALG1_N, 0, -1, F_DMAX, a->a1[1] + li * nh);
            head_means(p, L, ALG1_N, 0, -1, F_E, a->a1[2] + li * nh);
            head_means(p, L, ALG1_N, 0, -1, F_EMC, a->a1_mc + li * nh);
            s->a1_dtilde[li] = five_of(a->a1[0] + li * nh, H);
            s->a1_dmax[li] = five_of(a->a1[1] + li * nh, H);
            s->a1_E[li] = five_of(a->a1[2] + li * nh, H);
            for (int w = 0; w < W; w++) {
                const job *j = find_job(p, w, L);
                int k = j ? idx_of(j->Nd, j->nd, ALG1_N) : -1;
                if (k < 0) continue;
                double sum = 0;
                int c = 0;
                for (int h = 0; h < H; h++)
                    if (isfinite(j->dtilde[(size_t)h * j->nd + k]))
                        sum += j->dtilde[(size_t)h * j->nd + k], c++;
                a->win_a1[(size_t)w * nL + li] = c ? sum / c : NAN;
            }
        }
    }
    /* Algorithm 2 */
    if (p->exp & AL_EXP_ALG2) {
        for (int i = 0; i < 4; i++) ALLOC(a->a2[i], p->nN2 * nh);
        ALLOC(a->win_a2, (size_t)W * p->nN2);
        if (!(s->a2_dtilde = alloc_five(p->nN2, err))) return AL_E_NOMEM;
        if (!(s->a2_E = alloc_five(p->nN2, err))) return AL_E_NOMEM;
        if (!(s->a2_dmax = alloc_five(p->nN2, err))) return AL_E_NOMEM;
        for (int i = 0; i < p->nN2; i++) {
            int N = p->N2[i];
            head_means(p, p->long_L, N, 0, -1, F_DTILDE, a->a2[0] + i * nh);
            head_means(p, p->long_L, N, 0, -1, F_DMAX, a->a2[1] + i * nh);
            head_means(p, p->long_L, N, 0, -1, F_E, a->a2[2] + i * nh);
            head_means(p, p->long_L, N, 0, -1, F_EMC, a->a2[3] + i * nh);
            s->a2_dtilde[i] = five_of(a->a2[0] + i * nh, H);
            s->a2_dmax[i] = five_of(a->a2[1] + i * nh, H);
            s->a2_E[i] = five_of(a->a2[2] + i * nh, H);
            for (int w = 0; w < W; w++) {
                const job *j = find_job(p, w, p->long_L);
                int k = j ? idx_of(j->Nd, j->nd, N) : -1;
                if (k < 0) continue;
                double sum = 0;
                int c = 0;
                for (int h = 0; h < H; h++)
                    if (isfinite(j->dtilde[(size_t)h * j->nd + k]))
                        sum += j->dtilde[(size_t)h * j->nd + k], c++;
                a->win_a2[(size_t)w * p->nN2 + i] = c ? sum / c : NAN;
            }
        }
    }
    /* Algorithm 3 */
    if (p->exp & AL_EXP_ALG3) {
        size_t n3 = (size_t)p->nN3;
        ALLOC(a->a3_dt, nL * n3 * nh);
        ALLOC(a->a3_E, nL * n3 * nh);
        ALLOC(s->a3_p, nL * n3);
        ALLOC(s->a3_dt_mean, nL * n3);
        ALLOC(s->a3_E_mean, nL * n3);
        ALLOC(a->a3_win_crit, (size_t)W * 2 * nL);
        for (int l = 0; l < 2; l++)
            if (!(s->a3_crit[l] = al__malloc(sizeof(int) * (size_t)nL, "critical N", err)))
                return AL_E_NOMEM;
        double *wdt = alloc_nan(n3 * nh, err), *wE = alloc_nan(n3 * nh, err),
               *pv = alloc_nan(n3, err);
        if (!wdt || !wE || !pv) {
            free(wdt);
            free(wE);
            free(pv);
            return AL_E_NOMEM;
        }
        int rc = 0;
        for (int li = 0; li < nL && !rc; li++) {
            int L = p->Ls[li];
            double *dt = a->a3_dt + li * n3 * nh, *E = a->a3_E + li * n3 * nh;
            for (size_t i = 0; i < n3; i++) {
                if (p->N3[i] >= L) continue;
                head_means(p, L, p->N3[i], 0, -1, F_DTILDE, dt + i * nh);
                head_means(p, L, p->N3[i], 0, -1, F_E, E + i * nh);
                s->a3_dt_mean[li * n3 + i] = mean_finite(dt + i * nh, H);
                s->a3_E_mean[li * n3 + i] = mean_finite(E + i * nh, H);
            }
            int crit[2];
            rc = critical_for(p, li, dt, E, s->a3_p + li * n3, crit, err);
            s->a3_crit[0][li] = crit[0];
            s->a3_crit[1][li] = crit[1];
            for (int w = 0; w < W && !rc && W > 1; w++) {
                const job *j = find_job(p, w, L);
                if (!j) continue;
                for (size_t i = 0; i < n3; i++) {
                    int k = idx_of(j->Nd, j->nd, p->N3[i]);
                    for (int h = 0; h < H; h++) {
                        wdt[i * nh + h] = k >= 0 ? j->dtilde[(size_t)h * j->nd + k] : NAN;
                        wE[i * nh + h] = k >= 0 ? j->E[(size_t)h * j->nd + k] : NAN;
                    }
                }
                rc = critical_for(p, li, wdt, wE, pv, crit, err);
                a->a3_win_crit[((size_t)w * 2 + 0) * nL + li] = crit[0];
                a->a3_win_crit[((size_t)w * 2 + 1) * nL + li] = crit[1];
            }
        }
        free(wdt);
        free(wE);
        free(pv);
        if (rc) return rc;
        for (int l = 0; l < 2; l++) {
            double x[64], y[64];
            int k = 0;
            for (int li = 0; li < nL && k < 64; li++)
                if (s->a3_crit[l][li] > 0) {
                    x[k] = p->Ls[li];
                    y[k] = s->a3_crit[l][li];
                    k++;
                }
            s->a3_slope[l] = k ? al_slope_origin(x, y, (size_t)k) : NAN;
        }
    }
    /* Algorithm 4 */
    if (p->exp & AL_EXP_ALG4) {
        for (int i = 0; i < 3; i++) ALLOC(a->a4[i], p->nN4 * nh);
        if (!(s->a4_ratio = alloc_five(p->nN4, err))) return AL_E_NOMEM;
        if (!(s->a4_lower = alloc_five(p->nN4, err))) return AL_E_NOMEM;
        if (!(s->a4_upper = alloc_five(p->nN4, err))) return AL_E_NOMEM;
        for (int i = 0; i < p->nN4; i++) {
            head_means(p, p->long_L, p->N4[i], 1, -1, F_RATIO, a->a4[0] + i * nh);
            head_means(p, p->long_L, p->N4[i], 1, -1, F_LOWER, a->a4[1] + i * nh);
            head_means(p, p->long_L, p->N4[i], 1, -1, F_UPPER, a->a4[2] + i * nh);
            s->a4_ratio[i] = five_of(a->a4[0] + i * nh, H);
            s->a4_lower[i] = five_of(a->a4[1] + i * nh, H);
            s->a4_upper[i] = five_of(a->a4[2] + i * nh, H);
        }
    }
    /* Algorithm 5 */
    if (p->exp & AL_EXP_ALG5) {
        size_t nte = (size_t)p->nT * p->nE;
        ALLOC(a->fd, nh * nte);
        ALLOC(a->spec, nh * p->nT);
        ALLOC(s->g, nte);
        ALLOC(s->spec, p->nT);
        double *tmp = alloc_nan(nh, err);
        if (!tmp) return AL_E_NOMEM;
        for (size_t k = 0; k < nte; k++) {
            head_means(p, p->long_L, 0, 0, (int)k, F_FD, tmp);
            double mx = -INFINITY;
            for (int h = 0; h < H; h++) {
                a->fd[h * nte + k] = tmp[h];
                if (tmp[h] > mx) mx = tmp[h];
            }
            s->g[k] = isfinite(mx) ? mx : NAN;
        }
        for (int t = 0; t < p->nT; t++) {
            head_means(p, p->long_L, 0, 0, t, F_SPEC, tmp);
            double mx = -INFINITY;
            for (int h = 0; h < H; h++) {
                a->spec[(size_t)h * p->nT + t] = tmp[h];
                if (tmp[h] > mx) mx = tmp[h];
            }
            s->spec[t] = isfinite(mx) ? mx : NAN;
        }
        free(tmp);
        s->n_flagged = 0;
        for (int t = 0; t < p->nT; t++) {
            double b = 1.0 / (4 * p->T[t]);
            for (int e = 0; e < p->nE; e++) s->n_flagged += s->g[(size_t)t * p->nE + e] > b;
            s->n_flagged += s->spec[t] > b;
        }
    }
    /* vanishing */
    if (p->exp & AL_EXP_VANISHING) {
        int L = p->long_L;
        size_t nv = nh * L;
        ALLOC(a->vmax, nv);
        ALLOC(a->vent, nv);
        ALLOC(a->vD, nv);
        long inside = 0, total = 0;
        for (size_t q = 0; q < nv; q++) {
            double sm = 0, se = 0, sd = 0;
            int c = 0;
            for (int w = 0; w < W; w++) {
                const job *j = find_job(p, w, L);
                if (!j || !j->want_van) continue;
                sm += j->vmax[q];
                se += j->vent[q];
                sd += j->vD[q];
                c++;
                int t = (int)(q % L);
                double n = p->causal ? t + 1 : L;
                double lo = exp(-2 * j->vD[q]) / n, hi = exp(2 * j->vD[q]) / n;
                inside += j->vmax[q] >= lo * (1 - 1e-9) && j->vmax[q] <= hi * (1 + 1e-9);
                total++;
            }
            a->vmax[q] = c ? sm / c : NAN;
            a->vent[q] = c ? se / c : NAN;
            a->vD[q] = c ? sd / c : NAN;
        }
        s->v_inside = total ? (double)inside / total : NAN;
        s->band_applies = !p->have_nm || p->nm.kind == AL_NORM_SOFTMAX;
        s->vL = L;
        ALLOC(s->v_n, L);
        ALLOC(s->v_max_med, L);
        ALLOC(s->v_max_q1, L);
        ALLOC(s->v_max_q3, L);
        ALLOC(s->v_ent_med, L);
        ALLOC(s->v_ent_q1, L);
        ALLOC(s->v_ent_q3, L);
        ALLOC(s->v_band_lo, L);
        ALLOC(s->v_band_hi, L);
        double *col = alloc_nan(nh, err), *col2 = alloc_nan(nh, err), *col3 = alloc_nan(nh, err);
        if (!col || !col2 || !col3) {
            free(col);
            free(col2);
            free(col3);
            return AL_E_NOMEM;
        }
        for (int t = 0; t < L; t++) {
            double n = p->causal ? t + 1 : L;
            s->v_n[t] = n;
            for (int h = 0; h < H; h++) {
                col[h] = a->vmax[(size_t)h * L + t];
                col2[h] = n >= 2 ? a->vent[(size_t)h * L + t] / log(n) : NAN;
                col3[h] = a->vD[(size_t)h * L + t];
            }
            al_five f = five_of(col, H), g = five_of(col2, H), d = five_of(col3, H);
            s->v_max_med[t] = f.median;
            s->v_max_q1[t] = f.q1;
            s->v_max_q3[t] = f.q3;
            s->v_ent_med[t] = g.median;
            s->v_ent_q1[t] = g.q1;
            s->v_ent_q3[t] = g.q3;
            s->v_band_lo[t] = exp(-2 * d.median) / n;
            s->v_band_hi[t] = exp(2 * d.median) / n;
        }
        free(col);
        free(col2);
        free(col3);
    }
#undef ALLOC
    return 0;
}

/* ---- heatmaps (layer x head) of the headline statistics
 * ------------------------------------------- */

static int nearest_d(const double *v, int n, double x) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (fabs(log(v[i] / x)) < fabs(log(v[b] / x))) b = i;
    return b;
}
static int nearest_i(const int *v, int n, int x) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (abs(v[i] - x) < abs(v[b] - x)) b = i;
    return b;
}

static int add_heatmap(al__summary *s, const char *name, const char *title, const char *label,
                       const double *v, int H, al_error *err) {
    if (s->n_heatmaps >= 8) return 0;
    double *c = al__malloc(sizeof(double) * (size_t)H, "heatmap", err);
    if (!c) return AL_E_NOMEM;
    memcpy(c, v, sizeof(double) * (size_t)H);
    s->hm_name[s->n_heatmaps] = name;
    s->hm_title[s->n_heatmaps] = title;
    s->hm_label[s->n_heatmaps] = label;
    s->hm[s->n_heatmaps++] = c;
    return 0;
}

static int build_heatmaps(const plan *p, agg *a, char titles[6][160], al_error *err) {
    al__summary *s = &a->s;
    int H = p->H, rc = 0;
    double *tmp = alloc_nan((size_t)H, err);
    if (!tmp) return AL_E_NOMEM;
    if ((p->exp & AL_EXP_ALG1) && p->nL > 0) {
        int li = p->nL - 1;
        snprintf(titles[0], 160, "dtilde per head (N = %d, L = %d)", ALG1_N, p->Ls[li]);
        rc = add_heatmap(s, "heatmap_dtilde", titles[0], "dtilde", a->a1[0] + (size_t)li * H, H,
                         err);
        snprintf(titles[1], 160, "E (random selection) per head (N = %d, L = %d)", ALG1_N,
                 p->Ls[li]);
        if (!rc)
            rc = add_heatmap(s, "heatmap_E", titles[1], "E", a->a1[2] + (size_t)li * H, H, err);
    }
    if (!rc && (p->exp & AL_EXP_ALG4) && p->nN4 > 0) {
        int k = nearest_i(p->N4, p->nN4, 16);
        snprintf(titles[2], 160, "N_s/N per head (N = %d, L = %d)", p->N4[k], p->long_L);
        rc = add_heatmap(s, "heatmap_ns_ratio", titles[2], "N_s / N", a->a4[0] + (size_t)k * H, H,
                         err);
    }
    if (!rc && (p->exp & AL_EXP_ALG5)) {
        int t = nearest_d(p->T, p->nT, 1.0);
        for (int h = 0; h < H; h++) tmp[h] = a->spec[(size_t)h * p->nT + t];
        snprintf(titles[3], 160, "mean exact Jacobian spectral norm per head (T = %.3g)", p->T[t]);
        rc = add_heatmap(s, "heatmap_spectral", titles[3], "spectral norm", tmp, H, err);
    }
    if (!rc && (p->exp & AL_EXP_VANISHING)) {
        int L = p->long_L;
        for (int h = 0; h < H; h++) tmp[h] = mean_finite(a->vmax + (size_t)h * L, L);
        snprintf(titles[4], 160, "mean max attention weight per head (L = %d)", L);
        rc = add_heatmap(s, "heatmap_max_weight", titles[4], "max weight", tmp, H, err);
        if (!rc) {
            for (int h = 0; h < H; h++) {
                double sum = 0;
                int c = 0;
                for (int t = 0; t < L; t++) {
                    double n = p->causal ? t + 1 : L;
                    if (n >= 2 && isfinite(a->vent[(size_t)h * L + t]))
                        sum += a->vent[(size_t)h * L + t] / log(n), c++;
                }
                tmp[h] = c ? sum / c : NAN;
            }
            snprintf(titles[5], 160, "mean normalised entropy H / log n per head (L = %d)", L);
            rc = add_heatmap(s, "heatmap_entropy", titles[5], "H / log n", tmp, H, err);
        }
    }
    free(tmp);
    return rc;
}

/* ---- verdicts
 * ------------------------------------------------------------------------------------- */

static double loglog_slope(const double *x, const double *y, int n, int *used) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!(x[i] > 0) || !(y[i] > 0) || !isfinite(y[i])) continue;
        double a = log(x[i]), b = log(y[i]);
        sx += a;
        sy += b;
        sxx += a * a;
        sxy += a * b;
        k++;
    }
    *used = k;
    if (k < 2) return NAN;
    double d = k * sxx - sx * sx;
    return d > 0 ? (k * sxy - sx * sy) / d : NAN;
}

static const char *const V_HOLDS = "holds", *const V_NOT = "does not hold",
                         *const V_NT = "not testable on this model";

static void verdicts(const plan *p, agg *a) {
    al__summary *s = &a->s;
    char rnd[256] = "";
    if (s->synthetic)
        snprintf(
            rnd, sizeof rnd,
            "Random weights (synthetic checkpoint): this says nothing about a trained model. ");
    else if (strcmp(s->family, "gpt2") != 0 || s->n_layer != 12 || s->n_head != 12)
        snprintf(rnd, sizeof rnd,
                 "Measured on %s (%s family, %d x %d heads), not the paper's GPT-2 124M. ",
                 s->model_name, s->family, s->n_layer, s->n_head);
    int nv = 0;
    al__verdict *v;
    /* 1. critical N ~ 0.06 L */
    v = &s->verdicts[nv++];
    v->key = "critical_n";
    v->claim = "critical N grows linearly with L: N_crit ~ 0.06 L (KS at 0.01)";
    v->reading = "dtilde is a sum over the non-selected tokens and x_j are the value vectors "
                 "(METHOD 1, 3 [reading])";
    if (!(p->exp & AL_EXP_ALG3)) {
        v->verdict = V_NT;
        snprintf(v->measured, sizeof v->measured, "not run");
        snprintf(v->why, sizeof v->why, "%sAlgorithm 3 was not run.", rnd);
    } else {
        int reached = 0;
        char list[400] = "";
        size_t k = 0;
        for (int li = 0; li < p->nL; li++) {
            reached += s->a3_crit[0][li] > 0;
            char num[48];
            int top = 0; /* the largest N of the grid below L */
            for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++) top = p->N3[i];
            if (s->a3_crit[0][li] > 0)
                snprintf(num, sizeof num, "%d", s->a3_crit[0][li]);
            else
                snprintf(num, sizeof num, "not reached for N <= %d", top);
            k += (size_t)snprintf(list + k, sizeof list - k, "%sL=%d: %s", li ? ", " : "",
                                  p->Ls[li], num);
            if (k >= sizeof list) k = sizeof list - 1;
        }
        snprintf(v->measured, sizeof v->measured,
                 "c = %.4g at 0.01 (c = %.4g at 0.05); critical N: %s", s->a3_slope[0],
                 s->a3_slope[1], list);
        if (p->H < 8) {
            v->verdict = V_NT;
            snprintf(v->why, sizeof v->why,
                     "%sOnly %d heads: a two-sample KS test over heads has almost no power.", rnd,
                     p->H);
        } else if (reached < 2) {
            v->verdict = V_NT;
            snprintf(
                v->why, sizeof v->why,
                "%sThe KS test reached p >= 0.01 for %d of %d lengths; a slope needs at least two.",
                rnd, reached, p->nL);
        } else if (s->a3_slope[0] >= 0.03 && s->a3_slope[0] <= 0.12) {
            v->verdict = V_HOLDS;
            snprintf(v->why, sizeof v->why,
                     "%sThe fitted c = %.3g lies within a factor 2 of the paper's 0.06 (our test: "
                     "0.03 <= c <= 0.12).",
                     rnd, s->a3_slope[0]);
        } else {
            v->verdict = V_NOT;
            snprintf(v->why, sizeof v->why,
                     "%sThe fitted c = %.3g is outside a factor 2 of the paper's 0.06 (our test: "
                     "0.03 <= c <= 0.12).",
                     rnd, s->a3_slope[0]);
        }
    }
    /* 2. separability */
    v = &s->verdicts[nv++];
    v->key = "separability";
    v->claim = "N_s/N falls until N ~ 16, then stays in 0.70-0.85";
    v->reading = "the bounds on N_s/N (delta, xi_i) are reconstructed (METHOD 5 [reading]); "
                 "vectors on the unit sphere";
    if (!(p->exp & AL_EXP_ALG4) || p->nN4 < 2) {
        v->verdict = V_NT;
        snprintf(v->measured, sizeof v->measured, "not run");
        snprintf(v->why, sizeof v->why,
                 "%sAlgorithm 4 was not run (or its grid has fewer than 2 values of N).", rnd);
    } else {
        char list[400] = "";
        size_t k = 0;
        for (int i = 0; i < p->nN4; i++) {
            k += (size_t)snprintf(list + k, sizeof list - k, "%sN=%d: %.3f", i ? ", " : "",
                                  p->N4[i], s->a4_ratio[i].median);
            if (k >= sizeof list) k = sizeof list - 1;
        }
        snprintf(v->measured, sizeof v->measured, "median over heads: %s", list);
        int i16 = idx_of(p->N4, p->nN4, 16);
        if (i16 < 0 || p->N4[0] > 1 || i16 == p->nN4 - 1) {
            v->verdict = V_NT;
            snprintf(v->why, sizeof v->why,
                     "%sThe grid needs N = 1, N = 16 and some N > 16 (L = %d allows N < %d).", rnd,
                     p->long_L, p->long_L);
        } else {
            int falls = s->a4_ratio[i16].median < s->a4_ratio[0].median;
            int in_band = 1;
            double lo = 1, hi = 0;
            for (int i = i16; i < p->nN4; i++) {
                double m = s->a4_ratio[i].median;
                if (m < lo) lo = m;
                if (m > hi) hi = m;
                in_band &= m >= 0.65 && m <= 0.90;
            }
            v->verdict = falls && in_band ? V_HOLDS : V_NOT;
            snprintf(v->why, sizeof v->why,
                     "%sMedian at N=16 %s the median at N=1 (%.3f vs %.3f); for N >= 16 the "
                     "medians span %.3f-%.3f "
                     "(our test: within 0.65-0.90, the paper's 0.70-0.85 widened by 0.05).",
                     rnd, falls ? "is below" : "is not below", s->a4_ratio[i16].median,
                     s->a4_ratio[0].median, lo, hi);
        }
    }
    /* 3. sensitivity */
    v = &s->verdicts[nv++];
    v->key = "sensitivity";
    v->claim = "g(T) ~ 1/T below T = 0.1, and ~100x lower at T >= 1";
    v->reading = "g is the max over heads of the per-head mean (METHOD 6); 1/(4T) is the paper's "
                 "bound, 1/(2T) the supremum";
    if (!(p->exp & AL_EXP_ALG5) || p->nT < 3) {
        v->verdict = V_NT;
        snprintf(v->measured, sizeof v->measured, "not run");
        snprintf(v->why, sizeof v->why, "%sAlgorithm 5 was not run (or fewer than 3 temperatures).",
                 rnd);
    } else {
        int e0 = 0; /* the smallest eps: closest to the derivative */
        for (int e = 1; e < p->nE; e++)
            if (p->eps[e] < p->eps[e0]) e0 = e;
        double xs[64], ys[64];
        int k = 0;
        for (int t = 0; t < p->nT && k < 64; t++)
            if (p->T[t] < 0.1 + 1e-12) xs[k] = p->T[t], ys[k] = s->g[(size_t)t * p->nE + e0], k++;
        int used;
        double slope = loglog_slope(xs, ys, k, &used);
        int ia = nearest_d(p->T, p->nT, 0.01), ib = nearest_d(p->T, p->nT, 1.0);
        double drop = s->g[(size_t)ia * p->nE + e0] / s->g[(size_t)ib * p->nE + e0];
        snprintf(v->measured, sizeof v->measured,
                 "log-log slope of g below T = 0.1: %.3f (eps = %g, %d points); "
                 "g(T=%.3g)/g(T=%.3g) = %.3g; %d values above 1/(4T)",
                 slope, p->eps[e0], used, p->T[ia], p->T[ib], drop, s->n_flagged);
        if (used < 2 || !(p->T[ib] > p->T[ia])) {
            v->verdict = V_NT;
            snprintf(v->why, sizeof v->why,
                     "%sThe temperature grid has too few points below 0.1 or none near 1.", rnd);
        } else {
            int ok1 = slope >= -1.25 && slope <= -0.75, ok2 = drop >= 30 && drop <= 300;
            v->verdict = ok1 && ok2 ? V_HOLDS : V_NOT;
            snprintf(v->why, sizeof v->why,
                     "%sSlope %s -1 within 0.25; the drop from T = %.3g to T = %.3g is %.3g (%s "
                     "30-300, i.e. ~100x).",
                     rnd, ok1 ? "is" : "is not", p->T[ia], p->T[ib], drop,
                     ok2 ? "within" : "outside");
        }
    }
    /* 4. distance linear in L */
    v = &s->verdicts[nv++];
    v->key = "distance_linear";
    v->claim = "at N = 5 the distance grows ~linearly with L";
    v->reading = "dtilde = sum over the non-selected tokens of ||alpha_i x_i - s|| (METHOD 3 "
                 "[reading]); x_j = value vectors by default";
    if (!(p->exp & AL_EXP_ALG1) || p->nL < 3) {
        v->verdict = V_NT;
        snprintf(v->measured, sizeof v->measured, "not run");
        snprintf(v->why, sizeof v->why, "%sAlgorithm 1 needs at least 3 lengths.", rnd);
    } else {
        double xs[64], ys[64];
        int n = p->nL < 64 ? p->nL : 64, used;
        for (int i = 0; i < n; i++) xs[i] = p->Ls[i], ys[i] = s->a1_dtilde[i].mean;
        double slope = loglog_slope(xs, ys, n, &used);
        snprintf(v->measured, sizeof v->measured,
                 "log-log slope of mean dtilde vs L: %.3f (L = %d..%d); dtilde from %.4g to %.4g",
                 slope, p->Ls[0], p->Ls[p->nL - 1], ys[0], ys[n - 1]);
        v->verdict = slope >= 0.75 && slope <= 1.25 ? V_HOLDS : V_NOT;
        snprintf(
            v->why, sizeof v->why,
            "%sLinear growth means a log-log slope near 1 (our test: 0.75-1.25); measured %.3f.",
            rnd, slope);
    }
    /* 5. convergence */
    v = &s->verdicts[nv++];
    v->key = "convergence";
    v->claim = "dtilde and E converge as N grows";
    v->reading = "E is the analytic main term, a Jensen lower bound of the exact expectation "
                 "(METHOD 3 [reading])";
    if (!(p->exp & AL_EXP_ALG2) || p->nN2 < 2) {
        v->verdict = V_NT;
        snprintf(v->measured, sizeof v->measured, "not run");
        snprintf(v->why, sizeof v->why, "%sAlgorithm 2 needs at least 2 values of N.", rnd);
    } else {
        double g0 = fabs(s->a2_dtilde[0].mean - s->a2_E[0].mean) / s->a2_E[0].mean;
        int l = p->nN2 - 1;
        double g1 = fabs(s->a2_dtilde[l].mean - s->a2_E[l].mean) / s->a2_E[l].mean;
        snprintf(v->measured, sizeof v->measured,
                 "|mean dtilde - mean E| / mean E: %.3g at N = %d, %.3g at N = %d (L = %d)", g0,
                 p->N2[0], g1, p->N2[l], p->long_L);
        v->verdict = g1 < 0.5 * g0 ? V_HOLDS : V_NOT;
        snprintf(v->why, sizeof v->why,
                 "%sOur test: the relative gap at the largest N is below half the gap at the "
                 "smallest N (%.3g vs %.3g).",
                 rnd, g1, g0);
    }
    s->n_verdicts = nv;
}

/* ---- writers: JSON
 * ----------------------------------------------------------------------------------- */

static cJSON *jnum(double v) {
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}
static cJSON *jarr_d(const double *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, jnum(v[i]));
    return a;
}
static cJSON *jarr_i(const int *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}
static cJSON *jcrit(const int *v, size_t n) { /* -1 -> null (not reached) */
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, v[i] > 0 ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
    return a;
}
/* {"mean": [..], "min": [..], "q1", "median", "q3", "max"} over an array of summaries */
static cJSON *jfive(const al_five *f, int n) {
    cJSON *o = cJSON_CreateObject();
    const char *names[6] = {"mean", "min", "q1", "median", "q3", "max"};
    for (int k = 0; k < 6; k++) {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            double v = k == 0   ? f[i].mean
                       : k == 1 ? f[i].min
                       : k == 2 ? f[i].q1
                       : k == 3 ? f[i].median
                       : k == 4 ? f[i].q3
                                : f[i].max;
            cJSON_AddItemToArray(a, jnum(v));
        }
        cJSON_AddItemToObject(o, names[k], a);
    }
    return o;
}
/* [[H] per row] */
static cJSON *jrows(const double *v, int rows, int H) {
    cJSON *a = cJSON_CreateArray();
    for (int r = 0; r < rows; r++) cJSON_AddItemToArray(a, jarr_d(v + (size_t)r * H, (size_t)H));
    return a;
}
/* spread over windows of a per-window value: {"min","median","max","p2_5","p97_5"} per column */
static cJSON *jwin(const double *v, int W, int cols) {
    cJSON *o = cJSON_CreateObject();
    const char *names[5] = {"min", "median", "max", "p2_5", "p97_5"};
    const double pct[5] = {0, 50, 100, 2.5, 97.5};
    double *col = malloc(sizeof(double) * (size_t)W);
    for (int k = 0; k < 5; k++) {
        cJSON *a = cJSON_CreateArray();
        for (int c = 0; c < cols; c++) {
            int n = 0;
            for (int w = 0; w < W && col; w++)
                if (isfinite(v[(size_t)w * cols + c])) col[n++] = v[(size_t)w * cols + c];
            if (n == 0) {
                cJSON_AddItemToArray(a, cJSON_CreateNull());
                continue;
            }
            qsort(col, (size_t)n, sizeof(double), cmp_dbl);
            cJSON_AddItemToArray(a, jnum(al_percentile_sorted(col, (size_t)n, pct[k])));
        }
        cJSON_AddItemToObject(o, names[k], a);
    }
    free(col);
    return o;
}

static void now_iso(char *buf, size_t size) {
    time_t t = time(NULL);
    struct tm tmv;
    gmtime_r(&t, &tmv);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tmv);
}

static int write_json(const plan *p, agg *a, const char *corpus_sha, const char *started,
                      al_error *err) {
    al__summary *s = &a->s;
    int H = p->H;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "attnlim.reproduce/1");
    /* manifest */
    cJSON *man = cJSON_AddObjectToObject(root, "manifest");
    /* the model as every manifest describes it (files, identity, shape, load warnings) */
    cJSON *mo = cJSON_Duplicate(s->model_json, 1);
    if (!mo) {
        cJSON_Delete(root);
        return al__err(err, AL_E_NOMEM, "out of memory (results.json)");
    }
    cJSON_AddItemToObject(man, "model", mo);
    cJSON_AddBoolToObject(mo, "random_weights", s->synthetic);
    cJSON *co = cJSON_AddObjectToObject(man, "corpus");
    cJSON_AddStringToObject(co, "name", s->corpus);
    cJSON_AddStringToObject(co, "sha256", corpus_sha);
    cJSON_AddNumberToObject(co, "n_tokens", (double)s->n_tokens);
    cJSON *wi = cJSON_AddObjectToObject(man, "windows");
    cJSON_AddNumberToObject(wi, "count", p->o.windows);
    cJSON_AddStringToObject(wi, "rule",
                            strcmp(s->family, "dump")
                                ? "window k of length L = tokens [k*L, (k+1)*L) of the tokenized "
                                  "corpus"
                                : "window 0 of length L = the first L tokens of the attention "
                                  "dump (a causal dump serves every prefix)");
    cJSON *op = cJSON_AddObjectToObject(man, "options");
    cJSON_AddStringToObject(op, "vectors", al_vectors_name(p->o.vectors));
    cJSON_AddStringToObject(op, "normalizer", s->normalizer);
    cJSON_AddBoolToObject(op, "weights_sum_to_one", s->sums_to_one);
    cJSON_AddBoolToObject(op, "quick", p->o.quick);
    cJSON_AddNumberToObject(op, "seed", (double)p->o.seed);
    cJSON_AddNumberToObject(op, "mc_samples", p->o.mc_samples);
    cJSON_AddNumberToObject(op, "long_length", p->long_L);
    cJSON_AddItemToObject(op, "lengths", jarr_i(p->Ls, (size_t)p->nL));
    cJSON_AddItemToObject(op, "top_n", jarr_i(p->N2, (size_t)p->nN2));
    cJSON_AddItemToObject(op, "critical_n", jarr_i(p->N3, (size_t)p->nN3));
    cJSON_AddItemToObject(op, "separability_n", jarr_i(p->N4, (size_t)p->nN4));
    cJSON_AddItemToObject(op, "temperatures", jarr_d(p->T, (size_t)p->nT));
    cJSON_AddItemToObject(op, "eps", jarr_d(p->eps, (size_t)p->nE));
    cJSON *ex = cJSON_AddArrayToObject(op, "experiments");
    const char *en[6] = {"vanishing", "alg1", "alg2", "alg3", "alg4", "alg5"};
    for (int i = 0; i < 6; i++)
        if (p->exp & (1u << i)) cJSON_AddItemToArray(ex, cJSON_CreateString(en[i]));
    cJSON_AddNumberToObject(op, "threads", p->o.threads > 0 ? p->o.threads : omp_get_max_threads());
    cJSON *ve = cJSON_AddObjectToObject(man, "versions");
    cJSON_AddStringToObject(ve, "attnlim", al_version());
    cJSON_AddStringToObject(ve, "cjson", cJSON_Version());
    cJSON *ti = cJSON_AddObjectToObject(man, "timings");
    for (int i = 0; i < s->n_timings; i++)
        cJSON_AddNumberToObject(ti, s->timing_name[i], s->timing_s[i]);
    cJSON_AddNumberToObject(ti, "total_s", s->seconds_total);
    cJSON *pc = cJSON_AddArrayToObject(ti, "per_rank_cpu_s"); /* manifest.parallel's ranks */
    for (int r = 0; r < p->size && p->ranks; r++)
        cJSON_AddItemToArray(pc, cJSON_CreateNumber(p->ranks[r].cpu_s));
    cJSON *rs = cJSON_AddObjectToObject(man, "resume");
    cJSON_AddBoolToObject(rs, "requested", p->o.resume);
    cJSON_AddNumberToObject(rs, "jobs", p->n_jobs);
    cJSON_AddNumberToObject(rs, "reused", p->n_reused);
    cJSON_AddNumberToObject(rs, "computed", p->n_recomputed);
    cJSON_AddNumberToObject(rs, "stale", p->n_stale);
    cJSON_AddNumberToObject(rs, "temp_files_removed", p->n_swept);
    cJSON *pa = cJSON_AddObjectToObject(man, "parallel");
    cJSON_AddBoolToObject(pa, "mpi", p->size > 1);
    cJSON_AddNumberToObject(pa, "ranks", p->size);
    cJSON_AddStringToObject(pa, "head_owner",
                            "every rank runs each job's forward; head h (layer * n_head + head) "
                            "is computed by rank h % ranks, with its threads");
    cJSON *pr = cJSON_AddArrayToObject(pa, "per_rank");
    for (int r = 0; r < p->size && p->ranks; r++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddNumberToObject(it, "rank", r);
        cJSON_AddStringToObject(it, "host", p->ranks[r].host);
        cJSON_AddNumberToObject(it, "threads", p->ranks[r].threads);
        cJSON_AddItemToArray(pr, it);
    }
    cJSON_AddStringToObject(man, "started", started);
    char fin[32];
    now_iso(fin, sizeof fin);
    cJSON_AddStringToObject(man, "finished", fin);
    cJSON_AddStringToObject(man, "head_index",
                            "per-head arrays are indexed by layer * n_head + head");
    /* readings */
    cJSON *rd = cJSON_AddObjectToObject(root, "readings");
    cJSON_AddStringToObject(rd, "vectors",
                            "x_j are the head's value vectors by default (METHOD 1 [reading])");
    cJSON_AddStringToObject(
        rd, "dtilde",
        "dtilde = sum over the non-selected tokens of ||alpha_i x_i - s|| (METHOD 3 [reading])");
    cJSON_AddStringToObject(rd, "dmax",
                            "dmax = b d1 + ((n-N) abar - b) m (METHOD 3 [reading]); a bound only "
                            "for non-negative weights");
    cJSON_AddStringToObject(
        rd, "separability_bounds",
        "delta and xi_i of the N_s/N bounds are reconstructed (METHOD 5 [reading])");
    if (!s->sums_to_one)
        cJSON_AddStringToObject(
            rd, "weights",
            "the normalizer's weights do not sum to 1: b = sum of the non-selected weights as "
            "given, and dmax is not a bound where weights are negative");
    /* vanishing */
    if (p->exp & AL_EXP_VANISHING) {
        cJSON *o = cJSON_AddObjectToObject(root, "vanishing");
        cJSON_AddNumberToObject(o, "L", p->long_L);
        cJSON_AddItemToObject(o, "n", jarr_d(s->v_n, (size_t)s->vL));
        cJSON *mw = cJSON_AddObjectToObject(o, "max_weight");
        cJSON_AddItemToObject(mw, "median", jarr_d(s->v_max_med, (size_t)s->vL));
        cJSON_AddItemToObject(mw, "q1", jarr_d(s->v_max_q1, (size_t)s->vL));
        cJSON_AddItemToObject(mw, "q3", jarr_d(s->v_max_q3, (size_t)s->vL));
        cJSON *en2 = cJSON_AddObjectToObject(o, "entropy_over_log_n");
        cJSON_AddItemToObject(en2, "median", jarr_d(s->v_ent_med, (size_t)s->vL));
        cJSON_AddItemToObject(en2, "q1", jarr_d(s->v_ent_q1, (size_t)s->vL));
        cJSON_AddItemToObject(en2, "q3", jarr_d(s->v_ent_q3, (size_t)s->vL));
        cJSON *bd = cJSON_AddObjectToObject(o, "band");
        cJSON_AddBoolToObject(bd, "applies", s->band_applies);
        cJSON_AddStringToObject(bd, "definition",
                                "(1/n) exp(-+2 D / T), T = 1, D = ||q_t|| max_j ||k_j|| / "
                                "sqrt(d_head); median of D over heads");
        cJSON_AddItemToObject(bd, "lo", jarr_d(s->v_band_lo, (size_t)s->vL));
        cJSON_AddItemToObject(bd, "hi", jarr_d(s->v_band_hi, (size_t)s->vL));
        cJSON_AddItemToObject(bd, "inside_fraction", jnum(s->v_inside));
        cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
        for (int i = 0; i < s->n_heatmaps; i++)
            if (!strcmp(s->hm_name[i], "heatmap_max_weight"))
                cJSON_AddItemToObject(ph, "mean_max_weight", jarr_d(s->hm[i], (size_t)H));
            else if (!strcmp(s->hm_name[i], "heatmap_entropy"))
                cJSON_AddItemToObject(ph, "mean_entropy_over_log_n", jarr_d(s->hm[i], (size_t)H));
        cJSON_AddStringToObject(o, "per_row_arrays",
                                "vanishing_max_weight.npy, vanishing_entropy.npy, vanishing_D.npy "
                                "[n_layer, n_head, L]");
    }
    if (p->exp & AL_EXP_ALG1) {
        cJSON *o = cJSON_AddObjectToObject(root, "alg1");
        cJSON_AddNumberToObject(o, "N", ALG1_N);
        cJSON_AddItemToObject(o, "L", jarr_i(p->Ls, (size_t)p->nL));
        cJSON_AddItemToObject(o, "dtilde", jfive(s->a1_dtilde, p->nL));
        cJSON_AddItemToObject(o, "dmax", jfive(s->a1_dmax, p->nL));
        cJSON_AddItemToObject(o, "E", jfive(s->a1_E, p->nL));
        cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
        cJSON_AddItemToObject(ph, "dtilde", jrows(a->a1[0], p->nL, H));
        cJSON_AddItemToObject(ph, "dmax", jrows(a->a1[1], p->nL, H));
        cJSON_AddItemToObject(ph, "E", jrows(a->a1[2], p->nL, H));
        if (p->o.mc_samples > 0) cJSON_AddItemToObject(ph, "E_mc", jrows(a->a1_mc, p->nL, H));
        cJSON_AddItemToObject(o, "window_spread_of_mean_dtilde",
                              jwin(a->win_a1, p->o.windows, p->nL));
    }
    if (p->exp & AL_EXP_ALG2) {
        cJSON *o = cJSON_AddObjectToObject(root, "alg2");
        cJSON_AddNumberToObject(o, "L", p->long_L);
        cJSON_AddItemToObject(o, "N", jarr_i(p->N2, (size_t)p->nN2));
        cJSON_AddItemToObject(o, "dtilde", jfive(s->a2_dtilde, p->nN2));
        cJSON_AddItemToObject(o, "dmax", jfive(s->a2_dmax, p->nN2));
        cJSON_AddItemToObject(o, "E", jfive(s->a2_E, p->nN2));
        cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
        cJSON_AddItemToObject(ph, "dtilde", jrows(a->a2[0], p->nN2, H));
        cJSON_AddItemToObject(ph, "dmax", jrows(a->a2[1], p->nN2, H));
        cJSON_AddItemToObject(ph, "E", jrows(a->a2[2], p->nN2, H));
        if (p->o.mc_samples > 0) cJSON_AddItemToObject(ph, "E_mc", jrows(a->a2[3], p->nN2, H));
        cJSON_AddItemToObject(o, "window_spread_of_mean_dtilde",
                              jwin(a->win_a2, p->o.windows, p->nN2));
    }
    if (p->exp & AL_EXP_ALG3) {
        cJSON *o = cJSON_AddObjectToObject(root, "alg3");
        cJSON_AddItemToObject(o, "L", jarr_i(p->Ls, (size_t)p->nL));
        cJSON_AddItemToObject(o, "N", jarr_i(p->N3, (size_t)p->nN3));
        cJSON_AddItemToObject(o, "pvalues", jrows(s->a3_p, p->nL, p->nN3));
        cJSON_AddItemToObject(o, "mean_dtilde", jrows(s->a3_dt_mean, p->nL, p->nN3));
        cJSON_AddItemToObject(o, "mean_E", jrows(s->a3_E_mean, p->nL, p->nN3));
        cJSON *cn = cJSON_AddObjectToObject(o, "critical_n");
        cJSON_AddItemToObject(cn, "0.01", jcrit(s->a3_crit[0], (size_t)p->nL));
        cJSON_AddItemToObject(cn, "0.05", jcrit(s->a3_crit[1], (size_t)p->nL));
        cJSON *sl = cJSON_AddObjectToObject(o, "slope");
        cJSON_AddItemToObject(sl, "0.01", jnum(s->a3_slope[0]));
        cJSON_AddItemToObject(sl, "0.05", jnum(s->a3_slope[1]));
        cJSON_AddNumberToObject(o, "paper_c", 0.06);
        if (p->o.windows > 1) {
            cJSON *pw = cJSON_AddObjectToObject(o, "critical_n_per_window");
            for (int l = 0; l < 2; l++) {
                cJSON *arr = cJSON_CreateArray();
                for (int w = 0; w < p->o.windows; w++) {
                    int tmp[64];
                    for (int li = 0; li < p->nL && li < 64; li++)
                        tmp[li] = (int)a->a3_win_crit[((size_t)w * 2 + l) * p->nL + li];
                    cJSON_AddItemToArray(arr, jcrit(tmp, (size_t)(p->nL < 64 ? p->nL : 64)));
                }
                cJSON_AddItemToObject(pw, l == 0 ? "0.01" : "0.05", arr);
            }
        }
        cJSON_AddStringToObject(
            o, "per_head_arrays",
            "alg3_dtilde.npy, alg3_E.npy [n_L, n_N, n_layer, n_head] (NaN where N >= L)");
    }
    if (p->exp & AL_EXP_ALG4) {
        cJSON *o = cJSON_AddObjectToObject(root, "alg4");
        cJSON_AddNumberToObject(o, "L", p->long_L);
        cJSON_AddItemToObject(o, "N", jarr_i(p->N4, (size_t)p->nN4));
        cJSON_AddItemToObject(o, "ratio", jfive(s->a4_ratio, p->nN4));
        cJSON_AddItemToObject(o, "lower", jfive(s->a4_lower, p->nN4));
        cJSON_AddItemToObject(o, "upper", jfive(s->a4_upper, p->nN4));
        cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
        cJSON_AddItemToObject(ph, "ratio", jrows(a->a4[0], p->nN4, H));
        cJSON_AddItemToObject(ph, "lower", jrows(a->a4[1], p->nN4, H));
        cJSON_AddItemToObject(ph, "upper", jrows(a->a4[2], p->nN4, H));
    }
    if (p->exp & AL_EXP_ALG5) {
        cJSON *o = cJSON_AddObjectToObject(root, "alg5");
        cJSON_AddNumberToObject(o, "L", p->long_L);
        cJSON_AddItemToObject(o, "T", jarr_d(p->T, (size_t)p->nT));
        cJSON_AddItemToObject(o, "eps", jarr_d(p->eps, (size_t)p->nE));
        cJSON_AddItemToObject(o, "g", jrows(s->g, p->nT, p->nE));
        cJSON_AddItemToObject(o, "spectral", jarr_d(s->spec, (size_t)p->nT));
        cJSON *th = cJSON_AddObjectToObject(o, "theory");
        cJSON *pb = cJSON_CreateArray(), *sb = cJSON_CreateArray();
        for (int t = 0; t < p->nT; t++) {
            double b = 1 / (4 * p->T[t]);
            cJSON_AddItemToArray(pb, jnum(b < sqrt(2.0) ? b : sqrt(2.0)));
            cJSON_AddItemToArray(sb, jnum(1 / (2 * p->T[t])));
        }
        cJSON_AddItemToObject(th, "paper_min_1_over_4T_sqrt2", pb);
        cJSON_AddItemToObject(th, "sup_1_over_2T", sb);
        cJSON *fl = cJSON_AddArrayToObject(o, "above_1_over_4T");
        for (int t = 0; t < p->nT; t++) {
            double b = 1 / (4 * p->T[t]);
            for (int e = 0; e <= p->nE; e++) {
                double v = e < p->nE ? s->g[(size_t)t * p->nE + e] : s->spec[t];
                if (!(v > b)) continue;
                cJSON *it = cJSON_CreateObject();
                cJSON_AddNumberToObject(it, "T", p->T[t]);
                if (e < p->nE)
                    cJSON_AddNumberToObject(it, "eps", p->eps[e]);
                else
                    cJSON_AddStringToObject(it, "eps", "exact");
                cJSON_AddNumberToObject(it, "value", v);
                cJSON_AddNumberToObject(it, "bound_1_over_4T", b);
                cJSON_AddItemToArray(fl, it);
            }
        }
        cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
        cJSON *fdj = cJSON_CreateArray(), *spj = cJSON_CreateArray();
        for (int h = 0; h < H; h++) {
            cJSON_AddItemToArray(fdj, jrows(a->fd + (size_t)h * p->nT * p->nE, p->nT, p->nE));
            cJSON_AddItemToArray(spj, jarr_d(a->spec + (size_t)h * p->nT, (size_t)p->nT));
        }
        cJSON_AddItemToObject(ph, "fd", fdj);
        cJSON_AddItemToObject(ph, "spectral", spj);
    }
    cJSON *vd = cJSON_AddArrayToObject(root, "verdicts");
    for (int i = 0; i < s->n_verdicts; i++) {
        const al__verdict *v = &s->verdicts[i];
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "key", v->key);
        cJSON_AddStringToObject(it, "claim", v->claim);
        cJSON_AddStringToObject(it, "measured", v->measured);
        cJSON_AddStringToObject(it, "verdict", v->verdict);
        cJSON_AddStringToObject(it, "why", v->why);
        if (v->reading) cJSON_AddStringToObject(it, "reading", v->reading);
        cJSON_AddItemToArray(vd, it);
    }
    char *txt = cJSON_PrintBuffered(root, 1 << 20, 1);
    cJSON_Delete(root);
    if (!txt) return al__err(err, AL_E_NOMEM, "out of memory printing results.json");
    char path[4200];
    snprintf(path, sizeof path, "%s/results.json", p->o.out_dir);
    int rc = al__write_file_atomic(path, txt, strlen(txt), err);
    free(txt);
    return rc;
}

/* ---- writers: CSV and NPY
 * ------------------------------------------------------------------------------- */

static void csv_num(al__afile *f, double v, al_error *err) {
    if (isfinite(v))
        al__afile_printf(f, err, ",%.10g", v);
    else
        al__afile_printf(f, err, ",");
}

static int write_csvs(const plan *p, agg *a, al_error *err) {
    char path[4200];
    al__afile f;
    int rc, H = p->H, nh = p->n_head;
    if (p->exp & AL_EXP_ALG1) {
        snprintf(path, sizeof path, "%s/alg1.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,dtilde,dmax,E,E_mc\n");
        for (int li = 0; li < p->nL; li++)
            for (int h = 0; h < H; h++) {
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->Ls[li], ALG1_N);
                for (int k = 0; k < 3; k++) csv_num(&f, a->a1[k][(size_t)li * H + h], err);
                csv_num(&f, a->a1_mc[(size_t)li * H + h], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG2) {
        snprintf(path, sizeof path, "%s/alg2.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,dtilde,dmax,E,E_mc\n");
        for (int i = 0; i < p->nN2; i++)
            for (int h = 0; h < H; h++) {
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->long_L, p->N2[i]);
                for (int k = 0; k < 4; k++) csv_num(&f, a->a2[k][(size_t)i * H + h], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG3) {
        snprintf(path, sizeof path, "%s/alg3.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err,
                         "L,N,pvalue,mean_dtilde,mean_E,critical_n_0.01,critical_n_0.05\n");
        for (int li = 0; li < p->nL; li++)
            for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++) {
                size_t q = (size_t)li * p->nN3 + i;
                al__afile_printf(&f, err, "%d,%d", p->Ls[li], p->N3[i]);
                csv_num(&f, a->s.a3_p[q], err);
                csv_num(&f, a->s.a3_dt_mean[q], err);
                csv_num(&f, a->s.a3_E_mean[q], err);
                al__afile_printf(&f, err, ",%d,%d\n", a->s.a3_crit[0][li], a->s.a3_crit[1][li]);
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
        snprintf(path, sizeof path, "%s/alg3_heads.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,dtilde,E\n");
        for (int li = 0; li < p->nL; li++)
            for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++)
                for (int h = 0; h < H; h++) {
                    size_t q = ((size_t)li * p->nN3 + i) * H + h;
                    al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->Ls[li], p->N3[i]);
                    csv_num(&f, a->a3_dt[q], err);
                    csv_num(&f, a->a3_E[q], err);
                    al__afile_printf(&f, err, "\n");
                }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG4) {
        snprintf(path, sizeof path, "%s/alg4.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,ns_ratio,ns_lower,ns_upper\n");
        for (int i = 0; i < p->nN4; i++)
            for (int h = 0; h < H; h++) {
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->long_L, p->N4[i]);
                for (int k = 0; k < 3; k++) csv_num(&f, a->a4[k][(size_t)i * H + h], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG5) {
        snprintf(path, sizeof path, "%s/alg5.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,T,eps,fd_mean,spectral_mean\n");
        for (int h = 0; h < H; h++)
            for (int t = 0; t < p->nT; t++) {
                for (int e = 0; e < p->nE; e++) {
                    al__afile_printf(&f, err, "%d,%d,%d,%.10g,%.10g", h / nh, h % nh, p->long_L,
                                     p->T[t], p->eps[e]);
                    csv_num(&f, a->fd[((size_t)h * p->nT + t) * p->nE + e], err);
                    al__afile_printf(&f, err, ",\n");
                }
                al__afile_printf(&f, err, "%d,%d,%d,%.10g,exact,", h / nh, h % nh, p->long_L,
                                 p->T[t]);
                csv_num(&f, a->spec[(size_t)h * p->nT + t], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
        snprintf(path, sizeof path, "%s/alg5_g.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "T,eps,g,bound_paper,bound_sup,above_1_over_4T\n");
        for (int t = 0; t < p->nT; t++)
            for (int e = 0; e <= p->nE; e++) {
                double v = e < p->nE ? a->s.g[(size_t)t * p->nE + e] : a->s.spec[t],
                       b = 1 / (4 * p->T[t]);
                if (e < p->nE)
                    al__afile_printf(&f, err, "%.10g,%.10g", p->T[t], p->eps[e]);
                else
                    al__afile_printf(&f, err, "%.10g,exact", p->T[t]);
                csv_num(&f, v, err);
                csv_num(&f, b < sqrt(2.0) ? b : sqrt(2.0), err);
                csv_num(&f, 1 / (2 * p->T[t]), err);
                al__afile_printf(&f, err, ",%d\n", v > b);
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_VANISHING) {
        const al__summary *s = &a->s;
        snprintf(path, sizeof path, "%s/vanishing.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(
            &f, err, "layer,head,L,n,max_weight,entropy,entropy_over_log_n,D,band_lo,band_hi\n");
        int L = p->long_L;
        for (int h = 0; h < H; h++)
            for (int t = 0; t < L; t++) {
                size_t q = (size_t)h * L + t;
                double n = s->v_n[t];
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, L, (int)n);
                csv_num(&f, a->vmax[q], err);
                csv_num(&f, a->vent[q], err);
                csv_num(&f, n >= 2 ? a->vent[q] / log(n) : NAN, err);
                csv_num(&f, a->vD[q], err);
                csv_num(&f, exp(-2 * a->vD[q]) / n, err);
                csv_num(&f, exp(2 * a->vD[q]) / n, err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    return 0;
}

static int npy_out(const plan *p, const char *name, const double *data, int ndim,
                   const int64_t *shape, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.npy", p->o.out_dir, name);
    al_array arr = {.dtype = AL_F64, .ndim = ndim, .data = (void *)data};
    for (int i = 0; i < ndim; i++) arr.shape[i] = shape[i];
    return al_npy_write(path, &arr, err);
}

static int write_npys(const plan *p, agg *a, al_error *err) {
    int rc = 0;
    int64_t Ly = p->n_layer, Hd = p->n_head;
    if (p->exp & AL_EXP_ALG1) {
        int64_t sh[3] = {p->nL, Ly, Hd};
        if ((rc = npy_out(p, "alg1_dtilde", a->a1[0], 3, sh, err)) ||
            (rc = npy_out(p, "alg1_dmax", a->a1[1], 3, sh, err)) ||
            (rc = npy_out(p, "alg1_E", a->a1[2], 3, sh, err)))
            return rc;
    }
    if (p->exp & AL_EXP_ALG2) {
        int64_t sh[3] = {p->nN2, Ly, Hd};
        if ((rc = npy_out(p, "alg2_dtilde", a->a2[0], 3, sh, err)) ||
            (rc = npy_out(p, "alg2_dmax", a->a2[1], 3, sh, err)) ||
            (rc = npy_out(p, "alg2_E", a->a2[2], 3, sh, err)))
            return rc;
    }
    if (p->exp & AL_EXP_ALG3) {
        int64_t sh[4] = {p->nL, p->nN3, Ly, Hd};
        if ((rc = npy_out(p, "alg3_dtilde", a->a3_dt, 4, sh, err)) ||
            (rc = npy_out(p, "alg3_E", a->a3_E, 4, sh, err)))
            return rc;
        int64_t s2[2] = {p->nL, p->nN3};
        if ((rc = npy_out(p, "alg3_pvalues", a->s.a3_p, 2, s2, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG4) {
        int64_t sh[3] = {p->nN4, Ly, Hd};
        if ((rc = npy_out(p, "alg4_ratio", a->a4[0], 3, sh, err)) ||
            (rc = npy_out(p, "alg4_lower", a->a4[1], 3, sh, err)) ||
            (rc = npy_out(p, "alg4_upper", a->a4[2], 3, sh, err)))
            return rc;
    }
    if (p->exp & AL_EXP_ALG5) {
        int64_t sh[4] = {Ly, Hd, p->nT, p->nE}, s2[3] = {Ly, Hd, p->nT};
        if ((rc = npy_out(p, "alg5_fd", a->fd, 4, sh, err)) ||
            (rc = npy_out(p, "alg5_spectral", a->spec, 3, s2, err)))
            return rc;
    }
    if (p->exp & AL_EXP_VANISHING) {
        int64_t sh[3] = {Ly, Hd, p->long_L};
        if ((rc = npy_out(p, "vanishing_max_weight", a->vmax, 3, sh, err)) ||
            (rc = npy_out(p, "vanishing_entropy", a->vent, 3, sh, err)) ||
            (rc = npy_out(p, "vanishing_D", a->vD, 3, sh, err)))
            return rc;
    }
    return 0;
}

/* ---- model and corpus
 * ------------------------------------------------------------------------------- */

/* Random weights? -1 auto: the config.json beside the checkpoint names attnlim's make-model. */
static int detect_synthetic(const al_model_info *mi) {
    if (strstr(mi->name, "random") || strstr(mi->name, "synthetic") ||
        strstr(mi->name, "make-model"))
        return 1;
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s", mi->path);
    struct stat st;
    if (!(stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *txt = NULL;
    size_t len;
    al_error e = {0};
    if (al__read_file(path, 1 << 20, &txt, &len, &e)) return 0;
    int r = strstr(txt, "make-model") || strstr(txt, "make_model") || strstr(txt, "\"random\"") ||
            strstr(txt, "synthetic") || strstr(txt, "random weights");
    free(txt);
    return r;
}

/* Collective: every process's host, threads and CPU seconds so far, onto rank 0 (p->ranks). */
static int gather_ranks(plan *p, al_error *err) {
    rank_info me;
    memset(&me, 0, sizeof me); /* padding included: the bytes go over the wire */
    snprintf(me.host, sizeof me.host, "%s", al__dist_host(p->dist));
    me.cpu_s = process_cpu();
    me.threads = p->o.threads > 0 ? p->o.threads : omp_get_max_threads();
    int rc = 0;
    if (p->rank == 0 && !(p->ranks = al__calloc((size_t)p->size, sizeof(rank_info), "ranks", err)))
        rc = AL_E_NOMEM;
    if ((rc = al__dist_agree(p->dist, rc, err))) return rc;
    return al__dist_agree(p->dist, al__dist_gather(p->dist, &me, sizeof me, p->ranks, err), err);
}

/* ---- attention dumps: a model that brings its own tokens (docs/dumps.md)
 * ------------------------------------------------------------- */

/* For a model with its own token sequence (*n_own > 0 after the call: an attention dump),
 * checks the options against it: no corpus (corpus_given), window 0 only (bad_window: the
 * option asking for more, or NULL), and, when o is given (reproduce), L <= T, or L = T for a
 * bidirectional dump, whose grids then become {T} (one_L holds that grid). label receives the
 * corpus name the outputs show; o->corpus is set to it. */
static int own_tokens_opts(al_model *m, const char *corpus_given, const char *bad_window,
                           al_repro_opts *o, int *one_L, const int32_t **own, int *n_own,
                           char *label, size_t label_size, al_error *err) {
    int known = 0;
    int rc = al__model_own_tokens(m, own, n_own, &known, err);
    if (rc || *n_own == 0) return rc;
    const al_model_info *mi = al_model_get_info(m);
    const int T = *n_own;
    if (corpus_given)
        return al__err(err, AL_E_INVALID,
                       "%s: an attention dump brings its own tokens (the %d it holds attention "
                       "for): no --corpus (%s)",
                       mi->path, T, corpus_given);
    if (bad_window)
        return al__err(err, AL_E_INVALID,
                       "%s: an attention dump holds one window (its %d tokens): %s is not "
                       "possible (window 0 only)",
                       mi->path, T, bad_window);
    if (T < 2)
        return al__err(err, AL_E_INVALID, "%s: the dump holds %d token; the experiments need 2",
                       mi->path, T);
    snprintf(label, label_size, "the dump's %d tokens (%s)", T,
             known ? "token_ids of its manifest" : "no token ids recorded");
    if (!o) return 0;
    for (int i = 0; o->lengths && i < o->n_lengths; i++)
        if (o->lengths[i] > T || (!mi->causal && o->lengths[i] != T))
            return al__err(err, AL_E_INVALID,
                           "--lengths: %d, but %s holds attention over T = %d tokens%s",
                           o->lengths[i], mi->path, T,
                           mi->causal ? " (L <= T: a causal dump serves every prefix)"
                                      : " and is bidirectional (L = T only)");
    if (o->long_length > T || (!mi->causal && o->long_length && o->long_length != T))
        return al__err(err, AL_E_INVALID, "--long-length: %d, but %s holds T = %d tokens%s",
                       o->long_length, mi->path, T,
                       mi->causal ? "" : " and is bidirectional (L = T only)");
    if (!mi->causal) {
        *one_L = T;
        if (!o->lengths) o->lengths = one_L, o->n_lengths = 1;
        o->long_length = T;
    }
    o->corpus = label;
    return 0;
}

static int no_observer(void *user, const al_capture *cap, al_error *err) {
    (void)user, (void)cap, (void)err;
    return 0;
}

/* Before anything is written: can the model serve every job's request (a dump: does it hold
 * the layers, heads and arrays each experiment reads)? */
static int own_tokens_preflight(const plan *p, al_model *m, al_error *err) {
    for (int i = 0; i < p->n_jobs; i++) {
        const job *j = &p->jobs[i];
        al_capture_request req = {.what = job_what(p, j), .fn = no_observer};
        int rc = al__model_check(m, j->L, &req, err);
        if (rc)
            return al__err_prefix(err, rc, "L = %d (%s)", j->L,
                                  j->is_long ? "the vanishing study and Algorithms 2, 4, 5 read "
                                               "weights, logits, q, k and the vectors"
                                             : "Algorithms 1 and 3 read weights and the vectors");
    }
    return 0;
}

/* ---- al_reproduce
 * ---------------------------------------------------------------------------------------- */

int al_reproduce(const al_repro_opts *opts, al_error *err) {
    return al_reproduce_dist(opts, NULL, err);
}

/* Over several processes (dist.h): rank 0 reads the corpus, holds the lock, decides what
 * --resume reuses, writes every output and prints; every rank runs the forwards and computes
 * the heads it owns. Every collective step below is reached by every rank or by none: an error
 * on any rank is agreed on (al__dist_agree) and stops all of them at the same step. */
int al_reproduce_dist(const al_repro_opts *opts, al_dist *dist, al_error *err) {
    double t_start = al__now();
    char started[32];
    now_iso(started, sizeof started);
    al_repro_opts o = *opts;
    int rank = al__dist_rank(dist), root = rank == 0, rc = 0;
    if (!root) o.quiet = 1, o.progress = 0;
    if (!o.corpus) o.corpus = "war-and-peace";
    char picked[64] = "";
    if (root) {
        if (!o.out_dir) rc = al__err(err, AL_E_INVALID, "no output directory (--out)");
        if (!rc) rc = al__mkdirs(o.out_dir, err);
        if (!rc && !o.model && !(rc = al_repro_pick_model(picked, sizeof picked, err)) && !o.quiet)
            fprintf(stderr, "attnlim reproduce: no --model given; using the best available: %s\n",
                    picked);
    }
    if ((rc = al__dist_agree(dist, rc, err)) ||
        (rc = al__dist_bcast(dist, picked, sizeof picked, err)))
        return rc;
    if (!o.model) o.model = picked;
    cJSON *run_opts = NULL;
    int lock_fd = -1;
    al_model *m = NULL;
    al_tokenizer *tk = NULL;
    char *text = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0, text_len = 0;
    plan p;
    memset(&p, 0, sizeof p);
    agg a;
    memset(&a, 0, sizeof a);
    const int32_t *own = NULL; /* the model's own tokens (an attention dump), [n_own] */
    int n_own = 0, own_L = 0;
    char own_label[160] = "", wopt[32] = "";
    const al_model_info *mi = NULL;
    char corpus_sha[65] = "";
    /* rank 0 opens the model first: a known name fetched on first use is in place before the
     * other ranks open it */
    if (root) rc = al_model_open(o.model, &m, err);
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    if (!root && (rc = al_model_open(o.model, &m, err))) goto setup_end;
    if (!o.quiet && o.progress)
        fprintf(stderr, "attnlim reproduce: hashing %s\n", al_model_get_info(m)->path);
    if ((rc = al_model_hash(m, err))) goto setup_end;
    mi = al_model_get_info(m);
    if (o.windows > 1) snprintf(wopt, sizeof wopt, "--windows %d", o.windows);
    if ((rc = own_tokens_opts(m, opts->corpus, wopt[0] ? wopt : NULL, &o, &own_L, &own, &n_own,
                              own_label, sizeof own_label, err)) ||
        (rc = build_plan(&p, &o, mi, err)) || (n_own && (rc = own_tokens_preflight(&p, m, err))))
        goto setup_end;
    p.dist = dist;
    p.rank = rank;
    p.size = al__dist_size(dist);
    if (!root) goto setup_end; /* rank 0 alone: the corpus, the lock, --resume's check, run.json */
    if (n_own) /* a dump's tokens: the corpus identity is the SHA-256 of the int32 ids */
        al_sha256_buf(own, sizeof(int32_t) * (size_t)n_own, corpus_sha);
    else if ((rc = al_model_tokenizer(m, &tk, err)) ||
             (rc = al_corpus_load(o.corpus, o.data_path, &text, &text_len, err)))
        goto setup_end;
    if (!n_own) al_sha256_buf(text, text_len, corpus_sha);
    /* fingerprint of what changes the numbers */
    {
        char buf[2048];
        snprintf(buf, sizeof buf, "attnlim-repro-1|%s|%s|%s|%s|%s|seed%llu|mc%d|T", mi->sha256,
                 corpus_sha, al_vectors_name(o.vectors), o.normalizer ? o.normalizer : "-",
                 al_version(), (unsigned long long)o.seed, o.mc_samples);
        size_t k = strlen(buf);
        for (int i = 0; i < p.nT && k < sizeof buf - 40; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, ",%.17g", p.T[i]);
        for (int i = 0; i < p.nE && k < sizeof buf - 40; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "|%.17g", p.eps[i]);
        al_sha256_buf(buf, strlen(buf), p.fingerprint);
    }
    /* one run at a time in OUT; --resume only over saved results of the same options (checked
     * before the costly tokenization) */
    if ((rc = lock_out_dir(o.out_dir, &lock_fd, err))) goto setup_end;
    if (!(run_opts = run_options(&p, mi, corpus_sha))) {
        rc = al__err(err, AL_E_NOMEM, "out of memory (run options)");
        goto setup_end;
    }
    if (o.resume && (rc = check_run_options(&p, run_opts, err))) goto setup_end;
    if (!n_own)
        rc = al_tokenize(tk, text, text_len, 0, &tokens, &n_tokens, err);
    else if (!(tokens = al__malloc(sizeof(int32_t) * (size_t)n_own, "tokens", err)))
        rc = AL_E_NOMEM;
    else
        memcpy(tokens, own, sizeof(int32_t) * (size_t)n_own), n_tokens = (size_t)n_own;
    if (rc) goto setup_end;
    {
        int maxL = 0;
        for (int i = 0; i < p.n_jobs; i++)
            if (p.jobs[i].L > maxL) maxL = p.jobs[i].L;
        if ((size_t)o.windows * (size_t)maxL > n_tokens) {
            rc = al__err(err, AL_E_INVALID, "%s: %zu tokens, but %d window(s) of L = %d need %zu",
                         o.corpus, n_tokens, o.windows, maxL, (size_t)o.windows * maxL);
            goto setup_end;
        }
    }
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= mi->vocab_size) {
            rc = al__err(err, AL_E_INVALID,
                         "%s: token id %d at %zu is outside the model's vocabulary of %d", o.corpus,
                         tokens[i], i, mi->vocab_size);
            goto setup_end;
        }
    /* temp files of interrupted runs removed (the lock says no other run is writing them);
     * partial/run.json anew */
    {
        char pdir[4200], path[4300];
        snprintf(pdir, sizeof pdir, "%s/partial", o.out_dir);
        if ((rc = sweep_dir(o.out_dir, 0, &p.n_swept, err)) ||
            (rc = sweep_dir(pdir, 1, &p.n_swept, err)))
            goto setup_end;
        if (p.n_swept && !o.quiet)
            fprintf(stderr,
                    "attnlim reproduce: removed %d temporary file(s) an interrupted run left in "
                    "%s\n",
                    p.n_swept, o.out_dir);
        char *txt = cJSON_Print(run_opts);
        snprintf(path, sizeof path, "%s/run.json", pdir);
        if (!txt) rc = al__err(err, AL_E_NOMEM, "out of memory (run options)");
        if (!rc) rc = al__mkdirs(pdir, err);
        if (!rc) rc = al__write_file_atomic(path, txt, strlen(txt), err);
        free(txt);
        if (rc) goto setup_end;
    }
setup_end:
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    /* every rank: rank 0's model identity and tokens */
    {
        char sha0[65];
        uint64_t nt = n_tokens;
        memcpy(sha0, mi->sha256, sizeof sha0);
        if (!(rc = al__dist_bcast(dist, sha0, sizeof sha0, err)) && strcmp(sha0, mi->sha256))
            rc = al__err(err, AL_E_INVALID,
                         "%s: this model (sha256 %.16s...) is not rank 0's (sha256 %.16s...): "
                         "every rank must open the same model",
                         mi->path, mi->sha256, sha0);
        if (!rc) rc = al__dist_bcast(dist, &nt, sizeof nt, err);
        if (!rc && !root &&
            !(tokens = al__malloc(sizeof(int32_t) * (size_t)(nt ? nt : 1), "tokens", err)))
            rc = AL_E_NOMEM;
        if (!(rc = al__dist_agree(dist, rc, err)))
            rc = al__dist_agree(dist, al__dist_bcast(dist, tokens, sizeof(int32_t) * nt, err), err);
        n_tokens = (size_t)nt;
        if (rc) goto done;
    }
    /* run the jobs (largest L first: the ETA settles early) */
    {
        al__progress pg;
        double total = 0;
        for (int i = 0; i < p.n_jobs; i++) total += job_units(&p.jobs[i]);
        al__progress_begin(&pg, o.progress && !o.quiet, stderr, total);
        int tk_alg[6];
        const char *tn[6] = {"van", "alg1", "alg2", "alg3", "alg4", "alg5"};
        for (int e = 0; e < 6; e++) {
            int cnt = 0;
            for (int i = 0; i < p.n_jobs; i++) {
                job *j = &p.jobs[i];
                int uses = (e == 1 || e == 3) ? j->in_lengths : j->is_long;
                cnt += uses && (p.exp & (1u << e));
            }
            tk_alg[e] = (p.exp & (1u << e)) ? al__progress_task(&pg, tn[e], cnt) : -1;
        }
        int *order = al__malloc(sizeof(int) * (size_t)(p.n_jobs ? p.n_jobs : 1), "job order", err);
        uint8_t *todo =
            order ? al__calloc((size_t)(p.n_jobs ? p.n_jobs : 1), 1, "jobs", err) : NULL;
        if ((rc = al__dist_agree(dist, todo ? 0 : AL_E_NOMEM, err))) {
            free(order);
            al__progress_end(&pg);
            goto done;
        }
        for (int i = 0; i < p.n_jobs; i++) order[i] = i;
        for (int i = 1; i < p.n_jobs; i++) /* insertion sort by L descending */
            for (int k = i; k > 0 && p.jobs[order[k]].L > p.jobs[order[k - 1]].L; k--) {
                int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        char stale[160] = "";
        /* rank 0 decides which jobs to run (--resume loads the others); every rank learns it */
        for (int q = 0; q < p.n_jobs && root; q++) {
            job *j = &p.jobs[order[q]];
            int got = o.resume ? load_job(&p, j) : 0;
            if (got == 1) {
                j->loaded = 1;
                p.n_reused++;
            } else {
                todo[order[q]] = 1;
                if (got < 0) {
                    size_t k = strlen(stale);
                    if (k < 120)
                        snprintf(stale + k, sizeof stale - k, "%sw%d_L%d", k ? ", " : "", j->window,
                                 j->L);
                    else if (!strstr(stale, "..."))
                        snprintf(stale + k, sizeof stale - k, ", ...");
                    p.n_stale++;
                }
            }
        }
        rc = al__dist_agree(dist, al__dist_bcast(dist, todo, (size_t)p.n_jobs, err), err);
        for (int q = 0; q < p.n_jobs && !rc; q++) {
            job *j = &p.jobs[order[q]];
            if (!todo[order[q]]) {
                al__progress_add(&pg, job_units(j), "resumed");
            } else {
                if ((rc = run_job(&p, m, tokens, j, &pg, err))) break;
                if (root) rc = save_job(&p, j, err);
                if ((rc = al__dist_agree(dist, rc, err))) break;
                p.n_recomputed++;
            }
            for (int e = 0; e < 6; e++) {
                int uses = (e == 1 || e == 3) ? j->in_lengths : j->is_long;
                if (uses && tk_alg[e] >= 0) al__progress_task_step(&pg, tk_alg[e]);
            }
        }
        free(order);
        free(todo);
        al__progress_end(&pg);
        if (!rc) rc = gather_ranks(&p, err);
        if (rc) goto done;
        if (o.resume && !o.quiet) {
            fprintf(stderr,
                    "attnlim reproduce: --resume: reused %d and computed %d of %d (window, L) "
                    "jobs in %s/partial",
                    p.n_reused, p.n_recomputed, p.n_jobs, o.out_dir);
            if (p.n_stale)
                fprintf(stderr, " (%d saved with other grids or options, or unreadable: %s)",
                        p.n_stale, stale);
            fprintf(stderr, "\n");
        }
    }
    /* aggregate and write (rank 0 alone) */
    if (!root) goto written;
    {
        al__summary *s = &a.s;
        s->out_dir = o.out_dir;
        snprintf(s->model_name, sizeof s->model_name, "%s", mi->name);
        snprintf(s->model_path, sizeof s->model_path, "%s", mi->path);
        snprintf(s->model_sha, sizeof s->model_sha, "%s", mi->sha256);
        if (!(s->model_json = al__model_json(m, o.model, 1, err))) {
            rc = err && err->code ? err->code : AL_E_NOMEM;
            goto written;
        }
        snprintf(s->family, sizeof s->family, "%s", mi->family);
        s->corpus = o.corpus;
        s->vectors = al_vectors_name(o.vectors);
        s->normalizer = o.normalizer ? o.normalizer : "softmax (the model's own weights)";
        s->synthetic = o.synthetic >= 0 ? o.synthetic : detect_synthetic(mi);
        s->sums_to_one = p.have_nm ? al_norm_sums_to_one(&p.nm) : 1;
        s->causal = mi->causal;
        s->n_layer = mi->n_layer;
        s->n_head = mi->n_head;
        s->d_head = mi->d_head;
        s->n_ctx = mi->n_ctx;
        s->windows = o.windows;
        s->long_L = p.long_L;
        s->quick = o.quick;
        s->n_tokens = (int64_t)n_tokens;
        s->experiments = p.exp;
        s->seed = o.seed;
        s->mc_samples = o.mc_samples;
        s->nL = p.nL;
        s->Ls = p.Ls;
        s->nN2 = p.nN2;
        s->N2 = p.N2;
        s->nN3 = p.nN3;
        s->N3 = p.N3;
        s->nN4 = p.nN4;
        s->N4 = p.N4;
        s->nT = p.nT;
        s->nE = p.nE;
        s->T = p.T;
        s->eps = p.eps;
        if ((rc = aggregate(&p, &a, err))) goto written;
        char titles[6][160];
        if ((rc = build_heatmaps(&p, &a, titles, err))) goto written;
        verdicts(&p, &a);
        double tw = 0, tf = 0, td = 0, tsp = 0, tse = 0, tv = 0;
        for (int i = 0; i < p.n_jobs; i++) {
            tw += p.jobs[i].t_wall;
            tf += p.jobs[i].t_forward;
            td += p.jobs[i].t_dist;
            tsp += p.jobs[i].t_sep;
            tse += p.jobs[i].t_sens;
            tv += p.jobs[i].t_van;
        }
        s->n_timings = 0;
        s->timing_name[s->n_timings] = "jobs_wall_s", s->timing_s[s->n_timings++] = tw;
        s->timing_name[s->n_timings] = "forward_cpu_s", s->timing_s[s->n_timings++] = tf;
        s->timing_name[s->n_timings] = "distance_alg1_alg2_alg3_cpu_s";
        s->timing_s[s->n_timings++] = td;
        s->timing_name[s->n_timings] = "separability_alg4_cpu_s", s->timing_s[s->n_timings++] = tsp;
        s->timing_name[s->n_timings] = "sensitivity_alg5_cpu_s", s->timing_s[s->n_timings++] = tse;
        s->timing_name[s->n_timings] = "vanishing_cpu_s", s->timing_s[s->n_timings++] = tv;
        double t_w0 = al__now();
        if (o.progress && !o.quiet)
            fprintf(stderr,
                    "attnlim reproduce: writing results.json, CSV, NPY, figures and reports\n");
        /* results.json goes last (an older one first): its presence means every output
         * beside it is complete and of this run */
        char rpath[4200];
        snprintf(rpath, sizeof rpath, "%s/results.json", o.out_dir);
        if (unlink(rpath) != 0 && errno != ENOENT) {
            rc = al__err(err, AL_E_IO, "%s: cannot replace: %s", rpath, strerror(errno));
            goto written;
        }
        if ((rc = write_csvs(&p, &a, err))) goto written;
        if ((rc = write_npys(&p, &a, err))) goto written;
        if ((rc = al__report_figures(s, err))) goto written;
        s->timing_name[s->n_timings] = "outputs_wall_s";
        s->timing_s[s->n_timings++] = al__now() - t_w0;
        s->seconds_total = al__now() - t_start;
        if ((rc = al__report_write(s, err))) goto written;
        if ((rc = write_json(&p, &a, corpus_sha, started, err))) goto written;
    }
written:
    rc = al__dist_agree(dist, rc, err); /* every rank returns rank 0's status */
done:
    cJSON_Delete(run_opts);
    if (lock_fd >= 0) close(lock_fd);
    free_agg(&a);
    free_plan(&p);
    free(tokens);
    free(text);
    if (tk) al_tokenizer_free(tk);
    if (m) al_model_free(m);
    return rc;
}

/* ---- al_diagnose: per-head health on one window
 * ------------------------------------------------------ */

#define DIAG_NS 4
static const int diag_N[DIAG_NS] = {1, 4, 16, 64};

typedef struct diag_ctx {
    int L, n_head, n_threads, dx, nN;
    int Ns[DIAG_NS];
    const al_norm *nm; /* NULL: the model's weights */
    al_norm soft;
    double *max_w, *ent, *sink, *spec; /* [H] */
    double *ns;                        /* [H, nN] (room for DIAG_NS) */
    scratch *sc;                       /* [n_threads] */
    al_dist *dist;                     /* this rank computes the heads it owns (dist.h) */
    int rank;
    uint8_t *done; /* [H] */
} diag_ctx;

static int diag_head(diag_ctx *c, const al_capture *cap, int i, scratch *sc, al_error *err) {
    int64_t L = cap->T;
    size_t LL = (size_t)L * L;
    int h = cap->layer * c->n_head + cap->heads[i];
    const float *z = cap->logits + (size_t)i * LL;
    for (int64_t t = 0; t < L; t++) {
        int64_t n = cap->causal ? t + 1 : L;
        for (int64_t u = 0; u < L; u++) sc->z[(size_t)t * L + u] = u < n ? z[(size_t)t * L + u] : 0;
    }
    for (int64_t t = 0; t < L; t++) {
        int64_t n = cap->causal ? t + 1 : L;
        double *wr = sc->w + (size_t)t * L;
        if (c->nm) {
            int rc = al_norm_forward(c->nm, sc->z + (size_t)t * L, n, wr, err);
            if (rc) return rc;
        } else {
            to_double(cap->weights + (size_t)i * LL + (size_t)t * L, wr, (size_t)n);
        }
        for (int64_t u = n; u < L; u++) wr[u] = 0;
    }
    to_double(cap->v + (size_t)i * L * cap->d_head, sc->x, (size_t)L * cap->d_head);
    double *rmax = sc->q, *rent = sc->k; /* [L] each (q, k scratch are >= L doubles) */
    int rc = row_stats(sc->w, L, cap->causal, rmax, rent, err);
    if (rc) return rc;
    double sm = 0, se = 0, ss = 0;
    int ce = 0;
    for (int64_t t = 0; t < L; t++) {
        int64_t n = cap->causal ? t + 1 : L;
        sm += rmax[t];
        ss += sc->w[(size_t)t * L];
        if (n >= 2) se += rent[t] / log((double)n), ce++;
    }
    c->max_w[h] = sm / L;
    c->sink[h] = ss / L;
    c->ent[h] = ce ? se / ce : NAN;
    if (c->nN > 0) {
        al_metrics_opts mo = {
            .top_n = c->Ns, .n_top = c->nN, .separability = 1, .causal = cap->causal};
        rc = al_head_metrics(sc->w, sc->x, L, c->dx, &mo, sc->st, NULL, NULL, err);
        if (rc) return rc;
        for (int k = 0; k < c->nN; k++) c->ns[(size_t)h * c->nN + k] = sc->st[k].ns_ratio;
    }
    double T1 = 1.0;
    return al_head_sensitivity(sc->z, L, cap->causal, c->nm ? c->nm : &c->soft, &T1, 1, NULL, 0, 0,
                               cap->layer, cap->heads[i], NULL, &c->spec[h], err);
}

static int diag_observe(void *user, const al_capture *cap, al_error *err) {
    diag_ctx *c = user;
    int failed = 0;
    al_error first = {0};
#pragma omp parallel num_threads(c->n_threads)
    {
        int tid = omp_get_thread_num();
        al_error e = {0};
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < cap->n_sel; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            int h = cap->layer * c->n_head + cap->heads[i];
            if (al__dist_owner(c->dist, h) != c->rank) continue; /* another rank's head */
            if (diag_head(c, cap, i, &c->sc[tid], &e)) {
#pragma omp critical(diag_err)
                {
                    if (!failed) first = e;
                    failed = 1;
                }
            } else {
                c->done[h]++;
            }
        }
    }
    if (failed) {
        if (err) *err = first;
        return first.code ? (int)first.code : AL_E_INVALID;
    }
    return 0;
}

static int diag_report(const al_diag_opts *o, al_model *m, diag_ctx *c, int L, char **json,
                       al_error *err) {
    const al_model_info *mi = al_model_get_info(m);
    int H = mi->n_layer * mi->n_head;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "attnlim.diagnose/1");
    cJSON *mo = al__model_json(m, o->model ? o->model : "gpt2", 1, err);
    if (!mo) {
        cJSON_Delete(root);
        return err && err->code ? err->code : AL_E_NOMEM;
    }
    cJSON_AddItemToObject(root, "model", mo);
    cJSON_AddStringToObject(root, "corpus", o->corpus ? o->corpus : "war-and-peace");
    cJSON_AddNumberToObject(root, "window", o->window);
    cJSON_AddNumberToObject(root, "L", L);
    cJSON_AddStringToObject(root, "normalizer",
                            o->normalizer ? o->normalizer : "softmax (the model's own weights)");
    cJSON_AddItemToObject(root, "separability_N", jarr_i(c->Ns, (size_t)c->nN));
    cJSON *th = cJSON_AddObjectToObject(root, "flag_rules");
    cJSON_AddStringToObject(th, "collapsed", "mean max weight > 0.9 or mean H / log n < 0.1");
    cJSON_AddStringToObject(th, "vanishing",
                            "mean H / log n > 0.95 (near uniform: attention vanishes)");
    cJSON_AddStringToObject(th, "sink", "mean weight on token 0 > 0.5");
    cJSON *heads = cJSON_AddArrayToObject(root, "heads");
    int n_coll = 0, n_van = 0, n_sink = 0;
    for (int h = 0; h < H; h++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddNumberToObject(it, "layer", h / mi->n_head);
        cJSON_AddNumberToObject(it, "head", h % mi->n_head);
        cJSON_AddItemToObject(it, "mean_max_weight", jnum(c->max_w[h]));
        cJSON_AddItemToObject(it, "mean_entropy_over_log_n", jnum(c->ent[h]));
        cJSON_AddItemToObject(it, "mean_weight_on_token0", jnum(c->sink[h]));
        cJSON_AddItemToObject(it, "ns_ratio", jarr_d(c->ns + (size_t)h * c->nN, (size_t)c->nN));
        cJSON_AddItemToObject(it, "jacobian_spectral_T1", jnum(c->spec[h]));
        cJSON *fl = cJSON_AddArrayToObject(it, "flags");
        if (c->max_w[h] > 0.9 || c->ent[h] < 0.1)
            cJSON_AddItemToArray(fl, cJSON_CreateString("collapsed")), n_coll++;
        if (c->ent[h] > 0.95) cJSON_AddItemToArray(fl, cJSON_CreateString("vanishing")), n_van++;
        if (c->sink[h] > 0.5) cJSON_AddItemToArray(fl, cJSON_CreateString("sink")), n_sink++;
        cJSON_AddItemToArray(heads, it);
    }
    cJSON *sm = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddNumberToObject(sm, "heads", H);
    cJSON_AddNumberToObject(sm, "collapsed", n_coll);
    cJSON_AddNumberToObject(sm, "vanishing", n_van);
    cJSON_AddNumberToObject(sm, "sink", n_sink);
    *json = cJSON_Print(root);
    cJSON_Delete(root);
    if (!*json) return al__err(err, AL_E_NOMEM, "out of memory printing the diagnosis");
    if (!o->out_dir) return 0;
    int rc = al__mkdirs(o->out_dir, err);
    char path[4200];
    snprintf(path, sizeof path, "%s/diagnose.json", o->out_dir);
    if (!rc) rc = al__write_file_atomic(path, *json, strlen(*json), err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/diagnose.md", o->out_dir);
    al__afile f;
    if ((rc = al__afile_open(&f, path, err))) return rc;
    al__afile_printf(
        &f, err,
        "# Attention health: %s\n\nWindow %d of %s, L = %d, normalizer %s. %d heads: %d collapsed, "
        "%d "
        "vanishing, %d sinks.\n\nFlags: collapsed = mean max weight > 0.9 or mean H/log n < 0.1; "
        "vanishing = mean H/log n > 0.95 (near uniform); sink = mean weight on token 0 > 0.5.\n\n"
        "| layer | head | max weight | H / log n | weight on token 0 |",
        mi->name, o->window, o->corpus ? o->corpus : "war-and-peace", L,
        o->normalizer ? o->normalizer : "softmax", H, n_coll, n_van, n_sink);
    for (int k = 0; k < c->nN; k++) al__afile_printf(&f, err, " N_s/N (N=%d) |", c->Ns[k]);
    al__afile_printf(&f, err, " Jacobian norm at T=1 | flags |\n|---|---|---|---|---|");
    for (int k = 0; k < c->nN; k++) al__afile_printf(&f, err, "---|");
    al__afile_printf(&f, err, "---|---|\n");
    for (int h = 0; h < H; h++) {
        al__afile_printf(&f, err, "| %d | %d | %.4f | %.4f | %.4f |", h / mi->n_head,
                         h % mi->n_head, c->max_w[h], c->ent[h], c->sink[h]);
        for (int k = 0; k < c->nN; k++)
            al__afile_printf(&f, err, " %.4f |", c->ns[(size_t)h * c->nN + k]);
        al__afile_printf(&f, err, " %.4f | %s%s%s |\n", c->spec[h],
                         (c->max_w[h] > 0.9 || c->ent[h] < 0.1) ? "collapsed " : "",
                         c->ent[h] > 0.95 ? "vanishing " : "", c->sink[h] > 0.5 ? "sink" : "");
    }
    return al__afile_commit(&f, err);
}

int al_diagnose(const al_diag_opts *o, char **json, al_error *err) {
    return al_diagnose_dist(o, NULL, json, err);
}

/* Over several processes as al_reproduce_dist: rank 0 reads the corpus and sends the window's
 * tokens, every rank runs the forward and its heads, rank 0 merges and reports. */
int al_diagnose_dist(const al_diag_opts *o, al_dist *dist, char **json, al_error *err) {
    *json = NULL;
    al_model *m = NULL;
    al_tokenizer *tk = NULL;
    char *text = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0, text_len = 0;
    diag_ctx c;
    memset(&c, 0, sizeof c);
    al_norm nm;
    const int32_t *own = NULL; /* the model's own tokens (an attention dump), [n_own] */
    int n_own = 0;
    char own_label[160] = "";
    const al_model_info *mi = NULL;
    int root = al__dist_rank(dist) == 0, L = 0;
    const int32_t *win = NULL; /* the window's L tokens */
    /* rank 0's model where a rank names none; rank 0 opens it first (a known name is fetched on
     * first use), then the others */
    char model[4096] = "";
    if (root) snprintf(model, sizeof model, "%s", o->model ? o->model : "gpt2");
    int rc = al__dist_agree(dist, al__dist_bcast(dist, model, sizeof model, err), err);
    if (!rc && !root && o->model) snprintf(model, sizeof model, "%s", o->model);
    if (!rc && root) rc = al_model_open(model, &m, err);
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    if (!root && (rc = al_model_open(model, &m, err))) goto setup_end;
    if ((rc = al_model_hash(m, err))) goto setup_end;
    mi = al_model_get_info(m);
    char wopt[32] = "";
    if (o->window) snprintf(wopt, sizeof wopt, "--window %d", o->window);
    if ((rc = own_tokens_opts(m, o->corpus, wopt[0] ? wopt : NULL, NULL, NULL, &own, &n_own,
                              own_label, sizeof own_label, err)))
        goto setup_end;
    L = o->length > 0          ? o->length
        : n_own && !mi->causal ? n_own /* a bidirectional dump: L = T only */
        : mi->n_ctx < 1024     ? mi->n_ctx
                               : 1024;
    if (n_own && (L > n_own || (!mi->causal && L != n_own))) {
        rc = al__err(err, AL_E_INVALID, "--length %d, but %s holds attention over T = %d tokens%s",
                     L, mi->path, n_own,
                     mi->causal ? " (L <= T)" : " and is bidirectional (L = T only)");
        goto setup_end;
    }
    if (L < 2 || L > mi->n_ctx) {
        rc = al__err(err, AL_E_INVALID, "--length %d is outside 2..%d (the model's context)", L,
                     mi->n_ctx);
        goto setup_end;
    }
    if (o->normalizer) {
        if ((rc = al_norm_parse(o->normalizer, &nm, err))) goto setup_end;
        c.nm = &nm;
    }
    if (n_own) { /* before anything is computed: does the dump hold what diagnose reads? */
        al_capture_request pre = {.what = AL_CAP_LOGITS | AL_CAP_V |
                                          (c.nm ? 0u : (unsigned)AL_CAP_WEIGHTS),
                                  .fn = no_observer};
        if ((rc = al__model_check(m, L, &pre, err))) {
            al__err_prefix(err, rc, "diagnose reads %s",
                           c.nm ? "logits and v (--normalizer)" : "logits, weights and v");
            goto setup_end;
        }
    }
    if (!root) {
        if (!(tokens = al__malloc(sizeof(int32_t) * (size_t)L, "tokens", err))) rc = AL_E_NOMEM;
        win = tokens;
        goto setup_end;
    }
    if (n_own) { /* an attention dump: its tokens */
        if (!(tokens = al__malloc(sizeof(int32_t) * (size_t)n_own, "tokens", err))) {
            rc = AL_E_NOMEM;
            goto setup_end;
        }
        memcpy(tokens, own, sizeof(int32_t) * (size_t)n_own);
        n_tokens = (size_t)n_own;
    } else if ((rc = al_model_tokenizer(m, &tk, err)) ||
               (rc = al_corpus_load(o->corpus ? o->corpus : "war-and-peace", o->data_path, &text,
                                    &text_len, err)) ||
               (rc = al_tokenize(tk, text, text_len, 0, &tokens, &n_tokens, err)))
        goto setup_end;
    if (o->window < 0 || (size_t)(o->window + 1) * (size_t)L > n_tokens) {
        rc = al__err(err, AL_E_INVALID, "%s: %zu tokens, window %d of L = %d needs %zu",
                     o->corpus ? o->corpus : "war-and-peace", n_tokens, o->window, L,
                     (size_t)(o->window + 1) * L);
        goto setup_end;
    }
    win = tokens + (size_t)o->window * L;
setup_end:
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    { /* every rank: rank 0's model identity and window */
        char sha0[65];
        memcpy(sha0, mi->sha256, sizeof sha0);
        if (!(rc = al__dist_bcast(dist, sha0, sizeof sha0, err)) && strcmp(sha0, mi->sha256))
            rc = al__err(err, AL_E_INVALID,
                         "%s: this model (sha256 %.16s...) is not rank 0's (sha256 %.16s...): "
                         "every rank must open the same model",
                         mi->path, mi->sha256, sha0);
        if (!(rc = al__dist_agree(dist, rc, err)))
            rc = al__dist_agree(dist, al__dist_bcast(dist, (void *)win, sizeof(int32_t) * L, err),
                                err);
        if (rc) goto done;
    }
    int H = mi->n_layer * mi->n_head;
    c.L = L;
    c.n_head = mi->n_head;
    c.dx = mi->d_head;
    c.soft = al_norm_default(AL_NORM_SOFTMAX);
    c.n_threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    c.dist = dist;
    c.rank = al__dist_rank(dist);
    for (int k = 0; k < DIAG_NS; k++)
        if (diag_N[k] < L) c.Ns[c.nN++] = diag_N[k];
    if (!(c.max_w = alloc_nan((size_t)H, err)) || !(c.ent = alloc_nan((size_t)H, err)) ||
        !(c.sink = alloc_nan((size_t)H, err)) || !(c.spec = alloc_nan((size_t)H, err)) ||
        !(c.ns = alloc_nan((size_t)H * DIAG_NS, err)) ||
        !(c.done = al__calloc((size_t)H, 1, "heads done", err)) ||
        !(c.sc = al__calloc((size_t)c.n_threads, sizeof(scratch), "scratch", err)))
        rc = AL_E_NOMEM;
    size_t LL = (size_t)L * L, dq = (size_t)L * (mi->d_head > 1 ? mi->d_head : 1);
    for (int t = 0; t < c.n_threads && !rc; t++) {
        scratch *s = &c.sc[t];
        if (!(s->w = al__malloc(LL * sizeof(double), "head weights", err)) ||
            !(s->z = al__malloc(LL * sizeof(double), "head logits", err)) ||
            !(s->x = al__malloc(dq * sizeof(double), "head vectors", err)) ||
            !(s->q = al__malloc(dq * sizeof(double), "row max", err)) ||
            !(s->k = al__malloc(dq * sizeof(double), "row entropy", err)) ||
            !(s->st = al__malloc((DIAG_NS + 1) * sizeof(al_topn_stats), "stats", err)))
            rc = AL_E_NOMEM;
    }
    al_capture_request req = {.what =
                                  AL_CAP_LOGITS | AL_CAP_V | (c.nm ? 0u : (unsigned)AL_CAP_WEIGHTS),
                              .fn = diag_observe,
                              .user = &c};
    if (!rc) rc = al_model_forward(m, win, L, &req, NULL, NULL, err);
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    { /* every head's values onto rank 0, which reports */
        double *arr[5] = {c.max_w, c.ent, c.sink, c.spec, c.ns};
        const int64_t cols[5] = {1, 1, 1, 1, c.nN}; /* ns is [H, nN] */
        if ((rc = al__dist_merge_heads(dist, H, mi->n_head, 5, arr, cols, c.done, err))) goto done;
    }
    al_diag_opts shown = *o; /* a dump's report names its tokens as the corpus */
    if (n_own) shown.corpus = own_label;
    if (root) rc = diag_report(&shown, m, &c, L, json, err);
    rc = al__dist_agree(dist, rc, err);
done:
    free_scratch(c.sc, c.n_threads);
    free(c.max_w);
    free(c.ent);
    free(c.sink);
    free(c.spec);
    free(c.ns);
    free(c.done);
    free(tokens);
    free(text);
    if (tk) al_tokenizer_free(tk);
    if (m) al_model_free(m);
    if (rc && *json) {
        free(*json);
        *json = NULL;
    }
    return rc;
}
