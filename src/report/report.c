/* report.c: the figures of `attnlim reproduce` (from the aggregated results) and the two
 * reports, report.md and report.html (self-contained: PNGs inline as base64 data URIs). Both
 * reports are written from one sequence of blocks (headings, paragraphs, tables, figures). */
#include "report.h"
#include "textsafe.h"

#include "plot.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- figures ----------------------------------------------------------------------------------
 */

static int fig_path(const al__summary *s, const char *name, char *out, size_t size) {
    return snprintf(out, size, "%s/%s", s->out_dir, name) >= (int)size;
}

/* y on a log axis when the data spans more than ~1.5 decades */
static int wants_log(const double *v, int n) {
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > 0 && isfinite(v[i])) {
            if (v[i] < lo) lo = v[i];
            if (v[i] > hi) hi = v[i];
        }
    return hi > 0 && hi / lo > 30;
}

typedef struct fivecols {
    double *mean, *q1, *q3; /* [n] */
} fivecols;

static int split_five(const al_five *f, int n, fivecols *c, al_error *err) {
    c->mean = al__malloc(sizeof(double) * (size_t)(n ? n : 1) * 3, "figure", err);
    if (!c->mean) return AL_E_NOMEM;
    c->q1 = c->mean + n;
    c->q3 = c->mean + 2 * n;
    for (int i = 0; i < n; i++) {
        c->mean[i] = f[i].mean;
        c->q1[i] = f[i].q1;
        c->q3[i] = f[i].q3;
    }
    return 0;
}

/* Over the W windows of win [W, n] (per window the mean over heads; non-finite ones left out),
 * per column: c->mean the median, c->q1, c->q3 the quartiles (NaN where no window has one). */
static int window_spread(const double *win, int W, int n, fivecols *c, al_error *err) {
    c->mean = al__malloc(sizeof(double) * (size_t)(n ? n : 1) * 3 + sizeof(double) * (size_t)W,
                         "figure", err);
    if (!c->mean) return AL_E_NOMEM;
    c->q1 = c->mean + n, c->q3 = c->mean + 2 * n;
    double *col = c->mean + 3 * n; /* [W] */
    for (int i = 0; i < n; i++) {
        int k = 0;
        for (int w = 0; w < W; w++)
            if (isfinite(win[(size_t)w * n + i])) col[k++] = win[(size_t)w * n + i];
        al_five f = {.median = NAN, .q1 = NAN, .q3 = NAN};
        if (k) al_five_number(col, (size_t)k, &f, NULL);
        c->mean[i] = f.median, c->q1[i] = f.q1, c->q3[i] = f.q3;
    }
    return 0;
}

/* fig2a / fig2b: dtilde, E and dmax (mean over heads, interquartile band) against x; with
 * several windows also dtilde's mean over heads as the median and IQR band over the windows
 * (win [s->windows, n]). */
static int fig_distance(const al__summary *s, const char *name, const char *title,
                        const char *subtitle, const char *xlabel, const int *xi, int n,
                        const al_five *dt, const al_five *E, const al_five *dm, const double *win,
                        al_error *err) {
    if (n <= 0) return 0;
    double *x = al__malloc(sizeof(double) * (size_t)n, "figure", err);
    if (!x) return AL_E_NOMEM;
    for (int i = 0; i < n; i++) x[i] = xi[i];
    fivecols a, b, c, wv = {0};
    int rc = split_five(dt, n, &a, err), nw = win && s->windows > 1;
    if (!rc) rc = split_five(E, n, &b, err);
    if (!rc) rc = split_five(dm, n, &c, err);
    if (!rc && nw) rc = window_spread(win, s->windows, n, &wv, err);
    if (rc) {
        free(x);
        return rc;
    }
    char wlabel[96];
    snprintf(wlabel, sizeof wlabel, "dtilde, mean over heads: median, IQR over %d windows",
             s->windows);
    al__series se[4] = {
        {.label = "dtilde: true distance (mean, IQR over heads)",
         .n = n,
         .x = x,
         .y = a.mean,
         .lo = a.q1,
         .hi = a.q3,
         .style = AL__S_LINE | AL__S_MARKERS,
         .color = 0},
        {.label = "E: random selection (mean, IQR over heads)",
         .n = n,
         .x = x,
         .y = b.mean,
         .lo = b.q1,
         .hi = b.q3,
         .style = AL__S_LINE | AL__S_MARKERS,
         .color = 1},
        {.label = "dmax: upper bound (mean over heads)",
         .n = n,
         .x = x,
         .y = c.mean,
         .style = AL__S_DASHED | AL__S_MARKERS,
         .color = 3},
        {.label = wlabel,
         .n = n,
         .x = x,
         .y = wv.mean,
         .lo = wv.q1,
         .hi = wv.q3,
         .style = AL__S_DASHED,
         .color = 2},
    };
    double all[3 * 64];
    int k = 0;
    for (int i = 0; i < n && k < 190; i++)
        all[k++] = a.mean[i], all[k++] = b.mean[i], all[k++] = c.mean[i];
    al__plot p = {.title = title,
                  .subtitle = subtitle,
                  .xlabel = xlabel,
                  .ylabel = "distance",
                  .xlog = 1,
                  .ylog = wants_log(all, k),
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = NAN,
                  .ymax = NAN,
                  .n_series = 3 + nw,
                  .series = se,
                  .n_xticks = n,
                  .xticks = x};
    char path[4200];
    fig_path(s, name, path, sizeof path);
    rc = al__plot_write(&p, path, err);
    free(wv.mean);
    free(a.mean);
    free(b.mean);
    free(c.mean);
    free(x);
    return rc;
}

static int fig2c(const al__summary *s, al_error *err) {
    int n = s->nL;
    if (n <= 0) return 0;
    double x[64], y1[64], y5[64], f1[64], f5[64], pap[64], xl[2], yl1[2], yl5[2], ylp[2];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        x[i] = s->Ls[i];
        y1[i] = s->a3_crit[0][i] > 0 ? s->a3_crit[0][i] : NAN;
        y5[i] = s->a3_crit[1][i] > 0 ? s->a3_crit[1][i] : NAN;
        f1[i] = s->a3_slope[0] * x[i];
        f5[i] = s->a3_slope[1] * x[i];
        pap[i] = 0.06 * x[i];
    }
    xl[0] = 0;
    xl[1] = x[n - 1];
    yl1[0] = yl5[0] = ylp[0] = 0;
    yl1[1] = s->a3_slope[0] * xl[1];
    yl5[1] = s->a3_slope[1] * xl[1];
    ylp[1] = 0.06 * xl[1];
    (void)f1;
    (void)f5;
    (void)pap;
    char l1[96], l5[96];
    snprintf(l1, sizeof l1, "fit N = c L at 0.01: c = %.3g", s->a3_slope[0]);
    snprintf(l5, sizeof l5, "fit N = c L at 0.05: c = %.3g", s->a3_slope[1]);
    al__series se[5] = {
        {.label = "critical N (KS p >= 0.01)",
         .n = n,
         .x = x,
         .y = y1,
         .style = AL__S_MARKERS,
         .color = 0},
        {.label = "critical N (KS p >= 0.05; ringed, so that both show where they coincide)",
         .n = n,
         .x = x,
         .y = y5,
         .style = AL__S_MARKERS | AL__S_RING,
         .color = 1},
        {.label = l1, .n = 2, .x = xl, .y = yl1, .style = AL__S_LINE | AL__S_THIN, .color = 0},
        {.label = l5, .n = 2, .x = xl, .y = yl5, .style = AL__S_DASHED | AL__S_THIN, .color = 1},
        {.label = "paper: N = 0.06 L",
         .n = 2,
         .x = xl,
         .y = ylp,
         .style = AL__S_DASHED,
         .color = -1},
    };
    char sub[160];
    int reached = 0;
    for (int i = 0; i < n; i++) reached += s->a3_crit[0][i] > 0;
    snprintf(sub, sizeof sub,
             "KS test over heads of per-head mean dtilde vs E; reached at %d of %d lengths "
             "(missing = not reached)",
             reached, n);
    al__plot p = {.title = "Fig. 2c: critical top-N against L",
                  .subtitle = sub,
                  .xlabel = "L (tokens)",
                  .ylabel = "critical N",
                  .xmin = 0,
                  .xmax = NAN,
                  .ymin = 0,
                  .ymax = NAN,
                  .n_series = 5,
                  .series = se};
    char path[4200];
    fig_path(s, "fig2c", path, sizeof path);
    return al__plot_write(&p, path, err);
}

static int fig3(const al__summary *s, al_error *err) {
    int n = s->nN4;
    if (n <= 0) return 0;
    al__box *b = al__malloc(sizeof(al__box) * (size_t)n, "figure", err);
    double *x = al__malloc(sizeof(double) * (size_t)n * 3, "figure", err);
    if (!b || !x) {
        free(b);
        free(x);
        return AL_E_NOMEM;
    }
    double *lo = x + n, *hi = x + 2 * n;
    for (int i = 0; i < n; i++) {
        const al_five *f = &s->a4_ratio[i];
        x[i] = s->N4[i];
        b[i] = (al__box){x[i], f->min, f->q1, f->median, f->q3, f->max, f->mean};
        lo[i] = s->a4_lower[i].median;
        hi[i] = s->a4_upper[i].median;
    }
    double bx[2] = {x[0] / 1.5, x[n - 1] * 1.5}, b70[2] = {0.70, 0.70}, b85[2] = {0.85, 0.85};
    al__series se[4] = {
        {.label = "lower bound (median over heads)",
         .n = n,
         .x = x,
         .y = lo,
         .style = AL__S_DASHED | AL__S_MARKERS,
         .color = 2},
        {.label = "upper bound (median over heads)",
         .n = n,
         .x = x,
         .y = hi,
         .style = AL__S_DASHED | AL__S_MARKERS,
         .color = 3},
        {.label = "paper: 0.70-0.85 after N ~ 16",
         .n = 2,
         .x = bx,
         .y = b70,
         .style = AL__S_THIN,
         .color = -1},
        {.label = NULL, .n = 2, .x = bx, .y = b85, .style = AL__S_THIN, .color = -1},
    };
    char sub[160];
    snprintf(sub, sizeof sub,
             "L = %d; boxes: quartiles over %d heads, whiskers min-max, diamond = mean; bounds "
             "[reading]",
             s->long_L, s->n_layer * s->n_head);
    al__plot p = {.title = "Fig. 3: geometric separability N_s / N",
                  .subtitle = sub,
                  .xlabel = "N (selected tokens)",
                  .ylabel = "N_s / N",
                  .xlog = 1,
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = -0.02,
                  .ymax = 1.08,
                  .n_series = 4,
                  .series = se,
                  .n_boxes = n,
                  .boxes = b,
                  .box_label = "N_s/N over heads",
                  .n_xticks = n,
                  .xticks = x};
    char path[4200];
    fig_path(s, "fig3", path, sizeof path);
    int rc = al__plot_write(&p, path, err);
    free(b);
    free(x);
    return rc;
}

/* What Fig. 4 can say about the normalizer that was used: the paper's curve is about softmax;
 * sparsemax's Jacobian norm is exactly 1/T on any support of two or more (0 on one), entmax's
 * (alpha <= 2) at most max_i p_i^(2-alpha) / T <= 1/T; nothing closed-form for the others. */
typedef enum { FIG4_SOFTMAX, FIG4_ONE_OVER_T, FIG4_NO_BOUND } fig4_kind;
static fig4_kind fig4_kind_of(const char *normalizer, const char **own_label) {
    al_norm nm;
    al_error e = {0};
    *own_label = NULL;
    if (!normalizer || !strncmp(normalizer, "softmax (", 9) || al_norm_parse(normalizer, &nm, &e) ||
        nm.kind == AL_NORM_SOFTMAX)
        return FIG4_SOFTMAX;
    if (nm.kind == AL_NORM_SPARSEMAX) {
        *own_label = "sparsemax: exactly 1/T on any support of >= 2 tokens";
        return FIG4_ONE_OVER_T;
    }
    if ((nm.kind == AL_NORM_ENTMAX15 || nm.kind == AL_NORM_ENTMAX) && nm.alpha <= 2) {
        *own_label = "entmax: at most max_i p_i^(2-alpha) / T <= 1/T";
        return FIG4_ONE_OVER_T;
    }
    return FIG4_NO_BOUND;
}

static int fig4(const al__summary *s, al_error *err) {
    int nT = s->nT, nE = s->nE;
    if (nT <= 0) return 0;
    const char *own_label;
    fig4_kind kind = fig4_kind_of(s->normalizer, &own_label);
    int ns = nE + 4;
    size_t nring = (size_t)nT * (nE + 1);
    al__series *se = al__calloc((size_t)ns, sizeof(al__series), "figure", err);
    /* g per eps [nE, nT], the paper's curve, the second curve [nT] each, rings x, y [nring] */
    double *buf = al__malloc(sizeof(double) * ((size_t)nT * (nE + 2) + 2 * nring), "figure", err);
    char(*labels)[64] = al__malloc(64 * (size_t)(nE + 1), "figure", err);
    if (!se || !buf || !labels) {
        free(se);
        free(buf);
        free(labels);
        return AL_E_NOMEM;
    }
    for (int e = 0; e < nE; e++) {
        double *y = buf + (size_t)e * nT;
        for (int t = 0; t < nT; t++) y[t] = s->g[(size_t)t * nE + e];
        snprintf(labels[e], 64, "finite difference, eps = %g", s->eps[e]);
        se[e] = (al__series){.label = labels[e],
                             .n = nT,
                             .x = s->T,
                             .y = y,
                             .style = AL__S_LINE | AL__S_MARKERS,
                             .color = e};
    }
    double *pb = buf + (size_t)nE * nT, *sb = buf + (size_t)(nE + 1) * nT;
    for (int t = 0; t < nT; t++) {
        double b = 1 / (4 * s->T[t]);
        pb[t] = b < sqrt(2.0) ? b : sqrt(2.0);
        sb[t] = kind == FIG4_SOFTMAX ? 1 / (2 * s->T[t]) : 1 / s->T[t];
    }
    se[nE] = (al__series){.label = "exact spectral norm (max over heads)",
                          .n = nT,
                          .x = s->T,
                          .y = s->spec,
                          .style = AL__S_LINE,
                          .color = 4};
    se[nE + 1] =
        (al__series){.label = kind == FIG4_SOFTMAX ? "paper: min{1/(4T), sqrt 2}"
                                                   : "paper (about softmax): min{1/(4T), sqrt 2}",
                     .n = nT,
                     .x = s->T,
                     .y = pb,
                     .style = AL__S_DASHED,
                     .color = -1};
    se[nE + 2] = (al__series){.label = kind == FIG4_SOFTMAX ? "softmax supremum 1/(2T)" : own_label,
                              .n = kind == FIG4_NO_BOUND ? 0 : nT,
                              .x = s->T,
                              .y = sb,
                              .style = AL__S_DASHED,
                              .color = 5};
    /* every measured value above the paper's curve as plotted, ringed */
    double *fx = sb + nT, *fy = fx + nring;
    int nf = 0;
    for (int t = 0; t < nT; t++)
        for (int e = 0; e <= nE; e++) {
            double v = e < nE ? s->g[(size_t)t * nE + e] : s->spec[t];
            if (v > pb[t]) fx[nf] = s->T[t], fy[nf++] = v;
        }
    se[nE + 3] = (al__series){.label = nf ? "measured above the paper's curve" : NULL,
                              .n = nf,
                              .x = fx,
                              .y = fy,
                              .style = AL__S_MARKERS | AL__S_RING,
                              .color = 3};
    char sub[300], xl[160];
    int raw = s->temperature_scale && !strcmp(s->temperature_scale, "raw");
    snprintf(sub, sizeof sub,
             "L = %d, %s, max over heads; %d measured values above the paper's curve%s; %s "
             "directions; [reading] T on the %s scale (the other scale's T = this T %s %.3g)",
             s->long_L, strncmp(s->normalizer, "softmax (", 9) ? s->normalizer : "softmax (model)",
             nf, kind == FIG4_NO_BOUND ? "; no closed-form bound" : "",
             s->directions ? s->directions : "shared", raw ? "raw" : "scaled", raw ? "/" : "x",
             sqrt((double)s->d_head));
    snprintf(xl, sizeof xl, "temperature T on %s",
             raw ? "raw logits q.k (the paper's axis)" : "scaled logits q.k/sqrt(d_head)");
    al__plot p = {.title = "Fig. 4: gradient sensitivity against temperature",
                  .subtitle = sub,
                  .xlabel = xl,
                  .ylabel = "||J v|| (finite difference) / spectral norm",
                  .xlog = 1,
                  .ylog = 1,
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = NAN,
                  .ymax = NAN,
                  .n_series = ns,
                  .series = se};
    char path[4200];
    fig_path(s, "fig4", path, sizeof path);
    int rc = al__plot_write(&p, path, err);
    free(se);
    free(buf);
    free(labels);
    return rc;
}

static int fig_vanishing(const al__summary *s, al_error *err) {
    int n = s->vL;
    if (n <= 0) return 0;
    /* causal: row t sees n = t + 1 keys, the x axis is n. Bidirectional: every row sees n = L
     * keys; the x axis is then the row position t + 1 (n is constant). */
    double *inv = al__malloc(sizeof(double) * (size_t)n * 2, "figure", err);
    if (!inv) return AL_E_NOMEM;
    double *xs = inv + n;
    for (int t = 0; t < n; t++) {
        inv[t] = 1.0 / s->v_n[t];
        xs[t] = s->causal ? s->v_n[t] : t + 1;
    }
    const char *xl = s->causal ? "n (keys seen by the row)"
                               : "row position t + 1 (bidirectional: every row sees n = L keys)";
    al__series se[4] = {
        {.label = "max weight (median, IQR over heads)",
         .n = n,
         .x = xs,
         .y = s->v_max_med,
         .lo = s->v_max_q1,
         .hi = s->v_max_q3,
         .style = AL__S_LINE,
         .color = 0},
        {.label = "uniform 1/n", .n = n, .x = xs, .y = inv, .style = AL__S_DASHED, .color = -1},
        {.label = "Corollary 1: e^(2D)/n (median D)",
         .n = n,
         .x = xs,
         .y = s->v_band_hi,
         .style = AL__S_DASHED,
         .color = 3},
        {.label = "Corollary 1: e^(-2D)/n (median D)",
         .n = n,
         .x = xs,
         .y = s->v_band_lo,
         .style = AL__S_DASHED,
         .color = 2},
    };
    char sub[200];
    if (s->band_applies)
        snprintf(sub, sizeof sub,
                 "L = %d, %s; max weight inside the band for %.4g%% of (head, row) pairs",
                 s->long_L,
                 s->causal ? "one row per n (causal: n = t + 1)" : "every row sees n = L keys",
                 100 * s->v_inside);
    else
        snprintf(sub, sizeof sub,
                 "L = %d; weights from %s: Corollary 1's band is about softmax and is not drawn",
                 s->long_L, s->normalizer);
    al__plot p = {.title = s->causal ? "Vanishing attention: max weight against n"
                                     : "Vanishing attention: max weight per row",
                  .subtitle = sub,
                  .xlabel = xl,
                  .ylabel = "max attention weight",
                  .xlog = 1,
                  .ylog = 1,
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = NAN,
                  .ymax = 1.5,
                  .n_series = s->band_applies ? 4 : 2,
                  .series = se};
    double lo = INFINITY;
    for (int t = 0; t < n; t++) {
        if (s->v_max_q1[t] > 0 && s->v_max_q1[t] < lo) lo = s->v_max_q1[t];
        if (inv[t] < lo) lo = inv[t];
    }
    p.ymin = isfinite(lo) ? lo / 3 : NAN;
    /* Corollary 1's band on the chart: the y range grows to hold it within [1e-12, 1e4] (log
     * axis); where it lies beyond even that (large D), the legend prints its values instead */
    double bhi = 0, blo = INFINITY;
    for (int t = 0; t < n && s->band_applies; t++) {
        if (s->v_band_hi[t] > bhi) bhi = s->v_band_hi[t];
        if (s->v_band_lo[t] > 0 && s->v_band_lo[t] < blo) blo = s->v_band_lo[t];
    }
    if (bhi * 1.5 > p.ymax) p.ymax = bhi * 1.5 < 1e4 ? bhi * 1.5 : 1e4;
    if (isfinite(blo) && blo / 1.5 < p.ymin) p.ymin = blo / 1.5 > 1e-12 ? blo / 1.5 : 1e-12;
    int hi_in = 1, lo_in = 1; /* every point of the curve on the chart */
    for (int t = 0; t < n; t++) {
        hi_in &= s->v_band_hi[t] <= p.ymax;
        lo_in &= !(s->v_band_lo[t] < p.ymin);
    }
    char lhi[160], llo[160], vhi[96], vlo[96];
    snprintf(vhi, sizeof vhi, ": leaves the chart above, %.3g at n = %g to %.3g at n = %g",
             s->v_band_hi[0], xs[0], s->v_band_hi[n - 1], xs[n - 1]);
    snprintf(vlo, sizeof vlo, ": leaves the chart below, %.3g at n = %g to %.3g at n = %g",
             s->v_band_lo[0], xs[0], s->v_band_lo[n - 1], xs[n - 1]);
    snprintf(lhi, sizeof lhi, "Corollary 1: e^(2D)/n (median D)%s", hi_in ? "" : vhi);
    snprintf(llo, sizeof llo, "Corollary 1: e^(-2D)/n (median D)%s", lo_in ? "" : vlo);
    se[2].label = lhi;
    se[3].label = llo;
    char path[4200];
    fig_path(s, "vanishing", path, sizeof path);
    int rc = al__plot_write(&p, path, err);
    if (!rc) {
        al__series e = {.label = "H / log n (median, IQR over heads)",
                        .n = n,
                        .x = xs,
                        .y = s->v_ent_med,
                        .lo = s->v_ent_q1,
                        .hi = s->v_ent_q3,
                        .style = AL__S_LINE,
                        .color = 0};
        al__plot q = {.title = s->causal ? "Vanishing attention: normalised entropy against n"
                                         : "Vanishing attention: normalised entropy per row",
                      .subtitle = "1 = uniform over the n keys",
                      .xlabel = xl,
                      .ylabel = "entropy / log n",
                      .xlog = 1,
                      .xmin = NAN,
                      .xmax = NAN,
                      .ymin = 0,
                      .ymax = 1.05,
                      .n_series = 1,
                      .series = &e};
        fig_path(s, "vanishing_entropy", path, sizeof path);
        rc = al__plot_write(&q, path, err);
    }
    free(inv);
    return rc;
}

/* --readings: N_crit / L against L, and the median over heads of dtilde / E against N / L at
 * the largest L, one curve per reading that ran Algorithm 3 (the run thick, the others thin). */
static int fig_readings(const al__summary *s, al_error *err) {
    int nr = s->n_readings < 48 ? s->n_readings : 48, n = s->nL < 64 ? s->nL : 64, ns = 0;
    al__series se[50];
    double x[64], y[48][64], xl[2] = {0, n ? s->Ls[n - 1] : 1}, yp[2] = {0.06, 0.06};
    for (int i = 0; i < n; i++) x[i] = s->Ls[i];
    for (int k = 0; k < nr; k++) {
        const al__reading_col *c = &s->readings[k];
        if (!c->crit) continue;
        for (int i = 0; i < n; i++) y[k][i] = c->crit[i] > 0 ? (double)c->crit[i] / x[i] : NAN;
        /* series s: colour s mod 10, marker s mod 4 (20 distinct), dashed from the 11th */
        se[ns] = (al__series){.label = c->name,
                              .n = n,
                              .x = x,
                              .y = y[k],
                              .style = AL__S_LINE | AL__S_MARKERS | (k ? AL__S_THIN : 0) |
                                       (ns >= 10 ? AL__S_DASHED : 0),
                              .color = ns};
        ns++;
    }
    if (!ns) return 0;
    se[ns++] = (al__series){.label = "paper: N_crit / L = 0.06",
                            .n = 2,
                            .x = xl,
                            .y = yp,
                            .style = AL__S_DASHED,
                            .color = -1};
    al__plot p = {.title = "Critical N / L against L under every reading",
                  .subtitle = "KS at 0.01 of per-head dtilde vs E; missing points: not reached "
                              "up to N = L - 1 [reading]",
                  .xlabel = "L (tokens)",
                  .ylabel = "N_crit / L",
                  .xmin = 0,
                  .xmax = NAN,
                  .ymin = 0,
                  .ymax = NAN,
                  .n_series = ns,
                  .series = se};
    char path[4200];
    fig_path(s, "fig_readings_crit", path, sizeof path);
    int rc = al__plot_write(&p, path, err);
    ns = 0;
    for (int k = 0; k < nr && !rc; k++) {
        const al__reading_col *c = &s->readings[k];
        if (!c->n_ratio) continue;
        se[ns] = (al__series){.label = c->name,
                              .n = c->n_ratio,
                              .x = c->ratio_x,
                              .y = c->ratio_med,
                              .style = AL__S_LINE | (k ? AL__S_THIN : AL__S_MARKERS) |
                                       (ns >= 10 ? AL__S_DASHED : 0),
                              .color = ns};
        ns++;
    }
    if (rc || !ns) return rc;
    char sub[160];
    snprintf(sub, sizeof sub,
             "L = %d; median over heads of per-head mean dtilde / per-head mean E; 1 = the KS "
             "samples meet",
             s->nL ? s->Ls[s->nL - 1] : 0);
    al__plot q = {.title = "True distance over its random-selection counterpart, against N / L",
                  .subtitle = sub,
                  .xlabel = "N / L",
                  .ylabel = "dtilde / E (median over heads)",
                  .ylog = 1,
                  .xmin = 0,
                  .xmax = 1,
                  .ymin = NAN,
                  .ymax = NAN,
                  .n_series = ns,
                  .series = se};
    fig_path(s, "fig_readings_ratio", path, sizeof path);
    return al__plot_write(&q, path, err);
}

int al__report_figures(const al__summary *s, al_error *err) {
    int rc = 0;
    char sub[160];
    if (s->experiments & (1u << 1)) {
        snprintf(sub, sizeof sub, "N = 5, vectors = %s, %d window(s)", s->vectors, s->windows);
        rc = fig_distance(s, "fig2a", "Fig. 2a: distance against context length", sub, "L (tokens)",
                          s->Ls, s->nL, s->a1_dtilde, s->a1_E, s->a1_dmax, s->a1_win, err);
    }
    if (!rc && (s->experiments & (1u << 2))) {
        snprintf(sub, sizeof sub, "L = %d, vectors = %s, %d window(s)", s->long_L, s->vectors,
                 s->windows);
        rc = fig_distance(s, "fig2b", "Fig. 2b: distance against top-N", sub, "N (selected tokens)",
                          s->N2, s->nN2, s->a2_dtilde, s->a2_E, s->a2_dmax, s->a2_win, err);
    }
    if (!rc && (s->experiments & (1u << 3))) rc = fig2c(s, err);
    if (!rc && (s->experiments & (1u << 4))) rc = fig3(s, err);
    if (!rc && (s->experiments & (1u << 5))) rc = fig4(s, err);
    if (!rc && (s->experiments & (1u << 0))) rc = fig_vanishing(s, err);
    if (!rc && s->n_readings > 0) rc = fig_readings(s, err);
    for (int i = 0; i < s->n_heatmaps && !rc; i++) {
        al__plot p = {.title = s->hm_title[i],
                      .xlabel = "head",
                      .ylabel = "layer",
                      .hm_rows = s->n_layer,
                      .hm_cols = s->n_head,
                      .hm = s->hm[i],
                      .hm_clabel = s->hm_label[i]};
        char path[4200];
        fig_path(s, s->hm_name[i], path, sizeof path);
        rc = al__plot_write(&p, path, err);
    }
    return rc;
}

/* ---- the reports: one sequence of blocks, two renderings ----------------------------------------
 */

typedef struct doc {
    al__afile md, html;
    al_error *err;
    const char *dir;
    int rc;
} doc;

/* untrusted text (model names, paths, messages) escaped where it is written (textsafe.h) */
static void html_esc(doc *d, const char *s) {
    al__html_escape(&d->html, s, d->err);
}

static void md_esc(doc *d, const char *s) {
    size_t cap = strlen(s) * 3 + 1;
    char *t = malloc(cap);
    if (!t) return;
    al__md_text(s, t, cap);
    al__afile_printf(&d->md, d->err, "%s", t);
    free(t);
}

static void heading(doc *d, int level, const char *text) {
    al__afile_printf(&d->md, d->err, "\n%.*s ", level, "######");
    md_esc(d, text);
    al__afile_printf(&d->md, d->err, "\n\n");
    al__afile_printf(&d->html, d->err, "<h%d>", level);
    html_esc(d, text);
    al__afile_printf(&d->html, d->err, "</h%d>\n", level);
}

static void para(doc *d, const char *fmt, ...) AL_PRINTF(2, 3);
static void para(doc *d, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    md_esc(d, buf);
    al__afile_printf(&d->md, d->err, "\n\n");
    al__afile_printf(&d->html, d->err, "<p>");
    html_esc(d, buf);
    al__afile_printf(&d->html, d->err, "</p>\n");
}

static void note(doc *d, const char *fmt, ...) AL_PRINTF(2, 3);
static void note(doc *d, const char *fmt, ...) { /* a highlighted [reading] / warning */
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    al__afile_printf(&d->md, d->err, "> ");
    md_esc(d, buf);
    al__afile_printf(&d->md, d->err, "\n\n");
    al__afile_printf(&d->html, d->err, "<p class=\"note\">");
    html_esc(d, buf);
    al__afile_printf(&d->html, d->err, "</p>\n");
}

static void table_row(doc *d, int ncol, const char *const *cells, int header) {
    al__afile_printf(&d->md, d->err, "|");
    al__afile_printf(&d->html, d->err, "<tr>");
    for (int i = 0; i < ncol; i++) {
        al__afile_printf(&d->md, d->err, " ");
        md_esc(d, cells[i]);
        al__afile_printf(&d->md, d->err, " |");
        al__afile_printf(&d->html, d->err, header ? "<th>" : "<td>");
        html_esc(d, cells[i]);
        al__afile_printf(&d->html, d->err, header ? "</th>" : "</td>");
    }
    al__afile_printf(&d->md, d->err, "\n");
    al__afile_printf(&d->html, d->err, "</tr>\n");
    if (header) {
        al__afile_printf(&d->md, d->err, "|");
        for (int i = 0; i < ncol; i++) al__afile_printf(&d->md, d->err, "---|");
        al__afile_printf(&d->md, d->err, "\n");
    }
}
static void table_begin(doc *d) {
    al__afile_printf(&d->md, d->err, "\n");
    al__afile_printf(&d->html, d->err, "<table>\n");
}
static void table_end(doc *d) {
    al__afile_printf(&d->md, d->err, "\n");
    al__afile_printf(&d->html, d->err, "</table>\n");
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void figure(doc *d, const char *name, const char *caption) {
    al__afile_printf(&d->md, d->err, "![%s](%s.png)\n\n*", name, name); /* our own names */
    md_esc(d, caption);
    al__afile_printf(&d->md, d->err, "* ([SVG](%s.svg))\n\n", name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.png", d->dir, name);
    char *png = NULL;
    size_t len = 0;
    al_error e = {0};
    al__afile_printf(&d->html, d->err, "<figure>");
    if (al__read_file(path, 64u << 20, &png, &len, &e) == 0) {
        al__afile_printf(&d->html, d->err, "<img alt=\"%s\" src=\"data:image/png;base64,", name);
        char out[4 * 1024 + 8];
        size_t k = 0;
        const unsigned char *u = (const unsigned char *)png;
        for (size_t i = 0; i < len; i += 3) {
            unsigned v = (unsigned)u[i] << 16 | (i + 1 < len ? (unsigned)u[i + 1] << 8 : 0) |
                         (i + 2 < len ? u[i + 2] : 0);
            out[k++] = b64[(v >> 18) & 63];
            out[k++] = b64[(v >> 12) & 63];
            out[k++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
            out[k++] = i + 2 < len ? b64[v & 63] : '=';
            if (k >= 4 * 1024) {
                al__afile_write(&d->html, out, k, d->err);
                k = 0;
            }
        }
        al__afile_write(&d->html, out, k, d->err);
        al__afile_printf(&d->html, d->err, "\">");
        free(png);
    } else {
        al__afile_printf(&d->html, d->err, "<p>(figure %s missing: ", name);
        html_esc(d, e.msg);
        al__afile_printf(&d->html, d->err, ")</p>");
    }
    al__afile_printf(&d->html, d->err, "<figcaption>");
    html_esc(d, caption);
    al__afile_printf(&d->html, d->err, "</figcaption></figure>\n");
}

static const char *verdict_of(const al__summary *s, const char *key) {
    for (int i = 0; i < s->n_verdicts; i++)
        if (!strcmp(s->verdicts[i].key, key)) return s->verdicts[i].verdict;
    return "not run";
}

static void fmt_list_i(char *buf, size_t size, const int *v, int n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k + 12 < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%d", i ? ", " : "", v[i]);
}

/* --readings, the numbers behind the matrix: N_crit / L per L of every reading that ran
 * Algorithm 3, and (why it lands there) the median dtilde / E at a few N / L of the largest L. */
static void readings_numbers(doc *d, const al__summary *s) {
    static const double at[8] = {0.004, 0.02, 0.0625, 0.125, 0.25, 0.5, 0.75, 1.0};
    int nL = s->nL < 8 ? s->nL : 8;
    char hdr[9][24], row[9][24];
    const char *hd[9] = {"reading"}, *cells[9];
    para(d, "N_crit / L per L (KS at 0.01; none: p below 0.01 at every N up to L - 1):");
    table_begin(d);
    for (int i = 0; i < nL; i++) snprintf(hdr[i], sizeof hdr[i], "L = %d", s->Ls[i]);
    for (int i = 0; i < nL; i++) hd[i + 1] = hdr[i];
    table_row(d, nL + 1, hd, 1);
    for (int k = 0; k < s->n_readings; k++) {
        const al__reading_col *c = &s->readings[k];
        if (!c->crit) continue;
        cells[0] = c->name;
        for (int i = 0; i < nL; i++) {
            if (c->crit[i] > 0)
                snprintf(row[i], sizeof row[i], "%.3f", (double)c->crit[i] / s->Ls[i]);
            else
                snprintf(row[i], sizeof row[i], "none");
            cells[i + 1] = row[i];
        }
        table_row(d, nL + 1, cells, 0);
    }
    table_end(d);
    para(d,
         "Why it lands there: the median over heads of dtilde / E (per-head means) at L = %d, at "
         "the grid's N / L nearest to each column (1 = the KS samples meet):",
         nL ? s->Ls[s->nL - 1] : 0);
    table_begin(d);
    for (int i = 0; i < 8; i++) snprintf(hdr[i], sizeof hdr[i], "N/L ~ %g", at[i]);
    for (int i = 0; i < 8; i++) hd[i + 1] = hdr[i];
    table_row(d, 9, hd, 1);
    for (int k = 0; k < s->n_readings; k++) {
        const al__reading_col *c = &s->readings[k];
        if (!c->n_ratio) continue;
        cells[0] = c->name;
        for (int i = 0; i < 8; i++) {
            int b = 0;
            for (int q = 1; q < c->n_ratio; q++)
                if (fabs(c->ratio_x[q] - at[i]) < fabs(c->ratio_x[b] - at[i])) b = q;
            snprintf(row[i], sizeof row[i], "%.3g (%.3f)", c->ratio_med[b], c->ratio_x[b]);
            cells[i + 1] = row[i];
        }
        table_row(d, 9, cells, 0);
    }
    table_end(d);
}

/* --readings: the matrix reading x claim (the verdict, '=' where the reading does not change the
 * claim and the run's verdict stands), the robust claims, the figures. */
static void readings_section(doc *d, const al__summary *s) {
    heading(d, 2, "Verdicts under every reading");
    para(d,
         "Every claim above judged again under each reading of METHOD section 9 (docs/"
         "readings.md), on the same captured heads: each alternative one at a time around the "
         "run's options, and the cross product vectors x distance x expectation for the critical "
         "N (its readings interact). A claim with one verdict under every reading is robust; the "
         "others depend on the reading. Numbers of each reading: readings.json, readings.csv, "
         "readings/<name>/results.json.");
    table_begin(d);
    const char *hd[7] = {"reading"};
    int nc = s->n_verdicts < 6 ? s->n_verdicts : 6;
    for (int c = 0; c < nc; c++) hd[c + 1] = s->verdicts[c].key;
    table_row(d, nc + 1, hd, 1);
    for (int k = 0; k < s->n_readings; k++) {
        const al__reading_col *r = &s->readings[k];
        char cell[6][64];
        const char *cells[7] = {r->name};
        for (int c = 0; c < nc; c++) {
            snprintf(cell[c], sizeof cell[c], "%s%s", r->verdict[c] ? r->verdict[c] : "-",
                     r->verdict[c] && !r->own[c] ? " (=)" : "");
            cells[c + 1] = cell[c];
        }
        table_row(d, nc + 1, cells, 0);
    }
    table_end(d);
    para(d,
         "(=): the reading does not change that claim; the run's verdict stands. -: not evaluated "
         "under that reading (the cross product is for the critical N only).");
    para(d, "Robust (one verdict under every reading): %s.",
         s->robust && s->robust[0] ? s->robust : "none");
    if (s->readings_skipped && s->readings_skipped[0]) { /* "name: why" lines, one note each */
        note(d, "Readings left out (they do not apply to this run):");
        for (const char *l = s->readings_skipped; *l;) {
            const char *nl = strchr(l, '\n');
            int len = (int)(nl ? nl - l : (ptrdiff_t)strlen(l));
            note(d, "- %.*s", len, l);
            l = nl ? nl + 1 : l + len;
        }
    }
    readings_numbers(d, s);
    figure(d, "fig_readings_crit",
           "N_crit / L against L under every reading that ran Algorithm 3, with the paper's 0.06.");
    figure(d, "fig_readings_ratio",
           "Why the critical N lands where it does: the per-head ratio of the true distance to its "
           "random-selection counterpart against N / L, median over heads, at the largest L.");
}

/* The explorer of report.html: every heatmap as a metric, flags from the max weight and the
 * entropy (diagnose's rules; no sink rule: reproduce does not measure the weight on token 0),
 * the pipeline's curves and window. flags: [H] strings of 32 bytes. */
typedef struct ex_scratch {
    char (*flags)[32]; /* [H] */
    const char **fp;   /* [H] */
    double *crit;      /* [H] */
    char note[1024], crit_key[64];
} ex_scratch;

static void report_explorer(const al__summary *s, al__explorer *x, ex_scratch *sc) {
    char(*flags)[32] = sc->flags;
    const char **fp = sc->fp;
    double *crit = sc->crit;
    char *note = sc->note, *crit_key = sc->crit_key;
    size_t note_size = sizeof sc->note;
    *x = s->ex;
    x->n_layer = s->n_layer;
    x->n_head = s->n_head;
    x->n_metrics = 0;
    const double *mw = NULL, *en = NULL;
    for (int i = 0; i < s->n_heatmaps && x->n_metrics < AL__EXPLORER_MAX_METRICS; i++) {
        const char *key = s->hm_label[i];
        if (!strcmp(s->hm_name[i], "heatmap_max_weight")) mw = s->hm[i];
        if (!strcmp(s->hm_name[i], "heatmap_entropy")) en = s->hm[i];
        x->metric_key[x->n_metrics] = key;
        x->metric_label[x->n_metrics] = s->hm_title[i];
        x->metric_map[x->n_metrics] = 1;
        x->metric[x->n_metrics++] = s->hm[i];
    }
    int H = s->n_layer * s->n_head;
    if ((s->experiments & (1u << 3)) && s->nL > 0 && crit &&
        x->n_metrics < AL__EXPLORER_MAX_METRICS) {
        int c = s->a3_crit[1][s->nL - 1]; /* the same for every head: a KS test over heads */
        for (int h = 0; h < H; h++) crit[h] = c > 0 ? c : NAN;
        snprintf(crit_key, sizeof sc->crit_key, "critical N (all heads, L = %d)", s->Ls[s->nL - 1]);
        x->metric_key[x->n_metrics] = crit_key;
        x->metric_label[x->n_metrics] = crit_key;
        x->metric_map[x->n_metrics] = 0;
        x->metric[x->n_metrics++] = crit;
    }
    x->flags = NULL;
    if (mw && en) {
        for (int h = 0; h < H; h++) {
            al__head_flags(mw[h], en[h], NAN, flags[h], sizeof flags[h]);
            fp[h] = flags[h];
        }
        x->flags = fp;
        x->flags_note = "flags: collapsed = mean max weight > 0.9 or mean H / log n < 0.1; "
                        "vanishing = mean H / log n > 0.95 (diagnose's rules, docs/diagnose.md, "
                        "on the long window; the sink rule needs `attnlim diagnose`)";
        if (!s->sums_to_one)
            x->flags_note = "no flags: the normalizer's weights do not sum to 1, and the rules "
                            "(max weight, entropy) are about weights that do";
        if (!s->sums_to_one) x->flags = NULL;
    }
    size_t k = 0;
    note[0] = 0;
    if (s->experiments & (1u << 3)) {
        k += (size_t)snprintf(note, note_size,
                              "critical N is not a per-head value: it comes from a KS test over "
                              "all heads together; at p >= 0.05:");
        for (int i = 0; i < s->nL && k + 40 < note_size; i++) {
            int c = s->a3_crit[1][i];
            if (c > 0)
                k += (size_t)snprintf(note + k, note_size - k, " N = %d at L = %d;", c, s->Ls[i]);
            else
                k += (size_t)snprintf(note + k, note_size - k, " not reached at L = %d;", s->Ls[i]);
        }
        if (k && note[k - 1] == ';') note[k - 1] = '.';
    }
    x->head_note = note[0] ? note : NULL;
}

static void write_explorer(doc *d, const al__summary *s) {
    int H = s->n_layer * s->n_head;
    if (H <= 0 || (s->n_heatmaps == 0 && s->ex.n_curves == 0 && !s->ex.weights)) return;
    ex_scratch sc = {.flags = malloc(sizeof *sc.flags * (size_t)H),
                     .fp = malloc(sizeof *sc.fp * (size_t)H),
                     .crit = malloc(sizeof *sc.crit * (size_t)H)};
    if (sc.flags && sc.fp && sc.crit) {
        al__explorer x;
        report_explorer(s, &x, &sc);
        if (al__explorer_html(&d->html, &x, d->err)) d->html.failed = true;
    } else {
        al__err(d->err, AL_E_NOMEM, "out of memory writing the explorer of report.html");
        d->html.failed = true;
    }
    free(sc.flags);
    free(sc.fp);
    free(sc.crit);
}

/* report.md and report.html written top to bottom. Long on purpose (over 150 lines): it is the
 * document's text in order, each section a few calls; the sections' logic is in the helpers. */
int al__report_write(const al__summary *s, al_error *err) {
    doc d = {.err = err, .dir = s->out_dir};
    char path[4200];
    snprintf(path, sizeof path, "%s/report.md", s->out_dir);
    int rc = al__afile_open(&d.md, path, err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/report.html", s->out_dir);
    if ((rc = al__afile_open(&d.html, path, err))) {
        al__afile_abort(&d.md);
        return rc;
    }
    char safe_name[6 * sizeof s->model_name + 1];
    al__html_text(s->model_name, safe_name, sizeof safe_name);
    al__afile_printf(
        &d.html, err,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnlim "
        "reproduce: %s</title>\n"
        "<style>body{font-family:DejaVu "
        "Sans,Helvetica,Arial,sans-serif;max-width:1000px;margin:2em auto;"
        "padding:0 1em;color:#222;line-height:1.45}table{border-collapse:collapse;margin:1em "
        "0;font-size:0.92em}"
        "td,th{border:1px solid #bbb;padding:4px "
        "8px;vertical-align:top;text-align:left}th{background:#eee}"
        "img{max-width:100%%;border:1px solid #ddd}figure{margin:1.5em "
        "0}figcaption{font-size:0.9em;color:#444}"
        ".note{background:#fff6dd;border-left:4px solid #e0a800;padding:0.5em 0.8em}"
        "code{background:#f3f3f3;padding:0 3px}</style></head><body>\n",
        safe_name);
    char buf[2048];
    heading(&d, 1, "Limitations of normalization in attention: paper vs. measured");
    snprintf(buf, sizeof buf, "Model %s (%s), corpus %s", s->model_name, s->family, s->corpus);
    para(&d,
         "%s. Written by attnlim %s `reproduce`. Every number below is in results.json; per-head "
         "values are in the "
         "CSV and NPY files beside this report.",
         buf, al_version());
    if (s->synthetic)
        note(&d, "This model has RANDOM WEIGHTS (a synthetic checkpoint). The pipeline ran end to "
                 "end, but the verdicts "
                 "below are not about a trained model and say nothing about the paper's claims.");
    heading(&d, 2, "Setup");
    table_begin(&d);
    const char *hdr[2] = {"item", "value"};
    table_row(&d, 2, hdr, 1);
    char v1[1200];
    const char *row[2];
#define ROW(name, ...)                                                                             \
    do {                                                                                           \
        snprintf(v1, sizeof v1, __VA_ARGS__);                                                      \
        row[0] = name;                                                                             \
        row[1] = v1;                                                                               \
        table_row(&d, 2, row, 0);                                                                  \
    } while (0)
    ROW("model", "%s, family %s, %d layers x %d heads (d_head %d), context %d, %s", s->model_name,
        s->family, s->n_layer, s->n_head, s->d_head, s->n_ctx,
        s->causal ? "causal (row t sees n = t+1 keys)" : "bidirectional (n = L)");
    ROW("model file", "%s", s->model_path);
    ROW("model identity", "%s (SHA-256 over the model's files: docs/results-schema.md)",
        s->model_sha);
    ROW("weights", "%s",
        s->synthetic ? "random (synthetic checkpoint)" : "as loaded (assumed trained)");
    ROW("corpus", "%s, %lld tokens", s->corpus, (long long)s->n_tokens);
    ROW("windows",
        "%d per length (window k = tokens [kL, (k+1)L)); per-head values are means over windows",
        s->windows);
    if (s->framing[0]) ROW("window framing", "%s", s->framing);
    if (s->selection[0]) ROW("heads analysed", "%s", s->selection);
    ROW("vectors x_j", "%s [reading: value vectors by default]", s->vectors);
    ROW("distance dtilde", "%s [reading: sum-of-norms by default; docs/readings.md]",
        s->distance ? s->distance : "sum-of-norms");
    ROW("random-selection E", "%s [reading: the analytic main term by default]",
        s->expectation ? s->expectation : "analytic");
    ROW("Alg. 5 temperature scale",
        "%s [reading: T on q.k/sqrt(d_head) when scaled, on q.k "
        "when raw]",
        s->temperature_scale ? s->temperature_scale : "scaled");
    ROW("Alg. 5 directions",
        "%s [reading: one v per row when shared, a new v per (T, eps) when "
        "fresh]",
        s->directions ? s->directions : "shared");
    ROW("normalizer", "%s%s", s->normalizer, s->sums_to_one ? "" : " (weights do NOT sum to 1)");
    fmt_list_i(buf, sizeof buf, s->Ls, s->nL);
    ROW("lengths (Alg. 1, 3)", "%s", buf);
    ROW("long window (vanishing, Alg. 2, 4, 5)", "L = %d", s->long_L);
    fmt_list_i(buf, sizeof buf, s->N2, s->nN2);
    ROW("top-N (Alg. 2)", "%s", buf);
    fmt_list_i(buf, sizeof buf, s->N3, s->nN3);
    ROW("critical-N grid (Alg. 3)", "%s (N < L)", buf);
    fmt_list_i(buf, sizeof buf, s->N4, s->nN4);
    ROW("separability N (Alg. 4)", "%s", buf);
    ROW("temperatures (Alg. 5)", "%d values, %.3g to %.3g (log-spaced by default)", s->nT,
        s->nT ? s->T[0] : NAN, s->nT ? s->T[s->nT - 1] : NAN);
    {
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0; i < s->nE; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%g", i ? ", " : "", s->eps[i]);
    }
    ROW("eps (Alg. 5)", "%s; seed %llu", buf, (unsigned long long)s->seed);
    ROW("grids", "%s",
        s->quick ? "--quick (small grids for small test models)"
                 : "the paper's (METHOD sections 2-6)");
    {
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0; i < s->n_timings; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s %.2f s", i ? ", " : "",
                                  s->timing_name[i], s->timing_s[i]);
    }
    ROW("time", "%.1f s in all: %s", s->seconds_total, buf);
#undef ROW
    table_end(&d);
    if (!s->sums_to_one)
        note(&d,
             "The normalizer %s gives weights that do not sum to 1 (some may be negative). The "
             "distance metrics use b = "
             "the sum of the non-selected weights as given; dmax is reported but is a bound only "
             "for non-negative weights; "
             "Corollary 1's band and the 1/(4T), 1/(2T) curves are about softmax.",
             s->normalizer);

    heading(&d, 2, "Paper vs. measured");
    if (s->quick)
        note(&d, "--quick: small grids meant to check that the pipeline runs end to end (a smoke "
                 "test). The table shows what was measured, but no verdicts: run without --quick "
                 "for those.");
    table_begin(&d);
    const char *vh[5] = {"paper's claim", "measured", "verdict", "why", "depends on [reading]"};
    table_row(&d, 5, vh, 1);
    for (int i = 0; i < s->n_verdicts; i++) {
        const al__verdict *v = &s->verdicts[i];
        /* an experiment left out is "not run"; --quick grids are a smoke test, not a verdict */
        const char *shown = !strcmp(v->measured, "not run") ? "not run"
                            : s->quick                      ? "smoke test (--quick: no verdict)"
                                                            : v->verdict;
        const char *cells[5] = {v->claim, v->measured, shown, v->why,
                                v->reading ? v->reading : "-"};
        table_row(&d, 5, cells, 0);
    }
    table_end(&d);
    if (s->n_readings > 0) readings_section(&d, s);
    write_explorer(&d, s);

    if (s->experiments & 1u) {
        heading(&d, 2, "Vanishing attention (Lemma 1, Corollary 1)");
        para(&d,
             "Per row t of the L = %d window: the largest weight and the entropy against the "
             "number of keys n. "
             "Corollary 1 bounds every softmax weight by (1/n) e^(+-2D/T), D = ||q_t|| max_j "
             "||k_j|| / sqrt(d_head), T = 1.",
             s->long_L);
        if (s->band_applies)
            para(&d,
                 "Fraction of (head, row) pairs whose max weight lies inside the band: %.6g (it "
                 "must be 1: a check of the "
                 "pipeline, not of the paper).",
                 s->v_inside);
        figure(&d, "vanishing",
               "Max weight against n: median over heads with the interquartile band, 1/n, and "
               "Corollary 1's band (median D over heads).");
        figure(&d, "vanishing_entropy",
               "Entropy over log n against n: median over heads with the interquartile band.");
    }
    if (s->experiments & (1u << 1)) {
        heading(&d, 2, "Distance against L (Algorithm 1, Fig. 2a)");
        note(&d,
             "[reading] dtilde = sum over the non-selected tokens of ||alpha_i x_i - s||; dmax = b "
             "d1 + ((n-N) abar - b) m; "
             "x_j = %s vectors. E is the analytic main term of the random-selection expectation (a "
             "Jensen lower bound).",
             s->vectors);
        figure(&d, "fig2a",
               "dtilde, E (mean over heads with the interquartile band) and the bound dmax at N = "
               "5 against L. Verdict: see 'distance grows linearly'.");
        (void)verdict_of;
    }
    if (s->experiments & (1u << 2)) {
        heading(&d, 2, "Distance against N (Algorithm 2, Fig. 2b)");
        note(
            &d,
            "[reading] as for Fig. 2a: dtilde sums over the non-selected tokens; x_j = %s vectors.",
            s->vectors);
        figure(&d, "fig2b", "dtilde, E and dmax against N at the long window.");
    }
    if (s->experiments & (1u << 3)) {
        heading(&d, 2, "Critical top-N (Algorithm 3, Fig. 2c)");
        para(&d,
             "For each L, the smallest N whose two-sample KS test (per-head mean dtilde against "
             "per-head mean E, over "
             "%d heads) gives p >= 0.01 (and 0.05). Fit through the origin: c = %.4g at 0.01, c = "
             "%.4g at 0.05 (paper: 0.06).",
             s->n_layer * s->n_head, s->a3_slope[0], s->a3_slope[1]);
        char rl[600] = "";
        size_t k = 0;
        for (int li = 0; li < s->nL && k < sizeof rl - 40; li++)
            k += (size_t)(s->a3_crit[0][li] > 0
                              ? snprintf(rl + k, sizeof rl - k, "%sL = %d: %.3f", li ? ", " : "",
                                         s->Ls[li], (double)s->a3_crit[0][li] / s->Ls[li])
                              : snprintf(rl + k, sizeof rl - k, "%sL = %d: not reached",
                                         li ? ", " : "", s->Ls[li]));
        para(&d,
             "N_crit / L at 0.01, per L (the paper: \"fewer than 6%% of the tokens\"; the verdict "
             "is judged on these, c is our summary): %s.",
             rl);
        note(&d,
             "[reading] the KS samples are per-head means of dtilde (--distance %s) and of E "
             "(--expectation %s); their scale depends on the vectors used (%s).",
             s->distance ? s->distance : "sum-of-norms",
             s->expectation ? s->expectation : "analytic", s->vectors);
        figure(&d, "fig2c",
               "Critical N against L with the fitted lines and the paper's 0.06 L. Missing points: "
               "not reached within the grid.");
    }
    if (s->experiments & (1u << 4)) {
        heading(&d, 2, "Geometric separability (Algorithm 4, Fig. 3)");
        note(&d, "[reading] the lower and upper bounds (delta = the minimum pairwise distance "
                 "among the selected unit vectors, "
                 "xi_i as in METHOD 5) are our reconstruction; the ratio itself is exact.");
        figure(&d, "fig3",
               "N_s/N over heads per N (box plots) with the median of the reconstructed bounds and "
               "the paper's 0.70-0.85 band.");
    }
    if (s->experiments & (1u << 5)) {
        heading(&d, 2, "Gradient sensitivity (Algorithm 5, Fig. 4)");
        const char *own;
        fig4_kind kind = fig4_kind_of(s->normalizer, &own);
        para(&d,
             "g(T, eps) = max over heads of the mean over rows of ||f((z + eps v)/T) - f(z/T)|| / "
             "eps for the normalizer f used (%s), v uniform on the unit sphere; the exact spectral "
             "norm of the Jacobian likewise. %d measured values lie above 1/(4T) (the paper's "
             "value, the largest diagonal entry of softmax's Jacobian: not a bound on its "
             "spectral norm, whose supremum is 1/(2T)).",
             s->normalizer, s->n_flagged);
        if (kind == FIG4_ONE_OVER_T)
            note(&d,
                 "The paper's curve is about softmax. For this normalizer the figure draws its "
                 "own bound: %s.",
                 own);
        else if (kind == FIG4_NO_BOUND)
            note(&d, "The paper's curve is about softmax; this normalizer has no closed-form bound "
                     "drawn, so the figure shows the measured values against the paper's curve "
                     "only.");
        figure(&d, "fig4",
               kind == FIG4_SOFTMAX
                   ? "g(T) for every eps, the exact spectral norm, the paper's min{1/(4T), sqrt 2} "
                     "and the supremum 1/(2T); ringed: every value above the paper's curve as "
                     "drawn; log-log."
                   : "g(T) for every eps, the exact spectral norm, the paper's min{1/(4T), sqrt 2} "
                     "(about softmax) and the normalizer's own bound where one is known; ringed: "
                     "every value above the paper's curve as drawn; log-log.");
    }
    if (s->n_heatmaps > 0) {
        heading(&d, 2, "Per head (layer x head)");
        for (int i = 0; i < s->n_heatmaps; i++) figure(&d, s->hm_name[i], s->hm_title[i]);
    }
    heading(&d, 2, "Files");
    para(&d, "results.json (schema: docs/results-schema.md), alg1.csv, alg2.csv, alg3.csv, "
             "alg3_heads.csv, alg4.csv, alg5.csv, "
             "alg5_g.csv, vanishing.csv, *.npy per-head arrays [.., n_layer, n_head], figures as "
             "SVG and PNG, partial/ "
             "(per window and L, for --resume).");
    al__afile_printf(&d.html, err, "</body></html>\n");
    if ((rc = al__afile_commit(&d.md, err))) {
        al__afile_abort(&d.html);
        return rc;
    }
    return al__afile_commit(&d.html, err);
}
