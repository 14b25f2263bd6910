/* plan.c: options and grids of `attnlim reproduce`, and its plan: the (window, L) jobs and their
 * grids (METHOD sections 2-6). */
#include "experiments.h"
#include "hooks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- options and grids ---------------------------------------------------------------------- */

static const int def_lengths[] = {32, 64, 128, 256, 512, 1024};
static const int def_top_n[] = {1, 5, 10, 20, 100};
static const int def_sep_n[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const double def_eps[] = {1e-3, 1e-1, 10};
static const int quick_lengths[] = {16, 32, 64};
static const int quick_top_n[] = {1, 2, 5, 10};
static const int quick_crit_n[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48};
static const int quick_sep_n[] = {1, 2, 4, 8, 16};

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
    case AL_VEC_RESIDUAL:
        return "residual";
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
    else if (!strcmp(s, "residual"))
        *out = AL_VEC_RESIDUAL;
    else
        return al__err(err, AL_E_INVALID,
                       "--vectors: '%s' is not one of value, key, hidden, residual, embedding", s);
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

/* The default critical-N grid (METHOD section 4): the union over the lengths Ls[nL] of each
 * L's grid (al_critical_grid: up to L - 1, steps of L/32 beyond 256), or with quick the quick
 * grid and every L - 1; each job uses the N < L of it. *out malloc'ed. */
static int crit_grid(const int *Ls, int nL, int quick, int **out, int *n, al_error *err) {
    size_t cap = quick ? sizeof quick_crit_n / sizeof *quick_crit_n + (size_t)nL : 0;
    for (int i = 0; i < nL && !quick; i++) cap += (size_t)al_critical_grid(Ls[i], NULL, 0);
    int *g = al__malloc(sizeof(int) * (cap ? cap : 1), "critical-N grid", err);
    if (!g) return AL_E_NOMEM;
    int k = 0;
    if (quick) {
        for (size_t i = 0; i < sizeof quick_crit_n / sizeof *quick_crit_n; i++)
            g[k++] = quick_crit_n[i];
        for (int i = 0; i < nL; i++) g[k++] = Ls[i] - 1;
    } else {
        for (int i = 0; i < nL; i++) k += al_critical_grid(Ls[i], g + k, (int)cap - k);
    }
    *out = g;
    *n = k;
    return 0;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
int al__ex_cmp_dbl(const void *a, const void *b) {
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

void al__ex_free_plan(plan *p) {
    for (int i = 0; i < p->n_jobs; i++) free_job(&p->jobs[i]);
    free(p->jobs);
    free(p->Ls);
    free(p->N2);
    free(p->N3);
    free(p->N4);
    free(p->T);
    free(p->eps);
    free(p->ranks);
    free(p->lmask);
    free(p->hmask);
}

int al__ex_switch(int v) {
    return v == 1 ? 1 : v == 2 ? 0 : -1;
}

int al__ex_head_selected(const plan *p, int h) {
    return (!p->lmask || p->lmask[h / p->n_head]) && (!p->hmask || p->hmask[h % p->n_head]);
}

int al__ex_sel_mask(const int *v, int n, int count, const char *what, uint8_t **mask, int *n_sel,
                    al_error *err) {
    int kept = count;
    *mask = NULL;
    if (v && n > 0) {
        if (!(*mask = al__calloc((size_t)count, 1, what, err))) return AL_E_NOMEM;
        for (int i = 0; i < n; i++) {
            if (v[i] < 0 || v[i] >= count)
                return al__err(err, AL_E_RANGE, "%s: %d is outside 0..%d (the model has %d)", what,
                               v[i], count - 1, count);
            (*mask)[v[i]] = 1;
        }
        kept = 0;
        for (int i = 0; i < count; i++) kept += (*mask)[i];
    }
    if (n_sel) *n_sel = kept;
    return 0;
}

double *al__ex_alloc_nan(size_t n, al_error *err) {
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
    if (!(j->dtilde = al__ex_alloc_nan(H * j->nd, err)) ||
        !(j->dmax = al__ex_alloc_nan(H * j->nd, err)) ||
        !(j->E = al__ex_alloc_nan(H * j->nd, err)) ||
        !(j->E_mc = al__ex_alloc_nan(H * j->nd, err)) ||
        !(j->E_mc_se = al__ex_alloc_nan(H * j->nd, err)) ||
        !(j->ns_ratio = al__ex_alloc_nan(H * j->ns, err)) ||
        !(j->ns_lower = al__ex_alloc_nan(H * j->ns, err)) ||
        !(j->ns_upper = al__ex_alloc_nan(H * j->ns, err)))
        return AL_E_NOMEM;
    size_t nv = j->want_van ? H * (size_t)j->L : 0;
    size_t nf = j->want_sens ? H * (size_t)p->nT * p->nE : 0,
           nsp = j->want_sens ? H * (size_t)p->nT : 0;
    if (!(j->vmax = al__ex_alloc_nan(nv, err)) || !(j->vent = al__ex_alloc_nan(nv, err)) ||
        !(j->vD = al__ex_alloc_nan(nv, err)) || !(j->fd = al__ex_alloc_nan(nf, err)) ||
        !(j->spec = al__ex_alloc_nan(nsp, err)))
        return AL_E_NOMEM;
    return 0;
}

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* A grid: the option's values when given, else the --quick one, else the default; *n its size. */
static const int *pick(const int *given, int n_given, int quick, const int *q, int nq,
                       const int *def, int ndef, int *n) {
    if (given) return *n = n_given, given;
    if (quick) return *n = nq, q;
    return *n = ndef, def;
}

/* The names of the grids whose values can apply to no L, in plan.dropped order. */
static const char *const al__ex_grid_flags[3] = {"--top-n", "--critical-n", "--separability-n"};

/* Given grid values that apply to no L are recorded (p->dropped) and reported; a grid left
 * with none, or an experiment asked for by --experiments left with nothing to compute, is
 * refused naming the values and L (issue 12), instead of an empty result and exit 0. An
 * experiment of the default set that cannot run at these lengths is reported and recorded. */
static int check_grids_apply(plan *p, const al_repro_opts *o, al_error *err) {
    const unsigned exp = o->experiments ? (o->experiments & AL_EXP_ALL) : AL_EXP_ALL;
    int maxL = 0;
    for (int i = 0; i < p->nL; i++) maxL = p->Ls[i] > maxL ? p->Ls[i] : maxL;
    int crit_ok = 0;
    for (int i = 0; i < p->nN3; i++) crit_ok += p->N3[i] < maxL;
    struct {
        unsigned bit;
        const int *given;
        int n_given, n_kept, L;
    } g[3] = {{AL_EXP_ALG2, o->top_n, o->n_top_n, p->nN2, p->long_L},
              {AL_EXP_ALG3, o->critical_n, o->n_critical_n, crit_ok, maxL},
              {AL_EXP_ALG4, o->separability_n, o->n_separability_n, p->nN4, p->long_L}};
    for (int i = 0; i < 3; i++)
        for (int q = 0; g[i].given && q < g[i].n_given; q++)
            if (g[i].given[q] < 1)
                return al__err(err, AL_E_INVALID, "%s: %d is not an N >= 1", al__ex_grid_flags[i],
                               g[i].given[q]);
    for (int i = 0; i < 3; i++) {
        p->n_dropped[i] = 0;
        if (!(exp & g[i].bit) || !g[i].given) continue;
        char list[200] = "";
        size_t k = 0;
        for (int q = 0; q < g[i].n_given; q++) {
            if (g[i].given[q] < g[i].L) continue;
            if (p->n_dropped[i] < 32) p->dropped[i][p->n_dropped[i]] = g[i].given[q];
            if (k + 16 < sizeof list)
                k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", k ? ", " : "",
                                      g[i].given[q]);
            p->n_dropped[i]++;
        }
        if (g[i].n_kept == 0)
            return al__err(err, AL_E_INVALID,
                           "%s: every value is >= L = %d (N must be below the window length): "
                           "its experiment would be empty",
                           al__ex_grid_flags[i], g[i].L);
        if (p->n_dropped[i] && p->rank == 0)
            al__log(AL_LOG_WARNING,
                    "attnlim reproduce: %s: %d value%s dropped (%s%s): N must be below L = %d; "
                    "%s/results.json lists them (options.grid_values_dropped)",
                    al__ex_grid_flags[i], p->n_dropped[i], p->n_dropped[i] > 1 ? "s" : "", list,
                    k + 16 >= sizeof list ? ", ..." : "", g[i].L, o->out_dir ? o->out_dir : ".");
    }
    /* what each experiment needs of the lengths */
    unsigned none = 0;
    if (maxL <= ALG1_N) none |= AL_EXP_ALG1;
    if (p->nN2 == 0) none |= AL_EXP_ALG2;
    if (crit_ok == 0) none |= AL_EXP_ALG3;
    if (p->nN4 == 0) none |= AL_EXP_ALG4;
    none &= exp;
    static const char *const en[6] = {"vanishing", "alg1", "alg2", "alg3", "alg4", "alg5"};
    for (int e = 0; e < 6; e++) {
        if (!(none & (1u << e))) continue;
        if (o->experiments)
            return al__err(err, AL_E_INVALID,
                           "--experiments %s: nothing to compute at these lengths (the longest "
                           "L = %d leaves it no N below L)",
                           en[e], maxL);
        if (p->rank == 0)
            al__log(AL_LOG_WARNING,
                    "attnlim reproduce: experiment %s has nothing to compute at these lengths "
                    "(the longest L = %d; results.json: options.experiments_empty)",
                    en[e], maxL);
    }
    p->empty_exp = none;
    return 0;
}

/* The grids of Algorithms 1-4, sorted, unique, clipped to what L allows. */
static int plan_grids(plan *p, const al_repro_opts *o, int ctx, al_error *err) {
    int n, rc;
    const int *g = pick(o->lengths, o->n_lengths, o->quick, quick_lengths, COUNT(quick_lengths),
                        def_lengths, COUNT(def_lengths), &n);
    for (int i = 0; i < n; i++)
        if (o->lengths && (g[i] < 2 || g[i] > ctx))
            return al__err(err, AL_E_INVALID,
                           "--lengths: %d is outside 2..%d (the model's context)", g[i], ctx);
    if (!(p->Ls = uniq_ints(g, n, 2, ctx, &p->nL, err))) return AL_E_NOMEM;
    g = pick(o->top_n, o->n_top_n, o->quick, quick_top_n, COUNT(quick_top_n), def_top_n,
             COUNT(def_top_n), &n);
    if (!(p->N2 = uniq_ints(g, n, 1, p->long_L - 1, &p->nN2, err))) return AL_E_NOMEM;
    int *cg = NULL; /* the default critical-N grid depends on the lengths (to L - 1) */
    if (o->critical_n) {
        g = o->critical_n, n = o->n_critical_n;
    } else {
        if ((rc = crit_grid(p->Ls, p->nL, o->quick, &cg, &n, err))) return rc;
        g = cg;
    }
    p->N3 = uniq_ints(g, n, 1, 1 << 30, &p->nN3, err);
    free(cg);
    if (!p->N3) return AL_E_NOMEM;
    g = pick(o->separability_n, o->n_separability_n, o->quick, quick_sep_n, COUNT(quick_sep_n),
             def_sep_n, COUNT(def_sep_n), &n);
    if (!(p->N4 = uniq_ints(g, n, 1, p->long_L - 1, &p->nN4, err))) return AL_E_NOMEM;
    return check_grids_apply(p, o, err);
}

/* The readings of METHOD section 9 that the options alone decide: names in range,
 * --expectation mc with samples (al_reproduce checks them before it creates anything). */
int al__ex_check_reading_opts(const al_repro_opts *o, al_error *err) {
    if (o->distance < AL_DIST_SUM_OF_NORMS || o->distance > AL_DIST_SUM_VECTOR)
        return al__err(err, AL_E_INVALID,
                       "--distance: %d is not one of sum-of-norms, norm-of-sum, sum-vector",
                       (int)o->distance);
    if (o->expectation < AL_EXPECT_ANALYTIC || o->expectation > AL_EXPECT_EXACT)
        return al__err(err, AL_E_INVALID, "--expectation: %d is not one of analytic, mc, exact",
                       (int)o->expectation);
    if ((unsigned)o->vectors > AL_VEC_RESIDUAL)
        return al__err(err, AL_E_INVALID,
                       "--vectors: %d is not one of value, key, hidden, residual, embedding",
                       (int)o->vectors);
    if (o->expectation == AL_EXPECT_MC && o->mc_samples < 1)
        return al__err(err, AL_E_INVALID,
                       "--expectation mc needs Monte-Carlo samples (--mc S with S >= 1)");
    if (o->exact_max < 0 || o->exact_max > AL_EXACT_MAX_LIMIT)
        return al__err(err, AL_E_INVALID, "--exact-max: %lld is outside 1..%d",
                       (long long)o->exact_max, AL_EXACT_MAX_LIMIT);
    return 0;
}

/* ... and, with the plan, --expectation exact only where every job's C(L, N) is within the cap
 * (before any work). */
static int check_readings(const plan *p, al_error *err) {
    const al_repro_opts *o = &p->o;
    int rc = al__ex_check_reading_opts(o, err);
    if (rc || o->expectation != AL_EXPECT_EXACT) return rc;
    for (int i = 0; i < p->n_jobs; i++) {
        const job *j = &p->jobs[i];
        rc = al_exact_check(j->L, j->Nd, j->nd, o->exact_max, err);
        if (rc) return al__err_prefix(err, rc, "L = %d (the N of Algorithms 1-3 at that L)", j->L);
    }
    return 0;
}

int64_t al__ex_row_n(const plan *p, int h, int64_t t, int64_t L) {
    int win = p->m && p->n_head > 0 ? al__model_layer_window(p->m, h / p->n_head) : 0;
    return al__row_n(t, L, p->causal, win);
}

int al__ex_build_plan(plan *p, const al_repro_opts *o, const al_model_info *mi, int rank,
                      al_error *err) {
    memset(p, 0, sizeof *p);
    p->rank = rank; /* its warnings: rank 0 only */
    p->o = *o;
    p->exp = o->experiments ? (o->experiments & AL_EXP_ALL) : AL_EXP_ALL;
    p->n_layer = mi->n_layer;
    p->n_head = mi->n_head;
    p->H = mi->n_layer * mi->n_head;
    p->causal = mi->causal;
    if (p->H <= 0) return al__err(err, AL_E_FORMAT, "%s: model has no attention heads", mi->path);
    int ctx = mi->n_ctx;
    int rc;
    if ((rc = al__ex_sel_mask(o->layers, o->n_layers, p->n_layer, "--layers", &p->lmask,
                              &p->n_sel_layers, err)) ||
        (rc = al__ex_sel_mask(o->heads, o->n_heads, p->n_head, "--heads", &p->hmask,
                              &p->n_sel_heads, err)))
        return al__err_prefix(err, rc, "%s", mi->path);
    /* long L */
    int want_long = o->long_length > 0 ? o->long_length : (o->quick ? 64 : 1024);
    if (o->long_length > ctx)
        return al__err(err, AL_E_INVALID,
                       "--long-length %d is above the model's context of %d tokens", o->long_length,
                       ctx);
    p->long_L = want_long < ctx ? want_long : ctx;
    if (p->long_L < 2)
        return al__err(err, AL_E_INVALID, "the model's context (%d) is too short", ctx);
    if ((rc = plan_grids(p, o, ctx, err))) return rc;
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
    qsort(p->T, (size_t)p->nT, sizeof(double), al__ex_cmp_dbl);
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
    return rc ? rc : check_readings(p, err);
}

/* The largest N whose dmax a job reports: Algorithm 1's N at the lengths, Algorithm 2's grid at
 * the long window (Algorithm 3 reads dtilde and E only); the metrics keep d1 up to there
 * (here, beside the plan: jobs.c computes by it and partial.c checks by it). */
int al__ex_bound_n(const plan *p, const job *j) {
    int b = 0;
    if (j->in_lengths && (p->exp & AL_EXP_ALG1)) b = ALG1_N;
    if (j->is_long && (p->exp & AL_EXP_ALG2))
        for (int i = 0; i < p->nN2; i++) b = p->N2[i] > b ? p->N2[i] : b;
    return b;
}
