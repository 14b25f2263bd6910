/* tckpt.c: what training writes and reads (train_io.h):
 *   DIR/model.safetensors  the GPT-2 tensors, HF names and layout, float32 (HF GPT2LMHeadModel
 *                          and every attnlim command load it)
 *   DIR/config.json        HF GPT-2 keys + attnlim_normalizer {name, temperature, alpha, s,
 *                          s_learnable, s_per_head [L][H]} + attnlim_tokenizer + attnlim_train
 *   DIR/state.bin          the exact training state for --resume: header, then parameters,
 *                          AdamW m and v (float32 bit for bit), after `step` steps
 * Every file is written atomically (temp file + rename). */
#include "train_io.h"

#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the writers assume little-endian");

/* ---- a safetensors writer for any list of tensors ----------------------------------------- */

static int st_write(const char *path, const al__tr_tensor *t, int n, al_error *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(j, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(j, t[i].name);
        cJSON_AddStringToObject(o, "dtype", t[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + t[i].bytes)));
        off += t[i].bytes;
    }
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) return al__err(err, AL_E_NOMEM, "%s: out of memory building the header", path);
    size_t hl = strlen(text), padded = (hl + 7) & ~(size_t)7;
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    al__afile f;
    int rc = al__afile_open(&f, path, err);
    if (!rc) rc = al__afile_write(&f, len8, 8, err);
    if (!rc) rc = al__afile_write(&f, text, hl, err);
    for (size_t k = hl; !rc && k < padded; k++) rc = al__afile_write(&f, " ", 1, err);
    for (int i = 0; !rc && i < n; i++) rc = al__afile_write(&f, t[i].data, t[i].bytes, err);
    free(text);
    if (rc) {
        if (f.f) al__afile_abort(&f);
        return rc;
    }
    return al__afile_commit(&f, err);
}

int al__tr_write_tensors(const char *path, const al__tr_tensor *t, int n, al_error *err) {
    return st_write(path, t, n, err);
}

/* The GPT-2 tensors of an arena as tensor entries (names with a prefix); *n_out entries. */
int al__tr_gpt2_tensors(const al__tr_model *m, const float *arena, const char *prefix,
                        al__tr_tensor *out, int cap) {
    const al__tr_cfg *c = &m->cfg;
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    int n = al__gpt2_n_tensors(&g);
    for (int i = 0; i < n && i < cap; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&g, i, &s);
        al__tr_tensor *t = &out[i];
        snprintf(t->name, sizeof t->name, "%s%s", prefix, s.name);
        snprintf(t->dtype, sizeof t->dtype, "F32");
        t->ndim = s.ndim;
        t->shape[0] = s.shape[0], t->shape[1] = s.shape[1];
        t->data = arena + m->off[i];
        t->bytes = m->numel[i] * sizeof(float);
    }
    return n;
}

/* ---- the byte-level tokenizer's files ------------------------------------------------------ */

/* DIR/vocab.json + DIR/merges.txt of a byte-level run: the GPT-2 byte-to-character map
 * (printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves, the others for
 * U+0100 on, in byte order) with id = the byte, and no merges: a byte-level BPE that turns text
 * into its bytes, so that every command tokenizes a corpus for the model as it was trained. */
static int write_byte_vocab(const char *dir, al_error *err) {
    cJSON *v = cJSON_CreateObject();
    int extra = 0;
    for (int b = 0; v && b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unsigned cp = keep ? (unsigned)b : 256u + (unsigned)extra++;
        char u[4] = {0}; /* UTF-8 of cp (< 0x800) */
        if (cp < 0x80)
            u[0] = (char)cp;
        else
            u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F));
        cJSON_AddNumberToObject(v, u, b);
    }
    char *text = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    if (!text) return al__err(err, AL_E_NOMEM, "out of memory writing %s/vocab.json", dir);
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    int rc = al__write_file_atomic(path, text, strlen(text), err);
    free(text);
    static const char merges[] = "#version: 0.2\n";
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if (!rc) rc = al__write_file_atomic(path, merges, sizeof merges - 1, err);
    return rc;
}

/* ---- config.json ------------------------------------------------------------------------ */

static cJSON *norm_json(const al__tr_model *m) {
    const al__tr_cfg *c = &m->cfg;
    cJSON *n = cJSON_CreateObject();
    cJSON_AddStringToObject(n, "name", al_norm_name(c->norm.kind));
    cJSON_AddNumberToObject(n, "temperature", c->norm.temperature);
    if (c->norm.kind == AL_NORM_ENTMAX) cJSON_AddNumberToObject(n, "alpha", c->norm.alpha);
    const float *s = al__tr_ssmax_s(m, m->params);
    if (s) {
        cJSON_AddNumberToObject(n, "s", c->norm.ssmax_s);
        cJSON_AddBoolToObject(n, "s_learnable", c->ssmax_learn);
        cJSON *a = cJSON_AddArrayToObject(n, "s_per_head");
        for (int l = 0; l < c->n_layer; l++) {
            cJSON *row = cJSON_CreateArray();
            for (int h = 0; h < c->n_head; h++)
                cJSON_AddItemToArray(row, cJSON_CreateNumber(s[l * c->n_head + h]));
            cJSON_AddItemToArray(a, row);
        }
    }
    return n;
}

static int write_json(const char *path, cJSON *j, al_error *err) {
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return al__err(err, AL_E_NOMEM, "%s: out of memory", path);
    size_t len = strlen(text);
    text[len] = '\n';
    int rc = al__write_file_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}

int al__tr_save_model(const al__tr_model *m, const char *dir, const char *tokenizer,
                      cJSON *train_info, al_error *err) {
    int rc = al__mkdirs(dir, err);
    if (rc) {
        cJSON_Delete(train_info);
        return rc;
    }
    const al__tr_cfg *c = &m->cfg;
    al__tr_tensor *t = al__calloc((size_t)m->n_tensors, sizeof *t, "tensor list", err);
    if (!t) {
        cJSON_Delete(train_info);
        return AL_E_NOMEM;
    }
    int n = al__tr_gpt2_tensors(m, m->params, "", t, m->n_tensors);
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = st_write(path, t, n, err);
    free(t);
    if (rc) {
        cJSON_Delete(train_info);
        return rc;
    }
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    cJSON *j = al__gpt2_config_json(&g);
    if (!j) {
        cJSON_Delete(train_info);
        return al__err(err, AL_E_NOMEM, "out of memory writing %s/config.json", dir);
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddItemToObject(j, "attnlim_normalizer", norm_json(m));
    cJSON_AddStringToObject(j, "attnlim_tokenizer", tokenizer);
    if (train_info) cJSON_AddItemToObject(j, "attnlim_train", train_info);
    rc = strcmp(tokenizer, "bytes") ? 0 : write_byte_vocab(dir, err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (rc) {
        cJSON_Delete(j);
        return rc;
    }
    return write_json(path, j, err);
}

/* ---- state.bin ---------------------------------------------------------------------------- */

#define STATE_MAGIC "ALTRST01"

typedef struct state_hdr {
    char magic[8];
    int32_t n_layer, n_head, n_embd, n_ctx, vocab_size, norm_kind, ssmax_learn, pad;
    double temperature, alpha, ssmax_s;
    uint64_t n_params, step;
} state_hdr;

static state_hdr hdr_of(const al__tr_model *m, uint64_t step) {
    const al__tr_cfg *c = &m->cfg;
    state_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, STATE_MAGIC, 8);
    h.n_layer = c->n_layer, h.n_head = c->n_head, h.n_embd = c->n_embd, h.n_ctx = c->n_ctx;
    h.vocab_size = c->vocab_size, h.norm_kind = (int32_t)c->norm.kind;
    h.ssmax_learn = c->ssmax_learn;
    h.temperature = c->norm.temperature, h.alpha = c->norm.alpha, h.ssmax_s = c->norm.ssmax_s;
    h.n_params = m->n_params, h.step = step;
    return h;
}

int al__tr_save_state(const al__tr_model *m, const char *path, uint64_t step, al_error *err) {
    state_hdr h = hdr_of(m, step);
    al__afile f;
    int rc = al__afile_open(&f, path, err);
    if (rc) return rc;
    rc = al__afile_write(&f, &h, sizeof h, err);
    const float *arenas[3] = {m->params, m->m, m->v};
    for (int k = 0; !rc && k < 3; k++)
        rc = al__afile_write(&f, arenas[k], m->n_params * sizeof(float), err);
    if (rc) {
        al__afile_abort(&f);
        return rc;
    }
    return al__afile_commit(&f, err);
}

int al__tr_load_state(al__tr_model *m, const char *path, uint64_t *step, al_error *err) {
    al__map map;
    int rc = al__map_file(path, &map, err);
    if (rc) return rc;
    state_hdr want = hdr_of(m, 0), h;
    size_t need = sizeof h + 3 * m->n_params * sizeof(float);
    if (map.size < sizeof h || memcmp(map.data, STATE_MAGIC, 8)) {
        rc = al__err(err, AL_E_FORMAT, "%s: not an attnlim training state (bad magic)", path);
    } else {
        memcpy(&h, map.data, sizeof h);
        want.step = h.step;
        if (memcmp(&h, &want, sizeof h))
            rc = al__err(err, AL_E_INVALID,
                         "%s: saved by a run of another model or normalizer (%d layers, %d heads, "
                         "%d channels, context %d, vocabulary %d, %s); resume with the same "
                         "options",
                         path, h.n_layer, h.n_head, h.n_embd, h.n_ctx, h.vocab_size,
                         al_norm_name((al_norm_kind)h.norm_kind));
        else if (map.size != need)
            rc = al__err(err, AL_E_FORMAT, "%s: %zu bytes, expected %zu (truncated?)", path,
                         map.size, need);
    }
    if (!rc) {
        const unsigned char *p = map.data + sizeof h;
        float *arenas[3] = {m->params, m->m, m->v};
        for (int k = 0; k < 3; k++, p += m->n_params * sizeof(float))
            memcpy(arenas[k], p, m->n_params * sizeof(float));
        *step = h.step;
    }
    al__unmap(&map);
    return rc;
}

/* ---- weights from a GPT-2 safetensors checkpoint ------------------------------------------ */

/* Read straight from the safetensors (not al_model_open, which refuses checkpoints of other
 * normalizers): every GPT-2 tensor of the run's shape, with or without "transformer.". */
int al__tr_load_init(al__tr_model *m, const char *path, al_error *err) {
    al__safetensors *st = NULL;
    int rc = al__st_open(path, &st, err);
    if (rc) return al__err_prefix(err, rc, "--init");
    const al__tr_cfg *c = &m->cfg;
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    for (int i = 0; !rc && i < al__gpt2_n_tensors(&g); i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&g, i, &s);
        char full[160];
        snprintf(full, sizeof full, "transformer.%s", s.name);
        const char *name = al__st_find(st, s.name) ? s.name : full;
        rc = al__st_load_f32(st, name, s.ndim, s.shape, m->params + m->off[i], err);
    }
    al__st_close(st);
    return rc ? al__err_prefix(err, rc, "--init %s", path) : 0;
}

int al__tr_init_ssmax_s(al__tr_model *m, const char *path, al_error *err) {
    float *s = al__tr_ssmax_s(m, m->params);
    if (!s) return 0;
    char cfg[4096 + 16];
    snprintf(cfg, sizeof cfg, "%s", path);
    if (!al__is_dir(path)) {
        char *slash = strrchr(cfg, '/');
        if (slash)
            slash[1] = 0;
        else
            cfg[0] = 0;
        snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), "config.json");
    } else
        snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), "/config.json");
    char *text;
    size_t len;
    if (al__read_file(cfg, 1 << 20, &text, &len, NULL)) return 0; /* no config: s as started */
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "attnlim_normalizer");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(n, "s_per_head"), *row, *x;
    int L = m->cfg.n_layer, H = m->cfg.n_head, k = 0, bad = 0;
    if (rows && (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) != L)) bad = 1;
    const cJSON *rs = bad ? NULL : rows;
    cJSON_ArrayForEach(row, rs) {
        bad |= !cJSON_IsArray(row) || cJSON_GetArraySize(row) != H;
        const cJSON *cs = bad ? NULL : row;
        cJSON_ArrayForEach(x, cs) {
            bad |= !cJSON_IsNumber(x) || !(x->valuedouble > 0);
            if (!bad) s[k++] = (float)x->valuedouble;
        }
    }
    cJSON_Delete(j);
    if (bad)
        return al__err(err, AL_E_FORMAT,
                       "--init %s: attnlim_normalizer.s_per_head is not %d rows of %d positive "
                       "numbers",
                       cfg, L, H);
    return 0;
}
