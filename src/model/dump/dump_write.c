/* dump_write.c: the one writer of attention dumps (docs/dumps.md), for `attnlim capture` and
 * the Python package's write_dump (include/attnlim.h "Dump writer").
 *
 * The arrays go as .npy files into a temporary directory beside DIR (src/base/outdir.c), the
 * manifest last; al_dump_writer_finish makes that directory DIR in one rename. The manifest is
 * the members the caller sets, in the order set, with "files" (one entry per array added:
 * file, layer, what, shape, dtype and the caller's extra members) where the caller placed it,
 * else last. An unfinished writer freed removes everything it wrote. */
#include "internal.h"
#include "model.h"
#include "outdir.h"
#include "textsafe.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The array kinds a dump holds (and capture writes). */
static const char *const KINDS[] = {"q",       "k",      "v",     "logits",
                                    "weights", "hidden", "embed", "logits_precap"};
#define N_KINDS ((int)(sizeof KINDS / sizeof KINDS[0]))

struct al_dump_writer {
    al__outdir d;
    int force;
    cJSON *man;   /* the members set so far */
    cJSON *files; /* the entries of the arrays added (owned until placed in man) */
    int files_placed;
};

static int kind_index(const char *s, size_t n) {
    for (int i = 0; i < N_KINDS; i++)
        if (strlen(KINDS[i]) == n && !strncmp(s, KINDS[i], n)) return i;
    return -1;
}

/* Is name a file a dump holds (so that force may replace it)? manifest.json, layer{l}.{kind}.npy */
static int dump_file_name(const char *name, int is_dir) {
    if (is_dir) return 0;
    if (!strcmp(name, "manifest.json")) return 1;
    if (strncmp(name, "layer", 5) != 0) return 0;
    const char *p = name + 5, *digits = p;
    while (*p >= '0' && *p <= '9') p++;
    if (p == digits || *p++ != '.') return 0;
    size_t n = strlen(p);
    return n > 4 && !strcmp(p + n - 4, ".npy") && kind_index(p, n - 4) >= 0;
}

al_dump_writer *al_dump_writer_open(const char *dir, const char *tool, int force, al_error *err) {
    al_dump_writer *w = al__calloc(1, sizeof *w, "a dump writer", err);
    if (!w) return NULL;
    w->d.lock_fd = -1;
    w->force = force;
    w->man = cJSON_CreateObject();
    w->files = cJSON_CreateArray();
    int rc = !w->man || !w->files ? al__err(err, AL_E_NOMEM, "out of memory (dump writer)") : 0;
    if (!rc) rc = al__outdir_prepare(&w->d, tool ? tool : "dump", dump_file_name, dir, force, err);
    if (!rc) rc = al__outdir_make_tmp(&w->d, err);
    if (rc) {
        al_dump_writer_free(w);
        return NULL;
    }
    return w;
}

const char *al_dump_writer_path(const al_dump_writer *w) {
    return w->d.tmp;
}

const char *al_dump_writer_dir(const al_dump_writer *w) {
    return w->d.dir;
}

/* The manifest entry of one array: file, layer, what, shape, dtype, then extra's members. */
static cJSON *file_entry(const char *name, int layer, const char *what, const al_array *a,
                         const char *extra, al_error *err) {
    cJSON *f = cJSON_CreateObject(), *x = extra ? cJSON_Parse(extra) : NULL;
    if (extra && !cJSON_IsObject(x)) {
        cJSON_Delete(f), cJSON_Delete(x);
        al__err(err, AL_E_INVALID, "%s: extra members: not a JSON object", name);
        return NULL;
    }
    cJSON_AddStringToObject(f, "file", name);
    cJSON_AddNumberToObject(f, "layer", layer);
    cJSON_AddStringToObject(f, "what", what);
    cJSON *shape = cJSON_AddArrayToObject(f, "shape");
    for (int d = 0; d < a->ndim; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)a->shape[d]));
    cJSON_AddStringToObject(f, "dtype", a->dtype == AL_F64 ? "float64" : "float32");
    for (cJSON *it = x ? x->child : NULL, *next; it; it = next) {
        next = it->next;
        cJSON_AddItemToObject(f, it->string, cJSON_DetachItemViaPointer(x, it));
    }
    cJSON_Delete(x);
    return f;
}

int al_dump_writer_add(al_dump_writer *w, int layer, const char *what, int dtype, int ndim,
                       const int64_t *shape, const void *data, const char *extra, al_error *err) {
    if (!w || !what || !data || (ndim && !shape))
        return al__err(err, AL_E_INVALID, "al_dump_writer_add: NULL argument");
    if (layer < 0 || kind_index(what, strlen(what)) < 0)
        return al__err(err, AL_E_INVALID, "%s: layer %d %s: not a dump array (layer >= 0; %s)",
                       w->d.dir, layer, what, "q, k, v, logits, weights, hidden, embed");
    if (ndim < 1 || ndim > AL_MAX_DIMS || (dtype != AL_F32 && dtype != AL_F64))
        return al__err(err, AL_E_INVALID, "%s: layer %d %s: bad dtype or rank", w->d.dir, layer,
                       what);
    al_array a = {.dtype = (al_dtype)dtype, .ndim = ndim, .data = (void *)data};
    for (int d = 0; d < ndim; d++) a.shape[d] = shape[d];
    char name[64], path[PATH_MAX + 160];
    snprintf(name, sizeof name, "layer%d.%s.npy", layer, what);
    snprintf(path, sizeof path, "%s/%s", w->d.tmp, name);
    if (al_npy_write(path, &a, err)) return al_error_prefix(err, "%s: writing %s", w->d.dir, name);
    cJSON *f = file_entry(name, layer, what, &a, extra, err);
    if (!f) return err->code ? err->code : AL_E_NOMEM;
    cJSON_AddItemToArray(w->files, f);
    return 0;
}

int al_dump_writer_set(al_dump_writer *w, const char *key, const char *json, al_error *err) {
    if (!w || !key) return al__err(err, AL_E_INVALID, "al_dump_writer_set: NULL argument");
    if (cJSON_GetObjectItemCaseSensitive(w->man, key))
        return al__err(err, AL_E_INVALID, "%s: manifest member \"%s\" set twice", w->d.dir, key);
    if (!json && !strcmp(key, "files") && !w->files_placed) {
        cJSON_AddItemReferenceToObject(w->man, "files", w->files);
        w->files_placed = 1;
        return 0;
    }
    cJSON *v = json ? cJSON_Parse(json) : NULL;
    if (!v)
        return al__err(err, AL_E_INVALID, "%s: manifest member \"%s\": not JSON text", w->d.dir,
                       key);
    cJSON_AddItemToObject(w->man, key, v);
    return 0;
}

int al_dump_writer_model(al_dump_writer *w, al_model *m, const char *given, al_error *err) {
    cJSON *j = al__model_json(m, given, 1, err);
    if (!j) return err->code ? err->code : AL_E_NOMEM;
    cJSON_AddItemToObject(w->man, "model", j);
    return 0;
}

char *al_model_tokenizer_json(al_model *m, al_error *err) {
    al__model_files fs;
    if (al__model_tokenizer_files(m, 1, &fs, err)) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "sha256", fs.sha256);
    cJSON_AddStringToObject(o, "sha256_of", AL__IDENTITY_OF);
    cJSON_AddItemToObject(o, "files", al__model_files_json(&fs));
    al__model_files_free(&fs);
    char *s = al__json_print(o, 0);
    cJSON_Delete(o);
    if (!s) al__err(err, AL_E_NOMEM, "out of memory (tokenizer files)");
    return s;
}

/* Opens the written temporary dump as attnlim opens a dump (every array read back and checked). */
static int check_dump(const al_dump_writer *w, al_error *err) {
    al_model *m = NULL;
    int rc = al_model_open(w->d.tmp, &m, err);
    al_model_free(m);
    return rc;
}

int al_dump_writer_finish(al_dump_writer *w, int check, char **manifest, al_error *err) {
    if (manifest) *manifest = NULL;
    if (!w->files_placed) {
        cJSON_AddItemReferenceToObject(w->man, "files", w->files);
        w->files_placed = 1;
    }
    char *text = al__json_print(w->man, 1);
    if (!text) return al__err(err, AL_E_NOMEM, "out of memory writing the manifest");
    char path[PATH_MAX + 160];
    snprintf(path, sizeof path, "%s/manifest.json", w->d.tmp);
    int rc = al__write_file_atomic(path, text, strlen(text), err);
    if (rc) al_error_prefix(err, "%s: writing manifest.json", w->d.dir);
    if (!rc && check) rc = check_dump(w, err);
    if (!rc) rc = al__outdir_publish(&w->d, w->force, err);
    if (!rc && manifest)
        *manifest = text;
    else
        free(text);
    return rc;
}

void al_dump_writer_free(al_dump_writer *w) {
    if (!w) return;
    al__outdir_abandon(&w->d); /* after finish: only releases the lock */
    cJSON_Delete(w->man);      /* "files" in it is a reference */
    cJSON_Delete(w->files);
    free(w);
}
