/* diagnose_out.c: what `attnlim diagnose` writes: the JSON report (every flag with the value
 * that raised it), and with --out: diagnose.json, diagnose.md, diagnose.html (the per-head
 * explorer, src/report/explorer.c) and diagnose_flags.svg/.png (the flags on the layer x head
 * grid). The flag rules are al__head_flags' (explorer.h), documented in docs/diagnose.md. */
#include "experiments.h"
#include "textsafe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct flag_rule {
    const char *flag, *measure, *what, *op;
    double threshold;
} flag_rule;

/* The measures behind each flag, in the order al__head_flags names them. */
static const flag_rule rules[4] = {
    {"collapsed", "mean_max_weight", "mean max weight", ">", AL__FLAG_COLLAPSED_MAX_W},
    {"collapsed", "mean_entropy_over_log_n", "mean H / log n", "<", AL__FLAG_COLLAPSED_ENT},
    {"vanishing", "mean_entropy_over_log_n", "mean H / log n", ">", AL__FLAG_VANISHING_ENT},
    {"sink", "mean_weight_on_token0", "mean weight on token 0", ">", AL__FLAG_SINK},
};

static double rule_value(const al__ex_diag *d, int r, int h) {
    return r == 0 ? d->max_w[h] : r == 3 ? d->sink[h] : d->ent[h];
}
static int rule_fires(const al__ex_diag *d, int r, int h) {
    double v = rule_value(d, r, h);
    return rules[r].op[0] == '>' ? v > rules[r].threshold : v < rules[r].threshold;
}
static int measured(const al__ex_diag *d, int h) {
    return isfinite(d->max_w[h]);
}

int al__ex_diag_flag_text(const al__ex_diag *d, int h, char *buf, size_t size) {
    size_t k = 0;
    int n = 0;
    const char *last = NULL;
    buf[0] = 0;
    for (int r = 0; r < 4 && d->flags_ok; r++) {
        if (!rule_fires(d, r, h) || k >= size) continue;
        int same = last && !strcmp(last, rules[r].flag); /* collapsed by both rules */
        k += (size_t)snprintf(buf + k, size - k, "%s%s%s%s = %.3g %s %g",
                              same ? "; "
                              : n  ? "), "
                                   : "",
                              same ? "" : rules[r].flag, same ? "" : " (", rules[r].what,
                              rule_value(d, r, h), rules[r].op, rules[r].threshold);
        last = rules[r].flag, n++;
    }
    if (n && k < size) snprintf(buf + k, size - k, ")");
    return n;
}

static cJSON *head_json(const al__ex_diag *d, int h, int counts[3]) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddNumberToObject(it, "layer", h / d->n_head);
    cJSON_AddNumberToObject(it, "head", h % d->n_head);
    cJSON_AddItemToObject(it, "mean_max_weight", al__ex_jnum(d->max_w[h]));
    cJSON_AddItemToObject(it, "mean_entropy_over_log_n", al__ex_jnum(d->ent[h]));
    cJSON_AddItemToObject(it, "mean_weight_on_token0", al__ex_jnum(d->sink[h]));
    cJSON_AddItemToObject(it, "ns_ratio", al__ex_jarr_d(d->ns + (size_t)h * d->nN, (size_t)d->nN));
    cJSON_AddItemToObject(it, "jacobian_spectral_T1", al__ex_jnum(d->spec[h]));
    cJSON *fl = cJSON_AddArrayToObject(it, "flags");
    cJSON *why = cJSON_AddArrayToObject(it, "why");
    const char *last = NULL;
    for (int r = 0; r < 4 && d->flags_ok; r++) {
        if (!rule_fires(d, r, h)) continue;
        if (!last || strcmp(last, rules[r].flag)) { /* collapsed can fire twice */
            cJSON_AddItemToArray(fl, cJSON_CreateString(rules[r].flag));
            counts[r == 3 ? 2 : r == 2 ? 1 : 0]++;
        }
        last = rules[r].flag;
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "flag", rules[r].flag);
        cJSON_AddStringToObject(w, "measure", rules[r].measure);
        cJSON_AddItemToObject(w, "value", al__ex_jnum(rule_value(d, r, h)));
        char rule[48];
        snprintf(rule, sizeof rule, "%s %g", rules[r].op, rules[r].threshold);
        cJSON_AddStringToObject(w, "rule", rule);
        cJSON_AddItemToArray(why, w);
    }
    return it;
}

static cJSON *diag_json(const al_diag_opts *o, const al__ex_diag *d, cJSON *model, int counts[3]) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "attnlim.diagnose/2");
    cJSON_AddItemToObject(root, "model", model);
    cJSON_AddStringToObject(root, "corpus", o->corpus ? o->corpus : "war-and-peace");
    cJSON_AddNumberToObject(root, "window", o->window);
    cJSON_AddNumberToObject(root, "L", d->L);
    if (d->fr) al__framing_json(d->fr, root);
    if (d->win) {
        cJSON *wt = cJSON_AddObjectToObject(root, "window_tokens");
        al_error e = {0};
        if (al__ex_tokens_json(d->tk, d->win, d->L, wt, &e))
            cJSON_AddStringToObject(wt, "error", e.msg);
    }
    cJSON_AddStringToObject(root, "normalizer", o->normalizer ? o->normalizer : d->own_label);
    cJSON_AddItemToObject(root, "separability_N", al__ex_jarr_i(d->Ns, (size_t)d->nN));
    cJSON *th = cJSON_AddObjectToObject(root, "flag_rules");
    cJSON_AddStringToObject(th, "collapsed", "mean max weight > 0.9 or mean H / log n < 0.1");
    cJSON_AddStringToObject(th, "vanishing",
                            "mean H / log n > 0.95 (near uniform: attention vanishes)");
    cJSON_AddStringToObject(th, "sink", "mean weight on token 0 > 0.5");
    if (!d->flags_ok)
        cJSON_AddStringToObject(root, "flags_refused",
                                "the normalizer's weights do not sum to 1: the rules (max weight, "
                                "entropy, weight on token 0) are about weights that do");
    cJSON *heads = cJSON_AddArrayToObject(root, "heads");
    int n = 0;
    for (int h = 0; h < d->n_layer * d->n_head; h++)
        if (measured(d, h)) cJSON_AddItemToArray(heads, head_json(d, h, counts)), n++;
    cJSON *sm = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddNumberToObject(sm, "heads", n);
    cJSON_AddNumberToObject(sm, "heads_in_model", d->n_layer * d->n_head);
    cJSON_AddNumberToObject(sm, "collapsed", counts[0]);
    cJSON_AddNumberToObject(sm, "vanishing", counts[1]);
    cJSON_AddNumberToObject(sm, "sink", counts[2]);
    return root;
}

static int diag_md(const char *path, const al_diag_opts *o, const al__ex_diag *d, const char *name,
                   const int counts[3], al_error *err) {
    al__afile f;
    int rc = al__afile_open(&f, path, err);
    if (rc) return rc;
    char name_md[3 * 128 + 1], corpus_md[3 * 4096 + 1], norm_md[3 * 64 + 1];
    al__md_text(name, name_md, sizeof name_md); /* strings from files: inert Markdown */
    al__md_text(o->corpus ? o->corpus : "war-and-peace", corpus_md, sizeof corpus_md);
    al__md_text(o->normalizer ? o->normalizer : d->own_label, norm_md, sizeof norm_md);
    al__afile_printf(&f, err,
                     "# Attention health: %s\n\nCorpus %s, window %d, L = %d, normalizer %s. "
                     "%d heads: %d collapsed, %d vanishing, %d sinks.\n\n",
                     name_md, corpus_md, o->window, d->L, norm_md, d->n_measured, counts[0],
                     counts[1], counts[2]);
    if (!d->flags_ok)
        al__afile_printf(&f, err, "No flags: the normalizer's weights do not sum to 1.\n\n");
    al__afile_printf(&f, err,
                     "Flags (docs/diagnose.md): collapsed = mean max weight > 0.9 or mean H/log n "
                     "< 0.1; vanishing = mean H/log n > 0.95 (near uniform); sink = mean weight "
                     "on token 0 > 0.5. Figure: diagnose_flags.svg.\n\n"
                     "| layer | head | max weight | H / log n | weight on token 0 |");
    for (int k = 0; k < d->nN; k++) al__afile_printf(&f, err, " N_s/N (N=%d) |", d->Ns[k]);
    al__afile_printf(&f, err, " Jacobian norm at T=1 | flags |\n|---|---|---|---|---|");
    for (int k = 0; k < d->nN; k++) al__afile_printf(&f, err, "---|");
    al__afile_printf(&f, err, "---|---|\n");
    for (int h = 0; h < d->n_layer * d->n_head; h++) {
        if (!measured(d, h)) continue;
        char why[512];
        al__ex_diag_flag_text(d, h, why, sizeof why);
        al__afile_printf(&f, err, "| %d | %d | %.4f | %.4f | %.4f |", h / d->n_head, h % d->n_head,
                         d->max_w[h], d->ent[h], d->sink[h]);
        for (int k = 0; k < d->nN; k++)
            al__afile_printf(&f, err, " %.4f |", d->ns[(size_t)h * d->nN + k]);
        al__afile_printf(&f, err, " %.4f | %s |\n", d->spec[h], why);
    }
    return al__afile_commit(&f, err);
}

/* The flags on the layer x head grid: one marker series per flag (sink as a ring, so that a
 * collapsed sink shows both). */
static int diag_figure(const char *base, const al__ex_diag *d, const char *name, al_error *err) {
    int H = d->n_layer * d->n_head;
    double *buf = al__malloc(sizeof(double) * (size_t)(6 * H + d->n_head + 1), "figure", err);
    if (!buf) return AL_E_NOMEM;
    static const char *const what[3] = {"collapsed", "vanishing", "sink"};
    al__series se[3];
    char labels[3][64];
    double *ticks = buf + 6 * H;
    for (int k = 0; k < d->n_head; k++) ticks[k] = k;
    for (int f = 0; f < 3; f++) {
        double *x = buf + (size_t)2 * f * H, *y = x + H;
        int n = 0;
        for (int h = 0; h < H && d->flags_ok; h++) {
            char fl[64];
            if (!measured(d, h)) continue;
            al__head_flags(d->max_w[h], d->ent[h], d->sink[h], fl, sizeof fl);
            if (strstr(fl, what[f])) x[n] = h % d->n_head, y[n++] = h / d->n_head;
        }
        snprintf(labels[f], sizeof labels[f], "%s (%d heads)", what[f], n);
        se[f] = (al__series){.label = labels[f],
                             .n = n,
                             .x = x,
                             .y = y,
                             .style = f == 2 ? AL__S_MARKERS | AL__S_RING : AL__S_MARKERS,
                             .color = f == 0   ? 3
                                      : f == 1 ? 0
                                               : 2};
    }
    char title[200], sub[200];
    snprintf(title, sizeof title, "Flagged heads: %s", name);
    snprintf(sub, sizeof sub, "L = %d; %d of %d heads measured%s", d->L, d->n_measured, H,
             d->flags_ok ? "" : "; no flags: the weights do not sum to 1");
    al__plot p = {.title = title,
                  .subtitle = sub,
                  .xlabel = "head",
                  .ylabel = "layer",
                  .xmin = -0.5,
                  .xmax = d->n_head - 0.5,
                  .ymin = -0.5,
                  .ymax = d->n_layer - 0.5,
                  .n_series = 3,
                  .series = se,
                  .n_xticks = d->n_head,
                  .xticks = ticks};
    int rc = al__plot_write(&p, base, err);
    free(buf);
    return rc;
}

/* diagnose.html: the explorer over the diagnosis. */
static int diag_html(const char *path, const al_diag_opts *o, const al__ex_diag *d,
                     const char *name, al_error *err) {
    int H = d->n_layer * d->n_head, nN = d->nN;
    al__explorer x = {.n_layer = d->n_layer, .n_head = d->n_head};
    double *nsT = al__malloc(sizeof(double) * (size_t)(nN ? nN : 1) * H, "explorer", err);
    char(*fl)[512] = al__calloc((size_t)H, 512, "explorer", err);
    const char **fp = al__calloc((size_t)H, sizeof *fp, "explorer", err);
    char keys[4][32];
    int rc = 0;
    if (!nsT || !fl || !fp) rc = AL_E_NOMEM;
    for (int h = 0; h < H && !rc; h++) {
        for (int k = 0; k < nN; k++) nsT[(size_t)k * H + h] = d->ns[(size_t)h * nN + k];
        al__ex_diag_flag_text(d, h, fl[h], sizeof fl[h]);
        fp[h] = fl[h];
    }
    if (!rc) {
#define METRIC(k, l, v)                                                                            \
    (x.metric_key[x.n_metrics] = (k), x.metric_label[x.n_metrics] = (l),                           \
     x.metric[x.n_metrics] = (v), x.metric_map[x.n_metrics++] = 1)
        METRIC("max weight", "mean max weight per head", d->max_w);
        METRIC("H / log n", "mean normalised entropy H / log n per head", d->ent);
        METRIC("weight on token 0", "mean weight on token 0 per head", d->sink);
        for (int k = 0; k < nN && k < 4; k++) {
            snprintf(keys[k], sizeof keys[k], "N_s/N (N = %d)", d->Ns[k]);
            METRIC(keys[k], keys[k], nsT + (size_t)k * H);
        }
        METRIC("spectral norm", "mean exact Jacobian spectral norm per head (T = 1)", d->spec);
#undef METRIC
        x.flags = fp;
        x.flags_note = d->flags_ok ? "flags: the rules of docs/diagnose.md, each with the value "
                                     "that raised it"
                                   : "no flags: the normalizer's weights do not sum to 1";
        if (nN > 1)
            x.curve[x.n_curves++] =
                (al__explorer_curve){.name = "N_s/N", .n = nN, .x = d->Ns, .v = nsT};
        x.W = d->W, x.causal = d->causal, x.token = (const char *const *)d->tok;
        x.token_id = d->ids, x.weights = d->w;
        x.window_note = d->window_note;
        char title[300], intro[600];
        snprintf(title, sizeof title, "attnlim diagnose: %s", name);
        snprintf(intro, sizeof intro,
                 "Corpus %s, window %d, L = %d, normalizer %s; %d of %d heads measured. Every "
                 "number is in diagnose.json (schema: docs/results-schema.md); what each flag "
                 "means and what to do about it: docs/diagnose.md.",
                 o->corpus ? o->corpus : "war-and-peace", o->window, d->L,
                 o->normalizer ? o->normalizer : d->own_label, d->n_measured, H);
        rc = al__explorer_page(path, title, intro, &x, err);
    }
    free(nsT);
    free(fl);
    free(fp);
    return rc;
}

int al__ex_diag_write(const al_diag_opts *o, al_model *m, const al__ex_diag *d, char **json,
                      al_error *err) {
    const al_model_info *mi = al_model_get_info(m);
    cJSON *mo = al__model_json(m, o->model ? o->model : "gpt2", 1, err);
    if (!mo) return err && err->code ? err->code : AL_E_NOMEM;
    int counts[3] = {0, 0, 0};
    cJSON *root = diag_json(o, d, mo, counts);
    cJSON_AddItemToObject(root, "sliding_window", al__ex_window_json(m));
    *json = al__json_print(root, 1); /* valid UTF-8 whatever the model's strings */
    cJSON_Delete(root);
    if (!*json) return al__err(err, AL_E_NOMEM, "out of memory printing the diagnosis");
    if (!o->out_dir) return 0;
    int rc = al__mkdirs(o->out_dir, err);
    char path[4200];
    snprintf(path, sizeof path, "%s/diagnose.json", o->out_dir);
    if (!rc) rc = al__write_file_atomic(path, *json, strlen(*json), err);
    snprintf(path, sizeof path, "%s/diagnose.md", o->out_dir);
    if (!rc) rc = diag_md(path, o, d, mi->name, counts, err);
    snprintf(path, sizeof path, "%s/diagnose_flags", o->out_dir);
    if (!rc) rc = diag_figure(path, d, mi->name, err);
    snprintf(path, sizeof path, "%s/diagnose.html", o->out_dir);
    if (!rc) rc = diag_html(path, o, d, mi->name, err);
    return rc;
}
