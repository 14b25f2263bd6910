/* hf_config.c: typed, bounded readers of HF config.json fields, shared by the decoder
 * families' config parsers (every value checked; errors name the file and the key). */
#include "hf_config.h"

#include "model.h"

#include <math.h>
#include <string.h>

/* An integer field in [lo, hi]; absent: *v = def, or an error when def < lo (required). */
int al__cfg_int(const cJSON *j, const char *key, int lo, int hi, int def, int *v, const char *name,
                al_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) {
        if (def < lo) return al__err(err, AL_E_FORMAT, "%s: \"%s\" is missing", name, key);
        *v = def;
        return 0;
    }
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < lo ||
        x->valuedouble > hi)
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" must be an integer in [%d, %d]", name, key, lo,
                       hi);
    *v = (int)x->valuedouble;
    return 0;
}

/* A number field in (lo, hi]; absent: def (def != def, i.e. NaN: required). */
int al__cfg_num(const cJSON *j, const char *key, double lo, double hi, double def, double *v,
                const char *name, al_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) {
        if (def != def) return al__err(err, AL_E_FORMAT, "%s: \"%s\" is missing", name, key);
        *v = def;
        return 0;
    }
    if (!cJSON_IsNumber(x) || !(x->valuedouble > lo && x->valuedouble <= hi))
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" must be a number in (%g, %g]", name, key, lo,
                       hi);
    *v = x->valuedouble;
    return 0;
}

int al__cfg_bool(const cJSON *j, const char *key, int def, int *v, const char *name,
                 al_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) {
        *v = def;
        return 0;
    }
    if (!cJSON_IsBool(x))
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" must be true or false", name, key);
    *v = cJSON_IsTrue(x);
    return 0;
}

/* A token id: an integer, the first of a list, or null (-1). */
int al__cfg_token(const cJSON *j, const char *key, int vocab, int *v, const char *name,
                  al_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    *v = -1;
    if (cJSON_IsArray(x)) x = cJSON_GetArrayItem(x, 0);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
        x->valuedouble >= vocab)
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" must be a token id in [0, %d)", name, key,
                       vocab);
    *v = (int)x->valuedouble;
    return 0;
}

int al__cfg_rope(const cJSON *j, const char *theta_key, int dim, int *n_ctx, al__rope *r,
                 const char *name, al_error *err) {
    memset(r, 0, sizeof *r);
    int rc = al__cfg_num(j, theta_key, 1, 1e12, 10000.0, &r->base, name, err);
    if (rc) return rc;
    r->type = AL__ROPE_DEFAULT, r->factor = 1, r->dim = dim, r->max_pos = *n_ctx;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!s || cJSON_IsNull(s)) return 0;
    if (!cJSON_IsObject(s))
        return al__err(err, AL_E_FORMAT, "%s: \"rope_scaling\" must be null or an object", name);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!cJSON_IsString(t))
        return al__err(err, AL_E_FORMAT, "%s: \"rope_scaling\" has no \"rope_type\" string", name);
    static const char *names[] = {"default", "linear", "dynamic", "llama3", "yarn"};
    int k = -1;
    for (int i = 0; i < 5; i++)
        if (strcmp(t->valuestring, names[i]) == 0) k = i;
    if (k < 0)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: rope_scaling type '%.64s' is not supported (default, linear, "
                       "dynamic, llama3, yarn are)",
                       name, t->valuestring);
    r->type = (al__rope_type)k;
    if (k == AL__ROPE_DEFAULT) return 0;
    if ((rc = al__cfg_num(s, "factor", 0, 1e6, NAN, &r->factor, name, err))) return rc;
    if (k == AL__ROPE_LLAMA3) {
        if ((rc = al__cfg_num(s, "low_freq_factor", 0, 1e6, NAN, &r->low_freq, name, err)) ||
            (rc = al__cfg_num(s, "high_freq_factor", 0, 1e6, NAN, &r->high_freq, name, err)) ||
            (rc = al__cfg_int(s, "original_max_position_embeddings", 1, 1 << 24, 0,
                              &r->orig_max_pos, name, err)))
            return rc;
        if (!(r->high_freq > r->low_freq))
            return al__err(err, AL_E_FORMAT,
                           "%s: rope_scaling high_freq_factor %g must exceed low_freq_factor %g",
                           name, r->high_freq, r->low_freq);
    }
    if (k == AL__ROPE_YARN &&
        ((rc = al__cfg_num(s, "attention_factor", 0, 1e6, 0, &r->attn_factor, name, err)) ||
         (rc = al__cfg_num(s, "beta_fast", 0, 1e6, 32, &r->beta_fast, name, err)) ||
         (rc = al__cfg_num(s, "beta_slow", 0, 1e6, 1, &r->beta_slow, name, err))))
        return rc;
    if (k == AL__ROPE_DYNAMIC) {
        if (r->factor < 1)
            return al__err(err, AL_E_FORMAT, "%s: dynamic rope_scaling factor %g is below 1", name,
                           r->factor);
        double n = floor(*n_ctx * r->factor); /* dynamic is for running past the context */
        *n_ctx = n > (1 << 24) ? (1 << 24) : (int)n;
    }
    return 0;
}

int al__hf_tokenizer_files(al_model *m, al__model_files *fs, al_error *err) {
    char dir[4096], p[4200];
    al__model_dir(m, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    int rc = al__model_files_add(fs, p, "tokenizer", err);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    if (!rc && al__is_file(p)) rc = al__model_files_add(fs, p, "tokenizer", err);
    return rc;
}

cJSON *al__arch_json(const char *arch, int n_head, int n_kv_head, const al__rope *r, int d_head) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "architecture", arch);
    cJSON *kv = cJSON_AddArrayToObject(o, "kv_head_of_query_head");
    for (int h = 0; h < n_head; h++)
        cJSON_AddItemToArray(kv, cJSON_CreateNumber(h / (n_head / n_kv_head)));
    cJSON *ro = cJSON_AddObjectToObject(o, "rope");
    cJSON_AddStringToObject(ro, "type", al__rope_type_name(r->type));
    cJSON_AddNumberToObject(ro, "theta", r->base);
    cJSON_AddNumberToObject(ro, "rotary_dims", r->dim);
    cJSON_AddNumberToObject(ro, "rotary_fraction", (double)r->dim / d_head);
    if (r->type != AL__ROPE_DEFAULT) cJSON_AddNumberToObject(ro, "factor", r->factor);
    if (r->freq_factors) {
        cJSON *ff = cJSON_AddArrayToObject(ro, "freq_factors"); /* GGUF rope_freqs.weight */
        for (int i = 0; i < r->dim / 2; i++)
            cJSON_AddItemToArray(ff, cJSON_CreateNumber(r->freq_factors[i]));
    }
    return o;
}
