/* gptneox.c: GPT-NeoX decoders (GPTNeoXForCausalLM: Pythia) from HF directories.
 *
 * Forward (C = d_model, H heads, d = C / H, R = rotary dims = int(d * rotary_pct), F = d_ff):
 *   x = embed_in[tokens]                                              [T, C]
 *   per layer:  h = layernorm(x) (input_layernorm)
 *               q, k, v = h W^T + b  (query_key_value, rows [H, 3, d] split per head at load)
 *               rope on the first R dims of every q and k head (rotate_half over R)
 *               a = attention(q, k, v) dense^T + b                     (scale 1/sqrt(d))
 *               parallel residual:   x = x + a + mlp(layernorm2(x))
 *               sequential:          x = x + a; x = x + mlp(layernorm2(x))
 *               mlp(u) = gelu(u W1^T + b1) W2^T + b2
 *   y = final_layer_norm(x); logits = y embed_out^T
 * config.json: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
 * max_position_embeddings, vocab_size, layer_norm_eps (1e-5), rotary_pct (0.25),
 * rotary_emb_base (10000), rope_scaling, use_parallel_residual (true), attention_bias (true),
 * tie_word_embeddings (false), hidden_act (gelu; gelu_new, gelu_pytorch_tanh: tanh form).
 * Old checkpoints' attention.bias / masked_bias / rotary_emb.inv_freq buffers are ignored. */
#include "gptneox.h"

#include "gguf.h"
#include "hf_config.h"
#include "ops.h"
#include "safetensors.h"
#include "tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct neox_layer {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* [C] */
    float *wqkv, *bqkv;                   /* [3C, C], [3C]: q rows, then k, then v */
    float *wo, *bo;                       /* [C, C], [C] */
    float *w1, *b1;                       /* [F, C], [F] */
    float *w2, *b2;                       /* [C, F], [C] */
} neox_layer;

typedef struct neox {
    al__neox_config cfg;
    float *arena;
    float *embed, *out, *lnf_w, *lnf_b; /* [V, C], [V, C], [C], [C] */
    neox_layer *layers;
    char dir[4096];
    al__attn_ws ws;
} neox;

/* ---- config.json ---------------------------------------------------------------------------- */

static int parse_act(const cJSON *j, al__neox_config *c, const char *name, al_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const char *s = cJSON_IsString(a) ? a->valuestring : a ? "?" : "gelu";
    if (!strcmp(s, "gelu")) return 0;
    if (!strcmp(s, "gelu_new") || !strcmp(s, "gelu_pytorch_tanh")) {
        c->gelu_tanh = 1;
        return 0;
    }
    return al__err(
        err, AL_E_UNSUPPORTED,
        "%s: hidden_act '%.64s' is not supported (gelu, gelu_new, gelu_pytorch_tanh are)", name, s);
}

static int parse_fields(const cJSON *j, al__neox_config *c, const char *name, al_error *err) {
    int rc;
    if ((rc = al__cfg_int(j, "num_hidden_layers", 1, 1024, -1, &c->n_layer, name, err)) ||
        (rc = al__cfg_int(j, "hidden_size", 2, 65536, -1, &c->d_model, name, err)) ||
        (rc = al__cfg_int(j, "num_attention_heads", 1, 4096, -1, &c->n_head, name, err)) ||
        (rc = al__cfg_int(j, "intermediate_size", 1, 1 << 20, -1, &c->d_ff, name, err)) ||
        (rc = al__cfg_int(j, "max_position_embeddings", 1, 1 << 20, -1, &c->n_ctx, name, err)) ||
        (rc = al__cfg_int(j, "vocab_size", 1, 1 << 24, -1, &c->vocab, name, err)) ||
        (rc = al__cfg_num(j, "layer_norm_eps", 0, 1, 1e-5, &c->eps, name, err)) ||
        (rc = al__cfg_num(j, "rotary_pct", 0, 1, 0.25, &c->rotary_pct, name, err)) ||
        (rc = al__cfg_bool(j, "use_parallel_residual", 1, &c->parallel, name, err)) ||
        (rc = al__cfg_bool(j, "attention_bias", 1, &c->bias, name, err)) ||
        (rc = al__cfg_bool(j, "tie_word_embeddings", 0, &c->tied, name, err)))
        return rc;
    if (c->d_model % c->n_head != 0)
        return al__err(err, AL_E_FORMAT, "%s: hidden_size %d is not a multiple of %d heads", name,
                       c->d_model, c->n_head);
    c->d_head = c->d_model / c->n_head;
    int dim = (int)(c->d_head * c->rotary_pct);
    if (dim < 2 || dim % 2 != 0 || c->d_head > 1024)
        return al__err(err, AL_E_FORMAT,
                       "%s: rotary_pct %g of a head of %d gives %d rotary dimensions (an even "
                       "number >= 2 is needed)",
                       name, c->rotary_pct, c->d_head, dim);
    return al__cfg_rope(j, "rotary_emb_base", dim, &c->n_ctx, &c->rope, name, err);
}

int al__neox_config_parse(const char *text, size_t len, const char *name, al__neox_config *c,
                          al_error *err) {
    memset(c, 0, sizeof *c);
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", name);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    int rc = 0;
    if (!cJSON_IsObject(j) || !cJSON_IsString(t) || strcmp(t->valuestring, "gpt_neox") != 0)
        rc = al__err(err, AL_E_FORMAT, "%s: not a config of model_type gpt_neox", name);
    if (!rc) rc = parse_act(j, c, name, err);
    if (!rc) rc = parse_fields(j, c, name, err);
    cJSON_Delete(j);
    return rc;
}

/* ---- weights ----------------------------------------------------------------------------------
 */

typedef struct nspec {
    char name[128];
    int ndim;
    int64_t shape[2];
    float **dst;
} nspec;

static int list_specs(neox *N, nspec **out, int *n_out, al_error *err) {
    const al__neox_config *c = &N->cfg;
    int64_t C = c->d_model, F = c->d_ff, V = c->vocab;
    nspec *s = al__calloc((size_t)(4 + 12 * c->n_layer), sizeof *s, "weight list", err);
    if (!s) return AL_E_NOMEM;
    int n = 0;
    s[n++] = (nspec){"gpt_neox.embed_in.weight", 2, {V, C}, &N->embed};
    s[n++] = (nspec){"gpt_neox.final_layer_norm.weight", 1, {C, 1}, &N->lnf_w};
    s[n++] = (nspec){"gpt_neox.final_layer_norm.bias", 1, {C, 1}, &N->lnf_b};
    if (!c->tied) s[n++] = (nspec){"embed_out.weight", 2, {V, C}, &N->out};
    for (int l = 0; l < c->n_layer; l++) {
        neox_layer *y = &N->layers[l];
        struct {
            const char *suffix;
            int on, nd;
            int64_t s0, s1;
            float **dst;
        } t[12] = {
            {"input_layernorm.weight", 1, 1, C, 1, &y->ln1_w},
            {"input_layernorm.bias", 1, 1, C, 1, &y->ln1_b},
            {"post_attention_layernorm.weight", 1, 1, C, 1, &y->ln2_w},
            {"post_attention_layernorm.bias", 1, 1, C, 1, &y->ln2_b},
            {"attention.query_key_value.weight", 1, 2, 3 * C, C, &y->wqkv},
            {"attention.query_key_value.bias", c->bias, 1, 3 * C, 1, &y->bqkv},
            {"attention.dense.weight", 1, 2, C, C, &y->wo},
            {"attention.dense.bias", c->bias, 1, C, 1, &y->bo},
            {"mlp.dense_h_to_4h.weight", 1, 2, F, C, &y->w1},
            {"mlp.dense_h_to_4h.bias", 1, 1, F, 1, &y->b1},
            {"mlp.dense_4h_to_h.weight", 1, 2, C, F, &y->w2},
            {"mlp.dense_4h_to_h.bias", 1, 1, C, 1, &y->b2},
        };
        for (int i = 0; i < 12; i++) {
            if (!t[i].on) continue;
            nspec *w = &s[n++];
            snprintf(w->name, sizeof w->name, "gpt_neox.layers.%d.%s", l, t[i].suffix);
            w->ndim = t[i].nd, w->shape[0] = t[i].s0, w->shape[1] = t[i].s1, w->dst = t[i].dst;
        }
    }
    *out = s, *n_out = n;
    return 0;
}

static int ignored(const char *name, int tied) {
    const char *ends[] = {"attention.bias", "attention.masked_bias", "rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(ends[i]);
        if (n >= k && strcmp(name + n - k, ends[i]) == 0) return 1;
    }
    return tied && strcmp(name, "embed_out.weight") == 0;
}

/* Rows of query_key_value [H, 3, d, cols] into [3, H, d, cols] (q rows, k rows, v rows). */
static int split_qkv(float *W, int H, int d, int cols, al_error *err) {
    size_t n = (size_t)3 * H * d * cols;
    float *tmp = al__malloc(n * sizeof *tmp, "qkv reorder", err);
    if (!tmp) return AL_E_NOMEM;
    memcpy(tmp, W, n * sizeof *tmp);
    for (int h = 0; h < H; h++)
        for (int s = 0; s < 3; s++)
            memcpy(W + ((size_t)s * H + h) * d * cols, tmp + ((size_t)h * 3 + s) * d * cols,
                   (size_t)d * cols * sizeof *tmp);
    free(tmp);
    return 0;
}

static int load(al_model *m, const al__safetensors *st, neox *N, const nspec *s, int n,
                al_error *err) {
    for (int i = 0; i < al__st_count(st); i++) {
        const al__st_tensor *t = al__st_at(st, i);
        int found = ignored(t->name, N->cfg.tied);
        for (int k = 0; k < n && !found; k++) found = strcmp(s[k].name, t->name) == 0;
        if (!found)
            return al__err(err, AL_E_FORMAT,
                           "%s: unexpected tensor '%s' (does config.json match the weights?)",
                           t->file, t->name);
    }
    size_t total = 0, each;
    for (int i = 0; i < n; i++)
        if (!al__mul_ok((size_t)s[i].shape[0], (size_t)s[i].shape[1], &each) ||
            !al__add_ok(total, each, &total) || !al__mul_ok(total, sizeof(float), &each))
            return al__err(err, AL_E_NOMEM, "%s: the weights' size overflows", al__st_path(st));
    if (!(N->arena = al__malloc_aligned(total * sizeof(float), "weights (float32)", err)))
        return AL_E_NOMEM;
    float *p = N->arena;
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)(s[i].shape[0] * s[i].shape[1]), bad = 0, first = 0;
        int rc = al__st_load_f32(st, s[i].name, s[i].ndim, s[i].shape, p, err);
        if (rc) return rc;
        for (size_t e = 0; e < k; e++)
            if (!isfinite(p[e]) && !bad++) first = e;
        if (bad)
            al__model_warn_nonfinite(m, al__st_find(st, s[i].name)->file, s[i].name, bad, first);
        *s[i].dst = p;
        p += k;
    }
    int H = N->cfg.n_head, d = N->cfg.d_head, C = N->cfg.d_model, rc = 0;
    for (int l = 0; l < N->cfg.n_layer && !rc; l++) {
        rc = split_qkv(N->layers[l].wqkv, H, d, C, err);
        if (!rc && N->layers[l].bqkv) rc = split_qkv(N->layers[l].bqkv, H, d, 1, err);
    }
    if (N->cfg.tied) N->out = N->embed;
    return rc;
}

static void neox_free(neox *N) {
    if (!N) return;
    free(N->arena);
    free(N->layers);
    al__attn_ws_free(&N->ws);
    free(N);
}

/* ---- forward ----------------------------------------------------------------------------------
 */

typedef struct nacts {
    float *x, *emb, *h, *q, *k, *v, *att, *a, *u, *rope; /* [T, ...] */
} nacts;

static void nacts_free(nacts *a) {
    float *all[] = {a->x, a->emb, a->h, a->q, a->k, a->v, a->att, a->a, a->u, a->rope};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

static int nacts_build(nacts *a, const al__neox_config *c, int T, int want_emb, al_error *err) {
    memset(a, 0, sizeof *a);
    size_t t = (size_t)T, C = (size_t)c->d_model, F = (size_t)c->d_ff;
    float **bufs[] = {&a->x, &a->h, &a->q, &a->k, &a->v, &a->att, &a->a};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        *bufs[i] = al__malloc_aligned(t * C * 4, "activations", err);
    a->u = al__malloc_aligned(t * F * 4, "activations", err);
    a->rope = al__malloc(t * (size_t)c->rope.dim * 4, "RoPE table", err);
    a->emb = want_emb ? al__malloc_aligned(t * C * 4, "activations", err) : NULL;
    int ok = a->u && a->rope && (!want_emb || a->emb);
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ok &= *bufs[i] != NULL;
    if (!ok) {
        nacts_free(a);
        return AL_E_NOMEM;
    }
    return 0;
}

/* a->a [T - r0, C] = the attention block's output of layer l on the rows [r0, T) (not yet added
 * to x; the keys and values of every row). */
static int attn_block(neox *N, int l, nacts *a, int T, int r0, const al_capture_request *req,
                      const al_attn_variant *mod, al_error *err) {
    const al__neox_config *c = &N->cfg;
    const neox_layer *y = &N->layers[l];
    int C = c->d_model, H = c->n_head, d = c->d_head;
    size_t CC = (size_t)C * C;
    al__layernorm(a->h, a->x, y->ln1_w, y->ln1_b, T, C, (float)c->eps);
    al__matmul_nt(a->q, a->h, y->wqkv, y->bqkv, T, C, C);
    al__matmul_nt(a->k, a->h, y->wqkv + CC, y->bqkv ? y->bqkv + C : NULL, T, C, C);
    al__matmul_nt(a->v, a->h, y->wqkv + 2 * CC, y->bqkv ? y->bqkv + 2 * C : NULL, T, C, C);
    al__rope_apply(a->q, a->rope, T, H, d, c->rope.dim);
    al__rope_apply(a->k, a->rope, T, H, d, c->rope.dim);
    al__attn at = {.layer = l,
                   .T = T,
                   .n_head = H,
                   .n_kv_head = H,
                   .d_head = d,
                   .d_model = C,
                   .causal = 1,
                   .q = a->q,
                   .q_stride = (size_t)C,
                   .k = a->k,
                   .k_stride = (size_t)C,
                   .v = a->v,
                   .v_stride = (size_t)C,
                   .out = a->att,
                   .hidden = a->h,
                   .embed = a->emb,
                   .residual = a->x,
                   .req = req,
                   .mod = mod,
                   .row0 = r0};
    int rc = al__attention_ws(&at, &N->ws, err);
    if (!rc) al__matmul_nt(a->a, a->att + (size_t)r0 * C, y->wo, y->bo, T - r0, C, C);
    return rc;
}

/* x += mlp(layernorm2(src)) on T rows (src = x before the attention for the parallel residual;
 * the caller offsets both to the rows wanted). */
static void mlp_block(const neox *N, int l, nacts *a, const float *src, float *x, int T) {
    const al__neox_config *c = &N->cfg;
    const neox_layer *y = &N->layers[l];
    int C = c->d_model, F = c->d_ff;
    al__layernorm(a->h, src, y->ln2_w, y->ln2_b, T, C, (float)c->eps);
    al__matmul_nt(a->u, a->h, y->w1, y->b1, T, C, F);
    if (c->gelu_tanh)
        al__gelu_tanh(a->u, (size_t)T * F);
    else
        al__gelu_erf(a->u, (size_t)T * F);
    al__matmul_nt(a->h, a->u, y->w2, y->b2, T, F, C);
    al__add(x, a->h, (size_t)T * C);
}

static int neox_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                        const al__fwd *f, float *logits, float *final_hidden, al_error *err) {
    neox *N = m->impl;
    const al__neox_config *c = &N->cfg;
    int C = c->d_model, cap = req && req->what && req->fn, last = f->last, r0 = f->row0;
    nacts a;
    int rc = nacts_build(&a, c, T, cap && (req->what & AL_CAP_EMBED), err);
    if (rc) return rc;
    for (int t = 0; t < T; t++)
        memcpy(a.x + (size_t)t * C, N->embed + (size_t)tokens[t] * C, (size_t)C * sizeof(float));
    if (a.emb) memcpy(a.emb, a.x, (size_t)T * C * sizeof(float));
    al__rope_table(a.rope, T, &c->rope);
    for (int l = 0; l <= last && !rc; l++) {
        int lr0 = al__fwd_row0(f, l, c->n_layer), M = T - lr0;
        float *x = a.x + (size_t)lr0 * C;
        if ((rc = attn_block(N, l, &a, T, lr0, cap ? req : NULL, al__model_attn(m), err))) break;
        if (c->parallel) { /* x + attn(ln1(x)) + mlp(ln2(x)): the mlp reads x first */
            mlp_block(N, l, &a, x, x, M);
            al__add(x, a.a, (size_t)M * C);
        } else {
            al__add(x, a.a, (size_t)M * C);
            mlp_block(N, l, &a, x, x, M);
        }
    }
    int M = T - r0; /* the output rows [r0, T) */
    if (!rc && (logits || final_hidden)) {
        al__layernorm(a.h, a.x + (size_t)r0 * C, N->lnf_w, N->lnf_b, M, C, (float)c->eps);
        if (final_hidden) memcpy(final_hidden, a.h, (size_t)M * C * sizeof(float));
        if (logits) al__matmul_nt(logits, a.h, N->out, NULL, M, C, c->vocab);
    }
    nacts_free(&a);
    return rc;
}

/* ---- vtable and opener --------------------------------------------------------------------------
 */

static void neox_destroy(al_model *m) {
    neox_free(m->impl);
    m->impl = NULL;
}

static int neox_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    return al__hf_tokenizer_open(((neox *)m->impl)->dir, out, err);
}

static int neox_files(al_model *m, al__model_files *fs, al_error *err) {
    return al__model_files_safetensors(m, fs, err);
}

static cJSON *neox_architecture(const al_model *m) {
    const al__neox_config *c = &((const neox *)m->impl)->cfg;
    cJSON *o = al__arch_json("gpt_neox", c->n_head, c->n_head, &c->rope, c->d_head);
    cJSON_AddNumberToObject(o, "rotary_pct", c->rotary_pct);
    cJSON_AddBoolToObject(o, "parallel_residual", c->parallel);
    cJSON_AddNumberToObject(o, "logit_scale", 1.0 / sqrt((double)c->d_head));
    cJSON_AddStringToObject(o, "norm", "layernorm");
    cJSON_AddStringToObject(o, "mlp", c->gelu_tanh ? "gelu (tanh)" : "gelu (erf)");
    cJSON_AddBoolToObject(o, "tied_embeddings", c->tied);
    return o;
}

static const al_model_vtable neox_vtable = {.forward = neox_forward,
                                            .architecture = neox_architecture,
                                            .destroy = neox_destroy,
                                            .tokenizer = neox_tokenizer,
                                            .files = neox_files,
                                            .tokenizer_files = al__hf_tokenizer_files,
                                            .variants = 1};

static int read_config(neox *N, al_error *err) {
    char cfg[4200], *text;
    size_t len;
    snprintf(cfg, sizeof cfg, "%s/config.json", N->dir);
    int rc = al__read_file(cfg, 1 << 20, &text, &len, err);
    if (rc) return rc;
    rc = al__neox_config_parse(text, len, cfg, &N->cfg, err);
    free(text);
    return rc;
}

static void fill_info(al_model *m, neox *N, const al__safetensors *st, const char *path) {
    al_model_info *in = &m->info;
    const al__neox_config *c = &N->cfg;
    snprintf(in->family, sizeof in->family, "gpt_neox");
    const char *slash = strrchr(N->dir, '/');
    snprintf(in->name, sizeof in->name, "%s", slash ? slash + 1 : N->dir);
    snprintf(in->path, sizeof in->path, "%s", path);
    const al__st_tensor *q = al__st_find(st, "gpt_neox.layers.0.attention.query_key_value.weight");
    snprintf(in->dtype, sizeof in->dtype, "%s", q ? q->dtype_name : "f32");
    for (char *p = in->dtype; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    in->n_layer = c->n_layer, in->n_head = c->n_head, in->n_kv_head = c->n_head;
    in->d_model = c->d_model, in->d_head = c->d_head, in->d_ff = c->d_ff;
    in->n_ctx = c->n_ctx, in->vocab_size = c->vocab, in->causal = 1, in->n_params = 0;
    for (int i = 0; i < al__st_count(st); i++)
        in->n_params += (int64_t)al__st_numel(al__st_at(st, i));
}

int al__neox_open_hf(al_model *m, const char *path, al_error *err) {
    m->impl = NULL;
    neox *N = al__calloc(1, sizeof *N, "gpt_neox model", err);
    if (!N) return AL_E_NOMEM;
    snprintf(N->dir, sizeof N->dir, "%s", path);
    if (!al__is_dir(path)) {
        char *slash = strrchr(N->dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(N->dir, sizeof N->dir, ".");
    }
    al__safetensors *st = NULL;
    nspec *s = NULL;
    int n = 0, rc = read_config(N, err);
    if (!rc && !(N->layers = al__calloc((size_t)N->cfg.n_layer, sizeof *N->layers, "layers", err)))
        rc = AL_E_NOMEM;
    if (!rc) rc = al__st_open(path, &st, err);
    if (!rc) rc = list_specs(N, &s, &n, err);
    for (int i = 0; !rc && i < n; i++) /* present and of its shape, before the arena */
        if (!al__st_find(st, s[i].name))
            rc =
                al__err(err, AL_E_FORMAT, "%s: tensor '%s' is missing", al__st_path(st), s[i].name);
        else
            rc = al__st_check_f32(st, s[i].name, s[i].ndim, s[i].shape, err);
    if (!rc) rc = load(m, st, N, s, n, err);
    if (!rc) {
        fill_info(m, N, st, path);
        m->vt = &neox_vtable;
        m->impl = N;
    }
    free(s);
    al__st_close(st);
    if (rc) neox_free(N);
    return rc;
}

/* ---- GGUF (architecture gptneox)
 * ------------------------------------------------------------------ Keys gptneox.{block_count,
 * context_length, embedding_length, feed_forward_length, attention.head_count,
 * attention.layer_norm_epsilon, rope.dimension_count (the rotary dims), rope.freq_base,
 * use_parallel_residual}; tensors token_embd, blk.N.{attn_norm, attn_qkv, attn_output, ffn_norm,
 * ffn_up, ffn_down}.{weight, bias}, output_norm, output. llama.cpp's converter stores attn_qkv as
 * [q; k; v] blocks already (no per-head split at load); exact GELU. */
static int neox_gguf_hparams(const al__gguf *g, al__neox_config *c, al_error *err) {
    struct {
        const char *key;
        int64_t lo, hi;
        int *dst;
    } ints[] = {{"gptneox.block_count", 1, 1024, &c->n_layer},
                {"gptneox.context_length", 1, 1 << 20, &c->n_ctx},
                {"gptneox.embedding_length", 2, 65536, &c->d_model},
                {"gptneox.feed_forward_length", 1, 1 << 20, &c->d_ff},
                {"gptneox.attention.head_count", 1, 4096, &c->n_head},
                {"gptneox.rope.dimension_count", 2, 1024, &c->rope.dim}};
    int64_t v;
    int rc;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        if ((rc = al__gguf_get_int(g, ints[i].key, ints[i].lo, ints[i].hi, &v, err))) return rc;
        *ints[i].dst = (int)v;
    }
    c->parallel = 1, c->bias = 1, c->eps = 1e-5, c->rope.base = 10000, c->rope.factor = 1;
    if (al__gguf_find(g, "gptneox.use_parallel_residual")) {
        if ((rc = al__gguf_get_int(g, "gptneox.use_parallel_residual", 0, 1, &v, err))) return rc;
        c->parallel = (int)v;
    }
    double f;
    if (al__gguf_find(g, "gptneox.attention.layer_norm_epsilon")) {
        if ((rc = al__gguf_get_float(g, "gptneox.attention.layer_norm_epsilon", &f, err)))
            return rc;
        if (!(f > 0 && f < 1)) return al__err(err, AL_E_FORMAT, "%s: epsilon %g", g->name, f);
        c->eps = f;
    }
    if (al__gguf_find(g, "gptneox.rope.freq_base")) {
        if ((rc = al__gguf_get_float(g, "gptneox.rope.freq_base", &f, err))) return rc;
        if (!(f > 1 && f < 1e12)) return al__err(err, AL_E_FORMAT, "%s: freq_base %g", g->name, f);
        c->rope.base = f;
    }
    if (c->d_model % c->n_head)
        return al__err(err, AL_E_FORMAT, "%s: embedding_length %d is not a multiple of %d heads",
                       g->name, c->d_model, c->n_head);
    c->d_head = c->d_model / c->n_head;
    if (c->rope.dim % 2 || c->rope.dim > c->d_head)
        return al__err(err, AL_E_FORMAT, "%s: rope.dimension_count %d for heads of %d", g->name,
                       c->rope.dim, c->d_head);
    c->rotary_pct = (double)c->rope.dim / c->d_head, c->rope.max_pos = c->n_ctx;
    const al__gguf_tensor *e = al__gguf_tensor_find(g, "token_embd.weight");
    if (!e || e->n_dims != 2 || e->ne[0] != c->d_model || e->ne[1] < 1 || e->ne[1] > (1 << 24))
        return al__err(err, AL_E_FORMAT, "%s: token_embd.weight missing or not [%d, vocab]",
                       g->name, c->d_model);
    c->vocab = (int)e->ne[1];
    c->tied = al__gguf_tensor_find(g, "output.weight") == NULL;
    return 0;
}

static int neox_gguf_weights(al_model *m, const al__gguf *g, neox *N, al_error *err) {
    const al__neox_config *c = &N->cfg;
    int64_t C = c->d_model, F = c->d_ff, V = c->vocab;
    int cap = 4 + 12 * c->n_layer, n = 0;
    nspec *s = al__calloc((size_t)cap, sizeof *s, "weight list", err);
    if (!s) return AL_E_NOMEM;
    s[n++] = (nspec){"token_embd.weight", 2, {C, V}, &N->embed};
    s[n++] = (nspec){"output_norm.weight", 1, {C, 1}, &N->lnf_w};
    s[n++] = (nspec){"output_norm.bias", 1, {C, 1}, &N->lnf_b};
    if (!c->tied) s[n++] = (nspec){"output.weight", 2, {C, V}, &N->out};
    for (int l = 0; l < c->n_layer; l++) {
        neox_layer *y = &N->layers[l];
        struct {
            const char *suffix;
            int nd;
            int64_t ne0, ne1;
            float **dst;
        } t[12] = {
            {"attn_norm.weight", 1, C, 1, &y->ln1_w},   {"attn_norm.bias", 1, C, 1, &y->ln1_b},
            {"ffn_norm.weight", 1, C, 1, &y->ln2_w},    {"ffn_norm.bias", 1, C, 1, &y->ln2_b},
            {"attn_qkv.weight", 2, C, 3 * C, &y->wqkv}, {"attn_qkv.bias", 1, 3 * C, 1, &y->bqkv},
            {"attn_output.weight", 2, C, C, &y->wo},    {"attn_output.bias", 1, C, 1, &y->bo},
            {"ffn_up.weight", 2, C, F, &y->w1},         {"ffn_up.bias", 1, F, 1, &y->b1},
            {"ffn_down.weight", 2, F, C, &y->w2},       {"ffn_down.bias", 1, C, 1, &y->b2},
        };
        for (int i = 0; i < 12; i++) {
            nspec *w = &s[n++];
            snprintf(w->name, sizeof w->name, "blk.%d.%s", l, t[i].suffix);
            w->ndim = t[i].nd, w->shape[0] = t[i].ne0, w->shape[1] = t[i].ne1, w->dst = t[i].dst;
        }
    }
    size_t total = 0, each;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (!al__mul_ok((size_t)s[i].shape[0], (size_t)s[i].shape[1], &each) ||
            !al__add_ok(total, each, &total) || !al__mul_ok(total, sizeof(float), &each))
            rc = al__err(err, AL_E_NOMEM, "%s: the weights' size overflows", g->name);
    for (int i = 0; i < n && !rc; i++) /* every tensor checked before the arena */
        rc = al__gguf_check_f32(g, s[i].name, s[i].ndim, s[i].shape, err);
    if (!rc && !(N->arena = al__malloc_aligned(total * sizeof(float), "weights", err)))
        rc = AL_E_NOMEM;
    float *p = N->arena;
    for (int i = 0; i < n && !rc; i++) {
        size_t k = (size_t)(s[i].shape[0] * s[i].shape[1]), bad = 0, first = 0;
        rc = al__gguf_load_f32(g, s[i].name, s[i].ndim, s[i].shape, p, err);
        for (size_t e = 0; !rc && e < k; e++)
            if (!isfinite(p[e]) && !bad++) first = e;
        if (bad) al__model_warn_nonfinite(m, g->name, s[i].name, bad, first);
        *s[i].dst = p;
        p += k;
    }
    if (!rc && c->tied) N->out = N->embed;
    free(s);
    return rc;
}

static int neox_gguf_files(al_model *m, al__model_files *fs, al_error *err) {
    return al__model_files_add(fs, m->info.path, "weights", err);
}
static int neox_gguf_tokenizer_files(al_model *m, al__model_files *fs, al_error *err) {
    return al__model_files_add(fs, m->info.path, "tokenizer", err);
}

/* The file is closed after the weights are read: opened again for the metadata. */
static int neox_gguf_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    *out = NULL;
    al__gguf *g = NULL;
    int rc = al__gguf_open(m->info.path, &g, err);
    if (!rc) rc = al__gguf_tokenizer(g, m->info.vocab_size, out, err);
    al__gguf_close(g);
    return rc;
}

static const al_model_vtable neox_gguf_vtable = {.forward = neox_forward,
                                                 .architecture = neox_architecture,
                                                 .destroy = neox_destroy,
                                                 .tokenizer = neox_gguf_tokenizer,
                                                 .files = neox_gguf_files,
                                                 .tokenizer_files = neox_gguf_tokenizer_files,
                                                 .variants = 1};

int al__neox_open_gguf(al_model *m, const char *path, al_error *err) {
    m->impl = NULL;
    neox *N = al__calloc(1, sizeof *N, "gpt_neox model", err);
    if (!N) return AL_E_NOMEM;
    al__gguf *g = NULL;
    int rc = al__gguf_open(path, &g, err);
    if (!rc) rc = neox_gguf_hparams(g, &N->cfg, err);
    if (!rc && !(N->layers = al__calloc((size_t)N->cfg.n_layer, sizeof *N->layers, "layers", err)))
        rc = AL_E_NOMEM;
    if (!rc) rc = neox_gguf_weights(m, g, N, err);
    if (!rc) {
        al_model_info *in = &m->info;
        const al__neox_config *c = &N->cfg;
        snprintf(in->family, sizeof in->family, "gpt_neox");
        snprintf(in->name, sizeof in->name, "gptneox");
        if (al__gguf_find(g, "general.name"))
            al__gguf_get_str(g, "general.name", in->name, sizeof in->name, NULL);
        snprintf(in->path, sizeof in->path, "%s", path);
        const al__gguf_tensor *q = al__gguf_tensor_find(g, "blk.0.attn_qkv.weight");
        snprintf(in->dtype, sizeof in->dtype, "%s", q ? al__ggml_type_name(q->type) : "f32");
        for (char *p = in->dtype; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        in->n_layer = c->n_layer, in->n_head = c->n_head, in->n_kv_head = c->n_head;
        in->d_model = c->d_model, in->d_head = c->d_head, in->d_ff = c->d_ff;
        in->n_ctx = c->n_ctx, in->vocab_size = c->vocab, in->causal = 1, in->n_params = 0;
        for (int64_t i = 0; i < g->n_tensors; i++) in->n_params += g->tensors[i].n_elem;
        m->vt = &neox_gguf_vtable;
        m->impl = N;
    }
    al__gguf_close(g);
    if (rc) neox_free(N);
    return rc;
}
