/* forward_loops.c: a straightforward loop implementation of the GPT-2 forward, in the style
 * of llm.c's train_gpt2.c (matmul_forward: one dot product per output, OpenMP over rows;
 * attention_forward: per (token, head) loops with expf), for the side-by-side comparison in
 * bench_forward.c (#included there; not a library module). Inference only, llm.c weight
 * layout ([out, in] matrices: al__gpt2 with out_in = 1). */
#include "gpt2.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

typedef struct loops_acts {
    float *x;      /* [T, C] residual */
    float *ln;     /* [T, C] */
    float *qkv;    /* [T, 3C] */
    float *atty;   /* [T, C] */
    float *proj;   /* [T, C] */
    float *fch;    /* [T, 4C] */
    float *preatt; /* [H, T, T] */
    float *att;    /* [H, T, T] the attention weights of the current layer */
} loops_acts;

static void loops_build(loops_acts *a, int T, int C, int H) {
    size_t tc = (size_t)T * C, htt = (size_t)H * T * T;
    a->x = malloc(tc * 4), a->ln = malloc(tc * 4), a->qkv = malloc(3 * tc * 4);
    a->atty = malloc(tc * 4), a->proj = malloc(tc * 4), a->fch = malloc(4 * tc * 4);
    a->preatt = calloc(htt, 4), a->att = calloc(htt, 4);
}

static void loops_free(loops_acts *a) {
    free(a->x), free(a->ln), free(a->qkv), free(a->atty), free(a->proj), free(a->fch);
    free(a->preatt), free(a->att);
}

/* out[T, OC] = inp[T, C] @ weight[OC, C]^T + bias[OC] */
static void loops_matmul(float *out, const float *inp, const float *weight, const float *bias,
                         int T, int C, int OC) {
#pragma omp parallel for collapse(2)
    for (int t = 0; t < T; t++) {
        for (int o = 0; o < OC; o++) {
            const float *x = inp + (size_t)t * C, *w = weight + (size_t)o * C;
            float val = bias ? bias[o] : 0.0f;
#pragma omp simd reduction(+ : val)
            for (int i = 0; i < C; i++) val += x[i] * w[i];
            out[(size_t)t * OC + o] = val;
        }
    }
}

static void loops_layernorm(float *out, const float *inp, const float *w, const float *b, int T,
                            int C) {
    for (int t = 0; t < T; t++) {
        const float *x = inp + (size_t)t * C;
        float m = 0.0f, v = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        float s = 1.0f / sqrtf(v / C + 1e-5f);
        for (int i = 0; i < C; i++) out[(size_t)t * C + i] = (x[i] - m) * s * w[i] + b[i];
    }
}

/* llm.c attention_forward for one sequence: qkv [T, 3C] -> out [T, C], att [H, T, T] */
static void loops_attention(float *out, float *preatt, float *att, const float *qkv, int T, int C,
                            int H) {
    int C3 = 3 * C, hs = C / H;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2)
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            const float *q = qkv + (size_t)t * C3 + h * hs;
            float *pre = preatt + ((size_t)h * T + t) * T, *w = att + ((size_t)h * T + t) * T;
            float maxval = -10000.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *k = qkv + (size_t)t2 * C3 + h * hs + C;
                float val = 0.0f;
                for (int i = 0; i < hs; i++) val += q[i] * k[i];
                val *= scale;
                if (val > maxval) maxval = val;
                pre[t2] = val;
            }
            float sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                float e = expf(pre[t2] - maxval);
                sum += e;
                w[t2] = e;
            }
            float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
            for (int t2 = 0; t2 < T; t2++) w[t2] = t2 <= t ? w[t2] * inv : 0.0f;
            float *o = out + (size_t)t * C + h * hs;
            for (int i = 0; i < hs; i++) o[i] = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *v = qkv + (size_t)t2 * C3 + h * hs + 2 * C;
                for (int i = 0; i < hs; i++) o[i] += w[t2] * v[i];
            }
        }
    }
}

static void loops_gelu(float *x, size_t n) {
    const float s = sqrtf(2.0f / (float)M_PI);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(s * (v + 0.044715f * v * v * v)));
    }
}

/* The forward; consume(att [H, T, T], layer, user) is called for every layer. final [T, C]. */
static void loops_forward(const al__gpt2 *g, const int32_t *tokens, int T, loops_acts *a,
                          void (*consume)(const float *, int, int, int, void *), void *user,
                          float *final) {
    int C = g->d_model, H = g->n_head;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < C; i++)
            a->x[(size_t)t * C + i] = g->wte[(size_t)tokens[t] * C + i] + g->wpe[(size_t)t * C + i];
    for (int l = 0; l < g->n_layer; l++) {
        const al__gpt2_layer *w = &g->layers[l];
        loops_layernorm(a->ln, a->x, w->ln1_w, w->ln1_b, T, C);
        loops_matmul(a->qkv, a->ln, w->attn_w, w->attn_b, T, C, 3 * C);
        loops_attention(a->atty, a->preatt, a->att, a->qkv, T, C, H);
        consume(a->att, l, H, T, user);
        loops_matmul(a->proj, a->atty, w->proj_w, w->proj_b, T, C, C);
        for (size_t i = 0; i < (size_t)T * C; i++) a->x[i] += a->proj[i];
        loops_layernorm(a->ln, a->x, w->ln2_w, w->ln2_b, T, C);
        loops_matmul(a->fch, a->ln, w->fc_w, w->fc_b, T, C, 4 * C);
        loops_gelu(a->fch, (size_t)T * 4 * C);
        loops_matmul(a->proj, a->fch, w->fcproj_w, w->fcproj_b, T, 4 * C, C);
        for (size_t i = 0; i < (size_t)T * C; i++) a->x[i] += a->proj[i];
    }
    loops_layernorm(final, a->x, g->lnf_w, g->lnf_b, T, C);
}
