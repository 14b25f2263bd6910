/* guidelines.c: `attnlim guidelines` (al_guidelines; docs/guidelines.md).
 *
 *   plan         lengths (default 128..1024, 2048 when the context allows), per L the variants:
 *                dense, topk:k for every fixed k < L, each rule, each normalizer
 *   run_all      per (L, variant): the mean next-token NLL of windows 0..K-1 (one forward each,
 *                the variant set on the model), saved atomically to OUT/partial/L{L}/NAME.json;
 *                --resume reuses those whose fingerprint (model, corpus, K, version) matches
 *   sufficient   per L the smallest fixed k within 1% / 5% of the dense mean NLL; fits of
 *                k = c L, c sqrt L, c ln L through those points
 *   critical     the KS critical N of a reproduce run of the same model (--reproduce DIR)
 *   monitor      at every L (or --monitor-length's one), window 0: per layer entropy / ln n, max
 * weight and N_s/N of the dense model, of the smallest sufficient top-k and of each normalizer
 * Outputs: guidelines_out.c. */
#include "hooks.h"
#include "guidelines.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int def_k[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
static const char *const def_rules[] = {"topk-frac:0.06", "topk-sqrt:1", "topk-sqrt:2",
                                        "topk-log:2", "topk-log:4"};
static const char *const def_norms[] = {"sparsemax", "entmax15", "entmax:1.25", "ssmax"};

/* ---- the plan ------------------------------------------------------------------------------ */

static double mean_kept(const al_attn_variant *v, int L) {
    double s = 0;
    for (int n = 1; n <= L; n++) s += al_attn_kept(v, n, L);
    return s / L;
}

static int add_var(glen *gl, gv_kind kind, const char *rule, const char *norm, int K,
                   al_error *err) {
    gvar *g = &gl->var[gl->n_var];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->v.rule = AL_ATTN_DENSE;
    g->v.norm = al_norm_default(AL_NORM_SOFTMAX);
    int rc = rule ? al_attn_rule_parse(rule, &g->v, err) : 0;
    if (!rc && norm) rc = al_attn_norm_parse(norm, &g->v.norm, err);
    if (rc) return rc;
    snprintf(g->name, sizeof g->name, "%s", norm ? norm : rule ? rule : "dense");
    g->k_at_L = al_attn_kept(&g->v, gl->L, gl->L);
    g->mean_kept = mean_kept(&g->v, gl->L);
    if (!(g->nll = al__ex_alloc_nan((size_t)K, err))) return AL_E_NOMEM;
    gl->n_var++;
    return 0;
}

static int plan_length(guide *g, glen *gl, al_error *err) {
    const al_guide_opts *o = &g->o;
    const int *ks = o->k ? o->k : def_k;
    int nk = o->k ? o->n_k : (int)(sizeof def_k / sizeof *def_k);
    const char *const *rules = o->rules ? o->rules : def_rules;
    int nr = o->rules ? o->n_rules : (int)(sizeof def_rules / sizeof *def_rules);
    const char *const *norms = o->normalizers ? o->normalizers : def_norms;
    int nn = o->normalizers ? o->n_normalizers : (int)(sizeof def_norms / sizeof *def_norms);
    if (!(gl->var = al__calloc((size_t)(1 + nk + nr + nn), sizeof *gl->var, "variants", err)))
        return AL_E_NOMEM;
    int K = o->windows, rc = add_var(gl, GV_DENSE, NULL, NULL, K, err);
    char name[32];
    for (int i = 0; !rc && i < nk; i++) {
        if (ks[i] < 1) return al__err(err, AL_E_INVALID, "--k: %d is not >= 1", ks[i]);
        if (ks[i] >= gl->L) continue;
        snprintf(name, sizeof name, "topk:%d", ks[i]);
        rc = add_var(gl, GV_TOPK, name, NULL, K, err);
    }
    for (int i = 0; !rc && i < nr; i++) rc = add_var(gl, GV_RULE, rules[i], NULL, K, err);
    for (int i = 0; !rc && i < nn; i++) rc = add_var(gl, GV_NORM, NULL, norms[i], K, err);
    for (int v = 0; v < gl->n_var; v++)
        gl->var[v].v.layers = g->mask_l, gl->var[v].v.heads = g->mask_h;
    gl->crit[0] = gl->crit[1] = NAN;
    return rc;
}

/* --k values at or above a length are left out there (top-k of every key is dense): said on
 * stderr, naming the lengths; a --k whose every value applies to no length is refused. */
static int check_k_apply(const al_guide_opts *o, const int *Ls, int n, int root, al_error *err) {
    if (!o->k) return 0;
    int used = 0;
    for (int i = 0; i < o->n_k; i++) {
        char at[160] = "";
        size_t m = 0;
        int left = 0;
        for (int l = 0; l < n; l++)
            if (o->k[i] >= Ls[l]) {
                left++;
                if (m + 16 < sizeof at)
                    m += (size_t)snprintf(at + m, sizeof at - m, "%s%d", m ? ", " : "", Ls[l]);
            }
        used += left < n;
        if (left && root)
            al__log(AL_LOG_WARNING,
                    "attnlim guidelines: --k %d: left out at L = %s%s (k must be below L)", o->k[i],
                    at, m + 16 >= sizeof at ? ", ..." : "");
    }
    if (!used)
        return al__err(err, AL_E_INVALID,
                       "--k: every value is >= every length (k must be below L): no top-k "
                       "variant would run");
    return 0;
}

/* mask[n] from idx[k] (NULL: every index, *mask NULL) and its part of g->subset */
static int subset_mask(guide *g, const int *idx, int k, int n, const char *what, uint8_t **mask,
                       al_error *err) {
    size_t m = strlen(g->subset);
    m += (size_t)snprintf(g->subset + m, sizeof g->subset - m, "%s%s ", m ? "; " : "", what + 12);
    if (!idx) {
        snprintf(g->subset + m, sizeof g->subset - m, "all");
        return 0;
    }
    if (!(*mask = al__calloc((size_t)n, 1, what, err))) return AL_E_NOMEM;
    for (int i = 0; i < k; i++) {
        if (idx[i] < 0 || idx[i] >= n)
            return al__err(err, AL_E_RANGE, "%s: %d is outside 0..%d (%s)", what, idx[i], n - 1,
                           g->mi->path);
        (*mask)[idx[i]] = 1;
    }
    for (int i = 0, first = 1; i < n && m + 12 < sizeof g->subset; i++)
        if ((*mask)[i]) {
            m += (size_t)snprintf(g->subset + m, sizeof g->subset - m, "%s%d", first ? "" : ",", i);
            first = 0;
        }
    return 0;
}

static int build_plan(guide *g, al_error *err) {
    const al_guide_opts *o = &g->o;
    int rc = subset_mask(g, o->attn_layers, o->n_attn_layers, g->mi->n_layer, "--attention-layers",
                         &g->mask_l, err);
    if (!rc)
        rc = subset_mask(g, o->attn_heads, o->n_attn_heads, g->mi->n_head, "--attention-heads",
                         &g->mask_h, err);
    if (rc) return rc;
    int def[5] = {128, 256, 512, 1024, 2048}, nd = g->mi->n_ctx >= 2048 ? 5 : 4;
    const int *Ls = o->lengths ? o->lengths : def;
    int n = o->lengths ? o->n_lengths : nd;
    if (n < 1) return al__err(err, AL_E_INVALID, "--lengths: no length");
    if (!(g->len = al__calloc((size_t)n, sizeof *g->len, "lengths", err))) return AL_E_NOMEM;
    for (int i = 0; i < n; i++) {
        if (Ls[i] < 2 || Ls[i] > g->mi->n_ctx)
            return al__err(err, AL_E_INVALID, "--lengths: %d is outside 2..%d (the context of %s)",
                           Ls[i], g->mi->n_ctx, g->mi->path);
        if (i && Ls[i] <= Ls[i - 1])
            return al__err(err, AL_E_INVALID, "--lengths: not increasing at %d", Ls[i]);
        g->len[i].L = Ls[i];
        g->n_len++;
        if ((rc = plan_length(g, &g->len[i], err))) return rc;
    }
    return check_k_apply(o, Ls, n, g->rank == 0, err);
}

static void free_guide(guide *g) {
    for (int i = 0; i < g->n_len; i++) {
        for (int v = 0; v < g->len[i].n_var; v++) free(g->len[i].var[v].nll);
        free(g->len[i].var);
    }
    free(g->len);
    for (int i = 0; i < g->n_mon; i++) {
        free(g->mon[i].entropy);
        free(g->mon[i].ns);
        free(g->mon[i].maxw);
    }
    free(g->mon);
    free(g->rank_forwards);
    free(g->mask_l);
    free(g->mask_h);
    free(g->tokens);
    al_model_free(g->m);
}

/* ---- tokens, fingerprint ------------------------------------------------------------------ */

static int load_tokens(guide *g, al_error *err) {
    al_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = al_model_tokenizer(g->m, &tk, err);
    if (!rc && al_framing_make(tk, al__ex_switch(g->o.bos), -1, &g->fr, err))
        rc = al__err_prefix(err, AL_E_INVALID, "%s", g->mi->path);
    if (!rc) rc = al_corpus_load(g->corpus, g->o.data_path, &text, &len, err);
    if (!rc) al_sha256_buf(text, len, g->corpus_sha);
    if (!rc) rc = al_framing_tokenize(tk, &g->fr, text, len, &g->tokens, &g->n_tokens, err);
    free(text);
    al_tokenizer_free(tk);
    if (rc) return rc;
    int maxL = g->len[g->n_len - 1].L;
    if (g->n_tokens < (size_t)g->o.windows * maxL)
        return al__err(err, AL_E_INVALID, "%s: %zu tokens, but %d window(s) of L = %d need %zu",
                       g->corpus, g->n_tokens, g->o.windows, maxL, (size_t)g->o.windows * maxL);
    for (size_t i = 0; i < g->n_tokens; i++)
        if (g->tokens[i] < 0 || g->tokens[i] >= g->mi->vocab_size)
            return al__err(err, AL_E_INVALID, "%s: token %zu has id %d, outside the vocabulary",
                           g->corpus, i, g->tokens[i]);
    return 0;
}

static void fingerprint(guide *g) {
    char buf[512];
    snprintf(buf, sizeof buf, "attnlim-guidelines-1|%s|%s|K%d|%s%s%s%.300s", g->mi->sha256,
             g->corpus_sha, g->o.windows, al_version(), g->fr.bos ? "|bos" : "", /* as before */
             g->mask_l || g->mask_h ? "|" : "", g->mask_l || g->mask_h ? g->subset : "");
    al_sha256_buf(buf, strlen(buf), g->fingerprint);
}

/* ---- one (L, variant): the NLL of every window ---------------------------------------------- */

/* "topk-sqrt:1" -> "topk-sqrt_1" (a file name) */
static void partial_path(const guide *g, int L, const char *name, char *out, size_t cap) {
    char safe[64];
    snprintf(safe, sizeof safe, "%s", name);
    for (char *c = safe; *c; c++)
        if (*c == ':' || *c == '/') *c = '_';
    snprintf(out, cap, "%s/partial/L%d/%s.json", g->o.out_dir, L, safe);
}

/* 1: reused, 0: none usable (recomputed), < 0: a result of another layer / head subset (--resume
 * refuses the change; err set) */
static int load_partial(const guide *g, int L, gvar *v, al_error *err) {
    char path[4400];
    partial_path(g, L, v->name, path, sizeof path);
    char *txt = NULL;
    size_t len = 0;
    al_error e = {0};
    if (al__read_file(path, 1 << 20, &txt, &len, &e)) return 0;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    const cJSON *sub = cJSON_GetObjectItemCaseSensitive(j, "attention_subset");
    const char *was = cJSON_IsString(sub) ? sub->valuestring : "layers all; heads all";
    if (j && strcmp(was, g->subset)) {
        al__err(err, AL_E_INVALID,
                "%s: computed with the attention subset \"%s\", this run asks \"%s\": --resume "
                "refuses a change (another --out, or run without --resume)",
                path, was, g->subset);
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(j, "fingerprint");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "nll");
    int ok = cJSON_IsString(fp) && !strcmp(fp->valuestring, g->fingerprint) && cJSON_IsArray(a) &&
             cJSON_GetArraySize(a) == g->o.windows;
    for (int k = 0; ok && k < g->o.windows; k++) {
        const cJSON *x = cJSON_GetArrayItem(a, k);
        ok = cJSON_IsNumber(x) && isfinite(x->valuedouble);
        if (ok) v->nll[k] = x->valuedouble;
    }
    cJSON_Delete(j);
    return ok;
}

static int save_partial(const guide *g, int L, const gvar *v, al_error *err) {
    char path[4400];
    partial_path(g, L, v->name, path, sizeof path);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    int rc = al__mkdirs(dir, err);
    if (rc) return rc;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "fingerprint", g->fingerprint);
    cJSON_AddNumberToObject(j, "L", L);
    cJSON_AddStringToObject(j, "variant", v->name);
    cJSON_AddStringToObject(j, "attention_subset", g->subset);
    cJSON_AddItemToObject(j, "nll", cJSON_CreateDoubleArray(v->nll, g->o.windows));
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    rc = txt ? al__write_file_atomic(path, txt, strlen(txt), err)
             : al__err(err, AL_E_NOMEM, "out of memory");
    free(txt);
    return rc;
}

/* One window of one (L, variant): its NLL into v->nll[k] (the variant already set). */
static int run_window(guide *g, int L, gvar *v, int k, float *logits, al__progress *pg,
                      al_error *err) {
    const int32_t *win = g->tokens + (size_t)k * L;
    double t0 = al__now();
    int rc = al_model_forward_opts(g->m, win, L, NULL, &(al_forward_opts){AL_LOGITS_ALL, -1},
                                   logits, NULL, err);
    g->t_forward += al__now() - t0;
    g->n_forwards++;
    if (rc) return al__err_prefix(err, (al_code)rc, "guidelines");
    v->nll[k] = al_next_token_nll(logits, win, L, g->mi->vocab_size);
    if (!isfinite(v->nll[k]))
        return al__err(err, AL_E_RANGE, "guidelines: L = %d, %s, window %d: the NLL is not finite",
                       L, v->name, k);
    char status[96];
    snprintf(status, sizeof status, "L %d %s w%d NLL %.4f", L, v->name, k, v->nll[k]);
    al__progress_add(pg, L, status);
    return 0;
}

/* Rank 0: the variants of one L that --resume reuses (todo[v] = 0) and the others (1). */
static int resume_length(guide *g, glen *gl, int *todo, al__progress *pg, al_error *err) {
    for (int v = 0; v < gl->n_var; v++) {
        int got = g->o.resume ? load_partial(g, gl->L, &gl->var[v], err) : 0;
        if (got < 0) return AL_E_INVALID;
        todo[v] = !got;
        char saved[4400]; /* saved but not reusable: say so (issue 12, class 10) */
        partial_path(g, gl->L, gl->var[v].name, saved, sizeof saved);
        if (g->o.resume && !got && access(saved, F_OK) == 0)
            al__log(AL_LOG_WARNING,
                    "--resume: %s recomputed: unreadable, saved with other options, or an NLL "
                    "that is missing or not finite",
                    saved);
        if (got) {
            gl->var[v].loaded = 1;
            g->n_reused++;
            al__progress_add(pg, (double)g->o.windows * gl->L, NULL);
        }
    }
    return 0;
}

/* Collective, several ranks: every computed NLL of one L onto rank 0 (a sum: each (variant,
 * window) has one owner, zero elsewhere), which saves the partials; then rank 0's NLLs, reused
 * ones included, to every rank (the monitoring's choice needs them). buf: [n_var * K]. */
static int share_length(guide *g, glen *gl, const int *todo, const uint8_t *mine, double *buf,
                        al__progress *pg, al_error *err) {
    const int K = g->o.windows, n = gl->n_var * K;
    for (int i = 0; i < n; i++) buf[i] = mine[i] ? gl->var[i / K].nll[i % K] : 0;
    int rc = al__dist_agree(g->dist, al__dist_reduce(g->dist, buf, n, 0, err), err);
    for (int v = 0; !rc && g->rank == 0 && v < gl->n_var; v++) {
        if (!todo[v]) continue;
        for (int k = 0; k < K; k++) {
            if (!mine[v * K + k]) al__progress_add(pg, gl->L, NULL);
            gl->var[v].nll[k] = buf[v * K + k];
        }
        rc = save_partial(g, gl->L, &gl->var[v], err);
        if (!rc) g->n_computed++;
    }
    if ((rc = al__dist_agree(g->dist, rc, err))) return rc;
    for (int i = 0; i < n; i++) buf[i] = gl->var[i / K].nll[i % K];
    rc = al__dist_agree(g->dist, al__dist_bcast(g->dist, buf, sizeof(double) * n, err), err);
    for (int i = 0; !rc && i < n; i++) gl->var[i / K].nll[i % K] = buf[i];
    return rc;
}

/* Collective: one L. Its (variant, window) forwards not reused go round robin over the ranks
 * (item i to rank i % size); alone, each variant is saved as soon as its windows are done. */
static int run_length(guide *g, glen *gl, float *logits, al__progress *pg, al_error *err) {
    const int K = g->o.windows, n = gl->n_var * K, size = g->size;
    int *todo = al__calloc((size_t)gl->n_var, sizeof *todo, "variants", err);
    uint8_t *mine = al__calloc((size_t)n, 1, "items", err);
    double *buf = al__calloc((size_t)n, sizeof *buf, "NLLs", err);
    int rc = todo && mine && buf ? 0 : AL_E_NOMEM;
    if (!rc && g->rank == 0) rc = resume_length(g, gl, todo, pg, err);
    if (!(rc = al__dist_agree(g->dist, rc, err)))
        rc = al__dist_agree(g->dist, al__dist_bcast(g->dist, todo, sizeof *todo * gl->n_var, err),
                            err);
    for (int v = 0, item = 0; !rc && v < gl->n_var; v++) {
        gvar *x = &gl->var[v];
        for (int k = 0, set = 0; todo[v] && !rc && k < K; k++, item++) {
            if (item % size != g->rank) continue;
            if (!set++) rc = al_model_set_attention(g->m, x->kind == GV_DENSE ? NULL : &x->v, err);
            mine[v * K + k] = 1;
            if (!rc) rc = run_window(g, gl->L, x, k, logits, pg, err);
        }
        if (!rc && todo[v] && size == 1) rc = save_partial(g, gl->L, x, err);
        if (!rc && todo[v] && size == 1) g->n_computed++;
    }
    if (size > 1 && !(rc = al__dist_agree(g->dist, rc, err)))
        rc = share_length(g, gl, todo, mine, buf, pg, err);
    free(todo);
    free(mine);
    free(buf);
    return rc;
}

/* Collective: every L. */
static int run_all(guide *g, al_error *err) {
    int maxL = g->len[g->n_len - 1].L;
    size_t n;
    if (!al__mul_ok((size_t)maxL, (size_t)g->mi->vocab_size, &n))
        return al__err(err, AL_E_NOMEM, "logits overflow");
    float *logits = al__malloc(n * sizeof(float), "logits", err); /* [maxL, V] */
    int rc = al__dist_agree(g->dist, logits ? 0 : AL_E_NOMEM, err);
    double units = 0;
    for (int i = 0; i < g->n_len; i++)
        units += (double)g->len[i].n_var * g->o.windows * g->len[i].L;
    al__progress pg;
    al__progress_begin(&pg, g->o.quiet ? 0 : g->o.progress, stderr, units);
    for (int i = 0; !rc && i < g->n_len; i++) rc = run_length(g, &g->len[i], logits, &pg, err);
    al__progress_end(&pg);
    free(logits);
    if (!rc) rc = al_model_set_attention(g->m, NULL, err);
    return rc;
}

/* ---- smallest sufficient k, fits ------------------------------------------------------------ */

static void sufficient(guide *g) {
    for (int i = 0; i < g->n_len; i++) {
        glen *gl = &g->len[i];
        for (int v = 0; v < gl->n_var; v++) {
            gvar *x = &gl->var[v];
            x->mean = al__ex_mean_finite(x->nll, g->o.windows);
            x->delta = x->mean - gl->var[0].mean;
        }
        for (int l = 0; l < 2; l++) {
            gl->k_suff[l] = 0;
            double limit = gl->var[0].mean * (1 + AL__GUIDE_LEVELS[l]);
            for (int v = 0; v < gl->n_var; v++) {
                gvar *x = &gl->var[v];
                int k = (int)x->k_at_L;
                if (x->kind == GV_TOPK && x->mean <= limit && (!gl->k_suff[l] || k < gl->k_suff[l]))
                    gl->k_suff[l] = k;
            }
        }
    }
    for (int l = 0; l < 2; l++)
        for (int f = 0; f < 3; f++) {
            double sxy = 0, sxx = 0;
            int n = 0;
            for (int i = 0; i < g->n_len; i++) {
                int k = g->len[i].k_suff[l];
                if (!k) continue;
                double L = g->len[i].L, x = f == 0 ? L : f == 1 ? sqrt(L) : log(L);
                sxy += x * k, sxx += x * x, n++;
            }
            g->fit[l][f] = n ? sxy / sxx : NAN;
            double r2 = 0;
            for (int i = 0; n && i < g->n_len; i++) {
                int k = g->len[i].k_suff[l];
                if (!k) continue;
                double L = g->len[i].L, x = f == 0 ? L : f == 1 ? sqrt(L) : log(L);
                double r = (g->fit[l][f] * x - k) / k;
                r2 += r * r;
            }
            g->fit_rms[l][f] = n ? sqrt(r2 / n) : NAN;
        }
}

/* ---- the KS critical N of reproduce -----------------------------------------------------------
 */

static int read_critical(guide *g, al_error *err) {
    if (!g->o.reproduce_dir) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/results.json", g->o.reproduce_dir);
    snprintf(g->crit_source, sizeof g->crit_source, "%s", path);
    char *txt = NULL;
    size_t len = 0;
    int rc = al__read_file(path, 1 << 28, &txt, &len, err);
    if (rc) return al__err_prefix(err, (al_code)rc, "--reproduce");
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", path);
    const cJSON *man = cJSON_GetObjectItemCaseSensitive(j, "manifest");
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(man, "model");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(mo, "sha256");
    const cJSON *a3 = cJSON_GetObjectItemCaseSensitive(j, "alg3");
    const cJSON *Ls = cJSON_GetObjectItemCaseSensitive(a3, "L");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(a3, "critical_n");
    if (!cJSON_IsString(sha) || strcmp(sha->valuestring, g->mi->sha256)) {
        cJSON_Delete(j);
        return al__err(err, AL_E_INVALID,
                       "%s: a reproduce run of another model (its model identity, "
                       "manifest.model.sha256, is not "
                       "%.16s...)",
                       path, g->mi->sha256);
    }
    if (!cJSON_IsArray(Ls) || !cJSON_IsObject(cn)) {
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: no alg3.L / alg3.critical_n (run Algorithm 3)", path);
    }
    static const char *const keys[2] = {"0.01", "0.05"};
    for (int l = 0; l < 2; l++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cn, keys[l]);
        for (int i = 0; i < cJSON_GetArraySize(Ls); i++) {
            const cJSON *Lx = cJSON_GetArrayItem(Ls, i), *c = cJSON_GetArrayItem(arr, i);
            for (int k = 0; cJSON_IsNumber(Lx) && k < g->n_len; k++)
                if (g->len[k].L == Lx->valueint)
                    g->len[k].crit[l] = cJSON_IsNumber(c) ? c->valuedouble : NAN;
        }
    }
    cJSON_Delete(j);
    return 0;
}

/* ---- per-layer monitoring ----------------------------------------------------------------------
 */

typedef struct mon_ctx {
    guide *g;
    gmon *mon;
    int L;
} mon_ctx;

/* One layer: every head's entropy / ln n, max weight and N_s/N (value vectors) in parallel. */
static int mon_layer(void *user, const al_capture *cap, al_error *err) {
    mon_ctx *c = user;
    const int L = cap->T, D = cap->d_head, H = cap->n_sel, N = c->mon->N;
    double ent = 0, mw = 0, ns = 0;
    int rc = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : ent, mw, ns)
    for (int h = 0; h < H; h++) {
        al_error e = {0};
        double *w = malloc(sizeof(double) * ((size_t)L * L + (size_t)L * D + 2 * (size_t)L));
        if (!w) {
#pragma omp atomic write
            rc = AL_E_NOMEM;
            continue;
        }
        double *x = w + (size_t)L * L, *rmax = x + (size_t)L * D, *rent = rmax + L;
        al__ex_to_double(cap->weights + (size_t)h * L * L, w, (size_t)L * L);
        al__ex_to_double(cap->v + (size_t)h * L * D, x, (size_t)L * D);
        al_metrics_opts mo = {.top_n = &N, .n_top = 1, .separability = 1, .causal = 1};
        al_topn_stats st;
        int r = al_head_metrics(w, x, L, D, &mo, &st, rmax, rent, &e);
        if (r) {
#pragma omp atomic write
            rc = r;
        } else {
            double se = 0, sm = 0;
            for (int t = 1; t < L; t++) se += rent[t] / log((double)(t + 1)), sm += rmax[t];
            ent += se / (L - 1), mw += sm / (L - 1), ns += st.ns_ratio;
        }
        free(w);
    }
    if (rc) return al__err(err, (al_code)rc, "monitoring: layer %d", cap->layer);
    c->mon->entropy[cap->layer] = ent / H;
    c->mon->maxw[cap->layer] = mw / H;
    c->mon->ns[cap->layer] = ns / H;
    return 0;
}

static int monitor_one(guide *g, int L, const gvar *v, gmon *mon, al_error *err) {
    int nl = g->mi->n_layer;
    snprintf(mon->name, sizeof mon->name, "%s", v->name);
    mon->L = L;
    mon->N = g->monitor_n < L ? g->monitor_n : (L / 2 > 0 ? L / 2 : 1);
    if (!(mon->entropy = al__ex_alloc_nan((size_t)nl, err)) ||
        !(mon->ns = al__ex_alloc_nan((size_t)nl, err)) ||
        !(mon->maxw = al__ex_alloc_nan((size_t)nl, err)))
        return AL_E_NOMEM;
    if ((mon - g->mon) % g->size != g->rank) { /* another rank's item */
        for (int l = 0; l < nl; l++) mon->entropy[l] = mon->ns[l] = mon->maxw[l] = 0;
        return 0;
    }
    if (!g->o.quiet && g->o.progress)
        al__log(AL_LOG_NOTE, "attnlim guidelines: monitoring %s at L = %d", v->name, L);
    mon_ctx c = {.g = g, .mon = mon, .L = L};
    al_capture_request req = {.what = AL_CAP_WEIGHTS | AL_CAP_V, .fn = mon_layer, .user = &c};
    int rc = al_model_set_attention(g->m, v->kind == GV_DENSE ? NULL : &v->v, err);
    if (!rc)
        rc = al_model_forward_opts(g->m, g->tokens, L, &req, &(al_forward_opts){AL_LOGITS_NONE, -1},
                                   NULL, NULL, err);
    g->n_forwards++;
    if (!rc) rc = al_model_set_attention(g->m, NULL, err);
    return rc;
}

/* Collective, several ranks: every monitored (L, variant) onto rank 0 (item j is rank
 * j % size's; a sum over ranks of the owner's values and zeros, NaN kept). rc: this rank's. */
static int share_monitor(guide *g, int rc, al_error *err) {
    const int nl = g->mi->n_layer;
    size_t n = (size_t)g->n_mon * 3 * nl;
    double *buf = rc ? NULL : al__malloc(sizeof(double) * (n ? n : 1), "monitoring", err);
    if ((rc = al__dist_agree(g->dist, rc ? rc : buf ? 0 : AL_E_NOMEM, err))) {
        free(buf);
        return rc;
    }
    for (int j = 0; j < g->n_mon; j++) {
        double *const a[3] = {g->mon[j].entropy, g->mon[j].ns, g->mon[j].maxw};
        for (int q = 0; q < 3; q++)
            memcpy(buf + ((size_t)j * 3 + q) * nl, a[q], sizeof(double) * nl);
    }
    rc = al__dist_agree(g->dist, al__dist_reduce(g->dist, buf, (int)n, 0, err), err);
    for (int j = 0; !rc && g->rank == 0 && j < g->n_mon; j++) {
        double *const a[3] = {g->mon[j].entropy, g->mon[j].ns, g->mon[j].maxw};
        for (int q = 0; q < 3; q++)
            memcpy(a[q], buf + ((size_t)j * 3 + q) * nl, sizeof(double) * nl);
    }
    free(buf);
    return rc;
}

/* The variants monitored at one L: dense, the smallest top-k within 1% (else 5%), every
 * normalizer; pick has room for 64. */
static int monitor_pick(const glen *gl, const gvar **pick) {
    int np = 0;
    pick[np++] = &gl->var[0];
    int ks = gl->k_suff[0] ? gl->k_suff[0] : gl->k_suff[1];
    for (int v = 0; v < gl->n_var && np < 64; v++) {
        const gvar *x = &gl->var[v];
        if ((x->kind == GV_TOPK && (int)x->k_at_L == ks) || x->kind == GV_NORM) pick[np++] = x;
    }
    return np;
}

/* Monitoring at every L of the grid (--monitor-length 0, the default), at one L (> 0) or off
 * (-1); the figures show the largest monitored L <= 1024 (else the smallest). */
static int monitor(guide *g, al_error *err) {
    if (g->o.monitor_length < 0) return 0;
    g->monitor_n = g->o.monitor_n > 0 ? g->o.monitor_n : 16;
    int total = 0, fig = -1;
    const gvar *pick[64];
    for (int i = 0; i < g->n_len; i++) {
        if (g->o.monitor_length && g->len[i].L != g->o.monitor_length) continue;
        total += monitor_pick(&g->len[i], pick);
        if (fig < 0 || g->len[i].L <= 1024) fig = i;
    }
    if (fig < 0) { /* --monitor-length not in the grid: the first L, as before */
        fig = 0;
        total = monitor_pick(&g->len[0], pick);
    }
    g->monitor_L = g->len[fig].L;
    if (!(g->mon = al__calloc((size_t)total, sizeof *g->mon, "monitoring", err))) return AL_E_NOMEM;
    int rc = 0;
    for (int i = 0; !rc && i < g->n_len; i++) {
        glen *gl = &g->len[i];
        int one = g->o.monitor_length && total && fig == i && gl->L != g->o.monitor_length;
        if (g->o.monitor_length && gl->L != g->o.monitor_length && !one) continue;
        int np = monitor_pick(gl, pick);
        for (int k = 0; !rc && k < np; k++)
            rc = monitor_one(g, gl->L, pick[k], &g->mon[g->n_mon++], err);
    }
    return g->size > 1 ? share_monitor(g, rc, err) : rc;
}

/* ---- the driver ------------------------------------------------------------------------------ */

/* Every rank: the model (rank 0 opens it first: a known name fetched on first use is in place
 * before the others open it), its identity, a causal LM, the plan; agreed. */
static int setup_model(guide *g, al_error *err) {
    int rc = g->rank == 0 ? al_model_open(g->o.model, &g->m, err) : 0;
    if ((rc = al__dist_agree(g->dist, rc, err))) return rc;
    if (g->rank) rc = al_model_open(g->o.model, &g->m, err);
    if (!rc) rc = al_model_hash(g->m, err);
    if (!rc) {
        g->mi = al_model_get_info(g->m);
        if (!g->mi->causal || !strcmp(g->mi->family, "dump"))
            rc = al__err(err, AL_E_UNSUPPORTED,
                         "%s: guidelines scores next-token predictions: a causal LM is needed "
                         "(family %s)",
                         g->mi->path, g->mi->family);
    }
    if (!rc) rc = build_plan(g, err);
    return al__dist_agree(g->dist, rc, err);
}

/* Collective: rank 0 reads the corpus, every rank checks it opened rank 0's model and receives
 * the tokens and the framing. */
static int setup_tokens(guide *g, al_error *err) {
    int rc = al__dist_agree(g->dist, g->rank == 0 ? load_tokens(g, err) : 0, err);
    if (rc || g->size == 1) return rc;
    uint64_t nt = g->n_tokens;
    int32_t bos = g->fr.bos;
    rc = al__ex_same_model(g->dist, g->mi, err);
    if (!rc) rc = al__dist_bcast(g->dist, &nt, sizeof nt, err);
    if (!rc) rc = al__dist_bcast(g->dist, &bos, sizeof bos, err);
    if (!rc && g->rank &&
        !(g->tokens = al__malloc(sizeof(int32_t) * (size_t)(nt ? nt : 1), "tokens", err)))
        rc = AL_E_NOMEM;
    if ((rc = al__dist_agree(g->dist, rc, err))) return rc;
    g->n_tokens = (size_t)nt, g->fr.bos = bos;
    return al__dist_agree(
        g->dist, al__dist_bcast(g->dist, g->tokens, sizeof(int32_t) * (size_t)nt, err), err);
}

/* Rank 0: the output directory (only once the options and inputs are known good: a refused run
 * leaves nothing behind), its lock, the sweep of killed runs' temp files, the critical N. */
static int setup_out(guide *g, int *lock, al_error *err) {
    int rc = al__mkdirs(g->o.out_dir, err);
    if (!rc) rc = al__ex_lock_out_dir(g->o.out_dir, lock, err);
    if (!rc) fingerprint(g);
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/partial", g->o.out_dir);
    int swept = 0;
    if (!rc) rc = al__ex_sweep_dir(g->o.out_dir, 0, &swept, err);
    if (!rc && al__is_dir(pdir)) rc = al__ex_sweep_dir(pdir, 1, &swept, err);
    if (!rc) rc = read_critical(g, err);
    return rc;
}

/* Collective, several ranks: the forward seconds summed and each rank's forwards onto rank 0. */
static int share_counts(guide *g, al_error *err) {
    int rc = al__dist_reduce(g->dist, &g->t_forward, 1, 0, err);
    double mine = g->n_forwards;
    if (!rc && g->rank == 0 &&
        !(g->rank_forwards = al__calloc((size_t)g->size, sizeof(double), "ranks", err)))
        rc = AL_E_NOMEM;
    if ((rc = al__dist_agree(g->dist, rc, err))) return rc;
    return al__dist_agree(g->dist,
                          al__dist_gather(g->dist, &mine, sizeof mine, g->rank_forwards, err), err);
}

int al_guidelines(const al_guide_opts *opts, al_error *err) {
    return al_guidelines_dist(opts, NULL, err);
}

int al_guidelines_dist(const al_guide_opts *opts, al_dist *d, al_error *err) {
    guide g;
    memset(&g, 0, sizeof g);
    g.o = *opts;
    g.dist = d, g.rank = al__dist_rank(d), g.size = al__dist_size(d);
    if (g.rank) g.o.quiet = 1, g.o.progress = 0; /* rank 0 alone prints */
    g.t_start = al__now();
    al__ex_now_iso(g.started, sizeof g.started);
    if (g.o.windows <= 0) g.o.windows = 4;
    if (!g.o.out_dir) g.o.out_dir = "attnlim-guidelines";
    g.corpus = g.o.corpus ? g.o.corpus : "war-and-peace";
    if (g.o.threads > 0) al__set_threads(g.o.threads);
    int lock = -1, rc = 0;
    if (!g.o.model) rc = al__err(err, AL_E_INVALID, "guidelines: --model is required");
    if (!rc) rc = setup_model(&g, err);
    if (!rc) rc = setup_tokens(&g, err);
    if (!rc) rc = al__dist_agree(g.dist, g.rank == 0 ? setup_out(&g, &lock, err) : 0, err);
    if (!rc) rc = run_all(&g, err);
    if (!rc) sufficient(&g);
    if (!rc) rc = monitor(&g, err);
    if (!rc && g.size > 1) rc = share_counts(&g, err);
    if (!rc) rc = al__dist_agree(g.dist, g.rank == 0 ? al__guide_write(&g, err) : 0, err);
    if (!rc && !g.o.quiet)
        al__log(AL_LOG_NOTE,
                "attnlim guidelines: %d (L, variant) runs computed, %d reused; wrote %s/"
                "guidelines.json, guidelines.csv, monitoring.csv, guidelines.md, figures",
                g.n_computed, g.n_reused, g.o.out_dir);
    if (lock >= 0) close(lock);
    free_guide(&g);
    return rc;
}
