/* report.h: what the pipeline (reproduce.c) hands to the figure and report writers
 * (report.c): the aggregated results of every experiment, already averaged over windows,
 * plus the per-head values needed for box plots and heatmaps. H = n_layer * n_head heads,
 * head index = layer * n_head + head. */
#ifndef AL_REPORT_H
#define AL_REPORT_H

#include "explorer.h"
#include "internal.h"

typedef struct al__verdict {
    const char
        *key; /* "critical_n", "separability", "sensitivity", "distance_linear", "convergence" */
    const char *claim;   /* the paper's claim */
    char measured[512];  /* our number(s) */
    const char *verdict; /* "holds", "does not hold", "not testable on this model" */
    char why[1024];
    const char *reading; /* the METHOD [reading] this result depends on, or NULL */
} al__verdict;

/* One reading of `reproduce --readings` for the report's "Verdicts under every reading". */
typedef struct al__reading_col {
    const char *name;       /* "the run", "distance=norm-of-sum", "vectors=key,distance=...,..." */
    int cross;              /* of the cross product (the critical-N claim only) */
    const char *verdict[6]; /* per claim, in the order of verdicts (NULL: not evaluated) */
    int own[6];             /* 1: judged under this reading; 0: the run's (not changed by it) */
    const int *crit;        /* [nL] N_crit at 0.01 (-1 not reached), or NULL */
    int n_ratio;            /* the median over heads of dtilde / E at the largest L ... */
    const double *ratio_x, *ratio_med; /* [n_ratio] ... against N / L */
} al__reading_col;

typedef struct al__summary {
    /* setup */
    const char *out_dir;
    char model_name[128], model_path[1024], model_sha[65], family[16];
    struct cJSON *model_json; /* the model's manifest object (al__model_json), owned */
    const char *corpus, *vectors, *normalizer; /* normalizer: "softmax (model)" when none */
    /* the readings of METHOD 9: al_distance_name, al_expect_name, "scaled"|"raw",
     * "shared"|"fresh" */
    const char *distance, *expectation, *temperature_scale, *directions;
    int synthetic;   /* 1: random weights */
    int sums_to_one; /* the normalizer's weights sum to 1 */
    int causal, n_layer, n_head, d_head, n_ctx, windows, long_L, quick;
    int64_t n_tokens;    /* corpus tokens */
    char framing[256];   /* how the corpus became windows (BOS, [CLS] ... [SEP]) */
    char selection[256]; /* --layers / --heads: the heads analysed ("" all) */
    unsigned experiments;
    uint64_t seed;
    int mc_samples;
    double seconds_total;
    int n_timings;
    const char *timing_name[8];
    double timing_s[8];
    /* Algorithm 1 (N = 5): [nL] summaries over heads of the per-head means */
    int nL;
    const int *Ls;                       /* [nL] */
    al_five *a1_dtilde, *a1_E, *a1_dmax; /* [nL] */
    const double *a1_win; /* [windows, nL] per window the mean over heads of dtilde, or NULL */
    /* Algorithm 2 (L = long_L) */
    int nN2;
    const int *N2;                       /* [nN2] */
    al_five *a2_dtilde, *a2_E, *a2_dmax; /* [nN2] */
    const double *a2_win;                /* [windows, nN2] as a1_win, or NULL */
    /* Algorithm 3 */
    int nN3;
    const int *N3;                  /* [nN3] */
    double *a3_p;                   /* [nL, nN3] KS p-values (NaN where N >= L) */
    double *a3_dt_mean, *a3_E_mean; /* [nL, nN3] mean over heads */
    int *a3_crit[2];                /* [nL] critical N at 0.01 and 0.05 (-1 not reached) */
    double a3_slope[2];             /* c at 0.01, 0.05 (NaN when no L reached) */
    /* Algorithm 4 (L = long_L) */
    int nN4;
    const int *N4;                           /* [nN4] */
    al_five *a4_ratio, *a4_lower, *a4_upper; /* [nN4] */
    /* Algorithm 5 */
    int nT, nE;
    const double *T, *eps; /* [nT], [nE] */
    double *g;             /* [nT, nE] max over heads of the mean finite-difference delta */
    double *spec;          /* [nT] max over heads of the mean exact spectral norm */
    int n_flagged;         /* measured values above 1/(4T) */
    /* vanishing (L = long_L): per row position t (n = t+1 causal, L otherwise), over heads */
    int vL;
    double *v_n;                             /* [vL] keys per row */
    double *v_max_med, *v_max_q1, *v_max_q3; /* [vL] max weight */
    double *v_ent_med, *v_ent_q1, *v_ent_q3; /* [vL] H / log n */
    double *v_band_lo, *v_band_hi;           /* [vL] median over heads of e^{-+2D}/n (softmax) */
    double v_inside;  /* fraction of (head, row) whose max weight lies within the band */
    int band_applies; /* Corollary 1 is about softmax */
    /* heatmaps [H] (NaN = not computed) */
    int n_heatmaps;
    const char *hm_name[8], *hm_title[8], *hm_label[8]; /* file name, title, colour-bar label */
    double *hm[8];
    /* the explorer of report.html: the pipeline fills the curves against N and the short window
     * (ex.n_curves, ex.curve, ex.W, ex.causal, ex.token, ex.token_id, ex.weights,
     * ex.window_note); al__report_write adds the heatmaps as its metrics and the flags */
    al__explorer ex;
    /* verdicts */
    int n_verdicts;
    al__verdict verdicts[6];
    /* --readings: the run and every variant (0: the section is left out) */
    int n_readings;
    const al__reading_col *readings; /* [n_readings] */
    const char *robust;              /* the claims with one verdict under every reading */
    const char *readings_skipped;    /* the readings left out, and why ("" if none) */
} al__summary;

/* Draws every figure into s->out_dir (figN.svg / .png, heatmap_*.svg / .png). */
int al__report_figures(const al__summary *s, al_error *err);
/* Writes report.md and report.html (PNGs inline as base64) into s->out_dir. */
int al__report_write(const al__summary *s, al_error *err);

#endif
