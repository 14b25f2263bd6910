/* results_json.c: results.json of `attnlim reproduce` (schema attnlim.reproduce/1,
 * docs/outputs.md), and the JSON helpers of the layer. */
#include "experiments.h"
#include "textsafe.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- writers: JSON
 * ----------------------------------------------------------------------------------- */

cJSON *al__ex_jnum(double v) {
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}
cJSON *al__ex_jarr_d(const double *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, al__ex_jnum(v[i]));
    return a;
}
cJSON *al__ex_jarr_i(const int *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}
cJSON *al__ex_window_json(const al_model *m) {
    const al_model_info *mi = al_model_get_info(m);
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "of_layer");
    for (int l = 0; l < mi->n_layer; l++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(al__model_layer_window(m, l)));
    cJSON_AddStringToObject(o, "means",
                            "each layer's causal sliding window (0 = none): row t sees keys "
                            "max(0, t - window + 1)..t, so METHOD's n = min(t + 1, window) and "
                            "every per-row quantity is over those keys");
    return o;
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
            cJSON_AddItemToArray(a, al__ex_jnum(v));
        }
        cJSON_AddItemToObject(o, names[k], a);
    }
    return o;
}
/* [[H] per row] */
static cJSON *jrows(const double *v, int rows, int H) {
    cJSON *a = cJSON_CreateArray();
    for (int r = 0; r < rows; r++)
        cJSON_AddItemToArray(a, al__ex_jarr_d(v + (size_t)r * H, (size_t)H));
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
            qsort(col, (size_t)n, sizeof(double), al__ex_cmp_dbl);
            cJSON_AddItemToArray(a, al__ex_jnum(al_percentile_sorted(col, (size_t)n, pct[k])));
        }
        cJSON_AddItemToObject(o, names[k], a);
    }
    free(col);
    return o;
}

void al__ex_now_iso(char *buf, size_t size) {
    time_t t = time(NULL);
    struct tm tmv;
    gmtime_r(&t, &tmv);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tmv);
}

/* manifest.options: what the run was asked (grids after their defaults and clipping) */
/* --layers / --heads: the layers and heads analysed ("all" or the list) */
static void json_selection(const plan *p, cJSON *op) {
    const uint8_t *mask[2] = {p->lmask, p->hmask};
    const char *key[2] = {"layers", "heads"};
    int count[2] = {p->n_layer, p->n_head};
    for (int k = 0; k < 2; k++) {
        if (!mask[k]) {
            cJSON_AddStringToObject(op, key[k], "all");
            continue;
        }
        cJSON *a = cJSON_AddArrayToObject(op, key[k]);
        for (int i = 0; i < count[k]; i++)
            if (mask[k][i]) cJSON_AddItemToArray(a, cJSON_CreateNumber(i));
    }
    cJSON_AddNumberToObject(op, "heads_analysed", p->n_sel_layers * p->n_sel_heads);
}

static void json_options(const plan *p, const al__summary *s, cJSON *man) {
    cJSON *op = cJSON_AddObjectToObject(man, "options");
    cJSON_AddStringToObject(op, "vectors", al_vectors_name(p->o.vectors));
    cJSON_AddStringToObject(op, "distance", al_distance_name(p->o.distance));
    cJSON_AddStringToObject(op, "expectation", al_expect_name(p->o.expectation));
    cJSON_AddNumberToObject(op, "exact_max",
                            (double)(p->o.exact_max > 0 ? p->o.exact_max : AL_EXACT_MAX_DEFAULT));
    cJSON_AddStringToObject(op, "temperature_scale", p->o.temperature_raw ? "raw" : "scaled");
    cJSON_AddStringToObject(op, "directions", p->o.fresh_directions ? "fresh" : "shared");
    cJSON_AddStringToObject(op, "normalizer", s->normalizer);
    cJSON_AddBoolToObject(op, "weights_sum_to_one", s->sums_to_one);
    cJSON_AddBoolToObject(op, "quick", p->o.quick);
    char seed[24]; /* exact: a JSON integer as written, not a double's 15-17 digits */
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)p->o.seed);
    cJSON_AddRawToObject(op, "seed", seed);
    cJSON_AddNumberToObject(op, "mc_samples", p->o.mc_samples);
    cJSON_AddNumberToObject(op, "long_length", p->long_L);
    cJSON_AddItemToObject(op, "lengths", al__ex_jarr_i(p->Ls, (size_t)p->nL));
    cJSON_AddItemToObject(op, "top_n", al__ex_jarr_i(p->N2, (size_t)p->nN2));
    cJSON_AddItemToObject(op, "critical_n", al__ex_jarr_i(p->N3, (size_t)p->nN3));
    cJSON_AddItemToObject(op, "separability_n", al__ex_jarr_i(p->N4, (size_t)p->nN4));
    cJSON_AddItemToObject(op, "temperatures", al__ex_jarr_d(p->T, (size_t)p->nT));
    cJSON_AddItemToObject(op, "eps", al__ex_jarr_d(p->eps, (size_t)p->nE));
    cJSON *ex = cJSON_AddArrayToObject(op, "experiments");
    const char *en[6] = {"vanishing", "alg1", "alg2", "alg3", "alg4", "alg5"};
    for (int i = 0; i < 6; i++)
        if (p->exp & (1u << i)) cJSON_AddItemToArray(ex, cJSON_CreateString(en[i]));
    cJSON_AddNumberToObject(op, "threads", p->o.threads > 0 ? p->o.threads : omp_get_max_threads());
    /* what the options asked for that could not apply (never dropped silently: issue 12) */
    cJSON *dr = cJSON_AddObjectToObject(op, "grid_values_dropped");
    static const char *const gn[3] = {"top_n", "critical_n", "separability_n"};
    for (int i = 0; i < 3; i++)
        if (p->n_dropped[i])
            cJSON_AddItemToObject(
                dr, gn[i],
                al__ex_jarr_i(p->dropped[i],
                              (size_t)(p->n_dropped[i] < 32 ? p->n_dropped[i] : 32)));
    cJSON *em = cJSON_AddArrayToObject(op, "experiments_empty");
    for (int i = 0; i < 6; i++)
        if (p->empty_exp & (1u << i)) cJSON_AddItemToArray(em, cJSON_CreateString(en[i]));
    json_selection(p, op);
}

/* manifest.versions, timings, resume, parallel: how the run went */
static void json_run(const plan *p, const al__summary *s, cJSON *man) {
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
}

/* manifest: the model (as every manifest describes it), corpus, windows, options, the run */
static int json_manifest(const plan *p, const al__summary *s, const char *corpus_sha,
                         const char *started, cJSON *root, al_error *err) {
    cJSON *man = cJSON_AddObjectToObject(root, "manifest");
    /* the model as every manifest describes it (files, identity, shape, load warnings) */
    cJSON *mo = cJSON_Duplicate(s->model_json, 1);
    if (!mo) {
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
    if (p->fr.encoder && p->fr.wrap)
        cJSON_ReplaceItemInObject(wi, "rule",
                                  cJSON_CreateString("window k of length L = [CLS] + tokens "
                                                     "[k*(L-2), (k+1)*(L-2)) of the corpus body "
                                                     "+ [SEP]: L counts the two special tokens"));
    if (strcmp(s->family, "dump")) al__framing_json(&p->fr, man);
    json_options(p, s, man);
    json_run(p, s, man);
    cJSON_AddStringToObject(man, "started", started);
    char fin[32];
    al__ex_now_iso(fin, sizeof fin);
    cJSON_AddStringToObject(man, "finished", fin);
    cJSON_AddStringToObject(man, "head_index",
                            "per-head arrays are indexed by layer * n_head + head");
    return 0;
}

/* readings: the METHOD [reading]s the numbers depend on */
static void json_readings(const al__summary *s, cJSON *root) {
    cJSON *rd = cJSON_AddObjectToObject(root, "readings");
    char t[400];
    snprintf(t, sizeof t,
             "x_j are the %s vectors (--vectors; default value; METHOD 1, 9 [reading])",
             s->vectors);
    cJSON_AddStringToObject(rd, "vectors", t);
    const char *dt = !strcmp(s->distance, "norm-of-sum")
                         ? "|| sum_{i not in I_N} alpha_i x_i - s ||"
                     : !strcmp(s->distance, "sum-vector")
                         ? "|| sum_{i not in I_N} (alpha_i x_i - s) ||"
                         : "sum over the non-selected tokens of ||alpha_i x_i - s||";
    snprintf(t, sizeof t, "dtilde (--distance %s) = %s (METHOD 3, 9 [reading]; docs/readings.md)",
             s->distance, dt);
    cJSON_AddStringToObject(rd, "dtilde", t);
    snprintf(t, sizeof t,
             "E (--expectation %s) = %s of dtilde under a uniform random N-subset (METHOD 3, 9 "
             "[reading])",
             s->expectation,
             !strcmp(s->expectation, "mc")      ? "the Monte-Carlo estimate of the expectation"
             : !strcmp(s->expectation, "exact") ? "the exact expectation (every subset)"
                                                : "the analytic main term, a Jensen lower bound");
    cJSON_AddStringToObject(rd, "E", t);
    snprintf(t, sizeof t,
             "Algorithm 5: T on the %s logits (--temperature-scale %s; the paper's T is on raw "
             "q.k), %s directions (--directions %s) (METHOD 6, 9 [reading])",
             !strcmp(s->temperature_scale, "raw") ? "raw q.k" : "scaled q.k/sqrt(d_head)",
             s->temperature_scale, s->directions, s->directions);
    cJSON_AddStringToObject(rd, "sensitivity", t);
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
}

static void json_vanishing(const plan *p, const agg *a, cJSON *root) {
    const al__summary *s = &a->s;
    int H = p->H;
    cJSON *o = cJSON_AddObjectToObject(root, "vanishing");
    cJSON_AddNumberToObject(o, "L", p->long_L);
    cJSON_AddItemToObject(o, "n", al__ex_jarr_d(s->v_n, (size_t)s->vL));
    cJSON *mw = cJSON_AddObjectToObject(o, "max_weight");
    cJSON_AddItemToObject(mw, "median", al__ex_jarr_d(s->v_max_med, (size_t)s->vL));
    cJSON_AddItemToObject(mw, "q1", al__ex_jarr_d(s->v_max_q1, (size_t)s->vL));
    cJSON_AddItemToObject(mw, "q3", al__ex_jarr_d(s->v_max_q3, (size_t)s->vL));
    cJSON *en2 = cJSON_AddObjectToObject(o, "entropy_over_log_n");
    cJSON_AddItemToObject(en2, "median", al__ex_jarr_d(s->v_ent_med, (size_t)s->vL));
    cJSON_AddItemToObject(en2, "q1", al__ex_jarr_d(s->v_ent_q1, (size_t)s->vL));
    cJSON_AddItemToObject(en2, "q3", al__ex_jarr_d(s->v_ent_q3, (size_t)s->vL));
    cJSON *bd = cJSON_AddObjectToObject(o, "band");
    cJSON_AddBoolToObject(bd, "applies", s->band_applies);
    cJSON_AddStringToObject(bd, "definition",
                            "(1/n) exp(-+2 D / T), T = 1, D = ||q_t|| max_j ||k_j|| / "
                            "sqrt(d_head); median of D over heads");
    cJSON_AddItemToObject(bd, "lo", al__ex_jarr_d(s->v_band_lo, (size_t)s->vL));
    cJSON_AddItemToObject(bd, "hi", al__ex_jarr_d(s->v_band_hi, (size_t)s->vL));
    cJSON_AddItemToObject(bd, "inside_fraction", al__ex_jnum(s->v_inside));
    cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
    for (int i = 0; i < s->n_heatmaps; i++)
        if (!strcmp(s->hm_name[i], "heatmap_max_weight"))
            cJSON_AddItemToObject(ph, "mean_max_weight", al__ex_jarr_d(s->hm[i], (size_t)H));
        else if (!strcmp(s->hm_name[i], "heatmap_entropy"))
            cJSON_AddItemToObject(ph, "mean_entropy_over_log_n",
                                  al__ex_jarr_d(s->hm[i], (size_t)H));
    cJSON_AddStringToObject(o, "per_row_arrays",
                            "vanishing_max_weight.npy, vanishing_entropy.npy, vanishing_D.npy "
                            "[n_layer, n_head, L]");
}

/* What Algorithms 1 and 2 share over their grid of rows values: the five-number summaries over
 * heads of dtilde, dmax, E (five[3]); per head the window means (ph[4]: dtilde, dmax, E, E_mc,
 * each [rows, H]); the spread over windows of the mean dtilde (win [windows, rows]). */
static void json_distance(const plan *p, cJSON *o, const al_five *const five[3],
                          const double *const ph[4], const double *win, int rows) {
    static const char *const names[3] = {"dtilde", "dmax", "E"};
    for (int k = 0; k < 3; k++) cJSON_AddItemToObject(o, names[k], jfive(five[k], rows));
    cJSON *h = cJSON_AddObjectToObject(o, "per_head");
    for (int k = 0; k < 3; k++) cJSON_AddItemToObject(h, names[k], jrows(ph[k], rows, p->H));
    if (p->o.mc_samples > 0) cJSON_AddItemToObject(h, "E_mc", jrows(ph[3], rows, p->H));
    cJSON_AddItemToObject(o, "window_spread_of_mean_dtilde", jwin(win, p->o.windows, rows));
}

static void json_alg1(const plan *p, const agg *a, cJSON *root) {
    const al__summary *s = &a->s;
    cJSON *o = cJSON_AddObjectToObject(root, "alg1");
    cJSON_AddNumberToObject(o, "N", ALG1_N);
    cJSON_AddItemToObject(o, "L", al__ex_jarr_i(p->Ls, (size_t)p->nL));
    const al_five *const five[3] = {s->a1_dtilde, s->a1_dmax, s->a1_E};
    const double *const ph[4] = {a->a1[0], a->a1[1], a->a1[2], a->a1_mc};
    json_distance(p, o, five, ph, a->win_a1, p->nL);
}

static void json_alg2(const plan *p, const agg *a, cJSON *root) {
    const al__summary *s = &a->s;
    cJSON *o = cJSON_AddObjectToObject(root, "alg2");
    cJSON_AddNumberToObject(o, "L", p->long_L);
    cJSON_AddItemToObject(o, "N", al__ex_jarr_i(p->N2, (size_t)p->nN2));
    const al_five *const five[3] = {s->a2_dtilde, s->a2_dmax, s->a2_E};
    const double *const ph[4] = {a->a2[0], a->a2[1], a->a2[2], a->a2[3]};
    json_distance(p, o, five, ph, a->win_a2, p->nN2);
}

static void json_alg3(const plan *p, const agg *a, cJSON *root) {
    const al__summary *s = &a->s;
    cJSON *o = cJSON_AddObjectToObject(root, "alg3");
    cJSON_AddItemToObject(o, "L", al__ex_jarr_i(p->Ls, (size_t)p->nL));
    cJSON_AddItemToObject(o, "N", al__ex_jarr_i(p->N3, (size_t)p->nN3));
    cJSON_AddItemToObject(o, "pvalues", jrows(s->a3_p, p->nL, p->nN3));
    cJSON_AddItemToObject(o, "mean_dtilde", jrows(s->a3_dt_mean, p->nL, p->nN3));
    cJSON_AddItemToObject(o, "mean_E", jrows(s->a3_E_mean, p->nL, p->nN3));
    cJSON *cn = cJSON_AddObjectToObject(o, "critical_n");
    cJSON_AddItemToObject(cn, "0.01", jcrit(s->a3_crit[0], (size_t)p->nL));
    cJSON_AddItemToObject(cn, "0.05", jcrit(s->a3_crit[1], (size_t)p->nL));
    cJSON *cr = cJSON_AddObjectToObject(o, "critical_ratio"); /* N_crit / L per L (METHOD 4) */
    for (int l = 0; l < 2; l++) {
        cJSON *arr = cJSON_CreateArray();
        for (int li = 0; li < p->nL; li++)
            cJSON_AddItemToArray(
                arr,
                al__ex_jnum(s->a3_crit[l][li] > 0 ? (double)s->a3_crit[l][li] / p->Ls[li] : NAN));
        cJSON_AddItemToObject(cr, l == 0 ? "0.01" : "0.05", arr);
    }
    cJSON *top = cJSON_CreateArray(); /* the largest N tested at each L (L - 1 by default) */
    for (int li = 0; li < p->nL; li++) {
        int t = 0;
        for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++) t = p->N3[i];
        cJSON_AddItemToArray(top, cJSON_CreateNumber(t));
    }
    cJSON_AddItemToObject(o, "largest_n_tested", top);
    cJSON *sl = cJSON_AddObjectToObject(o, "slope");
    cJSON_AddItemToObject(sl, "0.01", al__ex_jnum(s->a3_slope[0]));
    cJSON_AddItemToObject(sl, "0.05", al__ex_jnum(s->a3_slope[1]));
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

static void json_alg4(const plan *p, const agg *a, cJSON *root) {
    const al__summary *s = &a->s;
    int H = p->H;
    cJSON *o = cJSON_AddObjectToObject(root, "alg4");
    cJSON_AddNumberToObject(o, "L", p->long_L);
    cJSON_AddItemToObject(o, "N", al__ex_jarr_i(p->N4, (size_t)p->nN4));
    cJSON_AddItemToObject(o, "ratio", jfive(s->a4_ratio, p->nN4));
    cJSON_AddItemToObject(o, "lower", jfive(s->a4_lower, p->nN4));
    cJSON_AddItemToObject(o, "upper", jfive(s->a4_upper, p->nN4));
    cJSON *ph = cJSON_AddObjectToObject(o, "per_head");
    cJSON_AddItemToObject(ph, "ratio", jrows(a->a4[0], p->nN4, H));
    cJSON_AddItemToObject(ph, "lower", jrows(a->a4[1], p->nN4, H));
    cJSON_AddItemToObject(ph, "upper", jrows(a->a4[2], p->nN4, H));
}

static void json_alg5(const plan *p, const agg *a, cJSON *root) {
    const al__summary *s = &a->s;
    int H = p->H;
    cJSON *o = cJSON_AddObjectToObject(root, "alg5");
    cJSON_AddNumberToObject(o, "L", p->long_L);
    cJSON_AddItemToObject(o, "T", al__ex_jarr_d(p->T, (size_t)p->nT));
    cJSON_AddItemToObject(o, "eps", al__ex_jarr_d(p->eps, (size_t)p->nE));
    cJSON_AddItemToObject(o, "g", jrows(s->g, p->nT, p->nE));
    cJSON_AddItemToObject(o, "spectral", al__ex_jarr_d(s->spec, (size_t)p->nT));
    cJSON *th = cJSON_AddObjectToObject(o, "theory");
    cJSON *pb = cJSON_CreateArray(), *sb = cJSON_CreateArray();
    for (int t = 0; t < p->nT; t++) {
        double b = 1 / (4 * p->T[t]);
        cJSON_AddItemToArray(pb, al__ex_jnum(b < sqrt(2.0) ? b : sqrt(2.0)));
        cJSON_AddItemToArray(sb, al__ex_jnum(1 / (2 * p->T[t])));
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
        cJSON_AddItemToArray(spj, al__ex_jarr_d(a->spec + (size_t)h * p->nT, (size_t)p->nT));
    }
    cJSON_AddItemToObject(ph, "fd", fdj);
    cJSON_AddItemToObject(ph, "spectral", spj);
}

static void json_verdicts(const al__summary *s, cJSON *root) {
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
}

/* results.json (schema attnlim.reproduce/1): its sections in their order, each experiment's
 * only when it ran. */
int al__ex_write_json(const plan *p, agg *a, const char *corpus_sha, const char *started,
                      al_error *err) {
    static const struct {
        unsigned exp;
        void (*fn)(const plan *p, const agg *a, cJSON *root);
    } sections[] = {{AL_EXP_VANISHING, json_vanishing}, {AL_EXP_ALG1, json_alg1},
                    {AL_EXP_ALG2, json_alg2},           {AL_EXP_ALG3, json_alg3},
                    {AL_EXP_ALG4, json_alg4},           {AL_EXP_ALG5, json_alg5}};
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "attnlim.reproduce/1");
    int rc = json_manifest(p, &a->s, corpus_sha, started, root, err);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    json_readings(&a->s, root);
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
        if (p->exp & sections[i].exp) sections[i].fn(p, a, root);
    json_verdicts(&a->s, root);
    al__ex_explorer_json(a, root);
    char *txt = al__json_print(root, 1);
    cJSON_Delete(root);
    if (!txt) return al__err(err, AL_E_NOMEM, "out of memory printing results.json");
    char path[4200];
    snprintf(path, sizeof path, "%s/results.json", p->o.out_dir);
    rc = al__write_file_atomic(path, txt, strlen(txt), err);
    free(txt);
    return rc;
}
