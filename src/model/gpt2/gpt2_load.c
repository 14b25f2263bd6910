/* gpt2_load.c: GPT-2 from an HF safetensors checkpoint (+ config.json) or an llm.c .bin,
 * into the al__gpt2 weight struct of gpt2.h. f32 weights point into the read-only mapping;
 * anything else (f16/bf16/f64 safetensors, llm.c bf16, misaligned f32) is converted into one
 * owned f32 arena. Every tensor is checked for presence and exact shape; all weights are
 * scanned once for NaN/Inf (a warning through the log callback naming the tensor).
 *
 * Decisions: unknown tensors are an error (they mean another architecture or a config that
 * does not match the file), except the HF buffers h.N.attn.bias / h.N.attn.masked_bias;
 * lm_head.weight, when present, must equal wte (GPT-2 ties them; an untied head is an error). */
#include "checkpoint.h"
#include "textsafe.h"
#include "gpt2.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The slot of the weight struct that parameter kind/layer goes to. */
static const float **slot(al__gpt2 *g, int kind, int l) {
    al__gpt2_layer *y = l >= 0 ? &g->layers[l] : NULL;
    switch (kind) {
    case AL_GK_WTE:
        return &g->wte;
    case AL_GK_WPE:
        return &g->wpe;
    case AL_GK_LN1W:
        return &y->ln1_w;
    case AL_GK_LN1B:
        return &y->ln1_b;
    case AL_GK_QKVW:
        return &y->attn_w;
    case AL_GK_QKVB:
        return &y->attn_b;
    case AL_GK_ATTPROJW:
        return &y->proj_w;
    case AL_GK_ATTPROJB:
        return &y->proj_b;
    case AL_GK_LN2W:
        return &y->ln2_w;
    case AL_GK_LN2B:
        return &y->ln2_b;
    case AL_GK_FCW:
        return &y->fc_w;
    case AL_GK_FCB:
        return &y->fc_b;
    case AL_GK_FCPROJW:
        return &y->fcproj_w;
    case AL_GK_FCPROJB:
        return &y->fcproj_b;
    case AL_GK_LNFW:
        return &g->lnf_w;
    default:
        return &g->lnf_b;
    }
}

static al__gpt2 *new_gpt2(const al__gpt2_cfg *c, al_error *err) {
    al__gpt2 *g = al__calloc(1, sizeof *g, "GPT-2 weights", err);
    if (!g) return NULL;
    g->layers = al__calloc((size_t)c->n_layer, sizeof *g->layers, "GPT-2 layers", err);
    if (!g->layers) {
        free(g);
        return NULL;
    }
    g->n_layer = c->n_layer, g->n_head = c->n_head, g->d_model = c->n_embd, g->n_ctx = c->n_ctx;
    g->vocab_size = c->vocab_size, g->padded_vocab = c->vocab_size;
    return g;
}

static void fill_info(al_model *m, const al__gpt2 *g, const char *path, const char *name,
                      const char *dtype) {
    al_model_info *in = &m->info;
    snprintf(in->family, sizeof in->family, "gpt2");
    snprintf(in->name, sizeof in->name, "%s", name);
    snprintf(in->path, sizeof in->path, "%s", path);
    snprintf(in->dtype, sizeof in->dtype, "%s", dtype);
    in->n_layer = g->n_layer, in->n_head = g->n_head, in->n_kv_head = g->n_head,
    in->d_model = g->d_model;
    in->d_head = g->d_model / g->n_head, in->d_ff = 4 * g->d_model, in->n_ctx = g->n_ctx;
    in->vocab_size = g->vocab_size, in->causal = 1;
    al__gpt2_cfg c = {g->n_layer, g->n_head, g->d_model, g->n_ctx, g->vocab_size};
    in->n_params = al__gpt2_n_params(&c);
    m->vt = &al__gpt2_vtable;
    m->impl = (void *)g;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

/* ---- HF safetensors ------------------------------------------------------------------------- */

static int cfg_int(const cJSON *j, const char *key, const char *alt, int *out, const char *path,
                   al_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v && alt) v = cJSON_GetObjectItemCaseSensitive(j, alt);
    if (!v) return al__err(err, AL_E_FORMAT, "%s: no \"%s\"", path, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 1e9)
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" is not a valid integer", path, key);
    *out = (int)v->valuedouble;
    return 0;
}

/* attnlim train records its attention normalizer in config.json: it becomes the model's own
 * attention (*own, *has_own), whatever it is (sparsemax, entmax15, entmax with its alpha, ssmax,
 * sa-softmax and sa-softmax-norm, any temperature), so that every command runs the model as it
 * was trained; softmax at temperature 1 is GPT-2's own (*has_own = 0). ssmax: *s_per_head
 * [n_layer * n_head] (malloc'ed) when the heads' s differ (a learnt s), else NULL and own's one
 * s. A malformed entry is an error naming config.json and the fault. */
static int check_normalizer(const cJSON *v, const char *cfg, const al__gpt2_cfg *c, al_norm *own,
                            int *has_own, float **s_per_head, al_error *err) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "name");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "temperature");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(v, "alpha");
    const cJSON *heads = cJSON_GetObjectItemCaseSensitive(v, "s_per_head");
    *has_own = 0, *s_per_head = NULL;
    if (!cJSON_IsObject(v) || !cJSON_IsString(n) || (t && !cJSON_IsNumber(t)) ||
        (a && !cJSON_IsNumber(a)))
        return al__err(err, AL_E_FORMAT,
                       "%s: attnlim_normalizer is not an object with a \"name\" string and a "
                       "numeric \"temperature\" (and \"alpha\")",
                       cfg);
    double T = t ? t->valuedouble : 1.0;
    if (!strcmp(n->valuestring, "softmax") && T == 1.0) return 0;
    al_error e = {0};
    if (al_norm_parse(n->valuestring, own, &e))
        return al__err(err, AL_E_UNSUPPORTED, "%s: attnlim_normalizer: unknown normalizer %s", cfg,
                       n->valuestring);
    own->temperature = T;
    if (a) own->alpha = a->valuedouble;
    const cJSON *s1 = cJSON_GetObjectItemCaseSensitive(v, "s");
    if (own->kind == AL_NORM_SSMAX && cJSON_IsNumber(s1)) own->ssmax_s = s1->valuedouble;
    if (own->kind == AL_NORM_SSMAX) {
        size_t nlh = (size_t)c->n_layer * c->n_head, k = 0;
        float *s = heads ? malloc(nlh * sizeof *s) : NULL;
        const cJSON *row, *x;
        int bad = heads && (!s || !cJSON_IsArray(heads) || cJSON_GetArraySize(heads) != c->n_layer);
        const cJSON *rows = bad ? NULL : heads;
        cJSON_ArrayForEach(row, rows) {
            bad |= !cJSON_IsArray(row) || cJSON_GetArraySize(row) != c->n_head;
            const cJSON *cols = bad ? NULL : row;
            cJSON_ArrayForEach(x, cols) {
                bad |= !cJSON_IsNumber(x) || !(x->valuedouble > 0 && x->valuedouble < 1e6);
                if (!bad) s[k++] = (float)x->valuedouble;
            }
        }
        if (bad) {
            free(s);
            return al__err(err, AL_E_FORMAT,
                           "%s: attnlim_normalizer.s_per_head is not %d rows of %d positive "
                           "numbers (n_layer x n_head)",
                           cfg, c->n_layer, c->n_head);
        }
        int same = 1;
        for (size_t i = 1; s && i < nlh; i++) same &= s[i] == s[0];
        if (s) own->ssmax_s = s[0];
        if (same) free(s), s = NULL;
        *s_per_head = s;
    }
    if (al_norm_check(own, &e)) {
        free(*s_per_head), *s_per_head = NULL;
        return al__err(err, AL_E_UNSUPPORTED, "%s: attnlim_normalizer %s (temperature %g): %s", cfg,
                       n->valuestring, T, e.msg);
    }
    *has_own = 1;
    return 0;
}

/* Reads config.json (in the directory, or beside the file) into c; name gets a model name. */
static int read_config(const char *path, al__gpt2_cfg *c, char *name, size_t name_cap, al_norm *own,
                       int *has_own, float **s_per_head, int *bytes_tok, al_error *err) {
    char cfg[4096 + 16];
    struct stat s;
    if (stat(path, &s) == 0 && S_ISDIR(s.st_mode))
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
    else {
        snprintf(cfg, sizeof cfg, "%s", path);
        char *slash = strrchr(cfg, '/');
        snprintf(slash ? slash + 1 : cfg, sizeof cfg - (size_t)(slash ? slash + 1 - cfg : 0),
                 "config.json");
    }
    char *text;
    size_t len;
    int rc = al__read_file(cfg, 1 << 20, &text, &len, err);
    if (rc)
        return al__err_prefix(err, AL_E_NOTFOUND, "%s: GPT-2 safetensors need a config.json", path);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: not a valid JSON object", cfg);
    }
    rc = al__json_check_unique(j, cfg, err);
    if (!rc) rc = cfg_int(j, "n_layer", "num_hidden_layers", &c->n_layer, cfg, err);
    if (!rc) rc = cfg_int(j, "n_head", "num_attention_heads", &c->n_head, cfg, err);
    if (!rc) rc = cfg_int(j, "n_embd", "hidden_size", &c->n_embd, cfg, err);
    if (!rc) rc = cfg_int(j, "n_positions", "n_ctx", &c->n_ctx, cfg, err);
    if (!rc) rc = cfg_int(j, "vocab_size", NULL, &c->vocab_size, cfg, err);
    if (!rc) rc = al__gpt2_cfg_check(c, cfg, err);
    const cJSON *v;
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon")) &&
        (!cJSON_IsNumber(v) || fabs(v->valuedouble - 1e-5) > 1e-12))
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: layer_norm_epsilon must be 1e-5 (GPT-2)", cfg);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "activation_function")) &&
        (!cJSON_IsString(v) ||
         (strcmp(v->valuestring, "gelu_new") && strcmp(v->valuestring, "gelu_pytorch_tanh"))))
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: activation_function must be gelu_new (tanh GELU)",
                     cfg);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "n_inner")) && !cJSON_IsNull(v) &&
        (!cJSON_IsNumber(v) || v->valuedouble != 4.0 * c->n_embd))
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: n_inner must be null or 4 n_embd", cfg);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_weights")) && cJSON_IsFalse(v))
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: scale_attn_weights = false is not supported", cfg);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_by_inverse_layer_idx")) &&
        cJSON_IsTrue(v))
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: scale_attn_by_inverse_layer_idx is not supported",
                     cfg);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "model_type")) &&
        (!cJSON_IsString(v) || strcmp(v->valuestring, "gpt2")))
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: model_type is not gpt2", cfg);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "attnlim_normalizer")))
        rc = check_normalizer(v, cfg, c, own, has_own, s_per_head, err);
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(j, "attnlim_tokenizer")) &&
        cJSON_IsString(v) && !strcmp(v->valuestring, "bytes"))
        *bytes_tok = 1;
    if (!rc) {
        v = cJSON_GetObjectItemCaseSensitive(j, "_name_or_path");
        if (cJSON_IsString(v) && v->valuestring[0])
            snprintf(name, name_cap, "%s", v->valuestring);
        else {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", cfg);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            snprintf(name, name_cap, "%s", slash ? base_name(dir) : "gpt2");
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* Strips the "transformer." prefix. */
static const char *hf_short(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

static bool is_float(al__st_dtype d) {
    return d == AL_ST_F32 || d == AL_ST_F16 || d == AL_ST_BF16 || d == AL_ST_F64;
}

/* Checks every tensor of the file: known parameter, buffer, or an error. */
static int check_names(const al__safetensors *st, const al__gpt2_cfg *c, const char *path,
                       al_error *err) {
    int unknown = 0;
    const char *first = NULL;
    for (int i = 0; i < al__st_count(st); i++) {
        const char *full = al__st_at(st, i)->name, *nm = hf_short(full);
        char prefixed[300];
        snprintf(prefixed, sizeof prefixed, "transformer.%s", full);
        if (nm == full && al__st_find(st, prefixed))
            return al__err(err, AL_E_FORMAT,
                           "%s: tensor %s is there both with and without the transformer. prefix",
                           path, full);
        if (al__gpt2_spec_find(c, nm) >= 0 || al__gpt2_is_buffer(nm)) continue;
        if (!unknown) first = al__st_at(st, i)->name;
        unknown++;
    }
    if (unknown)
        return al__err(err, AL_E_FORMAT,
                       "%s: %d tensor(s) not part of a GPT-2 with n_layer=%d (first: %s); wrong "
                       "config.json or "
                       "not a GPT-2 checkpoint",
                       path, unknown, c->n_layer, first);
    return 0;
}

/* lm_head.weight, if present, must be wte (tied). */
static int check_lm_head(const al__safetensors *st, const al__st_tensor *wte, const char *path,
                         al_error *err) {
    const al__st_tensor *h = al__st_find(st, "lm_head.weight");
    if (!h) return 0;
    if (h->ndim != 2 || h->shape[0] != wte->shape[0] || h->shape[1] != wte->shape[1] ||
        h->dtype != wte->dtype || memcmp(h->data, wte->data, wte->nbytes) != 0)
        return al__err(
            err, AL_E_UNSUPPORTED,
            "%s: lm_head.weight differs from wte.weight; GPT-2 ties them and an untied head is not "
            "supported",
            h->file);
    (void)path;
    return 0;
}

/* A byte-level checkpoint's tokenizer: vocab.json + merges.txt beside config.json. */
static int byte_tokenizer_dir(al_model *m, const char *path, al_error *err) {
    al__gpt2 *g = m->impl;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    struct stat s;
    if (!(stat(path, &s) == 0 && S_ISDIR(s.st_mode))) {
        char *slash = strrchr(dir, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    }
    char f[4096 + 32];
    snprintf(f, sizeof f, "%s/vocab.json", dir);
    if (stat(f, &s) != 0)
        return al__err(err, AL_E_NOTFOUND,
                       "%s: config.json says attnlim_tokenizer \"bytes\" but %s is missing (an "
                       "attnlim train checkpoint writes it)",
                       path, f);
    if (!(g->tok_dir = strdup(dir))) return al__err(err, AL_E_NOMEM, "out of memory");
    return 0;
}

int al__gpt2_open_safetensors(al_model *m, const char *path, al_error *err) {
    al__gpt2_cfg c;
    char name[128];
    al_norm own;
    int has_own = 0;
    float *s_per_head = NULL;
    int bytes_tok = 0;
    int rc = read_config(path, &c, name, sizeof name, &own, &has_own, &s_per_head, &bytes_tok, err);
    al__safetensors *st = NULL;
    if (!rc) rc = al__st_open(path, &st, err);
    if (!rc) rc = al__gpt2_from_safetensors(m, st, &c, path, name, err);
    if (!rc && bytes_tok) rc = byte_tokenizer_dir(m, path, err);
    if (rc || !has_own) {
        free(s_per_head);
        return rc;
    }
    al__attn_set_own(m, &own, s_per_head); /* every layer and head */
    return 0;
}

int al__gpt2_from_safetensors(al_model *m, al__safetensors *st, const al__gpt2_cfg *cfg,
                              const char *path, const char *name, al_error *err) {
    int rc = al__gpt2_cfg_check(cfg, path, err);
    if (rc) {
        al__st_close(st);
        return rc;
    }
    al__gpt2_cfg c = *cfg;
    al__gpt2 *g = new_gpt2(&c, err);
    if (!g) {
        al__st_close(st);
        return AL_E_NOMEM;
    }
    g->st = st;
    const char *prefix = al__st_find(st, "transformer.wte.weight") ? "transformer." : "";
    int n = al__gpt2_n_tensors(&c);
    const al__st_tensor **ts = al__calloc((size_t)n, sizeof *ts, "tensor list", err);
    if (!ts) goto fail;
    /* pass 1: presence, dtype, shape; size of the conversion arena */
    size_t arena_floats = 0;
    const char *dtype = NULL;
    for (int i = 0; i < n; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&c, i, &s);
        char full[96];
        snprintf(full, sizeof full, "%s%s", prefix, s.name);
        const al__st_tensor *t = ts[i] = al__st_find(st, full);
        if (!t) { /* the other naming style (a file may mix them) */
            char other[96];
            snprintf(other, sizeof other, "%s%s", *prefix ? "" : "transformer.", s.name);
            t = ts[i] = al__st_find(st, other);
        }
        if (!t) {
            rc = al__err(err, AL_E_FORMAT,
                         "%s: tensor %s is missing (config: n_layer=%d, n_embd=%d)", path, full,
                         c.n_layer, c.n_embd);
            goto fail;
        }
        bool same = t->ndim == s.ndim;
        for (int d = 0; same && d < s.ndim; d++) same = t->shape[d] == s.shape[d];
        if (!same) {
            char want[64], have[160];
            al__shape_str(s.ndim, s.shape, want, sizeof want);
            al__shape_str(t->ndim, t->shape, have, sizeof have);
            rc = al__err(err, AL_E_FORMAT, "%s: expected %s, file has %s (%s)", t->name, want, have,
                         t->file);
            goto fail;
        }
        if (!is_float(t->dtype)) {
            rc = al__err(err, AL_E_FORMAT, "%s: dtype %s is not a float type (%s)", t->name,
                         t->dtype_name, t->file);
            goto fail;
        }
        if (t->dtype != AL_ST_F32 || ((uintptr_t)t->data & 3u)) arena_floats += al__st_numel(t);
        if (!dtype)
            dtype = t->dtype_name;
        else if (strcmp(dtype, t->dtype_name))
            dtype = "mixed";
    }
    if ((rc = check_names(st, &c, path, err))) goto fail;
    if ((rc = check_lm_head(st, ts[0], path, err))) goto fail;
    if (arena_floats) {
        size_t bytes;
        if (!al__mul_ok(arena_floats, sizeof(float), &bytes)) {
            rc = al__err(err, AL_E_NOMEM, "%s: conversion arena overflows", path);
            goto fail;
        }
        if (!(g->arena = al__malloc_aligned(bytes, "converted weights", err))) {
            rc = AL_E_NOMEM;
            goto fail;
        }
    }
    /* pass 2: point into the mapping or convert into the arena; scan for NaN/Inf */
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&c, i, &s);
        const al__st_tensor *t = ts[i];
        size_t numel = al__st_numel(t);
        const float *w;
        if (t->dtype == AL_ST_F32 && !((uintptr_t)t->data & 3u))
            w = (const float *)(const void *)t->data;
        else {
            if ((rc = al__st_to_f32(t, g->arena + used, err))) goto fail;
            w = g->arena + used;
            used += numel;
        }
        *slot(g, s.kind, s.layer) = w;
        al__model_scan_nonfinite(m, t->file, t->name, w, numel);
    }
    g->out_in = 0;
    free(ts);
    char lower[16];
    snprintf(lower, sizeof lower, "%s", dtype ? dtype : "f32");
    for (char *p = lower; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    fill_info(m, g, al__st_path(st), name, lower);
    return 0;
fail:
    free(ts);
    al__gpt2_release(g);
    return rc ? rc : AL_E_NOMEM;
}

/* ---- llm.c ------------------------------------------------------------------------------------
 */

int al__gpt2_open_llmc(al_model *m, const char *path, al_error *err) {
    al__map map;
    al__llmc_hdr h;
    int rc = al__llmc_open(path, &map, &h, err);
    if (rc) return rc;
    al__gpt2 *g = new_gpt2(&h.cfg, err);
    if (!g) {
        al__unmap(&map);
        return AL_E_NOMEM;
    }
    g->map = map;
    g->padded_vocab = h.Vp;
    g->out_in = 1;
    if (h.version == 5) {
        size_t bytes;
        if (!al__mul_ok(h.n_floats, sizeof(float), &bytes) ||
            !(g->arena = al__malloc_aligned(bytes, "bf16 -> f32 weights", err))) {
            al__gpt2_release(g);
            return al__err(err, AL_E_NOMEM,
                           "%s: cannot allocate %zu floats for the converted weights", path,
                           h.n_floats);
        }
        const unsigned char *p = map.data + AL_LLMC_HEADER_BYTES;
        for (size_t i = 0; i < h.n_floats; i++) g->arena[i] = al__bf16_to_f32(al__le16(p + 2 * i));
    }
    int n = al__gpt2_n_tensors(&h.cfg);
    size_t off = 0; /* in values from the parameter start */
    for (int i = 0; i < n; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&h.cfg, i, &s);
        size_t numel = (size_t)s.shape[0] * (s.ndim == 2 ? (size_t)s.shape[1] : 1);
        if (i == 0) numel = (size_t)h.Vp * (size_t)h.C;
        const float *w =
            h.version == 5
                ? g->arena + off
                : (const float *)(const void *)(map.data + AL_LLMC_HEADER_BYTES + 4 * off);
        *slot(g, s.kind, s.layer) = w;
        al__model_scan_nonfinite(m, path, s.name, w, i == 0 ? (size_t)h.V * (size_t)h.C : numel);
        off += numel;
    }
    char name[128];
    snprintf(name, sizeof name, "%s", base_name(path));
    char *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = 0;
    fill_info(m, g, path, name, h.version == 3 ? "f32" : "bf16");
    return 0;
}

/* ---- public: one parameter in the HF layout ---------------------------------------------------
 */

int al_gpt2_tensor(const al_model *m, const char *name, al_array *out, al_error *err) {
    memset(out, 0, sizeof *out);
    if (!m || m->vt != &al__gpt2_vtable || !m->impl)
        return al__err(err, AL_E_INVALID, "al_gpt2_tensor: not a GPT-2 model");
    const al__gpt2 *g = m->impl;
    al__gpt2_cfg c = {g->n_layer, g->n_head, g->d_model, g->n_ctx, g->vocab_size};
    int i = al__gpt2_spec_find(&c, hf_short(name));
    if (i < 0)
        return al__err(err, AL_E_NOTFOUND, "%s: no GPT-2 parameter named %s", m->info.path, name);
    al__gpt2_spec s;
    al__gpt2_spec_at(&c, i, &s);
    const float *w = *slot((al__gpt2 *)g, s.kind, s.layer);
    int rc = al_array_alloc(out, AL_F32, s.ndim, s.shape, err);
    if (rc) return rc;
    float *dst = out->data; /* [shape[0], shape[1]] */
    size_t rows = (size_t)s.shape[0], cols = s.ndim == 2 ? (size_t)s.shape[1] : 1;
    if (g->out_in && s.is_matrix) { /* stored [out = cols, in = rows] */
        for (size_t r = 0; r < rows; r++)
            for (size_t k = 0; k < cols; k++) dst[r * cols + k] = w[k * rows + r];
    } else {
        memcpy(dst, w, rows * cols * sizeof *dst);
    }
    return 0;
}
