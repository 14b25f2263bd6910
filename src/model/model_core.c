/* model_core.c: what every model has whatever its family (model.h): the entry points over the
 * vtable (forward, tokenizer, own tokens, check, free), load warnings, the files that define
 * the model and its tokenizer (each family lists them through its vtable), the identity hash,
 * and the manifest's model object. Knows no family: the families depend on it, and model.c
 * (al_model_open) on them. */
#include "model.h"

#include "hooks.h"
#include "safetensors.h"
#include "textsafe.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

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

static const char *base_of(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void al_model_free(al_model *m) {
    if (!m) return;
    if (m->vt && m->vt->destroy) m->vt->destroy(m);
    m->own_on = 0;
    al__attn_clear(m);
    free(m->own_s);
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

/* The family's forward; the kernels run OpenBLAS single-threaded: its count is put back after. */
static int forward_keeping_blas(al_model *m, const int32_t *tokens, int T,
                                const al_capture_request *req, const al__fwd *f, float *logits,
                                float *final_hidden, al_error *err) {
    int blas = al__blas_save();
    int rc = m->vt->forward(m, tokens, T, req, f, logits, final_hidden, err);
    al__blas_restore(blas);
    return rc;
}

/* *f: what a forward of T tokens must compute for opts (the mode and the last layer read). */
static int forward_plan(const al_model *m, int T, const al_capture_request *req,
                        const al_forward_opts *o, const float *logits, const float *final_hidden,
                        al__fwd *f, al_error *err) {
    int nl = m->info.n_layer, cap_last = -1, outs = logits || final_hidden;
    if (o->logits < AL_LOGITS_ALL || o->logits > AL_LOGITS_NONE)
        return al__err(err, AL_E_INVALID, "forward: logits mode %d is not all, last or none",
                       (int)o->logits);
    if (o->logits == AL_LOGITS_NONE && outs)
        return al__err(err, AL_E_INVALID, "forward: logits mode none with an output buffer");
    if (o->last_layer < -1 || o->last_layer >= nl)
        return al__err(err, AL_E_INVALID, "forward: last layer %d outside -1..%d", o->last_layer,
                       nl - 1);
    if (o->last_layer >= 0 && o->logits != AL_LOGITS_NONE)
        return al__err(err, AL_E_INVALID,
                       "forward: a last layer (%d) below the model's top needs logits mode none",
                       o->last_layer);
    for (int l = 0; req && req->what && req->fn && l < nl; l++)
        if (!req->layers || req->layers[l]) cap_last = l;
    if (o->last_layer >= 0 && cap_last > o->last_layer)
        return al__err(err, AL_E_INVALID, "forward: layer %d is captured above the last layer %d",
                       cap_last, o->last_layer);
    f->last = o->logits != AL_LOGITS_NONE ? nl - 1 : o->last_layer >= 0 ? o->last_layer : cap_last;
    f->row0 = o->logits == AL_LOGITS_LAST ? T - 1 : 0;
    return 0;
}

int al_model_forward_opts(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                          const al_forward_opts *opts, float *logits, float *final_hidden,
                          al_error *err) {
    if (!m || !tokens) return al__err(err, AL_E_INVALID, "al_model_forward: NULL model or tokens");
    if (T < 1) return al__err(err, AL_E_INVALID, "empty window: at least one token is needed");
    al_forward_opts def = {logits || final_hidden ? AL_LOGITS_ALL : AL_LOGITS_NONE, -1};
    al__fwd f;
    int rc = forward_plan(m, T, req, opts ? opts : &def, logits, final_hidden, &f, err);
    if (rc) return rc;
    if (m->format == AL__FMT_DUMP) /* the dump checks its window and its tokens itself */
        return forward_keeping_blas(m, tokens, T, req, &f, logits, final_hidden, err);
    if (T > m->info.n_ctx)
        return al__err(err, AL_E_INVALID,
                       "window of %d tokens exceeds the model's context of %d (%s)", T,
                       m->info.n_ctx, m->info.path);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->info.vocab_size)
            return al__err(err, AL_E_INVALID,
                           "token id %d at position %d outside the vocabulary [0, %d)",
                           (int)tokens[t], t, m->info.vocab_size);
    return forward_keeping_blas(m, tokens, T, req, &f, logits, final_hidden, err);
}

int al_model_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                     float *logits, float *final_hidden, al_error *err) {
    return al_model_forward_opts(m, tokens, T, req, NULL, logits, final_hidden, err);
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

/* ---- load warnings ------------------------------------------------------------------------- */

void al__model_warn_nonfinite(al_model *m, const char *file, const char *tensor, size_t n_bad,
                              size_t first) {
    al__log(AL_LOG_WARNING,
            "attnlim: warning: %s: tensor %s has %zu NaN/Inf values (first at flat index %zu)",
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

size_t al__model_scan_nonfinite(al_model *m, const char *file, const char *tensor, const void *x,
                                size_t n) {
    const unsigned char *b = x;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);               /* x may be unaligned (a mapped file) */
        if ((u & 0x7f800000u) == 0x7f800000u) { /* exponent all ones: Inf or NaN */
            if (!bad) first = i;
            bad++;
        }
    }
#ifdef AL_FUZZING
    if (bad && first == (size_t)-1) /* the scan kept, the fuzzer's stderr left quiet */
#else
    if (bad)
#endif
        al__model_warn_nonfinite(m, file, tensor, bad, first);
    return bad;
}

const al__load_warning *al__model_warnings(const al_model *m, int *n, int *total) {
    *n = m->n_warnings;
    if (total) *total = m->n_warnings_total;
    return m->warnings;
}

/* ---- the files a model is made of --------------------------------------------------------- */

int al__model_files_add(al__model_files *fs, const char *path, const char *role, al_error *err) {
    for (int i = 0; i < fs->n; i++)
        if (strcmp(fs->f[i].path, path) == 0) return 0;
    if (fs->n == fs->cap) {
        int nc = fs->cap ? 2 * fs->cap : 8;
        al__model_file *g = realloc(fs->f, (size_t)nc * sizeof *g);
        if (!g) return al__err(err, AL_E_NOMEM, "out of memory listing the model's files");
        fs->f = g, fs->cap = nc;
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

int al__model_files_safetensors(const al_model *m, al__model_files *fs, al_error *err) {
    int rc;
    char path[4096], dir[4096], cfg[4096 + 16];
    snprintf(path, sizeof path, "%s", m->info.path);
    if (al__is_dir(path)) { /* the file a directory stands for: the index or the one file */
        al__safetensors *st = NULL;
        if ((rc = al__st_open(m->info.path, &st, err))) return rc;
        snprintf(path, sizeof path, "%s", al__st_path(st));
        al__st_close(st);
    }
    dir_of(path, dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    rc = al__model_files_add(fs, cfg, "config", err);
    if (!rc && ends_with(path, ".json")) {
        /* sharded: the index and every shard it names (the reader resolved them) */
        rc = al__model_files_add(fs, path, "index", err);
        al__safetensors *st = NULL;
        if (!rc) rc = al__st_open(path, &st, err);
        for (int i = 0; !rc && i < al__st_count(st); i++)
            rc = al__model_files_add(fs, al__st_at(st, i)->file, "weights", err);
        al__st_close(st);
    } else if (!rc) {
        rc = al__model_files_add(fs, path, "weights", err);
    }
    return rc;
}

void al__model_dir(const al_model *m, char *dir, size_t cap) {
    if (al__is_dir(m->info.path))
        snprintf(dir, cap, "%s", m->info.path);
    else
        dir_of(m->info.path, dir, cap);
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

/* The files that define m, as its family lists them (vtable files), sorted, hashed with hash. */
static int list_files(al_model *m, int hash, al__model_files *out, al_error *err) {
    memset(out, 0, sizeof *out);
    int rc = m->vt->files ? m->vt->files(m, out, err)
                          : al__err(err, AL_E_UNSUPPORTED, "%s: no files known for family %s",
                                    m->info.path, m->info.family);
    if (!rc) rc = finish_files(out, hash, err);
    if (rc) al__model_files_free(out);
    return rc;
}

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

int al__model_tokenizer_files(al_model *m, int hash, al__model_files *out, al_error *err) {
    memset(out, 0, sizeof *out);
    int rc = m->vt->tokenizer_files
                 ? m->vt->tokenizer_files(m, out, err)
                 : al__err(err, AL_E_UNSUPPORTED, "%s: no tokenizer files known for family %s",
                           m->info.path, m->info.family);
    if (!rc) rc = finish_files(out, hash, err);
    if (rc) al__model_files_free(out);
    return rc;
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

int al__model_layer_window(const al_model *m, int layer) {
    if (!m->vt->layer_window || layer < 0 || layer >= m->info.n_layer) return 0;
    return m->vt->layer_window(m, layer);
}

int al_model_layer_window(const al_model *m, int layer) {
    return m ? al__model_layer_window(m, layer) : 0;
}

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
    cJSON *dump = m->vt->describe ? m->vt->describe(m) : NULL; /* a dump: what it holds */
    if (dump) cJSON_AddItemToObject(o, "dump", dump);
    cJSON *arch = m->vt->architecture ? m->vt->architecture(m) : NULL;
    if (arch) cJSON_AddItemToObject(o, "architecture", arch);
    /* the attention its forward runs (attn_variant.c); a dump replays what it holds */
    if (m->format != AL__FMT_DUMP) cJSON_AddItemToObject(o, "attention", al__attn_json(m));
    al__model_files_free(&files);
    return o;
}

void al_model_nonfinite_cause(const al_model *m, char *buf, size_t cap) {
    int n, total;
    const al__load_warning *w = al__model_warnings(m, &n, &total);
    if (n == 0)
        snprintf(buf, cap, "%s: the weights are finite (the forward overflowed)",
                 al_model_get_info(m)->path);
    else
        snprintf(buf, cap, "%s: tensor %s has %zu NaN/Inf values (first at flat index %zu)%s",
                 w[0].file, w[0].tensor, w[0].n_bad, w[0].first,
                 total > 1 ? ", and other tensors too (see the warnings)" : "");
}

char *al_model_attention_json(const al_model *m) {
    cJSON *j = al__attn_json(m);
    char *s = j ? al__json_print(j, 0) : NULL;
    cJSON_Delete(j);
    return s;
}
