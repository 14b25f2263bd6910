/* guidelines_out.c: the outputs of `attnlim guidelines` (docs/guidelines.md):
 *   guidelines.json   manifest, per L the dense NLL and every variant, the smallest sufficient k,
 *                     the fits, the critical N beside them, the monitoring, the verdicts
 *   guidelines.csv    one row per (L, variant); monitoring.csv one row per (variant, layer)
 *   guidelines_delta_nll, guidelines_sufficient_k, guidelines_monitoring (.svg + .png)
 *   guidelines.md     the report section
 * Every file is written atomically. */
#include "guidelines.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const KIND[] = {"dense", "topk", "rule", "normalizer"};
static const char *const FIT[] = {"linear", "sqrt", "log"};
static const char *const LEVEL[] = {"1%", "5%"};

/* ---- JSON ------------------------------------------------------------------------------------ */

static cJSON *var_json(const guide *g, const glen *gl, const gvar *v) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", v->name);
    cJSON_AddStringToObject(o, "kind", KIND[v->kind]);
    char buf[64];
    al_attn_rule_name(&v->v, buf, sizeof buf);
    cJSON_AddStringToObject(o, "rule", buf);
    al_attn_norm_name(&v->v.norm, buf, sizeof buf);
    cJSON_AddStringToObject(o, "normalizer", buf);
    cJSON_AddNumberToObject(o, "k_at_L", v->k_at_L);
    cJSON_AddItemToObject(o, "k_over_L", al__ex_jnum(v->k_at_L / gl->L));
    cJSON_AddItemToObject(o, "mean_kept_over_L", al__ex_jnum(v->mean_kept / gl->L));
    cJSON_AddItemToObject(o, "nll", al__ex_jnum(v->mean));
    cJSON_AddItemToObject(o, "delta_nll", al__ex_jnum(v->delta));
    cJSON_AddItemToObject(o, "delta_rel", al__ex_jnum(v->delta / gl->var[0].mean));
    cJSON_AddItemToObject(o, "per_window_nll", al__ex_jarr_d(v->nll, (size_t)g->o.windows));
    cJSON_AddBoolToObject(o, "reused", v->loaded);
    return o;
}

static cJSON *lengths_json(const guide *g) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < g->n_len; i++) {
        const glen *gl = &g->len[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "L", gl->L);
        cJSON_AddItemToObject(o, "dense_nll", al__ex_jnum(gl->var[0].mean));
        cJSON *s = cJSON_AddObjectToObject(o, "smallest_sufficient_k");
        for (int l = 0; l < 2; l++) {
            cJSON *x = cJSON_AddObjectToObject(s, LEVEL[l]);
            if (gl->k_suff[l]) {
                cJSON_AddNumberToObject(x, "k", gl->k_suff[l]);
                cJSON_AddNumberToObject(x, "k_over_L", (double)gl->k_suff[l] / gl->L);
            } else {
                cJSON_AddNullToObject(x, "k");
                cJSON_AddStringToObject(x, "note", "no fixed k < L of the grid is within");
            }
        }
        cJSON *c = cJSON_AddObjectToObject(o, "ks_critical_n");
        for (int l = 0; l < 2; l++) {
            char key[8];
            snprintf(key, sizeof key, "%.2f", AL__GUIDE_LEVELS[l]);
            cJSON *x = cJSON_AddObjectToObject(c, key);
            cJSON_AddItemToObject(x, "N", al__ex_jnum(gl->crit[l]));
            cJSON_AddItemToObject(x, "N_over_L", al__ex_jnum(gl->crit[l] / gl->L));
        }
        cJSON *vs = cJSON_AddArrayToObject(o, "variants");
        for (int v = 0; v < gl->n_var; v++) cJSON_AddItemToArray(vs, var_json(g, gl, &gl->var[v]));
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *fits_json(const guide *g) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "what",
                            "least squares through the origin of the smallest sufficient k on "
                            "f(L) = L, sqrt L, ln L over the lengths where one was found; rms_rel "
                            "= RMS of (fit - k) / k");
    for (int l = 0; l < 2; l++) {
        cJSON *x = cJSON_AddObjectToObject(o, LEVEL[l]);
        for (int f = 0; f < 3; f++) {
            cJSON *y = cJSON_AddObjectToObject(x, FIT[f]);
            cJSON_AddItemToObject(y, "c", al__ex_jnum(g->fit[l][f]));
            cJSON_AddItemToObject(y, "rms_rel", al__ex_jnum(g->fit_rms[l][f]));
        }
    }
    return o;
}

static cJSON *monitor_json(const guide *g) {
    cJSON *o = cJSON_CreateObject();
    if (!g->n_mon) {
        cJSON_AddStringToObject(o, "note", "off (--monitor-length -1)");
        return o;
    }
    cJSON_AddNumberToObject(o, "L", g->monitor_L); /* the figures' */
    cJSON *ls = cJSON_AddArrayToObject(o, "lengths");
    for (int i = 0; i < g->n_mon; i++)
        if (!i || g->mon[i].L != g->mon[i - 1].L)
            cJSON_AddItemToArray(ls, cJSON_CreateNumber(g->mon[i].L));
    cJSON_AddNumberToObject(o, "window", 0);
    cJSON_AddNumberToObject(o, "N", g->monitor_n);
    cJSON_AddStringToObject(
        o, "what",
        "per layer, means over heads of: the row mean (rows t >= 1) of H / ln n "
        "and of the max weight; N_s/N at N on value vectors (METHOD 5)");
    cJSON *vs = cJSON_AddArrayToObject(o, "variants");
    size_t nl = (size_t)g->mi->n_layer;
    for (int i = 0; i < g->n_mon; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", g->mon[i].name);
        cJSON_AddNumberToObject(x, "L", g->mon[i].L);
        cJSON_AddNumberToObject(x, "N", g->mon[i].N);
        cJSON_AddItemToObject(x, "entropy_over_log_n", al__ex_jarr_d(g->mon[i].entropy, nl));
        cJSON_AddItemToObject(x, "max_weight", al__ex_jarr_d(g->mon[i].maxw, nl));
        cJSON_AddItemToObject(x, "ns_ratio", al__ex_jarr_d(g->mon[i].ns, nl));
        cJSON_AddItemToArray(vs, x);
    }
    return o;
}

/* Plain statements of what was measured (the verdicts of docs/guidelines.md). */
static void verdicts(const guide *g, char *out, size_t cap) {
    size_t k = 0;
    for (int i = 0; i < g->n_len && k < cap; i++) {
        const glen *gl = &g->len[i];
        k += (size_t)snprintf(out + k, cap - k, "L = %d: ", gl->L);
        for (int l = 0; l < 2 && k < cap; l++) {
            if (gl->k_suff[l])
                k += (size_t)snprintf(out + k, cap - k, "k = %d (k/L = %.4f) within %s",
                                      gl->k_suff[l], (double)gl->k_suff[l] / gl->L, LEVEL[l]);
            else
                k += (size_t)snprintf(out + k, cap - k, "no k < L within %s", LEVEL[l]);
            k += (size_t)snprintf(out + k, cap - k, l ? "" : "; ");
        }
        if (isfinite(gl->crit[0]) && gl->k_suff[0] && k < cap)
            k += (size_t)snprintf(
                out + k, cap - k, "; KS critical N = %.0f: keeping that many keys is %s (1%%)",
                gl->crit[0], gl->crit[0] >= gl->k_suff[0] ? "enough" : "not enough");
        if (k < cap) k += (size_t)snprintf(out + k, cap - k, "\n");
    }
}

static int write_text(const guide *g, const char *name, const char *txt, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", g->o.out_dir, name);
    return al__write_file_atomic(path, txt, strlen(txt), err);
}

/* The --k values left out at some lengths (k >= L: top-k of every key is dense), each with
 * those lengths: [{"k": k, "at_L": [L, ...]}, ...] (what stderr said, kept with the results). */
static cJSON *k_left_out_json(const guide *g) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && g->o.k && i < g->o.n_k; i++) {
        cJSON *at = NULL;
        for (int l = 0; l < g->n_len; l++)
            if (g->o.k[i] >= g->len[l].L) {
                if (!at) {
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddItemToArray(arr, o);
                    cJSON_AddNumberToObject(o, "k", g->o.k[i]);
                    at = cJSON_AddArrayToObject(o, "at_L");
                }
                cJSON_AddItemToArray(at, cJSON_CreateNumber(g->len[l].L));
            }
    }
    return arr;
}

static int write_json(guide *g, al_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "attnlim.guidelines/1");
    cJSON *man = cJSON_AddObjectToObject(root, "manifest");
    cJSON *mo = al__model_json(g->m, g->o.model, 1, err);
    if (!mo) {
        cJSON_Delete(root);
        return err && err->code ? err->code : AL_E_NOMEM;
    }
    cJSON_AddItemToObject(man, "model", mo);
    al__framing_json(&g->fr, man); /* "framing": BOS used, the model's default and its source */
    cJSON *co = cJSON_AddObjectToObject(man, "corpus");
    cJSON_AddStringToObject(co, "name", g->corpus);
    cJSON_AddStringToObject(co, "sha256", g->corpus_sha);
    cJSON_AddNumberToObject(co, "n_tokens", (double)g->n_tokens);
    cJSON_AddNumberToObject(man, "windows", g->o.windows);
    cJSON_AddItemToObject(man, "k_left_out", k_left_out_json(g));
    cJSON *sub = cJSON_AddObjectToObject(man, "attention_subset"); /* what every variant modifies */
    cJSON_AddItemToObject(sub, "layers", al__mask_json(g->mask_l, g->mi->n_layer));
    cJSON_AddItemToObject(sub, "heads", al__mask_json(g->mask_h, g->mi->n_head));
    cJSON_AddStringToObject(sub, "text", g->subset);
    cJSON_AddStringToObject(man, "attnlim", al_version());
    cJSON_AddStringToObject(man, "fingerprint", g->fingerprint);
    cJSON_AddStringToObject(man, "started", g->started);
    char fin[32];
    al__ex_now_iso(fin, sizeof fin);
    cJSON_AddStringToObject(man, "finished", fin);
    cJSON *rs = cJSON_AddObjectToObject(man, "resume");
    cJSON_AddBoolToObject(rs, "requested", g->o.resume);
    cJSON_AddNumberToObject(rs, "reused", g->n_reused);
    cJSON_AddNumberToObject(rs, "computed", g->n_computed);
    cJSON *par = cJSON_AddObjectToObject(man, "parallel"); /* the MPI ranks (1: this process) */
    cJSON_AddNumberToObject(par, "ranks", g->size);
    cJSON_AddItemToObject(par, "forwards_per_rank",
                          g->rank_forwards ? cJSON_CreateDoubleArray(g->rank_forwards, g->size)
                                           : cJSON_CreateIntArray(&g->n_forwards, 1));
    cJSON *tm = cJSON_AddObjectToObject(man, "timings_s");
    cJSON_AddNumberToObject(tm, "forwards", g->t_forward);
    cJSON_AddNumberToObject(tm, "total", al__now() - g->t_start);
    cJSON_AddNumberToObject(tm, "threads", al__get_threads());
    cJSON_AddStringToObject(
        root, "definitions",
        "NLL: mean over windows 0..K-1 of the mean next-token negative log-likelihood inside each "
        "window (L - 1 predictions); the variant runs in the layers and heads of "
        "manifest.attention_subset (default every one); delta_rel = "
        "(NLL - dense NLL) / dense NLL; smallest sufficient k: the smallest fixed k < L of the "
        "grid whose NLL is <= dense NLL (1 + level); k_at_L: keys kept by the last row (n = L), "
        "mean_kept_over_L: over all rows");
    cJSON_AddItemToObject(root, "lengths", lengths_json(g));
    cJSON_AddItemToObject(root, "fits", fits_json(g));
    cJSON *cs = cJSON_AddObjectToObject(root, "critical_n_source");
    if (g->crit_source[0])
        cJSON_AddStringToObject(cs, "results", g->crit_source);
    else
        cJSON_AddStringToObject(cs, "note",
                                "not given: run `attnlim reproduce --model M --lengths ...` and "
                                "pass --reproduce DIR");
    cJSON_AddItemToObject(root, "monitoring", monitor_json(g));
    char vt[8192];
    verdicts(g, vt, sizeof vt);
    cJSON_AddStringToObject(root, "verdicts", vt);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    int rc = txt ? write_text(g, "guidelines.json", txt, err)
                 : al__err(err, AL_E_NOMEM, "out of memory (guidelines.json)");
    free(txt);
    return rc;
}

/* ---- CSV ------------------------------------------------------------------------------------- */

/* Appends printf output to a growing buffer *b (len *n, capacity *cap). */
static int bprintf(char **b, size_t *n, size_t *cap, const char *fmt, ...) AL_PRINTF(4, 5);
static int bprintf(char **b, size_t *n, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(*b ? *b + *n : NULL, *b ? *cap - *n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return -1;
        if (*b && *n + (size_t)k < *cap) {
            *n += (size_t)k;
            return 0;
        }
        size_t nc = (*cap ? *cap * 2 : 4096) + (size_t)k;
        char *nb = realloc(*b, nc);
        if (!nb) return -1;
        *b = nb, *cap = nc;
    }
}

static int write_csvs(const guide *g, al_error *err) {
    char *b = NULL;
    size_t n = 0, cap = 0;
    int bad = bprintf(&b, &n, &cap,
                      "L,variant,kind,k_at_L,k_over_L,mean_kept_over_L,nll,delta_nll,delta_rel,"
                      "nll_min_window,nll_max_window\n");
    for (int i = 0; i < g->n_len; i++) {
        const glen *gl = &g->len[i];
        for (int v = 0; v < gl->n_var; v++) {
            const gvar *x = &gl->var[v];
            double lo = INFINITY, hi = -INFINITY;
            for (int k = 0; k < g->o.windows; k++)
                lo = x->nll[k] < lo ? x->nll[k] : lo, hi = x->nll[k] > hi ? x->nll[k] : hi;
            bad |=
                bprintf(&b, &n, &cap, "%d,%s,%s,%.0f,%.6g,%.6g,%.8g,%.6g,%.6g,%.8g,%.8g\n", gl->L,
                        x->name, KIND[x->kind], x->k_at_L, x->k_at_L / gl->L, x->mean_kept / gl->L,
                        x->mean, x->delta, x->delta / gl->var[0].mean, lo, hi);
        }
    }
    int rc = bad ? al__err(err, AL_E_NOMEM, "out of memory (CSV)")
                 : write_text(g, "guidelines.csv", b, err);
    n = 0;
    bad = bprintf(&b, &n, &cap, "L,variant,layer,entropy_over_log_n,max_weight,ns_ratio_N%d\n",
                  g->monitor_n);
    for (int i = 0; i < g->n_mon; i++)
        for (int l = 0; l < g->mi->n_layer; l++)
            bad |= bprintf(&b, &n, &cap, "%d,%s,%d,%.6g,%.6g,%.6g\n", g->mon[i].L, g->mon[i].name,
                           l, g->mon[i].entropy[l], g->mon[i].maxw[l], g->mon[i].ns[l]);
    if (!rc)
        rc = bad ? al__err(err, AL_E_NOMEM, "out of memory (CSV)")
                 : write_text(g, "monitoring.csv", b, err);
    free(b);
    return rc;
}

/* ---- figures ----------------------------------------------------------------------------------
 */

static int fig_path(const guide *g, const char *name, char *out, size_t cap) {
    return snprintf(out, cap, "%s/%s", g->o.out_dir, name) >= (int)cap;
}

/* delta NLL (% of dense) against k / L, one line per L (fixed k only) */
static int fig_delta(const guide *g, al_error *err) {
    al__series se[16];
    char labels[16][32];
    double *buf = al__malloc(sizeof(double) * 2 * 64 * 16, "figure", err);
    if (!buf) return AL_E_NOMEM;
    int ns = 0;
    for (int i = 0; i < g->n_len && ns < 16; i++) {
        const glen *gl = &g->len[i];
        double *x = buf + (size_t)ns * 128, *y = x + 64;
        int n = 0;
        for (int v = 0; v < gl->n_var && n < 64; v++)
            if (gl->var[v].kind == GV_TOPK) {
                x[n] = gl->var[v].k_at_L / gl->L;
                double d = 100 * gl->var[v].delta / gl->var[0].mean;
                y[n++] = d > 25 ? 25 : d < -5 ? -5 : d;
            }
        snprintf(labels[ns], sizeof labels[ns], "L = %d", gl->L);
        se[ns] = (al__series){.label = labels[ns],
                              .n = n,
                              .x = x,
                              .y = y,
                              .style = AL__S_LINE | AL__S_MARKERS,
                              .color = ns};
        ns++;
    }
    double hx[2] = {1.0 / g->len[g->n_len - 1].L, 1}, h1[2] = {1, 1}, h5[2] = {5, 5};
    if (ns < 15) {
        se[ns++] = (al__series){.label = "1% and 5% of the dense NLL",
                                .n = 2,
                                .x = hx,
                                .y = h1,
                                .style = AL__S_DASHED,
                                .color = -1};
        se[ns++] = (al__series){.n = 2, .x = hx, .y = h5, .style = AL__S_DASHED, .color = -1};
    }
    char path[4200];
    fig_path(g, "guidelines_delta_nll", path, sizeof path);
    al__plot p = {.title = "Top-k attention in every layer: NLL increase against k / L",
                  .subtitle = "mean over windows; values clipped to [-5%, 25%]",
                  .xlabel = "k / L (keys kept per query row / window length)",
                  .ylabel = "NLL - dense NLL (% of dense)",
                  .xlog = 1,
                  .xmin = NAN,
                  .xmax = 1,
                  .ymin = -5,
                  .ymax = 25,
                  .n_series = ns,
                  .series = se};
    int rc = al__plot_write(&p, path, err);
    free(buf);
    return rc;
}

/* the smallest sufficient k against L, the fitted rules, the KS critical N */
static int fig_sufficient(const guide *g, al_error *err) {
    int n = g->n_len;
    double *b = al__malloc(sizeof(double) * (size_t)n * 9, "figure", err);
    if (!b) return AL_E_NOMEM;
    double *L = b, *k1 = b + n, *k5 = b + 2 * n, *cr = b + 3 * n,
           *fl[3] = {b + 4 * n, b + 5 * n, b + 6 * n};
    for (int i = 0; i < n; i++) {
        double x = L[i] = g->len[i].L;
        k1[i] = g->len[i].k_suff[0] ? g->len[i].k_suff[0] : NAN;
        k5[i] = g->len[i].k_suff[1] ? g->len[i].k_suff[1] : NAN;
        cr[i] = g->len[i].crit[0];
        fl[0][i] = g->fit[0][0] * x, fl[1][i] = g->fit[0][1] * sqrt(x),
        fl[2][i] = g->fit[0][2] * log(x);
    }
    char lab[3][64];
    snprintf(lab[0], sizeof lab[0], "fit (1%%): %.3g L", g->fit[0][0]);
    snprintf(lab[1], sizeof lab[1], "fit (1%%): %.3g sqrt L", g->fit[0][1]);
    snprintf(lab[2], sizeof lab[2], "fit (1%%): %.3g ln L", g->fit[0][2]);
    al__series se[6] = {
        {.label = "smallest k within 1% of dense",
         .n = n,
         .x = L,
         .y = k1,
         .style = AL__S_LINE | AL__S_MARKERS,
         .color = 0},
        {.label = "smallest k within 5% of dense",
         .n = n,
         .x = L,
         .y = k5,
         .style = AL__S_LINE | AL__S_MARKERS,
         .color = 1},
        {.label = lab[0], .n = n, .x = L, .y = fl[0], .style = AL__S_DASHED, .color = 2},
        {.label = lab[1], .n = n, .x = L, .y = fl[1], .style = AL__S_DASHED, .color = 3},
        {.label = lab[2], .n = n, .x = L, .y = fl[2], .style = AL__S_DASHED, .color = 4},
        {.label = "KS critical N (reproduce, p >= 0.01)",
         .n = n,
         .x = L,
         .y = cr,
         .style = AL__S_MARKERS | AL__S_RING,
         .color = 5},
    };
    char path[4200];
    fig_path(g, "guidelines_sufficient_k", path, sizeof path);
    al__plot p = {.title = "Smallest sufficient k against L",
                  .subtitle = "fixed-k grid; dashed: fits through the origin to the 1% points",
                  .xlabel = "L (window length)",
                  .ylabel = "k (keys kept per row)",
                  .xlog = 1,
                  .ylog = 1,
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = NAN,
                  .ymax = NAN,
                  .n_xticks = n,
                  .xticks = L,
                  .n_series = g->crit_source[0] ? 6 : 5,
                  .series = se};
    int rc = al__plot_write(&p, path, err);
    free(b);
    return rc;
}

/* per layer: entropy / ln n and N_s/N of each monitored variant */
static int fig_monitor(const guide *g, int which, al_error *err) {
    if (!g->n_mon) return 0;
    int nl = g->mi->n_layer, nm = 0;
    double *x = al__malloc(sizeof(double) * (size_t)nl, "figure", err);
    if (!x) return AL_E_NOMEM;
    for (int l = 0; l < nl; l++) x[l] = l;
    al__series se[12];
    for (int i = 0; i < g->n_mon && nm < 12; i++) /* the figures' L only */
        if (g->mon[i].L == g->monitor_L)
            se[nm] = (al__series){.label = g->mon[i].name,
                                  .n = nl,
                                  .x = x,
                                  .y = which ? g->mon[i].ns : g->mon[i].entropy,
                                  .style = AL__S_LINE | AL__S_MARKERS,
                                  .color = nm},
            nm++;
    char path[4200], sub[128];
    snprintf(sub, sizeof sub, "L = %d, window 0, mean over heads%s", g->monitor_L,
             which ? "; value vectors" : "");
    fig_path(g, which ? "guidelines_monitoring_ns" : "guidelines_monitoring_entropy", path,
             sizeof path);
    char ylab[64];
    snprintf(ylab, sizeof ylab, which ? "N_s / N at N = %d" : "mean H / ln n", g->monitor_n);
    al__plot p = {.title = which ? "Separability per layer of the modified models"
                                 : "Entropy per layer of the modified models",
                  .subtitle = sub,
                  .xlabel = "layer",
                  .ylabel = ylab,
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = 0,
                  .ymax = NAN,
                  .n_series = nm,
                  .series = se};
    int rc = al__plot_write(&p, path, err);
    free(x);
    return rc;
}

/* ---- the report section --------------------------------------------------------------------- */

static int write_md(const guide *g, al_error *err) {
    char *b = NULL;
    size_t n = 0, cap = 0;
    int bad = bprintf(&b, &n, &cap,
                      "# Guidelines tested in the loss: %s\n\n"
                      "Top-k attention and alternative normalizers inside the forward pass, in "
                      "%s, scored by the mean next-token NLL over windows "
                      "0..%d of %s (docs/guidelines.md). Model identity %.16s...\n\n",
                      g->mi->name, g->mask_l || g->mask_h ? g->subset : "every layer and head",
                      g->o.windows - 1, g->corpus, g->mi->sha256);
    bad |= bprintf(&b, &n, &cap,
                   "| L | dense NLL | smallest k within 1%% (k/L) | within 5%% (k/L) | KS "
                   "critical N (N/L) |\n|---|---|---|---|---|\n");
    for (int i = 0; i < g->n_len; i++) {
        const glen *gl = &g->len[i];
        char c1[48], c5[48], cn[48];
        if (gl->k_suff[0])
            snprintf(c1, sizeof c1, "%d (%.4f)", gl->k_suff[0], (double)gl->k_suff[0] / gl->L);
        else
            snprintf(c1, sizeof c1, "none < L");
        if (gl->k_suff[1])
            snprintf(c5, sizeof c5, "%d (%.4f)", gl->k_suff[1], (double)gl->k_suff[1] / gl->L);
        else
            snprintf(c5, sizeof c5, "none < L");
        if (isfinite(gl->crit[0]))
            snprintf(cn, sizeof cn, "%.0f (%.4f)", gl->crit[0], gl->crit[0] / gl->L);
        else
            snprintf(cn, sizeof cn, g->crit_source[0] ? "not reached / not run" : "not given");
        bad |= bprintf(&b, &n, &cap, "| %d | %.4f | %s | %s | %s |\n", gl->L, gl->var[0].mean, c1,
                       c5, cn);
    }
    bad |= bprintf(&b, &n, &cap,
                   "\nFits of the smallest k within 1%% (through the origin; "
                   "relative RMS residual):");
    for (int f = 0; f < 3; f++)
        bad |=
            bprintf(&b, &n, &cap, " %s c = %.4g (%.2f);", FIT[f], g->fit[0][f], g->fit_rms[0][f]);
    bad |= bprintf(&b, &n, &cap,
                   "\n\n| L | variant | k/L at the last row | NLL | delta (%% of dense) "
                   "|\n|---|---|---|---|---|\n");
    for (int i = 0; i < g->n_len; i++)
        for (int v = 1; v < g->len[i].n_var; v++) {
            const gvar *x = &g->len[i].var[v];
            if (x->kind == GV_TOPK) continue;
            bad |=
                bprintf(&b, &n, &cap, "| %d | %s | %.4f | %.4f | %+.2f |\n", g->len[i].L, x->name,
                        x->k_at_L / g->len[i].L, x->mean, 100 * x->delta / g->len[i].var[0].mean);
        }
    char vt[8192];
    verdicts(g, vt, sizeof vt);
    bad |= bprintf(&b, &n, &cap,
                   "\nFigures: guidelines_delta_nll.svg, guidelines_sufficient_k.svg, "
                   "guidelines_monitoring_entropy.svg, guidelines_monitoring_ns.svg. Per-layer "
                   "monitoring in monitoring.csv (at every L monitored; the figures at L = %d), N "
                   "= %d.\n\n## Measured\n\n```\n%s```\n",
                   g->monitor_L, g->monitor_n, vt);
    int rc = bad ? al__err(err, AL_E_NOMEM, "out of memory (report)")
                 : write_text(g, "guidelines.md", b, err);
    free(b);
    return rc;
}

int al__guide_write(guide *g, al_error *err) {
    int rc = write_json(g, err);
    if (!rc) rc = write_csvs(g, err);
    if (!rc) rc = fig_delta(g, err);
    if (!rc) rc = fig_sufficient(g, err);
    if (!rc) rc = fig_monitor(g, 0, err);
    if (!rc) rc = fig_monitor(g, 1, err);
    if (!rc) rc = write_md(g, err);
    return rc;
}
