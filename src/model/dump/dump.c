/* dump.c: attention dumps (docs/dumps.md) as a model family, "dump".
 *
 * A dump is a directory: manifest.json and, for every stored layer l and array kind, the file
 * layer{l}.{q,k,v,logits,weights,hidden,embed}.npy (float32 or float64, C order):
 *   q, k, v          [n_heads, T, d_head]  (k, v: the key/value head each query head reads)
 *   logits, weights  [n_heads, T, T]       masked entries (j > t, causal; and under a layer's
 *                                          sliding window W, "sliding_window": {"of_layer":
 *                                          [...]}, the keys j < t - W + 1): weights must hold 0,
 *                                          logits anything (ignored; handed on as -inf)
 *   hidden, embed    [T, d_model]
 * n_heads = the stored heads, in increasing order. `attnlim capture` writes exactly this, so a
 * capture directory is a dump as it is; attnlim.write_dump writes the "attnlim.dump/1" schema.
 *
 * Everything is untrusted. al__dump_parse checks the manifest; al__dump_open then reads every
 * array it implies once (dtype, shape against the manifest, finite values outside the mask), so
 * a dump that opens can be replayed. No path is taken from the manifest: file names are made
 * from layer numbers and kinds, and a "files" list must name exactly those.
 *
 * forward(tokens, T') replays the stored layers to the capture observer in the al_capture
 * layout of the real models (float32; a float64 dump is converted once per layer), one layer in
 * memory at a time and only what the request asks for. Causal dumps serve every prefix
 * T' <= T (row t depends only on tokens <= t, so a shorter window starting at the dump's first
 * token is the top-left block); bidirectional dumps only T' = T. Missing logits are derived as
 * q.k / sqrt(d_head) (in double, from the stored q and k), missing weights as the row softmax
 * of the logits over the unmasked part (in double), both rounded once to float32. */
#include "hooks.h"
#include "dump.h"
#include "textsafe.h"

#include "model.h"
#include "ops.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const al__dump_what[AL__DUMP_N_WHAT] = {"q",       "k",      "v",    "logits",
                                                    "weights", "hidden", "embed"};
enum { W_Q, W_K, W_V, W_LOGITS, W_WEIGHTS, W_HIDDEN, W_EMBED };

void al__dump_file_name(int layer, int w, char *buf, size_t cap) {
    snprintf(buf, cap, "layer%d.%s.npy", layer, al__dump_what[w]);
}

static int what_index(const char *s) {
    for (int i = 0; i < AL__DUMP_N_WHAT; i++)
        if (!strcmp(s, al__dump_what[i])) return i;
    return -1;
}

/* "q, k, v" of the kinds in bits (sep between names) */
static void kinds_text(unsigned bits, const char *sep, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < AL__DUMP_N_WHAT; i++)
        if (bits & (1u << i))
            k += (size_t)snprintf(buf + k, k < cap ? cap - k : 0, "%s%s", k ? sep : "",
                                  al__dump_what[i]);
    if (!bits) snprintf(buf, cap, "nothing");
}

/* ---- the manifest ---------------------------------------------------------------------------- */

static const cJSON *member(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* An integer member in [lo, hi]: required, or def when absent. */
static int json_int(const cJSON *o, const char *key, const char *where, int required, int def,
                    long lo, long hi, int *out, const char *name, al_error *err) {
    const cJSON *v = member(o, key);
    if (!v) {
        if (required) return al__err(err, AL_E_FORMAT, "%s: \"%s%s\" is missing", name, where, key);
        *out = def;
        return 0;
    }
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(x) || x != floor(x) || x < (double)lo || x > (double)hi)
        return al__err(err, AL_E_FORMAT, "%s: \"%s%s\" must be an integer in %ld..%ld", name, where,
                       key, lo, hi);
    *out = (int)x;
    return 0;
}

/* A list of distinct indices in [0, n), non-empty: *out (malloc'ed, increasing) [*count]. */
static int json_index_list(const cJSON *v, const char *key, int n, int **out, int *count,
                           const char *name, al_error *err) {
    *out = NULL, *count = 0;
    if (!cJSON_IsArray(v))
        return al__err(err, AL_E_FORMAT, "%s: \"%s\" must be a list of indices", name, key);
    int len = cJSON_GetArraySize(v);
    if (len < 1) return al__err(err, AL_E_FORMAT, "%s: \"%s\" is empty", name, key);
    unsigned char *seen = al__calloc((size_t)n, 1, "index list", err);
    if (!seen) return AL_E_NOMEM;
    int i = 0, rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        double x = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!isfinite(x) || x != floor(x) || x < 0 || x >= n) {
            rc = al__err(err, AL_E_FORMAT, "%s: \"%s\"[%d] must be an integer in 0..%d", name, key,
                         i, n - 1);
            break;
        }
        if (seen[(int)x]) {
            rc = al__err(err, AL_E_FORMAT, "%s: \"%s\" lists %d twice", name, key, (int)x);
            break;
        }
        seen[(int)x] = 1;
        i++;
    }
    if (!rc && !(*out = al__malloc(sizeof(int) * (size_t)len, "index list", err))) rc = AL_E_NOMEM;
    if (!rc)
        for (int k = 0; k < n; k++)
            if (seen[k]) (*out)[(*count)++] = k;
    free(seen);
    return rc;
}

/* The kinds a list of names declares ("arrays" of dump/1, "options.what" of capture). */
static int json_kinds(const cJSON *v, const char *key, unsigned *bits, const char *name,
                      al_error *err) {
    *bits = 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return al__err(err, AL_E_FORMAT,
                       "%s: \"%s\" must be a non-empty list of q, k, v, logits, weights, hidden, "
                       "embed",
                       name, key);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        int w = cJSON_IsString(e) ? what_index(e->valuestring) : -1;
        if (w < 0)
            return al__err(err, AL_E_FORMAT,
                           "%s: \"%s\"[%d] is not one of q, k, v, logits, weights, hidden, embed",
                           name, key, i);
        if (*bits & (1u << w))
            return al__err(err, AL_E_FORMAT, "%s: \"%s\" lists %s twice", name, key,
                           al__dump_what[w]);
        *bits |= 1u << w;
        i++;
    }
    return 0;
}

static int in_list(const int *v, int n, int x) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (v[mid] == x) return 1;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return 0;
}

/* "files": each entry names layer{l}.{what}.npy of a stored layer and a declared kind (the
 * names are checked, never used: the reader builds them itself). */
static int check_files(const cJSON *files, al__dump_desc *d, const char *name, al_error *err) {
    if (!cJSON_IsArray(files))
        return al__err(err, AL_E_FORMAT, "%s: \"files\" must be a list", name);
    unsigned seen = 0;
    int i = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *fn = member(f, "file"), *fw = member(f, "what");
        if (!cJSON_IsObject(f) || !cJSON_IsString(fn) || !fn->valuestring)
            return al__err(err, AL_E_FORMAT, "%s: files[%d] must be an object with a \"file\" name",
                           name, i);
        const char *s = fn->valuestring;
        if (!*s || strchr(s, '/') || strchr(s, '\\') || !strcmp(s, ".") || !strcmp(s, ".."))
            return al__err(err, AL_E_FORMAT,
                           "%s: files[%d]: '%.200s' is not a file name in the dump's directory "
                           "(arrays are read from the directory itself: no '/', '.' or '..')",
                           name, i, s);
        char where[32];
        snprintf(where, sizeof where, "files[%d].", i);
        int layer, rc = json_int(f, "layer", where, 1, 0, 0, d->n_layer - 1, &layer, name, err);
        if (rc) return rc;
        int w = cJSON_IsString(fw) ? what_index(fw->valuestring) : -1;
        if (w < 0)
            return al__err(err, AL_E_FORMAT,
                           "%s: files[%d].what must be one of q, k, v, logits, weights, hidden, "
                           "embed",
                           name, i);
        char want[64];
        al__dump_file_name(layer, w, want, sizeof want);
        if (strcmp(s, want))
            return al__err(err, AL_E_FORMAT,
                           "%s: files[%d]: '%.200s' holds layer %d %s, which a dump names %s", name,
                           i, s, layer, al__dump_what[w], want);
        if (!in_list(d->layers, d->n_layers, layer))
            return al__err(err, AL_E_FORMAT, "%s: files[%d]: layer %d is not a stored layer", name,
                           i, layer);
        if (d->arrays && !(d->arrays & (1u << w)))
            return al__err(err, AL_E_FORMAT, "%s: files[%d]: %s is not among the arrays declared",
                           name, i, al__dump_what[w]);
        seen |= 1u << w;
        i++;
    }
    if (!d->arrays) d->arrays = seen;
    return 0;
}

/* "sliding_window": {"of_layer": [n_layer] windows >= 0} (absent or null: none); causal only. */
static int parse_windows(const cJSON *sw, al__dump_desc *d, const char *name, al_error *err) {
    if (!sw || cJSON_IsNull(sw)) return 0;
    const cJSON *ol = cJSON_IsObject(sw) ? member(sw, "of_layer") : NULL;
    if (!cJSON_IsArray(ol) || cJSON_GetArraySize(ol) != d->n_layer)
        return al__err(err, AL_E_FORMAT,
                       "%s: \"sliding_window\" must be {\"of_layer\": [one window per layer, "
                       "%d of them]}",
                       name, d->n_layer);
    if (!(d->window = al__calloc((size_t)d->n_layer, sizeof(int), "windows", err)))
        return AL_E_NOMEM;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ol) {
        double x = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!isfinite(x) || x != floor(x) || x < 0 || x > AL__DUMP_MAX_DIM)
            return al__err(err, AL_E_FORMAT,
                           "%s: sliding_window.of_layer[%d] must be an integer in 0..%d (0 = none)",
                           name, i, AL__DUMP_MAX_DIM);
        if (x > 0 && !d->causal)
            return al__err(err, AL_E_FORMAT,
                           "%s: sliding_window.of_layer[%d] = %g, but a sliding window needs a "
                           "causal model (model.causal is false)",
                           name, i, x);
        d->window[i++] = (int)x;
    }
    return 0;
}

static int parse_root(const cJSON *j, const char *name, al__dump_desc *d, al_error *err) {
    if (!cJSON_IsObject(j)) return al__err(err, AL_E_FORMAT, "%s: not a JSON object", name);
    const cJSON *schema = member(j, "schema"), *command = member(j, "command");
    const cJSON *opts = NULL;
    if (schema) {
        if (!cJSON_IsString(schema) || !schema->valuestring)
            return al__err(err, AL_E_FORMAT, "%s: \"schema\" must be a string", name);
        if (strcmp(schema->valuestring, AL__DUMP_SCHEMA))
            return al__err(err, AL_E_UNSUPPORTED,
                           "%s: schema '%.80s' is not supported (this attnlim reads %s)", name,
                           schema->valuestring, AL__DUMP_SCHEMA);
    } else if (cJSON_IsString(command) && command->valuestring &&
               !strcmp(command->valuestring, "capture")) {
        d->from_capture = 1;
        opts = member(j, "options");
        if (!cJSON_IsObject(opts))
            return al__err(err, AL_E_FORMAT, "%s: a capture manifest without its \"options\"",
                           name);
    } else {
        return al__err(err, AL_E_FORMAT,
                       "%s: not an attention dump manifest (no \"schema\": \"%s\", and not "
                       "written by `attnlim capture`)",
                       name, AL__DUMP_SCHEMA);
    }
    const cJSON *model = member(j, "model");
    if (!cJSON_IsObject(model))
        return al__err(err, AL_E_FORMAT,
                       "%s: \"model\" must be an object (n_layer, n_head, d_head, causal, ...)",
                       name);
    const long MAX = AL__DUMP_MAX_DIM;
    int rc;
    if ((rc = json_int(model, "n_layer", "model.", 1, 0, 1, MAX, &d->n_layer, name, err)) ||
        (rc = json_int(model, "n_head", "model.", 1, 0, 1, MAX, &d->n_head, name, err)) ||
        (rc = json_int(model, "n_kv_head", "model.", 0, d->n_head, 1, d->n_head, &d->n_kv_head,
                       name, err)) ||
        (rc = json_int(model, "d_head", "model.", 1, 0, 1, MAX, &d->d_head, name, err)))
        return rc;
    if (d->n_head % d->n_kv_head)
        return al__err(err, AL_E_FORMAT,
                       "%s: model.n_head %d is not a multiple of model.n_kv_head %d", name,
                       d->n_head, d->n_kv_head);
    long dm = (long)d->n_head * d->d_head;
    if ((rc = json_int(model, "d_model", "model.", dm > MAX, dm > MAX ? 0 : (int)dm, 1, MAX,
                       &d->d_model, name, err)) ||
        (rc = json_int(model, "vocab_size", "model.", 0, 0, 1, INT32_MAX, &d->vocab_size, name,
                       err)))
        return rc;
    const cJSON *causal = member(model, "causal");
    if (!cJSON_IsBool(causal))
        return al__err(err, AL_E_FORMAT,
                       "%s: \"model.causal\" must be true (a decoder: row t sees keys j <= t) or "
                       "false (an encoder)",
                       name);
    d->causal = cJSON_IsTrue(causal);
    const cJSON *nm = member(model, "name");
    if (nm && !(cJSON_IsString(nm) && nm->valuestring))
        return al__err(err, AL_E_FORMAT, "%s: \"model.name\" must be a string", name);
    if (nm) {
        snprintf(d->name, sizeof d->name, "%s", nm->valuestring);
        for (char *c = d->name; *c; c++) /* printed in reports and on terminals */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    }
    if ((rc = json_int(j, d->from_capture ? "length" : "T", "", 1, 0, 1, MAX, &d->T, name, err)))
        return rc;
    const cJSON *ids = member(j, "token_ids");
    if (ids && !cJSON_IsNull(ids)) {
        if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != d->T)
            return al__err(err, AL_E_FORMAT, "%s: \"token_ids\" must be a list of T = %d ids", name,
                           d->T);
        if (!(d->token_ids = al__malloc(sizeof(int32_t) * (size_t)d->T, "token ids", err)))
            return AL_E_NOMEM;
        int i = 0;
        const cJSON *e;
        long vmax = d->vocab_size ? d->vocab_size - 1 : INT32_MAX;
        cJSON_ArrayForEach(e, ids) {
            double x = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            if (!isfinite(x) || x != floor(x) || x < 0 || x > (double)vmax)
                return al__err(err, AL_E_FORMAT, "%s: token_ids[%d] must be an integer in 0..%ld%s",
                               name, i, vmax, d->vocab_size ? " (model.vocab_size)" : "");
            d->token_ids[i++] = (int32_t)x;
        }
    }
    const cJSON *src = d->from_capture ? opts : j;
    const cJSON *ls = member(src, "layers"), *hs = member(src, "heads");
    const char *lkey = d->from_capture ? "options.layers" : "layers";
    const char *hkey = d->from_capture ? "options.heads" : "heads";
    if (ls || d->from_capture) {
        if ((rc = json_index_list(ls, lkey, d->n_layer, &d->layers, &d->n_layers, name, err)))
            return rc;
    } else {
        if (!(d->layers = al__malloc(sizeof(int) * (size_t)d->n_layer, "layers", err)))
            return AL_E_NOMEM;
        for (int i = 0; i < d->n_layer; i++) d->layers[i] = i;
        d->n_layers = d->n_layer;
    }
    if (hs || d->from_capture) {
        if ((rc = json_index_list(hs, hkey, d->n_head, &d->heads, &d->n_heads, name, err)))
            return rc;
    } else {
        if (!(d->heads = al__malloc(sizeof(int) * (size_t)d->n_head, "heads", err)))
            return AL_E_NOMEM;
        for (int i = 0; i < d->n_head; i++) d->heads[i] = i;
        d->n_heads = d->n_head;
    }
    const cJSON *wf = member(j, "weights_sum_to_one");
    if (wf && !cJSON_IsBool(wf))
        return al__err(err, AL_E_FORMAT, "%s: \"weights_sum_to_one\" must be true or false", name);
    d->weights_free = wf && cJSON_IsFalse(wf);
    const cJSON *ar = member(src, d->from_capture ? "what" : "arrays");
    if ((ar || d->from_capture) &&
        (rc = json_kinds(ar, d->from_capture ? "options.what" : "arrays", &d->arrays, name, err)))
        return rc;
    if ((rc = parse_windows(member(j, "sliding_window"), d, name, err))) return rc;
    const cJSON *files = member(j, "files");
    if (files && (rc = check_files(files, d, name, err))) return rc;
    if (!(d->model_json = cJSON_Duplicate(model, 1)))
        return al__err(err, AL_E_NOMEM, "%s: out of memory copying \"model\"", name);
    return 0;
}

int al__dump_parse(const char *text, size_t len, const char *name, al__dump_desc *d,
                   al_error *err) {
    memset(d, 0, sizeof *d);
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", name);
    int rc = al__json_check_unique(j, name, err);
    if (!rc) rc = parse_root(j, name, d, err);
    cJSON_Delete(j);
    if (rc) al__dump_desc_free(d);
    return rc;
}

void al__dump_desc_free(al__dump_desc *d) {
    if (!d) return;
    free(d->token_ids);
    free(d->layers);
    free(d->heads);
    free(d->window);
    cJSON_Delete(d->model_json);
    memset(d, 0, sizeof *d);
}

/* ---- the arrays ------------------------------------------------------------------------------ */

typedef struct dump_impl {
    al__dump_desc d;
    char dir[PATH_MAX];
    char **files; /* [n_files]: manifest.json, then every array */
    int n_files;
    unsigned stored; /* kinds held for every stored layer */
    int32_t *tokens; /* [T]: the token ids, or zeros */
    int *kv_head;    /* [n_head] */
    int *pos;        /* [n_head]: index of head h in the arrays, -1 if not stored */
    int dtypes;      /* 1: float32 seen, 2: float64 seen */
} dump_impl;

static void array_path(const dump_impl *p, int layer, int w, char *buf, size_t cap) {
    char name[64];
    al__dump_file_name(layer, w, name, sizeof name);
    snprintf(buf, cap, "%s/%s", p->dir, name);
}

/* Layer l's window (0 = none) and the first key row t sees. */
static int win_of(const al__dump_desc *d, int l) {
    return d->window ? d->window[l] : 0;
}

static double at(const al_array *a, size_t i) {
    return a->dtype == AL_F64 ? ((const double *)a->data)[i] : ((const float *)a->data)[i];
}

/* Reads layer l's array of kind w and checks it against the manifest: the reader's checks
 * (a .npy of float32 or float64), the shape, and finite values outside the causal mask. */
/* Stored weights are what they claim: every masked entry (above the diagonal of a causal dump)
 * exactly 0, every visible entry >= 0 and every row summing to 1 within AL__DUMP_SUM_TOL
 * (float32 rounding of rows of thousands of keys stays far below it); the manifest's
 * "weights_sum_to_one": false (a normalizer that is not a distribution, sa-softmax) drops only
 * the two last. The first bad row is named with its layer, head and row. */
#define AL__DUMP_SUM_TOL 1e-3
static int check_distribution(const dump_impl *p, const al_array *a, int l, int win,
                              const char *path, al_error *err) {
    const al__dump_desc *d = &p->d;
    const size_t T = (size_t)d->T;
    for (size_t r = 0; r < (size_t)d->n_heads * T; r++) {
        size_t t = r % T, lo = (size_t)al__row_lo((int64_t)t, d->causal, win);
        size_t n = d->causal ? t + 1 : T;
        double sum = 0, mn = INFINITY, mk = 0;
        size_t neg = 0, mc = T;
        for (size_t c = 0; c < lo; c++) /* before the window: masked, stored as 0 */
            if (!(at(a, r * T + c) == 0))
                return al__err(err, AL_E_FORMAT,
                               "%s: layer %d, head %d, row %zu: weight %g at column %zu, before "
                               "the layer's sliding window of %d keys (columns %zu..%zu); "
                               "masked weights must be 0",
                               path, l, d->heads[r / T], t, at(a, r * T + c), c, win, lo, t);
        for (size_t c = lo; c < n; c++) {
            double x = at(a, r * T + c);
            sum += x;
            if (x < mn) mn = x, neg = c;
        }
        for (size_t c = n; c < T && mc == T; c++) /* masked: exactly 0 (NaN included) */
            if (!((mk = at(a, r * T + c)) == 0)) mc = c;
        char what[160];
        if (mc < T)
            snprintf(what, sizeof what,
                     "masked weight at column %zu (above the diagonal of a causal dump) is %g, "
                     "not 0",
                     mc, mk);
        else if (d->weights_free)
            continue;
        else if (mn < 0)
            snprintf(what, sizeof what, "weight %g at column %zu is negative", mn, neg);
        else if (fabs(sum - 1) > AL__DUMP_SUM_TOL)
            snprintf(what, sizeof what, "the row sums to %.9g, not 1 (within %g)", sum,
                     AL__DUMP_SUM_TOL);
        else
            continue;
        return al__err(err, AL_E_FORMAT,
                       "%s: layer %d, head %d, row %zu: %s; stored attention weights must be rows "
                       "of a distribution, zero where masked (a normalizer that is not a "
                       "distribution is declared with \"weights_sum_to_one\": false in "
                       "manifest.json)",
                       path, l, d->heads[r / T], t, what);
    }
    return 0;
}

static int read_array(const dump_impl *p, int l, int w, al_array *a, al_error *err) {
    const al__dump_desc *d = &p->d;
    char path[PATH_MAX + 80];
    array_path(p, l, w, path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0) {
        char held[96];
        kinds_text(p->stored, ", ", held, sizeof held);
        if (d->arrays)
            return al__err(err, AL_E_NOTFOUND,
                           "%s: missing: the manifest declares %s for every stored layer, layer "
                           "%d included",
                           path, held, l);
        return al__err(err, AL_E_NOTFOUND,
                       "%s: missing: layer %d holds %s, so every stored layer must (layer %d "
                       "does not)",
                       path, d->layers[0], held, l);
    }
    if (!S_ISREG(st.st_mode)) return al__err(err, AL_E_FORMAT, "%s: not a regular file", path);
    int rc = al_npy_read(path, a, err);
    if (rc) return rc;
    int64_t want[3];
    int nd;
    const char *dims;
    if (w <= W_V)
        nd = 3, want[0] = d->n_heads, want[1] = d->T, want[2] = d->d_head,
        dims = "stored heads, T, d_head";
    else if (w <= W_WEIGHTS)
        nd = 3, want[0] = d->n_heads, want[1] = d->T, want[2] = d->T, dims = "stored heads, T, T";
    else
        nd = 2, want[0] = d->T, want[1] = d->d_model, dims = "T, d_model";
    int same = a->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = a->shape[i] == want[i];
    if (!same) {
        char got[160] = "", exp[96];
        size_t k = 0;
        for (int i = 0; i < a->ndim && k < sizeof got - 24; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%lld", i ? ", " : "",
                                  (long long)a->shape[i]);
        if (nd == 3)
            snprintf(exp, sizeof exp, "%lld, %lld, %lld", (long long)want[0], (long long)want[1],
                     (long long)want[2]);
        else
            snprintf(exp, sizeof exp, "%lld, %lld", (long long)want[0], (long long)want[1]);
        al_array_free(a);
        return al__err(err, AL_E_FORMAT, "%s: shape [%s], but the manifest implies [%s] (%s)", path,
                       got, exp, dims);
    }
    /* finite, masked entries aside */
    size_t rows = (size_t)(w <= W_WEIGHTS ? d->n_heads * (size_t)d->T : (size_t)d->T);
    size_t cols = (size_t)a->shape[nd - 1];
    int masked = d->causal && (w == W_LOGITS || w == W_WEIGHTS), win = win_of(d, l);
    size_t bad = 0, first_r = 0, first_c = 0;
    double first_v = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t t = w <= W_WEIGHTS ? r % (size_t)d->T : r;
        size_t n = masked ? t + 1 : cols, lo = masked ? (size_t)al__row_lo((int64_t)t, 1, win) : 0;
        for (size_t c = lo; c < n; c++) {
            double x = at(a, r * cols + c);
            if (isfinite(x)) continue;
            if (!bad++) first_r = r, first_c = c, first_v = x;
        }
    }
    if (bad) {
        char where[128];
        if (w <= W_WEIGHTS)
            snprintf(where, sizeof where, "head %d (index %zu), row %zu, column %zu",
                     d->heads[first_r / (size_t)d->T], first_r / (size_t)d->T,
                     first_r % (size_t)d->T, first_c);
        else
            snprintf(where, sizeof where, "row %zu, column %zu", first_r, first_c);
        al_array_free(a);
        return al__err(err, AL_E_RANGE,
                       "%s: %zu NaN/Inf values (first at %s: %g); a dump's arrays must be finite "
                       "(%s)",
                       path, bad, where, first_v,
                       masked ? "entries above the diagonal and before a sliding window are "
                                "masked"
                              : "nothing is masked");
    }
    if (w == W_WEIGHTS && (rc = check_distribution(p, a, l, win, path, err))) al_array_free(a);
    return rc;
}

/* ---- what a request reads -------------------------------------------------------------------- */

/* The stored kinds a request for `what` reads (*load), or an error naming the first file
 * missing. Logits can be derived from q and k, weights from logits. */
static int arrays_for(const dump_impl *p, unsigned what, unsigned *load, al_error *err) {
    const unsigned S = p->stored, QK = AL_CAP_Q | AL_CAP_K;
    unsigned ld = what & (AL_CAP_Q | AL_CAP_K | AL_CAP_V | AL_CAP_HIDDEN | AL_CAP_EMBED);
    unsigned missing = ld & ~S;
    int need_z = (what & AL_CAP_LOGITS) || ((what & AL_CAP_WEIGHTS) && !(S & AL_CAP_WEIGHTS));
    if (what & AL_CAP_WEIGHTS && S & AL_CAP_WEIGHTS) ld |= AL_CAP_WEIGHTS;
    if (need_z) {
        if (S & AL_CAP_LOGITS)
            ld |= AL_CAP_LOGITS;
        else if ((S & QK) == QK)
            ld |= QK;
        else
            missing |= (what & AL_CAP_LOGITS) ? AL_CAP_LOGITS : AL_CAP_WEIGHTS;
    }
    if (what & AL_CAP_RESIDUAL)
        return al__err(err, AL_E_NOTFOUND,
                       "%s: missing: this run reads the residual stream (the layer input before "
                       "its first norm), which an attention dump does not hold (it holds q, k, v, "
                       "logits, weights, hidden, embed at most)",
                       p->dir);
    *load = ld;
    if (!missing) return 0;
    int w = 0;
    while (!(missing & (1u << w))) w++;
    char path[PATH_MAX + 80], need[96], held[96], derive[160] = "";
    array_path(p, p->d.layers[0], w, path, sizeof path);
    kinds_text(what, ",", need, sizeof need);
    kinds_text(S, ", ", held, sizeof held);
    if (w == W_LOGITS || w == W_WEIGHTS)
        snprintf(derive, sizeof derive, " (%s can also be derived from %s)", al__dump_what[w],
                 w == W_LOGITS ? "q and k" : "logits, or from q and k");
    return al__err(err, AL_E_NOTFOUND,
                   "%s: missing: this run reads %s of every layer%s, and the dump holds %s; "
                   "`attnlim capture --what %s` (or attnlim.write_dump with those arrays) writes "
                   "them",
                   path, need, derive, held, need);
}

static int check_window(const dump_impl *p, int T, al_error *err) {
    if (T < 1 || T > p->d.T)
        return al__err(err, AL_E_INVALID,
                       "%s: a window of %d tokens, but the dump holds attention over T = %d",
                       p->dir, T, p->d.T);
    if (!p->d.causal && T != p->d.T)
        return al__err(
            err, AL_E_INVALID,
            "%s: a bidirectional dump serves only its whole window (L = T = %d, not %d): "
            "every row of a shorter window would see other keys",
            p->dir, p->d.T, T);
    return 0;
}

/* Layers and heads the request selects, all stored: heads[n_sel] (query heads), *load. */
static int select_request(const dump_impl *p, int T, const al_capture_request *req, int *heads,
                          int *n_sel, unsigned *load, al_error *err) {
    const al__dump_desc *d = &p->d;
    int rc = check_window(p, T, err);
    if (rc) return rc;
    *n_sel = 0;
    for (int l = 0; l < d->n_layer; l++)
        if ((!req->layers || req->layers[l]) && !in_list(d->layers, d->n_layers, l))
            return al__err(err, AL_E_NOTFOUND,
                           "%s: layer %d is not in the dump (it holds %d of %d layers%s); `attnlim "
                           "capture --layers all` writes every layer",
                           p->dir, l, d->n_layers, d->n_layer,
                           req->layers ? "" : ", and the run reads all");
    for (int h = 0; h < d->n_head; h++) {
        if (req->heads && !req->heads[h]) continue;
        if (p->pos[h] < 0)
            return al__err(err, AL_E_NOTFOUND,
                           "%s: head %d is not in the dump (it holds %d of %d heads%s); `attnlim "
                           "capture --heads all` writes every head",
                           p->dir, h, d->n_heads, d->n_head,
                           req->heads ? "" : ", and the run reads all");
        heads[(*n_sel)++] = h;
    }
    return arrays_for(p, req->what, load, err);
}

static int dump_check(al_model *m, int T, const al_capture_request *req, al_error *err) {
    dump_impl *p = m->impl;
    if (!req || !req->fn || !req->what) return check_window(p, T, err);
    int *heads = al__malloc(sizeof(int) * (size_t)p->d.n_head, "heads", err);
    if (!heads) return AL_E_NOMEM;
    int n_sel;
    unsigned load;
    int rc = select_request(p, T, req, heads, &n_sel, &load, err);
    free(heads);
    return rc;
}

/* ---- the forward ----------------------------------------------------------------------------- */

/* Rows [0, T) of stored head index hp of a [n_heads, dT, cols] array, first n columns of each,
 * into out [T, n] as float, or as double into dout. */
static void take_rows(const al_array *a, int hp, int dT, size_t cols, int T, size_t n, float *out,
                      double *dout) {
    size_t base = (size_t)hp * dT * cols;
    for (int t = 0; t < T; t++)
        for (size_t c = 0; c < n; c++) {
            double x = at(a, base + (size_t)t * cols + c);
            if (out) out[(size_t)t * n + c] = (float)x;
            if (dout) dout[(size_t)t * n + c] = x;
        }
}

static int dump_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                        const al__fwd *f, float *logits, float *final_hidden, al_error *err) {
    (void)f; /* a dump replays the layers the capture asks for, and nothing else */
    dump_impl *p = m->impl;
    const al__dump_desc *d = &p->d;
    if (logits || final_hidden)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: an attention dump holds attention, not a model: it has no output "
                       "logits or hidden states (perplexity and embed need a model)",
                       p->dir);
    int rc = check_window(p, T, err);
    if (rc) return rc;
    if (d->token_ids)
        for (int t = 0; t < T; t++)
            if (tokens[t] != d->token_ids[t])
                return al__err(err, AL_E_INVALID,
                               "%s: the dump holds attention for other tokens: position %d is "
                               "token %d in its manifest, %d in the request",
                               p->dir, t, (int)d->token_ids[t], (int)tokens[t]);
    if (!req || !req->fn || !req->what) return 0;
    const unsigned what = req->what;
    int *heads = al__malloc(sizeof(int) * (size_t)d->n_head, "heads", err);
    if (!heads) return AL_E_NOMEM;
    int n_sel = 0;
    unsigned load = 0;
    if ((rc = select_request(p, T, req, heads, &n_sel, &load, err))) {
        free(heads);
        return rc;
    }
    const int D = d->d_head, dT = d->T, C = d->d_model;
    size_t nqkv = (size_t)n_sel * T * D, ntt = (size_t)n_sel * T * T, nrow = (size_t)T * C;
    float *buf[AL__DUMP_N_WHAT] = {0};
    for (int w = 0; w < AL__DUMP_N_WHAT && !rc; w++) {
        if (!(what & (1u << w))) continue;
        size_t n = w <= W_V ? nqkv : w <= W_WEIGHTS ? ntt : nrow;
        if (!(buf[w] = al__malloc(sizeof(float) * (n ? n : 1), "dump capture", err)))
            rc = AL_E_NOMEM;
    }
    /* logits derived from q and k, or weights from logits: per thread [T, T] + 2 [T, D] */
    int derive_z = ((what & AL_CAP_LOGITS) && !(load & AL_CAP_LOGITS)) ||
                   ((what & AL_CAP_WEIGHTS) && !(load & AL_CAP_WEIGHTS));
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt < 1) nt = 1;
    size_t per = (size_t)T * T + 2 * (size_t)T * D;
    double *scr = NULL;
    if (!rc && derive_z && !(scr = al__malloc(sizeof(double) * per * nt, "dump scratch", err)))
        rc = AL_E_NOMEM;
    for (int li = 0; li < d->n_layers && !rc; li++) {
        int l = d->layers[li];
        if (req->layers && !req->layers[l]) continue;
        if ((rc = al__poll("forward", l, d->n_layers, err))) break; /* the caller may stop here */
        al_array arr[AL__DUMP_N_WHAT];
        memset(arr, 0, sizeof arr);
        for (int w = 0; w < AL__DUMP_N_WHAT && !rc; w++)
            if (load & (1u << w)) rc = read_array(p, l, w, &arr[w], err);
        if (rc) {
            for (int w = 0; w < AL__DUMP_N_WHAT; w++) al_array_free(&arr[w]);
            break;
        }
        /* the direct copies: the selected heads, the first T rows (and columns) */
        for (int s = 0; s < n_sel; s++) {
            int hp = p->pos[heads[s]];
            for (int w = W_Q; w <= W_V; w++)
                if (buf[w])
                    take_rows(&arr[w], hp, dT, (size_t)D, T, (size_t)D, buf[w] + (size_t)s * T * D,
                              NULL);
            for (int w = W_LOGITS; w <= W_WEIGHTS; w++) {
                if (!buf[w] || !(load & (1u << w))) continue;
                float *o = buf[w] + (size_t)s * T * T;
                take_rows(&arr[w], hp, dT, (size_t)dT, T, (size_t)T, o, NULL);
                if (d->causal) /* the masked entries as capture writes them */
                    for (int t = 0; t < T; t++) {
                        int lo = (int)al__row_lo(t, 1, win_of(d, l));
                        for (int j = 0; j < T; j++)
                            if (j < lo || j > t)
                                o[(size_t)t * T + j] = w == W_LOGITS ? -INFINITY : 0.0f;
                    }
            }
        }
        for (int w = W_HIDDEN; w <= W_EMBED; w++)
            if (buf[w]) take_rows(&arr[w], 0, dT, (size_t)C, T, (size_t)C, buf[w], NULL);
        if (derive_z) {
            al__blas_single();
            const double scale = 1.0 / sqrt((double)D);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)
            for (int s = 0; s < n_sel; s++) {
                int hp = p->pos[heads[s]];
                double *z = scr + per * (size_t)omp_get_thread_num(), *q = z + (size_t)T * T,
                       *k = q + (size_t)T * D;
                if (load & AL_CAP_LOGITS) {
                    take_rows(&arr[W_LOGITS], hp, dT, (size_t)dT, T, (size_t)T, NULL, z);
                } else {
                    take_rows(&arr[W_Q], hp, dT, (size_t)D, T, (size_t)D, NULL, q);
                    take_rows(&arr[W_K], hp, dT, (size_t)D, T, (size_t)D, NULL, k);
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, D, scale, q, D, k, D,
                                0.0, z, T);
                }
                float *zo = buf[W_LOGITS] && !(load & AL_CAP_LOGITS)
                                ? buf[W_LOGITS] + (size_t)s * T * T
                                : NULL;
                float *wo = buf[W_WEIGHTS] && !(load & AL_CAP_WEIGHTS)
                                ? buf[W_WEIGHTS] + (size_t)s * T * T
                                : NULL;
                for (int t = 0; t < T; t++) { /* the row's keys lo..n-1 */
                    int n = d->causal ? t + 1 : T, lo = (int)al__row_lo(t, d->causal, win_of(d, l));
                    double *zr = z + (size_t)t * T;
                    if (zo)
                        for (int j = 0; j < T; j++)
                            zo[(size_t)t * T + j] = j >= lo && j < n ? (float)zr[j] : -INFINITY;
                    if (!wo) continue;
                    double mx = zr[lo], sum = 0;
                    for (int j = lo + 1; j < n; j++) mx = zr[j] > mx ? zr[j] : mx;
                    for (int j = lo; j < n; j++) sum += exp(zr[j] - mx);
                    for (int j = 0; j < T; j++)
                        wo[(size_t)t * T + j] =
                            j >= lo && j < n ? (float)(exp(zr[j] - mx) / sum) : 0.0f;
                }
            }
        }
        for (int w = 0; w < AL__DUMP_N_WHAT; w++) al_array_free(&arr[w]);
        al_capture cap = {.layer = l,
                          .T = T,
                          .n_head = d->n_head,
                          .n_kv_head = d->n_kv_head,
                          .d_head = D,
                          .d_model = C,
                          .causal = d->causal,
                          .window = win_of(d, l),
                          .n_sel = n_sel,
                          .heads = heads,
                          .kv_head = p->kv_head,
                          .q = buf[W_Q],
                          .k = buf[W_K],
                          .v = buf[W_V],
                          .logits = buf[W_LOGITS],
                          .weights = buf[W_WEIGHTS],
                          .hidden = buf[W_HIDDEN],
                          .embed = buf[W_EMBED]};
        al_error local = {0};
        al_error *e = err ? err : &local;
        e->msg[0] = 0;
        rc = req->fn(req->user, &cap, e);
        if (rc) {
            if (rc < 0 || rc > AL_E_CANCELLED) rc = AL_E_CANCELLED;
            if (!e->msg[0])
                al__err(e, (al_code)rc, "capture observer stopped the forward at layer %d", l);
            e->code = (al_code)rc;
        }
    }
    for (int w = 0; w < AL__DUMP_N_WHAT; w++) free(buf[w]);
    free(scr);
    free(heads);
    return rc;
}

/* ---- the family ------------------------------------------------------------------------------ */

static void dump_destroy(al_model *m) {
    dump_impl *p = m->impl;
    if (!p) return;
    al__dump_desc_free(&p->d);
    for (int i = 0; i < p->n_files; i++) free(p->files[i]);
    free(p->files);
    free(p->tokens);
    free(p->kv_head);
    free(p->pos);
    free(p);
    m->impl = NULL;
}

static int dump_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    dump_impl *p = m->impl;
    *out = NULL;
    return al__err(err, AL_E_UNSUPPORTED,
                   "%s: an attention dump has no tokenizer: its tokens are the %d it holds "
                   "attention for (no --corpus)",
                   p->dir, p->d.T);
}

static int dump_tokens(al_model *m, const int32_t **ids, int *n, int *known, al_error *err) {
    (void)err;
    dump_impl *p = m->impl;
    *ids = p->tokens, *n = p->d.T, *known = p->d.token_ids != NULL;
    return 0;
}

/* The files of a dump: the manifest, then every array it holds. */
static int dump_files(al_model *m, al__model_files *fs, al_error *err) {
    const dump_impl *p = m->impl;
    int rc = 0;
    for (int i = 0; !rc && i < p->n_files; i++)
        rc = al__model_files_add(fs, p->files[i], i ? "array" : "manifest", err);
    return rc;
}

static int dump_layer_window(const al_model *m, int layer) {
    return win_of(&((const dump_impl *)m->impl)->d, layer);
}

static const al_model_vtable DUMP_VT = {.forward = dump_forward,
                                        .destroy = dump_destroy,
                                        .tokenizer = dump_tokenizer,
                                        .tokens = dump_tokens,
                                        .check = dump_check,
                                        .files = dump_files,
                                        .describe = al__dump_json,
                                        .layer_window = dump_layer_window};

static int add_file(dump_impl *p, const char *path, al_error *err) {
    char **g = realloc(p->files, sizeof(char *) * (size_t)(p->n_files + 1));
    if (!g) return al__err(err, AL_E_NOMEM, "out of memory listing the dump's files");
    p->files = g;
    if (!(p->files[p->n_files] = strdup(path)))
        return al__err(err, AL_E_NOMEM, "out of memory listing the dump's files");
    p->n_files++;
    return 0;
}

int al__dump_is_dump_dir(const char *dir) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!al__is_file(path)) return 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!al__is_file(path)) return 1;
    /* both: the manifest decides (a few bytes suffice to tell) */
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = NULL;
    size_t len;
    al_error e = {0};
    if (al__read_file(path, AL__DUMP_MAX_MANIFEST, &text, &len, &e)) return 0;
    int yes = strstr(text, "\"" AL__DUMP_SCHEMA "\"") || strstr(text, "\"capture\"");
    free(text);
    return yes;
}

int al__dump_open(al_model *m, const char *dir, al_error *err) {
    dump_impl *p = al__calloc(1, sizeof *p, "dump", err);
    if (!p) return AL_E_NOMEM;
    m->impl = p;
    m->vt = &DUMP_VT;
    /* files and messages use the path as given (without trailing slashes) */
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    if (dl >= sizeof p->dir) return al__err(err, AL_E_INVALID, "%s: path too long", dir);
    memcpy(p->dir, dir, dl);
    p->dir[dl] = 0;
    char manifest[PATH_MAX + 32];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", p->dir);
    char *text = NULL;
    size_t len = 0;
    int rc;
    if (!al__is_file(manifest))
        return al__err(err, AL_E_NOTFOUND,
                       "%s: no manifest.json: an attention dump is a directory with manifest.json "
                       "and layer{l}.{what}.npy arrays (docs/dumps.md)",
                       dir);
    if ((rc = al__read_file(manifest, AL__DUMP_MAX_MANIFEST, &text, &len, err))) return rc;
    rc = al__dump_parse(text, len, manifest, &p->d, err);
    free(text);
    if (rc) return rc;
    al__dump_desc *d = &p->d;
    if ((rc = add_file(p, manifest, err))) return rc;
    /* the kinds held: declared, or those present for the first stored layer */
    p->stored = d->arrays;
    char path[PATH_MAX + 80];
    if (!p->stored)
        for (int w = 0; w < AL__DUMP_N_WHAT; w++) {
            array_path(p, d->layers[0], w, path, sizeof path);
            if (al__is_file(path)) p->stored |= 1u << w;
        }
    if (!p->stored)
        return al__err(err, AL_E_NOTFOUND,
                       "%s: no arrays: the manifest declares none (\"arrays\") and there is no "
                       "layer%d.{q,k,v,logits,weights,hidden,embed}.npy",
                       dir, d->layers[0]);
    /* every array read once and checked */
    for (int li = 0; li < d->n_layers; li++)
        for (int w = 0; w < AL__DUMP_N_WHAT; w++) {
            if (!(p->stored & (1u << w))) continue;
            al_array a = {0};
            if ((rc = read_array(p, d->layers[li], w, &a, err))) return rc;
            p->dtypes |= a.dtype == AL_F64 ? 2 : 1;
            al_array_free(&a);
            array_path(p, d->layers[li], w, path, sizeof path);
            if ((rc = add_file(p, path, err))) return rc;
        }
    if (!(p->tokens = al__calloc((size_t)d->T, sizeof(int32_t), "dump tokens", err)) ||
        !(p->kv_head = al__malloc(sizeof(int) * (size_t)d->n_head, "kv heads", err)) ||
        !(p->pos = al__malloc(sizeof(int) * (size_t)d->n_head, "head positions", err)))
        return AL_E_NOMEM;
    if (d->token_ids) memcpy(p->tokens, d->token_ids, sizeof(int32_t) * (size_t)d->T);
    for (int h = 0; h < d->n_head; h++) {
        p->kv_head[h] = h / (d->n_head / d->n_kv_head);
        p->pos[h] = -1;
    }
    for (int i = 0; i < d->n_heads; i++) p->pos[d->heads[i]] = i;
    al_model_info *in = &m->info;
    snprintf(in->family, sizeof in->family, "dump");
    if (d->name[0]) {
        snprintf(in->name, sizeof in->name, "%s", d->name);
    } else {
        const char *b = strrchr(p->dir, '/');
        snprintf(in->name, sizeof in->name, "%s", b && b[1] ? b + 1 : p->dir);
    }
    snprintf(in->dtype, sizeof in->dtype, "%s",
             p->dtypes == 3   ? "f32+f64"
             : p->dtypes == 2 ? "f64"
                              : "f32");
    in->n_layer = d->n_layer;
    in->n_head = d->n_head;
    in->n_kv_head = d->n_kv_head;
    in->d_model = d->d_model;
    in->d_head = d->d_head;
    in->d_ff = 0;
    in->n_ctx = d->T;
    in->vocab_size = d->vocab_size ? d->vocab_size : INT32_MAX; /* unknown: any id */
    in->causal = d->causal;
    in->n_params = 0;
    return 0;
}

cJSON *al__dump_json(const al_model *m) {
    if (m->format != AL__FMT_DUMP || !m->impl) return NULL;
    const dump_impl *p = m->impl;
    const al__dump_desc *d = &p->d;
    cJSON *o = cJSON_CreateObject();
    char real[PATH_MAX];
    cJSON_AddStringToObject(o, "path", realpath(p->dir, real) ? real : p->dir);
    cJSON_AddStringToObject(o, "manifest_schema",
                            d->from_capture ? "attnlim capture manifest" : AL__DUMP_SCHEMA);
    cJSON_AddNumberToObject(o, "T", d->T);
    cJSON_AddBoolToObject(o, "token_ids", d->token_ids != NULL);
    cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(d->layers, d->n_layers));
    cJSON_AddItemToObject(o, "heads", cJSON_CreateIntArray(d->heads, d->n_heads));
    cJSON *a = cJSON_AddArrayToObject(o, "arrays");
    for (int w = 0; w < AL__DUMP_N_WHAT; w++)
        if (p->stored & (1u << w)) cJSON_AddItemToArray(a, cJSON_CreateString(al__dump_what[w]));
    cJSON_AddStringToObject(o, "derived",
                            "logits = q.k / sqrt(d_head) when not stored; weights = the row "
                            "softmax of the logits over the unmasked part when not stored");
    cJSON_AddItemToObject(o, "model", cJSON_Duplicate(d->model_json, 1));
    return o;
}
