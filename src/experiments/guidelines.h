/* guidelines.h: private to `attnlim guidelines` (guidelines.c: the plan, the runs, --resume;
 * guidelines_out.c: JSON, CSV, figures, report). */
#ifndef AL_GUIDELINES_H
#define AL_GUIDELINES_H

#include "experiments.h"
#include "ops.h"

/* One variant of the grid at one L. */
typedef enum { GV_DENSE = 0, GV_TOPK, GV_RULE, GV_NORM } gv_kind;

typedef struct gvar {
    gv_kind kind;
    char name[64];      /* "dense", "topk:16", "topk-sqrt:1", "sparsemax" */
    al_attn_variant v;  /* rule and normalizer (every layer, every head) */
    double k_at_L;      /* keys kept by the last row (n = L); L for the normalizers */
    double mean_kept;   /* mean over rows of the keys kept */
    double *nll;        /* [windows] */
    double mean, delta; /* mean NLL, mean - dense mean */
    int loaded;         /* from --resume */
} gvar;

typedef struct glen {
    int L;
    int n_var;
    gvar *var; /* [n_var], var[0] dense */
    /* the smallest fixed k within 1% / 5% of the dense mean NLL (0: none below L) */
    int k_suff[2];
    double crit[2]; /* KS critical N of reproduce at levels 0.01, 0.05 (NaN: none) */
} glen;

/* Per-layer monitoring of one variant at one L (window 0). */
typedef struct gmon {
    char name[64];
    int L, N;        /* the window length and the N of N_s/N (monitor_n, below L) */
    double *entropy; /* [n_layer] mean over heads and rows (n >= 2) of H / ln n */
    double *ns;      /* [n_layer] mean over heads of N_s/N at N = monitor_n */
    double *maxw;    /* [n_layer] mean over heads and rows of the max weight */
} gmon;

typedef struct guide {
    al_guide_opts o;
    al_model *m;
    const al_model_info *mi;
    int n_len;
    glen *len; /* [n_len] */
    int32_t *tokens;
    size_t n_tokens;
    char corpus_sha[65], fingerprint[65];
    al_framing fr; /* BOS first in the text or not (the model's default recorded) */
    const char *corpus;
    double fit[2][3];     /* [1%, 5%][linear, sqrt, log]: c of k = c f(L) */
    double fit_rms[2][3]; /* relative RMS residual of each fit */
    char crit_source[4200];
    int monitor_L, monitor_n, n_mon; /* monitor_L: the L of the figures */
    gmon *mon;                       /* [n_mon]: every monitored (L, variant) */
    uint8_t *mask_l, *mask_h; /* [n_layer], [n_head]: --attention-layers / -heads (NULL: all) */
    char subset[512];         /* "layers all; heads all" or the lists (manifest, partials) */
    al_dist *dist;            /* the processes (dist.h): (variant, window) forwards round robin */
    int rank, size;           /* rank 0 reads, decides --resume, writes, prints */
    int n_forwards;           /* this rank's forwards */
    double *rank_forwards;    /* [size] on rank 0 with several ranks: each rank's forwards */
    int n_reused, n_computed;
    double t_start, t_forward;
    char started[32];
} guide;

static const double AL__GUIDE_LEVELS[2] = {0.01, 0.05}; /* within 1% and 5% of dense */

int al__guide_write(guide *g, al_error *err); /* guidelines_out.c */

#endif
