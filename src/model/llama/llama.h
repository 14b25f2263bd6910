/* llama.h: the Llama-family decoder shared by the GGUF reader (llama.c) and the HF directory
 * reader (llama_hf.c): Llama, Mistral (sliding window) and Qwen2 (q/k/v biases). One forward,
 * one weight struct; the readers only fill it. */
#ifndef AL_LLAMA_H
#define AL_LLAMA_H

#include "model.h"
#include "ops.h"
#include "rope.h"

/* The architecture-specific facts of a Llama-family model (shapes beside). */
typedef struct al__llama_config {
    char arch[32]; /* "llama", "mistral", "qwen2", "gemma2" (HF model_type / GGUF arch) */
    int n_layer, n_head, n_kv_head, d_model, d_head, d_ff, n_ctx, vocab;
    double eps;            /* RMSNorm epsilon */
    al__rope rope;         /* RoPE of every layer */
    int window;            /* sliding window (keys a row sees, itself included); 0 = none */
    int max_window_layers; /* Qwen2 with use_sliding_window: layers below it are global (-1: no
                              such) */
    int tied;              /* lm_head = embed_tokens */
    int qkv_bias;          /* q, k, v projections have biases */
    int o_bias;            /* o_proj has a bias */
    int mlp_bias;          /* gate/up/down have biases */
    int bos_id, eos_id;    /* from config.json (-1 = none) */
    /* Gemma 2 (all 0 for the others) */
    int gemma;            /* (1 + w) RMSNorm (folded into the weights at load), post-norms */
    int alt_window;       /* the window on even layers only (0, 2, ...), global attention between */
    int gelu;             /* MLP gate activation: 0 silu, 1 GELU tanh form, 2 exact GELU */
    double embed_scale;   /* x = embed * embed_scale (sqrt(d_model)); 0 = 1 */
    double attn_scale;    /* logits scale: query_pre_attn_scalar^-1/2; 0 = 1/sqrt(d_head) */
    double attn_softcap;  /* attn_logit_softcapping (0 = none) */
    double final_softcap; /* final_logit_softcapping (0 = none) */
} al__llama_config;

/* Layer l's sliding window (0 = none): global below a Qwen2's max_window_layers (current
 * transformers' layer_types rule) and on Gemma 2's odd layers, else c->window. */
static inline int al__llama_layer_window(const al__llama_config *c, int l) {
    return l < c->max_window_layers || (c->alt_window && l % 2) ? 0 : c->window;
}

/* Parses an HF config.json text[len] (name for messages) of model_type llama, mistral or qwen2
 * into cfg, checking every field against sane bounds and against each other: the fuzz entry
 * point of the HF reader. Unknown architectures, rope types and activations are
 * AL_E_UNSUPPORTED naming them; inconsistent shapes AL_E_FORMAT. */
int al__llama_config_parse(const char *text, size_t len, const char *name, al__llama_config *cfg,
                           al_error *err);

typedef struct llama_layer {
    float *attn_norm;       /* [C] */
    float *wq, *bq;         /* [H*d, C], [H*d] or NULL */
    float *wk, *bk;         /* [G*d, C], [G*d] or NULL */
    float *wv, *bv;         /* [G*d, C], [G*d] or NULL */
    float *wo, *bo;         /* [C, H*d], [C] or NULL */
    float *ffn_norm;        /* [C] */
    float *post_attn_norm;  /* [C] Gemma 2: on the attention output, or NULL */
    float *post_ffn_norm;   /* [C] Gemma 2: on the MLP output, or NULL */
    float *w_gate, *b_gate; /* [F, C], [F] or NULL */
    float *w_up, *b_up;     /* [F, C], [F] or NULL */
    float *w_down, *b_down; /* [C, F], [C] or NULL */
    int window;             /* this layer's sliding window, 0 = none */
} llama_layer;

typedef struct llama {
    al__llama_config cfg;
    float *arena;          /* every weight, float32 */
    float *tok_embd;       /* [V, C] */
    float *output;         /* [V, C] (== tok_embd when tied) */
    float *out_norm;       /* [C] */
    llama_layer *layers;   /* [n_layer] */
    struct al__gguf *gguf; /* GGUF: kept open for the tokenizer metadata */
    float *rope_freqs;     /* [d_head/2] GGUF rope_freqs.weight, or NULL (cfg.rope points here) */
    char dir[4096];        /* HF: the model directory (tokenizer files) */
    al__attn_ws ws;        /* attention buffers reused across layers and forwards */
} llama;

/* Checks cfg's shapes against each other (name for messages). */
int al__llama_check_config(const al__llama_config *c, const char *name, al_error *err);
/* Fills m->info and m->vt from L (L owned by m from then on). dtype: of the weights. */
void al__llama_finish(al_model *m, llama *L, const char *name, const char *path, const char *dtype,
                      int64_t n_params);
void al__llama_free(llama *L);
/* The forward (vtable). */
int al__llama_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                      const al__fwd *f, float *logits, float *final_hidden, al_error *err);

#endif
