/* diagnose.c: `attnlim diagnose`: per-head health of the attention on one window. */
#include "experiments.h"
#include "textsafe.h"

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
    const al_model *m; /* its own trained normalizer (al__model_own_norm) for the Jacobian */
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
    int win = cap->window; /* a row sees keys lo..lo+n-1 (a sliding window's lo, else 0) */
    for (int64_t t = 0; t < L; t++) {
        int64_t lo = al__row_lo(t, cap->causal, win), hi = lo + al__row_n(t, L, cap->causal, win);
        for (int64_t u = 0; u < L; u++)
            sc->z[(size_t)t * L + u] = u >= lo && u < hi ? z[(size_t)t * L + u] : 0;
    }
    for (int64_t t = 0; t < L; t++) {
        int64_t lo = al__row_lo(t, cap->causal, win), n = al__row_n(t, L, cap->causal, win);
        double *wr = sc->w + (size_t)t * L;
        for (int64_t u = 0; u < lo; u++) wr[u] = 0;
        if (c->nm) {
            int rc = al_norm_forward(c->nm, sc->z + (size_t)t * L + lo, n, wr + lo, err);
            if (rc) return rc;
        } else {
            al__ex_to_double(cap->weights + (size_t)i * LL + (size_t)t * L + lo, wr + lo,
                             (size_t)n);
        }
        for (int64_t u = lo + n; u < L; u++) wr[u] = 0;
    }
    al__ex_to_double(cap->v + (size_t)i * L * cap->d_head, sc->x, (size_t)L * cap->d_head);
    double *rmax = sc->q, *rent = sc->k; /* [L] each (q, k scratch are >= L doubles) */
    int rc = al__ex_row_stats(sc->w, L, cap->causal, win, rmax, rent, err);
    if (rc) return rc;
    double sm = 0, se = 0, ss = 0;
    int ce = 0, cs = 0;
    for (int64_t t = 0; t < L; t++) {
        int64_t n = al__row_n(t, L, cap->causal, win);
        sm += rmax[t];
        if (al__row_lo(t, cap->causal, win) == 0) ss += sc->w[(size_t)t * L], cs++;
        if (n >= 2) se += rent[t] / log((double)n), ce++;
    }
    c->max_w[h] = sm / L;
    c->sink[h] = ss / cs; /* over the rows that see token 0 (every row without a window) */
    c->ent[h] = ce ? se / ce : NAN;
    if (c->nN > 0) {
        al_metrics_opts mo = {.top_n = c->Ns,
                              .n_top = c->nN,
                              .separability = 1,
                              .causal = cap->causal,
                              .window = win};
        rc = al_head_metrics(sc->w, sc->x, L, c->dx, &mo, sc->st, NULL, NULL, err);
        if (rc) return rc;
        for (int k = 0; k < c->nN; k++) c->ns[(size_t)h * c->nN + k] = sc->st[k].ns_ratio;
    }
    double T1 = 1.0;
    al_norm own; /* no --normalizer: the Jacobian of the normalizer that made the weights */
    const al_norm *jn = c->nm                                                       ? c->nm
                        : al__model_own_norm(c->m, cap->layer, cap->heads[i], &own) ? &own
                                                                                    : &c->soft;
    al_sens_opts so = {.logit_scale = 1.0, .window = win};
    return al_head_sensitivity_ex(sc->z, L, cap->causal, jn, &T1, 1, NULL, 0, 0, cap->layer,
                                  cap->heads[i], &so, NULL, &c->spec[h], err);
}

static int diag_one(void *ctx, const al_capture *cap, const al__ex_unit *u, scratch *sc,
                    double tsec[4], al_error *err) {
    (void)tsec;
    return diag_head(ctx, cap, u->i, sc, err);
}

static int diag_observe(void *user, const al_capture *cap, al_error *err) {
    diag_ctx *c = user;
    al__ex_heads hs = {.cap = cap,
                       .n_head = c->n_head,
                       .dist = c->dist,
                       .rank = c->rank,
                       .n_threads = c->n_threads,
                       .sc = c->sc,
                       .done = c->done};
    double tsec[4] = {0, 0, 0, 0};
    al__ex_unit *u = NULL;
    int n = al__ex_head_units(&hs, &u, err);
    int rc = n < 0 ? AL_E_NOMEM : al__ex_each_unit(&hs, u, n, diag_one, c, tsec, err);
    free(u);
    return rc;
}

/* Rank 0: the diagnosis and, with --out, the explorer's window (the first W tokens of the window
 * as their own window) and every output (diagnose_out.c). */
/* Do the model's own weights sum to 1 (its trained normalizer, when it runs one)? */
static int own_sums_to_one(const al_model *m) {
    al_norm own;
    return al__model_own_norm(m, 0, 0, &own) ? al_norm_sums_to_one(&own) : 1;
}

/* The label of the weights when no --normalizer is given. */
static const char *own_label(const al_model *m) {
    al_norm own;
    return al__model_own_norm(m, 0, 0, &own)
               ? "the model's own weights (its trained normalizer: model.attention)"
               : "softmax (the model's own weights)";
}

static int diag_report(const al_diag_opts *o, al_model *m, const diag_ctx *c, int L,
                       const int32_t *win, al_tokenizer *tk, const al_framing *fr, char **json,
                       al_error *err) {
    int has_own = !fr;
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
                     .flags_ok = c->nm ? al_norm_sums_to_one(c->nm) : own_sums_to_one(m),
                     .own_label = own_label(m),
                     .win = win,
                     .tk = tk,
                     .fr = fr};
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

/* How many tokens the prompt corpus makes with the model's tokenizer: a window's L (the
 * [CLS] and [SEP] of a wrapped encoder window counted). */
static int prompt_tokens(al_model *m, const al_diag_opts *o, int *n, al_error *err) {
    al_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0, nt = 0;
    int32_t *ids = NULL;
    al_framing f;
    int rc = al_model_tokenizer(m, &tk, err);
    if (!rc && al_framing_make(tk, al__ex_switch(o->bos), al__ex_switch(o->wrap), &f, err))
        rc = al__err_prefix(err, AL_E_INVALID, "%s", al_model_get_info(m)->path);
    if (!rc) rc = al_corpus_load(o->corpus, NULL, &text, &len, err);
    if (!rc) rc = al_framing_tokenize(tk, &f, text, len, &ids, &nt, err);
    if (!rc) nt += (size_t)(2 - al_framing_body(&f, 2));
    *n = rc ? 0 : (int)(nt < (size_t)1 << 30 ? nt : (size_t)1 << 30);
    free(ids);
    free(text);
    if (tk) al_tokenizer_free(tk);
    return rc;
}

int al_diagnose(const al_diag_opts *o, char **json, al_error *err) {
    return al_diagnose_dist(o, NULL, json, err);
}

/* One run of al_diagnose_dist: what its phases share. */
typedef struct diag_run {
    const al_diag_opts *o;
    al_dist *dist;
    int root, L;
    al_model *m;
    const al_model_info *mi;
    al_tokenizer *tk;
    char *text;
    int32_t *tokens; /* [n_tokens] */
    size_t n_tokens, text_len;
    const int32_t *win; /* the window's L tokens */
    int32_t *framed;    /* [L] the window as framed (al_framing), when it is one */
    al_framing fr;
    const int32_t *own; /* the model's own tokens (an attention dump), [n_own] */
    int n_own;
    char own_label[160];
    al_norm nm;
    uint8_t *lmask, *hmask; /* --layers, --heads (NULL: all) */
    diag_ctx c;
} diag_run;

/* L (and its checks against the model and a dump), the normalizer, and, for a dump, whether it
 * holds what diagnose reads. */
static int diag_length(diag_run *r, al_error *err) {
    const al_diag_opts *o = r->o;
    const al_model_info *mi = r->mi;
    int n_own = r->n_own, L, rc;
    int prompt_n = 0; /* a prompt (--text) without --length: L = its tokens (on every rank) */
    if (o->length <= 0 && !n_own && o->corpus &&
        !strncmp(o->corpus, AL_CORPUS_TEXT, strlen(AL_CORPUS_TEXT)) &&
        (rc = prompt_tokens(r->m, o, &prompt_n, err)))
        return rc;
    L = o->length > 0          ? o->length
        : prompt_n             ? prompt_n
        : n_own && !mi->causal ? n_own /* a bidirectional dump: L = T only */
        : mi->n_ctx < 1024     ? mi->n_ctx
                               : 1024;
    r->L = L;
    if (n_own && (L > n_own || (!mi->causal && L != n_own)))
        return al__err(err, AL_E_INVALID,
                       "--length %d, but %s holds attention over T = %d tokens%s", L, mi->path,
                       n_own, mi->causal ? " (L <= T)" : " and is bidirectional (L = T only)");
    if (L < 2 || L > mi->n_ctx)
        return al__err(err, AL_E_INVALID, "--length %d is outside 2..%d (the model's context)", L,
                       mi->n_ctx);
    if ((rc = al__ex_sel_mask(o->layers, o->n_layers, mi->n_layer, "--layers", &r->lmask, NULL,
                              err)) ||
        (rc = al__ex_sel_mask(o->heads, o->n_heads, mi->n_head, "--heads", &r->hmask, NULL, err)))
        return rc;
    if (o->normalizer) {
        if ((rc = al_norm_parse(o->normalizer, &r->nm, err))) return rc;
        r->c.nm = &r->nm;
    }
    if (n_own) { /* before anything is computed: does the dump hold what diagnose reads? */
        al_capture_request pre = {.what = AL_CAP_LOGITS | AL_CAP_V |
                                          (r->c.nm ? 0u : (unsigned)AL_CAP_WEIGHTS),
                                  .fn = al__ex_no_observer};
        if ((rc = al__model_check(r->m, L, &pre, err)))
            return al__err_prefix(err, rc, "diagnose reads %s",
                                  r->c.nm ? "logits and v (--normalizer)"
                                          : "logits, weights and v");
    }
    return 0;
}

/* Rank 0: the window's tokens (a dump's own, or window K of the tokenized corpus). */
static int diag_window(diag_run *r, al_error *err) {
    const al_diag_opts *o = r->o;
    int rc, L = r->L;
    if (r->n_own) { /* an attention dump: its tokens */
        if (!(r->tokens = al__malloc(sizeof(int32_t) * (size_t)r->n_own, "tokens", err)))
            return AL_E_NOMEM;
        memcpy(r->tokens, r->own, sizeof(int32_t) * (size_t)r->n_own);
        r->n_tokens = (size_t)r->n_own;
    } else {
        const char *corpus = o->corpus ? o->corpus : "war-and-peace";
        if ((rc = al_model_tokenizer(r->m, &r->tk, err)) ||
            (rc = al_framing_make(r->tk, al__ex_switch(o->bos), al__ex_switch(o->wrap), &r->fr, err)
                      ? al__err_prefix(err, AL_E_INVALID, "%s", r->mi->path)
                      : 0) ||
            (rc = al_corpus_load(corpus, o->data_path, &r->text, &r->text_len, err)) ||
            (rc = al_framing_tokenize(r->tk, &r->fr, r->text, r->text_len, &r->tokens, &r->n_tokens,
                                      err)))
            return rc;
        if (o->window < 0)
            return al__err(err, AL_E_INVALID, "--window %d: windows are numbered from 0",
                           o->window);
        rc = al_framing_window_alloc(&r->fr, r->tokens, r->n_tokens, o->window, L, corpus,
                                     &r->framed, err);
        r->win = r->framed;
        return rc;
    }
    if (o->window < 0 || (size_t)(o->window + 1) * (size_t)L > r->n_tokens)
        return al__err(err, AL_E_INVALID, "%s: %zu tokens, window %d of L = %d needs %zu",
                       r->own_label, r->n_tokens, o->window, L, (size_t)(o->window + 1) * L);
    r->win = r->tokens + (size_t)o->window * L;
    return 0;
}

/* Every rank: the model (rank 0's where a rank names none; rank 0 opens it first: a known name
 * is fetched on first use), its identity, L; rank 0 the window. Returns the agreed status. */
static int diag_setup(diag_run *r, al_error *err) {
    const al_diag_opts *o = r->o;
    char model[4096] = "";
    if (r->root) snprintf(model, sizeof model, "%s", o->model ? o->model : "gpt2");
    int rc = al__dist_agree(r->dist, al__dist_bcast(r->dist, model, sizeof model, err), err);
    if (!rc && !r->root && o->model) snprintf(model, sizeof model, "%s", o->model);
    if (!rc && r->root) rc = al_model_open(model, &r->m, err);
    if ((rc = al__dist_agree(r->dist, rc, err))) return rc;
    if (!r->root) rc = al_model_open(model, &r->m, err);
    if (!rc) rc = al_model_hash(r->m, err);
    if (!rc) rc = al_model_set_attention_spec(r->m, &r->o->attention, err);
    if (!rc) {
        r->mi = al_model_get_info(r->m);
        char wopt[32] = "";
        if (o->window) snprintf(wopt, sizeof wopt, "--window %d", o->window);
        rc = al__ex_own_tokens_opts(r->m, o->corpus, wopt[0] ? wopt : NULL, NULL, NULL, &r->own,
                                    &r->n_own, r->own_label, sizeof r->own_label, err);
    }
    if (!rc) rc = diag_length(r, err);
    if (!rc && !r->root) {
        if (!(r->tokens = al__malloc(sizeof(int32_t) * (size_t)r->L, "tokens", err)))
            rc = AL_E_NOMEM;
        r->win = r->tokens;
    } else if (!rc) {
        rc = diag_window(r, err);
    }
    return al__dist_agree(r->dist, rc, err);
}

/* Collective: every rank checks it opened rank 0's model and receives rank 0's window. */
static int diag_share(diag_run *r, al_error *err) {
    int rc = al__ex_same_model(r->dist, r->mi, err);
    if (!(rc = al__dist_agree(r->dist, rc, err)))
        rc = al__dist_agree(
            r->dist, al__dist_bcast(r->dist, (void *)r->win, sizeof(int32_t) * r->L, err), err);
    return rc;
}

/* The per-head results [H] (ns [H, DIAG_NS]) and every thread's scratch. */
static int diag_alloc(diag_run *r, al_error *err) {
    diag_ctx *c = &r->c;
    const al_model_info *mi = r->mi;
    int H = mi->n_layer * mi->n_head, L = r->L, rc = 0;
    c->L = L;
    c->n_head = mi->n_head;
    c->dx = mi->d_head;
    c->soft = al_norm_default(AL_NORM_SOFTMAX);
    c->m = r->m;
    c->n_threads = r->o->threads > 0 ? r->o->threads : omp_get_max_threads();
    c->dist = r->dist;
    c->rank = al__dist_rank(r->dist);
    for (int k = 0; k < DIAG_NS; k++)
        if (diag_N[k] < L) c->Ns[c->nN++] = diag_N[k];
    if (!(c->max_w = al__ex_alloc_nan((size_t)H, err)) ||
        !(c->ent = al__ex_alloc_nan((size_t)H, err)) ||
        !(c->sink = al__ex_alloc_nan((size_t)H, err)) ||
        !(c->spec = al__ex_alloc_nan((size_t)H, err)) ||
        !(c->ns = al__ex_alloc_nan((size_t)H * DIAG_NS, err)) ||
        !(c->done = al__calloc((size_t)H, 1, "heads done", err)) ||
        !(c->sc = al__calloc((size_t)c->n_threads, sizeof(scratch), "scratch", err)))
        rc = AL_E_NOMEM;
    size_t LL = (size_t)L * L, dq = (size_t)L * (mi->d_head > 1 ? mi->d_head : 1);
    for (int t = 0; t < c->n_threads && !rc; t++) {
        scratch *s = &c->sc[t];
        if (!(s->w = al__malloc(LL * sizeof(double), "head weights", err)) ||
            !(s->z = al__malloc(LL * sizeof(double), "head logits", err)) ||
            !(s->x = al__malloc(dq * sizeof(double), "head vectors", err)) ||
            !(s->q = al__malloc(dq * sizeof(double), "row max", err)) ||
            !(s->k = al__malloc(dq * sizeof(double), "row entropy", err)) ||
            !(s->st = al__malloc((DIAG_NS + 1) * sizeof(al_topn_stats), "stats", err)))
            rc = AL_E_NOMEM;
    }
    return rc;
}

/* Collective: the forward with the observer on every rank, then every head's values onto
 * rank 0, which reports. */
static int diag_compute(diag_run *r, char **json, al_error *err) {
    diag_ctx *c = &r->c;
    const al_model_info *mi = r->mi;
    int H = mi->n_layer * mi->n_head;
    int rc = diag_alloc(r, err);
    al_capture_request req = {.what = AL_CAP_LOGITS | AL_CAP_V |
                                      (c->nm ? 0u : (unsigned)AL_CAP_WEIGHTS),
                              .layers = r->lmask,
                              .heads = r->hmask,
                              .fn = diag_observe,
                              .user = c};
    for (int h = 0; h < H && !rc; h++) /* a head left out (--layers/--heads): NaN, by its owner */
        if (((r->lmask && !r->lmask[h / mi->n_head]) || (r->hmask && !r->hmask[h % mi->n_head])) &&
            al__dist_owner(r->dist, h) == c->rank)
            c->done[h] = 1;
    if (!rc)
        rc = al_model_forward_opts(r->m, r->win, r->L, &req, &(al_forward_opts){AL_LOGITS_NONE, -1},
                                   NULL, NULL, err);
    if ((rc = al__dist_agree(r->dist, rc, err))) return rc;
    double *arr[5] = {c->max_w, c->ent, c->sink, c->spec, c->ns};
    const int64_t cols[5] = {1, 1, 1, 1, c->nN}; /* ns is [H, nN] */
    if ((rc = al__dist_merge_heads(r->dist, H, mi->n_head, 5, arr, cols, c->done, err))) return rc;
    al_diag_opts shown = *r->o; /* a dump's report names its tokens as the corpus */
    if (r->n_own) shown.corpus = r->own_label;
    if (r->root)
        rc = diag_report(&shown, r->m, c, r->L, r->win, r->tk, r->n_own ? NULL : &r->fr, json, err);
    return al__dist_agree(r->dist, rc, err);
}

/* Over several processes as al_reproduce_dist: rank 0 reads the corpus and sends the window's
 * tokens, every rank runs the forward and its heads, rank 0 merges and reports. */
int al_diagnose_dist(const al_diag_opts *o, al_dist *dist, char **json, al_error *err) {
    *json = NULL;
    diag_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.dist = dist;
    r.root = al__dist_rank(dist) == 0;
    int rc = diag_setup(&r, err);
    if (!rc) rc = diag_share(&r, err);
    if (!rc) rc = diag_compute(&r, json, err);
    diag_ctx *c = &r.c;
    free(r.lmask);
    free(r.hmask);
    al__ex_free_scratch(c->sc, c->n_threads);
    free(c->max_w);
    free(c->ent);
    free(c->sink);
    free(c->spec);
    free(c->ns);
    free(c->done);
    free(r.tokens);
    free(r.framed);
    free(r.text);
    if (r.tk) al_tokenizer_free(r.tk);
    if (r.m) al_model_free(r.m);
    if (rc && *json) {
        free(*json);
        *json = NULL;
    }
    return rc;
}
