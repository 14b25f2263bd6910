/* llama_hf.c: Llama-family decoders from HF model directories (config.json + model.safetensors
 * or a sharded index): LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, into the weight
 * struct of llama.h (the forward is llama.c's, shared with GGUF).
 *
 * config.json fields read (transformers 4.46 names and defaults): hidden_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads (= heads), head_dim (llama,
 * mistral; = hidden_size / heads), intermediate_size, max_position_embeddings, vocab_size,
 * rms_norm_eps, rope_theta (10000), rope_scaling (null or {rope_type|type, factor, ...}),
 * tie_word_embeddings (false), attention_bias (llama: q/k/v/o biases), mlp_bias (llama),
 * sliding_window (mistral; null = none), use_sliding_window and max_window_layers (qwen2, below),
 * hidden_act ("silu"), bos_token_id, eos_token_id.
 *
 * Decisions: unknown tensors are an error (they mean a config that does not match the file),
 * except the rotary inv_freq buffers of old checkpoints; when tie_word_embeddings is true a
 * saved lm_head.weight is ignored (transformers ties it to embed_tokens). Qwen2 with
 * use_sliding_window = true: as current transformers (Qwen2Config.layer_types: layer i slides
 * iff i >= max_window_layers, default 28), and as 4.46.3's flash path; 4.46.3's eager and sdpa
 * forwards windowed every layer (their 4-d mask ignored max_window_layers), which
 * max_window_layers = 0 gives. A config's "layer_types" (written by current transformers) must
 * agree layer by layer with what the fields above derive. */
#include "llama.h"
#include "hf_config.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- config.json ------------------------------------------------------------------------------
 */

/* A soft-cap: null = none, absent = transformers' default, else > 0. */
static int get_softcap(const cJSON *j, const char *key, double def, double *v, const char *name,
                       al_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsNull(x)) {
        *v = 0;
        return 0;
    }
    return al__cfg_num(j, key, 0, 1e6, def, v, name, err);
}

/* Gemma 2's own fields: attention_bias (q/k/v/o), query_pre_attn_scalar (256),
 * attn_logit_softcapping (50), final_logit_softcapping (30); embeddings times sqrt(C). */
static int parse_gemma2(const cJSON *j, al__llama_config *c, const char *name, al_error *err) {
    double q;
    int rc = al__cfg_bool(j, "attention_bias", 0, &c->qkv_bias, name, err);
    if (!rc) rc = al__cfg_num(j, "query_pre_attn_scalar", 0, 1e9, 256, &q, name, err);
    if (!rc) rc = get_softcap(j, "attn_logit_softcapping", 50, &c->attn_softcap, name, err);
    if (!rc) rc = get_softcap(j, "final_logit_softcapping", 30, &c->final_softcap, name, err);
    c->o_bias = c->qkv_bias;
    c->attn_scale = rc ? 0 : 1.0 / sqrt(q);
    c->embed_scale = sqrt((double)c->d_model);
    return rc;
}

/* The model_type and what follows from it. */
static int parse_arch(const cJSON *j, al__llama_config *c, const char *name, al_error *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (!cJSON_IsString(t)) return al__err(err, AL_E_FORMAT, "%s: no \"model_type\" string", name);
    const char *known[] = {"llama", "mistral", "qwen2", "gemma2"};
    for (int i = 0; i < 4; i++)
        if (strcmp(t->valuestring, known[i]) == 0)
            snprintf(c->arch, sizeof c->arch, "%s", known[i]);
    if (!c->arch[0])
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: model_type '%.64s' is not a Llama-family architecture (llama, "
                       "mistral, qwen2, gemma2 are)",
                       name, t->valuestring);
    c->gemma = strcmp(c->arch, "gemma2") == 0;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (c->gemma) { /* Gemma2MLP reads hidden_activation */
        const cJSON *ha = cJSON_GetObjectItemCaseSensitive(j, "hidden_activation");
        if (ha && !cJSON_IsNull(ha)) act = ha;
        const char *s = cJSON_IsString(act) ? act->valuestring : "?";
        c->gelu = !act                                                        ? 1
                  : !strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new") ? 1
                  : !strcmp(s, "gelu")                                        ? 2
                                                                              : 0;
        if (!c->gelu)
            return al__err(err, AL_E_UNSUPPORTED,
                           "%s: hidden_activation '%.64s' is not supported (gelu_pytorch_tanh, "
                           "gelu_new, gelu are)",
                           name, s);
        return 0;
    }
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return al__err(err, AL_E_UNSUPPORTED, "%s: hidden_act '%.64s' is not supported (silu is)",
                       name, cJSON_IsString(act) ? act->valuestring : "?");
    return 0;
}

static int parse_shapes(const cJSON *j, al__llama_config *c, const char *name, al_error *err) {
    int rc;
    if ((rc = al__cfg_int(j, "num_hidden_layers", 1, 1024, -1, &c->n_layer, name, err)) ||
        (rc = al__cfg_int(j, "hidden_size", 2, 65536, -1, &c->d_model, name, err)) ||
        (rc = al__cfg_int(j, "num_attention_heads", 1, 4096, -1, &c->n_head, name, err)) ||
        (rc =
             al__cfg_int(j, "num_key_value_heads", 1, 4096, c->n_head, &c->n_kv_head, name, err)) ||
        (rc = al__cfg_int(j, "intermediate_size", 1, 1 << 20, -1, &c->d_ff, name, err)) ||
        (rc = al__cfg_int(j, "max_position_embeddings", 1, 1 << 20, -1, &c->n_ctx, name, err)) ||
        (rc = al__cfg_int(j, "vocab_size", 1, 1 << 24, -1, &c->vocab, name, err)))
        return rc;
    int def_d = c->d_model / c->n_head;
    if (strcmp(c->arch, "qwen2") == 0)
        c->d_head = def_d;
    else if ((rc = al__cfg_int(j, "head_dim", 2, 1024, def_d, &c->d_head, name, err)))
        return rc;
    return al__cfg_num(j, "rms_norm_eps", 0, 1, 1e-6, &c->eps, name, err);
}

static int parse_window(const cJSON *j, al__llama_config *c, const char *name, al_error *err) {
    c->window = 0;
    c->max_window_layers = -1;
    int use = 1, rc;
    if (strcmp(c->arch, "llama") == 0) return 0;
    if (strcmp(c->arch, "qwen2") == 0) {
        if ((rc = al__cfg_bool(j, "use_sliding_window", 0, &use, name, err))) return rc;
        if (!use) return 0;
        if ((rc = al__cfg_int(j, "max_window_layers", 0, 1 << 20, 28, &c->max_window_layers, name,
                              err)))
            return rc;
    }
    /* mistral, gemma2: null = none; absent = transformers' default, 4096 */
    c->alt_window = c->gemma; /* Gemma 2: layers 0, 2, ... slide, the others are global */
    if ((rc = al__cfg_int(j, "sliding_window", 1, 1 << 24, 4096, &c->window, name, err))) return rc;
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "sliding_window"))) c->window = 0;
    if (c->window > c->n_ctx)
        return al__err(err, AL_E_FORMAT,
                       "%s: sliding_window %d is larger than the context "
                       "(max_position_embeddings %d)",
                       name, c->window, c->n_ctx);
    return 0;
}

/* "layer_types" (current transformers: "sliding_attention" / "full_attention" per layer), when
 * present, must be what the other fields derive (al__llama_layer_window). */
static int check_layer_types(const cJSON *j, const al__llama_config *c, const char *name,
                             al_error *err) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (!lt || cJSON_IsNull(lt)) return 0;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layer)
        return al__err(err, AL_E_FORMAT,
                       "%s: layer_types must be a list of num_hidden_layers (%d) strings", name,
                       c->n_layer);
    for (int l = 0; l < c->n_layer; l++) {
        const cJSON *e = cJSON_GetArrayItem(lt, l);
        const char *s = cJSON_IsString(e) ? e->valuestring : "";
        int sliding = !strcmp(s, "sliding_attention");
        if (!sliding && strcmp(s, "full_attention"))
            return al__err(err, AL_E_UNSUPPORTED,
                           "%s: layer_types[%d] '%.40s' is not supported (sliding_attention, "
                           "full_attention are)",
                           name, l, s);
        if (sliding != (al__llama_layer_window(c, l) > 0))
            return al__err(err, AL_E_FORMAT,
                           "%s: layer_types[%d] is '%s', but sliding_window%s make layer %d %s",
                           name, l, s,
                           c->max_window_layers >= 0 ? ", use_sliding_window and max_window_layers"
                           : c->alt_window           ? " and Gemma 2's alternation"
                                                     : "",
                           l, sliding ? "global" : "sliding");
    }
    return 0;
}

int al__llama_config_parse(const char *text, size_t len, const char *name, al__llama_config *c,
                           al_error *err) {
    memset(c, 0, sizeof *c);
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", name);
    int rc = cJSON_IsObject(j) ? 0 : al__err(err, AL_E_FORMAT, "%s: not a JSON object", name);
    int is_llama = 0;
    if (!rc) rc = parse_arch(j, c, name, err);
    if (!rc) rc = parse_shapes(j, c, name, err);
    if (!rc) is_llama = strcmp(c->arch, "llama") == 0;
    if (!rc) rc = al__cfg_bool(j, "tie_word_embeddings", c->gemma, &c->tied, name, err);
    if (!rc && c->gemma) rc = parse_gemma2(j, c, name, err);
    if (!rc && is_llama) rc = al__cfg_bool(j, "attention_bias", 0, &c->qkv_bias, name, err);
    if (!rc && is_llama) rc = al__cfg_bool(j, "mlp_bias", 0, &c->mlp_bias, name, err);
    if (!rc) {
        if (!c->gemma) c->o_bias = is_llama && c->qkv_bias;
        if (strcmp(c->arch, "qwen2") == 0) c->qkv_bias = 1;
        rc = al__llama_check_config(c, name, err);
    }
    if (!rc) rc = parse_window(j, c, name, err);
    if (!rc) rc = check_layer_types(j, c, name, err);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!rc && c->gemma && rs && !cJSON_IsNull(rs))
        rc =
            al__err(err, AL_E_UNSUPPORTED,
                    "%s: rope_scaling is not supported for gemma2 (transformers ignores it)", name);
    if (!rc) rc = al__cfg_rope(j, "rope_theta", c->d_head, &c->n_ctx, &c->rope, name, err);
    if (!rc) rc = al__cfg_token(j, "bos_token_id", c->vocab, &c->bos_id, name, err);
    if (!rc) rc = al__cfg_token(j, "eos_token_id", c->vocab, &c->eos_id, name, err);
    cJSON_Delete(j);
    return rc;
}

/* ---- weights ----------------------------------------------------------------------------------
 */

typedef struct hspec {
    char name[128];
    int ndim;
    int64_t shape[2]; /* HF order: [out, in] */
    float **dst;
} hspec;

/* The tensors of the config, in file-name form, with their shapes (*n of them). */
static int list_specs(llama *L, hspec **out, int *n_out, al_error *err) {
    const al__llama_config *c = &L->cfg;
    int64_t C = c->d_model, Hd = (int64_t)c->n_head * c->d_head,
            Gd = (int64_t)c->n_kv_head * c->d_head, F = c->d_ff, V = c->vocab;
    hspec *s = al__calloc((size_t)(3 + 19 * c->n_layer), sizeof *s, "llama weight list", err);
    if (!s) return AL_E_NOMEM;
    int n = 0;
    s[n++] = (hspec){"model.embed_tokens.weight", 2, {V, C}, &L->tok_embd};
    s[n++] = (hspec){"model.norm.weight", 1, {C, 1}, &L->out_norm};
    if (!c->tied) s[n++] = (hspec){"lm_head.weight", 2, {V, C}, &L->output};
    for (int l = 0; l < c->n_layer; l++) {
        llama_layer *y = &L->layers[l];
        struct {
            const char *suffix;
            int on, nd;
            int64_t s0, s1;
            float **dst;
        } t[19] = {
            {"input_layernorm.weight", 1, 1, C, 1, &y->attn_norm},
            {"post_attention_layernorm.weight", c->gemma, 1, C, 1, &y->post_attn_norm},
            {"pre_feedforward_layernorm.weight", c->gemma, 1, C, 1, &y->ffn_norm},
            {"post_feedforward_layernorm.weight", c->gemma, 1, C, 1, &y->post_ffn_norm},
            {"self_attn.q_proj.weight", 1, 2, Hd, C, &y->wq},
            {"self_attn.q_proj.bias", c->qkv_bias, 1, Hd, 1, &y->bq},
            {"self_attn.k_proj.weight", 1, 2, Gd, C, &y->wk},
            {"self_attn.k_proj.bias", c->qkv_bias, 1, Gd, 1, &y->bk},
            {"self_attn.v_proj.weight", 1, 2, Gd, C, &y->wv},
            {"self_attn.v_proj.bias", c->qkv_bias, 1, Gd, 1, &y->bv},
            {"self_attn.o_proj.weight", 1, 2, C, Hd, &y->wo},
            {"self_attn.o_proj.bias", c->o_bias, 1, C, 1, &y->bo},
            {"post_attention_layernorm.weight", !c->gemma, 1, C, 1, &y->ffn_norm},
            {"mlp.gate_proj.weight", 1, 2, F, C, &y->w_gate},
            {"mlp.gate_proj.bias", c->mlp_bias, 1, F, 1, &y->b_gate},
            {"mlp.up_proj.weight", 1, 2, F, C, &y->w_up},
            {"mlp.up_proj.bias", c->mlp_bias, 1, F, 1, &y->b_up},
            {"mlp.down_proj.weight", 1, 2, C, F, &y->w_down},
            {"mlp.down_proj.bias", c->mlp_bias, 1, C, 1, &y->b_down},
        };
        for (int i = 0; i < 19; i++) {
            if (!t[i].on) continue;
            hspec *w = &s[n++];
            snprintf(w->name, sizeof w->name, "model.layers.%d.%s", l, t[i].suffix);
            w->ndim = t[i].nd, w->shape[0] = t[i].s0, w->shape[1] = t[i].s1, w->dst = t[i].dst;
        }
        y->window = al__llama_layer_window(c, l);
    }
    *out = s, *n_out = n;
    return 0;
}

static int is_ignored(const char *name, int tied) {
    size_t n = strlen(name);
    const char *inv = "rotary_emb.inv_freq";
    if (n >= strlen(inv) && strcmp(name + n - strlen(inv), inv) == 0) return 1;
    return tied && strcmp(name, "lm_head.weight") == 0;
}

/* Every tensor of the file is expected, every expected one present and of its shape. */
static int check_names(const al__safetensors *st, const hspec *s, int n, int tied, al_error *err) {
    for (int i = 0; i < al__st_count(st); i++) {
        const al__st_tensor *t = al__st_at(st, i);
        int found = is_ignored(t->name, tied);
        for (int k = 0; k < n && !found; k++) found = strcmp(s[k].name, t->name) == 0;
        if (!found)
            return al__err(err, AL_E_FORMAT,
                           "%s: unexpected tensor '%s' (does config.json match the weights?)",
                           t->file, t->name);
    }
    for (int k = 0; k < n; k++) {
        if (!al__st_find(st, s[k].name))
            return al__err(err, AL_E_FORMAT, "%s: tensor '%s' is missing", al__st_path(st),
                           s[k].name);
        /* every shape before the arena: a config claiming more than the file holds gets the
         * tensor mismatch, not "out of memory allocating N TB" (issue 12) */
        int rc = al__st_check_f32(st, s[k].name, s[k].ndim, s[k].shape, err);
        if (rc) return rc;
    }
    return 0;
}

static int load_specs(al_model *m, const al__safetensors *st, llama *L, const hspec *s, int n,
                      al_error *err) {
    size_t total = 0, each;
    for (int i = 0; i < n; i++)
        if (!al__mul_ok((size_t)s[i].shape[0], (size_t)s[i].shape[1], &each) ||
            !al__add_ok(total, each, &total))
            return al__err(err, AL_E_NOMEM, "%s: the weights' size overflows", al__st_path(st));
    if (!al__mul_ok(total, sizeof(float), &each))
        return al__err(err, AL_E_NOMEM, "%s: too large", al__st_path(st));
    if (!(L->arena = al__malloc_aligned(each, "llama weights (float32)", err))) return AL_E_NOMEM;
    float *p = L->arena;
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)(s[i].shape[0] * s[i].shape[1]);
        int rc = al__st_load_f32(st, s[i].name, s[i].ndim, s[i].shape, p, err);
        if (rc) return rc;
        size_t bad = 0, first = 0;
        for (size_t e = 0; e < k; e++)
            if (!isfinite(p[e]) && !bad++) first = e;
        if (bad)
            al__model_warn_nonfinite(m, al__st_find(st, s[i].name)->file, s[i].name, bad, first);
        *s[i].dst = p;
        p += k;
    }
    if (L->cfg.tied) L->output = L->tok_embd;
    for (int l = 0; L->cfg.gemma && l <= L->cfg.n_layer; l++) { /* (1 + w) RMSNorm */
        float *norms[4] = {L->out_norm, NULL, NULL, NULL};
        if (l < L->cfg.n_layer) {
            llama_layer *y = &L->layers[l];
            norms[0] = y->attn_norm, norms[1] = y->post_attn_norm, norms[2] = y->ffn_norm,
            norms[3] = y->post_ffn_norm;
        }
        for (int k = 0; k < 4; k++)
            for (int i = 0; norms[k] && i < L->cfg.d_model; i++) norms[k][i] += 1.0f;
    }
    return 0;
}

static int read_config(const char *dir, llama *L, al_error *err) {
    char cfg[4200], *text;
    size_t len;
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    int rc = al__read_file(cfg, 1 << 20, &text, &len, err);
    if (rc) return rc;
    rc = al__llama_config_parse(text, len, cfg, &L->cfg, err);
    free(text);
    return rc;
}

int al__llama_open_hf(al_model *m, const char *path, al_error *err) {
    m->impl = NULL;
    llama *L = al__calloc(1, sizeof *L, "llama model", err);
    if (!L) return AL_E_NOMEM;
    snprintf(L->dir, sizeof L->dir, "%s", path);
    if (!al__is_dir(path)) {
        char *slash = strrchr(L->dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(L->dir, sizeof L->dir, ".");
    }
    al__safetensors *st = NULL;
    hspec *s = NULL;
    int n = 0, rc = read_config(L->dir, L, err);
    if (!rc && !(L->layers = al__calloc((size_t)L->cfg.n_layer, sizeof *L->layers, "layers", err)))
        rc = AL_E_NOMEM;
    if (!rc) rc = al__st_open(path, &st, err);
    if (!rc) rc = list_specs(L, &s, &n, err);
    if (!rc) rc = check_names(st, s, n, L->cfg.tied, err);
    if (!rc) rc = load_specs(m, st, L, s, n, err);
    if (!rc) {
        int64_t n_params = 0;
        for (int i = 0; i < al__st_count(st); i++)
            n_params += (int64_t)al__st_numel(al__st_at(st, i));
        const al__st_tensor *q = al__st_find(st, "model.layers.0.self_attn.q_proj.weight");
        const char *slash = strrchr(L->dir, '/');
        al__llama_finish(m, L, slash ? slash + 1 : L->dir, path, q ? q->dtype_name : "f32",
                         n_params);
    }
    free(s);
    al__st_close(st);
    if (rc) al__llama_free(L);
    return rc;
}
