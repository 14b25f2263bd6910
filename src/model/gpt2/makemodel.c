/* makemodel.c: deterministic random GPT-2 checkpoints of the real layout (HF safetensors +
 * config.json, or llm.c .bin v3/v5), for tests and benchmarks.
 *
 * Every value is a function of (seed, tensor index, element index) only: element e of tensor i
 * (HF layout, row-major) comes from a generator seeded by hash(seed, i, e / CHUNK), so both
 * formats hold the same weights, and the result does not depend on the thread count. */
#include "checkpoint.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the checkpoint writers assume a little-endian host");

#define CHUNK 65536

/* Scale (and mean) of each kind of parameter; see al_gpt2_make_model in attnlim.h. */
static void init_of(const al__gpt2_spec *s, const al__gpt2_cfg *c, double *mean, double *std) {
    *mean = 0.0;
    *std = 0.02;
    switch (s->kind) {
    case AL_GK_WPE:
        *std = 0.01;
        break;
    case AL_GK_LN1W:
    case AL_GK_LN2W:
    case AL_GK_LNFW:
        *mean = 1.0, *std = 0.1;
        break;
    case AL_GK_QKVW:
        *std = 1.0 / sqrt((double)c->n_embd);
        break;
    case AL_GK_ATTPROJW:
    case AL_GK_FCPROJW:
        *std = 0.02 / sqrt(2.0 * c->n_layer);
        break;
    default:
        break;
    }
}

/* Fills w [numel] with tensor i's values (HF layout). */
static void fill_tensor(const al__gpt2_cfg *c, int i, uint64_t seed, float *w, size_t numel) {
    al__gpt2_spec s;
    al__gpt2_spec_at(c, i, &s);
    double mean, std;
    init_of(&s, c, &mean, &std);
    long n_chunks = (long)((numel + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < n_chunks; k++) {
        al__rng r;
        al__rng_seed(&r, al__hash64(seed ^ al__hash64(((uint64_t)i << 32) ^ (uint64_t)k)));
        size_t lo = (size_t)k * CHUNK, hi = lo + CHUNK < numel ? lo + CHUNK : numel;
        for (size_t e = lo; e < hi; e += 2) { /* Box-Muller: both values of each pair */
            double u1 = ((double)(al__rng_next(&r) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
            double u2 = (double)(al__rng_next(&r) >> 11) * 0x1.0p-53, rad = sqrt(-2.0 * log(u1));
            w[e] = (float)(mean + std * rad * cos(6.283185307179586 * u2));
            if (e + 1 < hi) w[e + 1] = (float)(mean + std * rad * sin(6.283185307179586 * u2));
        }
    }
}

static size_t numel_of(const al__gpt2_spec *s) {
    return (size_t)s->shape[0] * (s->ndim == 2 ? (size_t)s->shape[1] : 1);
}

static size_t max_numel(const al__gpt2_cfg *c, size_t extra_rows) {
    size_t m = 0;
    for (int i = 0; i < al__gpt2_n_tensors(c); i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(c, i, &s);
        size_t n = numel_of(&s) + (i == 0 ? extra_rows * (size_t)c->n_embd : 0);
        if (n > m) m = n;
    }
    return m;
}

/* ---- HF safetensors ---------------------------------------------------------------------------
 */

struct cJSON *al__gpt2_config_json(const al__gpt2_cfg *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNumberToObject(j, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(j, "n_positions", c->n_ctx);
    cJSON_AddNumberToObject(j, "n_ctx", c->n_ctx);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNullToObject(j, "n_inner");
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(j, "bos_token_id", c->vocab_size - 1);
    cJSON_AddNumberToObject(j, "eos_token_id", c->vocab_size - 1);
    return j;
}

static int write_config(const al__gpt2_cfg *c, uint64_t seed, const char *dir, al_error *err) {
    cJSON *j = al__gpt2_config_json(c);
    if (!j) return al__err(err, AL_E_NOMEM, "out of memory writing config.json");
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    cJSON_AddStringToObject(j, "attnlim_make_model_seed", seed_s);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return al__err(err, AL_E_NOMEM, "out of memory writing config.json");
    char path[4096 + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print's NUL becomes the final newline */
    int rc = al__write_file_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes; *hlen its length. */
static char *st_header(const al__gpt2_cfg *c, size_t *hlen, al_error *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(j, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < al__gpt2_n_tensors(c); i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(c, i, &s);
        cJSON *t = cJSON_AddObjectToObject(j, s.name);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < s.ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)s.shape[d]));
        size_t nb = numel_of(&s) * 4;
        cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) {
        al__err(err, AL_E_NOMEM, "out of memory building the safetensors header");
        return NULL;
    }
    size_t n = strlen(text), padded = (n + 7) & ~(size_t)7;
    char *h = realloc(text, padded + 1);
    if (!h) {
        free(text);
        al__err(err, AL_E_NOMEM, "out of memory building the safetensors header");
        return NULL;
    }
    memset(h + n, ' ', padded - n);
    h[padded] = 0;
    *hlen = padded;
    return h;
}

static int make_safetensors(const al__gpt2_cfg *c, uint64_t seed, const char *dir, al_error *err) {
    int rc = al__mkdirs(dir, err);
    if (rc) return rc;
    size_t hlen;
    char *hdr = st_header(c, &hlen, err);
    if (!hdr) return AL_E_NOMEM;
    float *w = al__malloc(max_numel(c, 0) * sizeof *w, "weights", err);
    if (!w) {
        free(hdr);
        return AL_E_NOMEM;
    }
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    al__afile f;
    if ((rc = al__afile_open(&f, path, err))) goto done;
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    rc = al__afile_write(&f, len8, 8, err);
    if (!rc) rc = al__afile_write(&f, hdr, hlen, err);
    for (int i = 0; !rc && i < al__gpt2_n_tensors(c); i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(c, i, &s);
        fill_tensor(c, i, seed, w, numel_of(&s));
        rc = al__afile_write(&f, w, numel_of(&s) * 4, err);
    }
    if (rc)
        al__afile_abort(&f);
    else
        rc = al__afile_commit(&f, err);
    if (!rc) rc = write_config(c, seed, dir, err);
done:
    free(w);
    free(hdr);
    return rc;
}

/* ---- llm.c ------------------------------------------------------------------------------------
 */

static int write_values(al__afile *f, const float *w, size_t n, int version, uint16_t *tmp,
                        al_error *err) {
    if (version == 3) return al__afile_write(f, w, n * 4, err);
    for (size_t i = 0; i < n; i++) tmp[i] = al__f32_to_bf16(w[i]);
    return al__afile_write(f, tmp, n * 2, err);
}

static int make_llmc(const al__gpt2_cfg *c, uint64_t seed, int version, const char *path,
                     al_error *err) {
    int Vp = (c->vocab_size + 127) / 128 * 128; /* llm.c's pad_vocab: next multiple of 128 */
    size_t pad_rows = (size_t)(Vp - c->vocab_size), m = max_numel(c, pad_rows);
    float *w = al__calloc(m, sizeof *w, "weights", err);         /* [m] HF layout */
    float *t = al__malloc(m * sizeof *t, "transposed", err);     /* [m] llm.c layout */
    uint16_t *b = al__malloc(m * sizeof *b, "bf16 values", err); /* [m] */
    int rc = AL_E_NOMEM;
    al__afile f;
    f.f = NULL;
    if (!w || !t || !b) goto done;
    if ((rc = al__afile_open(&f, path, err))) goto done;
    int32_t hdr[256] = {AL_LLMC_MAGIC, version,   c->n_ctx,  c->vocab_size,
                        c->n_layer,    c->n_head, c->n_embd, Vp};
    rc = al__afile_write(&f, hdr, sizeof hdr, err);
    for (int i = 0; !rc && i < al__gpt2_n_tensors(c); i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(c, i, &s);
        size_t n = numel_of(&s);
        fill_tensor(c, i, seed, w, n);
        const float *out = w;
        if (i == 0) { /* wte padded with zero rows to Vp */
            memset(w + n, 0, pad_rows * (size_t)c->n_embd * sizeof *w);
            n += pad_rows * (size_t)c->n_embd;
        } else if (s.is_matrix) { /* HF [in, out] -> llm.c [out, in] */
            size_t in = (size_t)s.shape[0], o = (size_t)s.shape[1];
            for (size_t r = 0; r < in; r++)
                for (size_t k = 0; k < o; k++) t[k * in + r] = w[r * o + k];
            out = t;
        }
        rc = write_values(&f, out, n, version, b, err);
    }
    if (rc)
        al__afile_abort(&f);
    else
        rc = al__afile_commit(&f, err);
done:
    free(w);
    free(t);
    free(b);
    return rc;
}

int al_gpt2_make_model(const al_gpt2_make_opts *o, const char *out, al_error *err) {
    if (!o || !out || !*out)
        return al__err(err, AL_E_INVALID, "make-model: no options or output path");
    al__gpt2_cfg c = {o->n_layer, o->n_head, o->n_embd, o->n_ctx, o->vocab_size};
    int rc = al__gpt2_cfg_check(&c, "make-model", err);
    if (rc) return rc;
    if (o->format == AL_CKPT_SAFETENSORS) return make_safetensors(&c, o->seed, out, err);
    if (o->format != AL_CKPT_LLMC)
        return al__err(err, AL_E_INVALID, "make-model: unknown format %d", (int)o->format);
    if (o->llmc_version != 3 && o->llmc_version != 5)
        return al__err(err, AL_E_INVALID,
                       "make-model: llm.c version must be 3 (fp32) or 5 (bf16), not %d",
                       o->llmc_version);
    return make_llmc(&c, o->seed, o->llmc_version, out, err);
}
