/* bert.c: BERT-family encoders (BertModel: all-MiniLM-L6-v2, bert-base, ...) from HF
 * safetensors + config.json, with the streaming capture, and their WordPiece tokenizer.
 *
 * Forward (C = d_model = hidden_size, H heads, d = C / H, F = intermediate_size, eps from
 * config layer_norm_eps; every matrix is nn.Linear [out, in]):
 *   x = LN_emb(word[tokens] + position[0..T) + token_type[0])          [T, C]
 *   per layer (post-LayerNorm):
 *       q = x Wq^T + bq, k = x Wk^T + bk, v = x Wv^T + bv               [T, C] each
 *       o = attention(q, k, v)       (bidirectional: n = T keys for every row, 1/sqrt(d))
 *       x = LN_1(x + o Wo^T + bo)
 *       x = LN_2(x + gelu_erf(x Wi^T + bi) Wout^T + bout)
 *   final_hidden = x (the last layer's output). There is no LM head: logits are refused.
 * Capture: "hidden" is the layer input x (already normalised in a post-LN block) and "embed"
 * is the normalised embedding (the input of layer 0).
 * Tensor names: HF BertModel names, with or without the "bert." prefix; pooler and
 * position_ids are ignored. Every tensor is checked for its dtype and exact shape.
 * Windows of a corpus (capture, reproduce): the corpus is tokenized once as one text, so its
 * ids are [CLS] body [SEP], and window k = ids [kL, (k+1)L) is used as is (METHOD section 1):
 * window 0 starts with [CLS], no window is re-wrapped; sentences (attnlim embed) get their own
 * [CLS] ... [SEP]. Every token has token type 0 and attends to all T tokens of its window. */
#include "model.h"
#include "textsafe.h"
#include "ops.h"
#include "safetensors.h"
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct bert_layer {
    float *wqkv;          /* [3C, C] query | key | value rows */
    float *bqkv;          /* [3C] */
    float *wo, *bo;       /* [C, C], [C] attention.output.dense */
    float *ln1_g, *ln1_b; /* [C] attention.output.LayerNorm */
    float *wi, *bi;       /* [F, C], [F] intermediate.dense */
    float *wout, *bout;   /* [C, F], [C] output.dense */
    float *ln2_g, *ln2_b; /* [C] output.LayerNorm */
} bert_layer;

typedef struct bert_acts {
    int cap;        /* tokens the buffers hold: the longest window so far (sized by need) */
    float *mem;     /* one allocation for the buffers below, sized for cap tokens */
    float *x;       /* [cap, C] residual stream (normalised after each block) */
    float *embed;   /* [cap, C] normalised embedding (capture) */
    float *qkv;     /* [cap, 3C] q | k | v, head h at columns h*d of each */
    float *atty;    /* [cap, C] concatenated head outputs */
    float *proj;    /* [cap, C] a projection's output */
    float *ff;      /* [cap, F] MLP hidden */
    al__attn_ws ws; /* attention buffers kept across layers */
} bert_acts;

typedef struct bert {
    int n_layer, n_head, d_model, d_ff, n_ctx, vocab_size, n_types;
    float eps;
    float *arena;         /* all weights as float32 */
    float *word;          /* [V, C] */
    float *pos;           /* [n_ctx, C] */
    float *type0;         /* [C] token-type embedding row 0 (every token is type 0) */
    float *emb_g, *emb_b; /* [C] embeddings.LayerNorm */
    bert_layer *layers;   /* [n_layer] */
    bert_acts *acts;      /* built on the first forward */
    int lowercase, strip_accents;
    char dir[4096]; /* the directory of config.json / vocab.txt */
} bert;

/* ---- config ------------------------------------------------------------------------------------
 */

static int json_int(const cJSON *j, const char *key, long lo, long hi, int *out, const char *cfg,
                    al_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v))
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" missing or not a number", cfg, key);
    double d = v->valuedouble;
    if (d != floor(d) || d < (double)lo || d > (double)hi)
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" = %g outside %ld..%ld", cfg, key, d, lo, hi);
    *out = (int)d;
    return 0;
}

/* tokenizer_config.json, if present: do_lower_case (a boolean; default true) and strip_accents
 * (a boolean, or null / absent: as do_lower_case). A file that is there but unreadable, not a
 * JSON object, or holding either key with another type is an error naming it: a tokenizer
 * silently read with other flags than the model's would give other ids. */
static int read_tokenizer_config(bert *b, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", b->dir);
    b->lowercase = 1;
    b->strip_accents = -1;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        b->strip_accents = b->lowercase;
        return 0;
    }
    char *text;
    size_t len;
    int rc = al__read_file(path, 1 << 20, &text, &len, err);
    if (rc) return rc;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: not a JSON object", path);
    }
    if (al__json_check_unique(j, path, err)) {
        cJSON_Delete(j);
        return AL_E_FORMAT;
    }
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(j, "do_lower_case");
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(j, "strip_accents");
    if (lc && !cJSON_IsBool(lc))
        rc = al__err(err, AL_E_FORMAT, "%s: \"do_lower_case\" is not a boolean", path);
    else if (sa && !cJSON_IsBool(sa) && !cJSON_IsNull(sa))
        rc = al__err(err, AL_E_FORMAT, "%s: \"strip_accents\" is neither a boolean nor null", path);
    if (cJSON_IsBool(lc)) b->lowercase = cJSON_IsTrue(lc);
    if (cJSON_IsBool(sa)) b->strip_accents = cJSON_IsTrue(sa);
    cJSON_Delete(j);
    if (b->strip_accents < 0) b->strip_accents = b->lowercase;
    return rc;
}

static int read_config(bert *b, al_model_info *info, al_error *err) {
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", b->dir);
    char *text;
    size_t len;
    int rc = al__read_file(cfg, 1 << 20, &text, &len, err);
    if (rc) return rc;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", cfg);
    rc = al__json_check_unique(j, cfg, err);
    if (!rc) rc = json_int(j, "hidden_size", 1, 16384, &b->d_model, cfg, err);
    if (!rc) rc = json_int(j, "num_attention_heads", 1, 1024, &b->n_head, cfg, err);
    if (!rc) rc = json_int(j, "num_hidden_layers", 1, 512, &b->n_layer, cfg, err);
    if (!rc) rc = json_int(j, "intermediate_size", 1, 131072, &b->d_ff, cfg, err);
    if (!rc) rc = json_int(j, "max_position_embeddings", 1, 65536, &b->n_ctx, cfg, err);
    if (!rc) rc = json_int(j, "vocab_size", 1, 1 << 22, &b->vocab_size, cfg, err);
    if (!rc) rc = json_int(j, "type_vocab_size", 1, 1024, &b->n_types, cfg, err);
    if (!rc && b->d_model % b->n_head)
        rc = al__err(err, AL_E_FORMAT,
                     "%s: hidden_size %d is not a multiple of num_attention_heads %d", cfg,
                     b->d_model, b->n_head);
    b->eps = 1e-12f;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    if (!rc && eps) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0) || eps->valuedouble > 1)
            rc =
                al__err(err, AL_E_FORMAT, "%s: \"layer_norm_eps\" must be a number in (0, 1]", cfg);
        else
            b->eps = (float)eps->valuedouble;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (!rc && act && !(cJSON_IsString(act) && strcmp(act->valuestring, "gelu") == 0))
        rc = al__err(err, AL_E_UNSUPPORTED,
                     "%s: hidden_act %s is not supported (only \"gelu\", the erf form)", cfg,
                     cJSON_IsString(act) ? act->valuestring : "(not a string)");
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(j, "position_embedding_type");
    if (!rc && pet && !(cJSON_IsString(pet) && strcmp(pet->valuestring, "absolute") == 0))
        rc = al__err(err, AL_E_UNSUPPORTED,
                     "%s: position_embedding_type %s is not supported (only \"absolute\")", cfg,
                     cJSON_IsString(pet) ? pet->valuestring : "(not a string)");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(j, "is_decoder");
    if (!rc && cJSON_IsTrue(dec))
        rc = al__err(err, AL_E_UNSUPPORTED,
                     "%s: is_decoder = true (a causal BERT) is not supported", cfg);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "_name_or_path");
    if (!rc) {
        if (cJSON_IsString(name) && name->valuestring[0])
            snprintf(info->name, sizeof info->name, "%s", name->valuestring);
        else
            snprintf(info->name, sizeof info->name, "bert-L%d-H%d", b->n_layer, b->d_model);
    }
    cJSON_Delete(j);
    return rc;
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct wspec {
    const char *name; /* without the "bert." prefix; %d = layer */
    int layer;        /* -1: not per layer */
    int ndim;
    int64_t shape[2];
    float *dst;
} wspec;

static int load_one(al_model *m, const al__safetensors *st, const char *prefix, const wspec *s,
                    size_t *n_params, al_error *err) {
    char name[256], full[300];
    if (s->layer >= 0)
        snprintf(name, sizeof name, s->name, s->layer);
    else
        snprintf(name, sizeof name, "%s", s->name);
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const al__st_tensor *t = al__st_find(st, full);
    if (!t) {
        const al__st_tensor *any = al__st_at(st, 0);
        return al__err(err, AL_E_NOTFOUND, "%s: tensor %s is missing",
                       any ? any->file : "safetensors", full);
    }
    if (t->dtype != AL_ST_F32 && t->dtype != AL_ST_F16 && t->dtype != AL_ST_BF16 &&
        t->dtype != AL_ST_F64)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: tensor %s has dtype %s (expected F32, F16, BF16 or F64)", t->file, full,
                       t->dtype_name);
    if (!s->dst) { /* the check before anything is allocated: present, of the config's shape */
        int same = t->ndim == s->ndim;
        for (int i = 0; same && i < s->ndim; i++) same = t->shape[i] == s->shape[i];
        if (!same)
            return al__err(
                err, AL_E_FORMAT,
                "%s: tensor %s has another shape than config.json implies ([%lld%s%lld%s], "
                "file: %d dimensions, first %lld)",
                t->file, full, (long long)s->shape[0], s->ndim == 2 ? ", " : "",
                s->ndim == 2 ? (long long)s->shape[1] : 0LL, s->ndim == 2 ? "" : " (1-d)", t->ndim,
                t->ndim ? (long long)t->shape[0] : 0LL);
        return 0;
    }
    int rc = al__st_load_f32(st, full, s->ndim, s->shape, s->dst, err);
    if (rc) return rc;
    size_t n = (size_t)s->shape[0] * (s->ndim == 2 ? (size_t)s->shape[1] : 1);
    al__model_scan_nonfinite(m, t->file, full, s->dst, n);
    *n_params += n;
    return 0;
}

/* The 16 tensors of encoder layer l (dst: w's buffers, or NULL for the check-only pass). */
static void layer_specs(int l, int64_t C, int64_t F, const bert_layer *w, wspec out[16]) {
#define W(f) (w ? w->f : NULL)
    const wspec t[16] = {
        {"encoder.layer.%d.attention.self.query.weight", l, 2, {C, C}, W(wqkv)},
        {"encoder.layer.%d.attention.self.key.weight", l, 2, {C, C}, W(wqkv + C * C)},
        {"encoder.layer.%d.attention.self.value.weight", l, 2, {C, C}, W(wqkv + 2 * C * C)},
        {"encoder.layer.%d.attention.self.query.bias", l, 1, {C, 0}, W(bqkv)},
        {"encoder.layer.%d.attention.self.key.bias", l, 1, {C, 0}, W(bqkv + C)},
        {"encoder.layer.%d.attention.self.value.bias", l, 1, {C, 0}, W(bqkv + 2 * C)},
        {"encoder.layer.%d.attention.output.dense.weight", l, 2, {C, C}, W(wo)},
        {"encoder.layer.%d.attention.output.dense.bias", l, 1, {C, 0}, W(bo)},
        {"encoder.layer.%d.attention.output.LayerNorm.weight", l, 1, {C, 0}, W(ln1_g)},
        {"encoder.layer.%d.attention.output.LayerNorm.bias", l, 1, {C, 0}, W(ln1_b)},
        {"encoder.layer.%d.intermediate.dense.weight", l, 2, {F, C}, W(wi)},
        {"encoder.layer.%d.intermediate.dense.bias", l, 1, {F, 0}, W(bi)},
        {"encoder.layer.%d.output.dense.weight", l, 2, {C, F}, W(wout)},
        {"encoder.layer.%d.output.dense.bias", l, 1, {C, 0}, W(bout)},
        {"encoder.layer.%d.output.LayerNorm.weight", l, 1, {C, 0}, W(ln2_g)},
        {"encoder.layer.%d.output.LayerNorm.bias", l, 1, {C, 0}, W(ln2_b)},
    };

#undef W
    for (int i = 0; i < 16; i++) out[i] = t[i];
}

/* Every tensor present with the shape config.json implies, before the weights are allocated:
 * a config claiming more than the file holds is a tensor mismatch, not "out of memory". */
static int check_tensors(const bert *b, const al__safetensors *st, const char *prefix,
                         al_error *err) {
    const int64_t C = b->d_model, F = b->d_ff;
    size_t n = 0;
    wspec emb[3] = {
        {"embeddings.word_embeddings.weight", -1, 2, {b->vocab_size, C}, NULL},
        {"embeddings.position_embeddings.weight", -1, 2, {b->n_ctx, C}, NULL},
        {"embeddings.token_type_embeddings.weight", -1, 2, {b->n_types, C}, NULL},
    };
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) rc = load_one(NULL, st, prefix, &emb[i], &n, err);
    for (int l = 0; l < b->n_layer && !rc; l++) {
        wspec specs[16];
        layer_specs(l, C, F, NULL, specs);
        for (int i = 0; i < 16 && !rc; i++) rc = load_one(NULL, st, prefix, &specs[i], &n, err);
    }
    return rc;
}

static int load_weights(al_model *m, bert *b, const al__safetensors *st, al_model_info *info,
                        al_error *err) {
    const int64_t C = b->d_model, F = b->d_ff, L = b->n_layer;
    /* floats: embeddings, then per layer 3C*C + 3C + C*C + C + 2C + F*C + F + C*F + C + 2C */
    size_t per_layer = (size_t)(4 * C * C + 2 * C * F + 9 * C + F);
    size_t emb = (size_t)b->vocab_size * C + (size_t)b->n_ctx * C + 3 * (size_t)C;
    size_t total;
    if (!al__mul_ok(per_layer, (size_t)L, &total) || !al__add_ok(total, emb, &total) ||
        !al__mul_ok(total, sizeof(float), &total))
        return al__err(err, AL_E_NOMEM, "%s: the model's size overflows", b->dir);
    const char *pre = al__st_find(st, "bert.embeddings.word_embeddings.weight") ? "bert." : "";
    int rc0 = check_tensors(b, st, pre, err);
    if (rc0) return rc0;
    b->arena = al__malloc_aligned(total, "BERT weights", err);
    b->layers = al__calloc((size_t)L, sizeof *b->layers, "BERT layers", err);
    if (!b->arena || !b->layers) return AL_E_NOMEM;

    const char *prefix = al__st_find(st, "bert.embeddings.word_embeddings.weight") ? "bert." : "";
    float *p = b->arena;
    b->word = p, p += (size_t)b->vocab_size * C;
    b->pos = p, p += (size_t)b->n_ctx * C;
    b->type0 = p, p += C;
    b->emb_g = p, p += C;
    b->emb_b = p, p += C;
    size_t n_params = 0;
    int rc;
    wspec emb_specs[4] = {
        {"embeddings.word_embeddings.weight", -1, 2, {b->vocab_size, C}, b->word},
        {"embeddings.position_embeddings.weight", -1, 2, {b->n_ctx, C}, b->pos},
        {"embeddings.LayerNorm.weight", -1, 1, {C, 0}, b->emb_g},
        {"embeddings.LayerNorm.bias", -1, 1, {C, 0}, b->emb_b},
    };
    for (int i = 0; i < 4; i++)
        if ((rc = load_one(m, st, prefix, &emb_specs[i], &n_params, err))) return rc;
    { /* token types [n_types, C]: only row 0 is used (every token is of type 0) */
        float *types =
            al__malloc((size_t)b->n_types * C * sizeof(float), "token-type embedding", err);
        if (!types) return AL_E_NOMEM;
        wspec s = {"embeddings.token_type_embeddings.weight", -1, 2, {b->n_types, C}, types};
        rc = load_one(m, st, prefix, &s, &n_params, err);
        if (rc == 0) memcpy(b->type0, types, (size_t)C * sizeof(float));
        free(types);
        if (rc) return rc;
    }
    for (int l = 0; l < L; l++) {
        bert_layer *w = &b->layers[l];
        w->wqkv = p, p += 3 * C * C;
        w->bqkv = p, p += 3 * C;
        w->wo = p, p += C * C;
        w->bo = p, p += C;
        w->ln1_g = p, p += C;
        w->ln1_b = p, p += C;
        w->wi = p, p += F * C;
        w->bi = p, p += F;
        w->wout = p, p += C * F;
        w->bout = p, p += C;
        w->ln2_g = p, p += C;
        w->ln2_b = p, p += C;
        wspec specs[16];
        layer_specs(l, C, F, w, specs);
        for (int i = 0; i < 16; i++)
            if ((rc = load_one(m, st, prefix, &specs[i], &n_params, err))) return rc;
    }
    /* a lying checkpoint: layers beyond config.json's num_hidden_layers */
    size_t plen = strlen(prefix);
    for (int i = 0; i < al__st_count(st); i++) {
        const al__st_tensor *t = al__st_at(st, i);
        const char *nm = t->name;
        if (strncmp(nm, prefix, plen) != 0 || strncmp(nm + plen, "encoder.layer.", 14) != 0)
            continue;
        long idx = strtol(nm + plen + 14, NULL, 10);
        if (idx < 0 || idx >= L)
            return al__err(
                err, AL_E_FORMAT,
                "%s: tensor %s is of layer %ld, but config.json has num_hidden_layers = %d",
                t->file, nm, idx, (int)L);
    }
    const al__st_tensor *we = al__st_find(st, "bert.embeddings.word_embeddings.weight");
    if (!we) we = al__st_find(st, "embeddings.word_embeddings.weight");
    const char *dt = we->dtype == AL_ST_F16    ? "f16"
                     : we->dtype == AL_ST_BF16 ? "bf16"
                     : we->dtype == AL_ST_F64  ? "f64"
                                               : "f32";
    snprintf(info->dtype, sizeof info->dtype, "%s", dt);
    info->n_params = (int64_t)n_params;
    return 0;
}

/* ---- activations and forward --------------------------------------------------------------------
 */

static void free_acts(bert_acts *a) {
    if (!a) return;
    free(a->mem);
    al__attn_ws_free(&a->ws);
    free(a);
}

static int build_acts(const bert *b, int T_need, bert_acts **out, al_error *err) {
    size_t T = (size_t)T_need, C = (size_t)b->d_model, F = (size_t)b->d_ff;
    size_t sizes[6] = {T * C, T * C, 3 * T * C, T * C, T * C, T * F};
    size_t total = 0, bytes;
    for (int i = 0; i < 6; i++)
        if (!al__add_ok(total, (sizes[i] + 15) & ~(size_t)15, &total))
            return al__err(err, AL_E_NOMEM, "BERT activations: size overflows");
    if (!al__mul_ok(total, sizeof(float), &bytes))
        return al__err(err, AL_E_NOMEM, "BERT activations: size overflows");
    bert_acts *a = al__calloc(1, sizeof *a, "BERT activation state", err);
    if (!a) return AL_E_NOMEM;
    a->mem = al__malloc_aligned(bytes, "BERT activations", err);
    if (!a->mem) {
        free(a);
        return AL_E_NOMEM;
    }
    a->cap = T_need;
    float **ptrs[6] = {&a->x, &a->embed, &a->qkv, &a->atty, &a->proj, &a->ff};
    float *p = a->mem;
    for (int i = 0; i < 6; i++) {
        *ptrs[i] = p;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    *out = a;
    return 0;
}

static int bert_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                        const al__fwd *f, float *logits, float *final_hidden, al_error *err) {
    bert *b = m->impl;
    if (logits)
        return al__err(
            err, AL_E_UNSUPPORTED,
            "%s: a BERT encoder has no language-model head here: no logits, and perplexity "
            "is not defined for it",
            m->info.path);
    if (T < 1 || T > b->n_ctx)
        return al__err(err, AL_E_INVALID, "%s: window of %d tokens outside 1..%d", m->info.path, T,
                       b->n_ctx);
    if (!b->acts || b->acts->cap < T) { /* sized by need, grown for a longer window */
        bert_acts *fresh = NULL;
        int rc = build_acts(b, T, &fresh, err);
        if (rc) return rc;
        free_acts(b->acts);
        b->acts = fresh;
    }
    bert_acts *a = b->acts;
    const int C = b->d_model, H = b->n_head, F = b->d_ff;

    /* embeddings: word + position + token type 0, then LayerNorm */
    for (int t = 0; t < T; t++) {
        if (tokens[t] < 0 || tokens[t] >= b->vocab_size)
            return al__err(err, AL_E_INVALID, "token id %d at position %d outside [0, %d)",
                           (int)tokens[t], t, b->vocab_size);
        const float *we = b->word + (size_t)tokens[t] * C, *pe = b->pos + (size_t)t * C; /* [C] */
        float *xt = a->x + (size_t)t * C;
        for (int c = 0; c < C; c++) xt[c] = we[c] + pe[c] + b->type0[c];
    }
    al__layernorm(a->x, a->x, b->emb_g, b->emb_b, T, C, b->eps);
    int want_embed = req && req->fn && (req->what & AL_CAP_EMBED);
    if (want_embed) memcpy(a->embed, a->x, (size_t)T * C * sizeof(float));

    for (int l = 0; l <= f->last; l++) {
        const bert_layer *w = &b->layers[l];
        al__matmul_nt(a->qkv, a->x, w->wqkv, w->bqkv, T, C, 3 * C);
        al__attn at =
            al__attn_fused(l, T, H, C, 0, a->qkv, a->atty, a->x, want_embed ? a->embed : NULL, req);
        at.residual = a->x; /* post-norm: the layer input is both hidden and residual */
        int rc = al__attention_ws(&at, &a->ws, err);
        if (rc) return rc;
        al__matmul_nt(a->proj, a->atty, w->wo, w->bo, T, C, C);
        al__add(a->x, a->proj, (size_t)T * C);
        al__layernorm(a->x, a->x, w->ln1_g, w->ln1_b, T, C, b->eps);
        al__matmul_nt(a->ff, a->x, w->wi, w->bi, T, C, F);
        al__gelu_erf(a->ff, (size_t)T * F);
        al__matmul_nt(a->proj, a->ff, w->wout, w->bout, T, F, C);
        al__add(a->x, a->proj, (size_t)T * C);
        al__layernorm(a->x, a->x, w->ln2_g, w->ln2_b, T, C, b->eps);
    }
    if (final_hidden) /* the rows [row0, T) */
        memcpy(final_hidden, a->x + (size_t)f->row0 * C, (size_t)(T - f->row0) * C * sizeof(float));
    return 0;
}

static void bert_free(bert *b) {
    if (!b) return;
    free_acts(b->acts);
    free(b->arena);
    free(b->layers);
    free(b);
}

static void bert_destroy(al_model *m) {
    bert_free(m->impl);
    m->impl = NULL;
}

static int bert_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    bert *b = m->impl;
    char vocab[4200];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", b->dir);
    al__wordpiece *w = NULL;
    int rc = al__wordpiece_open(vocab, b->lowercase, b->strip_accents, &w, err);
    if (rc) return al__err_prefix(err, rc, "%s: the model's WordPiece vocabulary", m->info.path);
    return al__tokenizer_from_wordpiece(w, out, err);
}

static int bert_files(al_model *m, al__model_files *fs, al_error *err) {
    return al__model_files_safetensors(m, fs, err);
}

/* What bert_tokenizer reads: vocab.txt, and tokenizer_config.json (lower-casing) if present. */
static int bert_tokenizer_files(al_model *m, al__model_files *fs, al_error *err) {
    char dir[4096], p[4096 + 64];
    al__model_dir(m, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/vocab.txt", dir);
    int rc = al__model_files_add(fs, p, "tokenizer", err);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    if (!rc && al__is_file(p)) rc = al__model_files_add(fs, p, "tokenizer", err);
    return rc;
}

static const al_model_vtable bert_vtable = {.forward = bert_forward,
                                            .destroy = bert_destroy,
                                            .tokenizer = bert_tokenizer,
                                            .files = bert_files,
                                            .tokenizer_files = bert_tokenizer_files};

/* ---- open ---------------------------------------------------------------------------------------
 */

int al__bert_open_safetensors(al_model *m, const char *path, al_error *err) {
    m->impl = NULL;
    bert *b = al__calloc(1, sizeof *b, "BERT model", err);
    if (!b) return AL_E_NOMEM;
    struct stat sb;
    snprintf(b->dir, sizeof b->dir, "%s", path);
    if (!(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        char *slash = strrchr(b->dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(b->dir, sizeof b->dir, ".");
    }
    al__safetensors *st = NULL;
    int rc = read_config(b, &m->info, err);
    if (rc == 0) rc = al__st_open(path, &st, err);
    if (rc == 0) rc = load_weights(m, b, st, &m->info, err);
    al__st_close(st);
    if (rc == 0) rc = read_tokenizer_config(b, err);
    if (rc) {
        bert_free(b);
        return rc;
    }
    al_model_info *info = &m->info;
    snprintf(info->family, sizeof info->family, "bert");
    /* the file opened: model.safetensors of a directory (hashed by al_model_hash) */
    snprintf(info->path, sizeof info->path, "%s", path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char file[4200];
        snprintf(file, sizeof file, "%s/model.safetensors", path);
        if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode))
            snprintf(info->path, sizeof info->path, "%s", file);
    }
    info->n_layer = b->n_layer;
    info->n_head = b->n_head;
    info->n_kv_head = b->n_head;
    info->d_model = b->d_model;
    info->d_head = b->d_model / b->n_head;
    info->d_ff = b->d_ff;
    info->n_ctx = b->n_ctx;
    info->vocab_size = b->vocab_size;
    info->causal = 0;
    m->vt = &bert_vtable;
    m->impl = b;
    return 0;
}
