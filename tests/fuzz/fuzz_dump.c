/* fuzz_dump.c: libFuzzer harness for attention dump manifests (src/dump.c, docs/dumps.md):
 * al__dump_parse on the input bytes, then the input as manifest.json of a dump directory beside
 * real arrays, opened as a model and replayed.
 *
 * LLVMFuzzerInitialize builds a private temporary tree once (T = 4, 2 heads, d_head 2,
 * d_model 4, float64 and float32 arrays, written by al_npy_write):
 *   <tmp>/outside.npy                       an array beside the dump (never read)
 *   <tmp>/d/layer0.{q,k,v,logits,weights,hidden,embed}.npy   [2, 4, 2] / [2, 4, 4] / [4, 4]
 *   <tmp>/d/layer1.{q,k,v}.npy              float32 [2, 4, 2]
 *   <tmp>/d/layer2.q.npy                    [1, 4, 2] (one head)
 *   <tmp>/d/layer3.logits.npy               a NaN below the diagonal (row 2, column 1)
 * Checks:
 *  - al__dump_parse: a failure's message starts with the name given; a success is in range:
 *    1 <= n_layer, n_head, d_head, d_model, T <= 2^20, n_kv_head divides n_head, layers and
 *    heads non-empty, increasing, inside [0, n_layer) and [0, n_head), token ids of length T in
 *    [0, 2^31) (below vocab_size when given), arrays only known kinds;
 *  - al_model_open on the directory: a failure's message names the directory (every file it
 *    reads is in it); a success agrees with the parse, lists only files of the directory
 *    (manifest.json and layer{l}.{what}.npy), and a forward over the dump's tokens (all layers
 *    and heads when stored, else the stored ones) hands the observer finite arrays of the right
 *    shapes, -inf / 0 above the diagonal of causal logits / weights, weight rows summing to 1
 *    when derived, and fails cleanly (naming the directory) when an array is missing. */
#include "dump.h"
#include "model.h"
#include "fuzz_files.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_root[256], g_dir[320], g_manifest[400];
static const char *const NAMES[] = {"layer0.q.npy",      "layer0.k.npy",       "layer0.v.npy",
                                    "layer0.logits.npy", "layer0.weights.npy", "layer0.hidden.npy",
                                    "layer0.embed.npy",  "layer1.q.npy",       "layer1.k.npy",
                                    "layer1.v.npy",      "layer2.q.npy",       "layer3.logits.npy"};
#define N_NAMES (sizeof NAMES / sizeof NAMES[0])

static void put_array(const char *dir, const char *name, al_dtype dt, int ndim, int64_t a,
                      int64_t b, int64_t c, double nan_at) {
    al_array x;
    int64_t shape[3] = {a, b, c};
    if (al_array_alloc(&x, dt, ndim, shape, NULL)) abort();
    int64_t n = al_array_numel(&x);
    for (int64_t i = 0; i < n; i++) {
        double v = sin(0.7 * (double)i + 0.3) * 1.5;
        if (dt == AL_F64)
            ((double *)x.data)[i] = v;
        else
            ((float *)x.data)[i] = (float)v;
    }
    if (nan_at >= 0) ((double *)x.data)[(int64_t)nan_at] = NAN;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (al_npy_write(path, &x, NULL)) abort();
    al_array_free(&x);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(g_root, sizeof g_root, "%s", fuzz_root("dump"));
    snprintf(g_dir, sizeof g_dir, "%s/d", g_root);
    snprintf(g_manifest, sizeof g_manifest, "%s/manifest.json", g_dir);
    if (mkdir(g_dir, 0700)) abort();
    put_array(g_root, "outside.npy", AL_F64, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer0.q.npy", AL_F64, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer0.k.npy", AL_F64, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer0.v.npy", AL_F64, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer0.logits.npy", AL_F64, 3, 2, 4, 4, -1);
    put_array(g_dir, "layer0.weights.npy", AL_F64, 3, 2, 4, 4, -1);
    put_array(g_dir, "layer0.hidden.npy", AL_F64, 2, 4, 4, 0, -1);
    put_array(g_dir, "layer0.embed.npy", AL_F64, 2, 4, 4, 0, -1);
    put_array(g_dir, "layer1.q.npy", AL_F32, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer1.k.npy", AL_F32, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer1.v.npy", AL_F32, 3, 2, 4, 2, -1);
    put_array(g_dir, "layer2.q.npy", AL_F64, 3, 1, 4, 2, -1);
    put_array(g_dir, "layer3.logits.npy", AL_F64, 3, 2, 4, 4, 2 * 4 + 1);
    return 0;
}

static int increasing_in(const int *v, int n, int hi) {
    if (n < 1) return 0;
    for (int i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= hi || (i && v[i] <= v[i - 1])) return 0;
    return 1;
}

static void check_desc(const al__dump_desc *d) {
    const int MAX = AL__DUMP_MAX_DIM;
    if (d->n_layer < 1 || d->n_layer > MAX || d->n_head < 1 || d->n_head > MAX || d->d_head < 1 ||
        d->d_head > MAX || d->d_model < 1 || d->d_model > MAX || d->T < 1 || d->T > MAX ||
        d->n_kv_head < 1 || d->n_head % d->n_kv_head)
        abort();
    if (!increasing_in(d->layers, d->n_layers, d->n_layer)) abort();
    if (!increasing_in(d->heads, d->n_heads, d->n_head)) abort();
    if (d->arrays >> AL__DUMP_N_WHAT) abort();
    if (d->token_ids)
        for (int t = 0; t < d->T; t++)
            if (d->token_ids[t] < 0 || (d->vocab_size && d->token_ids[t] >= d->vocab_size)) abort();
    if (!d->model_json) abort();
}

typedef struct seen {
    unsigned what;
    int layers;
    int derived_w; /* the dump holds no weights: the forward derives them (rows sum to 1) */
} seen;

static void check_array(const float *a, size_t rows, size_t cols, int T, int masked, float fill) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float x = a[r * cols + c];
            int above = masked && (int)c > (int)(r % (size_t)T);
            if (above ? !(x == fill) : !isfinite(x)) abort();
        }
}

static int observer(void *user, const al_capture *cap, al_error *err) {
    (void)err;
    seen *s = user;
    size_t T = (size_t)cap->T, n = (size_t)cap->n_sel, D = (size_t)cap->d_head;
    const float *qkv[3] = {cap->q, cap->k, cap->v};
    for (int i = 0; i < 3; i++)
        if (!!qkv[i] != !!(s->what & (1u << i))) abort();
    if (!!cap->logits != !!(s->what & AL_CAP_LOGITS) ||
        !!cap->weights != !!(s->what & AL_CAP_WEIGHTS) ||
        !!cap->hidden != !!(s->what & AL_CAP_HIDDEN) || !!cap->embed != !!(s->what & AL_CAP_EMBED))
        abort();
    for (int i = 0; i < 3; i++)
        if (qkv[i]) check_array(qkv[i], n * T, D, cap->T, 0, 0);
    if (cap->logits) check_array(cap->logits, n * T, T, cap->T, cap->causal, -INFINITY);
    if (cap->weights) {
        check_array(cap->weights, n * T, T, cap->T, cap->causal, 0.0f);
        for (size_t r = 0; s->derived_w && r < n * T; r++) { /* stored weights need not sum to 1 */
            double sum = 0;
            for (size_t c = 0; c < T; c++) sum += cap->weights[r * T + c];
            if (fabs(sum - 1) > 1e-5) abort();
        }
    }
    if (cap->hidden) check_array(cap->hidden, T, (size_t)cap->d_model, cap->T, 0, 0);
    if (cap->embed) check_array(cap->embed, T, (size_t)cap->d_model, cap->T, 0, 0);
    for (size_t i = 0; i < n; i++)
        if (cap->heads[i] < 0 || cap->heads[i] >= cap->n_head ||
            (i && cap->heads[i] <= cap->heads[i - 1]))
            abort();
    s->layers++;
    return 0;
}

static void starts_with(const char *msg, const char *prefix) {
    if (strncmp(msg, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "message does not start with %s: %s\n", prefix, msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* 1. the parser on the bytes */
    al__dump_desc d;
    al_error err = {0};
    int rc = al__dump_parse((const char *)data, size, "M", &d, &err);
    if (rc) {
        starts_with(err.msg, "M: ");
    } else {
        check_desc(&d);
        al__dump_desc_free(&d);
    }
    /* 2. the same bytes as the manifest of a directory of real arrays */
    fuzz_put(g_manifest, data, size);
    al_model *m = NULL;
    memset(&err, 0, sizeof err);
    rc = al_model_open(g_dir, &m, &err);
    if (rc) {
        starts_with(err.msg, g_dir);
        return 0;
    }
    const al_model_info *in = al_model_get_info(m);
    if (strcmp(in->family, "dump") || in->n_ctx < 1) abort();
    al__model_files fs;
    if (al__model_files_list(m, 0, &fs, &err)) abort();
    for (int i = 0; i < fs.n; i++) {
        starts_with(fs.f[i].path, g_dir);
        if (strchr(fs.f[i].path + strlen(g_dir) + 1, '/')) abort();
    }
    al__model_files_free(&fs);
    const int32_t *ids;
    int n, known;
    if (al__model_own_tokens(m, &ids, &n, &known, &err) || n != in->n_ctx) abort();
    seen s = {.what = AL_CAP_Q | AL_CAP_K | AL_CAP_V | AL_CAP_LOGITS | AL_CAP_WEIGHTS};
    cJSON *dj = al__dump_json(m);
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(dj, "arrays"), *e;
    if (!cJSON_IsArray(ar)) abort();
    s.derived_w = 1;
    cJSON_ArrayForEach(e, ar) if (!strcmp(e->valuestring, "weights")) s.derived_w = 0;
    cJSON_Delete(dj);
    al_capture_request req = {.what = s.what, .fn = observer, .user = &s};
    for (int T = n; T >= (in->causal && n > 1 ? n - 1 : n); T--) {
        memset(&err, 0, sizeof err);
        s.layers = 0;
        int c1 = al__model_check(m, T, &req, &err);
        memset(&err, 0, sizeof err);
        rc = al_model_forward(m, ids, T, &req, NULL, NULL, &err);
        if (!!c1 != !!rc) abort(); /* the preflight agrees with the forward */
        if (rc)
            starts_with(err.msg, g_dir);
        else if (s.layers != in->n_layer)
            abort();
    }
    al_model_free(m);
    return 0;
}
