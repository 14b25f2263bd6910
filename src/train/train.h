/* train.h: training GPT-2-style decoders in C (the train layer; owner: training module).
 *
 * The model is GPT-2's: pre-LayerNorm blocks, tanh GELU MLP of width 4C, learned positions,
 * LM head tied to the token embedding, LayerNorm eps 1e-5. Only the attention normalizer
 * differs per run (any al_norm kind). Forward and backward are ours (tmodel.c, tattn.c),
 * float32 with BLAS sgemm, OpenMP over rows, heads and column blocks; the normalizers'
 * backward is the library's vector-Jacobian product (al_norm_vjp), softmax by its closed form
 * p (g - <p, g>) / T (the same product; tests/test_train.c checks it against al_norm_vjp).
 *
 * Memory, llm.c style: one arena of parameters, one of gradients (same layout), the two AdamW
 * moments, and one of activations for a batch of B sequences of T tokens.
 *
 * Parameter layout: the 4 + 12 L GPT-2 tensors in checkpoint.h's order and HF layout (Conv1D
 * [in, out]), contiguous, then, for ssmax, the scalar s of every (layer, head) [L, H]
 * (learnable or fixed). So the first n_gpt2 floats are exactly what a checkpoint stores. */
#ifndef AL_TRAIN_H
#define AL_TRAIN_H

#include "checkpoint.h"
#include "internal.h"

typedef struct al__tr_cfg {
    int n_layer, n_head, n_embd, n_ctx, vocab_size;
    al_norm norm;    /* the attention normalizer: kind, temperature, alpha, s (ssmax start) */
    int ssmax_learn; /* ssmax: 1 = s learnable per (layer, head), 0 = fixed */
} al__tr_cfg;

/* Activations of one forward for B x T tokens (BT = B T); every buffer is kept for the
 * backward. Per layer l (index l): */
typedef struct al__tr_acts {
    int B, T;
    float *mem;       /* the one allocation */
    float *res;       /* [L + 1, BT, C] residual stream at each layer input; res[L] = output */
    float *ln1;       /* [L, BT, C] ln_1 output */
    float *ln1_stat;  /* [L, BT, 2] mean, 1/std */
    float *qkv;       /* [L, BT, 3C] */
    float *z;         /* [L, B, H, T, T] scaled logits q.k/sqrt(d) (rows: j <= t used) */
    float *p;         /* [L, B, H, T, T] attention weights (0 above the diagonal) */
    float *atty;      /* [L, BT, C] concatenated head outputs */
    float *mid;       /* [L, BT, C] residual after the attention */
    float *ln2;       /* [L, BT, C] */
    float *ln2_stat;  /* [L, BT, 2] */
    float *fc;        /* [L, BT, 4C] before the GELU */
    float *fcg;       /* [L, BT, 4C] after the GELU */
    float *lnf;       /* [BT, C] */
    float *lnf_stat;  /* [BT, 2] */
    float *d_res;     /* [BT, C] backward: gradient of the residual stream */
    float *d_a;       /* [BT, C] backward scratch (also the gradient into an LN) */
    float *d_b;       /* [BT, C] backward scratch */
    float *d_qkv;     /* [BT, 3C] */
    float *d_fc;      /* [BT, 4C] */
    float *d_pz;      /* [B, H, T, T] gradient of the weights, then of the logits */
    float *logit_buf; /* [AL__TR_CHUNK, V] logits of one chunk of rows */
    double *row_buf;  /* [threads, 4 T] doubles per thread for the normalizer rows */
    double *ds_bh;    /* [B, H] ssmax: dL/ds per sequence and head */
    int row_threads;  /* rows of row_buf */
} al__tr_acts;

#define AL__TR_CHUNK 128 /* rows of logits computed at once (the LM head and its loss) */

typedef struct al__tr_model {
    al__tr_cfg cfg;
    int n_tensors;                 /* 4 + 12 L GPT-2 tensors (+ 1 for ssmax s) */
    size_t n_gpt2;                 /* floats of the GPT-2 tensors */
    size_t n_params;               /* floats of the arena (n_gpt2 + L H for ssmax) */
    size_t *off;                   /* [n_tensors] offset of each tensor in the arena */
    size_t *numel;                 /* [n_tensors] */
    float *params, *grads, *m, *v; /* [n_params] each */
    al__tr_acts acts;
} al__tr_model;

/* The index of a GPT-2 tensor (AL_GK_* kind, layer or -1) in checkpoint.h's order. */
int al__tr_index(const al__tr_cfg *c, int kind, int layer);
/* The tensor i of the arena (params, grads, m or v). */
static inline float *al__tr_at(const al__tr_model *m, float *arena, int kind, int layer) {
    return arena + m->off[al__tr_index(&m->cfg, kind, layer)];
}
/* ssmax s [L, H] in an arena (NULL when the normalizer is not ssmax). */
float *al__tr_ssmax_s(const al__tr_model *m, float *arena);

/* Checks c (sizes, the normalizer) naming what is wrong. */
int al__tr_cfg_check(const al__tr_cfg *c, al_error *err);
/* Allocates the arenas (parameters zero; moments zero) for batches of B x T (T <= n_ctx). */
int al__tr_model_new(const al__tr_cfg *c, int B, int T, al__tr_model **out, al_error *err);
void al__tr_model_free(al__tr_model *m);
/* GPT-2's initialisation, deterministic from seed (thread-count independent): N(0, 0.02) for
 * embeddings and matrices, residual projections N(0, 0.02/sqrt(2L)), biases 0, LN weights 1,
 * biases 0; ssmax s = cfg.norm.ssmax_s. */
void al__tr_init(al__tr_model *m, uint64_t seed);
/* Only what a GPT-2 checkpoint does not hold: ssmax s = cfg.norm.ssmax_s (after loading). */
void al__tr_init_extra(al__tr_model *m);

/* Forward over tokens [B, T] (targets [B, T] or NULL): the mean cross-entropy in *loss when
 * targets are given; logits [B T, V] written when not NULL. Keeps the activations. */
int al__tr_forward(al__tr_model *m, const int32_t *tokens, const int32_t *targets, float *logits,
                   double *loss, al_error *err);
/* Backward of the last forward (with targets): grads = d(mean loss)/d(params) (overwritten). */
int al__tr_backward(al__tr_model *m, const int32_t *tokens, const int32_t *targets, al_error *err);

/* ---- attention with the run's normalizer (tattn.c) ---- */
/* One layer's causal attention for B x T: qkv [BT, 3C] (q | k | v, head h at columns h d),
 * z [B, H, T, T] the scaled logits (NULL for softmax: computed in p), p [B, H, T, T] the weights
 * (0 above the diagonal), out [BT, C]. s [H] the layer's ssmax scalars (NULL otherwise). */
int al__tr_attn_forward(al__tr_model *m, const float *qkv, float *z, float *p, float *out,
                        const float *s, al_error *err);
/* Its backward: d_out [BT, C] -> d_qkv [BT, 3C] (overwritten); d_pz [B, H, T, T] scratch;
 * ds_bh [B, H] receives dL/ds (ssmax; may be NULL otherwise). */
int al__tr_attn_backward(al__tr_model *m, const float *qkv, const float *z, const float *p,
                         const float *d_out, float *d_qkv, const float *s, al_error *err);
/* One row: p[n] = normalizer(z[n]) with ssmax scalar s; buf [4n] doubles. */
int al__tr_row_forward(const al_norm *nm, float s, const float *z, int n, float *p, double *buf,
                       al_error *err);
/* g[n] (in: dL/dp, out: dL/dz) through the row's Jacobian; z[n] (NULL for softmax), p[n];
 * *ds += dL/ds for ssmax. buf [4n] doubles. */
int al__tr_row_backward(const al_norm *nm, float s, const float *z, const float *p, float *g, int n,
                        double *buf, double *ds, al_error *err);

/* ---- the optimizer (optim.c) ---- */
typedef struct al__tr_opt {
    double lr;          /* peak learning rate */
    double min_lr_frac; /* cosine floor as a fraction of lr */
    int warmup;         /* linear warmup steps */
    int steps;          /* total steps (the cosine reaches its floor there) */
    double beta1, beta2, eps;
    double weight_decay; /* decoupled, on the 2-D tensors only */
    double clip;         /* global gradient norm clip (<= 0: off) */
} al__tr_opt;
al__tr_opt al__tr_opt_default(void);
/* The learning rate at step (0-based): linear warmup to lr over `warmup` steps, then cosine
 * down to min_lr_frac lr at `steps`. */
double al__tr_lr(const al__tr_opt *o, int step);
/* Global L2 norm of the gradients (double accumulation, fixed order). */
double al__tr_grad_norm(const al__tr_model *m);
/* One AdamW update at step (0-based; bias correction with t = step + 1): clips the gradients
 * to o->clip by their global norm, then updates params, m, v. *norm_out: the norm before the
 * clip. ssmax s: not decayed, kept >= 1e-3 (the normalizer needs s > 0); fixed s: untouched. */
void al__tr_adamw(al__tr_model *m, const al__tr_opt *o, int step, double *norm_out);

/* ---- data (tdata.c) ---- */
typedef struct al__tr_data {
    int32_t *ids;       /* [n] every token of the corpus */
    size_t n;           /* tokens */
    size_t n_train;     /* the first n_train are training data, the tail is validation */
    int vocab;          /* 256 (bytes) or 50257 (GPT-2 BPE) */
    char tokenizer[16]; /* "bytes" or "gpt2" */
} al__tr_data;
/* Loads the corpus (al_corpus_load: "war-and-peace" is METHOD's body) and tokenizes it
 * ("bytes" or "gpt2"); val_frac of the tokens at the end are held out. */
int al__tr_data_load(const char *corpus, const char *data_path, const char *tokenizer,
                     double val_frac, al__tr_data *d, al_error *err);
void al__tr_data_free(al__tr_data *d);
/* The training batch of step: B windows of T + 1 tokens at offsets that are a function of
 * (seed, step, b) only; tokens [B, T], targets [B, T] (shifted by one). fixed != 0: every step
 * gets the batch of step 0. */
void al__tr_batch(const al__tr_data *d, uint64_t seed, int step, int fixed, int B, int T,
                  int32_t *tokens, int32_t *targets);
/* Validation window k (of the tail, evenly spaced): tokens [T], targets [T]. */
void al__tr_val_window(const al__tr_data *d, int k, int n_windows, int T, int32_t *tokens,
                       int32_t *targets);

#endif
