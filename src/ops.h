/* ops.h: the dense kernels every model family shares (owner: GPT-2 engine, src/ops.c and
 * src/attention.c). All float32 in and out, double accumulation where it matters. */
#ifndef AL_OPS_H
#define AL_OPS_H

#include "internal.h"

/* y[M, N] = x[M, K] @ W[K, N] (+ bias[N] if not NULL). W row-major [K, N]: HF Conv1D layout. */
void al__matmul(float *y, const float *x, const float *W, const float *bias, int M, int K, int N);
/* y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]). W row-major [N, K]: nn.Linear / GGUF layout. */
void al__matmul_nt(float *y, const float *x, const float *W, const float *bias, int M, int K, int N);
/* y[M, C] = (x - mean) / sqrt(var + eps) * g + b, per row. y may equal x. */
void al__layernorm(float *y, const float *x, const float *g, const float *b, int M, int C, float eps);
/* y[M, C] = x / sqrt(mean(x^2) + eps) * g, per row. y may equal x. */
void al__rmsnorm(float *y, const float *x, const float *g, int M, int C, float eps);
void al__gelu_tanh(float *x, size_t n); /* GPT-2's GELU */
void al__gelu_erf(float *x, size_t n);  /* BERT's GELU */
void al__silu_mul(float *gate, const float *up, size_t n); /* gate = silu(gate) * up (SwiGLU) */
void al__add(float *y, const float *x, size_t n);          /* y += x */

/* One layer's multi-head attention with the streaming capture of attnlim.h.
 * Query head h reads key/value head kv = h / (n_head / n_kv_head). */
typedef struct al__attn {
    int layer, T, n_head, n_kv_head, d_head, d_model, causal;
    const float *q; size_t q_stride; /* q of head h at token t: q + t*q_stride + h*d_head */
    const float *k; size_t k_stride; /* k of kv head g at token t: k + t*k_stride + g*d_head */
    const float *v; size_t v_stride; /* likewise */
    float *out;                      /* [T, n_head*d_head] the concatenated head outputs */
    const float *hidden;             /* [T, d_model] layer input after its first norm (capture) */
    const float *embed;              /* [T, d_model] model input (capture) */
    const al_capture_request *req;   /* may be NULL */
} al__attn;
int al__attention(const al__attn *a, al_error *err);

#endif
