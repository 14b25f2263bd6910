/* attention.c: one layer's multi-head attention with the streaming capture (see ops.h).
 *
 * Work is split into tasks (query head h, block of AL__ATTN_BLOCK query rows), run by the
 * OpenMP threads with dynamic scheduling, heaviest blocks first. A task computes
 *   logits[rows, keys] = q[rows] k[keys]^T / sqrt(d_head)        (one sgemm)
 *   weights = softmax of each row over its visible keys          (float exp, double sum)
 *   out[rows, h]       = weights[rows, keys] v[keys]             (one sgemm)
 * where keys = 0..last row of the block for causal models (the masked upper triangle is never
 * computed beyond the diagonal block) and 0..T-1 for encoders. The logits and weights of a
 * selected head go straight into the capture arrays; the other heads use per-thread rows. */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void al__attn_ws_free(al__attn_ws *ws) {
    if (!ws) return;
    free(ws->cap);
    free(ws->scratch);
    free(ws->idx);
    memset(ws, 0, sizeof *ws);
}

/* Makes *buf hold at least n elements of size sz (contents not kept). */
static int grow(void **buf, size_t *have, size_t n, size_t sz, const char *what, al_error *err) {
    if (n <= *have && *buf) return 0;
    size_t bytes;
    if (!al__mul_ok(n ? n : 1, sz, &bytes))
        return al__err(err, AL_E_NOMEM, "attention: %s of %zu elements overflows", what, n);
    free(*buf);
    *buf = al__malloc_aligned(bytes, what, err);
    *have = *buf ? n : 0;
    return *buf ? 0 : AL_E_NOMEM;
}

static int wants_capture(const al__attn *a) {
    const al_capture_request *r = a->req;
    return r && r->fn && r->what && (!r->layers || r->layers[a->layer]);
}

int al__attention(const al__attn *a, al_error *err) {
    al__attn_ws ws = {0};
    int rc = al__attention_ws(a, &ws, err);
    al__attn_ws_free(&ws);
    return rc;
}

int al__attention_ws(const al__attn *a, al__attn_ws *ws, al_error *err) {
    const int T = a->T, H = a->n_head, G = a->n_kv_head, D = a->d_head;
    if (T < 1 || H < 1 || G < 1 || D < 1 || H % G != 0 || !a->q || !a->k || !a->v || !a->out)
        return al__err(err, AL_E_INVALID,
                       "attention: bad shape (T %d, heads %d, kv heads %d, d_head %d)", T, H, G, D);
    const int B = AL__ATTN_BLOCK;
    const int capture = wants_capture(a);
    const unsigned what = capture ? a->req->what : 0;

    /* head selection: heads [n_sel], kv_head [H], sel_of [H] (-1: not selected) */
    int rc =
        grow((void **)&ws->idx, &ws->idx_n, (size_t)3 * H, sizeof(int), "attention indices", err);
    if (rc) return rc;
    int *heads = ws->idx, *kv_head = ws->idx + H, *sel_of = ws->idx + 2 * H;
    int n_sel = 0;
    for (int h = 0; h < H; h++) {
        kv_head[h] = h / (H / G);
        int on = capture && (!a->req->heads || a->req->heads[h]);
        sel_of[h] = on ? n_sel : -1;
        if (on) heads[n_sel++] = h;
    }

    /* capture arrays, one block: q, k, v [n_sel, T, D], logits, weights [n_sel, T, T] */
    size_t n_qkv = (size_t)n_sel * T * D, n_tt = (size_t)n_sel * T * T, need = 0;
    const unsigned qkv_bits[3] = {AL_CAP_Q, AL_CAP_K, AL_CAP_V};
    for (int i = 0; i < 3; i++)
        if (what & qkv_bits[i]) need += n_qkv;
    if (what & AL_CAP_LOGITS) need += n_tt;
    if (what & AL_CAP_WEIGHTS) need += n_tt;
    if (need &&
        (rc = grow((void **)&ws->cap, &ws->cap_n, need, sizeof(float), "capture buffers", err)))
        return rc;
    float *p = ws->cap;
    float *cq = NULL, *ck = NULL, *cv = NULL, *clog = NULL, *cw = NULL;
    if (what & AL_CAP_Q) cq = p, p += n_qkv;       /* [n_sel, T, D] */
    if (what & AL_CAP_K) ck = p, p += n_qkv;       /* [n_sel, T, D] */
    if (what & AL_CAP_V) cv = p, p += n_qkv;       /* [n_sel, T, D] */
    if (what & AL_CAP_LOGITS) clog = p, p += n_tt; /* [n_sel, T, T] */
    if (what & AL_CAP_WEIGHTS) cw = p, p += n_tt;  /* [n_sel, T, T] */

    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt < 1) nt = 1;
    size_t per_thread = (size_t)2 * B * T; /* logits rows [B, T] + weights rows [B, T] */
    if ((rc = grow((void **)&ws->scratch, &ws->scratch_n, per_thread * nt, sizeof(float),
                   "attention scratch", err)))
        return rc;

    al__blas_single();
    const int n_blocks = (T + B - 1) / B;
    const int n_tasks = n_blocks * H;
    const float scale = (float)(1.0 / sqrt((double)D));
    const size_t ldo = (size_t)H * D;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *scr = ws->scratch + per_thread * (size_t)omp_get_thread_num();
        /* capture copies of q, k, v: [n_sel, T, D] from the strided inputs */
#pragma omp for schedule(static) nowait
        for (int s = 0; s < n_sel; s++) {
            int h = heads[s], g = kv_head[h];
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)s * T + t) * D;
                if (cq) memcpy(cq + o, a->q + t * a->q_stride + (size_t)h * D, D * sizeof(float));
                if (ck) memcpy(ck + o, a->k + t * a->k_stride + (size_t)g * D, D * sizeof(float));
                if (cv) memcpy(cv + o, a->v + t * a->v_stride + (size_t)g * D, D * sizeof(float));
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < n_tasks; task++) {
            int bi = n_blocks - 1 - task / H, h = task % H, g = kv_head[h], sel = sel_of[h];
            int r0 = bi * B, r1 = r0 + B < T ? r0 + B : T, m = r1 - r0;
            int kend = a->causal ? r1 : T; /* keys this block can see */
            /* logits rows [m, kend] (ld lL): the capture array or scratch */
            float *L = scr;
            size_t lL = (size_t)kend;
            if (clog && sel >= 0) L = clog + ((size_t)sel * T + r0) * T, lL = (size_t)T;
            /* weights rows [m, kend] (ld lW): the capture array, scratch, or over the logits */
            float *W = L;
            size_t lW = lL;
            if (cw && sel >= 0)
                W = cw + ((size_t)sel * T + r0) * T, lW = (size_t)T;
            else if (L != scr)
                W = scr + (size_t)B * T, lW = (size_t)kend;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kend, D, scale,
                        a->q + r0 * a->q_stride + (size_t)h * D, (int)a->q_stride,
                        a->k + (size_t)g * D, (int)a->k_stride, 0.0f, L, (int)lL);
            const int lcap = L != scr, wcap = W != L && W != scr + (size_t)B * T;
            for (int i = 0; i < m; i++) {
                int n = a->causal ? r0 + i + 1 : T; /* visible keys of row r0 + i */
                float *Li = L + i * lL, *Wi = W + i * lW;
                al__softmax_row(Wi, Li, n);
                for (int j = n, end = wcap ? T : kend; j < end; j++) Wi[j] = 0.0f;
                if (lcap)
                    for (int j = n; j < T; j++) Li[j] = -INFINITY;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, D, kend, 1.0f, W, (int)lW,
                        a->v + (size_t)g * D, (int)a->v_stride, 0.0f,
                        a->out + (size_t)r0 * ldo + (size_t)h * D, (int)ldo);
        }
    }
    if (!capture) return 0;

    al_capture cap = {
        .layer = a->layer,
        .T = T,
        .n_head = H,
        .n_kv_head = G,
        .d_head = D,
        .d_model = a->d_model,
        .causal = a->causal,
        .n_sel = n_sel,
        .heads = heads,
        .kv_head = kv_head,
        .q = cq,
        .k = ck,
        .v = cv,
        .logits = clog,
        .weights = cw,
        .hidden = (what & AL_CAP_HIDDEN) ? a->hidden : NULL,
        .embed = (what & AL_CAP_EMBED) ? a->embed : NULL,
    };
    al_error local = {0};
    al_error *e = err ? err : &local;
    e->msg[0] = 0;
    rc = a->req->fn(a->req->user, &cap, e);
    if (rc) {
        if (rc < 0 || rc > AL_E_CANCELLED) rc = AL_E_CANCELLED;
        if (!e->msg[0])
            al__err(e, (al_code)rc, "capture observer stopped the forward at layer %d", a->layer);
        e->code = (al_code)rc;
        return rc;
    }
    return 0;
}
