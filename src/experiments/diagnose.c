/* diagnose.c: `attnlim diagnose`: per-head health of the attention on one window. */
#include "experiments.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- al_diagnose: per-head health on one window
 * ------------------------------------------------------ */

/* N_s/N at N = 1 is 1 by construction (one selected token is always separable): not shown */
#define DIAG_NS 3
static const int diag_N[DIAG_NS] = {4, 16, 64};

typedef struct diag_ctx {
    int L, n_head, n_threads, dx, nN;
    int Ns[DIAG_NS];
    const al_norm *nm; /* NULL: the model's weights */
    al_norm soft;
    double *max_w, *ent, *sink, *spec; /* [H] */
    double *ns;                        /* [H, nN] (room for DIAG_NS) */
    scratch *sc;                       /* [n_threads] */
    al_dist *dist;                     /* this rank computes the heads it owns (dist.h) */
    int rank;
    uint8_t *done; /* [H] */
} diag_ctx;

static int diag_head(diag_ctx *c, const al_capture *cap, int i, scratch *sc, al_error *err) {
    int64_t L = cap->T;
    size_t LL = (size_t)L * L;
    int h = cap->layer * c->n_head + cap->heads[i];
    const float *z = cap->logits + (size_t)i * LL;
    for (int64_t t = 0; t < L; t++) {
        int64_t n = cap->causal ? t + 1 : L;
        for (int64_t u = 0; u < L; u++) sc->z[(size_t)t * L + u] = u < n ? z[(size_t)t * L + u] : 0;
    }
    for (int64_t t = 0; t < L; t++) {
        int64_t n = cap->causal ? t + 1 : L;
        double *wr = sc->w + (size_t)t * L;
        if (c->nm) {
            int rc = al_norm_forward(c->nm, sc->z + (size_t)t * L, n, wr, err);
            if (rc) return rc;
        } else {
            al__ex_to_double(cap->weights + (size_t)i * LL + (size_t)t * L, wr, (size_t)n);
        }
        for (int64_t u = n; u < L; u++) wr[u] = 0;
    }
    al__ex_to_double(cap->v + (size_t)i * L * cap->d_head, sc->x, (size_t)L * cap->d_head);
    double *rmax = sc->q, *rent = sc->k; /* [L] each (q, k scratch are >= L doubles) */
    int rc = al__ex_row_stats(sc->w, L, cap->causal, rmax, rent, err);
    if (rc) return rc;
    double sm = 0, se = 0, ss = 0;
    int ce = 0;
    for (int64_t t = 0; t < L; t++) {
        int64_t n = cap->causal ? t + 1 : L;
        sm += rmax[t];
        ss += sc->w[(size_t)t * L];
        if (n >= 2) se += rent[t] / log((double)n), ce++;
    }
    c->max_w[h] = sm / L;
    c->sink[h] = ss / L;
    c->ent[h] = ce ? se / ce : NAN;
    if (c->nN > 0) {
        al_metrics_opts mo = {
            .top_n = c->Ns, .n_top = c->nN, .separability = 1, .causal = cap->causal};
        rc = al_head_metrics(sc->w, sc->x, L, c->dx, &mo, sc->st, NULL, NULL, err);
        if (rc) return rc;
        for (int k = 0; k < c->nN; k++) c->ns[(size_t)h * c->nN + k] = sc->st[k].ns_ratio;
    }
    double T1 = 1.0;
    return al_head_sensitivity(sc->z, L, cap->causal, c->nm ? c->nm : &c->soft, &T1, 1, NULL, 0, 0,
                               cap->layer, cap->heads[i], NULL, &c->spec[h], err);
}

static int diag_observe(void *user, const al_capture *cap, al_error *err) {
    diag_ctx *c = user;
    int failed = 0;
    al_error first = {0};
#pragma omp parallel num_threads(c->n_threads)
    {
        int tid = omp_get_thread_num();
        al_error e = {0};
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < cap->n_sel; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            int h = cap->layer * c->n_head + cap->heads[i];
            if (al__dist_owner(c->dist, h) != c->rank) continue; /* another rank's head */
            if (diag_head(c, cap, i, &c->sc[tid], &e)) {
#pragma omp critical(diag_err)
                {
                    if (!failed) first = e;
                    failed = 1;
                }
            } else {
                c->done[h]++;
            }
        }
    }
    if (failed) {
        if (err) *err = first;
        return first.code ? (int)first.code : AL_E_INVALID;
    }
    return 0;
}

/* Rank 0: the diagnosis and, with --out, the explorer's window (the first W tokens of the window
 * as their own window) and every output (diagnose_out.c). */
static int diag_report(const al_diag_opts *o, al_model *m, const diag_ctx *c, int L,
                       const int32_t *win, al_tokenizer *tk, int has_own, char **json,
                       al_error *err) {
    const al_model_info *mi = al_model_get_info(m);
    int H = mi->n_layer * mi->n_head, rc = 0;
    al__ex_diag d = {.n_layer = mi->n_layer,
                     .n_head = mi->n_head,
                     .L = L,
                     .nN = c->nN,
                     .causal = mi->causal,
                     .Ns = c->Ns,
                     .max_w = c->max_w,
                     .ent = c->ent,
                     .sink = c->sink,
                     .spec = c->spec,
                     .ns = c->ns,
                     .flags_ok = c->nm ? al_norm_sums_to_one(c->nm) : 1};
    for (int h = 0; h < H; h++) d.n_measured += isfinite(c->max_w[h]) != 0;
    float *w = NULL;
    char **tok = NULL, note[300];
    int ids[AL__EX_WINDOW], W = L < AL__EX_WINDOW ? L : AL__EX_WINDOW;
    if (o->out_dir && !has_own) { /* an attention dump runs no forward of its own choosing */
        rc = al__ex_window_weights(m, c->nm, win, W, &w, err);
        if (!rc) rc = al__ex_token_strings(tk, win, W, &tok, err);
        for (int t = 0; t < W; t++) ids[t] = win[t];
        snprintf(note, sizeof note,
                 "The first %d tokens of the diagnosed window, run as a window of their own (L = "
                 "%d)%s.",
                 W, W, mi->causal ? "" : " (bidirectional: every row sees the W tokens)");
        d.W = rc ? 0 : W, d.w = w, d.tok = tok, d.ids = ids, d.window_note = note;
    }
    if (!rc) rc = al__ex_diag_write(o, m, &d, json, err);
    free(w);
    al__ex_free_strings(tok, W);
    return rc;
}

/* A selection list [n] of indices into 0..count-1 as a mask (*mask NULL: everything). */
static int sel_mask(const int *v, int n, int count, const char *what, uint8_t **mask,
                    al_error *err) {
    *mask = NULL;
    if (!v || n <= 0) return 0;
    if (!(*mask = al__calloc((size_t)count, 1, what, err))) return AL_E_NOMEM;
    for (int i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= count)
            return al__err(err, AL_E_RANGE, "%s: %d is outside 0..%d (the model has %d)", what,
                           v[i], count - 1, count);
        (*mask)[v[i]] = 1;
    }
    return 0;
}

/* How many tokens the prompt corpus makes with the model's tokenizer. */
static int prompt_tokens(al_model *m, const char *corpus, int *n, al_error *err) {
    al_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0, nt = 0;
    int32_t *ids = NULL;
    int rc = al_model_tokenizer(m, &tk, err);
    if (!rc) rc = al_corpus_load(corpus, NULL, &text, &len, err);
    if (!rc) rc = al_tokenize(tk, text, len, 0, &ids, &nt, err);
    *n = rc ? 0 : (int)(nt < (size_t)1 << 30 ? nt : (size_t)1 << 30);
    free(ids);
    free(text);
    if (tk) al_tokenizer_free(tk);
    return rc;
}

int al_diagnose(const al_diag_opts *o, char **json, al_error *err) {
    return al_diagnose_dist(o, NULL, json, err);
}

/* Over several processes as al_reproduce_dist: rank 0 reads the corpus and sends the window's
 * tokens, every rank runs the forward and its heads, rank 0 merges and reports. */
int al_diagnose_dist(const al_diag_opts *o, al_dist *dist, char **json, al_error *err) {
    *json = NULL;
    al_model *m = NULL;
    al_tokenizer *tk = NULL;
    char *text = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0, text_len = 0;
    diag_ctx c;
    memset(&c, 0, sizeof c);
    al_norm nm;
    const int32_t *own = NULL; /* the model's own tokens (an attention dump), [n_own] */
    int n_own = 0;
    char own_label[160] = "";
    const al_model_info *mi = NULL;
    int root = al__dist_rank(dist) == 0, L = 0;
    const int32_t *win = NULL;            /* the window's L tokens */
    uint8_t *lmask = NULL, *hmask = NULL; /* --layers, --heads (NULL: all) */
    /* rank 0's model where a rank names none; rank 0 opens it first (a known name is fetched on
     * first use), then the others */
    char model[4096] = "";
    if (root) snprintf(model, sizeof model, "%s", o->model ? o->model : "gpt2");
    int rc = al__dist_agree(dist, al__dist_bcast(dist, model, sizeof model, err), err);
    if (!rc && !root && o->model) snprintf(model, sizeof model, "%s", o->model);
    if (!rc && root) rc = al_model_open(model, &m, err);
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    if (!root && (rc = al_model_open(model, &m, err))) goto setup_end;
    if ((rc = al_model_hash(m, err))) goto setup_end;
    mi = al_model_get_info(m);
    char wopt[32] = "";
    if (o->window) snprintf(wopt, sizeof wopt, "--window %d", o->window);
    if ((rc = al__ex_own_tokens_opts(m, o->corpus, wopt[0] ? wopt : NULL, NULL, NULL, &own, &n_own,
                                     own_label, sizeof own_label, err)))
        goto setup_end;
    int prompt_n = 0; /* a prompt (--text) without --length: L = its tokens (on every rank) */
    if (o->length <= 0 && !n_own && o->corpus &&
        !strncmp(o->corpus, AL_CORPUS_TEXT, strlen(AL_CORPUS_TEXT)) &&
        (rc = prompt_tokens(m, o->corpus, &prompt_n, err)))
        goto setup_end;
    L = o->length > 0          ? o->length
        : prompt_n             ? prompt_n
        : n_own && !mi->causal ? n_own /* a bidirectional dump: L = T only */
        : mi->n_ctx < 1024     ? mi->n_ctx
                               : 1024;
    if (n_own && (L > n_own || (!mi->causal && L != n_own))) {
        rc = al__err(err, AL_E_INVALID, "--length %d, but %s holds attention over T = %d tokens%s",
                     L, mi->path, n_own,
                     mi->causal ? " (L <= T)" : " and is bidirectional (L = T only)");
        goto setup_end;
    }
    if (L < 2 || L > mi->n_ctx) {
        rc = al__err(err, AL_E_INVALID, "--length %d is outside 2..%d (the model's context)", L,
                     mi->n_ctx);
        goto setup_end;
    }
    if (o->normalizer) {
        if ((rc = al_norm_parse(o->normalizer, &nm, err))) goto setup_end;
        c.nm = &nm;
    }
    if (n_own) { /* before anything is computed: does the dump hold what diagnose reads? */
        al_capture_request pre = {.what = AL_CAP_LOGITS | AL_CAP_V |
                                          (c.nm ? 0u : (unsigned)AL_CAP_WEIGHTS),
                                  .fn = al__ex_no_observer};
        if ((rc = al__model_check(m, L, &pre, err))) {
            al__err_prefix(err, rc, "diagnose reads %s",
                           c.nm ? "logits and v (--normalizer)" : "logits, weights and v");
            goto setup_end;
        }
    }
    if (!root) {
        if (!(tokens = al__malloc(sizeof(int32_t) * (size_t)L, "tokens", err))) rc = AL_E_NOMEM;
        win = tokens;
        goto setup_end;
    }
    if (n_own) { /* an attention dump: its tokens */
        if (!(tokens = al__malloc(sizeof(int32_t) * (size_t)n_own, "tokens", err))) {
            rc = AL_E_NOMEM;
            goto setup_end;
        }
        memcpy(tokens, own, sizeof(int32_t) * (size_t)n_own);
        n_tokens = (size_t)n_own;
    } else if ((rc = al_model_tokenizer(m, &tk, err)) ||
               (rc = al_corpus_load(o->corpus ? o->corpus : "war-and-peace", o->data_path, &text,
                                    &text_len, err)) ||
               (rc = al_tokenize(tk, text, text_len, 0, &tokens, &n_tokens, err)))
        goto setup_end;
    if (o->window < 0 || (size_t)(o->window + 1) * (size_t)L > n_tokens) {
        rc = al__err(err, AL_E_INVALID, "%s: %zu tokens, window %d of L = %d needs %zu",
                     o->corpus ? o->corpus : "war-and-peace", n_tokens, o->window, L,
                     (size_t)(o->window + 1) * L);
        goto setup_end;
    }
    win = tokens + (size_t)o->window * L;
setup_end:
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    { /* every rank: rank 0's model identity and window */
        char sha0[65];
        memcpy(sha0, mi->sha256, sizeof sha0);
        if (!(rc = al__dist_bcast(dist, sha0, sizeof sha0, err)) && strcmp(sha0, mi->sha256))
            rc = al__err(err, AL_E_INVALID,
                         "%s: this model (identity %.16s...) is not rank 0's (identity %.16s...): "
                         "every rank must open the same model",
                         mi->path, mi->sha256, sha0);
        if (!(rc = al__dist_agree(dist, rc, err)))
            rc = al__dist_agree(dist, al__dist_bcast(dist, (void *)win, sizeof(int32_t) * L, err),
                                err);
        if (rc) goto done;
    }
    int H = mi->n_layer * mi->n_head;
    if ((rc = sel_mask(o->layers, o->n_layers, mi->n_layer, "--layers", &lmask, err)) ||
        (rc = sel_mask(o->heads, o->n_heads, mi->n_head, "--heads", &hmask, err)))
        goto done;
    c.L = L;
    c.n_head = mi->n_head;
    c.dx = mi->d_head;
    c.soft = al_norm_default(AL_NORM_SOFTMAX);
    c.n_threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    c.dist = dist;
    c.rank = al__dist_rank(dist);
    for (int k = 0; k < DIAG_NS; k++)
        if (diag_N[k] < L) c.Ns[c.nN++] = diag_N[k];
    if (!(c.max_w = al__ex_alloc_nan((size_t)H, err)) ||
        !(c.ent = al__ex_alloc_nan((size_t)H, err)) ||
        !(c.sink = al__ex_alloc_nan((size_t)H, err)) ||
        !(c.spec = al__ex_alloc_nan((size_t)H, err)) ||
        !(c.ns = al__ex_alloc_nan((size_t)H * DIAG_NS, err)) ||
        !(c.done = al__calloc((size_t)H, 1, "heads done", err)) ||
        !(c.sc = al__calloc((size_t)c.n_threads, sizeof(scratch), "scratch", err)))
        rc = AL_E_NOMEM;
    size_t LL = (size_t)L * L, dq = (size_t)L * (mi->d_head > 1 ? mi->d_head : 1);
    for (int t = 0; t < c.n_threads && !rc; t++) {
        scratch *s = &c.sc[t];
        if (!(s->w = al__malloc(LL * sizeof(double), "head weights", err)) ||
            !(s->z = al__malloc(LL * sizeof(double), "head logits", err)) ||
            !(s->x = al__malloc(dq * sizeof(double), "head vectors", err)) ||
            !(s->q = al__malloc(dq * sizeof(double), "row max", err)) ||
            !(s->k = al__malloc(dq * sizeof(double), "row entropy", err)) ||
            !(s->st = al__malloc((DIAG_NS + 1) * sizeof(al_topn_stats), "stats", err)))
            rc = AL_E_NOMEM;
    }
    al_capture_request req = {.what =
                                  AL_CAP_LOGITS | AL_CAP_V | (c.nm ? 0u : (unsigned)AL_CAP_WEIGHTS),
                              .layers = lmask,
                              .heads = hmask,
                              .fn = diag_observe,
                              .user = &c};
    for (int h = 0; h < H && !rc; h++) /* a head left out (--layers/--heads): NaN, by its owner */
        if (((lmask && !lmask[h / mi->n_head]) || (hmask && !hmask[h % mi->n_head])) &&
            al__dist_owner(dist, h) == c.rank)
            c.done[h] = 1;
    if (!rc) rc = al_model_forward(m, win, L, &req, NULL, NULL, err);
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    { /* every head's values onto rank 0, which reports */
        double *arr[5] = {c.max_w, c.ent, c.sink, c.spec, c.ns};
        const int64_t cols[5] = {1, 1, 1, 1, c.nN}; /* ns is [H, nN] */
        if ((rc = al__dist_merge_heads(dist, H, mi->n_head, 5, arr, cols, c.done, err))) goto done;
    }
    al_diag_opts shown = *o; /* a dump's report names its tokens as the corpus */
    if (n_own) shown.corpus = own_label;
    if (root) rc = diag_report(&shown, m, &c, L, win, tk, n_own > 0, json, err);
    rc = al__dist_agree(dist, rc, err);
done:
    free(lmask);
    free(hmask);
    al__ex_free_scratch(c.sc, c.n_threads);
    free(c.max_w);
    free(c.ent);
    free(c.sink);
    free(c.spec);
    free(c.ns);
    free(c.done);
    free(tokens);
    free(text);
    if (tk) al_tokenizer_free(tk);
    if (m) al_model_free(m);
    if (rc && *json) {
        free(*json);
        *json = NULL;
    }
    return rc;
}
