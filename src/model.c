/* model.c: opening a model of any supported family, and the forward entry point. */
#include "model.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads "model_type" from the config.json next to a safetensors path (or in a directory). */
static int hf_model_type(const char *path, char *type, size_t cap, al_error *err);

int al_model_open(const char *path_or_name, al_model **out, al_error *err) {
    *out = NULL;
    if (!path_or_name || !*path_or_name) return al__err(err, AL_E_INVALID, "no model given (--model PATH or NAME)");
    char resolved[4096];
    const char *path = path_or_name;
    struct stat st;
    if (stat(path, &st) != 0) {
        int rc = al__model_resolve_name(path_or_name, resolved, sizeof resolved, err);
        if (rc == AL_E_NOTFOUND && err && !strstr(err->msg, path_or_name))
            return al__err(err, AL_E_NOTFOUND,
                           "%s: no such file, and not a known model name (smollm2, minilm, gpt2)", path_or_name);
        if (rc) return rc;
        path = resolved;
        if (stat(path, &st) != 0) return al__err(err, AL_E_NOTFOUND, "%s: no such file", path);
    }
    al_model *m = al__calloc(1, sizeof *m, "model", err);
    if (!m) return AL_E_NOMEM;
    int rc;
    unsigned char magic[8] = {0};
    if (S_ISREG(st.st_mode)) {
        FILE *f = fopen(path, "rb");
        if (f) {
            if (fread(magic, 1, sizeof magic, f) == 0) magic[0] = 0;
            fclose(f);
        }
    }
    if (S_ISREG(st.st_mode) && memcmp(magic, "GGUF", 4) == 0) {
        rc = al__llama_open_gguf(m, path, err);
    } else if (S_ISREG(st.st_mode) && (al__le32(magic) == 20240326u || ends_with(path, ".bin"))) {
        rc = al__gpt2_open_llmc(m, path, err);
    } else if (S_ISDIR(st.st_mode) || ends_with(path, ".safetensors") || ends_with(path, ".json")) {
        char type[64];
        rc = hf_model_type(path, type, sizeof type, err);
        if (rc == 0) {
            if (strcmp(type, "gpt2") == 0) rc = al__gpt2_open_safetensors(m, path, err);
            else if (strcmp(type, "bert") == 0) rc = al__bert_open_safetensors(m, path, err);
            else
                rc = al__err(err, AL_E_UNSUPPORTED,
                             "%s: model_type '%s' in config.json is not supported (supported: gpt2, bert; "
                             "llama-family models as .gguf)",
                             path, type);
        }
    } else {
        rc = al__err(err, AL_E_UNSUPPORTED,
                     "%s: unrecognised model file (expected an HF directory or .safetensors with config.json, "
                     "an llm.c .bin, or a .gguf)",
                     path);
    }
    if (rc) {
        if (m->vt && m->impl) m->vt->destroy(m);
        free(m);
        return rc;
    }
    if (m->info.path[0] == 0) snprintf(m->info.path, sizeof m->info.path, "%s", path);
    *out = m;
    return 0;
}

void al_model_free(al_model *m) {
    if (!m) return;
    if (m->vt && m->vt->destroy) m->vt->destroy(m);
    free(m);
}

const al_model_info *al_model_get_info(const al_model *m) { return &m->info; }

int al_model_hash(al_model *m, al_error *err) {
    if (m->info.sha256[0]) return 0;
    return al_sha256_file(m->info.path, m->info.sha256, err);
}

int al_model_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req, float *logits,
                     float *final_hidden, al_error *err) {
    if (!m || !tokens) return al__err(err, AL_E_INVALID, "al_model_forward: NULL model or tokens");
    if (T < 1) return al__err(err, AL_E_INVALID, "empty window: at least one token is needed");
    if (T > m->info.n_ctx)
        return al__err(err, AL_E_INVALID, "window of %d tokens exceeds the model's context of %d (%s)", T,
                       m->info.n_ctx, m->info.path);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->info.vocab_size)
            return al__err(err, AL_E_INVALID, "token id %d at position %d outside the vocabulary [0, %d)",
                           (int)tokens[t], t, m->info.vocab_size);
    return m->vt->forward(m, tokens, T, req, logits, final_hidden, err);
}

int al_model_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    *out = NULL;
    if (!m->vt->tokenizer)
        return al__err(err, AL_E_UNSUPPORTED, "%s: this model family has no tokenizer", m->info.path);
    return m->vt->tokenizer(m, out, err);
}

#include <cjson/cJSON.h>

static int hf_model_type(const char *path, char *type, size_t cap, al_error *err) {
    char cfg[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(cfg, sizeof cfg, "%s/config.json", path);
    else if (ends_with(path, ".json") && !ends_with(path, ".index.json")) snprintf(cfg, sizeof cfg, "%s", path);
    else {
        snprintf(cfg, sizeof cfg, "%s", path);
        char *slash = strrchr(cfg, '/');
        if (slash) snprintf(slash + 1, sizeof cfg - (size_t)(slash + 1 - cfg), "config.json");
        else snprintf(cfg, sizeof cfg, "config.json");
    }
    char *text;
    size_t len;
    int rc = al__read_file(cfg, 1 << 20, &text, &len, err);
    if (rc) return al__err_prefix(err, AL_E_NOTFOUND, "%s: a safetensors model needs its config.json", path);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", cfg);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (!cJSON_IsString(t) || !t->valuestring) {
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: no \"model_type\" string", cfg);
    }
    snprintf(type, cap, "%s", t->valuestring);
    cJSON_Delete(j);
    return 0;
}
