/* window.c: the short window of the explorer in report.html (src/report/explorer.c): the
 * first W tokens of the corpus run as their own window, every head's weights [H, W, W] (the
 * normalizer's, re-normalised from the logits, when --normalizer is given) and the tokens'
 * strings; the curves against N of every head. Written to explorer_weights.npy and the
 * "explorer" section of results.json. */
#include "textsafe.h"
#include "experiments.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct win_ctx {
    const al_norm *nm; /* NULL: the model's weights */
    int W, n_head;
    float *w; /* [H, W, W] */
} win_ctx;

static int win_observe(void *user, const al_capture *cap, al_error *err) {
    win_ctx *c = user;
    size_t W = (size_t)c->W, WW = W * W;
    double z[AL__EX_WINDOW_MAX], pr[AL__EX_WINDOW_MAX];
    for (int i = 0; i < cap->n_sel; i++) {
        float *dst = c->w + (size_t)(cap->layer * c->n_head + cap->heads[i]) * WW;
        if (!c->nm) {
            memcpy(dst, cap->weights + (size_t)i * WW, sizeof(float) * WW);
            continue;
        }
        for (size_t t = 0; t < W; t++) { /* the normalizer over the row's n keys lo.. */
            size_t lo = (size_t)al__row_lo((int64_t)t, cap->causal, cap->window);
            size_t n = (size_t)al__row_n((int64_t)t, (int64_t)W, cap->causal, cap->window);
            const float *zr = cap->logits + (size_t)i * WW + t * W + lo;
            for (size_t u = 0; u < n; u++) z[u] = zr[u];
            int rc = al_norm_forward(c->nm, z, (int64_t)n, pr, err);
            if (rc) return rc;
            for (size_t u = 0; u < W; u++)
                dst[t * W + u] = u >= lo && u < lo + n ? (float)pr[u - lo] : 0.0f;
        }
    }
    return 0;
}

int al__ex_window_weights(al_model *m, const al_norm *nm, const int32_t *tokens, int W, float **w,
                          al_error *err) {
    const al_model_info *mi = al_model_get_info(m);
    *w = NULL;
    if (W < 2 || W > AL__EX_WINDOW_MAX)
        return al__err(err, AL_E_INVALID, "explorer window of %d tokens (2..%d)", W,
                       AL__EX_WINDOW_MAX);
    win_ctx c = {.nm = nm, .W = W, .n_head = mi->n_head};
    size_t H = (size_t)mi->n_layer * mi->n_head;
    if (!(c.w = al__calloc(H * W * W, sizeof(float), "explorer window", err))) return AL_E_NOMEM;
    for (size_t i = 0; i < H * W * W; i++) c.w[i] = NAN; /* heads not captured stay NaN */
    al_capture_request req = {.what = nm ? (unsigned)AL_CAP_LOGITS : (unsigned)AL_CAP_WEIGHTS,
                              .fn = win_observe,
                              .user = &c};
    int rc = al_model_forward_opts(m, tokens, W, &req, &(al_forward_opts){AL_LOGITS_NONE, -1}, NULL,
                                   NULL, err);
    if (rc) {
        free(c.w);
        return rc;
    }
    *w = c.w;
    return 0;
}

int al__ex_token_strings(al_tokenizer *tk, const int32_t *ids, int W, char ***out, al_error *err) {
    char **tok = al__calloc((size_t)W, sizeof(char *), "explorer tokens", err);
    if (!tok) return AL_E_NOMEM;
    for (int t = 0; t < W; t++) {
        size_t len;
        al_error e = {0};
        if (!tk || al_detokenize(tk, ids + t, 1, &tok[t], &len, &e)) {
            tok[t] = malloc(16);
            if (!tok[t]) {
                al__ex_free_strings(tok, t);
                return al__err(err, AL_E_NOMEM, "out of memory (explorer tokens)");
            }
            snprintf(tok[t], 16, "#%d", ids[t]);
        }
    }
    *out = tok;
    return 0;
}

int al__ex_tokens_json(al_tokenizer *tk, const int32_t *ids, int n, cJSON *o, al_error *err) {
    char **tok = NULL;
    int rc = al__ex_token_strings(tk, ids, n, &tok, err);
    if (rc) return rc;
    cJSON_AddItemToObject(o, "token_ids", cJSON_CreateIntArray(ids, n));
    cJSON *t = cJSON_AddArrayToObject(o, "tokens"); /* al__json_print repairs invalid UTF-8 */
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(t, cJSON_CreateString(tok[i]));
    al__ex_free_strings(tok, n);
    return 0;
}

void al__ex_free_strings(char **s, int n) {
    for (int i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

int al__ex_explorer_window(const plan *p, al_model *m, al_tokenizer *tk, const int32_t *tokens,
                           size_t n_tokens, agg *a, al_error *err) {
    al__summary *s = &a->s;
    const al_model_info *mi = al_model_get_info(m);
    int W = AL__EX_WINDOW;
    if (p->nL > 0 && p->Ls[0] < W) W = p->Ls[0];
    if (W > mi->n_ctx) W = mi->n_ctx;
    if ((size_t)W > n_tokens) W = (int)n_tokens;
    /* the curves against N need no forward */
    if ((p->exp & AL_EXP_ALG2) && p->nN2 > 0 && a->a2[0])
        s->ex.curve[s->ex.n_curves++] =
            (al__explorer_curve){.name = "dtilde", .n = p->nN2, .x = p->N2, .v = a->a2[0]};
    if ((p->exp & AL_EXP_ALG4) && p->nN4 > 0 && a->a4[0])
        s->ex.curve[s->ex.n_curves++] =
            (al__explorer_curve){.name = "N_s/N", .n = p->nN4, .x = p->N4, .v = a->a4[0]};
    int32_t framed[AL__EX_WINDOW];
    if (W >= 3 && al_framing_body(&p->fr, W) != W) { /* an encoder's [CLS] ... [SEP] */
        al_framing_window(&p->fr, tokens, 0, W, framed);
        tokens = framed;
    }
    if (W < 2) return 0;
    float *w;
    int rc = al__ex_window_weights(m, p->have_nm ? &p->nm : NULL, tokens, W, &w, err);
    if (!rc && (rc = al__ex_token_strings(tk, tokens, W, &a->ex_tok, err))) free(w);
    if (rc) return rc;
    a->ex_w = w;
    a->ex_nw = W;
    if (!(a->ex_ids = al__malloc(sizeof(int) * (size_t)W, "explorer ids", err))) return AL_E_NOMEM;
    for (int t = 0; t < W; t++) a->ex_ids[t] = tokens[t];
    snprintf(a->ex_note, sizeof a->ex_note,
             "The first %d tokens of the corpus, run as a window of their own (L = %d)%s; weights "
             "of %s. All heads' weights: explorer_weights.npy [n_layer, n_head, %d, %d].",
             W, W, mi->causal ? "" : " (bidirectional: every row sees the W tokens)",
             p->have_nm ? p->o.normalizer : "the model's softmax", W, W);
    s->ex.W = W;
    s->ex.causal = mi->causal;
    s->ex.token = (const char *const *)a->ex_tok;
    s->ex.token_id = a->ex_ids;
    s->ex.weights = a->ex_w;
    s->ex.window_note = a->ex_note;
    return 0;
}

int al__ex_write_explorer(const plan *p, const agg *a, al_error *err) {
    if (!a->ex_w) return 0;
    int W = a->s.ex.W;
    double *d = al__malloc(sizeof(double) * (size_t)p->H * W * W, "explorer weights", err);
    if (!d) return AL_E_NOMEM;
    for (size_t i = 0; i < (size_t)p->H * W * W; i++) d[i] = a->ex_w[i];
    char path[4200];
    snprintf(path, sizeof path, "%s/explorer_weights.npy", p->o.out_dir);
    al_array arr = {.dtype = AL_F64, .ndim = 4, .data = d};
    arr.shape[0] = p->n_layer, arr.shape[1] = p->n_head, arr.shape[2] = W, arr.shape[3] = W;
    int rc = al_npy_write(path, &arr, err);
    free(d);
    return rc;
}

void al__ex_explorer_json(const agg *a, cJSON *root) {
    if (!a->ex_w) return;
    int W = a->s.ex.W;
    cJSON *o = cJSON_AddObjectToObject(root, "explorer");
    cJSON_AddNumberToObject(o, "W", W);
    cJSON_AddStringToObject(o, "window", "the first W tokens of the corpus, as their own window");
    cJSON_AddItemToObject(o, "token_ids", cJSON_CreateIntArray(a->ex_ids, W));
    cJSON *t = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < W; i++) { /* bytes that are not UTF-8 (a piece of a character): U+FFFD */
        char *v = al__utf8_valid(a->ex_tok[i]);
        cJSON_AddItemToArray(t, cJSON_CreateString(v ? v : ""));
        free(v);
    }
    cJSON_AddStringToObject(o, "weights", "explorer_weights.npy [n_layer, n_head, W, W]");
}

void al__ex_free_explorer(agg *a) {
    al__ex_free_strings(a->ex_tok, a->ex_nw);
    free(a->ex_ids);
    free(a->ex_w);
}
