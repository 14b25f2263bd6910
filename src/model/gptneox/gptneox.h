/* gptneox.h: GPT-NeoX decoders (Pythia) from HF directories (src/model/gptneox/gptneox.c). */
#ifndef AL_GPTNEOX_H
#define AL_GPTNEOX_H

#include "model.h"
#include "rope.h"

typedef struct al__neox_config {
    int n_layer, n_head, d_model, d_head, d_ff, n_ctx, vocab;
    double eps;        /* layer_norm_eps */
    al__rope rope;     /* rope.dim = int(d_head * rotary_pct) */
    double rotary_pct; /* the fraction of each head that is rotated */
    int parallel;      /* use_parallel_residual */
    int bias;          /* attention_bias: query_key_value and dense have biases */
    int tied;          /* tie_word_embeddings */
    int gelu_tanh;     /* hidden_act gelu_new / gelu_pytorch_tanh (else exact gelu) */
} al__neox_config;

/* Parses a config.json text[len] of model_type gpt_neox (the fuzz entry point). */
int al__neox_config_parse(const char *text, size_t len, const char *name, al__neox_config *c,
                          al_error *err);
/* the openers al__neox_open_hf / al__neox_open_gguf are declared in model.h */

#endif
