/* model.c: opening a model of any supported family, and the forward entry point. */
#include "model.h"

#include "gptneox.h"
#include "safetensors.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads "model_type" from the config.json next to a safetensors path (or in a directory). */
static int hf_model_type(const char *path, char *type, size_t cap, al_error *err);

/* The directory holding path ("." when it has no slash) into dir. */
static void dir_of(const char *path, char *dir, size_t cap) {
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
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
    if (al__is_dir(m->info.path))
        snprintf(dir, sizeof dir, "%s", m->info.path);
    else
        dir_of(m->info.path, dir, sizeof dir);
    if (!realpath(dir, real)) return;
    const char *b = base_of(real);
    snprintf(m->info.name, sizeof m->info.name, "%s", *b ? b : "/");
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
        FILE *f = fopen(path, "rb");
        if (f) {
            if (fread(magic, 1, sizeof magic, f) == 0) magic[0] = 0;
            fclose(f);
        }
    }
    if (S_ISREG(st.st_mode) && memcmp(magic, "GGUF", 4) == 0) {
        m->format = AL__FMT_GGUF;
        rc = al__llama_open_gguf(m, path, err);
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
    *out = m;
    return 0;
}

void al_model_free(al_model *m) {
    if (!m) return;
    if (m->vt && m->vt->destroy) m->vt->destroy(m);
    al__model_files_free(m->hashed);
    free(m->hashed);
    free(m);
}

const al_model_info *al_model_get_info(const al_model *m) {
    return &m->info;
}

int al_model_hash(al_model *m, al_error *err) {
    if (m->info.sha256[0]) return 0;
    al__model_files fs;
    int rc = al__model_files_list(m, 1, &fs, err);
    if (rc) return rc;
    snprintf(m->info.sha256, sizeof m->info.sha256, "%s", fs.sha256);
    al__model_files_free(&fs);
    return 0;
}

/* ---- load warnings ------------------------------------------------------------------------- */

void al__model_warn_nonfinite(al_model *m, const char *file, const char *tensor, size_t n_bad,
                              size_t first) {
    fprintf(stderr,
            "attnlim: warning: %s: tensor %s has %zu NaN/Inf values (first at flat index %zu)\n",
            file, tensor, n_bad, first);
    if (!m) return;
    if (m->n_warnings < AL__MAX_LOAD_WARNINGS) {
        al__load_warning *w = &m->warnings[m->n_warnings++];
        snprintf(w->file, sizeof w->file, "%s", file);
        snprintf(w->tensor, sizeof w->tensor, "%s", tensor);
        w->n_bad = n_bad, w->first = first;
    }
    m->n_warnings_total++;
}

const al__load_warning *al__model_warnings(const al_model *m, int *n, int *total) {
    *n = m->n_warnings;
    if (total) *total = m->n_warnings_total;
    return m->warnings;
}

/* ---- the files a model is made of --------------------------------------------------------- */

static int add_model_file(al__model_files *fs, int *cap, const char *path, const char *role,
                          al_error *err) {
    for (int i = 0; i < fs->n; i++)
        if (strcmp(fs->f[i].path, path) == 0) return 0;
    if (fs->n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        al__model_file *g = realloc(fs->f, (size_t)nc * sizeof *g);
        if (!g) return al__err(err, AL_E_NOMEM, "out of memory listing the model's files");
        fs->f = g, *cap = nc;
    }
    al__model_file *f = &fs->f[fs->n];
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->name, sizeof f->name, "%s", base_of(path));
    f->role = role;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return al__err(err, AL_E_NOTFOUND, "%s: the model's %s file is missing", path, role);
    f->bytes = (int64_t)st.st_size;
    fs->n++;
    return 0;
}

static int cmp_file_name(const void *a, const void *b) {
    return strcmp(((const al__model_file *)a)->name, ((const al__model_file *)b)->name);
}

/* Sorts by name; with hash, every file's SHA-256 and the identity over "<sha>  <name>\n". */
static int finish_files(al__model_files *fs, int hash, al_error *err) {
    qsort(fs->f, (size_t)fs->n, sizeof *fs->f, cmp_file_name);
    for (int i = 1; i < fs->n; i++)
        if (strcmp(fs->f[i - 1].name, fs->f[i].name) == 0)
            return al__err(err, AL_E_FORMAT, "%s and %s: two model files of one name",
                           fs->f[i - 1].path, fs->f[i].path);
    if (!hash) return 0;
    size_t cap = (size_t)fs->n * (64 + 2 + 256 + 1) + 1, len = 0;
    char *text = al__malloc(cap, "model identity", err);
    if (!text) return AL_E_NOMEM;
    for (int i = 0; i < fs->n; i++) {
        int rc = al_sha256_file(fs->f[i].path, fs->f[i].sha256, err);
        if (rc) {
            free(text);
            return rc;
        }
        len += (size_t)snprintf(text + len, cap - len, "%s  %s\n", fs->f[i].sha256, fs->f[i].name);
    }
    al_sha256_buf(text, len, fs->sha256);
    free(text);
    return 0;
}

void al__model_files_free(al__model_files *fs) {
    if (!fs) return;
    free(fs->f);
    memset(fs, 0, sizeof *fs);
}

/* A deep copy of fs into out. */
static int copy_files(const al__model_files *fs, al__model_files *out, al_error *err) {
    *out = *fs;
    out->f = al__malloc((size_t)(fs->n > 0 ? fs->n : 1) * sizeof *fs->f, "model files", err);
    if (!out->f) {
        memset(out, 0, sizeof *out);
        return AL_E_NOMEM;
    }
    memcpy(out->f, fs->f, (size_t)fs->n * sizeof *fs->f);
    return 0;
}

static int list_files(al_model *m, int hash, al__model_files *out, al_error *err);

int al__model_files_list(al_model *m, int hash, al__model_files *out, al_error *err) {
    memset(out, 0, sizeof *out);
    if (m->hashed) return copy_files(m->hashed, out, err); /* hashed once per open model */
    int rc = list_files(m, hash, out, err);
    if (rc || !hash) return rc;
    al__model_files *keep = al__malloc(sizeof *keep, "model files", err);
    if (!keep) return 0; /* not cached: the next call hashes again */
    if (copy_files(out, keep, err)) {
        free(keep);
        return 0;
    }
    m->hashed = keep;
    return 0;
}

static int list_files(al_model *m, int hash, al__model_files *out, al_error *err) {
    memset(out, 0, sizeof *out);
    int cap = 0, rc = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s", m->info.path);
    if (m->format == AL__FMT_SAFETENSORS) {
        char dir[4096], cfg[4096 + 16];
        if (al__is_dir(path)) { /* the file a directory stands for: the index or the one file */
            al__safetensors *st = NULL;
            if ((rc = al__st_open(m->info.path, &st, err))) return rc;
            snprintf(path, sizeof path, "%s", al__st_path(st));
            al__st_close(st);
        }
        dir_of(path, dir, sizeof dir);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        rc = add_model_file(out, &cap, cfg, "config", err);
        if (!rc && ends_with(path, ".json")) {
            /* sharded: the index and every shard it names (the reader resolved them) */
            rc = add_model_file(out, &cap, path, "index", err);
            al__safetensors *st = NULL;
            if (!rc) rc = al__st_open(path, &st, err);
            for (int i = 0; !rc && i < al__st_count(st); i++)
                rc = add_model_file(out, &cap, al__st_at(st, i)->file, "weights", err);
            al__st_close(st);
        } else if (!rc) {
            rc = add_model_file(out, &cap, path, "weights", err);
        }
    } else if (m->format == AL__FMT_DUMP) {
        /* the manifest and every array it holds */
        const char *const *paths;
        int n;
        al__dump_files(m, &paths, &n);
        for (int i = 0; !rc && i < n; i++)
            rc = add_model_file(out, &cap, paths[i], i ? "array" : "manifest", err);
    } else {
        rc = add_model_file(out, &cap, path, "weights", err);
    }
    if (!rc) rc = finish_files(out, hash, err);
    if (rc) al__model_files_free(out);
    return rc;
}

int al__model_tokenizer_files(al_model *m, int hash, al__model_files *out, al_error *err) {
    memset(out, 0, sizeof *out);
    int cap = 0, rc = 0;
    char p[4096 + 64];
    if (m->format == AL__FMT_GGUF) {
        rc = add_model_file(out, &cap, m->info.path, "tokenizer", err);
    } else if (!strcmp(m->info.family, "bert")) {
        /* what bert.c reads: vocab.txt, and tokenizer_config.json (lower-casing) if present */
        char dir[4096];
        if (al__is_dir(m->info.path))
            snprintf(dir, sizeof dir, "%s", m->info.path);
        else
            dir_of(m->info.path, dir, sizeof dir);
        snprintf(p, sizeof p, "%s/vocab.txt", dir);
        rc = add_model_file(out, &cap, p, "tokenizer", err);
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        if (!rc && al__is_file(p)) rc = add_model_file(out, &cap, p, "tokenizer", err);
    } else if (m->format == AL__FMT_SAFETENSORS && strcmp(m->info.family, "gpt2") != 0) {
        /* the HF tokenizer files (tokenizer.json, tokenizer_config.json when present) */
        char dir[4096];
        if (al__is_dir(m->info.path))
            snprintf(dir, sizeof dir, "%s", m->info.path);
        else
            dir_of(m->info.path, dir, sizeof dir);
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        rc = add_model_file(out, &cap, p, "tokenizer", err);
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        if (!rc && al__is_file(p)) rc = add_model_file(out, &cap, p, "tokenizer", err);
    } else if (!strcmp(m->info.family, "gpt2")) {
        /* what gpt2.c's tokenizer opens: the shared GPT-2 BPE files */
        rc = al_data_find("gpt2/encoder.json", NULL, p, sizeof p, err);
        if (!rc) rc = add_model_file(out, &cap, p, "tokenizer", err);
        if (!rc) rc = al_data_find("gpt2/vocab.bpe", NULL, p, sizeof p, err);
        if (!rc) rc = add_model_file(out, &cap, p, "tokenizer", err);
    } else {
        rc = al__err(err, AL_E_UNSUPPORTED, "%s: no tokenizer files known for family %s",
                     m->info.path, m->info.family);
    }
    if (!rc) rc = finish_files(out, hash, err);
    if (rc) al__model_files_free(out);
    return rc;
}

int al_model_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                     float *logits, float *final_hidden, al_error *err) {
    if (!m || !tokens) return al__err(err, AL_E_INVALID, "al_model_forward: NULL model or tokens");
    if (T < 1) return al__err(err, AL_E_INVALID, "empty window: at least one token is needed");
    if (m->format == AL__FMT_DUMP) /* the dump checks its window and its tokens itself */
        return m->vt->forward(m, tokens, T, req, logits, final_hidden, err);
    if (T > m->info.n_ctx)
        return al__err(err, AL_E_INVALID,
                       "window of %d tokens exceeds the model's context of %d (%s)", T,
                       m->info.n_ctx, m->info.path);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->info.vocab_size)
            return al__err(err, AL_E_INVALID,
                           "token id %d at position %d outside the vocabulary [0, %d)",
                           (int)tokens[t], t, m->info.vocab_size);
    return m->vt->forward(m, tokens, T, req, logits, final_hidden, err);
}

int al__model_own_tokens(al_model *m, const int32_t **ids, int *n, int *known, al_error *err) {
    *ids = NULL, *n = 0, *known = 0;
    return m->vt->tokens ? m->vt->tokens(m, ids, n, known, err) : 0;
}

int al__model_check(al_model *m, int T, const al_capture_request *req, al_error *err) {
    return m->vt->check ? m->vt->check(m, T, req, err) : 0;
}

int al_model_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    *out = NULL;
    if (!m->vt->tokenizer)
        return al__err(err, AL_E_UNSUPPORTED, "%s: this model family has no tokenizer",
                       m->info.path);
    return m->vt->tokenizer(m, out, err);
}

#include <cjson/cJSON.h>

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

/* ---- manifests ------------------------------------------------------------------------------ */

cJSON *al__model_files_json(const al__model_files *fs) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < fs->n; i++) {
        cJSON *f = cJSON_CreateObject();
        char real[PATH_MAX];
        cJSON_AddStringToObject(f, "name", fs->f[i].name);
        cJSON_AddStringToObject(f, "path", realpath(fs->f[i].path, real) ? real : fs->f[i].path);
        cJSON_AddStringToObject(f, "role", fs->f[i].role);
        cJSON_AddNumberToObject(f, "bytes", (double)fs->f[i].bytes);
        if (fs->f[i].sha256[0]) cJSON_AddStringToObject(f, "sha256", fs->f[i].sha256);
        cJSON_AddItemToArray(a, f);
    }
    return a;
}

const char AL__IDENTITY_OF[] =
    "the lines '<sha256>  <name>' of the files below, sorted by name (bytewise), each ending in a "
    "newline: `sha256sum FILES | LC_ALL=C sort -k 2 | sha256sum` in their directory";

cJSON *al__model_json(al_model *m, const char *given, int hash, al_error *err) {
    al__model_files files;
    if (al__model_files_list(m, hash, &files, err)) return NULL;
    const al__model_files *fs = &files;
    const al_model_info *in = al_model_get_info(m);
    cJSON *o = cJSON_CreateObject();
    char real[PATH_MAX];
    cJSON_AddStringToObject(o, "path", realpath(in->path, real) ? real : in->path);
    cJSON_AddStringToObject(o, "path_given", given);
    if (hash) {
        cJSON_AddStringToObject(o, "sha256", fs->sha256);
        cJSON_AddStringToObject(o, "sha256_of", AL__IDENTITY_OF);
    }
    cJSON_AddItemToObject(o, "files", al__model_files_json(fs));
    cJSON_AddStringToObject(o, "family", in->family);
    cJSON_AddStringToObject(o, "name", in->name);
    cJSON_AddStringToObject(o, "dtype", in->dtype);
    cJSON_AddNumberToObject(o, "n_layer", in->n_layer);
    cJSON_AddNumberToObject(o, "n_head", in->n_head);
    cJSON_AddNumberToObject(o, "n_kv_head", in->n_kv_head);
    cJSON_AddNumberToObject(o, "d_model", in->d_model);
    cJSON_AddNumberToObject(o, "d_head", in->d_head);
    cJSON_AddNumberToObject(o, "d_ff", in->d_ff);
    cJSON_AddNumberToObject(o, "n_ctx", in->n_ctx);
    cJSON_AddNumberToObject(o, "vocab_size", in->vocab_size);
    cJSON_AddBoolToObject(o, "causal", in->causal);
    cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
    int n, total;
    const al__load_warning *w = al__model_warnings(m, &n, &total);
    cJSON *lw = cJSON_AddArrayToObject(o, "load_warnings");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "file", w[i].file);
        cJSON_AddStringToObject(e, "tensor", w[i].tensor);
        cJSON_AddNumberToObject(e, "nonfinite", (double)w[i].n_bad);
        cJSON_AddNumberToObject(e, "first_index", (double)w[i].first);
        cJSON_AddItemToArray(lw, e);
    }
    cJSON_AddNumberToObject(o, "load_warnings_total", total);
    cJSON *dump = al__dump_json(m); /* an attention dump: what it holds, its source model */
    if (dump) cJSON_AddItemToObject(o, "dump", dump);
    al__model_files_free(&files);
    return o;
}
