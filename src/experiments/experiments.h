/* experiments.h: private to src/experiments (the `attnlim reproduce` and `attnlim diagnose`
 * layer). One file per concern:
 *   plan.c          options and grids; the plan: (window, L) jobs and their grids
 *   jobs.c          one job: the forward with its observer (every head of a layer), the merge
 *   partial.c       OUT/partial: jobs saved atomically, loaded on --resume; lock, sweep, run.json
 *   aggregate.c     window means per head, summaries over heads, KS / critical N
 *   heatmaps.c      layer x head heatmaps of the headline statistics
 *   verdicts.c      the paper's claims against the measurements
 *   results_json.c  results.json (+ the layer's JSON helpers)
 *   results_csv.c   the CSV and NPY outputs
 *   own_tokens.c    models that bring their own tokens (attention dumps)
 *   reproduce.c     al_reproduce / al_reproduce_dist: the driver
 *   diagnose.c      al_diagnose / al_diagnose_dist
 * Internal names carry the layer's prefix al__ex_. */
#ifndef AL_EXPERIMENTS_H
#define AL_EXPERIMENTS_H

#include "dist.h"
#include "internal.h"
#include "model.h"
#include "plot.h"
#include "progress.h"
#include "report.h"
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>

#define ALG1_N 5

/* ---- the plan: grids and jobs (plan.c) */

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
    const al_model *m; /* its layers' sliding windows (al__ex_row_n); NULL: none */
    int long_L;
    int nL, nN2, nN3, nN4, nT, nE;
    int *Ls, *N2, *N3, *N4; /* [nL], [nN2], [nN3], [nN4] */
    double *T, *eps;        /* [nT], [nE] */
    int n_jobs;
    job *jobs; /* [windows * distinct L] */
    al_norm nm;
    int have_nm;          /* re-normalise logits with nm */
    char fingerprint[65]; /* of everything that changes a job's numbers (but window and L) */
    /* given grid values that apply to no L (--top-n, --critical-n, --separability-n): reported
     * on stderr and in results.json (issue 12: never dropped silently); the first 32 of each */
    int dropped[3][32], n_dropped[3];
    unsigned empty_exp; /* experiments of the default set left with nothing to compute */
    /* what --resume did: jobs reused / computed, of which saved but not matching, and the temp
     * files of interrupted runs removed at the start */
    int n_reused, n_recomputed, n_stale, n_swept;
    /* the processes (dist.h): every rank computes the heads it owns; rank 0 merges, writes */
    al_dist *dist;
    int rank, size;
    rank_info *ranks; /* [size] on rank 0 */
    /* --layers / --heads: the heads analysed (NULL: all; the others stay NaN), how many */
    uint8_t *lmask, *hmask; /* [n_layer], [n_head] */
    int n_sel_layers, n_sel_heads;
    al_framing fr; /* how the corpus becomes windows (every rank: encoder, wrap, cls, sep) */
} plan;
/* --layers / --heads v[n] (indices into 0..count-1) as a mask *mask[count] (NULL: all, when v
 * is NULL or n is 0); *n_sel how many are kept (may be NULL). */
int al__ex_sel_mask(const int *v, int n, int count, const char *what, uint8_t **mask, int *n_sel,
                    al_error *err);
/* Is head h (layer-major) analysed (--layers / --heads)? */
int al__ex_head_selected(const plan *p, int h);

int al__ex_cmp_dbl(const void *a, const void *b);
/* The number of keys row t of head h (layer * n_head + head) sees in a window of L: METHOD's n
 * (t + 1 causal, min(t + 1, the layer's sliding window) with one, L bidirectional). */
int64_t al__ex_row_n(const plan *p, int h, int64_t t, int64_t L);
double *al__ex_alloc_nan(size_t n, al_error *err); /* [n] NaN */
int al__ex_check_reading_opts(const al_repro_opts *o, al_error *err);
/* rank: this process's MPI rank (0 alone); only rank 0 prints the plan's warnings. */
int al__ex_build_plan(plan *p, const al_repro_opts *o, const al_model_info *mi, int rank,
                      al_error *err);
void al__ex_free_plan(plan *p);

/* ---- one job (jobs.c) */

/* Per thread: one head's arrays. */
typedef struct scratch {
    double *w, *z;        /* [L, L] */
    double *x;            /* [L, dx] */
    double *q, *k;        /* [L, d_head] */
    al_topn_stats *st;    /* [max(nd, ns)] */
    al_reading_stats *rd; /* [2 (max(nd, ns) + 1)] (jobs.c: a pair of readings) */
    double *G;            /* [L, L] X X^T of x, shared by the metrics calls on these vectors */
    int g_layer, g_head, g_vec; /* whose G it holds (g_layer -1: none) */
    uint16_t *rank; /* [L, L] the rows' ranking of w (al__head_rank), shared by the calls on w */
    void *kvs;      /* [32 L bytes] its sort scratch */
    int r_layer, r_head, r_L, r_have_nm; /* whose w rank holds (r_layer -1: none) */
    al_norm r_nm;                        /* ... and its normalizer (when r_have_nm) */
    int w_layer, w_head, w_have_nm;      /* whose w it holds (w_layer -1: none; jobs.c) */
    al_norm w_nm;
    int z_layer, z_head;        /* whose z it holds (-1: none) */
    int x_layer, x_head, x_vec; /* whose x it holds (-1: none) */
    double vsec[64][4]; /* --readings: this thread's CPU seconds of each reading's heads (jobs.c) */
} scratch;

void al__ex_to_double(const float *src, double *dst, size_t n);
int al__ex_row_stats(const double *w, int64_t L, int causal, int window, double *rmax, double *rent,
                     al_error *err);
/* The largest N whose dmax job j reports (Algorithm 1's N at the lengths, Algorithm 2's grid
 * at the long window): the metrics compute dmax up to there only, NaN beyond (jobs.c). */
int al__ex_bound_n(const plan *p, const job *j);
double al__ex_process_cpu(void);
void al__ex_free_scratch(scratch *sc, int n);
unsigned al__ex_job_what(const plan *p, const job *j);
double al__ex_job_units(const job *j);
/* One job's forward: the heads of plan p's job j and, on the same capture, those of every
 * variant's job of the same (window, L) (vj[v] NULL: variant v has none); nv <= 64. */
int al__ex_run_job(const plan *p, al_model *m, const int32_t *tokens, job *j, const plan *const *vp,
                   job *const *vj, int nv, al__progress *pg, al_error *err);

/* The heads of one capture a rank computes (those it owns, dist.h), over n_threads threads
 * with one scratch each; done[h] counts each head computed. */
typedef struct al__ex_heads {
    const al_capture *cap;
    int n_head;
    al_dist *dist;
    int rank, n_threads;
    scratch *sc;   /* [n_threads] */
    uint8_t *done; /* [H] */
} al__ex_heads;
/* A unit of work on one capture: head i of cap, context k (-1: the run's own; else reading k),
 * part (0: the metrics on the weights; 1: Algorithm 5 on the logits; jobs.c). */
typedef struct al__ex_unit {
    int i, k, part;
} al__ex_unit;
/* One unit with a thread's scratch; adds the CPU seconds it spends to tsec[4]. */
typedef int (*al__ex_unit_fn)(void *ctx, const al_capture *cap, const al__ex_unit *u, scratch *sc,
                              double tsec[4], al_error *err);
/* fn over units[n_units] in parallel, those of one head consecutive: each thread takes the next
 * of its own contiguous share, then the last ones left in the largest share (so the threads keep
 * to their own heads, whose scratch they hold, until the end of the layer); tsec[4] receives the
 * sum of the threads' seconds and done[h] counts each head of this rank once. The first error stops
 * the other units and is returned. Before each unit, thread 0 (the caller's) asks the caller's
 * progress callback (al_set_progress): a stop is AL_E_CANCELLED. */
int al__ex_each_unit(const al__ex_heads *hs, const al__ex_unit *units, int n_units,
                     al__ex_unit_fn fn, void *ctx, double tsec[4], al_error *err);
/* *out: one unit {i, -1, 0} per head of hs->cap this rank computes; returns their count (-1: no
 * memory). */
int al__ex_head_units(const al__ex_heads *hs, al__ex_unit **out, al_error *err);

/* ---- partial results (partial.c) */

typedef struct named_arr {
    const char *name;
    double *data;
    int ndim;
    int64_t shape[2];
} named_arr;

int al__ex_job_arrays(const plan *p, job *j, named_arr *a);
int al__ex_save_job(const plan *p, const job *j, al_error *err);
int al__ex_load_job(const plan *p, job *j);
int al__ex_lock_out_dir(const char *dir, int *fd, al_error *err);
int al__ex_sweep_dir(const char *dir, int depth, int *removed, al_error *err);
cJSON *al__ex_run_options(const plan *p, const al_model_info *mi, const char *corpus_sha);
int al__ex_check_run_options(const plan *p, const cJSON *now, al_error *err);

/* ---- aggregation (aggregate.c), heatmaps (heatmaps.c), verdicts (verdicts.c) */

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
    /* the explorer's short window (window.c): weights [H, W, W], ids and strings [W] */
    float *ex_w;
    int *ex_ids, ex_nw;
    char **ex_tok;
    char ex_note[512];
    al__summary s;
} agg;

int al__ex_idx_of(const int *v, int n, int x);
double al__ex_mean_finite(const double *x, int n);
void al__ex_free_agg(agg *a);
int al__ex_aggregate(plan *p, agg *a, al_error *err);
int al__ex_nearest_d(const double *v, int n, double x);
int al__ex_nearest_i(const int *v, int n, int x);
int al__ex_build_heatmaps(const plan *p, agg *a, char titles[6][160], al_error *err);
/* s->verdicts from the summary's grids and statistics (verdicts.c) */
void al__ex_verdicts(al__summary *s);

/* ---- writers (results_json.c, results_csv.c) */

cJSON *al__ex_jnum(double v);
cJSON *al__ex_jarr_d(const double *v, size_t n);
cJSON *al__ex_jarr_i(const int *v, size_t n);
/* {"of_layer": [n_layer] each layer's causal sliding window (0 = none), "means"} */
cJSON *al__ex_window_json(const al_model *m);
void al__ex_now_iso(char *buf, size_t size);
int al__ex_write_json(const plan *p, agg *a, const char *corpus_sha, const char *started,
                      al_error *err);
int al__ex_write_csvs(const plan *p, agg *a, al_error *err);
int al__ex_write_npys(const plan *p, agg *a, al_error *err);

/* ---- --readings (readings.c): variants of the run's options sharing its forward passes */

typedef struct variant {
    char name[128];  /* "distance=norm-of-sum", "vectors=key,distance=sum-vector,expectation=mc" */
    int cross;       /* 1: of the cross product for the critical-N claim (Algorithm 3 only) */
    al_repro_opts o; /* the run's options with this reading (experiments: those it changes) */
    char out_dir[4200]; /* OUT/readings/<name>: its partial results, results.json and NPYs */
    plan p;
    agg a;
} variant;

/* The variants of o->readings ("all" or "AXIS=VALUE[,AXIS=VALUE];..."), or an error naming what
 * is allowed; none when o->readings is NULL. */
int al__ex_readings_variants(const al_repro_opts *o, variant **out, int *n, al_error *err);
void al__ex_free_variants(variant *v, int n);
/* OUT/readings.json and OUT/readings.csv from the run (p, a) and its variants. */
int al__ex_write_readings(const plan *p, const agg *a, const variant *v, int nv,
                          const char *skipped, al_error *err);
/* The report's columns (the run first; *cols, *buf malloc'ed) and the robust claims. */
int al__ex_reading_cols(const plan *p, const agg *a, const variant *v, int nv,
                        al__reading_col **cols, double **buf, char *robust, size_t rsize,
                        al_error *err);

/* ---- the explorer's window (window.c) */

#define AL__EX_WINDOW     24 /* tokens of the explorer's pattern (at most the smallest L) */
#define AL__EX_WINDOW_MAX 64
/* The curves against N into a->s.ex; then the first W tokens as their own window: every head's
 * weights and the token strings (tk NULL: "#id"). Rank 0 only (a local forward). */
int al__ex_explorer_window(const plan *p, al_model *m, al_tokenizer *tk, const int32_t *tokens,
                           size_t n_tokens, agg *a, al_error *err);
int al__ex_write_explorer(const plan *p, const agg *a, al_error *err); /* explorer_weights.npy */
/* Every head's weights [H, W, W] (*w malloc'ed; nm NULL: the model's, else nm over the logits)
 * of tokens [W] run as their own window; heads not captured NaN. */
int al__ex_window_weights(al_model *m, const al_norm *nm, const int32_t *tokens, int W, float **w,
                          al_error *err);
/* The tokenizer's bytes of each id, *out [W] malloc'ed (tk NULL or an id it cannot decode:
 * "#id"); freed by al__ex_free_strings. */
int al__ex_token_strings(al_tokenizer *tk, const int32_t *ids, int W, char ***out, al_error *err);
void al__ex_free_strings(char **s, int n);
void al__ex_explorer_json(const agg *a, cJSON *root); /* results.json "explorer" */
void al__ex_free_explorer(agg *a);

/* ---- diagnose's outputs (diagnose_out.c) */

typedef struct al__ex_diag {
    int n_layer, n_head, L, nN, causal, n_measured;
    const int *Ns;                           /* [nN] */
    const double *max_w, *ent, *sink, *spec; /* [H] NaN: a head not measured (--layers/--heads) */
    const double *ns;                        /* [H, nN] */
    int flags_ok;                            /* the weights sum to 1: flags are computed */
    const char *own_label; /* no --normalizer: what made the weights (the model's own) */
    /* the explorer's window (W = 0: none) */
    int W;
    const float *w; /* [H, W, W] */
    char **tok;     /* [W] */
    const int *ids; /* [W] */
    const char *window_note;
    const int32_t *win;   /* [L] the diagnosed window's ids */
    al_tokenizer *tk;     /* their strings (NULL: a dump's) */
    const al_framing *fr; /* how the corpus became it (NULL: a dump's own tokens) */
} al__ex_diag;

/* The JSON report into *json (malloc'ed); with o->out_dir also diagnose.json, .md, .html and
 * diagnose_flags.svg/.png. */
/* A 0 default / 1 on / 2 off option (bos, wrap) as al_framing_make's -1 / 1 / 0. */
int al__ex_switch(int v);
/* "token_ids" and "tokens" (their strings; "#id" where one does not decode) of ids[n] into o. */
int al__ex_tokens_json(al_tokenizer *tk, const int32_t *ids, int n, cJSON *o, al_error *err);
int al__ex_diag_write(const al_diag_opts *o, al_model *m, const al__ex_diag *d, char **json,
                      al_error *err);
/* The flags of head h with the values that raised them, "sink (mean weight on token 0 = 0.83 >
 * 0.5), ..." into buf ("" when none); returns how many rules fired. */
int al__ex_diag_flag_text(const al__ex_diag *d, int h, char *buf, size_t size);

/* ---- the driver (reproduce.c) */

int al__ex_same_model(al_dist *dist, const al_model_info *mi, al_error *err);

/* ---- models with their own tokens (own_tokens.c) */

int al__ex_own_tokens_opts(al_model *m, const char *corpus_given, const char *bad_window,
                           al_repro_opts *o, int *one_L, const int32_t **own, int *n_own,
                           char *label, size_t label_size, al_error *err);
int al__ex_no_observer(void *user, const al_capture *cap, al_error *err);
int al__ex_own_tokens_preflight(const plan *p, al_model *m, al_error *err);

#endif
