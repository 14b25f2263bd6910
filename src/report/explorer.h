/* explorer.h: the interactive per-head explorer of report.html and diagnose.html. A section of
 * self-contained HTML (inline CSS and script, no network): one clickable layer x head heatmap
 * per metric; choosing a head (click, or Enter/arrows on the focused grid) shows its row of
 * metrics, its flags, a sparkline per curve against N and its attention pattern over a short
 * window with the token strings (hover, or arrows on the pattern, show the weight). Every
 * string is escaped (textsafe.h); the script writes strings with textContent only.
 * H = n_layer * n_head heads, head index = layer * n_head + head. */
#ifndef AL_EXPLORER_H
#define AL_EXPLORER_H

#include "internal.h"

enum { AL__EXPLORER_MAX_METRICS = 12, AL__EXPLORER_MAX_CURVES = 4 };

typedef struct al__explorer_curve {
    const char *name; /* e.g. "N_s/N" */
    int n;
    const int *x;    /* [n] the N of each point */
    const double *v; /* [n, H] NaN = not computed */
} al__explorer_curve;

typedef struct al__explorer {
    int n_layer, n_head;
    int n_metrics;
    const char *metric_key[AL__EXPLORER_MAX_METRICS];   /* short name: "dtilde", "spectral_norm" */
    const char *metric_label[AL__EXPLORER_MAX_METRICS]; /* heading of its heatmap */
    const double *metric[AL__EXPLORER_MAX_METRICS];     /* [H] each, NaN = not computed */
    int metric_map[AL__EXPLORER_MAX_METRICS];           /* 1: drawn as a heatmap, 0: row only */
    const char *const *flags; /* [H] space-separated flags ("" none), or NULL */
    const char *flags_note;   /* how the flags were computed, or NULL */
    const char *head_note;    /* one sentence shown with every head (critical N is over heads) */
    int n_curves;
    al__explorer_curve curve[AL__EXPLORER_MAX_CURVES];
    /* the short window: W tokens, weights [H, W, W] (row t = query t over keys 0..W-1) */
    int W, causal;
    const char *window_note;  /* where the window came from */
    const char *const *token; /* [W] token strings */
    const int *token_id;      /* [W] or NULL */
    const float *weights;     /* [H, W, W] or NULL (then no pattern) */
} al__explorer;

/* The flags of one head from its mean max weight, mean H / log n and mean weight on token 0
 * (NaN: not measured, that rule not applied): "collapsed" (max weight > 0.9 or H / log n < 0.1),
 * "vanishing" (H / log n > 0.95), "sink" (weight on token 0 > 0.5), space-separated into buf
 * ("" when none). Returns the number of flags. The thresholds are docs/diagnose.md's. */
#define AL__FLAG_COLLAPSED_MAX_W 0.9
#define AL__FLAG_COLLAPSED_ENT   0.1
#define AL__FLAG_VANISHING_ENT   0.95
#define AL__FLAG_SINK            0.5
int al__head_flags(double max_w, double ent, double sink, char *buf, size_t size);

/* Writes the explorer <section> (its data, style and script) into html. */
int al__explorer_html(al__afile *html, const al__explorer *x, al_error *err);
/* Writes a whole self-contained page: <title>, an <h1>, a paragraph and the explorer. */
int al__explorer_page(const char *path, const char *title, const char *intro, const al__explorer *x,
                      al_error *err);

#endif
