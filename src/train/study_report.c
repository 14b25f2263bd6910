/* study_report.c: the study's outputs (study.h): OUT/study.json (schema attnlim.study/1),
 * OUT/study.csv (one row per normalizer), OUT/figures/NAME.svg and .png, OUT/report.html.
 *
 * The predictions are the paper's claims for softmax, and what we expect of the other
 * normalizers; every expectation for a normalizer the paper does not train is our reading
 * ([reading]), and every verdict rule is ours. */
#include "plot.h"
#include "study.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef al__study_curve curve;

int al__study_log_curve(const char *dir, const char *key, curve *c, al_error *err) {
    memset(c, 0, sizeof *c);
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    char *text;
    size_t len;
    int rc = al__read_file(path, (size_t)1 << 31, &text, &len, err);
    if (rc) return rc;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    c->x = malloc(lines * sizeof *c->x), c->y = malloc(lines * sizeof *c->y);
    if (!c->x || !c->y) rc = al__err(err, AL_E_NOMEM, "study: out of memory");
    for (char *p = text; !rc && p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t l = (size_t)((nl ? nl + 1 : text + len) - p);
        cJSON *j = cJSON_ParseWithLength(p, l);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
        if (cJSON_IsNumber(s) && cJSON_IsNumber(v)) {
            c->x[c->n] = s->valuedouble;
            c->y[c->n++] = v->valuedouble;
        }
        cJSON_Delete(j);
        p += l;
    }
    free(text);
    return rc;
}

void al__study_curve_free(curve *c) {
    free(c->x), free(c->y);
    memset(c, 0, sizeof *c);
}

/* Numbers of a JSON array (null -> NaN) into out[cap]; returns the count. */
static int nums(const cJSON *a, double *out, int cap) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (n == cap) break;
        out[n++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
    return n;
}

static const cJSON *path2(const cJSON *j, const char *a, const char *b) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, a), b);
}

/* ---- figures ------------------------------------------------------------------------------ */

typedef struct figset {
    double *buf; /* every x/y array of the figures, freed at the end */
    size_t used, cap;
} figset;

static double *take(figset *f, int n) {
    if (f->used + (size_t)n > f->cap) return NULL;
    double *p = f->buf + f->used;
    f->used += (size_t)n;
    return p;
}

/* One line figure with a series per run: x and y from path (a, bx) and (a, by) of each run. */
static int fig_runs(const al__study_opts *o, cJSON *const *runs, int n, const char *sec,
                    const char *kx, const char *ky, al__plot *pl, const char *base, figset *fs,
                    const al__series *extra, al_error *err) {
    al__series s[AL__STUDY_MAX_NORMS + 1];
    int k = 0;
    for (int r = 0; r < n; r++) {
        double *x = take(fs, 64), *y = take(fs, 64);
        if (!x || !y) return al__err(err, AL_E_NOMEM, "study: figure buffer");
        int nx = nums(path2(runs[r], sec, kx), x, 64), ny = nums(path2(runs[r], sec, ky), y, 64);
        s[k++] = (al__series){
            o->norms[r].name, nx < ny ? nx : ny, x, y, NULL, NULL, AL__S_LINE | AL__S_MARKERS, r};
    }
    if (extra) s[k++] = *extra;
    pl->n_series = k;
    pl->series = s;
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/figures/%s", o->pub.out, base);
    return al__plot_write(pl, path, err);
}

static int fig_logs(const al__study_opts *o, int n, const char *key, al__plot *pl, const char *base,
                    al_error *err) {
    al__series s[AL__STUDY_MAX_NORMS];
    curve c[AL__STUDY_MAX_NORMS];
    memset(c, 0, sizeof c);
    int rc = 0;
    for (int r = 0; r < n && !rc; r++) {
        char dir[4096 + 64];
        snprintf(dir, sizeof dir, "%s/runs/%s", o->pub.out, o->norms[r].name);
        rc = al__study_log_curve(dir, key, &c[r], err);
        s[r] = (al__series){o->norms[r].name,
                            c[r].n,
                            c[r].x,
                            c[r].y,
                            NULL,
                            NULL,
                            AL__S_LINE | (c[r].n < 40 ? AL__S_MARKERS : 0),
                            r};
    }
    if (!rc) {
        pl->n_series = n;
        pl->series = s;
        char path[4096 + 64];
        snprintf(path, sizeof path, "%s/figures/%s", o->pub.out, base);
        rc = al__plot_write(pl, path, err);
    }
    for (int r = 0; r < n; r++) al__study_curve_free(&c[r]);
    return rc;
}

static al__plot plot_of(const char *title, const char *xl, const char *yl, int xlog, int ylog) {
    al__plot p;
    memset(&p, 0, sizeof p);
    p.title = title, p.xlabel = xl, p.ylabel = yl, p.xlog = xlog, p.ylog = ylog;
    p.xmin = p.xmax = p.ymin = p.ymax = NAN;
    return p;
}

/* N_crit / L against L per run (the run's reading), the band the min..max over every reading
 * of readings.json, and the paper's 0.06. */
static int fig_crit(const al__study_opts *o, cJSON *const *runs, int n, figset *fs, al_error *err) {
    al__series s[AL__STUDY_MAX_NORMS + 1];
    const int nL = o->pub.n_crit_L;
    for (int r = 0; r < n; r++) {
        double *x = take(fs, nL), *y = take(fs, nL), *lo = take(fs, nL), *hi = take(fs, nL);
        if (!x || !y || !lo || !hi) return al__err(err, AL_E_NOMEM, "study: figure buffer");
        int nx = nums(path2(runs[r], "critical_n", "L"), x, nL);
        int ny = nums(path2(runs[r], "critical_n", "n_crit_over_L"), y, nL);
        for (int k = 0; k < nL; k++) lo[k] = hi[k] = k < ny ? y[k] : NAN;
        const cJSON *rd;
        cJSON_ArrayForEach(rd, path2(runs[r], "critical_n", "readings")) {
            double v[AL_STUDY_MAX_L];
            int nv = nums(cJSON_GetObjectItemCaseSensitive(rd, "n_crit_over_L"), v, nL);
            for (int k = 0; k < nv; k++)
                if (isfinite(v[k])) {
                    lo[k] = isfinite(lo[k]) && lo[k] < v[k] ? lo[k] : v[k];
                    hi[k] = isfinite(hi[k]) && hi[k] > v[k] ? hi[k] : v[k];
                }
        }
        s[r] = (al__series){
            o->norms[r].name, nx < ny ? nx : ny, x, y, lo, hi, AL__S_LINE | AL__S_MARKERS, r};
    }
    double *x = take(fs, nL), *y = take(fs, nL);
    if (!x || !y) return al__err(err, AL_E_NOMEM, "study: figure buffer");
    for (int k = 0; k < nL; k++) x[k] = o->pub.crit_L[k], y[k] = 0.06;
    s[n] = (al__series){"0.06 (the paper)", nL, x, y, NULL, NULL, AL__S_DASHED, -1};
    al__plot p = plot_of("Critical N / L (KS at 0.01; band: min..max over every reading)",
                         "L (window)", "N_crit / L", 1, 0);
    p.n_series = n + 1, p.series = s;
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/figures/critical_n", o->pub.out);
    return al__plot_write(&p, path, err);
}

static int figures(const al__study_opts *o, cJSON *const *runs, int n, al_error *err) {
    char dir[4096 + 16];
    snprintf(dir, sizeof dir, "%s/figures", o->pub.out);
    int rc = al__mkdirs(dir, err);
    if (rc) return rc;
    figset fs = {malloc(4096 * sizeof(double)), 0, 4096};
    if (!fs.buf) return al__err(err, AL_E_NOMEM, "study: figure buffer");
    al__plot p =
        plot_of("Validation loss during training", "step", "validation loss (nats/token)", 0, 0);
    rc = fig_logs(o, n, "val_loss", &p, "val_loss", err);
    if (!rc) {
        p = plot_of("Global gradient norm during training", "step", "gradient norm (before clip)",
                    0, 1);
        rc = fig_logs(o, n, "grad_norm", &p, "grad_norm", err);
    }
    if (!rc) { /* vanishing, with 1/n */
        double *x = take(&fs, 32), *y = take(&fs, 32);
        int k = 0;
        for (int v = 1; v <= o->pub.base.T && k < 32; v *= 2) x[k] = v, y[k] = 1.0 / v, k++;
        al__series ref = {"1/n (uniform)", k, x, y, NULL, NULL, AL__S_DASHED, -1};
        p = plot_of("Vanishing attention: max weight of rows with n keys", "n (keys of the row)",
                    "max weight (median over heads)", 1, 1);
        rc = fig_runs(o, runs, n, "vanishing", "n", "max_weight", &p, "vanishing", &fs, &ref, err);
    }
    if (!rc) rc = fig_crit(o, runs, n, &fs, err);
    if (!rc) {
        double x[2] = {1, 128}, lo[2] = {0.70, 0.70}, hi[2] = {0.85, 0.85}, mid[2] = {0.775, 0.775};
        al__series ref = {"0.70-0.85 (the paper)", 2, x, mid, lo, hi, AL__S_DASHED, -1};
        p = plot_of("Geometric separability N_s/N (value vectors)", "N", "N_s / N", 1, 0);
        rc = fig_runs(o, runs, n, "separability", "N", "ns_ratio", &p, "separability", &fs, &ref,
                      err);
    }
    if (!rc) { /* Jacobian spectral norm per layer (mean over heads) */
        al__series s[AL__STUDY_MAX_NORMS];
        const int L = o->pub.base.n_layer, H = o->pub.base.n_head;
        for (int r = 0; r < n; r++) {
            double *x = take(&fs, L), *y = take(&fs, L), h[4096];
            int nh = nums(path2(runs[r], "jacobian", "spectral_heads"), h, 4096);
            for (int l = 0; l < L && x && y; l++) {
                x[l] = l, y[l] = 0;
                for (int k = 0; k < H && l * H + k < nh; k++) y[l] += h[l * H + k] / H;
            }
            s[r] = (al__series){
                o->norms[r].name, x && y ? L : 0, x, y, NULL, NULL, AL__S_LINE | AL__S_MARKERS, r};
        }
        p = plot_of("Normalizer Jacobian: mean spectral norm over rows", "layer",
                    "spectral norm (mean over heads)", 0, 1);
        p.n_series = n, p.series = s;
        char path[4096 + 64];
        snprintf(path, sizeof path, "%s/figures/jacobian", o->pub.out);
        rc = al__plot_write(&p, path, err);
    }
    free(fs.buf);
    return rc;
}

/* ---- predictions -------------------------------------------------------------------------- */

static double getnum(const cJSON *j) {
    return cJSON_IsNumber(j) ? j->valuedouble : NAN;
}

/* Under how many readings of readings.json reproduce's verdict on claim (critical_n or
 * separability) holds, into q.verdicts_under_readings {holds, of, reproduce}. */
static void readings_count(const cJSON *run, const char *claim, cJSON *q) {
    int holds = 0, all = 0;
    const cJSON *rd, *v;
    cJSON_ArrayForEach(rd, path2(run, "critical_n", "readings")) {
        v = cJSON_GetObjectItemCaseSensitive(rd, claim);
        if (!cJSON_IsString(v)) continue; /* a reading of other claims only */
        if (!strcmp(claim, "critical_n") &&
            !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(rd, "n_crit_over_L")))
            continue; /* temperature scale, directions: N_crit is the run's */
        all++, holds += !strcmp(v->valuestring, "holds");
    }
    const char *rv = NULL;
    cJSON_ArrayForEach(v, path2(run, "reproduce", "verdicts")) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(v, "key");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "verdict");
        if (cJSON_IsString(k) && !strcmp(k->valuestring, claim) && cJSON_IsString(x))
            rv = x->valuestring;
    }
    cJSON *o = cJSON_AddObjectToObject(q, "reproduce");
    cJSON_AddStringToObject(o, "verdict", rv ? rv : "not evaluated");
    cJSON_AddNumberToObject(o, "readings_holding", holds);
    cJSON_AddNumberToObject(o, "readings", all);
}

static cJSON *predictions(const al__study_opts *o, cJSON *const *runs, int n) {
    cJSON *all = cJSON_CreateArray();
    double soft_slope = NAN;
    for (int r = 0; r < n; r++)
        if (o->norms[r].nm.kind == AL_NORM_SOFTMAX && o->norms[r].nm.temperature == 1)
            soft_slope = getnum(path2(runs[r], "vanishing", "loglog_slope"));
    for (int r = 0; r < n; r++) {
        const al_norm_kind k = o->norms[r].nm.kind;
        const int soft = k == AL_NORM_SOFTMAX,
                  sparse = k == AL_NORM_SPARSEMAX || k == AL_NORM_ENTMAX15 || k == AL_NORM_ENTMAX;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "normalizer", o->norms[r].name);
        /* vanishing */
        double sl = getnum(path2(runs[r], "vanishing", "loglog_slope"));
        cJSON *v = cJSON_AddObjectToObject(p, "vanishing");
        cJSON_AddStringToObject(
            v, "expected",
            soft ? "the max weight falls with n (Lemma 1 / Corollary 1: bounded logits flatten "
                   "softmax as n grows)"
            : k == AL_NORM_SSMAX
                ? "[reading] flatter than softmax: the s log n scale is meant to keep the max "
                  "weight from vanishing"
            : sparse ? "[reading] may stay flat: a sparse support can keep its mass as n grows"
                     : "[reading] no prediction (the weights are not a distribution)");
        cJSON_AddItemToObject(v, "measured_loglog_slope",
                              isfinite(sl) ? cJSON_CreateNumber(sl) : cJSON_CreateNull());
        const char *verdict = "not judged";
        if (isfinite(sl) && soft)
            verdict = sl < -0.1 ? "holds" : "does not hold";
        else if (isfinite(sl) && isfinite(soft_slope) && (sparse || k == AL_NORM_SSMAX))
            verdict = sl > soft_slope ? "holds (flatter than softmax)" : "does not hold";
        cJSON_AddStringToObject(v, "verdict", verdict);
        cJSON_AddStringToObject(v, "rule",
                                "[reading] softmax: slope of log max weight on log n "
                                "(n >= 16) below -0.1; others: above softmax's");
        /* critical N */
        cJSON *c = cJSON_AddObjectToObject(p, "critical_n");
        cJSON_AddStringToObject(c, "expected",
                                soft ? "N_crit / L below 0.06, growing sub-linearly in L (the "
                                       "paper, GPT-2)"
                                     : "[reading] no prediction from the paper: measured");
        const cJSON *ra = path2(runs[r], "critical_n", "n_crit_over_L");
        cJSON_AddItemToObject(c, "measured_n_crit_over_L", cJSON_Duplicate(ra, 1));
        double rv[AL_STUDY_MAX_L];
        int nr = nums(ra, rv, AL_STUDY_MAX_L), ok = 1, any = 0;
        for (int i = 0; i < nr; i++)
            if (isfinite(rv[i])) any = 1, ok &= rv[i] < 0.06;
        cJSON_AddStringToObject(c, "verdict",
                                !soft  ? "not judged"
                                : !any ? "not reached"
                                : ok   ? "holds"
                                       : "does not hold");
        readings_count(runs[r], "critical_n", c);
        /* separability */
        cJSON *s = cJSON_AddObjectToObject(p, "separability");
        cJSON_AddStringToObject(s, "expected",
                                soft ? "N_s/N falls until N ~ 16, then stays in 0.70-0.85"
                                     : "[reading] no prediction from the paper: measured");
        double N[8], ns[8];
        int nn = nums(path2(runs[r], "separability", "N"), N, 8);
        nums(path2(runs[r], "separability", "ns_ratio"), ns, 8);
        double m = 0;
        int cnt = 0;
        for (int i = 0; i < nn; i++)
            if (N[i] >= 16 && isfinite(ns[i])) m += ns[i], cnt++;
        m = cnt ? m / cnt : NAN;
        cJSON_AddItemToObject(s, "measured_mean_ns_ratio_N_ge_16",
                              isfinite(m) ? cJSON_CreateNumber(m) : cJSON_CreateNull());
        cJSON_AddStringToObject(s, "verdict",
                                !soft || !isfinite(m)      ? "not judged"
                                : (m >= 0.70 && m <= 0.85) ? "holds"
                                                           : "does not hold");
        readings_count(runs[r], "separability", s);
        /* Jacobian */
        cJSON *jb = cJSON_AddObjectToObject(p, "jacobian");
        double jm = getnum(path2(runs[r], "jacobian", "spectral_mean"));
        cJSON_AddStringToObject(jb, "expected",
                                soft ? "spectral norm <= 1/(2T) = 0.5 at T = 1 (the supremum)"
                                     : "[reading] measured against softmax's");
        cJSON_AddItemToObject(jb, "measured_spectral_mean",
                              isfinite(jm) ? cJSON_CreateNumber(jm) : cJSON_CreateNull());
        cJSON_AddStringToObject(
            jb, "verdict",
            soft && isfinite(jm)
                ? (jm <= 0.5 / o->norms[r].nm.temperature ? "holds" : "does not hold")
                : "not judged");
        cJSON_AddItemToArray(all, p);
    }
    return all;
}

/* ---- files -------------------------------------------------------------------------------- */

static int write_text(const char *out, const char *name, char *text, al_error *err) {
    if (!text) return al__err(err, AL_E_NOMEM, "study: out of memory");
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/%s", out, name);
    int rc = al__write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* A growing string. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) AL_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
        char *s = realloc(b->s, cap);
        if (!s) return;
        b->s = s, b->cap = cap;
    }
}

static void fmt_num(char *buf, size_t cap, const cJSON *v) {
    if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.4g", v->valuedouble);
    else
        buf[0] = 0;
}

static char *csv(const al__study_opts *o, cJSON *const *runs, int n) {
    sbuf b = {0};
    sb_printf(&b, "normalizer,steps,val_loss,vanishing_loglog_slope,max_weight_at_n_%d",
              o->pub.base.T);
    for (int k = 0; k < o->pub.n_crit_L; k++) sb_printf(&b, ",n_crit_over_L_%d", o->pub.crit_L[k]);
    sb_printf(&b, ",ns_ratio_N16,jacobian_spectral_mean\n");
    for (int r = 0; r < n; r++) {
        char a[32], c[32], d[32], e[32];
        fmt_num(a, sizeof a, cJSON_GetObjectItemCaseSensitive(runs[r], "val_loss"));
        fmt_num(c, sizeof c, path2(runs[r], "vanishing", "loglog_slope"));
        double mw[64], N[8], ns[8], rv[AL_STUDY_MAX_L];
        int nm = nums(path2(runs[r], "vanishing", "max_weight"), mw, 64);
        snprintf(d, sizeof d, "%.4g", nm ? mw[nm - 1] : NAN);
        sb_printf(&b, "%s,%g,%s,%s,%s", o->norms[r].name,
                  getnum(cJSON_GetObjectItemCaseSensitive(runs[r], "steps")), a, c, d);
        int nr = nums(path2(runs[r], "critical_n", "n_crit_over_L"), rv, AL_STUDY_MAX_L);
        for (int k = 0; k < o->pub.n_crit_L; k++)
            if (k < nr && isfinite(rv[k]))
                sb_printf(&b, ",%.4g", rv[k]);
            else
                sb_printf(&b, ",");
        int nn = nums(path2(runs[r], "separability", "N"), N, 8);
        nums(path2(runs[r], "separability", "ns_ratio"), ns, 8);
        double v16 = NAN;
        for (int k = 0; k < nn; k++)
            if (N[k] == 16) v16 = ns[k];
        fmt_num(e, sizeof e, path2(runs[r], "jacobian", "spectral_mean"));
        if (isfinite(v16))
            sb_printf(&b, ",%.4g,%s\n", v16, e);
        else
            sb_printf(&b, ",,%s\n", e);
    }
    return b.s;
}

/* s HTML-escaped (&, <, >, ") into out[cap] (truncated). */
static void html_text(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (; *s && k + 7 < cap; s++) {
        const char *e = *s == '&'   ? "&amp;"
                        : *s == '<' ? "&lt;"
                        : *s == '>' ? "&gt;"
                        : *s == '"' ? "&quot;"
                                    : NULL;
        if (e)
            k += (size_t)snprintf(out + k, cap - k, "%s", e);
        else
            out[k++] = *s;
    }
    out[k] = 0;
}

/* The library's reproduce verdicts and diagnose flag counts per run (study_library, study.c). */
static void html_library(sbuf *b, cJSON *const *runs, int n) {
    sb_printf(b, "<h2>attnlim reproduce --readings all and attnlim diagnose on each checkpoint"
                 "</h2>\n<p>The library's own experiments on each trained checkpoint, loaded as "
                 "every command loads it (its normalizer is the model's own attention): the "
                 "paper-vs-measured verdicts of reproduce (runs/NAME/reproduce/report.html) and "
                 "the flagged heads of diagnose (runs/NAME/diagnose).</p>\n<table><tr><th>"
                 "normalizer</th><th>claim</th><th>measured</th><th>verdict</th></tr>\n");
    for (int r = 0; r < n; r++) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(runs[r], "normalizer"), *v;
        const cJSON *vd = path2(runs[r], "reproduce", "verdicts");
        cJSON_ArrayForEach(v, vd) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "claim");
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(v, "measured");
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "verdict");
            char cm[512], mm[512], xm[64];
            html_text(cJSON_IsString(c) ? c->valuestring : "", cm, sizeof cm);
            html_text(cJSON_IsString(m) ? m->valuestring : "", mm, sizeof mm);
            html_text(cJSON_IsString(x) ? x->valuestring : "", xm, sizeof xm);
            sb_printf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
                      cJSON_IsString(nm) ? nm->valuestring : "", cm, mm, xm);
        }
    }
    sb_printf(b, "</table>\n<table><tr><th>normalizer</th><th>heads</th><th>collapsed</th><th>"
                 "vanishing</th><th>sink</th></tr>\n");
    for (int r = 0; r < n; r++) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(runs[r], "normalizer");
        const cJSON *s = path2(runs[r], "diagnose", "summary");
        char c[4][32];
        static const char *keys[4] = {"heads", "collapsed", "vanishing", "sink"};
        for (int k = 0; k < 4; k++)
            fmt_num(c[k], sizeof c[k], cJSON_GetObjectItemCaseSensitive(s, keys[k]));
        sb_printf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
                  cJSON_IsString(nm) ? nm->valuestring : "", c[0], c[1], c[2], c[3]);
    }
    sb_printf(b, "</table>\n");
}

static char *html(const al__study_opts *o, cJSON *preds, cJSON *const *runs, int n) {
    sbuf b = {0};
    sb_printf(&b,
              "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>attnlim study</title>"
              "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-"
              "collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}"
              "img{max-width:540px}</style></head><body>\n<h1>attnlim study</h1>\n");
    sb_printf(
        &b,
        "<p>One GPT-2-style model per normalizer, trained in C at the same budget: %d layers, "
        "%d heads, %d channels, context %d, batch %d x %d, %d steps, seed %llu, %s "
        "tokens of %s. On each checkpoint (loaded with its normalizer and tokenizer, as every "
        "command loads it): attnlim reproduce --readings all (%d windows of each L) and attnlim "
        "diagnose (window 0) over the held-out tail of the corpus (heldout.txt); the tables "
        "and figures are built from their results (value vectors: the run's reading; the "
        "critical-N band spans every reading). Verdict rules and every expectation for a "
        "normalizer other than softmax are ours ([reading]).</p>\n",
        o->pub.base.n_layer, o->pub.base.n_head, o->pub.base.n_embd, o->pub.base.n_ctx,
        o->pub.base.B, o->pub.base.T, o->pub.base.steps, (unsigned long long)o->pub.base.seed,
        o->pub.base.tokenizer, o->pub.base.corpus, o->pub.windows);
    sb_printf(&b, "<h2>Predictions</h2>\n<table><tr><th>normalizer</th><th>claim</th><th>expected"
                  "</th><th>measured</th><th>verdict</th></tr>\n");
    const cJSON *p;
    cJSON_ArrayForEach(p, preds) {
        const char *name = cJSON_GetObjectItemCaseSensitive(p, "normalizer")->valuestring;
        static const char *claims[4] = {"vanishing", "critical_n", "separability", "jacobian"};
        for (int c = 0; c < 4; c++) {
            const cJSON *q = cJSON_GetObjectItemCaseSensitive(p, claims[c]);
            char *m = NULL;
            const cJSON *it;
            cJSON_ArrayForEach(it, q) if (!strncmp(it->string, "measured", 8)) m =
                cJSON_PrintUnformatted(it);
            char extra[160] = "";
            const cJSON *rp = cJSON_GetObjectItemCaseSensitive(q, "reproduce");
            if (rp)
                snprintf(extra, sizeof extra, "; reproduce: %s (holds under %g of %g readings)",
                         cJSON_GetObjectItemCaseSensitive(rp, "verdict")->valuestring,
                         getnum(cJSON_GetObjectItemCaseSensitive(rp, "readings_holding")),
                         getnum(cJSON_GetObjectItemCaseSensitive(rp, "readings")));
            sb_printf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s%s</td></tr>\n",
                      name, claims[c], cJSON_GetObjectItemCaseSensitive(q, "expected")->valuestring,
                      m ? m : "", cJSON_GetObjectItemCaseSensitive(q, "verdict")->valuestring,
                      extra);
            free(m);
        }
    }
    sb_printf(&b, "</table>\n");
    html_library(&b, runs, n);
    sb_printf(&b, "<h2>Figures</h2>\n");
    static const char *figs[6] = {"val_loss",   "grad_norm",    "vanishing",
                                  "critical_n", "separability", "jacobian"};
    for (int k = 0; k < 6; k++)
        sb_printf(&b, "<img src=\"figures/%s.svg\" alt=\"%s\">\n", figs[k], figs[k]);
    sb_printf(&b, "<p>Data: <a href=\"study.json\">study.json</a>, <a href=\"study.csv\">study.csv"
                  "</a>, runs/NAME/log.jsonl and diag.json.</p></body></html>\n");
    return b.s;
}

int al__study_report(const al__study_opts *o, cJSON *const *runs, int n, al_error *err) {
    int rc = figures(o, runs, n, err);
    if (rc) return rc;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "attnlim.study/1");
    cJSON *opt = cJSON_AddObjectToObject(j, "options");
    cJSON_AddNumberToObject(opt, "n_layer", o->pub.base.n_layer);
    cJSON_AddNumberToObject(opt, "n_head", o->pub.base.n_head);
    cJSON_AddNumberToObject(opt, "n_embd", o->pub.base.n_embd);
    cJSON_AddNumberToObject(opt, "n_ctx", o->pub.base.n_ctx);
    cJSON_AddNumberToObject(opt, "batch", o->pub.base.B);
    cJSON_AddNumberToObject(opt, "seq_len", o->pub.base.T);
    cJSON_AddNumberToObject(opt, "steps", o->pub.base.steps);
    cJSON_AddNumberToObject(opt, "lr", o->pub.base.lr);
    cJSON_AddStringToObject(opt, "corpus", o->pub.base.corpus);
    cJSON_AddStringToObject(opt, "tokenizer", o->pub.base.tokenizer);
    cJSON_AddNumberToObject(opt, "windows", o->pub.windows);
    cJSON_AddStringToObject(opt, "diagnosed_text",
                            "heldout.txt: the held-out tail of the corpus (the last val_frac of "
                            "its tokens), which training never saw");
    cJSON_AddStringToObject(opt, "diagnostics",
                            "runs/NAME/reproduce (attnlim reproduce --readings all) and "
                            "runs/NAME/diagnose (attnlim diagnose), in-process");
    cJSON_AddStringToObject(opt, "vectors", "value");
    cJSON *ra = cJSON_AddArrayToObject(j, "runs");
    for (int r = 0; r < n; r++) cJSON_AddItemToArray(ra, cJSON_Duplicate(runs[r], 1));
    cJSON *preds = predictions(o, runs, n);
    cJSON_AddItemToObject(j, "predictions", preds);
    rc = write_text(o->pub.out, "study.csv", csv(o, runs, n), err);
    if (!rc) rc = write_text(o->pub.out, "report.html", html(o, preds, runs, n), err);
    if (!rc) rc = write_text(o->pub.out, "study.json", cJSON_Print(j), err);
    cJSON_Delete(j);
    return rc;
}
