/* llmc.c: the GPT-2 parameter layout (HF names, shapes, llm.c order) and the llm.c
 * gpt2_*.bin header reader. See checkpoint.h.
 *
 * llm.c file: int32 header[256] = {20240326, version, maxT, V, L, NH, C, Vp, 0...}, then the
 * parameters in llm.c order as float32 (version 3) or bfloat16 (version 5), little-endian,
 * matrices [out, in], wte padded to Vp rows. Nothing may follow them. */
#include "checkpoint.h"

#include <stdlib.h>
#include <string.h>

/* Group g of a layer: HF suffix, and whether the tensor is a matrix (Conv1D). */
static const struct {
    const char *suffix;
    int matrix;
} GROUPS[12] = {
    {"ln_1.weight", 0},      {"ln_1.bias", 0},          {"attn.c_attn.weight", 1},
    {"attn.c_attn.bias", 0}, {"attn.c_proj.weight", 1}, {"attn.c_proj.bias", 0},
    {"ln_2.weight", 0},      {"ln_2.bias", 0},          {"mlp.c_fc.weight", 1},
    {"mlp.c_fc.bias", 0},    {"mlp.c_proj.weight", 1},  {"mlp.c_proj.bias", 0},
};

void al__shape_str(int ndim, const int64_t *shape, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

int al__gpt2_cfg_check(const al__gpt2_cfg *c, const char *name, al_error *err) {
    if (c->n_layer < 1 || c->n_layer > 4096)
        return al__err(err, AL_E_FORMAT, "%s: n_layer %d outside 1..4096", name, c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 65536)
        return al__err(err, AL_E_FORMAT, "%s: n_embd %d outside 1..65536", name, c->n_embd);
    if (c->n_head < 1 || c->n_head > c->n_embd || c->n_embd % c->n_head != 0)
        return al__err(err, AL_E_FORMAT, "%s: n_head %d does not divide n_embd %d", name, c->n_head,
                       c->n_embd);
    if (c->n_ctx < 1 || c->n_ctx > (1 << 20))
        return al__err(err, AL_E_FORMAT, "%s: n_ctx %d outside 1..%d", name, c->n_ctx, 1 << 20);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
        return al__err(err, AL_E_FORMAT, "%s: vocab_size %d outside 1..%d", name, c->vocab_size,
                       1 << 24);
    /* 12 C^2 L + (V + n_ctx) C stays far below 2^62 with these bounds. */
    return 0;
}

int al__gpt2_n_tensors(const al__gpt2_cfg *c) {
    return 4 + 12 * c->n_layer;
}

void al__gpt2_spec_at(const al__gpt2_cfg *c, int i, al__gpt2_spec *o) {
    int L = c->n_layer;
    int64_t C = c->n_embd;
    memset(o, 0, sizeof *o);
    o->layer = -1;
    if (i == 0) {
        snprintf(o->name, sizeof o->name, "wte.weight");
        o->kind = AL_GK_WTE, o->ndim = 2, o->shape[0] = c->vocab_size, o->shape[1] = C;
    } else if (i == 1) {
        snprintf(o->name, sizeof o->name, "wpe.weight");
        o->kind = AL_GK_WPE, o->ndim = 2, o->shape[0] = c->n_ctx, o->shape[1] = C;
    } else if (i == 2 + 12 * L || i == 3 + 12 * L) {
        int w = i == 2 + 12 * L;
        snprintf(o->name, sizeof o->name, "ln_f.%s", w ? "weight" : "bias");
        o->kind = w ? AL_GK_LNFW : AL_GK_LNFB, o->ndim = 1, o->shape[0] = C;
    } else {
        int g = (i - 2) / L, l = (i - 2) % L;
        snprintf(o->name, sizeof o->name, "h.%d.%s", l, GROUPS[g].suffix);
        o->kind = AL_GK_LN1W + g, o->layer = l, o->is_matrix = GROUPS[g].matrix;
        static const int64_t out_mult[12] = {1, 1, 3, 3, 1, 1,
                                             1, 1, 4, 4, 1, 1}; /* out = mult * C */
        static const int64_t in_mult[12] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0}; /* in = mult * C */
        if (GROUPS[g].matrix)
            o->ndim = 2, o->shape[0] = in_mult[g] * C, o->shape[1] = out_mult[g] * C;
        else
            o->ndim = 1, o->shape[0] = out_mult[g] * C;
    }
}

/* Parses "h.<l>." returning l and the rest, or -1. */
static int layer_of(const char *name, const char **rest) {
    if (strncmp(name, "h.", 2) != 0) return -1;
    const char *p = name + 2;
    long l = 0;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.')) return -1;
    while (*p >= '0' && *p <= '9' && l < 100000) l = l * 10 + (*p++ - '0');
    if (*p != '.') return -1;
    *rest = p + 1;
    return (int)l;
}

int al__gpt2_spec_find(const al__gpt2_cfg *c, const char *name) {
    int L = c->n_layer;
    if (!strcmp(name, "wte.weight")) return 0;
    if (!strcmp(name, "wpe.weight")) return 1;
    if (!strcmp(name, "ln_f.weight")) return 2 + 12 * L;
    if (!strcmp(name, "ln_f.bias")) return 3 + 12 * L;
    const char *rest;
    int l = layer_of(name, &rest);
    if (l < 0 || l >= L) return -1;
    for (int g = 0; g < 12; g++)
        if (!strcmp(rest, GROUPS[g].suffix)) return 2 + g * L + l;
    return -1;
}

int al__gpt2_is_buffer(const char *name) {
    if (!strcmp(name, "lm_head.weight")) return 1;
    const char *rest;
    if (layer_of(name, &rest) < 0) return 0;
    return !strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias");
}

int64_t al__gpt2_n_params(const al__gpt2_cfg *c) {
    int64_t C = c->n_embd, L = c->n_layer;
    return (int64_t)c->vocab_size * C + (int64_t)c->n_ctx * C + L * (12 * C * C + 13 * C) + 2 * C;
}

/* ---- llm.c ------------------------------------------------------------------------------------
 */

size_t al__llmc_offset(const al__llmc_hdr *h, int i, size_t *numel) {
    size_t off = 0, n = 0;
    al__gpt2_spec s;
    for (int k = 0; k <= i; k++) {
        off += n;
        al__gpt2_spec_at(&h->cfg, k, &s);
        n = (size_t)s.shape[0] * (s.ndim == 2 ? (size_t)s.shape[1] : 1);
        if (k == 0) n = (size_t)h->Vp * (size_t)h->C;
    }
    if (numel) *numel = n;
    return AL_LLMC_HEADER_BYTES + off * h->elsize;
}

int al__llmc_parse_buffer(const unsigned char *buf, size_t len, const char *name, al__llmc_hdr *h,
                          al_error *err) {
    memset(h, 0, sizeof *h);
    if (len < AL_LLMC_HEADER_BYTES)
        return al__err(err, AL_E_FORMAT,
                       "%s: %zu bytes: shorter than the 1024-byte llm.c header (truncated?)", name,
                       len);
    int32_t v[8];
    for (int i = 0; i < 8; i++) v[i] = (int32_t)al__le32(buf + 4 * i);
    if (v[0] != AL_LLMC_MAGIC)
        return al__err(err, AL_E_FORMAT,
                       "%s: bad magic %d (an llm.c GPT-2 checkpoint starts with %d)", name,
                       (int)v[0], AL_LLMC_MAGIC);
    if (v[1] != 3 && v[1] != 5)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: llm.c version %d not supported (3: fp32, 5: bf16)", name, (int)v[1]);
    h->version = v[1], h->maxT = v[2], h->V = v[3], h->L = v[4], h->NH = v[5], h->C = v[6],
    h->Vp = v[7];
    h->elsize = h->version == 3 ? 4 : 2;
    h->cfg = (al__gpt2_cfg){h->L, h->NH, h->C, h->maxT, h->V};
    int rc = al__gpt2_cfg_check(&h->cfg, name, err);
    if (rc) return rc;
    if (h->Vp < h->V || h->Vp > (1 << 24))
        return al__err(err, AL_E_FORMAT,
                       "%s: padded vocabulary %d is below the vocabulary %d or too large", name,
                       h->Vp, h->V);
    size_t C = (size_t)h->C, L = (size_t)h->L;
    size_t n =
        (size_t)h->Vp * C + (size_t)h->maxT * C + L * (12 * C * C + 13 * C) + 2 * C; /* < 2^62 */
    h->n_floats = n;
    size_t want;
    if (!al__mul_ok(n, h->elsize, &want) || !al__add_ok(want, AL_LLMC_HEADER_BYTES, &want))
        return al__err(err, AL_E_FORMAT, "%s: parameter size overflows", name);
    if (len != want)
        return al__err(err, AL_E_FORMAT,
                       "%s: file has %zu bytes but the header (L=%d, C=%d, Vp=%d, maxT=%d, version "
                       "%d) implies "
                       "%zu (%s)",
                       name, len, h->L, h->C, h->Vp, h->maxT, h->version, want,
                       len < want ? "truncated" : "extra bytes after the parameters");
    return 0;
}

int al__llmc_open(const char *path, al__map *map, al__llmc_hdr *h, al_error *err) {
    int rc = al__map_file(path, map, err);
    if (rc) return rc;
    if ((rc = al__llmc_parse_buffer(map->data, map->size, path, h, err))) al__unmap(map);
    return rc;
}
