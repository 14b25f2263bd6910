/* model.c: al_model_open: recognises a model's file (GGUF, llm.c, attention dump, HF
 * safetensors + config.json) and hands it to its family's opener. The rest of what a model is
 * lives in model_core.c (which knows no family) and in each family's vtable. */
#include "model.h"
#include "textsafe.h"

#include "gguf.h"
#include "fetch.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads "model_type" from the config.json next to a safetensors path (or in a directory). */
static int hf_model_type(const char *path, char *type, size_t cap, al_error *err) {
    char cfg[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
    else if (ends_with(path, ".json") && !ends_with(path, ".index.json"))
        snprintf(cfg, sizeof cfg, "%s", path);
    else {
        snprintf(cfg, sizeof cfg, "%s", path);
        char *slash = strrchr(cfg, '/');
        if (slash)
            snprintf(slash + 1, sizeof cfg - (size_t)(slash + 1 - cfg), "config.json");
        else
            snprintf(cfg, sizeof cfg, "config.json");
    }
    char *text;
    size_t len;
    int rc = al__read_file(cfg, 1 << 20, &text, &len, err);
    if (rc)
        return al__err_prefix(err, AL_E_NOTFOUND, "%s: a safetensors model needs its config.json",
                              path);
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

static int dir_has(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return al__is_file(p);
}

static const char *base_of(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* A name derived from a path spelling rather than a real name ("." for --model ., a path with
 * a trailing slash) becomes the base name of the model's real directory. */
static void fix_name(al_model *m) {
    const char *n = m->info.name;
    size_t len = strlen(n);
    if (len && strcmp(n, ".") && strcmp(n, "..") && n[len - 1] != '/') return;
    char dir[4096], real[PATH_MAX];
    al__model_dir(m, dir, sizeof dir);
    if (!realpath(dir, real)) return;
    const char *b = base_of(real);
    snprintf(m->info.name, sizeof m->info.name, "%s", *b ? b : "/");
}

/* Is the GGUF file at path of architecture gptneox? (Anything else, including an unreadable
 * header, goes to the Llama-family reader, which reports it.) */
static int gguf_is_neox(const char *path) {
    al__gguf *g = NULL;
    char arch[64] = "";
    if (al__gguf_open(path, &g, NULL)) return 0;
    int neox = !al__gguf_get_str(g, "general.architecture", arch, sizeof arch, NULL) &&
               strcmp(arch, "gptneox") == 0;
    al__gguf_close(g);
    return neox;
}

int al_model_open(const char *path_or_name, al_model **out, al_error *err) {
    *out = NULL;
    if (!path_or_name || !*path_or_name)
        return al__err(err, AL_E_INVALID, "no model given (--model PATH or NAME)");
    char resolved[4096];
    const char *path = path_or_name;
    struct stat st;
    if (stat(path, &st) != 0) {
        int rc = al__model_resolve_name(path_or_name, resolved, sizeof resolved, err);
        if (rc == AL_E_NOTFOUND && err && !strstr(err->msg, path_or_name))
            return al__err(err, AL_E_NOTFOUND,
                           "%s: no such file, and not a known model name (smollm2, minilm, gpt2)",
                           path_or_name);
        if (rc) return rc;
        path = resolved;
        if (stat(path, &st) != 0) return al__err(err, AL_E_NOTFOUND, "%s: no such file", path);
    }
    al_model *m = al__calloc(1, sizeof *m, "model", err);
    if (!m) return AL_E_NOMEM;
    int rc;
    unsigned char magic[8] = {0};
    if (S_ISREG(st.st_mode)) {
        FILE *f = al__fopen_read(path, NULL);
        if (f) {
            if (fread(magic, 1, sizeof magic, f) == 0) magic[0] = 0;
            fclose(f);
        }
    }
    if (S_ISREG(st.st_mode) && memcmp(magic, "GGUF", 4) == 0) {
        m->format = AL__FMT_GGUF;
        rc = gguf_is_neox(path) ? al__neox_open_gguf(m, path, err)
                                : al__llama_open_gguf(m, path, err);
    } else if (S_ISREG(st.st_mode) && (al__le32(magic) == 20240326u || ends_with(path, ".bin"))) {
        m->format = AL__FMT_LLMC;
        rc = al__gpt2_open_llmc(m, path, err);
    } else if (S_ISDIR(st.st_mode) && al__dump_is_dump_dir(path)) {
        m->format = AL__FMT_DUMP;
        rc = al__dump_open(m, path, err);
    } else if (S_ISDIR(st.st_mode) && !dir_has(path, "config.json")) {
        rc = al__err(err, AL_E_NOTFOUND,
                     "%s: neither config.json nor manifest.json: a safetensors model needs its "
                     "config.json, an attention dump its manifest.json (docs/dumps.md)",
                     path);
    } else if (S_ISDIR(st.st_mode) || ends_with(path, ".safetensors") || ends_with(path, ".json")) {
        m->format = AL__FMT_SAFETENSORS;
        char type[64];
        rc = hf_model_type(path, type, sizeof type, err);
        if (rc == 0) {
            if (strcmp(type, "gpt2") == 0)
                rc = al__gpt2_open_safetensors(m, path, err);
            else if (strcmp(type, "bert") == 0)
                rc = al__bert_open_safetensors(m, path, err);
            else if (!strcmp(type, "llama") || !strcmp(type, "mistral") || !strcmp(type, "qwen2") ||
                     !strcmp(type, "gemma2"))
                rc = al__llama_open_hf(m, path, err);
            else if (!strcmp(type, "gpt_neox"))
                rc = al__neox_open_hf(m, path, err);
            else
                rc = al__err(err, AL_E_UNSUPPORTED,
                             "%s: model_type '%.64s' in config.json is not supported (supported: "
                             "gpt2, bert, llama, mistral, qwen2, gemma2, gpt_neox)",
                             path, type);
        }
    } else {
        rc = al__err(err, AL_E_UNSUPPORTED,
                     "%s: unrecognised model file (expected an HF directory or .safetensors with "
                     "config.json, "
                     "an llm.c .bin, or a .gguf)",
                     path);
    }
    if (rc) {
        if (m->vt && m->impl) m->vt->destroy(m);
        free(m);
        return rc;
    }
    if (m->info.path[0] == 0) snprintf(m->info.path, sizeof m->info.path, "%s", path);
    fix_name(m);
    al__known_title(m->info.path, m->info.name, sizeof m->info.name);
    *out = m;
    return 0;
}
