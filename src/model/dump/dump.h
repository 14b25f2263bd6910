/* dump.h: attention dumps (docs/dumps.md): a directory holding manifest.json and per-layer
 * .npy arrays, written by `attnlim capture`, by attnlim.write_dump or by hand from any
 * framework. src/dump.c parses the manifest (here, for the fuzzer and the model) and serves the
 * arrays as a model family ("dump") whose forward replays them to the capture observer. */
#ifndef AL_DUMP_H
#define AL_DUMP_H

#include "internal.h"

#define AL__DUMP_SCHEMA       "attnlim.dump/1"
#define AL__DUMP_MAX_MANIFEST ((size_t)64 << 20) /* bytes of manifest.json read at most */
#define AL__DUMP_MAX_DIM      (1 << 20)          /* T, d_head, d_model, layer and head counts */
#define AL__DUMP_N_WHAT       7

/* The array kinds, in AL_CAP_* bit order: what[i] is the kind of bit 1u << i. */
extern const char *const al__dump_what[AL__DUMP_N_WHAT]; /* "q", "k", ..., "embed" */

/* A parsed, validated manifest (nothing about the arrays beyond what it declares). */
typedef struct al__dump_desc {
    int from_capture; /* 1: an `attnlim capture` manifest ("command": "capture"); 0: dump/1 */
    char name[128];   /* model.name ("" when not given) */
    int n_layer, n_head, n_kv_head, d_head, d_model, causal;
    int vocab_size; /* model.vocab_size, 0 when not given */
    int T;
    int32_t *token_ids; /* [T], or NULL: the dump holds no token ids */
    int n_layers;       /* stored layers: layers[n_layers], increasing */
    int *layers;
    int n_heads; /* stored heads: heads[n_heads], increasing */
    int *heads;
    unsigned arrays;  /* AL_CAP_* bits the manifest declares (0: not declared) */
    int weights_free; /* "weights_sum_to_one": false: stored weights are not checked as rows of
                       * a distribution (a normalizer such as sa-softmax) */
    struct cJSON *model_json; /* a copy of the manifest's "model" object */
    int *window; /* [n_layer] each layer's causal sliding window ("sliding_window": {"of_layer"});
                  * 0 = none; NULL when the manifest declares none */
} al__dump_desc;

/* Parses manifest.json text (untrusted) into d. name (the manifest's path) starts every
 * message. Checks: valid JSON object; "schema": "attnlim.dump/1", or "command": "capture"
 * (capture's manifest, read through its model, length, token_ids and options); integer fields
 * in range; n_head a multiple of n_kv_head; token_ids of length T, ids in [0, 2^31) and below
 * vocab_size when given; layers and heads distinct and in range; arrays known and distinct;
 * a "files" list, when present, naming only layer{l}.{what}.npy of a stored layer and a declared
 * array (so no name from the manifest can reach outside the directory). */
int al__dump_parse(const char *text, size_t len, const char *name, al__dump_desc *d, al_error *err);
void al__dump_desc_free(al__dump_desc *d);

/* "layer{l}.{what}.npy" for kind index w into buf. */
void al__dump_file_name(int layer, int w, char *buf, size_t cap);

#endif
