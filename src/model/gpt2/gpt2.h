/* gpt2.h: GPT-2 weights as the loaders (src/gpt2_load.c: safetensors, llm.c) hand them to
 * the forward (src/gpt2.c). C = d_model, V = vocabulary rows stored in wte. */
#ifndef AL_GPT2_H
#define AL_GPT2_H

#include "model.h"

typedef struct al__gpt2_layer {
    const float *ln1_w, *ln1_b; /* [C] */
    const float *attn_w;        /* [C, 3C] (HF Conv1D) or [3C, C] (llm.c) */
    const float *attn_b;        /* [3C] */
    const float *proj_w;        /* [C, C] */
    const float *proj_b;        /* [C] */
    const float *ln2_w, *ln2_b; /* [C] */
    const float *fc_w;          /* [C, 4C] or [4C, C] */
    const float *fc_b;          /* [4C] */
    const float *fcproj_w;      /* [4C, C] or [C, 4C] */
    const float *fcproj_b;      /* [C] */
} al__gpt2_layer;

typedef struct al__gpt2 {
    int n_layer, n_head, d_model, n_ctx;
    int vocab_size;             /* real vocabulary (50257 for OpenAI GPT-2) */
    int padded_vocab;           /* rows of wte (llm.c pads to 50304), >= vocab_size */
    int out_in;                 /* 1: matrices are [out, in] (llm.c); 0: [in, out] (HF Conv1D) */
    const float *wte;           /* [padded_vocab, C] token embedding (also the tied LM head) */
    const float *wpe;           /* [n_ctx, C] position embedding */
    al__gpt2_layer *layers;     /* [n_layer] */
    const float *lnf_w, *lnf_b; /* [C] */
    /* ownership (released by al__gpt2_release): */
    float *arena;  /* converted weights (bf16 -> f32) or NULL */
    al__map map;   /* the file mapping, when weights point into it */
    void *st;      /* al__safetensors* when opened from safetensors */
    void *fwd;     /* the forward's activation state (gpt2.c) */
    char *tok_dir; /* a byte-level attnlim train checkpoint's directory: its vocab.json +
                    * merges.txt are the tokenizer (config.json attnlim_tokenizer "bytes");
                    * NULL: GPT-2's BPE files */
} al__gpt2;

/* The GPT-2 family's vtable (gpt2.c); loaders set m->vt = &al__gpt2_vtable, m->impl = al__gpt2*. */
extern const al_model_vtable al__gpt2_vtable;
/* Frees everything an al__gpt2 owns, then the struct itself (gpt2.c). */
void al__gpt2_release(al__gpt2 *g);

#endif
