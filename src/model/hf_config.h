/* hf_config.h: typed, bounded readers of HF config.json fields (src/model/hf_config.c). */
#ifndef AL_HF_CONFIG_H
#define AL_HF_CONFIG_H

#include "internal.h"
#include "rope.h"

#include <cjson/cJSON.h>

/* An integer field in [lo, hi]; absent or null: *v = def, or an error when def < lo. */
int al__cfg_int(const cJSON *j, const char *key, int lo, int hi, int def, int *v, const char *name,
                al_error *err);
/* A number in (lo, hi]; absent or null: def (NaN: required). */
int al__cfg_num(const cJSON *j, const char *key, double lo, double hi, double def, double *v,
                const char *name, al_error *err);
int al__cfg_bool(const cJSON *j, const char *key, int def, int *v, const char *name, al_error *err);
/* A token id in [0, vocab): an integer, the first of a list, or null (-1). */
int al__cfg_token(const cJSON *j, const char *key, int vocab, int *v, const char *name,
                  al_error *err);
/* RoPE: theta_key (default 10000) and rope_scaling (null, or rope_type / type with its fields:
 * default, linear, dynamic, llama3, yarn; others AL_E_UNSUPPORTED naming them). dim: rotated
 * dimensions; *n_ctx: max_position_embeddings, multiplied by the factor for dynamic. */
int al__cfg_rope(const cJSON *j, const char *theta_key, int dim, int *n_ctx, al__rope *r,
                 const char *name, al_error *err);

/* The files an HF directory's tokenizer reads: tokenizer.json, and tokenizer_config.json when
 * present (vtable tokenizer_files of the HF decoder families). */
/* The common part of the manifest's "architecture" object: architecture, kv_head_of_query_head
 * [n_head] (h / (n_head / n_kv_head)), rope {type, theta, rotary_dims, rotary_fraction,
 * factor}. */
cJSON *al__arch_json(const char *arch, int n_head, int n_kv_head, const al__rope *r, int d_head);
struct al_model;
struct al__model_files;
int al__hf_tokenizer_files(struct al_model *m, struct al__model_files *fs, al_error *err);

#endif
