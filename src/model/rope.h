/* rope.h: rotary position embeddings shared by the decoder families (src/model/rope.c). */
#ifndef AL_ROPE_H
#define AL_ROPE_H

/* RoPE frequencies as HF's modeling_rope_utils computes them (rope_type of config.json). */
typedef enum {
    AL__ROPE_DEFAULT = 0,
    AL__ROPE_LINEAR,
    AL__ROPE_DYNAMIC,
    AL__ROPE_LLAMA3,
    AL__ROPE_YARN
} al__rope_type;

typedef struct al__rope {
    al__rope_type type;
    int dim;            /* rotated dimensions of a head (even) */
    double base;        /* rope_theta */
    double factor;      /* rope_scaling.factor (1 for default) */
    int max_pos;        /* max_position_embeddings (dynamic, yarn) */
    double low_freq;    /* llama3: low_freq_factor */
    double high_freq;   /* llama3: high_freq_factor */
    int orig_max_pos;   /* llama3: original_max_position_embeddings */
    double attn_factor; /* yarn: attention_factor (0 = 0.1 ln(factor) + 1) */
    double beta_fast;   /* yarn (default 32) */
    double beta_slow;   /* yarn (default 1) */
    /* [dim/2] or NULL: every inverse frequency divided by its factor after the type's rule
     * (GGUF rope_freqs.weight: llama.cpp's converter stores Llama 3.1's rule so) */
    const float *freq_factors;
} al__rope;

/* inv[dim/2]: the inverse frequencies for a forward of T tokens; *scale multiplies cos and
 * sin (yarn's attention factor, 1 otherwise). dynamic depends on T (seq_len = T when T >
 * max_pos), as HF's dynamic update does for a fresh model. */
void al__rope_inv_freq(const al__rope *r, int T, double *inv, double *scale);
const char *al__rope_type_name(al__rope_type t);

/* tab [T, dim/2, 2]: cos and sin (times the scale) of every (position, frequency). dim <= 1024. */
void al__rope_table(float *tab, int T, const al__rope *r);
/* Rotates the first dim entries of every head of x [T, n_heads*d] in place: pairs
 * (i, i + dim/2), HF's rotate_half; dim < d is partial rotary (the rest passes through). */
void al__rope_apply(float *x, const float *tab, int T, int n_heads, int d, int dim);

#endif
