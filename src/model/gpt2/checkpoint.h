/* checkpoint.h: the GPT-2 checkpoint layout shared by the loaders (gpt2_load.c), the llm.c
 * reader (llmc.c), verify (verify.c) and make-model (makemodel.c). Owner: checkpoint module.
 *
 * GPT-2 has 4 + 12 L parameter tensors. They are numbered in llm.c's order (a checkpoint
 * stores them in this order, each group for all layers before the next group):
 *   0 wte [V, C] (llm.c: [Vp, C], rows V.. zero), 1 wpe [n_ctx, C],
 *   2 + g L + l for group g = 0..11 of layer l (ln_1.w, ln_1.b, attn.c_attn.w, .b,
 *   attn.c_proj.w, .b, ln_2.w, ln_2.b, mlp.c_fc.w, .b, mlp.c_proj.w, .b),
 *   2 + 12 L ln_f.weight [C], 3 + 12 L ln_f.bias [C].
 * HF names carry no "transformer." prefix here; HF matrices are Conv1D [in, out], llm.c
 * stores the same matrices transposed, [out, in]. */
#ifndef AL_CHECKPOINT_H
#define AL_CHECKPOINT_H

#include "model.h"

typedef struct al__gpt2_cfg {
    int n_layer, n_head, n_embd, n_ctx, vocab_size;
} al__gpt2_cfg;

enum {
    AL_GK_WTE,
    AL_GK_WPE,
    AL_GK_LN1W,
    AL_GK_LN1B,
    AL_GK_QKVW,
    AL_GK_QKVB,
    AL_GK_ATTPROJW,
    AL_GK_ATTPROJB,
    AL_GK_LN2W,
    AL_GK_LN2B,
    AL_GK_FCW,
    AL_GK_FCB,
    AL_GK_FCPROJW,
    AL_GK_FCPROJB,
    AL_GK_LNFW,
    AL_GK_LNFB,
};

typedef struct al__gpt2_spec {
    char name[64];    /* HF name without prefix, e.g. "h.3.attn.c_attn.weight" */
    int kind;         /* AL_GK_* */
    int layer;        /* -1 for the global tensors */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* HF layout: [in, out] for the matrices */
    int is_matrix;    /* 1: llm.c stores it transposed [out, in] */
} al__gpt2_spec;

/* Checks a config (ranges, n_embd % n_head, sizes that cannot overflow); name for messages. */
int al__gpt2_cfg_check(const al__gpt2_cfg *c, const char *name, al_error *err);
int al__gpt2_n_tensors(const al__gpt2_cfg *c); /* 4 + 12 L */
/* The HF config.json object of a GPT-2 of shape c (GPT2LMHeadModel, gelu_new, eps 1e-5, BOS = EOS
 * = vocab - 1) that make-model and attnlim train write; NULL when out of memory. */
struct cJSON *al__gpt2_config_json(const al__gpt2_cfg *c);
void al__gpt2_spec_at(const al__gpt2_cfg *c, int i, al__gpt2_spec *out);
/* Index of an HF name (no prefix) among the parameters, -1 if not one. Buffers such as
 * h.N.attn.bias / h.N.attn.masked_bias are not parameters. */
int al__gpt2_spec_find(const al__gpt2_cfg *c, const char *name);
/* 1 if name (no prefix) is an HF buffer (h.N.attn.bias, h.N.attn.masked_bias) or lm_head.weight. */
int al__gpt2_is_buffer(const char *name);
int64_t al__gpt2_n_params(const al__gpt2_cfg *c); /* without padding and without lm_head */
void al__shape_str(int ndim, const int64_t *shape, char *out, size_t cap); /* "[768, 2304]" */

/* The safetensors half of the GPT-2 loader (gpt2_load.c): checks every tensor of st against
 * cfg and fills m (f32 weights point into st). Takes ownership of st, also on error. path
 * and name go to messages and m->info. Fuzzable with al__st_open_buffer. */
typedef struct al__safetensors al__safetensors;
int al__gpt2_from_safetensors(al_model *m, al__safetensors *st, const al__gpt2_cfg *cfg,
                              const char *path, const char *name, al_error *err);

/* ---- llm.c gpt2_*.bin -------------------------------------------------------------------- */

#define AL_LLMC_MAGIC        20240326
#define AL_LLMC_HEADER_BYTES 1024 /* 256 int32 */

typedef struct al__llmc_hdr {
    int version; /* 3: fp32, 5: bf16 */
    int maxT, V, L, NH, C, Vp;
    size_t elsize;    /* bytes per stored value: 4 or 2 */
    size_t n_floats;  /* values stored (wte padded to Vp rows) */
    al__gpt2_cfg cfg; /* n_ctx = maxT, vocab_size = V */
} al__llmc_hdr;

/* Parses and checks an llm.c checkpoint image buf[len]: magic, version, dims, and the exact
 * file size 1024 + n_floats * elsize. name is used in messages. No file access (fuzzable). */
int al__llmc_parse_buffer(const unsigned char *buf, size_t len, const char *name, al__llmc_hdr *out,
                          al_error *err);
/* Maps the llm.c checkpoint at path and parses its header (al__llmc_parse_buffer); *map holds
 * the mapping on success (al__unmap it), nothing on error. The one way a checkpoint is opened. */
int al__llmc_open(const char *path, al__map *map, al__llmc_hdr *h, al_error *err);
/* Byte offset of parameter tensor i (al__gpt2_spec_at numbering) in the file, and its
 * stored element count (wte: Vp * C). */
size_t al__llmc_offset(const al__llmc_hdr *h, int i, size_t *numel);

#endif
