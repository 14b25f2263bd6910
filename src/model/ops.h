/* ops.h: the dense kernels every model family shares (owner: GPT-2 engine, src/ops.c and
 * src/attention.c). All float32 in and out, double accumulation where it matters. */
#ifndef AL_OPS_H
#define AL_OPS_H

#include "gemm.h" /* al__sgemm: our SGEMM (src/math/gemm.c) */
#include "internal.h"

/* y[M, N] = x[M, K] @ W[K, N] (+ bias[N] if not NULL). W row-major [K, N]: HF Conv1D layout. */
void al__matmul(float *y, const float *x, const float *W, const float *bias, int M, int K, int N);
/* y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]). W row-major [N, K]: nn.Linear / GGUF layout. */
void al__matmul_nt(float *y, const float *x, const float *W, const float *bias, int M, int K,
                   int N);
/* y[M, C] = (x - mean) / sqrt(var + eps) * g + b, per row. y may equal x. */
void al__layernorm(float *y, const float *x, const float *g, const float *b, int M, int C,
                   float eps);
/* x[M, C] += d[M, C], then y[M, C] = al__layernorm(x): a residual add and the next
 * layer norm in one pass (the same bits as al__add then al__layernorm). y may equal x. */
void al__add_layernorm(float *x, const float *d, float *y, const float *g, const float *b, int M,
                       int C, float eps);
/* y[M, C] = x / sqrt(mean(x^2) + eps) * g, per row. y may equal x. */
void al__rmsnorm(float *y, const float *x, const float *g, int M, int C, float eps);
void al__gelu_tanh(float *x, size_t n);                    /* GPT-2's GELU */
void al__gelu_erf(float *x, size_t n);                     /* BERT's GELU */
void al__silu_mul(float *gate, const float *up, size_t n); /* gate = silu(gate) * up (SwiGLU) */
void al__add(float *y, const float *x, size_t n);          /* y += x */

/* One layer's multi-head attention with the streaming capture of attnlim.h.
 * Query head h reads key/value head kv = h / (n_head / n_kv_head). */
typedef struct al__attn {
    int layer, T, n_head, n_kv_head, d_head, d_model, causal;
    int window;    /* causal sliding window: row t sees keys max(0, t - window + 1)..t; 0 = none */
    float scale;   /* logits = q.k * scale; 0 = 1/sqrt(d_head) */
    float softcap; /* > 0: logits = softcap * tanh(logits / softcap) before the mask (Gemma 2) */
    const float *q;
    size_t q_stride; /* q of head h at token t: q + t*q_stride + h*d_head */
    const float *k;
    size_t k_stride; /* k of kv head g at token t: k + t*k_stride + g*d_head */
    const float *v;
    size_t v_stride;               /* likewise */
    float *out;                    /* [T, n_head*d_head] the concatenated head outputs */
    const float *hidden;           /* [T, d_model] layer input after its first norm (capture) */
    const float *embed;            /* [T, d_model] model input (capture) */
    const float *residual;         /* [T, d_model] layer input before its first norm (capture) */
    const al_capture_request *req; /* may be NULL */
    const al_attn_variant *mod;    /* NULL: dense softmax; else the variant (attn_variant.c) */
    const float *ssmax_s;          /* [n_head] mod's ssmax s per head (a trained model's learnt
                                    * s); NULL: mod->norm.ssmax_s for every head */
    int row0; /* causal, not captured: the query rows [0, row0) are not computed (their out rows
               * are left as they are: no later work reads them, e.g. the last layer when only
               * the last token's output is wanted); 0 = every row */
} al__attn;
int al__attention(const al__attn *a, al_error *err);

/* The arguments of multi-head attention (no GQA) on a fused qkv buffer [T, 3C] holding q, k, v
 * side by side, as GPT-2's c_attn and BERT's stacked q/k/v projections produce it. */
static inline al__attn al__attn_fused(int layer, int T, int n_head, int d_model, int causal,
                                      const float *qkv, float *out, const float *hidden,
                                      const float *embed, const al_capture_request *req) {
    size_t stride = (size_t)3 * (size_t)d_model;
    al__attn a = {.layer = layer,
                  .T = T,
                  .n_head = n_head,
                  .n_kv_head = n_head,
                  .d_head = d_model / n_head,
                  .d_model = d_model,
                  .causal = causal,
                  .q = qkv,
                  .q_stride = stride,
                  .k = qkv + d_model,
                  .k_stride = stride,
                  .v = qkv + 2 * (size_t)d_model,
                  .v_stride = stride,
                  .out = out,
                  .hidden = hidden,
                  .embed = embed,
                  .req = req};
    return a;
}

/* ---- additions by the GPT-2 engine (src/ops.c, src/attention.c) ---- */

/* Buffers of the attention kept across layers and forwards (grown on demand, never shrunk):
 * use one per model, zero-initialised, with al__attention_ws; al__attention allocates a
 * temporary one per call (simple, but it page-faults its buffers at every layer). */
typedef struct al__attn_ws {
    float *cap;
    size_t cap_n; /* capture arrays q, k, v, logits, weights (floats) */
    float *scratch;
    size_t scratch_n; /* [threads, 2, AL__ATTN_BLOCK, T] per-thread rows */
    int *idx;
    size_t idx_n; /* heads [n_sel] + kv_head [n_head] */
    float *pack;
    size_t pack_n; /* keys and values packed in panels of 16 */
    float *vscr;
    size_t vscr_n; /* attention variants: [threads, AL__VSCR_PER_KEY * T] per-thread rows */
    /* the causal capture arrays whose part above each block's keys ([r0, r0 + 64) x [r1, T)) is
     * already 0 (weights) / -inf (logits) from the last complete pass of this T and n_sel: not
     * written again (NULL: none known) */
    const float *above_w, *above_l;
    int above_T, above_n;
} al__attn_ws;
#define AL__ATTN_BLOCK 64 /* query rows per task */
int al__attention_ws(const al__attn *a, al__attn_ws *ws, al_error *err);
void al__attn_ws_free(al__attn_ws *ws);

/* ---- attention variants (src/model/attn_variant.c) ---- */
/* floats of per-thread scratch per key: the kept logits [n] and indices [n], then the
 * selection's candidates (values, indices, and the ambiguous ones: 6n), the kept logits and their
 * weights as double [2n] reusing the candidates' room */
#define AL__VSCR_PER_KEY 8
/* Does v modify layer l / query head h? */
static inline int al__attn_mod_layer(const al_attn_variant *v, int l) {
    return v && (!v->layers || v->layers[l]);
}
static inline int al__attn_mod_head(const al_attn_variant *v, int h) {
    return !v->heads || v->heads[h];
}
/* w[n] = the variant's weights of the logits z[n] of one row (n visible keys, window of L):
 * the kept keys normalised, the others 0; a row holding NaN/Inf gives NaN weights. w may equal
 * z. scr: AL__VSCR_PER_KEY * n floats (8-byte aligned). */
void al__attn_variant_row(const al_attn_variant *v, float *w, const float *z, int n, int L,
                          float *scr);
/* al__attn_variant_row without a softmax's last pass: returns s, w times s being its weights
 * (a dense softmax row, K = n: al__softmax_exp's exp(z - max) and 1 / sum; other rows: w already
 * the weights, s = 1), bit for bit. */
float al__attn_variant_row_exp(const al_attn_variant *v, float *w, const float *z, int n, int L,
                               float *scr);

/* Threads of every kernel (OpenMP's; OpenBLAS is kept single-threaded inside them so that
 * the two pools never compete). n <= 0: all cores. */
void al__set_threads(int n);
int al__get_threads(void);
void al__blas_single(void); /* sets OpenBLAS to one thread (called by the matmuls) */
/* w[n] = softmax(z[n]) (max-shifted, float exp, double sum). w may equal z. */
void al__softmax_row(float *w, const float *z, int n);
/* The softmax without its last pass: w[n] = exp(z - max z), returning 1 / sum w (the sum in
 * double): w times it is al__softmax_row's w, bit for bit. w may equal z. */
float al__softmax_exp(float *w, const float *z, int n);
/* dst[j] = src[j] * s for j < n, 0 for n <= j < width (n <= width), written in streaming
 * (non-temporal) stores at the AVX2 and AVX-512 levels: for a large array filled for someone
 * else (the capture arrays), not read back now. Call al__stream_fence before others read it. */
void al__scale_stream(float *dst, const float *src, int n, float s, int width);
void al__stream_fence(void); /* the streaming stores made so far ordered before later ones */
float al__expf(float x);     /* float exp to ~2 ulp, vectorisable */
void al__exp_inplace(float *x, size_t n); /* x = exp(x) */

#endif
